/*
 * seg_warm.c - the warm restart: the segments in a mapped file (-e FILE,
 * memcached's memory file), a clean-shutdown header written at a graceful
 * close, and the index rebuilt from the segments at the next open.
 *
 * Why this shape.  The items are already in the segments, which hold
 * nothing but offsets, so a file mapped in their place (on tmpfs, or a
 * disk) keeps them across a restart; what is in memory only (the segment
 * table: chains, fill, cas bases, expiries; the engine's cas reservation
 * and flush watermark, kura_store_state) is written after the segments at
 * a graceful close, with a header that says the file is whole:
 *
 *   [0, 4096)            header: magic, version, the settings that shape
 *                        the file (segment size and count, limit), the
 *                        item count, the engine's state, the table's and
 *                        its own CRC-32C
 *   [4096, +region)      the segments, as the cache wrote them
 *   [.., +table)         one warm_seg a segment
 *
 * The header is cleared (and synced) as soon as an open has read it, so a
 * crash after the restart can never load the same file twice; a file
 * without one (a crash, a first start), with other settings, a bad
 * checksum or another version (WARM_VERSION: the item layout) is used
 * empty, and the log says why in one line.  The rebuild
 * reads every item once (hashes its key into its stripe's index, sized
 * from the header's count first): items marked deleted are skipped, since
 * every replacement, delete, eviction and merge marks the version it drops.
 *
 * One cache a file: the file is locked (flock); a second cache opened on
 * it in the same process (a replica's full copy opens its new store beside
 * the old) runs in memory, and says so, and the first is then superseded:
 * its close writes no header, since the new store has replaced what it
 * holds (the next start is empty, and says why).
 */
#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/file.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

#include "kura/crc32c.h"
#include "seg_int.h"

#define WARM_MAGIC 0x434745534152554bull       /* "KURASEGC" */
/* 2: an item's key length is kb then, past 253 bytes, 2 more (seg_item.c);
 * a file of version 1 is used empty. */
#define WARM_VERSION 2
#define WARM_HDR 4096


typedef struct warm_seg {
    uint8_t state;
    uint8_t pad;
    uint16_t ttl;
    uint32_t wpos;
    uint32_t max_exp, pad2;
    uint64_t cas_base, max_cas;
    int64_t created;
} warm_seg;

/* The caches of this process that hold a memory file, to mark superseded. */
#define WARM_OPEN_MAX 16
static pthread_mutex_t warm_open_lock = PTHREAD_MUTEX_INITIALIZER;
static segcache *warm_open[WARM_OPEN_MAX];

static void warm_register(segcache *c)
{
    pthread_mutex_lock(&warm_open_lock);
    for (int i = 0; i < WARM_OPEN_MAX; i++) {
        if (!warm_open[i]) {
            warm_open[i] = c;
            break;
        }
    }
    pthread_mutex_unlock(&warm_open_lock);
}

/* The cache holding the file fd is open on (if one of this process does)
 * will write no header at its close. */
static void warm_supersede(int fd)
{
    struct stat a, b;
    if (fstat(fd, &a) != 0)
        return;
    pthread_mutex_lock(&warm_open_lock);
    for (int i = 0; i < WARM_OPEN_MAX; i++) {
        segcache *c = warm_open[i];
        if (c && fstat(c->sc_warm_fd, &b) == 0 && a.st_dev == b.st_dev && a.st_ino == b.st_ino)
            atomic_store(&c->sc_warm_superseded, true);
    }
    pthread_mutex_unlock(&warm_open_lock);
}

/* At close: out of the list. */
void seg_warm_forget(segcache *c)
{
    pthread_mutex_lock(&warm_open_lock);
    for (int i = 0; i < WARM_OPEN_MAX; i++)
        if (warm_open[i] == c)
            warm_open[i] = NULL;
    pthread_mutex_unlock(&warm_open_lock);
}

static void warm_log(const kura_store_config *cfg, const char *line)
{
    if (cfg && cfg->log)
        cfg->log(KURA_LOG_WARNING, line);
    else
        fprintf(stderr, "%s\n", line);
}

