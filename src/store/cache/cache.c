/*
 * cache.c - the in-memory cache backend ("*" or ":"): its database name's
 * parameters, and the older of its two layouts.
 *
 * cache_open reads the name's parameters (#capsiz, #capcnt, #bnum and
 * #layout) and opens the segment layout (seg_cache.c, seg_int.h say why
 * it is the default: a third less memory an item than memcached) or, with
 * #layout=heap, the layout below: a striped hash table of malloc'd items
 * with LRU eviction under a memory limit, memcached's job done without
 * slabs, kept for comparison (bench/, docs/benchmarks.md).
 *
 * Why this shape.  Worker threads hit the store concurrently, so the table is
 * split into CACHE_STRIPES independent stripes chosen by the top bits of a
 * 32-bit key hash (keyed, SipHash-1-3: clients choose the keys, and must not
 * be able to pile them into one chain).  Each stripe has its own mutex, its
 * own bucket array (chained, doubled online when the load passes 1.5; only
 * that stripe waits while it is rehashed) and its own LRU list; no lock is
 * global on get, put, delete or update.  An item is one malloc'd block: a 54-byte header (hash
 * chain link, LRU links, cas, hash, exptime, flags, value length, last-bump
 * time, key length, state bits) followed by the key and the value.  glibc
 * rounds a request of n bytes to a chunk of (n + 8) rounded up to 16, so a
 * 10-byte key with a 100-byte value takes 176 bytes, plus about 5-11 bytes
 * of bucket pointer (load 0.75-1.5): ~185 bytes, against memcached 1.6's
 * 192-byte slab chunk plus its 8-byte bucket.  A 30-byte key with a 100-byte
 * value takes 192 + bucket, the same as memcached.
 *
 * Memory accounting.  One atomic counter (cc_mem_used) holds the bytes the
 * cache has allocated, counted as malloc allocates them: every item at its
 * glibc chunk size, every bucket array at its size.  A set reserves its
 * item's bytes first and, if that passes the limit, evicts (dead items near
 * a stripe's LRU tail first, then the tail itself; its own stripe first,
 * then the others round-robin; one stripe lock at a time) until it fits, and
 * only then allocates; any other new version (add, replace, cas, append,
 * incr) is allocated once decided, under its stripe's lock, and evicts
 * after, passing the limit by that item for a moment.  So the cache's heap
 * stays at the limit, and process
 * memory is the limit plus a fixed overhead:
 *   - this file's fixed structures: the store and 256 cache-line-aligned
 *     stripes, about 32 KiB;
 *   - malloc's own bookkeeping: the heap top slack (M_TOP_PAD, 128 KiB per
 *     arena) and each thread's tcache (a few KiB);
 *   - transients: bytes reserved by puts in flight (at most one item per
 *     concurrent put, <= -I each) and, while a stripe grows, its old bucket
 *     array (1/256 of the table);
 *   - fragmentation.  Freed items are reused for new items of a similar
 *     size, but glibc gives threads separate arenas (up to 8 per core) and
 *     a chunk freed into one arena is not reused by another, so with mixed
 *     value sizes written from many threads the arenas together hold more
 *     than the limit.  One arena (mallopt(M_ARENA_MAX, 1) in the server's
 *     main(), or MALLOC_ARENA_MAX=1) removes that at a cost of a few per
 *     cent on sets; it is a process-wide choice, so this file leaves it to
 *     the server.
 * With one malloc arena the fixed overhead above the limit is a few MiB
 * (docs/options.md gives the figures; tests/unit/test_cache.c's
 * test_rss_bound checks it); with glibc's default arenas it grows with the
 * number of writer threads and the spread of value sizes.
 *
 * LRU.  Each stripe keeps its own list and a put evicts from its own
 * stripe's tail first, so eviction order is an approximation of a global
 * LRU (keys spread evenly over 256 stripes); a hit moves an item to its
 * stripe's head at most once per clock second, as memcached does (it uses
 * 60), to keep list churn off the read path.
 *
 * Reported sizes.  usage().bytes is memcached's item total
 * (kura_item_wire_total: 48 + 8 + key + 1 + value + 2), not the malloc
 * charge, so monitoring tools read the numbers they know; the real charge
 * appears in stats() as "cache_mem_used".
 *
 * Time.  exptime is kept in 32 bits: 0 stays 0 (never), a negative time
 * (already expired) is stored as 1, a time past 2106 as UINT32_MAX
 * (and is read back as such).  Liveness is still decided by
 * kura_item_liveness() on the stored value and the caller's clock.
 *
 * Locking.  Functions named do_cache_* run with the stripe lock of the item
 * they touch already held (memcached's convention).  Freed items are
 * collected under the lock and free()d after it is released.
 */
#include <errno.h>
#include <inttypes.h>
#include <pthread.h>
#include <stdalign.h>
#include <stdatomic.h>
#include <stddef.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "kura/backends.h"
#include "kura/siphash.h"
#include "kura/store.h"
#include "kura/evictions.h"
#include "seg.h"

/* 256 stripes.  make fuzz builds 4 (-DCACHE_STRIPE_BITS=2): the protocol
 * targets open a cache per input, and a listing or digest in an input
 * visits every stripe, which at 256 was most of an input's time. */
