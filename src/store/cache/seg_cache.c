/*
 * seg_cache.c - the segment-structured cache's store operations (store.h):
 * get, rmw, iterate, sweep, usage, stats, open and close, over the
 * segments (seg_pool.c), the index (seg_index.c), the TTL buckets
 * (seg_ttl.c) and the evictor (seg_evict.c).  seg_int.h says why the
 * cache has this shape and in which order its locks are taken.
 *
 * A change runs under its key's stripe lock: the lookup, the decision, the
 * new version's bytes reserved in its TTL bucket's segment and copied
 * there, and the slot pointed at them; the old version is only marked
 * deleted (segments are written once; its bytes go with its segment).  A
 * writer never evicts under the lock: it may take a segment past the
 * limit (SEG_SPARE) and evicts back under it once the lock is let go, so
 * a stripe's lock is never held while another's is waited for.
 *
 * A get's value of PROTO_VALUE_REF_MIN bytes or more is lent by reference
 * (vref.h): the hold is on its segment, which cannot be reused until the
 * last hold on it is let go (seg_pool_doom); a hold may outlive the store,
 * which is then freed by the last release (sc_pins, as tree_vref.c does).
 */
#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "kura/siphash.h"
#include "seg_int.h"
#include "seg.h"

#define SEG_CLOSED (1u << 30)
#define SEG_REF_MIN 8192                /* proto's PROTO_VALUE_REF_MIN */

static pthread_once_t seg_key_once = PTHREAD_ONCE_INIT;
static siphash_key seg_key;
static int seg_key_rc;

static void seg_key_init(void)
{
    seg_key_rc = siphash_process_key(&seg_key);
}

/* SipHash-1-3 under the process's key: the top bits pick the stripe, bits
 * 40-53 the tag, the low 32 the home slot. */
uint64_t seg_hash(const void *key, size_t len)
{
    return siphash13(&seg_key, key, len);
}

static void seg_free_all(segcache *c);

/* ---- values lent by reference (vref.h) ---------------------------------- */

static void vref_hold(void *owner, void *obj)
{
    segcache *c = owner;
    uint32_t id = (uint32_t)(uintptr_t)obj;
    atomic_fetch_add_explicit(&c->sc_pins, 1, memory_order_relaxed);
    atomic_fetch_add_explicit(&c->sc_pool.sp_segs[id].sg_holds, 1, memory_order_relaxed);
}

static void vref_release(void *owner, void *obj)
{
    segcache *c = owner;
    seg_pool_put(&c->sc_pool, (uint32_t)(uintptr_t)obj);
    if (atomic_fetch_sub_explicit(&c->sc_pins, 1, memory_order_acq_rel) == SEG_CLOSED + 1)
        seg_free_all(c);
}

static const kura_vref_ops seg_vref_ops = { vref_hold, vref_release };

/* ---- helpers under a stripe's lock ------------------------------------- */

void seg_slot_view(segcache *c, uint64_t s, seg_view *v)
{
    uint32_t id = slot_seg(s), off = slot_off(s);
    seg_item_parse(seg_data(&c->sc_pool, id) + off, c->sc_pool.sp_seg_size - off,
                   c->sc_pool.sp_segs[id].sg_cas_base, v);
}

static inline void seg_to_item(const seg_view *v, kura_item *it)
{
    it->key = v->key;
    it->klen = v->klen;
    it->val = v->val;
    it->vlen = v->vlen;
    it->flags = v->flags;
    it->exptime = (int64_t)v->exptime;
    it->cas = v->cas;
    it->vref = NULL;
}

/* Looks key up; a dead item met is dropped (reclaimed) and its liveness
 * left in *why.  Returns the live item's slot or SEG_NONE. */
static uint32_t do_seg_lookup(segcache *c, seg_stripe *st, uint64_t h, const char *key,
                              size_t klen, const kura_clock *clk, seg_view *v, int *why)
{
    uint32_t i = do_seg_index_find(c, st, h, key, klen, v);
    *why = KURA_LIVE;
    if (i != SEG_NONE) {
        int l = kura_item_liveness((int64_t)v->exptime, v->cas, clk);
        if (l != KURA_LIVE) {
            *why = l;
            seg_item_set_bits(v->hdr, SI_DELETED);
            do_seg_index_remove(st, i);
            do_seg_count_gone(st, v, false, clk);
            i = SEG_NONE;
        }
    }
    return i;
}

