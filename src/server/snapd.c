/*
 * snapd.c - kurad's snapshots (-bgs DIR -bgsi SEC -bgsc CODEC -bgsn N
 * -bgsstop; docs/operations.md): a thread that takes one every -bgsi
 * seconds, on the "snapshot" command and at a clean stop when asked; and
 * the restore at start of a missing or empty database from the newest
 * snapshot that verifies.
 *
 * The thread holds no store lock while it compresses or writes
 * (snap_take), and runs at a lower CPU priority than the workers (nice
 * 10): compression is the snapshot's cost, and requests come first
 * (docs/benchmarks.md has the latencies with and without, from
 * bench/snapshot.py).  The price: when it is preempted while it copies a
 * part under that part's lock, the part's writers wait for it to run
 * again.  One snapshot at a time: a request while one runs is answered by
 * that one.
 *
 * Tokyo Tyrant's copy and restore run here too, queued by the worker that
 * received them (snapd_tt_job), so that the worker serves its other
 * connections meanwhile: the request's connection waits (kura_job, its
 * reply deferred) until the job is done and its wake brings the worker
 * back to it.  The thread therefore runs with or without -bgs.
 */
#include <errno.h>
#include <inttypes.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/resource.h>
#include <sys/stat.h>
#include <sys/syscall.h>
#include <time.h>
#include <unistd.h>

#include "kura/escape.h"
#include "kura/snapshot.h"
#include "kura/testhooks.h"
#include "kura/thread.h"
#include "server.h"

#define SNAPD_JOBS_MAX 64               /* copies and restores waiting at most */

static struct {
    pthread_t thread;
    bool started;
    bool ran;                           /* halted, its stop snapshot not taken yet */
    pthread_mutex_t mu;
    pthread_cond_t cv;
    bool stop, requested;
    /* "stats snapshot", under mu */
    bool running;
    uint64_t count, failures, last_items, last_bytes, last_start_ts, last_ms;
    int64_t last_at;
    char last_path[4200], last_error[300];
    /* Tokyo Tyrant's copy and restore (kura_job), under mu, run in order */
    kura_job *jobs[SNAPD_JOBS_MAX];
    int njobs;
    /* wake_mu: a finished job wakes its worker unless the workers are
     * going (snapd_jobs_detach) */
    pthread_mutex_t wake_mu;
    bool detached;
    /* snapd_halt has begun: a job running ends at its next record */
    _Atomic bool halting;
} sd = { .mu = PTHREAD_MUTEX_INITIALIZER, .cv = PTHREAD_COND_INITIALIZER,
         .wake_mu = PTHREAD_MUTEX_INITIALIZER };

/* ---- taking ------------------------------------------------------------ */

static int take_one(kura_server *srv, const char *why)
{
    kura_settings *st = srv->settings;
    snap_take_cfg cfg = {
        .dir = st->bgs_dir, .codec = (kura_codec)st->bgsc, .keep = (unsigned)st->bgsn,
        .sid = (uint32_t)st->sid, .ulog = srv->ulog,
    };
    snap_info info;
    char path[4200] = "", err[300] = "";
    int64_t t0 = kura_mono_ms();
    pthread_mutex_lock(&sd.mu);
    sd.running = true;
    pthread_mutex_unlock(&sd.mu);
    log_msg(KURA_LOG_INFO, "snapshot (%s): starting, %s", why, codec_name(cfg.codec));
    int rc = snap_take(srv->engine, &cfg, &info, path, sizeof(path), err, sizeof(err));
    int64_t ms = kura_mono_ms() - t0;
    pthread_mutex_lock(&sd.mu);
    sd.running = false;
    if (rc) {
        sd.failures++;
        snprintf(sd.last_error, sizeof(sd.last_error), "%s", err[0] ? err : kura_strerror(rc));
    } else {
        sd.count++;
        sd.last_items = info.items;
        sd.last_bytes = info.file_bytes;
        sd.last_start_ts = info.start_ts;
        sd.last_ms = (uint64_t)ms;
        sd.last_at = time(NULL);
        snprintf(sd.last_path, sizeof(sd.last_path), "%s", path);
        sd.last_error[0] = '\0';
    }
    pthread_cond_broadcast(&sd.cv);
    pthread_mutex_unlock(&sd.mu);
    if (rc)
        log_msg(KURA_LOG_ERROR, "snapshot failed: %s", err[0] ? err : kura_strerror(rc));
    else
        log_msg(KURA_LOG_INFO, "snapshot %s: %" PRIu64 " items, %" PRIu64 " bytes (%" PRIu64
                " raw), update log from %" PRIu64 ", %" PRId64 " ms", path, info.items,
                info.file_bytes, info.raw_bytes, info.start_ts, ms);
    return rc;
}

