/*
 * tree_vref.c - a large value held beyond its get (item.h's kura_vref).
 *
 * A get whose value lies in an entry of the cache of large values
 * (tree_vcache.c) offers the entry to its caller: a connection then sends
 * the value from the entry (buf.h's references) instead of copying it into
 * its output, as memcached sends an item's memory.  An entry held so is
 * one more reference (bt_vc_hold): eviction, a put or delete that frees
 * its run (do_vc_drop) only unlist it, and the last release frees it.  Its
 * bytes never change: an entry is written once, before it is listed.
 *
 * Bytes held outside the cache's bound (vcap) once an entry is unlisted:
 * the holder bounds them (a connection counts referenced bytes in its
 * output bound, KURA_REPLY_HIGH_WATER, as it counted the copies); they are
 * shown as tree_value_cache_held_bytes.
 *
 * A hold may outlive the tree: a replica's full copy closes the store
 * (engine_swap_store) while a slow client's reply still references it.
 * destroy() frees everything but bt itself and vmu, which releases take;
 * vc_pins counts the holds plus BT_VREF_CLOSED once closed, and whoever
 * takes it to exactly BT_VREF_CLOSED (the close, or the last release
 * after it) frees bt.
 */
#include <stdlib.h>

#include "tree_int.h"

#define BT_VREF_CLOSED ((size_t)1 << 62)

static void free_remains(btree *bt)
{
    pthread_mutex_destroy(&bt->vmu);
    free(bt);
}

/* Called by a get's callback, under the tree lock (shared): the get's own
 * reference keeps e until this one is taken. */
static void vref_hold(void *owner, void *obj)
{
    btree *bt = owner;
    bt_vent *e = obj;
    atomic_fetch_add_explicit(&bt->vc_pins, 1, memory_order_relaxed);
    atomic_fetch_add_explicit(&bt->vc_held_bytes, e->vlen, memory_order_relaxed);
    bt_vc_hold(bt, e);
}

/* Any thread, no lock held; the tree may be closed. */
static void vref_release(void *owner, void *obj)
{
    btree *bt = owner;
    bt_vent *e = obj;
    atomic_fetch_sub_explicit(&bt->vc_held_bytes, e->vlen, memory_order_relaxed);
    bt_vc_release(bt, e);
    if (atomic_fetch_sub_explicit(&bt->vc_pins, 1, memory_order_acq_rel) == BT_VREF_CLOSED + 1)
        free_remains(bt);
}

const kura_vref_ops bt_vref_ops = { vref_hold, vref_release };

void bt_vref_closed(btree *bt)
{
    if (atomic_fetch_add_explicit(&bt->vc_pins, BT_VREF_CLOSED, memory_order_acq_rel) == 0)
        free_remains(bt);
}