#ifndef CACHE_STRIPE_BITS
#define CACHE_STRIPE_BITS 8
#endif
_Static_assert(CACHE_STRIPE_BITS >= 1 && CACHE_STRIPE_BITS <= 8, "1 to 256 stripes");
#define CACHE_STRIPES (1u << CACHE_STRIPE_BITS)
/* Bucket index uses the low bits of the hash, the stripe the top bits: keep
 * them apart so the two choices stay independent. */
#define CACHE_MAX_BUCKETS_PER_STRIPE (1u << (32 - CACHE_STRIPE_BITS))
#define CACHE_DEFAULT_BNUM (CACHE_STRIPES * 64u)
#define CACHE_DEFAULT_LIMIT (64ull << 20)
/* How many items at an LRU tail are checked for a dead one before a live
 * tail item is evicted (memcached looks at 5). */
#define CACHE_TAIL_SCAN 5

enum {
    CACHE_FETCHED = 1u << 0,    /* read since it was stored */
};

typedef struct cache_item {
    struct cache_item *ci_hnext;        /* hash chain */
    struct cache_item *ci_prev;         /* LRU: toward the head (newer) */
    struct cache_item *ci_next;         /* LRU: toward the tail (older) */
    uint64_t ci_cas;
    uint32_t ci_hash;
    uint32_t ci_exptime;                /* see "Time" above */
    uint32_t ci_flags;
    uint32_t ci_vlen;
    uint32_t ci_atime;                  /* clock second of the last LRU bump */
    uint16_t ci_klen : 13;              /* up to KURA_KEY_MAX (asserted below) */
    uint16_t ci_bits : 3;               /* CACHE_FETCHED */
    char ci_data[];                     /* key, then value */
} cache_item;

#define CACHE_ITEM_HDR offsetof(cache_item, ci_data)
_Static_assert(KURA_KEY_MAX < 1 << 13, "ci_klen holds every key's length");

typedef struct cache_stripe {
    alignas(64) pthread_mutex_t cs_lock;
    cache_item **cs_buckets;
    uint32_t cs_mask;                   /* bucket count - 1 */
    bool cs_growing;                    /* a thread is allocating a bigger array */
    cache_item *cs_head;                /* LRU: most recently used */
    cache_item *cs_tail;                /* LRU: least recently used */
    uint64_t cs_items;
    uint64_t cs_bytes;                  /* memcached-style item totals */
    uint64_t cs_evictions;
    uint64_t cs_reclaimed;
    uint64_t cs_flushed_gone;           /* of those, under the flush watermark (store.h) */
    uint64_t cs_flushed_gone_bytes;
    uint64_t cs_expired_unfetched;
    uint64_t cs_evicted_unfetched;
} cache_stripe;

typedef struct cache {
    kura_store cc_base;                 /* first: kura_store * <-> cache * */
    cache_stripe *cc_stripes;
    /* The stripes' first bucket arrays, one block (one allocation, not one
     * a stripe: an engine made per fuzz input paid for 256); a stripe that
     * grows leaves its part of it unused until the close. */
    cache_item **cc_first_buckets;
    uint32_t cc_first_per;              /* buckets a stripe in it */
    uint64_t cc_limit;                  /* bytes */
    uint64_t cc_stripe_cap;             /* #capcnt: items per stripe (0 = no cap) */
    alignas(64) _Atomic uint64_t cc_mem_used;
    alignas(64) atomic_uint cc_evict_cursor;
    pthread_mutex_t cc_sweep_lock;      /* guards the two cursor fields */
    uint32_t cc_sweep_stripe;
    uint32_t cc_sweep_bucket;
} cache;

/* ---- hashing and sizes ------------------------------------------------- */

/* The process's SipHash key (include/kura/siphash.h says why the table
 * hashes with a key), copied here once, before the first cache opens
 * (cache_open): cache_hash reads it with no call and no check. */
static pthread_once_t cache_key_once = PTHREAD_ONCE_INIT;
static siphash_key cache_key;
static int cache_key_rc;

static void cache_key_init(void)
{
    cache_key_rc = siphash_process_key(&cache_key);
}

/* SipHash-1-3 under the process's key, folded to 32 bits: the top bits
 * choose the stripe, the low bits the bucket, and SipHash's output bits
 * are all alike, so the two choices stay independent.  O(klen). */
static inline uint32_t cache_hash(const void *key, size_t len)
{
    uint64_t h = siphash13(&cache_key, key, len);
    return (uint32_t)(h ^ (h >> 32));
}

/* What glibc's malloc really uses for a request of n bytes: its chunk with
 * the 8-byte size word, rounded to 16, at least 32; large requests are
 * mmap'd whole pages. */
static inline uint64_t cache_malloc_charge(size_t n)
{
    if (n >= 128 * 1024)
        return ((uint64_t)n + 16 + 4095) & ~(uint64_t)4095;
    uint64_t c = ((uint64_t)n + 8 + 15) & ~(uint64_t)15;
    return c < 32 ? 32 : c;
}

static inline uint64_t cache_item_charge(size_t klen, size_t vlen)
{
    return cache_malloc_charge(CACHE_ITEM_HDR + klen + vlen);
}

static inline uint64_t cache_buckets_charge(uint64_t n)
{
    return cache_malloc_charge(n * sizeof(cache_item *));
}

static inline int cache_liveness(const cache_item *it, const kura_clock *clk)
{
    return kura_item_liveness((int64_t)it->ci_exptime, it->ci_cas, clk);
}

