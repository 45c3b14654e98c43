/*
 * hashdb.c - the persistent hash file backend: kura_store operations.
 *
 * A log-structured hash store (see hashdb_int.h for the parts and
 * docs/formats.md for the format and the reasoning).  Each operation takes
 * its key's stripe lock (read lock for get, write lock for changes), checks
 * liveness with kura_item_liveness(), appends at most one record to the log
 * while holding it (so the log's order of records for one key is the order
 * in which the stripe lock granted the changes), updates the index entry
 * and lets go; with -sync always it then waits for the group commit, outside
 * every lock.  Readers take only their stripe's read lock: they wait for a
 * writer of the same stripe (1/1024 of the keys) for one record append at
 * most, never for a checkpoint or a compaction step of another key.
 */
#include <errno.h>
#include <fcntl.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include "kura/backends.h"
#include "kura/codec.h"
#include "kura/crc32c.h"
#include "kura/dbfile.h"
#include "kura/storedebug.h"
#include "kura/testhooks.h"
#include "hashdb_int.h"

static inline hashdb *H(kura_store *s) { return (hashdb *)s; }

/* One line of the hash file's (hd_log's sink), or of its log's (the log's
 * hook, with db as its arg: the same prefix either way). */
void hd_log_line(void *arg, int level, const char *buf)
{
    hashdb *db = arg;
    if (KURA_TEST_SWITCH(quiet_stores))
        return;
    if (db->cfg.log) {
        char line[1200];
        snprintf(line, sizeof(line), "hash file %s: %s", db->dir, buf);
        db->cfg.log(level, line);
    } else {
        fprintf(stderr, "kura hashdb %s: %s\n", db->dir, buf);
    }
}

/* Counts an entry in (or out of) the totals and its segment's live bytes.
 * "bytes" counts memcached's item total, with the 4 bytes memcached adds
 * for non-zero flags (HD_FLAGGED).  Caller holds the entry's stripe lock
 * for writing. */
/* A stripe's totals change only under its write lock: a plain load and
 * store (no locked read-modify-write) suffice; readers load them relaxed.
 * The segment's live bytes are shared by every stripe and stay an atomic
 * add (relaxed: they are statistics and compaction's estimate). */
static inline void stripe_add(_Atomic uint64_t *c, uint64_t d)
{
    atomic_store_explicit(c, atomic_load_explicit(c, memory_order_relaxed) + d,
                          memory_order_relaxed);
}

void hd_ent_ref_bytes(hashdb *db, hd_stripe *st, hd_ent *e)
{
    hd_seg *sg = db->recovering ? NULL : hd_seg_get(db, e->seg);
    if (sg)
        atomic_fetch_add_explicit(&sg->live, hd_rec_size(e->hlen, e->klen, e->vlen),
                                  memory_order_relaxed);
    stripe_add(&st->items, 1);
    stripe_add(&st->bytes, kura_item_wire_total(e->klen, hd_ent_rawlen(e), e->marks & HD_FLAGGED));
}

void hd_ent_unref_bytes(hashdb *db, hd_stripe *st, hd_ent *e)
{
    hd_seg *sg = db->recovering ? NULL : hd_seg_get(db, e->seg);
    if (sg)
        atomic_fetch_sub_explicit(&sg->live, hd_rec_size(e->hlen, e->klen, e->vlen),
                                  memory_order_relaxed);
    stripe_add(&st->items, (uint64_t)-1);
    stripe_add(&st->bytes, (uint64_t)0 - kura_item_wire_total(e->klen, hd_ent_rawlen(e),
                                                              e->marks & HD_FLAGGED));
}

void hd_count_reclaim(hashdb *db, const hd_ent *e, int lv, const kura_clock *clk)
{
    atomic_fetch_add(&db->reclaimed, 1);
    if (lv == KURA_DEAD_EXPIRED && !(e->marks & HD_FETCHED))
        atomic_fetch_add(&db->expired_unfetched, 1);
    if (e->cas < clk->oldest_cas) {
        atomic_fetch_add(&db->flushed_gone, 1);
        atomic_fetch_add(&db->flushed_gone_bytes,
                         kura_item_wire_total(e->klen, hd_ent_rawlen(e), e->marks & HD_FLAGGED));
    }
}

static void note_clock(hashdb *db, const kura_clock *clk)
{
    if (!clk)
        return;
    if (atomic_load_explicit(&db->clk_now, memory_order_relaxed) != clk->now)
        atomic_store_explicit(&db->clk_now, clk->now, memory_order_relaxed);
    if (atomic_load_explicit(&db->clk_oldest, memory_order_relaxed) != clk->oldest_cas)
        atomic_store_explicit(&db->clk_oldest, clk->oldest_cas, memory_order_relaxed);
    if (!atomic_load_explicit(&db->clk_seen, memory_order_relaxed))
        atomic_store(&db->clk_seen, true);
}

/* A get that found no entry but passed over a slot of its key's tag
 * whose record cannot be read (hdx_find): nearly surely the key's (28 bits
 * of tag), so an error rather than a miss, logged and counted as
 * hd_read_record does. */
static int unreadable(hashdb *db, const hd_ent *e)
{
    if (e->unreadable == KURA_EIO || e->unreadable == KURA_ENOMEM)
        return e->unreadable;
    atomic_fetch_add(&db->corrupt_reads, 1);
    hd_log(db, KURA_LOG_ERROR, "%s in %s/%08x.seg at offset %llu",
           e->unreadable == KURA_NOTFOUND ? "missing segment: a record" : "corrupt record",
           db->dir, e->seg, (unsigned long long)e->off);
    return KURA_ECORRUPT;
}

