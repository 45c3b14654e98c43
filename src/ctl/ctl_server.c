/*
 * ctl_server.c - kuractl's commands against a running kurad: stats,
 * get/set/delete for scripts, snapshot now (repl: ctl_repl.c).
 *
 * Each opens one connection, speaks the text protocol and maps the answer
 * to an exit code: found / stored / in sync is 0, not found / not in sync
 * is 1, an error the server answered is 4 (ctl.h).
 */
#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include "kura/grow.h"
#include "kura/hlc.h"
#include "ctl.h"

/* A key the text protocol can carry: 1..250 bytes, no space or control. */
static int check_key(const ctl_args *a, const char *key)
{
    size_t n = strlen(key);
    if (n == 0 || n > KURA_KEY_MC_MAX)
        return ctl_usage(a, "a key is 1 to %d bytes (this one is %zu)", KURA_KEY_MC_MAX, n);
    for (size_t i = 0; i < n; i++)
        if ((unsigned char)key[i] <= ' ' || key[i] == 0x7f)
            return ctl_usage(a, "a key has no spaces or control characters");
    return CTL_OK;
}

/* A database name rather than a stats section: it has a path or a suffix. */
static bool is_db_name(const char *s)
{
    return strchr(s, '/') || strchr(s, '.') || strchr(s, '#');
}

static void print_stat(void *arg, const char *name, const char *value)
{
    (void)arg;
    printf("%s %s\n", name, value);
}

int cmd_stats(int argc, char **argv)
{
    ctl_args a;
    int rc = ctl_parse(&a, "stats", argc, argv, NULL);
    if (rc)
        return rc;
    if (a.npos > 1)
        return ctl_usage(&a, "one section or database at most");
    if (a.npos == 1 && is_db_name(a.pos[0]))
        return cmd_db_stats(a.pos[0]);
    if (a.npos == 1 && strpbrk(a.pos[0], " \t\r\n"))
        return ctl_usage(&a, "bad section '%s'", a.pos[0]);
    ctl_conn *c;
    if ((rc = ctl_connect(g_ctl.server, &c)))
        return rc;
    rc = ctl_stats(c, a.npos ? a.pos[0] : NULL, print_stat, NULL);
    ctl_close(c);
    return rc;
}

/* ---- get, set, delete -------------------------------------------------- */

/* get and delete: the command line (one KEY) parsed and checked, and
 * the connection made. */
static int key_command(ctl_args *a, const char *cmd, int argc, char **argv,
                       const ctl_optdef *defs, ctl_conn **c)
{
    int rc = ctl_parse(a, cmd, argc, argv, defs);
    if (rc)
        return rc;
    if (a->npos != 1)
        return ctl_usage(a, "expected one KEY");
    if ((rc = check_key(a, a->pos[0])))
        return rc;
    return ctl_connect(g_ctl.server, c);
}

int cmd_get(int argc, char **argv)
{
    ctl_args a;
    static const ctl_optdef defs[] = { { "--meta", false }, { NULL, false } };
    ctl_conn *c;
    int rc = key_command(&a, "get", argc, argv, defs, &c);
    if (rc)
        return rc;
    ctl_value v;
    rc = ctl_gets(c, a.pos[0], &v);
    ctl_close(c);
    if (rc == CTL_DIFF)
        fprintf(stderr, "kuractl get: %s: not found\n", a.pos[0]);
    if (rc)
        return rc;
    if (ctl_has(&a, "--meta"))
        fprintf(stderr, "flags %u cas %" PRIu64 " bytes %zu\n", v.flags, v.cas, v.len);
    fwrite(v.data, 1, v.len, stdout);
    free(v.data);
    return fflush(stdout) == 0 ? CTL_OK : ctl_err(CTL_FAIL, "writing stdout failed");
}

