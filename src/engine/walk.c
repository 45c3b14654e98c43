/*
 * walk.c - engine_walk: every live item, handed out in batches copied out
 * of the store, so that the caller compresses, writes or sends them with
 * no store lock held (snapshots, a replica's full copy).
 *
 * A store's iterate holds a stripe's lock while it calls back; a callback
 * that did I/O there would stall every request for that stripe as long as
 * the disk or the network takes.  Here the callback only copies: a part
 * (a stripe of the cache or the hash file) at a time, or, on an ordered
 * store, up to WALK_BATCH_BYTES of keys at a time resumed from the last
 * key (store.h: kura_iter_spec).  The walk is fuzzy in the same way iterate is: each part is seen
 * at its own moment.
 *
 * engine_walk_step is the same walk without the copy, one bounded step a
 * call, for a command that must give its worker back between steps
 * (digest): a part, or a run of an ordered store's keys resumed after the
 * last one, with fn called under the store's lock as engine_iterate does.
 */
#include <stdlib.h>
#include <string.h>

#include "kura/grow.h"
#include "engine_int.h"

#define WALK_BATCH_BYTES (4u << 20)     /* an ordered store's batch */
#define WALK_PAUSE 1000                 /* the copier's "batch full" (not a status) */

typedef struct walk_batch {
    kura_item *items;
    size_t n, cap;
    unsigned char *mem;                 /* keys and values, back to back */
    size_t used, size;
    /* ordered stores: where the next batch starts, and the key to skip */
    char last[KURA_KEY_MAX];
    size_t llen;
    bool have_last, skip_last;
    bool limit;                         /* stop at WALK_BATCH_BYTES */
} walk_batch;

static int batch_copy(void *arg, const kura_item *it)
{
    walk_batch *b = arg;
    if (b->skip_last) {
        b->skip_last = false;           /* only the first key can be it */
        if (it->klen == b->llen && memcmp(it->key, b->last, b->llen) == 0)
            return 0;                   /* the previous batch's last key */
    }
    if (b->limit && b->n && b->used + it->klen + it->vlen > WALK_BATCH_BYTES)
        return WALK_PAUSE;
    if (kura_grow(&b->items, &b->cap, b->n + 1, sizeof(*b->items), 1024) ||
        kura_grow(&b->mem, &b->size, b->used + it->klen + it->vlen, 1, 1u << 20))
        return KURA_ENOMEM;
    /* offsets now, pointers once the batch is complete (mem may move) */
    kura_item *c = &b->items[b->n++];
    *c = *it;
    c->key = (const char *)(uintptr_t)b->used;
    memcpy(b->mem + b->used, it->key, it->klen);
    b->used += it->klen;
    c->val = (const void *)(uintptr_t)b->used;
    if (it->vlen)
        memcpy(b->mem + b->used, it->val, it->vlen);
    b->used += it->vlen;
    memcpy(b->last, it->key, it->klen);
    b->llen = it->klen;
    b->have_last = true;
    return 0;
}

static int batch_deliver(walk_batch *b, engine_walk_fn fn, void *arg)
{
    if (b->n == 0)
        return 0;
    for (size_t i = 0; i < b->n; i++) {
        b->items[i].key = (const char *)b->mem + (uintptr_t)b->items[i].key;
        b->items[i].val = b->mem + (uintptr_t)b->items[i].val;
    }
    int rc = fn(arg, b->items, b->n);
    b->n = 0;
    b->used = 0;
    return rc;
}

int engine_walk(kura_engine *e, engine_walk_fn fn, void *arg)
{
    const kura_store_ops *ops;
    walk_batch b = { 0 };
    int rc = 0;

    engine_gate_in(e);
    ops = e->store->ops;
    engine_gate_out(e);
    if (!ops->ordered) {
        for (unsigned i = 0; i < ops->parts && rc == 0; i++) {
            kura_clock clk = engine_clock(e);
            kura_iter_spec part = { .scope = KURA_ITER_PART, .part = i };
            engine_gate_in(e);
            rc = e->store->ops->iterate(e->store, &part, &clk, batch_copy, &b);
            engine_gate_out(e);
            if (rc == 0)
                rc = batch_deliver(&b, fn, arg);
        }
    } else {
        b.limit = true;
        for (;;) {
            /* the last key copied is where the next batch starts (and is
             * skipped: it was delivered); b.last changes as this batch is
             * copied, so the store is given a copy of it */
            char from[KURA_KEY_MAX];
            size_t flen = b.llen;
            memcpy(from, b.last, flen);
            kura_clock clk = engine_clock(e);
            kura_iter_spec next = { .scope = KURA_ITER_FROM, .from = b.have_last ? from : NULL,
                                    .flen = flen };
            b.skip_last = b.have_last;
            engine_gate_in(e);
            rc = e->store->ops->iterate(e->store, &next, &clk, batch_copy, &b);
            engine_gate_out(e);
            bool more = rc == WALK_PAUSE;
            if (more)
                rc = 0;
            if (rc == 0)
                rc = batch_deliver(&b, fn, arg);
            if (rc || !more)
                break;
        }
    }
    free(b.items);
    free(b.mem);
    return rc;
}

/* engine_walk_step on an ordered store: passes fn the items after the
 * cursor, up to the budget, and moves the cursor past each. */
typedef struct step_walk {
    kura_walk_cursor *c;
    size_t left;
    kura_item_fn fn;
    void *arg;
    bool skip_first;                    /* the first item may be the cursor's key */
} step_walk;

#define STEP_PAUSE INT32_MAX            /* the budget's stop (not fn's, not a status) */

static int step_item(void *arg, const kura_item *it)
{
    step_walk *w = arg;
    kura_walk_cursor *c = w->c;
    if (w->skip_first) {
        w->skip_first = false;
        if (it->klen == c->llen && memcmp(it->key, c->last, c->llen) == 0)
            return 0;                   /* shown by the previous step */
    }
    if (w->left == 0)
        return STEP_PAUSE;
    int rc = w->fn(w->arg, it);
    if (rc)
        return rc;
    w->left--;
    memcpy(c->last, it->key, it->klen);
    c->llen = (uint16_t)it->klen;
    c->have_last = true;
    return 0;
}

int engine_walk_step(kura_engine *e, kura_walk_cursor *c, size_t budget, kura_item_fn fn,
                     void *arg)
{
    if (c->done)
        return KURA_OK;
    kura_clock clk = engine_clock(e);
    int rc;
    engine_gate_in(e);
    kura_store *st = e->store;
    if (!st->ops->ordered) {
        kura_iter_spec part = { .scope = KURA_ITER_PART, .part = c->part };
        rc = c->part < st->ops->parts ? st->ops->iterate(st, &part, &clk, fn, arg) : KURA_OK;
        c->done = ++c->part >= st->ops->parts;
    } else {
        char from[KURA_KEY_MAX];        /* the walk moves c->last: the store gets a copy */
        memcpy(from, c->last, c->llen);
        kura_iter_spec next = { .scope = KURA_ITER_FROM, .from = c->have_last ? from : NULL,
                                .flen = c->llen };
        step_walk w = { .c = c, .left = budget ? budget : 1, .fn = fn, .arg = arg,
                        .skip_first = c->have_last };
        rc = st->ops->iterate(st, &next, &clk, step_item, &w);
        if (rc == STEP_PAUSE)
            rc = KURA_OK;
        else if (rc == KURA_OK)
            c->done = true;
    }
    engine_gate_out(e);
    return rc;
}
