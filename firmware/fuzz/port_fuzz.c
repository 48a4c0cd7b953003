/* The port for the fuzz targets: flash in a static array (out-of-region access aborts), the UART
 * as a byte queue, and reset/exit jumping back to the harness instead of ending the process. */
#include <setjmp.h>
#include <stdlib.h>
#include <string.h>

#include "config.h"
#include "edgerun/port.h"
#include "port_fuzz.h"

uint8_t fz_flash[ER_FLASH_TOTAL];
const uint8_t *fz_in;
size_t fz_in_len, fz_in_pos, fz_out_len;
uint32_t fz_ms;
jmp_buf fz_jump;

void port_init(void) {}
int port_uart_read(uint8_t *buf, int max) {
    int n = 0;
    while (n < max && fz_in_pos < fz_in_len) buf[n++] = fz_in[fz_in_pos++];
    return n;
}
void port_uart_write(const uint8_t *buf, int n) {
    if (n < 0 || n > ER_FRAME_OVERHEAD + ER_DEV_MAX_PAYLOAD) abort(); /* no reply is longer than one frame */
    volatile uint8_t sink = 0;
    for (int i = 0; i < n; i++) sink ^= buf[i]; /* read every byte: ASan checks the reply buffer */
    (void)sink;
    fz_out_len += (size_t)n;
}
void port_uart_wait(uint32_t ms) { fz_ms += ms; }
uint32_t port_millis(void) { return fz_ms; }
uint32_t port_micros(void) { return fz_ms * 1000u; }
uint32_t port_flash_size(void) { return ER_FLASH_TOTAL; }
const uint8_t *port_flash_map(void) { return fz_flash; }
int port_flash_erase(uint32_t off, uint32_t len) {
    if (off > ER_FLASH_TOTAL || len > ER_FLASH_TOTAL - off || off % ER_FLASH_SECTOR || len % ER_FLASH_SECTOR) abort();
    memset(fz_flash + off, 0xFF, len);
    return 0;
}
int port_flash_write(uint32_t off, const uint8_t *data, uint32_t len) {
    if (off > ER_FLASH_TOTAL || len > ER_FLASH_TOTAL - off) abort();
    for (uint32_t i = 0; i < len; i++) fz_flash[off + i] &= data[i];
    return 0;
}
void port_reset(void) { longjmp(fz_jump, 1); }
void port_exit(int code) { longjmp(fz_jump, 2 + (code & 0xFF)); }
