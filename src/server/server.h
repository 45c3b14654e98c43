/*
 * server.h - the daemon's own pieces, private to src/server.
 *
 * main.c reads the options (options.c), opens the store and the engine,
 * and runs the listener on the main thread's event base; listener.c accepts
 * connections and hands each to a worker (worker.c), round-robin; a worker
 * runs its own event base and owns its connections (conn.c) for their whole
 * life, so the request path takes no lock of the server's.
 */
#ifndef KURA_SERVER_H
#define KURA_SERVER_H

#include <event2/event.h>
#include <pthread.h>
#include <stdbool.h>
#include <stdint.h>
#include <sys/types.h>

#include "kura/engine.h"
#include "kura/journal.h"
#include "kura/proto.h"
#include "kura/repl.h"
#include "kura/replrole.h"

typedef struct kura_server kura_server;

typedef struct kura_settings {
    const char *host;           /* -host / -l; default "localhost": 127.0.0.1 and ::1 */
    int port;                   /* -port / -p; 0 = no TCP */
    const char *unix_path;      /* -s */
    int threads;                /* -th / -t */
    int maxconns;               /* -c */
    bool maxconns_given;        /* -c was given (else fdlimit.c may lower it) */
    int idle_timeout;           /* -tout, seconds, 0 = never */
    uint64_t mem_limit;         /* -m, bytes */
    const char *memory_file;    /* -e: the cache's memory file, or NULL */
    uint64_t item_size_max;     /* -I, bytes */
    int key_max;                /* -kmax: Tokyo Tyrant's longest key, bytes */
    int verbosity;              /* -v, -vv */
    int sync_mode;              /* -sync */
    const char *dbname;         /* positional */
    bool recover;               /* -recover */
    bool daemonize;             /* -dmn / -d */
    const char *pid_path;       /* -pid / -P */
    const char *user;           /* -u */
    const char *log_path;       /* -log; NULL = stderr */
    int log_base;               /* KURA_LOG_INFO, or -ld KURA_LOG_DEBUG, -le KURA_LOG_WARNING */
    const char *conf_path;      /* -conf */
    /* the update log and replication (docs/replication.md) */
    const char *ulog_dir;       /* -ulog; NULL = no update log */
    uint64_t ulim;              /* -ulim: one update-log file's size */
    uint64_t ulmax;             /* -ulmax: all of them; 0 = no cap */
    int sid;                    /* -sid: this server's id */
    const char *mhost;          /* -mhost: follow this master; NULL = none */
    int mport;                  /* -mport */
    const char *rts_path;       /* -rts: the replication position file */
    bool rw;                    /* -rw: a replica that also takes writes */
    int syncrepl;               /* -syncrepl: replies wait for this many replicas */
    int syncrepl_timeout;       /* -syncrepl-timeout, milliseconds */
    bool syncrepl_ack;          /* -syncrepl-fail ack (else close) */
    int repl_max;               /* -repl-max: replication streams at once */
    bool divergence_refuse;     /* -repl-divergence refuse (else copy) */
    /* automatic failover on etcd (src/ha/, docs/replication.md) */
    const char *ha_etcd;        /* -ha-etcd URL[,URL...]; NULL: no failover */
    const char *ha_cluster;     /* -ha-cluster NAME (default "kura") */
    const char *ha_name;        /* -ha-name NAME (default: the address, HOST:PORT) */
    int ha_ttl;                 /* -ha-ttl SECONDS: the leader's lease */
    int ha_max_lag;             /* -ha-max-lag MS: /replica's bound */
    const char *ha_auth_file;   /* -ha-etcd-auth FILE: etcd's user:password */
    kura_auth *ha_auth;         /* its entries (options_parse) */
    const char *ha_ca;          /* -ha-etcd-ca FILE: https:// etcd's CAs */
    /* snapshots (docs/operations.md) */
    const char *bgs_dir;        /* -bgs; NULL = none */
    int bgsi;                   /* -bgsi: seconds between them; 0 = on demand only */
    int bgsc;                   /* -bgsc: enum kura_codec */
    int bgsn;                   /* -bgsn: how many are kept */
    bool bgs_stop;              /* -bgsstop: one more at a clean stop */
    const char *metrics;        /* -metrics [HOST:]PORT: Prometheus; NULL = none */
    const char *metrics_auth_file;  /* -metrics-auth: /metrics' HTTP Basic credentials */
    kura_auth *metrics_auth;    /* -metrics-auth's entries, else -Y's; NULL: /metrics open */
    int unix_mode;              /* -a: the unix socket's mode (default 0700) */
    const char *auth_file;      /* -Y: memcached's ASCII authentication */
    kura_auth *auth;            /* -Y's entries, read by options_parse */
    const char *mauth_file;     /* -mauth: a replica's credentials for its master */
    kura_auth *mauth;           /* whose first entry a replica sends: -mauth's, else
                                   -Y's (NULL: none; read by options_parse) */
    bool sasl;                  /* -S: SASL over the binary protocol, which alone is served */
    kura_auth *sasl_pwdb;       /* -S: MEMCACHED_SASL_PWDB's entries; NULL: none */
    bool ssl;                   /* -Z: TLS on the TCP ports (tls.c) */
    const char *ext_opts;       /* -o: memcached's ssl_* options (tls.c) */
    bool mtls;                  /* -mtls: a replica reaches its master over TLS */
    const char *mtls_ca;        /* -mtls-ca: the CAs the master's certificate must chain to */
    const char *mtls_cert;      /* -mtls-cert: the replica's own certificate and key (PEM) */
    const char *delimiter;      /* -D: "stats detail"'s prefix delimiter (its first
                                   character); given: counting starts on */
    uint64_t given;             /* options.c: bit i set when options[i] was given */
    /* ttserver and ktserver options (options.c, docs/migration.md) */
    int port2;                  /* -plex port=N beside -port: a second TCP port; 0 = none */
    const char *kt_listen;      /* -kt [notls:][HOST:]PORT: Kyoto Tycoon's protocols; NULL none */
    bool kill_old;              /* -kl: stop the server the pid file names first */
    char notes[32][320];        /* what they mapped to or why they have no effect, logged
                                   at INFO once the log is open */
    int nnotes;
} kura_settings;

