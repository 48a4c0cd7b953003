#include "device.h"

#include <stdio.h>
#include <string.h>

#include "crc32.h"
#include "edgerun/port.h"

er_device er_dev;

static void load_active(er_device *d) {
    d->load_error[0] = 0;
    d->model.loaded = 0;
    uint8_t a = d->slots.active;
    if (a == ER_SLOT_NONE) return;
    int rc = er_model_load(&d->model, er_slot_data(a), d->slots.slot[a].size, d->load_error, sizeof d->load_error);
    if (rc != ER_OK) d->model.loaded = 0;
}

void er_device_init(er_device *d) {
    memset(d, 0, sizeof *d);
    er_parser_init(&d->parser, ER_DEV_MAX_PAYLOAD);
    er_slots_init(&d->slots);
    load_active(d);
}

static void reply(er_device *d, const er_frame *f, uint8_t flags, const uint8_t *payload, size_t len) {
    d->tx_len = er_frame_encode(d->tx, sizeof d->tx, f->cmd, (uint8_t)(ER_FLAG_RESPONSE | flags), f->seq, payload, len);
}

static void reply_error(er_device *d, const er_frame *f, int code, const char *msg) {
    uint8_t p[2 + 200];
    size_t n = strlen(msg);
    if (n > 200) n = 200;
    er_wr16(p, (uint16_t)code);
    memcpy(p + 2, msg, n);
    reply(d, f, ER_FLAG_ERROR, p, 2 + n);
}

static const char *errname(int code) {
    switch (code) {
        case ER_ERR_BAD_LENGTH: return "bad payload length";
        case ER_ERR_NO_TRANSFER: return "no transfer in progress for that slot";
        case ER_ERR_BAD_OFFSET: return "offset out of order or outside the announced size";
        case ER_ERR_TOO_LARGE: return "model does not fit in a slot";
        case ER_ERR_HASH_MISMATCH: return "sha256 of the received bytes does not match";
        case ER_ERR_NOT_VERIFIED: return "slot is not verified";
        case ER_ERR_SLOT_ACTIVE: return "slot holds the active model";
        case ER_ERR_NO_MODEL: return "no model is active";
        case ER_ERR_FLASH: return "flash erase/write failed";
        case ER_ERR_NO_ROLLBACK: return "no previous model to roll back to";
        case ER_ERR_BAD_SLOT: return "no such slot";
        case ER_ERR_BAD_INPUT: return "input index or range out of bounds";
        default: return "error";
    }
}

static uint8_t inactive_slot(const er_device *d) {
    if (d->slots.active == ER_SLOT_NONE) return 0;
    return (uint8_t)(d->slots.active ^ 1u);
}

static void put_io(er_device *d, uint8_t *p, int16_t ti) {
    er_tensor *t = &d->model.tensors[ti];
    memset(p, 0, ER_IO_RECORD_SIZE);
    p[0] = t->type;
    p[1] = t->ndim;
    er_wr32(p + 4, t->bytes);
    uint32_t s;
    memcpy(&s, &t->scale, 4);
    er_wr32(p + 8, s);
    er_wr32(p + 12, (uint32_t)t->zp);
    for (int i = 0; i < t->ndim && i < ER_MAX_DIMS; i++) er_wr32(p + 16 + 4 * i, (uint32_t)t->dims[i]);
}

/* Load the model in `slot` to check it, then make it active. The old model stays active when
 * the new one does not load (unsupported op, too big an arena, malformed). */