static inline void cache_view(const cache_item *it, kura_item *v)
{
    v->key = it->ci_data;
    v->klen = it->ci_klen;
    v->val = it->ci_data + it->ci_klen;
    v->vlen = it->ci_vlen;
    v->flags = it->ci_flags;
    v->exptime = (int64_t)it->ci_exptime;
    v->cas = it->ci_cas;
    v->vref = NULL;
}

static inline cache_stripe *cache_stripe_of(cache *c, uint32_t hash)
{
    return &c->cc_stripes[hash >> (32 - CACHE_STRIPE_BITS)];
}

static inline void cache_release(cache *c, uint64_t bytes)
{
    atomic_fetch_sub_explicit(&c->cc_mem_used, bytes, memory_order_relaxed);
}

/* Frees a list of items chained through ci_hnext and returns their bytes to
 * the budget.  Called without any lock.  O(n). */
static void cache_free_list(cache *c, cache_item *list)
{
    uint64_t bytes = 0;
    while (list) {
        cache_item *next = list->ci_hnext;
        bytes += cache_item_charge(list->ci_klen, list->ci_vlen);
        free(list);
        list = next;
    }
    if (bytes)
        cache_release(c, bytes);
}

/* ---- work on one stripe, its lock held --------------------------------- */

static inline void do_cache_lru_unlink(cache_stripe *st, cache_item *it)
{
    if (it->ci_prev)
        it->ci_prev->ci_next = it->ci_next;
    else
        st->cs_head = it->ci_next;
    if (it->ci_next)
        it->ci_next->ci_prev = it->ci_prev;
    else
        st->cs_tail = it->ci_prev;
}

static inline void do_cache_lru_push(cache_stripe *st, cache_item *it)
{
    it->ci_prev = NULL;
    it->ci_next = st->cs_head;
    if (st->cs_head)
        st->cs_head->ci_prev = it;
    else
        st->cs_tail = it;
    st->cs_head = it;
}

/* Returns the address of the link that points at key's item (so the caller
 * can unlink or replace it), or of the chain's terminating NULL.  O(chain). */
static inline cache_item **do_cache_find(cache_stripe *st, uint32_t hash,
                                         const char *key, size_t klen)
{
    cache_item **pp = &st->cs_buckets[hash & st->cs_mask];
    cache_item *it;
    while ((it = *pp) != NULL) {
        if (it->ci_hash == hash && it->ci_klen == klen &&
            memcmp(it->ci_data, key, klen) == 0)
            break;
        pp = &it->ci_hnext;
    }
    return pp;
}

/* Takes *pp (an item) out of the table and the LRU, adjusting counts. */
static inline cache_item *do_cache_unlink(cache_stripe *st, cache_item **pp)
{
    cache_item *it = *pp;
    *pp = it->ci_hnext;
    do_cache_lru_unlink(st, it);
    st->cs_items--;
    st->cs_bytes -= kura_item_wire_total(it->ci_klen, it->ci_vlen, it->ci_flags);
    it->ci_hnext = NULL;
    return it;
}

/* Counts a dead item just unlinked as reclaimed (and as flushed, when its
 * cas is under clk's watermark: kura_store_usage.flushed_gone). */
static inline void do_cache_count_reclaim(cache_stripe *st, const cache_item *it,
                                          const kura_clock *clk)
{
    st->cs_reclaimed++;
    if (!(it->ci_bits & CACHE_FETCHED))
        st->cs_expired_unfetched++;
    if (it->ci_cas < clk->oldest_cas) {
        st->cs_flushed_gone++;
        st->cs_flushed_gone_bytes += kura_item_wire_total(it->ci_klen, it->ci_vlen, it->ci_flags);
    }
}

/* Unlinks a dead item and counts it as reclaimed; the caller frees it. */
static inline cache_item *do_cache_reclaim(cache_stripe *st, cache_item **pp,
                                           const kura_clock *clk)
{
    cache_item *it = do_cache_unlink(st, pp);
    do_cache_count_reclaim(st, it, clk);
    return it;
}

/* Unlinks an item met outside a lookup (LRU tail), finding its link. */
static cache_item *do_cache_unlink_item(cache_stripe *st, cache_item *it)
{
    cache_item **pp = &st->cs_buckets[it->ci_hash & st->cs_mask];
    while (*pp != it)
        pp = &(*pp)->ci_hnext;
    return do_cache_unlink(st, pp);
}

/* Looks key up; a dead item met is unlinked into *dead (free it after
 * unlocking) and its liveness stored in *why.  Returns the link of the live
 * item, or of NULL. */
static inline cache_item **do_cache_lookup(cache_stripe *st, uint32_t hash,
                                           const char *key, size_t klen,
                                           const kura_clock *clk,
                                           cache_item **dead, int *why)
{
    cache_item **pp = do_cache_find(st, hash, key, klen);
    *why = KURA_LIVE;
    if (*pp) {
        int l = cache_liveness(*pp, clk);
        if (l != KURA_LIVE) {
            *why = l;
            *dead = do_cache_reclaim(st, pp, clk);
            /* Keys are unique: searching again ends at the chain's NULL,
             * where the caller may link a new item. */
            pp = do_cache_find(st, hash, key, klen);
        }
    }
    return pp;
}

/* Frees room in one stripe: the first dead item among the CACHE_TAIL_SCAN
 * oldest, else the oldest (an eviction).  Returns it unlinked (the caller
 * frees it) or NULL if the stripe is empty.  O(CACHE_TAIL_SCAN + chain). */
