/*
 * hashdb_index.c - the hash file's in-memory index: key -> newest record.
 *
 * HD_STRIPES independent chained hash tables, each behind its own rwlock
 * (hd_stripe).  A key's stripe is chosen by the low bits of its 64-bit hash,
 * its bucket by the high bits.  Each stripe doubles its bucket array when it
 * holds 1.5 entries per bucket, under its own write lock: growth is
 * online and touches 1/HD_STRIPES of the keys at a time, so `bnum` is only
 * a starting size.  Every function here expects the caller to hold the
 * stripe's lock (a write lock for the ones that change it).
 */
#include <stddef.h>
#include <stdlib.h>
#include <sys/mman.h>
#include <string.h>

#include "hashdb_int.h"

/* ---- the arena ---------------------------------------------------- */

#define CHUNK (32u << 20)

struct hd_chunk {
    struct hd_chunk *next;
    size_t len;
};

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
        madvise(m, len, MADV_HUGEPAGE);
        struct hd_chunk *c = m;
        c->next = a->chunks;
        c->len = len;
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

static void arena_destroy(hd_arena *a)
{
    while (a->chunks) {
        struct hd_chunk *n = a->chunks->next;
        munmap(a->chunks, a->chunks->len);
        a->chunks = n;
    }
    pthread_mutex_destroy(&a->mu);
}

static inline uint64_t fmix64(uint64_t k)
{
    k ^= k >> 33;
    k *= 0xff51afd7ed558ccdULL;
    k ^= k >> 33;
    k *= 0xc4ceb9fe1a85ec53ULL;
    k ^= k >> 33;
    return k;
}

/* A simple multiply-xor hash over 8-byte words; O(klen). */
uint64_t hd_hash(const char *key, size_t klen)
{
    uint64_t h = 0x9E3779B97F4A7C15ULL ^ ((uint64_t)klen * 0x100000001b3ULL);
    const unsigned char *p = (const unsigned char *)key;
    while (klen >= 8) {
        uint64_t v;
        memcpy(&v, p, 8);
        h = (h ^ fmix64(v)) * 0x9E3779B97F4A7C15ULL;
        h ^= h >> 29;
        p += 8;
        klen -= 8;
    }
    if (klen) {
        uint64_t v = 0;
        memcpy(&v, p, klen);
        h = (h ^ fmix64(v ^ 0xa0761d6478bd642fULL)) * 0x9E3779B97F4A7C15ULL;
    }
    return fmix64(h);
}


static inline size_t bucket_of(const hd_stripe *s, uint64_t h)
{
    return hd_bucket_index(h, s->nbkt);
}

int hdx_init(hashdb *db, uint64_t bnum)
{
    size_t per = 16;
    while (per * HD_STRIPES < bnum && per < (1u << 26))
        per <<= 1;
    pthread_mutex_init(&db->arena.mu, NULL);
    _Static_assert(sizeof(hd_stripe) % 64 == 0, "stripes are line-aligned");
    db->stripes = aligned_alloc(64, HD_STRIPES * sizeof(hd_stripe));
    db->bdir = aligned_alloc(64, HD_STRIPES * sizeof(hd_bdir));
    if (!db->stripes || !db->bdir)
        return KURA_ENOMEM;
    memset(db->stripes, 0, HD_STRIPES * sizeof(hd_stripe));
    memset(db->bdir, 0, HD_STRIPES * sizeof(hd_bdir));
    for (int i = 0; i < HD_STRIPES; i++) {
        hd_stripe *s = &db->stripes[i];
        pthread_rwlock_init(&s->lock, NULL);
        s->arena = &db->arena;
        s->dir = &db->bdir[i];
        s->nbkt = per;
        s->bkt = arena_alloc(&db->arena, per * sizeof(hd_ent *));
        if (!s->bkt)
            return KURA_ENOMEM;   /* hdx_free() releases the rest */
        s->dir->bkt = s->bkt;
        s->dir->nbkt = per;
    }
    return KURA_OK;
}

void hdx_free(hashdb *db)
{
    if (!db->stripes)
        return;
    for (int i = 0; i < HD_STRIPES; i++)
        pthread_rwlock_destroy(&db->stripes[i].lock);
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
    for (hd_ent *e = s->bkt[bucket_of(s, h)]; e; e = e->next)
        if (e->hash == h && e->klen == klen && key_eq(e->key, key, klen))
            return e;
    return NULL;
}

