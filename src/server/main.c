/*
 * main.c - kurad: options, start-up, the main loop, and a clean stop.
 *
 * The main thread owns the listening sockets, the signal handlers and a
 * one-second timer (clock, expiry sweep, folded log lines); the workers own
 * the connections.  It never syncs while serving: -sync interval is the
 * store's own thread's job, so accepting never waits behind a disk.  SIGTERM and SIGINT stop accepting, let the workers answer
 * what they have read, sync and close the store, remove the pid file, and
 * exit 0; a watchdog (daemon.c) ends the process after STOP_TIMEOUT seconds
 * if that hangs (a store stuck in I/O), so a stop is always bounded.
 * SIGHUP reopens the log file.
 *
 * Start-up order matters: detach (-dmn) before anything is opened or any
 * thread exists; the log file and the pid file lock are opened and the
 * sockets bound as the starting user (root can bind port 80 and write in
 * /var/log and /run); then -u gives up root, the store is opened (so its
 * files belong to that user), the workers start, the sockets listen (a
 * client never waits behind a long recovery: until then it is refused), the
 * pid is written and kurad says it is ready (to the -dmn parent and to
 * systemd).
 */
#include <errno.h>
#include <malloc.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "kura/thread.h"
#include "kura/watch.h"
#include "server.h"

#define SWEEP_BUDGET 2000               /* items examined per second by the sweep */
#define SWEEP_CHUNK 16                  /* ... in calls of this many */
#define SWEEP_MAX_MS 5                  /* ... for at most this long a second */
#define STOP_TIMEOUT 60                 /* seconds a stop may take before the watchdog ends it */

/* The exit status of a failed start: 1, or 2 for a database name or
 * parameter refused (open_store), as for a bad option. */
static int start_status = 1;

static void on_hup(evutil_socket_t sig, short what, void *arg)
{
    (void)sig; (void)what; (void)arg;
    log_reopen();
    tls_on_hup();                       /* -Z: the certificates, as refresh_certs */
}

static void on_signal(evutil_socket_t sig, short what, void *arg)
{
    kura_server *srv = arg;
    (void)what;
    log_msg(KURA_LOG_INFO, "signal %d (%s): stopping", (int)sig, strsignal((int)sig));
    srv->stopping = true;
    event_base_loopbreak(srv->base);
}

/* A signal whose default action would kill the server without a sync
 * (SIGUSR2, SIGALRM): caught, logged and otherwise ignored. */
static void on_ignored(evutil_socket_t sig, short what, void *arg)
{
    (void)what; (void)arg;
    log_msg(KURA_LOG_INFO, "signal %d (%s) ignored", (int)sig, strsignal((int)sig));
}

/* What each signal does (docs/options.md, "Signals").  SIGUSR1 stops as
 * SIGTERM does, as memcached's does.  SIGPIPE is ignored outright (not
 * here): a peer that closes makes a write fail with EPIPE, which the
 * connection handles; a log line for each would be noise. */
static const struct {
    int sig;
    event_callback_fn fn;
} signal_actions[] = {
    { SIGTERM, on_signal }, { SIGINT, on_signal }, { SIGUSR1, on_signal },
    { SIGHUP, on_hup }, { SIGUSR2, on_ignored }, { SIGALRM, on_ignored },
};
#define NSIGNALS (sizeof(signal_actions) / sizeof(signal_actions[0]))

/* Catches every signal of signal_actions on the main loop: 0, or -1
 * (what was made is in evs for signals_free). */
static int signals_setup(kura_server *srv, struct event *evs[NSIGNALS])
{
    for (size_t i = 0; i < NSIGNALS; i++) {
        evs[i] = evsignal_new(srv->base, signal_actions[i].sig, signal_actions[i].fn, srv);
        if (!evs[i] || event_add(evs[i], NULL) < 0)
            return -1;
    }
    return 0;
}

static void signals_free(struct event *evs[NSIGNALS])
{
    for (size_t i = 0; i < NSIGNALS; i++)
        if (evs[i])
            event_free(evs[i]);
}

