/*
 * commit.c - group commit for -sync always, without blocking the workers.
 *
 * With -sync always a reply to a change may leave only once the change is on
 * stable storage.  Blocking a worker thread in fsync would stall every other
 * connection it serves and would batch at most one change per worker.
 * Instead a connection whose requests changed the store holds its replies
 * (conn.c), asks the committer for the store's current write sequence, and
 * goes on with nothing; this thread syncs up to the highest sequence asked
 * for, publishes it as durable, and wakes every worker, which releases the
 * connections now covered.  One fsync thus serves every change made on any
 * connection while the previous one ran, so many concurrent writers share
 * each sync.
 *
 * With -syncrepl N the same machinery also waits for replicas: the store
 * it syncs is the engine's commit source (engine_commit_source), whose
 * commit returns once N replicas hold the rows, or says that they did not
 * in time (KURA_COMMIT_ABANDONED): the connections waiting for that
 * sequence are then closed without their replies, as after a failed sync,
 * but later changes go on (-syncrepl-fail ack turns the timeout into a
 * plain acknowledgement instead, in main.c).  It runs under any -sync.
 *
 * A failed sync is final.  Once fsync has failed, the kernel may have
 * dropped the dirty pages it could not write and a later fsync can succeed
 * without them on disk, so retrying would acknowledge changes that are lost.
 * After the first failure the committer records it for good, logs one error
 * line and only waits for the stop; it never syncs again.  Every connection
 * waiting for, or later asking for, a sequence above the last durable one is
 * closed without its replies (commit_fate()): the client sees no
 * acknowledgement, which is the truth.  (The store refuses further writes
 * after a failed sync on its side.)
 *
 * The decisions are two pure functions, commit_next_step() for this thread
 * and commit_fate() for the connections, tested in tests/unit/test_commit.c.
 * The mutex and condition variable outlive the workers: commit_stop() ends
 * the thread before the workers stop (its last sync releases their replies),
 * and commit_free() destroys them after the workers are gone, since a worker
 * may still ask for a sequence until then.
 */
#include <pthread.h>
#include <stdlib.h>

#include "server.h"

static struct {
    kura_server *srv;
    kura_store *store;
    pthread_t thread;
    pthread_mutex_t lock;
    pthread_cond_t wake;
    uint64_t requested;                 /* highest sequence a connection waits for */
    bool stop;
    bool running;                       /* the thread runs */
    bool initialized;                   /* lock and wake exist */
    bool active;                        /* replies wait for durability (stays set at stop) */
} cm;

static _Atomic uint64_t durable_seq;    /* every change up to here is on stable storage */
static _Atomic uint64_t abandoned_seq;  /* -syncrepl: replicas did not confirm up to here */
static _Atomic bool failed;             /* a sync failed: nothing after durable_seq ever will be */

uint64_t commit_durable(void) { return atomic_load_explicit(&durable_seq, memory_order_acquire); }
bool commit_failed(void) { return atomic_load_explicit(&failed, memory_order_acquire); }

bool commit_enabled(void) { return cm.active; }

uint64_t commit_write_seq(void)
{
    return cm.store->ops->write_seq(cm.store);
}

uint64_t commit_thread_seq(void)
{
    kura_store *s = cm.store;
    return s->ops->thread_seq ? s->ops->thread_seq(s) : s->ops->write_seq(s);
}

/* failed is read before durable_seq: once failed is set durable_seq never
 * moves again, so a connection is closed only if its changes really are
 * past the last durable sequence. */
int commit_fate(uint64_t target)
{
    bool f = commit_failed();
    if (target <= commit_durable())
        return COMMIT_SEND;
    if (target <= atomic_load_explicit(&abandoned_seq, memory_order_acquire))
        return COMMIT_CLOSE;            /* replicas did not confirm in time */
    return f ? COMMIT_CLOSE : COMMIT_WAIT;
}

