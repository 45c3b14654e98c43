/*
 * proto.h - the memcached protocols: bytes in, engine calls, bytes out.
 *
 * One session per connection serves one protocol, chosen from the first
 * byte the client sends as memcached chooses (0x80, the binary request
 * magic: the binary protocol; anything else: the text protocol, meta
 * commands included).  The connection calls kura_session_process() and
 * reads the session's common fields (need, close, dirty, out_full); it
 * knows nothing of a protocol's insides.  Each protocol is a kura_proto:
 * text (src/proto/text.c, with meta.c behind its command table) and binary
 * (src/proto/binary.c).
 *
 * text_process() consumes as many complete requests as the input holds,
 * appends every reply to `out` in order (so pipelined requests are answered
 * with one write), and returns how many input bytes it used.  It never
 * blocks and knows nothing of sockets: the connection layer owns the
 * buffers and calls it whenever bytes arrive.
 *
 * A storage command whose value has not fully arrived is left unconsumed,
 * with session->need saying how many bytes must be buffered before calling
 * again; nothing of it has been applied.
 *
 * Output is bounded: once `out` holds KURA_OUT_HIGH_WATER bytes, text_process
 * stops (between requests, or between two keys of a multi-get) and sets
 * session->out_full; the caller sends what is queued and calls again with
 * the same unconsumed input, and a paused get carries on at its next key.
 * The input passed on each call must start where the previous call's
 * consumed bytes ended (the session remembers positions inside that line).
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
#include "kura/engine.h"
#include "kura/list.h"

/* The protocol level we implement; "version" reports it so clients that
 * gate features on the server version see what they can rely on. */
#define KURA_MEMCACHED_VERSION "1.6.18"
#define KURA_VERSION "0.1.0"

#define KURA_MAX_LINE_NO_NEWLINE 2048   /* memcached closes after this, unless get/gets */
#define KURA_MAX_GET_LINE (16u << 20)   /* our bound on a multi-get line */
/* Replies queued before text_process() yields, between requests and between
 * the keys of a multi-get: a connection's output never holds more than this
 * plus one value, whatever a request asks for (see text.c). */
#define KURA_OUT_HIGH_WATER (1u << 20)

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
    const char *inter;
    const char *domain_socket;
    uint64_t maxbytes;
    size_t item_size_max;
    int idle_timeout;
    const char *dbname;
    const char *sync_mode;

    /* replication: the "repl" command is served when repl_master is set;
     * repl_stats adds the update log's and replication's "stats" lines
     * (numbers only, unless all: "stats repl" has the strings too) */
    bool repl_master;
    void (*repl_stats)(void *ctx, bool all, kura_stat_fn emit, void *arg);
    void *repl_ctx;

    /* snapshots (-bgs): "snapshot" asks for one when snapshot_request is
     * set; snapshot_stats writes "stats snapshot" */
    int (*snapshot_request)(void *ctx);
    void (*snapshot_stats)(void *ctx, kura_stat_fn emit, void *arg);
    void *snapshot_ctx;
} kura_server_info;

struct kura_proto;

/* The binary protocol's state between calls (binary.c). */
typedef struct binary_state {
    uint64_t swallow;                   /* body bytes of a refused request still to discard */
    bool wrote;                         /* the last request's reply makes memcached write */
} binary_state;

/* A connection's protocol session.  The connection sets engine, stats,
 * server and conn_id, and reads need, close, dirty and out_full; the rest
 * belongs to the protocol. */
typedef struct text_session {
    kura_engine *engine;
    kura_thread_stats *stats;
    kura_server_info *server;
    uint64_t swallow;                   /* bytes of a refused value still to discard */
    size_t need;                        /* input bytes needed before progress; 0 = any */
    bool close;                         /* close once the queued replies are sent */
    bool noreply;                       /* the current request asked for no reply */
    bool dirty;                         /* a request since the flag was cleared may have
                                           changed the store (set by text_process) */
    bool out_full;                      /* stopped at KURA_OUT_HIGH_WATER: send `out`,
                                           then call again (set by text_process) */
    const char *line_start;             /* private: the line being handled */
    const char *line_end;               /* private: end of the line being handled */
    size_t resume;                      /* private: a get paused here, as an offset into
                                           the first unconsumed line; 0 = none */
    size_t scan;                        /* private: bytes of the first unconsumed line
                                           already searched for its newline */
    kura_list_cursor list;              /* private: where a listing paused (listing.c) */
    int conn_id;                        /* for traces: the socket's descriptor */
    const struct kura_proto *proto;     /* chosen at the first byte; NULL before */
    binary_state bin;                   /* private to binary.c */
    /* "repl <after> <sid>": the connection becomes a replication stream;
     * the caller hands its socket to the master (repl.h), with close set */
    bool handoff;
    uint64_t handoff_after;
    uint32_t handoff_sid;
} text_session;

typedef text_session kura_session;

/* A protocol: process() has text_process()'s contract (above). */
typedef struct kura_proto {
    const char *name;
    size_t (*process)(kura_session *s, char *in, size_t len, kura_buf *out);
} kura_proto;

extern const kura_proto kura_proto_text;
extern const kura_proto kura_proto_binary;

/* The connection's entry point: picks the protocol from the first byte on
 * the first call, then hands every call to it. */
size_t kura_session_process(kura_session *s, char *in, size_t len, kura_buf *out);

size_t text_process(text_session *s, char *in, size_t len, kura_buf *out);
size_t binary_process(kura_session *s, char *in, size_t len, kura_buf *out);

/* One token of a request line: a span of the read buffer, not NUL-terminated.
 * The terminal token has length 0 and value NULL, or the unread rest. */
typedef struct text_token {
    const char *value;
    size_t length;
} text_token;

/* "stats ..." (src/proto/stats.c); ntok counts the terminal token. */
void text_stats(text_session *s, const text_token *tok, int ntok, kura_buf *out);
/* "digest [N [B]]" (src/proto/digest.c). */
void text_digest(text_session *s, const text_token *tok, int ntok, kura_buf *out);
/* The listings (src/proto/listing.c): "lru_crawler metadump ...", "keys ...",
 * "rget ...".  Each may pause at the high-water mark as a get does
 * (session->resume set, its line left unconsumed) and go on when called
 * again with the same line. */
void text_lru_crawler(text_session *s, const text_token *tok, int ntok, kura_buf *out);
void text_keys(text_session *s, const text_token *tok, int ntok, kura_buf *out);
void text_rget(text_session *s, const text_token *tok, int ntok, kura_buf *out);

#endif
