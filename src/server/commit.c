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
 * If a sync fails, nothing after the last durable sequence can be promised:
 * the connections waiting are closed without their replies (the client sees
 * no acknowledgement), and the error is logged.
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
    bool active;                        /* replies wait for durability (stays set at stop) */
} cm;

static _Atomic uint64_t durable_seq;    /* every change up to here is on stable storage */
static _Atomic uint64_t failed_seq;     /* a sync covering up to here failed; 0 = none */

uint64_t commit_durable(void) { return atomic_load_explicit(&durable_seq, memory_order_acquire); }
uint64_t commit_failed(void) { return atomic_load_explicit(&failed_seq, memory_order_acquire); }

bool commit_enabled(void) { return cm.active; }

uint64_t commit_write_seq(void)
{
    return cm.store->ops->write_seq(cm.store);
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
        while (!cm.stop && cm.requested <= atomic_load(&durable_seq))
            pthread_cond_wait(&cm.wake, &cm.lock);
        bool stopping = cm.stop;
        pthread_mutex_unlock(&cm.lock);

        /* Everything written by now is covered, not just what was asked. */
        uint64_t target = cm.store->ops->write_seq(cm.store);
        int rc = cm.store->ops->commit(cm.store, target);
        if (rc < 0) {
            log_msg(LOG_ERR, "sync failed (%s): closing connections waiting for it",
                    kura_strerror(rc));
            atomic_store(&failed_seq, target);
        } else if (target > atomic_load(&durable_seq)) {
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
    kura_store *store = engine_store_of(srv->engine);
    if (srv->settings->sync_mode != KURA_SYNC_ALWAYS || !store->ops->write_seq ||
        !store->ops->commit)
        return 0;                       /* nothing to wait for */
    cm.srv = srv;
    cm.store = store;
    atomic_store(&durable_seq, store->ops->write_seq(store));
    pthread_mutex_init(&cm.lock, NULL);
    pthread_cond_init(&cm.wake, NULL);
    if (pthread_create(&cm.thread, NULL, committer_main, NULL) != 0)
        return -1;
    cm.running = cm.active = true;
    return 0;
}

/* Makes everything durable one last time, releases the waiting replies and
 * stops the thread.  Call before the workers stop.  Replies to changes made
 * after this stay held and are never sent: they were not made durable. */
void commit_stop(void)
{
    if (!cm.running)
        return;
    pthread_mutex_lock(&cm.lock);
    cm.stop = true;
    pthread_cond_signal(&cm.wake);
    pthread_mutex_unlock(&cm.lock);
    pthread_join(cm.thread, NULL);
    pthread_mutex_destroy(&cm.lock);
    pthread_cond_destroy(&cm.wake);
    cm.running = false;
}
