/*
 * buf.c - growable byte buffers (see buf.h).
 */
#include <stdlib.h>

#include "kura/buf.h"

bool kura_buf_reserve(kura_buf *b, size_t extra)
{
    if (b->cap - b->len >= extra)
        return true;
    size_t need = b->len + extra;
    if (need < b->len)
        return false;                   /* overflow */
    size_t cap = b->cap ? b->cap : 256;
    while (cap < need) {
        if (cap > (size_t)-1 / 2)
            return false;
        cap *= 2;
    }
    char *p = realloc(b->data, cap);
    if (!p)
        return false;
    b->data = p;
    b->cap = cap;
    return true;
}

void kura_buf_free(kura_buf *b)
{
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
