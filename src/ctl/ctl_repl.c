/*
 * ctl_repl.c - kuractl repl: status (the whole tree of replicas below a
 * server), promote and follow (failover by command, docs/replication.md).
 *
 * status reads "stats repl" of the server, then of each replica its
 * repl_replica_<sid> lines name (host and serving port), depth first:
 * at most TREE_DEPTH levels, each server once (a dual master's pair names
 * each other), a replica's connect and reads within REPLICA_TIMEOUT.  A
 * field a server does not report (an older kurad: no repl_state, no
 * state= in a replica's line) is unknown, never taken as good: "in sync"
 * is said only when the replica is connected, not copying, and its lag
 * in rows is 0 or its position is its master's last row.
 */
#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "ctl.h"

#define TREE_DEPTH 8
#define TREE_NODES 256                  /* servers visited at most */
#define REPLICA_TIMEOUT 3.0             /* seconds, for a replica's connection */
#define REPLICA_LINES 64                /* repl_replica_<sid> lines read per server */

/* ---- what "stats repl" says ---------------------------------------------------- */

typedef struct replica_line {
    char sid[16];
    char val[300];
} replica_line;

typedef struct repl_info {
    char role[16];
    char term[24];                      /* repl_term ("" from an older kurad) */
    char source[32];                    /* repl_role_source */
    char master[300];
    char state[24];                     /* repl_state, or derived from repl_connected */
    char last_error[200];
    long long next_attempt_ms;          /* -1: not reported */
    bool connected, copying, have_connected;
    uint64_t position, last_ts;
    char lag_us[24];                    /* the replica's repl_lag_us as it says it */
    int nrep;
    replica_line rep[REPLICA_LINES];
} repl_info;

static void repl_stat(void *arg, const char *name, const char *value)
{
    repl_info *r = arg;
    if (strcmp(name, "repl_role") == 0)
        snprintf(r->role, sizeof(r->role), "%s", value);
    else if (strcmp(name, "repl_term") == 0)
        snprintf(r->term, sizeof(r->term), "%s", value);
    else if (strcmp(name, "repl_role_source") == 0)
        snprintf(r->source, sizeof(r->source), "%s", value);
    else if (strcmp(name, "repl_master") == 0)
        snprintf(r->master, sizeof(r->master), "%s", value);
    else if (strcmp(name, "repl_state") == 0)
        snprintf(r->state, sizeof(r->state), "%s", value);
    else if (strcmp(name, "repl_last_error") == 0)
        snprintf(r->last_error, sizeof(r->last_error), "%s", value);
    else if (strcmp(name, "repl_next_attempt_ms") == 0)
        r->next_attempt_ms = strtoll(value, NULL, 10);
    else if (strcmp(name, "repl_connected") == 0) {
        r->connected = atoi(value) != 0;
        r->have_connected = true;
    } else if (strcmp(name, "repl_copying") == 0)
        r->copying = atoi(value) != 0;
    else if (strcmp(name, "repl_lag_us") == 0)
        snprintf(r->lag_us, sizeof(r->lag_us), "%s", value);
    else if (strcmp(name, "repl_position") == 0)
        r->position = strtoull(value, NULL, 10);
    else if (strcmp(name, "ulog_last_ts") == 0)
        r->last_ts = strtoull(value, NULL, 10);
    else if (strncmp(name, "repl_replica_", 13) == 0 && r->nrep < REPLICA_LINES) {
        snprintf(r->rep[r->nrep].sid, sizeof(r->rep[0].sid), "%s", name + 13);
        snprintf(r->rep[r->nrep].val, sizeof(r->rep[0].val), "%s", value);
        r->nrep++;
    }
}

/* A replica's state in one word: repl_state when the server reports it,
 * else from repl_connected and repl_copying (an older kurad). */
static const char *replica_state(const repl_info *r)
{
    if (r->state[0])
        return r->state;
    if (!r->have_connected)
        return "unknown";
    return r->copying ? "copying" : r->connected ? "connected" : "not connected";
}

/* A number the string is all of: 1 with *out, else 0 ("unknown", "", ...). */
static int all_digits(const char *s, size_t n, long long *out)
{
    if (n == 0 || n > 19)
        return 0;
    for (size_t i = 0; i < n; i++)
        if (s[i] < '0' || s[i] > '9')
            return 0;
    *out = strtoll(s, NULL, 10);
    return 1;
}

/* "key=value" in a comma-separated line: the value's start and length,
 * or NULL when the key is not there. */
static const char *field(const char *v, const char *key, size_t *len)
{
    size_t kl = strlen(key);
    for (const char *p = v; p && *p; p = strchr(p, ',') ? strchr(p, ',') + 1 : NULL) {
        if (strncmp(p, key, kl) == 0 && p[kl] == '=') {
            const char *val = p + kl + 1, *end = strchr(val, ',');
            *len = end ? (size_t)(end - val) : strlen(val);
            return val;
        }
    }
    return NULL;
}

