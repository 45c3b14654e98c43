/*
 * hashdb_cktab.c - the index's tables in a checkpoint: each stripe's used
 * slots encoded (version 8, or version 7 for the test hook) and loaded back
 * at open, stripes in parallel.
 *
 * Version 8 (docs/formats.md) sorts a stripe's slots by place (segment,
 * offset) and writes each as its tag (4 bytes, raw: hash bits do not
 * compress), the offset as a varint delta from the previous slot's (a new
 * segment flagged in its low bit, followed by the segment's delta), and
 * the record's length as a zigzag varint delta from the previous one: about
 * 8 bytes a slot where version 7 wrote 16 (docs/design.md says why).  A
 * stripe is copied under its read lock and sorted and encoded after, so a
 * writer waits for a memcpy of its slots, not for the encoding.
 *
 * At open the stripes' headers are checked first (their sizes, counts and
 * encoded lengths must add up to the file) and every table is made, then
 * up to PAR_MAX threads decode and place the slots (hd_each_stripe), each
 * stripe whole on one thread, its slots put in the order of their home
 * lines: much of a load is the kernel clearing the tables' fresh pages as
 * they are first written, which two threads do side by side when two cores
 * are free.  The threads are joined before open goes on; nothing else runs
 * meanwhile.
 */
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "kura/bytes.h"
#include "hashdb_int.h"

#define PAR_MAX 4               /* threads that work on the stripes, at most */
#define PAR_MIN_SLOTS 65536     /* below this, one thread does it all */
#define PAR_RANGE 32            /* stripes a thread takes at a time: 8 MiB of
                                   tables of 16384 slots, four huge pages */
#define PREFAULT_SLOTS 512     /* a table (8 KiB) worth a call that makes
                                   its pages present (hdx_prefault) */
#define CK8_SLOT_MAX 19         /* tag 4, offset and segment and length <= 5 each */

/* ---- writing ----------------------------------------------------------- */

static inline uint64_t place_of(const hd_slot *v)
{
    return (uint64_t)v->seg << 32 | v->off;
}

/* LSD radix sort of n slots by place, a byte at a time, skipping the bytes
 * that every slot shares (the high ones of the segment, mostly): O(n) where
 * qsort's calls cost a second at 10M slots.  The result is in a or tmp,
 * returned. */
static hd_slot *sort_by_place(hd_slot *a, hd_slot *tmp, size_t n)
{
    static const int bytes = 8;
    size_t cnt[8][256];
    memset(cnt, 0, sizeof(cnt));
    for (size_t i = 0; i < n; i++) {
        uint64_t k = place_of(&a[i]);
        for (int b = 0; b < bytes; b++)
            cnt[b][(k >> (8 * b)) & 0xff]++;
    }
    for (int b = 0; b < bytes; b++) {
        uint64_t k0 = n ? place_of(&a[0]) : 0;
        if (cnt[b][(k0 >> (8 * b)) & 0xff] == n)
            continue;                   /* every slot has this byte */
        size_t at[256], sum = 0;
        for (int d = 0; d < 256; d++) {
            at[d] = sum;
            sum += cnt[b][d];
        }
        for (size_t i = 0; i < n; i++)
            tmp[at[(place_of(&a[i]) >> (8 * b)) & 0xff]++] = a[i];
        hd_slot *t = a;
        a = tmp;
        tmp = t;
    }
    return a;
}

static bool room(hd_ckscratch *sc, size_t used)
{
    if (sc->out && used <= sc->cap)
        return true;
    size_t cap = used + used / 4 + 64;
    free(sc->slots);
    free(sc->tmp);
    free(sc->out);
    sc->slots = malloc(cap * sizeof(hd_slot));
    sc->tmp = malloc(cap * sizeof(hd_slot));
    sc->out = malloc(CK8_STRIPE_HDR + cap * CK8_SLOT_MAX);
    sc->cap = sc->slots && sc->tmp && sc->out ? cap : 0;
    return sc->cap != 0;
}

