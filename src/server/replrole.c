/*
 * replrole.c - the server's replication role and term (include/kura/
 * replrole.h has the contract; docs/replication.md, "Roles and terms").
 *
 * The role is state, not a command line: it is kept in DIR/role of -ulog
 * (src/repl/rolefile.c) with the term and where it came from, and a start
 * takes it over -mhost/-mport unless it came from the command line itself
 * (a first start, or after "repl reset").  The term rises with each
 * promote and travels in the stream's first lines and heartbeats
 * (src/repl/hello.c, master_loop.c); a master that hears of a higher one
 * is fenced: writes refused at once (the engine's replica switch), the
 * term saved, "fenced" until it follows or is promoted.
 *
 * This file is the state (load, decide, save), the readers, the fence and
 * the gate; the changes of role that stop or start the replica thread are
 * repladmin.c's (promote, follow), the probe of a replaced master
 * replprobe.c's, the loop check replchain.c's.
 *
 * Locks: r_lock guards r_st and the file, held to copy or save it (one
 * fsync), never across another lock's wait; the term, the running kind
 * and the fence are atomics too, read lock-free on every write.
 */
#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "kura/replrole.h"
#include "server.h"

struct repl_role {
    pthread_mutex_t r_lock;
    role_state r_st;                    /* r_lock: as persisted (or would be) */
    bool r_persist;                     /* -ulog: kept in DIR/role */
    char r_dir[4096];
    _Atomic uint64_t r_term;
    _Atomic int r_kind;                 /* role_kind running now */
    _Atomic bool r_rw;                  /* -rw: a replica that takes writes */
    bool (*_Atomic r_gate)(void *arg);  /* repl_role_set_gate's, set once */
    void *_Atomic r_gate_arg;
    _Atomic uint64_t r_fences;          /* times fenced */
    struct replprobe *r_probe;          /* replprobe.c's, NULL when not probing */
};

/* The engine's check before every local change: not fenced (whatever a
 * promote racing with a fence left the engine's replica switch at), and
 * the failover gate open. */
static bool role_write_gate(void *arg)
{
    repl_role *r = arg;
    if (atomic_load_explicit(&r->r_kind, memory_order_relaxed) == ROLE_FENCED)
        return false;
    bool (*gate)(void *) = atomic_load_explicit(&r->r_gate, memory_order_acquire);
    return !gate || gate(atomic_load_explicit(&r->r_gate_arg, memory_order_relaxed));
}

/* Saves st as the state (r_lock held): KURA_OK, or an error with why. */
static int do_save(repl_role *r, const role_state *st, char *err, size_t errlen)
{
    role_state next = *st;
    next.changed = (uint64_t)time(NULL);
    if (r->r_persist) {
        int rc = rolefile_save(r->r_dir, &next, err, errlen);
        if (rc != KURA_OK)
            return rc;
    }
    r->r_st = next;
    if (next.term > atomic_load(&r->r_term))
        atomic_store(&r->r_term, next.term);
    return KURA_OK;
}

int replrole_save(kura_server *srv, role_kind kind, role_source src, const char *host, int port,
                  uint64_t min_term, bool keep_former, char *err, size_t errlen)
{
    repl_role *r = srv->role;
    pthread_mutex_lock(&r->r_lock);
    role_state st = r->r_st;
    st.role = kind;
    st.source = src;
    snprintf(st.host, sizeof(st.host), "%s", kind == ROLE_REPLICA && host ? host : "");
    st.port = kind == ROLE_REPLICA ? port : 0;
    if (kind == ROLE_MASTER && host) {  /* the master it replaced: probed */
        snprintf(st.former, sizeof(st.former), "%s", host);
        st.former_port = port;
    } else if (!keep_former) {
        st.former[0] = '\0';
        st.former_port = 0;
    }
    /* a master's term rises past every term heard, here under the lock
     * (a fence racing with the promote cannot leave them equal); one at
     * its largest cannot, and wrapping would undo every fence */
    if (kind == ROLE_MASTER && st.term == UINT64_MAX) {
        pthread_mutex_unlock(&r->r_lock);
        snprintf(err, errlen, "the term is at its largest (%" PRIu64 ") and cannot rise",
                 st.term);
        return KURA_EINVAL;
    }
    uint64_t term = kind == ROLE_MASTER ? st.term + 1 : st.term;
    st.term = term > min_term ? term : min_term;
    int rc = do_save(r, &st, err, errlen);
    if (rc == KURA_OK)
        atomic_store(&r->r_kind, kind);
    pthread_mutex_unlock(&r->r_lock);
    return rc;
}

