/*
 * attach.c - attaching the update log, and the journal's thread.
 *
 * journal_attach decides from the store's watermark and the log's extent
 * which rows to apply again, hands them to the engine (which applies them
 * as JOURNAL_REDO changes), and only then makes the log the feed's: the
 * rows applied again are not logged twice.  The thread journal_start
 * starts has the engine save the watermark once a second (the save_state
 * hook: with the engine's state, in the store's own log, after the
 * changes it covers) and syncs the update log under -sync interval.
 * journal_stop ends it before the engine's last state save.
 */
#include <errno.h>
#include <inttypes.h>
#include <stdio.h>
#include <time.h>

#include "kura/thread.h"
#include "journal_int.h"

static void *journal_main(void *arg);
static void journal_tick(struct kura_journal *j);

/* The first row to apply again, from the store's watermark w and the
 * log's extent (marking the log whole or not where that is new). */
static int redo_from(struct kura_journal *j, kura_store *s, ul_log *log, uint64_t w,
                     uint64_t *from)
{
    ul_extent ex;
    ul_get_extent(log, &ex);
    kura_store_usage u = { 0 };
    s->ops->usage(s, &u);
    int rc;
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
        journal_log(j, KURA_LOG_INFO, "update log: the store was changed without it since "
                    "its last row; its rows are not applied again");
        w = ul_last_ts(log) > ex.from_ts ? ul_last_ts(log) : ex.from_ts;
    } else if (w < ex.from_ts) {
        if (w) {
            char line[200];
            snprintf(line, sizeof(line), "update log: it starts after the store's watermark "
                     "(%" PRIu64 " < %" PRIu64 "): applying the rows it holds", w, ex.from_ts);
            journal_log(j, KURA_LOG_ERROR, line);
        }
        w = ex.from_ts;
    }
    *from = w;
    return KURA_OK;
}

/* The rows after from, each to redo(arg, row). */
static int redo_rows(ul_log *log, uint64_t from, int (*redo)(void *arg, const ul_row *row),
                     void *arg, uint64_t *redone)
{
    ul_reader *rd;
    int rc = ul_reader_open(log, from, &rd);
    if (rc != KURA_OK)
        return rc;
    ul_row row;
    while ((rc = ul_reader_next(rd, &row)) == KURA_OK) {
        if ((rc = redo(arg, &row)) < 0)
            break;
        (*redone)++;
    }
    ul_reader_close(rd);
    return rc == UL_CAUGHT_UP || rc >= 0 ? KURA_OK : rc;
}

int journal_attach(struct kura_journal *j, kura_store *s, ul_log *log, int sync_mode,
                   void (*logfn)(int level, const char *line),
                   int (*redo)(void *arg, const ul_row *row), void *arg, uint64_t *redone)
{
    kura_store_state st = { 0 };
    uint64_t from = 0;
    int rc;
    j->log = logfn;
    j->ulog_sync = sync_mode;
    *redone = 0;
    if (s->ops->load_state && (rc = s->ops->load_state(s, &st)) < 0)
        return rc;
    if ((rc = redo_from(j, s, log, st.ulog_ts, &from)) < 0)
        return rc;
    if ((rc = redo_rows(log, from, redo, arg, redone)) < 0)
        return rc;
    if ((rc = history_load(j, log)) < 0)
        return rc;
    j->ulog = log;
    return KURA_OK;
}

int journal_start(struct kura_journal *j)
{
    j->thread_stop = false;
    if (pthread_create(&j->thread, NULL, journal_main, j) != 0) {
        j->ulog = NULL;
        return KURA_ESYS;
    }
    j->thread_running = true;
    return KURA_OK;
}

static void *journal_main(void *arg)
{
    struct kura_journal *j = arg;
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
        journal_tick(j);
        pthread_mutex_lock(&j->thread_lock);
    }
    pthread_mutex_unlock(&j->thread_lock);
    return NULL;
}

static void journal_tick(struct kura_journal *j)
{
    if (j->ulog_sync == KURA_SYNC_INTERVAL && !ul_failed(j->ulog))
        (void)ul_sync_now(j->ulog);     /* a failure is sticky in the log and logged there */
    uint64_t w = j->hooks.save_state(j->hooks.arg);
    history_tick(j, w, false);
}

void journal_stop(struct kura_journal *j)
{
    if (!j || !j->thread_running)
        return;
    kura_thread_stop(j->thread, &j->thread_lock, &j->thread_wake, &j->thread_stop);
    j->thread_running = false;
    history_tick(j, journal_applied_ts(j), true);      /* a clean stop reads no log at start */
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