static int hashdb_get(kura_store *s, const char *key, size_t klen, const kura_clock *clk,
                      kura_item_fn fn, void *arg)
{
    hashdb *db = H(s);
    if (!kura_key_ok(key, klen))
        return KURA_NOTFOUND;
    uint64_t h = hd_hash(db, key, klen);
    hd_stripe *st = hd_stripe_of(db, h);
    hdx_prefetch(db, h);
    note_clock(db, clk);
    int rc;
    hd_ent ev;
    pthread_rwlock_rdlock(&st->lock);
    hd_ent *e = hdx_find(db, st, h, key, klen, &ev);
    if (!e && ev.unreadable) {
        rc = unreadable(db, &ev);
    } else if (!e) {
        rc = KURA_NOTFOUND;
    } else {
        int lv = kura_item_liveness(e->exptime, e->cas, clk);
        if (lv != KURA_LIVE) {
            rc = lv == KURA_DEAD_EXPIRED ? KURA_EXPIRED : KURA_FLUSHED;
        } else {
            const unsigned char *rec;
            hd_rec r;
            kura_item it;
            rc = hd_read_item(db, e, &it, &rec, &r);
            if (rc == KURA_OK) {
                uint32_t t = __atomic_load_n(&e->sl->tag, __ATOMIC_RELAXED);
                if (!(t & HD_FETCHED))
                    __atomic_store_n(&e->sl->tag, t | HD_FETCHED, __ATOMIC_RELAXED);
                rc = fn ? fn(arg, &it) : KURA_OK;
            }
        }
    }
    pthread_rwlock_unlock(&st->lock);
    if ((rc == KURA_EXPIRED || rc == KURA_FLUSHED) && !db->cfg.read_only) {
        /* As memcached does, a read that meets a dead item reclaims it, so
         * curr_items and the space follow at once.  Taken again under the
         * write locks, unless a writer holds them (it may be copying a large
         * value: a read does not wait for that); a failed tombstone, or a
         * busy stripe, only leaves the dead entry for the sweep. */
        pthread_rwlock_wrlock(&st->lock);
        if (!st->copying) {
            e = hdx_find(db, st, h, key, klen, &ev);
            int lv = e ? kura_item_liveness(e->exptime, e->cas, clk) : KURA_LIVE;
            if (lv != KURA_LIVE)
                (void)hd_drop_dead(db, st, e, lv, clk);
        }
        pthread_rwlock_unlock(&st->lock);
    }
    return rc;
}

/* Points the key's slot at a freshly appended PUT record of vlen stored
 * bytes (z: how they were compressed, if they were): e's slot, or when e is
 * NULL a new one (room made by hdx_room before the append).  Stripe write
 * lock held; the old entry is not counted in the totals on entry and the
 * new one is on return. */
static void set_entry(hashdb *db, hd_stripe *st, hd_ent *e, uint64_t h, size_t klen,
                      const hd_loc *loc, size_t vlen, const hd_zval *z, uint32_t flags)
{
    hd_ent ev;
    if (!e) {
        e = &ev;
        e->sl = hdx_insert(st, h);
    }
    e->seg = loc->seg;
    e->hlen = (uint8_t)loc->hlen;
    e->klen = (uint16_t)klen;
    e->off = (uint32_t)loc->off;
    e->vlen = (uint32_t)vlen;
    e->rawlen = z->codec ? z->rawlen : (uint32_t)vlen;
    e->marks = (uint8_t)((flags ? HD_FLAGGED : 0) | (z->codec ? HD_ZCOMP : 0));
    hdx_set(e->sl, e->seg, e->off, hd_rec_size(e->hlen, klen, vlen), e->marks);
    hd_ent_ref_bytes(db, st, e);
}

/* Room for the slot a PUT will fill when the key has none (e NULL), made
 * before the append so that running out of memory changes nothing. */
static int entry_room(hd_stripe *st, const hd_ent *e)
{
    return e || hdx_room(st) ? KURA_OK : KURA_ENOMEM;
}

/* Counts a compressed record just written. */
static void count_zcomp(hashdb *db, const hd_zval *z, size_t stored)
{
    if (!z->codec)
        return;
    atomic_fetch_add_explicit(&db->zcomp_records, 1, memory_order_relaxed);
    atomic_fetch_add_explicit(&db->zcomp_saved, z->rawlen - stored, memory_order_relaxed);
}

int hd_append_put(hashdb *db, hd_stripe *st, const char *key, size_t klen, const void *v0,
                  size_t l0, const void *v1, size_t l1, uint32_t bcrc, uint32_t flags,
                  int64_t exptime, uint64_t cas, uint64_t seq, const hd_zval *z,
                  hd_loc *loc)
{
    bool unlocked = hd_copy_unlocked(l0 + l1);
    if (unlocked) {
        hd_copy_begin(st);
        KURA_TEST_CALL(hashdb_copy);
    }
    int rc = hd_append(db, HD_REC_PUT, key, klen, v0, l0, v1, l1, bcrc, flags, exptime, cas,
                       seq, z, loc);
    if (unlocked)
        hd_copy_end(st);
    return rc;
}

static int finish_write(hashdb *db, int rc, bool wrote, uint64_t lsn)
{
    /* With deferred_commit the server calls commit() before it replies. */
    if (wrote && db->cfg.sync_mode == KURA_SYNC_ALWAYS && !db->cfg.deferred_commit) {
        int c = hd_commit(db, lsn);
        if (c)
            return c;
    }
    return rc;
}

