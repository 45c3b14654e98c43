/*
 * tree_lock.c - the tree lock bt->rw: a reader-writer lock whose readers
 * write no cache line another reader writes (docs/design.md, "Tree reads
 * in parallel").
 *
 * Why not pthread_rwlock_t: its readers all count in one word, so two
 * readers on two cores pass that line back and forth twice a get, and
 * gets in parallel were slower than one thread's (docs/benchmarks.md).
 * Here each reader takes a slot of its own (a big-reader lock, as LMDB's
 * reader table): two cache lines holding whether it is inside and the epoch
 * it entered at (tree_cache.c frees the page objects it evicts only once
 * every reader inside entered after the eviction), and its count of cache
 * hits.  Only a get (bt_rdlock_get), which reads pages unpinned, enters
 * with the epoch; other readers (walks, whose callbacks may take long,
 * stats) pin what they read and enter with NO_EPOCH, holding nothing back.
 * A thread tries the slot its number picks (given round-robin at its
 * first lock), then the others; a reader that finds all 64 taken counts
 * in `rover` (a get: `rover_get`, which holds off the reuse of every
 * evicted page while it is not 0), which is shared: correct, only slower.
 *
 * A reader enters with one compare-and-swap on its slot, then looks at
 * the writer flag; a writer takes wmu, raises the flag, then waits until
 * no slot is taken.  Both sides are sequentially consistent, so either
 * the writer sees the reader's slot or the reader sees the flag (and then
 * leaves its slot and waits on wmu, blocked, not spinning).  Writers go
 * first, as with the PREFER_WRITER rwlock before: a stream of readers
 * holds no change off.  The writer's wait is a short spin, then yields
 * and short sleeps: readers hold the lock for a get or a leaf's walk.
 * No thread takes the lock twice (a store's iterate callback may write
 * into another store: a thread holds up to HELD_MAX trees' locks).
 */
#include <sched.h>
#include <stdlib.h>
#include <time.h>

#include "kura/lockorder.h"
#include "kura/testhooks.h"
#include "tree_int.h"

#define HELD_MAX 8
#define WRITER   (-2)           /* held: exclusive */
#define ROVER    (-1)           /* held: shared, counted in rover (or rover_get) */
#define NO_EPOCH (UINT64_MAX >> 1)  /* a slot's epoch when it reads no page unpinned */

/* The locks a thread holds (for bt_unlock, which takes only the tree). */
static _Thread_local struct {
    const btree *bt;
    int slot;
    bool get;                   /* by bt_rdlock_get */
} held[HELD_MAX];
static _Thread_local int nheld;
static _Thread_local int my_slot = -1;

static void push_held(const btree *bt, int slot, bool get)
{
    if (nheld == HELD_MAX)
        abort();                /* (a thread holds at most two: see above) */
    held[nheld].bt = bt;
    held[nheld].slot = slot;
    held[nheld].get = get;
    nheld++;
}

static int pop_held(const btree *bt, bool *get)
{
    for (int i = nheld - 1; i >= 0; i--) {
        if (held[i].bt == bt) {
            int slot = held[i].slot;
            *get = held[i].get;
            held[i] = held[--nheld];
            return slot;
        }
    }
    abort();                    /* an unlock of a lock not held */
}

int bt_lock_init(btree *bt)
{
    bt->rslot = aligned_alloc(128, BT_RSLOTS * sizeof(bt_rslot));
    if (!bt->rslot)
        return KURA_ENOMEM;
    for (int i = 0; i < BT_RSLOTS; i++) {
        atomic_init(&bt->rslot[i].state, 0);
        atomic_init(&bt->rslot[i].hits, 0);
    }
    atomic_init(&bt->rslot_hi, 0);
    atomic_init(&bt->rover, 0);
    atomic_init(&bt->rover_get, 0);
    atomic_init(&bt->wflag, false);
    atomic_init(&bt->epoch, 1);
    pthread_mutex_init(&bt->wmu, NULL);
    return KURA_OK;
}

void bt_lock_destroy(btree *bt)
{
    free(bt->rslot);
    bt->rslot = NULL;
    pthread_mutex_destroy(&bt->wmu);
}

/* A slot taken (its state: the epoch entered at, or NO_EPOCH for a
 * reader that pins what it reads, shifted, with bit 0), or ROVER.
 * Sequentially consistent: see the head comment. */
