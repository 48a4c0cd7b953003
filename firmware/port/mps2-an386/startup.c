/* mps2 startup (AN386, AN500, AN505): vector table, reset handler (copy .data, zero .bss, enable
 * the FPU). */
#include <stdint.h>

#include "config.h" /* board.h of the board being built (through -I; a quoted "board.h" here would find AN386's) */

extern uint32_t __data_load, __data_start, __data_end, __bss_start, __bss_end, __stack_top;
extern int main(void);
void Reset_Handler(void);
void Default_Handler(void);
void SysTick_Handler(void);
void UART0_RX_Handler(void);

#ifndef MPS2_NUM_IRQ
#define MPS2_NUM_IRQ 32
#endif
/* external interrupt n: the UART's receive handler for board.h's MPS2_UART0_RX_IRQ, else fatal */
#define IRQ(n) ((n) == MPS2_UART0_RX_IRQ ? UART0_RX_Handler : Default_Handler)
#define IRQ8(n) IRQ(n), IRQ(n + 1), IRQ(n + 2), IRQ(n + 3), IRQ(n + 4), IRQ(n + 5), IRQ(n + 6), IRQ(n + 7)
_Static_assert(MPS2_NUM_IRQ % 8 == 0 && MPS2_NUM_IRQ <= 64 && MPS2_UART0_RX_IRQ < MPS2_NUM_IRQ,
               "MPS2_NUM_IRQ: a multiple of 8, at most 64, above the UART's IRQ");

__attribute__((section(".vectors"), used, aligned(256))) static void (*const vectors[16 + MPS2_NUM_IRQ])(void) = {
    (void (*)(void))(&__stack_top),
    Reset_Handler,
    Default_Handler, /* NMI */
    Default_Handler, /* HardFault */
    Default_Handler, /* MemManage */
    Default_Handler, /* BusFault */
    Default_Handler, /* UsageFault */
    Default_Handler, /* SecureFault (ARMv8-M), reserved before */
    0, 0, 0,
    Default_Handler, /* SVC */
    Default_Handler, /* DebugMon */
    0,
    Default_Handler, /* PendSV */
    SysTick_Handler,
    IRQ8(0), IRQ8(8), IRQ8(16), IRQ8(24),
#if MPS2_NUM_IRQ > 32
    IRQ8(32), IRQ8(40), IRQ8(48), IRQ8(56),
#endif
};

void Reset_Handler(void) {
    /* FPU: full access to CP10 and CP11 before any float instruction runs */
    volatile uint32_t *cpacr = (volatile uint32_t *)0xE000ED88u;
    *cpacr |= 0xFu << 20;
    __asm volatile("dsb\n isb");
    uint32_t *src = &__data_load, *dst = &__data_start;
    while (dst < &__data_end) *dst++ = *src++;
    for (dst = &__bss_start; dst < &__bss_end;) *dst++ = 0;
    main();
    for (;;) {
    }
}

/* A fault is fatal: report through semihosting so a test fails loudly instead of hanging. */
void Default_Handler(void) {
    register uint32_t r0 __asm("r0") = 0x18;     /* SYS_EXIT */
    register uint32_t r1 __asm("r1") = 0x20023u; /* ADP_Stopped_InternalError: QEMU exits 1 */
    __asm volatile("bkpt 0xAB" : : "r"(r0), "r"(r1) : "memory");
    for (;;) {
    }
}