/* swap.c: a replica's full copy in a store of its own, swapped in whole */
int swap_tidy(const char *dbname);              /* at start: what a crash left */
kura_store *swap_open_shadow(void *srv);
int swap_in(void *srv, kura_store *shadow);
/* Renames NAME to .old.NAME (if there) and .copy.NAME to NAME, syncs the
 * directory; with then_remove_old, removes .old.NAME.  0 or KURA_ESYS
 * (NAME put back).  The stores of both must be closed. */
int swap_files(const char *dbname, bool then_remove_old);
void swap_remove_old(const char *dbname);

/* snapd.c: snapshots.  restore: at start, before the engine, loads the
 * newest good snapshot into a blank store (*store may be replaced); for
 * the cache, whose state is not kept, *max_cas is the largest cas loaded
 * (engine_observe_cas it); 0 or -1 (logged). */
int snapd_restore(struct kura_server *srv, kura_store **store, uint64_t *max_cas);
int snapd_start(struct kura_server *srv);
int snapd_tt_job(void *ctx, kura_job *j);         /* kura_server_info.tt_job */
/* Before the workers stop: a job finished from now on wakes nobody. */
void snapd_jobs_detach(void);
/* ttrestore.c, on the snapshot thread: Tokyo Tyrant's restore of the
 * update log at dir (ttserver's *.ulog files, or kura's own) from
 * timestamp ts; opts ttserver's (RDBROCHKCON: stop at the first record
 * whose outcome differs from the logged one).  KURA_OK, or an error
 * logged with its reason. */
