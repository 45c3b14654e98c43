/*
 * replctl.c - the server's replication glue: the "repl" command (a
 * replica's request, handed to the master's streams; an operator's
 * "repl promote" and "repl follow", repladmin.c), replication's lines in
 * "stats" and "stats repl", -syncrepl's wait, and starting and stopping
 * the master (with -ulog) and the replica thread (-mhost, or "repl follow").
 *
 * srv->repl_slave changes while the server runs (promote, follow): the
 * stats of any worker read it under replctl_slave_lock, which is held only
 * to swap the pointer or to emit its lines, never across a stop.
 */
#include <signal.h>
#include <stdio.h>
#include <string.h>
#include <unistd.h>

#include "server.h"

pthread_mutex_t replctl_slave_lock = PTHREAD_MUTEX_INITIALIZER;

/* "stats": the update log's and replication's lines */
static void repl_stats(void *ctx, bool all, kura_stat_fn emit, void *arg)
{
    kura_server *srv = ctx;
    kura_settings *st = srv->settings;
    char b[64];
    role_state rs = { .role = ROLE_NONE };
    pthread_mutex_lock(&replctl_slave_lock);
    if (srv->role)
        repl_role_get(srv, &rs);
    /* a replica by its role whose thread is gone (a follow that failed
     * after the role changed): following no one, refusing writes */
    bool orphan = !srv->repl_slave && rs.role == ROLE_REPLICA;
    if (all)
        emit(arg, "repl_role", srv->repl_slave || orphan ? (st->rw ? "dual" : "replica")
                               : rs.role == ROLE_FENCED ? "fenced"
                               : srv->repl_master ? "master" : "none");
    replrole_stats(srv, all, emit, arg);
    if (all)
        replrole_probe_stats(srv, emit, arg);
    if (srv->ulog) {
        ul_extent ex;
        ul_get_extent(srv->ulog, &ex);
        snprintf(b, sizeof(b), "%d", srv->settings->sid);
        emit(arg, "ulog_sid", b);
        snprintf(b, sizeof(b), "%llu", (unsigned long long)ul_last_ts(srv->ulog));
        emit(arg, "ulog_last_ts", b);
        snprintf(b, sizeof(b), "%llu", (unsigned long long)ex.from_ts);
        emit(arg, "ulog_from_ts", b);
        snprintf(b, sizeof(b), "%llu", (unsigned long long)journal_applied_ts(engine_journal(srv->engine)));
        emit(arg, "ulog_applied_ts", b);
        snprintf(b, sizeof(b), "%u", ex.segs);
        emit(arg, "ulog_files", b);
        snprintf(b, sizeof(b), "%llu", (unsigned long long)ex.bytes);
        emit(arg, "ulog_bytes", b);
        emit(arg, "ulog_sync_failed", ul_failed(srv->ulog) ? "1" : "0");
        if (all) {                      /* its id and history (docs/replication.md) */
            char h[JOURNAL_HIST_MAX * 28];
            snprintf(b, sizeof(b), "%016llx", (unsigned long long)ul_log_id(srv->ulog));
            emit(arg, "ulog_hid", b);
            if (journal_history_format(engine_journal(srv->engine), h, sizeof(h)) < 0)
                h[0] = '\0';
            emit(arg, "ulog_history", h[0] ? h : "-");
        }
    }
    if (srv->repl_master)
        repl_master_stats(srv->repl_master, all, emit, arg);
    if (srv->repl_slave) {
        repl_slave_stats(srv->repl_slave, all, emit, arg);
    } else if (orphan && all) {
        char m[ROLEFILE_HOST_MAX + 16];
        snprintf(m, sizeof(m), "%s:%d", rs.host, rs.port);
        emit(arg, "repl_master", m);
        emit(arg, "repl_state", "stopped");
    }
    pthread_mutex_unlock(&replctl_slave_lock);
}

static void repl_stats_general(void *ctx, kura_stat_fn emit, void *arg)
{
    repl_stats(ctx, false, emit, arg);
}

/* "stats repl": the strings too (docs/replication.md) */
static void repl_stats_all(void *ctx, kura_stat_fn emit, void *arg)
{
    repl_stats(ctx, true, emit, arg);
}

/* A stream has ended (src/repl/master.c closed its socket): the
 * connection it was is counted against -c no more. */
static void stream_end(void *arg)
{
    kura_server *srv = arg;
    atomic_fetch_sub(&srv->info.curr_connections, 1);
}

