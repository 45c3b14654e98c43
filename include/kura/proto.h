/*
 * proto.h - the memcached protocols: bytes in, engine calls, bytes out.
 *
 * One session per connection serves one protocol, chosen from the first
 * byte the client sends as memcached chooses (0x80, the binary request
 * magic: the binary protocol; anything else: the text protocol, meta
 * commands included), and as ttserver does for Tokyo Tyrant's binary
 * protocol (0xC8, its magic: src/proto/tt.c).  A session is opaque: the connection creates it,
 * calls kura_session_process() whenever bytes arrive, and reads what it
 * must act on through the accessors below (bytes needed, close, dirty,
 * out_full, a hand-off); each protocol's state is private to its file
 * (src/proto/text.c and meta.c, src/proto/binary.c).  The text protocol
 * dispatches through a command table (cmdtab.h) the server registers its
 * own commands into.
 *
 * kura_session_process() consumes as many complete requests as the input
 * holds, appends every reply to `out` in order (so pipelined requests are
 * answered with one write), and returns how many input bytes it used.  It
 * never blocks and knows nothing of sockets: the connection layer owns the
 * buffers and calls it whenever bytes arrive.
 *
 * A storage command whose value has not fully arrived is left unconsumed,
 * with kura_session_need() saying how many bytes must be buffered before
 * calling again; nothing of it has been applied.
 *
 * Output and work are bounded: once `out` holds KURA_OUT_HIGH_WATER bytes,
 * or KURA_REQUESTS_PER_CALL requests were answered, or a listing answered
 * its slice of keys, the session pauses (between requests, or between two
 * keys of a multi-get) and kura_session_out_full() says so; the caller
 * sends what is queued and calls again with the same unconsumed input (a
 * server on the connection's next turn), and a paused get or listing
 * carries on at its next key.  The input passed on each call must start where the
 * previous call's consumed bytes ended (the session remembers positions
 * inside that line).
 */
#ifndef KURA_PROTO_H
#define KURA_PROTO_H

#include <pthread.h>
#include <stdatomic.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <sys/types.h>

#include "kura/buf.h"
#include "kura/cmdtab.h"
#include "kura/engine.h"

/* The protocol level we implement; "version" reports it so clients that
 * gate features on the server version see what they can rely on. */
#define KURA_MEMCACHED_VERSION "1.6.18"
#define KURA_VERSION "0.1.0"

#define KURA_MAX_LINE_NO_NEWLINE 2048   /* memcached closes after this, unless get/gets */
#define KURA_MAX_GET_LINE (16u << 20)   /* our bound on a multi-get line */
/* Replies queued before a session yields, between requests and between
 * the keys of a multi-get: a connection's output never holds more than this
 * plus one value, whatever a request asks for (see text.c).  Small, since a
 * client that stops reading leaves it in the server: 1 MiB here made 1,000
 * such clients hold 900 MB (memcached, which points at its items instead of
 * copying them, ~30 MB); at 64 KiB a large multi-get costs one write and
 * one turn of the event loop per 64 KiB, as memcached's batches of iovecs. */
#define KURA_REPLY_HIGH_WATER (64u << 10)
/* The same for a listing's slice (lru_crawler metadump, keys, rget) and
 * the longest list "digest N B" answers. */
#define KURA_OUT_HIGH_WATER (1u << 20)
/* Requests one call of kura_session_process() answers before it pauses
 * (kura_session_out_full): a pipeline of many small requests lets the
 * worker's other connections have a turn every this many. */
#define KURA_REQUESTS_PER_CALL 256

/* memcached's ASCII authentication (-Y FILE, src/proto/auth.c). */
typedef struct kura_auth kura_auth;
/* Reads "user:password" lines; 0, or -1 with one line saying why in err
 * (missing, unreadable, malformed). */
int kura_auth_load(const char *path, kura_auth **out, char *err, size_t errlen);
void kura_auth_free(kura_auth *a);
const char *kura_auth_path(const kura_auth *a);
/* The file's first entry (NUL-terminated, valid while a is): 0, or -1 when
 * it has none.  A client's credentials: a replica's (-mauth, else -Y's
 * file) and kuractl's (-a). */
int kura_auth_first(const kura_auth *a, const char **user, const char **pass);
/* Whether user and pass match an entry (constant time in their bytes). */
bool kura_auth_check(const kura_auth *a, const char *user, size_t ulen, const char *pass,
                     size_t plen);

/* SASL for the binary protocol (-S, src/proto/sasl.c).  available: whether
 * this kurad was built with libsasl2.  init: once, at start, before any
 * thread; pwdb (may be NULL) is MEMCACHED_SASL_PWDB's entries, log gets
 * libsasl2's messages (level 1: failures and warnings, 2: the rest).  0, or
 * -1 with one line saying why in err. */
bool kura_sasl_available(void);
int kura_sasl_init(const kura_auth *pwdb, void (*log)(int level, const char *msg), char *err,
                   size_t errlen);

/* What "stats" and "stats settings" report about the server: filled in by
 * the server, read by the protocol. */