static void on_tick(evutil_socket_t fd, short what, void *arg)
{
    kura_server *srv = arg;
    (void)fd; (void)what;
    notify_watchdog();
    log_tick();
    engine_tick(srv->engine);
    /* This thread accepts connections and takes signals, and on the hash
     * file each item the sweep examines is a record read: from the disk
     * when the file is larger than memory (10-20 ms each under a 32 MiB
     * memory cgroup, where one budget of 2,000 held this thread for 46 s).
     * So the budget goes in small calls until the time is up. */
    int64_t until = kura_mono_ms() + SWEEP_MAX_MS;
    for (int done = 0; done < SWEEP_BUDGET && kura_mono_ms() < until; done += SWEEP_CHUNK)
        engine_sweep(srv->engine, SWEEP_CHUNK);
    if (srv->repl_master)
        repl_master_tick(srv->repl_master);
    /* No sync here for -sync interval: a sync can take long on a busy disk,
     * and new connections would wait behind it on this thread.  A store
     * that has anything to sync does it on its own thread about once a
     * second in that mode (the file backends' sync thread, kura_bg in dbfile.h). */
}

/* The store's reports (recovery, damage, disk errors) go to our log. */
void store_log(int level, const char *line)
{
    log_msg(level == KURA_LOG_ERROR ? KURA_LOG_ERROR : KURA_LOG_INFO, "%s", line);
}

static void ulog_log(void *arg, int level, const char *line)
{
    (void)arg;
    store_log(level, line);
}

/* mkdir -p (server.h) */
int mkdir_parents(const char *dir)
{
    char p[4096];
    snprintf(p, sizeof(p), "%s", dir);
    for (char *q = p + 1; *q; q++)
        if (*q == '/') {
            *q = '\0';
            if (mkdir(p, 0755) < 0 && errno != EEXIST)
                return -1;
            *q = '/';
        }
    return mkdir(p, 0755) < 0 && errno != EEXIST ? -1 : 0;
}

/* Opens the update log and hands it to the engine, which first applies
 * again what a crash kept from the store. */
static int open_ulog(kura_server *srv)
{
    kura_settings *st = srv->settings;
    if (mkdir_parents(st->ulog_dir) < 0) {
        log_msg(KURA_LOG_ERROR, "cannot create the update-log directory %s: %s", st->ulog_dir,
                strerror(errno));
        return -1;
    }
    /* appended through a shared mapping of the preallocated active file, as
     * the hash file appends: a memcpy, no system call per row */
    ul_config uc = {
        .dir = st->ulog_dir, .sid = (uint32_t)st->sid, .ulim = st->ulim, .log = ulog_log,
        .mapwrite = true,
    };
    char err[512] = "";
    uint64_t cut = 0, redone = 0;
    int rc = ul_open(&uc, &srv->ulog, &cut, err, sizeof(err));
    if (rc) {
        log_msg(KURA_LOG_ERROR, "cannot open the update log %s: %s", st->ulog_dir,
                err[0] ? err : kura_strerror(rc));
        return -1;
    }
    rc = engine_attach_log(srv->engine, srv->ulog, st->sync_mode, store_log, &redone);
    if (rc) {
        log_msg(KURA_LOG_ERROR, "cannot apply the update log %s to the store: %s", st->ulog_dir,
                kura_strerror(rc));
        engine_close(srv->engine);
        srv->engine = NULL;
        ul_close(srv->ulog);
        srv->ulog = NULL;
        return -1;
    }
    ul_extent ex;
    ul_get_extent(srv->ulog, &ex);
    log_msg(KURA_LOG_INFO, "update log %s: server id %d, %u files, %llu bytes, last row %llu; "
            "%llu rows applied again to the store", st->ulog_dir, st->sid, ex.segs,
            (unsigned long long)ex.bytes, (unsigned long long)ul_last_ts(srv->ulog),
            (unsigned long long)redone);
    return 0;
}

/* Wakes every worker: the committer has made more durable. */
static void wake_workers(void *arg)
{
    kura_server *srv = arg;
    for (int i = 0; i < srv->nworkers; i++)
        worker_wake(&srv->workers[i]);
}

