/*
 * hashdb_index.c - the hash file's in-memory index: key -> newest record.
 *
 * HD_STRIPES independent open-addressed hash tables (hd_stripe in
 * hashdb_int.h says how a table is laid out), each behind its own rwlock.
 * A key's stripe is chosen by the low bits of its 64-bit hash (SipHash-1-3
 * under a key random per process, so that clients cannot choose keys that
 * collide), its line of slots by the middle bits, its tag by the top 16.
 * A table doubles when its used slots (entries and tombstones) would pass
 * 3/4, or is rebuilt at its size when tombstones are most of them, under
 * its own write lock: growth is online and touches 1/HD_STRIPES of the keys
 * at a time, so `bnum` is only a starting size.  Every function here
 * expects the caller to hold the stripe's lock (a write lock for the ones
 * that change it).
 */
#include <stddef.h>
#include <stdlib.h>
#include <sys/mman.h>
#include <string.h>
#include <time.h>

#include "hashdb_int.h"
#include "kura/testhooks.h"
#include "kura/siphash.h"

/* ---- the arena ---------------------------------------------------- */

#define CHUNK (32u << 20)

/* Huge pages for the index (it is read at random; with 4 KiB pages most
 * lookups would also miss the TLB), but not at once: taking a huge page at
 * a fault may mean compacting memory, or, on a virtual machine whose host
 * took freed memory back, faulting 512 pages in on the host: on this
 * machine, a 1M-key load right after another process freed its memory ran
 * 0.65 s with huge pages at the fault against 0.46 s without.  Such a
 * stall must not fall on a request (it would hold a stripe lock), so a
 * chunk made while the store serves is advised for huge pages once it is
 * HUGE_AFTER seconds old (by the background thread, hdx_advise_huge), and
 * the kernel's khugepaged then collapses its pages in its own time.  While
 * the index is loaded at open (huge_now), nobody waits on a stripe and the
 * whole index is about to be read at random: chunks get huge pages at once
 * (1M reads after a load: 0.38 s with them, 0.47 s without). */
#define HUGE_AFTER 10.0

struct hd_chunk {
    struct hd_chunk *next;
    size_t len;
    double born;                /* monotonic seconds */
    bool advised;
};

static double mono_now(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + (double)ts.tv_nsec / 1e9;
}

static int log2_of(size_t n)
{
    int l = 0;
    while (((size_t)1 << l) < n)
        l++;
    return l;
}

/* n bytes, 64-byte aligned, zeroed.  Power-of-two sizes are reused after
 * arena_free(). */
