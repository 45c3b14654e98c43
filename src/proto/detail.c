/*
 * detail.c - "stats detail on|off|dump": per key prefix counts of gets,
 * hits, sets and deletes, as memcached keeps them.
 *
 * A key's prefix is what comes before its first delimiter (-D, ':' by
 * default); a key without one is not counted.  The counts are recorded by
 * the text protocol's get/gets/gat/gats (each key, hit or not), storage
 * commands (before the value is even read, as memcached does) and delete
 * (found or not), and by the binary protocol's get/touch, set/add/replace
 * and delete; the meta commands, incr/decr and touch are not counted, as
 * memcached does not count them.  "stats reset" clears them; "off" keeps
 * them (a later dump shows them).
 *
 * The dump lists the prefixes in memcached's order - buckets of its hash
 * (MurmurHash3 x86_32, seed 0) modulo 256, newest first within a bucket -
 * so the reply is memcached's byte for byte.
 *
 * Cost: nothing while off but a relaxed load per key (detail_note in
 * proto_int.h); while on, one global mutex per recorded key, as memcached
 * takes one.  Bounded where memcached is not: past DETAIL_MAX_PREFIXES
 * prefixes a new one is not recorded (the dropped keys are counted in
 * kura_detail_dropped, "stats").
 */
#include <inttypes.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "proto_int.h"

#define DETAIL_BUCKETS 256              /* memcached's PREFIX_HASH_SIZE */
#define DETAIL_MAX_PREFIXES 10000

typedef struct prefix {
    struct prefix *next;
    uint64_t get, hit, set, del;
    size_t len;
    char name[];
} prefix;

_Atomic bool detail_on;
static _Atomic char delimiter = ':';
static _Atomic uint64_t dropped;
static pthread_mutex_t lock = PTHREAD_MUTEX_INITIALIZER;   /* guards what follows */
static prefix *bucket[DETAIL_BUCKETS];
static size_t nprefixes;

static uint32_t rotl32(uint32_t x, int r)
{
    return x << r | x >> (32 - r);
}

/* MurmurHash3_x86_32 (Austin Appleby's, public domain), seed 0, blocks
 * read little-endian as on the x86 memcached is built for. */
static uint32_t murmur3_32(const unsigned char *p, size_t len)
{
    const uint32_t c1 = 0xcc9e2d51, c2 = 0x1b873593;
    uint32_t h = 0, k;
    size_t i;
    for (i = 0; i + 4 <= len; i += 4) {
        k = (uint32_t)p[i] | (uint32_t)p[i + 1] << 8 | (uint32_t)p[i + 2] << 16 |
            (uint32_t)p[i + 3] << 24;
        k = rotl32(k * c1, 15) * c2;
        h = rotl32(h ^ k, 13) * 5 + 0xe6546b64;
    }
    k = 0;
    switch (len & 3) {
    case 3: k ^= (uint32_t)p[i + 2] << 16; /* fall through */
    case 2: k ^= (uint32_t)p[i + 1] << 8;  /* fall through */
    case 1: k ^= p[i];
            h ^= rotl32(k * c1, 15) * c2;
    }
    h ^= (uint32_t)len;
    h ^= h >> 16;
    h *= 0x85ebca6b;
    h ^= h >> 13;
    h *= 0xc2b2ae35;
    h ^= h >> 16;
    return h;
}

void kura_detail_setup(char delim, bool on)
{
    atomic_store(&delimiter, delim);
    atomic_store(&detail_on, on);
}

void detail_set(bool on)
{
    atomic_store(&detail_on, on);
}

char detail_delimiter(void)
{
    return atomic_load(&delimiter);
}

uint64_t detail_dropped(void)
{
    return atomic_load(&dropped);
}

/* The prefix's entry, made if new; NULL past the bound or without memory.
 * Called with lock held. */
static prefix *do_find(const char *name, size_t len)
{
    prefix **b = &bucket[murmur3_32((const unsigned char *)name, len) % DETAIL_BUCKETS];
    for (prefix *p = *b; p; p = p->next)
        if (p->len == len && memcmp(p->name, name, len) == 0)
            return p;
    if (nprefixes == DETAIL_MAX_PREFIXES)
        return NULL;
    prefix *p = calloc(1, sizeof(*p) + len + 1);
    if (!p)
        return NULL;
    memcpy(p->name, name, len);
    p->len = len;
    p->next = *b;                       /* newest first, as memcached links them */
    *b = p;
    nprefixes++;
    return p;
}

void detail_record(const char *key, size_t nkey, int op, bool hit)
{
    const char *d = memchr(key, atomic_load(&delimiter), nkey);
    if (!d)
        return;
    pthread_mutex_lock(&lock);
    prefix *p = do_find(key, (size_t)(d - key));
    if (p) {
        switch (op) {
        case DETAIL_GET: p->get++; p->hit += hit; break;
        case DETAIL_SET: p->set++; break;
        case DETAIL_DEL: p->del++; break;
        }
    }
    pthread_mutex_unlock(&lock);
    if (!p)
        atomic_fetch_add(&dropped, 1);
}

bool detail_dump(kura_buf *out)
{
    bool ok = true;
    pthread_mutex_lock(&lock);
    for (int i = 0; i < DETAIL_BUCKETS && ok; i++)
        for (prefix *p = bucket[i]; p && ok; p = p->next) {
            char nums[128];
            int n = snprintf(nums, sizeof(nums), " get %" PRIu64 " hit %" PRIu64 " set %" PRIu64
                             " del %" PRIu64 "\r\n", p->get, p->hit, p->set, p->del);
            ok = KURA_BUF_LIT(out, "PREFIX ") && kura_buf_append(out, p->name, p->len) &&
                 kura_buf_append(out, nums, (size_t)n);
        }
    pthread_mutex_unlock(&lock);
    return ok && KURA_BUF_LIT(out, "END\r\n");
}

void detail_clear(void)
{
    pthread_mutex_lock(&lock);
    for (int i = 0; i < DETAIL_BUCKETS; i++)
        while (bucket[i]) {
            prefix *p = bucket[i];
            bucket[i] = p->next;
            free(p);
        }
    nprefixes = 0;
    pthread_mutex_unlock(&lock);
    atomic_store(&dropped, 0);
}
