/*
 * ctl_pitr.c - "kuractl restore --until TS --bgs DIR --ulog DIR NEWDB": a
 * database rebuilt as it was at a moment (point-in-time restore).
 *
 * The work is the snapshot module's (snap_restore, src/snap/restore.c):
 * the newest snapshot in DIR that verifies and ended by TS, then the update
 * log's rows after the snapshot's start up to TS, applied through the
 * engine as a replica applies them, into a missing or empty database.
 * This file is the command line, the progress display and the exit code.
 *
 * The new database is left "changed without the update log" (the engine
 * ran with none attached), so a kurad started on it with that log does not
 * replay the rows after TS over it; it should get a new -ulog directory.
 */
#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "ctl.h"

typedef struct pitr_progress {
    ctl_progress p;
    const char *phase;
} pitr_progress;

/* snap_restore's phases ("verifying", "loading", "replaying"), each a
 * progress display of its own. */
static void on_phase(void *arg, const char *phase, uint64_t done, uint64_t total)
{
    pitr_progress *pp = arg;
    if (pp->phase != phase) {
        if (pp->phase)
            progress_end(&pp->p);
        progress_start(&pp->p, phase, "bytes", total);
        pp->phase = phase;
    }
    pp->p.total = total;
    progress_set(&pp->p, done);
}

static void store_log(int level, const char *line)
{
    fprintf(stderr, "kuractl: %s%s\n", level == KURA_LOG_ERROR ? "" : "note: ", line);
}

int cmd_restore(int argc, char **argv)
{
    ctl_args a;
    static const ctl_optdef defs[] = { { "--until", true }, { "--bgs", true },
                                       { "--ulog", true }, { NULL, false } };
    int rc = ctl_parse(&a, "restore", argc, argv, defs);
    if (rc)
        return rc;
    if (a.npos != 1 || !ctl_has(&a, "--until") || !ctl_has(&a, "--bgs") || !ctl_has(&a, "--ulog"))
        return ctl_usage(&a, "expected --until TS --bgs DIR --ulog DIR NEWDB");
    uint64_t until;
    if (ctl_parse_ts(ctl_opt(&a, "--until"), &until) != 0 || until == 0)
        return ctl_usage(&a, "--until: '%s' is neither a timestamp nor a date "
                         "(YYYY-MM-DD[ HH:MM[:SS]], UTC)", ctl_opt(&a, "--until"));
    if (!ctl_db_is_file(a.pos[0]))
        return ctl_usage(&a, "NEWDB is a database file (.kh, .kb)");
    kura_store_config scfg = { .log = store_log, .sync_mode = KURA_SYNC_NONE,
                               .item_size_max = (size_t)1 << 30 };
    pitr_progress pp = { .phase = NULL };
    snap_restore_cfg cfg = { .dbname = a.pos[0], .store_cfg = &scfg,
                             .bgs_dir = ctl_opt(&a, "--bgs"), .ulog_dir = ctl_opt(&a, "--ulog"),
                             .until_ts = until, .progress = on_phase, .progress_arg = &pp };
    snap_restore_result res;
    char err[1024] = "", d1[64], d2[64];
    rc = snap_restore(&cfg, &res, err, sizeof(err));
    if (pp.phase)
        progress_end(&pp.p);
    if (rc == KURA_ESYS)
        return ctl_err(CTL_UNREACHABLE, "%s", err);
    if (rc && strstr(err, "in use"))    /* exit 3, as every command a lock refuses */
        return ctl_err(CTL_UNREACHABLE, "restore: %s (a running kurad holds it: stop it first)",
                       err);
    if (rc)
        return ctl_err(CTL_FAIL, "restore: %s (%s)", err, kura_strerror(rc));
    ctl_ts_date(until, d1, sizeof(d1));
    ctl_ts_date(res.last_ts, d2, sizeof(d2));
    printf("restored %s as of %" PRIu64 " (%s): %" PRIu64 " items from %s, %" PRIu64
           " update-log rows applied (the last at %s)\n", a.pos[0], until, d1, res.items,
           res.snapshot, res.rows, d2);
    return CTL_OK;
}
