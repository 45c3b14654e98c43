/*
 * crc32c.h - CRC-32C (Castagnoli), the checksum of every hash file record.
 *
 * Uses the SSE 4.2 crc32 instruction when the CPU has it, a table otherwise.
 * crc32c_update(0, p, n) is the CRC of p[0..n); feeding a buffer in pieces
 * gives the same result as feeding it whole.
 */
#ifndef KURA_CRC32C_H
#define KURA_CRC32C_H

#include <stddef.h>
#include <stdint.h>

uint32_t crc32c_update(uint32_t crc, const void *buf, size_t len);

#endif