/* -sync always or -syncrepl: replies wait for durability (journal.h). */
static int start_committer(kura_server *srv)
{
    committer_config cc = { .wake = wake_workers, .wake_arg = srv, .log = store_log,
                            .fence = srv->settings->ha_etcd ? &srv->fence : NULL };
    if ((srv->settings->sync_mode != KURA_SYNC_ALWAYS && !srv->settings->syncrepl) ||
        !engine_commit_source(srv->engine, &cc.source))
        return 0;                       /* nothing to wait for */
    return committer_start(&cc, &srv->committer) == KURA_OK ? 0 : -1;
}

static int open_engine(kura_server *srv)
{
    kura_settings *st = srv->settings;
    kura_store_config cfg = {
        .mem_limit = st->mem_limit,
        .item_size_max = st->item_size_max,
        .memory_file = st->memory_file,
        .sync_mode = st->sync_mode,
        .recover = st->recover,
        /* -sync always: the committer (journal.h) syncs for every connection
         * at once, instead of each change waiting in its worker. */
        .deferred_commit = st->sync_mode == KURA_SYNC_ALWAYS,
        .log = store_log,
    };
    kura_store *store;
    char err[512] = "";
    srv->store_cfg = cfg;
    if (swap_tidy(st->dbname) < 0)
        return -1;
    int rc = kura_store_open(st->dbname, &cfg, &store, err, sizeof(err));
    if (rc) {
        log_msg(KURA_LOG_ERROR, "cannot open database: %s", err[0] ? err : kura_strerror(rc));
        /* a name or parameter refused: exit 2, as a bad option */
        if (rc == KURA_EINVAL)
            start_status = 2;
        return -1;
    }
    /* -kmax past what the database holds (the B+ tree: its page size) */
    if (store->key_max && (size_t)st->key_max > store->key_max) {
        log_msg(KURA_LOG_ERROR, "-kmax %d: this %s database holds keys of at most %zu bytes "
                "(a B+ tree's page size bounds them: psiz=16384 holds %d)", st->key_max,
                store->ops->name, store->key_max, KURA_KEY_MAX);
        kura_store_close(store);
        start_status = 2;
        return -1;
    }
    /* a missing or empty database starts from the newest good snapshot;
     * the update log's rows after it are applied next (open_ulog) */
    uint64_t loaded_cas = 0;
    if (snapd_restore(srv, &store, &loaded_cas) < 0) {
        if (store)
            kura_store_close(store);
        return -1;
    }
    kura_engine_config ecfg = { .item_size_max = st->item_size_max,
                                .key_max = (size_t)st->key_max };
    rc = engine_open(&srv->engine, store, &ecfg);
    if (rc) {
        log_msg(KURA_LOG_ERROR, "cannot start the engine: %s", kura_strerror(rc));
        kura_store_close(store);
        return -1;
    }
    if (loaded_cas)
        engine_observe_cas(srv->engine, loaded_cas);
    if (st->ulog_dir && open_ulog(srv) < 0)
        return -1;
    kura_store_usage u = {0};
    store->ops->usage(store, &u);
    log_msg(KURA_LOG_INFO, "database %s: backend %s, %llu items", st->dbname ? st->dbname : "*",
            store->ops->name, (unsigned long long)u.curr_items);
    return 0;
}

static void init_info(kura_server *srv)
{
    kura_settings *st = srv->settings;
    kura_server_info *si = &srv->info;
    si->started = engine_started(srv->engine);
    si->pid = getpid();
    si->nthreads = st->threads;
    /* One counter block per worker, plus one for the main thread. */
    si->thread_stats = calloc((size_t)st->threads + 1, sizeof(kura_thread_stats));
    pthread_mutex_init(&si->reset_lock, NULL);
    atomic_store(&si->verbosity, st->verbosity);
    si->trace = log_request;
    si->libevent_version = event_get_version();
    si->maxconns = st->maxconns;
    si->tcpport = st->port;
    si->inter = st->host;
    si->domain_socket = st->unix_path;
    si->maxbytes = st->mem_limit;
    si->item_size_max = st->item_size_max;
    si->idle_timeout = st->idle_timeout;
    si->dbname = st->dbname;
    si->sid = (uint32_t)st->sid;
    si->sync_mode = options_sync_name(st->sync_mode);
    si->tt_setmst = repladmin_tt_setmst;
    si->tt_setmst_ctx = srv;
    si->tt_job = snapd_tt_job;
    si->tt_job_ctx = srv;
    si->unix_mode = st->unix_mode;
    si->auth = st->auth;
    si->sasl = st->sasl;
    kura_detail_setup(st->delimiter ? st->delimiter[0] : ':', st->delimiter != NULL);
}

