/*
 * snapload.c - loading a snapshot into a store (snap_load in
 * include/kura/snapshot.h), for kurad's restore at start and kuractl.
 *
 * Items go in through the store's own put, so every backend's format,
 * checksums and limits apply as for any write; an item that has expired
 * since the snapshot was taken is left out, as the store would reclaim it.
 */
#include <stdio.h>
#include <string.h>

#include "kura/snapshot.h"
#include "kura/store.h"

bool snap_store_blank(kura_store *s)
{
    kura_store_usage u = { 0 };
    s->ops->usage(s, &u);
    if (u.curr_items)
        return false;
    kura_store_state st = { 0 };
    if (s->ops->load_state && s->ops->load_state(s, &st) < 0)
        return false;
    return st.max_cas == 0 && st.ulog_ts == 0 && st.oldest_cas == 0 && st.flush_at == 0;
}

int snap_load(kura_store *s, const char *path, int64_t now, snap_info *info, uint64_t *max_cas,
              void (*progress)(void *arg, uint64_t items, uint64_t bytes), void *progress_arg,
              char *err, size_t errlen)
{
    snap_reader *r;
    snap_info in;
    int rc = snap_open(path, &r, &in, err, errlen);
    if (rc)
        return rc;
    kura_clock clk = { .now = now };
    kura_item it;
    uint64_t n = 0, top = 0;
    while ((rc = snap_next(r, &it, err, errlen)) == KURA_OK) {
        if (it.cas > top)
            top = it.cas;
        if (it.exptime && it.exptime <= now)
            continue;
        rc = kura_store_put(s, &it, KURA_PUT_ANY, 0, &clk);
        if (rc) {
            snprintf(err, errlen, "%s: storing an item: %s", path, kura_strerror(rc));
            break;
        }
        if (progress && ++n % 100000 == 0)
            progress(progress_arg, n, snap_reader_progress(r));
    }
    if (progress)
        progress(progress_arg, n, snap_reader_progress(r));
    snap_close(r);
    if (rc != SNAP_DONE)
        return rc ? rc : KURA_ECORRUPT;
    if (info)
        *info = in;
    if (max_cas)
        *max_cas = top;
    return KURA_OK;
}
