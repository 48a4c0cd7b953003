/* The MLPerf Tiny / EEMBC device-under-test text protocol: an alternative mode of the UART, for
 * the benchmark's own runner (mlcommons/tiny benchmark/runner, EEMBC's ee_lib grammar). Commands
 * end with '%'; every command is answered by its lines and then "m-ready". Entered with the
 * ER_CMD_EEMBC frame (performance or energy mode, optionally at another baud rate) or at boot
 * (-DER_EEMBC_BOOT=1 performance, =2 energy at ER_EEMBC_ENERGY_BAUD); the command "edgerun%" goes
 * back to edgerun's framed protocol (and to the baud rate the mode was entered at). */
#ifndef ER_EEMBC_H
#define ER_EEMBC_H
#include <stdint.h>

#define ER_EE_CMD_SIZE 1024 /* a command, "db " + hex included; longer ones are refused whole */
#ifndef ER_EEMBC_ENERGY_BAUD
#define ER_EEMBC_ENERGY_BAUD 9600u /* the reference DUTs' energy-mode rate (the runner's devices.yaml) */
#endif
#ifndef ER_UART_BAUD
#define ER_UART_BAUD 115200u /* the rate the UART starts at (edgerun's DEFAULT_BAUD) */
#endif

enum { ER_EE_DB_RAW = 0, ER_EE_DB_U8 = 1 }; /* how 1-byte db data reach an int8 input (db format) */

typedef struct {
    int active, energy, db_format;
    char cmd[ER_EE_CMD_SIZE + 1];
    uint32_t pos;
    int overflow;
    uint32_t expect, loaded; /* db load N: bytes announced / received */
    int as_float;            /* db load N with N = 4 x input 0's elements: float32 values, quantized */
    uint8_t fbuf[4];         /* the float32 being assembled */
    uint8_t *stage;          /* input 0's loaded bytes, kept in the free arena between the activations
                                and the tables: copied in before each inference that needs them */
    int refill;              /* the planner reuses input 0's memory: copy before every inference */
    uint32_t entry_baud;     /* the rate "edgerun%" returns to */
    uint32_t pending_mode, pending_baud; /* from the EEMBC frame, applied once its reply is out */
} er_eembc;

struct er_device_s;
/* Enter the mode (ER_EEMBC_PERFORMANCE or ER_EEMBC_ENERGY, protocol.h), switching the UART to `baud` first when
 * non-zero: prints "m-timestamp-mode-...", "m-init-done" and "m-ready" (at the new rate). */
void er_eembc_enter(struct er_device_s *d, uint32_t mode, uint32_t baud);
/* One received byte in EEMBC mode. */
void er_eembc_byte(struct er_device_s *d, uint8_t c);
/* The UART rate the firmware set last (ER_UART_BAUD until a mode switch). */
uint32_t er_eembc_current_baud(void);
#endif
