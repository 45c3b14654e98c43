/*
 * tree_pzcomp.c - compressed leaf and branch pages: the B+ tree's
 * #zcomp=lzo|zlib|bz2 for pages (docs/formats.md, "Compression"), and the
 * one way a page is read from the file.
 *
 * Transparent page compression with hole punching, as InnoDB does it: a
 * page keeps its fixed-size slot and its number, so the allocator, the
 * free list, the meta pages and every caller are unchanged; at its
 * checkpoint a leaf or branch page is compressed (the codec module's block
 * form, include/kura/codec.h, the interface tree_zcomp.c uses for runs)
 * into the start of its own slot, and the rest of the slot is given back
 * to the file system with a punched hole (kio's punch), so the file takes
 * fewer blocks.  Only when that frees at least one file-system block
 * (st_blksize): a page that would still fill its blocks is written as it
 * is.  The cache holds pages decompressed, so search, insert, split and
 * merge never see the compressed form.
 *
 * On disk, a compressed page's slot starts with a 40-byte header:
 *   0 crc32c of bytes 4 .. 40+stored | 4 type (2, 3) | 5 codec (1..3) |
 *   6 n | 8 pgno | 16 txn | 24 stored bytes (u32) | 28 the page size (u32) |
 *   32 zero (8)
 * then the stored bytes: the plain page's bytes 24..psiz (link, upper,
 * used, slots, cells) compressed.  Bytes 4..23 are the plain page's own, so
 * the plain page is that header's first 24 bytes (codec byte 0) followed
 * by the decompressed bytes.  The checksum covers only what was written:
 * the stale or punched bytes after it in the slot never matter.
 *
 * Punching is never needed for correctness: the slot written is a page
 * made in this checkpoint, at a number no durable meta page reaches
 * (copy-on-write), so a crash before, during or after the write or the
 * punch leaves the durable tree as it was.  A file system that cannot
 * punch (EOPNOTSUPP) is remembered and not asked again; any other failure
 * is counted and ignored: the page is written, only the space is not
 * saved.  Neither is a sync error.
 */
#include <errno.h>
#include <stdio.h>
#include <string.h>

#include "kura/codec.h"
#include "kura/crc32c.h"
#include "kura/tlbuf.h"
#include "tree_int.h"

#define PZ_PLAIN_AT 24                  /* where the compressed part of a page starts */

static size_t round_up(size_t x, size_t b)
{
    return (x + b - 1) / b * b;
}

size_t bt_pz_out_size(btree *bt)
{
    if (!bt->zcomp)
        return 0;
    return BT_HDR + codec_bound((kura_codec)bt->zcomp, bt->psiz - PZ_PLAIN_AT);
}

/* a page the checkpoint may store compressed */
static bool packable(btree *bt, const unsigned char *d)
{
    int t = pg_type(d);
    return bt->zcomp && bt->pz_out && (t == BT_LEAF || t == BT_BRANCH) &&
           2 * bt->blksize <= bt->psiz;        /* else no block could be freed */
}

void bt_pz_prep(btree *bt, unsigned char *d)
{
    if (!packable(bt, d))
        return;
    /* the gap between the slots and the cells holds stale bytes nobody
     * reads: zeros compress better (the caller seals the page after) */
    size_t lo = BT_HDR + 2 * (size_t)pg_n(d), hi = bt_get32(d + 32);
    if (lo < hi && hi <= bt->psiz)
        memset(d + lo, 0, hi - lo);
}

size_t bt_pz_pack(btree *bt, const unsigned char *d, const unsigned char **out)
{
    if (!packable(bt, d))
        return 0;
    size_t psiz = bt->psiz, blk = bt->blksize;
    size_t z = 0;
    unsigned char *o = bt->pz_out;
    if (codec_compress((kura_codec)bt->zcomp, d + PZ_PLAIN_AT, psiz - PZ_PLAIN_AT, o + BT_HDR,
                       bt_pz_out_size(bt) - BT_HDR, &z) != KURA_OK ||
        round_up(BT_HDR + z, blk) + blk > psiz)
        return 0;
    memcpy(o, d, PZ_PLAIN_AT);
    o[5] = (unsigned char)bt->zcomp;
    bt_put32(o + 24, (uint32_t)z);
    bt_put32(o + 28, (uint32_t)psiz);
    memset(o + 32, 0, BT_HDR - 32);
    bt_put32(o, crc32c_update(0, o + 4, BT_HDR - 4 + z));
    *out = o;
    return BT_HDR + z;
}