static cache_item *do_cache_evict_one(cache_stripe *st, const kura_clock *clk)
{
    cache_item *it = st->cs_tail;
    for (int i = 0; it && i < CACHE_TAIL_SCAN; i++, it = it->ci_prev) {
        if (cache_liveness(it, clk) != KURA_LIVE) {
            cache_item *dead = do_cache_unlink_item(st, it);
            do_cache_count_reclaim(st, dead, clk);
            return dead;
        }
    }
    it = st->cs_tail;
    if (!it)
        return NULL;
    do_cache_unlink_item(st, it);
    st->cs_evictions++;
    if (!(it->ci_bits & CACHE_FETCHED))
        st->cs_evicted_unfetched++;
    return it;
}

/* An evicted item (unlinked, no lock held) to the observer of evictions
 * (include/kura/evictions.h: "watch evictions"), as memcached's eviction
 * line shows it. */
static void cache_watch_eviction(const cache_item *it, const kura_clock *clk)
{
    long long ttl = it->ci_exptime ? (long long)it->ci_exptime - clk->now : -1;
    kura_evicted(it->ci_data, it->ci_klen, it->ci_bits & CACHE_FETCHED, ttl,
                 (long long)clk->now - (long long)it->ci_atime, it->ci_vlen);
}

/* ---- memory and growth, no lock held ----------------------------------- */

/* Evicts until the bytes in use (reservations included) fit the limit.
 * Tries the home stripe first, then the others round-robin from a shared
 * cursor; holds one stripe lock at a time.  KURA_ENOMEM when every stripe is
 * empty and it still does not fit (other puts hold the memory).
 * O(items evicted). */
static int cache_make_room(cache *c, cache_stripe *home, const kura_clock *clk)
{
    while (atomic_load_explicit(&c->cc_mem_used, memory_order_relaxed) > c->cc_limit) {
        cache_item *victim;
        uint64_t evictions;
        pthread_mutex_lock(&home->cs_lock);
        evictions = home->cs_evictions;
        victim = do_cache_evict_one(home, clk);
        bool evicted = home->cs_evictions != evictions;
        pthread_mutex_unlock(&home->cs_lock);
        for (unsigned i = 0; !victim && i < CACHE_STRIPES; i++) {
            unsigned s = atomic_fetch_add_explicit(&c->cc_evict_cursor, 1,
                                                   memory_order_relaxed) % CACHE_STRIPES;
            cache_stripe *st = &c->cc_stripes[s];
            pthread_mutex_lock(&st->cs_lock);
            evictions = st->cs_evictions;
            victim = do_cache_evict_one(st, clk);
            evicted = st->cs_evictions != evictions;
            pthread_mutex_unlock(&st->cs_lock);
        }
        if (!victim)
            return KURA_ENOMEM;
        if (evicted && kura_evictions_observed())
            cache_watch_eviction(victim, clk);
        cache_free_list(c, victim);
    }
    return KURA_OK;
}

/* True if b is a stripe's part of the first block (freed with it). */
static bool cache_first_buckets(const cache *c, cache_item **b)
{
    return c->cc_first_buckets && b >= c->cc_first_buckets &&
           b < c->cc_first_buckets + (size_t)CACHE_STRIPES * c->cc_first_per;
}

/* Doubles a stripe's bucket array if it still has old_n buckets.  The new
 * array is allocated without the lock; the rehash runs under it and costs
 * O(old_n + items in the stripe), stalling that stripe only. */
static void cache_grow(cache *c, cache_stripe *st, uint32_t old_n)
{
    uint64_t new_n = (uint64_t)old_n * 2;
    cache_item **nb = calloc(new_n, sizeof(*nb));
    cache_item **ob = NULL;

    pthread_mutex_lock(&st->cs_lock);
    if (nb && st->cs_mask + 1 == old_n) {
        uint32_t mask = (uint32_t)(new_n - 1);
        ob = st->cs_buckets;
        for (uint32_t b = 0; b < old_n; b++) {
            cache_item *it = ob[b];
            while (it) {
                cache_item *next = it->ci_hnext;
                it->ci_hnext = nb[it->ci_hash & mask];
                nb[it->ci_hash & mask] = it;
                it = next;
            }
        }
        st->cs_buckets = nb;
        st->cs_mask = mask;
        nb = NULL;
    }
    st->cs_growing = false;
    pthread_mutex_unlock(&st->cs_lock);

    if (ob) {
        bool first = cache_first_buckets(c, ob);
        if (!first)
            free(ob);
        atomic_fetch_add_explicit(&c->cc_mem_used,
                                  cache_buckets_charge(new_n) -
                                  (first ? 0 : cache_buckets_charge(old_n)),
                                  memory_order_relaxed);
    }
    free(nb);
}

/* After linking an item: decides under the lock whether this thread should
 * grow the stripe; returns the current bucket count if so, else 0. */
static inline uint32_t do_cache_want_grow(cache_stripe *st)
{
    uint64_t n = (uint64_t)st->cs_mask + 1;
    if (st->cs_growing || st->cs_items <= n + n / 2 || n >= CACHE_MAX_BUCKETS_PER_STRIPE)
        return 0;
    st->cs_growing = true;
    return (uint32_t)n;
}

/* Checks what storing a value of vlen bytes takes: KURA_ETOOBIG past 32
 * bits, KURA_ENOMEM past the whole memory limit.  (-I is the
 * interpreter's, store/update.c.) */
