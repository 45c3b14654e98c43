/*
 * connlist.c - "stats conns": every listening socket and client
 * connection, in memcached's layout (one block per socket, by descriptor):
 *
 *   STAT <fd>:addr tcp:127.0.0.1:11211
 *   STAT <fd>:state conn_listening
 *   STAT <fd>:secs_since_last_cmd 12
 *   STAT <fd>:addr tcp:127.0.0.1:53848
 *   STAT <fd>:listen_addr tcp:127.0.0.1:11211
 *   STAT <fd>:state conn_new_cmd
 *   STAT <fd>:secs_since_last_cmd 1
 *
 * Connections live on their workers, which the asking session's worker
 * cannot look into; so each socket has an entry here, made when it is
 * accepted (or bound) and removed when it closes, under one lock, and
 * updated by its owner without the lock (atomic stores) as it works.  The
 * state is what kura can tell: conn_parse_cmd while requests are being
 * answered (the asking connection's own state, as in memcached),
 * conn_mwrite while replies wait for the socket or for a sync, conn_read
 * while a partial request is buffered, conn_new_cmd otherwise.
 */
#include <arpa/inet.h>
#include <netinet/in.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/un.h>
#include <time.h>

#include "server.h"

struct conn_entry {
    int fd;
    bool listening;
    _Atomic int64_t last_cmd;           /* Unix time of its last request (or accept) */
    _Atomic int state;                  /* enum conn_state */
    char addr[128], listen_addr[128];
};

static pthread_mutex_t lock = PTHREAD_MUTEX_INITIALIZER;   /* guards table and its entries' lifetime */
static conn_entry **table;              /* by descriptor */
static int table_len;

static const char *const state_names[] = {
    [CONN_NEW_CMD] = "conn_new_cmd", [CONN_PARSE_CMD] = "conn_parse_cmd",
    [CONN_READ] = "conn_read", [CONN_MWRITE] = "conn_mwrite",
    [CONN_LISTENING] = "conn_listening",
};

/* memcached's names for an address: tcp:1.2.3.4:5, tcp6:[::1]:5,
 * unix:PATH, and "?:<AF n>" for what it cannot name (an accepted unix
 * socket's peer, which has no path). */
static void addr_name(const struct sockaddr_storage *sa, socklen_t len, char *out, size_t n)
{
    char host[INET6_ADDRSTRLEN];
    if (sa->ss_family == AF_INET) {
        const struct sockaddr_in *in = (const struct sockaddr_in *)sa;
        inet_ntop(AF_INET, &in->sin_addr, host, sizeof(host));
        snprintf(out, n, "tcp:%s:%u", host, ntohs(in->sin_port));
    } else if (sa->ss_family == AF_INET6) {
        const struct sockaddr_in6 *in6 = (const struct sockaddr_in6 *)sa;
        inet_ntop(AF_INET6, &in6->sin6_addr, host, sizeof(host));
        snprintf(out, n, "tcp6:[%s]:%u", host, ntohs(in6->sin6_port));
    } else if (sa->ss_family == AF_UNIX && len > offsetof(struct sockaddr_un, sun_path) &&
               ((const struct sockaddr_un *)sa)->sun_path[0]) {
        snprintf(out, n, "unix:%s", ((const struct sockaddr_un *)sa)->sun_path);
    } else {
        snprintf(out, n, "?:<AF %d>", sa->ss_family == AF_UNIX ? 0 : sa->ss_family);
    }
}

conn_entry *connlist_add(int fd, bool listening)
{
    conn_entry *e = calloc(1, sizeof(*e));
    if (!e)
        return NULL;
    struct sockaddr_storage sa;
    socklen_t len = sizeof(sa);
    e->fd = fd;
    e->listening = listening;
    atomic_store(&e->last_cmd, (int64_t)time(NULL));
    atomic_store(&e->state, listening ? CONN_LISTENING : CONN_NEW_CMD);
    memset(&sa, 0, sizeof(sa));
    if (getsockname(fd, (struct sockaddr *)&sa, &len) == 0)
        addr_name(&sa, len, listening ? e->addr : e->listen_addr, sizeof(e->addr));
    len = sizeof(sa);
    memset(&sa, 0, sizeof(sa));
    if (!listening && getpeername(fd, (struct sockaddr *)&sa, &len) == 0)
        addr_name(&sa, len, e->addr, sizeof(e->addr));
    pthread_mutex_lock(&lock);
    if (fd >= table_len) {
        int n = fd + 64;
        conn_entry **t = realloc(table, (size_t)n * sizeof(*t));
        if (!t) {
            pthread_mutex_unlock(&lock);
            free(e);
            return NULL;
        }
        memset(t + table_len, 0, (size_t)(n - table_len) * sizeof(*t));
        table = t;
        table_len = n;
    }
    table[fd] = e;
    pthread_mutex_unlock(&lock);
    return e;
}

void connlist_remove(conn_entry *e)
{
    if (!e)
        return;
    pthread_mutex_lock(&lock);
    if (e->fd < table_len && table[e->fd] == e)
        table[e->fd] = NULL;
    pthread_mutex_unlock(&lock);
    free(e);
}

void connlist_set(conn_entry *e, int state, bool request)
{
    if (!e)
        return;
    atomic_store_explicit(&e->state, state, memory_order_relaxed);
    if (request)
        atomic_store_explicit(&e->last_cmd, (int64_t)time(NULL), memory_order_relaxed);
}

static void emit_field(kura_stat_fn emit, void *arg, int fd, const char *field, const char *v)
{
    char name[64];
    snprintf(name, sizeof(name), "%d:%s", fd, field);
    emit(arg, name, v);
}

/* "stats conns" (a stats group registered in the command table). */
static void conns_stats(void *ctx, kura_stat_fn emit, void *arg)
{
    (void)ctx;
    int64_t now = (int64_t)time(NULL);
    pthread_mutex_lock(&lock);
    for (int fd = 0; fd < table_len; fd++) {
        conn_entry *e = table[fd];
        char secs[24];
        if (!e)
            continue;
        int64_t last = atomic_load_explicit(&e->last_cmd, memory_order_relaxed);
        int state = atomic_load_explicit(&e->state, memory_order_relaxed);
        emit_field(emit, arg, fd, "addr", e->addr);
        if (!e->listening)
            emit_field(emit, arg, fd, "listen_addr", e->listen_addr);
        emit_field(emit, arg, fd, "state", state_names[state]);
        snprintf(secs, sizeof(secs), "%lld", (long long)(now > last ? now - last : 0));
        emit_field(emit, arg, fd, "secs_since_last_cmd", secs);
    }
    pthread_mutex_unlock(&lock);
}

int connlist_register(kura_cmdtab *cmds)
{
    return kura_cmdtab_add_stats(cmds, "conns", conns_stats, NULL) == KURA_OK ? 0 : -1;
}
