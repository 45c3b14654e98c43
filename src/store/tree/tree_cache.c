/*
 * tree_cache.c - the B+ tree's page cache, page allocation and overflow runs.
 *
 * The cache holds at most about `cap` pages (pccap / psiz): clean pages on
 * a list, evicted from its cold end (CLOCK: a page used since the last pass
 * gets a second chance) when a load passes the bound;
 * dirty pages (made or changed since the last checkpoint) on a list of
 * their own, never evicted: they leave the list at the next checkpoint,
 * which starts (tree.c) when dirty pages reach half the bound.
 * Pages on a path in use are pinned and skipped by eviction, so the cache
 * may pass the bound by a path's length while an operation runs.
 *
 * Readers share the tree lock (tree_int.h), so pins, loads and evictions
 * take the cache's own mutex, bt->cmu, for a few instructions: a miss
 * reads its page into a page object with cmu let go, then inserts it
 * unless another reader did first (a page's bytes on disk cannot change
 * while the tree lock is shared).  A changing operation holds the tree
 * lock exclusive, so no reader is in the cache: the functions only
 * changes call (new, touch, free) need no cmu.
 *
 * A get's hits write nothing another get writes (docs/design.md, "Tree
 * reads in parallel"): it looks pages up without cmu (the hash's links are
 * atomics, changed under cmu; a chain longer than HASH_WALK_MAX is left to
 * the locked path), pins none, counts its hits in its reader's slot of the
 * tree lock, and sets a page's ref bit only if it is clear.  An unpinned
 * page may be evicted by another reader while the get reads it, so an
 * evicted object goes to the limbo, stamped with the epoch (bt->epoch,
 * moved by each eviction), and is reused or freed only once every reader
 * inside the tree lock entered after that epoch (tree_lock.c): a reader
 * that entered later cannot reach it, as it left the hash before the
 * epoch moved.  A writer's lock (no reader inside) empties the limbo.
 *
 * Allocation (copy-on-write, as LMDB does): a page written by an earlier
 * checkpoint is never written again in place; changing it moves it to a
 * new number (do_page_touch) and frees the old one into `pend`, reusable
 * only once the next meta page is durable (a crash before that recovers
 * the old root, which still needs it).  Pages made since the last
 * checkpoint are reusable at once when freed.  New numbers come from
 * `freev`, the lowest first, else from the end of the file; free pages at
 * the file's end are cut off by the next checkpoint (do_free_trim_tail).
 *
 * Values too large for a cell go to an overflow run: contiguous pages
 * written at once with pwritev (a run is new, so no committed root reaches
 * its pages), read back whole with one pread, one checksum over the run.
 * They never enter the page cache: a 1 MB value costs no page room (the
 * cache of large values, tree_vcache.c, keeps them apart, bounded by vcache).
 */
#include <errno.h>
#include <stddef.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

#include "kura/crc32c.h"
#include "kura/grow.h"
#include "kura/testhooks.h"
#include "kura/tlbuf.h"
#include "tree_int.h"

static unsigned char zeros[65536];

static inline size_t hslot(const btree *bt, uint64_t pgno)
{
    return (size_t)((pgno * 0x9E3779B97F4A7C15ULL) >> 20) & bt->hmask;
}

static void list_del(bt_page *p)
{
    p->prev->next = p->next;
    p->next->prev = p->prev;
    p->prev = p->next = p;
}

static void list_add(bt_page *head, bt_page *p)
{
    p->next = head->next;
    p->prev = head;
    head->next->prev = p;
    head->next = p;
}

/* The hash's links: changed under cmu (or rw exclusive), read by gets
 * without.  Stores and a get's loads are sequentially consistent: a get
 * that entered the tree lock after an eviction's epoch cannot reach the
 * evicted page (tree_lock.c's slots are taken the same way). */
#define HASH_WALK_MAX 16        /* links a get follows without cmu */

static inline bt_page *link_get(_Atomic(bt_page *) *l)
{
    return atomic_load_explicit(l, memory_order_relaxed);
}

static void hash_add(btree *bt, bt_page *p)
{
    _Atomic(bt_page *) *h = &bt->htab[hslot(bt, p->pgno)];
    atomic_store_explicit(&p->hnext, link_get(h), memory_order_relaxed);
    atomic_store(h, p);         /* (publishes pgno and data) */
}

