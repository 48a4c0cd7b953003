/* MLPerf Tiny / EEMBC device-under-test mode of the UART (see eembc.h).
 *
 * The grammar follows EEMBC's ee_lib as mlcommons/tiny ships it (benchmark/api/
 * internally_implemented.cpp) and as its runner (benchmark/runner/device_under_test.py) drives it:
 * text commands terminated by '%', words separated by spaces, every command answered by its lines
 * and then "m-ready"; errors are e-[...] lines.
 *   name            -> m-name-dut-[edgerun-BOARD]
 *   profile         -> m-profile-[edgerun-fw MAJOR.MINOR] m-model-[sha256 prefix of the model]
 *   help            -> the command list
 *   timestamp       -> performance mode: m-lap-us-T; energy mode: a pulse on the timestamp line
 *   db load N       -> m-[Expecting N bytes]: N = input 0's bytes (the tensor's own bytes), or
 *                      4 x its elements for an int8/uint8 input (float32 values, quantized with
 *                      the input's scale and zero point as the reference AD submission does)
 *   db HEXHEX...    -> (bytes appended) m-load-done once N bytes arrived
 *   db print [N [O]]-> input 0's bytes O..O+N-1 (default: all) as m-buffer-xx-xx-... lines of 8
 *   db format raw|u8-> (edgerun's) how 1-byte data reach an int8 input: raw tensor bytes, or
 *                      uint8 pixels minus 128 as the reference IC and VWW submissions' th_load_tensor
 *   infer [N [W]]   -> m-warmup-start-W m-warmup-done m-infer-start-N, timestamp, N inferences,
 *                      timestamp, m-infer-done, m-results-[...]; N defaults to 1 and W to 10, as
 *                      in ee_lib (the runner always sends both)
 *   results         -> m-results-[output 0, dequantized, 6 decimals, comma-separated]
 *   edgerun         -> m-mode-edgerun, the UART back at the rate the mode was entered at and
 *                      speaking edgerun frames again (edgerun's)
 * At entry: m-timestamp-mode-performance or m-timestamp-mode-energy, two timestamps (energy:
 * two pulses, which leave the open-drain line high for the monitor's first falling edge, as
 * th_timestamp_initialize does), m-init-done, m-ready. In energy mode the runner talks through
 * the EEMBC interface board at the DUT's energy baud rate (9600 for the reference DUTs): the mode
 * switches the UART there first when asked (the ER_CMD_EEMBC frame's baud, or ER_EEMBC_BOOT=2). */
#include <math.h>
#include <string.h>

#include "device.h"
#include "edgerun/port.h"
#include "edgerun/protocol.h"

static uint32_t cur_baud = ER_UART_BAUD;

/* defaults for ports without a settable UART rate or a timestamp line (a port's own definitions win) */
__attribute__((weak)) int port_uart_set_baud(uint32_t baud, int apply) {
    (void)apply;
    return baud == ER_UART_BAUD ? 0 : -1;
}

__attribute__((weak)) void port_timestamp_pin(void) {}

uint32_t er_eembc_current_baud(void) { return cur_baud; }

static void out(const char *s) { port_uart_write((const uint8_t *)s, (int)strlen(s)); }

/* Numbers are formatted here, not with printf: newlib-nano's has no float support, and the text
 * mode must not depend on the C library's reentrancy state. */
static void out_u64(uint64_t v, int min_digits) {
    char b[24];
    int k = 0;
    do {
        b[k++] = (char)('0' + v % 10);
        v /= 10;
    } while (v || k < min_digits);
    char r[24];
    for (int i = 0; i < k; i++) r[i] = b[k - 1 - i];
    r[k] = 0;
    out(r);
}

static void out_u(uint32_t v) { out_u64(v, 1); }

/* "PREFIX<v>\r\n" */
static void out_line_u(const char *prefix, uint32_t v) {
    out(prefix);
    out_u(v);
    out("\r\n");
}

/* value with 6 decimals, rounded half up (the host parses it as a float) */
static void out_fixed(double v) {
    if (!(v == v)) {
        out("nan");
        return;
    }
    if (v < 0) {
        out("-");
        v = -v;
    }
    if (v > 4.0e12) {
        out("inf");
        return;
    }
    uint64_t u = (uint64_t)(v * 1e6 + 0.5);
    out_u64(u / 1000000u, 1);
    out(".");
    out_u64(u % 1000000u, 6);
}

