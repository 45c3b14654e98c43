/*
 * vref.h - a reference to bytes another module owns that outlives the call
 * which saw them: how a store lends an item's value (item.h's kura_item.vref)
 * and how a reply buffer keeps it until sent (buf.h, kura_buf_append_ref).
 * Its own header, below both, so that the buffer (util) need not know what
 * an item is (store).
 *
 * A get callback sees val valid only until it returns; a store whose value
 * lies in memory it refcounts anyway (the tree's cache of large values,
 * tree_vcache.c) may also say how to keep those bytes: the callback calls
 * ops->hold(owner, obj), and from then on the vlen bytes at val stay as
 * they are (whatever later puts, deletes, evictions or even the store's
 * close do) until the one matching ops->release(owner, obj).  This is how
 * a reply sends a large value by reference instead of copying it into the
 * connection's output (kura_buf_append_ref, buf.h), as memcached sends an
 * item's memory with its refcount held until written.
 *
 * Each hold is released exactly once, from any thread, with no lock of the
 * store's held by the caller.  What a hold keeps is memory the store's own
 * bound (the tree's vcache) may no longer count: the holder bounds it (a
 * connection counts referenced bytes in its output bound).  vref is NULL
 * for every other item (a store that sets nothing: copy the bytes).
 */
#ifndef KURA_VREF_H
#define KURA_VREF_H

typedef struct kura_vref_ops {
    void (*hold)(void *owner, void *obj);      /* cannot fail */
    void (*release)(void *owner, void *obj);
} kura_vref_ops;

typedef struct kura_vref {
    const kura_vref_ops *ops;
    void *owner, *obj;                  /* the store's (tree: the tree, the entry) */
} kura_vref;

#endif