/* Removes a live item the caller's key found (a delete or a replacement's
 * old version): not an eviction, not a reclaim. */
static void do_seg_forget(seg_stripe *st, seg_view *v)
{
    seg_item_set_bits(v->hdr, SI_DELETED);
    st->st_items--;
    st->st_bytes -= kura_item_wire_total(v->klen, v->vlen, v->flags);
}

/* KURA_ETOOBIG past 32 bits, KURA_ENOMEM if it cannot fit a segment. */
static int seg_check_size(const segcache *c, size_t klen, size_t vlen)
{
    if (vlen > UINT32_MAX - 1024)
        return KURA_ETOOBIG;
    if (seg_item_size(klen, vlen, UINT32_MAX, UINT32_MAX, true) > c->sc_pool.sp_seg_size)
        return KURA_ENOMEM;
    return KURA_OK;
}

/* #capcnt: past the stripe's share, one other item of the stripe goes:
 * the first dead one, else the oldest by segment, among a few slots after
 * slot `from`.  Stripe lock held. */
static void do_seg_cap_count(segcache *c, seg_stripe *st, uint32_t from, const kura_clock *clk)
{
    uint32_t best = SEG_NONE;
    int64_t oldest = INT64_MAX;
    seg_view v, bv;
    for (uint32_t k = 1, n = 0; k < st->st_n && n < 8; k++) {
        uint32_t i = (from + k) % st->st_n;
        uint64_t s = st->st_slots[i];
        if (!slot_used(s))
            continue;
        n++;
        seg *sg = &c->sc_pool.sp_segs[slot_seg(s)];
        seg_slot_view(c, s, &v);
        bool dead = kura_item_liveness((int64_t)v.exptime, v.cas, clk) != KURA_LIVE;
        if (dead || sg->sg_created < oldest) {
            oldest = dead ? INT64_MIN : sg->sg_created;
            best = i;
            bv = v;
            if (dead)
                break;
        }
    }
    if (best == SEG_NONE)
        return;
    seg_item_set_bits(bv.hdr, SI_DELETED);
    do_seg_index_remove(st, best);
    do_seg_count_gone(st, &bv, oldest != INT64_MIN, clk);
}

/* Writes a new version of the key (slot `i` if it has one, else a new
 * slot) into its TTL bucket's segment.  Stripe lock held. */
static int do_seg_store(segcache *c, seg_stripe *st, uint64_t h, uint32_t i, seg_view *old,
                        const char *key, size_t klen, const kura_update *out,
                        const kura_clock *clk)
{
    size_t l0 = out->part[0].len, l1 = out->part[1].len;
    int rc = seg_check_size(c, klen, l0 + l1);
    if (rc != KURA_OK)
        return rc;
    uint32_t exptime = cache_exptime32(out->exptime), id, off;
    uint64_t base;
    if (i == SEG_NONE) {
        uint32_t g = do_seg_index_want_grow(st);
        if (g) {
            seg_index_grow(c, st, g);
            if (st->st_used + st->st_tombs + 1 >= st->st_n)
                return KURA_ENOMEM;
        }
    }
    rc = seg_ttl_reserve(c, seg_ttl_bucket(exptime, clk->now), klen, l0 + l1, out->flags,
                         exptime, out->cas, clk->now, &id, &off, &base);
    if (rc != KURA_OK)
        return rc;
    uint8_t *p = seg_data(&c->sc_pool, id) + off;
    seg_item_write(p, key, klen, out->part[0].base, l0, out->part[1].base, l1, out->flags,
                   exptime, out->cas, base);
    if (i != SEG_NONE) {
        do_seg_forget(st, old);
        st->st_items++;
    } else {
        i = do_seg_index_free_slot(st, h);
        st->st_items++;
    }
    st->st_slots[i] = slot_make(h, id, off);
    st->st_bytes += kura_item_wire_total(klen, l0 + l1, out->flags);
    atomic_fetch_sub_explicit(&c->sc_pool.sp_segs[id].sg_writers, 1, memory_order_release);
    if (c->sc_stripe_cap && st->st_items > c->sc_stripe_cap)
        do_seg_cap_count(c, st, i, clk);
    return KURA_OK;
}

