/*
 * seg_ttl.c - TTL buckets: which segment a new item goes into, and the
 * chains of segments by expiry time.
 *
 * Why this shape.  Items written at about the same time with about the
 * same time to live expire at about the same time; Segcache puts them in
 * the same segments, so that expiry frees memory a segment at a time,
 * without looking at items.  An item's bucket is chosen by its TTL at
 * write: bucket 0 never expires, bucket 1 is already past, then 64 buckets
 * each of 32 s (TTLs under 34 min), 64 of 512 s (under 9 h), 64 of 8192 s
 * (under 6 days) and 63 of 2^26 s.  Each bucket keeps a chain of its
 * segments, oldest first, and appends to the newest (tb_active).  Items
 * keep their exact exptime (seg_item.c), so nothing expires early: a
 * segment's sg_max_exp is the latest exptime in it, and the segment is
 * dead as a whole once that has passed (seg_evict.c).
 *
 * An append reserves its bytes under the bucket's lock (a few dozen
 * instructions: the segment's cas base, its size, its latest exptime and
 * cas) and copies them with the lock let go; sg_writers counts the copies
 * in flight, so that the evictor waits for them before it reads the
 * segment.  A full segment is sealed and a new one taken from the pool,
 * past the limit if need be (the writer holds a stripe's lock and cannot
 * evict: it does after letting it go, seg_make_room).
 */
#include "seg_int.h"

unsigned seg_ttl_bucket(uint32_t exptime, int64_t now)
{
    if (exptime == 0)
        return 0;
    int64_t ttl = (int64_t)exptime - now;
    if (ttl <= 0)
        return 1;
    if (ttl < 2048)
        return 1 + (unsigned)(ttl / 32);
    if (ttl < 32768)
        return 65 + (unsigned)(ttl / 512);
    if (ttl < 524288)
        return 129 + (unsigned)(ttl / 8192);
    unsigned b = 193 + (unsigned)(ttl >> 26);
    return b < SEG_TTL_BUCKETS ? b : SEG_TTL_BUCKETS - 1;
}

void seg_ttl_init(segcache *c)
{
    for (unsigned b = 0; b < SEG_TTL_BUCKETS; b++) {
        seg_ttl *t = &c->sc_ttl[b];
        pthread_mutex_init(&t->tb_lock, NULL);
        t->tb_head = t->tb_tail = t->tb_active = t->tb_merge_dest = SEG_NONE;
        t->tb_nsegs = 0;
    }
}

/* Links segment id at the tail of bucket b's chain.  Bucket lock held. */
static void do_ttl_push(segcache *c, seg_ttl *t, unsigned b, uint32_t id)
{
    seg *s = &c->sc_pool.sp_segs[id];
    s->sg_ttl = (uint16_t)b;
    s->sg_next = SEG_NONE;
    s->sg_prev = t->tb_tail;
    if (t->tb_tail != SEG_NONE)
        c->sc_pool.sp_segs[t->tb_tail].sg_next = id;
    else
        t->tb_head = id;
    t->tb_tail = id;
    t->tb_nsegs++;
}

/* Reserves an item's bytes in bucket b's active segment (a new one if it
 * is full): *id, *off and the segment's cas base, and one more writer on
 * it, which the caller drops once the item is written.  KURA_ENOMEM when
 * the region has no segment left.  The item fits a segment (the caller
 * checked). */
