/*
 * feed.c - the change feed: every change the store makes, stamped and
 * logged under the key's lock, in the order it is applied.
 *
 * Stores call the feed (store.h, kura_feed) once they have decided to put
 * or delete, with the key's lock held and before they write; the engine's
 * read-modify-write callbacks (append, incr, touch, gat) call
 * feed_update() from under the same lock.  Either way the cas is handed out
 * there (engine_next_cas), and the row goes into the update log there, so
 * two racing changes of one key get their cas and their rows in the order
 * the store applies them.
 *
 * The update log is the write-ahead log of the pair.  A row is appended
 * before the store writes the change, so after a kill -9 the log holds
 * every change the store holds, and perhaps a few more: those whose thread
 * was between the two writes.  Rows hold results, not commands, so
 * applying one the store already has does no harm, and applying every row
 * after the watermark (watermark.c) in log order leaves each key as its
 * last row says (apply.c).  With -sync always the server's group commit
 * waits for the log alone (commit.c): a change whose row is durable is
 * durable, since recovery puts it back into the store.
 */
#include <stdio.h>
#include <stdlib.h>

#include "journal_int.h"

_Thread_local const change_ctx *journal_tl_ctx;
_Thread_local uint64_t journal_tl_logged_ts;
static _Thread_local uint64_t tl_lsn;           /* the last row this thread appended */
static _Thread_local uint64_t tl_ts;            /* ... and its timestamp */
static _Thread_local const kura_engine *tl_lsn_engine;
static _Thread_local uint64_t tl_last_cas;      /* the cas feed_put last gave (feed_last_cas) */

static int append(kura_engine *e, ul_row *r)
{
    const change_ctx *cx = journal_tl_ctx;
    if (cx && cx->kind == CH_REPLICA) {
        r->origin_ts = cx->row->origin_ts;
        r->sid = cx->row->sid;
    }
    ul_pos pos;
    int rc = ul_append(e->journal->ulog, r, &pos);
    if (rc)
        return rc;
    /* a read-only replica's own rows (deletes after a copy, evictions) are
     * housekeeping, not changes a client made: not history */
    if (r->sid || !atomic_load_explicit(&e->replica, memory_order_relaxed))
        history_note(e->journal, r->sid, r->origin_ts ? r->origin_ts : pos.ts, pos.seg);
    journal_tl_logged_ts = pos.ts;
    tl_lsn = pos.lsn;
    tl_ts = pos.ts;
    tl_lsn_engine = e;
    return KURA_OK;
}

bool feed_thread_pos(const kura_engine *e, uint64_t *lsn, uint64_t *ts)
{
    if (tl_lsn_engine != e)
        return false;
    *lsn = tl_lsn;
    *ts = tl_ts;
    return true;
}

static int feed_put(void *arg, kura_item *it)
{
    kura_engine *e = arg;
    const change_ctx *cx = journal_tl_ctx;
    int rc;
    if (!cx && (rc = engine_next_cas(e, &it->cas)) != KURA_OK)
        return rc;
    tl_last_cas = it->cas;
    if (!e->journal->ulog || (cx && cx->kind == CH_REDO))
        return KURA_OK;
    ul_row r = {
        .type = UL_PUT, .key = it->key, .klen = it->klen, .val = it->val, .vlen = it->vlen,
        .flags = it->flags, .exptime = it->exptime, .cas = it->cas,
    };
    return append(e, &r);
}

static int feed_del(void *arg, const char *key, size_t klen)
{
    kura_engine *e = arg;
    struct kura_journal *j = e->journal;
    const change_ctx *cx = journal_tl_ctx;
    if (!j->ulog || (cx && cx->kind == CH_REDO))
        return KURA_OK;
    ul_row r = { .type = UL_DEL, .key = key, .klen = klen };
    int rc = append(e, &r);
    if (rc == KURA_OK && j->tombs)
        tombs_put(j->tombs, key, klen, cx ? cx->row->origin_ts : journal_tl_logged_ts);
    return rc;
}

int feed_update(kura_engine *e, const kura_item *cur, kura_update *up)
{
    return feed_update_key(e, cur ? cur->key : NULL, cur ? cur->klen : 0, cur, up);
}

int feed_update_key(kura_engine *e, const char *key, size_t klen, const kura_item *cur,
                    kura_update *up)
{
    struct kura_journal *j = e->journal;
    const change_ctx *cx = journal_tl_ctx;
    ul_row r = { .type = UL_PUT, .key = key, .klen = klen };
    switch (up->action) {
    case KURA_UPDATE_REPLACE:
        if (!cx) {                      /* a replica's row keeps its own */
            int rc = engine_next_cas(e, &up->cas);
            if (rc != KURA_OK)
                return rc;
        }
        if (!j->ulog)
            return KURA_OK;
        r.flags = up->flags;
        r.exptime = up->exptime;
        r.cas = up->cas;
        r.val = up->part[0].base;
        r.vlen = up->part[0].len;
        r.val2 = up->part[1].base;
        r.vlen2 = up->part[1].len;
        break;
    case KURA_UPDATE_TOUCH:
        if (!j->ulog || !cur)
            return KURA_OK;
        r.flags = cur->flags;
        r.exptime = up->exptime;
        r.cas = cur->cas;
        r.val = cur->val;
        r.vlen = cur->vlen;
        break;
    case KURA_UPDATE_REMOVE:
        if (!j->ulog || !cur)
            return KURA_OK;
        r.type = UL_DEL;
        break;
    default:
        return KURA_OK;
    }
    if (!r.key)
        return KURA_EINVAL;
    int rc = append(e, &r);
    if (rc == KURA_OK && r.type == UL_DEL && j->tombs)
        tombs_put(j->tombs, r.key, r.klen, cx ? cx->row->origin_ts : journal_tl_logged_ts);
    return rc;
}

uint64_t feed_last_cas(void)
{
    return tl_last_cas;
}

int feed_flush(kura_engine *e, uint64_t oldest_cas, int64_t flush_at)
{
    if (!e->journal->ulog || (journal_tl_ctx && journal_tl_ctx->kind == CH_REDO))
        return KURA_OK;
    ul_row r = { .type = UL_FLUSH, .cas = oldest_cas, .exptime = flush_at };
    return append(e, &r);
}

ul_log *feed_log(kura_engine *e)
{
    return e->journal->ulog;
}

void feed_hook(kura_engine *e, kura_store *s)
{
    s->feed = &e->journal->feed;
}

void journal_log(kura_engine *e, int level, const char *line)
{
    if (e->journal->log)
        e->journal->log(level, line);
    else
        fprintf(stderr, "%s\n", line);
}

int feed_init(kura_engine *e)
{
    struct kura_journal *j = calloc(1, sizeof(*j));
    e->journal = j;
    if (!j)
        return KURA_ENOMEM;
    j->feed = (kura_feed){ feed_put, feed_del, e };
    watermark_init(j);
    attach_init(j);
    history_init(j);
    return KURA_OK;
}

void feed_destroy(kura_engine *e)
{
    struct kura_journal *j = e->journal;
    if (!j)
        return;
    feed_stop(e);
    tombs_free(j->tombs);
    watermark_destroy(j);
    attach_destroy(j);
    history_destroy(j);
    free(j);
    e->journal = NULL;
}
