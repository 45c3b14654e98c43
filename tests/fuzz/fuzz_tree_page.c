/*
 * fuzz_tree_page.c - the B+ tree's page decoding (src/store/tree/tree_page.c):
 * pg_verify, which every page read from the file goes through (checksum,
 * type, number, slots and cells inside the page), and then what the tree
 * does with a page that passed: every cell's key and fields (leaf cells:
 * varints, inline or overflow values; branch cells: child numbers) and a
 * binary search.  The property: a page pg_verify accepts is safe to read.
 *
 * Input: a flags byte, then a page (zero-padded or cut to 4096 bytes, the
 * smallest page size).  With FUZZ_FIX_CRC the page is sealed (pg_seal, its
 * checksum computed) so that mutations reach the shape checks and cells.
 * The private page API (tree_int.h) is linked from libkura.a.  Reading
 * whole files (meta pages, compressed pages, the free list) is
 * fuzz_tree_wal.c's open; this target is the page decoder alone, fast.
 */
#include <stdlib.h>
#include <string.h>

#include "../../src/store/tree/tree_int.h"
#include "fuzz.h"

#define PSIZ 4096

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    if (size < 1)
        return 0;
    unsigned char *d = calloc(1, PSIZ);
    if (!d)
        abort();
    memcpy(d, data + 1, size - 1 < PSIZ ? size - 1 : PSIZ);
    if (data[0] & FUZZ_FIX_CRC)
        pg_seal(d, PSIZ);
    uint64_t pgno = bt_get64(d + 8);
    int type = pg_type(d);
    if (pg_verify(d, PSIZ, pgno, 0) == KURA_OK && (type == 2 || type == 3)) {
        unsigned n = pg_n(d);
        size_t sum = 0;
        for (unsigned i = 0; i < n; i++) {
            const unsigned char *c = pg_ccell(d, i);
            const char *key;
            size_t klen;
            pg_cell_key(c, type, &key, &klen);
            for (size_t k = 0; k < klen; k++)
                sum += (unsigned char)key[k];
            sum += pg_cell_len(type, c);
            if (type == 3) {
                bt_cell cell;
                pg_leaf_decode(c, &cell);
                if (!cell.ovf)
                    for (uint32_t k = 0; k < cell.vlen; k++)
                        sum += cell.val[k];
            } else {
                sum += pg_child(d, i);
            }
        }
        if (type == 2)
            sum += pg_child(d, n);
        bool found;
        const char *probe = size > 9 ? (const char *)data + size - 8 : "k";
        if (pg_search(d, probe, size > 9 ? 8 : 1, &found) > n)
            abort();
        (void)sum;
    }
    free(d);
    return 0;
}
