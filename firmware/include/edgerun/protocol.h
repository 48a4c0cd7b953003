/*
 * edgerun serial protocol: THE canonical definition (edgerun/deploy/protocol.py mirrors it and
 * tests/firmware/test_firmware_protocol.py checks every ER_* #define below against the Python side).
 *
 * Frame (all integers little-endian):
 *
 *   +------+------+-----+-------+---------+---------+-------------+-----------------+
 *   | 0xA5 | 0x5A | cmd | flags | seq u16 | len u16 | payload[len] | crc32 u32       |
 *   +------+------+-----+-------+---------+---------+-------------+-----------------+
 *   crc32 (IEEE 802.3, the zlib one) covers cmd..payload (everything after the two SOF bytes).
 *
 * The host sends requests; the device answers each with one response frame carrying the same
 * cmd and seq and ER_FLAG_RESPONSE (plus ER_FLAG_ERROR, payload = u16 code + UTF-8 message, when
 * the request failed). A request that arrives again with the seq of the last one answered is
 * not executed again: the device resends the cached answer (a lost response costs one resend).
 * Bytes that do not form a frame with a good CRC are skipped; the parser re-synchronises on the
 * next SOF, and a partial frame is dropped after ER_INTERBYTE_TIMEOUT_MS of silence.
 *
 * Transfer: BEGIN (size, sha256, slot) -> DATA (offset-addressed chunks, stop-and-wait) ->
 * END (sha256 verified on the device) -> COMMIT (the model is loaded and checked, then the
 * active-slot record is switched atomically). STATUS reports what each slot holds, so a host
 * resumes an interrupted transfer from `received` or skips it when the hash is already there.
 */
#ifndef EDGERUN_PROTOCOL_H
#define EDGERUN_PROTOCOL_H

#define ER_PROTO_VERSION 1
#define ER_FW_VERSION_MAJOR 0
#define ER_FW_VERSION_MINOR 1

/* framing */
#define ER_SOF0 0xA5
#define ER_SOF1 0x5A
#define ER_HEADER_SIZE 8          /* SOF0 SOF1 cmd flags seq(2) len(2) */
#define ER_CRC_SIZE 4
#define ER_FRAME_OVERHEAD 12      /* header + crc */
#define ER_MAX_PAYLOAD 4096       /* the largest payload any device may announce */
#define ER_MIN_PAYLOAD 256        /* every device accepts at least this */
#define ER_INTERBYTE_TIMEOUT_MS 250

/* flags */
#define ER_FLAG_RESPONSE 0x01
#define ER_FLAG_ERROR 0x02

/* commands */
#define ER_CMD_HELLO 0x01       /* -> hello record */
#define ER_CMD_STATUS 0x02      /* -> status record: active slot, per slot state/size/received/sha */
#define ER_CMD_BEGIN 0x03       /* u32 size, u8 sha256[32], u8 slot -> u8 slot, u8 resumed, u16 0, u32 received */
#define ER_CMD_DATA 0x04        /* u32 offset, bytes -> u32 received */
#define ER_CMD_END 0x05         /* u8 sha256[32] -> u8 sha256[32] (device's hash of the slot) */
#define ER_CMD_COMMIT 0x06      /* u8 slot, u8 sha256[32] -> u8 active, u8 0[3], u32 arena bytes */
#define ER_CMD_ROLLBACK 0x07    /* -> u8 active, u8 0[3], u32 arena bytes */
#define ER_CMD_MODEL_INFO 0x08  /* -> model info header + one io record per input then output */
#define ER_CMD_SET_INPUT 0x09   /* u8 index, u8 0[3], u32 offset, bytes -> u32 bytes written */
#define ER_CMD_INVOKE 0x0A      /* -> u32 elapsed microseconds, u32 elapsed ticks */
#define ER_CMD_GET_OUTPUT 0x0B  /* u8 index, u8 0[3], u32 offset, u16 length -> bytes */
#define ER_CMD_RESET 0x0C       /* -> empty, then the device resets */
#define ER_CMD_EXIT 0x0D        /* u8 code -> empty, then the firmware exits (posix, semihosting) */
#define ER_CMD_PROFILE 0x0E     /* u32 first op -> one INVOKE timing each op: u32 elapsed us, u32 ops in
                                   the model, u32 first, u16 count, u16 0, then count records
                                   (u16 builtin op code, u16 0, u32 us) for ops first..first+count-1 */
