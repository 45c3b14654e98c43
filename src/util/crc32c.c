/*
 * crc32c.c - CRC-32C with a hardware path (SSE 4.2) and a table fallback.
 *
 * The choice is made once, on first use, with __builtin_cpu_supports; the
 * two paths give identical results (tested in test_hashdb_crc).  The
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
__attribute__((target("sse4.2")))
static uint32_t crc_hw(uint32_t crc, const unsigned char *p, size_t n)
{
    /* Unaligned 8-byte loads cost nothing extra on x86, and each crc32
     * instruction waits for the one before: the fewest steps win, so no
     * byte steps to reach alignment (records and fields sit at any offset)
     * and the tail in 4, 2, 1-byte steps. */
    uint64_t c = crc;
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
