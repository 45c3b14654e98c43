/*
 * feed.c - the change feed: every change the store makes, stamped and
 * logged under the key's lock, in the order it is applied.
 *
 * Stores call the feed (store.h, kura_feed) once they have decided to put
 * or delete, with the key's lock held and before they write; the engine's
 * read-modify-write callbacks (append, incr, touch, gat) call
 * journal_update() from under the same lock.  Either way the cas is handed
 * out there (the engine's next_cas hook), and the row goes into the update
 * log there, so two racing changes of one key get their cas and their rows
 * in the order the store applies them.  Each call carries the caller's
 * journal_change (from the store through kura_clock.feed_ctx): whether the
 * change is local, a master's row or one applied again at open, and where
 * the cas handed out and the row's timestamp are left for the caller.
 *
 * The update log is the write-ahead log of the pair.  A row is appended
 * before the store writes the change, so after a kill -9 the log holds
 * every change the store holds, and perhaps a few more: those whose thread
 * was between the two writes.  Rows hold results, not commands, so
 * applying one the store already has does no harm, and applying every row
 * after the watermark (watermark.c) in log order leaves each key as its
 * last row says (the engine applies them: src/engine/durable.c).  With
 * -sync always the server's group commit waits for the log alone
 * (commit.c): a change whose row is durable is durable, since recovery
 * puts it back into the store.
 */
#include <stdio.h>
#include <stdlib.h>

#include "journal_int.h"

static _Thread_local uint64_t tl_lsn;           /* the last row this thread appended */
static _Thread_local uint64_t tl_ts;            /* ... and its timestamp */
static _Thread_local const struct kura_journal *tl_lsn_journal;

/* Appends r for ch's change (NULL: a local change no caller follows);
 * *ts: its timestamp. */
static int append(struct kura_journal *j, journal_change *ch, ul_row *r, uint64_t *ts)
{
    if (ch && ch->kind == JOURNAL_REPLICA) {
        r->origin_ts = ch->row->origin_ts;
        r->sid = ch->row->sid;
    }
    ul_pos pos;
    int rc = ul_append(j->ulog, r, &pos);
    if (rc)
        return rc;
    /* a read-only replica's own rows (deletes after a copy, evictions) are
     * housekeeping, not changes a client made: not history */
    if (r->sid || !atomic_load_explicit(&j->replica, memory_order_relaxed))
        history_note(j, r->sid, r->origin_ts ? r->origin_ts : pos.ts, pos.seg);
    if (ch)
        ch->logged_ts = pos.ts;
    *ts = pos.ts;
    tl_lsn = pos.lsn;
    tl_ts = pos.ts;
    tl_lsn_journal = j;
    return KURA_OK;
}

bool feed_thread_pos(const struct kura_journal *j, uint64_t *lsn, uint64_t *ts)
{
    if (tl_lsn_journal != j)
        return false;
    *lsn = tl_lsn;
    *ts = tl_ts;
    return true;
}

/* A local change's cas, from the engine (journal_hooks.next_cas); kept in
 * ch too, where the engine finds it (a put's, or the one to reserve
 * through after JOURNAL_RESERVE). */
static int next_cas(struct kura_journal *j, journal_change *ch, uint64_t *cas)
{
    int rc = j->hooks.next_cas(j->hooks.arg, cas);
    if (ch)
        ch->cas = *cas;
    return rc;
}

static bool is_local(const journal_change *ch)
{
    return !ch || ch->kind == JOURNAL_LOCAL;
}

static int feed_put(void *arg, void *change, kura_item *it)
{
    struct kura_journal *j = arg;
    journal_change *ch = change;
    int rc;
    if (is_local(ch) && (rc = next_cas(j, ch, &it->cas)) != KURA_OK)
        return rc;
    if (!j->ulog || (ch && ch->kind == JOURNAL_REDO))
        return KURA_OK;
    ul_row r = {
        .type = UL_PUT, .key = it->key, .klen = it->klen, .val = it->val, .vlen = it->vlen,
        .flags = it->flags, .exptime = it->exptime, .cas = it->cas,
    };
    uint64_t ts;
    return append(j, ch, &r, &ts);
}

/* A delete logged: a dual master remembers when (the origin's time for a
 * master's row). */
static int append_del(struct kura_journal *j, journal_change *ch, ul_row *r)
{
    uint64_t ts;
    int rc = append(j, ch, r, &ts);
    if (rc == KURA_OK && j->tombs)
        tombs_put(j->tombs, r->key, r->klen,
                  ch && ch->kind == JOURNAL_REPLICA ? ch->row->origin_ts : ts);
    return rc;
}

static int feed_del(void *arg, void *change, const char *key, size_t klen)
{
    struct kura_journal *j = arg;
    journal_change *ch = change;
    if (!j->ulog || (ch && ch->kind == JOURNAL_REDO))
        return KURA_OK;
    ul_row r = { .type = UL_DEL, .key = key, .klen = klen };
    return append_del(j, ch, &r);
}

int journal_update(struct kura_journal *j, journal_change *ch, const char *key, size_t klen,
                   const kura_item *cur, kura_update *up)
{
    ul_row r = { .type = UL_PUT, .key = key, .klen = klen };
    switch (up->action) {
    case KURA_UPDATE_REPLACE:
        if (is_local(ch)) {             /* a master's row keeps its own */
            int rc = next_cas(j, ch, &up->cas);
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
    uint64_t ts;
    return r.type == UL_DEL ? append_del(j, ch, &r) : append(j, ch, &r, &ts);
}

int journal_flush(struct kura_journal *j, journal_change *ch, uint64_t oldest_cas,
                  int64_t flush_at)
{
    if (!j->ulog || (ch && ch->kind == JOURNAL_REDO))
        return KURA_OK;
    ul_row r = { .type = UL_FLUSH, .cas = oldest_cas, .exptime = flush_at };
    uint64_t ts;
    return append(j, ch, &r, &ts);
}

ul_log *journal_ulog(struct kura_journal *j)
{
    return j->ulog;
}

void journal_hook(struct kura_journal *j, kura_store *s)
{
    s->feed = &j->feed;
}

void journal_set_replica(struct kura_journal *j, bool replica)
{
    atomic_store(&j->replica, replica);
}

void journal_log(struct kura_journal *j, int level, const char *line)
{
    if (j->log)
        j->log(level, line);
    else
        fprintf(stderr, "%s\n", line);
}

int journal_new(const journal_hooks *hooks, struct kura_journal **out)
{
    struct kura_journal *j = calloc(1, sizeof(*j));
    *out = j;
    if (!j)
        return KURA_ENOMEM;
    j->hooks = *hooks;
    j->feed = (kura_feed){ feed_put, feed_del, j };
    watermark_init(j);
    attach_init(j);
    history_init(j);
    return KURA_OK;
}

void journal_free(struct kura_journal *j)
{
    if (!j)
        return;
    journal_stop(j);
    tombs_free(j->tombs);
    watermark_destroy(j);
    attach_destroy(j);
    history_destroy(j);
    free(j);
}