/* ---- the operations ---------------------------------------------------- */

/* get: one stripe lock; no allocation.  A hit counts as a read for the
 * merge eviction (seg_item_touch). */
static int segc_get(kura_store *s, const char *key, size_t klen, const kura_clock *clk,
                    kura_item_fn fn, void *arg)
{
    segcache *c = (segcache *)s;
    seg_view v;
    int why, rc;

    if (!kura_key_ok(key, klen))
        return KURA_NOTFOUND;
    uint64_t h = seg_hash(key, klen);
    seg_stripe *st = seg_stripe_of(c, h);
    pthread_mutex_lock(&st->st_lock);
    uint32_t i = do_seg_lookup(c, st, h, key, klen, clk, &v, &why);
    if (i != SEG_NONE) {
        rc = KURA_OK;
        if (fn) {
            kura_item it;
            kura_vref ref = { &seg_vref_ops, c, (void *)(uintptr_t)slot_seg(st->st_slots[i]) };
            seg_to_item(&v, &it);
            if (v.vlen >= SEG_REF_MIN)
                it.vref = &ref;
            rc = fn(arg, &it);
        }
        seg_item_touch(v.hdr);
    } else {
        rc = why == KURA_DEAD_EXPIRED ? KURA_EXPIRED
           : why == KURA_DEAD_FLUSHED ? KURA_FLUSHED : KURA_NOTFOUND;
    }
    pthread_mutex_unlock(&st->st_lock);
    return rc;
}

/* rmw (store.h): the decision and its effect under the stripe's lock (see
 * the top of the file); TOUCH writes the item again with its new exptime
 * (into the TTL bucket that exptime names), keeping value, flags and cas. */
static int segc_rmw(kura_store *s, const char *key, size_t klen, const kura_clock *clk,
                    const kura_rmw_hint *hint, kura_update_fn fn, void *arg)
{
    segcache *c = (segcache *)s;
    kura_update out;
    kura_item view;
    seg_view v;
    int why, rc;
    (void)hint;

    uint64_t h = seg_hash(key, klen);
    seg_stripe *st = seg_stripe_of(c, h);
    memset(&out, 0, sizeof(out));
    pthread_mutex_lock(&st->st_lock);
    uint32_t i = do_seg_lookup(c, st, h, key, klen, clk, &v, &why);
    if (i != SEG_NONE)
        seg_to_item(&v, &view);
    rc = fn(arg, i != SEG_NONE ? &view : NULL, &out);

    switch (out.action) {
    case KURA_UPDATE_REPLACE: {
        int err = do_seg_store(c, st, h, i, &v, key, klen, &out, clk);
        if (err != KURA_OK)
            rc = err;
        break;
    }
    case KURA_UPDATE_TOUCH:
        if (i != SEG_NONE) {
            kura_update t = { .action = KURA_UPDATE_REPLACE, .flags = v.flags,
                              .exptime = out.exptime, .cas = v.cas };
            t.part[0].base = v.val;
            t.part[0].len = v.vlen;
            uint8_t keep = seg_item_bits(v.hdr) & (SI_FETCHED | SI_FREQ_MASK);
            int err = do_seg_store(c, st, h, i, &v, key, klen, &t, clk);
            if (err != KURA_OK) {
                rc = err;
                break;
            }
            uint64_t ns = st->st_slots[i];
            uint8_t *np = seg_data(&c->sc_pool, slot_seg(ns)) + slot_off(ns);
            seg_item_set_bits(np, keep);
            seg_item_touch(np);
        }
        break;
    case KURA_UPDATE_REMOVE:
        if (i != SEG_NONE) {
            do_seg_forget(st, &v);
            do_seg_index_remove(st, i);
        }
        break;
    default:
        break;
    }
    pthread_mutex_unlock(&st->st_lock);
    /* Stored either way: with nothing left to evict, the limit stays passed
     * until something is. */
    if (out.action == KURA_UPDATE_REPLACE || out.action == KURA_UPDATE_TOUCH)
        (void)seg_make_room(c, clk);
    return rc;
}