static int run_job(kura_server *srv, kura_job *j);
static void job_finish(kura_job *j, int rc);

static void *snapd_main(void *arg)
{
    kura_server *srv = arg;
    /* below the workers: a snapshot's compression waits for requests */
    (void)setpriority(PRIO_PROCESS, (id_t)syscall(SYS_gettid), 10);
    int interval = srv->settings->bgs_dir ? srv->settings->bgsi : 0;
    int64_t next = interval ? kura_mono_ms() + (int64_t)interval * 1000 : INT64_MAX;
    pthread_mutex_lock(&sd.mu);
    while (!sd.stop) {
        if (sd.njobs) {
            kura_job *j = sd.jobs[0];
            memmove(sd.jobs, sd.jobs + 1, (size_t)--sd.njobs * sizeof(sd.jobs[0]));
            pthread_mutex_unlock(&sd.mu);
            job_finish(j, run_job(srv, j));
            pthread_mutex_lock(&sd.mu);
            continue;
        }
        if (!sd.requested && kura_mono_ms() < next) {
            struct timespec dl;
            clock_gettime(CLOCK_REALTIME, &dl);
            int64_t wait = next == INT64_MAX ? 3600000 : next - kura_mono_ms();
            if (wait > 3600000)
                wait = 3600000;
            dl.tv_sec += wait / 1000;
            dl.tv_nsec += (wait % 1000) * 1000000;
            if (dl.tv_nsec >= 1000000000) {
                dl.tv_sec++;
                dl.tv_nsec -= 1000000000;
            }
            pthread_cond_timedwait(&sd.cv, &sd.mu, &dl);
            continue;
        }
        bool asked = sd.requested;
        sd.requested = false;
        pthread_mutex_unlock(&sd.mu);
        take_one(srv, asked ? "asked for" : "periodic");
        if (interval)
            next = kura_mono_ms() + (int64_t)interval * 1000;
        pthread_mutex_lock(&sd.mu);
    }
    /* stopping: what waits is not done (its connections are going too) */
    while (sd.njobs)
        job_finish(sd.jobs[--sd.njobs], KURA_EFAILED);
    pthread_mutex_unlock(&sd.mu);
    return NULL;
}

/* "snapshot": starts a background snapshot (one already running counts);
 * "stats snapshot" says when it is done (docs/protocol.md).  Before the
 * thread has started the request waits for it. */
static void cmd_snapshot(void *ctx, kura_session *s, text_token *tok, int ntok, kura_buf *out)
{
    kura_server *srv = ctx;
    (void)tok;
    (void)ntok;
    if (!srv->settings->bgs_dir) {
        kura_session_reply(s, out,
                           "SERVER_ERROR snapshots are not enabled (start kurad with -bgs DIR)");
        return;
    }
    pthread_mutex_lock(&sd.mu);
    sd.requested = true;
    pthread_cond_broadcast(&sd.cv);
    pthread_mutex_unlock(&sd.mu);
    kura_session_reply(s, out, "OK");
}

/* ---- Tokyo Tyrant's copy and restore ------------------------------------ */

/* A copy: a snapshot of the whole store written at the job's path,
 * complete and safe when this returns KURA_OK (snap_take: written beside
 * the path, fsynced, renamed over it, the directory fsynced).  A snapshot
 * rather than ttserver's byte copy of the Cabinet file; it is restored
 * with kuractl snapshot restore (docs/migration.md). */