static size_t warm_table_bytes(uint32_t nsegs)
{
    return (size_t)nsegs * sizeof(warm_seg);
}

static uint32_t hdr_crc(const warm_hdr *h)
{
    return crc32c_update(0, h, offsetof(warm_hdr, hdr_crc));
}

/* Reads and checks the header; a reason in why (and false) if the file is
 * not a clean one of these settings. */
static bool warm_check(int fd, const seg_pool *p, uint64_t limit, warm_hdr *h,
                       char *why, size_t whylen)
{
    ssize_t n = pread(fd, h, sizeof(*h), 0);
    if (n == 0 || (n == (ssize_t)sizeof(*h) && h->magic == 0)) {
        snprintf(why, whylen, "no clean-shutdown header (a first start, or a crash)");
        return false;
    }
    if (n != (ssize_t)sizeof(*h) || h->magic != WARM_MAGIC) {
        snprintf(why, whylen, "not a memory file of this version");
        return false;
    }
    if (h->version != WARM_VERSION) {
        snprintf(why, whylen, "a memory file of version %u, this build's item layout is "
                 "version %u", h->version, WARM_VERSION);
        return false;
    }
    if (h->hdr_crc != hdr_crc(h)) {
        snprintf(why, whylen, "its header fails its checksum");
        return false;
    }
    if (h->seg_size != p->sp_seg_size || h->nsegs != p->sp_nsegs || h->limit != limit) {
        snprintf(why, whylen, "settings differ (limit %llu, segments %u of %u bytes; "
                 "now %llu, %u of %u)", (unsigned long long)h->limit, h->nsegs, h->seg_size,
                 (unsigned long long)limit, p->sp_nsegs, p->sp_seg_size);
        return false;
    }
    return true;
}

/* Maps the pool's region from the file at path (created if need be) and
 * says in *warm whether it holds a clean shutdown's segments (then *h is
 * its header).  On an error the pool keeps its anonymous region. */
int seg_warm_map(segcache *c, const char *path, const kura_store_config *cfg, bool *warm,
                 warm_hdr *h)
{
    seg_pool *p = &c->sc_pool;
    char why[256], line[512];
    *warm = false;
    int fd = open(path, O_RDWR | O_CREAT | O_CLOEXEC, 0600);
    if (fd < 0) {
        snprintf(line, sizeof(line), "memory file %s: %s: the cache runs in memory",
                 path, strerror(errno));
        warm_log(cfg, line);
        return KURA_OK;
    }
    if (flock(fd, LOCK_EX | LOCK_NB) != 0) {
        snprintf(line, sizeof(line), "memory file %s: in use by another cache: this one "
                 "runs in memory%s", path, " (and the other one's items will not be kept)");
        warm_log(cfg, line);
        warm_supersede(fd);
        close(fd);
        return KURA_OK;
    }
    *warm = warm_check(fd, p, c->sc_limit, h, why, sizeof(why));
    size_t total = WARM_HDR + p->sp_region + warm_table_bytes(p->sp_nsegs);
    static const warm_hdr zero;
    if (pwrite(fd, &zero, sizeof(zero), 0) != (ssize_t)sizeof(zero) || fdatasync(fd) != 0 ||
        ftruncate(fd, (off_t)total) != 0) {
        snprintf(line, sizeof(line), "memory file %s: %s: the cache runs in memory",
                 path, strerror(errno));
        warm_log(cfg, line);
        close(fd);
        *warm = false;
        return KURA_OK;
    }
    void *m = mmap(NULL, p->sp_region, PROT_READ | PROT_WRITE, MAP_SHARED, fd, WARM_HDR);
    if (m == MAP_FAILED) {
        snprintf(line, sizeof(line), "memory file %s: cannot map it: the cache runs in memory",
                 path);
        warm_log(cfg, line);
        close(fd);
        *warm = false;
        return KURA_OK;
    }
    munmap(p->sp_base, p->sp_region);
    p->sp_base = m;
    c->sc_warm_fd = fd;
    warm_register(c);
    if (!*warm) {
        snprintf(line, sizeof(line), "memory file %s: %s: the cache starts empty", path, why);
        warm_log(cfg, line);
    }
    return KURA_OK;
}

