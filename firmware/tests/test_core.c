/* C unit tests for the portable core (crc32, sha256, framing, fixed point, slots, commands).
 * The interpreter's outputs are tested against LiteRT from pytest (tests/firmware/test_firmware_*.py). */
#include <stdlib.h>
#include <string.h>

#include "crc32.h"
#include "device.h"
#include "edgerun/port.h"
#include "frame.h"
#include "micro_test.h"
#include "model.h"
#include "port_mem.h"
#include "sha256.h"
#include "slots.h"

TEST(test_crc32) {
    EXPECT_EQ(er_crc32(0, (const uint8_t *)"123456789", 9), 0xCBF43926u);
    uint32_t c = er_crc32(0, (const uint8_t *)"1234", 4);
    EXPECT_EQ(er_crc32(c, (const uint8_t *)"56789", 5), 0xCBF43926u);
    EXPECT_EQ(er_crc32(0, NULL, 0), 0);
}

TEST(test_sha256) {
    static const uint8_t abc[32] = {0xba, 0x78, 0x16, 0xbf, 0x8f, 0x01, 0xcf, 0xea, 0x41, 0x41, 0x40,
                                    0xde, 0x5d, 0xae, 0x22, 0x23, 0xb0, 0x03, 0x61, 0xa3, 0x96, 0x17,
                                    0x7a, 0x9c, 0xb4, 0x10, 0xff, 0x61, 0xf2, 0x00, 0x15, 0xad};
    uint8_t h[32], h2[32];
    er_sha256((const uint8_t *)"abc", 3, h);
    EXPECT(memcmp(h, abc, 32) == 0);
    static uint8_t big[1000];
    for (int i = 0; i < 1000; i++) big[i] = (uint8_t)(i * 7);
    er_sha256(big, sizeof big, h);
    er_sha256_ctx s;
    er_sha256_init(&s);
    for (int i = 0; i < 1000; i += 37) er_sha256_update(&s, big + i, (size_t)(i + 37 > 1000 ? 1000 - i : 37));
    er_sha256_final(&s, h2);
    EXPECT(memcmp(h, h2, 32) == 0);
}

static int feed(er_parser *p, const uint8_t *b, size_t n, er_frame *out, int *count) {
    int got = 0;
    for (size_t i = 0; i < n; i++) {
        if (er_parser_push(p, b[i], 0, out)) {
            got = 1;
            (*count)++;
            while (er_parser_next(p, out)) (*count)++;
        }
    }
    return got;
}

TEST(test_frame_roundtrip_and_resync) {
    static er_parser p;
    er_parser_init(&p, ER_DEV_MAX_PAYLOAD);
    uint8_t buf[64], pay[5] = {1, 2, 3, 4, 5};
    size_t n = er_frame_encode(buf, sizeof buf, ER_CMD_DATA, 0, 0x1234, pay, 5);
    EXPECT_EQ(n, ER_FRAME_OVERHEAD + 5);
    er_frame f;
    int count = 0;
    uint8_t junk[7] = {0x00, 0xA5, 0x11, 0xA5, 0x5A, 0xFF, 0x03};
    feed(&p, junk, sizeof junk, &f, &count); /* a false header announcing a long frame */
    EXPECT_EQ(count, 0);
    /* the real frame arrives inside the false one's "payload"; after the inter-byte timeout or
     * the false frame's CRC failure, the parser rescans and finds it */
    er_parser_tick(&p, 1000);
    feed(&p, buf, n, &f, &count);
    EXPECT_EQ(count, 1);
    EXPECT_EQ(f.cmd, ER_CMD_DATA);
    EXPECT_EQ(f.seq, 0x1234);
    EXPECT_EQ(f.len, 5);
    EXPECT(memcmp(f.payload, pay, 5) == 0);
    /* a corrupted copy is dropped, the good one after it is found */
    uint8_t two[128];
    memcpy(two, buf, n);
    two[9] ^= 0x40;
    memcpy(two + n, buf, n);
    count = 0;
    feed(&p, two, 2 * n, &f, &count);
    EXPECT_EQ(count, 1);
    EXPECT(p.bad_crc >= 1);
    /* a short false header (len 3) whose CRC check swallows the start of a real frame */
    uint8_t tricky[64] = {0xA5, 0x5A, 0x01, 0x00, 0x00, 0x00, 0x03, 0x00};
    memcpy(tricky + 8, buf, n);
    count = 0;
    feed(&p, tricky, 8 + n, &f, &count);
    EXPECT_EQ(count, 1);
    EXPECT_EQ(f.seq, 0x1234);
    /* lengths above the maximum are skipped at once */
    er_parser_init(&p, 256);
    uint8_t big[12] = {0xA5, 0x5A, 1, 0, 0, 0, 0x00, 0x10};
    count = 0;
    feed(&p, big, 8, &f, &count);
    EXPECT_EQ(p.n, 0);
}

