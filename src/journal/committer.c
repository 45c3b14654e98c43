/*
 * committer.c - group commit for -sync always, without blocking the workers.
 *
 * With -sync always a reply to a change may leave only once the change is on
 * stable storage.  Blocking a worker thread in fsync would stall every other
 * connection it serves and would batch at most one change per worker.
 * Instead a connection whose requests changed the store holds its replies
 * (src/server/conn.c), asks the committer for the source's current write
 * sequence, and goes on with nothing; this thread commits up to the highest
 * sequence asked for, publishes it as durable, and wakes every worker (the
 * wake callback), which releases the connections now covered.  One fsync
 * thus serves every change made on any connection while the previous one
 * ran, so many concurrent writers share each sync.
 *
 * The source is a kura_commit (journal.h): the store, the update log, or
 * with -syncrepl N the update log and the replicas (engine_commit_source),
 * whose commit returns once N replicas hold the rows, or says that they did
 * not in time (KURA_COMMIT_ABANDONED): the connections waiting for that
 * sequence are then closed without their replies, as after a failed sync,
 * but later changes go on (-syncrepl-fail ack turns the timeout into a plain
 * acknowledgement instead, in src/server/replctl.c).  It runs under any -sync.
 * An abandoned sequence is settled: its waiters have had their answer, so
 * the committer takes it as done (commit_next_step() is given the higher of
 * durable and abandoned) and waits for a request above it, rather than
 * waiting for the same rows again, a timeout after timeout while idle.
 *
 * A failed sync is final.  Once fsync has failed, the kernel may have
 * dropped the dirty pages it could not write and a later fsync can succeed
 * without them on disk, so retrying would acknowledge changes that are lost.
 * After the first failure the committer records it for good, logs one error
 * line (the log callback) and only waits for the stop; it never syncs again.
 * Every connection waiting for, or later asking for, a sequence above the
 * last durable one is closed without its replies (commit_fate()): the client
 * sees no acknowledgement, which is the truth.  (The store refuses further
 * writes after a failed sync on its side.)
 *
 * With automatic failover (src/ha/) a write fence (kura/fence.h) comes
 * before every acknowledgement: once the leader's lease margin has passed,
 * the waiters are closed unanswered, as for an abandoned sequence.
 *
 * The decisions are two pure functions, commit_next_step() for this thread
 * and commit_fate_of() for the connections, tested in
 * tests/unit/test_commit.c.  The server owns the committer (kura_server's
 * committer): committer_stop() ends the thread before the workers stop (its
 * last sync releases their replies), and committer_free() frees it after the
 * workers are gone, since a worker may still ask for a sequence until then.
 */
#include <pthread.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>

#include "kura/journal.h"
#include "kura/thread.h"

struct journal_committer {
    committer_config cfg;
    pthread_t thread;
    pthread_mutex_t lock;
    pthread_cond_t wake;
    uint64_t requested;                 /* lock: highest sequence a waiter waits for */
    bool stop;                          /* lock */
    bool running;                       /* the thread runs */
    _Atomic uint64_t durable;           /* every change up to here is durable */
    _Atomic uint64_t abandoned;         /* -syncrepl: replicas did not confirm up to here */
    _Atomic bool failed;                /* a commit failed: nothing after durable ever will be */
};

uint64_t committer_durable(journal_committer *c)
{
    return atomic_load_explicit(&c->durable, memory_order_acquire);
}

bool committer_failed(journal_committer *c)
{
    return c && atomic_load_explicit(&c->failed, memory_order_acquire);
}

uint64_t committer_write_seq(journal_committer *c)
{
    return c->cfg.source.write_seq(c->cfg.source.ctx);
}

uint64_t committer_thread_seq(journal_committer *c)
{
    const kura_commit *s = &c->cfg.source;
    return s->thread_seq ? s->thread_seq(s->ctx) : s->write_seq(s->ctx);
}

int commit_fate_of(uint64_t target, uint64_t durable, uint64_t abandoned, bool failed)
{
    if (target <= durable)
        return COMMIT_SEND;
    if (target <= abandoned)
        return COMMIT_CLOSE;            /* replicas did not confirm in time */
    return failed ? COMMIT_CLOSE : COMMIT_WAIT;
}

/* The fence first (one load and a clock read), then failed is read
 * before durable: once failed is set durable never moves
 * again, so a waiter is closed only if its changes really are past the
 * last durable sequence. */
