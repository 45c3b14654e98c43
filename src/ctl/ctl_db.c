/*
 * ctl_db.c - opening a database for kuractl's offline commands, "stats
 * DB", and the timestamp formats the commands share.
 *
 * A database is opened through kura_store_open like kurad opens it, so
 * every name kurad takes works here.  Read-only opens take the
 * database's LOCK shared: beside a running kurad (which holds it
 * exclusively) the open is refused ("in use") rather than reading files
 * that are changing under the reader; the message says to stop the
 * server or use the server's own commands.
 */
#include <dirent.h>
#include <errno.h>
#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <time.h>

#include "kura/fsutil.h"
#include "kura/hlc.h"
#include "ctl.h"

void (*ctl_store_error_hook)(const char *line);

/* The backend's lines: to stderr, and its ERROR lines also to the hook
 * (check counts what a backend found wrong while opening as damage). */
static void store_log(int level, const char *line)
{
    fprintf(stderr, "kuractl: %s%s\n", level == KURA_LOG_ERROR ? "" : "note: ", line);
    if (level == KURA_LOG_ERROR && ctl_store_error_hook)
        ctl_store_error_hook(line);
}

/* The path part of a database name ("x.kh#bnum=1" -> "x.kh"). */
static void db_path(const char *name, char *buf, size_t len)
{
    snprintf(buf, len, "%.*s", (int)strcspn(name, "#"), name);
}

bool ctl_db_exists(const char *name)
{
    char path[4096];
    struct stat st;
    db_path(name, path, sizeof(path));
    return stat(path, &st) == 0;
}

int ctl_db_remove(const char *name)
{
    char path[4096];
    db_path(name, path, sizeof(path));
    return kura_remove_tree(path);
}

bool ctl_db_is_file(const char *name)
{
    return !kura_dbname_is_cache(name);
}

int ctl_db_open(const char *name, bool read_only, bool recover, kura_store **out)
{
    char err[1024] = "", path[4096];
    *out = NULL;
    if (!ctl_db_is_file(name))
        return ctl_err(CTL_USAGE, "'%s': kuractl works on database files (.kh, .kb); the "
                       "cache lives in a server", name);
    db_path(name, path, sizeof(path));
    if (read_only && !ctl_db_exists(name))
        return ctl_err(CTL_UNREACHABLE, "%s: no such database (%s)", path, strerror(errno));
    kura_store_config cfg = { .read_only = read_only, .recover = recover, .log = store_log,
                              .sync_mode = KURA_SYNC_NONE,
                              .item_size_max = (size_t)1 << 30 };
    int rc = kura_store_open(name, &cfg, out, err, sizeof(err));
    if (rc == KURA_OK)
        return CTL_OK;
    if (strstr(err, "in use"))
        return ctl_err(CTL_UNREACHABLE, "%s (a running kurad holds it: stop it first, or use "
                       "the server commands)", err);
    if (rc == KURA_ECORRUPT)
        return ctl_err(CTL_DIFF, "%s", err);
    if (rc == KURA_EINVAL && (strstr(err, "suffix") || strstr(err, "parameter")))
        return ctl_err(CTL_USAGE, "%s", err);
    return ctl_err(CTL_UNREACHABLE, "cannot open %s: %s", path, err[0] ? err : kura_strerror(rc));
}

kura_clock ctl_db_clock(kura_store *s)
{
    kura_store_state st = { 0 };
    s->ops->load_state(s, &st);
    kura_clock clk = { .now = time(NULL), .oldest_cas = st.oldest_cas, .flush_at = st.flush_at };
    return clk;
}

/* ---- stats DB -------------------------------------------------------------- */

static void print_line(void *arg, const char *name, const char *value)
{
    (void)arg;
    printf("%s %s\n", name, value);
}

