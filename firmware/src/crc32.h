#ifndef ER_CRC32_H
#define ER_CRC32_H
#include <stddef.h>
#include <stdint.h>
/* CRC-32/IEEE (zlib's crc32): start with crc = 0, chain calls over consecutive pieces. */
uint32_t er_crc32(uint32_t crc, const uint8_t *data, size_t n);
#endif
