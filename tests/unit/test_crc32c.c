/*
 * test_crc32c.c - CRC-32C (src/util/crc32c.c): the check value, the
 * hardware and table paths agreeing, and a first use from many threads at
 * once (the table and the choice of path set up once, whole: under
 * ThreadSanitizer, make test-tsan, a setup that threads race through is a
 * reported race; here, every thread must get the right value).
 */
#include <pthread.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "kura/crc32c.h"
#include "unit.h"

uint32_t crc32c_sw_update(uint32_t crc, const void *buf, size_t len);

#define CHECK_VALUE 0xE3069283u         /* CRC-32C of "123456789" */
#define THREADS 8

static pthread_barrier_t start_line;

static void *first_use(void *arg)
{
    uint32_t *out = arg;
    pthread_barrier_wait(&start_line);
    /* half the threads take the table path first, half the chosen one */
    out[0] = (out[1] & 1) ? crc32c_sw_update(0, "123456789", 9)
                          : crc32c_update(0, "123456789", 9);
    return NULL;
}

static void test_first_use_from_threads(void)
{
    pthread_t t[THREADS];
    uint32_t res[THREADS][2];
    REQUIRE(pthread_barrier_init(&start_line, NULL, THREADS) == 0);
    for (int i = 0; i < THREADS; i++) {
        res[i][0] = 0;
        res[i][1] = (uint32_t)i;
        REQUIRE(pthread_create(&t[i], NULL, first_use, res[i]) == 0);
    }
    for (int i = 0; i < THREADS; i++)
        pthread_join(t[i], NULL);
    pthread_barrier_destroy(&start_line);
    for (int i = 0; i < THREADS; i++)
        CHECK_EQ_INT(res[i][0], CHECK_VALUE);
}

static void test_paths_agree(void)
{
    static unsigned char buf[70001];
    uint32_t seed = 12345;
    for (size_t i = 0; i < sizeof(buf); i++) {
        seed = seed * 1103515245u + 12345u;
        buf[i] = (unsigned char)(seed >> 16);
    }
    /* every length and misalignment up to a few words, then large ones */
    for (size_t off = 0; off < 8; off++)
        for (size_t n = 0; n + off <= 64; n++)
            CHECK_EQ_INT(crc32c_update(0, buf + off, n), crc32c_sw_update(0, buf + off, n));
    CHECK_EQ_INT(crc32c_update(7, buf, sizeof(buf)), crc32c_sw_update(7, buf, sizeof(buf)));
    /* the three-stream blocks (3 x 128 and 3 x 1024 bytes, crc32c.c):
     * lengths about their multiples and sums, at every misalignment, and
     * from a running value */
    static const size_t lens[] = { 383, 384, 385, 391, 392, 767, 768, 769, 1151, 1152,
                                   3071, 3072, 3073, 3079, 3455, 3456, 3457, 4096, 6143,
                                   6144, 6145, 6527, 6528, 9216, 9600, 20000, 24576,
                                   24577, 65536, 70000 };
    for (size_t i = 0; i < sizeof(lens) / sizeof(lens[0]); i++)
        for (size_t off = 0; off < 8 && lens[i] + off <= sizeof(buf); off++) {
            CHECK_EQ_INT(crc32c_update(0, buf + off, lens[i]),
                         crc32c_sw_update(0, buf + off, lens[i]));
            CHECK_EQ_INT(crc32c_update(0xdeadbeef, buf + off, lens[i]),
                         crc32c_sw_update(0xdeadbeef, buf + off, lens[i]));
        }
    for (int r = 0; r < 2000; r++) {    /* and any length, any offset */
        seed = seed * 1103515245u + 12345u;
        size_t off = (seed >> 8) % 64, n = (seed >> 12) % (sizeof(buf) - 64);
        CHECK_EQ_INT(crc32c_update(r, buf + off, n), crc32c_sw_update(r, buf + off, n));
    }
    /* incremental equals whole */
    uint32_t c = crc32c_update(0, buf, 1000);
    CHECK_EQ_INT(crc32c_update(c, buf + 1000, sizeof(buf) - 1000),
                 crc32c_update(0, buf, sizeof(buf)));
}

int main(void)
{
    RUN(test_first_use_from_threads);   /* first: the process has not used CRC yet */
    RUN(test_paths_agree);
    UNIT_DONE();
}
