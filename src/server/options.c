/*
 * options.c - the command line: ttserver's option names and memcached's.
 *
 * One table lists every option once, with its aliases, its argument kind,
 * its default and its help line; parsing, validation and `-h` all read the
 * table, so they cannot disagree.  memcached's single-letter options also
 * take their argument attached ("-p11211"), as getopt allows.
 */
#include <errno.h>
#include <limits.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "kura/codec.h"
#include "server.h"

enum opt_kind { OPT_INT, OPT_SIZE, OPT_BYTES, OPT_MBYTES, OPT_STR, OPT_FLAG, OPT_VERBOSE,
                OPT_VERY_VERBOSE, OPT_SYNC, OPT_UDP, OPT_HELP, OPT_VERSION, OPT_LOGLEVEL,
                OPT_CONF, OPT_SYNCREPL_FAIL, OPT_CODEC, OPT_DIVERGENCE,
                OPT_MODE };

typedef struct opt {
    const char *names[3];       /* aliases, e.g. "-port" and "-p" */
    enum opt_kind kind;
    size_t offset;              /* field in kura_settings */
    long min, max;              /* bounds for OPT_INT */
    const char *arg;            /* argument name in -h */
    const char *help;
} opt;

#define F(field) offsetof(kura_settings, field)

/* -Y's entries: kept for the life of the process (the sessions read them
 * until the last one is gone), freed at exit. */
static kura_auth *auth_loaded;

static void free_auth(void)
{
    kura_auth_free(auth_loaded);
    auth_loaded = NULL;
}