/* The key's entry (hdx_find) and its liveness in *lv (-1: no entry). */
static hd_ent *lookup(hashdb *db, hd_stripe *st, uint64_t h, const char *key, size_t klen,
                      const kura_clock *clk, hd_ent *ev, int *lv)
{
    hd_ent *e = hdx_find(db, st, h, key, klen, ev);
    *lv = e ? kura_item_liveness(e->exptime, e->cas, clk) : -1;
    return e;
}

/* A put's value as it will be stored (compressed or not) and its record
 * checksum, made before the lock. */
typedef struct hd_prep {
    const void *src;                    /* the put's value */
    size_t srclen;
    const unsigned char *val;           /* as stored */
    size_t len;
    hd_zval z;
    uint32_t bcrc;
} hd_prep;

/* A version appended: what its slot will say. */
typedef struct hd_ver {
    hd_zval z;
    size_t len;                         /* bytes stored */
    uint32_t flags;
} hd_ver;

/* Appends the new version out asks for: REPLACE, or TOUCH of the live
 * item cur read as record rec (its value kept as stored).  prep: a put's
 * value made before the lock, used when out writes exactly it.  Stripe
 * write lock held. */
static int do_append_version(hashdb *db, hd_stripe *st, const char *key, size_t klen,
                             const kura_update *out, const kura_item *cur,
                             const unsigned char *rec, const hd_rec *r, const hd_prep *prep,
                             hd_loc *loc, hd_ver *v)
{
    const void *v0 = out->part[0].base, *v1 = out->part[1].base;
    size_t l0 = out->part[0].len, l1 = out->part[1].len;
    uint64_t cas = out->cas;
    uint32_t bcrc;
    v->flags = out->flags;
    v->z = (hd_zval){ 0, 0 };
    if (out->action == KURA_UPDATE_TOUCH) {
        /* the value as stored: a compressed one stays so, unopened */
        v0 = rec + r->hlen + klen;
        l0 = r->vlen;
        v1 = NULL;
        l1 = 0;
        v->z = (hd_zval){ r->codec, r->rawlen };
        v->flags = cur->flags;
        cas = cur->cas;
    }
    if (prep && v0 == prep->src && l0 == prep->srclen && !l1) {
        v0 = prep->val;
        l0 = prep->len;
        v->z = prep->z;
        bcrc = prep->bcrc;
    } else {
        /* append, prepend, incr: the new value depends on the old, so it
         * is compressed here, under the lock */
        const unsigned char *zv;
        size_t zl;
        if (!v->z.codec && hd_zcomp_pack(db, v0, l0, v1, l1, &zv, &zl, &v->z)) {
            v0 = zv;
            l0 = zl;
            v1 = NULL;
            l1 = 0;
        }
        bcrc = crc32c_update(crc32c_update(crc32c_update(0, key, klen), v0, l0), v1, l1);
    }
    v->len = l0 + l1;
    return hd_append_put(db, st, key, klen, v0, l0, v1, l1, bcrc, v->flags, out->exptime, cas,
                         0, &v->z, loc);
}

/* Points the key's slot at the version just appended at loc; e is the
 * key's entry (NULL: none) of liveness lv, replaced.  Stripe write lock
 * held. */
static void do_link_version(hashdb *db, hd_stripe *st, hd_ent *e, int lv, uint64_t h,
                            size_t klen, const hd_loc *loc, const hd_ver *v, bool touch,
                            const kura_clock *clk)
{
    if (e) {
        if (lv != KURA_LIVE)
            hd_count_reclaim(db, e, lv, clk);
        hd_ent_unref_bytes(db, st, e);
    }
    set_entry(db, st, e, h, klen, loc, v->len, &v->z, v->flags);
    if (!touch)
        count_zcomp(db, &v->z, v->len);
}

/* Deletes the key's live entry e: a DEL record, the slot freed.  Stripe
 * write lock held. */
static int do_write_del(hashdb *db, hd_stripe *st, hd_ent *e, const char *key, size_t klen,
                        hd_loc *loc)
{
    int rc = hd_append(db, HD_REC_DEL, key, klen, NULL, 0, NULL, 0, crc32c_update(0, key, klen),
                       0, 0, 0, 0, NULL, loc);
    if (rc == KURA_OK) {
        hd_ent_unref_bytes(db, st, e);
        hdx_remove(st, e->sl);
    }
    return rc;
}

/* rmw (store.h): under the stripe's write lock, at most one record
 * appended.  A put's value is compressed and checksummed before the lock.
 * A blind put (set) decides and appends before its lookup, so that the
 * append's work overlaps the slot line's cache miss that hdx_prefetch
 * started (the lookup's miss was a third of a put; docs/design.md); room
 * for a new slot is made first, whether the key has one or not (a table
 * may so grow one put early), and where it cannot be made the lookup
 * comes first, as for every other decision, room for a new slot made
 * before the decision so that running out of memory refuses before the
 * decision feeds anything.  A meta decision (put, del) sees the index
 * entry alone, no record read (flags then only 0 or 1). */