static int parse_u32(const char *s, uint32_t *v) {
    if (!s || !*s) return -1;
    uint64_t x = 0;
    for (; *s; s++) {
        if (*s < '0' || *s > '9') return -1;
        x = x * 10 + (uint64_t)(*s - '0');
        if (x > 0xFFFFFFFFull) return -1;
    }
    *v = (uint32_t)x;
    return 0;
}

static int hexval(char c) {
    if (c >= '0' && c <= '9') return c - '0';
    if (c >= 'a' && c <= 'f') return c - 'a' + 10;
    if (c >= 'A' && c <= 'F') return c - 'A' + 10;
    return -1;
}

/* th_timestamp: a lap stamp in performance mode, a pulse on the timestamp line in energy mode
 * (the energy monitor's falling edge; nothing is printed, as in the reference DUTs) */
static void timestamp(er_device *d) {
    if (d->ee.energy)
        port_timestamp_pin();
    else
        out_line_u("m-lap-us-", port_micros());
}

static void results(er_device *d) {
    er_model *m = &d->model;
    er_tensor *t = &m->tensors[m->outputs[0]];
    const uint8_t *p = er_model_tensor_data(m, m->outputs[0]);
    out("m-results-[");
    for (uint32_t i = 0; i < t->count; i++) {
        double v;
        switch (t->type) {
            case ER_TYPE_INT8: v = (double)t->scale * ((int8_t)p[i] - t->zp); break;
            case ER_TYPE_UINT8: v = (double)t->scale * (p[i] - t->zp); break;
            case ER_TYPE_INT16: {
                int16_t q;
                memcpy(&q, p + 2 * i, 2);
                v = (double)t->scale * (q - t->zp);
                break;
            }
            case ER_TYPE_INT32: {
                int32_t q;
                memcpy(&q, p + 4 * i, 4);
                v = (double)q;
                break;
            }
            case ER_TYPE_FLOAT32: {
                float f;
                memcpy(&f, p + 4 * i, 4);
                v = (double)f;
                break;
            }
            default: {
                int64_t q;
                memcpy(&q, p + 8 * i, 8);
                v = (double)q;
            }
        }
        if (i) out(",");
        out_fixed(v);
    }
    out("]\r\n");
}

static int need_model(er_device *d) {
    if (d->model.loaded) return 1;
    out("e-[no model: flash one with edgerun flash first]\r\n");
    return 0;
}

static er_tensor *input0(er_device *d) { return &d->model.tensors[d->model.inputs[0]]; }

/* db data wait in the arena's free RAM (between the activations and the tables at its top), not
 * in input 0 itself: the planner may give input 0's memory to a later tensor, and infer N W runs
 * N + W inferences on one input. NULL when the model leaves no room for it. */
static uint8_t *stage_area(er_device *d, uint32_t bytes) {
    er_model *m = &d->model;
    uint32_t top = ER_ARENA_BYTES - m->meta_bytes, acts = m->arena_bytes - m->meta_bytes;
    uint32_t off = (acts + 15u) & ~15u;
    if (m->meta_bytes > ER_ARENA_BYTES || acts > top || off > top || bytes > top - off) return NULL;
    return er_arena + off;
}

/* whether any other tensor's arena range overlaps input 0's (conservative: an alias counts) */
static int input_reused(er_device *d) {
    er_model *m = &d->model;
    const er_tensor *t = input0(d);
    for (uint32_t i = 0; i < m->n_tensors; i++) {
        const er_tensor *u = &m->tensors[i];
        if ((int32_t)i == m->inputs[0] || u->cdata || u->bytes == 0 || u->type == ER_TYPE_RESOURCE) continue;
        if (u->off < t->off + t->bytes && t->off < u->off + u->bytes) return 1;
    }
    return 0;
}

/* th_load_tensor: the loaded bytes into input 0 */
static void load_tensor(er_device *d) {
    memcpy(er_model_tensor_data(&d->model, d->model.inputs[0]), d->ee.stage, input0(d)->bytes);
}

/* float32 -> the input's int8/uint8, as TFLite Micro's QuantizeFloatToInt8 (round half away
 * from zero of value / scale, plus the zero point, clamped) */