static void hash_del(btree *bt, bt_page *p)
{
    _Atomic(bt_page *) *l = &bt->htab[hslot(bt, p->pgno)];
    bt_page *q;
    while ((q = link_get(l)) && q != p)
        l = &q->hnext;
    if (q)
        atomic_store(l, link_get(&p->hnext));
}

static bt_page *hash_find(btree *bt, uint64_t pgno)
{
    for (bt_page *p = link_get(&bt->htab[hslot(bt, pgno)]); p; p = link_get(&p->hnext))
        if (p->pgno == pgno)
            return p;
    return NULL;
}

/* A get's lookup without cmu: the page, or NULL (not cached, or a chain
 * too long to walk here: the caller takes the locked path). */
static bt_page *hash_find_unlocked(btree *bt, uint64_t pgno)
{
    bt_page *p = atomic_load(&bt->htab[hslot(bt, pgno)]);
    for (int n = 0; p && n < HASH_WALK_MAX; n++, p = atomic_load(&p->hnext))
        if (p->pgno == pgno)
            return p;
    return NULL;
}

int bt_vec_push(bt_vec *v, uint64_t x)
{
    if (kura_grow(&v->v, &v->cap, v->n + 1, sizeof(*v->v), 64))
        return KURA_ENOMEM;
    v->v[v->n++] = x;
    return KURA_OK;
}

int bc_init(btree *bt, uint64_t cap_bytes)
{
    bt->cap = (size_t)(cap_bytes / bt->psiz);
    if (bt->cap < 64)
        bt->cap = 64;
    size_t hs = 64;
    while (hs < bt->cap * 2)
        hs *= 2;
    bt->htab = malloc(hs * sizeof(*bt->htab));
    if (!bt->htab)
        return KURA_ENOMEM;
    for (size_t i = 0; i < hs; i++)
        atomic_init(&bt->htab[i], NULL);
    bt->hmask = hs - 1;
    bt->lru.prev = bt->lru.next = &bt->lru;
    bt->dirty.prev = bt->dirty.next = &bt->dirty;
    return KURA_OK;
}

void bc_free(btree *bt)
{
    for (bt_page *head = &bt->lru; head; head = head == &bt->lru ? &bt->dirty : NULL) {
        if (!head->next)
            continue;
        while (head->next != head) {
            bt_page *p = head->next;
            list_del(p);
            free(p);
        }
    }
    while (bt->spare) {
        bt_page *p = bt->spare;
        bt->spare = p->next;
        free(p);
    }
    while (bt->limbo) {
        bt_page *p = bt->limbo;
        bt->limbo = p->next;
        free(p);
    }
    bt->nlimbo = 0;
    free(bt->htab);
    bt->htab = NULL;
}

static void reclaim(btree *bt);

static bt_page *obj_get(btree *bt)
{
    if (!bt->spare && bt->limbo)
        reclaim(bt);
    bt_page *p = bt->spare;
    if (p) {
        bt->spare = p->next;
        bt->nspare--;
    } else if (!(p = malloc(sizeof(*p) + bt->psiz))) {
        return NULL;
    }
    memset(p, 0, offsetof(bt_page, hnext));
    atomic_init(&p->hnext, NULL);
    p->prev = p->next = p;
    p->pins = 0;
    p->dirty = p->writing = p->orphan = false;
    atomic_init(&p->ref, false);
    p->retired = 0;
    return p;
}

static void obj_put(btree *bt, bt_page *p)
{
    if (bt->nspare >= 64) {
        free(p);
        return;
    }
    p->next = bt->spare;
    bt->spare = p;
    bt->nspare++;
}

/* The limbo's objects evicted before every reader inside entered, reused
 * (or freed).  cmu held (or rw exclusive). */
static void reclaim(btree *bt)
{
    uint64_t min = bt_reader_min_epoch(bt);
    while (bt->limbo && bt->limbo->retired < min) {
        bt_page *p = bt->limbo;
        bt->limbo = p->next;
        bt->nlimbo--;
        obj_put(bt, p);
    }
    if (!bt->limbo)
        bt->limbo_tail = NULL;
}

