/*
 * replprobe.c - a promoted master tells the master it replaced of the
 * higher term (docs/replication.md, "Fencing").  An old master that comes
 * back after a failover (a restart with its original command line, a
 * network that heals) still believes it is the master; nobody else would
 * tell it, so the server that took its place asks its address every few
 * seconds:
 *
 *     repl term <term> <this server's address as the old one reaches it> <port>
 *
 * and the old master, at a lower term, stops taking writes at once,
 * saves aside what it took that this one lacks (the replica's divergence
 * check, when its stream starts) and follows this server, answering
 * "FENCED ...".  An answer "TERM <t> <role>" with t at or above this
 * server's says it is fenced already (or has moved on); a higher t fences
 * this server in turn.
 *
 * One thread per probing master; each attempt is bounded (a connection
 * and an answer within 2 s), the wait between attempts doubles from 1 s
 * to 5 s while the address does not answer, and is 30 s once it has
 * answered.  The thread ends when the role changes (replrole_probe_stop,
 * under repladmin's ctl_lock: it never takes that lock itself).
 */
#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "kura/thread.h"
#include "server.h"

#define PROBE_TIMEOUT_MS 2000
#define PROBE_MIN_MS 1000
#define PROBE_MAX_MS 5000
#define PROBE_TOLD_MS 30000

struct replprobe {
    kura_server *srv;
    pthread_t thread;
    pthread_mutex_t lock;
    pthread_cond_t wake;
    bool stop;                          /* lock */
    char host[ROLEFILE_HOST_MAX + 1];
    int port;
    _Atomic uint64_t attempts, told;
    char last[200];                     /* lock: the last answer, or why none */
};

static void note(struct replprobe *p, const char *a)
{
    pthread_mutex_lock(&p->lock);
    snprintf(p->last, sizeof(p->last), "%.190s", a);
    pthread_mutex_unlock(&p->lock);
}

/* One attempt: the wait before the next. */
static int attempt(struct replprobe *p, int backoff)
{
    kura_server *srv = p->srv;
    char req[400], ans[512], local[80];
    uint64_t term = repl_role_term(srv);
    replchain_auth auth;
    replchain_credentials(srv, &auth);
    /* this side's address as the old master reaches it: found on the
     * connection itself, so a first request learns it, a second sends it */
    if (replchain_ask(p->host, p->port, &auth, "version\r\n", "\r\n", ans, sizeof(ans),
                      PROBE_TIMEOUT_MS, local, sizeof(local)) < 0) {
        note(p, "no answer");
        return backoff;
    }
    atomic_fetch_add(&p->attempts, 1);
    snprintf(req, sizeof(req), "repl term %" PRIu64 " %s %d\r\n", term, local,
             srv->settings->port);
    if (replchain_ask(p->host, p->port, &auth, req, "\r\n", ans, sizeof(ans), PROBE_TIMEOUT_MS,
                      NULL, 0) < 0) {
        note(p, "no answer");
        return backoff;
    }
    ans[strcspn(ans, "\r\n")] = '\0';
    note(p, ans);
    unsigned long long t = 0;
    if (strncmp(ans, "FENCED ", 7) == 0) {
        atomic_fetch_add(&p->told, 1);
        log_msg(KURA_LOG_INFO, "the master this server replaced (%s:%d) answered again: told of "
                "term %" PRIu64 ", it answered: %s", p->host, p->port, term, ans);
        return PROBE_TOLD_MS;
    }
    if (sscanf(ans, "TERM %llu", &t) == 1) {
        if (t > term) {
            char why[400];
            snprintf(why, sizeof(why), "the master it replaced, %s:%d, is at a newer term",
                     p->host, p->port);
            repl_role_fence(srv, t, why);
        }
        return PROBE_TOLD_MS;
    }
    return backoff;                     /* an older kurad ("ERROR"), or another server */
}

static void *probe_main(void *arg)
{
    struct replprobe *p = arg;
    int backoff = PROBE_MIN_MS;
    pthread_mutex_lock(&p->lock);
    while (!p->stop) {
        pthread_mutex_unlock(&p->lock);
        int wait = attempt(p, backoff);
        backoff = wait == backoff ? (backoff * 2 > PROBE_MAX_MS ? PROBE_MAX_MS : backoff * 2)
                                  : PROBE_MIN_MS;
        struct timespec until;
        clock_gettime(CLOCK_MONOTONIC, &until);
        until.tv_sec += wait / 1000;
        until.tv_nsec += (long)(wait % 1000) * 1000000;
        if (until.tv_nsec >= 1000000000) {
            until.tv_sec++;
            until.tv_nsec -= 1000000000;
        }
        pthread_mutex_lock(&p->lock);
        while (!p->stop && pthread_cond_timedwait(&p->wake, &p->lock, &until) == 0)
            ;
    }
    pthread_mutex_unlock(&p->lock);
    return NULL;
}

void replrole_probe_start(kura_server *srv)
{
    struct replprobe **slot = replrole_probe_slot(srv);
    role_state rs;
    repl_role_get(srv, &rs);
    replrole_probe_stop(srv);
    if (rs.role != ROLE_MASTER || !rs.former[0] || rs.former_port <= 0)
        return;
    struct replprobe *p = calloc(1, sizeof(*p));
    if (!p)
        return;
    p->srv = srv;
    snprintf(p->host, sizeof(p->host), "%s", rs.former);
    p->port = rs.former_port;
    snprintf(p->last, sizeof(p->last), "-");
    pthread_mutex_init(&p->lock, NULL);
    kura_cond_init_mono(&p->wake);
    if (pthread_create(&p->thread, NULL, probe_main, p) != 0) {
        log_msg(KURA_LOG_ERROR, "cannot start the probe of %s:%d (the master this server "
                "replaced): it is not told of the new term", p->host, p->port);
        pthread_mutex_destroy(&p->lock);
        pthread_cond_destroy(&p->wake);
        free(p);
        return;
    }
    pthread_mutex_lock(&replctl_slave_lock);     /* stats read the slot under it */
    *slot = p;
    pthread_mutex_unlock(&replctl_slave_lock);
}

void replrole_probe_stop(kura_server *srv)
{
    struct replprobe **slot = replrole_probe_slot(srv);
    struct replprobe *p = *slot;
    if (!p)
        return;
    pthread_mutex_lock(&p->lock);
    p->stop = true;
    pthread_cond_signal(&p->wake);
    pthread_mutex_unlock(&p->lock);
    pthread_join(p->thread, NULL);
    pthread_mutex_lock(&replctl_slave_lock);
    *slot = NULL;
    pthread_mutex_unlock(&replctl_slave_lock);
    pthread_mutex_destroy(&p->lock);
    pthread_cond_destroy(&p->wake);
    free(p);
}

/* replctl_slave_lock held (repl_stats) */
void replrole_probe_stats(kura_server *srv, kura_stat_fn emit, void *arg)
{
    struct replprobe *p = srv->role ? *replrole_probe_slot(srv) : NULL;
    char b[300];
    if (!p) {
        emit(arg, "repl_probe", "-");
        return;
    }
    pthread_mutex_lock(&p->lock);
    snprintf(b, sizeof(b), "%.60s:%d,told=%" PRIu64 ",last=%.190s", p->host, p->port,
             atomic_load(&p->told), p->last);
    pthread_mutex_unlock(&p->lock);
    for (char *c = b; *c; c++)
        if (*c == ' ')
            *c = '_';
    emit(arg, "repl_probe", b);
}