/* The "repl" connection's socket becomes a replication stream of its own
 * (src/repl/master.c); arg: the replica's position and server id. */
static void repl_take(void *ctx, int fd, const uint64_t arg[KURA_HANDOFF_ARGS])
{
    kura_server *srv = ctx;
    repl_hello h;
    repl_hello_unpack(arg, &h);
    if (repl_master_serve(srv->repl_master, fd, &h) != KURA_OK)
        log_msg(KURA_LOG_ERROR, "cannot start a replication stream for replica %u", h.sid);
}

/* repl <after> <sid> [key=value ...]: a replica asks for the update log
 * (repl.h, src/repl/hello.c) */
static void cmd_repl(void *ctx, kura_session *s, text_token *tok, int ntok, kura_buf *out)
{
    kura_server *srv = ctx;
    repl_hello h;
    char err[REPL_LINE_MAX];
    if (repladmin_command(srv, s, tok, ntok, out))
        return;                         /* repl promote | follow: words, not numbers */
    if (ntok < 4) {
        kura_session_reply(s, out, "ERROR");
        return;
    }
    if (!srv->repl_master) {
        kura_session_reply(s, out, "SERVER_ERROR this server keeps no update log "
                                   "(start it with -ulog DIR)");
        return;
    }
    /* tok[ntok - 1] is the terminal token */
    const char *words[REPL_HELLO_WORDS];
    size_t lens[REPL_HELLO_WORDS];
    int n = 0;
    for (int i = 1; i < ntok - 1 && n < REPL_HELLO_WORDS; i++, n++) {
        words[n] = tok[i].value;
        lens[n] = tok[i].length;
    }
    if (repl_hello_parse(words, lens, n, &h, err, sizeof(err)) != KURA_OK) {
        kura_session_client_error(s, out, err);
        return;
    }
    kura_handoff ho = { repl_take, srv, { 0 } };
    repl_hello_pack(&h, ho.arg);
    kura_session_hand_off(s, &ho);
}

/* Replication's commands: "repl", and its lines in "stats" and "stats
 * repl".  Served whether or not this server has an update log (srv->
 * repl_master, set before the workers start and cleared after they stop). */
int repl_register(kura_server *srv)
{
    const kura_command c = { "repl", cmd_repl, srv, 3, REPL_HELLO_WORDS + 2 };
    if (kura_cmdtab_add(srv->cmds, &c) != KURA_OK ||
        kura_cmdtab_add_stats(srv->cmds, NULL, repl_stats_general, srv) != KURA_OK ||
        kura_cmdtab_add_stats(srv->cmds, "repl", repl_stats_all, srv) != KURA_OK)
        return -1;
    return 0;
}

/* -syncrepl: the group commit's wait for replicas */
static int wait_replicas(void *arg, uint64_t ts)
{
    kura_server *srv = arg;
    kura_settings *st = srv->settings;
    /* a fenced master (a newer term was heard), or one whose failover
     * gate is shut, acknowledges nothing: not before the wait, not after */
    if (!repl_role_is_writable(srv))
        return KURA_COMMIT_ABANDONED;
    if (repl_master_wait(srv->repl_master, ts, st->syncrepl, st->syncrepl_timeout) == 0)
        return repl_role_is_writable(srv) ? 0 : KURA_COMMIT_ABANDONED;
    if (!repl_role_is_writable(srv))
        return KURA_COMMIT_ABANDONED;
    log_msg(KURA_LOG_ERROR, "fewer than %d replicas confirmed a change within %d ms: %s",
            st->syncrepl, st->syncrepl_timeout,
            st->syncrepl_ack ? "acknowledged anyway (-syncrepl-fail ack)"
                             : "closing the connections waiting for it, unanswered");
    return st->syncrepl_ack ? 0 : KURA_COMMIT_ABANDONED;
}

/* A replica that must not go on (-repl-divergence refuse): the server
 * stops as on SIGTERM (cleanly, from its event loop, whatever thread asks)
 * and exits with exit_code. */
static void repl_fatal(void *arg, int exit_code)
{
    kura_server *srv = arg;
    atomic_store(&srv->exit_code, exit_code);
    kill(getpid(), SIGTERM);
}

/* How this server's master and replica are configured (a replica started
 * by "repl follow" too); open_shadow only on a server that started as a
 * replica, whose engine was made swappable before serving. */
