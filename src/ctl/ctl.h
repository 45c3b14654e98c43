/*
 * ctl.h - what kuractl's files share (src/ctl/): exit codes, the parsed
 * command line, the server connection, the database helpers and the
 * progress display.  One file per command group (ctl_server.c, ctl_repl.c,
 * ctl_digest.c, ctl_db.c, ctl_check.c, ctl_dump.c, ctl_snap.c,
 * ctl_ulog.c), kuractl.c dispatches.  docs/kuractl.1 is the manual.
 *
 * Exit codes are the tool's interface to scripts, so they are few and
 * fixed (docs/kuractl.1 lists them): every error path returns one of
 * these and prints one line to stderr naming what went wrong.
 */
#ifndef KURA_CTL_H
#define KURA_CTL_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "kura/snapshot.h"
#include "kura/store.h"

enum ctl_exit {
    CTL_OK = 0,             /* done; found; in sync; no damage */
    CTL_DIFF = 1,           /* the check found a difference or damage; a key not found */
    CTL_USAGE = 2,          /* bad command line */
    CTL_UNREACHABLE = 3,    /* cannot connect (or the connection was lost / timed out);
                               cannot open a file or database (missing, locked) */
    CTL_FAIL = 4,           /* anything else: the server answered an error, a write
                               failed, a repair or snapshot failed */
    CTL_REJECTS = 5,        /* import: done, but records the database cannot take were
                               set aside in the rejects file (kept whole there) */
};

/* ---- the command line ---------------------------------------------------- */

#define CTL_MAX_POS 16
#define CTL_MAX_OPT 16

/* An option a command accepts: "--flags" (long) or "-o"; takes a value or not. */
typedef struct ctl_optdef {
    const char *name;
    bool value;
} ctl_optdef;

typedef struct ctl_args {
    const char *cmd;            /* "get", "repl status", ... (for messages) */
    int npos;
    const char *pos[CTL_MAX_POS];
    int nopt;
    struct { const char *name, *value; } opt[CTL_MAX_OPT];
} ctl_args;

/* Global settings (kuractl.c parses them wherever they appear). */
typedef struct ctl_global {
    const char *server;         /* -s HOST:PORT or a unix socket path */
    double timeout;             /* -t: connect and each read, seconds */
    bool quiet;                 /* -q: no progress display */
    const char *auth_user;      /* -a FILE's first user:password (NULL: none): */
    const char *auth_pass;      /* sent on every connection to a server that asks */
    bool tls;                   /* -tls: over TLS (kurad -Z), the certificate verified */
    const char *tls_ca;         /* -tls-ca FILE: the CAs it must chain to (NULL: system's) */
    const char *tls_cert;       /* -tls-cert FILE: kuractl's certificate and key (PEM) */
} ctl_global;

extern ctl_global g_ctl;

/* Splits argv (after the command words) into positionals and the options
 * of defs; an unknown option or a missing value is a usage error (message
 * printed, CTL_USAGE returned).  A lone "-" is a positional. */
int ctl_parse(ctl_args *a, const char *cmd, int argc, char **argv, const ctl_optdef *defs);
const char *ctl_opt(const ctl_args *a, const char *name);     /* NULL if absent */
bool ctl_has(const ctl_args *a, const char *name);
/* A number option or positional: 0 with *out, else CTL_USAGE (message printed). */
int ctl_num(const ctl_args *a, const char *what, const char *s, uint64_t *out);
int ctl_snum(const ctl_args *a, const char *what, const char *s, int64_t *out);
/* Prints "kuractl CMD: usage: ..." and returns CTL_USAGE. */
int ctl_usage(const ctl_args *a, const char *fmt, ...) __attribute__((format(printf, 2, 3)));
/* "kuractl: <message>" to stderr; returns code. */
int ctl_err(int code, const char *fmt, ...) __attribute__((format(printf, 2, 3)));

/* ---- the server connection (ctl_net.c) ---------------------------------- */

typedef struct ctl_conn ctl_conn;
/* Connects to addr (HOST:PORT, [V6]:PORT, HOST (port 11211), or a path with
 * a '/' for a unix socket) within g_ctl.timeout, and authenticates with -a's
 * credentials if the server asks for them (-Y or -S): 0, CTL_UNREACHABLE, or
 * CTL_FAIL (credentials refused, or asked for and none given), the reason
 * printed. */
int ctl_connect(const char *addr, ctl_conn **out);
void ctl_close(ctl_conn *c);
const char *ctl_conn_name(const ctl_conn *c);
int ctl_send(ctl_conn *c, const void *p, size_t n);
/* The next line without its CRLF (valid until the next read); 0 or
 * CTL_UNREACHABLE (closed, timed out; printed). */
int ctl_line(ctl_conn *c, const char **line, size_t *len);
/* Exactly n bytes into buf (malloc'd by the caller). */
int ctl_read(ctl_conn *c, void *buf, size_t n);
/* Sends "stats [section]" and calls fn for each "STAT name value" line
 * up to END; an ERROR reply gives CTL_FAIL (printed). */
typedef void (*ctl_stat_fn)(void *arg, const char *name, const char *value);
int ctl_stats(ctl_conn *c, const char *section, ctl_stat_fn fn, void *arg);

