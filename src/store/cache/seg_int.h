/*
 * seg_int.h - the segment-structured cache's private structures (the
 * cache's files only: seg_*.c).
 *
 * Why this shape (Segcache, Yang et al., NSDI '21, Pelikan's seg storage:
 * ours, written from the paper's ideas).  Memory per item is what a cache
 * is bought for, so an item is its bytes packed back to back in a large
 * segment (no slab classes, no malloc chunk, no per-item pointers) behind
 * a header of single bytes (seg_item.c), and found through a compact index
 * of one 8-byte slot per item (seg_index.c: a tag of the key's hash, the
 * segment and the offset).  Segments are chained by expiry time in TTL
 * buckets (seg_ttl.c), so that a segment whose items have all expired is
 * dropped whole, without a scan.  Room is made by merging a chain's oldest
 * segments into one, keeping the items read since they were written and
 * dropping the rest (seg_evict.c).  Segments are cut from one mapped
 * region (seg_pool.c), which is what a warm restart maps again.
 *
 * Locks, in the order they are taken: a stripe's lock (the index part of
 * the keys it holds, and the header bits of their items), then a TTL
 * bucket's lock (its chain and the segment being appended to), then the
 * pool's lock (free segments).  The evictor's lock (one evictor at a time)
 * is taken with no other lock held, and under it the others one at a time.
 * Functions named do_* run with the lock their comment names held.
 */
#ifndef KURA_SEG_INT_H
#define KURA_SEG_INT_H

#include <pthread.h>
#include <stdalign.h>
#include <stdatomic.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "kura/store.h"

/* ---- stripes (as cache.c: make fuzz builds 4) ------------------------- */
#ifndef CACHE_STRIPE_BITS
#define CACHE_STRIPE_BITS 8
#endif
#define SEG_STRIPES (1u << CACHE_STRIPE_BITS)

#define SEG_NONE UINT32_MAX
#define SEG_TTL_BUCKETS 256
/* Segments a writer may take past the limit under a stripe's lock (it
 * evicts back under the limit once it has let the lock go). */
#define SEG_SPARE 8
#define SEG_SIZE_DEFAULT (1u << 20)
#define SEG_SIZE_MIN 4096u
#define SEG_OFFSET_BITS 28              /* a segment is at most 256 MiB */
#define SEG_ID_BITS 20                  /* at most 1M segments */
/* Segments the limit holds at least (smaller segments under small limits). */
#define SEG_MIN_COUNT 32
/* Merge at most this many segments into one in an eviction. */
#define SEG_MERGE_MAX 16

/* ---- items (seg_item.c) ----------------------------------------------- */

/* The header's second byte. */
enum {
    SI_FLAGS = 1u << 0,         /* 4 bytes of client flags follow the length */
    SI_EXP = 1u << 1,           /* 4 bytes of exptime */
    SI_CAS64 = 1u << 2,         /* 8 bytes of cas (else 4: a delta from the segment's base) */
    SI_DELETED = 1u << 3,       /* no longer in the index: a scan skips it */
    SI_FETCHED = 1u << 4,       /* read since it was stored */
    SI_FREQ1 = 1u << 5,         /* two bits of read frequency, saturating at 3 */
    SI_FREQ_MASK = 3u << 5,
};

/* The header's first byte, kb: 0 where no item is (a segment's end), the
 * key's length plus one up to SEG_KLEN_SHORT, else SEG_KB_LONG and the
 * length in the 2 bytes after the bits byte. */
#define SEG_KLEN_SHORT 253u
#define SEG_KB_LONG 255u
static inline uint8_t seg_item_kb(size_t klen)
{
    return klen > SEG_KLEN_SHORT ? (uint8_t)SEG_KB_LONG : (uint8_t)(klen + 1);
}

/* An item as parsed from its bytes. */
typedef struct seg_view {
    uint8_t *hdr;               /* the item's first byte */
    uint32_t size;              /* its bytes in the segment, header included */
    uint16_t klen;              /* 0..KURA_KEY_MAX */
    uint8_t bits;
    uint32_t vlen, flags, exptime;
    uint64_t cas;
    const char *key;
    const char *val;
} seg_view;

uint32_t seg_item_size(size_t klen, size_t vlen, uint32_t flags, uint32_t exptime,
                       bool cas64);
bool seg_cas_fits(uint64_t cas, uint64_t base);
void seg_item_write(uint8_t *p, const char *key, size_t klen, const void *v0, size_t l0,
                    const void *v1, size_t l1, uint32_t flags, uint32_t exptime,
                    uint64_t cas, uint64_t base);