/* Entries are carved from per-stripe slabs of SLAB bytes (themselves cut
 * from the arena), with one free list per size class. */
#define SLAB (64 * 1024)

static size_t ent_class(size_t klen)
{
    return (offsetof(hd_ent, key) + klen + 7) / 8;
}

/* The head of each slab: the stripe's list of slabs and how much of this
 * one is carved; entries follow it. */
typedef struct hd_slab {
    struct hd_slab *next;
    size_t used;
    char pad[48];
} hd_slab;

hd_ent *hdx_new(hd_stripe *s, uint64_t h, const char *key, size_t klen)
{
    size_t cls = ent_class(klen), sz = cls * 8;
    hd_ent *e = s->free_mask & ((uint64_t)1 << cls) ? s->free_ents[cls] : NULL;
    if (e) {
        s->free_ents[cls] = e->next;
        if (!e->next)
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
    }
    memset(e, 0, sizeof(*e));
    e->hash = h;
    e->klen = (uint8_t)klen;
    memcpy(e->key, key, klen);
    return e;
}

void hdx_release(hd_stripe *s, hd_ent *e)
{
    size_t cls = ent_class(e->klen);
    e->dead = 2;
    e->next = s->free_ents[cls];
    s->free_ents[cls] = e;
    s->free_mask |= (uint64_t)1 << cls;
}

void hdx_walk(hd_stripe *s, void (*fn)(void *arg, hd_ent *e), void *arg)
{
    for (hd_slab *sl = s->slabs; sl; sl = sl->next) {
        unsigned char *p = (unsigned char *)(sl + 1), *end = p + sl->used;
        while (p < end) {
            hd_ent *e = (hd_ent *)p;
            p += ent_class(e->klen) * 8;
            if (e->dead != 2)
                fn(arg, e);
        }
    }
}

/* Doubles the bucket array; O(entries of this stripe).  On allocation
 * failure the stripe simply stays at its size (chains get longer). */
static void grow(hd_stripe *s)
{
    size_t nn = s->nbkt * 2;
    hd_ent **nb = arena_alloc(s->arena, nn * sizeof(hd_ent *));
    if (!nb)
        return;
    for (size_t b = 0; b < s->nbkt; b++) {
        hd_ent *e = s->bkt[b];
        while (e) {
            hd_ent *n = e->next;
            size_t i = (size_t)(e->hash >> 20) & (nn - 1);
            e->next = nb[i];
            nb[i] = e;
            e = n;
        }
    }
    arena_free(s->arena, s->bkt, s->nbkt * sizeof(hd_ent *));
    s->bkt = nb;
    s->nbkt = nn;
    /* atomic stores for hdx_prefetch's lock-free peek */
    __atomic_store_n(&s->dir->bkt, nb, __ATOMIC_RELAXED);
    __atomic_store_n(&s->dir->nbkt, nn, __ATOMIC_RELAXED);
}

/* About half a key per bucket for count keys (loading a checkpoint): a
 * hit then reads about 1.25 entries and a miss 0.5, each a likely cache
 * miss, and the table has room to triple before it doubles.  The buckets
 * cost 8 bytes a key more than at one key per bucket (an entry is 64), for
 * about a tenth less time per read of 1M keys (kura-enginebench get_s
 * 0.366 -> 0.326 s). */
void hdx_reserve(hashdb *db, uint64_t count)
{
    uint64_t per = 2 * (count / HD_STRIPES + 1);
    for (int i = 0; i < HD_STRIPES; i++)
        while (db->stripes[i].nbkt < per && db->stripes[i].nbkt < ((size_t)1 << 40))
            grow(&db->stripes[i]);
}

void hdx_insert(hd_stripe *s, hd_ent *e)
{
    /* Grow past 1.5 entries per bucket: chains stay short (a lookup is one
     * or two cache misses either way) and a table sized by bnum for the
     * keys expected is never rehashed. */
    if (s->count * 2 >= s->nbkt * 3 && s->nbkt < ((size_t)1 << 40))
        grow(s);
    size_t b = bucket_of(s, e->hash);
    e->next = s->bkt[b];
    s->bkt[b] = e;
    s->count++;
}

void hdx_remove(hd_stripe *s, hd_ent *e)
{
    hd_ent **pp = &s->bkt[bucket_of(s, e->hash)];
    while (*pp && *pp != e)
        pp = &(*pp)->next;
    if (*pp) {
        *pp = e->next;
        s->count--;
    }
    hdx_release(s, e);
}
