/*
 * restore.c - building a database from a snapshot and the update log, up
 * to a moment (snap_restore in include/kura/snapshot.h; kuractl restore).
 *
 * The snapshot holds every change up to its start_ts and none after its
 * end_ts; the update log's rows after start_ts, applied in order, bring it
 * to any later moment, exactly from end_ts on (docs/formats.md,
 * "Snapshots").  So for a target T the newest snapshot with end_ts <= T is
 * loaded and the rows in (start_ts, T] applied.  Rows go through the
 * engine as a replica's do (engine_apply_row: the item with its own cas; a
 * flush as a flush), with no update log attached, so nothing is logged:
 * the new database is a store of its own.
 */
#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "kura/engine.h"
#include "kura/journal.h"
#include "kura/snapshot.h"
#include "kura/store.h"
#include "kura/ulog.h"

static void phase(const snap_restore_cfg *cfg, const char *what, uint64_t done, uint64_t total)
{
    if (cfg->progress)
        cfg->progress(cfg->progress_arg, what, done, total);
}

typedef struct load_arg {
    const snap_restore_cfg *cfg;
    uint64_t total;
} load_arg;

static void load_progress(void *arg, uint64_t items, uint64_t bytes)
{
    load_arg *la = arg;
    (void)items;
    phase(la->cfg, "loading", bytes, la->total);
}

/* The snapshot to start from: cfg->snapshot, or the newest in bgs_dir that
 * ended by until_ts and verifies. */
static int choose(const snap_restore_cfg *cfg, char *path, size_t plen, snap_info *info,
                  char *err, size_t errlen)
{
    if (cfg->snapshot) {
        snprintf(path, plen, "%s", cfg->snapshot);
        phase(cfg, "verifying", 0, 0);
        return snap_verify(path, info, err, errlen);
    }
    snap_entry *v;
    size_t n;
    if (snap_list(cfg->bgs_dir, &v, &n) != KURA_OK) {
        snprintf(err, errlen, "cannot read %s", cfg->bgs_dir);
        return KURA_ESYS;
    }
    int rc = KURA_NOTFOUND;
    char why[600] = "";
    snprintf(err, errlen, "no snapshot in %s%s", cfg->bgs_dir,
             cfg->until_ts != UINT64_MAX ? " ended by that time" : "");
    for (size_t i = 0; i < n; i++) {
        /* a cheap look at the header and trailer first: most are too new */
        if (snap_peek(v[i].path, info, why, sizeof(why)) != KURA_OK)
            continue;
        /* taken without an update log: its moment is unknown, so it serves
         * only a restore of everything */
        if (cfg->until_ts != UINT64_MAX && (info->end_ts == 0 || info->end_ts > cfg->until_ts))
            continue;
        phase(cfg, "verifying", 0, 0);
        if (snap_verify(v[i].path, info, why, sizeof(why)) != KURA_OK)
            continue;
        snprintf(path, plen, "%s", v[i].path);
        rc = KURA_OK;
        break;
    }
    free(v);
    return rc;
}

static int replay(const snap_restore_cfg *cfg, kura_engine *e, uint64_t from,
                  snap_restore_result *res, char *err, size_t errlen)
{
    /* read-only: nothing of the log changes, so it may be a running server's */
    ul_config uc = { .dir = cfg->ulog_dir, .sid = res->info.sid ? res->info.sid : 1,
                     .read_only = true };
    ul_log *log;
    uint64_t cut = 0;
    int rc = ul_open(&uc, &log, &cut, err, errlen);
    if (rc)
        return rc;
    ul_extent ex;
    ul_get_extent(log, &ex);
    ul_reader *rd;
    rc = ul_reader_open(log, from, &rd);
    if (rc == KURA_NOTFOUND || (rc == KURA_OK && ex.from_ts > from)) {
        if (rc == KURA_OK)
            ul_reader_close(rd);
        snprintf(err, errlen, "the update log in %s begins at %" PRIu64 ", after the "
                 "snapshot's start %" PRIu64 ": the changes between are not there",
                 cfg->ulog_dir, ex.from_ts, from);
        ul_close(log);
        return KURA_ECORRUPT;
    }
    if (rc) {
        snprintf(err, errlen, "cannot read the update log in %s: %s", cfg->ulog_dir,
                 kura_strerror(rc));
        ul_close(log);
        return rc;
    }
    uint64_t last = ul_last_ts(log);
    ul_row row;
    while ((rc = ul_reader_next(rd, &row)) == KURA_OK) {
        if (row.ts > cfg->until_ts)
            break;
        if ((rc = engine_apply_row(e, &row)) < 0) {
            snprintf(err, errlen, "applying the row at %" PRIu64 ": %s", row.ts,
                     kura_strerror(rc));
            break;
        }
        res->rows++;
        res->last_ts = row.ts;
        if (res->rows % 100000 == 0)
            phase(cfg, "replaying", row.ts - from, last > from ? last - from : 0);
    }
    ul_reader_close(rd);
    ul_close(log);
    if (rc == UL_CAUGHT_UP || rc == KURA_OK)
        return KURA_OK;
    if (rc > 0)
        rc = KURA_ECORRUPT;
    if (!err[0] || strcmp(err, "ok") == 0)
        snprintf(err, errlen, "reading the update log: %s", kura_strerror(rc));
    return rc;
}

int snap_restore(const snap_restore_cfg *cfg, snap_restore_result *res, char *err,
                 size_t errlen)
{
    memset(res, 0, sizeof(*res));
    int rc = choose(cfg, res->snapshot, sizeof(res->snapshot), &res->info, err, errlen);
    if (rc) {
        res->snapshot[0] = '\0';
        return rc;
    }
    kura_store *s;
    kura_store_config scfg = *cfg->store_cfg;
    scfg.deferred_commit = false;
    rc = kura_store_open(cfg->dbname, &scfg, &s, err, errlen);
    if (rc)
        return rc;
    if (!snap_store_blank(s)) {
        snprintf(err, errlen, "%s holds data: a restore builds a new database", cfg->dbname);
        kura_store_close(s);
        return KURA_EXISTS;
    }
    load_arg la = { cfg, res->info.raw_bytes };
    uint64_t max_cas = 0;
    rc = snap_load(s, res->snapshot, (int64_t)time(NULL), &res->info, &max_cas, load_progress,
                   &la, err, errlen);
    if (rc) {
        kura_store_close(s);
        return rc;
    }
    res->items = res->info.items;
    kura_store_state st = { .max_cas = max_cas, .ulog_ts = res->info.start_ts };
    if (s->ops->save_state && (rc = s->ops->save_state(s, &st)) < 0) {
        snprintf(err, errlen, "cannot write the state: %s", kura_strerror(rc));
        kura_store_close(s);
        return rc;
    }
    kura_engine *e;
    kura_engine_config ecfg = { .item_size_max = scfg.item_size_max ? scfg.item_size_max : 1u << 30 };
    if ((rc = engine_open(&e, s, &ecfg))) {
        snprintf(err, errlen, "cannot start the engine: %s", kura_strerror(rc));
        kura_store_close(s);
        return rc;
    }
    engine_observe_cas(e, max_cas);
    if (cfg->ulog_dir)
        rc = replay(cfg, e, res->info.start_ts, res, err, errlen);
    if (rc == KURA_OK)
        rc = engine_sync(e);
    engine_close(e);
    return rc;
}
