/*
 * fuzz_hash.c - the hash file's decoders (src/store/hash/): a segment
 * file's header, its records (hd_rec_decode, versions 1 to 4, compressed
 * values) as the recovery scan and reads meet them, and the checkpoint
 * (header, entries of every version, LZO blocks, trailer) that an open
 * loads the index from, then replays the segment after it.
 *
 * Input: a flags byte, then a segment file, then (from the first
 * "KURAHCKP" on, if any) a checkpoint file; both go into a database
 * directory db.kh, the segment named after the id in its header, and the
 * database is opened read only (FUZZ_RECOVER: with -recover, which
 * salvages), every item read, hashdb_check run over it.  With FUZZ_FIX_CRC
 * the segment header's CRC, every record's CRC (as far as the records
 * decode) and the checkpoint trailer's CRC are repaired (the private
 * record codec, hashdb_int.h), so that mutations reach the fields.
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "kura/bytes.h"
#include "kura/crc32c.h"
#include "kura/storecheck.h"
#include "../../src/store/hash/hashdb_int.h"
#include "fuzz.h"

#define FUZZ_RECOVER 2

static void fix_segment(unsigned char *p, size_t len)
{
    if (len < HD_SEG_HDR)
        return;
    put32(p + 28, crc32c_update(0, p, 28));
    uint32_t version = get32(p + 8);
    size_t off = HD_SEG_HDR;
    hd_rec r;
    while (off < len && hd_rec_decode(p + off, len - off, version, &r) == 0) {
        uint64_t size = hd_rec_size(r.hlen, r.klen, r.vlen);
        if (size > len - off)
            break;
        uint32_t body = crc32c_update(0, p + off + r.hlen, r.klen + (size_t)r.vlen);
        put32(p + off, hd_rec_crc(p + off, r.hlen, body));
        off += (size_t)size;
    }
}

static void fix_checkpoint(unsigned char *p, size_t len)
{
    if (len >= 24)
        put32(p + len - 8, crc32c_update(0, p, len - 8));
}

static void done(void *arg, const char *line)
{
    (void)arg;
    (void)line;
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    if (size < 1)
        return 0;
    unsigned char *seg = fuzz_dup(data + 1, size - 1);
    size_t len = size - 1, seglen = len;
    unsigned char *ck = memmem(seg, len, HD_CKPT_MAGIC, 8);
    if (ck)
        seglen = (size_t)(ck - seg);
    if (data[0] & FUZZ_FIX_CRC) {
        fix_segment(seg, seglen);
        if (ck)
            fix_checkpoint(ck, len - seglen);
    }
    fuzz_clear();
    char name[64];
    snprintf(name, sizeof(name), "db.kh/%08x.seg", seglen >= 16 ? get32(seg + 12) : 1u);
    fuzz_write(name, seg, seglen);
    if (ck)
        fuzz_write("db.kh/checkpoint", ck, len - seglen);
    free(seg);

    /* the smallest index: one bucket a stripe (its size is not under test) */
    kura_store *s = fuzz_store_walk(fuzz_path("db.kh#bnum=1024"), (data[0] & FUZZ_RECOVER) != 0);
    if (s) {
        kura_check_report rep;
        kura_check_cb cb = { .damage = done };
        hashdb_check(s, &rep, &cb);
        kura_store_close(s);
    }
    return 0;
}