int seg_ttl_reserve(segcache *c, unsigned b, size_t klen, size_t vlen, uint32_t flags,
                    uint32_t exptime, uint64_t cas, int64_t now, uint32_t *id, uint32_t *off,
                    uint64_t *base)
{
    seg_ttl *t = &c->sc_ttl[b];
    seg_pool *p = &c->sc_pool;
    pthread_mutex_lock(&t->tb_lock);
    for (;;) {
        uint32_t a = t->tb_active;
        if (a == SEG_NONE) {
            if ((a = seg_pool_take(p, p->sp_nsegs)) == SEG_NONE) {
                pthread_mutex_unlock(&t->tb_lock);
                return KURA_ENOMEM;
            }
            p->sp_segs[a].sg_created = now;
            do_ttl_push(c, t, b, a);
            t->tb_active = a;
        }
        seg *s = &p->sp_segs[a];
        if (s->sg_wpos == 0)
            s->sg_cas_base = cas;
        uint32_t size = seg_item_size(klen, vlen, flags, exptime,
                                      !seg_cas_fits(cas, s->sg_cas_base));
        if ((uint64_t)s->sg_wpos + size <= p->sp_seg_size) {
            *id = a;
            *off = s->sg_wpos;
            *base = s->sg_cas_base;
            s->sg_wpos += size;
            if (exptime > s->sg_max_exp)
                s->sg_max_exp = exptime;
            if (cas > s->sg_max_cas)
                s->sg_max_cas = cas;
            atomic_fetch_add_explicit(&s->sg_writers, 1, memory_order_acquire);
            break;
        }
        s->sg_state = SEG_SEALED;
        t->tb_active = SEG_NONE;
    }
    pthread_mutex_unlock(&t->tb_lock);
    return KURA_OK;
}

/* Takes segment id out of its bucket's chain (and out of service, if it
 * was the active one).  The bucket's lock held. */
void do_seg_ttl_unlink(segcache *c, uint32_t id)
{
    seg *s = &c->sc_pool.sp_segs[id];
    seg_ttl *t = &c->sc_ttl[s->sg_ttl];
    if (s->sg_prev != SEG_NONE)
        c->sc_pool.sp_segs[s->sg_prev].sg_next = s->sg_next;
    else
        t->tb_head = s->sg_next;
    if (s->sg_next != SEG_NONE)
        c->sc_pool.sp_segs[s->sg_next].sg_prev = s->sg_prev;
    else
        t->tb_tail = s->sg_prev;
    if (t->tb_active == id)
        t->tb_active = SEG_NONE;
    if (t->tb_merge_dest == id)
        t->tb_merge_dest = SEG_NONE;
    s->sg_state = SEG_SEALED;
    s->sg_next = s->sg_prev = SEG_NONE;
    t->tb_nsegs--;
}

/* Links a sealed segment (a merge's destination) into bucket b's chain,
 * before its active segment: newer than every other sealed one. */
void seg_ttl_append_sealed(segcache *c, unsigned b, uint32_t id)
{
    seg_ttl *t = &c->sc_ttl[b];
    seg *segs = c->sc_pool.sp_segs, *s = &segs[id];
    pthread_mutex_lock(&t->tb_lock);
    s->sg_state = SEG_SEALED;
    s->sg_ttl = (uint16_t)b;
    if (t->tb_active != SEG_NONE && t->tb_tail == t->tb_active) {
        uint32_t a = t->tb_active;
        s->sg_next = a;
        s->sg_prev = segs[a].sg_prev;
        if (s->sg_prev != SEG_NONE)
            segs[s->sg_prev].sg_next = id;
        else
            t->tb_head = id;
        segs[a].sg_prev = id;
        t->tb_nsegs++;
    } else {
        do_ttl_push(c, t, b, id);
    }
    pthread_mutex_unlock(&t->tb_lock);
}

/* Seals bucket b's active segment: no append goes to it any more.
 * Returns it, or SEG_NONE. */
uint32_t seg_ttl_seal_active(segcache *c, unsigned b)
{
    seg_ttl *t = &c->sc_ttl[b];
    pthread_mutex_lock(&t->tb_lock);
    uint32_t a = t->tb_active;
    if (a != SEG_NONE) {
        c->sc_pool.sp_segs[a].sg_state = SEG_SEALED;
        t->tb_active = SEG_NONE;
    }
    pthread_mutex_unlock(&t->tb_lock);
    return a;
}
