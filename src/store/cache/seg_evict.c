/*
 * seg_evict.c - making room: dead segments dropped whole, then a merge of
 * a TTL chain's oldest segments.
 *
 * Why this shape.  A segment cache cannot free one item's bytes: it frees
 * segments.  Dropping the oldest segment whole (FIFO) loses the popular
 * items in it; Segcache merges a few adjacent segments of a chain into
 * one, keeping the items read most, and reaches LRU's hit ratio or better.
 * Ours: the chain's oldest sealed segments are taken one at a time; each
 * item still in the index is dropped if it is dead (reclaimed), kept if
 * it was read since the last merge that met it (its 2-bit frequency,
 * seg_item.c, is one less then: a second chance, as CLOCK gives), and
 * evicted otherwise; while the live items take less than half the
 * segments in use, every live item is kept (keep_all_live).  Kept items
 * are copied into a destination segment taken from the pool; the merge
 * stops as soon as it has freed one
 * segment more than it took (at most SEG_MERGE_MAX sources; the last one
 * allowed keeps nothing, so a merge always frees a segment).  The
 * destinations go back into the chain as its newest sealed segments, so
 * kept items wait a whole round of the chain before they are judged again;
 * the last one, partly filled, is where the bucket's next merge goes on
 * (tb_merge_dest), so merges leave at most one segment a bucket part empty.
 *
 * Sources are out of their chain and read only while merged: a get that
 * holds a value of one (vref.h) keeps it valid, since a source goes back
 * to the pool only when its last hold is let go (seg_pool_doom).  One
 * evictor at a time (sc_evict_lock); it takes each item's stripe lock in
 * turn, never two locks of the same kind at once.
 */
#include <sched.h>
#include <string.h>

#include "kura/evictions.h"
#include "seg_int.h"

void do_seg_count_gone(seg_stripe *st, const seg_view *v, bool evicted, const kura_clock *clk)
{
    bool fetched = seg_item_bits(v->hdr) & SI_FETCHED;
    uint64_t bytes = kura_item_wire_total(v->klen, v->vlen, v->flags);
    st->st_items--;
    st->st_bytes -= bytes;
    if (evicted) {
        st->st_evictions++;
        if (!fetched)
            st->st_evicted_unfetched++;
    } else {
        st->st_reclaimed++;
        if (!fetched)
            st->st_expired_unfetched++;
        if (v->cas < clk->oldest_cas) {
            st->st_flushed_gone++;
            st->st_flushed_gone_bytes += bytes;
        }
    }
}

/* An evicted item to the observer of evictions (evictions.h), la being
 * the seconds since its segment was written. */
static void watch_eviction(const seg_view *v, const kura_clock *clk, int64_t created)
{
    long long ttl = v->exptime ? (long long)v->exptime - clk->now : -1;
    kura_evicted(v->key, v->klen, seg_item_bits(v->hdr) & SI_FETCHED, ttl,
                 (long long)(clk->now - created), v->vlen);
}

static void wait_writers(seg *s)
{
    while (atomic_load_explicit(&s->sg_writers, memory_order_acquire))
        sched_yield();
}

typedef struct merge {
    segcache *c;
    const kura_clock *clk;
    unsigned bucket;
    uint32_t dest;              /* the destination being filled, or SEG_NONE */
    uint32_t dests, max_dests;
    bool keep_all;              /* compaction: every live item kept (keep_all_live) */
    uint32_t dest_ids[SEG_MERGE_MAX];
} merge;

/* True when the live items take less than half the segments in use: the
 * memory is then short for want of reclaiming overwritten and deleted
 * items, not for want of room, and a merge keeps every live item (it
 * still frees a segment: its sources are mostly dead), as memcached, whose
 * freed chunks are reused, evicts nothing with its live items under its
 * limit.  Past half, items earn their place (the frequency rule).  Each
 * stripe's lock in turn, once a merge: a merge is made once a segment's
 * worth of writes. */
