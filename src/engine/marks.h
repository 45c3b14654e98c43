/*
 * marks.h - per-item access state that the meta protocol reports and that
 * no store keeps: fetched since stored (mg h), time of the last access
 * (mg l), invalidated (X) and "a recache token was handed out" (W/Z).
 *
 * Private to the engine (src/engine/).  The state is kept beside the
 * stores, in memory, in a bounded table indexed by (key hash, cas): an
 * item's cas changes with every change of the item, so a new version of
 * an item starts with no marks, as memcached's fresh item does, without the
 * table having to hear of every store.  See marks.c for what is lost when
 * the table is full and at a restart.
 */
#ifndef KURA_ENGINE_MARKS_H
#define KURA_ENGINE_MARKS_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

enum {
    MARK_FETCHED = 1u << 0,     /* read since it was stored (h) */
    MARK_STALE = 1u << 1,       /* invalidated: md I, or ms I with an older cas (X) */
    MARK_TOKEN = 1u << 2,       /* a client won the recache token (W once, then Z) */
    MARK_KEY_BINARY = 1u << 3,  /* stored by ms with a base64 key (b): me shows it
                                   base64, as memcached's ITEM_KEY_BINARY does */
};

typedef struct kura_marks kura_marks;

/* What an access changes: bits to set, bits to clear, and whether it is a
 * read that counts as an access (sets MARK_FETCHED and the access time). */
typedef struct marks_op {
    unsigned set, clear;
    bool bump;
    bool take_token;            /* set MARK_TOKEN only if not set; the result says if it was */
    bool take_if_stale;         /* the same, when the item is marked stale */
} marks_op;

/* The state before the operation. */
typedef struct marks_prev {
    unsigned bits;
    int64_t atime;              /* Unix time of the last access (or the store) */
} marks_prev;

/* sets: the table's size in sets of 4 slots (0: 16384, 1.5 MiB, allocated
 * at the first mark); fewer for a small engine (the fuzz targets') */
kura_marks *marks_new(size_t sets);
void marks_free(kura_marks *m);

/* Looks up (key, cas), reports the state before into *prev, applies op
 * (an op that sets nothing records nothing).  Returns true if op took the
 * token.  O(1): a keyed hash and one striped lock. */
bool marks_access(kura_marks *m, const char *key, size_t klen, uint64_t cas, int64_t now,
                  const marks_op *op, marks_prev *prev);

/* Records that an item of cas new_cas replaces one of old_cas and carries
 * the given bits over (ms I keeps the token of the item it replaces). */
void marks_set(kura_marks *m, const char *key, size_t klen, uint64_t cas, int64_t now,
               unsigned bits);

/* The clock tick: "cas uniques handed out from next_cas on belong to time
 * now", so that an item never read has an access time (its store time). */
void marks_tick(kura_marks *m, uint64_t next_cas, int64_t now);

#endif
