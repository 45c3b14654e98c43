/*
 * apply.c - applying rows of the update log to the store: those a crash
 * may have kept from the store (at open, CH_REDO: not logged again) and
 * those a replica receives from its master (CH_REPLICA: logged here with
 * the origin's sid and origin_ts).
 *
 * A row is applied through the same store calls a local change makes, with
 * the row's own cas (change_ctx tells the feed not to hand out one), so
 * the watermark's slots and the feed's logging hold for it as for any
 * change.  A dual master applies a replica's row only when it is newer
 * than what is there (lww_cb, with the recent deletes of tombs.c).
 */
#include "journal_int.h"

/* state_lock not held */
static int apply_flush(kura_engine *e, const ul_row *row)
{
    if (row->cas)
        engine_observe_cas(e, row->cas);
    engine_state_lock(e);
    if (row->cas) {
        if (row->cas > atomic_load(&e->oldest_cas))
            atomic_store(&e->oldest_cas, row->cas);
    }
    if (row->exptime > 0 && row->exptime > atomic_load(&e->flush_at))
        atomic_store(&e->flush_at, row->exptime);
    int rc = feed_flush(e, row->cas, row->exptime);
    if (rc == KURA_OK)
        rc = engine_save_state_locked(e);
    engine_state_unlock(e);
    return rc;
}

/* Dual master: a row is applied only over an older item (cas at most the
 * row's: a touch keeps the cas), and a set not over a newer delete. */
static int lww_cb(void *arg, const kura_item *cur, kura_update *out)
{
    const change_ctx *cx = arg;
    const ul_row *r = cx->row;
    kura_engine *e = cx->e;
    struct tombs *tb = e->journal->tombs;
    if (r->type == UL_PUT) {
        if (cur ? r->cas < cur->cas : tombs_get(tb, r->key, r->klen) > r->cas)
            return KURA_OK;             /* what is here is newer */
        out->action = KURA_UPDATE_REPLACE;
        out->flags = r->flags;
        out->exptime = r->exptime;
        out->cas = r->cas;
        out->part[0].base = r->val;
        out->part[0].len = r->vlen;
    } else {
        if (!cur) {
            tombs_put(tb, r->key, r->klen, r->origin_ts);
            return KURA_OK;
        }
        if (cur->cas > r->origin_ts)
            return KURA_OK;             /* set after the delete was made */
        out->action = KURA_UPDATE_REMOVE;
    }
    int rc = feed_update_key(e, r->key, r->klen, cur, out);
    if (rc)
        out->action = KURA_UPDATE_KEEP;
    return rc;
}

static int apply_row(kura_engine *e, const ul_row *row, int kind)
{
    change_ctx cx = { kind, row, e };
    kura_clock clk = engine_clock(e);
    int rc;

    if (row->type == UL_FLUSH) {
        journal_tl_ctx = &cx;
        rc = apply_flush(e, row);
        journal_tl_ctx = NULL;
        return rc;
    }
    if (row->type != UL_PUT && row->type != UL_DEL)
        return KURA_OK;                 /* header rows are not changes */
    int slot = feed_begin(e);
    journal_tl_ctx = &cx;
    if (kind == CH_REPLICA && e->journal->tombs) {
        engine_observe_cas(e, row->type == UL_PUT ? row->cas : row->origin_ts);
        rc = kura_store_update(e->store, row->key, row->klen, &clk, lww_cb, &cx);
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
    journal_tl_ctx = NULL;
    feed_end(e, slot, rc);
    return rc;
}

int journal_apply_row(kura_engine *e, const ul_row *row)
{
    engine_gate_in(e);
    int rc = apply_row(e, row, CH_REPLICA);
    engine_gate_out(e);
    return rc;
}

int apply_redo(kura_engine *e, ul_log *log, uint64_t from, uint64_t *redone)
{
    ul_reader *rd;
    int rc = ul_reader_open(log, from, &rd);
    if (rc != KURA_OK)
        return rc;
    ul_row row;
    while ((rc = ul_reader_next(rd, &row)) == KURA_OK) {
        if ((rc = apply_row(e, &row, CH_REDO)) < 0)
            break;
        (*redone)++;
    }
    ul_reader_close(rd);
    return rc == UL_CAUGHT_UP || rc >= 0 ? KURA_OK : rc;
}
