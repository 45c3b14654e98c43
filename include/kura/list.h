/*
 * list.h - walking a store's keys in bounded batches, for the listing
 * commands (`lru_crawler metadump`, `keys`, `rget`: docs/protocol.md).
 *
 * A listing may cover millions of keys and be read by a slow client, so
 * nothing here holds the whole key set or a lock while a reply is written:
 * engine_list_step() collects one batch (at most LIST_BATCH keys with their
 * metadata, copied out under the store's lock), lets every lock go, and
 * hands the batch to the caller's emit callback in order.  The walk's whole
 * state is a kura_list_cursor, a plain struct the caller keeps (a
 * connection keeps it in its session between the calls that drain its
 * output), so a listing that stops half way leaves nothing to free.
 *
 * Order, by backend:
 *  - a store with key order (ops->ordered: the B+ tree) is walked in key
 *    order (bytes as memcmp compares them, a prefix before its
 *    extensions), LIST_BATCH keys per step, resuming after the last key
 *    given;
 *  - a store without (the cache, the hash file) is walked a part (stripe)
 *    at a time; within a part keys come in order, parts one after the
 *    other, so the listing as a whole is in no useful order;
 *  - with spec.sorted, such a store is walked in key order too, at the
 *    price of a pass over every part per LIST_SORTED_BATCH keys (O(items)
 *    each): for a listing with a limit, whose passes are limit /
 *    LIST_SORTED_BATCH;
 *  - with spec.back, either walk goes in descending key order, at the
 *    same cost (the B+ tree walks down from a key: KURA_ITER_BACK).
 * Every key live for the whole walk is given once; a key stored or
 * removed meanwhile may or may not be.  Values are not collected (the
 * hash file reads no record): a caller that wants them gets each one.
 *
 * Work per step is bounded, so that a caller on an event loop can take a
 * listing a few steps per turn (listing.c): a step either hands out the
 * batch collected (the caller's emit may stop it after any key; the rest
 * is kept in the cursor for the next step) or collects one: an ordered
 * walk of LIST_BATCH keys, one part, or the parts of a sorted pass until
 * LIST_STEP_VISITS items were looked at (a pass is split over as many
 * steps as it needs; the batch it builds is kept in the cursor between
 * them).  c->visits counts the items the store showed, for the caller's
 * own bound.  Memory: one batch, at most LIST_SORTED_BATCH keys (about
 * 300 bytes each), held by the cursor until engine_list_end.
 */
#ifndef KURA_LIST_H
#define KURA_LIST_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "kura/engine.h"
#include "kura/item.h"

#define LIST_BATCH 256                  /* keys per step of an ordered walk */
#define LIST_SORTED_BATCH 4096          /* keys per pass of a sorted walk, and per
                                           walk of a part */
#define LIST_STEP_VISITS 1024           /* a sorted pass's step ends past this many items */

/* Which keys: start..end (either end open or closed; NULL: unbounded) and
 * starting with prefix (plen 0: any).  back: the walk goes down, from the
 * largest key: start is then its upper bound (keys < start when open),
 * end its lower, and the batches come in descending key order. */
typedef struct kura_list_spec {
    const char *start;
    size_t slen;
    bool start_open;                    /* keys > start (else >= start) */
    const char *end;
    size_t elen;
    bool end_open;                      /* keys < end (else <= end) */
    const char *prefix;
    size_t plen;
    bool sorted;                        /* a store without order: key order anyway */
    bool back;                          /* descending key order */
} kura_list_spec;

struct list_slot;

/* Where a walk is.  Zero it once (its owner's calloc), then
 * engine_list_begin before each walk's first step and engine_list_end
 * when the walk is over or abandoned (it frees the batch). */
typedef struct kura_list_cursor {
    uint32_t part;                      /* by parts: the part being walked; sorted:
                                           the next part of this pass */
    bool have_last;                     /* the walk resumes after `last` */
    bool done;
    uint16_t llen;
    uint64_t count;                     /* the caller's (the engine leaves it): keys shown */
    uint64_t visits;                    /* items the store showed the walk so far */
    char last[KURA_KEY_MC_MAX];         /* the last key shown, up to 250 bytes; */
    char *last_long;                    /* a longer one (Tokyo Tyrant's): KURA_KEY_MAX
                                           bytes, made when first needed (every
                                           session holds a cursor: it stays small) */
    /* the batch being collected, or (held) being handed out: slots v[0..n),
     * in the order ix gives (a heap while collected, sorted once held) */
    struct list_slot *v;
    uint32_t *ix;
    size_t n, alloc;
    size_t next;                        /* held: the next slot to hand out */
    bool held;
    bool more;                          /* a matching key was left out of the batch */
} kura_list_cursor;

/* Starts a walk (ends the previous one first). */
void engine_list_begin(kura_list_cursor *c);
/* Frees what the walk holds; the cursor may be begun again. */
void engine_list_end(kura_list_cursor *c);

/* What emit sees of an item: key, vlen, flags (only 0 or not 0 when
 * flags_exact is false: the hash file's index keeps no more), exptime
 * (absolute, 0 = never) and cas; no value. */
typedef struct kura_list_item {
    const char *key;
    size_t klen;
    uint64_t vlen;
    uint32_t flags;
    bool flags_exact;
    int64_t exptime;
    uint64_t cas;
} kura_list_item;

/* emit's answer: 0 the item was taken (the cursor moves past it);
 * LIST_STOP it was not, stop here (the next step gives it again); a
 * negative KURA_E* stops the walk with that error. */
#define LIST_STOP 1
typedef int (*kura_list_fn)(void *arg, const kura_list_item *it);

/* One bounded step (above): hands out the rest of the batch held, or
 * collects the next (no lock held once it returns).  Returns 0 (call
 * again), LIST_END (the walk is complete, c->done set), LIST_STOP (emit
 * stopped: the key it refused is handed out first next time) or a
 * negative error. */
#define LIST_END 2
int engine_list_step(kura_engine *e, const kura_list_spec *spec, kura_list_cursor *c,
                     kura_list_fn emit, void *arg);

/* True if the store walks in key order without spec.sorted. */
bool engine_list_ordered(kura_engine *e);

/* The access marks of an item (memcached's metadump "fetch" and "la"),
 * read without changing them. */
void engine_list_marks(kura_engine *e, const char *key, size_t klen, uint64_t cas,
                       bool *fetched, int64_t *last_access);

#endif