/* p, out of the hash, to the limbo.  The epoch moves after p left the
 * hash: a reader that enters at the new epoch cannot reach it. */
static void retire(btree *bt, bt_page *p)
{
    if (KURA_TEST_SWITCH(tree_limbo_off)) {
        /* (the negative check: reusable at once; kept, not freed, so
         * that the test reads a reused object, not freed memory) */
        p->next = bt->spare;
        bt->spare = p;
        bt->nspare++;
        return;
    }
    p->retired = atomic_fetch_add(&bt->epoch, 1);
    p->next = NULL;
    if (bt->limbo_tail)
        bt->limbo_tail->next = p;
    else
        bt->limbo = p;
    bt->limbo_tail = p;
    if (++bt->nlimbo >= 64)
        reclaim(bt);
}

size_t bc_limbo_pages(btree *bt)
{
    pthread_mutex_lock(&bt->cmu);
    size_t n = bt->nlimbo;
    pthread_mutex_unlock(&bt->cmu);
    return n;
}

void bc_quiesce(btree *bt)
{
    if (!bt->limbo)
        return;
    pthread_mutex_lock(&bt->cmu);
    reclaim(bt);                /* (no reader inside: all of it) */
    pthread_mutex_unlock(&bt->cmu);
}

int do_reserve(btree *bt, size_t n)
{
    while (bt->nspare < n) {
        bt_page *p = malloc(sizeof(*p) + bt->psiz);
        if (!p)
            return KURA_ENOMEM;
        p->next = bt->spare;
        bt->spare = p;
        bt->nspare++;
    }
    return KURA_OK;
}

/* Evicts clean pages from the list's cold end while the cache is over its
 * bound.  A hit only sets the page's ref bit (moving it on every hit would
 * touch two neighbours' lines each time): a page met here with the bit set
 * gets a second chance at the hot end instead (CLOCK).  Bounded: each page
 * is passed over at most twice.  cmu held (or rw exclusive). */
static void evict_locked(btree *bt)
{
    size_t budget = 2 * bt->ncached + 2;
    bt_page *p = bt->lru.prev;
    while (bt->ncached > bt->cap && p != &bt->lru && budget--) {
        bt_page *prev = p->prev;
        if (atomic_load_explicit(&p->ref, memory_order_relaxed)) {
            atomic_store_explicit(&p->ref, false, memory_order_relaxed);
            list_del(p);
            list_add(&bt->lru, p);
        } else if (!p->pins) {
            list_del(p);
            hash_del(bt, p);
            bt->ncached--;
            retire(bt, p);      /* a get may be reading it unpinned */
        }
        p = prev;
    }
}

void do_evict(btree *bt)
{
    pthread_mutex_lock(&bt->cmu);
    evict_locked(bt);
    pthread_mutex_unlock(&bt->cmu);
}

void bt_count_error(btree *bt, int rc, uint64_t pgno, const char *what)
{
    if (rc == KURA_ECORRUPT) {
        atomic_fetch_add_explicit(&bt->corrupt_reads, 1, memory_order_relaxed);
        bt_log(bt, KURA_LOG_ERROR, "%s/tree: %s at page %llu (offset %llu) fails its checks",
               bt->dir, what, (unsigned long long)pgno,
               (unsigned long long)(pgno * bt->psiz));
    } else {
        atomic_fetch_add_explicit(&bt->read_errors, 1, memory_order_relaxed);
        bt_log(bt, KURA_LOG_ERROR, "%s/tree: cannot read %s at page %llu: %s", bt->dir, what,
               (unsigned long long)pgno, kura_strerror(rc));
    }
}

/* Reads n bytes at off: 0, KURA_ECORRUPT if the file ends before, KURA_EIO. */
static int read_full_fd(btree *bt, int fd, void *buf, size_t n, off_t off)
{
    size_t got = 0;
    while (got < n) {
        ssize_t r = bt->io->pread(bt->io, fd, (char *)buf + got, n - got, off + (off_t)got);
        if (r < 0 && errno == EINTR)
            continue;
        if (r < 0)
            return KURA_EIO;
        if (r == 0)
            return KURA_ECORRUPT;
        got += (size_t)r;
    }
    return KURA_OK;
}

