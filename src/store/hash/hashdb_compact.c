/*
 * hashdb_compact.c - online compaction and the expiry sweep.
 *
 * Compaction picks the sealed segment with the most dead bytes (records
 * overwritten, deleted, expired, tombstones, old state records) once they
 * pass `frag` percent of it, and only among segments older than both
 * checkpoints' replay positions, so neither checkpoint can need a record it
 * removes.  It reads the segment in order; for each PUT record the index
 * still points at, it takes that key's stripe write lock, appends a copy
 * (same sequence number, so replay treats it as the same version) and moves
 * the entry, then lets go: a request waits at most for one record copy.
 * Dead items met on the way are dropped instead.  After the last record the
 * log is synced (the copies are durable before the original goes) and the
 * segment is retired: no entry names it any more, but the checkpoints on
 * disk may (a slot names its record by place, not by key, so replay could
 * not tell which slot a copy replaces), so its file is unlinked once two
 * more checkpoints are written (hd_retired_drop).  Every `dfunit` records
 * it yields the CPU.
 *
 * Segments are the log's (src/log/): this file reads them with the log's
 * scanner, judges records with the hash file's codec, and drops them with
 * sl_seg_drop.
 *
 * The sweep walks the index stripe by stripe, slot by slot, reads each
 * entry's record header (the index keeps no expiry time) and drops dead
 * entries, each with a tombstone (their records become garbage for
 * compaction).  A call stops where its budget runs out, inside a stripe if
 * need be, and the next goes on from that stripe and slot (hd_sweeper), so
 * a stripe full of expired items costs each call its budget, not the whole
 * stripe under its write lock.  Between two calls the stripe's table may be
 * rebuilt (it grew, or shed its tombstones), which moves entries: resuming
 * at the same slot index then examines some entries twice (harmless: a
 * dropped entry is gone, so none is counted twice) and may pass over some
 * that moved below the index; those wait for the next pass, which is only
 * late, never wrong: a dead entry is invisible to every read meanwhile.
 */
#include <sched.h>
#include <stdlib.h>
#include <string.h>

#include "kura/crc32c.h"
#include "kura/grow.h"
#include "kura/testhooks.h"
#include "hashdb_int.h"

/* The sealed segment to compact (ckpt_mu held), below `limit` (both
 * checkpoints' replay positions): the one with the most dead bytes past
 * frag percent (with force, any), or the oldest when the live ones span
 * half the table; NULL for none. */
static hd_seg *do_pick_segment(hashdb *db, bool force, uint32_t limit)
{
    hd_seg *x = NULL;
    uint64_t best = 0;
    /* segment ids index a table of HD_SEG_SLOTS: when the live ones span
     * half of it, the oldest moves to the head of the log whatever its
     * fragmentation (a fully live old segment would otherwise stay forever) */
    uint32_t active = sl_active_id(&db->log), first = sl_first(&db->log);
    bool span = active - first > HD_SEG_SLOTS / 2;
    for (uint32_t id = first; id < limit; id++) {
        hd_seg *sg = hd_seg_get(db, id);
        if (!sg || !sg->sealed || sg->keep)
            continue;
        if (span)
            return sg;
        uint64_t live = atomic_load(&sg->live);
        uint64_t dead = sg->size > live + HD_SEG_HDR ? sg->size - live - HD_SEG_HDR : 0;
        bool ok = force ? dead > 0 : dead * 100 >= (uint64_t)db->frag_pct * sg->size;
        if (ok && dead > best) {
            best = dead;
            x = sg;
        }
    }
    return x;
}

/* One PUT record r (its bytes at p, rlen long) at `off` in x: if the index
 * still names it, it is dropped when dead (clk given) or copied to the
 * log's head and its entry moved, under its stripe's write lock. */
