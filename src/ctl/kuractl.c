/*
 * kuractl.c - the operator's tool: the command line, the help, dispatch.
 *
 * One program for what tcrmgr, ttulmgr and ktremotemgr did: commands
 * against a running kurad (stats, repl status, get/set/delete, digest,
 * snapshot now) and commands on files with the server stopped (check,
 * dump, load, snapshot list/verify/restore, ulog, stats DB).  The global
 * options (-s, -t, -q) are accepted before or after the command words, so
 * "kuractl get k -s host:1" and "kuractl -s host:1 get k" are the same;
 * every command takes -h.  Parsing never aborts on bad input: a message
 * and exit code 2.
 */
#include <errno.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "ctl.h"
#include "kura/proto.h"

ctl_global g_ctl = { .server = "127.0.0.1:11211", .timeout = 10.0 };

typedef struct cmd_help {
    const char *name;
    const char *usage;
} cmd_help;

/* Continuation lines start at column 25 (the help prints each line
 * indented by two). */
static const cmd_help helps[] = {
    { "stats", "stats [SECTION]        the server's stats lines (SECTION: items, slabs,\n"
               "                       repl, snapshot, ...)\n"
               "stats DB               a stopped database's items, bytes, files, stored state\n"
               "                       (DB: a name with a '/', '.' or '#')" },
    { "repl", "repl status [HOST:PORT] the server and every replica below it (a tree):\n"
              "                       state, position, lag; exit 1 unless all are in sync\n"
              "repl promote [HOST:PORT] [--force]\n"
              "                       a replica stops following and takes writes\n"
              "repl follow [HOST:PORT] MASTERHOST:MASTERPORT\n"
              "                       the server becomes a replica of MASTER" },
    { "ha", "ha status --etcd URL[,URL...] [--cluster NAME] [--auth FILE] [--ca FILE]\n"
            "                       automatic failover's group as etcd holds it: leader, lease,\n"
            "                       members' positions and terms (exit 1: no leader)\n"
            "ha switchover NAME --etcd URL [--cluster NAME] [--wait SECONDS]\n"
            "                       moves the leadership to member NAME: the leader drains,\n"
            "                       waits until NAME has caught up, hands over (default 60 s)" },
    { "get", "get KEY [--meta]       prints the value (--meta: flags, cas, length to stderr);\n"
             "                       exit 1 if there is none" },
    { "set", "set KEY VALUE [--flags N] [--exptime N]\n"
             "                       stores VALUE (- reads it from stdin)" },
    { "delete", "delete KEY             exit 1 if there was none" },
    { "digest", "digest MASTER SLAVE [--buckets N]\n"
                "                       compares two servers' items, names each differing key;\n"
                "                       exit 1 if they differ" },
    { "snapshot", "snapshot now [--wait SECONDS]\n"
                  "                       has the server write a snapshot; prints its path\n"
                  "snapshot list DIR      the snapshots in DIR, newest first\n"
                  "snapshot verify FILE|DIR\n"
                  "                       checks each snapshot whole; exit 1 if one is damaged\n"
                  "snapshot restore FILE DB\n"
                  "                       loads a snapshot into a missing or empty database" },
    { "restore", "restore --until TS --bgs DIR --ulog DIR NEWDB\n"
                 "                       a new database as it was at TS (a timestamp or a UTC\n"
                 "                       date): a snapshot, then the update log's rows up to TS" },
    { "check", "check DB [--repair]    verifies every record and structure; exit 1 on damage;\n"
               "                       --repair rebuilds it from its intact records" },
    { "dump", "dump DB [-o FILE] [--format kura|memcached] [--codec C]\n"
              "                       every live item, to FILE or stdout (default: kura to a\n"
              "                       file if the snapshot module is built, else memcached)" },
    { "load", "load DB FILE           adds the items of a dump (either format; - is stdin)" },
    { "import", "import FILE DB [--kt auto|yes|no] [--kt-flags] [--rejects PATH] [--no-verify]\n"
                "                       adds the records of a Tokyo or Kyoto Cabinet file\n"
                "                       (.tch .tcb .kch .kct), then checks each is in DB;\n"
                "                       those DB cannot take go whole to DB.rejects (or\n"
                "                       PATH), exit 5; --kt: values behind ktserver's expiry\n"
                "                       header (auto: as the file's mark or its values say);\n"
                "                       --kt-flags: ending with the flags of ktserver's\n"
                "                       memcached plug-in (opts=f)" },
    { "export", "export DB FILE [--kt] [--kt-flags] [--force] [--no-verify]\n"
                "                       writes DB's items to a new Tokyo or Kyoto Cabinet file\n"
                "                       (its suffix says which), then reads it back" },
    { "ulog", "ulog list DIR          the update log's segments: first timestamp, rows, size\n"
              "ulog show DIR [--from TS] [--limit N]\n"
              "                       its rows, readably (TS: a timestamp or a UTC date)\n"
              "ulog prune DIR --keep-after TS | --max SIZE\n"
              "                       removes old segments (server stopped)" },
};