static bool keep_all_live(segcache *c)
{
    uint64_t live = 0;
    for (unsigned i = 0; i < SEG_STRIPES; i++) {
        seg_stripe *st = &c->sc_stripes[i];
        pthread_mutex_lock(&st->st_lock);
        live += st->st_bytes;
        pthread_mutex_unlock(&st->st_lock);
    }
    uint64_t held = (uint64_t)atomic_load_explicit(&c->sc_pool.sp_used, memory_order_relaxed) *
                    c->sc_pool.sp_seg_size;
    return live * 2 < held;
}

/* Copies a kept item into the merge's destination and points slot i at
 * it.  Under the item's stripe lock.  False if there is no room (no more
 * destinations allowed, or none in the pool). */
static bool do_merge_copy(merge *m, seg_stripe *st, uint32_t i, const seg_view *v, uint64_t h)
{
    seg_pool *p = &m->c->sc_pool;
    seg *d = m->dest == SEG_NONE ? NULL : &p->sp_segs[m->dest];
    uint32_t size = 0;
    if (d)
        size = seg_item_size(v->klen, v->vlen, v->flags, v->exptime,
                             !seg_cas_fits(v->cas, d->sg_cas_base));
    if (!d || (uint64_t)d->sg_wpos + size > p->sp_seg_size) {
        if (m->dests >= m->max_dests)
            return false;
        uint32_t id = seg_pool_take(p, p->sp_nsegs);
        if (id == SEG_NONE)
            return false;
        m->dest = m->dest_ids[m->dests++] = id;
        d = &p->sp_segs[id];
        d->sg_cas_base = v->cas;
        d->sg_created = m->clk->now;
        size = seg_item_size(v->klen, v->vlen, v->flags, v->exptime, false);
    }
    uint32_t off = d->sg_wpos;
    uint8_t *q = seg_data(p, m->dest) + off;
    seg_item_write(q, v->key, v->klen, v->val, v->vlen, NULL, 0, v->flags, v->exptime,
                   v->cas, d->sg_cas_base);
    seg_item_set_bits(q, seg_item_bits(v->hdr) & (SI_FETCHED | SI_FREQ_MASK));
    d->sg_wpos += size;
    if (v->exptime > d->sg_max_exp)
        d->sg_max_exp = v->exptime;
    if (v->cas > d->sg_max_cas)
        d->sg_max_cas = v->cas;
    st->st_slots[i] = slot_make(h, m->dest, off);
    seg_item_set_bits(v->hdr, SI_DELETED);
    return true;
}

/* One item of a source segment: kept (m not NULL and it earns it),
 * reclaimed if dead (returns 1), evicted otherwise. */
static int merge_item(segcache *c, merge *m, const kura_clock *clk, uint32_t id,
                       uint32_t off, seg_view *v)
{
    uint64_t h = seg_hash(v->key, v->klen);
    seg_stripe *st = seg_stripe_of(c, h);
    pthread_mutex_lock(&st->st_lock);
    uint32_t i = do_seg_index_find_loc(st, h, id, off);
    if (i == SEG_NONE) {
        pthread_mutex_unlock(&st->st_lock);
        return 0;
    }
    int l = kura_item_liveness((int64_t)v->exptime, v->cas, clk);
    bool earned = m && (seg_item_decay(v->hdr) || m->keep_all);
    if (l == KURA_LIVE && earned && do_merge_copy(m, st, i, v, h)) {
        pthread_mutex_unlock(&st->st_lock);
        atomic_fetch_add_explicit(&c->sc_kept, 1, memory_order_relaxed);
        return 0;
    }
    seg_item_set_bits(v->hdr, SI_DELETED);
    do_seg_index_remove(st, i);
    do_seg_count_gone(st, v, l == KURA_LIVE, clk);
    pthread_mutex_unlock(&st->st_lock);
    if (l == KURA_LIVE && kura_evictions_observed())
        watch_eviction(v, clk, c->sc_pool.sp_segs[id].sg_created);
    return l != KURA_LIVE;
}

/* Every item of segment id (out of its chain, no writer left) from byte
 * `from`, until *items reaches budget; returns the offset reached (the
 * segment's end when done).  *items counts the items met, *reclaimed the
 * dead ones dropped. */
