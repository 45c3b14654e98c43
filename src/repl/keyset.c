/*
 * keyset.c - an open-addressing hash set of keys, linear probing, grown at
 * half full; a removed key leaves a tombstone (the set only shrinks while a
 * copy arrives, and is freed after it).
 */
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "keyset.h"
#include "kura/item.h"

typedef struct slot {
    unsigned char *key;                 /* klen (2 bytes, big-endian), then the
                                           bytes; NULL empty; TOMB removed */
} slot;

static size_t klen_of(const unsigned char *k)
{
    return (size_t)k[0] << 8 | k[1];
}

static unsigned char tomb_byte;
#define TOMB (&tomb_byte)

struct keyset {
    slot *t;
    size_t cap;                         /* a power of two */
    size_t used;                        /* keys and tombstones */
    size_t count;                       /* keys */
};

static uint64_t hash(const void *key, size_t klen)
{
    const unsigned char *p = key;
    uint64_t h = 1469598103934665603ull;       /* FNV-1a */
    for (size_t i = 0; i < klen; i++)
        h = (h ^ p[i]) * 1099511628211ull;
    return h ^ (h >> 29);
}

keyset *keyset_new(void)
{
    keyset *ks = calloc(1, sizeof(*ks));
    if (!ks)
        return NULL;
    ks->cap = 1024;
    ks->t = calloc(ks->cap, sizeof(slot));
    if (!ks->t) {
        free(ks);
        return NULL;
    }
    return ks;
}

void keyset_free(keyset *ks)
{
    if (!ks)
        return;
    for (size_t i = 0; i < ks->cap; i++)
        if (ks->t[i].key && ks->t[i].key != TOMB)
            free(ks->t[i].key);
    free(ks->t);
    free(ks);
}

static slot *find(keyset *ks, const void *key, size_t klen, slot **free_slot)
{
    size_t i = hash(key, klen) & (ks->cap - 1);
    *free_slot = NULL;
    for (;;) {
        slot *s = &ks->t[i];
        if (!s->key) {
            if (!*free_slot)
                *free_slot = s;
            return NULL;
        }
        if (s->key == TOMB) {
            if (!*free_slot)
                *free_slot = s;
        } else if (klen_of(s->key) == klen && memcmp(s->key + 2, key, klen) == 0) {
            return s;
        }
        i = (i + 1) & (ks->cap - 1);
    }
}

static bool grow(keyset *ks)
{
    slot *old = ks->t;
    size_t ocap = ks->cap;
    slot *t = calloc(ocap * 2, sizeof(slot));
    if (!t)
        return false;
    ks->t = t;
    ks->cap = ocap * 2;
    ks->used = ks->count;
    for (size_t i = 0; i < ocap; i++)
        if (old[i].key && old[i].key != TOMB) {
            size_t j = hash(old[i].key + 2, klen_of(old[i].key)) & (ks->cap - 1);
            while (t[j].key)
                j = (j + 1) & (ks->cap - 1);
            t[j].key = old[i].key;
        }
    free(old);
    return true;
}

bool keyset_add(keyset *ks, const char *key, size_t klen)
{
    if (klen > KURA_KEY_MAX)
        return true;                    /* not a key any store holds */
    if ((ks->used + 1) * 2 > ks->cap && !grow(ks))
        return false;
    slot *fs, *s = find(ks, key, klen, &fs);
    if (s)
        return true;
    unsigned char *k = malloc(klen + 2);
    if (!k)
        return false;
    k[0] = (unsigned char)(klen >> 8);
    k[1] = (unsigned char)klen;
    memcpy(k + 2, key, klen);
    if (!fs->key)
        ks->used++;
    fs->key = k;
    ks->count++;
    return true;
}

void keyset_remove(keyset *ks, const void *key, size_t klen)
{
    if (klen > KURA_KEY_MAX)
        return;
    slot *fs, *s = find(ks, key, klen, &fs);
    if (!s)
        return;
    free(s->key);
    s->key = TOMB;
    ks->count--;
}

size_t keyset_count(const keyset *ks)
{
    return ks->count;
}

int keyset_each(keyset *ks, int (*fn)(void *arg, const char *key, size_t klen), void *arg)
{
    for (size_t i = 0; i < ks->cap; i++) {
        unsigned char *k = ks->t[i].key;
        if (k && k != TOMB) {
            int rc = fn(arg, (const char *)k + 2, klen_of(k));
            if (rc < 0)
                return rc;
        }
    }
    return 0;
}