TEST(test_fixed_point) {
    EXPECT_EQ(er_mbqm(100, 1073741824, 0), 50);
    EXPECT_EQ(er_mbqm(-3, 1073741824, 0), -1);
    EXPECT_EQ(er_mbqm(123456, 1518500250, -5), 2728);
    EXPECT_EQ(er_mbqm(-987654, 1934037265, -9), -1737);
    EXPECT_EQ(er_mbqm(77, 1073741824, 3), 308);
    EXPECT_EQ(er_mbqm(INT32_MIN, INT32_MIN, 0), 2147483647);
    EXPECT_EQ(er_mbqm(1000000, 2147483647, -31), 0);
    EXPECT_EQ(er_mbqm(-55, 1288490189, 2), -132);
    int32_t m, s;
    er_quantize_multiplier(0.5, &m, &s); EXPECT_EQ(m, 1073741824); EXPECT_EQ(s, 0);
    er_quantize_multiplier(1.0, &m, &s); EXPECT_EQ(m, 1073741824); EXPECT_EQ(s, 1);
    er_quantize_multiplier(0.3, &m, &s); EXPECT_EQ(m, 1288490189); EXPECT_EQ(s, -1);
    er_quantize_multiplier(1e-6, &m, &s); EXPECT_EQ(m, 1125899907); EXPECT_EQ(s, -19);
    er_quantize_multiplier(0.0039215689, &m, &s); EXPECT_EQ(m, 1077952651); EXPECT_EQ(s, -7);
    er_quantize_multiplier(3.5, &m, &s); EXPECT_EQ(m, 1879048192); EXPECT_EQ(s, 2);
}

static void erase_all(void) { memset(mem_flash, 0xFF, ER_FLASH_TOTAL); }

static void put_model(er_slots *s, uint8_t slot, const uint8_t *data, uint32_t n) {
    uint8_t sha[32], out[32];
    int resumed;
    er_sha256(data, n, sha);
    EXPECT_EQ(er_slot_begin(s, slot, n, sha, &resumed), ER_OK);
    EXPECT_EQ(er_slot_write(s, slot, 0, data, n / 2), ER_OK);
    EXPECT_EQ(er_slot_write(s, slot, 0, data, n / 2), ER_OK); /* duplicate */
    EXPECT_EQ(er_slot_write(s, slot, n / 2 + 1, data, 1), ER_ERR_BAD_OFFSET); /* gap */
    EXPECT_EQ(er_slot_write(s, slot, n / 2, data + n / 2, n - n / 2), ER_OK);
    EXPECT_EQ(er_slot_write(s, slot, n, data, 1), ER_ERR_BAD_OFFSET); /* beyond the size */
    EXPECT_EQ(er_slot_finish(s, slot, sha, out), ER_OK);
}