/* A field's number: 1 with *out, 0 when absent or not a number ("unknown"). */
static int field_num(const char *v, const char *key, long long *out)
{
    size_t n;
    const char *s = field(v, key, &n);
    return s && all_digits(s, n, out);
}

static bool has_word(const char *v, const char *w)
{
    size_t wl = strlen(w);
    for (const char *p = v; p && *p; p = strchr(p, ',') ? strchr(p, ',') + 1 : NULL)
        if (strncmp(p, w, wl) == 0 && (p[wl] == ',' || p[wl] == '\0'))
            return true;
    return false;
}

/* ---- the tree ------------------------------------------------------------------ */

typedef struct tree {
    char seen[TREE_NODES][300];
    int nseen;
    bool full;                          /* TREE_NODES met: no more are asked */
    bool all_in_sync;
    int replicas;
} tree;

/* Whether addr was met before; if not, it is noted (while there is room:
 * a full list makes the caller ask no more servers). */
static bool seen(tree *t, const char *addr)
{
    for (int i = 0; i < t->nseen; i++)
        if (strcmp(t->seen[i], addr) == 0)
            return true;
    if (t->nseen < TREE_NODES)
        snprintf(t->seen[t->nseen++], sizeof(t->seen[0]), "%s", addr);
    else
        t->full = true;
    return false;
}

/* A server's "stats repl", connecting and reading within timeout (at
 * most -t): CTL_OK, CTL_UNREACHABLE (printed), or CTL_FAIL when it has
 * no repl_role. */
static int fetch(const char *addr, double timeout, repl_info *r)
{
    double saved = g_ctl.timeout;
    ctl_conn *c;
    memset(r, 0, sizeof(*r));
    r->next_attempt_ms = -1;
    if (timeout < g_ctl.timeout)
        g_ctl.timeout = timeout;
    int rc = ctl_connect(addr, &c);
    if (rc == CTL_OK) {
        rc = ctl_stats(c, "repl", repl_stat, r);
        ctl_close(c);
    }
    g_ctl.timeout = saved;
    if (rc == CTL_OK && !r->role[0])
        rc = CTL_FAIL;
    return rc;
}

static void print_lag_seconds(const char *lag_us)
{
    long long us;
    if (all_digits(lag_us, strlen(lag_us), &us))
        printf("%.3f s", (double)us / 1e6);
    else
        printf("unknown");
}

static void walk(tree *t, const repl_info *r, int depth);

/* One replica, as its master's line describes it and as it says
 * itself; then its own replicas. */
static void replica_node(tree *t, const repl_info *master, const replica_line *line, int depth)
{
    const char *v = line->val;
    const char *comma = strchr(v, ',');
    char addr[300];
    snprintf(addr, sizeof(addr), "%.*s", comma ? (int)(comma - v) : (int)strlen(v), v);
    size_t n;
    const char *mstate = field(v, "state", &n);
    bool new_form = mstate != NULL;     /* the address has the replica's serving port */
    long long rows = -1, acked = -1, port = 0;
    bool have_rows = field_num(v, "lag_rows", &rows);
    field_num(v, "acked", &acked);
    const char *pc = strrchr(addr, ':');
    if (pc)
        all_digits(pc + 1, strlen(pc + 1), &port);
    bool mcopying = has_word(v, "copying") || (mstate && n == 7 && !strncmp(mstate, "copying", 7));
    t->replicas++;

    printf("%*ssid %s %s", depth * 2, "", line->sid, addr);
    repl_info *r = NULL;
    int rc = CTL_FAIL;
    const char *why = !new_form ? "(its serving port: not in this master's stats)"
                      : port == 0 ? "(it did not say its serving port)"
                      : depth > TREE_DEPTH ? "(deeper than the tree shown: not asked)"
                      : seen(t, addr) ? "(listed above)"
                      : t->full ? "(more servers than kuractl asks: not asked)"
                      : NULL;
    bool cycle = why && strcmp(why, "(listed above)") == 0;
    if (!why && (r = malloc(sizeof(*r))) != NULL) {
        rc = fetch(addr, REPLICA_TIMEOUT, r);
        why = rc == CTL_UNREACHABLE ? "unreachable" : "(no replication stats)";
    }
    bool in_sync;
    if (rc == CTL_OK) {
        const char *st = replica_state(r);
        bool connected = strcmp(st, "connected") == 0;
        in_sync = connected && !r->copying && !mcopying &&
                  ((have_rows && rows == 0) || (master->last_ts && r->position >= master->last_ts));
        printf(": %s, %s", st, in_sync ? "in sync" : "not in sync");
        if (r->next_attempt_ms >= 0 && !connected)
            printf(", next attempt in %.1f s", (double)r->next_attempt_ms / 1000);
        char date[64];
        ctl_ts_date(r->position, date, sizeof(date));
        printf(", position %" PRIu64 " (%s), lag ", r->position, date);
        if (!connected)
            printf("unknown");
        else if (have_rows)
            printf("%lld rows, ", rows);
        else
            printf("unknown rows, ");
        if (connected)
            print_lag_seconds(r->lag_us);
        if (!connected && r->last_error[0] && strcmp(r->last_error, "-") != 0)
            printf(" (%s)", r->last_error);
        printf("\n");
    } else {
        /* what its master sees, the replica itself not asked or not
         * reached; a server met again (a dual master's pair) was judged
         * where it was listed first, and here by this master's line */
        in_sync = cycle && !mcopying && have_rows && rows == 0;
        printf(": %s", why);
        printf("; its master says: ");
        if (mstate)
            printf("%.*s, ", (int)n, mstate);
        printf("acked %lld, lag ", acked < 0 ? 0 : acked);
        if (have_rows)
            printf("%lld rows", rows);
        else
            printf("unknown rows");
        if (!new_form) {
            /* an older master: its lag is from what the replica acked, and
             * says nothing of a replica that is gone */
            long long us;
            bool zero = field_num(v, "lag_us", &us) && us == 0;
            in_sync = zero && !mcopying && have_rows && rows == 0;
            printf(", %s", mcopying ? "copying" : in_sync ? "in sync" : "not in sync");
        }
        printf("\n");
    }
    t->all_in_sync &= in_sync;
    if (rc == CTL_OK)
        walk(t, r, depth + 1);
    free(r);
}