void bt_pz_written(btree *bt, uint64_t pgno, size_t written, off_t file_end)
{
    size_t kept = round_up(written, bt->blksize);
    atomic_fetch_add_explicit(&bt->zcomp_pages, 1, memory_order_relaxed);
    if (bt->punch_off || kept >= bt->psiz)
        return;
    off_t off = (off_t)(pgno * bt->psiz + kept), len = (off_t)(bt->psiz - kept);
    if (file_end >= 0 && (off_t)(pgno * bt->psiz) >= file_end) {
        /* a slot past the file's old end: nothing was ever written after
         * the stored bytes, so no punch (which, on a file system mounted
         * with discard, waits for the device) */
        atomic_fetch_add_explicit(&bt->zcomp_page_saved, (uint64_t)len, memory_order_relaxed);
        return;
    }
    if (bt->io->punch(bt->io, bt->fd, off, len) == 0) {
        atomic_fetch_add_explicit(&bt->zcomp_page_saved, (uint64_t)len, memory_order_relaxed);
    } else if (errno == EOPNOTSUPP || errno == ENOSYS) {
        bt->punch_off = true;
        bt_log(bt, KURA_LOG_INFO, "%s/tree: the file system does not punch holes: compressed "
               "pages take their whole slot", bt->dir);
    } else {
        atomic_fetch_add_explicit(&bt->punch_errors, 1, memory_order_relaxed);
    }
}

/* Reads n bytes at off; what lies past the file's end reads as zeros (a
 * compressed page at the file's end wrote nothing after its stored
 * bytes).  0, or KURA_EIO. */
static int read_slot(btree *bt, int fd, unsigned char *buf, size_t n, off_t off)
{
    size_t got = 0;
    while (got < n) {
        ssize_t r = bt->io->pread(bt->io, fd, buf + got, n - got, off + (off_t)got);
        if (r < 0 && errno == EINTR)
            continue;
        if (r < 0)
            return KURA_EIO;
        if (r == 0) {
            memset(buf + got, 0, n - got);
            break;
        }
        got += (size_t)r;
    }
    return KURA_OK;
}

/* A compressed page in d (its slot as read) made the plain page (its
 * checksum field left stale: the stored bytes' own checksum held, and the
 * page is sealed again when written); KURA_ECORRUPT if its header,
 * checksum or bytes do not hold. */
static int unpack(btree *bt, unsigned char *d)
{
    size_t psiz = bt->psiz, z = bt_get32(d + 24);
    int codec = d[5];
    if (codec >= KURA_CODEC_COUNT || bt_get32(d + 28) != psiz || z == 0 ||
        z > psiz - BT_HDR || bt_get64(d + 32) != 0 ||
        bt_get32(d) != crc32c_update(0, d + 4, BT_HDR - 4 + z))
        return KURA_ECORRUPT;
    unsigned char *in = tlbuf(TLB_TREE_PAGE, psiz);   /* the thread's own */
    if (!in)
        return KURA_ENOMEM;
    memcpy(in, d, BT_HDR + z);
    if (codec_decompress((kura_codec)codec, in + BT_HDR, z, d + PZ_PLAIN_AT,
                         psiz - PZ_PLAIN_AT) != KURA_OK)
        return KURA_ECORRUPT;
    d[5] = 0;
    return KURA_OK;
}

int bt_page_load(btree *bt, int fd, uint64_t pgno, int type, unsigned char *d)
{
    int rc = read_slot(bt, fd, d, bt->psiz, (off_t)(pgno * bt->psiz));
    if (rc)
        return rc;
    if ((pg_type(d) == BT_LEAF || pg_type(d) == BT_BRANCH) && d[5]) {
        /* checked by its own checksum: the plain page's is not computed
         * (two CRCs of 8-32 KiB per miss saved) */
        if ((rc = unpack(bt, d)))
            return rc;
        return pg_verify_shape(d, bt->psiz, pgno, type);
    }
    return pg_verify(d, bt->psiz, pgno, type);
}
