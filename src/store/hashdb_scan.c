/*
 * hashdb_scan.c - reading a segment's records in order, checking each.
 *
 * Used by recovery (replay of the log tail, salvage) and by compaction.
 * Reads go through a window buffer filled with pread (no mmap, so an I/O
 * error is an error code, not a SIGBUS).  Every record's header is checked
 * for sanity and its CRC-32C verified before it is handed out.
 */
#include <errno.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "crc32c.h"
#include "hashdb_int.h"

#define WINDOW (1u << 20)

void hd_scan_init(hd_scan *sc, const hd_seg *sg)
{
    memset(sc, 0, sizeof(*sc));
    sc->fd = sg->fd;
    sc->version = sg->version;
    sc->fsize = sg->size;
}

void hd_scan_done(hd_scan *sc)
{
    free(sc->buf);
    sc->buf = NULL;
}

/* Makes [off, off+n) available; NULL with *rc set if not possible. */
static const unsigned char *window(hd_scan *sc, uint64_t off, size_t n, int *rc)
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
        ssize_t r = pread(sc->fd, sc->buf + got, want - got, (off_t)(off + got));
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

int hd_scan_rec(hd_scan *sc, uint64_t off, hd_rec *r, const unsigned char **p)
{
    int rc = KURA_OK;
    if (off >= sc->fsize)
        return 1;
    /* the longest header, or what the file has left */
    size_t avail = sc->fsize - off < HD_REC_HDR_MAX ? (size_t)(sc->fsize - off) : HD_REC_HDR_MAX;
    const unsigned char *h = window(sc, off, avail, &rc);
    if (!h)
        return rc;
    if (hd_rec_decode(h, avail, sc->version, r) != 0)
        return KURA_ECORRUPT;
    uint64_t rlen = hd_rec_size(r->hlen, r->klen, r->vlen);
    if (off + rlen > sc->fsize)
        return KURA_ECORRUPT;
    h = window(sc, off, (size_t)rlen, &rc);
    if (!h)
        return rc;
    if (hd_rec_crc(h, r->hlen, crc32c_update(0, h + r->hlen, rlen - r->hlen)) != r->crc)
        return KURA_ECORRUPT;
    *p = h;
    return KURA_OK;
}

uint64_t hd_scan_resync(hd_scan *sc, uint64_t off)
{
    hd_rec r;
    const unsigned char *p;
    unsigned magic = sc->version == 1 ? HD_REC_MAGIC_V1 : HD_REC_MAGIC;
    for (uint64_t o = off + 1; o + 8 <= sc->fsize; o++) {
        int rc = KURA_OK;
        const unsigned char *h = window(sc, o, 8, &rc);
        if (!h) {
            if (rc == KURA_EIO)   /* skip the unreadable window */
                o += WINDOW - 1;
            continue;
        }
        if (h[4] != (magic & 0xff) || h[5] != (magic >> 8))
            continue;
        if (hd_scan_rec(sc, o, &r, &p) == KURA_OK)
            return o;
    }
    return sc->fsize;
}