/* Each replica r lists, at depth (indented by it; those past TREE_DEPTH
 * are listed, not asked). */
static void walk(tree *t, const repl_info *r, int depth)
{
    for (int i = 0; i < r->nrep; i++)
        replica_node(t, r, &r->rep[i], depth);
}

/* Up the chain of masters from a replica whose master is r->master: true
 * when it ends at a master (or at a server kuractl cannot ask: its own
 * state says the rest); false for a loop (a server met again, the one
 * asked among them), a fenced server, a server with no role, or a chain
 * longer than TREE_DEPTH: replicas with no master are never in sync.
 * why: the chain as walked. */
static bool chain_has_master(const char *server, const repl_info *r, char *why, size_t wlen)
{
    tree *t = calloc(1, sizeof(*t));
    repl_info *up = malloc(sizeof(*up));
    bool ok = true;
    char at[300];
    if (!t || !up)
        goto out;
    seen(t, server);
    snprintf(why, wlen, "%s", server);
    snprintf(at, sizeof(at), "%s", r->master);
    for (int depth = 0;; depth++) {
        size_t wl = strlen(why);
        snprintf(why + wl, wlen - wl, " -> %s", at);
        if (seen(t, at) || depth >= TREE_DEPTH) {
            ok = false;                 /* a loop, or no end in sight */
            break;
        }
        if (fetch(at, REPLICA_TIMEOUT, up) != CTL_OK)
            break;                      /* cannot tell: the replica's state says */
        if (strcmp(up->role, "master") == 0 || strcmp(up->role, "dual") == 0)
            break;
        if (strcmp(up->role, "replica") != 0 || !up->master[0]) {
            ok = false;                 /* fenced, or none */
            wl = strlen(why);
            snprintf(why + wl, wlen - wl, " (%s)", up->role);
            break;
        }
        snprintf(at, sizeof(at), "%s", up->master);
    }
out:
    free(t);
    free(up);
    return ok;
}