void hd_ckscratch_free(hd_ckscratch *sc)
{
    free(sc->slots);
    free(sc->tmp);
    free(sc->out);
    memset(sc, 0, sizeof(*sc));
}

size_t hd_cktab_encode(hd_stripe *s, int version, hd_ckscratch *sc, uint64_t *items)
{
    /* settled: a writer copying a large value lets readers in, and the
     * dump must not see the entry it is about to change (its record may
     * lie before P, where replay won't find it) */
    hd_lock_settled(s, false);
    if (!room(sc, s->count)) {
        pthread_rwlock_unlock(&s->lock);
        return 0;
    }
    size_t nslot = s->nslot, n = 0;
    uint64_t it = atomic_load_explicit(&s->items, memory_order_relaxed);
    uint64_t by = atomic_load_explicit(&s->bytes, memory_order_relaxed);
    for (size_t i = 0; i < nslot; i++) {
        const hd_slot *sl = &s->slot[i];
        if (!hd_slot_used(sl))
            continue;
        /* HD_FETCHED cleared: it is this run's statistic (and readers may
         * be setting it) */
        sc->slots[n].tag = __atomic_load_n(&sl->tag, __ATOMIC_RELAXED) & ~(uint32_t)HD_FETCHED;
        sc->slots[n].seg = sl->seg;
        sc->slots[n].off = sl->off;
        sc->slots[n].rlen = sl->rlen;
        n++;
    }
    pthread_rwlock_unlock(&s->lock);
    *items = it;

    unsigned char *o = sc->out;
    put64(o, nslot);
    put64(o + 8, n);
    put64(o + 16, it);
    put64(o + 24, by);
    if (version == 7) {
        /* version 7: the slots flat, little-endian (hd_slot's layout) */
        o += CK7_STRIPE_HDR;
        for (size_t i = 0; i < n; i++, o += 16) {
            put32(o, sc->slots[i].tag);
            put32(o + 4, sc->slots[i].seg);
            put32(o + 8, sc->slots[i].off);
            put32(o + 12, sc->slots[i].rlen);
        }
        return (size_t)(o - sc->out);
    }
    const hd_slot *v = sort_by_place(sc->slots, sc->tmp, n);
    unsigned char *start = o + CK8_STRIPE_HDR;
    uint32_t seg = 0, off = 0, rlen = 0;
    o = start;
    for (size_t i = 0; i < n; i++) {
        put32(o, v[i].tag);
        o += 4;
        if (v[i].seg != seg) {
            o = put_varint(o, (uint64_t)v[i].off << 1 | 1);
            o = put_varint(o, v[i].seg - seg);
            seg = v[i].seg;
        } else {
            o = put_varint(o, (uint64_t)(v[i].off - off) << 1);
        }
        off = v[i].off;
        o = put_varint(o, zigzag((int64_t)v[i].rlen - (int64_t)rlen));
        rlen = v[i].rlen;
    }
    put64(sc->out + 32, (uint64_t)(o - start));
    return (size_t)(o - sc->out);
}

/* ---- loading ----------------------------------------------------------- */

/* One stripe's part of the file, its header checked. */
typedef struct ck_part {
    const unsigned char *p;     /* its slots */
    uint64_t nslot, used, items, bytes, len;
    const unsigned char *bad;   /* after the load: the slot found bad */
    bool nomem;
} ck_part;

typedef struct ck_loader {
    int version;
    ck_part *part;
    hd_slot *buf[PAR_MAX];      /* each worker's, for version 8's decoding */
    size_t cap[PAR_MAX];        /* slots it holds */
    uint32_t *at[PAR_MAX];      /* each worker's line counts */
    size_t atcap[PAR_MAX];      /* counts it holds */
} ck_loader;

