/*
 * repladmin.c - failover by command: "repl promote" (a replica becomes a
 * master, without a restart) and "repl follow HOST[:PORT]" (any server
 * becomes a replica of HOST, as ttserver's setmst did).  docs/replication.md
 * ("Failover") is the operator's view; kuractl sends both.
 *
 * One change at a time (ctl_lock, held across the old replica's stop);
 * stats read srv->repl_slave under replctl_slave_lock, which is held only
 * for the pointer swap, so no worker waits on a stop but the one asking.
 * A stop is bounded: the replica thread's socket is shut down, so it leaves
 * a stream at once, or a connect attempt within its timeout (5 s), then
 * writes its position (a sync of the store, then the rts file, synced).
 */
#include <errno.h>
#include <fcntl.h>
#include <inttypes.h>
#include <netdb.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <unistd.h>

#include "kura/escape.h"
#include "kura/fsutil.h"
#include "server.h"

static pthread_mutex_t ctl_lock = PTHREAD_MUTEX_INITIALIZER;

/* ---- what the replica thread reports (its stats lines) ---------------------- */

typedef struct slave_view {
    bool copying;
    uint64_t position;
    char master[300];
} slave_view;

static void view_stat(void *arg, const char *name, const char *value)
{
    slave_view *v = arg;
    if (strcmp(name, "repl_copying") == 0)
        v->copying = strcmp(value, "0") != 0;
    else if (strcmp(name, "repl_position") == 0)
        v->position = strtoull(value, NULL, 10);
    else if (strcmp(name, "repl_master") == 0)
        snprintf(v->master, sizeof(v->master), "%s", value);
}

/* The position the rts file holds (its first number; the file may carry
 * more after it): 0 when missing or unreadable. */
static uint64_t rts_position(const kura_settings *st)
{
    char path[4200];
    unsigned long long v = 0;
    if (replctl_rts_path(st, path, sizeof(path)) < 0)
        return 0;
    FILE *f = fopen(path, "r");
    if (!f)
        return 0;
    if (fscanf(f, "%llu", &v) != 1)
        v = 0;
    fclose(f);
    return v;
}

/* Takes the replica thread away from stats and stops it: the last stream
 * ends and the position is written.  NULL when not a replica. */
static repl_slave *slave_take(kura_server *srv)
{
    pthread_mutex_lock(&replctl_slave_lock);
    repl_slave *s = srv->repl_slave;
    srv->repl_slave = NULL;
    pthread_mutex_unlock(&replctl_slave_lock);
    return s;
}

static int slave_begin(kura_server *srv, const char *host, int port)
{
    char rts[4200];
    repl_config rc;
    repl_slave *s;
    replctl_config(srv, &rc);
    if (replctl_rts_path(srv->settings, rts, sizeof(rts)) < 0 ||
        repl_slave_start(&rc, host, port, rts, &s) != KURA_OK)
        return -1;
    pthread_mutex_lock(&replctl_slave_lock);
    srv->repl_slave = s;
    pthread_mutex_unlock(&replctl_slave_lock);
    return 0;
}

/* "host:port" of a repl_master line back into its parts. */
static int split_master(const char *hp, char *host, size_t hlen, int *port)
{
    const char *colon = strrchr(hp, ':');
    if (!colon || (size_t)(colon - hp) >= hlen)
        return -1;
    memcpy(host, hp, (size_t)(colon - hp));
    host[colon - hp] = '\0';
    *port = atoi(colon + 1);
    return 0;
}

/* A server with no replica thread: a fenced one or a replica of no one
 * taking writes again, or a master given a higher term (failover's
 * min_term).  ctl_lock held. */
static int promote_in_place(kura_server *srv, uint64_t min_term, role_source src, char *msg,
                            size_t msglen)
{
    char err[300];
    if (replrole_save(srv, ROLE_MASTER, src, NULL, 0, min_term, true, err,
                      sizeof(err)) != KURA_OK) {
        snprintf(msg, msglen, "SERVER_ERROR cannot save the role (%s): nothing changed", err);
        return -1;
    }
    /* whatever -rw says: the fence turned the replica switch on, and a
     * master that is not a replica takes writes */
    engine_set_replica(srv->engine, false);
    uint64_t own = srv->ulog ? ul_last_ts(srv->ulog) : 0;
    log_msg(KURA_LOG_INFO, "promoted (%s): a master at term %" PRIu64 ", taking writes",
            role_source_name(src), repl_role_term(srv));
    snprintf(msg, msglen, "PROMOTED %" PRIu64 " %" PRIu64, own, own);
    return 0;
}

