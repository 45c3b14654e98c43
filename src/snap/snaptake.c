/*
 * snaptake.c - taking a snapshot of a running engine (snap_take in
 * include/kura/snapshot.h): the caller's thread walks the store in batches
 * copied out under each part's lock (engine_walk) and compresses and
 * writes them with no lock held, so requests wait at most for a part's
 * copy, never for the codec or the disk.
 */
#include <stdio.h>
#include <string.h>
#include <time.h>

#include "kura/engine.h"
#include "kura/journal.h"
#include "kura/snapshot.h"
#include "kura/ulog.h"

typedef struct take {
    snap_writer *w;
    const snap_take_cfg *cfg;
    uint64_t next_report;
} take;

static int take_batch(void *arg, const kura_item *items, size_t n)
{
    take *t = arg;
    for (size_t i = 0; i < n; i++) {
        int rc = snap_writer_add(t->w, &items[i]);
        if (rc)
            return rc;
    }
    uint64_t done = snap_writer_items(t->w);
    if (t->cfg->progress && done >= t->next_report) {
        t->cfg->progress(t->cfg->progress_arg, done, snap_writer_bytes(t->w));
        t->next_report = done + 100000;
    }
    return 0;
}

int snap_take(kura_engine *e, const snap_take_cfg *cfg, snap_info *out, char *path, size_t plen,
              char *err, size_t errlen)
{
    /* every row up to the watermark is in the store before the walk starts;
     * without a log there is no position to give */
    uint64_t start = cfg->ulog ? journal_applied_ts(engine_journal(e)) : 0;
    if (start == UINT64_MAX)
        start = 0;
    snap_info in = {
        .codec = cfg->codec, .sid = cfg->sid, .start_ts = start, .created = (int64_t)time(NULL),
    };
    snprintf(in.backend, sizeof(in.backend), "%s", engine_backend(e));
    char name[64];
    struct timespec now;
    clock_gettime(CLOCK_REALTIME, &now);
    snap_name(name, sizeof(name), start,
              (uint64_t)now.tv_sec * 1000000 + (uint64_t)now.tv_nsec / 1000);
    if (cfg->path)
        snprintf(path, plen, "%s", cfg->path);
    else
        snprintf(path, plen, "%s/%s", cfg->dir, name);
    take t = { .cfg = cfg };
    int rc = snap_writer_open(path, &in, cfg->level, cfg->io, &t.w, err, errlen);
    if (rc)
        return rc;
    rc = engine_walk(e, take_batch, &t);
    if (rc) {
        snprintf(err, errlen, "reading the store: %s", kura_strerror(rc));
        snap_writer_abort(t.w);
        return rc;
    }
    /* every change in the copy was logged before it reached the store */
    uint64_t end = cfg->ulog ? ul_last_ts(cfg->ulog) : 0;
    rc = snap_writer_finish(t.w, end, out, err, errlen);
    if (rc)
        return rc;
    if (cfg->progress)
        cfg->progress(cfg->progress_arg, out->items, out->file_bytes);
    if (cfg->keep && !cfg->path)
        snap_prune(cfg->dir, cfg->keep, cfg->io);
    return KURA_OK;
}
