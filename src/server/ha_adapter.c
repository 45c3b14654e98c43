/*
 * ha_adapter.c - automatic failover's hold on this server: the role ops the
 * failover thread (src/ha/ha.c, kura/ha.h) calls to see, promote and move
 * this server, over the same entry points "repl promote" and "repl follow"
 * use (include/kura/replrole.h: terms and roles that persist, the
 * source ROLE_SRC_HA), the write fence as the role module's gate, and the
 * thread's start and stop.  It is the one file that knows how a server
 * changes role.
 *
 * The position a member reports is comparable across the group: a
 * replica's place in its master's update log (repl_position, or the rts
 * file for a server that follows no one since a restart); a master's, the
 * timestamp of its last row when that row was its own.
 */
#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "kura/ha.h"
#include "kura/replrole.h"
#include "server.h"

typedef struct role_stats {
    char master[300];
    uint64_t position;
    bool connected, copying;
    int64_t lag_us;
} role_stats;

static void role_stat(void *arg, const char *name, const char *value)
{
    role_stats *v = arg;
    if (strcmp(name, "repl_master") == 0)
        snprintf(v->master, sizeof(v->master), "%s", value);
    else if (strcmp(name, "repl_position") == 0)
        v->position = strtoull(value, NULL, 10);
    else if (strcmp(name, "repl_connected") == 0)
        v->connected = strcmp(value, "0") != 0;
    else if (strcmp(name, "repl_copying") == 0)
        v->copying = strcmp(value, "0") != 0;
    else if (strcmp(name, "repl_lag_us") == 0)
        v->lag_us = strcmp(value, "unknown") ? (int64_t)strtoull(value, NULL, 10) : -1;
}

/* The rts file's position (its first number): 0 when there is none. */
static uint64_t rts_file_position(const kura_settings *st)
{
    char path[4200];
    unsigned long long v = 0;
    FILE *f = replctl_rts_path(st, path, sizeof(path)) == 0 ? fopen(path, "r") : NULL;
    if (f && fscanf(f, "%llu", &v) != 1)
        v = 0;
    if (f)
        fclose(f);
    return v;
}

/* A server that follows no one: its last row's timestamp if the row was
 * made here, else where it was in its last master's log (rts). */
static uint64_t own_position(kura_server *srv)
{
    uint64_t last = ul_last_ts(srv->ulog);
    ul_reader *rd;
    ul_row row;
    bool own = true;
    if (last && ul_reader_open(srv->ulog, last - 1, &rd) == KURA_OK) {
        while (ul_reader_next(rd, &row) == KURA_OK)
            if (row.type != UL_HDR)
                own = row.sid == ul_sid(srv->ulog);
        ul_reader_close(rd);
    }
    if (own)
        return last;
    uint64_t rts = rts_file_position(srv->settings);
    return rts ? rts : last;
}

/* The role, and the position when with_pos (which reads the update log). */
static void view_of(kura_server *srv, ha_role_view *out, bool with_pos)
{
    role_stats v = { .lag_us = -1 };
    role_state rs;
    memset(out, 0, sizeof(*out));
    repl_role_get(srv, &rs);
    pthread_mutex_lock(&replctl_slave_lock);
    bool replica = srv->repl_slave != NULL;
    if (replica)
        repl_slave_stats(srv->repl_slave, true, role_stat, &v);
    pthread_mutex_unlock(&replctl_slave_lock);
    /* a replica whose follow failed (no replica thread, role still a
     * replica) takes no writes: not a master (/primary 503) */
    out->master = !replica && rs.role != ROLE_FENCED && rs.role != ROLE_REPLICA;
    out->following = replica && !v.copying;
    out->copying = replica && v.copying;
    out->connected = v.connected;
    snprintf(out->master_addr, sizeof(out->master_addr), "%s", v.master);
    if (with_pos)
        out->position = replica ? (v.position ? v.position : rts_file_position(srv->settings))
                                : own_position(srv);
    out->term = rs.term;
    /* a replica with no row yet has no lag to tell (repl_lag_us needs a
     * position): connected, it is as far as an empty master */
    out->lag_ms = v.lag_us >= 0 ? v.lag_us / 1000 : v.connected && !v.position ? 0 : -1;
}

static void view(void *ctx, ha_role_view *out)
{
    view_of(ctx, out, true);
}