static int hashdb_rmw(kura_store *s, const char *key, size_t klen, const kura_clock *clk,
                      const kura_rmw_hint *hint, kura_update_fn fn, void *arg)
{
    hashdb *db = H(s);
    uint64_t h = hd_hash(db, key, klen);
    hd_stripe *st = hd_stripe_of(db, h);
    hd_prep prep, *pp = NULL;
    if (hint->put) {
        hdx_prefetch(db, h);        /* loads while the checksum is computed */
        pp = &prep;
        prep.src = prep.val = hint->put->val;
        prep.srclen = prep.len = hint->put->vlen;
        hd_zcomp_pack(db, hint->put->val, hint->put->vlen, NULL, 0, &prep.val, &prep.len,
                      &prep.z);
        prep.bcrc = crc32c_update(crc32c_update(0, key, klen), prep.val, prep.len);
    }
    note_clock(db, clk);
    hd_loc loc = { 0 };
    bool wrote = false;
    int rc = KURA_OK, src = KURA_OK;
    kura_item cur;
    kura_update up;
    const unsigned char *rec = NULL;
    bool have = false;
    hd_rec r;
    hd_ent ev, *e = NULL;
    int lv = -1;

    memset(&up, 0, sizeof(up));
    hd_write_lock(st);
    bool lookup_after = hint->blind && hdx_room(st);
    if (lookup_after) {
        rc = fn(arg, NULL, &up);
    } else {
        e = lookup(db, st, h, key, klen, clk, &ev, &lv);
        /* room for the slot a new version would take, made before the
         * decision feeds anything: out of memory refuses first */
        if ((src = entry_room(st, e)) != KURA_OK)
            goto out;
        if (e && lv == KURA_LIVE) {
            if (hint->meta) {
                cur = (kura_item){ .key = key, .klen = klen, .vlen = hd_ent_rawlen(e),
                                   .flags = (e->marks & HD_FLAGGED) ? 1 : 0,
                                   .exptime = e->exptime, .cas = e->cas };
            } else if ((src = hd_read_item(db, e, &cur, &rec, &r)) != KURA_OK) {
                goto out;
            }
            have = true;
        }
        rc = fn(arg, have ? &cur : NULL, &up);
    }
    switch (up.action) {
    case KURA_UPDATE_REPLACE:
    case KURA_UPDATE_TOUCH: {
        hd_ver v;
        if (up.action == KURA_UPDATE_TOUCH && !rec)
            break;
        if ((src = do_append_version(db, st, key, klen, &up, &cur, rec, &r, pp, &loc, &v)))
            break;
        wrote = true;
        if (lookup_after)
            e = lookup(db, st, h, key, klen, clk, &ev, &lv);
        do_link_version(db, st, e, lv, h, klen, &loc, &v, up.action == KURA_UPDATE_TOUCH,
                        clk);
        break;
    }
    case KURA_UPDATE_REMOVE:
        if (!e)
            break;
        if (lv != KURA_LIVE) {
            hd_drop_dead(db, st, e, lv, clk);   /* on a write error it just stays */
            break;
        }
        src = do_write_del(db, st, e, key, klen, &loc);
        wrote = src == KURA_OK;
        break;
    default:
        break;
    }
out:
    hd_write_unlock(st);
    src = finish_write(db, src, wrote, loc.lsn);
    return src ? src : rc;
}

/* Walks one stripe under its read lock: fn's non-zero value is returned
 * at once; a record that fails its checksum is skipped and noted in *bad,
 * so that one damaged record does not hide the others. */
static int walk_stripe(hashdb *db, unsigned part, const kura_clock *clk, kura_item_fn fn,
                       void *arg, int *bad)
{
    hd_stripe *st = &db->stripes[part];
    int rc = 0;
    pthread_rwlock_rdlock(&st->lock);
    for (size_t j = 0; j < st->nslot && rc == 0; j++) {
        hd_ent ev, *e = &ev;
        int arc = hdx_at(db, st, j, e);
        if (arc == KURA_NOTFOUND)
            continue;
        if (arc) {
            *bad = arc;
            continue;
        }
        if (kura_item_liveness(e->exptime, e->cas, clk) != KURA_LIVE)
            continue;
        const unsigned char *rec;
        hd_rec r;
        kura_item it;
        int rrc = hd_read_item(db, e, &it, &rec, &r);
        if (rrc) {
            *bad = rrc;
            continue;
        }
        rc = fn(arg, &it);
    }
    pthread_rwlock_unlock(&st->lock);
    return rc;
}

/* A part's keys and metadata from the record headers, no value read or
 * checked (val NULL; flags only as "not 0", as before the index held no
 * keys), so that a listing reads no more than it must. */
static int walk_stripe_keys(hashdb *db, unsigned part, const kura_clock *clk, kura_item_fn fn,
                            void *arg)
{
    hd_stripe *st = &db->stripes[part];
    int rc = 0;
    pthread_rwlock_rdlock(&st->lock);
    for (size_t j = 0; j < st->nslot && rc == 0; j++) {
        hd_ent ev, *e = &ev;
        if (hdx_at(db, st, j, e) != KURA_OK ||
            kura_item_liveness(e->exptime, e->cas, clk) != KURA_LIVE)
            continue;
        bool flagged = e->marks & HD_FLAGGED;
        kura_item it = {
            .key = e->key, .klen = e->klen, .val = NULL, .vlen = hd_ent_rawlen(e),
            .flags = flagged ? 1 : 0, .exptime = e->exptime, .cas = e->cas,
        };
        rc = fn(arg, &it);
    }
    pthread_rwlock_unlock(&st->lock);
    return rc;
}

/* iterate (store.h: kura_iter_spec): a part is a stripe, walked under its
 * read lock; no order.  keys_only reads the index alone. */
static int hashdb_iterate(kura_store *s, const kura_iter_spec *spec, const kura_clock *clk,
                          kura_item_fn fn, void *arg)
{
    hashdb *db = H(s);
    unsigned first = 0, end = HD_STRIPES;
    int bad = 0;
    if (spec->scope == KURA_ITER_PART) {
        if (spec->part >= HD_STRIPES)
            return KURA_EINVAL;
        first = spec->part;
        end = first + 1;
    } else if (spec->scope != KURA_ITER_ALL) {
        return KURA_EINVAL;
    }
    note_clock(db, clk);
    for (unsigned i = first; i < end; i++) {
        int rc = spec->keys_only ? walk_stripe_keys(db, i, clk, fn, arg)
                                 : walk_stripe(db, i, clk, fn, arg, &bad);
        if (rc)
            return rc;
    }
    return bad;
}

