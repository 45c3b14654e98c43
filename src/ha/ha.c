/*
 * ha.c - automatic failover on etcd: one thread of its own that keeps this
 * server's lease, registers it among the members, takes the leader key
 * when it is free and this server is the most up-to-date member, and
 * otherwise makes it follow the leader (kura/ha.h says the protocol).
 *
 * A round, every HA_ROUND_MS (HA_ELECT_MS while the leader key is free; a
 * third of the TTL, at most a second, for a leader's keepalive): renew the lease (or take a new one), put the member key,
 * read the cluster's keys, decide.  Every request has a deadline (the
 * etcd client's, a third of the TTL at most), and a failed round waits
 * (backoff doubling to HA_BACKOFF_MAX_MS) before the next: nothing here
 * loops without waiting.
 *
 * Fencing: the lease is renewed from a time t0 taken before the request is
 * sent, so etcd's own expiry is at least t0 + TTL; the write fence opens
 * only until t0 + TTL - margin (ha_margin_ms).  A leader that cannot renew
 * closes by itself; a process paused past it wakes up closed, and its
 * next keepalive (or a new leader's key) tells it it is leader no more.
 *
 * Election: when the key is free, the members must have refreshed their
 * keys since it was seen free (each writes its position every round, so a
 * position read before the old master stopped cannot win), or be gone
 * (their lease expired), or a TTL must have passed; then the best of them
 * (ha_member_better: position, term, name) creates the key.  A switchover
 * (kuractl ha switchover NAME) puts /kura/CLUSTER/switchover: the leader
 * closes its fence (drain), waits until NAME's position reaches its own,
 * then deletes its key, and only NAME may take it.
 */
#include <inttypes.h>
#include <pthread.h>
#include <stdarg.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "kura/etcd.h"
#include "kura/ha.h"
#include "kura/status.h"
#include "kura/testhooks.h"
#include "kura/thread.h"

#define HA_ROUND_MS 300                 /* a follower's round; a leader's: a third of the TTL */
#define HA_ELECT_MS 150                 /* while the leader key is free */
#define HA_BACKOFF_MAX_MS 5000
#define HA_MEMBERS_MAX 64
#define HA_LOG_EVERY_MS 30000           /* a repeated error line at most this often */

struct ha_node {
    char etcd_urls[2048], user[256], password[256], ca_file[1024];
    bool auth, ca;
    char name[HA_NAME_MAX], addr[300];
    char k_prefix[400], k_leader[420], k_members[420], k_self[600], k_switch[420];
    int ttl;
    ha_role_ops ops;
    kura_fence *fence;
    void (*log)(int level, const char *line);
    etcd_client *etcd;
    pthread_t thread;
    pthread_mutex_t lock;
    pthread_cond_t wake;
    bool stop;                          /* lock */
    bool running;
    _Atomic bool leader;
    pthread_mutex_t addr_lock;
    char leader_addr[300];              /* addr_lock */
    /* the thread's own */
    int64_t lease;                      /* 0: none */
    int64_t free_rev, free_ms;          /* the leader key seen free at this revision, time */
    int64_t unfit_until_ms;             /* a promotion failed: no try before this */
    int64_t follow_after_ms;            /* a follow failed: not again before this */
    uint64_t known_term;                /* the highest leader term seen */
    int backoff_ms;
    char last_err[300];
    int64_t last_err_ms;
};

static int64_t mono_ms(void)
{
    return kura_fence_now() / 1000000;
}

int64_t ha_margin_ms(int ttl)
{
    int64_t m = (int64_t)ttl * 1000 / 5;
    return m < 500 ? 500 : m;
}

static void say(ha_node *n, int level, const char *fmt, ...)
    __attribute__((format(printf, 3, 4)));
static void say(ha_node *n, int level, const char *fmt, ...)
{
    char line[600];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(line, sizeof(line), fmt, ap);
    va_end(ap);
    if (n->log)
        n->log(level, line);
}

/* An etcd failure, logged once per distinct reason or HA_LOG_EVERY_MS. */
static void say_etcd(ha_node *n, const char *what)
{
    char e[300];
    snprintf(e, sizeof(e), "%s: %s", what, etcd_error(n->etcd));
    int64_t now = mono_ms();
    if (strcmp(e, n->last_err) == 0 && now - n->last_err_ms < HA_LOG_EVERY_MS)
        return;
    snprintf(n->last_err, sizeof(n->last_err), "%s", e);
    n->last_err_ms = now;
    say(n, KURA_LOG_WARNING, "failover: etcd %s", e);
}