static uint32_t seg_scan(segcache *c, merge *m, const kura_clock *clk, uint32_t id,
                         uint32_t from, size_t budget, size_t *items, long *reclaimed)
{
    seg_pool *p = &c->sc_pool;
    seg *s = &p->sp_segs[id];
    uint8_t *base = seg_data(p, id);
    uint32_t off = from;
    while (off < s->sg_wpos && *items < budget) {
        seg_view v;
        if (!seg_item_parse(base + off, s->sg_wpos - off, s->sg_cas_base, &v))
            return s->sg_wpos;
        (*items)++;
        if (!(seg_item_bits(v.hdr) & SI_DELETED))
            *reclaimed += merge_item(c, m, clk, id, off, &v);
        off += v.size;
    }
    return off;
}

/* The bucket whose oldest sealed segment is the oldest of all (sealing the
 * oldest active segment if none is sealed); SEG_TTL_BUCKETS if the cache
 * holds no segment.  *avail: its sealed segments, at most SEG_MERGE_MAX. */
static unsigned pick_bucket(segcache *c, uint32_t *avail)
{
    unsigned best = SEG_TTL_BUCKETS, best_active = SEG_TTL_BUCKETS;
    int64_t oldest = INT64_MAX, oldest_active = INT64_MAX;
    seg *segs = c->sc_pool.sp_segs;
    for (unsigned b = 0; b < SEG_TTL_BUCKETS; b++) {
        seg_ttl *t = &c->sc_ttl[b];
        pthread_mutex_lock(&t->tb_lock);
        uint32_t h = t->tb_head;
        if (h != SEG_NONE && h != t->tb_active && segs[h].sg_created < oldest) {
            oldest = segs[h].sg_created;
            best = b;
        } else if (h != SEG_NONE && h == t->tb_active && segs[h].sg_created < oldest_active) {
            oldest_active = segs[h].sg_created;
            best_active = b;
        }
        pthread_mutex_unlock(&t->tb_lock);
    }
    if (best == SEG_TTL_BUCKETS && best_active != SEG_TTL_BUCKETS) {
        seg_ttl_seal_active(c, best_active);
        best = best_active;
    }
    if (best == SEG_TTL_BUCKETS)
        return best;
    seg_ttl *t = &c->sc_ttl[best];
    pthread_mutex_lock(&t->tb_lock);
    *avail = 0;
    for (uint32_t id = t->tb_head; id != SEG_NONE && id != t->tb_active &&
         *avail < SEG_MERGE_MAX; id = segs[id].sg_next)
        (*avail)++;
    pthread_mutex_unlock(&t->tb_lock);
    return best;
}

/* Takes bucket b's oldest sealed segment out of its chain; SEG_NONE if
 * it has none. */
static uint32_t take_oldest(segcache *c, unsigned b)
{
    seg_ttl *t = &c->sc_ttl[b];
    pthread_mutex_lock(&t->tb_lock);
    uint32_t id = t->tb_head;
    if (id != SEG_NONE && id != t->tb_active)
        do_seg_ttl_unlink(c, id);
    else
        id = SEG_NONE;
    pthread_mutex_unlock(&t->tb_lock);
    return id;
}

/* One merge (see the top of the file).  Evictor's lock held.  False if
 * the cache holds nothing to evict. */
static bool seg_merge_one(segcache *c, const kura_clock *clk)
{
    uint32_t avail = 0;
    unsigned b = pick_bucket(c, &avail);
    if (b == SEG_TTL_BUCKETS || avail == 0)
        return false;
    merge m = { .c = c, .clk = clk, .bucket = b, .dest = c->sc_ttl[b].tb_merge_dest,
                .max_dests = avail - 1, .keep_all = keep_all_live(c) };
    uint32_t done = 0;
    while (done < avail && done <= m.dests) {
        uint32_t id = take_oldest(c, b);
        if (id == SEG_NONE)
            break;
        if (id == m.dest)
            m.dest = SEG_NONE;          /* the last merge's destination is a source now */
        wait_writers(&c->sc_pool.sp_segs[id]);
        size_t items = 0;
        long reclaimed = 0;
        seg_scan(c, &m, clk, id, 0, SIZE_MAX, &items, &reclaimed);
        seg_pool_doom(&c->sc_pool, id);
        done++;
    }
    for (uint32_t k = 0; k < m.dests; k++)
        seg_ttl_append_sealed(c, b, m.dest_ids[k]);
    c->sc_ttl[b].tb_merge_dest = m.dest;
    atomic_fetch_add_explicit(&c->sc_merges, 1, memory_order_relaxed);
    atomic_fetch_add_explicit(&c->sc_merged_segs, done, memory_order_relaxed);
    return done > 0;
}