static bool load_v7(hd_stripe *s, ck_part *c)
{
    const unsigned char *p = c->p;
    /* in table order (version 7 wrote the table as it was): each put
     * lands at or just after the last one */
    for (uint64_t j = 0; j < c->used; j++, p += 16) {
        hd_slot v = { get32(p), get32(p + 4), get32(p + 8), get32(p + 12) };
        if (!hd_slot_used(&v) || v.rlen == 0 || (v.tag & HD_DEAD)) {
            c->bad = p;
            return false;
        }
        hdx_put(s, &v);
    }
    return true;
}

/* Puts n slots into s's table in the order of their home lines (a
 * counting sort by line, into tmp, as large as v; at counts, lines + 1 of
 * them): in place order (the file's) they would land at random, each
 * probe a cache miss and a mispredicted branch (twice version 7's time in
 * hdx_put at 10M keys); in line order the table is written once from
 * start to end with no probe (hdx_put_sorted). */
static void put_in_line_order(hd_stripe *s, const hd_slot *v, hd_slot *tmp, uint32_t *at,
                              size_t n)
{
    size_t lines = s->nslot / 8;
    memset(at, 0, (lines + 1) * sizeof(*at));
    for (size_t k = 0; k < n; k++)
        at[((v[k].tag >> 4) & (lines - 1)) + 1]++;
    for (size_t b = 1; b <= lines; b++)
        at[b] += at[b - 1];
    for (size_t k = 0; k < n; k++)
        tmp[at[(v[k].tag >> 4) & (lines - 1)]++] = v[k];
    hdx_put_sorted(s, tmp, n);
}

/* Decodes a stripe's slots (checking each) into out, which holds
 * c->used, and their lengths summed by segment into run (as many), *nrun
 * of them.  (A varint decoder without a branch on the length, or with no
 * bound checked far from the end, decoded no faster here: the lengths
 * follow a pattern that the branches predict.) */
static bool decode_v8(ck_part *c, hd_slot *out, struct hd_segsum *run, size_t *nrun)
{
    const unsigned char *p = c->p, *end = c->p + c->len;
    uint64_t seg = 0, off = 0, rlen = 0, sum = 0;
    size_t n = 0;
    for (uint64_t j = 0; j < c->used; j++) {
        const unsigned char *at = p;
        uint64_t a, d, z;
        hd_slot v;
        if (end - p < 6 || (v.tag = get32(p), v.tag & HD_DEAD) ||
            !(p = get_varint(p + 4, end, &a))) {
            c->bad = at;
            return false;
        }
        if (a & 1) {
            if (!(p = get_varint(p, end, &d)) || d == 0 || d >= HD_SEG_TOMB - seg) {
                c->bad = at;
                return false;
            }
            seg += d;
            off = 0;
            if (n)
                run[n - 1].bytes = sum;
            run[n++].seg = (uint32_t)seg;
            sum = 0;
        }
        int64_t r;
        if (seg == 0 || (a >> 1) > UINT32_MAX - off || !(p = get_varint(p, end, &z)) ||
            (r = (int64_t)rlen + unzigzag(z)) <= 0 || r > (int64_t)UINT32_MAX) {
            c->bad = at;
            return false;
        }
        off += a >> 1;
        rlen = (uint64_t)r;
        sum += rlen;
        v.seg = (uint32_t)seg;
        v.off = (uint32_t)off;
        v.rlen = (uint32_t)rlen;
        out[j] = v;
    }
    if (n)
        run[n - 1].bytes = sum;
    *nrun = n;
    if (p != end) {
        c->bad = p;
        return false;
    }
    return true;
}

/* Keeps a stripe's sums for finish_index (none, and its table is read
 * there, if memory is out). */
static void keep_sums(hd_cksum *cs, const struct hd_segsum *run, size_t n)
{
    if (!cs || !(cs->run = malloc((n ? n : 1) * sizeof(*run))))
        return;
    if (n)                      /* (an empty stripe's run may be NULL) */
        memcpy(cs->run, run, n * sizeof(*run));
    cs->n = (uint32_t)n;
    cs->valid = true;
}