/* ctl_lock held */
static int promote(kura_server *srv, uint64_t min_term, role_source src, bool force, char *msg,
                   size_t msglen)
{
    kura_settings *st = srv->settings;
    slave_view v = { 0 };
    role_state rs;
    char err[300];
    repl_role_get(srv, &rs);
    pthread_mutex_lock(&replctl_slave_lock);
    bool replica = srv->repl_slave != NULL;
    if (replica)
        repl_slave_stats(srv->repl_slave, true, view_stat, &v);
    pthread_mutex_unlock(&replctl_slave_lock);
    /* fenced, a replica by its role whose follow failed (following no
     * one), or a master given a higher term */
    if (!replica && (rs.role == ROLE_FENCED || rs.role == ROLE_REPLICA || min_term > rs.term))
        return promote_in_place(srv, min_term, src, msg, msglen);
    if (!replica) {
        snprintf(msg, msglen, "SERVER_ERROR not a replica: nothing to promote");
        return -1;
    }
    if (v.copying && !force) {
        snprintf(msg, msglen, "SERVER_ERROR a full copy from the master is arriving: this "
                 "server's data is not the master's yet (wait for it, or repl promote force)");
        return -1;
    }
    repl_slave_stop(slave_take(srv));
    /* the position the rts file keeps must cover what was applied: a sync
     * that failed (logged) leaves it behind, and a server that says it is
     * a master from there would hold rows past its own position */
    uint64_t pos = rts_position(st);
    char host[256] = "";
    int port = 0;
    bool known = split_master(v.master, host, sizeof(host), &port) == 0;
    bool durable = pos >= v.position || force;
    /* the new term and role, on disk before a write is taken */
    int rc = durable ? replrole_save(srv, ROLE_MASTER, src, known ? host : NULL, port,
                                     min_term, false, err, sizeof(err)) : KURA_OK;
    if (!durable || rc != KURA_OK) {
        if (known)
            slave_begin(srv, host, port);
        if (!durable)
            snprintf(msg, msglen, "SERVER_ERROR the position (%" PRIu64 ") could not be "
                     "written durably (the rts file holds %" PRIu64 "; see the log): still a "
                     "replica", v.position, pos);
        else
            snprintf(msg, msglen, "SERVER_ERROR cannot save the role (%s): still a replica",
                     err);
        return -1;
    }
    if (!st->rw)
        engine_set_replica(srv->engine, false);
    uint64_t own = srv->ulog ? ul_last_ts(srv->ulog) : 0;
    log_msg(KURA_LOG_INFO, "promoted (%s): no longer a replica of %s, taking writes at term %"
            PRIu64 " (master position %" PRIu64 ", own last row %" PRIu64 ")%s%s",
            role_source_name(src), v.master, repl_role_term(srv), pos, own,
            srv->repl_master ? "" : "; without -ulog it serves no replicas",
            replrole_persisted(srv) ? "" : "; without -ulog the role and term are not kept "
            "across a restart");
    replrole_probe_start(srv);          /* tells the old master when it is back */
    snprintf(msg, msglen, "PROMOTED %" PRIu64 " %" PRIu64, pos, own);
    return 0;
}

int replctl_promote(kura_server *srv, char *msg, size_t msglen)
{
    pthread_mutex_lock(&ctl_lock);
    int rc = promote(srv, 0, ROLE_SRC_PROMOTE, false, msg, msglen);
    pthread_mutex_unlock(&ctl_lock);
    return rc;
}

int repl_role_promote(kura_server *srv, uint64_t min_term, role_source source, bool force,
                      char *msg, size_t msglen)
{
    pthread_mutex_lock(&ctl_lock);
    int rc = promote(srv, min_term, source, force, msg, msglen);
    pthread_mutex_unlock(&ctl_lock);
    return rc == 0 ? KURA_OK : KURA_EINVAL;
}