/* "shutdown": memcached's answer when it was started without -A */
static void cmd_shutdown(void *ctx, kura_session *s, text_token *tok, int ntok, kura_buf *out)
{
    (void)ctx; (void)tok; (void)ntok;
    kura_session_reply(s, out, "ERROR: shutdown not enabled");
}

/* The text protocol's command table with the server's commands, each
 * registered by its owner; before the workers start, since sessions read
 * the table without a lock.  0 or -1 (logged). */
static int register_commands(kura_server *srv)
{
    const kura_command shutdown = { "shutdown", cmd_shutdown, srv, -1, -1 };
    srv->cmds = kura_cmdtab_new();
    if (!srv->cmds || kura_cmdtab_add(srv->cmds, &shutdown) != KURA_OK ||
        digest_register(srv->cmds) != KURA_OK || listing_register(srv->cmds) != KURA_OK ||
        repl_register(srv) < 0 || connlist_register(srv->cmds) < 0 ||
        watch_register(srv) < 0 || tls_register(srv) < 0) {
        log_msg(KURA_LOG_ERROR, "cannot register the server's commands");
        return -1;
    }
    return snapd_register(srv);
}

/* -S: libsasl2's messages, at memcached's verbosity (failures with -v) */
static void sasl_log(int level, const char *msg)
{
    log_msg(level == 1 ? KURA_LOG_VERBOSE : KURA_LOG_DEBUG, "SASL: %s", msg);
}

static kura_auth *sasl_pwdb_loaded;

static void free_sasl_pwdb(void)
{
    kura_auth_free(sasl_pwdb_loaded);
    sasl_pwdb_loaded = NULL;
}

/* -S: MEMCACHED_SASL_PWDB (if set) and libsasl2's set-up, now, so that a
 * bad file or a missing memcached.conf stops kurad with one line.  0 or 2. */
static int sasl_setup(kura_settings *s)
{
    char err[512];
    const char *pwdb = getenv("MEMCACHED_SASL_PWDB");
    if (pwdb && kura_auth_load(pwdb, &s->sasl_pwdb, err, sizeof(err)) < 0) {
        fprintf(stderr, "kurad: -S: MEMCACHED_SASL_PWDB: %s\n", err);
        return 2;
    }
    if (s->sasl_pwdb && !sasl_pwdb_loaded)
        atexit(free_sasl_pwdb);
    sasl_pwdb_loaded = s->sasl_pwdb;
    if (kura_sasl_init(s->sasl_pwdb, sasl_log, err, sizeof(err)) < 0) {
        fprintf(stderr, "kurad: %s\n", err);
        return 2;
    }
    return 0;
}

/* The process made ready before the server starts: -S's and -Z's files
 * read (as the starting user), the user checked, malloc tuned, detached
 * with -d, the log opened.  0, or the exit status. */