TEST(test_slots_ab_and_torn_meta) {
    static er_slots s;
    static uint8_t a[10000], b[7000];
    for (int i = 0; i < 10000; i++) a[i] = (uint8_t)(i * 13 + 1);
    for (int i = 0; i < 7000; i++) b[i] = (uint8_t)(i * 3 + 7);
    erase_all();
    er_slots_init(&s);
    EXPECT_EQ(s.active, ER_SLOT_NONE);
    put_model(&s, 0, a, sizeof a);
    EXPECT_EQ(er_slot_activate(&s, 0), ER_OK);
    int resumed;
    uint8_t sha[32];
    er_sha256(b, sizeof b, sha);
    EXPECT_EQ(er_slot_begin(&s, 0, sizeof b, sha, &resumed), ER_ERR_SLOT_ACTIVE);
    EXPECT_EQ(er_slot_begin(&s, 1, ER_SLOT_BYTES + 1, sha, &resumed), ER_ERR_TOO_LARGE);
    put_model(&s, 1, b, sizeof b);
    /* power cut in the middle of the meta write that would activate slot 1 */
    flash_fail_after = 1;
    EXPECT(er_slot_activate(&s, 1) != ER_OK);
    flash_fail_after = -1;
    er_slots_init(&s); /* reboot */
    EXPECT_EQ(s.active, 0);
    EXPECT_EQ(s.slot[0].size, sizeof a);
    EXPECT(memcmp(er_slot_data(0), a, sizeof a) == 0);
    /* slot 1 was recorded as verified before the cut, so activating it again works */
    EXPECT_EQ(s.slot[1].state, ER_SLOT_VERIFIED);
    EXPECT_EQ(er_slot_activate(&s, 1), ER_OK);
    er_slots_init(&s);
    EXPECT_EQ(s.active, 1);
    /* resume: a transfer into slot 0 interrupted at 3000 bytes continues from there */
    er_sha256(a, 5000, sha);
    EXPECT_EQ(er_slot_begin(&s, 0, 5000, sha, &resumed), ER_OK);
    EXPECT_EQ(resumed, 0);
    EXPECT_EQ(er_slot_write(&s, 0, 0, a, 3000), ER_OK);
    EXPECT_EQ(er_slot_begin(&s, 0, 5000, sha, &resumed), ER_OK);
    EXPECT_EQ(resumed, 1);
    EXPECT_EQ(s.slot[0].received, 3000);
    /* a corrupted slot (bit rot) is found at boot and the other model is used */
    EXPECT_EQ(er_slot_write(&s, 0, 3000, a + 3000, 2000), ER_OK);
    uint8_t out[32];
    EXPECT_EQ(er_slot_finish(&s, 0, sha, out), ER_OK);
    EXPECT_EQ(er_slot_activate(&s, 0), ER_OK);
    mem_flash[ER_SLOT_OFFSET(0) + 10] ^= 0x01;
    er_slots_init(&s);
    EXPECT_EQ(s.active, 1);
}

static uint16_t seq_no = 1;

static int request(er_device *d, uint8_t cmd, const uint8_t *payload, size_t len, er_frame *resp,
                   uint8_t *copy) {
    uint8_t buf[ER_FRAME_OVERHEAD + 64];
    size_t n = er_frame_encode(buf, sizeof buf, cmd, 0, seq_no++, payload, len);
    memcpy(uart_in, buf, n);
    uart_in_len = (uint32_t)n;
    uart_in_pos = 0;
    uart_out_len = 0;
    er_device_poll(d);
    static er_parser p;
    er_parser_init(&p, ER_DEV_MAX_PAYLOAD);
    int count = 0;
    feed(&p, uart_out, uart_out_len, resp, &count);
    if (count == 1 && resp->len) memcpy(copy, resp->payload, resp->len);
    resp->payload = copy;
    return count;
}

