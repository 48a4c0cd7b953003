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
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "device.h"
#include "edgerun/port.h"

static void out(const char *s) { port_uart_write((const uint8_t *)s, (int)strlen(s)); }

static void outf(const char *fmt, ...) {
    char b[200];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(b, sizeof b, fmt, ap);
    va_end(ap);
    out(b);
}

/* value with 6 decimals, without printf's float support (newlib-nano has none) */
static void put_fixed(char *b, size_t n, double v) {
    if (!(v == v)) {
        snprintf(b, n, "nan");
        return;
    }
    int neg = v < 0;
    if (neg) v = -v;
    if (v > 4.0e12) {
        snprintf(b, n, "%sinf", neg ? "-" : "");
        return;
    }
    unsigned long long u = (unsigned long long)(v * 1e6 + 0.5);
    snprintf(b, n, "%s%llu.%06llu", neg ? "-" : "", u / 1000000ull, u % 1000000ull);
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
        char b[40];
        put_fixed(b, sizeof b, v);
        if (i) out(",");
        out(b);
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
    char *w[4] = {0};
    int n = 0;
    for (char *s = strtok(c, " "); s && n < 4; s = strtok(NULL, " ")) w[n++] = s;
    if (n == 0) {
        /* an empty command: just the prompt */
    } else if (!strcmp(w[0], "name")) {
        outf("m-name-dut-[edgerun-%s]\r\n", ER_BOARD_NAME);
    } else if (!strcmp(w[0], "profile")) {
        outf("m-profile-[edgerun-fw %d.%d]\r\n", ER_FW_VERSION_MAJOR, ER_FW_VERSION_MINOR);
        if (d->model.loaded) {
            const uint8_t *h = d->slots.slot[d->slots.active].sha;
            outf("m-model-[%02x%02x%02x%02x%02x%02x%02x%02x]\r\n", h[0], h[1], h[2], h[3], h[4], h[5], h[6], h[7]);
        } else {
            out("m-model-[none]\r\n");
        }
    } else if (!strcmp(w[0], "db") && n >= 2 && !strcmp(w[1], "load")) {
        uint32_t want;
        if (!need_model(d)) {
        } else if (n != 3 || parse_u32(w[2], &want) != 0 || want == 0 ||
                   want > d->model.tensors[d->model.inputs[0]].bytes) {
            outf("e-[db load N: N from 1 to %u (input 0's bytes)]\r\n",
                 (unsigned)d->model.tensors[d->model.inputs[0]].bytes);
        } else {
            e->expect = want;
            e->loaded = 0;
            outf("m-[Expecting %u bytes]\r\n", (unsigned)want);
        }
    } else if (!strcmp(w[0], "db") && n == 2) {
        size_t len = strlen(w[1]);
        if (!need_model(d)) {
        } else if (e->expect == 0) {
            out("e-[db: no db load before the data]\r\n");
        } else if (len % 2 || len / 2 > e->expect - e->loaded) {
            outf("e-[db: %u hex digits do not fit the %u bytes still expected]\r\n", (unsigned)len,
                 (unsigned)(e->expect - e->loaded));
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
            outf("m-warmup-start-%u\r\n", (unsigned)warm);
            for (uint32_t i = 0; i < warm && rc == ER_OK; i++) rc = er_model_invoke(&d->model, err, sizeof err);
            out("m-warmup-done\r\n");
            outf("m-infer-start-%u\r\n", (unsigned)runs);
            uint32_t t0 = port_micros();
            outf("m-lap-us-%u\r\n", (unsigned)t0);
            for (uint32_t i = 0; i < runs && rc == ER_OK; i++) rc = er_model_invoke(&d->model, err, sizeof err);
            uint32_t t1 = port_micros();
            if (rc != ER_OK) {
                outf("e-[%s]\r\n", err);
            } else {
                outf("m-lap-us-%u\r\n", (unsigned)t1);
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
        outf("e-[Unknown command: %s]\r\n", name);
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
            outf("e-[command longer than %u bytes]\r\nm-ready\r\n", (unsigned)ER_EE_CMD_SIZE);
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