static int prepare_process(kura_settings *settings)
{
    int rc;
    if (settings->sasl && (rc = sasl_setup(settings)) != 0)
        return rc;
    /* -Z's certificates read now, as the starting user, as -Y's file */
    if ((rc = tls_configure(settings)) != 0)
        return rc;
    rc = daemon_check_user(settings);
    if (rc)
        return rc;
    /* The cache charges items as malloc allocates them; with one arena,
     * memory freed by one worker is reused by the others, so the process
     * stays at the limit plus a fixed overhead (src/store/cache/cache.c).  glibc's
     * default of an arena per thread group let it grow 37% past the limit
     * under mixed sizes, for a gain of a few percent on sets.  Set before
     * any thread exists: a thread that already has an arena keeps it. */
    if (kura_dbname_is_cache(settings->dbname))
        mallopt(M_ARENA_MAX, 1);
    /* Buffers of a megabyte and more (a snapshot's blocks, up to 3 x 16
     * MiB while one is written; a large value's scratch) are mapped and go
     * back to the system when freed.  glibc's default raises its threshold
     * to the size of the first such buffer freed, after which they came
     * from the heap and stayed resident: a kurad writing a snapshot every
     * few seconds swung by 10-18 MB of RSS (test_soak.py). */
    mallopt(M_MMAP_THRESHOLD, 1 << 20);
    if (settings->daemonize) {
        daemon_absolute_paths(settings);
        daemon_detach();                /* from here on, the daemon */
    }
    log_init(settings->log_base, settings->verbosity);
    if (settings->log_path && log_open(settings->log_path) < 0)
        return 1;
    signal(SIGPIPE, SIG_IGN);
    /* A file size limit (ulimit -f) must fail the write with EFBIG, which
     * the store reports as a full disk, not kill the server. */
    signal(SIGXFSZ, SIG_IGN);
    if (settings->conf_path)
        log_msg(KURA_LOG_INFO, "options read from %s", settings->conf_path);
    for (int i = 0; i < settings->nnotes; i++)
        log_msg(KURA_LOG_INFO, "%s", settings->notes[i]);
    return 0;
}

/* Says the server is up: the log's line, -d's parent and systemd told. */
static void announce(const kura_settings *settings)
{
    char status[256], port2[32] = "";
    if (settings->port2)
        snprintf(port2, sizeof(port2), " and port %d", settings->port2);
    snprintf(status, sizeof(status), "listening on %s port %d%s%s%s, %d threads, sync %s",
             listener_addresses(), settings->port, port2,
             settings->unix_path ? " and " : "", settings->unix_path ? settings->unix_path : "",
             settings->threads, options_sync_name(settings->sync_mode));
    log_msg(KURA_LOG_INFO, "kurad %s %s%s", KURA_VERSION, status,
            settings->daemonize ? ", as a daemon" : "");
    daemon_ready();
    notify_ready(status);
}

/* The last of a stop, clean or not: the store and the update log closed,
 * the pid file removed. */
static void free_server(kura_server *srv)
{
    if (srv->engine)
        engine_close(srv->engine);
    if (srv->ulog)
        ul_close(srv->ulog);
    free(srv->info.thread_stats);
    kura_cmdtab_free(srv->cmds);
    pidfile_remove();
}

/* The orderly stop once the loop has ended: listeners, then the threads
 * that feed the store, then the store after its final sync.  The exit
 * status: 1 without a good final sync, else the one a command asked for. */
static int stop_server(kura_server *srv, struct event **sigevs, struct event *tick)
{
    int rc;
    notify_stopping();
    daemon_stop_watchdog(STOP_TIMEOUT);
    /* /primary and /replica read the failover state: their thread first,
     * then failover (it hands the leadership over), then the listeners */
    metrics_stop();
    ha_adapter_stop(srv);
    listener_close(srv);
    kura_watch_stop();
    /* The committer's last sync releases the replies it covers, so it stops
     * before the workers; its lock outlives them (they may still ask for a
     * sequence until they stop). */
    committer_stop(srv->committer);
    snapd_jobs_detach();
    workers_stop(srv);
    snapd_halt();                       /* a restore writes and asks the role */
    bool sync_failed = committer_failed(srv->committer);
    committer_free(srv->committer);
    srv->committer = NULL;
    stop_repl(srv);
    snapd_stop(srv, true);
    signals_free(sigevs);
    event_free(tick);
    event_base_free(srv->base);
    /* After a failed group-commit sync nothing is synced again (committer.c
     * says why): a later sync that "succeeds" proves nothing.  A stop
     * without a good final sync is not clean, and the exit status says so
     * (a service manager shows the failure; the next start recovers from
     * what is on the disk). */
    rc = sync_failed ? KURA_EFAILED : engine_sync(srv->engine);
    if (rc < 0)
        log_msg(KURA_LOG_ERROR, "final sync failed: %s", kura_strerror(rc));
    free_server(srv);
    int code = atomic_load(&srv->exit_code);
    if (rc < 0)
        log_msg(KURA_LOG_INFO, "stopped without a final sync (exit status 1)");
    else if (code)
        log_msg(KURA_LOG_INFO, "stopped (exit status %d)", code);
    else
        log_msg(KURA_LOG_INFO, "stopped");
    return rc < 0 ? 1 : code;
}