static int warm_seg_cmp(const void *a, const void *b, void *arg)
{
    const seg *segs = arg;
    const seg *x = &segs[*(const uint32_t *)a], *y = &segs[*(const uint32_t *)b];
    if (x->sg_ttl != y->sg_ttl)
        return x->sg_ttl < y->sg_ttl ? -1 : 1;
    if (x->sg_created != y->sg_created)
        return x->sg_created < y->sg_created ? -1 : 1;
    return *(const uint32_t *)a < *(const uint32_t *)b ? -1 : 1;
}

/* Puts the table's segments back in their chains, oldest first, and the
 * others on the free list; returns how many are in use, or -1. */
static long warm_segments(segcache *c, const warm_seg *t)
{
    seg_pool *p = &c->sc_pool;
    uint32_t *ids = malloc(((size_t)p->sp_nsegs + 1) * sizeof(*ids)), n = 0;
    if (!ids)
        return -1;
    for (uint32_t i = 0; i < p->sp_nsegs; i++) {
        seg *s = &p->sp_segs[i];
        if ((t[i].state != SEG_ACTIVE && t[i].state != SEG_SEALED) ||
            t[i].wpos > p->sp_seg_size || t[i].ttl >= SEG_TTL_BUCKETS)
            continue;
        s->sg_state = SEG_SEALED;
        s->sg_ttl = t[i].ttl;
        s->sg_wpos = t[i].wpos;
        s->sg_cas_base = t[i].cas_base;
        s->sg_max_exp = t[i].max_exp;
        s->sg_max_cas = t[i].max_cas;
        s->sg_created = t[i].created;
        ids[n++] = i;
    }
    qsort_r(ids, n, sizeof(*ids), warm_seg_cmp, p->sp_segs);
    for (uint32_t k = 0; k < n; k++)
        seg_ttl_append_sealed(c, p->sp_segs[ids[k]].sg_ttl, ids[k]);
    for (uint32_t i = p->sp_nsegs; i-- > 0; ) {
        if (p->sp_segs[i].sg_state == SEG_FREE) {
            p->sp_segs[i].sg_next = p->sp_free;
            p->sp_free = i;
            p->sp_nfree++;
        }
    }
    p->sp_next_new = p->sp_nsegs;
    atomic_store(&p->sp_used, n);
    free(ids);
    return n;
}

/* Indexes every item of segment id not marked deleted.  O(items). */
static void warm_index_segment(segcache *c, uint32_t id)
{
    seg_pool *p = &c->sc_pool;
    seg *s = &p->sp_segs[id];
    uint8_t *base = seg_data(p, id);
    for (uint32_t off = 0; off < s->sg_wpos; ) {
        seg_view v;
        if (!seg_item_parse(base + off, s->sg_wpos - off, s->sg_cas_base, &v))
            break;
        if (!(v.bits & SI_DELETED)) {
            uint64_t h = seg_hash(v.key, v.klen);
            seg_stripe *st = seg_stripe_of(c, h);
            uint32_t g = do_seg_index_want_grow(st);
            if (g)
                seg_index_grow(c, st, g);
            uint32_t i = do_seg_index_free_slot(st, h);
            st->st_slots[i] = slot_make(h, id, off);
            st->st_items++;
            st->st_bytes += kura_item_wire_total(v.klen, v.vlen, v.flags);
        }
        off += v.size;
    }
}

/* Sizes each stripe's index for `items` at 70% before the rebuild. */
static void warm_size_index(segcache *c, uint64_t items)
{
    uint64_t per = items / SEG_STRIPES * 10 / 7 + 8;
    if (per > UINT32_MAX / 2)
        return;
    for (unsigned i = 0; i < SEG_STRIPES; i++) {
        seg_stripe *st = &c->sc_stripes[i];
        if (st->st_n >= per)
            continue;
        uint32_t old = st->st_n;
        seg_index_free(st);
        if (seg_index_init(st, (uint32_t)per) != KURA_OK && seg_index_init(st, old) != KURA_OK)
            continue;
        atomic_fetch_add(&c->sc_index_bytes, seg_index_bytes(st->st_n));
        atomic_fetch_sub(&c->sc_index_bytes, seg_index_bytes(old));
    }
}