int ttrestore_run(struct kura_server *srv, const char *dir, uint64_t ts, int opts);
/* Registers "snapshot" and "stats snapshot" (cmdtab.h), before the workers
 * start; without -bgs they answer that snapshots are not enabled.  0 or -1
 * (logged). */
int snapd_register(struct kura_server *srv);
/* After the workers, before replication stops (a job asks the role and
 * writes through the engine): the thread ends, a copy or restore running
 * stops at its next record (snapd_stopping), the queued ones fail.  Then
 * snapd_stop (which halts too, if not yet) takes -bgs-stop's snapshot. */
void snapd_halt(void);
bool snapd_stopping(void);
void snapd_stop(struct kura_server *srv, bool clean);

/* options.c: fills s from argv (and the -conf file first); on a bad option
 * prints the reason and returns 2 (the exit status); -h and -version print
 * and return 1. */
int options_parse(kura_settings *s, int argc, char **argv);
void options_defaults(kura_settings *s);
const char *options_sync_name(int mode);
/* Applies one option by name ("-port"), val NULL for a switch; where
 * ("FILE:LINE") prefixes any message.  Returns 0 or 2. */
int options_set(kura_settings *s, const char *name, const char *val, const char *where);

/* conf.c: applies every option in the file; returns 0 or 2 (reason printed). */
int conf_load(kura_settings *s, const char *path);

/* log.c */
void log_init(int base, int verbosity);
int log_open(const char *path);         /* 0, or -1 with the reason on stderr */
void log_reopen(void);                  /* SIGHUP */
void log_chown(uid_t uid, gid_t gid);   /* before -u, so the user can reopen it */
void log_startup_done(void);            /* errors stop being copied to stderr */
int log_stderr_to_file(void);           /* stderr becomes the log file; -1 if none */
void log_request(int conn_id, const char *line, size_t len);
void log_msg(int level, const char *fmt, ...) __attribute__((format(printf, 2, 3)));
/* Once a second (main thread): writes the summary of repeats whose window
 * is over. */
void log_tick(void);

/* daemon.c: -dmn, -pid, -u, and the stop watchdog. */
int daemon_check_user(const kura_settings *s);  /* 0, or 2 with the reason printed */
void daemon_absolute_paths(kura_settings *s);
void daemon_detach(void);               /* returns in the daemon only */
void daemon_ready(void);                /* tells the waiting parent, detaches stdio */
int pidfile_lock(const char *path);     /* 0, or -1 with the reason logged */
/* killold.c: ttserver's -kl, the server pid_path names stopped first;
 * 0, or -1 with the reason logged */
int kill_old_server(const char *pid_path);
int pidfile_write(void);
void pidfile_remove(void);
int daemon_drop_privileges(const kura_settings *s);
void daemon_stop_watchdog(int seconds);

/* connlist.c: "stats conns".  Every listening socket and connection has an
 * entry from its accept (or bind) to its close; its owner sets its state
 * (and, for a request, the time of its last command) without a lock. */
typedef struct conn_entry conn_entry;
enum conn_state { CONN_NEW_CMD, CONN_PARSE_CMD, CONN_READ, CONN_MWRITE, CONN_LISTENING };
conn_entry *connlist_add(int fd, bool listening);       /* NULL: not listed (no memory) */
void connlist_remove(conn_entry *e);                    /* NULL: nothing */
void connlist_set(conn_entry *e, int state, bool request);
int connlist_register(kura_cmdtab *cmds);               /* the "conns" group; 0 or -1 */

/* metrics.c: -metrics' HTTP server on a thread of its own, started once
 * the workers run and the command table is complete, stopped before the
 * workers (what it reads must outlive it).  0, or -1 (logged). */
int metrics_start(struct kura_server *srv);
void metrics_stop(void);

/* main.c: mkdir -p; 0 or -1 with errno */
int mkdir_parents(const char *dir);
/* main.c: the store's and the replication's reports, into our log */
void store_log(int level, const char *line);