static long hashdb_sweep(kura_store *s, const kura_clock *clk, size_t budget)
{
    hashdb *db = H(s);
    if (db->cfg.read_only)
        return 0;
    note_clock(db, clk);
    return hd_sweep(db, clk, budget);
}

static int hashdb_sync(kura_store *s)
{
    hashdb *db = H(s);
    return db->cfg.read_only ? KURA_OK : hd_sync_now(db);
}

static void hashdb_usage(kura_store *s, kura_store_usage *u)
{
    hashdb *db = H(s);
    memset(u, 0, sizeof(*u));
    u->curr_items = hdx_items(db, &u->bytes);
    u->reclaimed = atomic_load(&db->reclaimed);
    u->flushed_gone = atomic_load(&db->flushed_gone);
    u->flushed_gone_bytes = atomic_load(&db->flushed_gone_bytes);
    u->expired_unfetched = atomic_load(&db->expired_unfetched);
}

typedef struct seg_sum {
    uint64_t file, live, nseg;
} seg_sum;

static void sum_seg(void *arg, hd_seg *sg)
{
    seg_sum *t = arg;
    t->nseg++;
    t->file += sg->size;
    t->live += atomic_load(&sg->live);
}

static void hashdb_stats(kura_store *s, kura_stat_fn emit, void *arg)
{
    hashdb *db = H(s);
    uint64_t file = 0, live = 0, nseg = 0;

    seg_sum t = { 0, 0, 0 };
    sl_seg_each(&db->log, sum_seg, &t);
    file = t.file;
    live = t.live;
    nseg = t.nseg;
    /* O(1), no stripe lock: counters kept as the index changes.  Which
     * items have expired since the sweep last looked cannot be known
     * without looking at them all, so expired bytes are what the sweep's
     * last complete pass found (and reclaimed); docs/operations.md. */
    uint64_t slots = hdx_slots(db);
    uint64_t expired = atomic_load_explicit(&db->sweep.last_pass_bytes, memory_order_relaxed);
    char frag[32];
    snprintf(frag, sizeof(frag), "%.3f", file ? (double)(file - live) / (double)file : 0.0);
    kura_emit_u64(emit, arg, "hash_file_bytes", file);
    kura_emit_u64(emit, arg, "hash_live_bytes", live);
    kura_emit_u64(emit, arg, "hash_expired_bytes", expired);
    kura_emit_u64(emit, arg, "hash_sweep_passes",
             atomic_load_explicit(&db->sweep.passes, memory_order_relaxed));
    kura_emit_u64(emit, arg, "hash_sweep_idle",
             atomic_load_explicit(&db->sweep.idle, memory_order_relaxed));
    kura_emit_u64(emit, arg, "hash_dead_bytes", file - live);
    emit(arg, "hash_fragmentation", frag);
    kura_emit_u64(emit, arg, "hash_segments", nseg);
    kura_emit_u64(emit, arg, "hash_index_slots", slots);
    kura_emit_u64(emit, arg, "hash_checkpoints", atomic_load(&db->checkpoints));
    kura_emit_u64(emit, arg, "hash_compactions", atomic_load(&db->compactions));
    kura_emit_u64(emit, arg, "hash_compacted_bytes", atomic_load(&db->compacted_bytes));
    /* compressed records written since the start, and the bytes they
     * saved (as the tree's tree_zcomp_*) */
    kura_emit_u64(emit, arg, "hash_zcomp_records", atomic_load(&db->zcomp_records));
    kura_emit_u64(emit, arg, "hash_zcomp_saved_bytes", atomic_load(&db->zcomp_saved));
    sl_stats ls;
    sl_get_stats(&db->log, &ls);
    kura_emit_u64(emit, arg, "hash_syncs", ls.syncs);
    kura_emit_u64(emit, arg, "hash_write_errors", ls.write_errors);
    kura_emit_u64(emit, arg, "hash_sync_errors", ls.sync_errors);
    /* 1 once a sync failed: writes are refused until a restart */
    kura_emit_u64(emit, arg, "hash_writes_stopped", hd_failed(db) != KURA_OK);
    kura_emit_u64(emit, arg, "hash_read_errors", ls.read_errors);
    kura_emit_u64(emit, arg, "hash_corrupt_reads", atomic_load(&db->corrupt_reads));
    kura_emit_u64(emit, arg, "hash_recovered_records", db->recovered_records);
    kura_emit_u64(emit, arg, "hash_recovery_lost", db->recovery_lost);
    kura_emit_u64(emit, arg, "hash_truncated_bytes", db->truncated_bytes);
}

/* The state and max_cas_seen are read and changed under the log's append
 * lock (sl_locked), which the framing callback also runs under: no extra
 * lock on the append path. */
typedef struct state_op {
    hashdb *db;
    kura_store_state *out;
    const kura_store_state *in;
    uint64_t seq;
} state_op;

static void load_state_locked(void *arg, const sl_tail *t)
{
    state_op *o = arg;
    hashdb *db = o->db;
    (void)t;
    *o->out = db->state;
    if (db->max_cas_seen > o->out->max_cas)
        o->out->max_cas = db->max_cas_seen;
}