/* ---- follow ------------------------------------------------------------------- */

/* A host name or address as a master's: 1 to 255 bytes of printable ASCII
 * but the space.  What passes is shown in replies and log lines as it is;
 * what does not is never echoed (a peer's newline would forge a line). */
static bool host_word_ok(const char *host)
{
    size_t n = strlen(host);
    for (size_t i = 0; i < n; i++)
        if ((unsigned char)host[i] <= 0x20 || (unsigned char)host[i] >= 0x7f)
            return false;
    return n >= 1 && n <= 255;
}

/* setmst's position: the rts file rewritten to hold `from` alone (the form
 * of one number: the master's log id unknown), as ttserver's setmst
 * rewrites its rts file with the timestamp given.  0, or -1 with msg set. */
static int rts_set(const char *rts, uint64_t from, char *msg, size_t msglen)
{
    char dir[4200], b[32];
    snprintf(dir, sizeof(dir), "%s", rts);
    char *slash = strrchr(dir, '/');
    const char *name = slash ? slash + 1 : rts;
    if (slash)
        *(slash == dir ? slash + 1 : slash) = '\0';
    else
        strcpy(dir, ".");
    int n = snprintf(b, sizeof(b), "%" PRIu64 "\n", from);
    int dfd = open(dir, O_RDONLY | O_DIRECTORY | O_CLOEXEC);
    int rc = dfd >= 0 ? kura_write_file_atomic(dfd, name, b, (size_t)n) : -1;
    if (rc < 0)
        snprintf(msg, msglen, "SERVER_ERROR cannot write the position to %s: %s", rts,
                 strerror(errno));
    if (dfd >= 0)
        close(dfd);
    return rc;
}

int replctl_follow(kura_server *srv, const char *host, int port, uint64_t min_term,
                   role_source src, uint64_t from, char *msg, size_t msglen)
{
    kura_settings *st = srv->settings;
    char rts[4200], ps[16], err[300];
    if (!host_word_ok(host) || port < 1 || port > 65535) {
        snprintf(msg, msglen, "CLIENT_ERROR bad address (HOST[:PORT], port 1-65535)");
        return -1;
    }
    if (replctl_rts_path(st, rts, sizeof(rts)) < 0) {
        snprintf(msg, msglen, "SERVER_ERROR a replica keeps its position in a file: start this "
                 "server with -ulog DIR (or -rts FILE) to follow a master");
        return -1;
    }
    struct addrinfo hints = { .ai_family = AF_UNSPEC, .ai_socktype = SOCK_STREAM }, *res;
    snprintf(ps, sizeof(ps), "%d", port);
    int e = getaddrinfo(host, ps, &hints, &res);
    if (e) {
        snprintf(msg, msglen, "CLIENT_ERROR bad address %s: %s", host, gai_strerror(e));
        return -1;
    }
    bool self = selfaddr_reaches_self(res);        /* every spelling (selfaddr.c) */
    freeaddrinfo(res);
    if (self) {
        snprintf(msg, msglen, "CLIENT_ERROR %s:%d is this server: it cannot follow itself",
                 host, port);
        return -1;
    }
    if (replchain_check(srv, host, port, msg, msglen) < 0)
        return -1;                      /* a loop, or a chain with no master */
    pthread_mutex_lock(&ctl_lock);
    /* the role first: what a restart takes is what was answered */
    if (replrole_save(srv, ROLE_REPLICA, src, host, port, min_term, false, err,
                      sizeof(err)) != KURA_OK) {
        pthread_mutex_unlock(&ctl_lock);
        snprintf(msg, msglen, "SERVER_ERROR cannot save the role (%s): nothing changed", err);
        return -1;
    }
    /* no local change from here on (a dual master's -rw keeps taking them),
     * not even while the old replica thread stops */
    engine_set_replica(srv->engine, !st->rw);
    replrole_probe_stop(srv);
    repl_slave_stop(slave_take(srv));
    if (from && rts_set(rts, from, msg, msglen) < 0) {
        pthread_mutex_unlock(&ctl_lock);
        log_msg(KURA_LOG_ERROR, "repl follow %s:%d: %s; following no one", host, port, msg);
        return -1;
    }
    int rc = slave_begin(srv, host, port);
    pthread_mutex_unlock(&ctl_lock);
    if (rc < 0) {
        log_msg(KURA_LOG_ERROR, "repl follow %s:%d: cannot start the replica thread: this "
                "server is a replica of no one, refusing changes", host, port);
        snprintf(msg, msglen, "SERVER_ERROR cannot start the replica thread (see the log)");
        return -1;
    }
    log_msg(KURA_LOG_INFO, "following %s:%d (%s; position in %s, term %" PRIu64 ")%s", host,
            port, role_source_name(src), rts, repl_role_term(srv),
            st->rw ? ", taking writes too (-rw)" : ", read-only");
    snprintf(msg, msglen, "OK following %s:%d", host, port);
    return 0;
}

