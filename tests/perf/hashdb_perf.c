/*
 * hashdb_perf.c - in-process speed of the hash file, shaped like
 * `tchtest write PATH N` / `tchtest read PATH`: N records with 8-byte keys
 * and 8-byte values ("%08d"), written, then read back, one thread, open and
 * close included in each phase.  Not part of `make test`.
 *
 *   make build/libkura.a
 *   cc -std=c11 -D_GNU_SOURCE -O2 -pthread -Iinclude tests/perf/hashdb_perf.c \
 *      build/libkura.a -pthread -o build/hashdb_perf
 *   ./build/hashdb_perf /tmp/perf.kh 1000000 [#params] [none|interval|always] [klen vlen]
 *
 * With klen and vlen, keys are "%0<klen>ld" and values vlen bytes (e.g. the
 * issue's scale check: 10000000 records, klen 20, vlen 150).
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "kura/store.h"

static double now_s(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + ts.tv_nsec / 1e9;
}

static int read_fn(void *arg, const kura_item *it)
{
    *(size_t *)arg += it->vlen;
    return 0;
}

int main(int argc, char **argv)
{
    if (argc < 3) {
        fprintf(stderr, "usage: %s PATH.kh N [#params] [none|interval|always]\n", argv[0]);
        return 2;
    }
    long n = atol(argv[2]);
    char name[1024], err[512];
    snprintf(name, sizeof(name), "%s%s", argv[1], argc > 3 ? argv[3] : "");
    kura_store_config cfg = { .item_size_max = KURA_ITEM_SIZE_MAX_DEFAULT };
    if (argc > 4)
        cfg.sync_mode = !strcmp(argv[4], "always") ? KURA_SYNC_ALWAYS
                      : !strcmp(argv[4], "interval") ? KURA_SYNC_INTERVAL : KURA_SYNC_NONE;
    kura_clock clk = { .now = time(NULL) };
    kura_store *s;
    char key[300];
    int klen = argc > 6 ? atoi(argv[5]) : 8;
    size_t vlen = argc > 6 ? (size_t)atol(argv[6]) : 8;
    char *val = malloc(vlen + 16);
    memset(val, 'v', vlen + 16);

    double t0 = now_s();
    if (kura_store_open(name, &cfg, &s, err, sizeof(err))) {
        fprintf(stderr, "%s\n", err);
        return 1;
    }
    for (long i = 1; i <= n; i++) {
        snprintf(key, sizeof(key), "%0*ld", klen, i);
        if (vlen == 8)
            memcpy(val, key, 8);
        kura_item it = { .key = key, .klen = (size_t)klen, .val = val, .vlen = vlen,
                         .cas = (uint64_t)i };
        if (kura_store_put(s, &it, KURA_PUT_ANY, 0, &clk) != KURA_OK) {
            fprintf(stderr, "put failed\n");
            return 1;
        }
    }
    double tw = now_s();
    kura_store_close(s);
    double t1 = now_s();
    if (kura_store_open(name, &cfg, &s, err, sizeof(err))) {
        fprintf(stderr, "%s\n", err);
        return 1;
    }
    double to = now_s();
    size_t bytes = 0;
    for (long i = 1; i <= n; i++) {
        snprintf(key, sizeof(key), "%0*ld", klen, i);
        if (s->ops->get(s, key, (size_t)klen, &clk, read_fn, &bytes) != KURA_OK) {
            fprintf(stderr, "get failed\n");
            return 1;
        }
    }
    double tr = now_s();
    kura_store_close(s);
    double t2 = now_s();
    free(val);
    printf("write %ld: %.3f s (%.0f/s)   read %ld: %.3f s (%.0f/s)\n", n, t1 - t0,
           n / (t1 - t0), n, t2 - t1, n / (t2 - t1));
    printf("  (puts %.3f s, close %.3f s; open %.3f s, gets %.3f s, close %.3f s)\n",
           tw - t0, t1 - tw, to - t1, tr - to, t2 - tr);
    return 0;
}