static void save_state_locked(void *arg, const sl_tail *t)
{
    state_op *o = arg;
    hashdb *db = o->db;
    (void)t;
    if (o->seq > db->state_seq) {
        db->state_seq = o->seq;
        db->state = *o->in;
    }
}

static int hashdb_load_state(kura_store *s, kura_store_state *st)
{
    hashdb *db = H(s);
    state_op o = { .db = db, .out = st };
    sl_locked(&db->log, load_state_locked, &o);
    return KURA_OK;
}

static int hashdb_save_state(kura_store *s, const kura_store_state *st)
{
    hashdb *db = H(s);
    unsigned char v[32];
    hd_loc loc;
    if (db->cfg.read_only)
        return KURA_EREADONLY;
    put64(v, st->max_cas);
    put64(v + 8, st->oldest_cas);
    put64(v + 16, (uint64_t)st->flush_at);
    put64(v + 24, st->ulog_ts);
    int rc = hd_append(db, HD_REC_STATE, NULL, 0, v, sizeof(v), NULL, 0,
                       crc32c_update(0, v, sizeof(v)), 0, 0, 0, 0, NULL, &loc);
    if (rc)
        return rc;
    state_op o = { .db = db, .in = st, .seq = loc.seq };
    sl_locked(&db->log, save_state_locked, &o);
    return db->cfg.sync_mode == KURA_SYNC_NONE ? KURA_OK : hd_commit(db, loc.lsn);
}

/* ---- background work: interval sync, checkpoints, compaction ---------- */

/* About how many bytes a checkpoint of the index takes now: its slots,
 * about 8 bytes an item in version 8 (docs/formats.md). */
static uint64_t ckpt_estimate(hashdb *db)
{
    return hdx_items(db, NULL) * 8;
}

/* Bytes of compacted segments still on disk, waiting for two checkpoints
 * past their compaction (hd_retired_drop). */
static uint64_t retired_bytes(hashdb *db)
{
    uint64_t n = 0;
    pthread_mutex_lock(&db->ckpt_mu);
    for (size_t i = 0; i < db->nretired; i++) {
        hd_seg *sg = hd_seg_get(db, db->retired[i].id);
        n += sg ? sg->size : 0;
    }
    pthread_mutex_unlock(&db->ckpt_mu);
    return n;
}

/* A checkpoint is due when the log written since the last one passes both
 * `ckpt` bytes and the size of a checkpoint (so writing checkpoints never
 * costs more than the writes themselves, and replay at open stays bounded
 * by the larger of the two), or when a segment was sealed a while ago (so
 * compaction, which needs two checkpoints past a segment, can proceed), or
 * when compacted segments wait for their two checkpoints a while and
 * outweigh an eighth of one: a store that stopped taking writes writes no
 * other, and kept their files until writes came again. */
static bool want_checkpoint(hashdb *db, double since)
{
    uint64_t est = ckpt_estimate(db);
    uint64_t a = sl_lsn(&db->log) - atomic_load(&db->ckpt_lsn);
    bool sealed = sl_rolls(&db->log) != atomic_load(&db->ckpt_rolls);
    return (a >= db->ckpt_bytes && a >= est) || (sealed && since >= 2.0 && a >= est / 8) ||
           (since >= 2.0 && retired_bytes(db) >= est / 8 + 1);
}

/* -sync interval, once a second (kura_bg): after a failed sync hd_sync_now
 * returns at once (the failure is sticky) and the thread just goes on
 * waiting its second. */
static void bg_sync(void *arg)
{
    hd_sync_now(arg);
}

/* Every 100 ms (kura_bg): checkpoints and compaction, in rounds while there
 * is work, since a checkpoint lets older segments be compacted and a busy
 * store needs both often.  One that failed (a full disk, say) is tried
 * again only after kura_backoff_next's pause. */
static void bg_work(void *arg)
{
    hashdb *db = arg;
    double now = kura_mono();
    hdx_advise_huge(db, false);
    for (int round = 0; round < 64 && !kura_bg_stopping(&db->bg) && now >= db->bg_retry_at;
         round++) {
        bool did = false;
        int rc = KURA_OK, n;
        hd_writebehind(db);
        if (hd_failed(db))
            break;          /* writes stopped: nothing to maintain */
        if (want_checkpoint(db, kura_mono() - db->bg_last_ckpt)) {
            rc = hd_ckpt_write(db);
            did = rc == KURA_OK;
            db->bg_last_ckpt = kura_mono();
        }
        while (!rc && !kura_bg_stopping(&db->bg) && (n = hd_compact_one(db, false)) != 0) {
            if (n < 0)
                rc = n;
            else
                did = true;
        }
        if (rc == KURA_ECORRUPT || rc == KURA_EINVAL)
            rc = KURA_OK;   /* a segment set aside as damaged, or the stop:
                               nothing that waiting would mend */
        if (rc) {
            db->bg_backoff = kura_backoff_next(db->bg_backoff);
            db->bg_retry_at = kura_mono() + db->bg_backoff;
            break;
        }
        db->bg_backoff = 0;
        if (!did)
            break;
    }
}

#ifdef KURA_TEST_HOOKS
/* For tests (storedebug.h; test builds only). */
int hashdb_debug_maintain(kura_store *s, bool checkpoint, bool compact)
{
    hashdb *db = H(s);
    int rc = KURA_OK;
    if (checkpoint)
        rc = hd_ckpt_write(db);
    while (!rc && compact) {
        int n = hd_compact_one(db, true);
        if (n < 0)
            rc = n;
        if (n <= 0)
            break;
    }
    return rc;
}
#endif

/* ---- open and close ------------------------------------------------- */

