/*
 * options.c - the command line: ttserver's option names and memcached's.
 *
 * One table lists every option once, with its aliases, its argument kind,
 * its default and its help line; parsing, validation and `-h` all read the
 * table, so they cannot disagree.  memcached's single-letter options also
 * take their argument attached ("-p11211"), as getopt allows, where the
 * value begins as a number, an address or a path does: a multi-letter
 * word that is no option ("-matrix", "-lx") is an unknown option, never
 * "-m etrics".
 *
 * ttserver's and ktserver's options that kura has no field for are in a
 * second table (foreign[]): each maps to a kura option, is accepted with
 * no effect (the reason logged at INFO once the log is open), or is
 * refused with exit 2 and a line saying why.  docs/migration.md lists
 * them all.
 */
#include <errno.h>
#include <limits.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "kura/codec.h"
#include "kura/etcd.h"
#include "kura/netaddr.h"
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
static kura_auth *auth_loaded, *mauth_loaded, *metrics_auth_loaded;

static void free_auth(void)
{
    kura_auth_free(auth_loaded);
    auth_loaded = NULL;
    kura_auth_free(mauth_loaded);
    mauth_loaded = NULL;
    kura_auth_free(metrics_auth_loaded);
    metrics_auth_loaded = NULL;
}

/* A credentials file of -mauth or -metrics-auth (option): read, with at
 * least one line.  0, or -1 with one line printed. */
static int load_credentials(const char *path, const char *option, kura_auth **out)
{
    char err[512];
    const char *u, *p;
    if (kura_auth_load(path, out, err, sizeof(err)) == 0 && kura_auth_first(*out, &u, &p) == 0)
        return 0;
    if (*out)
        snprintf(err, sizeof(err), "authentication file %s (%s) holds no user:password line",
                 path, option);
    kura_auth_free(*out);
    *out = NULL;
    fprintf(stderr, "kurad: %s\n", err);
    return -1;
}