typedef struct kura_server_info {
    int64_t started;                    /* Unix time */
    pid_t pid;
    int nthreads;
    kura_thread_stats *thread_stats;    /* nthreads entries, plus one for the main thread */
    pthread_mutex_t reset_lock;         /* guards baseline */
    kura_stats_totals baseline;         /* "stats reset" subtracts this */
    _Atomic uint64_t curr_connections;
    _Atomic uint64_t total_connections;
    _Atomic uint64_t rejected_connections;
    _Atomic uint64_t conn_structures;
    _Atomic uint64_t listen_disabled_num;
    _Atomic int verbosity;              /* 2 or more: every request is traced */
    void (*trace)(int conn_id, const char *line, size_t len);
    const char *libevent_version;

    /* settings */
    int maxconns;
    int tcpport;
    int kt_port;                        /* -kt's port (a PUT's Location: names it); 0 none */
    const char *inter;
    const char *domain_socket;
    uint64_t maxbytes;
    size_t item_size_max;
    int idle_timeout;
    const char *dbname;
    uint32_t sid;                       /* -sid: TT's stat shows it */
    const char *sync_mode;
    int unix_mode;                      /* -a (stats settings' umask) */
    const kura_auth *auth;              /* -Y: connections authenticate first; NULL: not */
    bool sasl;                          /* -S: binary protocol only, SASL first */
    /* TLS's lines (src/server/tls.c): "stats settings"' ssl_* (settings
     * true) and plain "stats"' ssl_* (false); NULL: none */
    void (*tls_stats)(void *ctx, bool settings, kura_stat_fn emit, void *arg);

    /* Tokyo Tyrant's setmst (src/proto/tt.c): make this server a replica
     * of host:port from update-log timestamp ts (opts: ttserver's
     * replication options, passed on as sent); an empty host or port 0
     * stops following.  Called on a worker thread, so it must only hand
     * the change to the replication thread and return: KURA_OK when it is
     * taken, an error otherwise.  NULL (no runtime follow in this server):
     * setmst answers failure (1). */
    int (*tt_setmst)(void *ctx, const char *host, int port, uint64_t ts, int opts);
    void *tt_setmst_ctx;
    /* Tokyo Tyrant's copy (src/proto/tt.c): a consistent copy of the store
     * written at path on the server, returning once it is complete and
     * on disk: KURA_OK, or an error.  Called on a worker thread, which it
     * holds for the copy's length.  NULL: copy answers failure (1). */
    int (*tt_copy)(void *ctx, const char *path);
    void *tt_copy_ctx;
} kura_server_info;

/* What a session is given at creation; the pointers must outlive it. */
typedef struct kura_session_config {
    kura_engine *engine;
    kura_thread_stats *stats;           /* the connection's thread's counters */
    kura_server_info *server;
    const kura_cmdtab *cmds;            /* the text protocol's commands */
    int conn_id;                        /* for traces: the socket's descriptor */
    bool kt;                            /* accepted on -kt: Kyoto Tycoon's protocols
                                           (src/proto/kt.c), whatever the first byte */
} kura_session_config;

/* How long a -kt connection may stay idle, or hold a request half sent
 * (ktserver's default -tout); -tout below it wins (src/server/conn.c). */
#define KURA_KT_IDLE_MS 30000

/* NULL when memory runs out. */
kura_session *kura_session_new(const kura_session_config *cfg);
void kura_session_free(kura_session *s);

/* Picks the protocol from the first byte on the first call, then hands
 * every call to it (contract above). */
size_t kura_session_process(kura_session *s, char *in, size_t len, kura_buf *out);

/* Input bytes needed before the next call can make progress; 0 = any. */
size_t kura_session_need(const kura_session *s);
/* Close once the queued replies are sent. */
bool kura_session_closing(const kura_session *s);
/* Paused (output full, or this call's share of work done): send `out`,
 * then call again. */
bool kura_session_out_full(const kura_session *s);
/* A request since the last call may have changed the store; clears the
 * flag. */
bool kura_session_take_dirty(kura_session *s);
/* The hand-off a command asked for (cmdtab.h), or NULL: the connection
 * sends its queued replies, then gives its socket to h->take. */
const kura_handoff *kura_session_handoff(const kura_session *s);

/* Where "stats" reads its figures: a session's engine, server and command
 * table, or the metrics server's (src/server/metrics.c), which shows the
 * same figures to Prometheus. */
typedef struct kura_stats_source {
    kura_engine *engine;
    kura_server_info *server;
    const kura_cmdtab *cmds;
} kura_stats_source;

/* Calls emit(arg, name, value) for each line "stats" (group NULL) or
 * "stats <group>" ([group, group+glen)) answers, in the same order; false
 * for a group nobody provides.  Groups that answer no lines (reset,
 * detail) are not among them.  Safe from any thread while the server
 * runs, as "stats" is. */
bool kura_stats_lines(const kura_stats_source *src, const char *group, size_t glen,
                      kura_stat_fn emit, void *arg);

/* "stats detail" (src/proto/detail.c): the key prefix delimiter (-D) and
 * whether counting starts on (memcached turns it on when -D is given).
 * Before the workers start. */
void kura_detail_setup(char delimiter, bool on);

/* kura's own commands beside the protocol, registered by the server:
 * "digest" (src/proto/digest.c) and the listings "lru_crawler metadump",
 * "keys", "rget" (src/proto/listing.c).  KURA_OK or kura_cmdtab_add's
 * error. */
int digest_register(kura_cmdtab *t);
int listing_register(kura_cmdtab *t);

#endif
