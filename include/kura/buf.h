/*
 * buf.h - a growable byte buffer, used for replies and reads.
 *
 * kura_buf_reserve() guarantees room for `extra` more bytes, growing by
 * doubling so that appending n bytes costs O(n) amortized.  A connection
 * keeps its buffers between requests, so the steady state allocates nothing.
 *
 * A reply buffer may also carry references: another's bytes, held (vref.h's
 * kura_vref) rather than copied, that go out between data[at - 1] and
 * data[at] (kura_buf_append_ref).  The buffer's bytes are then data and the
 * references interleaved, kura_buf_size() of them; a writer takes them as
 * iovecs (kura_buf_iov), tells what was sent (kura_buf_sent: a reference
 * wholly sent is released then) and clears the buffer once all is sent
 * (kura_buf_clear; kura_buf_free releases too).  Whoever takes back bytes
 * appended (a reply that fails after a part of it was written) rewinds
 * with kura_buf_rewind, never by setting len, so that the references past
 * the new end are released.  A reference always follows bytes of its own
 * reply (a value's header), so a rewind to a mark taken before the reply
 * drops it and one taken after keeps it.  Every reference is released
 * exactly once.  A buffer that never had one costs one NULL pointer.
 */
#ifndef KURA_BUF_H
#define KURA_BUF_H

#include <stdbool.h>
#include <stddef.h>
#include <string.h>
#include <sys/uio.h>

#include "kura/vref.h"

/* One reference: n bytes at p, kept by a hold on (ops, owner, obj). */
typedef struct kura_bref {
    const char *p;
    size_t n;
    size_t at;                          /* goes out after data[0, at) */
    const kura_vref_ops *ops;           /* NULL once released */
    void *owner, *obj;
} kura_bref;

typedef struct kura_brefs {
    size_t n, cap;                      /* references in v, room for */
    size_t bytes;                       /* the sum of their n */
    size_t done;                        /* v[0, done) wholly sent, released */
    kura_bref v[];
} kura_brefs;

typedef struct kura_buf {
    char *data;
    size_t len;
    size_t cap;
    kura_brefs *refs;                   /* NULL until a reference is appended */
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

/* The bytes the buffer sends: len, and the referenced bytes.  What an
 * output bound counts. */
static inline size_t kura_buf_size(const kura_buf *b)
{
    return b->len + (b->refs ? b->refs->bytes : 0);
}

/* Appends a reference to the n bytes at p, which r holds (a hold taken
 * now, released by kura_buf_sent, kura_buf_rewind, kura_buf_clear or
 * kura_buf_free).  False when memory runs out (nothing held: copy them). */
bool kura_buf_append_ref(kura_buf *b, const void *p, size_t n, const kura_vref *r);
/* Drops what was appended past len bytes of data (len <= b->len): the
 * references after it are released.  Nothing sent may be taken back. */
void kura_buf_rewind(kura_buf *b, size_t len);
/* Up to max iovecs for the bytes from offset pos of kura_buf_size()'s;
 * returns how many (0: nothing from pos).  O(references). */
int kura_buf_iov(const kura_buf *b, size_t pos, struct iovec *iov, int max);
/* The first pos bytes were sent: the references wholly within them are
 * released. */
void kura_buf_sent(kura_buf *b, size_t pos);
/* Empties the buffer (len 0), releasing every reference not yet released. */
void kura_buf_clear(kura_buf *b);
/* The test hook behind kura_test.vref_early_release (testhooks.h): the
 * last reference is released now, its bytes still to be sent. */
void kura_buf_release_last_ref(kura_buf *b);

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