void hd_cksum_free(hashdb *db)
{
    if (!db->cksum)
        return;
    for (int i = 0; i < HD_STRIPES; i++)
        free(db->cksum[i].run);
    free(db->cksum);
    db->cksum = NULL;
}

/* Into the worker's buffer (grown, kept for its next stripes: a buffer
 * freed per stripe went back to the kernel, each time a TLB shootdown of
 * the other loaders), then into the table; the sums kept in cs. */
static bool load_v8(hd_stripe *s, ck_part *c, ck_loader *L, int worker, hd_cksum *cs)
{
    size_t nrun = 0;
    if (c->used == 0) {         /* nothing to put (and no buffer yet: NULL + 0) */
        if (!decode_v8(c, NULL, NULL, &nrun))
            return false;
        keep_sums(cs, NULL, 0);
        return true;
    }
    /* the slots, as many for the sort, and their sums (a run per slot at
     * most, as large as a slot) */
    _Static_assert(sizeof(struct hd_segsum) <= sizeof(hd_slot), "a run fits in a slot");
    size_t need = (size_t)c->used * 3;
    if (need > L->cap[worker]) {
        free(L->buf[worker]);
        L->cap[worker] = need + need / 4;
        L->buf[worker] = malloc(L->cap[worker] * sizeof(hd_slot));
        if (!L->buf[worker]) {
            L->cap[worker] = 0;
            c->nomem = true;
            return false;
        }
    }
    size_t lines = s->nslot / 8 + 1;
    if (lines > L->atcap[worker]) {
        free(L->at[worker]);
        L->atcap[worker] = lines;
        L->at[worker] = malloc(lines * sizeof(uint32_t));
        if (!L->at[worker]) {
            L->atcap[worker] = 0;
            c->nomem = true;
            return false;
        }
    }
    hd_slot *v = L->buf[worker];
    struct hd_segsum *run = (struct hd_segsum *)(void *)(v + 2 * c->used);
    if (!decode_v8(c, v, run, &nrun))
        return false;
    keep_sums(cs, run, nrun);
    put_in_line_order(s, v, v + c->used, L->at[worker], (size_t)c->used);
    return true;
}

/* One stripe's slots into its table (made by hd_cktab_load). */
static void load_stripe(hashdb *db, int i, int worker, void *arg)
{
    ck_loader *L = arg;
    hd_stripe *s = &db->stripes[i];
    ck_part *c = &L->part[i];
    hd_cksum *cs = db->cksum ? &db->cksum[i] : NULL;
    /* a table at least a quarter full has slots on every page (256 a
     * page): all of it would fault in as it fills */
    if (!c->nomem && c->nslot >= PREFAULT_SLOTS && c->used >= c->nslot / 4)
        hdx_prefault(s);
    if (!c->nomem && (L->version == 7 ? load_v7(s, c) : load_v8(s, c, L, worker, cs))) {
        atomic_store_explicit(&s->items, c->items, memory_order_relaxed);
        atomic_store_explicit(&s->bytes, c->bytes, memory_order_relaxed);
    }
}

/* ---- stripes in parallel ------------------------------------------------ */

typedef struct par_run {
    hashdb *db;
    hd_stripe_fn *fn;
    void *arg;
    _Atomic int next;           /* the first stripe of the next range to take */
    _Atomic int workers;        /* numbers handed out */
} par_run;

static void *par_main(void *arg)
{
    par_run *R = arg;
    int i, worker = atomic_fetch_add_explicit(&R->workers, 1, memory_order_relaxed);
    while ((i = atomic_fetch_add_explicit(&R->next, PAR_RANGE, memory_order_relaxed)) <
           HD_STRIPES)
        for (int j = i; j < i + PAR_RANGE && j < HD_STRIPES; j++)
            R->fn(R->db, j, worker, R->arg);
    return NULL;
}