/* Prints a help text, each line indented by two. */
static void print_indented(FILE *f, const char *t)
{
    while (*t) {
        size_t n = strcspn(t, "\n");
        fprintf(f, "  %.*s\n", (int)n, t);
        t += n + (t[n] == '\n');
    }
}

static void print_cmds(FILE *f, const char *const *names)
{
    for (int i = 0; names[i]; i++)
        for (size_t j = 0; j < sizeof(helps) / sizeof(helps[0]); j++)
            if (strcmp(helps[j].name, names[i]) == 0)
                print_indented(f, helps[j].usage);
}

static void usage_all(FILE *f)
{
    fprintf(f, "usage: kuractl [-s HOST:PORT|SOCKET] [-a FILE] [-t SECONDS] [-q] COMMAND [ARGS]\n\n"
               "  -s ADDR   the server (default 127.0.0.1:11211; a path with '/' is a unix socket)\n"
               "  -a FILE   authenticate (kurad -Y) as FILE's first user:password line\n"
               "  -tls      connect over TLS (kurad -Z), verifying the server's certificate\n"
               "  -tls-ca FILE    the CA certificates it must chain to (implies -tls)\n"
               "  -tls-cert FILE  kuractl's own certificate and key, one PEM (implies -tls)\n"
               "  -t SECS   connect and read timeout (default 10)\n"
               "  -q        no progress display\n"
               "  -h        this help; COMMAND -h: that command's\n\n"
               "Against a running kurad:\n");
    static const char *const server[] = { "stats", "repl", "get", "set", "delete", "digest",
                                          NULL };
    print_cmds(f, server);
    fprintf(f, "  snapshot now [--wait SECONDS]\n\nAgainst etcd (automatic failover, kurad "
               "-ha-etcd):\n");
    static const char *const etcd[] = { "ha", NULL };
    print_cmds(f, etcd);
    fprintf(f, "\nOn files (server stopped):\n");
    static const char *const files[] = { "check", "dump", "load", "import", "export",
                                         "snapshot", "restore", "ulog", NULL };
    print_cmds(f, files);
    fprintf(f, "\nExit codes: 0 ok, 1 a difference or damage found (or no such key), 2 usage,\n"
               "3 cannot reach the server or open the file, 4 other failure.  man kuractl.\n");
}

static void help_cmd(const char *cmd)
{
    char word[32];
    snprintf(word, sizeof(word), "%s", cmd);
    char *sp = strchr(word, ' ');
    if (sp)
        *sp = '\0';
    for (size_t j = 0; j < sizeof(helps) / sizeof(helps[0]); j++) {
        if (strcmp(helps[j].name, word) == 0) {
            printf("usage: kuractl [-s ADDR] [-a FILE] [-t SECS] [-q] COMMAND ...\n");
            print_indented(stdout, helps[j].usage);
            return;
        }
    }
    usage_all(stdout);
}