int ha_adapter_http(kura_server *srv, bool primary, char *why, size_t len)
{
    const kura_settings *st = srv->settings;
    ha_role_view v;
    char leader[300] = "";
    view_of(srv, &v, false);
    if (srv->ha)
        ha_leader_addr(srv->ha, leader, sizeof(leader));
    /* "[V6]:PORT" as the replica names its master: "V6:PORT" */
    char *close = leader[0] == '[' ? strstr(leader, "]:") : NULL;
    if (close) {
        memmove(close, close + 1, strlen(close));
        memmove(leader, leader + 1, strlen(leader));
    }
    if (primary) {
        if (!v.master && v.master_addr[0])
            snprintf(why, len, "a replica of %s", v.master_addr);
        else if (!v.master)
            snprintf(why, len, "fenced: it heard of a newer term, and follows no one");
        else if (srv->ha && !ha_is_leader(srv->ha))
            snprintf(why, len, "not the leader (the leader is %s)", leader[0] ? leader : "none");
        else if (!kura_fence_open(st->ha_etcd ? &srv->fence : NULL))
            snprintf(why, len, "the leader's lease is not renewed: taking no writes");
        else
            return snprintf(why, len, "the writable master"), 200;
        return 503;
    }
    if (v.master)
        snprintf(why, len, "not a replica");
    else if (!v.connected)
        snprintf(why, len, "not connected to %s", v.master_addr);
    else if (srv->ha && strcmp(leader, v.master_addr) != 0)
        snprintf(why, len, "following %s, not the leader (%s)", v.master_addr,
                 leader[0] ? leader : "none");
    else if (v.lag_ms < 0 || v.lag_ms > st->ha_max_lag)
        snprintf(why, len, "lag %s%" PRId64 " ms, over -ha-max-lag %d ms", v.lag_ms < 0 ?
                 "unknown: " : "", v.lag_ms, st->ha_max_lag);
    else
        return snprintf(why, len, "a replica of %s, %" PRId64 " ms behind", v.master_addr,
                        v.lag_ms), 200;
    return 503;
}

/* The leader of term: a replica or a fenced server is promoted, a master
 * takes the term (persisted before writes are taken). */
static int promote(void *ctx, uint64_t term, char *msg, size_t len)
{
    return repl_role_promote(ctx, term, ROLE_SRC_HA, false, msg, len) == KURA_OK ? 0 : -1;
}

static int follow(void *ctx, const char *host, int port, uint64_t term, char *msg, size_t len)
{
    return repl_role_follow(ctx, host, port, term, ROLE_SRC_HA, msg, len) == KURA_OK ? 0 : -1;
}

/* The role module's gate, before every local change and -syncrepl
 * acknowledgement: the leader's lease deadline. */
static bool fence_gate(void *arg)
{
    kura_server *srv = arg;
    return kura_fence_open(&srv->fence);
}

static void ha_log(int level, const char *line)
{
    log_msg(level, "%s", line);
}

/* HOST:PORT replicas reach this server at: -host's first address
 * (localhost: 127.0.0.1; a wildcard: this machine's name). */
static void own_addr(const kura_settings *st, char *out, size_t len)
{
    char host[256];
    const char *h = st->host ? st->host : "localhost";
    if (strncmp(h, "notls:", 6) == 0)
        h += 6;
    snprintf(host, sizeof(host), "%.*s", (int)strcspn(h, ","), h);
    if (!strcmp(host, "localhost"))
        snprintf(host, sizeof(host), "127.0.0.1");
    else if (!host[0] || !strcmp(host, "*") || !strcmp(host, "0.0.0.0") || !strcmp(host, "::") ||
             !strcmp(host, "[::]"))
        if (gethostname(host, sizeof(host)) < 0)
            snprintf(host, sizeof(host), "127.0.0.1");
    bool v6 = strchr(host, ':') && host[0] != '[';
    snprintf(out, len, "%s%s%s:%d", v6 ? "[" : "", host, v6 ? "]" : "", st->port);
}

int ha_adapter_start(kura_server *srv)
{
    kura_settings *st = srv->settings;
    char addr[300], err[300];
    const char *user = NULL, *password = NULL;
    if (!st->ha_etcd)
        return 0;
    if (st->ha_auth)
        kura_auth_first(st->ha_auth, &user, &password);
    own_addr(st, addr, sizeof(addr));
    kura_fence_set(&srv->fence, 0);     /* no write until etcd names this server leader */
    if (repl_role_set_gate(srv, fence_gate, srv) != KURA_OK) {
        log_msg(KURA_LOG_ERROR, "-ha-etcd: cannot set the write gate");
        return -1;
    }
    ha_config cfg = {
        .etcd = st->ha_etcd, .user = user, .password = password, .ca_file = st->ha_ca,
        .cluster = st->ha_cluster, .name = st->ha_name ? st->ha_name : addr, .addr = addr,
        .ttl = st->ha_ttl, .fence = &srv->fence, .log = ha_log,
        .ops = { .view = view, .promote = promote, .follow = follow, .ctx = srv },
    };
    if (ha_start(&cfg, &srv->ha, err, sizeof(err)) < 0) {
        log_msg(KURA_LOG_ERROR, "-ha-etcd: %s", err);
        return -1;
    }
    return 0;
}

void ha_adapter_stop(kura_server *srv)
{
    ha_stop(srv->ha);
    srv->ha = NULL;
}
