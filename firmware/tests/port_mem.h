#ifndef PORT_MEM_H
#define PORT_MEM_H
#include <stdint.h>
extern uint8_t mem_flash[];
extern uint8_t uart_in[], uart_out[];
extern uint32_t uart_in_len, uart_in_pos, uart_out_len, fake_ms;
extern int flash_fail_after;
#endif
