/*
 * hashdb_index.c - the hash file's in-memory index: key -> newest record.
 *
 * HD_STRIPES independent open-addressed hash tables of 16-byte slots
 * (hd_slot and hd_stripe in hashdb_int.h say how a table is laid out), each
 * behind its own rwlock.  A key's stripe is chosen by the low bits of its
 * 64-bit hash (SipHash-1-3 under the database's random key, so that clients
 * cannot choose keys that collide), its line of slots and its tag by bits
 * 20..47.  A slot holds no key: a tag that matches is checked against the
 * record it names, read through the log's read mapping.
 * A table doubles when its used slots (entries and tombstones) would pass
 * 3/4, or is rebuilt at its size when tombstones are most of them, under
 * its own write lock: growth is online and touches 1/HD_STRIPES of the keys
 * at a time (their tags, not their records), so `bnum` is only a starting
 * size, and without it a new store starts at 8 slots a stripe.  Every function here
 * expects the caller to hold the stripe's lock (a write lock for the ones
 * that change it).
 */
#include <stddef.h>
#include <stdint.h>
#include <stdlib.h>
#include <sys/mman.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include "hashdb_int.h"
#include "kura/storedebug.h"
#include "kura/testhooks.h"
#include "kura/siphash.h"

/* ---- the arena ---------------------------------------------------- */

#define CHUNK (32u << 20)
#define HUGE_PAGE ((size_t)2 << 20)

/* Huge pages for the index (it is read at random; with 4 KiB pages nearly
 * every lookup also misses the TLB: at 1M keys the tables are 32 MiB, 8192
 * pages, and that walk cost a third of a lookup), but not at a page fault
 * on a request or a restart's load: taking a huge page there may mean
 * compacting memory, or, on a virtual machine whose host took freed memory
 * back, faulting 512 pages in on the host (free page reporting hands the
 * host whole 2 MiB blocks, just what a huge page takes; small pages come
 * mostly from memory the host still backs).  On this machine, a 1M-key
 * load right after another process freed its memory ran 0.65 s with huge
 * pages at the fault against 0.46 s without, and a 10M-key open cleared
 * its 256 MiB of tables in 35 to 600 ms of kernel time with them against a
 * steady 130-250 ms without (its CPU over 20 alternated opens: median 330
 * ms, 161-572, against 283, 255-328).  So:
 *   - the tables hdx_init makes (sized for bnum, if given) are advised for huge pages
 *     at once, and, when no checkpoint's tables replace them, faulted in
 *     by the end of the open (hdx_populate), not by the first requests:
 *     1M 8-byte records written then read (kura-enginebench) took 0.93 s
 *     of CPU on 4 KiB pages, 0.77 s on huge ones (docs/benchmarks.md);
 *   - the tables a checkpoint loads are faulted in small pages and
 *     advised at the end of the open (hdx_advise_huge(db, true));
 *   - a chunk made while the store serves (growth) is advised once it is
 *     HUGE_AFTER seconds old (by the background thread);
 * and the kernel's khugepaged collapses the small pages of an advised
 * chunk in its own time.  Tables of less than HUGE_MIN in all (a new
 * store's, which start at 8 slots a stripe: 128 KiB) are advised none of
 * this until they have grown past it.  Chunks are aligned to 2 MiB so that every page
 * of one can be huge. */
#define HUGE_AFTER 10.0
/* Tables smaller than this in all are not advised (hdx_advise_huge). */
#define HUGE_MIN ((uint64_t)8 << 20)

struct hd_chunk {
    struct hd_chunk *next;
    size_t len;
    double born;                /* monotonic seconds */
    bool advised;
};

/* len bytes of zeroed anonymous memory at a 2 MiB boundary, or
 * MAP_FAILED: mapped 2 MiB larger, the slack on either side unmapped
 * (munmap(p, len) later frees the rest). */
