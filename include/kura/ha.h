/*
 * ha.h - automatic failover on etcd (src/ha/ha.c), the Patroni pattern:
 * etcd's consensus decides, kura never votes.  The leader holds
 * /kura/CLUSTER/leader under an etcd lease and is the one writable master;
 * every server registers under /kura/CLUSTER/members/NAME with its
 * position and term; when the leader key is free, the most up-to-date
 * member takes it; the others follow whoever holds it.  The leader's write
 * fence (kura/fence.h) stays open only a margin short of its lease, so it
 * stops taking and acknowledging writes before etcd can let another lead.
 *
 * What the module knows of roles comes through ha_role_ops, which the
 * server fills in (src/server/ha_adapter.c, the one file that knows how a
 * server promotes and follows).  The thread never touches a worker: the
 * ops it calls are the ones "repl promote" and "repl follow" use.
 *
 * The keys' values are text lines (docs/replication.md, "Automatic
 * failover"): leader: "NAME HOST:PORT TERM"; member: "addr=HOST:PORT
 * pos=N term=N role=master|replica|none"; switchover: "NAME".
 */
#ifndef KURA_HA_H
#define KURA_HA_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "kura/fence.h"

#define HA_NAME_MAX 128

/* A server's role as the adapter sees it. */
typedef struct ha_role_view {
    bool master;                        /* takes writes (not following anyone) */
    bool following;                     /* a replica: following master_addr */
    bool connected;                     /* a replica whose stream is up */
    bool copying;                       /* a replica taking a full copy: not a candidate */
    char master_addr[300];              /* "HOST:PORT" it follows */
    uint64_t position;                  /* the last row it holds (update-log timestamp) */
    uint64_t term;                      /* its replication term (0: none kept) */
    int64_t lag_ms;                     /* a replica's lag behind its master; -1: unknown */
} ha_role_view;

typedef struct ha_role_ops {
    void (*view)(void *ctx, ha_role_view *out);
    /* become the master, with term (>= every term seen): 0 or -1 (msg) */
    int (*promote)(void *ctx, uint64_t term, char *msg, size_t len);
    /* follow host:port, the leader of term: 0 or -1 (msg) */
    int (*follow)(void *ctx, const char *host, int port, uint64_t term, char *msg, size_t len);
    void *ctx;
} ha_role_ops;

typedef struct ha_config {
    const char *etcd;                   /* -ha-etcd URL[,URL...] */
    const char *user, *password;        /* etcd's authentication; NULL: none */
    const char *ca_file;                /* https:// endpoints' CAs; NULL: the system's */
    const char *cluster;                /* -ha-cluster */
    const char *name;                   /* -ha-name */
    const char *addr;                   /* HOST:PORT replicas reach this server at */
    int ttl;                            /* -ha-ttl, seconds */
    ha_role_ops ops;
    kura_fence *fence;                  /* the server's write fence, kept here */
    void (*log)(int level, const char *line);
} ha_config;

typedef struct ha_node ha_node;

/* Starts the failover thread (the fence closed until this server leads).
 * 0, or -1 with the reason in err. */
int ha_start(const ha_config *cfg, ha_node **out, char *err, size_t errlen);
/* Ends the thread (bounded by one request's deadline); a leader lets its
 * key go (revokes its lease) so another takes over at once.  NULL: nothing. */
void ha_stop(ha_node *n);
/* Whether this server is the leader etcd names (its lease held). */
bool ha_is_leader(const ha_node *n);
/* The leader's address as last read ("" when none): whom a replica must
 * follow for /replica. */
void ha_leader_addr(const ha_node *n, char *buf, size_t len);

/* The lease margin: the fence closes this many ms before the lease could
 * expire on etcd's side (a fifth of the TTL, at least 500 ms). */
int64_t ha_margin_ms(int ttl);

/* Parses a member's value ("addr=H:P pos=N term=N role=R"). */
typedef struct ha_member {
    char name[HA_NAME_MAX];
    char addr[300];
    char role[16];
    uint64_t pos, term;
    int64_t mod_rev, lease;
} ha_member;
bool ha_member_parse(const char *name, const char *value, ha_member *m);
/* Whether a is more up to date than b: higher position, then higher term,
 * then the lower name (a total order, so every member picks the same). */
bool ha_member_better(const ha_member *a, const ha_member *b);

#endif