static void destroy(hashdb *db)
{
    kura_bg_stop(&db->bg);
    sl_destroy(&db->log);
    hdx_free(db);
    if (db->lockfd >= 0)
        db->io->close(db->io, db->lockfd);   /* releases the flock */
    if (db->dirfd >= 0)
        db->io->close(db->io, db->dirfd);
    pthread_mutex_destroy(&db->ckpt_mu);
    kura_bg_destroy(&db->bg);
    free(db->retired);
    free(db->dir);
    free(db);
}

static void hashdb_close(kura_store *s)
{
    hashdb *db = H(s);
    kura_bg_stop(&db->bg);
    if (!db->cfg.read_only) {
        /* a checkpoint when replaying the log written since the last one
         * would take longer than writing one (replay inserts in random
         * order, a checkpoint loads stripe by stripe: about 4 times faster);
         * otherwise a sync is enough */
        uint64_t est = ckpt_estimate(db);
        uint64_t appended = sl_lsn(&db->log) - atomic_load(&db->ckpt_lsn);
        bool want = appended > 0 && appended >= est / 4;
        /* Unmapped first, the pages written through the mapping are
         * written back without write-protecting each one's mapping entry
         * (and flushing it from the TLB) on the way: the mapping would go
         * at destroy() anyway, and nothing else runs now. */
        sl_unmap_active(&db->log);
        int rc = want ? hd_ckpt_write(db) : KURA_OK;
        if (rc || !want)
            rc = hd_sync_now(db);
        if (rc)
            hd_log(db, KURA_LOG_ERROR, "close: data may not be on disk: %s", kura_strerror(rc));
    }
    destroy(db);
}

/* Every change completed so far is at or below the log's end. */
static uint64_t hashdb_write_seq(kura_store *s)
{
    return sl_lsn(&H(s)->log);
}

_Thread_local const hashdb *hd_thread_db;
_Thread_local uint64_t hd_thread_lsn;

/* Every change this thread made is at or below it: the end of its last
 * record (or the log's end, if its last record went to another store). */
static uint64_t hashdb_thread_seq(kura_store *s)
{
    return hd_thread_db == H(s) ? hd_thread_lsn : hashdb_write_seq(s);
}

static int hashdb_commit(kura_store *s, uint64_t seq)
{
    return hd_commit(H(s), seq);
}

static const kura_store_ops hashdb_ops = {
    .name = "hash",
    .get = hashdb_get,
    .rmw = hashdb_rmw,
    .parts = HD_STRIPES,
    .iterate = hashdb_iterate,
    .sweep = hashdb_sweep,
    .sync = hashdb_sync,
    .usage = hashdb_usage,
    .stats = hashdb_stats,
    .load_state = hashdb_load_state,
    .save_state = hashdb_save_state,
    .close = hashdb_close,
    .write_seq = hashdb_write_seq,
    .thread_seq = hashdb_thread_seq,
    .commit = hashdb_commit,
};

/* hashdb_open's parameters, parsed. */
typedef struct open_params {
    uint64_t bnum, msiz, segsiz, ckpt, dfunit, frag, mapwrite, wbehind, zmin;
    kura_codec zcomp;
} open_params;

/* Takes the hash file's parameters from `params` into *p, defaults for
 * the rest; any parameter left over is refused. */
static int parse_params(const char *path, kura_params *params, open_params *p, char *err,
                        size_t errlen)
{
    /* bnum and segsiz 0: not given, a new database starts small and grows
     * (HD_SEG_FIRST, hdx_init) */
    uint64_t bnum = 0, msiz = 4ULL << 30, segsiz = 0,
             ckpt = 64ULL << 20, dfunit = 256, frag = 50, mapwrite = 1,
             wbehind = 4ULL << 20;
    int rc;

    if ((rc = kura_param_size(params, "hash file", "bnum", &bnum, 1, 1ULL << 36, err, errlen)) ||
        (rc = kura_param_size(params, "hash file", "msiz", &msiz, 0, 1ULL << 46, err, errlen)) ||
        (rc = kura_param_size(params, "hash file", "segsiz", &segsiz, 4096, 1ULL << 31, err, errlen)) ||
        (rc = kura_param_size(params, "hash file", "ckpt", &ckpt, 4096, 1ULL << 46, err, errlen)) ||
        (rc = kura_param_size(params, "hash file", "dfunit", &dfunit, 1, 1 << 20, err, errlen)) ||
        (rc = kura_param_size(params, "hash file", "frag", &frag, 1, 100, err, errlen)) ||
        (rc = kura_param_size(params, "hash file", "mapwrite", &mapwrite, 0, 1, err, errlen)) ||
        (rc = kura_param_size(params, "hash file", "wbehind", &wbehind, 0, 1ULL << 40, err, errlen)))
        return rc;
    uint64_t zmin = 1024;
    kura_codec zcomp = KURA_CODEC_NONE;
    if ((rc = kura_param_size(params, "hash file", "zmin", &zmin, 1, UINT32_MAX, err, errlen)))
        return rc;
    const char *zname = kura_param_take(params, "zcomp");
    if (zname && codec_by_name(zname, &zcomp) != KURA_OK) {
        snprintf(err, errlen, "hash file parameter zcomp=%s: expected lzo, zlib, bz2 or none",
                 zname);
        return KURA_EINVAL;
    }
    *p = (open_params){ .bnum = bnum, .msiz = msiz, .segsiz = segsiz, .ckpt = ckpt,
                        .dfunit = dfunit, .frag = frag, .mapwrite = mapwrite,
                        .wbehind = wbehind, .zmin = zmin, .zcomp = zcomp };
    return kura_params_reject_unused(params, path, err, errlen);
}