/* Reads all of stdin into a malloc'd buffer. */
static int read_stdin(char **out, size_t *len)
{
    size_t cap = 65536, n = 0;
    char *b = malloc(cap);
    while (b) {
        size_t r = fread(b + n, 1, cap - n, stdin);
        n += r;
        if (r == 0)
            break;
        if (kura_grow(&b, &cap, n + 1, 1, cap)) {
            free(b);
            b = NULL;
            break;
        }
    }
    if (!b)
        return ctl_err(CTL_FAIL, "out of memory reading stdin");
    if (ferror(stdin)) {
        free(b);
        return ctl_err(CTL_FAIL, "reading stdin failed");
    }
    *out = b;
    *len = n;
    return CTL_OK;
}

int cmd_set(int argc, char **argv)
{
    ctl_args a;
    static const ctl_optdef defs[] = { { "--flags", true }, { "--exptime", true },
                                       { NULL, false } };
    int rc = ctl_parse(&a, "set", argc, argv, defs);
    if (rc)
        return rc;
    if (a.npos != 2)
        return ctl_usage(&a, "expected KEY VALUE (VALUE - reads stdin)");
    uint64_t flags = 0;
    int64_t exptime = 0;
    if ((rc = check_key(&a, a.pos[0])) ||
        (ctl_has(&a, "--flags") && (rc = ctl_num(&a, "--flags", ctl_opt(&a, "--flags"), &flags))) ||
        (ctl_has(&a, "--exptime") &&
         (rc = ctl_snum(&a, "--exptime", ctl_opt(&a, "--exptime"), &exptime))))
        return rc;
    if (flags > UINT32_MAX)
        return ctl_usage(&a, "--flags is at most %u", UINT32_MAX);
    char *val = (char *)a.pos[1];
    size_t vlen = strlen(val);
    bool owned = false;
    if (strcmp(val, "-") == 0) {
        if ((rc = read_stdin(&val, &vlen)))
            return rc;
        owned = true;
    }
    ctl_conn *c;
    if ((rc = ctl_connect(g_ctl.server, &c))) {
        if (owned)
            free(val);
        return rc;
    }
    char head[400];
    int n = snprintf(head, sizeof(head), "set %s %" PRIu64 " %" PRId64 " %zu\r\n", a.pos[0],
                     flags, exptime, vlen);
    const char *l;
    size_t len;
    if (!(rc = ctl_send(c, head, (size_t)n)) && !(rc = ctl_send(c, val, vlen)) &&
        !(rc = ctl_send(c, "\r\n", 2)) && !(rc = ctl_line(c, &l, &len))) {
        if (strcmp(l, "STORED") != 0)
            rc = ctl_err(CTL_FAIL, "set %s: %s", a.pos[0], l);
    }
    ctl_close(c);
    if (owned)
        free(val);
    return rc;
}

int cmd_delete(int argc, char **argv)
{
    ctl_args a;
    ctl_conn *c;
    int rc = key_command(&a, "delete", argc, argv, NULL, &c);
    if (rc)
        return rc;
    char req[300];
    int n = snprintf(req, sizeof(req), "delete %s\r\n", a.pos[0]);
    const char *l;
    size_t len;
    if (!(rc = ctl_send(c, req, (size_t)n)) && !(rc = ctl_line(c, &l, &len))) {
        if (strcmp(l, "NOT_FOUND") == 0) {
            fprintf(stderr, "kuractl delete: %s: not found\n", a.pos[0]);
            rc = CTL_DIFF;
        } else if (strcmp(l, "DELETED") != 0) {
            rc = ctl_err(CTL_FAIL, "delete %s: %s", a.pos[0], l);
        }
    }
    ctl_close(c);
    return rc;
}

/* ---- snapshot now ---------------------------------------------------------- */

typedef struct snap_stats {
    bool have;
    int running;
    uint64_t count, failures, items;
    char path[4200], error[1024];
} snap_stats;

static void snap_stat(void *arg, const char *name, const char *value)
{
    snap_stats *s = arg;
    if (strcmp(name, "snapshot_count") == 0) {
        s->count = strtoull(value, NULL, 10);
        s->have = true;
    } else if (strcmp(name, "snapshot_failures") == 0)
        s->failures = strtoull(value, NULL, 10);
    else if (strcmp(name, "snapshot_running") == 0)
        s->running = atoi(value);
    else if (strcmp(name, "snapshot_last_items") == 0)
        s->items = strtoull(value, NULL, 10);
    else if (strcmp(name, "snapshot_last_path") == 0)
        snprintf(s->path, sizeof(s->path), "%s", value);
    else if (strcmp(name, "snapshot_last_error") == 0)
        snprintf(s->error, sizeof(s->error), "%s", value);
}

