/*
 * item.h - what an item is, and when it is alive.
 *
 * An item is a key (0..KURA_KEY_MAX bytes; memcached's protocols take 1..250
 * of them, Tokyo Tyrant's 0 to -kmax), a value (0..item size limit), 32 bits of
 * client flags, an absolute expiry time and a 64-bit cas unique.  Every
 * backend stores these fields and nothing else the client can see.
 *
 * Whether an item is alive is decided here, once, for every backend: an item
 * is dead when its expiry time has come or when a flush_all has passed over
 * it.  flush_all is represented by a cas watermark: every item whose cas is
 * below kura_clock.oldest_cas is dead.  Because cas uniques only ever grow
 * (across restarts too), "flush everything stored so far" is just "raise the
 * watermark to the next cas".  A delayed flush ("flush_all 10") is pending
 * in flush_at: memcached makes every item invisible during the second
 * flush_at, and the engine's clock tick turns it into a watermark once that
 * second has passed.
 */
#ifndef KURA_ITEM_H
#define KURA_ITEM_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "kura/vref.h"

#define KURA_KEY_MC_MAX 250             /* memcached's KEY_MAX_LENGTH */
#define KURA_KEY_MAX 4096               /* the longest key any store takes: -kmax's
                                           ceiling (docs/options.md, -kmax) */
#define KURA_KEY_MAX_DEFAULT 1024       /* -kmax's default: what Tokyo Tyrant's
                                           protocol and kuractl import take */
#define KURA_ITEM_SIZE_MAX_DEFAULT (1024 * 1024)

/* A key a store takes: 0 to KURA_KEY_MAX bytes (the protocols check their
 * own limit where they parse, proto_key_ok in proto_int.h: memcached's
 * take 1 to 250, Tokyo Tyrant's, as ttserver, the empty key too; a store
 * may hold less: the B+ tree's page size bounds its keys, bt_key_max). */
static inline bool kura_key_ok(const char *key, size_t klen)
{
    return key && klen <= KURA_KEY_MAX;
}

/*
 * memcached counts an item's size as its 48-byte header, 8 bytes of cas, the
 * key and its NUL, 4 bytes of client flags when they are not zero, and the
 * value with its trailing CRLF; an item is too large when that total passes
 * -I.  We use the same sum so that the largest value accepted is byte for
 * byte the same as memcached's.
 */
static inline uint64_t kura_item_wire_total(size_t klen, uint64_t vlen, uint32_t flags)
{
    return 48 + 8 + (uint64_t)klen + 1 + (flags ? 4 : 0) + vlen + 2;
}


/* An item as passed to and from a store.  In a callback, key and val point
 * into the store and are valid only until the callback returns (vref.h: vref, when
 * not NULL, says how to keep val longer; it too is valid only then). */
typedef struct kura_item {
    const char *key;
    size_t klen;
    const void *val;
    size_t vlen;
    uint32_t flags;
    int64_t exptime;                    /* absolute Unix time in seconds; 0 = never */
    uint64_t cas;
    const kura_vref *vref;              /* get callbacks only; NULL elsewhere */
} kura_item;

/* The moment at which liveness is judged. */
typedef struct kura_clock {
    int64_t now;                        /* Unix time in seconds */
    uint64_t oldest_cas;                /* flush_all watermark; items below it are dead */
    int64_t flush_at;                   /* pending delayed flush_all (Unix time), 0 = none */
    void *feed_ctx;                     /* the caller's record of the change this store
                                           call makes, handed to the store's feed
                                           (store.h, kura_feed); NULL: none */
} kura_clock;

enum kura_liveness {
    KURA_LIVE = 0,
    KURA_DEAD_EXPIRED = 1,
    KURA_DEAD_FLUSHED = 2,
};

static inline int kura_item_liveness(int64_t exptime, uint64_t cas, const kura_clock *c)
{
    if (exptime != 0 && exptime <= c->now)
        return KURA_DEAD_EXPIRED;
    if (cas < c->oldest_cas || (c->flush_at != 0 && c->flush_at <= c->now))
        return KURA_DEAD_FLUSHED;
    return KURA_LIVE;
}

#endif