static int repl_status(const char *server)
{
    repl_info *r = malloc(sizeof(*r));
    tree *t = calloc(1, sizeof(*t));
    int rc = CTL_FAIL;
    if (!r || !t) {
        rc = ctl_err(CTL_FAIL, "out of memory");
        goto out;
    }
    rc = fetch(server, g_ctl.timeout, r);
    if (rc == CTL_FAIL) {
        rc = ctl_err(CTL_FAIL, "%s: 'stats repl' has no repl_role (not a kurad with "
                     "replication?)", server);
        goto out;
    }
    if (rc)
        goto out;
    t->all_in_sync = true;
    seen(t, server);
    char date[64], chain[TREE_DEPTH * 310 + 400] = "";
    printf("%s: %s", server, r->role);
    bool replica = strcmp(r->role, "replica") == 0 || strcmp(r->role, "dual") == 0;
    if (replica)
        printf(" of %s", r->master[0] ? r->master : "?");
    if (strcmp(r->role, "fenced") == 0) {
        /* a master that heard of a newer one: takes no writes, follows no one */
        t->all_in_sync = false;
        printf(": not in sync, a master that was replaced (repl follow the current master)");
    }
    if (replica) {
        const char *st = replica_state(r);
        bool connected = strcmp(st, "connected") == 0;
        long long us;
        bool lag0 = all_digits(r->lag_us, strlen(r->lag_us), &us) && us == 0;
        bool rooted = strcmp(r->role, "dual") == 0 ||
                      chain_has_master(server, r, chain, sizeof(chain));
        bool ok = connected && !r->copying && lag0 && rooted;
        t->all_in_sync &= ok;
        ctl_ts_date(r->position, date, sizeof(date));
        printf(": %s, %s", st, ok ? "in sync" : "not in sync");
        if (r->next_attempt_ms >= 0 && !connected)
            printf(", next attempt in %.1f s", (double)r->next_attempt_ms / 1000);
        printf(", position %" PRIu64 " (%s), lag ", r->position, date);
        if (connected)
            print_lag_seconds(r->lag_us);
        else
            printf("unknown");
        if (!connected && r->last_error[0] && strcmp(r->last_error, "-") != 0)
            printf(" (%s)", r->last_error);
        if (!rooted)
            printf("; no master up its chain: %s", chain);
    } else if (strcmp(r->role, "none") == 0) {
        printf(" (not replicating: no -ulog, not a replica)");
    }
    if (strcmp(r->role, "none") != 0) {
        ctl_ts_date(r->last_ts, date, sizeof(date));
        printf("; last row %" PRIu64 " (%s)", r->last_ts, date);
    }
    if (r->term[0])                     /* an older kurad has none */
        printf("; term %s, role from %s", r->term, r->source[0] ? r->source : "?");
    printf("\n");
    walk(t, r, 1);
    if (strcmp(r->role, "master") == 0 && t->replicas == 0)
        printf("  no replica connected\n");
    rc = t->all_in_sync ? CTL_OK : CTL_DIFF;
out:
    free(r);
    free(t);
    return rc;
}

/* ---- promote and follow --------------------------------------------------------- */

/* Sends one line and prints the one-line answer: 0 when it starts with
 * ok_word, CTL_FAIL (the answer on stderr) otherwise. */
static int admin_request(const char *server, const char *req, const char *ok_word)
{
    ctl_conn *c;
    const char *l;
    size_t len;
    int rc = ctl_connect(server, &c);
    if (rc)
        return rc;
    if (!(rc = ctl_send(c, req, strlen(req))) && !(rc = ctl_line(c, &l, &len))) {
        if (strncmp(l, ok_word, strlen(ok_word)) == 0)
            printf("%s\n", l);
        else
            rc = ctl_err(CTL_FAIL, "%s: %s", server, l);
    }
    ctl_close(c);
    return rc;
}

static bool address_word(const char *s)
{
    return s[0] && strlen(s) < 300 && !strpbrk(s, " \t\r\n");
}

int cmd_repl(int argc, char **argv)
{
    ctl_args a;
    static const ctl_optdef defs[] = { { "--force", false }, { NULL, false } };
    int rc = ctl_parse(&a, "repl", argc, argv, defs);
    if (rc)
        return rc;
    const char *sub = a.npos ? a.pos[0] : "";
    if (strcmp(sub, "status") == 0) {
        if (a.npos > 2 || ctl_has(&a, "--force"))
            return ctl_usage(&a, "expected 'repl status [HOST:PORT]'");
        return repl_status(a.npos == 2 ? a.pos[1] : g_ctl.server);
    }
    if (strcmp(sub, "promote") == 0) {
        if (a.npos > 2)
            return ctl_usage(&a, "expected 'repl promote [HOST:PORT] [--force]'");
        return admin_request(a.npos == 2 ? a.pos[1] : g_ctl.server,
                             ctl_has(&a, "--force") ? "repl promote force\r\n"
                                                    : "repl promote\r\n", "PROMOTED ");
    }
    if (strcmp(sub, "reset") == 0) {
        if (a.npos > 2 || ctl_has(&a, "--force"))
            return ctl_usage(&a, "expected 'repl reset [HOST:PORT]'");
        return admin_request(a.npos == 2 ? a.pos[1] : g_ctl.server, "repl reset\r\n", "OK ");
    }
    if (strcmp(sub, "follow") == 0) {
        if (a.npos < 2 || a.npos > 3 || ctl_has(&a, "--force"))
            return ctl_usage(&a, "expected 'repl follow [HOST:PORT] MASTERHOST:MASTERPORT'");
        const char *master = a.pos[a.npos - 1];
        if (!address_word(master))
            return ctl_usage(&a, "bad master address '%s'", master);
        char req[400];
        snprintf(req, sizeof(req), "repl follow %s\r\n", master);
        return admin_request(a.npos == 3 ? a.pos[1] : g_ctl.server, req, "OK ");
    }
    return ctl_usage(&a, "expected status, promote, follow or reset");
}