static int cache_check_size(const cache *c, size_t klen, size_t vlen)
{
    if (vlen > UINT32_MAX - CACHE_ITEM_HDR - KURA_KEY_MAX)
        return KURA_ETOOBIG;
    if (cache_item_charge(klen, vlen) > c->cc_limit)
        return KURA_ENOMEM;
    return KURA_OK;
}

/* A new item's block with the key, and the value's v0 and v1 copied in;
 * cas, flags and exptime are set by the caller.  NULL: out of memory. */
static cache_item *cache_item_new(const char *key, size_t klen, uint32_t hash,
                                  const void *v0, size_t l0, const void *v1, size_t l1,
                                  const kura_clock *clk)
{
    cache_item *ni = malloc(CACHE_ITEM_HDR + klen + l0 + l1);
    if (!ni)
        return NULL;
    ni->ci_hash = hash;
    ni->ci_vlen = (uint32_t)(l0 + l1);
    ni->ci_atime = (uint32_t)clk->now;
    ni->ci_klen = (uint16_t)klen & 0x1fff;
    ni->ci_bits = 0;
    memcpy(ni->ci_data, key, klen);
    if (l0)
        memcpy(ni->ci_data + klen, v0, l0);
    if (l1)
        memcpy(ni->ci_data + klen + l0, v1, l1);
    return ni;
}

/* Links a new item where *pp points (replacing the item there, if any, which
 * is returned unlinked for the caller to free) and at the LRU head. */
static inline cache_item *do_cache_link(cache_stripe *st, cache_item **pp, cache_item *ni)
{
    cache_item *old = *pp;
    if (old) {
        ni->ci_hnext = old->ci_hnext;
        *pp = ni;
        do_cache_lru_unlink(st, old);
        st->cs_bytes -= kura_item_wire_total(old->ci_klen, old->ci_vlen, old->ci_flags);
        old->ci_hnext = NULL;
    } else {
        cache_item **head = &st->cs_buckets[ni->ci_hash & st->cs_mask];
        ni->ci_hnext = *head;
        *head = ni;
        st->cs_items++;
    }
    st->cs_bytes += kura_item_wire_total(ni->ci_klen, ni->ci_vlen, ni->ci_flags);
    do_cache_lru_push(st, ni);
    return old;
}

/* Pushes item `it` (may be NULL) onto a free list chained through ci_hnext. */
static inline cache_item *cache_list_add(cache_item *list, cache_item *it)
{
    if (it) {
        it->ci_hnext = list;
        list = it;
    }
    return list;
}

/* #capcnt: past the stripe's share of the count, its oldest item (or a
 * dead one near the tail) goes onto *list.  Never the item just linked,
 * which is at the head of two or more.  Called under the stripe's lock. */
static inline void do_cache_cap_count(cache *c, cache_stripe *st, const kura_clock *clk,
                                      cache_item **list)
{
    if (c->cc_stripe_cap && st->cs_items > c->cc_stripe_cap)
        *list = cache_list_add(*list, do_cache_evict_one(st, clk));
}

/* ---- the operations ---------------------------------------------------- */

/* get: no allocation, no system call on a hit; one stripe lock.  The LRU
 * bump happens at most once per clock second per item. */
static int cache_get(kura_store *s, const char *key, size_t klen, const kura_clock *clk,
                     kura_item_fn fn, void *arg)
{
    cache *c = (cache *)s;
    cache_item *dead = NULL, *it;
    int why, rc;

    if (!kura_key_ok(key, klen))
        return KURA_NOTFOUND;
    uint32_t hash = cache_hash(key, klen);
    cache_stripe *st = cache_stripe_of(c, hash);

    pthread_mutex_lock(&st->cs_lock);
    it = *do_cache_lookup(st, hash, key, klen, clk, &dead, &why);
    if (it) {
        rc = KURA_OK;
        if (fn) {
            kura_item v;
            cache_view(it, &v);
            rc = fn(arg, &v);
        }
        it->ci_bits |= CACHE_FETCHED;
        uint32_t now = (uint32_t)clk->now;
        if (it->ci_atime != now) {
            it->ci_atime = now;
            if (st->cs_head != it) {
                do_cache_lru_unlink(st, it);
                do_cache_lru_push(st, it);
            }
        }
    } else {
        rc = why == KURA_DEAD_EXPIRED ? KURA_EXPIRED
           : why == KURA_DEAD_FLUSHED ? KURA_FLUSHED : KURA_NOTFOUND;
    }
    pthread_mutex_unlock(&st->cs_lock);
    if (dead)
        cache_free_list(c, dead);
    return rc;
}

/* rmw (store.h): the decision sees the live item (or NULL) under the
 * stripe lock.  A blind put (set) has its item's bytes reserved, room
 * made (evicting) and its block allocated and filled before the lock, so
 * the lock is held for the link alone.  Any other REPLACE allocates its
 * block under the lock, once decided (a failing add, replace or cas
 * neither allocates nor evicts; parts may point into the current item,
 * which is freed only after the copy), and evicts to fit after
 * unlocking, so the limit may be passed by one item for a moment.
 * TOUCH changes the item in place and counts as a use.  Dead items the
 * lookup meets are reclaimed whatever the decision. */