/* replctl.c: "repl" and replication's stats lines (registered before the
 * workers start), the master and the replica thread (after the engine
 * opens; stopped before it closes).  0 or -1 (logged). */
int repl_register(struct kura_server *srv);
/* watchcmd.c: "watch", memcached 1.6's log stream (registered with the
 * other commands; the stream's thread stops with kura_watch_stop).  0 or -1. */
int watch_register(struct kura_server *srv);
int start_repl(struct kura_server *srv);
void stop_repl(struct kura_server *srv);
/* replctl.c: held to change srv->repl_slave or to read it (stats); never
 * held across a replica's stop. */
extern pthread_mutex_t replctl_slave_lock;
void replctl_config(struct kura_server *srv, repl_config *out);
int replctl_rts_path(const kura_settings *st, char *buf, size_t len);

/* repladmin.c: failover by command (docs/replication.md, "Failover").
 * promote: a replica stops following (its thread stopped, its position
 * written durably), takes writes, and msg says from where: "PROMOTED
 * <master-position> <own-last-ts>"; follow: stops any following, becomes a
 * read-only replica (a -rw server keeps taking writes) of host:port with
 * the same rts file (from a nonzero `from`, the position written to it
 * first: Tokyo Tyrant's setmst -ts): "OK following HOST:PORT".  0, or -1 with msg the
 * error line (SERVER_ERROR or CLIENT_ERROR).  Either blocks its caller
 * while the old replica thread stops: at most its connect timeout (5 s)
 * plus a sync of the store.  Called from any thread (the text protocol's
 * "repl promote|follow", Tokyo Tyrant's setmst). */
int replctl_follow(struct kura_server *srv, const char *host, int port, uint64_t min_term,
                   role_source src, uint64_t from, char *msg, size_t msglen);
int replctl_promote(struct kura_server *srv, char *msg, size_t msglen);
/* Tokyo Tyrant's setmst, as kura_server_info.tt_setmst (proto.h): follow,
 * or promote for an empty host. */
int repladmin_tt_setmst(void *ctx, const char *host, int port, uint64_t ts, int opts);
/* "repl promote [force]" and "repl follow HOST[:PORT]": true when the
 * request was one of them (answered). */
bool repladmin_command(struct kura_server *srv, kura_session *s, text_token *tok, int ntok,
                       kura_buf *out);

/* replrole.c: the role and term (include/kura/replrole.h has the calls the
 * failover code makes).  start: before start_repl's replica (loads DIR/role
 * of -ulog, may rewrite st->mhost/mport from it; -1: a corrupt file,
 * reported, the server does not start).  save: the role changed (a
 * promote's host:port is the master it replaced); the term rises to
 * min_term, and a master's by one at least (under the state's lock, so a
 * fence racing with it cannot leave two masters at one term).  config:
 * the term callbacks of a repl_config. */
typedef struct repl_role repl_role;
int replrole_start(struct kura_server *srv);
void replrole_stop(struct kura_server *srv);
int replrole_save(struct kura_server *srv, role_kind kind, role_source src, const char *host,
                  int port, uint64_t min_term, bool keep_former, char *err, size_t errlen);
void replrole_config(struct kura_server *srv, repl_config *rc);
void replrole_stats(struct kura_server *srv, bool all, kura_stat_fn emit, void *arg);
bool replrole_persisted(struct kura_server *srv);
struct replprobe **replrole_probe_slot(struct kura_server *srv);
/* replprobe.c: a promoted master tells the master it replaced, when it
 * answers again, of the higher term ("repl term"), every few seconds with
 * backoff, until the role changes.  start/stop: under repladmin's ctl_lock
 * or at start and stop. */
