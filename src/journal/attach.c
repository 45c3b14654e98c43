/*
 * attach.c - attaching the update log to the engine, and the journal's
 * thread.
 *
 * journal_attach decides from the store's watermark and the log's extent
 * which rows to apply again (apply.c), applies them, and only then makes
 * the log the feed's: the rows applied again are not logged twice.  The
 * thread it starts saves the watermark once a second (with the store's
 * state, in the store's own log, after the changes it covers) and syncs
 * the update log under -sync interval.  feed_stop ends it before the
 * engine's last state save.
 */
#include <errno.h>
#include <inttypes.h>
#include <stdio.h>
#include <time.h>

#include "kura/thread.h"
#include "journal_int.h"

static void *journal_main(void *arg);

int journal_attach(kura_engine *e, ul_log *log, int sync_mode,
                   void (*logfn)(int level, const char *line), uint64_t *redone)
{
    struct kura_journal *j = e->journal;
    kura_store_state st = { 0 };
    int rc;
    j->log = logfn;
    j->ulog_sync = sync_mode;
    *redone = 0;
    if (e->store->ops->load_state && (rc = e->store->ops->load_state(e->store, &st)) < 0)
        return rc;

    uint64_t w = st.ulog_ts;
    ul_extent ex;
    ul_get_extent(log, &ex);
    kura_store_usage u = { 0 };
    e->store->ops->usage(e->store, &u);
    if (ul_last_ts(log) == 0 && ex.from_ts == 0 && u.curr_items == 0)
        rc = ul_set_complete(log, true);            /* a new log over an empty store */
    else if (w == UINT64_MAX || (ul_last_ts(log) == 0 && u.curr_items))
        rc = ul_set_complete(log, false);           /* the store holds more than the log */
    else
        rc = KURA_OK;
    if (rc)
        return rc;
    ul_get_extent(log, &ex);            /* from_ts moved if the log is whole only from now */
    if (w == UINT64_MAX) {
        /* the store ran without the log since: what the log holds is older
         * than the store, and nothing is applied again */
        journal_log(e, KURA_LOG_INFO, "update log: the store was changed without it since "
                    "its last row; its rows are not applied again");
        w = ul_last_ts(log) > ex.from_ts ? ul_last_ts(log) : ex.from_ts;
    } else if (w < ex.from_ts) {
        if (w) {
            char line[200];
            snprintf(line, sizeof(line), "update log: it starts after the store's watermark "
                     "(%" PRIu64 " < %" PRIu64 "): applying the rows it holds", w, ex.from_ts);
            journal_log(e, KURA_LOG_ERROR, line);
        }
        w = ex.from_ts;
    }
    if ((rc = apply_redo(e, log, w, redone)) < 0)
        return rc;
    if ((rc = history_load(e, log)) < 0)
        return rc;

    j->ulog = log;
    engine_state_lock(e);
    e->saved_ulog_ts = 0;
    rc = engine_save_state_locked(e);
    engine_state_unlock(e);
    if (rc < 0 && rc != KURA_EREADONLY)
        return rc;
    j->thread_stop = false;
    if (pthread_create(&j->thread, NULL, journal_main, e) != 0) {
        j->ulog = NULL;
        return KURA_ESYS;
    }
    j->thread_running = true;
    return KURA_OK;
}

static void *journal_main(void *arg)
{
    kura_engine *e = arg;
    struct kura_journal *j = e->journal;
    pthread_mutex_lock(&j->thread_lock);
    while (!j->thread_stop) {
        struct timespec until;
        clock_gettime(CLOCK_MONOTONIC, &until);
        until.tv_sec += 1;
        while (!j->thread_stop &&
               pthread_cond_timedwait(&j->thread_wake, &j->thread_lock, &until) != ETIMEDOUT)
            ;
        if (j->thread_stop)
            break;
        pthread_mutex_unlock(&j->thread_lock);
        feed_tick(e);
        pthread_mutex_lock(&j->thread_lock);
    }
    pthread_mutex_unlock(&j->thread_lock);
    return NULL;
}

void feed_tick(kura_engine *e)
{
    struct kura_journal *j = e->journal;
    if (j->ulog_sync == KURA_SYNC_INTERVAL && !ul_failed(j->ulog))
        (void)ul_sync_now(j->ulog);     /* a failure is sticky in the log and logged there */
    engine_state_lock(e);
    uint64_t w = feed_watermark(e);
    if (w != e->saved_ulog_ts)
        (void)engine_save_state_locked(e);
    engine_state_unlock(e);
    history_tick(e, w, false);
}

void feed_stop(kura_engine *e)
{
    struct kura_journal *j = e->journal;
    if (!j || !j->thread_running)
        return;
    kura_thread_stop(j->thread, &j->thread_lock, &j->thread_wake, &j->thread_stop);
    j->thread_running = false;
    history_tick(e, journal_applied_ts(e), true);      /* a clean stop reads no log at start */
}

void attach_init(struct kura_journal *j)
{
    pthread_mutex_init(&j->thread_lock, NULL);
    kura_cond_init_mono(&j->thread_wake);
}

void attach_destroy(struct kura_journal *j)
{
    pthread_mutex_destroy(&j->thread_lock);
    pthread_cond_destroy(&j->thread_wake);
}