bool ha_member_parse(const char *name, const char *value, ha_member *m)
{
    memset(m, 0, sizeof(*m));
    snprintf(m->name, sizeof(m->name), "%s", name);
    unsigned long long pos = 0, term = 0;
    const char *a = strstr(value, "addr="), *p = strstr(value, "pos="),
               *t = strstr(value, "term="), *r = strstr(value, "role=");
    if (!a || !p || sscanf(p, "pos=%llu", &pos) != 1)
        return false;
    if (t)
        sscanf(t, "term=%llu", &term);
    snprintf(m->addr, sizeof(m->addr), "%.*s", (int)strcspn(a + 5, " \n"), a + 5);
    snprintf(m->role, sizeof(m->role), "%.*s", r ? (int)strcspn(r + 5, " \n") : 0,
             r ? r + 5 : "");
    m->pos = pos;
    m->term = term;
    return m->addr[0] != '\0';
}

bool ha_member_better(const ha_member *a, const ha_member *b)
{
    if (a->pos != b->pos)
        return a->pos > b->pos;
    if (a->term != b->term)
        return a->term > b->term;
    return strcmp(a->name, b->name) < 0;
}

bool ha_is_leader(const ha_node *n)
{
    return n && atomic_load(&((ha_node *)n)->leader);
}

void ha_leader_addr(const ha_node *n, char *buf, size_t len)
{
    ha_node *m = (ha_node *)n;
    pthread_mutex_lock(&m->addr_lock);
    snprintf(buf, len, "%s", m->leader_addr);
    pthread_mutex_unlock(&m->addr_lock);
}

static void set_leader_addr(ha_node *n, const char *addr)
{
    pthread_mutex_lock(&n->addr_lock);
    snprintf(n->leader_addr, sizeof(n->leader_addr), "%s", addr);
    pthread_mutex_unlock(&n->addr_lock);
}

/* No longer the leader: the fence shut at once. */
static void step_down(ha_node *n, const char *why)
{
    kura_fence_set(n->fence, 0);
    if (atomic_exchange(&n->leader, false))
        say(n, KURA_LOG_WARNING, "failover: %s is leader no more (%s): taking no writes", n->name,
            why);
}

/* "HOST:PORT" (HOST may be [V6]) into its parts. */
static bool split_addr(const char *a, char *host, size_t hlen, int *port)
{
    const char *colon = strrchr(a, ':');
    if (!colon || colon == a)
        return false;
    const char *h = a;
    size_t hl = (size_t)(colon - a);
    if (h[0] == '[' && hl >= 2 && h[hl - 1] == ']') {
        h++;
        hl -= 2;
    }
    if (hl >= hlen)
        return false;
    memcpy(host, h, hl);
    host[hl] = '\0';
    *port = atoi(colon + 1);
    return *port > 0 && *port < 65536;
}

/* The lease renewed (or a new one): the fence's deadline in *until_ns
 * (0: none held).  0, or -1 when etcd did not answer. */
static int keep_lease(ha_node *n, int64_t *until_ns)
{
    int ttl = 0;
    int64_t t0 = kura_fence_now();
    *until_ns = 0;
    if (n->lease) {
        if (etcd_lease_keepalive(n->etcd, n->lease, &ttl) < 0) {
            say_etcd(n, "keepalive");
            return -1;
        }
        if (ttl <= 0) {
            say(n, KURA_LOG_WARNING, "failover: the lease of %s has expired on etcd", n->name);
            n->lease = 0;
            step_down(n, "its lease expired");
        }
    }
    if (!n->lease) {
        t0 = kura_fence_now();
        if (etcd_lease_grant(n->etcd, n->ttl, &n->lease, &ttl) < 0) {
            n->lease = 0;
            say_etcd(n, "lease grant");
            return -1;
        }
    }
    *until_ns = t0 + (int64_t)ttl * 1000000000 - ha_margin_ms(ttl) * 1000000;
    return 0;
}

/* The leader key's value "NAME HOST:PORT TERM" into its parts. */
static bool parse_leader(const char *v, char *name, size_t nlen, char *addr, size_t alen,
                         uint64_t *term)
{
    char nm[HA_NAME_MAX], ad[300];
    unsigned long long t = 0;
    if (sscanf(v, "%127s %299s %llu", nm, ad, &t) < 2)
        return false;
    snprintf(name, nlen, "%s", nm);
    snprintf(addr, alen, "%s", ad);
    *term = t;
    return true;
}

typedef struct cluster_view {
    etcd_kv *kvs;
    int nkv;
    int64_t rev;
    const etcd_kv *leader, *sw;
    ha_member members[HA_MEMBERS_MAX];
    int nmembers;
    uint64_t max_term;
} cluster_view;