void replrole_probe_start(struct kura_server *srv);
void replrole_probe_stop(struct kura_server *srv);
void replrole_probe_stats(struct kura_server *srv, kura_stat_fn emit, void *arg);
/* replchain.c: would following host:port form a loop (it follows this
 * server up its chain) or join a chain with no master?  0 (no, or cannot
 * tell: a server that does not answer), or -1 with the refusal in msg.
 * Blocks: each hop is a connection with a 2 s timeout, at most 8 hops. */
int replchain_check(struct kura_server *srv, const char *host, int port, char *msg,
                    size_t msglen);
/* replchain.c: sends req to host:port (a plain connection) and reads the
 * answer into buf (NUL-terminated) until it holds end or "ERROR", within
 * timeout_ms: 0, or -1 (no connection, no complete answer), logged in
 * first with auth when the server asks (-Y, -S).  local: this side's
 * address of the connection, numeric (may be NULL). */
typedef struct replchain_auth {
    const char *user, *pass;            /* NULL: none */
} replchain_auth;
int replchain_ask(const char *host, int port, const replchain_auth *auth, const char *req,
                  const char *end, char *buf, size_t cap, int timeout_ms, char *local,
                  size_t llen);
/* The credentials a replica sends its master (-mauth's first entry, else
 * -Y's), for the connections above. */
void replchain_credentials(struct kura_server *srv, replchain_auth *auth);
/* repladmin.c: "repl term TERM HOST PORT" from the master that replaced
 * this one: the reply line in msg. */
int repladmin_heard_term(struct kura_server *srv, uint64_t term, const char *host, int port,
                         char *msg, size_t msglen);
/* ha_adapter.c: -ha-etcd's failover thread (src/ha/) on this server's
 * roles; start: after the replication and the workers, before the metrics
 * thread (which reads its state) and the listener (0, or -1 logged);
 * stop: after the metrics thread, before the listeners close, so another
 * leads at once. */
int ha_adapter_start(struct kura_server *srv);
void ha_adapter_stop(struct kura_server *srv);
/* -metrics' GET /primary (primary) and /replica, as Patroni's: 200 on the
 * writable leader (without -ha-etcd: a master), or on a replica connected
 * to the leader within -ha-max-lag; else 503; why says which.  Any
 * thread. */
int ha_adapter_http(struct kura_server *srv, bool primary, char *why, size_t len);

/* notify.c: systemd's sd_notify protocol, without libsystemd. */
void notify_ready(const char *status);
void notify_stopping(void);
void notify_watchdog(void);

typedef struct kura_worker kura_worker;

struct kura_server {
    kura_settings *settings;
    kura_engine *engine;
    ul_log *ulog;                       /* NULL without -ulog */
    repl_master *repl_master;           /* serves "repl"; NULL without -ulog */
    repl_slave *repl_slave;             /* NULL unless -mhost */
    repl_role *role;                    /* replrole.c: the role and term */
    /* group commit: replies wait for durability (-sync always, -syncrepl);
     * NULL otherwise.  Set before the listener listens, freed after the
     * workers stop. */
    journal_committer *committer;
    kura_store_config store_cfg;        /* how the store was opened (a replica's copy too) */
    kura_server_info info;
    kura_cmdtab *cmds;                  /* the text protocol's commands, ours registered */
    struct event_base *base;            /* the main thread's */
    kura_worker *workers;
    int nworkers;
    unsigned next_worker;
    bool stopping;
    _Atomic int exit_code;              /* the status of a clean stop (replctl's fatal: 2) */
    /* automatic failover (-ha-etcd): the write fence the role gate and the
     * committer check, kept by the failover thread (ha_adapter.c) */
    kura_fence fence;
    struct ha_node *ha;                 /* NULL without -ha-etcd */
};

/* worker.c */
int workers_start(kura_server *srv);
void workers_stop(kura_server *srv);
/* Hands an accepted socket to the next worker (listener thread only). */
void worker_dispatch(kura_server *srv, int fd, bool tls, bool kt);