bool seg_item_parse(uint8_t *p, size_t room, uint64_t base, seg_view *v);
uint8_t seg_item_bits(const uint8_t *hdr);
void seg_item_set_bits(uint8_t *hdr, uint8_t set);
void seg_item_touch(uint8_t *hdr);
bool seg_item_decay(uint8_t *hdr);

/* ---- segments (seg_pool.c) -------------------------------------------- */

enum { SEG_FREE = 0, SEG_ACTIVE, SEG_SEALED, SEG_DOOMED };

typedef struct seg {
    uint32_t sg_next, sg_prev;          /* the TTL chain, or the free list (next) */
    uint16_t sg_ttl;                    /* its TTL bucket */
    uint8_t sg_state;
    uint32_t sg_wpos;                   /* bytes reserved (bucket lock) */
    uint64_t sg_cas_base;               /* cas of its first item (bucket lock) */
    uint32_t sg_max_exp;                /* latest exptime in it, 0 if none (bucket lock) */
    uint64_t sg_max_cas;                /* highest cas in it (bucket lock) */
    int64_t sg_created;
    _Atomic uint32_t sg_writers;        /* appends being copied in */
    _Atomic uint32_t sg_holds;          /* values lent by reference (vref.h) */
} seg;

typedef struct seg_pool {
    uint8_t *sp_base;                   /* the region: sp_nsegs segments */
    size_t sp_region;                   /* its mapped length */
    uint32_t sp_seg_size;
    uint32_t sp_nsegs;
    seg *sp_segs;
    pthread_mutex_t sp_lock;
    uint32_t sp_free;                   /* free list head */
    uint32_t sp_nfree;
    uint32_t sp_next_new;               /* segments never used start here */
    _Atomic uint32_t sp_used;           /* segments not free */
} seg_pool;

int seg_pool_init(seg_pool *p, uint64_t limit, uint32_t seg_size);
void seg_pool_destroy(seg_pool *p);
uint32_t seg_pool_take(seg_pool *p, uint32_t max_used);
void seg_pool_put(seg_pool *p, uint32_t id);
void seg_pool_doom(seg_pool *p, uint32_t id);

static inline uint8_t *seg_data(const seg_pool *p, uint32_t id)
{
    return p->sp_base + (size_t)id * p->sp_seg_size;
}

/* ---- the index (seg_index.c) ------------------------------------------ */

typedef struct seg_stripe {
    alignas(64) pthread_mutex_t st_lock;
    uint64_t *st_slots;
    uint32_t st_n;                      /* slots */
    uint32_t st_used, st_tombs;
    uint64_t st_items;
    uint64_t st_bytes;                  /* memcached's item totals */
    uint64_t st_evictions;
    uint64_t st_reclaimed;
    uint64_t st_expired_unfetched;
    uint64_t st_evicted_unfetched;
    uint64_t st_flushed_gone;           /* of the dead removed, those under the flush */
    uint64_t st_flushed_gone_bytes;     /* watermark (kura_store_usage.flushed_gone) */
} seg_stripe;

struct segcache;

/* A slot: tag(14) | segment(20) | offset(28) | state(2). */
#define SLOT_USED 2u
#define SLOT_TOMB 1u
static inline uint64_t slot_make(uint64_t hash, uint32_t id, uint32_t off)
{
    return ((hash >> 40) & 0x3fff) << 50 | (uint64_t)id << 30 | (uint64_t)off << 2 | SLOT_USED;
}
static inline bool slot_used(uint64_t s) { return (s & 3) == SLOT_USED; }
static inline uint32_t slot_seg(uint64_t s) { return (uint32_t)(s >> 30) & ((1u << 20) - 1); }
static inline uint32_t slot_off(uint64_t s) { return (uint32_t)(s >> 2) & ((1u << 28) - 1); }
static inline bool slot_tag_is(uint64_t s, uint64_t hash)
{
    return (s >> 50) == ((hash >> 40) & 0x3fff);
}

struct segcache;
/* The item a used slot points at, parsed into *v. */
void seg_slot_view(struct segcache *c, uint64_t s, seg_view *v);

int seg_index_init(seg_stripe *st, uint32_t n);
void seg_index_free(seg_stripe *st);
size_t seg_index_bytes(uint32_t n);
uint32_t do_seg_index_find(struct segcache *c, seg_stripe *st, uint64_t hash, const char *key,
                           size_t klen, seg_view *v);
uint32_t do_seg_index_find_loc(seg_stripe *st, uint64_t hash, uint32_t id, uint32_t off);
uint32_t do_seg_index_free_slot(seg_stripe *st, uint64_t hash);
void do_seg_index_remove(seg_stripe *st, uint32_t i);
uint32_t do_seg_index_want_grow(seg_stripe *st);
void seg_index_grow(struct segcache *c, seg_stripe *st, uint32_t old_n);