int ctl_err(int code, const char *fmt, ...)
{
    va_list ap;
    fputs("kuractl: ", stderr);
    va_start(ap, fmt);
    vfprintf(stderr, fmt, ap);
    va_end(ap);
    fputc('\n', stderr);
    return code;
}

int ctl_usage(const ctl_args *a, const char *fmt, ...)
{
    va_list ap;
    fprintf(stderr, "kuractl %s: ", a->cmd);
    va_start(ap, fmt);
    vfprintf(stderr, fmt, ap);
    va_end(ap);
    fprintf(stderr, " (kuractl %s -h for its usage)\n", a->cmd);
    return CTL_USAGE;
}

/* -a FILE: its first user:password line, kept until exit. */
static int auth_opt(const char *path)
{
    static kura_auth *loaded;
    char err[512];
    kura_auth_free(loaded);
    loaded = NULL;
    if (kura_auth_load(path, &loaded, err, sizeof(err)) < 0) {
        fprintf(stderr, "kuractl: option -a: %s\n", err);
        return -1;
    }
    if (kura_auth_first(loaded, &g_ctl.auth_user, &g_ctl.auth_pass) < 0) {
        fprintf(stderr, "kuractl: option -a: %s holds no user:password line\n", path);
        return -1;
    }
    return 2;
}

/* A global option at argv[i]: consumed (1 or 2 arguments), 0 if it is
 * not one, -1 on a bad value (printed). */
static int global_opt(const char *cmd, int argc, char **argv, int i)
{
    const char *o = argv[i];
    if (strcmp(o, "-q") == 0 || strcmp(o, "--quiet") == 0) {
        g_ctl.quiet = true;
        return 1;
    }
    bool s = strcmp(o, "-s") == 0 || strcmp(o, "--server") == 0;
    bool t = strcmp(o, "-t") == 0 || strcmp(o, "--timeout") == 0;
    bool a = strcmp(o, "-a") == 0 || strcmp(o, "--auth") == 0;
    if (strcmp(o, "-tls") == 0) {
        g_ctl.tls = true;
        return 1;
    }
    bool tca = strcmp(o, "-tls-ca") == 0, tcert = strcmp(o, "-tls-cert") == 0;
    if (!s && !t && !a && !tca && !tcert)
        return 0;
    if (i + 1 >= argc) {
        fprintf(stderr, "kuractl%s%s: option %s needs a value\n", cmd ? " " : "", cmd ? cmd : "",
                o);
        return -1;
    }
    if (a)
        return auth_opt(argv[i + 1]);
    if (tca || tcert) {                 /* either implies -tls */
        *(tca ? &g_ctl.tls_ca : &g_ctl.tls_cert) = argv[i + 1];
        g_ctl.tls = true;
        return 2;
    }
    if (s) {
        g_ctl.server = argv[i + 1];
        if (!*g_ctl.server) {
            fprintf(stderr, "kuractl: option -s needs a server address\n");
            return -1;
        }
        return 2;
    }
    char *end;
    errno = 0;
    double v = strtod(argv[i + 1], &end);
    if (errno || end == argv[i + 1] || *end || !(v > 0) || v > 86400) {
        fprintf(stderr, "kuractl: option -t: '%s' is not a number of seconds (0 < t <= 86400)\n",
                argv[i + 1]);
        return -1;
    }
    g_ctl.timeout = v;
    return 2;
}