int commit_next_step(bool stop, bool has_failed, uint64_t requested, uint64_t durable)
{
    if (has_failed)
        return stop ? COMMIT_STEP_EXIT : COMMIT_STEP_WAIT;
    if (stop)
        return COMMIT_STEP_SYNC;        /* the last one; the thread exits after it */
    return requested > durable ? COMMIT_STEP_SYNC : COMMIT_STEP_WAIT;
}

void commit_request(uint64_t seq)
{
    pthread_mutex_lock(&cm.lock);
    if (seq > cm.requested) {
        cm.requested = seq;
        pthread_cond_signal(&cm.wake);
    }
    pthread_mutex_unlock(&cm.lock);
}

static void wake_workers(kura_server *srv)
{
    for (int i = 0; i < srv->nworkers; i++)
        worker_wake(&srv->workers[i]);
}

static void *committer_main(void *arg)
{
    (void)arg;
    pthread_mutex_lock(&cm.lock);
    for (;;) {
        int step = commit_next_step(cm.stop, commit_failed(), cm.requested, commit_durable());
        if (step == COMMIT_STEP_EXIT)
            break;
        if (step == COMMIT_STEP_WAIT) {
            pthread_cond_wait(&cm.wake, &cm.lock);
            continue;
        }
        bool stopping = cm.stop;
        pthread_mutex_unlock(&cm.lock);

        /* Everything written by now is covered, not just what was asked. */
        uint64_t target = cm.store->ops->write_seq(cm.store);
        int rc = cm.store->ops->commit(cm.store, target);
        if (rc == KURA_COMMIT_ABANDONED) {
            if (target > atomic_load(&abandoned_seq))
                atomic_store_explicit(&abandoned_seq, target, memory_order_release);
        } else if (rc < 0) {
            atomic_store_explicit(&failed, true, memory_order_release);
            log_msg(KURA_LOG_ERROR, "sync failed (%s): changes after this are not durable; closing "
                    "every connection waiting for them, and not syncing again",
                    kura_strerror(rc));
        } else if (target > commit_durable()) {
            atomic_store_explicit(&durable_seq, target, memory_order_release);
        }
        wake_workers(cm.srv);

        pthread_mutex_lock(&cm.lock);
        if (stopping)
            break;
    }
    pthread_mutex_unlock(&cm.lock);
    return NULL;
}

int commit_start(kura_server *srv)
{
    kura_store *store = engine_commit_source(srv->engine);
    if ((srv->settings->sync_mode != KURA_SYNC_ALWAYS && !srv->settings->syncrepl) ||
        !store->ops->write_seq || !store->ops->commit)
        return 0;                       /* nothing to wait for */
    return commit_start_store(srv, store);
}

int commit_start_store(kura_server *srv, kura_store *store)
{
    cm.srv = srv;
    cm.store = store;
    cm.requested = 0;
    cm.stop = false;
    atomic_store(&failed, false);
    atomic_store(&abandoned_seq, 0);
    atomic_store(&durable_seq, store->ops->write_seq(store));
    pthread_mutex_init(&cm.lock, NULL);
    pthread_cond_init(&cm.wake, NULL);
    cm.initialized = true;
    if (pthread_create(&cm.thread, NULL, committer_main, NULL) != 0)
        return -1;
    cm.running = cm.active = true;
    return 0;
}

/* Makes everything durable one last time (unless a sync has failed),
 * releases the waiting replies and stops the thread.  Call before the
 * workers stop.  Replies to changes made after this stay held and are never
 * sent: they were not made durable. */
void commit_stop(void)
{
    if (!cm.running)
        return;
    pthread_mutex_lock(&cm.lock);
    cm.stop = true;
    pthread_cond_signal(&cm.wake);
    pthread_mutex_unlock(&cm.lock);
    pthread_join(cm.thread, NULL);
    cm.running = false;
}

/* After the workers have stopped (they may call commit_request() until
 * then). */
void commit_free(void)
{
    if (!cm.initialized)
        return;
    pthread_mutex_destroy(&cm.lock);
    pthread_cond_destroy(&cm.wake);
    cm.initialized = false;
}