TEST(test_device_commands) {
    static er_device d;
    static uint8_t copy[ER_DEV_MAX_PAYLOAD];
    er_frame r;
    erase_all();
    er_device_init(&d);
    EXPECT_EQ(request(&d, ER_CMD_HELLO, NULL, 0, &r, copy), 1);
    EXPECT_EQ(r.flags, ER_FLAG_RESPONSE);
    EXPECT_EQ(r.len, ER_HELLO_SIZE);
    EXPECT_EQ(er_rd16(copy + 4), ER_DEV_MAX_PAYLOAD);
    EXPECT_EQ(er_rd32(copy + 12), ER_SLOT_BYTES);
    EXPECT_EQ(copy[20], ER_SLOT_NONE);
    /* not a model: the transfer verifies, COMMIT refuses it, nothing becomes active */
    static const uint8_t junk[40] = "definitely not a tflite flatbuffer.....";
    uint8_t begin[ER_BEGIN_SIZE];
    er_wr32(begin, sizeof junk);
    er_sha256(junk, sizeof junk, begin + 4);
    begin[36] = ER_SLOT_NONE;
    EXPECT_EQ(request(&d, ER_CMD_BEGIN, begin, sizeof begin, &r, copy), 1);
    EXPECT_EQ(r.flags, ER_FLAG_RESPONSE);
    EXPECT_EQ(copy[0], 0);
    uint8_t data[4 + sizeof junk];
    er_wr32(data, 0);
    memcpy(data + 4, junk, sizeof junk);
    EXPECT_EQ(request(&d, ER_CMD_DATA, data, sizeof data, &r, copy), 1);
    EXPECT_EQ(er_rd32(copy), sizeof junk);
    EXPECT_EQ(request(&d, ER_CMD_END, begin + 4, 32, &r, copy), 1);
    EXPECT_EQ(r.flags, ER_FLAG_RESPONSE);
    uint8_t commit[ER_COMMIT_SIZE];
    commit[0] = 0;
    memcpy(commit + 1, begin + 4, 32);
    EXPECT_EQ(request(&d, ER_CMD_COMMIT, commit, sizeof commit, &r, copy), 1);
    EXPECT_EQ(r.flags, ER_FLAG_RESPONSE | ER_FLAG_ERROR);
    EXPECT_EQ(er_rd16(copy), ER_ERR_MODEL_INVALID);
    EXPECT_EQ(d.slots.active, ER_SLOT_NONE);
    EXPECT_EQ(request(&d, ER_CMD_INVOKE, NULL, 0, &r, copy), 1);
    EXPECT_EQ(er_rd16(copy), ER_ERR_NO_MODEL);
    /* a bad length and an unknown command get error answers, not silence */
    EXPECT_EQ(request(&d, ER_CMD_BEGIN, begin, 5, &r, copy), 1);
    EXPECT_EQ(er_rd16(copy), ER_ERR_BAD_LENGTH);
    EXPECT_EQ(request(&d, 0x77, NULL, 0, &r, copy), 1);
    EXPECT_EQ(er_rd16(copy), ER_ERR_UNKNOWN_CMD);
    /* a retransmitted request (same seq) is answered from the cache, not executed again */
    seq_no--;
    EXPECT_EQ(request(&d, 0x77, NULL, 0, &r, copy), 1);
    EXPECT_EQ(er_rd16(copy), ER_ERR_UNKNOWN_CMD);
}

static uint32_t xorshift(uint32_t *s) {
    *s ^= *s << 13;
    *s ^= *s >> 17;
    *s ^= *s << 5;
    return *s;
}

TEST(test_model_loader_rejects_garbage) {
    static er_model m;
    char err[200];
    static uint8_t buf[4096];
    uint32_t seed = 12345;
    for (int round = 0; round < 2000; round++) {
        uint32_t n = 8 + (uint32_t)(xorshift(&seed) % 4000);
        for (uint32_t i = 0; i < n; i++) buf[i] = (uint8_t)xorshift(&seed);
        memcpy(buf + 4, "TFL3", 4);
        buf[0] = (uint8_t)(xorshift(&seed) % 64);
        buf[1] = buf[2] = buf[3] = 0;
        int rc = er_model_load(&m, buf, n, err, sizeof err);
        EXPECT(rc != ER_OK);
    }
}

int main(void) {
    RUN(test_crc32);
    RUN(test_sha256);
    RUN(test_frame_roundtrip_and_resync);
    RUN(test_fixed_point);
    RUN(test_slots_ab_and_torn_meta);
    RUN(test_device_commands);
    RUN(test_model_loader_rejects_garbage);
    return MT_EXIT();
}
