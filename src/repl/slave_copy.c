/*
 * slave_copy.c - a full copy arriving on a replica's stream (slave.c's
 * first comment says when one comes): into a store of its own, swapped in
 * whole at COPY_DONE (a read-only replica that has one); else over the
 * store, the keys it held that the copy did not bring deleted at COPY_DONE
 * (a read-only replica without one); a replica that takes writes applies
 * it over what it has and keeps the rest (its own changes may not have
 * reached the master).
 */
#include <inttypes.h>
#include <stdio.h>
#include <time.h>

#include "slave_int.h"

/* engine_iterate's callback: a key the store holds, noted. */
static int add_stale(void *arg, const kura_item *it)
{
    return keyset_add(arg, it->key, it->klen) ? 0 : KURA_ENOMEM;
}

/* keyset_each's callback: a key the copy did not bring, deleted. */
static int del_stale(void *arg, const char *key, size_t klen)
{
    session *ss = arg;
    ul_row del = { .type = UL_DEL, .key = key, .klen = klen, .sid = ss->s->cfg.sid,
                   .origin_ts = 0 };
    int rc = engine_apply_row(ss->s->cfg.engine, &del);
    return rc < 0 ? rc : 0;
}

/* The copy is complete: into the shadow store, swapped in whole; or over
 * the store, the keys it did not bring deleted (a read-only replica). */
int slave_copy_done(session *ss)
{
    repl_slave *s = ss->s;
    int rc = KURA_OK;
    if (ss->shadow) {
        kura_store *shadow = ss->shadow;
        ss->shadow = NULL;              /* the swap owns it now */
        if ((rc = s->cfg.swap_in(s->cfg.shadow_arg, shadow)) != KURA_OK) {
            logf_(s, KURA_LOG_ERROR, "replica: cannot put the copy in place (%s); the store "
                  "stays as it was", kura_strerror(rc));
            return rc;
        }
        /* this server's own log does not hold what came with the copy: its
         * replicas get a copy from it in turn */
        if (s->cfg.ulog && (rc = ul_set_complete(s->cfg.ulog, false)) != KURA_OK)
            return rc;
        logf_(s, KURA_LOG_INFO, "replica: copy of %" PRIu64 " items as of %" PRIu64 " in "
              "place", ss->copy_items, ss->copy_start);
    } else {
        size_t n = ss->stale ? keyset_count(ss->stale) : 0;
        if (ss->stale)
            rc = keyset_each(ss->stale, del_stale, ss);
        keyset_free(ss->stale);
        ss->stale = NULL;
        if (rc < 0)
            return rc;
        logf_(s, KURA_LOG_INFO, "replica: copy of %" PRIu64 " items complete at %" PRIu64
              " (%zu keys it did not hold deleted)", ss->copy_items, ss->copy_start, n);
    }
    ss->copying = false;
    ss->progressed = true;
    /* this server holds the master's history now (and none of its own
     * rows from before: diverged ones included), durably before the
     * position moves on */
    if (ss->has_hist && !s->cfg.rw && s->cfg.ulog &&
        journal_history_reset(engine_journal(s->cfg.engine), &ss->hist) != KURA_OK)
        return KURA_EIO;
    s->want_copy = false;
    s->rts_hid = ss->hid;
    atomic_store(&s->pos, ss->copy_start);
    atomic_store(&s->copying, false);
    slave_set_state(s, REPL_ST_CONNECTED);
    slave_rts_write(s, ss->copy_start);
    return KURA_OK;
}

/* The welcome said BOOT (ss->copy_start set): where the copy goes.  A
 * read-only replica serves what it has until the copy is complete, then
 * the copy; one that takes writes applies the copy over what it has and
 * keeps the rest (its own changes may not have reached the master).
 * 0, or -1 (failure recorded). */
int slave_copy_begin(session *ss)
{
    repl_slave *s = ss->s;
    ss->copying = true;
    if (!s->cfg.rw && s->cfg.open_shadow)
        ss->shadow = s->cfg.open_shadow(s->cfg.shadow_arg);
    if (!ss->shadow && !s->cfg.rw) {
        if (s->cfg.open_shadow)
            logf_(s, KURA_LOG_ERROR, "replica: no store of its own for the copy: applying "
                  "it over the store as it comes");
        ss->stale = keyset_new();
        if (!ss->stale || engine_iterate(s->cfg.engine, add_stale, ss->stale) != KURA_OK) {
            slave_fail(s, KURA_LOG_ERROR, "out of memory listing the keys it holds");
            return -1;
        }
    }
    atomic_store(&s->copying, true);
    atomic_fetch_add(&s->copies, 1);
    slave_set_state(s, REPL_ST_COPYING);
    return 0;
}

/* One item of the copy: into the store of its own, or over the store. */
int slave_copy_item(session *ss, const ul_row *row)
{
    ss->copy_items++;
    if (ss->shadow) {
        kura_item it = {
            .key = row->key, .klen = row->klen, .val = row->val, .vlen = row->vlen,
            .flags = row->flags, .exptime = row->exptime, .cas = row->cas,
        };
        kura_clock clk = { .now = (int64_t)time(NULL) };
        return kura_store_put(ss->shadow, &it, KURA_PUT_ANY, 0, &clk);
    }
    if (ss->stale)
        keyset_remove(ss->stale, row->key, row->klen);
    return engine_apply_row(ss->s->cfg.engine, row);
}

/* The stream ended before COPY_DONE: what came is dropped (a store of its
 * own is removed by the next copy or start); the next connection starts
 * the copy again. */
void slave_copy_abort(session *ss)
{
    repl_slave *s = ss->s;
    keyset_free(ss->stale);
    if (ss->shadow)
        kura_store_close(ss->shadow);   /* removed by the next copy or start */
    atomic_store(&s->copying, false);
    logf_(s, KURA_LOG_ERROR, "replica: the copy was cut off; the next connection starts "
          "it again");
}
