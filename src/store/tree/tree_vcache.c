/*
 * tree_vcache.c - the B+ tree's cache of large values: an overflow run's
 * value, read and verified once, kept in memory for the gets after it.
 *
 * Why: a get of a value held in an overflow run read the whole run with
 * pread (a copy out of the kernel's page cache, and its lookups) and
 * checked its CRC-32C over every byte, on every get: about a quarter of
 * kurad's CPU per 20 KB get, which memcached, sending from its own memory,
 * does not pay (docs/benchmarks.md, "20 KB gets from the tree").  A run
 * is written once and never changes while it is allocated (tree_cache.c),
 * so the bytes verified once stay the run's bytes until it is freed.
 *
 * An entry is named by its run's first page and carries the identity of
 * the cell that named the run (stored bytes, codec, value length, cas): a
 * get uses it only if the key's cell, found under the tree lock, names the
 * same run with the same cas (as tree.c's recheck of an unlocked read
 * does), so an entry can never answer for another value.  It is also
 * dropped when its run is freed (do_vc_drop, from do_free_pgno, the tree
 * lock exclusive), so it holds no memory past its value's life.
 *
 * Bounded by vcap bytes (the tree's `vcache` parameter; kurad's -m by
 * default), CLOCK eviction as in the page cache; a value larger than an
 * eighth of the bound is not kept (it is read as before, into the
 * thread's scratch).  Everything is under the cache's own mutex bt->vmu
 * (not the page cache's cmu, which a get's hits no longer take), held for
 * a lookup, an insert or a release: readers share the tree lock.
 * An entry in use is referenced (refs) and freed only once released.
 */
#include <stdlib.h>
#include <string.h>

#include "kura/testhooks.h"
#include "tree_int.h"

static inline size_t vslot(const btree *bt, uint64_t pgno)
{
    return (size_t)((pgno * 0x9E3779B97F4A7C15ULL) >> 24) & bt->vmask;
}

static bt_vent *find(btree *bt, uint64_t pgno)
{
    bt_vent *e = bt->vtab[vslot(bt, pgno)];
    while (e && e->pgno != pgno)
        e = e->hnext;
    return e;
}

int bt_vc_init(btree *bt, uint64_t cap_bytes)
{
    bt->vcap = (size_t)cap_bytes;
    bt->vhead.prev = bt->vhead.next = &bt->vhead;
    if (!cap_bytes)
        return KURA_OK;
    /* about one slot per 16 KiB of the bound: chains stay short for the
     * values worth a run (a page or more); at most 2^20 slots (8 MiB,
     * allocated at open whatever is kept: a bound of 16 GiB and more gets
     * longer chains, not a larger table) */
    size_t hs = 64;
    while (hs < cap_bytes / 16384 && hs < (1u << 20))
        hs *= 2;
    bt->vtab = calloc(hs, sizeof(*bt->vtab));
    if (!bt->vtab)
        return KURA_ENOMEM;
    bt->vmask = hs - 1;
    return KURA_OK;
}

bool bt_vc_wants(const btree *bt, const bt_cell *c)
{
    return bt->vtab && (size_t)bt_ovf_pages((btree *)bt, c->ovf_bytes) * bt->psiz <= bt->vcap / 8 &&
           c->vlen <= bt->vcap / 8;
}

static bool same_value(const bt_vent *e, const bt_cell *c)
{
    return e->pgno == c->ovf_pgno && e->cas == c->cas && e->bytes == c->ovf_bytes &&
           e->vlen == c->vlen && e->codec == c->ovf_codec;
}

/* Out of the table and the list (vmu held or rw exclusive); freed now if
 * no get uses it, else by the last release. */
static void unlist(btree *bt, bt_vent *e)
{
    bt_vent **pp = &bt->vtab[vslot(bt, e->pgno)];
    while (*pp && *pp != e)
        pp = &(*pp)->hnext;
    if (*pp)
        *pp = e->hnext;
    e->prev->next = e->next;
    e->next->prev = e->prev;
    e->listed = false;
    bt->vbytes -= e->size;
    bt->nvent--;
    if (!e->refs)
        free(e);
}

/* CLOCK, as evict_locked in tree_cache.c; bounded (each entry passed over
 * at most twice).  vmu held. */
static void evict_locked(btree *bt)
{
    size_t budget = 2 * bt->nvent + 2;
    bt_vent *e = bt->vhead.prev;
    while (bt->vbytes > bt->vcap && e != &bt->vhead && budget--) {
        bt_vent *prev = e->prev;
        if (e->ref) {
            e->ref = false;
            e->prev->next = e->next;
            e->next->prev = e->prev;
            e->next = bt->vhead.next;
            e->prev = &bt->vhead;
            bt->vhead.next->prev = e;
            bt->vhead.next = e;
        } else {
            unlist(bt, e);          /* (one in use is freed by its release) */
        }
        e = prev;
    }
}