static int move_record(hashdb *db, hd_seg *x, uint64_t off, const hd_rec *r,
                       const unsigned char *p, uint64_t rlen, const kura_clock *clk)
{
    int rc = KURA_OK;
    const char *key = (const char *)p + r->hlen;
    uint64_t h = hd_hash(db, key, r->klen);
    hd_stripe *st = hd_stripe_of(db, h);
    hd_ent ev;
    hd_write_lock(st);
    /* the record's bytes at p are the scanner's: hdx_find's read
     * goes through the mapping or this thread's read buffer */
    hd_ent *e = hdx_find(db, st, h, key, r->klen, &ev);
    if (e && e->seg == x->id && e->off == off) {
        int lv = clk ? kura_item_liveness(e->exptime, e->cas, clk) : KURA_LIVE;
        if (lv != KURA_LIVE) {
            rc = hd_drop_dead(db, st, e, lv, clk);
        } else {
            hd_loc loc;
            /* copied as it is: a compressed value stays so */
            uint32_t bcrc = crc32c_update(0, p + r->hlen, rlen - r->hlen);
            hd_zval z = { r->codec, r->rawlen };
            rc = hd_append_put(db, st, key, r->klen, p + r->hlen + r->klen, r->vlen,
                               NULL, 0, bcrc, r->flags, r->exptime, r->cas, r->seq, &z,
                               &loc);
            if (rc == KURA_OK) {
                hd_ent_unref_bytes(db, st, e);
                e->seg = loc.seg;
                e->hlen = (uint8_t)loc.hlen;
                e->off = (uint32_t)loc.off;
                hdx_set(e->sl, e->seg, e->off, hd_rec_size(e->hlen, e->klen, e->vlen),
                        hd_slot_marks(e->sl));
                hd_ent_ref_bytes(db, st, e);
            }
        }
    }
    hd_write_unlock(st);
    return rc;
}

/* Reads x in order and moves every record the index still names (ckpt_mu
 * held); a corrupt stretch is skipped and logged.  Yields the CPU every
 * dfunit records and stops (KURA_EINVAL) when the background work does. */
static int do_copy_live(hashdb *db, hd_seg *x)
{
    int rc = KURA_OK;
    bool have_clk = atomic_load(&db->clk_seen);
    kura_clock clk = { .now = atomic_load(&db->clk_now), .oldest_cas = atomic_load(&db->clk_oldest) };
    hd_scan sc;
    hd_rec r;
    const unsigned char *p;
    uint64_t off = HD_SEG_HDR, n = 0;
    hd_scan_init(db, &sc, x);
    while (off < x->size) {
        int s = hd_scan_rec(&sc, off, &r, &p);
        if (s == 1)
            break;
        if (s == KURA_ECORRUPT) {
            uint64_t next = hd_scan_resync(&sc, off);
            hd_log(db, KURA_LOG_ERROR, "compaction: corrupt record in %08x.seg at offset %llu, skipped %llu "
                   "bytes", x->id, (unsigned long long)off, (unsigned long long)(next - off));
            off = next;
            continue;
        }
        if (s) {
            rc = s;
            break;
        }
        uint64_t rlen = hd_rec_size(r.hlen, r.klen, r.vlen);
        if (hd_rec_is_put(r.type) &&
            (rc = move_record(db, x, off, &r, p, rlen, have_clk ? &clk : NULL)))
            break;
        off += rlen;
        if (++n % db->dfunit == 0) {
            if (kura_bg_stopping(&db->bg)) {
                rc = KURA_EINVAL;
                break;
            }
            sched_yield();
        }
    }
    hd_scan_done(&sc);
    return rc;
}

/* x emptied (ckpt_mu held): once the copies are durable it is retired, to
 * be unlinked two checkpoints later (hd_retired_drop). */
