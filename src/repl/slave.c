/*
 * slave.c - a replica following its master (include/kura/repl.h has the
 * protocol; docs/replication.md the operator's view).
 *
 * One thread: connect, send "repl <position> <sid>", apply every row that
 * comes, in order, through engine_apply_row() (which logs it in this
 * server's own update log, when it has one, with its origin's sid and
 * timestamp, so replicas can chain); ack what is applied; keep the position
 * in the rts file.  On a cut connection, a master that restarts or goes
 * silent (no heartbeat for 10 s), or a stream that does not decode, it
 * closes and connects again after a backoff that doubles from 100 ms to
 * 30 s.  Every way back to a connect waits the backoff (a refused stream,
 * one that breaks at once, a failed connect), and it starts again at
 * 100 ms only after a stream that worked (a row applied, a copy complete,
 * or STABLE_MS connected): a master that refuses is asked at most every
 * 30 s, never ten times a second.
 *
 * Before a row is applied, the master's welcome is checked (not with -rw):
 * a larger -I than this server's is refused (state "refused", retried with
 * the backoff); a history (journal.h) in which this server holds rows the
 * master never had is divergence (history_check).  Its rows are saved to a
 * file beside the update log, one WARN says so, and the next connection
 * asks for a full copy (copy=1), after which this server's history is the
 * master's; with -repl-divergence refuse it stops (exit 2) instead.
 *
 * The position (the master's timestamp of the last row applied) is written
 * to the rts file at most once a second and when a stream ends, and only
 * after engine_sync() has made the applied rows durable here: after a crash
 * the file is at or behind what the store holds, and the rows between are
 * applied again, which does no harm (rows are results).
 *
 * Rows whose origin is this server (a dual master's own changes coming
 * back) are skipped.  A full copy (BOOT) is applied over what the replica
 * holds; the keys it held that the copy does not bring are deleted when
 * COPY_DONE arrives (keys changed meanwhile come again in the rows after
 * the copy's start).
 *
 * This file is the thread (connect, a stream, the backoff), its start and
 * stop, the rts file and the failures; the stream's phases are in files of
 * their own (slave_int.h lists them).
 */
#include <errno.h>
#include <fcntl.h>
#include <inttypes.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <unistd.h>

#include "kura/thread.h"
#include "slave_int.h"

/* ---- the rts file ------------------------------------------------------------ */

/* "<pos> <hid, 16 hex>\n" (a file of one number, from before log ids:
 * hid 0, unknown). */
static uint64_t rts_read(repl_slave *s)
{
    FILE *f = fopen(s->rts_path, "r");
    unsigned long long v = 0, hid = 0;
    if (!f)
        return 0;
    int n = fscanf(f, "%llu %llx", &v, &hid);
    if (n < 1) {
        logf_(s, KURA_LOG_ERROR, "replica: %s does not hold a position; starting from a "
              "full copy", s->rts_path);
        v = 0;
    }
    fclose(f);
    s->rts_hid = n == 2 ? hid : 0;
    return v;
}

/* Makes what was applied durable, then writes the position beside the
 * file, syncs it and renames it into place. */
void slave_rts_write(repl_slave *s, uint64_t pos)
{
    if (pos == s->rts_saved && s->rts_hid == s->rts_saved_hid)
        return;
    s->rts_at_ms = mono_ms();
    int rc = engine_sync(s->cfg.engine);
    if (rc) {
        atomic_fetch_add(&s->rts_errors, 1);
        logf_(s, KURA_LOG_ERROR, "replica: cannot sync what it applied (%s): the position "
              "stays at %" PRIu64, kura_strerror(rc), s->rts_saved);
        return;
    }
    char tmp[4200], dir[4200];
    snprintf(tmp, sizeof(tmp), "%s.tmp", s->rts_path);
    snprintf(dir, sizeof(dir), "%s", s->rts_path);
    char *slash = strrchr(dir, '/');
    if (slash)
        *(slash == dir ? slash + 1 : slash) = '\0';
    else
        strcpy(dir, ".");
    int fd = open(tmp, O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0644);
    char b[48];
    int n = snprintf(b, sizeof(b), "%" PRIu64 " %016" PRIx64 "\n", pos, s->rts_hid);
    bool ok = fd >= 0 && write(fd, b, (size_t)n) == n && fsync(fd) == 0;
    if (fd >= 0)
        close(fd);
    ok = ok && rename(tmp, s->rts_path) == 0;
    if (ok) {
        int dfd = open(dir, O_RDONLY | O_DIRECTORY | O_CLOEXEC);
        ok = dfd >= 0 && fsync(dfd) == 0;
        if (dfd >= 0)
            close(dfd);
    }
    if (!ok) {
        atomic_fetch_add(&s->rts_errors, 1);
        logf_(s, KURA_LOG_ERROR, "replica: cannot write %s: %s", s->rts_path, strerror(errno));
        return;
    }
    s->rts_saved = pos;
    s->rts_saved_hid = s->rts_hid;
}

/* ---- state and errors ------------------------------------------------------ */

void slave_set_state(repl_slave *s, int st)
{
    atomic_store(&s->state, st);
}

/* Records the failure (stats repl's repl_last_error) and logs it at level,
 * unless it is the same as the last one: a master that refuses the same
 * way at every retry gives one line, not one per retry. */