/* Walks one stripe's index under its lock, live items only. */
static int seg_walk_stripe(segcache *c, unsigned part, const kura_clock *clk, kura_item_fn fn,
                           void *arg)
{
    seg_stripe *st = &c->sc_stripes[part];
    int rc = 0;
    pthread_mutex_lock(&st->st_lock);
    for (uint32_t i = 0; i < st->st_n && rc == 0; i++) {
        uint64_t s = st->st_slots[i];
        if (!slot_used(s))
            continue;
        seg_view v;
        seg_slot_view(c, s, &v);
        if (kura_item_liveness((int64_t)v.exptime, v.cas, clk) == KURA_LIVE) {
            kura_item it;
            seg_to_item(&v, &it);
            rc = fn(arg, &it);
        }
    }
    pthread_mutex_unlock(&st->st_lock);
    return rc;
}

/* iterate (store.h): a part is a stripe, walked in slot order. */
static int segc_iterate(kura_store *s, const kura_iter_spec *spec, const kura_clock *clk,
                        kura_item_fn fn, void *arg)
{
    segcache *c = (segcache *)s;
    int rc = 0;
    switch (spec->scope) {
    case KURA_ITER_ALL:
        for (unsigned i = 0; i < SEG_STRIPES && rc == 0; i++)
            rc = seg_walk_stripe(c, i, clk, fn, arg);
        return rc;
    case KURA_ITER_PART:
        if (spec->part >= SEG_STRIPES)
            return KURA_EINVAL;
        return seg_walk_stripe(c, spec->part, clk, fn, arg);
    default:
        return KURA_EINVAL;
    }
}

/* The index part of a sweep: resumes a walk over the stripes' slots,
 * reclaiming the dead items met (expired, or flushed in a segment that
 * also holds live ones); a slot is a unit of work.  Sweep lock held. */
static long seg_sweep_index(segcache *c, const kura_clock *clk, size_t budget, size_t *work)
{
    long reclaimed = 0;
    for (unsigned round = 0; *work < budget && round < SEG_STRIPES; ) {
        seg_stripe *st = &c->sc_stripes[c->sc_sweep_stripe];
        uint32_t i = c->sc_sweep_slot;
        pthread_mutex_lock(&st->st_lock);
        for (; i < st->st_n && *work < budget; i++) {
            uint64_t s = st->st_slots[i];
            (*work)++;
            if (!slot_used(s))
                continue;
            seg_view v;
            seg_slot_view(c, s, &v);
            if (kura_item_liveness((int64_t)v.exptime, v.cas, clk) != KURA_LIVE) {
                seg_item_set_bits(v.hdr, SI_DELETED);
                do_seg_index_remove(st, i);
                do_seg_count_gone(st, &v, false, clk);
                reclaimed++;
            }
        }
        bool end = i >= st->st_n;
        pthread_mutex_unlock(&st->st_lock);
        if (end) {
            c->sc_sweep_slot = 0;
            c->sc_sweep_stripe = (c->sc_sweep_stripe + 1) % SEG_STRIPES;
            round++;
        } else {
            c->sc_sweep_slot = i;
        }
    }
    return reclaimed;
}

/* sweep: dead segments dropped whole first, then the index walk; an item
 * or a slot visited is one unit of budget. */
static long segc_sweep(kura_store *s, const kura_clock *clk, size_t budget)
{
    segcache *c = (segcache *)s;
    size_t work = 0;
    pthread_mutex_lock(&c->sc_sweep_lock);
    pthread_mutex_lock(&c->sc_evict_lock);
    long n = seg_drop_dead_segments(c, clk, budget, &work);
    pthread_mutex_unlock(&c->sc_evict_lock);
    n += seg_sweep_index(c, clk, budget, &work);
    pthread_mutex_unlock(&c->sc_sweep_lock);
    return n;
}

static int segc_sync(kura_store *s)
{
    (void)s;
    return KURA_OK;
}

static void segc_usage(kura_store *s, kura_store_usage *u)
{
    segcache *c = (segcache *)s;
    memset(u, 0, sizeof(*u));
    u->limit_maxbytes = c->sc_limit;
    u->pages = atomic_load_explicit(&c->sc_pool.sp_used, memory_order_relaxed);
    u->page_size = c->sc_pool.sp_seg_size;
    u->mem_used = seg_mem_used(c);
    for (unsigned i = 0; i < SEG_STRIPES; i++) {
        seg_stripe *st = &c->sc_stripes[i];
        pthread_mutex_lock(&st->st_lock);
        u->curr_items += st->st_items;
        u->bytes += st->st_bytes;
        u->evictions += st->st_evictions;
        u->reclaimed += st->st_reclaimed;
        u->expired_unfetched += st->st_expired_unfetched;
        u->evicted_unfetched += st->st_evicted_unfetched;
        u->flushed_gone += st->st_flushed_gone;
        u->flushed_gone_bytes += st->st_flushed_gone_bytes;
        pthread_mutex_unlock(&st->st_lock);
    }
}