/* A fetched item (gets). */
typedef struct ctl_value {
    uint32_t flags;
    uint64_t cas;
    size_t len;
    char *data;                 /* malloc'd, NUL-terminated */
} ctl_value;
/* gets key: 0 found, CTL_DIFF not found, or an error code (printed). */
int ctl_gets(ctl_conn *c, const char *key, ctl_value *v);

/* ---- databases on disk (ctl_db.c) ---------------------------------------- */

/* Opens a database by name (a .kh or .kb path, with #params) read-only or
 * for writing, the backend's log lines going to stderr.  Missing, locked
 * by a running server, unreadable: CTL_UNREACHABLE; damaged: CTL_DIFF;
 * else CTL_FAIL; the reason printed.  recover: the backend salvages what
 * is intact (kura_store_config.recover). */
int ctl_db_open(const char *name, bool read_only, bool recover, kura_store **out);
/* Called with each ERROR line a backend logs (NULL: none). */
extern void (*ctl_store_error_hook)(const char *line);
/* The clock that judges liveness now, for a store's stored state. */
kura_clock ctl_db_clock(kura_store *s);
/* Whether name's path exists (a database directory). */
bool ctl_db_exists(const char *name);
/* Removes the database's files (its path, without #params): 0 or -1. */
int ctl_db_remove(const char *name);
/* True if the database name is of a file backend (not "*"). */
bool ctl_db_is_file(const char *name);

/* ---- progress (progress.c) ----------------------------------------------- */

typedef struct ctl_progress {
    const char *what;
    const char *unit;           /* "items", "bytes" */
    uint64_t total;             /* 0: unknown */
    uint64_t done;
    double start, last, every;
    unsigned calls;
    bool tty, on, drawn;
} ctl_progress;

/* On a terminal (stderr) a bar redrawn ten times a second with the rate
 * and the time left; otherwise a plain line every few seconds
 * (KURACTL_PROGRESS_SECS, default 5); nothing with -q. */
void progress_start(ctl_progress *p, const char *what, const char *unit, uint64_t total);
void progress_set(ctl_progress *p, uint64_t done);
void progress_end(ctl_progress *p);

/* ---- commands ------------------------------------------------------------ */

int cmd_stats(int argc, char **argv);
int cmd_repl(int argc, char **argv);
int cmd_ha(int argc, char **argv);        /* ctl_ha.c */
int cmd_get(int argc, char **argv);
int cmd_set(int argc, char **argv);
int cmd_delete(int argc, char **argv);
int cmd_digest(int argc, char **argv);
int cmd_snapshot(int argc, char **argv);
int cmd_check(int argc, char **argv);
int cmd_dump(int argc, char **argv);
int cmd_load(int argc, char **argv);
int cmd_ulog(int argc, char **argv);
int cmd_db_stats(const char *db);
/* Tokyo and Kyoto Cabinet files (ctl_migrate.c) */
int cmd_import(int argc, char **argv);
int cmd_export(int argc, char **argv);

/* snapshot list|verify|restore (ctl_snap.c); snapshot now is ctl_server.c's */
int snap_cmd_now(int argc, char **argv);
int snap_cmd_list(int argc, char **argv);
int snap_cmd_verify(int argc, char **argv);
int snap_cmd_restore(int argc, char **argv);

/* Loading items into an open store (ctl_dump.c; restore uses it too):
 * from a file in either format, detected by its first bytes. */
int ctl_load_file(kura_store *s, const char *path, uint64_t *items);

/* The loader under ctl_load_file, for other sources (import): start, put
 * each item (an exptime already past: counted in expired, not stored; a
 * cas of 0 gets a new one), finish (the store's max cas raised past
 * every cas stored, its update-log watermark "changed without the log",
 * synced).  put and finish return 0 or an exit code (printed). */
typedef struct ctl_loader {
    kura_store *s;
    kura_clock clk;
    kura_store_state st;
    uint64_t items, expired, next_cas, max_cas, deleted;
    ctl_progress prog;
} ctl_loader;
void ctl_loader_start(ctl_loader *l, kura_store *s);
int ctl_loader_put(ctl_loader *l, kura_item *it);
/* put without the message: KURA_OK (stored, or counted as expired) or the
 * store's error, for a caller that sets a refused item aside (import). */
int ctl_loader_store(ctl_loader *l, kura_item *it);
int ctl_loader_finish(ctl_loader *l);

/* Whether the snapshot module is linked (src/snap/; ctl_snap.c). */
bool ctl_have_snap(void);

/* Loading a snapshot into an open store (ctl_snap.c): its items stored
 * with every field, those already expired skipped; counts in *r. */
typedef struct ctl_restore {
    kura_store *s;
    kura_clock clk;
    uint64_t items, expired, max_cas;
} ctl_restore;
int ctl_snap_into(ctl_restore *r, const char *file);
/* A snapshot's header and trailer, the whole file checked: 0 or as snap_open. */
int ctl_snap_info(const char *file, snap_info *info, char *err, size_t errlen);
/* kuractl restore --until (ctl_pitr.c) */
int cmd_restore(int argc, char **argv);

/* Formats a hybrid-clock timestamp as "2026-12-01 01:02:03.123456Z". */
void ctl_ts_date(uint64_t ts, char *buf, size_t len);
/* Parses a timestamp: a number (the HLC value) or a date
 * "YYYY-MM-DD[ HH:MM[:SS]]" / "YYYY-MM-DDTHH:MM:SS" in UTC. */
int ctl_parse_ts(const char *s, uint64_t *ts);

#endif