static int enter(btree *bt, bool get)
{
    if (my_slot < 0) {
        static _Atomic unsigned next;
        my_slot = (int)(atomic_fetch_add_explicit(&next, 1, memory_order_relaxed) % BT_RSLOTS);
    }
    uint64_t st = (get ? atomic_load(&bt->epoch) : NO_EPOCH) << 1 | 1;
    for (int k = 0; k < BT_RSLOTS; k++) {
        int i = (my_slot + k) % BT_RSLOTS;
        /* the slots in use end below rslot_hi: raised before the slot is
         * taken, so a writer (or tree_cache.c's reclaim) that misses the
         * raise also precedes the slot's use */
        unsigned hi = atomic_load(&bt->rslot_hi);
        while ((unsigned)i >= hi &&
               !atomic_compare_exchange_weak(&bt->rslot_hi, &hi, (unsigned)i + 1))
            ;
        uint64_t idle = 0;
        if (atomic_compare_exchange_strong(&bt->rslot[i].state, &idle, st))
            return i;
    }
    atomic_fetch_add(get ? &bt->rover_get : &bt->rover, 1);
    return ROVER;
}

static void leave(btree *bt, int slot, bool get)
{
    if (slot == ROVER)
        atomic_fetch_sub_explicit(get ? &bt->rover_get : &bt->rover, 1, memory_order_release);
    else
        atomic_store_explicit(&bt->rslot[slot].state, 0, memory_order_release);
}

static void take_exclusive(btree *bt)
{
    pthread_mutex_lock(&bt->wmu);
    atomic_store(&bt->wflag, true);
    unsigned hi = atomic_load(&bt->rslot_hi);
    for (unsigned spins = 0;; spins++) {
        bool busy = atomic_load(&bt->rover) != 0 || atomic_load(&bt->rover_get) != 0;
        for (unsigned i = 0; i < hi && !busy; i++)
            busy = atomic_load(&bt->rslot[i].state) != 0;
        if (!busy)
            break;
        hi = atomic_load(&bt->rslot_hi);
        if (spins < 64)
            continue;
        if (spins < 128)
            sched_yield();
        else
            nanosleep(&(struct timespec){ 0, 20000 }, NULL);
    }
}

static void rdlock(btree *bt, bool get)
{
    lockorder_acquire(LOCK_RANK_STRIPE);
    if (KURA_TEST_SWITCH(tree_read_exclusive)) {
        take_exclusive(bt);
        push_held(bt, WRITER, false);
        return;
    }
    for (;;) {
        int slot = enter(bt, get);
        if (!atomic_load(&bt->wflag)) {
            push_held(bt, slot, get);
            return;
        }
        leave(bt, slot, get);
        pthread_mutex_lock(&bt->wmu);       /* blocked until the writer is done */
        pthread_mutex_unlock(&bt->wmu);
    }
}

void bt_rdlock(btree *bt)
{
    /* (kura_test.tree_walk_epoch: the negative check of the limbo's bound) */
    rdlock(bt, KURA_TEST_SWITCH(tree_walk_epoch));
}

void bt_rdlock_get(btree *bt)
{
    rdlock(bt, true);
}

void bt_wrlock(btree *bt)
{
    lockorder_acquire(LOCK_RANK_STRIPE);
    take_exclusive(bt);
    push_held(bt, WRITER, false);
    bt->gen++;                  /* the readers' last leaves no longer hold */
    bc_quiesce(bt);             /* no reader inside: evicted pages may go */
}

void bt_unlock(btree *bt)
{
    bool get;
    int slot = pop_held(bt, &get);
    if (slot == WRITER) {
        atomic_store(&bt->wflag, false);
        pthread_mutex_unlock(&bt->wmu);
    } else {
        leave(bt, slot, get);
    }
    lockorder_release(LOCK_RANK_STRIPE);
}

int bt_reader_slot(const btree *bt)
{
    for (int i = nheld - 1; i >= 0; i--)
        if (held[i].bt == bt)
            return held[i].get ? held[i].slot : WRITER;
    return WRITER;
}

uint64_t bt_reader_min_epoch(btree *bt)
{
    if (atomic_load(&bt->rover_get))
        return 0;
    uint64_t min = UINT64_MAX;
    unsigned hi = atomic_load(&bt->rslot_hi);
    for (unsigned i = 0; i < hi; i++) {
        uint64_t st = atomic_load(&bt->rslot[i].state);
        if (st && st >> 1 < min)
            min = st >> 1;
    }
    return min;
}

uint64_t bt_reader_hits(btree *bt)
{
    uint64_t n = 0;
    for (int i = 0; i < BT_RSLOTS; i++)
        n += atomic_load_explicit(&bt->rslot[i].hits, memory_order_relaxed);
    return n;
}