static const opt options[] = {
    { { "-host", "-l" }, OPT_STR, F(host), 0, 0, "ADDR",
      "listen on these addresses, comma-separated (default localhost: 127.0.0.1 and ::1; "
      "0.0.0.0 for all)" },
    { { "-port", "-p" }, OPT_INT, F(port), 0, 65535, "NUM",
      "TCP port (default 11211; 0 = no TCP)" },
    { { "-s" }, OPT_STR, F(unix_path), 0, 0, "PATH", "also listen on a unix socket" },
    { { "-kt" }, OPT_STR, F(kt_listen), 0, 0, "[HOST:]PORT",
      "also serve Kyoto Tycoon's HTTP and binary protocols on PORT (ktserver's is 1978; "
      "HOST: -l's first address by default)" },
    { { "-th", "-t", "-thnum" }, OPT_INT, F(threads), 1, 256, "NUM",
      "worker threads (default 4)" },
    { { "-c" }, OPT_INT, F(maxconns), 1, 1000000, "NUM",
      "maximum simultaneous connections (default 1024)" },
    { { "-tout" }, OPT_INT, F(idle_timeout), 0, INT_MAX, "SEC",
      "close connections idle this long (default 0 = never)" },
    { { "-m" }, OPT_MBYTES, F(mem_limit), 0, 0, "MB",
      "memory limit of the in-memory cache and of a B+ tree's cached large values, "
      "megabytes (default 64; units k/m/g accepted)" },
    { { "-e" }, OPT_STR, F(memory_file), 0, 0, "FILE",
      "the in-memory cache's memory file (memcached's -e): its items survive a graceful "
      "stop and restart with the same file and -m, -I" },
    { { "-I" }, OPT_SIZE, F(item_size_max), 0, 0, "SIZE",
      "largest item, as memcached counts it (default 1m; 1k..1g)" },
    { { "-kmax" }, OPT_INT, F(key_max), KURA_KEY_MC_MAX, KURA_KEY_MAX, "BYTES",
      "longest key Tokyo Tyrant's protocol takes (default 1024; 250..4096; memcached's "
      "protocols keep 250)" },
    { { "-sync" }, OPT_SYNC, F(sync_mode), 0, 0, "MODE",
      "durability: none, interval (default) or always" },
    { { "-recover" }, OPT_FLAG, F(recover), 0, 0, NULL,
      "open a damaged database by salvaging every intact record" },
    { { "-U" }, OPT_UDP, 0, 0, 0, "PORT", "UDP port: only 0 (UDP is not served)" },
    { { "-dmn", "-d" }, OPT_FLAG, F(daemonize), 0, 0, NULL,
      "run as a daemon: detach once listening (exit status says whether it started)" },
    { { "-pid", "-P" }, OPT_STR, F(pid_path), 0, 0, "FILE",
      "write the process id to FILE once listening; removed at exit" },
    { { "-kl" }, OPT_FLAG, F(kill_old), 0, 0, NULL,
      "with -pid: stop the kurad or ttserver it names first (SIGTERM; SIGKILL after 60 s)" },
    { { "-u" }, OPT_STR, F(user), 0, 0, "USER",
      "run as USER once the sockets are bound (required when started as root; -u root stays root)" },
    { { "-log" }, OPT_STR, F(log_path), 0, 0, "FILE",
      "log to FILE instead of stderr (reopened on SIGHUP)" },
    { { "-ld" }, OPT_LOGLEVEL, F(log_base), KURA_LOG_DEBUG, 0, NULL, "log debug information too" },
    { { "-le" }, OPT_LOGLEVEL, F(log_base), KURA_LOG_WARNING, 0, NULL,
      "log errors and warnings only" },
    { { "-li", "-ls" }, OPT_LOGLEVEL, F(log_base), KURA_LOG_INFO, 0, NULL,
      "log what open, recovery and replication do, and errors (the default; ktserver's)" },
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
    { { "-ha-etcd" }, OPT_STR, F(ha_etcd), 0, 0, "URL[,URL...]",
      "automatic failover: elect the master through etcd v3 at these URLs (http[s]://H:P)" },
    { { "-ha-cluster" }, OPT_STR, F(ha_cluster), 0, 0, "NAME",
      "the failover group's name in etcd, /kura/NAME/ (default kura)" },
    { { "-ha-name" }, OPT_STR, F(ha_name), 0, 0, "NAME",
      "this server's name in the group (default its address, HOST:PORT)" },
    { { "-ha-ttl" }, OPT_INT, F(ha_ttl), 2, 3600, "SEC",
      "the leader's etcd lease; writes stop a fifth of it (at least 0.5 s) before (default 10)" },
    { { "-ha-max-lag" }, OPT_INT, F(ha_max_lag), 0, INT_MAX, "MS",
      "GET /replica on -metrics answers 200 only within this lag (default 10000)" },
    { { "-ha-etcd-auth" }, OPT_STR, F(ha_auth_file), 0, 0, "FILE",
      "authenticate to etcd as FILE's first user:password line" },
    { { "-ha-etcd-ca" }, OPT_STR, F(ha_ca), 0, 0, "FILE",
      "the CA certificates (PEM) https:// etcd's must chain to (default: the system's)" },
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
    { { "-metrics-auth" }, OPT_STR, F(metrics_auth_file), 0, 0, "FILE",
      "/metrics asks for HTTP Basic credentials, FILE's user:password lines (default: -Y's)" },
    { { "-a" }, OPT_MODE, F(unix_mode), 0, 0777, "MASK",
      "the unix socket's permissions, in octal (default 0700)" },
    { { "-Y" }, OPT_STR, F(auth_file), 0, 0, "FILE",
      "connections authenticate first (memcached's ASCII auth): lines user:password" },
    { { "-mauth" }, OPT_STR, F(mauth_file), 0, 0, "FILE",
      "as a replica (-mhost or repl follow), authenticate to the master as FILE's first "
      "user:password (default: -Y's first)" },
    { { "-S" }, OPT_FLAG, F(sasl), 0, 0, NULL,
      "SASL over the binary protocol (memcached's -S; libsasl2, memcached.conf): binary only" },
    { { "-D" }, OPT_STR, F(delimiter), 0, 0, "CHAR",
      "key prefix delimiter of \"stats detail\" (default :); turns its counting on" },
    { { "-Z", "--enable-ssl" }, OPT_FLAG, F(ssl), 0, 0, NULL,
      "TLS on the TCP ports (memcached's -Z; certificates with -o; notls:ADDR listeners not)" },
    { { "-o" }, OPT_STR, F(ext_opts), 0, 0, "OPTS",
      "memcached's TLS options, comma-separated: ssl_chain_cert=FILE,ssl_key=FILE,"
      "ssl_ca_cert=FILE,ssl_verify_mode=N,ssl_min_version=N,...; kura's "
      "ssl_handshake_timeout=SECONDS (default 10; 0 none) (docs/security.md)" },
    { { "-mtls" }, OPT_FLAG, F(mtls), 0, 0, NULL,
      "as a replica, reach the master over TLS, verifying its certificate (-mtls-ca)" },
    { { "-mtls-ca" }, OPT_STR, F(mtls_ca), 0, 0, "FILE",
      "the CA certificates (PEM) the master's must chain to (default: the system's)" },
    { { "-mtls-cert" }, OPT_STR, F(mtls_cert), 0, 0, "FILE",
      "the replica's own certificate and key (PEM, one file), for a master that asks" },
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
    { "-repl-divergence", "-mhost" }, { "-mtls-ca", "-mtls" }, { "-mtls-cert", "-mtls" },
    { "-a", "-s" },
    { "-metrics-auth", "-metrics" },
    { "-ha-cluster", "-ha-etcd" }, { "-ha-name", "-ha-etcd" }, { "-ha-ttl", "-ha-etcd" },
    { "-ha-etcd-auth", "-ha-etcd" }, { "-ha-etcd-ca", "-ha-etcd" },
};

