/*
 * marks.c - the meta protocol's per-item access state (see marks.h).
 *
 * Why beside the stores.  memcached keeps "fetched", "last access", "stale"
 * and "token sent" in each item's header.  kura's items live in stores of
 * several kinds (the cache's blocks, the hash file's records on disk) whose
 * formats carry only what a client stored; a bit flip on every read would
 * turn every read of the hash file into a write.  So the engine keeps these
 * marks in memory, for every backend alike, in a table of fixed size:
 * MARKS_SETS sets of MARKS_WAYS slots (24 bytes each, 1.5 MiB in all,
 * allocated at the first use).  A slot is found by a keyed hash of the key
 * and is valid only for the cas it names, so a new version of an item
 * (every change gives a new cas) starts unmarked, as in memcached.
 *
 * What is lost, and when.  When a set is full, the slot accessed longest
 * ago is reused, an invalidated (stale) one last: its item then reads as
 * never fetched and its last access as its store time.  Nothing of this
 * survives a restart (docs/protocol.md says so).
 *
 * Store time.  An item never read has no slot; its "last access" is its
 * store time, which the engine does not record per item either.  The clock
 * tick (once a second) notes the next cas to be handed out with the time
 * (MARKS_RING seconds, about 68 minutes, are kept); an item's store time is
 * the time of the last note at or below its cas.  An item older than the
 * ring (or than the process) reads as stored at the oldest note, one newer
 * than the last note as stored now.
 *
 * Locking.  One mutex per MARKS_LOCKS sets; callers may hold a store's key
 * lock (marks are taken inside it, never the reverse).
 */
#include <pthread.h>
#include <stdatomic.h>
#include <stdlib.h>
#include <string.h>

#include "kura/siphash.h"
#include "marks.h"

#define MARKS_SETS (1u << 14)
#define MARKS_WAYS 4
/* make fuzz builds 4 (-DMARKS_LOCKS=4): its protocol targets make and
 * destroy an engine's mutexes per input, from one thread */
#ifndef MARKS_LOCKS
#define MARKS_LOCKS 256
#endif
#define MARKS_RING 4096

typedef struct marks_slot {
    uint64_t ms_tag;            /* key hash; 0 = empty */
    uint64_t ms_cas;
    uint32_t ms_atime;          /* Unix time of the last access */
    uint32_t ms_bits;
} marks_slot;

typedef struct marks_note {
    uint64_t mn_cas;
    int64_t mn_time;
} marks_note;

struct kura_marks {
    siphash_key mk_key;
    pthread_mutex_t mk_init;            /* guards the allocation of mk_slots */
    marks_slot *_Atomic mk_slots;
    size_t mk_sets;                     /* sets of MARKS_WAYS slots in mk_slots */
    pthread_mutex_t mk_locks[MARKS_LOCKS];
    pthread_mutex_t mk_ring_lock;
    marks_note *mk_ring;                /* MARKS_RING notes, from the first tick */
    size_t mk_ring_len, mk_ring_next;
    int64_t mk_ring_last;
};

kura_marks *marks_new(size_t sets)
{
    kura_marks *m = calloc(1, sizeof(*m));
    if (!m)
        return NULL;
    siphash_process_key(&m->mk_key);
    m->mk_sets = sets ? sets : MARKS_SETS;
    pthread_mutex_init(&m->mk_init, NULL);
    pthread_mutex_init(&m->mk_ring_lock, NULL);
    for (int i = 0; i < MARKS_LOCKS; i++)
        pthread_mutex_init(&m->mk_locks[i], NULL);
    return m;
}

void marks_free(kura_marks *m)
{
    if (!m)
        return;
    for (int i = 0; i < MARKS_LOCKS; i++)
        pthread_mutex_destroy(&m->mk_locks[i]);
    pthread_mutex_destroy(&m->mk_init);
    pthread_mutex_destroy(&m->mk_ring_lock);
    free(m->mk_ring);
    free(m->mk_slots);
    free(m);
}

/* The table, allocated at the first change; NULL if none yet (or no memory). */
static marks_slot *slots_of(kura_marks *m, bool create)
{
    marks_slot *s = atomic_load_explicit(&m->mk_slots, memory_order_acquire);
    if (s || !create)
        return s;
    pthread_mutex_lock(&m->mk_init);
    s = atomic_load(&m->mk_slots);
    if (!s) {
        s = calloc(m->mk_sets * MARKS_WAYS, sizeof(*s));
        atomic_store_explicit(&m->mk_slots, s, memory_order_release);
    }
    pthread_mutex_unlock(&m->mk_init);
    return s;
}

static int64_t store_time(kura_marks *m, uint64_t cas, int64_t now)
{
    int64_t t = now;
    pthread_mutex_lock(&m->mk_ring_lock);
    size_t n = m->mk_ring_len;
    /* Notes in order: oldest at (next - len), newest at next - 1.  Binary
     * search for the last note whose cas is at or below this one. */
    size_t lo = 0, hi = n;
    while (lo < hi) {
        size_t mid = (lo + hi) / 2;
        const marks_note *nt = &m->mk_ring[(m->mk_ring_next + MARKS_RING - n + mid) % MARKS_RING];
        if (nt->mn_cas <= cas)
            lo = mid + 1;
        else
            hi = mid;
    }
    /* lo == n: stored since the last tick, this second or the one before:
     * now, as memcached's clock would mostly say. */
    if (n > 0 && lo < n)
        t = m->mk_ring[(m->mk_ring_next + MARKS_RING - n + (lo ? lo - 1 : 0)) % MARKS_RING].mn_time;
    pthread_mutex_unlock(&m->mk_ring_lock);
    return t;
}