static uint8_t quantize(const er_tensor *t, float v) {
    int32_t lo = t->type == ER_TYPE_INT8 ? -128 : 0, hi = t->type == ER_TYPE_INT8 ? 127 : 255;
    float r = v / t->scale;
    int32_t q;
    if (!(r == r))
        q = t->zp;
    else if (r >= 2147483520.0f)
        q = hi;
    else if (r <= -2147483520.0f)
        q = lo;
    else
        q = (int32_t)roundf(r) + t->zp;
    if (q < lo) q = lo;
    if (q > hi) q = hi;
    return (uint8_t)q;
}

/* one loaded byte, at byte `k` of the db data, into input 0 */
static void store_byte(er_device *d, uint32_t k, uint8_t b) {
    er_eembc *e = &d->ee;
    er_tensor *t = input0(d);
    uint8_t *dst = e->stage;
    if (e->as_float) {
        e->fbuf[k % 4] = b;
        if (k % 4 == 3) {
            float f;
            memcpy(&f, e->fbuf, 4); /* little-endian float32, as the runner sends numpy's bytes */
            dst[k / 4] = quantize(t, f);
        }
    } else if (e->db_format == ER_EE_DB_U8 && t->type == ER_TYPE_INT8) {
        dst[k] = (uint8_t)(b - 128u); /* uint8 pixel - 128, as the reference th_load_tensor */
    } else {
        dst[k] = b;
    }
}

static void db_print(er_device *d, char **w, int n) {
    er_tensor *t = input0(d);
    uint32_t count = t->bytes, off = 0;
    if ((n >= 3 && parse_u32(w[2], &count) != 0) || (n >= 4 && parse_u32(w[3], &off) != 0) || n > 4 ||
        off > t->bytes || count > t->bytes - off) {
        out("e-[db print [N [offset]]: N + offset at most ");
        out_u(t->bytes);
        out(" (input 0's bytes)]\r\n");
        return;
    }
    static const char hex[] = "0123456789abcdef";
    if (!d->ee.stage) {
        out("e-[db print: nothing loaded (db load N first)]\r\n");
        return;
    }
    const uint8_t *p = d->ee.stage + off;
    char line[9 + 8 * 3 + 3];
    for (uint32_t i = 0; i < count; i += 8) {
        size_t k = 0;
        memcpy(line, "m-buffer-", 9);
        k = 9;
        for (uint32_t j = i; j < count && j < i + 8; j++) {
            if (j > i) line[k++] = '-';
            line[k++] = hex[p[j] >> 4];
            line[k++] = hex[p[j] & 15];
        }
        line[k++] = '\r';
        line[k++] = '\n';
        line[k] = 0;
        out(line);
    }
}

static void db_load(er_device *d, char **w, int n) {
    er_eembc *e = &d->ee;
    er_tensor *t = input0(d);
    uint32_t want;
    int byte_input = t->type == ER_TYPE_INT8 || t->type == ER_TYPE_UINT8;
    if (n != 3 || parse_u32(w[2], &want) != 0 || want == 0 ||
        (want > t->bytes && !(byte_input && want == 4 * t->count))) {
        out("e-[db load N: N from 1 to ");
        out_u(t->bytes);
        out(" (input 0's bytes)");
        if (byte_input) {
            out(", or ");
            out_u(4 * t->count);
            out(" (float32 values)");
        }
        out("]\r\n");
        return;
    }
    uint8_t *stage = stage_area(d, t->bytes);
    if (!stage) {
        out("e-[db load: no free arena left to keep input 0's ");
        out_u(t->bytes);
        out(" bytes between inferences]\r\n");
        return;
    }
    if (!e->stage) memcpy(stage, er_model_tensor_data(&d->model, d->model.inputs[0]), t->bytes);
    e->stage = stage;
    e->refill = input_reused(d);
    e->expect = want;
    e->loaded = 0;
    e->as_float = want > t->bytes;
    out("m-[Expecting ");
    out_u(want);
    out(" bytes]\r\n");
}