static int par_threads(void)
{
    long n = sysconf(_SC_NPROCESSORS_ONLN);
    return n < 1 ? 1 : n > PAR_MAX ? PAR_MAX : (int)n;
}

void hd_each_stripe(hashdb *db, uint64_t slots, hd_stripe_fn *fn, void *arg)
{
    par_run R = { .db = db, .fn = fn, .arg = arg };
    pthread_t th[PAR_MAX];
    int n = slots < PAR_MIN_SLOTS ? 1 : par_threads(), started = 0;
    while (started < n - 1 && pthread_create(&th[started], NULL, par_main, &R) == 0)
        started++;
    par_main(&R);               /* this thread too; alone if no create succeeded */
    for (int i = 0; i < started; i++)
        pthread_join(th[i], NULL);
}

int hd_cktab_load(hashdb *db, int version, const unsigned char *map, const unsigned char *p,
                  const unsigned char *end, uint64_t count, char *err, size_t errlen)
{
    size_t hdr = version == 7 ? CK7_STRIPE_HDR : CK8_STRIPE_HDR;
    uint64_t items = 0, slots = 0;
    ck_part *part = calloc(HD_STRIPES, sizeof(*part));
    if (!part)
        return KURA_ENOMEM;
    /* the headers first: each stripe's place in the file */
    for (int i = 0; i < HD_STRIPES; i++) {
        ck_part *c = &part[i];
        size_t left = (size_t)(end - p);
        if (left >= hdr) {
            c->nslot = get64(p);
            c->used = get64(p + 8);
            c->items = get64(p + 16);
            c->bytes = get64(p + 24);
            c->len = version == 7 ? c->used * 16 : get64(p + 32);   /* used: see below */
        }
        if (left < hdr || c->nslot < 8 || c->nslot > ((uint64_t)1 << 31) ||
            (c->nslot & (c->nslot - 1)) || c->used > c->nslot || c->used * 4 > c->nslot * 3 ||
            c->len > left - hdr || c->len < c->used * (version == 7 ? 16 : 6)) {
            snprintf(err, errlen, "%s/checkpoint: bad table of stripe %d at offset %zu",
                     db->dir, i, (size_t)(p - map));
            free(part);
            return KURA_ECORRUPT;
        }
        c->p = p + hdr;
        p = c->p + c->len;
        items += c->items;
        slots += c->used;
    }
    if (p != end || items != count) {
        snprintf(err, errlen, "%s/checkpoint: %llu entries and %zu bytes left, its trailer "
                 "says %llu", db->dir, (unsigned long long)items, (size_t)(end - p),
                 (unsigned long long)count);
        free(part);
        return KURA_ECORRUPT;
    }

    /* every table made here, in stripe order, so that a range of stripes
     * has its tables together in memory (a thread filling them faults in
     * huge pages no other thread touches); their pages are cleared by the
     * kernel as the threads first write them */
    for (int i = 0; i < HD_STRIPES; i++)
        part[i].nomem = !hdx_load(&db->stripes[i], (size_t)part[i].nslot);
    ck_loader L = { .version = version, .part = part };
    if (version == 8)           /* none: finish_index reads every table */
        db->cksum = calloc(HD_STRIPES, sizeof(*db->cksum));
    hd_each_stripe(db, slots, load_stripe, &L);
    for (int w = 0; w < PAR_MAX; w++) {
        free(L.buf[w]);
        free(L.at[w]);
    }

    int rc = KURA_OK;
    for (int i = 0; i < HD_STRIPES && !rc; i++) {
        if (part[i].nomem) {
            rc = KURA_ENOMEM;
        } else if (part[i].bad) {
            snprintf(err, errlen, "%s/checkpoint: bad slot at offset %zu", db->dir,
                     (size_t)(part[i].bad - map));
            rc = KURA_ECORRUPT;
        }
    }
    free(part);
    return rc;
}