static void read_view(ha_node *n, cluster_view *cv)
{
    size_t ml = strlen(n->k_members);
    for (int i = 0; i < cv->nkv; i++) {
        const etcd_kv *kv = &cv->kvs[i];
        if (strcmp(kv->key, n->k_leader) == 0) {
            cv->leader = kv;
        } else if (strcmp(kv->key, n->k_switch) == 0) {
            cv->sw = kv;
        } else if (strncmp(kv->key, n->k_members, ml) == 0 && cv->nmembers < HA_MEMBERS_MAX) {
            ha_member *m = &cv->members[cv->nmembers];
            if (ha_member_parse(kv->key + ml, kv->value, m)) {
                m->mod_rev = kv->mod_rev;
                m->lease = kv->lease;
                if (m->term > cv->max_term)
                    cv->max_term = m->term;
                cv->nmembers++;
            }
        }
    }
}

static const ha_member *find_member(const cluster_view *cv, const char *name)
{
    for (int i = 0; i < cv->nmembers; i++)
        if (strcmp(cv->members[i].name, name) == 0)
            return &cv->members[i];
    return NULL;
}

/* The leader is this server: promote if needed, keep the fence open, or
 * drain and hand over for a switchover. */
static void lead(ha_node *n, const cluster_view *cv, const ha_role_view *me, uint64_t term,
                 int64_t until_ns)
{
    char msg[600];
    char target[HA_NAME_MAX] = "";
    if (cv->sw)
        snprintf(target, sizeof(target), "%.*s", (int)strcspn(cv->sw->value, " \n"),
                 cv->sw->value);
    if (target[0] && strcmp(target, n->name) == 0) {
        bool d;
        etcd_delete(n->etcd, n->k_switch, cv->sw->mod_rev, &d);    /* done: it leads */
        target[0] = '\0';
    }
    const ha_member *t = target[0] ? find_member(cv, target) : NULL;
    if (t) {
        /* drain: no write taken or acknowledged from here */
        kura_fence_set(n->fence, 0);
        atomic_store(&n->leader, false);
        if (t->pos >= me->position) {
            bool d = false;
            if (etcd_delete(n->etcd, n->k_leader, cv->leader->mod_rev, &d) == 0 && d)
                say(n, KURA_LOG_INFO, "failover: switchover: %s has caught up (position %" PRIu64
                    "), leadership handed over", target, t->pos);
        }
        return;
    }
    if (!me->master || me->term < term) {
        if (n->ops.promote(n->ops.ctx, term, msg, sizeof(msg)) < 0) {
            bool d;
            say(n, KURA_LOG_ERROR, "failover: %s leads but cannot be promoted (%s): letting "
                "the leadership go", n->name, msg);
            etcd_delete(n->etcd, n->k_leader, cv->leader->mod_rev, &d);
            n->unfit_until_ms = mono_ms() + (int64_t)n->ttl * 2000;
            return;
        }
    }
    /* (a test build's negative check: no deadline, testhooks.h) */
    kura_fence_set(n->fence, KURA_TEST_SWITCH(ha_no_fence) ? INT64_MAX : until_ns);
    if (!atomic_exchange(&n->leader, true))
        say(n, KURA_LOG_INFO, "failover: %s is the leader of term %" PRIu64 ": the master, "
            "taking writes (position %" PRIu64 ")", n->name, term, me->position);
    set_leader_addr(n, n->addr);
}

/* Another leads: follow it. */
static void follow(ha_node *n, const char *addr, uint64_t term, const ha_role_view *me)
{
    char host[300], msg[600];
    int port;
    set_leader_addr(n, addr);
    /* following it already, or taking a full copy from it (a follow now
     * would start the copy again, and again) */
    if ((me->following || me->copying) && strcmp(me->master_addr, addr) == 0)
        return;
    if (mono_ms() < n->follow_after_ms || !split_addr(addr, host, sizeof(host), &port))
        return;
    if (n->ops.follow(n->ops.ctx, host, port, term, msg, sizeof(msg)) < 0) {
        say(n, KURA_LOG_ERROR, "failover: cannot follow the leader %s: %s", addr, msg);
        n->follow_after_ms = mono_ms() + 2000;
        return;
    }
    say(n, KURA_LOG_INFO, "failover: following the leader %s (term %" PRIu64 ")", addr, term);
}

