/*
 * slave_int.h - what the replica's files share: its object, one stream's
 * session, and the phases each file provides.  slave.c says what a
 * replica does; the files are its phases:
 *
 *   slave.c          the thread: connect, a stream, the backoff; start and
 *                    stop; the rts file (the position); failures
 *   slave_connect.c  connecting and the handshake (TLS, login, the repl
 *                    line, the master's welcome)
 *   slave_stream.c   a stream: rows read, applied in order, acked
 *   slave_copy.c     a full copy: into a store of its own, or over the
 *                    store with the keys it did not bring deleted
 *   slave_history.c  the history check before any row (divergence)
 *   slave_status.c   stats repl's replica lines
 */
#ifndef KURA_REPL_SLAVE_INT_H
#define KURA_REPL_SLAVE_INT_H

#include <pthread.h>
#include <stdatomic.h>
#include <stdbool.h>
#include <stdint.h>
#include <time.h>

#include "kura/journal.h"
#include "kura/logf.h"
#include "kura/repl.h"
#include "keyset.h"

#define CONNECT_TIMEOUT_MS 5000
#define SILENCE_MS 10000                /* no byte from the master this long: reconnect */
#define BACKOFF_MIN_MS 100
#define BACKOFF_MAX_MS 30000
#define RTS_EVERY_MS 1000
/* The server's log has no warning level: a warning is written as an
 * error (kept under -le too), its text starting "WARNING:". */
#define LOG_WARN KURA_LOG_ERROR
#define STABLE_MS 5000                  /* connected this long: the stream worked */
#define LAG_FRESH_MS 3000               /* a heartbeat older than this: lag unknown */

/* what a stream ended with (slave_main decides the wait from it) */
enum { SESS_FAILED = 1, SESS_WORKED, SESS_REFUSED, SESS_DIVERGED, SESS_FATAL, SESS_OPEN };

struct repl_slave {
    repl_config cfg;
    char host[256];
    int port;
    char rts_path[4096];
    pthread_t thread;
    pthread_mutex_t lock;
    pthread_cond_t wake;
    bool stop;                          /* lock */
    int fd;                             /* lock: the current socket, -1 */

    _Atomic uint64_t pos;               /* the master's ts of the last row applied */
    _Atomic uint64_t master_last;       /* the master's last ts, from rows and heartbeats */
    _Atomic uint64_t applied, skipped, copies, connects, rts_errors;
    _Atomic bool connected, copying;
    _Atomic int state;                  /* REPL_ST_* */
    _Atomic uint64_t next_attempt_ms;   /* mono_ms() of the next attempt; 0: none waited for */
    _Atomic uint64_t master_hid;        /* the last welcome's (0: none yet) */
    _Atomic uint64_t hb_at_ms;          /* mono_ms() of this stream's last heartbeat; 0: none */
    _Atomic uint64_t divergences;
    char last_error[512];               /* lock: the last failure, "" none */
    char last_logged[512];              /* lock: the last failure logged, "" after a stream
                                           worked (a failure repeated is logged once) */
    uint64_t rts_hid;                   /* the id of the master's log the position counts in */
    uint64_t rts_saved, rts_saved_hid;
    uint64_t rts_at_ms;
    bool want_copy;                     /* the thread's: ask copy=1 (its data diverged) */
    bool skip_login;                    /* the thread's: the master asked for no login */
    bool hist_warned;                   /* the thread's: "cannot check" logged once */
};

#define logf_(x, level, ...) kura_logf_hook((x)->cfg.log, level, __VA_ARGS__)

static inline uint64_t mono_ms(void)
{
    struct timespec t;
    clock_gettime(CLOCK_MONOTONIC, &t);
    return (uint64_t)t.tv_sec * 1000 + (uint64_t)t.tv_nsec / 1000000;
}

/* One stream, from the connect to its end. */
typedef struct session {
    repl_slave *s;
    int fd;
    struct ssl_st *ssl;                 /* -mtls: the stream's TLS; NULL: plaintext */
    unsigned char *buf;
    size_t len, cap;
    keyset *stale;                      /* while a copy arrives over the store: keys it
                                           has not brought */
    kura_store *shadow;                 /* while a copy arrives into a store of its own */
    bool copying;
    uint64_t copy_start, copy_items;
    bool progressed;                    /* the stream worked: the backoff starts again */
    bool term_stale;                        /* the master's term fell behind this server's */
    uint64_t hid;                       /* the master's log's id (0: unknown) */
    bool has_hist;                      /* hist: the master's history, from its welcome */
    journal_hist hist;
} session;

/* slave.c */
void slave_set_state(repl_slave *s, int st);
void slave_fail(repl_slave *s, int level, const char *fmt, ...)
    __attribute__((format(printf, 3, 4)));
void slave_rts_write(repl_slave *s, uint64_t pos);

/* slave_connect.c */
int slave_connect(repl_slave *s, char *why, size_t whylen);
int slave_handshake(session *ss);

/* slave_stream.c */
int slave_session_run(repl_slave *s, int fd);
int slave_send_all(session *ss, const void *buf, size_t len);
int slave_fill(session *ss, size_t want);

/* slave_copy.c */
int slave_copy_begin(session *ss);
int slave_copy_item(session *ss, const ul_row *row);
int slave_copy_done(session *ss);
void slave_copy_abort(session *ss);

/* slave_history.c */
int slave_history_check(repl_slave *s, const repl_welcome *w);
/* The master's term (its welcome's, a heartbeat's) against this server's:
 * 0 (a higher one taken, through cfg.heard_term), or -1 when the master's
 * is lower (a master that was replaced: not followed; the failure
 * recorded, state "refused"). */
int slave_term_check(repl_slave *s, uint64_t term);

#endif