static int cache_rmw(kura_store *s, const char *key, size_t klen, const kura_clock *clk,
                     const kura_rmw_hint *hint, kura_update_fn fn, void *arg)
{
    cache *c = (cache *)s;
    cache_item *free_list = NULL, *dead = NULL, *ni = NULL, *cur, **pp;
    const kura_item *put = hint->blind ? hint->put : NULL;
    kura_item view;
    kura_update out;
    uint32_t grow = 0;
    uint64_t charge = 0, reserved = 0;
    int why, rc;

    uint32_t hash = cache_hash(key, klen);
    cache_stripe *st = cache_stripe_of(c, hash);

    if (put) {
        if ((rc = cache_check_size(c, klen, put->vlen)) != KURA_OK)
            return rc;
        charge = cache_item_charge(klen, put->vlen);
        atomic_fetch_add_explicit(&c->cc_mem_used, charge, memory_order_relaxed);
        if ((rc = cache_make_room(c, st, clk)) != KURA_OK)
            goto unreserve;
        if (!(ni = cache_item_new(key, klen, hash, put->val, put->vlen, NULL, 0, clk))) {
            rc = KURA_ENOMEM;
            goto unreserve;
        }
    }

    memset(&out, 0, sizeof(out));
    pthread_mutex_lock(&st->cs_lock);
    pp = do_cache_lookup(st, hash, key, klen, clk, &dead, &why);
    free_list = cache_list_add(free_list, dead);
    cur = *pp;
    if (cur)
        cache_view(cur, &view);
    rc = fn(arg, cur ? &view : NULL, &out);

    switch (out.action) {
    case KURA_UPDATE_REPLACE: {
        if (!ni) {
            size_t l0 = out.part[0].len, l1 = out.part[1].len;
            int err = cache_check_size(c, klen, l0 + l1);
            ni = err ? NULL : cache_item_new(key, klen, hash, out.part[0].base, l0,
                                             out.part[1].base, l1, clk);
            if (!ni) {
                rc = err ? err : KURA_ENOMEM;
                break;
            }
            reserved = cache_item_charge(klen, l0 + l1);
            atomic_fetch_add_explicit(&c->cc_mem_used, reserved, memory_order_relaxed);
        }
        ni->ci_cas = out.cas;
        ni->ci_exptime = cache_exptime32(out.exptime);
        ni->ci_flags = out.flags;
        free_list = cache_list_add(free_list, do_cache_link(st, pp, ni));
        ni = NULL;
        charge = 0;
        do_cache_cap_count(c, st, clk, &free_list);
        grow = do_cache_want_grow(st);
        break;
    }
    case KURA_UPDATE_TOUCH:
        if (cur) {
            cur->ci_exptime = cache_exptime32(out.exptime);
            cur->ci_bits |= CACHE_FETCHED;
            cur->ci_atime = (uint32_t)clk->now;
            if (st->cs_head != cur) {
                do_cache_lru_unlink(st, cur);
                do_cache_lru_push(st, cur);
            }
        }
        break;
    case KURA_UPDATE_REMOVE:
        if (cur)
            free_list = cache_list_add(free_list, do_cache_unlink(st, pp));
        break;
    default:
        break;
    }
    pthread_mutex_unlock(&st->cs_lock);

    cache_free_list(c, free_list);
    if (grow)
        cache_grow(c, st, grow);
    if (reserved)
        cache_make_room(c, st, clk);
    free(ni);                           /* a put's item not linked */
unreserve:
    if (charge)
        cache_release(c, charge);
    return rc;
}

/* Walks one stripe's LRU list under its lock, live items only.
 * O(items in it). */
static int cache_walk_stripe(cache *c, unsigned part, const kura_clock *clk, kura_item_fn fn,
                             void *arg)
{
    int rc = 0;
    cache_stripe *st = &c->cc_stripes[part];
    pthread_mutex_lock(&st->cs_lock);
    for (cache_item *it = st->cs_head; it && rc == 0; it = it->ci_next) {
        if (cache_liveness(it, clk) == KURA_LIVE) {
            kura_item v;
            cache_view(it, &v);
            rc = fn(arg, &v);
        }
    }
    pthread_mutex_unlock(&st->cs_lock);
    return rc;
}

/* iterate (store.h: kura_iter_spec): a part is a stripe; the whole cache
 * is every stripe in turn, one lock at a time.  No order, and the values
 * are at hand, so keys_only changes nothing. */
static int cache_iterate(kura_store *s, const kura_iter_spec *spec, const kura_clock *clk,
                         kura_item_fn fn, void *arg)
{
    cache *c = (cache *)s;
    int rc = 0;
    switch (spec->scope) {
    case KURA_ITER_ALL:
        for (unsigned i = 0; i < CACHE_STRIPES && rc == 0; i++)
            rc = cache_walk_stripe(c, i, clk, fn, arg);
        return rc;
    case KURA_ITER_PART:
        if (spec->part >= CACHE_STRIPES)
            return KURA_EINVAL;
        return cache_walk_stripe(c, spec->part, clk, fn, arg);
    default:
        return KURA_EINVAL;
    }
}

/* sweep: resumes a walk over every stripe's buckets where the last call
 * stopped; a bucket visited or an item examined is one unit of budget.
 * Holds one stripe lock at a time, for at most `budget` units. */
