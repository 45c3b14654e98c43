/*
 * durable.c - the engine over the journal: attaching the update log,
 * applying rows to the store, and the commit source.
 *
 * Rows are applied at open (those a crash may have kept from the store:
 * JOURNAL_REDO changes, not logged again) and from a master (JOURNAL_
 * REPLICA: logged here with the origin's sid and origin_ts) through the
 * same store calls a local change makes, with the row's own cas (the
 * change's kind tells the feed not to hand out one), so the watermark's
 * slots and the feed's logging hold for them as for any change.  A dual
 * master applies a peer's row only when it is newer than what is there
 * (journal_lww, with the journal's recent deletes).
 *
 * The journal (journal.h) is the layer below: this file calls down into
 * it, and it calls back only through the two hooks engine.c gives it.
 */
#include "engine_int.h"

/* state_lock not held; the gate held, or the engine opening */
static int apply_flush(kura_engine *e, journal_change *ch)
{
    const ul_row *row = ch->row;
    if (row->cas)
        engine_observe_cas(e, row->cas);
    engine_state_lock(e);
    uint64_t epoch = 0;
    if (row->cas) {
        if (row->cas > atomic_load(&e->oldest_cas)) {
            atomic_store(&e->oldest_cas, row->cas);
            epoch = engine_count_epoch(e);
        }
    }
    if (row->exptime > 0 && row->exptime > atomic_load(&e->flush_at))
        atomic_store(&e->flush_at, row->exptime);
    int rc = journal_flush(e->journal, ch, row->cas, row->exptime);
    if (rc == KURA_OK)
        rc = engine_save_state_locked(e);
    engine_state_unlock(e);
    if (epoch)
        engine_count_note(e, epoch, true);      /* the store's locks: after state_lock */
    return rc;
}

typedef struct lww_arg {
    kura_journal *j;
    journal_change *ch;
} lww_arg;

static int lww_cb(void *arg, const kura_item *cur, kura_update *out)
{
    lww_arg *a = arg;
    return journal_lww(a->j, a->ch, cur, out);
}

/* One row as a change of kind (JOURNAL_REPLICA or JOURNAL_REDO). */
static int apply_row(kura_engine *e, const ul_row *row, int kind)
{
    journal_change ch = { .kind = kind, .row = row };
    kura_clock clk = engine_clock(e);
    int rc;

    if (row->type == UL_FLUSH)
        return apply_flush(e, &ch);
    if (row->type != UL_PUT && row->type != UL_DEL)
        return KURA_OK;                 /* header rows are not changes */
    clk.feed_ctx = &ch;
    journal_begin(e->journal, &ch);
    if (kind == JOURNAL_REPLICA && journal_dual(e->journal)) {
        engine_observe_cas(e, row->type == UL_PUT ? row->cas : row->origin_ts);
        lww_arg a = { e->journal, &ch };
        rc = kura_store_update(e->store, row->key, row->klen, &clk, lww_cb, &a);
    } else if (row->type == UL_PUT) {
        engine_observe_cas(e, row->cas);
        kura_item it = {
            .key = row->key, .klen = row->klen, .val = row->val, .vlen = row->vlen,
            .flags = row->flags, .exptime = row->exptime, .cas = row->cas,
        };
        rc = kura_store_put(e->store, &it, KURA_PUT_ANY, 0, &clk);
    } else {
        rc = kura_store_del(e->store, row->key, row->klen, 0, &clk);
        if (rc == KURA_NOTFOUND)
            rc = KURA_OK;
    }
    journal_end(e->journal, &ch, rc);
    return rc;
}

int engine_apply_row(kura_engine *e, const ul_row *row)
{
    engine_gate_in(e);
    int rc = apply_row(e, row, JOURNAL_REPLICA);
    engine_gate_out(e);
    return rc;
}

static int redo_row(void *arg, const ul_row *row)
{
    return apply_row(arg, row, JOURNAL_REDO);
}

int engine_attach_log(kura_engine *e, ul_log *log, int sync_mode,
                      void (*logfn)(int level, const char *line), uint64_t *redone)
{
    int rc = journal_attach(e->journal, e->store, log, sync_mode, logfn, redo_row, e, redone);
    if (rc < 0)
        return rc;
    engine_state_lock(e);
    engine_set_saved(e, 0);
    rc = engine_save_state_locked(e);
    engine_state_unlock(e);
    if (rc < 0 && rc != KURA_EREADONLY)
        return rc;
    return journal_start(e->journal);
}

/* ---- the store as the commit source, under the swap gate -------------------- */

static uint64_t gated_seq(kura_engine *e, bool own_thread)
{
    kura_commit c;
    engine_gate_in(e);
    (void)journal_commit_store(e->store, &c);
    uint64_t v = own_thread ? c.thread_seq(c.ctx) : c.write_seq(c.ctx);
    engine_gate_out(e);
    return v;
}

static uint64_t gated_write_seq(void *ctx)
{
    return gated_seq(ctx, false);
}

static uint64_t gated_thread_seq(void *ctx)
{
    return gated_seq(ctx, true);
}

static int gated_commit(void *ctx, uint64_t seq)
{
    kura_engine *e = ctx;
    kura_commit c;
    engine_gate_in(e);
    (void)journal_commit_store(e->store, &c);
    int rc = c.commit(c.ctx, seq);
    engine_gate_out(e);
    return rc;
}

bool engine_commit_source(kura_engine *e, kura_commit *out)
{
    if (journal_commit_source(e->journal, out))
        return true;
    if (!journal_commit_store(e->store, out))
        return false;
    if (e->gated)
        *out = (kura_commit){ "store", gated_write_seq, gated_thread_seq, gated_commit, e };
    return true;
}
