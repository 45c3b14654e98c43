/*
 * crc32c.c - CRC-32C with a hardware path (SSE 4.2) and a table fallback.
 *
 * The choice is made once, on first use, with __builtin_cpu_supports; the
 * two paths give identical results (tests/unit/test_crc32c.c).  The
 * table and the choice are set up under pthread_once, so a thread that
 * uses them sees them whole: a plain "built yet?" flag, read without
 * ordering, could let a thread see the choice before the table behind it.
 */
#include <pthread.h>
#include <stdbool.h>
#include <string.h>

#include "kura/crc32c.h"

static uint32_t crc_table[256];

static void table_init(void)
{
    for (uint32_t i = 0; i < 256; i++) {
        uint32_t c = i;
        for (int k = 0; k < 8; k++)
            c = (c & 1) ? (c >> 1) ^ 0x82F63B78u : c >> 1;
        crc_table[i] = c;
    }
}

static uint32_t crc_sw(uint32_t crc, const unsigned char *p, size_t n)
{
    while (n--)
        crc = crc_table[(crc ^ *p++) & 0xff] ^ (crc >> 8);
    return crc;
}

#if defined(__x86_64__)
/* Three streams at once.  The crc32 instruction takes 3 cycles and starts
 * one a cycle, so one stream (each step waiting for the one before) runs
 * at a third of the speed the unit has.  A block of 3 x L bytes is three
 * streams of L bytes, a from the running value, b and c from 0, joined
 * by the CRC's linearity: crc(x, B) = crc(x, L zero bytes) ^ crc(0, B),
 * where "L zero bytes from x" is linear in x, a 32 x 32 matrix over GF(2)
 * kept as four tables of a byte each (shift_tab, made once at setup).
 * Same result as one stream, bit for bit (test_crc32c). */
#define CRC_LONG  1024          /* bytes of a stream in a long block */
#define CRC_SHORT 128           /* ... in a short one (values of 384 B to 3 KB) */
static uint32_t shift_long[4][256], shift_short[4][256];

static inline uint32_t crc_shift(const uint32_t t[4][256], uint32_t c)
{
    return t[0][c & 0xff] ^ t[1][(c >> 8) & 0xff] ^ t[2][(c >> 16) & 0xff] ^ t[3][c >> 24];
}

__attribute__((target("sse4.2")))
static inline uint64_t crc_hw3(uint64_t c, const unsigned char **pp, size_t *np, size_t blk,
                               const uint32_t t[4][256])
{
    const unsigned char *p = *pp;
    size_t n = *np;
    while (n >= 3 * blk) {
        uint64_t a = c, b = 0, d = 0;
        for (size_t i = 0; i < blk; i += 8) {
            uint64_t x, y, z;
            memcpy(&x, p + i, 8);
            memcpy(&y, p + blk + i, 8);
            memcpy(&z, p + 2 * blk + i, 8);
            a = __builtin_ia32_crc32di(a, x);
            b = __builtin_ia32_crc32di(b, y);
            d = __builtin_ia32_crc32di(d, z);
        }
        c = crc_shift(t, crc_shift(t, (uint32_t)a) ^ (uint32_t)b) ^ (uint32_t)d;
        p += 3 * blk;
        n -= 3 * blk;
    }
    *pp = p;
    *np = n;
    return c;
}

__attribute__((target("sse4.2")))
static uint32_t crc_hw(uint32_t crc, const unsigned char *p, size_t n)
{
    /* Unaligned 8-byte loads cost nothing extra on x86: no byte steps to
     * reach alignment (records and fields sit at any offset), and the
     * tail in 4, 2, 1-byte steps. */
    uint64_t c = crc;
    if (n >= 3 * CRC_SHORT) {
        c = crc_hw3(c, &p, &n, CRC_LONG, shift_long);
        c = crc_hw3(c, &p, &n, CRC_SHORT, shift_short);
    }
    while (n >= 8) {
        uint64_t v;
        memcpy(&v, p, 8);
        c = __builtin_ia32_crc32di(c, v);
        p += 8;
        n -= 8;
    }
    if (n & 4) {
        uint32_t v;
        memcpy(&v, p, 4);
        c = __builtin_ia32_crc32si((uint32_t)c, v);
        p += 4;
    }
    if (n & 2) {
        uint16_t v;
        memcpy(&v, p, 2);
        c = __builtin_ia32_crc32hi((uint32_t)c, v);
        p += 2;
    }
    if (n & 1)
        c = __builtin_ia32_crc32qi((uint32_t)c, *p);
    return (uint32_t)c;
}

/* The tables of "blk zero bytes from c": the image of each of c's 32
 * bits (the table path over zeros), then every byte's as the sum of its
 * bits' images. */
static void shift_init(uint32_t t[4][256], size_t blk)
{
    static const unsigned char zeros[CRC_LONG];
    uint32_t bit[32];
    for (int i = 0; i < 32; i++)
        bit[i] = crc_sw(1u << i, zeros, blk);
    for (int k = 0; k < 4; k++)
        for (int b = 0; b < 256; b++) {
            uint32_t v = 0;
            for (int j = 0; j < 8; j++)
                if (b >> j & 1)
                    v ^= bit[8 * k + j];
            t[k][b] = v;
        }
}
#endif

/* 1 software, 2 hardware; set once by crc_setup, under setup_once. */
static int crc_mode;
static pthread_once_t setup_once = PTHREAD_ONCE_INIT;

static void crc_setup(void)
{
    table_init();
#if defined(__x86_64__)
    __builtin_cpu_init();
    crc_mode = __builtin_cpu_supports("sse4.2") ? 2 : 1;
    shift_init(shift_long, CRC_LONG);
    shift_init(shift_short, CRC_SHORT);
#else
    crc_mode = 1;
#endif
}

uint32_t crc32c_sw_update(uint32_t crc, const void *buf, size_t len);

uint32_t crc32c_sw_update(uint32_t crc, const void *buf, size_t len)
{
    pthread_once(&setup_once, crc_setup);
    return ~crc_sw(~crc, buf, len);
}

uint32_t crc32c_update(uint32_t crc, const void *buf, size_t len)
{
    pthread_once(&setup_once, crc_setup);
#if defined(__x86_64__)
    if (crc_mode == 2)
        return ~crc_hw(~crc, buf, len);
#endif
    return ~crc_sw(~crc, buf, len);
}
