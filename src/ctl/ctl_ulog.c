/*
 * ctl_ulog.c - "kuractl ulog list|show|prune DIR": the update log
 * (include/kura/ulog.h) read as an operator reads it.
 *
 * list and show open the log read-only (ul_config.read_only): nothing in
 * the directory changes, so they are safe beside a running kurad (a row
 * being written as they read is not yet whole and is left out).  prune
 * changes the directory and must run with the server stopped: it opens
 * the log as a writer, whose lock a running kurad holds, so it is refused
 * (exit 3) beside one; a running kurad prunes its own log (-ulmax).  Timestamps are the hybrid clock's
 * (hlc.h): shown as the number (what "--from" and the replication stats
 * use) and as the UTC date of its microseconds.
 */
#include <errno.h>
#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

#include "kura/ulog.h"
#include "ctl.h"

static void ulog_line(void *arg, int level, const char *line)
{
    (void)arg;
    fprintf(stderr, "kuractl: %s%s\n", level == KURA_LOG_ERROR ? "" : "note: ", line);
}

static int open_log(const char *dir, bool read_only, ul_log **out)
{
    struct stat st;
    char err[1024] = "";
    if (stat(dir, &st) != 0)
        return ctl_err(CTL_UNREACHABLE, "%s: %s", dir, strerror(errno));
    if (!S_ISDIR(st.st_mode))
        return ctl_err(CTL_UNREACHABLE, "%s: not a directory (the update log is a directory "
                       "of segment files)", dir);
    ul_config cfg = { .dir = dir, .read_only = read_only, .log = ulog_line };
    int rc = ul_open(&cfg, out, NULL, err, sizeof(err));
    if (rc == KURA_NOTFOUND)
        return ctl_err(CTL_UNREACHABLE, "%s", err);
    if (rc == KURA_ECORRUPT)
        return ctl_err(CTL_DIFF, "%s", err);
    if (rc && strstr(err, "in use"))
        return ctl_err(CTL_UNREACHABLE, "%s (a running kurad holds it: stop it first; a "
                       "running kurad prunes its own log, -ulmax)", err);
    if (rc)
        return ctl_err(CTL_UNREACHABLE, "%s", err);
    return CTL_OK;
}

static int ulog_list(int argc, char **argv)
{
    ctl_args a;
    int rc = ctl_parse(&a, "ulog list", argc, argv, NULL);
    if (rc)
        return rc;
    if (a.npos != 1)
        return ctl_usage(&a, "expected DIR");
    ul_log *log;
    if ((rc = open_log(a.pos[0], true, &log)))
        return rc;
    ul_seg_info *v;
    size_t n;
    ul_extent ex;
    ul_get_extent(log, &ex);
    uint64_t last = ul_last_ts(log), start = ul_start(log);
    if ((rc = ul_segments(log, &v, &n))) {
        ul_close(log);
        return ctl_err(CTL_FAIL, "%s: %s", a.pos[0], kura_strerror(rc));
    }
    ul_close(log);
    char d1[64], d2[64];
    printf("%-8s %-20s %-27s %10s %12s %12s  %s\n", "segment", "first_ts", "first (UTC)",
           "rows", "bytes", "file_bytes", "sid");
    uint64_t rows = 0, bytes = 0;
    bool damaged = false;
    for (size_t i = 0; i < n; i++) {
        ctl_ts_date(v[i].first_ts, d1, sizeof(d1));
        printf("%08" PRIx32 " %-20" PRIu64 " %-27s %10" PRIu64 " %12" PRIu64 " %12" PRIu64
               "  %" PRIu32 "%s%s\n", v[i].id, v[i].first_ts, d1, v[i].rows, v[i].bytes,
               v[i].file_bytes, v[i].sid, v[i].damaged ? "  damaged: " : "",
               v[i].damaged ? kura_strerror(v[i].damaged) : "");
        rows += v[i].rows;
        bytes += v[i].bytes;
        damaged |= v[i].damaged != 0;
    }
    ctl_ts_date(ex.from_ts, d1, sizeof(d1));
    ctl_ts_date(last, d2, sizeof(d2));
    printf("%zu segments, %" PRIu64 " rows, %" PRIu64 " bytes\n", n, rows, bytes);
    printf("from_ts %" PRIu64 " (%s): every row after it is held\n", ex.from_ts, d1);
    printf("last_ts %" PRIu64 " (%s)\n", last, d2);
    if (start)
        printf("start %" PRIu64 ": the log holds every change only from there\n", start);
    free(v);
    return damaged ? CTL_DIFF : CTL_OK;
}

static const char *type_name(int t)
{
    switch (t) {
    case UL_PUT: return "put";
    case UL_DEL: return "delete";
    case UL_FLUSH: return "flush_all";
    }
    return "?";
}

static void print_key(const void *k, size_t n)
{
    const unsigned char *p = k;
    for (size_t i = 0; i < n; i++) {
        if (p[i] > ' ' && p[i] < 0x7f && p[i] != '\\')
            putchar(p[i]);
        else
            printf("\\x%02x", p[i]);
    }
}