static int tt_copy(kura_server *srv, const char *path)
{
    kura_settings *st = srv->settings;
    snap_take_cfg cfg = {
        .path = path, .codec = (kura_codec)st->bgsc, .sid = (uint32_t)st->sid,
        .ulog = srv->ulog,
    };
    snap_info info;
    char out[4200], err[300] = "";
    int64_t t0 = kura_mono_ms();
    int rc = snap_take(srv->engine, &cfg, &info, out, sizeof(out), err, sizeof(err));
    if (rc)
        log_msg(KURA_LOG_ERROR, "Tokyo Tyrant copy to %s failed: %s", path, err);
    else
        log_msg(KURA_LOG_INFO, "Tokyo Tyrant copy: snapshot %s, %" PRIu64 " items, %" PRIu64
                " bytes in %lld ms", out, info.items, info.file_bytes,
                (long long)(kura_mono_ms() - t0));
    return rc;
}

static int run_job(kura_server *srv, kura_job *j)
{
    if (j->kj_what == KURA_JOB_TT_COPY)
        return tt_copy(srv, j->kj_path);
    return ttrestore_run(srv, j->kj_path, j->kj_ts, j->kj_opts);
}

static void job_finish(kura_job *j, int rc)
{
    pthread_mutex_lock(&sd.wake_mu);
    kura_job_finish(j, rc, !sd.detached);
    pthread_mutex_unlock(&sd.wake_mu);
}

/* kura_server_info.tt_job (src/proto/tt.c), on a worker: queues the job
 * for this thread and returns at once; the worker serves its other
 * connections meanwhile and the job's own waits for its wake.  ttserver's
 * "@command" form of copy (run a command) is refused, as is a job while
 * SNAPD_JOBS_MAX wait.  KURA_OK, or an error logged with its reason. */
int snapd_tt_job(void *ctx, kura_job *j)
{
    if (KURA_TEST_SWITCH(job_inline)) {
        job_finish(j, run_job(ctx, j));        /* on this worker, as before */
        return KURA_OK;
    }
    const char *what = j->kj_what == KURA_JOB_TT_COPY ? "copy" : "restore";
    const char *why = NULL;
    if (j->kj_path[0] == '\0')
        why = "no path";
    else if (j->kj_path[0] == '@' && j->kj_what == KURA_JOB_TT_COPY)
        why = "running a command is not served";
    pthread_mutex_lock(&sd.mu);
    if (!why && (!sd.started || sd.stop))
        why = "the server is stopping";
    else if (!why && sd.njobs == SNAPD_JOBS_MAX)
        why = "too many copies and restores waiting";
    if (!why) {
        sd.jobs[sd.njobs++] = j;        /* the session's reference becomes the runner's too */
        pthread_cond_broadcast(&sd.cv);
    }
    pthread_mutex_unlock(&sd.mu);
    if (why) {
        char shown[KURA_ESCAPED_MAX(256)];
        log_msg(KURA_LOG_ERROR, "Tokyo Tyrant %s '%s': %s", what,
                kura_escape(shown, sizeof(shown), j->kj_path, strlen(j->kj_path)), why);
        return KURA_EINVAL;
    }
    return KURA_OK;
}

void snapd_jobs_detach(void)
{
    pthread_mutex_lock(&sd.wake_mu);
    sd.detached = true;
    pthread_mutex_unlock(&sd.wake_mu);
}

static void stat_u64(kura_stat_fn emit, void *arg, const char *name, uint64_t v)
{
    char b[32];
    snprintf(b, sizeof(b), "%" PRIu64, v);
    emit(arg, name, b);
}