static double mono(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + ts.tv_nsec / 1e9;
}

/* Asks for a snapshot and waits (polling "stats snapshot") until the
 * completed or the failed count grows: the server's contract. */
int snap_cmd_now(int argc, char **argv)
{
    ctl_args a;
    static const ctl_optdef defs[] = { { "--wait", true }, { NULL, false } };
    int rc = ctl_parse(&a, "snapshot now", argc, argv, defs);
    if (rc)
        return rc;
    if (a.npos != 0)
        return ctl_usage(&a, "'snapshot now' takes no argument");
    uint64_t wait = 600;
    if (ctl_has(&a, "--wait") && (rc = ctl_num(&a, "--wait", ctl_opt(&a, "--wait"), &wait)))
        return rc;
    ctl_conn *c;
    if ((rc = ctl_connect(g_ctl.server, &c)))
        return rc;
    snap_stats before = { 0 }, now;
    if ((rc = ctl_stats(c, "snapshot", snap_stat, &before)))
        goto out;
    if (!before.have) {
        rc = ctl_err(CTL_FAIL, "%s: no snapshot_count in 'stats snapshot': this server takes "
                     "no snapshots", g_ctl.server);
        goto out;
    }
    const char *l;
    size_t len;
    if ((rc = ctl_send(c, "snapshot\r\n", 10)) || (rc = ctl_line(c, &l, &len)))
        goto out;
    if (strcmp(l, "OK") != 0) {
        rc = ctl_err(CTL_FAIL, "snapshot: %s", l);
        goto out;
    }
    double deadline = mono() + (double)wait, pause = 0.02;
    for (;;) {
        memset(&now, 0, sizeof(now));
        if ((rc = ctl_stats(c, "snapshot", snap_stat, &now)))
            goto out;
        if (now.failures > before.failures) {
            rc = ctl_err(CTL_FAIL, "snapshot failed: %s", now.error[0] ? now.error : "(no reason given)");
            goto out;
        }
        if (now.count > before.count) {
            printf("%s\n", now.path);
            if (!g_ctl.quiet)
                fprintf(stderr, "kuractl: snapshot of %" PRIu64 " items written\n", now.items);
            rc = CTL_OK;
            goto out;
        }
        if (mono() >= deadline) {
            rc = ctl_err(CTL_FAIL, "the snapshot did not finish within %" PRIu64 " s (--wait); "
                         "it may still be running", wait);
            goto out;
        }
        usleep((useconds_t)(pause * 1e6));
        pause = pause * 2 > 0.5 ? 0.5 : pause * 2;
    }
out:
    ctl_close(c);
    return rc;
}

int cmd_snapshot(int argc, char **argv)
{
    if (argc < 1 || strcmp(argv[0], "-h") == 0 || strcmp(argv[0], "--help") == 0) {
        ctl_args a;
        char *h[] = { "-h" };
        if (argc >= 1)
            return ctl_parse(&a, "snapshot", 1, h, NULL);
        a.cmd = "snapshot";
        return ctl_usage(&a, "expected now, list, verify or restore");
    }
    if (strcmp(argv[0], "now") == 0)
        return snap_cmd_now(argc - 1, argv + 1);
    if (strcmp(argv[0], "list") == 0)
        return snap_cmd_list(argc - 1, argv + 1);
    if (strcmp(argv[0], "verify") == 0)
        return snap_cmd_verify(argc - 1, argv + 1);
    if (strcmp(argv[0], "restore") == 0)
        return snap_cmd_restore(argc - 1, argv + 1);
    ctl_args a = { .cmd = "snapshot" };
    return ctl_usage(&a, "unknown subcommand '%s' (now, list, verify, restore)", argv[0]);
}
