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
}

void sl_scan_shed(sl_scan *sc)
{
    free(sc->buf);
    sc->buf = NULL;
    sc->cap = sc->len = 0;
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
    if (off >= sc->base && off <= sc->base + sc->len && !kura_test.sl_scan_reread) {
        size_t behind = (size_t)(off - sc->base), ahead = sc->len - behind;
        if (behind >= ahead) {
            memmove(sc->buf, sc->buf + behind, ahead);
            sc->base = off;
            sc->len = ahead;
        }
        if (to < sc->base + sc->len + WINDOW)
            to = sc->base + sc->len + WINDOW;
    } else {
        sc->base = off;
        sc->len = 0;
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
        long long r = sc->check(arg, h, avail, sc->version, &need);
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