void replctl_config(kura_server *srv, repl_config *out)
{
    kura_settings *st = srv->settings;
    repl_config rc = {
        .engine = srv->engine, .ulog = srv->ulog, .sid = (uint32_t)st->sid,
        .ulmax = st->ulmax, .tmpdir = st->ulog_dir, .sync_mode = st->sync_mode, .rw = st->rw,
        .row_max = UL_ROW_HEAD_MAX + st->item_size_max, .item_max = st->item_size_max,
        .port = st->port, .repl_max = st->repl_max,
        .spool_reserve = st->ulim + (8ULL << 20), .stream_end = stream_end, .stream_end_arg = srv,
        .open_shadow = swap_open_shadow, .swap_in = swap_in, .shadow_arg = srv,
        .log = store_log,
        .divergence_refuse = st->divergence_refuse, .fatal = repl_fatal, .fatal_arg = srv,
        .tls_ctx = tls_master_ctx(),    /* -mtls */
    };
    /* -mauth's first entry, else -Y's; kept for the process's life */
    if (kura_auth_first(st->mauth, &rc.auth_user, &rc.auth_pass) < 0)
        rc.auth_user = rc.auth_pass = NULL;
    if (!st->mhost) {
        rc.open_shadow = NULL;
        rc.swap_in = NULL;
    }
    replrole_config(srv, &rc);
    *out = rc;
}

/* The rts file a replica keeps its position in: -rts, or DIR/rts of
 * -ulog; 0, or -1 when there is neither. */
int replctl_rts_path(const kura_settings *st, char *buf, size_t len)
{
    if (st->rts_path)
        snprintf(buf, len, "%s", st->rts_path);
    else if (st->ulog_dir)
        snprintf(buf, len, "%s/rts", st->ulog_dir);
    else
        return -1;
    return 0;
}

/* The replication master (with -ulog) and the replica thread (-mhost). */
int start_repl(kura_server *srv)
{
    kura_settings *st = srv->settings;
    repl_config rc;
    if (replrole_start(srv) < 0)        /* may take -mhost from DIR/role */
        return -1;
    replctl_config(srv, &rc);
    if (srv->ulog && repl_master_new(&rc, &srv->repl_master) != KURA_OK) {
        log_msg(KURA_LOG_ERROR, "cannot start replication");
        return -1;
    }
    if (st->syncrepl) {
        if (!srv->repl_master) {
            log_msg(KURA_LOG_ERROR, "-syncrepl needs -ulog DIR (replicas follow the update log)");
            return -1;
        }
        journal_set_replica_wait(engine_journal(srv->engine), wait_replicas, srv);
    }
    if (st->mhost) {
        char rts[4200];
        if (replctl_rts_path(st, rts, sizeof(rts)) < 0) {
            log_msg(KURA_LOG_ERROR, "-mhost needs -rts FILE (or -ulog DIR, for DIR/rts)");
            return -1;
        }
        engine_set_replica(srv->engine, !st->rw);
        engine_enable_swap(srv->engine);
        if (st->rw) {
            /* dual master: changes of both ordered by time */
            if (!srv->ulog) {
                log_msg(KURA_LOG_ERROR, "-rw with -mhost (a replica that takes writes: dual master) "
                        "needs -ulog DIR");
                return -1;
            }
            if (engine_set_dual(srv->engine, (uint32_t)st->sid) != KURA_OK) {
                log_msg(KURA_LOG_ERROR, "cannot start dual-master mode");
                return -1;
            }
        }
        repl_slave *slave;
        if (repl_slave_start(&rc, st->mhost, st->mport, rts, &slave) != KURA_OK) {
            log_msg(KURA_LOG_ERROR, "cannot start the replica thread");
            return -1;
        }
        pthread_mutex_lock(&replctl_slave_lock);
        srv->repl_slave = slave;
        pthread_mutex_unlock(&replctl_slave_lock);
        log_msg(KURA_LOG_INFO, "replica of %s:%d (position in %s)%s", st->mhost, st->mport, rts,
                st->rw ? ", taking writes too (-rw)" : ", read-only");
    }
    return 0;
}

/* Before the engine closes: the replica stops applying, the streams end. */
void stop_repl(kura_server *srv)
{
    pthread_mutex_lock(&replctl_slave_lock);
    repl_slave *slave = srv->repl_slave;
    srv->repl_slave = NULL;
    pthread_mutex_unlock(&replctl_slave_lock);
    repl_slave_stop(slave);
    repl_master_free(srv->repl_master);
    srv->repl_master = NULL;
    replrole_stop(srv);                 /* last: the threads above ask it the term */
}