static void *map_aligned(size_t len)
{
    size_t keep = (len + 4095) & ~(size_t)4095, span = keep + HUGE_PAGE;
    unsigned char *m = mmap(NULL, span, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS,
                            -1, 0);
    if (m == MAP_FAILED)
        return m;
    size_t head = (HUGE_PAGE - ((uintptr_t)m & (HUGE_PAGE - 1))) & (HUGE_PAGE - 1);
    if (head)
        munmap(m, head);
    if (span - head - keep)
        munmap(m + head + keep, span - head - keep);
    return m + head;
}

static double mono_now(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + (double)ts.tv_nsec / 1e9;
}

static int log2_of(size_t n)
{
    int l = 0;
    while (((size_t)1 << l) < n)
        l++;
    return l;
}

/* n bytes, 64-byte aligned, zeroed.  Power-of-two sizes are reused after
 * arena_free(). */
static void *arena_alloc(hd_arena *a, size_t n)
{
    void *p = NULL;
    n = (n + 63) & ~(size_t)63;
    pthread_mutex_lock(&a->mu);
    int l = log2_of(n);
    if (((size_t)1 << l) == n && l < 48 && a->free_pow2[l]) {
        p = a->free_pow2[l];
        a->free_pow2[l] = *(void **)p;
        pthread_mutex_unlock(&a->mu);
        memset(p, 0, n);
        return p;
    }
    if (a->left < n) {
        size_t len = n + 64 > CHUNK ? n + 64 : CHUNK;
        void *m = map_aligned(len);
        if (m == MAP_FAILED) {
            pthread_mutex_unlock(&a->mu);
            return NULL;
        }
        /* small pages until hdx_advise_huge says otherwise, also where
         * transparent huge pages are "always": there the first touch of a
         * new store's 128 KiB of tables would take a 2 MiB page, and a
         * growing table's a huge page fault under its stripe lock */
        (void)madvise(m, len, MADV_NOHUGEPAGE);
        struct hd_chunk *c = m;
        c->next = a->chunks;
        c->len = len;
        c->born = mono_now();
        c->advised = false;
        a->chunks = c;
        a->cur = (unsigned char *)m + 64;
        a->left = len - 64;
    }
    p = a->cur;
    a->cur += n;
    a->left -= n;
    pthread_mutex_unlock(&a->mu);
    return p;                       /* fresh anonymous memory is zero */
}

static void arena_free(hd_arena *a, void *p, size_t n)
{
    n = (n + 63) & ~(size_t)63;
    int l = log2_of(n);
    if (((size_t)1 << l) != n || l >= 48)
        return;                     /* not reusable: stays until close */
    pthread_mutex_lock(&a->mu);
    *(void **)p = a->free_pow2[l];
    a->free_pow2[l] = p;
    pthread_mutex_unlock(&a->mu);
}

void hdx_populate(hashdb *db)
{
#ifdef MADV_POPULATE_WRITE
    if (db->arena.loaded)
        return;
    for (int i = 0; i < HD_STRIPES; i++) {
        const hd_stripe *s = &db->stripes[i];
        uintptr_t from = (uintptr_t)s->slot & ~(uintptr_t)4095;
        uintptr_t to = ((uintptr_t)(s->slot + s->nslot) + 4095) & ~(uintptr_t)4095;
        if (madvise((void *)from, to - from, MADV_POPULATE_WRITE) != 0)
            return;     /* not supported, or memory is short: leave it */
    }
#else
    (void)db;
#endif
}

void hdx_advise_huge(hashdb *db, bool all)
{
    hd_arena *a = &db->arena;
    double now = mono_now();
    /* small tables stay in small pages: one huge page would be most of
     * the index of a new store (its 128 KiB), and tables this small are
     * within the TLB's reach anyway; the background thread advises their
     * chunks once they have grown */
    if (atomic_load_explicit(&a->nslots, memory_order_relaxed) * sizeof(hd_slot) < HUGE_MIN)
        return;
    pthread_mutex_lock(&a->mu);
    for (struct hd_chunk *c = a->chunks; c; c = c->next)
        if (!c->advised && (all || now - c->born >= HUGE_AFTER)) {
            (void)madvise(c, c->len, MADV_HUGEPAGE);
            c->advised = true;
        }
    pthread_mutex_unlock(&a->mu);
}

