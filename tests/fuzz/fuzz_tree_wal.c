/*
 * fuzz_tree_wal.c - the B+ tree's write-ahead log as an open replays it
 * (src/store/tree/tree_wal.c over src/log/seglog.c): the segment header,
 * the record decoder (rec_decode: PUT, DEL, STATE, RUN), the cut of a torn
 * tail, and every record applied to the tree (inserts, splits, overflow
 * runs, removals), then every item read back and the structure checked.
 * A RUN record names a run of the tree file, which here is empty: replay's
 * first pass, the runs' checks and the log's end at a run that fails them
 * (seeds wal-run, wal-run-asis, from a kurad killed after large sets).
 *
 * Input: a flags byte, then a WAL segment file.  The tree file beside it is
 * a fresh empty tree made once per process (its meta pages point at
 * segment 1, offset 32), so that the input is the log alone and seeds stay
 * small.  The database db.kb is opened read only (FUZZ_RECOVER: with
 * -recover, which salvages and writes).  With FUZZ_FIX_CRC the segment's
 * id is set to 1 and its header CRC and every record's CRC (as far as the
 * records' lengths go) are repaired, so that mutations reach the replay.
 */
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "kura/bytes.h"
#include "kura/crc32c.h"
#include "kura/storecheck.h"
#include "../../src/store/tree/tree_int.h"
#include "fuzz.h"

#define FUZZ_RECOVER 2

static unsigned char *tmpl;
static size_t tmpl_len;

/* A fresh empty tree's file, made once. */
static void make_template(void)
{
    kura_store_config cfg = { .item_size_max = 1 << 20 };
    kura_store *s;
    char err[512];
    if (kura_store_open(fuzz_path("tmpl.kb#psiz=4096"), &cfg, &s, err, sizeof(err)) != KURA_OK) {
        fprintf(stderr, "fuzz_tree_wal: %s\n", err);
        abort();
    }
    kura_store_close(s);
    int fd = open(fuzz_path("tmpl.kb/tree"), O_RDONLY | O_CLOEXEC);
    struct stat st;
    if (fd < 0 || fstat(fd, &st) != 0 || !(tmpl = malloc((size_t)st.st_size)) ||
        read(fd, tmpl, (size_t)st.st_size) != st.st_size)
        abort();
    tmpl_len = (size_t)st.st_size;
    close(fd);
}

static void fix(unsigned char *p, size_t len)
{
    if (len < SL_SEG_HDR)
        return;
    put32(p + 12, 1);
    put32(p + 28, crc32c_update(0, p, 28));
    for (size_t off = SL_SEG_HDR; len - off >= BT_REC_HDR;) {
        /* a RUN record's body is its run's place, not its value */
        size_t body = p[off + 6] == BT_REC_RUN ? BT_RUN_DESC : get32(p + off + 8);
        size_t total = BT_REC_HDR + (size_t)p[off + 7] + body;
        if (total > len - off)
            break;
        uint32_t crc = crc32c_update(0, p + off + BT_REC_HDR, total - BT_REC_HDR);
        put32(p + off, crc32c_update(crc, p + off + 4, BT_REC_HDR - 4));
        off += total;
    }
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    if (size < 1)
        return 0;
    if (!tmpl)
        make_template();
    unsigned char *seg = fuzz_dup(data + 1, size - 1);
    size_t len = size - 1;
    if (data[0] & FUZZ_FIX_CRC)
        fix(seg, len);
    fuzz_clear();
    char name[64];
    snprintf(name, sizeof(name), "db.kb/%08x.seg", len >= 16 ? get32(seg + 12) : 1u);
    fuzz_write(name, seg, len);
    fuzz_write("db.kb/tree", tmpl, tmpl_len);
    free(seg);

    kura_store *s = fuzz_store_walk(fuzz_path("db.kb"), (data[0] & FUZZ_RECOVER) != 0);
    if (s) {
        uint64_t leaked;
        char err[512];
        btree_debug_check(s, &leaked, err, sizeof(err));
        kura_store_close(s);
    }
    return 0;
}