static inline void stat_add(_Atomic uint64_t *c)
{
    atomic_fetch_add_explicit(c, 1, memory_order_relaxed);
}

/* No list move on a hit (see evict_locked); the bit written only when
 * clear, so that hits in parallel leave the line shared. */
static inline void set_ref(bt_page *p)
{
    if (!atomic_load_explicit(&p->ref, memory_order_relaxed))
        atomic_store_explicit(&p->ref, true, memory_order_relaxed);
}

/* A cached page pinned for the caller (pin false: only looked up, for
 * a get: see the head comment): cmu held. */
static int pin_cached(bt_page *p, int type, bt_page **out, bool pin)
{
    if (type && pg_type(p->data) != type)
        return KURA_ECORRUPT;
    if (pin)
        p->pins++;
    set_ref(p);
    *out = p;
    return KURA_OK;
}

/* A hit counted with cmu held: every count is, so a load and a store
 * (no locked add) keep it exact for the relaxed reads of stats. */
static void count_hit_locked(btree *bt)
{
    atomic_store_explicit(&bt->cache_hits,
                          atomic_load_explicit(&bt->cache_hits, memory_order_relaxed) + 1,
                          memory_order_relaxed);
}

int do_page_pin_locked(btree *bt, uint64_t pgno, int type, bt_page **out)
{
    bt_page *p = hash_find(bt, pgno);
    if (!p || (type && pg_type(p->data) != type))
        return 1;
    count_hit_locked(bt);
    return pin_cached(p, type, out, true);
}

/* The page if cached (looked up under cmu; pinned if pin): 1 if not. */
static int page_get_cached(btree *bt, uint64_t pgno, int type, bt_page **out, bool pin)
{
    pthread_mutex_lock(&bt->cmu);
    bt_page *p = hash_find(bt, pgno);
    if (!p) {
        pthread_mutex_unlock(&bt->cmu);
        return 1;
    }
    count_hit_locked(bt);
    int rc = pin_cached(p, type, out, pin);
    pthread_mutex_unlock(&bt->cmu);
    if (rc)
        bt_count_error(bt, rc, pgno, "a page of the wrong type");
    return rc;
}

static int page_get(btree *bt, uint64_t pgno, int type, bt_page **out, bool pin)
{
    int rc = page_get_cached(bt, pgno, type, out, pin);
    if (rc != 1)
        return rc;
    pthread_mutex_lock(&bt->cmu);
    bt_page *p = obj_get(bt);
    pthread_mutex_unlock(&bt->cmu);
    stat_add(&bt->cache_misses);
    if (!p)
        return KURA_ENOMEM;
    rc = KURA_ECORRUPT;
    if (pgno < 2 || pgno >= bt->npages)
        bt_count_error(bt, rc, pgno, "a pointer past the file's pages");
    else if ((rc = bt_page_load(bt, bt->fd, pgno, type, p->data)))
        bt_count_error(bt, rc, pgno, "a page");
    pthread_mutex_lock(&bt->cmu);
    if (rc) {
        obj_put(bt, p);
        pthread_mutex_unlock(&bt->cmu);
        return rc;
    }
    bt_page *q = hash_find(bt, pgno);
    if (q) {                    /* another reader loaded it meanwhile */
        obj_put(bt, p);         /* (never in the hash: no get saw it) */
        rc = pin_cached(q, type, out, pin);
        pthread_mutex_unlock(&bt->cmu);
        if (rc)
            bt_count_error(bt, rc, pgno, "a page of the wrong type");
        return rc;
    }
    p->pgno = pgno;
    p->txn = bt_get64(p->data + 16);
    p->pins = pin;
    hash_add(bt, p);
    list_add(&bt->lru, p);
    bt->ncached++;
    evict_locked(bt);
    pthread_mutex_unlock(&bt->cmu);
    *out = p;
    return KURA_OK;
}

int do_page_get(btree *bt, uint64_t pgno, int type, bt_page **out)
{
    return page_get(bt, pgno, type, out, true);
}