static void arena_destroy(hd_arena *a)
{
    while (a->chunks) {
        struct hd_chunk *n = a->chunks->next;
        munmap(a->chunks, a->chunks->len);
        a->chunks = n;
    }
    pthread_mutex_destroy(&a->mu);
}

/* ---- the hash ------------------------------------------------------ */

/* The hash key.  Keyed, so that clients choosing keys cannot pile them on
 * one probe sequence (include/kura/siphash.h).  The key is the database's,
 * not the process's: drawn at random when the database is created (or when
 * no checkpoint holds one: an older format, a rebuild) and kept in the
 * checkpoint, whose tables are laid out by it: a checkpoint is loaded by
 * copying them, which only the same key makes right.  The key is as secret
 * as the checkpoint file (0600), which a remote client never sees. */

static void publish(hd_stripe *s, hd_slot *slot, size_t nslot)
{
    /* the total for stats, changed by the difference (mod 2^64: a table
     * never shrinks today, but the sum stays right if one does) */
    atomic_fetch_add_explicit(&s->arena->nslots, (uint64_t)nslot - (uint64_t)s->nslot,
                              memory_order_relaxed);
    s->slot = slot;
    s->nslot = nslot;
    /* atomic stores for hdx_prefetch's lock-free peek */
    __atomic_store_n(&s->dir->slot, slot, __ATOMIC_RELAXED);
    __atomic_store_n(&s->dir->nslot, nslot, __ATOMIC_RELAXED);
}

int hdx_init(hashdb *db, uint64_t bnum)
{
    /* bnum records fit without growing: at most 3/4 of the slots used;
     * bnum 0 (not given): 8 slots a stripe, 128 KiB in all, which grow as
     * keys come */
    size_t per = 8;
    while (per * HD_STRIPES * 3 / 4 < bnum && per < ((size_t)1 << 30))
        per <<= 1;
    int rc = siphash_random_key(&db->arena.key);   /* a checkpoint may replace it */
    if (rc != KURA_OK)
        return rc;
    pthread_mutex_init(&db->arena.mu, NULL);
    _Static_assert(sizeof(hd_stripe) % 64 == 0, "stripes are line-aligned");
    _Static_assert(offsetof(hd_stripe, bytes) + sizeof(uint64_t) <= 128,
                   "what every operation touches is in a stripe's first two lines");
    _Static_assert(sizeof(hd_slot) == 16, "a slot is 16 bytes (docs/formats.md)");
    db->stripes = aligned_alloc(64, HD_STRIPES * sizeof(hd_stripe));
    db->bdir = aligned_alloc(64, HD_STRIPES * sizeof(hd_bdir));
    if (!db->stripes || !db->bdir)
        return KURA_ENOMEM;
    memset(db->stripes, 0, HD_STRIPES * sizeof(hd_stripe));
    memset(db->bdir, 0, HD_STRIPES * sizeof(hd_bdir));
    for (int i = 0; i < HD_STRIPES; i++) {
        hd_stripe *s = &db->stripes[i];
        pthread_rwlock_init(&s->lock, NULL);
        pthread_mutex_init(&s->wlock, NULL);
        s->arena = &db->arena;
        s->dir = &db->bdir[i];
        hd_slot *slot = arena_alloc(&db->arena, per * sizeof(hd_slot));
        if (!slot)
            return KURA_ENOMEM;   /* hdx_free() releases the rest */
        publish(s, slot, per);
    }
    hdx_advise_huge(db, true);     /* the tables sized for bnum (see the arena) */
    return KURA_OK;
}