static int activate(er_device *d, const er_frame *f, uint8_t slot) {
    er_slot *sl = &d->slots.slot[slot];
    if (sl->state != ER_SLOT_VERIFIED) {
        reply_error(d, f, ER_ERR_NOT_VERIFIED, errname(ER_ERR_NOT_VERIFIED));
        return -1;
    }
    char err[200];
    int rc = er_model_load(&d->model, er_slot_data(slot), sl->size, err, sizeof err);
    if (rc != ER_OK) {
        reply_error(d, f, rc, err);
        load_active(d); /* back to the model that stays active */
        return -1;
    }
    rc = er_slot_activate(&d->slots, slot);
    if (rc != ER_OK) {
        reply_error(d, f, rc, errname(rc));
        load_active(d);
        return -1;
    }
    d->load_error[0] = 0;
    uint8_t p[ER_ACTIVE_REPLY_SIZE] = {0};
    p[0] = slot;
    er_wr32(p + 4, d->model.arena_bytes);
    reply(d, f, 0, p, sizeof p);
    return 0;
}

void er_device_handle(er_device *d, const er_frame *f) {
    const uint8_t *in = f->payload;
    uint16_t len = f->len;
    d->tx_len = 0;
    if (f->flags & ER_FLAG_RESPONSE) return; /* our own echo or noise: never answer a response */
    switch (f->cmd) {
        case ER_CMD_HELLO: {
            uint8_t p[ER_HELLO_SIZE] = {0};
            er_wr16(p, ER_PROTO_VERSION);
            er_wr16(p + 2, (ER_FW_VERSION_MAJOR << 8) | ER_FW_VERSION_MINOR);
            er_wr16(p + 4, ER_DEV_MAX_PAYLOAD);
            er_wr32(p + 8, ER_ARENA_BYTES);
            er_wr32(p + 12, ER_SLOT_BYTES);
            er_wr32(p + 16, ER_FLASH_TOTAL);
            p[20] = d->slots.active;
            p[21] = ER_SLOT_COUNT;
            strncpy((char *)p + 24, ER_BOARD_NAME, ER_BOARD_NAME_SIZE - 1);
            reply(d, f, 0, p, sizeof p);
            return;
        }
        case ER_CMD_STATUS: {
            uint8_t p[ER_STATUS_HEADER_SIZE + ER_SLOT_COUNT * ER_STATUS_SLOT_SIZE] = {0};
            p[0] = d->slots.active;
            for (int i = 0; i < ER_SLOT_COUNT; i++) {
                uint8_t *q = p + ER_STATUS_HEADER_SIZE + i * ER_STATUS_SLOT_SIZE;
                const er_slot *sl = &d->slots.slot[i];
                q[0] = sl->state;
                er_wr32(q + 4, sl->size);
                er_wr32(q + 8, sl->received);
                memcpy(q + 12, sl->sha, 32);
            }
            reply(d, f, 0, p, sizeof p);
            return;
        }
        case ER_CMD_BEGIN: {
            if (len != ER_BEGIN_SIZE) break;
            uint8_t slot = in[36] == ER_SLOT_NONE ? inactive_slot(d) : in[36];
            int resumed = 0;
            int rc = er_slot_begin(&d->slots, slot, er_rd32(in), in + 4, &resumed);
            if (rc != ER_OK) {
                reply_error(d, f, rc, errname(rc));
                return;
            }
            uint8_t p[ER_BEGIN_REPLY_SIZE] = {0};
            p[0] = slot;
            p[1] = (uint8_t)resumed;
            er_wr32(p + 4, d->slots.slot[slot].received);
            reply(d, f, 0, p, sizeof p);
            return;
        }
        case ER_CMD_DATA: {
            if (len < ER_DATA_HEADER_SIZE) break;
            /* data goes to the slot that is receiving (at most one is) */
            uint8_t slot = ER_SLOT_NONE;
            for (uint8_t i = 0; i < ER_SLOT_COUNT; i++)
                if (d->slots.slot[i].state == ER_SLOT_RECEIVING) slot = i;
            if (slot == ER_SLOT_NONE) {
                reply_error(d, f, ER_ERR_NO_TRANSFER, errname(ER_ERR_NO_TRANSFER));
                return;
            }
            int rc = er_slot_write(&d->slots, slot, er_rd32(in), in + 4, (uint32_t)len - 4u);
            if (rc != ER_OK) {
                char msg[96];
                snprintf(msg, sizeof msg, "%s (device holds %u bytes)", errname(rc), (unsigned)d->slots.slot[slot].received);
                reply_error(d, f, rc, msg);
                return;
            }
            uint8_t p[4];
            er_wr32(p, d->slots.slot[slot].received);
            reply(d, f, 0, p, 4);
            return;
        }
        case ER_CMD_END: {
            if (len != ER_SHA256_SIZE) break;
            uint8_t slot = ER_SLOT_NONE;
            for (uint8_t i = 0; i < ER_SLOT_COUNT; i++) {
                const er_slot *sl = &d->slots.slot[i];
                if (i != d->slots.active && (sl->state == ER_SLOT_RECEIVING ||
                    (sl->state == ER_SLOT_VERIFIED && memcmp(sl->sha, in, 32) == 0)))
                    slot = i;
            }
            if (slot == ER_SLOT_NONE) {
                reply_error(d, f, ER_ERR_NO_TRANSFER, errname(ER_ERR_NO_TRANSFER));
                return;
            }
            uint8_t h[32];
            int rc = er_slot_finish(&d->slots, slot, in, h);
            if (rc != ER_OK) {
                reply_error(d, f, rc, errname(rc));
                return;
            }
            reply(d, f, 0, h, 32);
            return;
        }
        case ER_CMD_COMMIT: {
            if (len != ER_COMMIT_SIZE) break;
            uint8_t slot = in[0];
            if (slot >= ER_SLOT_COUNT) {
                reply_error(d, f, ER_ERR_BAD_SLOT, errname(ER_ERR_BAD_SLOT));
                return;
            }
            if (memcmp(d->slots.slot[slot].sha, in + 1, 32) != 0) {
                reply_error(d, f, ER_ERR_HASH_MISMATCH, "slot holds a different model");
                return;
            }
            if (slot == d->slots.active && d->model.loaded) { /* already active: idempotent */
                uint8_t p[ER_ACTIVE_REPLY_SIZE] = {0};
                p[0] = slot;
                er_wr32(p + 4, d->model.arena_bytes);
                reply(d, f, 0, p, sizeof p);
                return;
            }
            activate(d, f, slot);
            return;
        }
        case ER_CMD_ROLLBACK: {
            uint8_t other = d->slots.active == ER_SLOT_NONE ? ER_SLOT_NONE : (uint8_t)(d->slots.active ^ 1u);
            if (other == ER_SLOT_NONE || d->slots.slot[other].state != ER_SLOT_VERIFIED) {
                reply_error(d, f, ER_ERR_NO_ROLLBACK, errname(ER_ERR_NO_ROLLBACK));
                return;
            }
            activate(d, f, other);
            return;
        }
        case ER_CMD_MODEL_INFO: {
            if (!d->model.loaded) {
                reply_error(d, f, ER_ERR_NO_MODEL, d->load_error[0] ? d->load_error : errname(ER_ERR_NO_MODEL));
                return;
            }
            uint8_t p[ER_MODEL_INFO_HEADER_SIZE + 2 * ER_MAX_IO * ER_IO_RECORD_SIZE];
            memset(p, 0, ER_MODEL_INFO_HEADER_SIZE);
            const er_slot *sl = &d->slots.slot[d->slots.active];
            p[0] = (uint8_t)d->model.n_inputs;
            p[1] = (uint8_t)d->model.n_outputs;
            er_wr32(p + 4, d->model.arena_bytes);
            er_wr32(p + 8, sl->size);
            memcpy(p + 12, sl->sha, 32);
            size_t k = ER_MODEL_INFO_HEADER_SIZE;
            for (uint32_t i = 0; i < d->model.n_inputs; i++, k += ER_IO_RECORD_SIZE) put_io(d, p + k, d->model.inputs[i]);
            for (uint32_t i = 0; i < d->model.n_outputs; i++, k += ER_IO_RECORD_SIZE) put_io(d, p + k, d->model.outputs[i]);
            reply(d, f, 0, p, k);
            return;
        }
        case ER_CMD_SET_INPUT:
        case ER_CMD_GET_OUTPUT: {
            int is_in = f->cmd == ER_CMD_SET_INPUT;
            if (len < (is_in ? ER_IO_HEADER_SIZE : ER_GET_OUTPUT_SIZE) || (!is_in && len != ER_GET_OUTPUT_SIZE)) break;
            if (!d->model.loaded) {
                reply_error(d, f, ER_ERR_NO_MODEL, d->load_error[0] ? d->load_error : errname(ER_ERR_NO_MODEL));
                return;
            }
            uint32_t idx = in[0], off = er_rd32(in + 4);
            uint32_t n = is_in ? (uint32_t)len - ER_IO_HEADER_SIZE : er_rd16(in + 8);
            uint32_t count = is_in ? d->model.n_inputs : d->model.n_outputs;
            if (idx >= count) {
                reply_error(d, f, ER_ERR_BAD_INPUT, errname(ER_ERR_BAD_INPUT));
                return;
            }
            int16_t ti = is_in ? d->model.inputs[idx] : d->model.outputs[idx];
            uint32_t bytes = d->model.tensors[ti].bytes;
            if (off > bytes || n > bytes - off || n > ER_DEV_MAX_PAYLOAD) {
                reply_error(d, f, ER_ERR_BAD_INPUT, errname(ER_ERR_BAD_INPUT));
                return;
            }
            uint8_t *data = er_model_tensor_data(&d->model, ti);
            if (is_in) {
                memcpy(data + off, in + ER_IO_HEADER_SIZE, n);
                uint8_t p[4];
                er_wr32(p, n);
                reply(d, f, 0, p, 4);
            } else {
                reply(d, f, 0, data + off, n);
            }
            return;
        }
        case ER_CMD_INVOKE: {
            char err[200];
            uint32_t t0 = port_micros(), ms0 = port_millis();
            int rc = er_model_invoke(&d->model, err, sizeof err);
            uint32_t us = port_micros() - t0, ms = port_millis() - ms0;
            if (rc != ER_OK) {
                reply_error(d, f, rc, d->load_error[0] && !d->model.loaded ? d->load_error : err);
                return;
            }
            uint8_t p[ER_INVOKE_REPLY_SIZE];
            er_wr32(p, us);
            er_wr32(p + 4, ms);
            reply(d, f, 0, p, sizeof p);
            return;
        }
        case ER_CMD_PROFILE: {
            if (len != ER_PROFILE_SIZE) break;
            enum { MAXREC = (ER_DEV_MAX_PAYLOAD - ER_PROFILE_HEADER_SIZE) / ER_PROFILE_RECORD_SIZE };
            static uint32_t op_us[MAXREC];
            char err[200];
            uint32_t first = er_rd32(in), n_ops = d->model.loaded ? d->model.n_ops : 0;
            uint32_t count = first < n_ops ? n_ops - first : 0;
            if (count > MAXREC) count = MAXREC;
            uint32_t t0 = port_micros();
            int rc = er_model_invoke_profile(&d->model, err, sizeof err, port_micros, first, count, op_us);
            uint32_t us = port_micros() - t0;
            if (rc != ER_OK) {
                reply_error(d, f, rc, d->load_error[0] && !d->model.loaded ? d->load_error : err);
                return;
            }
            static uint8_t buf[ER_PROFILE_HEADER_SIZE + MAXREC * ER_PROFILE_RECORD_SIZE];
            memset(buf, 0, sizeof buf);
            er_wr32(buf, us);
            er_wr32(buf + 4, n_ops);
            er_wr32(buf + 8, first);
            er_wr16(buf + 12, (uint16_t)count);
            for (uint32_t i = 0; i < count; i++) {
                uint8_t *r = buf + ER_PROFILE_HEADER_SIZE + i * ER_PROFILE_RECORD_SIZE;
                uint32_t op = d->model.nodes[first + i].op;
                er_wr16(r, (uint16_t)op);
                er_wr32(r + 4, op_us[i]);
            }
            reply(d, f, 0, buf, ER_PROFILE_HEADER_SIZE + count * ER_PROFILE_RECORD_SIZE);
            return;
        }
        case ER_CMD_EEMBC: {
            uint32_t mode = ER_EEMBC_PERFORMANCE, baud = 0;
            if (len != 0 && len != ER_EEMBC_REQUEST_SIZE) break;
            if (len) {
                mode = in[0];
                baud = er_rd32(in + 4);
            }
            if (mode > ER_EEMBC_ENERGY || (baud && port_uart_set_baud(baud, 0) != 0)) {
                reply_error(d, f, ER_ERR_BAD_INPUT,
                            mode > ER_EEMBC_ENERGY ? "EEMBC mode: 0 (performance) or 1 (energy)"
                                                   : "EEMBC baud rate: this UART cannot run at it");
                return;
            }
            reply(d, f, 0, NULL, 0);
            d->pending_eembc = 1;
            d->ee.pending_mode = mode;
            d->ee.pending_baud = baud;
            return;
        }
        case ER_CMD_RESET:
            reply(d, f, 0, NULL, 0);
            d->pending_reset = 1;
            return;
        case ER_CMD_EXIT:
            d->exit_code = len >= 1 ? in[0] : 0;
            reply(d, f, 0, NULL, 0);
            d->pending_exit = 1;
            return;
        default:
            reply_error(d, f, ER_ERR_UNKNOWN_CMD, "unknown command");
            return;
    }
    reply_error(d, f, ER_ERR_BAD_LENGTH, errname(ER_ERR_BAD_LENGTH));
}