static void emit_u64(kura_stat_fn emit, void *arg, const char *name, uint64_t v)
{
    char buf[32];
    snprintf(buf, sizeof(buf), "%" PRIu64, v);
    emit(arg, name, buf);
}

static void segc_stats(kura_store *s, kura_stat_fn emit, void *arg)
{
    segcache *c = (segcache *)s;
    uint64_t slots = 0;
    for (unsigned i = 0; i < SEG_STRIPES; i++) {
        seg_stripe *st = &c->sc_stripes[i];
        pthread_mutex_lock(&st->st_lock);
        slots += st->st_n;
        pthread_mutex_unlock(&st->st_lock);
    }
    int power = 0;
    while ((1ull << power) < slots)
        power++;
    emit_u64(emit, arg, "hash_power_level", (uint64_t)power);
    emit_u64(emit, arg, "hash_bytes", slots * sizeof(uint64_t));
    emit_u64(emit, arg, "hash_buckets", slots);
    emit_u64(emit, arg, "stripes", SEG_STRIPES);
    emit_u64(emit, arg, "cache_mem_used", seg_mem_used(c));
    emit_u64(emit, arg, "cache_segment_size", c->sc_pool.sp_seg_size);
    emit_u64(emit, arg, "cache_segments",
             atomic_load_explicit(&c->sc_pool.sp_used, memory_order_relaxed));
    emit_u64(emit, arg, "cache_segments_max", seg_soft_max(c));
    emit_u64(emit, arg, "cache_merges", atomic_load(&c->sc_merges));
    emit_u64(emit, arg, "cache_merged_segments", atomic_load(&c->sc_merged_segs));
    emit_u64(emit, arg, "cache_merge_kept", atomic_load(&c->sc_kept));
    emit_u64(emit, arg, "cache_segments_expired", atomic_load(&c->sc_seg_expired));
}

/* The engine's state: nothing (as for any cache: what the engine saved in
 * this process is not read back), or what a warm restart brought back; a
 * save is kept for the memory file's header (seg_warm.c). */
static int segc_load_state(kura_store *s, kura_store_state *st)
{
    *st = ((segcache *)s)->sc_warm_state;
    return KURA_OK;
}

static int segc_save_state(kura_store *s, const kura_store_state *st)
{
    ((segcache *)s)->sc_state = *st;
    return KURA_OK;
}

static void seg_free_all(segcache *c)
{
    if (c->sc_stripes) {
        for (unsigned i = 0; i < SEG_STRIPES; i++) {
            seg_index_free(&c->sc_stripes[i]);
            pthread_mutex_destroy(&c->sc_stripes[i].st_lock);
        }
        free(c->sc_stripes);
    }
    for (unsigned b = 0; b < SEG_TTL_BUCKETS; b++)
        pthread_mutex_destroy(&c->sc_ttl[b].tb_lock);
    seg_pool_destroy(&c->sc_pool);
    if (c->sc_warm_fd >= 0) {
        seg_warm_forget(c);
        close(c->sc_warm_fd);
    }
    pthread_mutex_destroy(&c->sc_evict_lock);
    pthread_mutex_destroy(&c->sc_sweep_lock);
    free(c);
}

/* Writes the memory file's table and header (a graceful stop), then
 * frees everything, or leaves that to the last hold's release. */
static void segc_close(kura_store *s)
{
    segcache *c = (segcache *)s;
    if (c && c->sc_warm_fd >= 0)
        seg_warm_save(c);
    if (c && atomic_fetch_add_explicit(&c->sc_pins, SEG_CLOSED, memory_order_acq_rel) == 0)
        seg_free_all(c);
}