/* Start-up failed: the reason is logged (and on stderr).  Undo what was
 * done, in reverse, so no pid file or socket file is left behind. */
static int undo_start(kura_server *srv, struct event **sigevs, struct event *tick,
                      bool listening, bool workers)
{
    metrics_stop();
    ha_adapter_stop(srv);
    committer_stop(srv->committer);
    kura_watch_stop();
    snapd_jobs_detach();
    if (workers)
        workers_stop(srv);
    snapd_halt();
    committer_free(srv->committer);
    srv->committer = NULL;
    stop_repl(srv);
    snapd_stop(srv, false);
    if (listening)
        listener_close(srv);
    signals_free(sigevs);
    if (tick)
        event_free(tick);
    if (srv->base)
        event_base_free(srv->base);
    free_server(srv);
    return start_status;
}

int main(int argc, char **argv)
{
    kura_settings settings;
    kura_server srv;
    struct event *sigevs[NSIGNALS] = { NULL }, *tick = NULL;
    bool listening = false, workers = false;
    int rc;

    options_defaults(&settings);
    rc = options_parse(&settings, argc, argv);
    if (rc == 1)
        return 0;
    if (rc)
        return rc;
    if ((rc = prepare_process(&settings)) != 0)
        return rc;
    memset(&srv, 0, sizeof(srv));
    srv.settings = &settings;
    if (settings.kill_old && settings.pid_path && kill_old_server(settings.pid_path) < 0)
        return 1;
    if (settings.pid_path && pidfile_lock(settings.pid_path) < 0)
        return 1;
    /* Signals are caught from here on, so a SIGTERM during a long start-up
     * (a store's recovery) or just after the socket listens is a clean stop
     * once the loop runs, not a kill. */
    srv.base = event_base_new();
    if (!srv.base) {
        log_msg(KURA_LOG_ERROR, "cannot create the event base");
        goto fail;
    }
    tick = event_new(srv.base, -1, EV_PERSIST, on_tick, &srv);
    struct timeval one_second = { 1, 0 };
    if (signals_setup(&srv, sigevs) < 0 || !tick || event_add(tick, &one_second) < 0) {
        log_msg(KURA_LOG_ERROR, "cannot set up signal handling");
        goto fail;
    }
    if (listener_open(&srv) < 0) {
        fprintf(stderr, "kurad: cannot listen (see the log above)\n");
        goto fail;
    }
    listening = true;
    /* Descriptors for -c connections and a reserve for the store: checked
     * before the store opens (a refusal should not wait for a recovery) and
     * again once its files are open. */
    if (fdlimit_setup(&settings) < 0)
        goto fail;
    /* Root is given up before the store is opened, so that every file of the
     * database belongs to the -u user: the hash file creates files as it
     * runs, which it could not do in a directory root had created. */
    if (daemon_drop_privileges(&settings) < 0)
        goto fail;
    if (open_engine(&srv) < 0)
        goto fail;
    if (fdlimit_setup(&settings) < 0)
        goto fail;
    if (start_repl(&srv) < 0)
        goto fail;
    init_info(&srv);
    if (!srv.info.thread_stats || register_commands(&srv) < 0)
        goto fail;
    if (workers_start(&srv) < 0) {
        log_msg(KURA_LOG_ERROR, "cannot start worker threads");
        goto fail;
    }
    workers = true;
    /* failover before the metrics thread, which reads its state */
    if (ha_adapter_start(&srv) < 0 || metrics_start(&srv) < 0)
        goto fail;
    if (start_committer(&srv) < 0) {
        log_msg(KURA_LOG_ERROR, "cannot start the commit thread");
        goto fail;
    }
    if (snapd_start(&srv) < 0)
        goto fail;
    if (listener_listen(&srv) < 0 || pidfile_write() < 0)
        goto fail;

    announce(&settings);

    event_base_dispatch(srv.base);

    return stop_server(&srv, sigevs, tick);

fail:
    return undo_start(&srv, sigevs, tick, listening, workers);
}