/* The key is free: take it if this server is the one to. */
static void elect(ha_node *n, const cluster_view *cv, const ha_member *self, int64_t until_ns)
{
    int64_t now = mono_ms();
    if (!n->free_rev) {
        n->free_rev = cv->rev;
        n->free_ms = now;
    }
    if (now < n->unfit_until_ms || !strcmp(self->role, "copying"))
        return;
    bool late = now - n->free_ms > (int64_t)n->ttl * 1000;
    char target[HA_NAME_MAX] = "";
    if (cv->sw)
        snprintf(target, sizeof(target), "%.*s", (int)strcspn(cv->sw->value, " \n"),
                 cv->sw->value);
    if (target[0] && find_member(cv, target) && !late) {
        if (strcmp(target, n->name) != 0)
            return;                     /* a switchover names another */
    } else {
        for (int i = 0; i < cv->nmembers; i++) {
            const ha_member *m = &cv->members[i];
            if (!strcmp(m->name, n->name) || !strcmp(m->role, "copying"))
                continue;
            if (m->mod_rev <= n->free_rev && !late)
                return;                 /* not refreshed since: wait for its position */
            if (ha_member_better(m, self) && now - n->free_ms < 3 * (int64_t)n->ttl * 1000)
                return;                 /* it goes first (unless it never does) */
        }
    }
    char value[600];
    uint64_t term = (cv->max_term > n->known_term ? cv->max_term : n->known_term) + 1;
    bool won = false;
    snprintf(value, sizeof(value), "%s %s %" PRIu64, n->name, n->addr, term);
    if (etcd_create(n->etcd, n->k_leader, value, n->lease, &won) < 0) {
        say_etcd(n, "leader key");
        return;
    }
    if (!won)
        return;
    n->free_rev = 0;
    say(n, KURA_LOG_INFO, "failover: %s took the leader key (term %" PRIu64 ", position %"
        PRIu64 ")", n->name, term, self->pos);
    ha_role_view me;
    n->ops.view(n->ops.ctx, &me);
    cluster_view mine = *cv;
    etcd_kv kv = { .key = n->k_leader, .value = value, .mod_rev = 0, .lease = n->lease };
    mine.leader = &kv;
    /* the key's revision is not known here: a failed promotion's delete
     * (mod_rev 0) removes whatever the key is, which is still ours */
    lead(n, &mine, &me, term, until_ns);
}

/* One round: 0, or -1 when etcd failed (the caller backs off). */
static int round_once(ha_node *n)
{
    int64_t until_ns;
    if (keep_lease(n, &until_ns) < 0)
        return -1;
    ha_role_view me;
    n->ops.view(n->ops.ctx, &me);
    char value[600];
    const char *role = me.master ? "master" : me.copying ? "copying"
                     : me.following ? "replica" : "none";
    snprintf(value, sizeof(value), "addr=%s pos=%" PRIu64 " term=%" PRIu64 " role=%s lag_ms=%"
             PRId64, n->addr, me.position, me.term, role, me.lag_ms);
    if (etcd_put(n->etcd, n->k_self, value, n->lease) < 0) {
        say_etcd(n, "member key");
        return -1;
    }
    cluster_view cv = { 0 };
    if (etcd_range_prefix(n->etcd, n->k_prefix, &cv.kvs, &cv.nkv, &cv.rev) < 0) {
        say_etcd(n, "read");
        return -1;
    }
    read_view(n, &cv);
    ha_member self;
    ha_member_parse(n->name, value, &self);
    char lname[HA_NAME_MAX], laddr[300];
    uint64_t lterm = 0;
    if (cv.leader && parse_leader(cv.leader->value, lname, sizeof(lname), laddr, sizeof(laddr),
                                  &lterm)) {
        n->free_rev = 0;
        if (lterm > n->known_term)
            n->known_term = lterm;
        if (strcmp(lname, n->name) == 0 && cv.leader->lease == n->lease) {
            lead(n, &cv, &me, lterm, until_ns);
        } else if (strcmp(lname, n->name) == 0) {
            /* our own key from before a restart, under a lease now dead:
             * nobody serves as leader on it, so it goes now */
            bool d;
            step_down(n, "its key is an old lease's");
            etcd_delete(n->etcd, n->k_leader, cv.leader->mod_rev, &d);
        } else {
            step_down(n, "another holds the leader key");
            follow(n, laddr, lterm, &me);
        }
    } else {
        step_down(n, "the leader key is free");
        set_leader_addr(n, "");
        elect(n, &cv, &self, until_ns);
    }
    etcd_kvs_free(cv.kvs, cv.nkv);
    return 0;
}

