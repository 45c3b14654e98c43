/*
 * buf.h - a growable byte buffer, used for replies and reads.
 *
 * kura_buf_reserve() guarantees room for `extra` more bytes, growing by
 * doubling so that appending n bytes costs O(n) amortized.  A connection
 * keeps its buffers between requests, so the steady state allocates nothing.
 */
#ifndef KURA_BUF_H
#define KURA_BUF_H

#include <stdbool.h>
#include <stddef.h>
#include <string.h>

typedef struct kura_buf {
    char *data;
    size_t len;
    size_t cap;
} kura_buf;

/* Returns false when memory runs out (the buffer is unchanged). */
bool kura_buf_reserve(kura_buf *b, size_t extra);
void kura_buf_free(kura_buf *b);
/* Shrinks a buffer that grew past keep bytes back to keep (after a huge value). */
void kura_buf_trim(kura_buf *b, size_t keep);

static inline bool kura_buf_append(kura_buf *b, const void *p, size_t n)
{
    if (n == 0)
        return true;
    if (b->cap - b->len < n && !kura_buf_reserve(b, n))
        return false;
    memcpy(b->data + b->len, p, n);
    b->len += n;
    return true;
}

#define KURA_BUF_LIT(b, s) kura_buf_append((b), (s), sizeof(s) - 1)

/* Writes v in decimal at out (at most 20 bytes, no NUL); returns the length. */
static inline size_t kura_fmt_u64(char *out, unsigned long long v)
{
    char tmp[20];
    size_t n = 0;
    do {
        tmp[n++] = (char)('0' + v % 10);
        v /= 10;
    } while (v);
    for (size_t i = 0; i < n; i++)
        out[i] = tmp[n - 1 - i];
    return n;
}

#endif