const unsigned char *bt_vc_get(btree *bt, const bt_cell *c, bt_vent **out)
{
    *out = NULL;
    if (!bt->vtab)
        return NULL;
    pthread_mutex_lock(&bt->vmu);
    bt_vent *e = find(bt, c->ovf_pgno);
    if (e && same_value(e, c)) {
        e->refs++;
        e->ref = true;
        *out = e;
    }
    pthread_mutex_unlock(&bt->vmu);
    atomic_fetch_add_explicit(*out ? &bt->vc_hits : &bt->vc_misses, 1, memory_order_relaxed);
    return *out ? (*out)->val : NULL;
}

void bt_vc_release(btree *bt, bt_vent *e)
{
    if (!e)
        return;
    pthread_mutex_lock(&bt->vmu);
    bool gone = --e->refs == 0 && !e->listed;
    pthread_mutex_unlock(&bt->vmu);
    if (gone)
        free(e);
}

void bt_vc_hold(btree *bt, bt_vent *e)
{
    pthread_mutex_lock(&bt->vmu);
    e->refs++;
    pthread_mutex_unlock(&bt->vmu);
}

bt_vent *bt_vc_new(const bt_cell *c, size_t n)
{
    bt_vent *e = malloc(sizeof(*e) + n);
    if (!e)
        return NULL;
    memset(e, 0, sizeof(*e));
    e->pgno = c->ovf_pgno;
    e->cas = c->cas;
    e->bytes = c->ovf_bytes;
    e->vlen = c->vlen;
    e->codec = c->ovf_codec;
    e->refs = 1;
    e->size = sizeof(*e) + n;
    e->buf = (unsigned char *)(e + 1);
    e->val = e->buf;
    return e;
}

void bt_vc_insert(btree *bt, bt_vent *e)
{
    pthread_mutex_lock(&bt->vmu);
    bt_vent *o = find(bt, e->pgno);
    if (o && !same_value(o, &(bt_cell){ .ovf_pgno = e->pgno, .cas = e->cas,
                                         .ovf_bytes = e->bytes, .vlen = e->vlen,
                                         .ovf_codec = e->codec }))
        unlist(bt, o), o = NULL;    /* (not reached: a run freed drops its entry) */
    if (!o && !e->listed) {         /* (another reader's copy: kept, ours dropped) */
        bt_vent **pp = &bt->vtab[vslot(bt, e->pgno)];
        e->hnext = *pp;
        *pp = e;
        e->next = bt->vhead.next;
        e->prev = &bt->vhead;
        bt->vhead.next->prev = e;
        bt->vhead.next = e;
        e->listed = true;
        bt->vbytes += e->size;
        bt->nvent++;
        evict_locked(bt);
    }
    pthread_mutex_unlock(&bt->vmu);
}

void do_vc_keep(btree *bt, const bt_ovf *run, uint64_t cas, const void *v0, size_t l0,
                const void *v1, size_t l1)
{
    bt_cell c = { .cas = cas, .vlen = (uint32_t)(l0 + l1), .ovf = true, .ovf_pgno = run->pgno,
                  .ovf_bytes = run->bytes, .ovf_codec = run->codec };
    if (!bt_vc_wants(bt, &c))
        return;
    bt_vent *e = bt_vc_new(&c, l0 + l1);
    if (!e)
        return;                 /* (only a later get's read is lost) */
    if (l0)
        memcpy(e->buf, v0, l0);
    if (l1)
        memcpy(e->buf + l0, v1, l1);
    bt_vc_insert(bt, e);
    bt_vc_release(bt, e);
}

void do_vc_drop(btree *bt, uint64_t pgno)
{
    if (!bt->vtab || !bt->vbytes || KURA_TEST_SWITCH(tree_vcache_no_drop))
        return;
    pthread_mutex_lock(&bt->vmu);   /* (rw exclusive: no get waits for it) */
    bt_vent *e = find(bt, pgno);
    if (e)
        unlist(bt, e);
    pthread_mutex_unlock(&bt->vmu);
}

size_t bt_vc_bytes(btree *bt)
{
    pthread_mutex_lock(&bt->vmu);
    size_t n = bt->vbytes;
    pthread_mutex_unlock(&bt->vmu);
    return n;
}

void bt_vc_free(btree *bt)
{
    if (bt->vtab)
        while (bt->vhead.next != &bt->vhead)
            unlist(bt, bt->vhead.next);
    free(bt->vtab);
    bt->vtab = NULL;
}