static long cache_sweep(kura_store *s, const kura_clock *clk, size_t budget)
{
    cache *c = (cache *)s;
    size_t work = 0;
    long reclaimed = 0;

    pthread_mutex_lock(&c->cc_sweep_lock);
    /* At most one full round per call, however large the budget. */
    for (unsigned round = 0; work < budget && round < CACHE_STRIPES; ) {
        cache_stripe *st = &c->cc_stripes[c->cc_sweep_stripe];
        cache_item *dead = NULL;
        uint32_t b = c->cc_sweep_bucket;

        pthread_mutex_lock(&st->cs_lock);
        uint32_t n = st->cs_mask + 1;
        for (; b < n && work < budget; b++) {
            cache_item **pp = &st->cs_buckets[b];
            work++;
            while (*pp) {
                work++;
                if (cache_liveness(*pp, clk) != KURA_LIVE) {
                    dead = cache_list_add(dead, do_cache_reclaim(st, pp, clk));
                    reclaimed++;
                } else {
                    pp = &(*pp)->ci_hnext;
                }
            }
        }
        pthread_mutex_unlock(&st->cs_lock);

        cache_free_list(c, dead);
        if (b >= n) {
            c->cc_sweep_bucket = 0;
            c->cc_sweep_stripe = (c->cc_sweep_stripe + 1) % CACHE_STRIPES;
            round++;
        } else {
            c->cc_sweep_bucket = b;
        }
    }
    pthread_mutex_unlock(&c->cc_sweep_lock);
    return reclaimed;
}

static int cache_sync(kura_store *s)
{
    (void)s;
    return KURA_OK;
}

/* usage: sums the stripes' counters, each under its lock.  O(stripes). */
static void cache_usage(kura_store *s, kura_store_usage *u)
{
    cache *c = (cache *)s;

    memset(u, 0, sizeof(*u));
    u->limit_maxbytes = c->cc_limit;
    for (unsigned i = 0; i < CACHE_STRIPES; i++) {
        cache_stripe *st = &c->cc_stripes[i];
        pthread_mutex_lock(&st->cs_lock);
        u->curr_items += st->cs_items;
        u->bytes += st->cs_bytes;
        u->evictions += st->cs_evictions;
        u->reclaimed += st->cs_reclaimed;
        u->flushed_gone += st->cs_flushed_gone;
        u->flushed_gone_bytes += st->cs_flushed_gone_bytes;
        u->expired_unfetched += st->cs_expired_unfetched;
        u->evicted_unfetched += st->cs_evicted_unfetched;
        pthread_mutex_unlock(&st->cs_lock);
    }
}

static void cache_stats(kura_store *s, kura_stat_fn emit, void *arg)
{
    cache *c = (cache *)s;
    uint64_t buckets = 0, hash_bytes = 0;
    char buf[32];

    for (unsigned i = 0; i < CACHE_STRIPES; i++) {
        cache_stripe *st = &c->cc_stripes[i];
        pthread_mutex_lock(&st->cs_lock);
        buckets += (uint64_t)st->cs_mask + 1;
        hash_bytes += ((uint64_t)st->cs_mask + 1) * sizeof(cache_item *);
        pthread_mutex_unlock(&st->cs_lock);
    }
    int power = 0;
    while ((1ull << power) < buckets)
        power++;

    snprintf(buf, sizeof(buf), "%d", power);
    emit(arg, "hash_power_level", buf);
    snprintf(buf, sizeof(buf), "%" PRIu64, hash_bytes);
    emit(arg, "hash_bytes", buf);
    snprintf(buf, sizeof(buf), "%" PRIu64, buckets);
    emit(arg, "hash_buckets", buf);
    snprintf(buf, sizeof(buf), "%u", CACHE_STRIPES);
    emit(arg, "stripes", buf);
    snprintf(buf, sizeof(buf), "%" PRIu64,
             atomic_load_explicit(&c->cc_mem_used, memory_order_relaxed));
    emit(arg, "cache_mem_used", buf);
    snprintf(buf, sizeof(buf), "%zu", CACHE_ITEM_HDR);
    emit(arg, "cache_item_header", buf);
}

static int cache_load_state(kura_store *s, kura_store_state *st)
{
    (void)s;
    memset(st, 0, sizeof(*st));
    return KURA_OK;
}

static int cache_save_state(kura_store *s, const kura_store_state *st)
{
    (void)s;
    (void)st;
    return KURA_OK;
}

/* Frees every item, the bucket arrays and the store.  O(items). */
static void cache_close(kura_store *s)
{
    cache *c = (cache *)s;

    if (!c)
        return;
    if (c->cc_stripes) {
        for (unsigned i = 0; i < CACHE_STRIPES; i++) {
            cache_stripe *st = &c->cc_stripes[i];
            cache_item *it = st->cs_head;
            while (it) {
                cache_item *next = it->ci_next;
                free(it);
                it = next;
            }
            if (!cache_first_buckets(c, st->cs_buckets))
                free(st->cs_buckets);
            pthread_mutex_destroy(&st->cs_lock);
        }
        free(c->cc_stripes);
    }
    free(c->cc_first_buckets);
    pthread_mutex_destroy(&c->cc_sweep_lock);
    free(c);
}

static const kura_store_ops cache_ops = {
    .name = "cache",
    .get = cache_get,
    .rmw = cache_rmw,
    .parts = CACHE_STRIPES,
    .iterate = cache_iterate,
    .sweep = cache_sweep,
    .sync = cache_sync,
    .usage = cache_usage,
    .stats = cache_stats,
    .load_state = cache_load_state,
    .save_state = cache_save_state,
    .close = cache_close,
};

