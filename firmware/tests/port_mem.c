/* A port for unit tests: flash in a static array, the UART as two byte queues. */
#include <stdlib.h>
#include <string.h>

#include "config.h"
#include "edgerun/port.h"
#include "port_mem.h"

uint8_t mem_flash[ER_FLASH_TOTAL];
uint8_t uart_in[1 << 16], uart_out[1 << 16];
uint32_t uart_in_len, uart_in_pos, uart_out_len;
uint32_t fake_ms;
int flash_fail_after = -1; /* >= 0: the n-th following flash write/erase fails (power cut) */

void port_init(void) {}
int port_uart_read(uint8_t *buf, int max) {
    int n = 0;
    while (n < max && uart_in_pos < uart_in_len) buf[n++] = uart_in[uart_in_pos++];
    return n;
}
void port_uart_write(const uint8_t *buf, int n) {
    if (uart_out_len + (uint32_t)n > sizeof uart_out) abort();
    memcpy(uart_out + uart_out_len, buf, (size_t)n);
    uart_out_len += (uint32_t)n;
}
void port_uart_wait(uint32_t ms) { fake_ms += ms; }
uint32_t port_millis(void) { return fake_ms; }
uint32_t port_micros(void) { return fake_ms * 1000u; }
uint32_t port_flash_size(void) { return ER_FLASH_TOTAL; }
const uint8_t *port_flash_map(void) { return mem_flash; }
static int cut(void) {
    if (flash_fail_after < 0) return 0;
    if (flash_fail_after == 0) return 1;
    flash_fail_after--;
    return 0;
}
int port_flash_erase(uint32_t off, uint32_t len) {
    if (off > ER_FLASH_TOTAL || len > ER_FLASH_TOTAL - off || off % ER_FLASH_SECTOR || len % ER_FLASH_SECTOR) abort();
    if (cut()) { memset(mem_flash + off, 0xFF, len / 2); return -1; } /* torn erase */
    memset(mem_flash + off, 0xFF, len);
    return 0;
}
int port_flash_write(uint32_t off, const uint8_t *data, uint32_t len) {
    if (off > ER_FLASH_TOTAL || len > ER_FLASH_TOTAL - off) abort();
    uint32_t n = cut() ? len / 2 : len; /* torn write */
    for (uint32_t i = 0; i < n; i++) mem_flash[off + i] &= data[i];
    return n == len ? 0 : -1;
}
void port_reset(void) { abort(); }
void port_exit(int code) { exit(code); }