int repl_role_follow(kura_server *srv, const char *host, int port, uint64_t min_term,
                     role_source source, char *msg, size_t msglen)
{
    return replctl_follow(srv, host, port, min_term, source, 0, msg, msglen) == 0 ? KURA_OK
                                                                               : KURA_EINVAL;
}

int repladmin_heard_term(kura_server *srv, uint64_t term, const char *host, int port,
                         char *msg, size_t msglen)
{
    role_state rs;
    char why[400], fmsg[600];
    repl_role_get(srv, &rs);
    if (term <= rs.term || !host_word_ok(host) || port < 1 || port > 65535) {
        snprintf(msg, msglen, "TERM %" PRIu64 " %s", rs.term, role_kind_name(rs.role));
        return 0;
    }
    snprintf(why, sizeof(why), "%s:%d, which replaced this server, is at term %" PRIu64, host,
             port, term);
    repl_role_fence(srv, term, why);    /* no write taken from here */
    if (replctl_follow(srv, host, port, term, ROLE_SRC_FENCE, 0, fmsg, sizeof(fmsg)) < 0) {
        log_msg(KURA_LOG_ERROR, "fenced, and cannot follow %s:%d: %s", host, port, fmsg);
        snprintf(msg, msglen, "FENCED %" PRIu64 " not following: %.300s", term, fmsg);
        return 0;
    }
    snprintf(msg, msglen, "FENCED %" PRIu64 " following %s:%d", term, host, port);
    return 0;
}

/* ---- the text command ------------------------------------------------------- */

static bool token_is(const text_token *t, const char *w)
{
    return t->length == strlen(w) && memcmp(t->value, w, t->length) == 0;
}

/* "repl term TERM HOST PORT" (replprobe.c's): the words checked, then
 * repladmin_heard_term. */
static int term_command(kura_server *srv, text_token *tok, int ntok, char *msg, size_t msglen)
{
    char w[3][300];
    if (ntok != 6) {
        snprintf(msg, msglen, "CLIENT_ERROR usage: repl term TERM HOST PORT");
        return -1;
    }
    for (int i = 0; i < 3; i++) {
        size_t n = tok[2 + i].length < sizeof(w[i]) - 1 ? tok[2 + i].length : sizeof(w[i]) - 1;
        memcpy(w[i], tok[2 + i].value, n);
        w[i][n] = '\0';
    }
    char *e1, *e2;
    unsigned long long term = strtoull(w[0], &e1, 10);
    long port = strtol(w[2], &e2, 10);
    if (*e1 || e1 == w[0] || *e2 || e2 == w[2]) {
        snprintf(msg, msglen, "CLIENT_ERROR usage: repl term TERM HOST PORT");
        return -1;
    }
    return repladmin_heard_term(srv, term, w[1], (int)port, msg, msglen);
}