uint64_t repl_role_term(kura_server *srv)
{
    return srv->role ? atomic_load(&srv->role->r_term) : 0;
}

bool repl_role_is_writable(kura_server *srv)
{
    repl_role *r = srv->role;
    if (!r)
        return true;
    int kind = atomic_load(&r->r_kind);
    bool role_ok = kind == ROLE_MASTER || kind == ROLE_NONE ||
                   (kind == ROLE_REPLICA && atomic_load(&r->r_rw));
    return role_ok && role_write_gate(r);
}

void repl_role_get(kura_server *srv, role_state *out)
{
    repl_role *r = srv->role;
    pthread_mutex_lock(&r->r_lock);
    *out = r->r_st;
    pthread_mutex_unlock(&r->r_lock);
    out->role = (role_kind)atomic_load(&r->r_kind);
    out->term = atomic_load(&r->r_term);
}

bool replrole_persisted(kura_server *srv)
{
    return srv->role && srv->role->r_persist;
}

int repl_role_set_gate(kura_server *srv, bool (*gate)(void *arg), void *arg)
{
    repl_role *r = srv->role;
    if (!gate || atomic_load(&r->r_gate))
        return KURA_EINVAL;
    atomic_store_explicit(&r->r_gate_arg, arg, memory_order_relaxed);
    atomic_store_explicit(&r->r_gate, gate, memory_order_release);
    return KURA_OK;
}

int repl_role_fence(kura_server *srv, uint64_t term, const char *why)
{
    repl_role *r = srv->role;
    char err[300];
    if (!r || term <= atomic_load(&r->r_term))
        return KURA_OK;
    pthread_mutex_lock(&r->r_lock);     /* the kind and the file change together */
    if (term <= atomic_load(&r->r_term)) {      /* raised meanwhile (a promote) */
        pthread_mutex_unlock(&r->r_lock);
        return KURA_OK;
    }
    int kind = atomic_load(&r->r_kind);
    bool master = kind == ROLE_MASTER || kind == ROLE_NONE;
    if (master) {
        atomic_store(&r->r_kind, ROLE_FENCED);  /* first: the engine's gate refuses */
        engine_set_replica(srv->engine, true);
        atomic_fetch_add(&r->r_fences, 1);
    }
    atomic_store(&r->r_term, term);     /* -syncrepl's waits see it at once */
    role_state st = r->r_st;
    st.term = term;
    if (master) {
        st.role = ROLE_FENCED;
        st.source = ROLE_SRC_FENCE;
    }
    int rc = do_save(r, &st, err, sizeof(err));
    pthread_mutex_unlock(&r->r_lock);
    if (rc != KURA_OK)
        log_msg(KURA_LOG_ERROR, "cannot save the term %" PRIu64 " in %s/%s: %s (a restart may "
                "take the older role)", term, r->r_dir, ROLEFILE_NAME, err);
    if (master)
        log_msg(KURA_LOG_ERROR, "WARNING: fenced: %s; term %" PRIu64 " is newer than this "
                "master's: writes are refused from now on (repl follow the new master, or "
                "repl promote to take writes again)", why, term);
    else
        log_msg(KURA_LOG_INFO, "term %" PRIu64 " heard (%s)", term, why);
    return KURA_OK;
}

