/*
 * ctl_pitr.c - "kuractl restore --until TS --bgs DIR --ulog DIR NEWDB": a
 * database rebuilt as it was at a moment (point-in-time restore).
 *
 * A snapshot is fuzzy (docs/formats.md, "What a snapshot means"): every
 * change up to its start_ts is in it, every change in it is at or before
 * its end_ts.  The update log's rows after start_ts, applied in order over
 * it, give the state at any T >= end_ts exactly, rows being results (an
 * item's new version, a deletion, a flush) rather than commands.  So: the
 * newest snapshot in DIR that verifies and ended at or before T, then the
 * rows in (start_ts, T], into a new (missing or empty) database.
 *
 * The log is opened read-only; the database's update-log watermark is left
 * at "changed without the log", so a kurad started on it with that log does
 * not replay the rows after T over it (which would undo the point in time).
 */
#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "kura/ulog.h"
#include "ctl.h"

/* The newest snapshot of dir that verifies and ended at or before until. */
static int pick_snapshot(const char *dir, uint64_t until, char *path, size_t len,
                         snap_info *info)
{
    snap_entry *e;
    size_t n;
    if (snap_list(dir, &e, &n) != 0)
        return ctl_err(CTL_UNREACHABLE, "%s: cannot list the snapshots", dir);
    int rc = CTL_FAIL;
    for (size_t i = 0; i < n; i++) {
        char err[1024];
        if (e[i].start_ts > until)
            continue;           /* began after the moment: cannot have ended before it */
        if (ctl_snap_info(e[i].path, info, err, sizeof(err)) != 0) {
            fprintf(stderr, "kuractl: skipping %s: %s\n", e[i].path, err);
            continue;
        }
        if (info->end_ts > until)
            continue;
        snprintf(path, len, "%s", e[i].path);
        rc = CTL_OK;
        break;
    }
    free(e);
    if (rc)
        return ctl_err(CTL_FAIL, "%s: no snapshot that verifies ended at or before %" PRIu64
                       " (%zu snapshots looked at)", dir, until, n);
    return CTL_OK;
}

typedef struct replay {
    kura_store *s;
    kura_clock clk;
    uint64_t rows, max_cas;
} replay;

