/*
 * main.c - kurad: options, start-up, the main loop, and a clean stop.
 *
 * The main thread owns the listening sockets, the signal handlers and a
 * one-second timer (clock, expiry sweep, interval sync); the workers own the
 * connections.  SIGTERM and SIGINT stop accepting, let the workers answer
 * what they have read, sync and close the store, and exit 0.
 */
#include <errno.h>
#include <grp.h>
#include <malloc.h>
#include <pwd.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "server.h"

#define SWEEP_BUDGET 2000               /* items examined per second by the sweep */

static void on_signal(evutil_socket_t sig, short what, void *arg)
{
    kura_server *srv = arg;
    (void)what;
    log_msg(LOG_INFO, "signal %d: stopping", (int)sig);
    srv->stopping = true;
    event_base_loopbreak(srv->base);
}

static void on_tick(evutil_socket_t fd, short what, void *arg)
{
    kura_server *srv = arg;
    (void)fd; (void)what;
    engine_tick(srv->engine);
    engine_sweep(srv->engine, SWEEP_BUDGET);
    if (srv->settings->sync_mode == KURA_SYNC_INTERVAL) {
        int rc = engine_sync(srv->engine);
        if (rc < 0)
            log_msg(LOG_ERR, "sync failed: %s", kura_strerror(rc));
    }
}

static int open_engine(kura_server *srv)
{
    kura_settings *st = srv->settings;
    kura_store_config cfg = {
        .mem_limit = st->mem_limit,
        .item_size_max = st->item_size_max,
        .sync_mode = st->sync_mode,
        .recover = st->recover,
        /* -sync always: the committer (commit.c) syncs for every connection
         * at once, instead of each change waiting in its worker. */
        .deferred_commit = st->sync_mode == KURA_SYNC_ALWAYS,
    };
    kura_store *store;
    char err[512] = "";
    int rc = kura_store_open(st->dbname, &cfg, &store, err, sizeof(err));
    if (rc) {
        fprintf(stderr, "kurad: cannot open database: %s\n", err[0] ? err : kura_strerror(rc));
        return -1;
    }
    kura_engine_config ecfg = { .item_size_max = st->item_size_max };
    rc = engine_open(&srv->engine, store, &ecfg);
    if (rc) {
        fprintf(stderr, "kurad: cannot start the engine: %s\n", kura_strerror(rc));
        kura_store_close(store);
        return -1;
    }
    kura_store_usage u = {0};
    store->ops->usage(store, &u);
    log_msg(LOG_INFO, "database %s: backend %s, %llu items", st->dbname ? st->dbname : "*",
            store->ops->name, (unsigned long long)u.curr_items);
    return 0;
}

/* -u: becomes USER once the sockets are bound and the files opened. */
static int drop_privileges(const char *user)
{
    struct passwd *pw = getpwnam(user);
    if (!pw) {
        fprintf(stderr, "kurad: unknown user '%s'\n", user);
        return -1;
    }
    if (pw->pw_uid == geteuid())
        return 0;
    if (setgroups(0, NULL) < 0 || setgid(pw->pw_gid) < 0 || setuid(pw->pw_uid) < 0) {
        fprintf(stderr, "kurad: cannot become user '%s': %s\n", user, strerror(errno));
        return -1;
    }
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
    si->libevent_version = event_get_version();
    si->maxconns = st->maxconns;
    si->tcpport = st->port;
    si->inter = st->host;
    si->domain_socket = st->unix_path;
    si->maxbytes = st->mem_limit;
    si->item_size_max = st->item_size_max;
    si->idle_timeout = st->idle_timeout;
    si->dbname = st->dbname;
    si->sync_mode = options_sync_name(st->sync_mode);
}

int main(int argc, char **argv)
{
    kura_settings settings;
    kura_server srv;
    int rc;

    options_defaults(&settings);
    rc = options_parse(&settings, argc, argv);
    if (rc == 1)
        return 0;
    if (rc)
        return rc;
    log_init(settings.verbosity);
    signal(SIGPIPE, SIG_IGN);

    memset(&srv, 0, sizeof(srv));
    srv.settings = &settings;
    if (open_engine(&srv) < 0)
        return 1;
    init_info(&srv);
    if (!srv.info.thread_stats)
        return 1;
    /* The cache charges items as malloc allocates them; with one arena,
     * memory freed by one worker is reused by the others, so the process
     * stays at the limit plus a fixed overhead (src/store/cache.c).  glibc's
     * default of an arena per thread group let it grow 37% past the limit
     * under mixed sizes, for a gain of a few percent on sets. */
    if (strcmp(engine_store_of(srv.engine)->ops->name, "cache") == 0)
        mallopt(M_ARENA_MAX, 1);

    srv.base = event_base_new();
    if (!srv.base) {
        fprintf(stderr, "kurad: cannot create the event base\n");
        return 1;
    }
    if (listener_open(&srv) < 0) {
        fprintf(stderr, "kurad: cannot listen (see the log above)\n");
        engine_close(srv.engine);
        return 1;
    }
    if (settings.user && drop_privileges(settings.user) < 0) {
        engine_close(srv.engine);
        return 1;
    }
    if (workers_start(&srv) < 0) {
        fprintf(stderr, "kurad: cannot start worker threads\n");
        return 1;
    }
    if (commit_start(&srv) < 0) {
        fprintf(stderr, "kurad: cannot start the commit thread\n");
        return 1;
    }
    struct event *sigterm = evsignal_new(srv.base, SIGTERM, on_signal, &srv);
    struct event *sigint = evsignal_new(srv.base, SIGINT, on_signal, &srv);
    struct event *tick = event_new(srv.base, -1, EV_PERSIST, on_tick, &srv);
    struct timeval one_second = { 1, 0 };
    event_add(sigterm, NULL);
    event_add(sigint, NULL);
    event_add(tick, &one_second);

    log_msg(LOG_INFO, "kurad %s listening on %s port %d%s%s, %d threads, sync %s",
            KURA_VERSION, settings.host, settings.port,
            settings.unix_path ? " and " : "", settings.unix_path ? settings.unix_path : "",
            settings.threads, options_sync_name(settings.sync_mode));

    event_base_dispatch(srv.base);

    listener_close(&srv);
    commit_stop();
    workers_stop(&srv);
    event_free(sigterm);
    event_free(sigint);
    event_free(tick);
    event_base_free(srv.base);
    rc = engine_sync(srv.engine);
    if (rc < 0)
        log_msg(LOG_ERR, "final sync failed: %s", kura_strerror(rc));
    engine_close(srv.engine);
    free(srv.info.thread_stats);
    log_msg(LOG_INFO, "stopped");
    return 0;
}
