/*
 * buf.c - growable byte buffers, and the references a reply buffer may
 * carry (see buf.h).
 */
#include <stdlib.h>

#include "kura/buf.h"
#include "kura/grow.h"

bool kura_buf_reserve(kura_buf *b, size_t extra)
{
    if (b->cap - b->len >= extra)
        return true;
    size_t need = b->len + extra;
    if (need < b->len)
        return false;                   /* overflow */
    return kura_grow(&b->data, &b->cap, need, 1, 256) == 0;
}

void kura_buf_free(kura_buf *b)
{
    kura_buf_clear(b);
    free(b->refs);
    b->refs = NULL;
    free(b->data);
    b->data = NULL;
    b->len = b->cap = 0;
}

void kura_buf_trim(kura_buf *b, size_t keep)
{
    if (b->cap <= keep || b->len > keep)
        return;
    char *p = realloc(b->data, keep);
    if (p) {
        b->data = p;
        b->cap = keep;
    }
}

/* ---- references (buf.h) ---------------------------------------------------- */

static void release(kura_bref *r)
{
    if (r->ops) {
        const kura_vref_ops *ops = r->ops;
        r->ops = NULL;
        ops->release(r->owner, r->obj);
    }
}

bool kura_buf_append_ref(kura_buf *b, const void *p, size_t n, const kura_vref *r)
{
    kura_brefs *rs = b->refs;
    if (!rs || rs->n == rs->cap) {
        size_t cap = rs ? rs->cap * 2 : 8;
        kura_brefs *g = realloc(rs, sizeof(*g) + cap * sizeof(g->v[0]));
        if (!g)
            return false;
        if (!rs)
            g->n = g->bytes = g->done = 0;
        g->cap = cap;
        b->refs = rs = g;
    }
    r->ops->hold(r->owner, r->obj);
    rs->v[rs->n++] = (kura_bref){ p, n, b->len, r->ops, r->owner, r->obj };
    rs->bytes += n;
    return true;
}

void kura_buf_rewind(kura_buf *b, size_t len)
{
    kura_brefs *rs = b->refs;
    while (rs && rs->n > rs->done && rs->v[rs->n - 1].at > len) {
        kura_bref *r = &rs->v[--rs->n];
        rs->bytes -= r->n;
        release(r);
    }
    b->len = len;
}

int kura_buf_iov(const kura_buf *b, size_t pos, struct iovec *iov, int max)
{
    size_t nr = b->refs ? b->refs->n : 0, d = 0, off = 0;   /* data, stream offsets */
    int k = 0;
    for (size_t i = 0; i <= nr && k < max; i++) {
        size_t at = i < nr ? b->refs->v[i].at : b->len;
        const char *piece[2] = { b->data + d, i < nr ? b->refs->v[i].p : NULL };
        size_t plen[2] = { at - d, i < nr ? b->refs->v[i].n : 0 };
        for (int j = 0; j < 2 && k < max; j++) {
            if (plen[j] && off + plen[j] > pos) {
                size_t skip = pos > off ? pos - off : 0;
                iov[k].iov_base = (void *)(piece[j] + skip);
                iov[k].iov_len = plen[j] - skip;
                k++;
            }
            off += plen[j];
        }
        d = at;
    }
    return k;
}

void kura_buf_sent(kura_buf *b, size_t pos)
{
    kura_brefs *rs = b->refs;
    if (!rs)
        return;
    size_t before = 0;                  /* referenced bytes ahead of v[i] */
    for (size_t i = 0; i < rs->n; i++) {
        kura_bref *r = &rs->v[i];
        if (r->at + before + r->n > pos)
            break;
        if (i >= rs->done) {
            release(r);
            rs->done = i + 1;
        }
        before += r->n;
    }
}

void kura_buf_clear(kura_buf *b)
{
    kura_brefs *rs = b->refs;
    if (rs) {
        for (size_t i = rs->done; i < rs->n; i++)
            release(&rs->v[i]);
        rs->n = rs->done = rs->bytes = 0;
    }
    b->len = 0;
}

void kura_buf_release_last_ref(kura_buf *b)
{
    if (b->refs && b->refs->n)
        release(&b->refs->v[b->refs->n - 1]);
}