/* ---- the cache -------------------------------------------------------- */

typedef struct seg_ttl {
    pthread_mutex_t tb_lock;
    uint32_t tb_head, tb_tail;          /* the chain, oldest first; the tail may be active */
    uint32_t tb_active;                 /* the segment appended to, or SEG_NONE */
    uint32_t tb_nsegs;
    uint32_t tb_merge_dest;             /* the evictor's last destination, still being
                                           filled by later merges (evict lock) */
} seg_ttl;

typedef struct segcache {
    kura_store sc_base;                 /* first */
    seg_pool sc_pool;
    seg_stripe *sc_stripes;
    seg_ttl sc_ttl[SEG_TTL_BUCKETS];
    uint64_t sc_limit;
    uint64_t sc_stripe_cap;             /* #capcnt share of a stripe, 0 = none */
    _Atomic uint64_t sc_index_bytes;
    pthread_mutex_t sc_evict_lock;
    uint32_t sc_evict_rr;               /* round-robin start over buckets (evict lock) */
    pthread_mutex_t sc_sweep_lock;
    uint32_t sc_sweep_stripe, sc_sweep_slot;    /* the index walk (sweep lock) */
    uint32_t sc_drop_seg, sc_drop_off;  /* a dead segment being dropped (evict lock) */
    _Atomic uint64_t sc_merges, sc_merged_segs, sc_seg_expired, sc_kept;
    _Atomic uint32_t sc_pins;           /* holds outstanding, plus SEG_CLOSED after close */
    int sc_warm_fd;                     /* the memory file (-e), or -1 */
    atomic_bool sc_warm_superseded;     /* another cache opened the file: no header */
    kura_store_state sc_state;          /* the engine's last save, for the memory file */
    kura_store_state sc_warm_state;     /* what the memory file brought back, or zeros */
} segcache;

uint64_t seg_hash(const void *key, size_t len);
static inline seg_stripe *seg_stripe_of(segcache *c, uint64_t hash)
{
    return &c->sc_stripes[hash >> (64 - CACHE_STRIPE_BITS)];
}
static inline uint64_t seg_mem_used(segcache *c)
{
    return (uint64_t)atomic_load_explicit(&c->sc_pool.sp_used, memory_order_relaxed) *
           c->sc_pool.sp_seg_size +
           atomic_load_explicit(&c->sc_index_bytes, memory_order_relaxed);
}
/* Segments that fit the limit beside the index now. */
static inline uint32_t seg_soft_max(segcache *c)
{
    uint64_t ib = atomic_load_explicit(&c->sc_index_bytes, memory_order_relaxed);
    return ib >= c->sc_limit ? 0 : (uint32_t)((c->sc_limit - ib) / c->sc_pool.sp_seg_size);
}

/* seg_ttl.c */
unsigned seg_ttl_bucket(uint32_t exptime, int64_t now);
void seg_ttl_init(segcache *c);
int seg_ttl_reserve(segcache *c, unsigned b, size_t klen, size_t vlen, uint32_t flags,
                    uint32_t exptime, uint64_t cas, int64_t now, uint32_t *id, uint32_t *off,
                    uint64_t *base);
void do_seg_ttl_unlink(segcache *c, uint32_t id);
void seg_ttl_append_sealed(segcache *c, unsigned b, uint32_t id);
uint32_t seg_ttl_seal_active(segcache *c, unsigned b);

/* seg_warm.c */
/* The memory file's header (seg_warm.c says what the file holds). */
typedef struct warm_hdr {
    uint64_t magic;
    uint32_t version, seg_size;
    uint32_t nsegs, pad;
    uint64_t limit;
    uint64_t items;
    kura_store_state state;
    uint32_t table_crc, hdr_crc;
} warm_hdr;
int seg_warm_map(segcache *c, const char *path, const kura_store_config *cfg, bool *warm,
                 warm_hdr *h);
void seg_warm_load(segcache *c, const warm_hdr *h, const kura_store_config *cfg,
                   const char *path);
void seg_warm_save(segcache *c);
void seg_warm_forget(segcache *c);

/* seg_evict.c */
int seg_make_room(segcache *c, const kura_clock *clk);
long seg_drop_dead_segments(segcache *c, const kura_clock *clk, size_t budget, size_t *work);
/* Counts an item out of the index: evicted (live) or reclaimed (dead, and
 * then flushed if its cas is under clk's watermark).  Stripe lock held. */
void do_seg_count_gone(seg_stripe *st, const seg_view *v, bool evicted, const kura_clock *clk);


#endif