static void on_frame(er_device *d, const er_frame *f) {
    if (f->flags & ER_FLAG_RESPONSE) return;
    uint32_t crc = er_crc32(0, f->payload, f->len);
    if (d->have_last && f->seq == d->last_seq && f->cmd == d->last_cmd && crc == d->last_crc && d->tx_len) {
        port_uart_write(d->tx, (int)d->tx_len); /* a retransmitted request: answer again, do not redo */
        return;
    }
    er_device_handle(d, f);
    d->have_last = 1;
    d->last_seq = f->seq;
    d->last_cmd = f->cmd;
    d->last_crc = crc;
    if (d->tx_len) port_uart_write(d->tx, (int)d->tx_len);
    if (d->pending_eembc) {
        d->pending_eembc = 0;
        er_eembc_enter(d, d->ee.pending_mode, d->ee.pending_baud);
    }
    if (d->pending_exit) port_exit(d->exit_code);
    if (d->pending_reset) port_reset();
}

void er_device_poll(er_device *d) {
    uint8_t buf[256];
    int n = port_uart_read(buf, sizeof buf);
    er_frame f;
    for (int i = 0; i < n; i++) {
        if (d->ee.active) er_eembc_byte(d, buf[i]);
        /* frames are still recognised in EEMBC mode: a good one (text cannot form one) ends it, so
         * a stray EEMBC frame never cuts a host off from the framed protocol */
        if (er_parser_push(&d->parser, buf[i], port_millis(), &f)) {
            d->ee.active = 0;
            on_frame(d, &f);
            while (er_parser_next(&d->parser, &f)) on_frame(d, &f);
        }
    }
    if (n <= 0) {
        er_parser_tick(&d->parser, port_millis());
        port_uart_wait(20);
    }
}

void er_device_run(er_device *d) {
#if defined(ER_EEMBC_BOOT) && ER_EEMBC_BOOT == 2
    er_eembc_enter(d, ER_EEMBC_ENERGY, ER_EEMBC_ENERGY_BAUD);
#elif defined(ER_EEMBC_BOOT) && ER_EEMBC_BOOT
    er_eembc_enter(d, ER_EEMBC_PERFORMANCE, 0);
#endif
    for (;;) er_device_poll(d);
}
