/*
 * commit.c - the commit sources: the store, the update log, and the update
 * log plus the wait for replicas, each a kura_commit (journal.h).
 *
 * With an update log the group commit waits for the log alone: a change
 * whose row is durable is durable, since recovery puts it back into the
 * store.  Its sequence is the rows' log sequence numbers; with -syncrepl it
 * is their timestamps, which is what replicas acknowledge.  Without a log
 * the engine commits its store (engine_commit_source: through its swap
 * gate when the store can be swapped).
 */
#include "journal_int.h"

/* ---- a store -------------------------------------------------------------- */

static uint64_t store_write_seq(void *ctx)
{
    kura_store *s = ctx;
    return s->ops->write_seq(s);
}

static uint64_t store_thread_seq(void *ctx)
{
    kura_store *s = ctx;
    return s->ops->thread_seq ? s->ops->thread_seq(s) : s->ops->write_seq(s);
}

static int store_commit(void *ctx, uint64_t seq)
{
    kura_store *s = ctx;
    return s->ops->commit(s, seq);
}

bool journal_commit_store(kura_store *s, kura_commit *out)
{
    *out = (kura_commit){ "store", store_write_seq, store_thread_seq, store_commit, s };
    return s->ops->write_seq && s->ops->commit;
}

/* ---- the update log, and the replicas ------------------------------------- */

/* The update log's sequence: its log sequence numbers, or with the
 * replicas' wait its rows' timestamps, which is what replicas acknowledge.
 * own_thread: the calling thread's last row, if it appended one. */
static uint64_t log_seq(struct kura_journal *j, bool own_thread)
{
    bool by_ts = j->replica_wait != NULL;
    uint64_t lsn, ts;
    if (own_thread && feed_thread_pos(j, &lsn, &ts))
        return by_ts ? ts : lsn;
    return by_ts ? ul_last_ts(j->ulog) : ul_write_lsn(j->ulog);
}

static uint64_t log_write_seq(void *ctx)
{
    return log_seq(ctx, false);
}

static uint64_t log_thread_seq(void *ctx)
{
    return log_seq(ctx, true);
}

static int log_commit(void *ctx, uint64_t seq)
{
    struct kura_journal *j = ctx;
    if (!j->replica_wait)
        return ul_commit(j->ulog, seq);
    if (j->ulog_sync == KURA_SYNC_ALWAYS) {
        int rc = ul_commit(j->ulog, ul_write_lsn(j->ulog));
        if (rc)
            return rc;
    }
    return j->replica_wait(j->replica_wait_arg, seq);
}

void journal_set_replica_wait(struct kura_journal *j, int (*wait)(void *arg, uint64_t ts),
                              void *arg)
{
    j->replica_wait = wait;
    j->replica_wait_arg = arg;
}

bool journal_commit_source(struct kura_journal *j, kura_commit *out)
{
    if (!j->ulog)
        return false;
    *out = (kura_commit){ j->replica_wait ? "ulog+replicas" : "ulog", log_write_seq,
                          log_thread_seq, log_commit, j };
    return true;
}