static int ulog_show(int argc, char **argv)
{
    ctl_args a;
    static const ctl_optdef defs[] = { { "--from", true }, { "--limit", true },
                                       { NULL, false } };
    int rc = ctl_parse(&a, "ulog show", argc, argv, defs);
    if (rc)
        return rc;
    if (a.npos != 1)
        return ctl_usage(&a, "expected DIR");
    uint64_t from = 0, limit = UINT64_MAX;
    if (ctl_has(&a, "--from") && ctl_parse_ts(ctl_opt(&a, "--from"), &from) != 0)
        return ctl_usage(&a, "--from: '%s' is neither a timestamp nor a date "
                         "(YYYY-MM-DD[ HH:MM[:SS]], UTC)", ctl_opt(&a, "--from"));
    if (ctl_has(&a, "--limit") && (rc = ctl_num(&a, "--limit", ctl_opt(&a, "--limit"), &limit)))
        return rc;
    ul_log *log;
    if ((rc = open_log(a.pos[0], true, &log)))
        return rc;
    ul_extent ex;
    ul_get_extent(log, &ex);
    uint64_t after = from ? from - 1 : 0;
    if (after < ex.from_ts) {
        if (from)
            fprintf(stderr, "kuractl: the log holds rows only after %" PRIu64 "\n", ex.from_ts);
        after = ex.from_ts;
    }
    ul_reader *rd;
    if ((rc = ul_reader_open(log, after, &rd))) {
        ul_close(log);
        return ctl_err(CTL_FAIL, "%s: %s", a.pos[0], kura_strerror(rc));
    }
    uint64_t shown = 0;
    rc = CTL_OK;
    while (shown < limit) {
        ul_row row;
        int r = ul_reader_next(rd, &row);
        if (r == UL_CAUGHT_UP)
            break;
        if (r) {
            rc = ctl_err(r == KURA_ECORRUPT ? CTL_DIFF : CTL_FAIL, "%s: after row %" PRIu64
                         ": %s", a.pos[0], shown, kura_strerror(r));
            break;
        }
        char date[64];
        ctl_ts_date(row.ts, date, sizeof(date));
        printf("%" PRIu64 " %s %-9s sid %" PRIu32, row.ts, date, type_name(row.type), row.sid);
        if (row.origin_ts && row.origin_ts != row.ts)
            printf(" origin_ts %" PRIu64, row.origin_ts);
        if (row.type == UL_PUT || row.type == UL_DEL) {
            printf(" key ");
            print_key(row.key, row.klen);
        }
        if (row.type == UL_PUT)
            printf(" flags %" PRIu32 " exptime %" PRId64 " cas %" PRIu64 " vlen %zu", row.flags,
                   row.exptime, row.cas, row.vlen);
        if (row.type == UL_FLUSH)
            printf(" at %" PRId64, row.exptime);
        putchar('\n');
        shown++;
    }
    ul_reader_close(rd);
    ul_close(log);
    if (fflush(stdout) != 0)
        return ctl_err(CTL_FAIL, "writing stdout failed");
    return rc;
}

static int ulog_prune(int argc, char **argv)
{
    ctl_args a;
    static const ctl_optdef defs[] = { { "--keep-after", true }, { "--max", true },
                                       { NULL, false } };
    int rc = ctl_parse(&a, "ulog prune", argc, argv, defs);
    if (rc)
        return rc;
    if (a.npos != 1)
        return ctl_usage(&a, "expected DIR");
    bool keep = ctl_has(&a, "--keep-after"), max = ctl_has(&a, "--max");
    if (keep == max)
        return ctl_usage(&a, "give one of --keep-after TS and --max SIZE");
    uint64_t ts = 0, cap = 0;
    if (keep && ctl_parse_ts(ctl_opt(&a, "--keep-after"), &ts) != 0)
        return ctl_usage(&a, "--keep-after: '%s' is neither a timestamp nor a date",
                         ctl_opt(&a, "--keep-after"));
    if (max && (kura_parse_size(ctl_opt(&a, "--max"), &cap) != 0 || cap == 0))
        return ctl_usage(&a, "--max: '%s' is not a size (4096, 64m, 1g)", ctl_opt(&a, "--max"));
    ul_log *log;
    if ((rc = open_log(a.pos[0], false, &log)))
        return rc;
    ul_prune_result res;
    rc = keep ? ul_prune_before(log, ts, &res) : ul_prune(log, UINT64_MAX, cap, &res);
    ul_close(log);
    if (rc)
        return ctl_err(CTL_FAIL, "%s: %s", a.pos[0], kura_strerror(rc));
    char date[64];
    ctl_ts_date(res.from_ts, date, sizeof(date));
    printf("removed %" PRIu32 " segments (%" PRIu64 " bytes); the log now holds every row after "
           "%" PRIu64 " (%s)\n", res.segs, res.bytes, res.from_ts, date);
    return CTL_OK;
}

int cmd_ulog(int argc, char **argv)
{
    ctl_args a = { .cmd = "ulog" };
    if (argc < 1)
        return ctl_usage(&a, "expected list, show or prune");
    if (strcmp(argv[0], "-h") == 0 || strcmp(argv[0], "--help") == 0)
        return ctl_parse(&a, "ulog", 1, argv, NULL);
    if (strcmp(argv[0], "list") == 0)
        return ulog_list(argc - 1, argv + 1);
    if (strcmp(argv[0], "show") == 0)
        return ulog_show(argc - 1, argv + 1);
    if (strcmp(argv[0], "prune") == 0)
        return ulog_prune(argc - 1, argv + 1);
    return ctl_usage(&a, "unknown subcommand '%s' (list, show, prune)", argv[0]);
}