static const opt options[] = {
    { { "-host", "-l" }, OPT_STR, F(host), 0, 0, "ADDR",
      "listen on this address (default 127.0.0.1; 0.0.0.0 for all)" },
    { { "-port", "-p" }, OPT_INT, F(port), 0, 65535, "NUM",
      "TCP port (default 11211; 0 = no TCP)" },
    { { "-s" }, OPT_STR, F(unix_path), 0, 0, "PATH", "also listen on a unix socket" },
    { { "-th", "-t", "-thnum" }, OPT_INT, F(threads), 1, 256, "NUM",
      "worker threads (default 4)" },
    { { "-c" }, OPT_INT, F(maxconns), 1, 1000000, "NUM",
      "maximum simultaneous connections (default 1024)" },
    { { "-tout" }, OPT_INT, F(idle_timeout), 0, INT_MAX, "SEC",
      "close connections idle this long (default 0 = never)" },
    { { "-m" }, OPT_MBYTES, F(mem_limit), 0, 0, "MB",
      "memory limit of the in-memory cache, megabytes (default 64; units k/m/g accepted)" },
    { { "-I" }, OPT_SIZE, F(item_size_max), 0, 0, "SIZE",
      "largest item, as memcached counts it (default 1m; 1k..1g)" },
    { { "-sync" }, OPT_SYNC, F(sync_mode), 0, 0, "MODE",
      "durability: none, interval (default) or always" },
    { { "-recover" }, OPT_FLAG, F(recover), 0, 0, NULL,
      "open a damaged database by salvaging every intact record" },
    { { "-U" }, OPT_UDP, 0, 0, 0, "PORT", "UDP port: only 0 (UDP is not served)" },
    { { "-dmn", "-d" }, OPT_FLAG, F(daemonize), 0, 0, NULL,
      "run as a daemon: detach once listening (exit status says whether it started)" },
    { { "-pid", "-P" }, OPT_STR, F(pid_path), 0, 0, "FILE",
      "write the process id to FILE once listening; removed at exit" },
    { { "-u" }, OPT_STR, F(user), 0, 0, "USER",
      "run as USER once the sockets are bound (required when started as root; -u root stays root)" },
    { { "-log" }, OPT_STR, F(log_path), 0, 0, "FILE",
      "log to FILE instead of stderr (reopened on SIGHUP)" },
    { { "-ld" }, OPT_LOGLEVEL, F(log_base), KURA_LOG_DEBUG, 0, NULL, "log debug information too" },
    { { "-le" }, OPT_LOGLEVEL, F(log_base), KURA_LOG_ERROR, 0, NULL, "log errors only" },
    { { "-v" }, OPT_VERBOSE, F(verbosity), 0, 0, NULL, "log connections and errors" },
    { { "-vv" }, OPT_VERY_VERBOSE, F(verbosity), 0, 0, NULL, "also log every request" },
    { { "-ulog" }, OPT_STR, F(ulog_dir), 0, 0, "DIR",
      "keep the update log in DIR: every change as a row, for replicas and recovery" },
    { { "-ulim" }, OPT_BYTES, F(ulim), 4096, 0, "SIZE",
      "start a new update-log file past SIZE (default 256m)" },
    { { "-ulmax" }, OPT_BYTES, F(ulmax), 0, 0, "SIZE",
      "delete the oldest update-log files past SIZE in all (default 4g; 0 = keep all)" },
    { { "-sid" }, OPT_INT, F(sid), 1, 65535, "NUM",
      "this server's id in its update log, distinct per replica set (default 1)" },
    { { "-mhost" }, OPT_STR, F(mhost), 0, 0, "HOST",
      "be a replica of the kurad on HOST (read-only unless -rw)" },
    { { "-mport" }, OPT_INT, F(mport), 1, 65535, "NUM", "the master's port (default 11211)" },
    { { "-rts" }, OPT_STR, F(rts_path), 0, 0, "FILE",
      "a replica's position in its master's update log (default: DIR/rts of -ulog)" },
    { { "-rw" }, OPT_FLAG, F(rw), 0, 0, NULL,
      "a replica takes writes too (dual master: each the -mhost of the other)" },
    { { "-syncrepl" }, OPT_INT, F(syncrepl), 0, 64, "NUM",
      "hold the reply to a change until NUM replicas have it in their update log (default 0)" },
    { { "-syncrepl-timeout" }, OPT_INT, F(syncrepl_timeout), 1, 3600000, "MS",
      "how long a reply waits for the replicas of -syncrepl (default 1000)" },
    { { "-syncrepl-fail" }, OPT_SYNCREPL_FAIL, F(syncrepl_ack), 0, 0, "close|ack",
      "past the timeout: close the connection unanswered (default) or acknowledge anyway" },
    { { "-repl-max" }, OPT_INT, F(repl_max), 1, 100000, "NUM",
      "serve at most NUM replication streams at once (default 16; each counts against -c)" },
    { { "-bgs" }, OPT_STR, F(bgs_dir), 0, 0, "DIR",
      "keep snapshots in DIR; a missing or empty database starts from the newest" },
    { { "-bgsi" }, OPT_INT, F(bgsi), 0, INT_MAX, "SEC",
      "take a snapshot every SEC seconds (default 3600; 0 = only when asked)" },
    { { "-bgsc" }, OPT_CODEC, F(bgsc), 0, 0, "CODEC",
      "compress snapshots with lzo (default), zlib, bz2 or none" },
    { { "-bgsn" }, OPT_INT, F(bgsn), 1, 10000, "NUM", "keep the newest NUM snapshots (default 2)" },
    { { "-bgsstop" }, OPT_FLAG, F(bgs_stop), 0, 0, NULL, "take a snapshot at a clean stop too" },
    { { "-repl-divergence" }, OPT_DIVERGENCE, F(divergence_refuse), 0, 0, "copy|refuse",
      "a replica holding rows its master never had: saves them and takes a full copy "
      "(default), or saves them and stops with exit status 2" },
    { { "-metrics" }, OPT_STR, F(metrics), 0, 0, "[HOST:]PORT",
      "serve Prometheus' /metrics and /health over HTTP there (HOST defaults to -host's)" },
    { { "-a" }, OPT_MODE, F(unix_mode), 0, 0777, "MASK",
      "the unix socket's permissions, in octal (default 0700)" },
    { { "-Y" }, OPT_STR, F(auth_file), 0, 0, "FILE",
      "connections authenticate first (memcached's ASCII auth): lines user:password" },
    { { "-D" }, OPT_STR, F(delimiter), 0, 0, "CHAR",
      "key prefix delimiter of \"stats detail\" (default :); turns its counting on" },
    { { "-conf" }, OPT_CONF, F(conf_path), 0, 0, "FILE",
      "read options from FILE first (one per line; the command line overrides it)" },
    { { "-h", "-help", "--help" }, OPT_HELP, 0, 0, 0, NULL, "print this help and exit" },
    { { "-version", "-V", "--version" }, OPT_VERSION, 0, 0, 0, NULL,
      "print the version and exit" },
};

