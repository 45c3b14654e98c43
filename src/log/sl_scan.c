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

/* Makes [off, off+n) available; NULL with *rc set if not possible. */
static const unsigned char *window(sl_scan *sc, uint64_t off, size_t n, int *rc)
{
    if (off + n > sc->fsize) {
        *rc = KURA_ECORRUPT;
        return NULL;
    }
    if (off >= sc->base && off + n <= sc->base + sc->len)
        return sc->buf + (off - sc->base);
    size_t want = n > WINDOW ? n : WINDOW;
    if (off + want > sc->fsize)
        want = (size_t)(sc->fsize - off);
    if (sc->cap < want) {
        unsigned char *b = realloc(sc->buf, want);
        if (!b) {
            *rc = KURA_ENOMEM;
            return NULL;
        }
        sc->buf = b;
        sc->cap = want;
    }
    size_t got = 0;
    while (got < want) {
        ssize_t r = sc->io->pread(sc->io, sc->fd, sc->buf + got, want - got,
                                  (off_t)(off + got));
        if (r < 0 && errno == EINTR)
            continue;
        if (r < 0) {
            sc->len = 0;
            *rc = KURA_EIO;
            return NULL;
        }
        if (r == 0)
            break;
        got += (size_t)r;
    }
    sc->base = off;
    sc->len = got;
    if (got < n) {
        *rc = KURA_ECORRUPT;
        return NULL;
    }
    return sc->buf;
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
