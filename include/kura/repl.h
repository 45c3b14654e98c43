/*
 * repl.h - replication: a master serving its update log to replicas over
 * its memcached port, and a replica (slave) following a master
 * (src/repl/; the protocol is in docs/replication.md).
 *
 * A replica opens an ordinary connection to its master's port and sends
 *
 *     repl <after> <sid>\r\n
 *
 * (after: the last master timestamp it has applied, 0 for none; sid: its
 * own server id).  From there the connection is a replication stream: the
 * master answers one line, then rows, until either side closes:
 *
 *     REPL <after> <master-sid>\r\n     every row after <after> follows
 *     BOOT <start> <master-sid>\r\n     a full copy follows (PUT rows), then
 *                                       a COPY_DONE mark, then every row
 *                                       after <start>
 *     SERVER_ERROR <why>\r\n            and the connection closes
 *
 * Rows are the update log's own encoding (ulog.h, ul_encode; each with its
 * CRC), with the master's timestamp, the origin's server id and origin
 * timestamp.  The master also sends UL_MARK rows: a heartbeat every second
 * while there is nothing to send (its last timestamp, so that the replica
 * knows its lag), and COPY_DONE.  The replica sends back "ACK <ts>\r\n"
 * lines: every row up to <ts> is in its update log (durable as its -sync
 * makes it); an ACK past the newest row sent on the stream ends it.  A
 * master keeps the files its replicas still need (as far as -ulmax
 * allows), and semi-synchronous writes wait for these acks.  The endpoint
 * is bounded (src/repl/master.c): -repl-max streams, each counted against
 * -c, served by one event loop; full copies share one spool.
 */
#ifndef KURA_REPL_H
#define KURA_REPL_H

#include <stdbool.h>
#include <stdint.h>

#include "kura/engine.h"
#include "kura/store.h"
#include "kura/ulog.h"

/* UL_MARK kinds (ul_row.prev_ts) */
#define REPL_MARK_HEARTBEAT 1           /* ts: the master's last timestamp */
#define REPL_MARK_COPY_DONE 2           /* ts: the copy's start */
#define REPL_MARK_TERM 3                /* ts: the master's term (after each heartbeat, to a
                                           replica that sent its term) */

#define REPL_LINE_MAX 160               /* the longest request or ack a replica sends */
#define REPL_WELCOME_MAX 4096           /* the longest first line a master sends */
#define REPL_SID_MIN 1                  /* server ids (-sid, and a replica's in "repl") */
#define REPL_SID_MAX 65535
#define REPL_HELLO_WORDS 8              /* words after "repl" a request may have */

/* ---- the first lines (src/repl/hello.c) ---------------------------------------
 *
 * A replica asks
 *
 *     repl <after> <sid> [hid=<16 hex>] [imax=<bytes>] [port=<n>] [copy=1]
 *
 * after: its position (the master's timestamp of the last row it applied,
 * 0 for none); sid: its server id, 1-65535; hid: the id of the master's
 * history its position counts in (0 or absent: unknown); imax: its -I (the
 * largest item it takes); port: the port it serves on (0: unknown), for
 * kuractl's tree of replicas; copy=1: it wants a full copy whatever its
 * position (it found its data diverged); term: its replication term
 * (docs/replication.md, "Roles and terms"; a master with a lower one is
 * fenced).  Unknown keys are ignored.  The master answers
 *
 *     REPL <after> <master-sid> [hid=<16 hex> imax=<bytes> hist=<history> term=<n>]
 *     BOOT <start> <master-sid> [hid=... imax=... hist=... term=<n>]
 *
 * (term: the master's; a replica with a higher one refuses it, one with a
 * lower one takes it)
 * with the key=value words only to a request that had some; hist is the
 * master's history (journal.h), "-" when empty. */
typedef struct repl_hello {
    uint64_t after;
    uint32_t sid;
    uint64_t hid;
    uint64_t imax;
    uint32_t port;
    bool copy;
    bool ext;                           /* had key=value words */
    bool has_term;                      /* term= was sent */
    uint64_t term;                      /* the replica's replication term */
} repl_hello;

typedef struct repl_welcome {
    bool boot;                          /* BOOT (a full copy follows), else REPL */
    uint64_t pos;
    uint32_t msid;
    bool ext;                           /* had key=value words */
    uint64_t hid;
    uint64_t imax;
    bool has_term;                      /* term= was sent */
    uint64_t term;                      /* the master's replication term */
    char hist[REPL_WELCOME_MAX];        /* "" when none */
} repl_welcome;

/* The request's words after "repl" (n of them, not NUL-terminated):
 * KURA_OK, or KURA_EINVAL with the reply line (no CRLF) in err. */
int repl_hello_parse(const char *const *words, const size_t *lens, int n, repl_hello *h,
                     char *err, size_t errlen);
/* A request line with every key (CRLF included): its length, or -1. */
int repl_hello_format(char *buf, size_t cap, const repl_hello *h);
/* Into and out of a connection hand-off's five numbers (cmdtab.h). */
void repl_hello_pack(const repl_hello *h, uint64_t arg[5]);
void repl_hello_unpack(const uint64_t arg[5], repl_hello *h);
/* The master's line (CRLF included; the short form unless ext): its
 * length, or -1 if cap is too small. */
int repl_welcome_format(char *buf, size_t cap, const repl_welcome *w, bool ext);
/* Parses a master's line (the short or the long form): KURA_OK or
 * KURA_EINVAL (not REPL or BOOT, or a bad value). */
int repl_welcome_parse(const char *line, repl_welcome *w);

