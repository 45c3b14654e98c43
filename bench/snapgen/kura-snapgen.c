/*
 * kura-snapgen.c - writes a snapshot of N items shaped like kura-bench's
 * (bench/kura-bench.c), without a server: keys "snapbench:key:<id>", 150-byte
 * values (10 hex digits of a version, 6 of the length, then 134 bytes of a
 * random alphanumeric pattern from an offset below 256), random 32-bit flags,
 * cas near the id, in a hash order as a hash file's walk gives them.  So that
 * the size of a 10-million-item snapshot, its speed and a restore's memory
 * can be measured in minutes rather than after a 10-million-set load.
 *
 *   kura-snapgen FILE ITEMS [VERSION [CODEC [FLAGS]]]
 *       VERSION 1 or 2; CODEC lzo; FLAGS random (kura-bench's) or zero
 *
 * FLAGS zero gives every item flags 0: what a store that keeps no client
 * flags holds for the same sets (Kyoto Tycoon's memcached plug-in keeps them
 * only with opts=f), so sizes can be set beside such a store's.
 *
 * The figures it gave are in docs/benchmarks.md ("Snapshots").
 */
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "kura/snapshot.h"

static uint64_t mix64(uint64_t z)
{
    z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ull;
    z = (z ^ (z >> 27)) * 0x94d049bb133111ebull;
    return z ^ (z >> 31);
}

int main(int argc, char **argv)
{
    if (argc < 3) {
        fprintf(stderr, "usage: kura-snapgen FILE ITEMS [VERSION [CODEC [random|zero]]]\n");
        return 2;
    }
    uint64_t n = strtoull(argv[2], NULL, 10);
    snap_info in = { .codec = KURA_CODEC_LZO, .version = argc > 3 ? (uint32_t)atoi(argv[3]) : 0 };
    if (argc > 4 && codec_by_name(argv[4], &in.codec)) {
        fprintf(stderr, "kura-snapgen: unknown codec %s\n", argv[4]);
        return 2;
    }
    bool zero_flags = false;
    if (argc > 5) {
        if (!strcmp(argv[5], "zero")) {
            zero_flags = true;
        } else if (strcmp(argv[5], "random")) {
            fprintf(stderr, "kura-snapgen: flags are random or zero, not %s\n", argv[5]);
            return 2;
        }
    }
    strcpy(in.backend, "hash");
    static const char al[] = "abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ0123456789";
    char pat[512];
    uint64_t s = 0x5eed;
    for (int i = 0; i < 512; i++) {
        s = mix64(s + 1);
        pat[i] = al[s % 62];
    }
    snap_writer *w;
    char err[256];
    if (snap_writer_open(argv[1], &in, 0, NULL, &w, err, sizeof(err))) {
        fprintf(stderr, "kura-snapgen: %s\n", err);
        return 1;
    }
    for (uint64_t i = 0; i < n; i++) {
        uint64_t id = (i * 0x9E3779B97F4A7C15ull) % n;     /* a hash order */
        uint64_t h = mix64(id * 31 + 7);
        char key[32], val[160];
        int kl = snprintf(key, sizeof(key), "snapbench:key:%llu", (unsigned long long)id);
        /* sets in key order from 16 connections: versions and cas follow
         * the id, give or take the connections' interleaving */
        snprintf(val, sizeof(val), "%010llx%06x", (unsigned long long)(0x1be3000000ull + id +
                                                                       (h & 15)), 150);
        memcpy(val + 16, pat + (h & 255), 134);
        kura_item it = { .key = key, .klen = (size_t)kl, .val = val, .vlen = 150,
                         .flags = zero_flags ? 0 : (uint32_t)(h >> 32), .cas = id + 1 + (h & 15) };
        if (snap_writer_add(w, &it)) {
            snap_writer_abort(w);
            fprintf(stderr, "kura-snapgen: cannot add an item\n");
            return 1;
        }
    }
    if (snap_writer_finish(w, 0, NULL, err, sizeof(err))) {
        fprintf(stderr, "kura-snapgen: %s\n", err);
        return 1;
    }
    return 0;
}