int commit_fate(journal_committer *c, uint64_t target)
{
    /* the write fence (failover): a leader past its lease's margin, or a
     * process that slept through it, acknowledges nothing (fence.h) */
    if (!kura_fence_open(c->cfg.fence))
        return COMMIT_CLOSE;
    bool f = committer_failed(c);
    uint64_t d = committer_durable(c);
    return commit_fate_of(target, d, atomic_load_explicit(&c->abandoned, memory_order_acquire),
                          f);
}

int commit_next_step(bool stop, bool has_failed, uint64_t requested, uint64_t durable)
{
    if (has_failed)
        return stop ? COMMIT_STEP_EXIT : COMMIT_STEP_WAIT;
    if (stop)
        return COMMIT_STEP_SYNC;        /* the last one; the thread exits after it */
    return requested > durable ? COMMIT_STEP_SYNC : COMMIT_STEP_WAIT;
}

void committer_request(journal_committer *c, uint64_t seq)
{
    pthread_mutex_lock(&c->lock);
    if (seq > c->requested) {
        c->requested = seq;
        pthread_cond_signal(&c->wake);
    }
    pthread_mutex_unlock(&c->lock);
}

static void log_failure(journal_committer *c, int rc)
{
    if (!c->cfg.log)
        return;
    char line[300];
    snprintf(line, sizeof(line), "sync failed (%s): changes after this are not durable; closing "
             "every connection waiting for them, and not syncing again", kura_strerror(rc));
    c->cfg.log(KURA_LOG_ERROR, line);
}

static void *committer_main(void *arg)
{
    journal_committer *c = arg;
    const kura_commit *src = &c->cfg.source;
    pthread_mutex_lock(&c->lock);
    for (;;) {
        /* what waiters have had their answer for: durable, or abandoned */
        uint64_t settled = committer_durable(c);
        uint64_t abandoned = atomic_load_explicit(&c->abandoned, memory_order_acquire);
        if (abandoned > settled)
            settled = abandoned;
        int step = commit_next_step(c->stop, committer_failed(c), c->requested, settled);
        if (step == COMMIT_STEP_EXIT)
            break;
        if (step == COMMIT_STEP_WAIT) {
            pthread_cond_wait(&c->wake, &c->lock);
            continue;
        }
        bool stopping = c->stop;
        pthread_mutex_unlock(&c->lock);

        /* Everything written by now is covered, not just what was asked. */
        uint64_t target = src->write_seq(src->ctx);
        int rc = src->commit(src->ctx, target);
        if (rc == KURA_COMMIT_ABANDONED) {
            if (target > atomic_load(&c->abandoned))
                atomic_store_explicit(&c->abandoned, target, memory_order_release);
        } else if (rc < 0) {
            atomic_store_explicit(&c->failed, true, memory_order_release);
            log_failure(c, rc);
        } else if (target > committer_durable(c)) {
            atomic_store_explicit(&c->durable, target, memory_order_release);
        }
        if (c->cfg.wake)
            c->cfg.wake(c->cfg.wake_arg);

        pthread_mutex_lock(&c->lock);
        if (stopping)
            break;
    }
    pthread_mutex_unlock(&c->lock);
    return NULL;
}

int committer_start(const committer_config *cfg, journal_committer **out)
{
    *out = NULL;
    journal_committer *c = calloc(1, sizeof(*c));
    if (!c)
        return KURA_ENOMEM;
    c->cfg = *cfg;
    atomic_store(&c->durable, cfg->source.write_seq(cfg->source.ctx));
    pthread_mutex_init(&c->lock, NULL);
    pthread_cond_init(&c->wake, NULL);
    if (pthread_create(&c->thread, NULL, committer_main, c) != 0) {
        committer_free(c);
        return KURA_ESYS;
    }
    c->running = true;
    *out = c;
    return KURA_OK;
}

void committer_stop(journal_committer *c)
{
    if (!c || !c->running)
        return;
    kura_thread_stop(c->thread, &c->lock, &c->wake, &c->stop);
    c->running = false;
}

void committer_free(journal_committer *c)
{
    if (!c)
        return;
    committer_stop(c);
    pthread_mutex_destroy(&c->lock);
    pthread_cond_destroy(&c->wake);
    free(c);
}