static void *ha_main(void *arg)
{
    ha_node *n = arg;
    pthread_mutex_lock(&n->lock);
    while (!n->stop) {
        pthread_mutex_unlock(&n->lock);
        int rc = round_once(n);
        int wait;
        if (rc < 0) {
            n->backoff_ms = n->backoff_ms ? n->backoff_ms * 2 : 100;
            if (n->backoff_ms > HA_BACKOFF_MAX_MS)
                n->backoff_ms = HA_BACKOFF_MAX_MS;
            /* a leader retries within its margin, whatever the backoff */
            wait = atomic_load(&n->leader) && n->backoff_ms > ha_margin_ms(n->ttl) / 2
                   ? (int)(ha_margin_ms(n->ttl) / 2) : n->backoff_ms;
        } else {
            n->backoff_ms = 0;
            n->last_err[0] = '\0';
            wait = atomic_load(&n->leader) ? n->ttl * 1000 / 3 : n->free_rev ? HA_ELECT_MS
                                                                            : HA_ROUND_MS;
            if (wait > 1000)
                wait = 1000;
        }
        struct timespec until = kura_mono_after_ms(wait);
        pthread_mutex_lock(&n->lock);
        while (!n->stop && pthread_cond_timedwait(&n->wake, &n->lock, &until) == 0)
            ;
    }
    pthread_mutex_unlock(&n->lock);
    return NULL;
}

int ha_start(const ha_config *cfg, ha_node **out, char *err, size_t errlen)
{
    *out = NULL;
    ha_node *n = calloc(1, sizeof(*n));
    if (!n) {
        snprintf(err, errlen, "out of memory");
        return -1;
    }
    snprintf(n->name, sizeof(n->name), "%s", cfg->name);
    snprintf(n->addr, sizeof(n->addr), "%s", cfg->addr);
    snprintf(n->k_prefix, sizeof(n->k_prefix), "/kura/%s/", cfg->cluster);
    snprintf(n->k_leader, sizeof(n->k_leader), "%sleader", n->k_prefix);
    snprintf(n->k_members, sizeof(n->k_members), "%smembers/", n->k_prefix);
    snprintf(n->k_self, sizeof(n->k_self), "%s%s", n->k_members, n->name);
    snprintf(n->k_switch, sizeof(n->k_switch), "%sswitchover", n->k_prefix);
    n->ttl = cfg->ttl;
    n->ops = cfg->ops;
    n->fence = cfg->fence;
    n->log = cfg->log;
    kura_fence_set(n->fence, 0);
#ifdef KURA_TEST_HOOKS
    if (getenv("KURA_TEST_HA_NO_FENCE"))
        kura_test.ha_no_fence = true;
#endif
    int timeout = cfg->ttl * 1000 / 3;
    if (etcd_open(cfg->etcd, cfg->user, cfg->password, cfg->ca_file,
                  timeout > 2000 ? 2000 : timeout, &n->etcd, err, errlen) < 0) {
        free(n);
        return -1;
    }
    pthread_mutex_init(&n->lock, NULL);
    pthread_mutex_init(&n->addr_lock, NULL);
    kura_cond_init_mono(&n->wake);
    /* said before the thread runs: it changes the endpoint on a failure */
    say(n, KURA_LOG_INFO, "failover: %s (%s) in cluster %s on etcd %s, lease TTL %d s "
        "(writes stop %" PRId64 " ms before it could expire)", n->name, n->addr, cfg->cluster,
        etcd_endpoint(n->etcd), n->ttl, ha_margin_ms(n->ttl));
    if (pthread_create(&n->thread, NULL, ha_main, n) != 0) {
        snprintf(err, errlen, "cannot start the failover thread");
        etcd_close(n->etcd);
        pthread_mutex_destroy(&n->lock);
        pthread_mutex_destroy(&n->addr_lock);
        pthread_cond_destroy(&n->wake);
        free(n);
        return -1;
    }
    n->running = true;
    *out = n;
    return 0;
}

void ha_stop(ha_node *n)
{
    if (!n)
        return;
    if (n->running)
        kura_thread_stop(n->thread, &n->lock, &n->wake, &n->stop);
    kura_fence_set(n->fence, 0);
    if (n->lease && etcd_lease_revoke(n->etcd, n->lease) == 0 && atomic_load(&n->leader))
        say(n, KURA_LOG_INFO, "failover: %s stopped and let the leadership go", n->name);
    etcd_close(n->etcd);
    pthread_mutex_destroy(&n->lock);
    pthread_mutex_destroy(&n->addr_lock);
    pthread_cond_destroy(&n->wake);
    free(n);
}
