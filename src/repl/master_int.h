/*
 * master_int.h - the replication master's private parts, shared by its
 * three files: master.c (the registry of streams, the first line's
 * decision, acks, -syncrepl, retention, stats), master_loop.c (the one
 * thread that serves every stream from an event loop) and master_copy.c
 * (the one spool of a full copy that copy streams share).
 *
 * Threads: the loop thread alone does a stream's I/O and owns the fields
 * marked "loop"; the workers (repl_master_serve), the committer
 * (repl_master_wait), the ticker and "stats" read the rest under m->lock
 * or as atomics.  A peer is freed by the loop thread only, after it has
 * left m->peers under m->lock.
 */
#ifndef KURA_REPL_MASTER_INT_H
#define KURA_REPL_MASTER_INT_H

#include <pthread.h>
#include <stdatomic.h>
#include <stdbool.h>
#include <stdint.h>

#include "kura/logf.h"
#include "kura/repl.h"

#define SEND_TIMEOUT_MS 60000           /* a replica reading nothing this long is dropped */
#define OUT_HWM (256 * 1024)            /* a stream's unsent bytes before it reads no more rows */
#define TURN_ROWS 256                   /* rows a stream reads per turn (then the next one's) */
#define COPIES_MAX 4                    /* streams receiving a full copy at once */
#define SEEN_MAX 64                     /* replicas remembered after they disconnect */
#define SEEN_KEEP 3600                  /* ... for this many seconds */

struct event;
struct event_base;

/* The full copy being sent (master_copy.c): the store's items as PUT rows
 * at the watermark `start`, spooled to an unlinked file by a thread of its
 * own; copy streams read the file behind the writer. */
typedef struct spool {
    struct repl_master *m;
    int fd;
    uint64_t start;
    _Atomic uint64_t written;           /* bytes in the file a reader may read */
    _Atomic int state;                  /* SPOOL_RUNNING, _DONE or _FAILED */
    _Atomic bool cancel;                /* no reader left: stop early */
    uint64_t items;                     /* spool thread, then read once done */
    int users;                          /* loop: copy streams reading it */
    pthread_t thread;
} spool;

enum { SPOOL_RUNNING, SPOOL_DONE, SPOOL_FAILED };

typedef enum { PEER_NEW, PEER_COPY, PEER_STREAM } peer_state;

typedef struct peer {
    struct repl_master *m;
    int fd;
    struct ssl_st *ssl;                 /* the stream came over TLS (-Z); NULL: plaintext */
    uint32_t sid;
    repl_hello hello;                   /* what the replica asked */
    char name[64];                      /* its host:port as this side sees it */
    char host[48];
    /* loop */
    peer_state state;
    struct event *rev, *wev;
    ul_reader *rd;
    spool *sp;                          /* PEER_COPY: the spool it reads */
    uint64_t soff;                      /* ... at this offset */
    uint64_t whole_from;                /* ul_start() when the stream began */
    unsigned char *out;
    size_t olen, ooff, ocap;            /* out[ooff, olen) is unsent */
    uint64_t queued;                    /* the newest row put in out (or the start) */
    char ab[REPL_LINE_MAX * 2];         /* acks being read */
    size_t abn;
    bool caught_up, runnable, closing;
    int64_t stalled_ms;                 /* when bytes began waiting for room; 0: none */
    struct peer *run_next;
    /* shared */
    _Atomic bool stop;                  /* end it (a newer stream of its sid, or the end) */
    _Atomic bool copying;
    _Atomic uint64_t sent;              /* the newest row's ts the socket took */
    _Atomic uint64_t acked;             /* the last the replica has (retention keeps after) */
    _Atomic bool confirmed;             /* an ACK came: -syncrepl counts it */
    _Atomic uint64_t rows_read;         /* rows its reader returned */
    _Atomic int64_t base;               /* appended - rows_read when last caught up; -1: never */
    struct peer *next;                  /* m->peers or m->incoming, under m->lock */
} peer;

typedef struct seen {
    uint32_t sid;
    uint64_t acked;
    time_t last;
} seen;

struct repl_master {
    repl_config cfg;
    pthread_mutex_t lock;
    pthread_cond_t acked;               /* a replica acknowledged more rows */
    peer *peers;                        /* streams (the loop's), under lock */
    peer *incoming;                     /* handed over, not yet taken by the loop */
    int nstreams;                       /* peers + incoming, under lock */
    seen seen[SEEN_MAX];
    int nseen;
    /* the loop (master_loop.c) */
    pthread_t thread;
    bool running;
    struct event_base *base;
    struct event *wake_ev, *tick_ev, *work_ev;
    int wake_fd;                        /* eventfd: appends, new streams, the spool, the end */
    _Atomic bool armed;                 /* a stream waits for rows: an append writes wake_fd */
    _Atomic bool ending;
    uint64_t appended_seen;             /* loop: m->appended at its last look */
    peer *run_head, *run_tail;          /* loop: streams with work */
    spool *spool;                       /* loop: the copy being sent, or NULL */
    int copying;                        /* loop: streams receiving a copy */
    _Atomic uint64_t appended;          /* rows appended since start (lag in rows) */
    _Atomic uint64_t boots, streams, rows_sent, pruned_segs, pruned_bytes, forced;
    _Atomic uint64_t waits, wait_timeouts, refused, spools;
};

#define logf_(x, level, ...) kura_logf_hook((x)->cfg.log, level, __VA_ARGS__)

/* master.c */
/* The first line: the decision between REPL, BOOT and a refusal, on the
 * loop thread for a peer just handed over.  0: the welcome is queued and
 * the peer is streaming or copying; -1: refused (the line queued, the
 * peer to be closed). */
int master_greet(peer *p);
/* An "ACK <ts>" line: 0, or -1 when the stream must end. */
int master_ack(peer *p, uint64_t ts);
/* The peer leaves the registry (under m->lock): remembered for retention. */
void master_forget(peer *p);

/* master_loop.c */
int loop_start(struct repl_master *m);
void loop_stop(struct repl_master *m);
void loop_wake(struct repl_master *m);
/* Appends to the peer's output (loop thread): 0 or -1 (no memory). */
int peer_queue(peer *p, const void *b, size_t n);
int peer_queue_row(peer *p, const ul_row *row);
int64_t mono_ms(void);

/* master_copy.c */
/* A spool for peer p (the current one if it is fresh, else a new one), or
 * NULL with the refusal's text in why. */
spool *spool_get(struct repl_master *m, char *why, size_t whylen);
void spool_put(struct repl_master *m, spool *sp);
/* The next bytes of the copy for p into its output (loop thread): 0 when
 * more can be read now, SPOOL_PUMP_WAIT when the spool has no more yet,
 * SPOOL_PUMP_ALL when the copy is all queued, -1 on failure. */
#define SPOOL_PUMP_WAIT 1
#define SPOOL_PUMP_ALL 2
int spool_pump(peer *p);

#endif