/* tls.c: TLS on the TCP ports (-Z, memcached's -o ssl_* options).
 * configure: from options_parse, as the starting user; 0, or 2 with one
 * line printed (a bad option, a file that does not load).  register: the
 * "refresh_certs" command and the ssl_* stats.  The tls_conn_* calls are
 * a worker's, on its own connection. */
struct ssl_st;
int tls_configure(kura_settings *s);
int tls_register(kura_server *srv);
bool tls_enabled(void);
int tls_refresh(char *err, size_t len);         /* 0, or -1 with memcached's message */
void tls_on_hup(void);
void tls_shutdown(void);
struct ssl_ctx_st *tls_master_ctx(void);        /* -mtls's client context; NULL: none */
int tls_handshake_timeout(void);                /* seconds; 0: none */
struct ssl_st *tls_conn_start(int fd);          /* NULL: no memory */
/* 1 done, 0 wants to read, 2 wants to write, -1 failed (counted) */
int tls_conn_handshake(struct ssl_st *ssl);
void tls_conn_failed(void);                     /* one more ssl_handshake_errors */
/* then kura/tlsio.h's kura_tls_recv, _send, _pending and _close */

/* conn.c: creates a connection on a worker's base (worker thread only). */
struct kura_conn;
struct kura_conn *conn_new(kura_worker *w, int fd, bool tls, bool kt);
void conn_close_all(kura_worker *w);

/* worker.c: wakes a worker so it looks at its held connections. */
void worker_wake(kura_worker *w);
/* conn.c: releases held connections whose changes are now durable. */
void conn_release_durable(kura_worker *w);

/* fdlimit.c: makes RLIMIT_NOFILE hold -c connections plus the descriptors
 * open now plus a reserve for the store's files and the workers (raising the
 * soft limit, and the hard one where permitted).  If it cannot: lowers a
 * default -c to fit, or refuses an explicit one.  0, or -1 with the reason
 * logged. */
int fdlimit_setup(kura_settings *s);

/* listener.c */
int listener_open(kura_server *srv);     /* binds */
/* Binds host:port for a listener (what: "" or "metrics: ", for the log):
 * "localhost" is 127.0.0.1 and ::1, a family the host lacks skipped with
 * a line; "" or "*" every address.  The count of sockets put in fds
 * (room for max), or -1 with the reason logged. */
int listener_bind(const char *what, const char *host, int port, int *fds, int max);
/* The TCP addresses bound, for the log: "127.0.0.1 and ::1". */
const char *listener_addresses(void);
int listener_listen(kura_server *srv);   /* then accepts */
void listener_close(kura_server *srv);
/* -u: the unix socket (-s), bound as root, becomes the user's (daemon.c,
 * before root is given up). */
void listener_chown(uid_t uid, gid_t gid);
struct sockaddr_storage;
struct addrinfo;
/* The addresses the TCP listening sockets are bound to (getsockname; the
 * unix socket is left out), at most max of them: their number.  Any
 * thread, while the listeners are open. */
int listener_sockaddrs(struct sockaddr_storage *out, int max);

/* selfaddr.c: whether a connection to one of targets (a getaddrinfo list,
 * resolved with the port) would reach this server's own listening sockets,
 * comparing addresses as the kernel does, not their spellings ("repl
 * follow", setmst). */
bool selfaddr_reaches_self(const struct addrinfo *targets);

/* What a worker exposes to conn.c. */
struct kura_worker {
    kura_server *srv;
    int index;
    pthread_t thread;
    struct event_base *base;
    struct event *notify_ev;
    int notify_fd[2];                   /* pipe: listener writes, worker reads */
    pthread_mutex_t queue_lock;         /* guards the queue of new sockets */
    int *queue;
    int queue_len, queue_cap;
    kura_thread_stats *stats;
    struct kura_conn *conns;            /* every live connection, for shutdown */
    struct kura_conn *held;             /* connections whose replies wait for a sync */
};

#endif