/* A hit in the reader's own slot (a reader in rover: the shared count). */
static void count_hit_unlocked(btree *bt, int slot)
{
    if (slot >= 0) {
        _Atomic uint64_t *h = &bt->rslot[slot].hits;
        atomic_store_explicit(h, atomic_load_explicit(h, memory_order_relaxed) + 1,
                              memory_order_relaxed);
    } else {
        stat_add(&bt->cache_hits);
    }
}

int do_page_peek(btree *bt, uint64_t pgno, int type, bt_page **out)
{
    bt_page *p = hash_find_unlocked(bt, pgno);
    if (!p || (type && pg_type(p->data) != type))
        return 1;               /* (the locked path reports a wrong type) */
    set_ref(p);
    count_hit_unlocked(bt, bt_reader_slot(bt));
    *out = p;
    return KURA_OK;
}

int do_page_get_unpinned(btree *bt, uint64_t pgno, int type, bt_page **out)
{
    if (do_page_peek(bt, pgno, type, out) == KURA_OK)
        return KURA_OK;
    return page_get(bt, pgno, type, out, false);
}

void do_page_unpin(btree *bt, bt_page *p)
{
    if (!p)
        return;
    pthread_mutex_lock(&bt->cmu);
    if (p->pins)
        p->pins--;
    pthread_mutex_unlock(&bt->cmu);
}

void do_pages_unpin(btree *bt, bt_page *const *pg, int n)
{
    pthread_mutex_lock(&bt->cmu);
    for (int i = 0; i < n; i++)
        if (pg[i] && pg[i]->pins)
            pg[i]->pins--;
    pthread_mutex_unlock(&bt->cmu);
}

bt_page *do_page_new(btree *bt, int type)
{
    bt_page *p = obj_get(bt);
    if (!p) {
        /* do_reserve() before every change makes this unreachable */
        bt_log(bt, KURA_LOG_ERROR, "out of memory for a page with none reserved");
        abort();
    }
    p->pgno = do_alloc_run(bt, 1);
    p->txn = bt->txn;
    p->pins = 1;
    p->dirty = true;
    pg_init(p->data, bt->psiz, type, p->pgno, bt->txn);
    hash_add(bt, p);
    list_add(&bt->dirty, p);
    bt->ncached++;
    bt->ndirty++;
    evict_locked(bt);           /* (rw exclusive: no reader in the cache) */
    return p;
}

/* p, which a checkpoint is writing, left to it (out of the cache: the
 * checkpoint frees it) and a copy in its place, with the caller's pin. */
static bt_page *copy_for_change(btree *bt, bt_page *p)
{
    bt_page *q = obj_get(bt);
    if (!q) {
        /* do_reserve() before every change makes this unreachable */
        bt_log(bt, KURA_LOG_ERROR, "out of memory for a page with none reserved");
        abort();
    }
    memcpy(q->data, p->data, bt->psiz);
    q->pgno = p->pgno;
    q->txn = p->txn;
    q->pins = 1;
    atomic_store_explicit(&q->ref, true, memory_order_relaxed);
    p->pins--;
    hash_del(bt, p);
    list_del(p);
    p->orphan = true;
    hash_add(bt, q);
    list_add(&bt->lru, q);
    return q;
}

uint64_t do_page_touch(btree *bt, bt_page **pp)
{
    bt_page *p = *pp;
    if (p->txn != bt->txn) {
        uint64_t old = p->pgno;
        if (p->writing && !KURA_TEST_SWITCH(tree_ckpt_no_copy))
            *pp = p = copy_for_change(bt, p);
        hash_del(bt, p);
        p->pgno = do_alloc_run(bt, 1);
        p->txn = bt->txn;
        bt_put64(p->data + 8, p->pgno);
        bt_put64(p->data + 16, p->txn);
        hash_add(bt, p);
        do_free_pgno(bt, old, 1, false);
    }
    if (!p->dirty) {
        list_del(p);
        list_add(&bt->dirty, p);
        p->dirty = true;
        bt->ndirty++;
    }
    return p->pgno;
}

void do_page_free(btree *bt, bt_page *p)
{
    hash_del(bt, p);
    list_del(p);
    if (p->dirty)
        bt->ndirty--;
    bt->ncached--;
    do_free_pgno(bt, p->pgno, 1, p->txn == bt->txn);
    if (p->writing)
        p->orphan = true;       /* the checkpoint frees it after its write */
    else
        obj_put(bt, p);
}