/* A new hashdb object for `path`, nothing opened yet. */
static hashdb *db_new(const char *path, const kura_store_config *cfg, const open_params *p)
{
    hashdb *db = calloc(1, sizeof(*db));
    if (!db || !(db->dir = strdup(path))) {
        free(db);
        return NULL;
    }
    db->base.ops = &hashdb_ops;
    db->cfg = *cfg;
    db->io = kio_or_default(cfg->io);
    if (!db->cfg.item_size_max)
        db->cfg.item_size_max = KURA_ITEM_SIZE_MAX_DEFAULT;
    db->dirfd = db->lockfd = -1;
    db->bnum = p->bnum;
    db->ckpt_bytes = p->ckpt;
    db->dfunit = (unsigned)p->dfunit;
    db->frag_pct = (unsigned)p->frag;
    db->zcomp = (int)p->zcomp;
    db->zmin = p->zmin;
    pthread_mutex_init(&db->ckpt_mu, NULL);
    kura_bg_init(&db->bg);
    return db;
}

/* Opens the directory (locked), sets up the log over its segments and
 * makes the index. */
static int open_log_and_index(hashdb *db, const char *path, const open_params *p, char *err,
                              size_t errlen)
{
    const kura_store_config *cfg = &db->cfg;
    int rc;
    if ((rc = kura_db_dir_open(db->io, path, cfg->read_only, "hash", &db->dirfd, &db->lockfd,
                               err, errlen)))
        return rc;
    /* the log's record framing is this file's: the hash file's format
     * (docs/formats.md) stays as it was (hashdb_rec.c) */
    uint64_t segsiz = p->segsiz, seg_first = 0;
    if (!segsiz) {
        segsiz = HD_SEGSIZ;
        seg_first = KURA_TEST_SWITCH(hashdb_seg_first) ? KURA_TEST_SWITCH(hashdb_seg_first)
                                                        : HD_SEG_FIRST;
    }
    sl_config lc = { .dir = db->dir, .dirfd = db->dirfd, .io = db->io,
                     .version = HD_VERSION, .versions = HD_VERSIONS,
                     .segsiz = segsiz, .segsiz_first = seg_first, .msiz = p->msiz,
                     .wbehind = p->wbehind, .mapwrite = p->mapwrite != 0,
                     .read_only = cfg->read_only,
                     .check = hd_rec_check, .log = hd_log_line, .log_arg = db,
                     .lock_rank = LOCK_RANK_STORE_LOG };
    memcpy(lc.magic, HD_SEG_MAGIC, sizeof(lc.magic));
    if ((rc = sl_init(&db->log, &lc))) {
        snprintf(err, errlen, "out of memory");
        return rc;
    }
    rc = hdx_init(db, p->bnum);
    if (rc) {
        if (rc == KURA_ENOMEM)
            snprintf(err, errlen, "out of memory for an index of %llu records",
                     (unsigned long long)p->bnum);
        else
            snprintf(err, errlen, "no random bytes for the index's hash key "
                     "(getrandom, /dev/urandom): %s", kura_strerror(rc));
    }
    return rc;
}

/* Brings the index to the last durable state (hd_recover), and writes the
 * checkpoint a recovery asked for. */
static int recover_db(hashdb *db, const char *path, char *err, size_t errlen)
{
    int rc = hd_recover(db, err, errlen);
    if (rc)
        return rc;
    /* The tables a checkpoint loaded were faulted in small pages:
     * khugepaged makes huge ones of them from now on, off the restart's
     * path.  A store that loaded none has the tables hdx_init made (huge
     * pages at once), faulted in now rather than by the first requests
     * under a stripe lock (hashdb_index.c). */
    hdx_advise_huge(db, true);
    hdx_populate(db);
    if (db->need_ckpt && !db->cfg.read_only) {
        rc = hd_ckpt_write(db);
        if (rc) {
            snprintf(err, errlen, "%s: cannot write a checkpoint: %s", path, kura_strerror(rc));
            return rc;
        }
    }
    if (db->recovered_records || db->truncated_bytes || db->recovery_lost)
        hd_log(db, KURA_LOG_INFO, "opened: %llu items, replayed %llu records, cut %llu torn bytes, "
               "lost %llu records or regions", (unsigned long long)hdx_items(db, NULL),
               (unsigned long long)db->recovered_records,
               (unsigned long long)db->truncated_bytes, (unsigned long long)db->recovery_lost);
    return KURA_OK;
}

int hashdb_open(const char *path, kura_params *params, const kura_store_config *cfg,
                kura_store **out, char *err, size_t errlen)
{
    open_params p = { 0 };      /* gcc -O1 (make test-tsan) cannot see parse_params set it */
    int rc;

    *out = NULL;
    if ((rc = parse_params(path, params, &p, err, errlen)))
        return rc;
    hashdb *db = db_new(path, cfg, &p);
    if (!db) {
        snprintf(err, errlen, "out of memory");
        return KURA_ENOMEM;
    }
    if ((rc = open_log_and_index(db, path, &p, err, errlen)) ||
        (rc = recover_db(db, path, err, errlen)))
        goto fail;
    if (!cfg->read_only) {
        db->bg_last_ckpt = kura_mono();
        if ((rc = kura_bg_start(&db->bg, bg_work, cfg->sync_mode == KURA_SYNC_INTERVAL ? bg_sync : NULL,
                                db, "hash file", err, errlen)))
            goto fail;
    }
    *out = &db->base;
    return KURA_OK;
fail:
    destroy(db);
    return rc;
}