void marks_tick(kura_marks *m, uint64_t next_cas, int64_t now)
{
    pthread_mutex_lock(&m->mk_ring_lock);
    /* allocated here rather than with the marks: an engine never ticked
     * (a test's, one per fuzz input) does without its 64 KiB; without
     * memory the tick is lost, and store times read as "now" */
    if (!m->mk_ring)
        m->mk_ring = malloc(MARKS_RING * sizeof(*m->mk_ring));
    if (m->mk_ring && now != m->mk_ring_last) {
        m->mk_ring_last = now;
        m->mk_ring[m->mk_ring_next] = (marks_note){ next_cas, now };
        m->mk_ring_next = (m->mk_ring_next + 1) % MARKS_RING;
        if (m->mk_ring_len < MARKS_RING)
            m->mk_ring_len++;
    }
    pthread_mutex_unlock(&m->mk_ring_lock);
}

/* do_: the set's lock held.  The slot of (tag, cas), or NULL. */
static marks_slot *do_find(marks_slot *set, uint64_t tag, uint64_t cas)
{
    for (int i = 0; i < MARKS_WAYS; i++)
        if (set[i].ms_tag == tag && set[i].ms_cas == cas)
            return &set[i];
    return NULL;
}

/* do_: the set's lock held.  A slot to reuse: an empty one, else the one
 * accessed longest ago, stale ones last. */
static marks_slot *do_victim(marks_slot *set)
{
    marks_slot *v = &set[0];
    for (int i = 0; i < MARKS_WAYS; i++) {
        marks_slot *s = &set[i];
        if (s->ms_tag == 0)
            return s;
        bool vs = v->ms_bits & MARK_STALE, ss = s->ms_bits & MARK_STALE;
        if ((vs && !ss) || (vs == ss && s->ms_atime < v->ms_atime))
            v = s;
    }
    return v;
}

static uint64_t tag_of(kura_marks *m, const char *key, size_t klen)
{
    uint64_t h = siphash13(&m->mk_key, key, klen);
    return h ? h : 1;
}

bool marks_access(kura_marks *m, const char *key, size_t klen, uint64_t cas, int64_t now,
                  const marks_op *op, marks_prev *prev)
{
    uint64_t tag = tag_of(m, key, klen);
    size_t set_no = (size_t)(tag >> 20) % m->mk_sets;
    bool changes = op->set || op->bump || op->take_token;   /* take_if_stale needs a slot */
    marks_slot *slots = slots_of(m, changes);
    bool won = false;

    prev->bits = 0;
    prev->atime = -1;
    if (slots) {
        pthread_mutex_t *lk = &m->mk_locks[set_no % MARKS_LOCKS];
        marks_slot *set = &slots[set_no * MARKS_WAYS];
        pthread_mutex_lock(lk);
        marks_slot *s = do_find(set, tag, cas);
        if (s) {
            prev->bits = s->ms_bits;
            prev->atime = s->ms_atime;
        }
        if (changes || (s && op->clear)) {
            if (!s) {
                s = do_victim(set);
                s->ms_tag = tag;
                s->ms_cas = cas;
                s->ms_bits = 0;
                s->ms_atime = 0;        /* filled below */
            }
            s->ms_bits = (s->ms_bits | op->set) & ~op->clear;
            bool take = op->take_token || (op->take_if_stale && (s->ms_bits & MARK_STALE));
            if (take && !(s->ms_bits & MARK_TOKEN)) {
                s->ms_bits |= MARK_TOKEN;
                won = true;
            }
            if (op->bump) {
                s->ms_bits |= MARK_FETCHED;
                s->ms_atime = (uint32_t)now;
            } else if (s->ms_atime == 0) {
                s->ms_atime = (uint32_t)(prev->atime >= 0 ? prev->atime
                                         : store_time(m, cas, now));
            }
        }
        pthread_mutex_unlock(lk);
    }
    if (prev->atime < 0)
        prev->atime = store_time(m, cas, now);
    return won;
}

void marks_set(kura_marks *m, const char *key, size_t klen, uint64_t cas, int64_t now,
               unsigned bits)
{
    uint64_t tag = tag_of(m, key, klen);
    size_t set_no = (size_t)(tag >> 20) % m->mk_sets;
    marks_slot *slots = slots_of(m, bits != 0);
    if (!slots || bits == 0)
        return;
    pthread_mutex_t *lk = &m->mk_locks[set_no % MARKS_LOCKS];
    marks_slot *set = &slots[set_no * MARKS_WAYS];
    pthread_mutex_lock(lk);
    marks_slot *s = do_find(set, tag, cas);
    if (!s) {
        s = do_victim(set);
        s->ms_tag = tag;
        s->ms_cas = cas;
    }
    s->ms_bits = bits;
    s->ms_atime = (uint32_t)now;
    pthread_mutex_unlock(lk);
}