int repl_role_reset(kura_server *srv, char *msg, size_t msglen)
{
    repl_role *r = srv->role;
    char err[300];
    pthread_mutex_lock(&r->r_lock);
    if (atomic_load(&r->r_kind) == ROLE_FENCED) {
        /* the command line would make it a master at the term of the one
         * that replaced it, which nothing fences: two masters, one term */
        pthread_mutex_unlock(&r->r_lock);
        snprintf(msg, msglen, "SERVER_ERROR fenced: a reset would bring it back a master at "
                 "the current master's term; repl follow the current master, or repl promote, "
                 "first");
        return KURA_EINVAL;
    }
    role_state st = r->r_st;
    st.source = ROLE_SRC_CMDLINE;
    int rc = do_save(r, &st, err, sizeof(err));
    pthread_mutex_unlock(&r->r_lock);
    if (rc != KURA_OK) {
        snprintf(msg, msglen, "SERVER_ERROR cannot save %s/%s: %s", r->r_dir, ROLEFILE_NAME, err);
        return rc;
    }
    log_msg(KURA_LOG_INFO, "repl reset: the persisted role is cleared (term %" PRIu64 " kept): "
            "the next start takes the command line's role", st.term);
    snprintf(msg, msglen, "OK the next start takes the command line's role (term %" PRIu64
             " kept)", st.term);
    return KURA_OK;
}

/* ---- the stream's term callbacks (repl_config) ---------------------------------- */

static uint64_t cfg_term(void *arg)
{
    return repl_role_term(arg);
}

/* A term from the master this server follows (adopted when higher), or
 * from a replica's request (a master fences; a fenced server takes it, so
 * that a promote of it later goes past every term it heard). */
static void cfg_heard(void *arg, uint64_t term, bool from_master, const char *peer)
{
    kura_server *srv = arg;
    repl_role *r = srv->role;
    char why[300];
    if (term <= atomic_load(&r->r_term))
        return;
    int kind = atomic_load(&r->r_kind);
    if (from_master || kind != ROLE_REPLICA) {
        snprintf(why, sizeof(why), "%s %.200s says term %" PRIu64,
                 from_master ? "the master" : "replica", peer, term);
        repl_role_fence(srv, term, why);
    }
}

void replrole_config(kura_server *srv, repl_config *rc)
{
    rc->term = cfg_term;
    rc->heard_term = cfg_heard;
    rc->term_arg = srv;
}

/* ---- the start ------------------------------------------------------------------------ */

static void describe(const role_state *st, char *b, size_t len)
{
    if (st->role == ROLE_REPLICA)
        snprintf(b, len, "replica of %s:%d", st->host, st->port);
    else
        snprintf(b, len, "%s", role_kind_name(st->role));
}

/* The persisted role over the command line's: -mhost/-mport rewritten. */
static void take_persisted(kura_server *srv, const role_state *f, const role_state *cmd)
{
    kura_settings *st = srv->settings;
    char was[300], now[300], date[32];
    describe(cmd, was, sizeof(was));
    describe(f, now, sizeof(now));
    time_t t = (time_t)f->changed;
    struct tm tm;
    gmtime_r(&t, &tm);
    strftime(date, sizeof(date), "%Y-%m-%dT%H:%M:%SZ", &tm);
    /* the settings point at it for the process's life (one server a process) */
    static char mhost[ROLEFILE_HOST_MAX + 1];
    if (f->role == ROLE_REPLICA) {
        snprintf(mhost, sizeof(mhost), "%s", f->host);
        st->mhost = mhost;
        st->mport = f->port;
    } else {
        st->mhost = NULL;
    }
    if (strcmp(was, now) != 0)
        log_msg(KURA_LOG_INFO, "the persisted role (%s, term %" PRIu64 ", from %s at %s, in "
                "%s/%s) overrides the command line (%s): kuractl repl reset clears it, and the "
                "next start takes the command line's", now, f->term, role_source_name(f->source),
                date, srv->role->r_dir, ROLEFILE_NAME, was);
}

