/* mps2 port (AN386, AN500 and AN505; board.h has the addresses): CMSDK APB UART0 with
 * interrupt-driven receive into a ring buffer, SysTick for time, code RAM as the flash region, semihosting for exit, SYSRESETREQ for reset.
 *
 * Flow control: when the ring buffer is full the RX interrupt is switched off and the byte
 * stays in the UART's data register; the UART then reports "full" and QEMU (or a host with
 * hardware handshaking) holds further bytes back instead of losing them. Reading from the ring
 * makes room and switches the interrupt back on. */
#include <errno.h>
#include <stdint.h>
#include <string.h>
#include <sys/types.h>

#include "config.h"
#include "device.h"
#include "edgerun/port.h"

#define REG(addr) (*(volatile uint32_t *)(addr))
#define UART_DATA REG(MPS2_UART0_BASE + 0x00)
#define UART_STATE REG(MPS2_UART0_BASE + 0x04)
#define UART_CTRL REG(MPS2_UART0_BASE + 0x08)
#define UART_INT REG(MPS2_UART0_BASE + 0x0C)
#define UART_BAUDDIV REG(MPS2_UART0_BASE + 0x10)
#define STATE_TXFULL 1u
#define STATE_RXFULL 2u
#define CTRL_TXEN 1u
#define CTRL_RXEN 2u
#define CTRL_RXIE 8u
#define INT_RX 2u
#define SYST_CSR REG(0xE000E010u)
#define SYST_RVR REG(0xE000E014u)
#define SYST_CVR REG(0xE000E018u)
#define NVIC_ISER(n) REG(0xE000E100u + 4u * (n))
#define SCB_AIRCR REG(0xE000ED0Cu)
#ifndef MPS2_FPGAIO_BASE
#define MPS2_FPGAIO_BASE 0x40028000u /* AN386 and AN500 */
#endif
#define FPGAIO_LED REG(MPS2_FPGAIO_BASE) /* FPGA I/O: LED0..1 */

#define RING 16384u
static volatile uint8_t ring[RING];
static volatile uint32_t ring_head, ring_tail; /* head: ISR writes; tail: main reads */
static volatile uint32_t ticks_ms;

static inline void irq_off(void) { __asm volatile("cpsid i" ::: "memory"); }
static inline void irq_on(void) { __asm volatile("cpsie i" ::: "memory"); }

static void rx_take(void) { /* move bytes from the UART into the ring while there is room */
    while ((UART_STATE & STATE_RXFULL) && ring_head - ring_tail < RING) {
        ring[ring_head % RING] = (uint8_t)UART_DATA;
        ring_head++;
    }
    if (ring_head - ring_tail >= RING) UART_CTRL &= ~CTRL_RXIE; /* full: hold the sender back */
}

void UART0_RX_Handler(void) {
    UART_INT = INT_RX;
    rx_take();
}

void SysTick_Handler(void) { ticks_ms++; }

void port_init(void) {
    UART_BAUDDIV = 16;
    UART_CTRL = CTRL_TXEN | CTRL_RXEN | CTRL_RXIE;
    NVIC_ISER(MPS2_UART0_RX_IRQ / 32) = 1u << (MPS2_UART0_RX_IRQ % 32);
    SYST_RVR = MPS2_SYSCLK_HZ / 1000u - 1u;
    SYST_CVR = 0;
    SYST_CSR = 7u; /* processor clock, interrupt, enable */
}

int port_uart_read(uint8_t *buf, int max) {
    int n = 0;
    irq_off();
    while (n < max && ring_tail != ring_head) {
        buf[n++] = ring[ring_tail % RING];
        ring_tail++;
    }
    rx_take();                                    /* a byte may be waiting with the interrupt off */
    if (ring_head - ring_tail < RING) UART_CTRL |= CTRL_RXIE; /* room again: resume */
    irq_on();
    return n;
}

void port_uart_write(const uint8_t *buf, int n) {
    for (int i = 0; i < n; i++) {
        while (UART_STATE & STATE_TXFULL) {
        }
        UART_DATA = buf[i];
    }
}

void port_uart_wait(uint32_t ms) {
    (void)ms;
    __asm volatile("wfi"); /* the next interrupt (a byte, or the 1 ms tick) wakes us */
}

/* CMSDK UART: baud = clock / BAUDDIV, with BAUDDIV from 16 to 2^20 - 1 */
int port_uart_set_baud(uint32_t baud, int apply) {
    if (baud == 0) return -1;
    uint32_t div = MPS2_SYSCLK_HZ / baud;
    if (div < 16u || div > 0xFFFFFu) return -1;
    if (apply) {
        while (UART_STATE & STATE_TXFULL) {
        }
        UART_BAUDDIV = div;
    }
    return 0;
}

/* the timestamp line is the FPGA I/O block's LED0 (the board's user LED): held high, pulled low
 * for about 100 us per stamp as the reference DUTs do with their GPIO */
void port_timestamp_pin(void) {
    FPGAIO_LED &= ~1u;
    uint32_t t0 = port_micros();
    while (port_micros() - t0 < 100u) {
    }
    FPGAIO_LED |= 1u;
}

uint32_t port_millis(void) { return ticks_ms; }

uint32_t port_micros(void) {
    uint32_t ms, cvr;
    do {
        ms = ticks_ms;
        cvr = SYST_CVR;
    } while (ms != ticks_ms);
    return ms * 1000u + (SYST_RVR - cvr) / (MPS2_SYSCLK_HZ / 1000000u);
}

uint32_t port_flash_size(void) { return ER_FLASH_TOTAL; }
const uint8_t *port_flash_map(void) { return (const uint8_t *)MPS2_FLASH_BASE; }

int port_flash_erase(uint32_t off, uint32_t len) {
    if (off > ER_FLASH_TOTAL || len > ER_FLASH_TOTAL - off || off % ER_FLASH_SECTOR || len % ER_FLASH_SECTOR) return -1;
    memset((uint8_t *)MPS2_FLASH_BASE + off, 0xFF, len);
    return 0;
}

int port_flash_write(uint32_t off, const uint8_t *data, uint32_t len) {
    if (off > ER_FLASH_TOTAL || len > ER_FLASH_TOTAL - off) return -1;
    volatile uint8_t *p = (volatile uint8_t *)MPS2_FLASH_BASE + off;
    for (uint32_t i = 0; i < len; i++) p[i] &= data[i]; /* NOR: bits only clear */
    return 0;
}

void port_reset(void) {
    __asm volatile("dsb");
    SCB_AIRCR = 0x05FA0004u; /* VECTKEY | SYSRESETREQ */
    __asm volatile("dsb");
    for (;;) {
    }
}

void port_exit(int code) {
    /* semihosting SYS_EXIT: ApplicationExit -> QEMU exits 0, anything else -> 1 */
    register uint32_t r0 __asm("r0") = 0x18;
    register uint32_t r1 __asm("r1") = code == 0 ? 0x20026u : 0x20024u;
    __asm volatile("bkpt 0xAB" : : "r"(r0), "r"(r1) : "memory");
    for (;;) {
    }
}

/* no heap: anything in libc that tries to allocate gets ENOMEM */
void *_sbrk(ptrdiff_t incr);
void *_sbrk(ptrdiff_t incr) {
    (void)incr;
    errno = ENOMEM;
    return (void *)-1;
}

int main(void);
int main(void) {
    port_init();
    er_device_init(&er_dev);
    er_device_run(&er_dev);
    return 0;
}