bool repladmin_command(kura_server *srv, kura_session *s, text_token *tok, int ntok,
                       kura_buf *out)
{
    char msg[600];
    int rc;
    if (ntok < 3)
        return false;
    if (token_is(&tok[1], "promote")) {
        if (ntok == 3 || (ntok == 4 && token_is(&tok[2], "force"))) {
            pthread_mutex_lock(&ctl_lock);
            rc = promote(srv, 0, ROLE_SRC_PROMOTE, ntok == 4, msg, sizeof(msg));
            pthread_mutex_unlock(&ctl_lock);
        } else {
            rc = -1;
            snprintf(msg, sizeof(msg), "CLIENT_ERROR usage: repl promote [force]");
        }
    } else if (token_is(&tok[1], "follow")) {
        char host[300];
        int port = 11211;
        if (ntok != 4 || tok[2].length >= sizeof(host)) {
            snprintf(msg, sizeof(msg), "CLIENT_ERROR usage: repl follow HOST[:PORT]");
            rc = -1;
        } else {
            memcpy(host, tok[2].value, tok[2].length);
            host[tok[2].length] = '\0';
            /* HOST, HOST:PORT, [V6]:PORT */
            char *colon = strrchr(host, ':'), *h = host;
            bool bare_v6 = colon && host[0] != '[' && strchr(host, ':') != colon;
            if (colon && !bare_v6 && (host[0] != '[' || colon[-1] == ']')) {
                char *end;
                long p = strtol(colon + 1, &end, 10);
                port = *end || end == colon + 1 || p > 65535 ? 0 : (int)p;
                *colon = '\0';
            }
            if (h[0] == '[' && h[strlen(h) - 1] == ']') {
                h[strlen(h) - 1] = '\0';
                h++;
            }
            rc = replctl_follow(srv, h, port, 0, ROLE_SRC_FOLLOW, 0, msg, sizeof(msg));
        }
    } else if (token_is(&tok[1], "reset")) {
        rc = ntok == 3 ? repl_role_reset(srv, msg, sizeof(msg))
                       : (snprintf(msg, sizeof(msg), "CLIENT_ERROR usage: repl reset"), -1);
    } else if (token_is(&tok[1], "term")) {
        rc = term_command(srv, tok, ntok, msg, sizeof(msg));
    } else {
        return false;
    }
    if (rc < 0 && strncmp(msg, "CLIENT_ERROR", 12) == 0)
        kura_session_client_error(s, out, msg);
    else
        kura_session_reply(s, out, msg);
    return true;
}

/* Tokyo Tyrant's setmst (kura_server_info.tt_setmst, src/proto/tt.c): a
 * host names the master to follow, an empty one (or port 0) makes this
 * server a master, as ttserver's does.  A timestamp ts (tcrmgr setmst -ts)
 * is the position to follow from, after the master's update-log row of
 * that timestamp, written to the rts file as ttserver writes its own; 0
 * keeps the rts file's position.  opts (-rcc: RDBROCHKCON) is taken and
 * means nothing here: a kura replica applies the master's results, not
 * its requests, so there is no outcome to compare (docs/migration.md). */
int repladmin_tt_setmst(void *ctx, const char *host, int port, uint64_t ts, int opts)
{
    kura_server *srv = ctx;
    char msg[600], shown[KURA_ESCAPED_MAX(256)];
    (void)opts;
    int rc;
    if (host[0] && port > 0) {
        rc = replctl_follow(srv, host, port, 0, ROLE_SRC_SETMST, ts, msg, sizeof(msg));
    } else {
        /* ttserver's stop is taken whatever the state: not following
         * already is the state asked for, and answers 0 as there; a
         * fenced server, or a replica of no one, is made a master, as
         * the stop asks */
        role_state rs;
        repl_role_get(srv, &rs);
        pthread_mutex_lock(&replctl_slave_lock);
        bool replica = srv->repl_slave != NULL || rs.role == ROLE_FENCED ||
                       rs.role == ROLE_REPLICA;
        pthread_mutex_unlock(&replctl_slave_lock);
        if (replica) {
            pthread_mutex_lock(&ctl_lock);
            rc = promote(srv, 0, ROLE_SRC_SETMST, false, msg, sizeof(msg));
            pthread_mutex_unlock(&ctl_lock);
        } else {
            rc = 0;
        }
        if (!replica)
            snprintf(msg, sizeof(msg), "not a replica: nothing to stop");
    }
    /* the host as the client sent it, escaped (a newline would forge a
     * line); msg shows only a host that passed host_word_ok */
    log_msg(rc == 0 ? KURA_LOG_INFO : KURA_LOG_ERROR, "Tokyo Tyrant setmst %s:%d: %s",
            kura_escape(shown, sizeof(shown), host, strlen(host)), port, msg);
    return rc == 0 ? KURA_OK : KURA_EFAILED;
}

