/*
 * hashdb_index.c - the hash file's in-memory index: key -> newest record.
 *
 * HD_STRIPES independent chained hash tables, each behind its own rwlock
 * (hd_stripe).  A key's stripe is chosen by the low bits of its 64-bit hash,
 * its bucket by the high bits.  Each stripe doubles its bucket array when it
 * holds more entries than buckets, under its own write lock: growth is
 * online and touches 1/HD_STRIPES of the keys at a time, so `bnum` is only
 * a starting size.  Every function here expects the caller to hold the
 * stripe's lock (a write lock for the ones that change it).
 */
#include <stdlib.h>
#include <string.h>

#include "hashdb_int.h"

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

#define SLAB (64 * 1024)

struct hd_slab {
    hd_slab *next;
    size_t used;
    _Alignas(8) unsigned char data[];
};

static inline size_t bucket_of(const hd_stripe *s, uint64_t h)
{
    return (size_t)(h >> 20) & (s->nbkt - 1);
}

int hdx_init(hashdb *db, uint64_t bnum)
{
    size_t per = 16;
    while (per * HD_STRIPES < bnum && per < (1u << 26))
        per <<= 1;
    db->stripes = calloc(HD_STRIPES, sizeof(hd_stripe));
    if (!db->stripes)
        return KURA_ENOMEM;
    for (int i = 0; i < HD_STRIPES; i++) {
        hd_stripe *s = &db->stripes[i];
        pthread_rwlock_init(&s->lock, NULL);
        s->nbkt = per;
        s->bkt = calloc(per, sizeof(hd_ent *));
        if (!s->bkt)
            return KURA_ENOMEM;   /* hdx_free() releases the rest */
    }
    return KURA_OK;
}

void hdx_free(hashdb *db)
{
    if (!db->stripes)
        return;
    for (int i = 0; i < HD_STRIPES; i++) {
        hd_stripe *s = &db->stripes[i];
        while (s->slabs) {
            hd_slab *n = s->slabs->next;
            free(s->slabs);
            s->slabs = n;
        }
        free(s->bkt);
        pthread_rwlock_destroy(&s->lock);
    }
    free(db->stripes);
    db->stripes = NULL;
}

hd_ent *hdx_find(hd_stripe *s, uint64_t h, const char *key, size_t klen)
{
    for (hd_ent *e = s->bkt[bucket_of(s, h)]; e; e = e->next)
        if (e->hash == h && e->klen == klen && memcmp(e->key, key, klen) == 0)
            return e;
    return NULL;
}

/* Entries live in per-stripe slabs of SLAB bytes with one free list per
 * size class: no malloc per key, and closing frees a few slabs instead of
 * every entry. */

static size_t ent_class(size_t klen)
{
    return (sizeof(hd_ent) + klen + 7) / 8;
}

hd_ent *hdx_new(hd_stripe *s, uint64_t h, const char *key, size_t klen)
{
    size_t cls = ent_class(klen), sz = cls * 8;
    hd_ent *e = s->free_ents[cls];
    if (e) {
        s->free_ents[cls] = e->next;
    } else {
        hd_slab *sl = s->slabs;
        if (!sl || sl->used + sz > SLAB - sizeof(hd_slab)) {
            sl = malloc(SLAB);
            if (!sl)
                return NULL;
            sl->used = 0;
            sl->next = s->slabs;
            s->slabs = sl;
        }
        e = (hd_ent *)(sl->data + sl->used);
        sl->used += sz;
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
    e->next = s->free_ents[cls];
    s->free_ents[cls] = e;
}

/* Doubles the bucket array; O(entries of this stripe).  On allocation
 * failure the stripe simply stays at its size (chains get longer). */
static void grow(hd_stripe *s)
{
    size_t nn = s->nbkt * 2;
    hd_ent **nb = calloc(nn, sizeof(hd_ent *));
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
    free(s->bkt);
    s->bkt = nb;
    s->nbkt = nn;
}

void hdx_insert(hd_stripe *s, hd_ent *e)
{
    if (s->count >= s->nbkt && s->nbkt < ((size_t)1 << 40))
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