/* ttserver 1.1's and ktserver 0.9's options that have no field of their
 * own.  MAP: the same as kura option `to` with value `val` (NULL: the
 * option's own value).  NOTE: accepted, no effect; `why` is logged.
 * REFUSE: exit 2 with `why`.  nargs: how many values follow it. */
enum foreign_kind { FOREIGN_MAP, FOREIGN_NOTE, FOREIGN_REFUSE, FOREIGN_PLSV, FOREIGN_PLEX };

static const struct foreign {
    const char *name;
    int nargs;
    enum foreign_kind kind;
    const char *to, *val;
    const char *why;
} foreign[] = {
    /* ttserver */
    { "-uas", 0, FOREIGN_NOTE, NULL, NULL,
      "the update log is written by its own thread already; -sync says when it is synced" },
    { "-rcc", 0, FOREIGN_NOTE, NULL, NULL,
      "a replica checks every row it is sent (its CRC) and reconnects on a bad one; "
      "kuractl digest compares two servers' items" },
    { "-skel", 1, FOREIGN_REFUSE, NULL, NULL,
      "a skeleton database library cannot be loaded: kura's backends are built in" },
    { "-mul", 1, FOREIGN_REFUSE, NULL, NULL,
      "several database files behind one server are not served: run one kurad per "
      "database (each on its own port)" },
    { "-ext", 1, FOREIGN_REFUSE, NULL, NULL,
      "Lua extensions are not supported: kurad runs no scripts" },
    { "-extpc", 2, FOREIGN_REFUSE, NULL, NULL,
      "Lua periodic functions are not supported: kurad runs no scripts" },
    { "-mask", 1, FOREIGN_REFUSE, NULL, NULL,
      "command masks are not supported: kurad cannot forbid a command, and a mask it "
      "ignored would let through what it was meant to stop (a read-only server is a "
      "replica, -mhost)" },
    { "-unmask", 1, FOREIGN_REFUSE, NULL, NULL,
      "command masks are not supported: kurad cannot forbid a command (see -mask)" },
    /* ktserver */
    { "-lz", 0, FOREIGN_MAP, "-le", NULL,
      "logs errors all the same (-le): a server that fails must say why" },
    { "-uasi", 1, FOREIGN_NOTE, NULL, NULL,
      "-sync interval (the default) syncs the update log about every second, -sync always "
      "at every change" },
    { "-ord", 0, FOREIGN_REFUSE, NULL, NULL,
      "a database opened only to read is not served: a read-only kurad is a replica "
      "(-mhost)" },
    { "-oat", 0, FOREIGN_NOTE, NULL, NULL,
      "every change is atomic across a crash already (the store's write-ahead log)" },
    { "-oas", 0, FOREIGN_MAP, "-sync", "always",
      "every change is on stable storage before it is acknowledged (-sync always)" },
    { "-onl", 0, FOREIGN_NOTE, NULL, NULL,
      "kurad always locks its database: a second server on it is refused" },
    { "-otl", 0, FOREIGN_NOTE, NULL, NULL,
      "kurad never waits for its database's lock: a locked database stops the start" },
    { "-onr", 0, FOREIGN_NOTE, NULL, NULL,
      "kurad never repairs a database by itself: a damaged one stops the start, and "
      "-recover salvages it" },
    { "-asi", 1, FOREIGN_NOTE, NULL, NULL,
      "-sync interval (the default) syncs about every second, -sync always at every change" },
    { "-ash", 0, FOREIGN_NOTE, NULL, NULL,
      "every sync kurad does is physical (fdatasync)" },
    { "-bgc", 1, FOREIGN_MAP, "-bgsc", NULL, "the snapshot codec (ktserver's man page spells "
      "it -bgc, its code -bgsc)" },
    { "-cmd", 1, FOREIGN_NOTE, NULL, NULL,
      "outer commands are run by scripts, and kurad runs none" },
    { "-scr", 1, FOREIGN_REFUSE, NULL, NULL,
      "Lua scripts are not supported: kurad runs no scripts" },
    { "-riv", 1, FOREIGN_NOTE, NULL, NULL,
      "a replica is sent each change as it is made: there is no polling interval" },
    { "-plsv", 1, FOREIGN_PLSV, NULL, NULL,
      "only ktserver's memcached plug-in (ktplugservmemc.so) is mapped: kurad speaks the "
      "memcached protocols itself and loads no plug-in" },
    { "-plex", 1, FOREIGN_PLEX, NULL, NULL, NULL },
    { "-pldb", 1, FOREIGN_REFUSE, NULL, NULL,
      "a plug-in database cannot be loaded: kura's backends are built in" },
};