static int apply(replay *r, const ul_row *row)
{
    int rc = KURA_OK;
    if (row->type == UL_PUT) {
        kura_item it = { .key = row->key, .klen = row->klen, .val = row->val, .vlen = row->vlen,
                         .flags = row->flags, .exptime = row->exptime, .cas = row->cas };
        if (it.exptime != 0 && it.exptime <= r->clk.now)
            rc = r->s->ops->del(r->s, it.key, it.klen, 0, &r->clk);  /* dead by now */
        else
            rc = r->s->ops->put(r->s, &it, KURA_PUT_ANY, 0, &r->clk);
        if (row->cas > r->max_cas)
            r->max_cas = row->cas;
    } else if (row->type == UL_DEL) {
        rc = r->s->ops->del(r->s, row->key, row->klen, 0, &r->clk);
    } else if (row->type == UL_FLUSH) {
        /* as the engine applies one (feed.c): the watermark and the
         * pending delayed flush only move forward */
        if (row->cas > r->clk.oldest_cas)
            r->clk.oldest_cas = row->cas;
        if (row->exptime > r->clk.flush_at)
            r->clk.flush_at = row->exptime;
    }
    return rc == KURA_NOTFOUND ? KURA_OK : rc;
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
    const char *db = a.pos[0], *uldir = ctl_opt(&a, "--ulog");
    char snap[4096], err[1024] = "", d1[64], d2[64];
    snap_info info;
    if ((rc = pick_snapshot(ctl_opt(&a, "--bgs"), until, snap, sizeof(snap), &info)))
        return rc;
    fprintf(stderr, "kuractl: using %s (start_ts %" PRIu64 ", end_ts %" PRIu64 ")\n", snap,
            info.start_ts, info.end_ts);
    ul_config uc = { .dir = uldir, .read_only = true };
    ul_log *log;
    if ((rc = ul_open(&uc, &log, NULL, err, sizeof(err))))
        return ctl_err(rc == KURA_ECORRUPT ? CTL_DIFF : CTL_UNREACHABLE, "%s", err);
    ul_extent ex;
    ul_get_extent(log, &ex);
    if (info.start_ts < ex.from_ts) {
        ul_close(log);
        return ctl_err(CTL_FAIL, "%s holds rows only after %" PRIu64 ", the snapshot starts at %"
                       PRIu64 ": the rows between are gone (-ulmax); nothing restored", uldir,
                       ex.from_ts, info.start_ts);
    }
    kura_store *s;
    if ((rc = ctl_db_open(db, false, false, &s))) {
        ul_close(log);
        return rc;
    }
    kura_store_usage u;
    s->ops->usage(s, &u);
    if (u.curr_items) {
        kura_store_close(s);
        ul_close(log);
        return ctl_err(CTL_FAIL, "%s holds %" PRIu64 " items: restore builds a missing or empty "
                       "database", db, u.curr_items);
    }
    ctl_restore rs = { .s = s };
    replay rp = { .s = s };
    ul_reader *rd = NULL;
    rc = ctl_snap_into(&rs, snap);
    if (rc == CTL_OK && (rc = ul_reader_open(log, info.start_ts, &rd)) != KURA_OK)
        rc = ctl_err(CTL_FAIL, "%s: cannot read from %" PRIu64 ": %s", uldir, info.start_ts,
                     kura_strerror(rc));
    uint64_t last = 0;
    if (rc == CTL_OK) {
        rp.clk = ctl_db_clock(s);
        ctl_progress prog;
        progress_start(&prog, "replay", "rows", 0);
        for (;;) {
            ul_row row;
            int r = ul_reader_next(rd, &row);
            if (r == UL_CAUGHT_UP || (r == KURA_OK && row.ts > until))
                break;
            if (r) {
                rc = ctl_err(r == KURA_ECORRUPT ? CTL_DIFF : CTL_FAIL, "%s: after %" PRIu64
                             ": %s", uldir, last, kura_strerror(r));
                break;
            }
            if ((r = apply(&rp, &row))) {
                rc = ctl_err(CTL_FAIL, "%s: applying the row at %" PRIu64 ": %s", db, row.ts,
                             kura_strerror(r));
                break;
            }
            last = row.ts;
            progress_set(&prog, ++rp.rows);
        }
        progress_end(&prog);
    }
    if (rd)
        ul_reader_close(rd);
    uint64_t log_last = ul_last_ts(log);
    ul_close(log);
    if (rc == CTL_OK) {
        kura_store_state st = { 0 };
        s->ops->load_state(s, &st);
        st.max_cas = st.max_cas > rs.max_cas ? st.max_cas : rs.max_cas;
        st.max_cas = st.max_cas > rp.max_cas ? st.max_cas : rp.max_cas;
        st.oldest_cas = rp.clk.oldest_cas > st.oldest_cas ? rp.clk.oldest_cas : st.oldest_cas;
        st.flush_at = rp.clk.flush_at > st.flush_at ? rp.clk.flush_at : st.flush_at;
        if (st.oldest_cas > st.max_cas)
            st.max_cas = st.oldest_cas;
        st.ulog_ts = UINT64_MAX;    /* never replay the log's later rows over it */
        int r = s->ops->save_state(s, &st);
        if (!r)
            r = s->ops->sync(s);
        if (r)
            rc = ctl_err(CTL_FAIL, "%s: %s", db, kura_strerror(r));
    }
    kura_store_close(s);
    if (rc)
        return rc;
    ctl_ts_date(until, d1, sizeof(d1));
    ctl_ts_date(last, d2, sizeof(d2));
    printf("restored %s as of %" PRIu64 " (%s): %" PRIu64 " items from %s, %" PRIu64
           " update-log rows applied (the last at %s)\n", db, until, d1, rs.items, snap, rp.rows,
           last ? d2 : "-");
    if (log_last < until)
        fprintf(stderr, "kuractl: note: the update log ends at %" PRIu64 ", before --until: "
                "this is the state at its end\n", log_last);
    return CTL_OK;
}