static int do_retire(hashdb *db, hd_seg *x, uint32_t limit)
{
    int rc = KURA_OK;
    if (atomic_load(&x->live) != 0) {
        hd_log(db, KURA_LOG_ERROR, "compaction: %08x.seg still holds %llu live bytes; kept",
               x->id, (unsigned long long)atomic_load(&x->live));
        x->keep = true;
        return KURA_ECORRUPT;
    }
    rc = hd_sync_now(db);     /* the copies are durable before the original goes */
    if (rc == KURA_OK &&
        kura_grow(&db->retired, &db->retired_cap, db->nretired + 1, sizeof(*db->retired), 16))
        rc = KURA_ENOMEM;
    if (rc == KURA_OK && KURA_TEST_SWITCH(hashdb_drop_compacted)) {
        atomic_fetch_add(&db->compactions, 1);
        atomic_fetch_add(&db->compacted_bytes, x->size);
        sl_seg_drop(&db->log, x);
        sl_first_advance(&db->log, limit);
    } else if (rc == KURA_OK) {
        x->keep = true;         /* not compacted again meanwhile */
        db->retired[db->nretired++] = (struct hd_retired){ x->id, db->ckpt_count };
        atomic_fetch_add(&db->compactions, 1);
        atomic_fetch_add(&db->compacted_bytes, x->size);
    }
    return rc;
}

/* Returns 1 if it removed a segment, 0 if there was nothing to do, or a
 * negative status. */
int hd_compact_one(hashdb *db, bool force)
{
    if (db->cfg.read_only)
        return 0;
    pthread_mutex_lock(&db->ckpt_mu);
    uint32_t limit = db->ckpt_prev.seg < db->ckpt_cur.seg ? db->ckpt_prev.seg : db->ckpt_cur.seg;
    hd_seg *x = do_pick_segment(db, force, limit);
    if (!x) {
        pthread_mutex_unlock(&db->ckpt_mu);
        return 0;
    }
    int rc = do_copy_live(db, x);
    if (rc == KURA_OK)
        rc = do_retire(db, x, limit);
    pthread_mutex_unlock(&db->ckpt_mu);
    return rc == KURA_OK ? 1 : rc;
}

void hd_retired_drop(hashdb *db)
{
    size_t j = 0;
    for (size_t i = 0; i < db->nretired; i++) {
        struct hd_retired r = db->retired[i];
        hd_seg *sg = hd_seg_get(db, r.id);
        if (sg && db->ckpt_count < r.at + 2)
            db->retired[j++] = r;
        else if (sg)
            sl_seg_drop(&db->log, sg);
    }
    db->nretired = j;
    uint32_t limit = db->ckpt_prev.seg < db->ckpt_cur.seg ? db->ckpt_prev.seg : db->ckpt_cur.seg;
    sl_first_advance(&db->log, limit);
}

/* Removes a dead entry, first logging a tombstone for it: a checkpoint
 * written before may still hold the entry, and the segment its record is
 * in may be compacted away before the next one, so replay must learn of
 * the removal.  Stripe write lock held.  On a write error the entry stays
 * (it is dead, so invisible) and the error is returned. */
int hd_drop_dead(hashdb *db, hd_stripe *st, hd_ent *e, int liveness, const kura_clock *clk)
{
    hd_loc loc;
    int rc = hd_append(db, HD_REC_DEL, e->key, e->klen, NULL, 0, NULL, 0,
                       crc32c_update(0, e->key, e->klen), 0, 0, 0, 0, NULL, &loc);
    if (rc)
        return rc;
    hd_count_reclaim(db, e, liveness, clk);
    hd_ent_unref_bytes(db, st, e);
    hdx_remove(st, e->sl);
    return KURA_OK;
}

/* How long the sweep holds a stripe's write lock at most: this many
 * entries examined (each dead one costs a tombstone's append) or slots
 * scanned, whichever comes first; then it lets go, so that a request on
 * that stripe waits for a few microseconds of sweeping at most, whatever
 * the budget. */
#define SWEEP_HOLD_ENTRIES 64
#define SWEEP_HOLD_SLOTS 1024

/* Whether a pass could drop anything: not when the last complete pass met
 * no entry with an expiry time and nothing changed since (sw->quiet). */