static const kura_store_ops seg_ops = {
    .name = "cache",
    .get = segc_get,
    .rmw = segc_rmw,
    .parts = SEG_STRIPES,
    .iterate = segc_iterate,
    .sweep = segc_sweep,
    .sync = segc_sync,
    .usage = segc_usage,
    .stats = segc_stats,
    .load_state = segc_load_state,
    .save_state = segc_save_state,
    .close = segc_close,
};

/* The segment size: 1 MiB, or what an item of -I takes, then halved
 * while the limit holds fewer than SEG_MIN_COUNT segments (an eviction
 * frees a segment or two at a time, which must be a small part of the
 * cache), but not below what an item of -I takes unless the limit holds
 * fewer than 8 of those, nor below 4 KiB.  item_max 0: no -I (a test's
 * store: items past a segment are refused). */
static uint32_t seg_size_for(uint64_t limit, size_t item_max)
{
    uint64_t need = item_max ? ((uint64_t)item_max + 64 + 4095) & ~(uint64_t)4095 : 0;
    uint64_t size = need > SEG_SIZE_DEFAULT ? need : SEG_SIZE_DEFAULT;
    if (size > (1u << SEG_OFFSET_BITS))
        size = 1u << SEG_OFFSET_BITS;
    uint64_t floor = need < limit / 8 ? need : limit / 8;
    if (floor < SEG_SIZE_MIN)
        floor = SEG_SIZE_MIN;
    while (limit / size < SEG_MIN_COUNT && ((size / 2) & ~(uint64_t)4095) >= floor)
        size = (size / 2) & ~(uint64_t)4095;
    return (uint32_t)size;
}

/* seg.h.  The cache's structures; the hash key is made once, before the
 * first cache. */
int segcache_make(kura_store **out, uint64_t limit, uint64_t cap, uint64_t buckets,
                  const kura_store_config *cfg)
{
    size_t item_max = cfg ? cfg->item_size_max : 0;
    *out = NULL;
    pthread_once(&seg_key_once, seg_key_init);
    if (seg_key_rc != KURA_OK)
        return seg_key_rc;
    segcache *c = calloc(1, sizeof(*c));
    if (!c)
        return KURA_ENOMEM;
    c->sc_base.ops = &seg_ops;
    c->sc_limit = limit;
    c->sc_stripe_cap = (cap + SEG_STRIPES - 1) / SEG_STRIPES;
    c->sc_drop_seg = SEG_NONE;
    c->sc_warm_fd = -1;
    pthread_mutex_init(&c->sc_evict_lock, NULL);
    pthread_mutex_init(&c->sc_sweep_lock, NULL);
    seg_ttl_init(c);
    int rc = seg_pool_init(&c->sc_pool, limit, seg_size_for(limit, item_max));
    c->sc_stripes = aligned_alloc(alignof(seg_stripe), SEG_STRIPES * sizeof(seg_stripe));
    if (rc != KURA_OK || !c->sc_stripes) {
        seg_free_all(c);
        return KURA_ENOMEM;
    }
    memset(c->sc_stripes, 0, SEG_STRIPES * sizeof(seg_stripe));
    uint32_t per = (uint32_t)((buckets + SEG_STRIPES - 1) / SEG_STRIPES);
    pthread_mutexattr_t attr;
    pthread_mutexattr_init(&attr);
    pthread_mutexattr_settype(&attr, PTHREAD_MUTEX_ADAPTIVE_NP);
    for (unsigned i = 0; i < SEG_STRIPES; i++) {
        pthread_mutex_init(&c->sc_stripes[i].st_lock, &attr);
        if (seg_index_init(&c->sc_stripes[i], per) != KURA_OK)
            rc = KURA_ENOMEM;
        atomic_fetch_add_explicit(&c->sc_index_bytes, seg_index_bytes(c->sc_stripes[i].st_n),
                                  memory_order_relaxed);
    }
    pthread_mutexattr_destroy(&attr);
    bool warm = false;
    warm_hdr h;
    if (rc == KURA_OK && cfg && cfg->memory_file)
        rc = seg_warm_map(c, cfg->memory_file, cfg, &warm, &h);
    if (rc != KURA_OK) {
        seg_free_all(c);
        return rc;
    }
    if (warm)
        seg_warm_load(c, &h, cfg, cfg->memory_file);
    *out = &c->sc_base;
    return KURA_OK;
}