static void db_data(er_device *d, const char *hexs) {
    er_eembc *e = &d->ee;
    size_t len = strlen(hexs);
    if (e->expect == 0) {
        out("e-[db: no db load before the data]\r\n");
        return;
    }
    if (len % 2 || len / 2 > e->expect - e->loaded) {
        out("e-[db: ");
        out_u((uint32_t)len);
        out(" hex digits do not fit the ");
        out_u(e->expect - e->loaded);
        out(" bytes still expected]\r\n");
        return;
    }
    for (size_t i = 0; i < len; i++) {
        if (hexval(hexs[i]) < 0) {
            out("e-[db: not a hex byte string]\r\n");
            return;
        }
    }
    for (size_t i = 0; i < len; i += 2)
        store_byte(d, e->loaded + (uint32_t)(i / 2), (uint8_t)(hexval(hexs[i]) << 4 | hexval(hexs[i + 1])));
    e->loaded += (uint32_t)(len / 2);
    if (e->loaded == e->expect) out("m-load-done\r\n");
}

static void infer(er_device *d, char **w, int n) {
    uint32_t runs = 1, warm = 10; /* ee_lib's defaults */
    if ((n >= 2 && parse_u32(w[1], &runs) != 0) || (n >= 3 && parse_u32(w[2], &warm) != 0) || n > 3 ||
        runs == 0) {
        out("e-[infer N W: N >= 1 inferences after W warm-up ones]\r\n");
        return;
    }
    char err[200];
    int rc = ER_OK;
    int refill = d->ee.stage && d->ee.refill;
    if (d->ee.stage) load_tensor(d);
    out_line_u("m-warmup-start-", warm);
    for (uint32_t i = 0; i < warm && rc == ER_OK; i++) {
        rc = er_model_invoke(&d->model, err, sizeof err);
        if (refill) load_tensor(d);
    }
    out("m-warmup-done\r\n");
    out_line_u("m-infer-start-", runs);
    timestamp(d);
    for (uint32_t i = 0; i < runs && rc == ER_OK; i++) {
        if (refill && i) load_tensor(d); /* inside the timed loop: part of each inference's cost */
        rc = er_model_invoke(&d->model, err, sizeof err);
    }
    timestamp(d);
    if (rc != ER_OK) {
        out("e-[");
        out(err);
        out("]\r\n");
        return;
    }
    out("m-infer-done\r\n");
    results(d);
}

static void help(void) {
    out("edgerun-fw MLPerf Tiny / EEMBC device-under-test mode\r\n");
    out("help         : Print this information\r\n");
    out("name         : Print the name of the device\r\n");
    out("profile      : Print the firmware and model versions\r\n");
    out("timestamp    : Generate a timestamp (energy mode: a pulse on the timestamp line)\r\n");
    out("db SUBCMD    : Manipulate the input buffer (input 0)\r\n");
    out("  load N     : Expect N bytes (input 0's bytes, or 4 x its elements as float32)\r\n");
    out("  db HH[HH]* : Load 8-bit hex byte(s) until N bytes\r\n");
    out("  print [N] [offset]: Print N bytes at offset as hex\r\n");
    out("  format raw|u8: 1-byte data as the tensor's bytes, or uint8 pixels minus 128\r\n");
    out("infer N [W=10]: Execute N inferences after W warmup loops\r\n");
    out("results      : Return the result fp32 vector\r\n");
    out("edgerun      : Return to edgerun's framed protocol\r\n");
}