typedef struct repl_config {
    kura_engine *engine;
    ul_log *ulog;                       /* master: required; replica: NULL or its own */
    uint32_t sid;                       /* this server's id */
    uint64_t ulmax;                     /* master: the update log's cap (-ulmax), 0: none */
    const char *tmpdir;                 /* master: where a copy is spooled (the ulog's dir) */
    int sync_mode;                      /* replica: -sync (always: acks wait for a sync) */
    size_t row_max;                     /* replica: the largest row it buffers (0: any) */
    uint64_t item_max;                  /* this server's -I (sent in the first lines) */
    int port;                           /* the port this server serves on (0: none) */
    bool rw;                            /* replica: takes writes (-rw): a full copy
                                           keeps the keys it lacks (local changes) */
    /* replica, read-only: a full copy goes into open_shadow()'s new empty
     * store and swap_in() puts it in place when complete; NULL: the copy
     * is applied over the store as it comes (and with -rw) */
    kura_store *(*open_shadow)(void *arg);
    int (*swap_in)(void *arg, kura_store *shadow);
    void *shadow_arg;
    void (*log)(int level, const char *line);
    /* master: the endpoint's bounds (src/repl/master.c) */
    int repl_max;                       /* streams at once (-repl-max; 0: REPL_MAX_DEFAULT) */
    uint64_t spool_reserve;             /* free bytes a full copy's spool leaves in tmpdir */
    void (*stream_end)(void *arg);      /* a stream handed over (or refused) has ended: its
                                           socket is closed (counted against -c until then) */
    void *stream_end_arg;
    /* replica, read-only, on divergence (docs/replication.md): false: save
     * its rows and take a full copy (-repl-divergence copy); true: save
     * them and stop (refuse), through fatal(fatal_arg, 2): the server
     * stops cleanly and exits with that status */
    bool divergence_refuse;
    void (*fatal)(void *arg, int exit_code);
    void *fatal_arg;
    /* replica: the credentials sent to a master that asks for them (-Y
     * there), memcached's ASCII authentication; NULL: none (kept by the
     * caller for the replica's life) */
    const char *auth_user, *auth_pass;
    /* replica: reach the master over TLS with this client context (-mtls:
     * the master's certificate must verify and name the -mhost; tlsio.h);
     * NULL: plaintext (kept by the caller for the replica's life) */
    struct ssl_ctx_st *tls_ctx;
    /* terms (docs/replication.md, "Roles and terms"; NULL: none sent or
     * checked): term() is this server's; heard_term() is told of a higher
     * one, from the master this replica follows (from_master: its welcome
     * or a heartbeat) or from a replica's request (a master fences).
     * Called on the replica's thread and the master's loop thread: they
     * must not block on either (src/server/replrole.c's save one file). */
    uint64_t (*term)(void *arg);
    void (*heard_term)(void *arg, uint64_t term, bool from_master, const char *peer);
    void *term_arg;
} repl_config;

#define REPL_MAX_DEFAULT 16

/* ---- master ---------------------------------------------------------------- */

typedef struct repl_master repl_master;

int repl_master_new(const repl_config *cfg, repl_master **out);
/* Serves a replica on fd (taken: closed when the stream ends, then
 * cfg.stream_end called, on every path), which sent "repl after sid ...".
 * Every stream is served by the master's one event loop thread; past
 * -repl-max, for a server id of the master's own, or a full copy that does
 * not fit, the replica is told SERVER_ERROR and the socket closed. */
int repl_master_serve(repl_master *m, int fd, const repl_hello *h);
/* About once a second: prunes the update log past -ulmax, keeping what
 * connected replicas (and those seen in the last hour) still need. */
void repl_master_tick(repl_master *m);
/* -syncrepl: waits until n replicas (distinct server ids, not receiving a
 * copy) have acknowledged every row up to ts: 0, or 1 after timeout_ms.
 * An ACK counts only up to the newest row sent on its stream. */
int repl_master_wait(repl_master *m, uint64_t ts, int n, int timeout_ms);
/* Ends every stream and frees. */
void repl_master_free(repl_master *m);
/* all: the lines whose values are not numbers too */
void repl_master_stats(repl_master *m, bool all, kura_stat_fn emit, void *arg);

/* ---- replica ----------------------------------------------------------------- */

typedef struct repl_slave repl_slave;

/* A replica's state (stats repl's repl_state) */
enum {
    REPL_ST_CONNECTING,                 /* connecting, or waiting for the welcome */
    REPL_ST_CONNECTED,                  /* rows flow */
    REPL_ST_COPYING,                    /* a full copy arrives */
    REPL_ST_RECONNECTING,               /* waiting for the next attempt */
    REPL_ST_DIVERGED,                   /* holds rows the master never had */
    REPL_ST_REFUSED,                    /* the master refused it (or it the master) */
    REPL_ST_STOPPED,
};

/* Follows host:port from the position in rts_path (a text file, created
 * if missing), on a thread of its own, reconnecting with backoff. */
int repl_slave_start(const repl_config *cfg, const char *host, int port, const char *rts_path,
                     repl_slave **out);
void repl_slave_stop(repl_slave *s);
void repl_slave_stats(repl_slave *s, bool all, kura_stat_fn emit, void *arg);

/* ---- helpers shared by both sides (src/repl/repl_io.c) ------------------------ */

/* Sends all of buf on a non-blocking socket, waiting up to timeout_ms for
 * room each time; 0 or -1 (errno set; ETIMEDOUT). */
int repl_send_all(int fd, const void *buf, size_t len, int timeout_ms);
void repl_emit_u64(kura_stat_fn emit, void *arg, const char *name, uint64_t v);
/* Appends row (encoded, value included) to *buf (grown with realloc). */
int repl_buf_row(unsigned char **buf, size_t *len, size_t *cap, const ul_row *row);

#endif
