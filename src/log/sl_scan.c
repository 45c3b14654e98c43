/*
 * sl_scan.c - reading a segment's records in order, each judged by the
 * user's check callback (seglog.h says why the framing is the user's).
 *
 * Used by the hash file's recovery (replay of the log tail, salvage) and
 * compaction, and meant for the update log's readers.  Reads go through a
 * window buffer filled with pread (no mmap, so an I/O error is an error
 * code, not a SIGBUS).  The check sees every byte the window holds from
 * the record's offset on, so a record that fits in the window is judged in
 * one call; a longer one makes it ask for more (SL_NEED_MORE).
 */
#include <errno.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "kura/crc32c.h"
#include "kura/seglog.h"
#include "kura/status.h"
#include "kura/testhooks.h"

#define WINDOW (1u << 20)

void sl_scan_init(sl_scan *sc, sl_log *log, const sl_seg *sg, size_t first)
{
    memset(sc, 0, sizeof(*sc));
    sc->io = log->cfg.io;
    sc->fd = sg->fd;
    sc->version = sg->version;
    sc->fsize = sg->size;
    sc->check = log->cfg.check;
    sc->first = first ? first : 1;
}

void sl_scan_done(sl_scan *sc)
{
    free(sc->buf);
    sc->buf = NULL;
    free(sc->pcrc);
    sc->pcrc = NULL;
    sc->pn = sc->pcap = 0;
}

void sl_scan_shed(sl_scan *sc)
{
    free(sc->buf);
    sc->buf = NULL;
    sc->cap = sc->len = 0;
    free(sc->pcrc);
    sc->pcrc = NULL;
    sc->pn = sc->pcap = 0;
}

/* Drops the window's bytes before off, keeping sl_scan_crc's table
 * usable: with a table, only up to the last prefix checksum at or before
 * off (so the window still begins at one), and that entry becomes the
 * table's first. */
static void drop_front(sl_scan *sc, uint64_t off)
{
    uint64_t to = off;
    if (sc->pn > 0) {
        uint64_t k = (off - sc->cbase) / SL_CRC_STEP;
        if (k >= sc->pn)
            sc->pn = 0;                 /* past the table: begun again when asked */
        else {
            memmove(sc->pcrc, sc->pcrc + k, (sc->pn - k) * sizeof(*sc->pcrc));
            sc->pn -= k;
            sc->cbase += k * SL_CRC_STEP;
            to = sc->cbase;
        }
    }
    size_t drop = (size_t)(to - sc->base);
    if (drop)                           /* (an empty window may have no buffer yet) */
        memmove(sc->buf, sc->buf + drop, sc->len - drop);
    sc->base = to;
    sc->len -= drop;
}

/* Makes [off, off+n) available; NULL with *rc set if not possible.
 *
 * Linear in the bytes scanned, whatever lengths the bytes claim: a scan
 * moves forward, so the bytes the window already holds from off on are
 * kept and only what lies past them is read (at least WINDOW more, so that
 * a resync asking for one byte more at each offset costs one read per
 * WINDOW, not one per offset).  The bytes before off are dropped (moved
 * down) only once they outnumber the ones kept, so the moves cost no more
 * than the scan's advance.  Every byte of the file is read once on a
 * forward scan; before, each offset whose garbage claimed a record longer
 * than the window read that record's length again from that offset,
 * quadratic in the segment's size (issue 20; test_seglog).  The buffer
 * holds at most about twice the longest length asked for plus WINDOW. */
static const unsigned char *window(sl_scan *sc, uint64_t off, size_t n, int *rc)
{
    if (off + n > sc->fsize) {
        *rc = KURA_ECORRUPT;
        return NULL;
    }
    if (off >= sc->base && off + n <= sc->base + sc->len)
        return sc->buf + (off - sc->base);
    uint64_t to = off + (n > WINDOW ? n : WINDOW);
    if (off >= sc->base && off <= sc->base + sc->len && !KURA_TEST_SWITCH(sl_scan_reread)) {
        size_t behind = (size_t)(off - sc->base), ahead = sc->len - behind;
        if (behind >= ahead)
            drop_front(sc, off);
        if (to < sc->base + sc->len + WINDOW)
            to = sc->base + sc->len + WINDOW;
    } else {
        sc->base = off;
        sc->len = 0;
        sc->pn = 0;
    }
    if (to > sc->fsize)
        to = sc->fsize;
    size_t total = (size_t)(to - sc->base);
    if (sc->cap < total) {
        size_t cap = sc->cap * 2 > total ? sc->cap * 2 : total;
        unsigned char *b = realloc(sc->buf, cap);
        if (!b) {
            *rc = KURA_ENOMEM;
            return NULL;
        }
        sc->buf = b;
        sc->cap = cap;
    }
    while (sc->len < total) {
        ssize_t r = sc->io->pread(sc->io, sc->fd, sc->buf + sc->len, total - sc->len,
                                  (off_t)(sc->base + sc->len));
        if (r < 0 && errno == EINTR)
            continue;
        if (r < 0) {
            sc->len = 0;
            sc->pn = 0;
            *rc = KURA_EIO;
            return NULL;
        }
        if (r == 0)
            break;
        sc->len += (size_t)r;
    }
    if (off + n > sc->base + sc->len) {
        *rc = KURA_ECORRUPT;
        return NULL;
    }
    return sc->buf + (off - sc->base);
}

/* The scan whose check is running on this thread (sl_scan_crc's window):
 * a check's signature stays the bytes alone, as its other callers need. */
static _Thread_local sl_scan *checking;