void slave_fail(repl_slave *s, int level, const char *fmt, ...)
{
    char b[sizeof(s->last_error)];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(b, sizeof(b), fmt, ap);
    va_end(ap);
    pthread_mutex_lock(&s->lock);
    bool same = strcmp(b, s->last_logged) == 0;
    memcpy(s->last_error, b, sizeof(b));
    memcpy(s->last_logged, b, sizeof(b));
    pthread_mutex_unlock(&s->lock);
    if (!same)
        logf_(s, level, "replica: %s", b);
}

/* ---- the thread ---------------------------------------------------------------- */

/* Waits until mono_ms() reaches at (or a stop): stats show the time left. */
static void wait_until(repl_slave *s, uint64_t at)
{
    atomic_store(&s->next_attempt_ms, at);
    pthread_mutex_lock(&s->lock);
    while (!s->stop) {
        uint64_t now = mono_ms();
        if (now >= at)
            break;
        struct timespec until;
        clock_gettime(CLOCK_MONOTONIC, &until);
        uint64_t left = at - now;
        until.tv_sec += (time_t)(left / 1000);
        until.tv_nsec += (long)(left % 1000) * 1000000;
        if (until.tv_nsec >= 1000000000) {
            until.tv_sec++;
            until.tv_nsec -= 1000000000;
        }
        pthread_cond_timedwait(&s->wake, &s->lock, &until);
    }
    pthread_mutex_unlock(&s->lock);
    atomic_store(&s->next_attempt_ms, 0);
}

static void *slave_main(void *arg)
{
    repl_slave *s = arg;
    int backoff = BACKOFF_MIN_MS;
    for (;;) {
        pthread_mutex_lock(&s->lock);
        bool stop = s->stop;
        pthread_mutex_unlock(&s->lock);
        if (stop)
            break;
        char why[200] = "";
        int res = SESS_FAILED;
        /* A refused replica stays "refused" through its next attempts, until
         * one connects (the session says "connected") or fails otherwise:
         * shown as "connecting" for each attempt, /health and kuractl said
         * it was well for the length of every retry. */
        if (atomic_load(&s->state) != REPL_ST_REFUSED)
            slave_set_state(s, REPL_ST_CONNECTING);
        int fd = slave_connect(s, why, sizeof(why));
        if (fd >= 0) {
            atomic_fetch_add(&s->connects, 1);
            pthread_mutex_lock(&s->lock);
            s->fd = fd;
            pthread_mutex_unlock(&s->lock);
            res = slave_session_run(s, fd);
            pthread_mutex_lock(&s->lock);
            s->fd = -1;
            pthread_mutex_unlock(&s->lock);
            close(fd);
        } else {
            slave_fail(s, KURA_LOG_ERROR, "cannot connect to master %s:%d: %s; retrying with "
                       "backoff", s->host, s->port, why);
        }
        if (res == SESS_FATAL) {
            slave_set_state(s, REPL_ST_DIVERGED);
            break;                      /* the server stops (cfg.fatal) */
        }
        if (res == SESS_DIVERGED || res == SESS_OPEN)
            continue;                   /* at once, asking for a copy or without a login */
        if (res == SESS_WORKED)
            backoff = BACKOFF_MIN_MS;
        /* every other way back waits the backoff, which grows until a
         * stream works: a master that refuses is not asked ten times a
         * second */
        slave_set_state(s, res == SESS_REFUSED ? REPL_ST_REFUSED : REPL_ST_RECONNECTING);
        wait_until(s, mono_ms() + (uint64_t)backoff);
        if (res != SESS_WORKED)
            backoff = backoff * 2 > BACKOFF_MAX_MS ? BACKOFF_MAX_MS : backoff * 2;
    }
    if (atomic_load(&s->state) != REPL_ST_DIVERGED)
        slave_set_state(s, REPL_ST_STOPPED);
    return NULL;
}

int repl_slave_start(const repl_config *cfg, const char *host, int port, const char *rts_path,
                     repl_slave **out)
{
    repl_slave *s = calloc(1, sizeof(*s));
    if (!s)
        return KURA_ENOMEM;
    s->cfg = *cfg;
    snprintf(s->host, sizeof(s->host), "%s", host);
    s->port = port;
    snprintf(s->rts_path, sizeof(s->rts_path), "%s", rts_path);
    s->fd = -1;
    pthread_mutex_init(&s->lock, NULL);
    kura_cond_init_mono(&s->wake);
    uint64_t pos = rts_read(s);
    atomic_store(&s->pos, pos);
    s->rts_saved = pos;
    s->rts_saved_hid = s->rts_hid;
    if (pthread_create(&s->thread, NULL, slave_main, s) != 0) {
        pthread_mutex_destroy(&s->lock);
        pthread_cond_destroy(&s->wake);
        free(s);
        return KURA_ESYS;
    }
    *out = s;
    return KURA_OK;
}

void repl_slave_stop(repl_slave *s)
{
    if (!s)
        return;
    pthread_mutex_lock(&s->lock);
    s->stop = true;
    if (s->fd >= 0)
        shutdown(s->fd, SHUT_RDWR);
    pthread_cond_signal(&s->wake);
    pthread_mutex_unlock(&s->lock);
    pthread_join(s->thread, NULL);
    pthread_mutex_destroy(&s->lock);
    pthread_cond_destroy(&s->wake);
    free(s);
}
