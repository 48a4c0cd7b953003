/* The device side of the protocol: command dispatch over the slots and the interpreter. */
#ifndef ER_DEVICE_H
#define ER_DEVICE_H
#include <stddef.h>
#include <stdint.h>

#include "eembc.h"
#include "frame.h"
#include "model.h"
#include "slots.h"

typedef struct er_device_s {
    er_parser parser;
    er_slots slots;
    er_model model;
    uint8_t tx[ER_FRAME_OVERHEAD + ER_DEV_MAX_PAYLOAD];
    size_t tx_len;           /* cached last response, resent on a duplicate request */
    uint16_t last_seq;
    uint8_t last_cmd;
    uint32_t last_crc;       /* of the last request's payload: a retransmission is byte-identical */
    int have_last;
    int pending_reset, pending_exit, exit_code, pending_eembc;
    char load_error[200];    /* why the active slot's model did not load, if it did not */
    er_eembc ee;             /* MLPerf Tiny / EEMBC text mode of the UART (ee.active) */
} er_device;

extern er_device er_dev;

void er_device_init(er_device *d);
/* Handle one request frame: fills d->tx / d->tx_len with the response. */
void er_device_handle(er_device *d, const er_frame *f);
/* Read what the UART has, answer complete frames. Returns after one pass. */
void er_device_poll(er_device *d);
/* The main loop: poll forever (returns only through port_reset / port_exit). */
void er_device_run(er_device *d);
#endif