void do_ckpt_pages_done(btree *bt, bt_page **pages, size_t n, bool written)
{
    for (size_t j = 0; j < n; j++) {
        bt_page *p = pages[j];
        p->writing = false;
        if (p->orphan) {        /* (counted out of the cache when orphaned) */
            obj_put(bt, p);
            continue;
        }
        if (p->pins)
            p->pins--;
        if (!written) {
            p->txn = bt->txn;
            bt_put64(p->data + 16, p->txn);
            list_del(p);
            list_add(&bt->dirty, p);
            p->dirty = true;
            bt->ndirty++;
        }
    }
}

void do_free_pgno(btree *bt, uint64_t pgno, uint64_t n, bool reusable_now)
{
    do_vc_drop(bt, pgno);       /* a run is freed whole, from its first page */
    if (KURA_TEST_SWITCH(tree_no_reuse))
        return;                 /* (the negative check: the pages are lost) */
    for (uint64_t i = 0; i < n; i++) {
        /* a push that fails leaks the page until a rebuild: never unsafe */
        if (reusable_now || KURA_TEST_SWITCH(tree_reuse_pending)) {
            if (bt_vec_push(&bt->freev, pgno + i) == KURA_OK)
                bt->free_sorted = false;
        } else {
            (void)bt_vec_push(&bt->pend, pgno + i);
        }
    }
}

void do_free_run(btree *bt, uint64_t pgno, uint32_t bytes)
{
    /* kura_test.tree_run_reuse_now: the negative check of test_tree_runs
     * (a RUN record's run overwritten before a checkpoint lets it go) */
    do_free_pgno(bt, pgno, bt_ovf_pages(bt, bytes), KURA_TEST_SWITCH(tree_run_reuse_now));
}

static int cmp_u64_desc(const void *a, const void *b)
{
    uint64_t x = *(const uint64_t *)a, y = *(const uint64_t *)b;
    return x > y ? -1 : x < y;
}

/* Sorts the free pages in descending order, so that a pop takes the lowest
 * (the file fills from its start and its end falls free, to be cut off at
 * a checkpoint: do_free_trim_tail), dropping duplicates, which would be a
 * bug: logged. */
static void sort_free(btree *bt)
{
    bt_vec *v = &bt->freev;
    if (bt->free_sorted)
        return;
    if (v->n < 2) {             /* (qsort takes no NULL, even for 0) */
        bt->free_sorted = true;
        return;
    }
    qsort(v->v, v->n, sizeof(v->v[0]), cmp_u64_desc);
    size_t j = 0;
    for (size_t i = 0; i < v->n; i++) {
        if (j && v->v[j - 1] == v->v[i]) {
            bt_log(bt, KURA_LOG_ERROR, "page %llu was freed twice (ignored)",
                   (unsigned long long)v->v[i]);
            continue;
        }
        v->v[j++] = v->v[i];
    }
    v->n = j;
    bt->free_sorted = true;
}

uint64_t do_alloc_run(btree *bt, uint64_t n)
{
    bt_vec *v = &bt->freev;
    if (v->n >= n) {
        sort_free(bt);
        if (n == 1)
            return v->v[--v->n];
        /* the lowest run of n neighbours: v[i] down to v[i + n - 1] */
        for (size_t i = v->n - n + 1; i-- > 0;) {
            if (v->v[i] - v->v[i + n - 1] == n - 1) {
                uint64_t start = v->v[i + n - 1];
                memmove(v->v + i, v->v + i + n, (v->n - i - n) * sizeof(v->v[0]));
                v->n -= n;
                return start;
            }
        }
    }
    uint64_t start = bt->npages;
    bt->npages += n;
    return start;
}

uint64_t do_free_lowest(btree *bt)
{
    sort_free(bt);
    return bt->freev.n ? bt->freev.v[bt->freev.n - 1] : UINT64_MAX;
}