static const struct foreign *find_foreign(const char *arg)
{
    for (size_t i = 0; i < sizeof(foreign) / sizeof(foreign[0]); i++)
        if (strcmp(arg, foreign[i].name) == 0)
            return &foreign[i];
    return NULL;
}

/* Keeps a line for the log (kura_settings.notes): logged once it is open. */
static void __attribute__((format(printf, 2, 3))) add_note(kura_settings *s, const char *fmt, ...)
{
    va_list ap;
    if (s->nnotes == (int)(sizeof(s->notes) / sizeof(s->notes[0])))
        return;
    va_start(ap, fmt);
    vsnprintf(s->notes[s->nnotes++], sizeof(s->notes[0]), fmt, ap);
    va_end(ap);
}

void options_defaults(kura_settings *s)
{
    memset(s, 0, sizeof(*s));
    s->host = "localhost";
    s->port = 11211;
    s->threads = 4;
    s->maxconns = 1024;
    s->mem_limit = 64ULL << 20;
    s->item_size_max = 1 << 20;
    s->key_max = KURA_KEY_MAX_DEFAULT;
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
    s->ha_cluster = "kura";
    s->ha_ttl = 10;
    s->ha_max_lag = 10000;
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
               "  *#capsiz=SIZE#capcnt=N     in-memory cache with LRU eviction (%%, +, :, -\n"
               "                             accepted: the same cache, keys not in order)\n"
               "  PATH.kh#bnum=N#...         hash file (.tch and .kch accepted)\n"
               "  PATH.kb#pccap=SIZE#...     B+ tree, keys in order (.tcb and .kct accepted)\n"
               "  Tokyo and Kyoto Cabinet parameters of .tch .tcb .kch .kct and the in-memory\n"
               "  names (docs/migration.md has the table):\n"
               "    mapped: opts d/c -> zcomp=zlib, b -> bz2, t -> lzo; zcomp zlib/def/gz,\n"
               "      lzo, lzma (-> bz2); capnum, ktcapcnt -> capcnt; ktcapsiz -> capsiz;\n"
               "      xmsiz -> msiz; psiz, pccap brought within the tree's bounds\n"
               "    no effect (logged at INFO): apow fpow rcnum lmemb nmemb opts l/s zkey\n"
               "      log logkinds logpx ktopts, mode w/c/e/f, rcomp=lex, and any of\n"
               "      bnum msiz dfunit lcnum ncnum psiz pccap capsiz where the backend has none\n"
               "    refused: rcomp dec/lexdesc/decdesc, zcomp=arc, mode t or r;\n"
               "      .tct .tcf .kcd .kcf (with what to use instead)\n\n"
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
    fprintf(f, "\nttserver and ktserver options without a kura name of their own:\n");
    for (size_t i = 0; i < sizeof(foreign) / sizeof(foreign[0]); i++) {
        const struct foreign *o = &foreign[i];
        char label[64];
        snprintf(label, sizeof(label), "%s%s", o->name,
                 o->nargs == 2 ? " X Y" : o->nargs ? " X" : "");
        if (o->kind == FOREIGN_MAP)
            fprintf(f, "  %-22s = %s%s%s: %s\n", label, o->to, o->val ? " " : "",
                    o->val ? o->val : "", o->why);
        else if (o->kind == FOREIGN_NOTE)
            fprintf(f, "  %-22s no effect (logged): %s\n", label, o->why);
        else if (o->kind == FOREIGN_REFUSE)
            fprintf(f, "  %-22s refused: %s\n", label, o->why);
        else if (o->kind == FOREIGN_PLSV)
            fprintf(f, "  %-22s ktplugservmemc.so only: its port is kurad's memcached port\n",
                    label);
        else
            fprintf(f, "  %-22s with -plsv: port=N is -port N, or a second port beside -port;\n"
                       "  %-22s opts=f kept as flags, opts=q refused, th/tout/qtout no effect\n",
                    label, "");
    }
}