void hdx_free(hashdb *db)
{
    if (!db->stripes)
        return;
    for (int i = 0; i < HD_STRIPES; i++) {
        pthread_rwlock_destroy(&db->stripes[i].lock);
        pthread_mutex_destroy(&db->stripes[i].wlock);
    }
    free(db->stripes);
    db->stripes = NULL;
    free(db->bdir);
    db->bdir = NULL;
    arena_destroy(&db->arena);
}

uint64_t hdx_items(hashdb *db, uint64_t *bytes)
{
    uint64_t n = 0, b = 0;
    for (int i = 0; i < HD_STRIPES; i++) {
        n += atomic_load_explicit(&db->stripes[i].items, memory_order_relaxed);
        b += atomic_load_explicit(&db->stripes[i].bytes, memory_order_relaxed);
    }
    if (bytes)
        *bytes = b;
    return n;
}

uint64_t hdx_slots(hashdb *db)
{
    return atomic_load_explicit(&db->arena.nslots, memory_order_relaxed);
}

/* Key equality without a call: keys are short and the tags already
 * matched, so this nearly always succeeds. */
static inline bool key_eq(const char *a, const char *b, size_t n)
{
    while (n >= 8) {
        uint64_t x, y;
        memcpy(&x, a, 8);
        memcpy(&y, b, 8);
        if (x != y)
            return false;
        a += 8;
        b += 8;
        n -= 8;
    }
    while (n--)
        if (*a++ != *b++)
            return false;
    return true;
}

/* The record sl names: its bytes (through the read mapping, or this
 * thread's read buffer) with the header decoded into e.  No checksum: a
 * read of the value checks it (hd_read_record). */
static int decode_at(hashdb *db, hd_slot *sl, hd_ent *e, const unsigned char **pp)
{
    const unsigned char *p;
    uint32_t version;
    hd_rec r;
    unsigned marks = hd_slot_marks(sl);
    e->sl = sl;
    e->seg = sl->seg;
    e->off = sl->off;
    e->marks = (uint8_t)(marks & (HD_FETCHED | HD_FLAGGED | HD_ZCOMP));
    e->dead = marks & HD_DEAD ? 1 : 0;
    int rc = sl_read(&db->log, sl->seg, sl->off, sl->rlen, &p, &version);
    if (rc)
        return rc;
    if (hd_rec_decode(p, sl->rlen, version, &r) != 0 ||
        hd_rec_size(r.hlen, r.klen, r.vlen) != sl->rlen)
        return KURA_ECORRUPT;
    e->cas = r.cas;
    e->exptime = r.exptime;
    e->seq = r.seq;
    e->vlen = r.vlen;
    e->rawlen = r.rawlen;
    e->flags = r.flags;
    e->hlen = r.hlen;
    e->klen = r.klen;
    *pp = p;
    return KURA_OK;
}

int hdx_decode(hashdb *db, hd_slot *sl, hd_ent *e)
{
    const unsigned char *p;
    int rc = decode_at(db, sl, e, &p);
    if (rc)
        return rc;
    memcpy(e->kbuf, p + e->hlen, e->klen);
    e->kbuf[e->klen] = 0;
    e->key = e->kbuf;
    return KURA_OK;
}

hd_ent *hdx_find(hashdb *db, hd_stripe *s, uint64_t h, const char *key, size_t klen, hd_ent *e)
{
    size_t mask = s->nslot - 1, i = hd_slot_home(h, s->nslot);
    uint32_t tag = hd_tag_of(h);
    int bad = 0;
    for (;; i = (i + 1) & mask) {
        hd_slot *sl = &s->slot[i];
        if (sl->seg == 0) {
            e->unreadable = bad;
            return NULL;
        }
        if ((__atomic_load_n(&sl->tag, __ATOMIC_RELAXED) & ~HD_TAG_MARKS) != tag ||
            sl->seg == HD_SEG_TOMB)
            continue;
        const unsigned char *p;
        int rc = decode_at(db, sl, e, &p);
        if (rc == KURA_OK && e->klen == klen && key_eq((const char *)p + e->hlen, key, klen)) {
            e->key = key;
            e->unreadable = 0;
            return e;
        }
        if (rc && !bad)
            bad = rc;
    }
}