int sl_scan_rec(sl_scan *sc, uint64_t off, void *arg, const unsigned char **p, size_t *len)
{
    int rc = KURA_OK;
    if (off >= sc->fsize)
        return 1;
    /* the first bytes the check needs, or what the file has left */
    size_t want = sc->fsize - off < sc->first ? (size_t)(sc->fsize - off) : sc->first;
    for (int round = 0; round < 2; round++) {
        const unsigned char *h = window(sc, off, want, &rc);
        if (!h)
            return rc;
        size_t avail = (size_t)(sc->base + sc->len - off), need = 0;
        checking = sc;
        long long r = sc->check(arg, h, avail, sc->version, &need);
        checking = NULL;
        if (r > 0 && (size_t)r <= avail) {
            *p = h;
            *len = (size_t)r;
            return KURA_OK;
        }
        if (r != SL_NEED_MORE || need <= avail || off + need > sc->fsize)
            return KURA_ECORRUPT;
        want = need;
    }
    return KURA_ECORRUPT;       /* asked for more twice: not a record */
}

uint64_t sl_scan_resync(sl_scan *sc, uint64_t off, void *arg)
{
    const unsigned char *p;
    size_t len;
    for (uint64_t o = off + 1; o < sc->fsize; o++) {
        int rc = sl_scan_rec(sc, o, arg, &p, &len);
        if (rc == KURA_OK)
            return o;
        if (rc == KURA_EIO)     /* skip the unreadable window */
            o += WINDOW - 1;
    }
    return sc->fsize;
}

/* ---- sl_scan_crc: a range's CRC from prefix checksums ------------------
 *
 * With P(x) the CRC of the bytes from the table's start up to x, the CRC
 * of [a, b) is P(b) ^ P(a) * x^(8 (b - a)) mod the polynomial (the rule
 * zlib's crc32_combine is built on, conditioning included).  P at an
 * entry is kept; between entries it is at most SL_CRC_STEP - 1 bytes more.
 * The multiplications are zlib's multmodp and x2nmodp for CRC-32C's
 * reflected polynomial. */
#define CRC32C_POLY 0x82f63b78u

static uint32_t multmodp(uint32_t a, uint32_t b)
{
    uint32_t m = 1u << 31, p = 0;
    for (;;) {
        if (a & m) {
            p ^= b;
            if ((a & (m - 1)) == 0)
                break;
        }
        m >>= 1;
        b = b & 1 ? (b >> 1) ^ CRC32C_POLY : b >> 1;
    }
    return p;
}

/* crc times x^(8 n): the CRC of the same bytes followed by n more, less
 * the CRC of those n bytes alone. */
static uint32_t crc_shift(sl_scan *sc, uint32_t crc, uint64_t n)
{
    if (sc->x2n[0] == 0) {
        uint32_t p = 1u << 30;          /* x^1 */
        for (int k = 0; k < 64; k++) {
            if (k >= 3)
                sc->x2n[k - 3] = p;     /* x^(2^k) = x^(8 * 2^(k-3)) */
            p = multmodp(p, p);
        }
        for (int k = 61; k < 64; k++) { /* past 2^63 bytes: never used */
            sc->x2n[k] = p;
            p = multmodp(p, p);
        }
    }
    for (int k = 0; n; n >>= 1, k++)
        if (n & 1)
            crc = multmodp(sc->x2n[k], crc);
    return crc;
}

/* P(x) for a window offset x at or past the table's start: the table
 * extended up to x first.  false if it cannot grow. */
static bool prefix_at(sl_scan *sc, uint64_t x, uint32_t *out)
{
    if (sc->pn == 0) {
        if (!sc->pcrc && !(sc->pcrc = malloc(64 * sizeof(*sc->pcrc))))
            return false;
        if (!sc->pcap)
            sc->pcap = 64;
        sc->cbase = sc->base;
        sc->pcrc[0] = 0;
        sc->pn = 1;
    }
    size_t i = (size_t)((x - sc->cbase) / SL_CRC_STEP);
    if (i >= sc->pcap) {
        size_t cap = sc->pcap * 2 > i + 1 ? sc->pcap * 2 : i + 1;
        uint32_t *t = realloc(sc->pcrc, cap * sizeof(*t));
        if (!t)
            return false;
        sc->pcrc = t;
        sc->pcap = cap;
    }
    const unsigned char *at = sc->buf + (sc->cbase - sc->base);
    for (; sc->pn <= i; sc->pn++) {
        sc->pcrc[sc->pn] = crc32c_update(sc->pcrc[sc->pn - 1],
                                         at + (sc->pn - 1) * SL_CRC_STEP, SL_CRC_STEP);
        sc->crc_bytes += SL_CRC_STEP;
    }
    size_t rest = (size_t)(x - sc->cbase) - i * SL_CRC_STEP;
    *out = crc32c_update(sc->pcrc[i], at + i * SL_CRC_STEP, rest);
    sc->crc_bytes += rest;
    return true;
}

uint32_t sl_scan_crc(const unsigned char *p, size_t n)
{
    sl_scan *sc = checking;
    if (!sc)
        return crc32c_update(0, p, n);
    if (n >= SL_CRC_DIRECT && !KURA_TEST_SWITCH(sl_scan_crc_direct) && p >= sc->buf &&
        p + n <= sc->buf + sc->len) {
        uint64_t a = sc->base + (uint64_t)(p - sc->buf);
        uint32_t pa, pb;
        if ((sc->pn == 0 || a >= sc->cbase) && prefix_at(sc, a, &pa) &&
            prefix_at(sc, a + n, &pb))
            return pb ^ crc_shift(sc, pa, n);
    }
    sc->crc_bytes += n;
    return crc32c_update(0, p, n);
}