/* Bytes of the files in dir (one level: a database directory is flat). */
static uint64_t dir_bytes(const char *dir, uint64_t *files)
{
    uint64_t total = 0;
    DIR *d = opendir(dir);
    struct dirent *e;
    *files = 0;
    while (d && (e = readdir(d))) {
        char p[4400];
        struct stat st;
        snprintf(p, sizeof(p), "%s/%s", dir, e->d_name);
        if (stat(p, &st) == 0 && S_ISREG(st.st_mode)) {
            total += (uint64_t)st.st_size;
            ++*files;
        }
    }
    if (d)
        closedir(d);
    return total;
}

int cmd_db_stats(const char *db)
{
    kura_store *s;
    int rc = ctl_db_open(db, true, false, &s);
    if (rc)
        return rc;
    kura_store_usage u;
    kura_store_state st = { 0 };
    s->ops->usage(s, &u);
    s->ops->load_state(s, &st);
    char path[4096], date[64];
    db_path(db, path, sizeof(path));
    uint64_t files, bytes = dir_bytes(path, &files);
    printf("backend %s\n", s->ops->name);
    printf("curr_items %" PRIu64 "\n", u.curr_items);
    printf("bytes %" PRIu64 "\n", u.bytes);
    printf("files %" PRIu64 "\n", files);
    printf("file_bytes %" PRIu64 "\n", bytes);
    printf("max_cas %" PRIu64 "\n", st.max_cas);
    printf("oldest_cas %" PRIu64 "\n", st.oldest_cas);
    printf("flush_at %" PRId64 "\n", st.flush_at);
    /* the update log's mark: the last row known to be in the store, else
     * what its two special values mean, in words (a number stays first
     * where there is one) */
    if (st.ulog_ts == UINT64_MAX)
        printf("ulog_ts none (changed without an update log, by a kurad without -ulog or by "
               "kuractl: no log's rows are known to be in it; start kurad on it with a new "
               "-ulog directory, or none)\n");
    else if (st.ulog_ts == 0)
        printf("ulog_ts 0 (no update-log row applied yet)\n");
    else {
        ctl_ts_date(st.ulog_ts, date, sizeof(date));
        printf("ulog_ts %" PRIu64 " %s\n", st.ulog_ts, date);
    }
    if (s->ops->stats)
        s->ops->stats(s, print_line, NULL);
    kura_store_close(s);
    return fflush(stdout) == 0 ? CTL_OK : ctl_err(CTL_FAIL, "writing stdout failed");
}

/* ---- timestamps -------------------------------------------------------------- */

void ctl_ts_date(uint64_t ts, char *buf, size_t len)
{
    if (!ts || ts == UINT64_MAX) {
        snprintf(buf, len, "%s", ts ? "(changed without the update log)" : "-");
        return;
    }
    uint64_t us = hlc_us(ts);
    time_t secs = (time_t)(us / 1000000);
    struct tm tm;
    char d[40];
    gmtime_r(&secs, &tm);
    strftime(d, sizeof(d), "%Y-%m-%d %H:%M:%S", &tm);
    snprintf(buf, len, "%s.%06uZ", d, (unsigned)(us % 1000000));
}

int ctl_parse_ts(const char *s, uint64_t *ts)
{
    char *end;
    if (*s >= '0' && *s <= '9' && strspn(s, "0123456789") == strlen(s)) {
        errno = 0;
        unsigned long long v = strtoull(s, &end, 10);
        if (errno)
            return -1;
        *ts = v;
        return 0;
    }
    static const char *fmts[] = { "%Y-%m-%d %H:%M:%S", "%Y-%m-%dT%H:%M:%S", "%Y-%m-%d %H:%M",
                                  "%Y-%m-%dT%H:%M", "%Y-%m-%d" };
    for (size_t i = 0; i < sizeof(fmts) / sizeof(fmts[0]); i++) {
        struct tm tm;
        memset(&tm, 0, sizeof(tm));
        end = strptime(s, fmts[i], &tm);
        if (end && (*end == '\0' || (end[0] == 'Z' && end[1] == '\0'))) {
            time_t t = timegm(&tm);
            if (t < 0)
                return -1;
            *ts = hlc_make((uint64_t)t * 1000000u, 0);
            return 0;
        }
    }
    return -1;
}