static void *arena_alloc(hd_arena *a, size_t n)
{
    void *p = NULL;
    n = (n + 63) & ~(size_t)63;
    pthread_mutex_lock(&a->mu);
    int l = log2_of(n);
    if (((size_t)1 << l) == n && l < 48 && a->free_pow2[l]) {
        p = a->free_pow2[l];
        a->free_pow2[l] = *(void **)p;
        pthread_mutex_unlock(&a->mu);
        memset(p, 0, n);
        return p;
    }
    if (a->left < n) {
        size_t len = n + 64 > CHUNK ? n + 64 : CHUNK;
        void *m = mmap(NULL, len, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
        if (m == MAP_FAILED) {
            pthread_mutex_unlock(&a->mu);
            return NULL;
        }
        if ((uintptr_t)m + len > HD_SLOT_PTR) {
            /* a slot keeps 48 bits of an entry's address; user space
             * addresses are below 2^47 unless asked for otherwise */
            munmap(m, len);
            pthread_mutex_unlock(&a->mu);
            return NULL;
        }
        struct hd_chunk *c = m;
        c->next = a->chunks;
        c->len = len;
        c->born = mono_now();
        if (a->huge_now) {
            (void)madvise(m, len, MADV_HUGEPAGE);
            c->advised = true;
        }
        a->chunks = c;
        a->cur = (unsigned char *)m + 64;
        a->left = len - 64;
    }
    p = a->cur;
    a->cur += n;
    a->left -= n;
    pthread_mutex_unlock(&a->mu);
    return p;                       /* fresh anonymous memory is zero */
}

static void arena_free(hd_arena *a, void *p, size_t n)
{
    n = (n + 63) & ~(size_t)63;
    int l = log2_of(n);
    if (((size_t)1 << l) != n || l >= 48)
        return;                     /* not reusable: stays until close */
    pthread_mutex_lock(&a->mu);
    *(void **)p = a->free_pow2[l];
    a->free_pow2[l] = p;
    pthread_mutex_unlock(&a->mu);
}

void hdx_advise_huge(hashdb *db)
{
    hd_arena *a = &db->arena;
    double now = mono_now();
    pthread_mutex_lock(&a->mu);
    for (struct hd_chunk *c = a->chunks; c; c = c->next)
        if (!c->advised && now - c->born >= HUGE_AFTER) {
            (void)madvise(c, c->len, MADV_HUGEPAGE);
            c->advised = true;
        }
    pthread_mutex_unlock(&a->mu);
}

static void arena_destroy(hd_arena *a)
{
    while (a->chunks) {
        struct hd_chunk *n = a->chunks->next;
        munmap(a->chunks, a->chunks->len);
        a->chunks = n;
    }
    pthread_mutex_destroy(&a->mu);
}

/* ---- the hash ------------------------------------------------------ */

/* The hash key.  Keyed, so that clients choosing keys cannot pile them on
 * one probe sequence (include/kura/siphash.h).  The key is the database's,
 * not the process's: drawn at random when the database is created (or when
 * no checkpoint holds one: an older format, a rebuild) and kept in the
 * checkpoint, whose entries are listed stripe by stripe.  Under the same
 * key they load stripe by stripe again, each stripe's table in cache while
 * it fills; under a new key every insert would land on a random stripe
 * and miss the cache (1M keys: open took 0.19-0.33 s instead of 0.10 s).
 * The key is as secret as the checkpoint file (0600), which a remote
 * client never sees. */
static uint64_t arena_hash(const hd_arena *a, const char *key, size_t klen)
{
    return siphash13(&a->key, key, klen);
}

static inline uint64_t tag_of(uint64_t h)
{
    return h & ~HD_SLOT_PTR;
}

static inline uint64_t slot_of(const hd_ent *e, uint64_t h)
{
    return tag_of(h) | (uint64_t)(uintptr_t)e;
}

static inline hd_ent *ent_in(uint64_t v)
{
    return (hd_ent *)(uintptr_t)(v & HD_SLOT_PTR);
}

static void publish(hd_stripe *s, uint64_t *slot, size_t nslot)
{
    /* the total for stats, changed by the difference (mod 2^64: a table
     * never shrinks today, but the sum stays right if one does) */
    atomic_fetch_add_explicit(&s->arena->nslots, (uint64_t)nslot - (uint64_t)s->nslot,
                              memory_order_relaxed);
    s->slot = slot;
    s->nslot = nslot;
    /* atomic stores for hdx_prefetch's lock-free peek */
    __atomic_store_n(&s->dir->slot, slot, __ATOMIC_RELAXED);
    __atomic_store_n(&s->dir->nslot, nslot, __ATOMIC_RELAXED);
}

int hdx_init(hashdb *db, uint64_t bnum)
{
    /* bnum records fit without growing: at most 3/4 of the slots used */
    size_t per = 8;
    while (per * HD_STRIPES * 3 / 4 < bnum && per < ((size_t)1 << 30))
        per <<= 1;
    int rc = siphash_random_key(&db->arena.key);   /* a checkpoint may replace it */
    if (rc != KURA_OK)
        return rc;
    pthread_mutex_init(&db->arena.mu, NULL);
    _Static_assert(sizeof(hd_stripe) % 64 == 0, "stripes are line-aligned");
    _Static_assert(offsetof(hd_stripe, bytes) + sizeof(uint64_t) <= 128,
                   "what every operation touches is in a stripe's first two lines");
    db->stripes = aligned_alloc(64, HD_STRIPES * sizeof(hd_stripe));
    db->bdir = aligned_alloc(64, HD_STRIPES * sizeof(hd_bdir));
    if (!db->stripes || !db->bdir)
        return KURA_ENOMEM;
    memset(db->stripes, 0, HD_STRIPES * sizeof(hd_stripe));
    memset(db->bdir, 0, HD_STRIPES * sizeof(hd_bdir));
    for (int i = 0; i < HD_STRIPES; i++) {
        hd_stripe *s = &db->stripes[i];
        pthread_rwlock_init(&s->lock, NULL);
        pthread_mutex_init(&s->wlock, NULL);
        s->arena = &db->arena;
        s->dir = &db->bdir[i];
        uint64_t *slot = arena_alloc(&db->arena, per * sizeof(uint64_t));
        if (!slot)
            return KURA_ENOMEM;   /* hdx_free() releases the rest */
        publish(s, slot, per);
    }
    return KURA_OK;
}

void hdx_free(hashdb *db)
{
    if (!db->stripes)
        return;
    for (int i = 0; i < HD_STRIPES; i++) {
        pthread_rwlock_destroy(&db->stripes[i].lock);
        pthread_mutex_destroy(&db->stripes[i].wlock);
    }
    free(db->stripes);
    db->stripes = NULL;
    free(db->bdir);
    db->bdir = NULL;
    arena_destroy(&db->arena);
}

uint64_t hdx_items(hashdb *db, uint64_t *bytes)
{
    uint64_t n = 0, b = 0;
    for (int i = 0; i < HD_STRIPES; i++) {
        n += atomic_load_explicit(&db->stripes[i].items, memory_order_relaxed);
        b += atomic_load_explicit(&db->stripes[i].bytes, memory_order_relaxed);
    }
    if (bytes)
        *bytes = b;
    return n;
}

uint64_t hdx_slots(hashdb *db)
{
    return atomic_load_explicit(&db->arena.nslots, memory_order_relaxed);
}

/* Key equality without a call: keys are short (most fit an entry's line)
 * and the hashes already matched, so this nearly always succeeds. */
static inline bool key_eq(const char *a, const char *b, size_t n)
{
    while (n >= 8) {
        uint64_t x, y;
        memcpy(&x, a, 8);
        memcpy(&y, b, 8);
        if (x != y)
            return false;
        a += 8;
        b += 8;
        n -= 8;
    }
    while (n--)
        if (*a++ != *b++)
            return false;
    return true;
}

hd_ent *hdx_find(hd_stripe *s, uint64_t h, const char *key, size_t klen)
{
    size_t mask = s->nslot - 1, i = hd_slot_home(h, s->nslot);
    uint64_t tag = tag_of(h);
    for (;; i = (i + 1) & mask) {
        uint64_t v = s->slot[i];
        if (v == 0)
            return NULL;
        if ((v & ~HD_SLOT_PTR) == tag && v != HD_SLOT_TOMB) {
            hd_ent *e = ent_in(v);
            if (e->klen == klen && key_eq(e->key, key, klen))
                return e;
        }
    }
}

/* The first free (empty or tombstone) slot of h's probe; one exists. */
static size_t free_slot(const uint64_t *slot, size_t nslot, uint64_t h)
{
    size_t mask = nslot - 1, i = hd_slot_home(h, nslot);
    while (slot[i] > HD_SLOT_TOMB)
        i = (i + 1) & mask;
    return i;
}

/* Rebuilds the table with nn slots, dropping the tombstones; O(entries of
 * this stripe), each hashed again.  False when memory is out (the table
 * stays as it was). */
static bool rebuild(hd_stripe *s, size_t nn)
{
    uint64_t *ns = arena_alloc(s->arena, nn * sizeof(uint64_t));
    if (!ns)
        return false;
    for (size_t i = 0; i < s->nslot; i++) {
        uint64_t v = s->slot[i];
        if (v > HD_SLOT_TOMB) {
            const hd_ent *e = ent_in(v);
            ns[free_slot(ns, nn, arena_hash(s->arena, e->key, e->klen))] = v;
        }
    }
    arena_free(s->arena, s->slot, s->nslot * sizeof(uint64_t));
    publish(s, ns, nn);
    s->tombs = 0;
    return true;
}

/* Room for one more entry: used slots stay at most 3/4 (a missing key's
 * probe then ends within its line nearly always).  Doubles, or rebuilds at
 * the same size when removals left tombstones as most of the used slots. */
static bool make_room(hd_stripe *s)
{
    if ((s->count + s->tombs + 1) * 4 <= s->nslot * 3)
        return true;
    size_t nn = s->nslot;
    if ((s->count + 1) * 8 > s->nslot * 3)
        nn *= 2;
    if (nn <= ((size_t)1 << 40) && rebuild(s, nn))
        return true;
    /* out of memory: go on filling while an empty slot remains */
    return s->count + s->tombs + 2 < s->nslot;
}

/* Room for count keys at about half the slots: what a checkpoint load
 * asks, sizing once instead of doubling on the way. */
void hdx_reserve(hashdb *db, uint64_t count)
{
    uint64_t per = 2 * (count / HD_STRIPES + 1);
    for (int i = 0; i < HD_STRIPES; i++) {
        hd_stripe *s = &db->stripes[i];
        size_t nn = s->nslot;
        while (nn < per && nn < ((size_t)1 << 40))
            nn <<= 1;
        if (nn != s->nslot)
            (void)rebuild(s, nn);
    }
}

void hdx_insert(hd_stripe *s, hd_ent *e, uint64_t h)
{
    size_t i = free_slot(s->slot, s->nslot, h);
    if (s->slot[i] == HD_SLOT_TOMB)
        s->tombs--;
    s->slot[i] = slot_of(e, h);
    s->count++;
}

void hdx_remove(hd_stripe *s, hd_ent *e)
{
    uint64_t h = arena_hash(s->arena, e->key, e->klen);
    size_t mask = s->nslot - 1, i = hd_slot_home(h, s->nslot);
    uint64_t v = slot_of(e, h);
    for (; s->slot[i]; i = (i + 1) & mask) {
        if (s->slot[i] == v) {
            /* a slot before an empty one can be emptied: no probe passes
             * it; otherwise it must stay a tombstone */
            if (s->slot[(i + 1) & mask] == 0) {
                s->slot[i] = 0;
            } else {
                s->slot[i] = HD_SLOT_TOMB;
                s->tombs++;
            }
            s->count--;
            break;
        }
    }
    hdx_release(s, e);
}

/* Entries are carved from per-stripe slabs of SLAB bytes (themselves cut
 * from the arena), with one free list per size class (linked through the
 * cas field: klen and dead stay readable for hdx_walk). */
#define SLAB (64 * 1024)

/* An entry's size in 8-byte units: with room for a raw length after the
 * key for a compressed record's (hd_ent_rawlen). */
static size_t ent_class(size_t klen, bool zcomp)
{
    return (offsetof(hd_ent, key) + klen + (zcomp ? 4 : 0) + 7) / 8;
}
static size_t ent_class_of(const hd_ent *e)
{
    return ent_class(e->klen, hd_ent_zcomp(e));
}

static hd_ent *free_next(const hd_ent *e)
{
    return (hd_ent *)(uintptr_t)e->cas;
}

/* The head of each slab: the stripe's list of slabs and how much of this
 * one is carved; entries follow it. */
typedef struct hd_slab {
    struct hd_slab *next;
    size_t used;
    char pad[48];
} hd_slab;

hd_ent *hdx_new(hd_stripe *s, const char *key, size_t klen, bool zcomp)
{
    if (!make_room(s))
        return NULL;
    size_t cls = ent_class(klen, zcomp), sz = cls * 8;
    hd_ent *e = s->free_mask & ((uint64_t)1 << cls) ? s->free_ents[cls] : NULL;
    if (e) {
        s->free_ents[cls] = free_next(e);
        if (!s->free_ents[cls])
            s->free_mask &= ~((uint64_t)1 << cls);
    } else {
        if (s->slab_left < sz) {
            hd_slab *sl = arena_alloc(s->arena, SLAB);
            if (!sl) {
                s->slab_left = 0;
                return NULL;
            }
            sl->next = s->slabs;
            sl->used = 0;
            s->slabs = sl;
            s->slab = (unsigned char *)(sl + 1);
            s->slab_left = SLAB - sizeof(hd_slab);
        }
        e = (hd_ent *)s->slab;
        s->slab += sz;
        s->slab_left -= sz;
        s->slabs->used += sz;
        /* The next entry's line, fetched for writing now: by the time this
         * stripe allocates again it waits in cache (1024 stripes' next
         * lines are 64 KiB).  Fetched at that allocation instead, its
         * miss would stall the locked instructions that follow. */
        __builtin_prefetch(s->slab, 1);
    }
    memset(e, 0, sizeof(*e));
    e->klen = (uint8_t)klen;
    e->marks = zcomp ? HD_ZCOMP : 0;
    memcpy(e->key, key, klen);
    return e;
}

void hdx_replace(hd_stripe *s, hd_ent *e, hd_ent *fresh, uint64_t h)
{
    size_t mask = s->nslot - 1, i = hd_slot_home(h, s->nslot);
    uint64_t v = slot_of(e, h);
    for (; s->slot[i]; i = (i + 1) & mask) {
        if (s->slot[i] == v) {
            s->slot[i] = slot_of(fresh, h);
            hdx_release(s, e);
            return;
        }
    }
}

hd_ent *hdx_reshape(hd_stripe *s, hd_ent *e, uint64_t h, bool zcomp)
{
    if (hdx_fits(e, zcomp))
        return e;
    hd_ent *n = hdx_new(s, e->key, e->klen, zcomp);
    if (!n)
        return NULL;
    uint8_t marks = n->marks;
    memcpy(n, e, offsetof(hd_ent, key));
    n->marks = (uint8_t)((e->marks & ~HD_ZCOMP) | (marks & HD_ZCOMP));
    hdx_replace(s, e, n, h);
    return n;
}

void hdx_release(hd_stripe *s, hd_ent *e)
{
    size_t cls = ent_class_of(e);
    e->dead = 2;
    e->cas = (uint64_t)(uintptr_t)s->free_ents[cls];
    s->free_ents[cls] = e;
    s->free_mask |= (uint64_t)1 << cls;
}

void hdx_walk(hd_stripe *s, void (*fn)(void *arg, hd_ent *e), void *arg)
{
    for (hd_slab *sl = s->slabs; sl; sl = sl->next) {
        unsigned char *p = (unsigned char *)(sl + 1), *end = p + sl->used;
        while (p < end) {
            hd_ent *e = (hd_ent *)p;
            p += ent_class_of(e) * 8;
            if (e->dead != 2)
                fn(arg, e);
        }
    }
}


/* ---- for tests (testhooks.h) ---------------------------------------- */

uint64_t hashdb_debug_hash(kura_store *store, const char *key, size_t klen)
{
    return hd_hash((hashdb *)store, key, klen);
}

/* testhooks.h: the longest probe. */
size_t hashdb_debug_probe_max(kura_store *store)
{
    hashdb *db = (hashdb *)store;
    size_t max = 0;
    for (int k = 0; k < HD_STRIPES; k++) {
        hd_stripe *s = &db->stripes[k];
        pthread_rwlock_rdlock(&s->lock);
        for (size_t i = 0; i < s->nslot; i++) {
            const hd_ent *e = hdx_at(s, i);
            if (!e)
                continue;
            size_t home = hd_slot_home(arena_hash(s->arena, e->key, e->klen), s->nslot);
            size_t d = (i - home) & (s->nslot - 1);
            if (d > max)
                max = d;
        }
        pthread_rwlock_unlock(&s->lock);
    }
    return max;
}