/* After seg_warm_map found a clean file: the segments back in their
 * chains and every item in the index; the engine's state in c->sc_state.
 * Logs what it did, or why it starts empty. */
void seg_warm_load(segcache *c, const warm_hdr *h, const kura_store_config *cfg,
                   const char *path)
{
    seg_pool *p = &c->sc_pool;
    size_t tb = warm_table_bytes(p->sp_nsegs);
    warm_seg *t = malloc(tb);
    char line[512];
    if (!t || pread(c->sc_warm_fd, t, tb, (off_t)(WARM_HDR + p->sp_region)) != (ssize_t)tb ||
        crc32c_update(0, t, tb) != h->table_crc) {
        snprintf(line, sizeof(line), "memory file %s: its segment table is %s: the cache "
                 "starts empty", path, t ? "damaged" : "too large for memory");
        warm_log(cfg, line);
        free(t);
        return;
    }
    struct timespec t0, t1;
    clock_gettime(CLOCK_MONOTONIC, &t0);
    warm_size_index(c, h->items);
    long n = warm_segments(c, t);
    free(t);
    if (n < 0)
        return;
    for (uint32_t i = 0; i < p->sp_nsegs; i++)
        if (p->sp_segs[i].sg_state == SEG_SEALED)
            warm_index_segment(c, i);
    c->sc_state = c->sc_warm_state = h->state;
    uint64_t items = 0;
    for (unsigned i = 0; i < SEG_STRIPES; i++)
        items += c->sc_stripes[i].st_items;
    clock_gettime(CLOCK_MONOTONIC, &t1);
    snprintf(line, sizeof(line), "memory file %s: warm restart: %llu items in %ld segments, "
             "indexed in %.3f s", path, (unsigned long long)items, n,
             (double)(t1.tv_sec - t0.tv_sec) + (double)(t1.tv_nsec - t0.tv_nsec) / 1e9);
    if (cfg && cfg->log)
        cfg->log(KURA_LOG_INFO, line);
}

/* At a graceful close, nothing else running: the segments synced, then
 * the table and the header that says the file is whole. */
void seg_warm_save(segcache *c)
{
    seg_pool *p = &c->sc_pool;
    seg_warm_forget(c);
    if (atomic_load(&c->sc_warm_superseded))
        return;
    size_t tb = warm_table_bytes(p->sp_nsegs);
    warm_seg *t = calloc(1, tb);
    if (!t)
        return;
    warm_hdr h = { .magic = WARM_MAGIC, .version = WARM_VERSION,
                   .seg_size = p->sp_seg_size, .nsegs = p->sp_nsegs, .limit = c->sc_limit,
                   .state = c->sc_state };
    for (uint32_t i = 0; i < p->sp_nsegs; i++) {
        const seg *s = &p->sp_segs[i];
        if (s->sg_state != SEG_ACTIVE && s->sg_state != SEG_SEALED)
            continue;
        t[i] = (warm_seg){ .state = s->sg_state, .ttl = s->sg_ttl, .wpos = s->sg_wpos,
                           .max_exp = s->sg_max_exp, .cas_base = s->sg_cas_base,
                           .max_cas = s->sg_max_cas, .created = s->sg_created };
    }
    for (unsigned i = 0; i < SEG_STRIPES; i++)
        h.items += c->sc_stripes[i].st_items;
    h.table_crc = crc32c_update(0, t, tb);
    h.hdr_crc = hdr_crc(&h);
    int fd = c->sc_warm_fd;
    if (msync(p->sp_base, p->sp_region, MS_SYNC) == 0 &&
        pwrite(fd, t, tb, (off_t)(WARM_HDR + p->sp_region)) == (ssize_t)tb &&
        fdatasync(fd) == 0 && pwrite(fd, &h, sizeof(h), 0) == (ssize_t)sizeof(h))
        fdatasync(fd);
    free(t);
}