/* True if every item in segment s is dead under clk (its bucket is not
 * the never-expiring one and its latest exptime has come, or a flush_all
 * has passed over its highest cas).  Bucket lock held. */
static bool do_seg_dead(const seg *s, unsigned b, const kura_clock *clk)
{
    if (s->sg_wpos == 0)
        return false;
    return (b != 0 && s->sg_max_exp != 0 && (int64_t)s->sg_max_exp <= clk->now) ||
           s->sg_max_cas < clk->oldest_cas;
}

/* Takes one dead segment out of its chain (sealing it if active);
 * SEG_NONE if there is none.  O(segments). */
static uint32_t take_dead(segcache *c, const kura_clock *clk)
{
    seg *segs = c->sc_pool.sp_segs;
    for (unsigned b = 0; b < SEG_TTL_BUCKETS; b++) {
        seg_ttl *t = &c->sc_ttl[b];
        pthread_mutex_lock(&t->tb_lock);
        for (uint32_t id = t->tb_head; id != SEG_NONE; id = segs[id].sg_next) {
            if (do_seg_dead(&segs[id], b, clk)) {
                do_seg_ttl_unlink(c, id);
                pthread_mutex_unlock(&t->tb_lock);
                return id;
            }
        }
        pthread_mutex_unlock(&t->tb_lock);
    }
    return SEG_NONE;
}

/* Drops dead segments whole, reclaiming their items, at most about
 * `budget` items' work (a segment begun is resumed at the next call);
 * returns the items reclaimed, and adds the work done to *work.
 * Evictor's lock held. */
long seg_drop_dead_segments(segcache *c, const kura_clock *clk, size_t budget, size_t *work)
{
    long reclaimed = 0;
    size_t items = 0;
    while (items < budget) {
        uint32_t id = c->sc_drop_seg;
        if (id == SEG_NONE) {
            if ((id = take_dead(c, clk)) == SEG_NONE)
                break;
            c->sc_drop_seg = id;
            c->sc_drop_off = 0;
            wait_writers(&c->sc_pool.sp_segs[id]);
        }
        uint32_t off = seg_scan(c, NULL, clk, id, c->sc_drop_off, budget, &items, &reclaimed);
        if (off >= c->sc_pool.sp_segs[id].sg_wpos) {
            seg_pool_doom(&c->sc_pool, id);
            atomic_fetch_add_explicit(&c->sc_seg_expired, 1, memory_order_relaxed);
            c->sc_drop_seg = SEG_NONE;
        } else {
            c->sc_drop_off = off;
        }
    }
    *work += items;
    return reclaimed;
}

/* Evicts until the segments in use fit the limit beside the index: dead
 * segments first, then merges.  No lock held.  KURA_ENOMEM when there is
 * nothing left to evict and it still does not fit. */
int seg_make_room(segcache *c, const kura_clock *clk)
{
    int rc = KURA_OK;
    if (atomic_load_explicit(&c->sc_pool.sp_used, memory_order_relaxed) <= seg_soft_max(c))
        return KURA_OK;
    pthread_mutex_lock(&c->sc_evict_lock);
    while (atomic_load_explicit(&c->sc_pool.sp_used, memory_order_relaxed) > seg_soft_max(c)) {
        size_t work = 0;
        uint32_t used = atomic_load_explicit(&c->sc_pool.sp_used, memory_order_relaxed);
        seg_drop_dead_segments(c, clk, SIZE_MAX, &work);
        if (atomic_load_explicit(&c->sc_pool.sp_used, memory_order_relaxed) < used)
            continue;
        if (!seg_merge_one(c, clk)) {
            rc = KURA_ENOMEM;
            break;
        }
    }
    pthread_mutex_unlock(&c->sc_evict_lock);
    return rc;
}