#define NOPTIONS (sizeof(options) / sizeof(options[0]))
_Static_assert(NOPTIONS <= 64, "kura_settings.given has a bit per option");

/* Options that mean nothing without another: given alone they are a
 * mistake (a snapshot interval with no snapshot directory takes no
 * snapshot), so kurad refuses them rather than ignore them. */
static const struct {
    const char *option, *needs;
} needs[] = {
    { "-bgsi", "-bgs" }, { "-bgsc", "-bgs" }, { "-bgsn", "-bgs" }, { "-bgsstop", "-bgs" },
    { "-ulim", "-ulog" }, { "-ulmax", "-ulog" },
    { "-mport", "-mhost" }, { "-rts", "-mhost" }, { "-rw", "-mhost" },
    { "-syncrepl-timeout", "-syncrepl" }, { "-syncrepl-fail", "-syncrepl" },
    { "-repl-divergence", "-mhost" },
    { "-a", "-s" },
};

void options_defaults(kura_settings *s)
{
    memset(s, 0, sizeof(*s));
    s->host = "127.0.0.1";
    s->port = 11211;
    s->threads = 4;
    s->maxconns = 1024;
    s->mem_limit = 64ULL << 20;
    s->item_size_max = 1 << 20;
    s->sync_mode = KURA_SYNC_INTERVAL;
    s->log_base = KURA_LOG_INFO;
    s->ulim = 256ULL << 20;
    s->ulmax = 4ULL << 30;
    s->sid = 1;
    s->mport = 11211;
    s->syncrepl_timeout = 1000;
    s->repl_max = REPL_MAX_DEFAULT;
    s->bgsi = 3600;
    s->bgsc = KURA_CODEC_LZO;
    s->bgsn = 2;
    s->unix_mode = 0700;
}

const char *options_sync_name(int mode)
{
    return mode == KURA_SYNC_NONE ? "none" : mode == KURA_SYNC_ALWAYS ? "always" : "interval";
}

static void usage(FILE *f)
{
    fprintf(f, "kurad %s - a persistent key-value server speaking the memcached protocol\n\n"
               "usage: kurad [options] [DATABASE]\n\n"
               "DATABASE names the store (default: the in-memory cache):\n"
               "  *  or  :#capsiz=SIZE       in-memory cache with LRU eviction\n"
               "  PATH.kh#bnum=N#...         hash file (.tch and .kch accepted)\n"
               "  PATH.kb#pccap=SIZE#...     B+ tree, keys in order (.tcb and .kct accepted)\n\n"
               "options:\n", KURA_VERSION);
    for (size_t i = 0; i < NOPTIONS; i++) {
        char names[64] = "";
        for (int j = 0; j < 3 && options[i].names[j]; j++) {
            if (j)
                strcat(names, ", ");
            strcat(names, options[i].names[j]);
        }
        if (options[i].arg) {
            strcat(names, " ");
            strcat(names, options[i].arg);
        }
        fprintf(f, "  %-22s %s\n", names, options[i].help);
    }
}

