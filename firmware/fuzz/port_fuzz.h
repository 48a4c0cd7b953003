#ifndef PORT_FUZZ_H
#define PORT_FUZZ_H
#include <setjmp.h>
#include <stddef.h>
#include <stdint.h>
extern uint8_t fz_flash[];
extern const uint8_t *fz_in;
extern size_t fz_in_len, fz_in_pos, fz_out_len;
extern uint32_t fz_ms;
extern jmp_buf fz_jump;
#endif