int hdx_at(hashdb *db, hd_stripe *s, size_t i, hd_ent *e)
{
    hd_slot *sl = &s->slot[i];
    if (!hd_slot_used(sl))
        return KURA_NOTFOUND;
    return hdx_decode(db, sl, e);
}

/* The first free (empty or tombstone) slot of a probe from home; one
 * exists. */
static size_t free_slot(const hd_slot *slot, size_t nslot, size_t home)
{
    size_t mask = nslot - 1, i = home;
    while (hd_slot_used(&slot[i]))
        i = (i + 1) & mask;
    return i;
}

/* Makes the pages of a table of n slots present: one call instead of a
 * page fault per 4 KiB (64 per table of 16384 slots; 66,000 at 10M keys,
 * about 30 ms of kernel time of 200); the pages at its ends may be a
 * neighbour's too, which is harmless (it only makes them present).  Where
 * the kernel lacks it (before 5.14), the table's pages fault in as it
 * fills. */
static void populate(hd_slot *slot, size_t n)
{
#ifdef MADV_POPULATE_WRITE
    uintptr_t pg = (uintptr_t)sysconf(_SC_PAGESIZE), a = (uintptr_t)slot & ~(pg - 1),
              b = ((uintptr_t)(slot + n) + pg - 1) & ~(pg - 1);
    (void)madvise((void *)a, b - a, MADV_POPULATE_WRITE);
#else
    (void)slot;
    (void)n;
#endif
}

/* Rebuilds the table with nn slots, dropping the tombstones; O(slots of
 * this stripe), from the tags alone.  False when memory is out (the table
 * stays as it was). */
static bool rebuild(hd_stripe *s, size_t nn)
{
    hd_slot *ns = arena_alloc(s->arena, nn * sizeof(hd_slot));
    if (!ns)
        return false;
    /* its pages present in one call: filled slot by slot, a fresh table
     * took two faults a page (a probe's read maps the zero page, the
     * store copies it), 42,000 faults in a load of 1M keys into a new
     * store against 2,300 with the tables made at the open */
    populate(ns, nn);
    for (size_t i = 0; i < s->nslot; i++) {
        const hd_slot *sl = &s->slot[i];
        if (hd_slot_used(sl))
            ns[free_slot(ns, nn, hd_tag_home(sl->tag, nn))] = *sl;
    }
    arena_free(s->arena, s->slot, s->nslot * sizeof(hd_slot));
    publish(s, ns, nn);
    s->tombs = 0;
    return true;
}

/* Room for one more entry: used slots stay at most 3/4 (a missing key's
 * probe then ends within its line nearly always).  Doubles, or rebuilds at
 * the same size when removals left tombstones as most of the used slots. */
bool hdx_room(hd_stripe *s)
{
    if ((s->count + s->tombs + 1) * 4 <= s->nslot * 3)
        return true;
    size_t nn = s->nslot;
    if ((s->count + 1) * 8 > s->nslot * 3)
        nn *= 2;
    if (nn <= ((size_t)1 << 31) && rebuild(s, nn))
        return true;
    /* out of memory: go on filling while an empty slot remains */
    return s->count + s->tombs + 2 < s->nslot;
}

/* Room for count keys at most 3/4 full: what a conversion asks, sizing
 * once instead of doubling on the way. */
void hdx_reserve(hashdb *db, uint64_t count)
{
    uint64_t per = count / HD_STRIPES + 1;
    for (int i = 0; i < HD_STRIPES; i++) {
        hd_stripe *s = &db->stripes[i];
        size_t nn = s->nslot;
        while (nn * 3 / 4 < per * 5 / 4 && nn < ((size_t)1 << 31))
            nn <<= 1;
        if (nn != s->nslot)
            (void)rebuild(s, nn);
    }
}