int ctl_parse(ctl_args *a, const char *cmd, int argc, char **argv, const ctl_optdef *defs)
{
    memset(a, 0, sizeof(*a));
    a->cmd = cmd;
    bool only_pos = false;
    for (int i = 0; i < argc; i++) {
        const char *o = argv[i];
        if (only_pos || o[0] != '-' || o[1] == '\0') {
            if (a->npos == CTL_MAX_POS)
                return ctl_usage(a, "too many arguments");
            a->pos[a->npos++] = o;
            continue;
        }
        if (strcmp(o, "--") == 0) {
            only_pos = true;
            continue;
        }
        if (strcmp(o, "-h") == 0 || strcmp(o, "--help") == 0) {
            help_cmd(cmd);
            exit(CTL_OK);
        }
        int g = global_opt(cmd, argc, argv, i);
        if (g < 0)
            return CTL_USAGE;
        if (g > 0) {
            i += g - 1;
            continue;
        }
        const ctl_optdef *d = defs;
        while (d && d->name && strcmp(d->name, o) != 0)
            d++;
        if (!d || !d->name)
            return ctl_usage(a, "unknown option '%s'", o);
        if (a->nopt == CTL_MAX_OPT)
            return ctl_usage(a, "too many options");
        a->opt[a->nopt].name = d->name;
        a->opt[a->nopt].value = NULL;
        if (d->value) {
            if (i + 1 >= argc)
                return ctl_usage(a, "option %s needs a value", o);
            a->opt[a->nopt].value = argv[++i];
        }
        a->nopt++;
    }
    return CTL_OK;
}

const char *ctl_opt(const ctl_args *a, const char *name)
{
    const char *v = NULL;
    for (int i = 0; i < a->nopt; i++)
        if (strcmp(a->opt[i].name, name) == 0)
            v = a->opt[i].value ? a->opt[i].value : "";
    return v;
}

bool ctl_has(const ctl_args *a, const char *name)
{
    return ctl_opt(a, name) != NULL;
}

int ctl_num(const ctl_args *a, const char *what, const char *s, uint64_t *out)
{
    char *end;
    errno = 0;
    if (!s || !*s || *s == '-' || *s == '+')
        return ctl_usage(a, "%s: '%s' is not a number", what, s ? s : "");
    unsigned long long v = strtoull(s, &end, 10);
    if (errno || *end)
        return ctl_usage(a, "%s: '%s' is not a number", what, s);
    *out = v;
    return CTL_OK;
}

int ctl_snum(const ctl_args *a, const char *what, const char *s, int64_t *out)
{
    char *end;
    errno = 0;
    if (!s || !*s)
        return ctl_usage(a, "%s: '' is not a number", what);
    long long v = strtoll(s, &end, 10);
    if (errno || *end)
        return ctl_usage(a, "%s: '%s' is not a number", what, s);
    *out = v;
    return CTL_OK;
}

int main(int argc, char **argv)
{
    int i = 1;
    while (i < argc && argv[i][0] == '-') {
        if (strcmp(argv[i], "-h") == 0 || strcmp(argv[i], "--help") == 0) {
            usage_all(stdout);
            return CTL_OK;
        }
        int g = global_opt(NULL, argc, argv, i);
        if (g < 0)
            return CTL_USAGE;
        if (g == 0) {
            fprintf(stderr, "kuractl: unknown option '%s' (kuractl -h for the usage)\n", argv[i]);
            return CTL_USAGE;
        }
        i += g;
    }
    if (i >= argc) {
        usage_all(stderr);
        return CTL_USAGE;
    }
    const char *cmd = argv[i++];
    int n = argc - i;
    char **rest = argv + i;
    static const struct {
        const char *name;
        int (*fn)(int argc, char **argv);
    } cmds[] = {
        { "stats", cmd_stats }, { "repl", cmd_repl }, { "get", cmd_get }, { "set", cmd_set },
        { "delete", cmd_delete }, { "digest", cmd_digest }, { "snapshot", cmd_snapshot },
        { "ha", cmd_ha },
        { "check", cmd_check }, { "dump", cmd_dump }, { "load", cmd_load },
        { "ulog", cmd_ulog }, { "restore", cmd_restore },
        { "import", cmd_import }, { "export", cmd_export },
    };
    for (size_t c = 0; c < sizeof(cmds) / sizeof(cmds[0]); c++)
        if (strcmp(cmds[c].name, cmd) == 0)
            return cmds[c].fn(n, rest);
    if (strcmp(cmd, "help") == 0) {
        if (n > 0)
            help_cmd(rest[0]);
        else
            usage_all(stdout);
        return CTL_OK;
    }
    fprintf(stderr, "kuractl: unknown command '%s' (kuractl -h lists them)\n", cmd);
    return CTL_USAGE;
}