/* "stats snapshot": nothing without -bgs */
static void stats(void *ctx, kura_stat_fn emit, void *arg)
{
    kura_server *srv = ctx;
    if (!srv->settings->bgs_dir)
        return;
    pthread_mutex_lock(&sd.mu);
    emit(arg, "snapshot_dir", srv->settings->bgs_dir);
    emit(arg, "snapshot_codec", codec_name((kura_codec)srv->settings->bgsc));
    stat_u64(emit, arg, "snapshot_interval", (uint64_t)srv->settings->bgsi);
    stat_u64(emit, arg, "snapshot_running", sd.running || sd.requested);
    stat_u64(emit, arg, "snapshot_count", sd.count);
    stat_u64(emit, arg, "snapshot_failures", sd.failures);
    emit(arg, "snapshot_last_path", sd.last_path[0] ? sd.last_path : "-");
    stat_u64(emit, arg, "snapshot_last_time", (uint64_t)sd.last_at);
    stat_u64(emit, arg, "snapshot_last_items", sd.last_items);
    stat_u64(emit, arg, "snapshot_last_bytes", sd.last_bytes);
    stat_u64(emit, arg, "snapshot_last_ulog_ts", sd.last_start_ts);
    stat_u64(emit, arg, "snapshot_last_ms", sd.last_ms);
    emit(arg, "snapshot_last_error", sd.last_error[0] ? sd.last_error : "-");
    pthread_mutex_unlock(&sd.mu);
}

int snapd_register(kura_server *srv)
{
    const kura_command c = { "snapshot", cmd_snapshot, srv, 2, 2 };
    if (kura_cmdtab_add(srv->cmds, &c) != KURA_OK ||
        kura_cmdtab_add_stats(srv->cmds, "snapshot", stats, srv) != KURA_OK) {
        log_msg(KURA_LOG_ERROR, "cannot register the snapshot command");
        return -1;
    }
    return 0;
}

int snapd_start(kura_server *srv)
{
#ifdef KURA_TEST_HOOKS
    /* test_tt_copy's negative check (testhooks.h; test builds only) */
    if (getenv("KURA_TEST_JOB_INLINE"))
        kura_test.job_inline = true;
#endif
    /* always: Tokyo Tyrant's copy and restore run here too */
    if (pthread_create(&sd.thread, NULL, snapd_main, srv) != 0) {
        log_msg(KURA_LOG_ERROR, "cannot start the snapshot thread");
        return -1;
    }
    pthread_mutex_lock(&sd.mu);         /* the workers run: snapd_tt_job reads it */
    sd.started = true;
    pthread_mutex_unlock(&sd.mu);
    return 0;
}

bool snapd_stopping(void)
{
    return atomic_load(&sd.halting);
}

void snapd_halt(void)
{
    if (!sd.started)
        return;
    atomic_store(&sd.halting, true);
    kura_thread_stop(sd.thread, &sd.mu, &sd.cv, &sd.stop);
    sd.started = false;
    sd.ran = true;
}

void snapd_stop(kura_server *srv, bool clean)
{
    snapd_halt();
    if (!sd.ran)
        return;
    sd.ran = false;
    /* the workers have stopped: this one is the state the server stops in */
    if (clean && srv->settings->bgs_dir && srv->settings->bgs_stop)
        take_one(srv, "at stop");
}

/* ---- restoring at start ------------------------------------------------ */

static bool in_memory(const char *dbname)
{
    return !dbname || !*dbname || dbname[0] == '*' || dbname[0] == ':';
}

static void load_progress(void *arg, uint64_t items, uint64_t bytes)
{
    (void)arg;
    if (items && items % 1000000 == 0)
        log_msg(KURA_LOG_INFO, "restoring: %" PRIu64 " items, %" PRIu64 " bytes read", items, bytes);
}

/* Loads one snapshot into a fresh store (the shadow .copy.NAME on disk,
 * or *store itself for the cache).  0, or an error with *store unusable
 * for the cache (the caller opens a new one). */