#define ER_CMD_EEMBC 0x0F       /* [u8 mode, u8 0[3], u32 baud (0: keep)] or empty (performance, same
                                   baud) -> empty, then the UART (at that baud) speaks the MLPerf Tiny /
                                   EEMBC text protocol (src/eembc.c) until its command "edgerun%" */
#define ER_EEMBC_REQUEST_SIZE 8
#define ER_EEMBC_PERFORMANCE 0  /* m-lap-us timestamps on the UART */
#define ER_EEMBC_ENERGY 1       /* timestamps are pulses on the timestamp line (port_timestamp_pin) */

/* error codes (payload of an ER_FLAG_ERROR response: u16 code, UTF-8 message) */
#define ER_OK 0
#define ER_ERR_BAD_FRAME 1
#define ER_ERR_UNKNOWN_CMD 2
#define ER_ERR_BAD_LENGTH 3
#define ER_ERR_NO_TRANSFER 4
#define ER_ERR_BAD_OFFSET 5
#define ER_ERR_TOO_LARGE 6
#define ER_ERR_HASH_MISMATCH 7
#define ER_ERR_NOT_VERIFIED 8
#define ER_ERR_SLOT_ACTIVE 9
#define ER_ERR_NO_MODEL 10
#define ER_ERR_MODEL_INVALID 11
#define ER_ERR_UNSUPPORTED_OP 12
#define ER_ERR_ARENA_TOO_SMALL 13
#define ER_ERR_BAD_INPUT 14
#define ER_ERR_INVOKE_FAILED 15
#define ER_ERR_FLASH 16
#define ER_ERR_NO_ROLLBACK 17
#define ER_ERR_BAD_SLOT 18

/* slots */
#define ER_SLOT_COUNT 2
#define ER_SLOT_NONE 0xFF         /* BEGIN: "the inactive slot"; STATUS: no active model */
#define ER_SLOT_EMPTY 0
#define ER_SLOT_RECEIVING 1
#define ER_SLOT_VERIFIED 2        /* complete and hash-checked; COMMIT may activate it */
#define ER_SHA256_SIZE 32

/* record sizes (fixed layouts; field order as documented in protocol.py) */
#define ER_HELLO_SIZE 48          /* u16 proto, u16 fw, u16 max_payload, u16 0, u32 arena, u32 slot,
                                     u32 flash, u8 active, u8 slots, u16 0, char board[24] */
#define ER_BOARD_NAME_SIZE 24
#define ER_STATUS_HEADER_SIZE 4   /* u8 active, u8 0[3] */
#define ER_STATUS_SLOT_SIZE 44    /* u8 state, u8 0[3], u32 size, u32 received, u8 sha256[32] */
#define ER_BEGIN_SIZE 37
#define ER_BEGIN_REPLY_SIZE 8
#define ER_DATA_HEADER_SIZE 4
#define ER_COMMIT_SIZE 33
#define ER_ACTIVE_REPLY_SIZE 8
#define ER_MODEL_INFO_HEADER_SIZE 44  /* u8 n_in, u8 n_out, u16 0, u32 arena, u32 size, u8 sha[32] */
#define ER_IO_RECORD_SIZE 40          /* u8 type, u8 ndim, u16 0, u32 bytes, f32 scale, i32 zp, i32 dims[6] */
#define ER_MAX_DIMS 6
#define ER_MAX_IO 8
#define ER_IO_HEADER_SIZE 8           /* SET_INPUT: u8 index, u8 0[3], u32 offset */
#define ER_GET_OUTPUT_SIZE 10         /* u8 index, u8 0[3], u32 offset, u16 length */
#define ER_INVOKE_REPLY_SIZE 8
#define ER_PROFILE_SIZE 4             /* u32 first op */
#define ER_PROFILE_HEADER_SIZE 16     /* u32 us, u32 n_ops, u32 first, u16 count, u16 0 */
#define ER_PROFILE_RECORD_SIZE 8      /* u16 op, u16 0, u32 us */

/* tensor type codes in io records: TFLite TensorType values */
#define ER_TYPE_FLOAT32 0
#define ER_TYPE_INT32 2
#define ER_TYPE_UINT8 3
#define ER_TYPE_INT64 4
#define ER_TYPE_INT16 7
#define ER_TYPE_INT8 9

#endif /* EDGERUN_PROTOCOL_H */
