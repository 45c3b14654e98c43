/*
 * snapdir.c - a directory of snapshots: their names, listing newest first,
 * tidying what a crash left, keeping the newest N (include/kura/snapshot.h).
 *
 * A snapshot's name carries its start timestamp in fixed-width hex, so the
 * order of names is the order of time and no file needs opening to list
 * them.  Files being written start with "." and end ".tmp": never taken
 * for a snapshot, removed at start.
 */
#include <dirent.h>
#include <fcntl.h>
#include <errno.h>
#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "kura/grow.h"
#include "kura/snapshot.h"
#include "kura/store.h"

#define NAME_PREFIX "snap-"

void snap_name(char *buf, size_t len, uint64_t start_ts, uint64_t stamp_us)
{
    snprintf(buf, len, NAME_PREFIX "%016" PRIx64 "-%016" PRIx64 SNAP_SUFFIX, start_ts,
             stamp_us);
}

static bool parse_hex16(const char *p, uint64_t *out)
{
    uint64_t v = 0;
    for (int i = 0; i < 16; i++) {
        char c = p[i];
        int d = c >= '0' && c <= '9' ? c - '0' : c >= 'a' && c <= 'f' ? c - 'a' + 10 : -1;
        if (d < 0)
            return false;
        v = v << 4 | (uint64_t)d;
    }
    *out = v;
    return true;
}

/* The two numbers of a snapshot's file name; false for any other name. */
static bool parse_name(const char *name, snap_entry *e)
{
    size_t pl = strlen(NAME_PREFIX), sl = strlen(SNAP_SUFFIX);
    return strlen(name) == pl + 33 + sl && strncmp(name, NAME_PREFIX, pl) == 0 &&
           name[pl + 16] == '-' && strcmp(name + pl + 33, SNAP_SUFFIX) == 0 &&
           parse_hex16(name + pl, &e->start_ts) && parse_hex16(name + pl + 17, &e->stamp_us);
}

static int newest_first(const void *a, const void *b)
{
    const snap_entry *x = a, *y = b;
    if (x->start_ts != y->start_ts)
        return x->start_ts < y->start_ts ? 1 : -1;
    return x->stamp_us < y->stamp_us ? 1 : x->stamp_us > y->stamp_us ? -1 : 0;
}

int snap_list(const char *dir, snap_entry **out, size_t *n)
{
    *out = NULL;
    *n = 0;
    DIR *d = opendir(dir);
    if (!d)
        return errno == ENOENT ? KURA_OK : KURA_ESYS;
    snap_entry *v = NULL;
    size_t cnt = 0, cap = 0;
    struct dirent *de;
    while ((de = readdir(d))) {
        snap_entry e;
        if (!parse_name(de->d_name, &e))
            continue;
        if (kura_grow(&v, &cap, cnt + 1, sizeof(*v), 8)) {
            free(v);
            closedir(d);
            return KURA_ENOMEM;
        }
        snprintf(e.path, sizeof(e.path), "%s/%s", dir, de->d_name);
        v[cnt++] = e;
    }
    closedir(d);
    if (cnt > 1)
        qsort(v, cnt, sizeof(*v), newest_first);
    *out = v;
    *n = cnt;
    return KURA_OK;
}

int snap_tidy(const char *dir, const kura_io *io)
{
    io = kio_or_default(io);
    DIR *d = opendir(dir);
    if (!d)
        return 0;
    int removed = 0;
    struct dirent *de;
    size_t sl = strlen(".tmp"), pl = strlen("." NAME_PREFIX);
    while ((de = readdir(d))) {
        size_t l = strlen(de->d_name);
        if (l > pl + sl && strncmp(de->d_name, "." NAME_PREFIX, pl) == 0 &&
            strcmp(de->d_name + l - sl, ".tmp") == 0 && io->unlinkat(io, dirfd(d), de->d_name, 0) == 0)
            removed++;
    }
    closedir(d);
    return removed;
}

int snap_prune(const char *dir, unsigned keep, const kura_io *io)
{
    io = kio_or_default(io);
    snap_entry *v;
    size_t n;
    int rc = snap_list(dir, &v, &n);
    if (rc)
        return rc;
    for (size_t i = keep; i < n; i++)
        if (io->unlinkat(io, AT_FDCWD, v[i].path, 0) < 0 && errno != ENOENT)
            rc = KURA_ESYS;
    free(v);
    return rc;
}