/* Opens an empty cache.  Parameters: "#capsiz=SIZE" (memory limit, wins
 * over cfg->mem_limit; default 64 MiB), "#capcnt=N" (at most about N items:
 * each stripe holds at most its share, N / CACHE_STRIPES rounded up, and
 * evicts its oldest past it, as Kyoto's cache database caps each of its
 * slots) and "#bnum=N" (initial buckets in all, spread over the stripes).
 * Anything else is rejected before any allocation. */
int cache_open(const char *path, kura_params *params, const kura_store_config *cfg,
               kura_store **out, char *err, size_t errlen)
{
    const char *layout = kura_param_take(params, "layout");
    const char *capsiz = kura_param_take(params, "capsiz");
    const char *bnum = kura_param_take(params, "bnum");
    const char *capcnt = kura_param_take(params, "capcnt");
    uint64_t limit = cfg && cfg->mem_limit ? cfg->mem_limit : CACHE_DEFAULT_LIMIT;
    uint64_t buckets = CACHE_DEFAULT_BNUM;
    pthread_mutexattr_t attr;
    bool attr_ok = false;
    cache *c = NULL;
    int rc;

    *out = NULL;
    if ((rc = kura_params_reject_unused(params, path, err, errlen)) != KURA_OK)
        return rc;
    if (layout && strcmp(layout, "seg") != 0 && strcmp(layout, "heap") != 0) {
        snprintf(err, errlen, "database name '%s': bad layout '%s' (seg or heap)", path, layout);
        return KURA_EINVAL;
    }
    pthread_once(&cache_key_once, cache_key_init);
    if (cache_key_rc != KURA_OK) {
        snprintf(err, errlen, "database name '%s': no random bytes for the hash key "
                 "(getrandom, /dev/urandom)", path);
        return cache_key_rc;
    }
    if (capsiz && (kura_parse_size(capsiz, &limit) != KURA_OK || limit == 0)) {
        snprintf(err, errlen, "database name '%s': bad capsiz '%s' (a size such as 64m)",
                 path, capsiz);
        return KURA_EINVAL;
    }
    uint64_t cap = 0;
    if (capcnt && (kura_parse_size(capcnt, &cap) != KURA_OK || cap == 0)) {
        snprintf(err, errlen, "database name '%s': bad capcnt '%s' (a positive number of items)",
                 path, capcnt);
        return KURA_EINVAL;
    }
    if (bnum) {
        char *end;
        errno = 0;
        unsigned long long v = strtoull(bnum, &end, 10);
        if (errno || end == bnum || *end || bnum[0] == '-' || v == 0 ||
            v > (unsigned long long)CACHE_STRIPES * CACHE_MAX_BUCKETS_PER_STRIPE) {
            snprintf(err, errlen, "database name '%s': bad bnum '%s' (a positive number)",
                     path, bnum);
            return KURA_EINVAL;
        }
        buckets = v;
    }
    if (!layout || strcmp(layout, "seg") == 0) {
        if ((rc = segcache_make(out, limit, cap, buckets, cfg)) != KURA_OK)
            snprintf(err, errlen, "database name '%s': cannot allocate the cache", path);
        return rc;
    }
    uint32_t per = 1;
    while ((uint64_t)per * CACHE_STRIPES < buckets && per < CACHE_MAX_BUCKETS_PER_STRIPE)
        per *= 2;

    rc = KURA_ENOMEM;
    if (!(c = calloc(1, sizeof(*c))))
        goto fail;
    c->cc_base.ops = &cache_ops;
    c->cc_limit = limit;
    c->cc_stripe_cap = (cap + CACHE_STRIPES - 1) / CACHE_STRIPES;
    atomic_init(&c->cc_mem_used, 0);
    atomic_init(&c->cc_evict_cursor, 0);
    pthread_mutex_init(&c->cc_sweep_lock, NULL);
    c->cc_stripes = aligned_alloc(alignof(cache_stripe), CACHE_STRIPES * sizeof(cache_stripe));
    if (!c->cc_stripes)
        goto fail;
    memset(c->cc_stripes, 0, CACHE_STRIPES * sizeof(cache_stripe));
    if (pthread_mutexattr_init(&attr) != 0)
        goto fail;
    attr_ok = true;
    /* Critical sections are a few dozen instructions: spin briefly before
     * sleeping. */
    pthread_mutexattr_settype(&attr, PTHREAD_MUTEX_ADAPTIVE_NP);
    for (unsigned i = 0; i < CACHE_STRIPES; i++)
        pthread_mutex_init(&c->cc_stripes[i].cs_lock, &attr);
    if (!(c->cc_first_buckets = calloc((size_t)CACHE_STRIPES * per, sizeof(cache_item *))))
        goto fail;
    c->cc_first_per = per;
    atomic_fetch_add_explicit(&c->cc_mem_used,
                              cache_malloc_charge((size_t)CACHE_STRIPES * per *
                                                  sizeof(cache_item *)),
                              memory_order_relaxed);
    for (unsigned i = 0; i < CACHE_STRIPES; i++) {
        cache_stripe *st = &c->cc_stripes[i];
        st->cs_mask = per - 1;
        st->cs_buckets = c->cc_first_buckets + (size_t)i * per;
    }
    pthread_mutexattr_destroy(&attr);
    *out = &c->cc_base;
    return KURA_OK;

fail:
    if (attr_ok)
        pthread_mutexattr_destroy(&attr);
    snprintf(err, errlen, "database name '%s': cannot allocate the cache", path);
    cache_close(c ? &c->cc_base : NULL);
    return rc;
}