/* Finds the option named by arg; *attached points at an argument glued to a
 * single-letter memcached option ("-p11211"), else NULL. */
static const opt *find_option(const char *arg, const char **attached)
{
    *attached = NULL;
    for (size_t i = 0; i < NOPTIONS; i++)
        for (int j = 0; j < 3 && options[i].names[j]; j++)
            if (strcmp(arg, options[i].names[j]) == 0)
                return &options[i];
    /* ttserver options kura does not take yet must not be read as a
     * single-letter option with its value attached ("-ulog" is not "-u log"). */
    static const char *const ttserver_only[] = {
        "-uas", "-rcc", "-skel",
        "-mul", "-ext", "-extpc", "-mask", "-unmask", "-bgs", "-bgsi", "-bgsc",
    };
    for (size_t i = 0; i < sizeof(ttserver_only) / sizeof(ttserver_only[0]); i++)
        if (strcmp(arg, ttserver_only[i]) == 0)
            return NULL;
    /* "-p11211": a two-character name followed by its value. */
    for (size_t i = 0; i < NOPTIONS; i++)
        for (int j = 0; j < 3 && options[i].names[j]; j++) {
            const char *n = options[i].names[j];
            if (strlen(n) == 2 && options[i].arg && strncmp(arg, n, 2) == 0 && arg[2]) {
                *attached = arg + 2;
                return &options[i];
            }
        }
    return NULL;
}

/* True when the option named so (any of its aliases) was given, on the
 * command line or in the conf file. */
static bool option_given(const kura_settings *s, const char *name)
{
    const char *attached;
    const opt *o = find_option(name, &attached);
    return o && (s->given >> (o - options) & 1);
}

static int parse_long(const char *v, long *out)
{
    char *end;
    errno = 0;
    long x = strtol(v, &end, 10);
    if (errno || end == v || *end)
        return -1;
    *out = x;
    return 0;
}

/* Prints "kurad: [WHERE: ]option 'ARG': ..." to stderr; returns 2, the exit
 * status of a bad option. */
static int __attribute__((format(printf, 3, 4)))
opt_error(const char *where, const char *arg, const char *fmt, ...)
{
    va_list ap;
    fprintf(stderr, "kurad: %s%soption '%s': ", where ? where : "", where ? ": " : "", arg);
    va_start(ap, fmt);
    vfprintf(stderr, fmt, ap);
    va_end(ap);
    fputc('\n', stderr);
    return 2;
}

/* Applies option o, named arg, with value val (NULL for options without
 * one).  where names the conf file line, or NULL for the command line.
 * Returns 0, 1 (-h or -version printed: exit 0) or 2 (reason printed). */