bool hdx_load(hd_stripe *s, size_t nslot)
{
    /* the table open made, if it has the size */
    if (nslot != s->nslot) {
        hd_slot *ns = arena_alloc(s->arena, nslot * sizeof(hd_slot));
        if (!ns)
            return false;
        /* the table hdx_init made, never written: not put on the free
         * list, which would write (and fault in) a page of each of them,
         * for a list that a store of this size seldom takes from; it
         * stays untouched address space until close */
        publish(s, ns, nslot);
    }
    s->count = s->tombs = 0;
    s->arena->loaded = true;
    return true;
}

void hdx_prefault(hd_stripe *s)
{
    populate(s->slot, s->nslot);
}

void hdx_put(hd_stripe *s, const hd_slot *v)
{
    s->slot[free_slot(s->slot, s->nslot, hd_tag_home(v->tag, s->nslot))] = *v;
    s->count++;
}

void hdx_put_sorted(hd_stripe *s, const hd_slot *v, size_t n)
{
    /* each lands at its home or just after the slot put before it, which
     * is where free_slot would find room: the slots between hold the
     * earlier ones (homes at or before this one's), so a probe from its
     * home passes no empty slot.  No probe, no read of the table: it is
     * written once, in order.  The few pushed past the end wrap to the
     * start through free_slot. */
    size_t nslot = s->nslot, pos = 0, k = 0;
    for (; k < n; k++) {
        size_t home = hd_tag_home(v[k].tag, nslot);
        if (home > pos)
            pos = home;
        if (pos == nslot)
            break;
        s->slot[pos++] = v[k];
    }
    for (; k < n; k++)
        s->slot[free_slot(s->slot, nslot, hd_tag_home(v[k].tag, nslot))] = v[k];
    s->count += n;
}

hd_slot *hdx_insert(hd_stripe *s, uint64_t h)
{
    size_t i = free_slot(s->slot, s->nslot, hd_slot_home(h, s->nslot));
    hd_slot *sl = &s->slot[i];
    if (sl->seg == HD_SEG_TOMB)
        s->tombs--;
    sl->tag = hd_tag_of(h);
    sl->seg = HD_SEG_TOMB;      /* used once the caller sets it */
    s->count++;
    return sl;
}

void hdx_remove(hd_stripe *s, hd_slot *sl)
{
    size_t mask = s->nslot - 1, i = (size_t)(sl - s->slot);
    /* a slot before an empty one can be emptied: no probe passes it;
     * otherwise it must stay a tombstone */
    if (s->slot[(i + 1) & mask].seg == 0) {
        memset(sl, 0, sizeof(*sl));
    } else {
        memset(sl, 0, sizeof(*sl));
        sl->seg = HD_SEG_TOMB;
        s->tombs++;
    }
    s->count--;
}


/* ---- for tests (storedebug.h; test builds only) ---------------------- */

#ifdef KURA_TEST_HOOKS
uint64_t hashdb_debug_hash(kura_store *store, const char *key, size_t klen)
{
    return hd_hash((hashdb *)store, key, klen);
}

/* storedebug.h: the longest probe. */
size_t hashdb_debug_probe_max(kura_store *store)
{
    hashdb *db = (hashdb *)store;
    size_t max = 0;
    for (int k = 0; k < HD_STRIPES; k++) {
        hd_stripe *s = &db->stripes[k];
        pthread_rwlock_rdlock(&s->lock);
        for (size_t i = 0; i < s->nslot; i++) {
            const hd_slot *sl = &s->slot[i];
            if (!hd_slot_used(sl))
                continue;
            size_t home = hd_tag_home(sl->tag, s->nslot);
            size_t d = (i - home) & (s->nslot - 1);
            if (d > max)
                max = d;
        }
        pthread_rwlock_unlock(&s->lock);
    }
    return max;
}
#endif