static int load_into(kura_server *srv, const char *path, kura_store **store, snap_info *info,
                     uint64_t *max_cas, char *err, size_t errlen)
{
    const char *dbname = srv->settings->dbname;
    if (in_memory(dbname))
        return snap_load(*store, path, time(NULL), info, max_cas, load_progress, NULL, err,
                         errlen);
    kura_store *shadow = swap_open_shadow(srv);
    if (!shadow) {
        snprintf(err, errlen, "cannot create the store to load it into");
        return KURA_ESYS;
    }
    int rc = snap_load(shadow, path, time(NULL), info, max_cas, load_progress, NULL, err,
                       errlen);
    if (rc == KURA_OK) {
        /* the rows of the update log after the snapshot's start are applied
         * next (engine_attach_log); no cas at or below the loaded ones is
         * handed out again */
        kura_store_state st = { .max_cas = *max_cas, .ulog_ts = info->start_ts };
        if (shadow->ops->save_state && (rc = shadow->ops->save_state(shadow, &st)) < 0)
            snprintf(err, errlen, "cannot write the loaded store's state: %s",
                     kura_strerror(rc));
        if (rc == KURA_OK && shadow->ops->sync && (rc = shadow->ops->sync(shadow)) < 0)
            snprintf(err, errlen, "cannot sync the loaded store: %s", kura_strerror(rc));
    }
    kura_store_close(shadow);
    if (rc)
        return rc;
    kura_store_close(*store);
    *store = NULL;
    rc = swap_files(dbname, true);
    char oerr[512] = "";
    int orc = kura_store_open(dbname, &srv->store_cfg, store, oerr, sizeof(oerr));
    if (orc) {
        snprintf(err, errlen, "cannot open %s after loading: %s", dbname,
                 oerr[0] ? oerr : kura_strerror(orc));
        *store = NULL;
        return orc;
    }
    if (rc)
        snprintf(err, errlen, "cannot put the loaded copy in place");
    return rc;
}

int snapd_restore(kura_server *srv, kura_store **store, uint64_t *max_cas)
{
    kura_settings *st = srv->settings;
    *max_cas = 0;
    if (!st->bgs_dir)
        return 0;
    if (mkdir_parents(st->bgs_dir) < 0) {
        log_msg(KURA_LOG_ERROR, "cannot create the snapshot directory %s: %s", st->bgs_dir,
                strerror(errno));
        return -1;
    }
    int tidied = snap_tidy(st->bgs_dir, NULL);
    if (tidied)
        log_msg(KURA_LOG_INFO, "snapshots: removed %d unfinished file(s) in %s", tidied, st->bgs_dir);
    if (!snap_store_blank(*store))
        return 0;                       /* recovered as it is, never overwritten */
    snap_entry *v;
    size_t n;
    if (snap_list(st->bgs_dir, &v, &n) != KURA_OK) {
        log_msg(KURA_LOG_ERROR, "snapshots: cannot read %s: %s", st->bgs_dir, strerror(errno));
        return -1;
    }
    if (n == 0)
        log_msg(KURA_LOG_INFO, "snapshots: none in %s; starting empty", st->bgs_dir);
    int ret = 0;
    for (size_t i = 0; i < n; i++) {
        snap_info info;
        char err[600] = "";
        int64_t t0 = kura_mono_ms();
        int rc = load_into(srv, v[i].path, store, &info, max_cas, err, sizeof(err));
        if (rc == KURA_OK) {
            log_msg(KURA_LOG_INFO, "restored %" PRIu64 " items from snapshot %s (%s, taken by "
                    "server %u, update log from %" PRIu64 ") in %" PRId64 " ms", info.items,
                    v[i].path, info.backend, info.sid, info.start_ts, kura_mono_ms() - t0);
            /* a file's state holds the cas; the cache has none to hold it */
            if (!in_memory(st->dbname))
                *max_cas = 0;
            break;
        }
        log_msg(KURA_LOG_ERROR, "snapshot %s not used: %s%s", v[i].path, err[0] ? err : kura_strerror(rc),
                i + 1 < n ? "; trying the one before it" : "; starting empty");
        *max_cas = 0;
        /* a partly loaded cache is thrown away; a file's copy never replaced it */
        if (!*store || in_memory(st->dbname)) {
            if (*store)
                kura_store_close(*store);
            char oerr[512] = "";
            if (kura_store_open(st->dbname, &srv->store_cfg, store, oerr, sizeof(oerr))) {
                log_msg(KURA_LOG_ERROR, "cannot open database: %s", oerr);
                *store = NULL;
                ret = -1;
                break;
            }
        }
    }
    free(v);
    return ret;
}
