/* libFuzzer target: the frame parser and every command handler of a fresh device.
 *
 * The input is a script. Byte 0 bit 0 chooses raw mode (the bytes go to the UART as they are:
 * resynchronisation, bad CRCs, truncated frames, timeouts) or frame mode, where the rest is
 * records [cmd, flags, len_lo, len_hi, payload...] encoded into frames with good CRCs, so that
 * fuzzed payloads reach BEGIN/DATA/END/COMMIT/SET_INPUT/GET_OUTPUT/... handlers. Flash starts
 * erased for every input; RESET and EXIT jump back here instead of ending the process. */
#include <setjmp.h>
#include <stdint.h>
#include <string.h>

#include "device.h"
#include "frame.h"
#include "port_fuzz.h"

static uint8_t script[1 << 16];

static void run(const uint8_t *bytes, size_t n) {
    fz_in = bytes;
    fz_in_len = n;
    fz_in_pos = 0;
    volatile int rounds = 0;
    if (setjmp(fz_jump)) {            /* RESET: boot again from flash; EXIT: stop */
        if (fz_in_pos >= fz_in_len || ++rounds > 8) return;
        er_device_init(&er_dev);
    }
    while (fz_in_pos < fz_in_len) er_device_poll(&er_dev);
    er_device_poll(&er_dev);           /* one idle poll: parser timeouts */
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
    if (size < 1) return 0;
    memset(fz_flash, 0xFF, 2u * ER_FLASH_SECTOR); /* erased meta records: no active slot */
    fz_ms = 0;
    fz_out_len = 0;
    er_device_init(&er_dev);
    if (data[0] & 1) {
        run(data + 1, size - 1);
        return 0;
    }
    size_t pos = 1, out = 0;
    uint16_t seq = 1;
    while (pos + 4 <= size) {
        uint8_t cmd = data[pos], flags = data[pos + 1];
        size_t len = (size_t)data[pos + 2] | ((size_t)data[pos + 3] << 8);
        pos += 4;
        if (len > size - pos) len = size - pos;
        if (len > ER_DEV_MAX_PAYLOAD + 8u) len = ER_DEV_MAX_PAYLOAD + 8u;
        size_t room = sizeof script - out;
        if (room < ER_FRAME_OVERHEAD + len) break;
        size_t k = er_frame_encode(script + out, room, cmd, flags, seq++, data + pos, len);
        out += k;
        pos += len;
    }
    run(script, out);
    return 0;
}
