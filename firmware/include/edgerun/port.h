/*
 * The port layer: everything the portable core needs from a board. One implementation per
 * directory under port/ (posix: a file descriptor and a file; mps2-an386: the CMSDK UART, SysTick
 * and a region of code RAM modelled as flash).
 *
 * Flash semantics (NOR-like): erase sets a sector to 0xFF; write can only clear bits. Addresses
 * are offsets into the board's flash region, which the core reads through port_flash_map().
 */
#ifndef EDGERUN_PORT_H
#define EDGERUN_PORT_H

#include <stdint.h>

void port_init(void);
/* Non-blocking: copy up to `max` received bytes into `buf`, return how many. */
int port_uart_read(uint8_t *buf, int max);
/* Blocking: send all `n` bytes. */
void port_uart_write(const uint8_t *buf, int n);
/* Sleep until a byte may have arrived or `ms` milliseconds passed (may return early). */
void port_uart_wait(uint32_t ms);
/* 0 when the UART can run at `baud` bits per second (and, when `apply`, now does, after the bytes
 * already written have left), -1 when it cannot (the rate is kept). Optional: src/eembc.c has a
 * weak default that accepts only ER_UART_BAUD. */
int port_uart_set_baud(uint32_t baud, int apply);
/* Pulse the MLPerf Tiny / EEMBC timestamp line (energy mode: the energy monitor counts its
 * falling edges) and leave it high. Optional: the weak default in src/eembc.c does nothing. */
void port_timestamp_pin(void);
uint32_t port_millis(void);
uint32_t port_micros(void);

uint32_t port_flash_size(void);
const uint8_t *port_flash_map(void);
/* Both return 0 on success, -1 when the range is outside the region or misaligned. */
int port_flash_erase(uint32_t offset, uint32_t len);
int port_flash_write(uint32_t offset, const uint8_t *data, uint32_t len);

void port_reset(void);        /* does not return */
void port_exit(int code);     /* does not return */

#endif