static bool sweep_quiet(hashdb *db, hd_sweeper *sw, const kura_clock *clk)
{
    if (sw->quiet && !atomic_load_explicit(&db->expiry_written, memory_order_relaxed) &&
        clk->oldest_cas == sw->pass_oldest_cas &&
        clk->flush_at == 0 && sw->pass_flush_at == 0 && !KURA_TEST_SWITCH(hd_sweep_never_quiet))
        return true;
    sw->quiet = false;
    return false;
}

static void sweep_pass_begins(hashdb *db, hd_sweeper *sw, const kura_clock *clk)
{
    sw->pass_expiring = 0;
    atomic_store_explicit(&db->expiry_written, false, memory_order_relaxed);
    sw->pass_oldest_cas = clk->oldest_cas;
    sw->pass_flush_at = clk->flush_at;
}

/* A budget unit is an entry examined, or a stripe finished (so that empty
 * stripes cost too).  Every call moves the cursor forward, whatever its
 * budget (at least one entry examined or one stripe's emptiness seen).
 * Each entry examined is a record read: a disk read when the file is
 * larger than memory, so kurad calls this with small budgets and stops
 * when its time is up (main.c's on_tick). */
long hd_sweep(hashdb *db, const kura_clock *clk, size_t budget)
{
    hd_sweeper *sw = &db->sweep;
    if (atomic_exchange(&sw->busy, true))
        return 0;               /* another thread is sweeping */
    bool quiet = sweep_quiet(db, sw, clk);
    atomic_store_explicit(&sw->idle, quiet, memory_order_relaxed);
    if (quiet) {
        atomic_store(&sw->busy, false);
        return 0;
    }
    if (sw->stripe == 0 && sw->slot == 0)
        sweep_pass_begins(db, sw, clk);
    long reclaimed = 0;
    size_t seen = 0;
    int rc = KURA_OK;
    /* a call ends with its pass, however large the budget: the next call
     * starts the next pass (so an empty index costs one round per call) */
    for (bool wrapped = false; seen < budget && !wrapped && rc == KURA_OK;) {
        hd_stripe *st = &db->stripes[sw->stripe];
        size_t i = sw->slot, held = 0, scanned = 0;
        hd_write_lock(st);
        /* i may lie past the end (the table shrank: it does not today) */
        for (; i < st->nslot && seen < budget && held < SWEEP_HOLD_ENTRIES &&
               scanned < SWEEP_HOLD_SLOTS; i++, scanned++) {
            hd_ent ev, *e = &ev;
            int arc = hdx_at(db, st, i, e);
            if (arc == KURA_NOTFOUND)
                continue;
            seen++;
            held++;
            if (arc)
                continue;       /* unreadable: left for a read to report */
            if (e->exptime != 0)
                sw->pass_expiring++;
            int lv = kura_item_liveness(e->exptime, e->cas, clk);
            if (lv != KURA_LIVE) {
                uint64_t bytes = hd_rec_size(e->hlen, e->klen, e->vlen);
                rc = hd_drop_dead(db, st, e, lv, clk);
                if (rc)
                    break;      /* the entry stays; the next call retries it */
                sw->pass_bytes += bytes;
                reclaimed++;
            }
        }
        bool end = i >= st->nslot;
        hd_write_unlock(st);
        if (!end) {
            sw->slot = i;
            continue;
        }
        seen++;                 /* charged at its end: a call of budget 1
                                   still moves past an empty stripe */
        sw->slot = 0;
        if (++sw->stripe == HD_STRIPES) {
            wrapped = true;
            sw->stripe = 0;
            atomic_store_explicit(&sw->last_pass_bytes, sw->pass_bytes, memory_order_relaxed);
            atomic_fetch_add_explicit(&sw->passes, 1, memory_order_relaxed);
            sw->pass_bytes = 0;
            sw->quiet = sw->pass_expiring == 0;     /* sweep_quiet checks the rest */
        }
    }
    atomic_store(&sw->busy, false);
    return reclaimed;
}