/* Whether a value glued to a single-letter option reads as one, as
 * memcached's getopt would take it: a number ("-p11211", "-m64", "-I1m"),
 * an address ("-l127.0.0.1", "-l[::1]", "-l:") or a path ("-s/run/k.sock",
 * "-P./kurad.pid").  A letter after the option letter is a longer option
 * name ("-matrix", "-li"), never an option with its value. */
static bool glued_value(const char *v)
{
    return (*v >= '0' && *v <= '9') || *v == '/' || *v == '.' || *v == ':' || *v == '[' ||
           *v == '~';
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
    if (find_foreign(arg))
        return NULL;
    /* "-p11211": a two-character name followed by its value. */
    for (size_t i = 0; i < NOPTIONS; i++)
        for (int j = 0; j < 3 && options[i].names[j]; j++) {
            const char *n = options[i].names[j];
            if (strlen(n) == 2 && options[i].arg && strncmp(arg, n, 2) == 0 && arg[2] &&
                glued_value(arg + 2)) {
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

/* A snapshot codec's name into *field (apply_option's OPT_CODEC). */
static int apply_codec(kura_settings *s, const char *arg, const char *val, const char *where,
                       int *field)
{
    kura_codec c;
    /* ktserver's -bgsc names: gz and oz are zlib and lzo; kura has no
     * lzma, and bz2 is the closest in ratio */
    if (!strcmp(val, "gz") || !strcmp(val, "oz"))
        val = val[0] == 'g' ? "zlib" : "lzo";
    else if (!strcmp(val, "lzma") || !strcmp(val, "xz")) {
        add_note(s, "option '%s %s': kura has no lzma; snapshots are compressed with bz2",
                 arg, val);
        val = "bz2";
    }
    if (codec_by_name(val, &c) != KURA_OK)
        return opt_error(where, arg, "'%s' is not one of lzo, zlib, bz2, none", val);
    *field = (int)c;
    return 0;
}

/* A size in megabytes into *field, in bytes (apply_option's OPT_MBYTES). */
static int apply_mbytes(const char *arg, const char *val, const char *where, uint64_t *field)
{
    long n;
    uint64_t sz;
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
    *field = sz;
    return 0;
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
    case OPT_CODEC:
        return apply_codec(s, arg, val, where, (int *)field);
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
        return apply_mbytes(arg, val, where, (uint64_t *)field);
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

/* ktserver's memcached plug-in: -plsv names it, -plex configures it
 * ("port=11211#opts=f#th=4").  Checked once every option is read. */
static const char *plsv_path, *plex_expr;

/* -plex's expression: port=N becomes a second listener (or the port, when
 * -port is not given); the rest is mapped or noted.  0 or 2 (printed). */
static int apply_plex(kura_settings *s, const char *where)
{
    const char *pre = where ? where : "";
    const char *sep = where ? ": " : "";
    if (plex_expr && !plsv_path) {
        fprintf(stderr, "kurad: %s%soption '-plex' configures a plug-in: it needs -plsv "
                "(only ktplugservmemc.so is mapped)\n", pre, sep);
        return 2;
    }
    if (!plsv_path)
        return 0;
    long port = 11211;          /* ktplugservmemc.cc's default */
    char expr[512];
    snprintf(expr, sizeof(expr), "%s", plex_expr ? plex_expr : "");
    for (char *save = NULL, *kv = strtok_r(expr, "#", &save); kv; kv = strtok_r(NULL, "#", &save)) {
        char *eq = strchr(kv, '=');
        if (!eq)
            continue;           /* as the plug-in: a field without '=' is skipped */
        *eq = '\0';
        const char *k = kv, *v = eq + 1;
        if (!strcmp(k, "port")) {
            if (parse_long(v, &port) || port < 1 || port > 65535) {
                fprintf(stderr, "kurad: %s%soption '-plex': port=%s is not a port from 1 to "
                        "65535\n", pre, sep, v);
                return 2;
            }
        } else if (!strcmp(k, "host")) {
            if (option_given(s, "-host") && strcmp(s->host, v) != 0) {
                fprintf(stderr, "kurad: %s%soption '-plex': host=%s differs from -host %s: "
                        "kurad listens on one address\n", pre, sep, v, s->host);
                return 2;
            }
            s->host = strdup(v);
            add_note(s, "option '-plex host=%s': kurad listens on %s (as -host)", v, v);
        } else if (!strcmp(k, "opts") || !strcmp(k, "options")) {
            if (strchr(v, 'q')) {
                fprintf(stderr, "kurad: %s%soption '-plex': opts=%s: the plug-in's queue mode "
                        "(a get removes the item) is not supported\n", pre, sep, v);
                return 2;
            }
            if (strchr(v, 'f'))
                add_note(s, "option '-plex opts=f' has no effect: every item keeps its flags; "
                         "a file the plug-in wrote is read with kuractl import --kt-flags");
        } else if (!strcmp(k, "th") || !strcmp(k, "thnum")) {
            add_note(s, "option '-plex %s=%s' has no effect: the workers (-th %d) serve every "
                     "port", k, v, s->threads);
        } else if (!strcmp(k, "tout") || !strcmp(k, "timeout")) {
            add_note(s, "option '-plex %s=%s' has no effect: -tout closes idle connections on "
                     "every port", k, v);
        } else if (!strcmp(k, "qtout") || !strcmp(k, "qtimeout")) {
            add_note(s, "option '-plex %s=%s' has no effect: it is for the queue mode", k, v);
        } else {
            add_note(s, "option '-plex %s=%s' has no effect: the plug-in knows no '%s' either",
                     k, v, k);
        }
    }
    if (!option_given(s, "-port")) {
        s->port = (int)port;
        add_note(s, "ktserver's memcached plug-in: port %ld is kurad's port (-port %ld)", port,
                 port);
    } else if (port != s->port) {
        s->port2 = (int)port;
        add_note(s, "ktserver's memcached plug-in: port %ld is a second port, serving what "
                 "-port %d serves", port, s->port);
    }
    return 0;
}

/* Applies a ttserver/ktserver option of foreign[] with its values.
 * 0 or 2 (reason printed). */
static int apply_foreign(kura_settings *s, const struct foreign *f, const char *const *vals,
                         const char *where)
{
    const char *pre = where ? where : "";
    const char *sep = where ? ": " : "";
    const char *attached;
    switch (f->kind) {
    case FOREIGN_MAP: {
        int rc = apply_option(s, find_option(f->to, &attached), f->to,
                              f->val ? f->val : vals[0], where);
        if (!rc)
            add_note(s, "option '%s' maps to %s%s%s: %s", f->name, f->to, f->val ? " " : "",
                     f->val ? f->val : "", f->why);
        return rc;
    }
    case FOREIGN_NOTE:
        add_note(s, "option '%s' has no effect: %s", f->name, f->why);
        return 0;
    case FOREIGN_REFUSE:
        fprintf(stderr, "kurad: %s%soption '%s' is refused: %s\n", pre, sep, f->name, f->why);
        return 2;
    case FOREIGN_PLSV: {
        const char *base = strrchr(vals[0], '/');
        if (!strstr(base ? base + 1 : vals[0], "ktplugservmemc")) {
            fprintf(stderr, "kurad: %s%soption '-plsv %s' is refused: %s\n", pre, sep, vals[0],
                    f->why);
            return 2;
        }
        plsv_path = vals[0];
        add_note(s, "option '-plsv %s': ktserver's memcached plug-in is kurad itself (the "
                 "memcached protocols on its ports); nothing is loaded", vals[0]);
        return 0;
    }
    case FOREIGN_PLEX:
        plex_expr = vals[0];
        return 0;
    }
    return 0;
}

int options_set(kura_settings *s, const char *name, const char *val, const char *where)
{
    const struct foreign *f = find_foreign(name);
    if (f) {
        if (f->nargs > 1 && f->kind != FOREIGN_REFUSE) {
            fprintf(stderr, "kurad: %s: option '%s' is not allowed in a conf file\n", where,
                    name);
            return 2;
        }
        if (f->nargs && !val && f->kind != FOREIGN_REFUSE) {
            fprintf(stderr, "kurad: %s: option '%s' needs a value\n", where, name);
            return 2;
        }
        return apply_foreign(s, f, &val, where);
    }

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

/* -host's list and -metrics' address in the forms netaddr.h parses: a
 * mistake ("[::1", a port out of range) is a usage error now, with one
 * line, rather than an errno from bind() later.  0, or 2. */
static int check_addresses(const kura_settings *s)
{
    char list[1024], host[256], why[160];
    int port;
    snprintf(list, sizeof(list), "%s", s->host);
    char *save = NULL;
    for (char *item = strtok_r(list, ",", &save); item; item = strtok_r(NULL, ",", &save)) {
        if (strncmp(item, "notls:", 6) == 0)
            item += 6;
        if (kura_netaddr_split(item, host, sizeof(host), &port, why, sizeof(why)) < 0) {
            fprintf(stderr, "kurad: -host '%s': %s\n", item, why);
            return 2;
        }
    }
    if (s->metrics &&
        kura_netaddr_port_spec(s->metrics, host, sizeof(host), &port, why, sizeof(why)) < 0) {
        fprintf(stderr, "kurad: -metrics '%s': %s (the form is [HOST:]PORT)\n", s->metrics,
                why);
        return 2;
    }
    return 0;
}

static int check_options(kura_settings *s);

/* -ha-*: a name etcd's keys and the leader's value can carry (printable,
 * no space or slash), an update log to replicate from, the credentials
 * read now.  0, or -1 with one line printed. */
static int check_ha(kura_settings *s)
{
    static kura_auth *ha_auth_loaded;   /* the life of the process */
    const char *names[2] = { s->ha_cluster, s->ha_name };
    for (int i = 0; i < 2; i++) {
        const char *n = names[i];
        bool ok = !n || (n[0] && strlen(n) < 100);
        for (; ok && n && *n; n++)
            ok = *n > 0x20 && *n < 0x7f && *n != '/';
        if (!ok) {
            fprintf(stderr, "kurad: %s '%s': 1 to 99 printable characters, no space or "
                    "slash\n", i ? "-ha-name" : "-ha-cluster", names[i]);
            return -1;
        }
    }
    if (!s->ulog_dir) {
        fprintf(stderr, "kurad: option '-ha-etcd' needs '-ulog' (the leader's replicas "
                "follow its update log)\n");
        return -1;
    }
    /* the URLs and the CA file, checked now: a usage error, not a start's */
    char err[400];
    etcd_client *c;
    if (etcd_open(s->ha_etcd, NULL, NULL, s->ha_ca, 1000, &c, err, sizeof(err)) < 0) {
        fprintf(stderr, "kurad: -ha-etcd: %s\n", err);
        return -1;
    }
    etcd_close(c);
    if (s->ha_auth_file && !ha_auth_loaded &&
        load_credentials(s->ha_auth_file, "-ha-etcd-auth", &ha_auth_loaded) < 0)
        return -1;
    s->ha_auth = ha_auth_loaded;
    return 0;
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
    bool names_only = false;           /* after "--", as ktserver: every word a name */
    for (int i = 1; i < argc; i++) {
        const char *arg = argv[i], *val;
        if (!names_only && strcmp(arg, "--") == 0) {
            names_only = true;
            continue;
        }
        if (names_only || arg[0] != '-' || arg[1] == '\0') {
            if (arg[0] == '\0') {
                fprintf(stderr, "kurad: the database name is empty (\"*\" names the "
                                "in-memory cache)\n");
                return 2;
            }
            if (s->dbname && !db_from_conf) {
                fprintf(stderr, "kurad: more than one database named ('%s' and '%s'): a "
                        "kurad serves one (run one per database)\n", s->dbname, arg);
                return 2;
            }
            s->dbname = arg;            /* the command line overrides the file */
            db_from_conf = false;
            continue;
        }
        const struct foreign *f = find_foreign(arg);
        if (f) {
            if (i + f->nargs >= argc && f->kind != FOREIGN_REFUSE) {
                fprintf(stderr, "kurad: option '%s' needs %s\n", arg,
                        f->nargs > 1 ? "two arguments" : "an argument");
                return 2;
            }
            int rc = apply_foreign(s, f, (const char *const *)argv + i + 1, NULL);
            if (rc)
                return rc;
            i += f->nargs;
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
    return check_options(s);
}

/* -kt [notls:][HOST:]PORT: a port from 1 to 65535, the host as -l's;
 * 0, or 2 with one line printed. */
static int check_kt(const kura_settings *s)
{
    const char *p = s->kt_listen;
    if (strncmp(p, "notls:", 6) == 0)
        p += 6;
    char host[256], why[160] = "no port";
    int port = 0;
    if (*p && strspn(p, "0123456789") == strlen(p)) {
        port = strlen(p) <= 5 ? atoi(p) : 0;
        snprintf(why, sizeof(why), "port %s is not from 1 to 65535", p);
    } else if (kura_netaddr_split(p, host, sizeof(host), &port, why, sizeof(why)) < 0) {
        port = 0;
    }
    if (port >= 1 && port <= 65535)
        return 0;
    fprintf(stderr, "kurad: -kt '%s': %s\n", s->kt_listen, why);
    return 2;
}

/* What holds only for the options together, once all are read (-plex,
 * -S, ttserver's unix socket, what an option needs), and the password
 * files read.  0 or 2 (reason printed). */
static int check_options(kura_settings *s)
{
    if (apply_plex(s, NULL))
        return 2;
    if (s->sasl && !kura_sasl_available()) {
        fprintf(stderr, "kurad: -S: this kurad was built without SASL (Debian: apt-get install "
                "libsasl2-dev, then ./configure && make)\n");
        return 2;
    }
    /* ttserver's "-port 0 -host PATH": a unix socket at PATH */
    if (s->port == 0 && option_given(s, "-host") && s->host[0] == '/') {
        if (s->unix_path) {
            fprintf(stderr, "kurad: -port 0 -host %s (ttserver's unix socket) and -s %s: "
                    "one unix socket only\n", s->host, s->unix_path);
            return 2;
        }
        add_note(s, "option '-port 0 -host %s': a unix socket at %s (as ttserver; -s %s)",
                 s->host, s->host, s->host);
        s->unix_path = s->host;
        s->host = "localhost";
    }
    if (check_addresses(s))
        return 2;
    if (s->kill_old && !s->pid_path)
        add_note(s, "option '-kl' has no effect without -pid: no pid file names an old server "
                 "(as for ttserver)");
    if (s->port == 0 && !s->unix_path && !s->kt_listen) {
        fprintf(stderr, "kurad: nothing to listen on (-port 0 and no -s)\n");
        return 2;
    }
    if (s->kt_listen && check_kt(s))
        return 2;
    /* Kyoto Tycoon's clients cannot do SASL: -S alone would leave -kt open */
    if (s->kt_listen && s->sasl && !s->auth_file) {
        fprintf(stderr, "kurad: -kt with -S: Kyoto Tycoon's protocols have no SASL; give -Y "
                "FILE too (its users then authenticate over HTTP Basic on -kt)\n");
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
    if (s->ha_etcd && check_ha(s) < 0)
        return 2;
    if ((s->mauth_file && load_credentials(s->mauth_file, "-mauth", &s->mauth) < 0) ||
        (s->metrics_auth_file &&
         load_credentials(s->metrics_auth_file, "-metrics-auth", &s->metrics_auth) < 0))
        return 2;
    if ((s->auth || s->mauth || s->metrics_auth) && !auth_loaded && !mauth_loaded &&
        !metrics_auth_loaded)
        atexit(free_auth);
    auth_loaded = s->auth;
    mauth_loaded = s->mauth;
    metrics_auth_loaded = s->metrics_auth;
    if (!s->mauth)
        s->mauth = s->auth;     /* not owned: auth_loaded frees it */
    if (!s->metrics_auth)
        s->metrics_auth = s->auth;      /* likewise */
    return 0;
}