static int apply_option(kura_settings *s, const opt *o, const char *arg, const char *val,
                        const char *where)
{
    char *field = (char *)s + o->offset;
    long n;
    uint64_t sz;
    s->given |= 1ULL << (o - options);
    switch (o->kind) {
    case OPT_INT:
        if (parse_long(val, &n) || n < o->min || n > o->max)
            return opt_error(where, arg, "'%s' is not a number from %ld to %ld",
                             val, o->min, o->max);
        *(int *)field = (int)n;
        if (o->offset == F(maxconns))
            s->maxconns_given = true;   /* fdlimit.c: refuse rather than lower it */
        break;
    case OPT_CODEC: {
        kura_codec c;
        if (codec_by_name(val, &c) != KURA_OK)
            return opt_error(where, arg, "'%s' is not one of lzo, zlib, bz2, none", val);
        *(int *)field = (int)c;
        break;
    }
    case OPT_MODE: {
        /* memcached's -a: octal */
        char *end;
        errno = 0;
        long m = strtol(val, &end, 8);
        if (errno || end == val || *end || m < o->min || m > o->max)
            return opt_error(where, arg, "'%s' is not an octal mode from 0 to 0777", val);
        *(int *)field = (int)m;
        break;
    }
    case OPT_SYNCREPL_FAIL:
        if (strcmp(val, "close") && strcmp(val, "ack"))
            return opt_error(where, arg, "'%s' is neither close nor ack", val);
        *(bool *)field = strcmp(val, "ack") == 0;
        break;
    case OPT_DIVERGENCE:
        if (strcmp(val, "copy") && strcmp(val, "refuse"))
            return opt_error(where, arg, "'%s' is neither copy nor refuse", val);
        *(bool *)field = strcmp(val, "refuse") == 0;
        break;
    case OPT_BYTES:
        if (kura_parse_size(val, &sz) != KURA_OK || (sz != 0 && sz < (uint64_t)o->min) ||
            (sz == 0 && o->min))
            return opt_error(where, arg, "'%s' is not a size of at least %ld bytes",
                             val, o->min);
        *(uint64_t *)field = sz;
        break;
    case OPT_MBYTES:
        /* memcached's -m is megabytes; a unit suffix is taken literally.
         * 0 is refused as memcached refuses it, and a number of megabytes
         * whose bytes do not fit in 64 bits is not taken modulo 2^64. */
        if (parse_long(val, &n) == 0 && n >= 0) {
            if ((uint64_t)n > UINT64_MAX >> 20)
                return opt_error(where, arg, "'%s' megabytes is more than 64 bits of bytes",
                                 val);
            sz = (uint64_t)n << 20;
        } else if (kura_parse_size(val, &sz) != KURA_OK) {
            return opt_error(where, arg, "'%s' is not a size", val);
        }
        if (sz == 0)
            return opt_error(where, arg, "the memory limit cannot be 0");
        *(uint64_t *)field = sz;
        break;
    case OPT_SIZE:
        if (kura_parse_size(val, &sz) != KURA_OK || sz < 1024 || sz > (1ULL << 30))
            return opt_error(where, arg, "'%s' is not a size from 1k to 1g", val);
        *(uint64_t *)field = sz;
        break;
    case OPT_STR:
    case OPT_CONF:
        if (!val[0])
            return opt_error(where, arg, "the value is empty");
        *(const char **)field = val;
        break;
    case OPT_FLAG:
        *(bool *)field = true;
        break;
    case OPT_LOGLEVEL:
        *(int *)field = (int)o->min;
        break;
    case OPT_VERBOSE:
        (*(int *)field)++;
        break;
    case OPT_VERY_VERBOSE:
        *(int *)field += 2;
        break;
    case OPT_SYNC:
        if (strcmp(val, "none") == 0)
            *(int *)field = KURA_SYNC_NONE;
        else if (strcmp(val, "interval") == 0)
            *(int *)field = KURA_SYNC_INTERVAL;
        else if (strcmp(val, "always") == 0)
            *(int *)field = KURA_SYNC_ALWAYS;
        else
            return opt_error(where, arg, "'%s' is not none, interval or always", val);
        break;
    case OPT_UDP:
        if (parse_long(val, &n) || n != 0)
            return opt_error(where, arg, "'%s': UDP is not served; only -U 0 is accepted", val);
        break;
    case OPT_HELP:
        usage(stdout);
        return 1;
    case OPT_VERSION:
        printf("kurad %s (memcached protocol %s)\n", KURA_VERSION, KURA_MEMCACHED_VERSION);
        return 1;
    }
    return 0;
}

