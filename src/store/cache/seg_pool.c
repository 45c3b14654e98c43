/*
 * seg_pool.c - the segments: one mapped region cut into equal segments,
 * and the list of the free ones.
 *
 * Why this shape.  One region, mapped once at open (MAP_NORESERVE: the
 * kernel gives a page its memory when it is first written), makes a
 * segment a number: the index keeps 20 bits of it instead of a pointer,
 * and a warm restart maps the same region again and finds every segment
 * where it was.  The region holds the limit's segments plus SEG_SPARE, the
 * few a writer may take past the limit under a stripe's lock before it
 * evicts back under it.  Segments never used are handed out in order, so
 * memory grows with what is stored; a freed segment goes to the front of
 * the free list and is reused first, its pages already resident.
 *
 * A segment lent to a reply (vref.h: sg_holds) cannot be reused while the
 * reply still sends from it: seg_pool_doom() leaves it DOOMED, and the
 * last release frees it.  The pool's lock guards the free list and those
 * states; it is the innermost lock.
 */
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>

#include "seg_int.h"

static void seg_reset(seg *s)
{
    s->sg_next = s->sg_prev = SEG_NONE;
    s->sg_ttl = 0;
    s->sg_wpos = 0;
    s->sg_cas_base = 0;
    s->sg_max_exp = 0;
    s->sg_max_cas = 0;
    s->sg_created = 0;
    atomic_store_explicit(&s->sg_writers, 0, memory_order_relaxed);
    atomic_store_explicit(&s->sg_holds, 0, memory_order_relaxed);
}

/* Maps the region for limit bytes of segments of seg_size bytes (plus the
 * spares).  KURA_ENOMEM if it cannot be mapped. */
int seg_pool_init(seg_pool *p, uint64_t limit, uint32_t seg_size)
{
    memset(p, 0, sizeof(*p));
    uint64_t n = limit / seg_size + SEG_SPARE;
    if (n >= (1u << SEG_ID_BITS))
        n = (1u << SEG_ID_BITS) - 1;
    p->sp_seg_size = seg_size;
    p->sp_nsegs = (uint32_t)n;
    p->sp_region = (size_t)n * seg_size;
    p->sp_free = SEG_NONE;
    pthread_mutex_init(&p->sp_lock, NULL);
    void *m = mmap(NULL, p->sp_region, PROT_READ | PROT_WRITE,
                   MAP_PRIVATE | MAP_ANONYMOUS | MAP_NORESERVE, -1, 0);
    if (m == MAP_FAILED) {
        p->sp_base = NULL;
        return KURA_ENOMEM;
    }
    p->sp_base = m;
    if (!(p->sp_segs = calloc(n, sizeof(seg))))
        return KURA_ENOMEM;
    for (uint32_t i = 0; i < n; i++)
        seg_reset(&p->sp_segs[i]);
    return KURA_OK;
}

void seg_pool_destroy(seg_pool *p)
{
    if (p->sp_base)
        munmap(p->sp_base, p->sp_region);
    free(p->sp_segs);
    pthread_mutex_destroy(&p->sp_lock);
    p->sp_base = NULL;
    p->sp_segs = NULL;
}

/* A free segment, reset, state ACTIVE; SEG_NONE when max_used segments are
 * already in use or the region has none left.  O(1). */
uint32_t seg_pool_take(seg_pool *p, uint32_t max_used)
{
    uint32_t id = SEG_NONE;
    pthread_mutex_lock(&p->sp_lock);
    if (atomic_load_explicit(&p->sp_used, memory_order_relaxed) < max_used) {
        if (p->sp_free != SEG_NONE) {
            id = p->sp_free;
            p->sp_free = p->sp_segs[id].sg_next;
            p->sp_nfree--;
        } else if (p->sp_next_new < p->sp_nsegs) {
            id = p->sp_next_new++;
        }
        if (id != SEG_NONE) {
            seg_reset(&p->sp_segs[id]);
            p->sp_segs[id].sg_state = SEG_ACTIVE;
            atomic_fetch_add_explicit(&p->sp_used, 1, memory_order_relaxed);
        }
    }
    pthread_mutex_unlock(&p->sp_lock);
    return id;
}

/* A segment back to the free list.  Past one free segment, its pages go
 * back to the kernel (a merge or a writer past the limit touched one
 * segment more than the limit holds: the process keeps no more than that
 * one resident beyond it). */
static void do_pool_free(seg_pool *p, uint32_t id)
{
    seg *s = &p->sp_segs[id];
    if (p->sp_nfree >= 1)
        madvise(seg_data(p, id), p->sp_seg_size, MADV_DONTNEED);
    p->sp_nfree++;
    s->sg_state = SEG_FREE;
    s->sg_next = p->sp_free;
    p->sp_free = id;
    atomic_fetch_sub_explicit(&p->sp_used, 1, memory_order_relaxed);
}

/* Gives a segment no index slot points into back to the pool, now or, if
 * a reply still holds part of it, at the last release. */
void seg_pool_doom(seg_pool *p, uint32_t id)
{
    pthread_mutex_lock(&p->sp_lock);
    if (atomic_load_explicit(&p->sp_segs[id].sg_holds, memory_order_acquire))
        p->sp_segs[id].sg_state = SEG_DOOMED;
    else
        do_pool_free(p, id);
    pthread_mutex_unlock(&p->sp_lock);
}

/* A hold let go (vref.h's release): the last one frees a doomed segment. */
void seg_pool_put(seg_pool *p, uint32_t id)
{
    pthread_mutex_lock(&p->sp_lock);
    seg *s = &p->sp_segs[id];
    if (atomic_fetch_sub_explicit(&s->sg_holds, 1, memory_order_acq_rel) == 1 &&
        s->sg_state == SEG_DOOMED)
        do_pool_free(p, id);
    pthread_mutex_unlock(&p->sp_lock);
}