uint64_t do_free_trim_tail(btree *bt)
{
    bt_vec *v = &bt->freev;
    sort_free(bt);
    size_t k = 0;
    while (k < v->n && v->v[k] == bt->npages - 1 - k && bt->npages - 1 - k > 2)
        k++;
    if (k) {
        memmove(v->v, v->v + k, (v->n - k) * sizeof(v->v[0]));
        v->n -= k;
        bt->npages -= k;
    }
    return k;
}

size_t bt_ovf_pages(btree *bt, size_t vlen)
{
    return (BT_HDR + vlen + bt->psiz - 1) / bt->psiz;
}

/* pwritev of every byte (short writes continued); 0 or -1 with errno. */
int bt_pwritev_all(btree *bt, struct iovec *iov, int n, off_t off)
{
    while (n > 0) {
        ssize_t w = bt->io->pwritev(bt->io, bt->fd, iov, n, off);
        if (w < 0 && errno == EINTR)
            continue;
        if (w < 0)
            return -1;
        if (w == 0) {
            errno = ENOSPC;
            return -1;
        }
        off += w;
        while (n > 0 && (size_t)w >= iov->iov_len) {
            w -= (ssize_t)iov->iov_len;
            iov++;
            n--;
        }
        if (n > 0) {
            iov->iov_base = (char *)iov->iov_base + w;
            iov->iov_len -= (size_t)w;
        }
    }
    return 0;
}

/* The bytes at the end of a run (run bytes at `at`, of which `used` are
 * its header and stored bytes) that need not be written: when the run
 * extends the file from within its written part, the padding past the
 * file-system block that holds its last stored byte is made by extending
 * the file (fallocate: zeros, no data written) rather than by writing
 * zeros.  Inside the file it must be written (stale bytes lie there, and
 * the run's CRC covers its padding).  The file only grows while a change
 * holds the tree lock (a checkpoint's writes; its cut is made under the
 * lock), so its size now is a lower bound. */
static size_t pad_unwritten(btree *bt, off_t at, size_t run, size_t used)
{
    size_t kept = (used + bt->blksize - 1) / bt->blksize * bt->blksize;
    struct stat st;
    if (kept >= run || KURA_TEST_SWITCH(tree_run_pad_written) || fstat(bt->fd, &st) != 0 ||
        st.st_size > at + (off_t)kept)
        return 0;
    return run - kept;
}

int do_ovf_write(btree *bt, const void *v0, size_t l0, const void *v1, size_t l1, bt_ovf *out)
{
    size_t raw = l0 + l1;
    void *packed = NULL;
    size_t plen = 0;
    uint32_t vcrc = crc32c_update(crc32c_update(0, v0, l0), v1, l1);
    int codec = bt_zcomp_pack(bt, v0, l0, v1, l1, &packed, &plen);
    if (codec) {                        /* the run holds the compressed bytes */
        v0 = packed;
        l0 = plen;
        v1 = NULL;
        l1 = 0;
    }
    size_t vlen = l0 + l1, n = bt_ovf_pages(bt, vlen);
    size_t pad = n * bt->psiz - BT_HDR - vlen;
    uint64_t start = do_alloc_run(bt, n);
    unsigned char hdr[BT_HDR];
    pg_init(hdr, bt->psiz, BT_OVERFLOW, start, bt->txn);
    pg_set_link(hdr, n);
    bt_put32(hdr + 32, (uint32_t)vlen);
    if (codec) {
        hdr[5] = (unsigned char)codec;
        bt_put32(hdr + 36, (uint32_t)raw);
    }
    uint32_t crc = crc32c_update(0, hdr + 4, BT_HDR - 4);
    crc = crc32c_update(crc, v0, l0);
    crc = crc32c_update(crc, v1, l1);
    crc = crc32c_update(crc, zeros, pad);
    bt_put32(hdr, crc);
    struct iovec iov[4];
    int k = 0;
    iov[k++] = (struct iovec){ hdr, BT_HDR };
    if (l0)
        iov[k++] = (struct iovec){ (void *)v0, l0 };
    if (l1)
        iov[k++] = (struct iovec){ (void *)v1, l1 };
    off_t at = (off_t)(start * bt->psiz);
    size_t skip = pad_unwritten(bt, at, n * bt->psiz, BT_HDR + vlen);
    if (pad > skip)
        iov[k++] = (struct iovec){ zeros, pad - skip };
    if (bt_pwritev_all(bt, iov, k, at) != 0 ||
        (skip && bt->io->fallocate(bt->io, bt->fd, at + (off_t)(n * bt->psiz - skip),
                                   (off_t)skip) != 0)) {
        int e = errno;
        do_free_pgno(bt, start, n, true);
        free(packed);
        bt_log(bt, KURA_LOG_ERROR, "%s/tree: cannot write a value of %zu bytes: %s", bt->dir,
               raw, strerror(e));
        return sl_errno_status(e);
    }
    free(packed);
    /* after the write returned: a log sync that reads this count syncs
     * the file first (bt_wal_presync) */
    atomic_fetch_add_explicit(&bt->run_writes, 1, memory_order_release);
    atomic_fetch_add_explicit(&bt->run_bytes, n * bt->psiz, memory_order_relaxed);
    if (codec) {
        atomic_fetch_add_explicit(&bt->zcomp_runs, 1, memory_order_relaxed);
        atomic_fetch_add_explicit(&bt->zcomp_saved, raw - vlen, memory_order_relaxed);
    }
    *out = (bt_ovf){ .pgno = start, .bytes = (uint32_t)vlen, .codec = (uint8_t)codec,
                     .vcrc = vcrc };
    return KURA_OK;
}