static void command(er_device *d, char *c) {
    er_eembc *e = &d->ee;
    char *w[5] = {0};
    int n = 0;
    for (char *s = c; *s && n < 5;) { /* words separated by spaces; a fifth word makes any command wrong */
        while (*s == ' ') *s++ = 0;
        if (!*s) break;
        w[n++] = s;
        while (*s && *s != ' ') s++;
    }
    if (n == 0) {
        /* an empty command: just the prompt */
    } else if (!strcmp(w[0], "name")) {
        out("m-name-dut-[edgerun-" ER_BOARD_NAME "]\r\n");
    } else if (!strcmp(w[0], "profile")) {
        out("m-profile-[edgerun-fw ");
        out_u(ER_FW_VERSION_MAJOR);
        out(".");
        out_u(ER_FW_VERSION_MINOR);
        out("]\r\n");
        if (d->model.loaded) {
            static const char hex[] = "0123456789abcdef";
            const uint8_t *h = d->slots.slot[d->slots.active].sha;
            char b[17];
            for (int i = 0; i < 8; i++) {
                b[2 * i] = hex[h[i] >> 4];
                b[2 * i + 1] = hex[h[i] & 15];
            }
            b[16] = 0;
            out("m-model-[");
            out(b);
            out("]\r\n");
        } else {
            out("m-model-[none]\r\n");
        }
    } else if (!strcmp(w[0], "help")) {
        help();
    } else if (!strcmp(w[0], "timestamp")) {
        timestamp(d);
    } else if (!strcmp(w[0], "db") && n == 1) {
        out("e-[Command 'db' requires a subcommand]\r\n");
    } else if (!strcmp(w[0], "db") && !strcmp(w[1], "format")) {
        if (n == 3 && !strcmp(w[2], "raw"))
            e->db_format = ER_EE_DB_RAW;
        else if (n == 3 && !strcmp(w[2], "u8"))
            e->db_format = ER_EE_DB_U8;
        else
            out("e-[db format raw|u8]\r\n");
        if (n == 3) out(e->db_format == ER_EE_DB_U8 ? "m-db-format-u8\r\n" : "m-db-format-raw\r\n");
    } else if (!strcmp(w[0], "db") && !need_model(d)) {
    } else if (!strcmp(w[0], "db") && !strcmp(w[1], "load")) {
        db_load(d, w, n);
    } else if (!strcmp(w[0], "db") && !strcmp(w[1], "print")) {
        db_print(d, w, n);
    } else if (!strcmp(w[0], "db") && n == 2) {
        db_data(d, w[1]);
    } else if (!strcmp(w[0], "db")) {
        out("e-[db: load N, print [N [offset]], format raw|u8 or hex bytes]\r\n");
    } else if (!strcmp(w[0], "infer")) {
        if (need_model(d)) infer(d, w, n);
    } else if (!strcmp(w[0], "results")) {
        if (need_model(d)) results(d);
    } else if (!strcmp(w[0], "edgerun")) {
        out("m-mode-edgerun\r\n");
        e->active = 0;
        if (e->entry_baud != cur_baud && port_uart_set_baud(e->entry_baud, 1) == 0) cur_baud = e->entry_baud;
        return; /* the framed protocol has no prompt */
    } else {
        char name[24];
        size_t k = 0;
        for (const char *s = w[0]; *s && k + 1 < sizeof name; s++) name[k++] = (*s >= 32 && *s < 127) ? *s : '?';
        name[k] = 0;
        out("e-[Unknown command: ");
        out(name);
        out("]\r\n");
    }
    out("m-ready\r\n");
}

void er_eembc_enter(er_device *d, uint32_t mode, uint32_t baud) {
    memset(&d->ee, 0, sizeof d->ee);
    d->ee.active = 1;
    d->ee.energy = mode == ER_EEMBC_ENERGY;
#if defined(ER_EEMBC_DB_U8) && ER_EEMBC_DB_U8
    d->ee.db_format = ER_EE_DB_U8;
#endif
    d->ee.entry_baud = cur_baud;
    if (baud && baud != cur_baud && port_uart_set_baud(baud, 1) == 0) {
        cur_baud = baud;
        /* the host switches after it has read the frame's reply: give it that time */
        uint32_t t0 = port_millis();
        while (port_millis() - t0 < 50u) port_uart_wait(10);
    }
    out(d->ee.energy ? "m-timestamp-mode-energy\r\n" : "m-timestamp-mode-performance\r\n");
    timestamp(d);
    timestamp(d);
    out("m-init-done\r\n");
    out("m-ready\r\n");
}

void er_eembc_byte(er_device *d, uint8_t c) {
    er_eembc *e = &d->ee;
    if (c == '%') {
        e->cmd[e->pos] = 0;
        if (e->overflow) {
            out("e-[command longer than ");
            out_u(ER_EE_CMD_SIZE);
            out(" bytes]\r\n");
            out("m-ready\r\n");
        } else {
            command(d, e->cmd);
        }
        e->pos = 0;
        e->overflow = 0;
        return;
    }
    if (c == '\r' || c == '\n') return;
    if (e->pos < ER_EE_CMD_SIZE) {
        e->cmd[e->pos++] = (char)c;
    } else {
        e->overflow = 1;
    }
}
