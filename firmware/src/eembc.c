/* MLPerf Tiny / EEMBC device-under-test mode of the UART (see eembc.h).
 *
 * Grammar (text, each command terminated by '%'; words separated by spaces):
 *   name            -> m-name-dut-[edgerun-BOARD]
 *   profile         -> m-profile-[edgerun-fw MAJOR.MINOR] m-model-[sha256 prefix of the model]
 *   db load N       -> m-[Expecting N bytes]       (N: 1 .. bytes of input 0)
 *   db HEXHEX...    -> (bytes appended to input 0) m-load-done once N bytes arrived
 *   infer N W       -> m-warmup-start-W m-warmup-done m-infer-start-N m-lap-us-T0 m-lap-us-T1
 *                      m-infer-done m-results-[...]
 *   results         -> m-results-[output 0, dequantized, 6 decimals, comma-separated]
 *   edgerun         -> m-mode-edgerun, and the UART speaks edgerun frames again
 * every command ends with m-ready; errors are e-[...] lines. Input bytes are input 0's raw
 * tensor bytes (the host converts images to the model's int8 as th_load_tensor would). */
#include <string.h>

#include "device.h"
#include "edgerun/port.h"

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
    } else if (!strcmp(w[0], "db") && n >= 2 && !strcmp(w[1], "load")) {
        uint32_t want;
        if (!need_model(d)) {
        } else if (n != 3 || parse_u32(w[2], &want) != 0 || want == 0 ||
                   want > d->model.tensors[d->model.inputs[0]].bytes) {
            out("e-[db load N: N from 1 to ");
            out_u(d->model.tensors[d->model.inputs[0]].bytes);
            out(" (input 0's bytes)]\r\n");
        } else {
            e->expect = want;
            e->loaded = 0;
            out("m-[Expecting ");
            out_u(want);
            out(" bytes]\r\n");
        }
    } else if (!strcmp(w[0], "db") && n == 2) {
        size_t len = strlen(w[1]);
        if (!need_model(d)) {
        } else if (e->expect == 0) {
            out("e-[db: no db load before the data]\r\n");
        } else if (len % 2 || len / 2 > e->expect - e->loaded) {
            out("e-[db: ");
            out_u((uint32_t)len);
            out(" hex digits do not fit the ");
            out_u(e->expect - e->loaded);
            out(" bytes still expected]\r\n");
        } else {
            uint8_t *dst = er_model_tensor_data(&d->model, d->model.inputs[0]) + e->loaded;
            size_t i;
            for (i = 0; i < len; i += 2) {
                int hi = hexval(w[1][i]), lo = hexval(w[1][i + 1]);
                if (hi < 0 || lo < 0) break;
                dst[i / 2] = (uint8_t)(hi << 4 | lo);
            }
            if (i < len) {
                out("e-[db: not a hex byte string]\r\n");
            } else {
                e->loaded += (uint32_t)(len / 2);
                if (e->loaded == e->expect) out("m-load-done\r\n");
            }
        }
    } else if (!strcmp(w[0], "infer")) {
        uint32_t runs = 1, warm = 0;
        if (!need_model(d)) {
        } else if ((n >= 2 && parse_u32(w[1], &runs) != 0) || (n >= 3 && parse_u32(w[2], &warm) != 0) || n > 3 ||
                   runs == 0) {
            out("e-[infer N W: N >= 1 inferences after W warm-up ones]\r\n");
        } else {
            char err[200];
            int rc = ER_OK;
            out_line_u("m-warmup-start-", warm);
            for (uint32_t i = 0; i < warm && rc == ER_OK; i++) rc = er_model_invoke(&d->model, err, sizeof err);
            out("m-warmup-done\r\n");
            out_line_u("m-infer-start-", runs);
            uint32_t t0 = port_micros();
            out_line_u("m-lap-us-", t0);
            for (uint32_t i = 0; i < runs && rc == ER_OK; i++) rc = er_model_invoke(&d->model, err, sizeof err);
            uint32_t t1 = port_micros();
            if (rc != ER_OK) {
                out("e-[");
                out(err);
                out("]\r\n");
            } else {
                out_line_u("m-lap-us-", t1);
                out("m-infer-done\r\n");
                results(d);
            }
        }
    } else if (!strcmp(w[0], "results")) {
        if (need_model(d)) results(d);
    } else if (!strcmp(w[0], "edgerun")) {
        out("m-mode-edgerun\r\n");
        e->active = 0;
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

void er_eembc_enter(er_device *d) {
    memset(&d->ee, 0, sizeof d->ee);
    d->ee.active = 1;
    out("m-timestamp-mode-performance\r\n");
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