int replrole_start(kura_server *srv)
{
    kura_settings *st = srv->settings;
    repl_role *r = calloc(1, sizeof(*r));
    char err[300];
    if (!r)
        return -1;
    pthread_mutex_init(&r->r_lock, NULL);
    srv->role = r;
    atomic_store(&r->r_rw, st->rw);
    role_state cmd = { .role = st->mhost ? ROLE_REPLICA : ROLE_MASTER };
    if (st->mhost) {
        snprintf(cmd.host, sizeof(cmd.host), "%s", st->mhost);
        cmd.port = st->mport;
    }
    role_state f = { 0 };
    r->r_persist = st->ulog_dir != NULL;
    if (r->r_persist) {
        snprintf(r->r_dir, sizeof(r->r_dir), "%s", st->ulog_dir);
        int rc = rolefile_load(r->r_dir, &f, err, sizeof(err));
        if (rc < 0) {
            log_msg(KURA_LOG_ERROR, "%s/%s: %s: the replication role and term it keeps cannot be "
                    "trusted, so this server does not start (a wrong role could take writes "
                    "beside the real master).  Move the file aside to start with the command "
                    "line's role and term 0 (docs/replication.md, \"Roles and terms\")",
                    r->r_dir, ROLEFILE_NAME, err);
            return -1;
        }
    }
    atomic_store(&r->r_term, f.term);
    if (f.role != ROLE_NONE && f.source != ROLE_SRC_CMDLINE) {
        take_persisted(srv, &f, &cmd);
        r->r_st = f;
        atomic_store(&r->r_kind, f.role);
        if (f.role == ROLE_FENCED) {
            engine_set_replica(srv->engine, true);
            log_msg(KURA_LOG_ERROR, "WARNING: fenced (term %" PRIu64 " was heard of while a "
                    "master): writes are refused until repl follow or repl promote", f.term);
        }
    } else {
        role_state next = cmd;
        next.term = f.term;
        next.source = ROLE_SRC_CMDLINE;
        if (do_save(r, &next, err, sizeof(err)) != KURA_OK) {
            log_msg(KURA_LOG_ERROR, "cannot write %s/%s: %s", r->r_dir, ROLEFILE_NAME, err);
            return -1;
        }
        atomic_store(&r->r_kind, cmd.role);
    }
    engine_set_write_gate(srv->engine, role_write_gate, r);
    if (atomic_load(&r->r_kind) == ROLE_MASTER && r->r_st.former[0])
        replrole_probe_start(srv);
    return 0;
}

void replrole_stop(kura_server *srv)
{
    repl_role *r = srv->role;
    if (!r)
        return;
    replrole_probe_stop(srv);
    /* the workers, the committer and the replication threads are stopped */
    engine_set_write_gate(srv->engine, NULL, NULL);
    srv->role = NULL;
    pthread_mutex_destroy(&r->r_lock);
    free(r);
}

struct replprobe **replrole_probe_slot(kura_server *srv)
{
    return &srv->role->r_probe;
}

/* ---- stats repl ------------------------------------------------------------------------ */

void replrole_stats(kura_server *srv, bool all, kura_stat_fn emit, void *arg)
{
    repl_role *r = srv->role;
    char b[300];
    if (!r)
        return;
    role_state st;
    if (!all && !srv->ulog && !srv->repl_slave)
        return;                         /* "stats" of a server that does not replicate */
    repl_role_get(srv, &st);
    snprintf(b, sizeof(b), "%" PRIu64, st.term);
    emit(arg, "repl_term", b);
    emit(arg, "repl_fenced", st.role == ROLE_FENCED ? "1" : "0");
    if (!all)
        return;
    emit(arg, "repl_role_source", role_source_name(st.source));
    emit(arg, "repl_role_persisted", r->r_persist ? "1" : "0");
    snprintf(b, sizeof(b), "%s:%d", st.former, st.former_port);
    emit(arg, "repl_former_master", st.former[0] ? b : "-");
    snprintf(b, sizeof(b), "%" PRIu64, atomic_load(&r->r_fences));
    emit(arg, "repl_fences", b);
}