int options_set(kura_settings *s, const char *name, const char *val, const char *where)
{
    const char *attached;
    const opt *o = find_option(name, &attached);
    if (!o || attached) {
        fprintf(stderr, "kurad: %s: unknown option '%s' (kurad -h lists them)\n", where, name);
        return 2;
    }
    if (o->kind == OPT_CONF || o->kind == OPT_HELP || o->kind == OPT_VERSION) {
        fprintf(stderr, "kurad: %s: option '%s' is not allowed in a conf file\n", where, name);
        return 2;
    }
    if (o->arg && !val) {
        fprintf(stderr, "kurad: %s: option '%s' needs a value (%s)\n", where, name, o->arg);
        return 2;
    }
    if (!o->arg && val) {
        /* A switch may say yes or no in a file: "dmn yes", "recover off". */
        if (!strcmp(val, "no") || !strcmp(val, "off") || !strcmp(val, "false") ||
            !strcmp(val, "0"))
            return 0;
        if (strcmp(val, "yes") && strcmp(val, "on") && strcmp(val, "true") && strcmp(val, "1")) {
            fprintf(stderr, "kurad: %s: option '%s' takes no value, or yes/no (not '%s')\n",
                    where, name, val);
            return 2;
        }
        val = NULL;
    }
    return apply_option(s, o, name, val, where);
}

/* Finds -conf FILE on the command line, so that the file can be applied
 * before the rest.  Returns NULL if there is none. */
static const char *find_conf(int argc, char **argv)
{
    const char *conf = NULL;
    for (int i = 1; i < argc; i++) {
        const char *val;
        const opt *o = argv[i][0] == '-' ? find_option(argv[i], &val) : NULL;
        if (!o || !o->arg)
            continue;
        if (!val && i + 1 < argc)
            val = argv[++i];
        if (o->kind == OPT_CONF)
            conf = val;
    }
    return conf;
}

int options_parse(kura_settings *s, int argc, char **argv)
{
    const char *conf = find_conf(argc, argv);
    bool db_from_conf = false;
    if (conf) {
        int rc = conf_load(s, conf);
        if (rc)
            return rc;
        db_from_conf = s->dbname != NULL;
    }
    for (int i = 1; i < argc; i++) {
        const char *arg = argv[i], *val;
        if (arg[0] != '-' || arg[1] == '\0') {
            if (arg[0] == '\0') {
                fprintf(stderr, "kurad: the database name is empty (\"*\" names the "
                                "in-memory cache)\n");
                return 2;
            }
            if (s->dbname && !db_from_conf) {
                fprintf(stderr, "kurad: more than one database named ('%s' and '%s')\n",
                        s->dbname, arg);
                return 2;
            }
            s->dbname = arg;            /* the command line overrides the file */
            db_from_conf = false;
            continue;
        }
        const opt *o = find_option(arg, &val);
        if (!o) {
            fprintf(stderr, "kurad: unknown option '%s' (kurad -h lists them)\n", arg);
            return 2;
        }
        if (o->arg && !val) {
            if (i + 1 >= argc) {
                fprintf(stderr, "kurad: option '%s' needs an argument (%s)\n", arg, o->arg);
                return 2;
            }
            val = argv[++i];
        }
        if (o->kind == OPT_CONF) {
            if (strcmp(val, conf) != 0) {
                fprintf(stderr, "kurad: more than one -conf file ('%s' and '%s')\n", conf, val);
                return 2;
            }
            s->conf_path = val;
            continue;
        }
        int rc = apply_option(s, o, arg, val, NULL);
        if (rc)
            return rc;
    }
    if (s->port == 0 && !s->unix_path) {
        fprintf(stderr, "kurad: nothing to listen on (-port 0 and no -s)\n");
        return 2;
    }
    for (size_t i = 0; i < sizeof(needs) / sizeof(needs[0]); i++)
        if (option_given(s, needs[i].option) && !option_given(s, needs[i].needs)) {
            fprintf(stderr, "kurad: option '%s' needs '%s'\n", needs[i].option,
                    needs[i].needs);
            return 2;
        }
    /* read now, as the starting user (root may keep the file to itself),
     * so that a bad file stops kurad before anything is opened */
    char err[512];
    if (s->auth_file && kura_auth_load(s->auth_file, &s->auth, err, sizeof(err)) < 0) {
        fprintf(stderr, "kurad: %s\n", err);
        return 2;
    }
    if (s->auth && !auth_loaded)
        atexit(free_auth);
    auth_loaded = s->auth;
    return 0;
}
