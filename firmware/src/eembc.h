/* The MLPerf Tiny / EEMBC device-under-test text protocol: an alternative mode of the UART, for
 * the benchmark's own runner. Commands end with '%'; every command is answered by its lines and
 * then "m-ready". Entered with the ER_CMD_EEMBC frame or at boot (-DER_EEMBC_BOOT=1); the
 * command "edgerun%" goes back to edgerun's framed protocol. */
#ifndef ER_EEMBC_H
#define ER_EEMBC_H
#include <stdint.h>

#define ER_EE_CMD_SIZE 1024 /* a command, "db " + hex included; longer ones are refused whole */

typedef struct {
    int active;
    char cmd[ER_EE_CMD_SIZE + 1];
    uint32_t pos;
    int overflow;
    uint32_t expect, loaded; /* db load N: bytes announced / received into input 0 */
} er_eembc;

struct er_device_s;
/* Enter the mode: prints the greeting lines and "m-ready". */
void er_eembc_enter(struct er_device_s *d);
/* One received byte in EEMBC mode. */
void er_eembc_byte(struct er_device_s *d, uint8_t c);
#endif
