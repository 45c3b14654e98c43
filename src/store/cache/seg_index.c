/*
 * seg_index.c - the index: in each stripe, one 8-byte slot per item.
 *
 * Why this shape.  A slot holds 14 bits of the key's hash (a tag: a
 * lookup reads an item's key only when the tag matches, a false match in
 * 16,384), the segment (20 bits) and the offset in it (28 bits); there is
 * no pointer, no chain link and no copy of the hash in the item.  Slots
 * are open-addressed with linear probing from a home slot chosen by the
 * hash's low 32 bits scaled to the table (any size, not a power of two), so
 * that a stripe grows by a quarter at 80% full: slots stay between 64% and
 * 80% used, 10 to 12.5 bytes an item (each growth reads every key of the
 * stripe again: a quarter is four rebuilds an item on the way up, not two).  A removed slot becomes a
 * tombstone only where a probe may have passed over it (the next slot is
 * used); a table with too many tombstones is rebuilt at the same size.
 * Segcache chains 64-byte buckets of 8-byte slots; probing whole cache
 * lines gives the same locality without an overflow pool.
 *
 * The price: a rebuild reads every item's key to hash it again, since the
 * slot keeps too few bits of the hash to place it.  It runs under the
 * stripe's lock (a stripe is 1/256 of the items).
 *
 * Every function here runs under the stripe's lock (do_), except init and
 * free.  Large tables are mapped, so that a freed one goes back to the
 * kernel at once rather than staying in malloc's heap.
 */
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>

#include "seg_int.h"

#define SEG_INDEX_MMAP_MIN (64u * 1024)

size_t seg_index_bytes(uint32_t n)
{
    return (size_t)n * sizeof(uint64_t);
}

static uint64_t *slots_alloc(uint32_t n)
{
    size_t bytes = seg_index_bytes(n);
    if (bytes < SEG_INDEX_MMAP_MIN)
        return calloc(n, sizeof(uint64_t));
    void *m = mmap(NULL, bytes, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
    return m == MAP_FAILED ? NULL : m;
}

static void slots_free(uint64_t *s, uint32_t n)
{
    if (!s)
        return;
    if (seg_index_bytes(n) < SEG_INDEX_MMAP_MIN)
        free(s);
    else
        munmap(s, seg_index_bytes(n));
}

static inline uint32_t home_of(uint64_t hash, uint32_t n)
{
    return (uint32_t)(((uint64_t)(uint32_t)hash * n) >> 32);
}

int seg_index_init(seg_stripe *st, uint32_t n)
{
    if (n < 1)
        n = 1;
    st->st_slots = slots_alloc(n);
    st->st_n = n;
    st->st_used = st->st_tombs = 0;
    return st->st_slots ? KURA_OK : KURA_ENOMEM;
}

void seg_index_free(seg_stripe *st)
{
    slots_free(st->st_slots, st->st_n);
    st->st_slots = NULL;
}

/* The slot of key's item, its bytes parsed into *v; SEG_NONE if absent.
 * O(probe). */
uint32_t do_seg_index_find(segcache *c, seg_stripe *st, uint64_t hash, const char *key,
                           size_t klen, seg_view *v)
{
    uint32_t n = st->st_n, i = home_of(hash, n);
    for (;;) {
        uint64_t s = st->st_slots[i];
        if (s == 0)
            return SEG_NONE;
        if (slot_used(s) && slot_tag_is(s, hash)) {
            uint32_t id = slot_seg(s), off = slot_off(s);
            uint8_t *p = seg_data(&c->sc_pool, id) + off;
            if (p[0] == seg_item_kb(klen) && seg_item_parse(p, c->sc_pool.sp_seg_size - off,
                                               c->sc_pool.sp_segs[id].sg_cas_base, v) &&
                v->klen == klen && memcmp(v->key, key, klen) == 0)
                return i;
        }
        if (++i == n)
            i = 0;
    }
}

/* The slot that points at (id, off), met on key hash's probe; SEG_NONE if
 * none does (the item was deleted or replaced).  O(probe). */
uint32_t do_seg_index_find_loc(seg_stripe *st, uint64_t hash, uint32_t id, uint32_t off)
{
    uint32_t n = st->st_n, i = home_of(hash, n);
    uint64_t want = slot_make(hash, id, off);
    for (;;) {
        uint64_t s = st->st_slots[i];
        if (s == 0)
            return SEG_NONE;
        if (s == want)
            return i;
        if (++i == n)
            i = 0;
    }
}

/* A slot where hash's new key may go (the key is absent): the first
 * tombstone or empty slot of its probe.  The table is never full. */
uint32_t do_seg_index_free_slot(seg_stripe *st, uint64_t hash)
{
    uint32_t n = st->st_n, i = home_of(hash, n);
    while (slot_used(st->st_slots[i]))
        if (++i == n)
            i = 0;
    if (st->st_slots[i] == SLOT_TOMB)
        st->st_tombs--;
    st->st_used++;
    return i;
}

/* Empties slot i: a tombstone if a probe may run past it, else empty, and
 * then the tombstones just before it are empty too. */
void do_seg_index_remove(seg_stripe *st, uint32_t i)
{
    uint32_t n = st->st_n, next = i + 1 == n ? 0 : i + 1;
    st->st_used--;
    if (st->st_slots[next] != 0) {
        st->st_slots[i] = SLOT_TOMB;
        st->st_tombs++;
        return;
    }
    st->st_slots[i] = 0;
    for (uint32_t j = i == 0 ? n - 1 : i - 1; st->st_slots[j] == SLOT_TOMB;
         j = j == 0 ? n - 1 : j - 1) {
        st->st_slots[j] = 0;
        st->st_tombs--;
    }
}

/* Before an insert: the table's new size if it must be rebuilt first (past
 * 80% used or tombstoned), else 0. */
uint32_t do_seg_index_want_grow(seg_stripe *st)
{
    uint64_t n = st->st_n;
    if ((uint64_t)(st->st_used + st->st_tombs + 1) * 5 <= n * 4)
        return 0;
    if ((uint64_t)(st->st_used + 1) * 2 <= n)
        return st->st_n;                /* mostly tombstones: same size */
    uint64_t nn = n + n / 4 + 8;
    return nn > UINT32_MAX / 2 ? st->st_n : (uint32_t)nn;
}

/* Rebuilds the stripe's table with new_n slots, hashing every item's key
 * again.  Under the stripe's lock; O(slots + items).  On no memory the old
 * table stays (fuller: inserts still find room while it is not full). */
void seg_index_grow(segcache *c, seg_stripe *st, uint32_t new_n)
{
    uint64_t *ns = slots_alloc(new_n), *os = st->st_slots;
    uint32_t on = st->st_n;
    if (!ns)
        return;
    for (uint32_t i = 0; i < on; i++) {
        uint64_t s = os[i];
        if (!slot_used(s))
            continue;
        seg_view v;
        seg_slot_view(c, s, &v);
        uint32_t j = home_of(seg_hash(v.key, v.klen), new_n);
        while (ns[j])
            if (++j == new_n)
                j = 0;
        ns[j] = s;
    }
    st->st_slots = ns;
    st->st_n = new_n;
    st->st_tombs = 0;
    slots_free(os, on);
    atomic_fetch_add_explicit(&c->sc_index_bytes, seg_index_bytes(new_n), memory_order_relaxed);
    atomic_fetch_sub_explicit(&c->sc_index_bytes, seg_index_bytes(on), memory_order_relaxed);
}