int do_ovf_read(btree *bt, const bt_cell *c, const unsigned char **val)
{
    return do_ovf_read_fd(bt, bt->fd, bt->npages, c, val);
}

int do_ovf_read_fd(btree *bt, int fd, uint64_t npages, const bt_cell *c,
                   const unsigned char **val)
{
    int rc = bt_ovf_read_quiet(bt, fd, npages, c, val, NULL);
    if (rc)
        bt_count_error(bt, rc, c->ovf_pgno,
                       c->ovf_pgno < 2 || c->ovf_pgno + bt_ovf_pages(bt, c->ovf_bytes) > npages
                           ? "an overflow run past the file's pages" : "an overflow run");
    return rc;
}

int bt_ovf_read_quiet(btree *bt, int fd, uint64_t npages, const bt_cell *c,
                      const unsigned char **val, bt_vent **keep)
{
    uint64_t pgno = c->ovf_pgno;
    size_t vlen = c->ovf_bytes;
    size_t n = bt_ovf_pages(bt, vlen), len = n * bt->psiz;
    if (keep)
        *keep = NULL;
    if (pgno < 2 || pgno + n > npages)
        return KURA_ECORRUPT;
    /* a value to keep is read straight into its entry (an uncompressed
     * one is used where it lies: no copy more than the scratch costs) */
    bt_vent *e = keep && bt_vc_wants(bt, c) ? bt_vc_new(c, len) : NULL;
    unsigned char *vb = e ? e->buf : tlbuf(TLB_TREE_OVF, len);   /* else the thread's own */
    if (!vb)
        return KURA_ENOMEM;
    int rc = read_full_fd(bt, fd, vb, len, (off_t)(pgno * bt->psiz));
    if (rc == KURA_OK &&
        (bt_get32(vb) != crc32c_update(0, vb + 4, len - 4) ||
         pg_type(vb) != BT_OVERFLOW || bt_get64(vb + 8) != pgno ||
         pg_link(vb) != n || bt_get32(vb + 32) != vlen ||
         vb[5] != c->ovf_codec || (c->ovf_codec && bt_get32(vb + 36) != c->vlen)))
        rc = KURA_ECORRUPT;
    if (rc == KURA_OK && c->ovf_codec)
        rc = bt_zcomp_unpack(bt, c->ovf_codec, vb + BT_HDR, vlen, c->vlen, val);
    else
        *val = vb + BT_HDR;
    if (!e)
        return rc;
    if (rc == KURA_OK && c->ovf_codec) {
        /* the entry keeps the value decompressed, not the run */
        bt_vent *d = bt_vc_new(c, c->vlen);
        if (d) {
            memcpy(d->buf, *val, c->vlen);
            *val = d->buf;
        }
        free(e);
        e = d;
    } else if (rc == KURA_OK) {
        e->val = *val;
    } else {
        free(e);
        e = NULL;
    }
    *keep = e;
    return rc;
}
