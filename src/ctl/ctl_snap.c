/*
 * ctl_snap.c - kuractl's side of snapshot files (include/kura/snapshot.h):
 * "snapshot list|verify|restore", and the kura format of dump and load.
 *
 * Every use of the snapshot module (src/snap/) is in this file.
 *
 * A restore goes only into a missing or empty database (a database that
 * survived is never overwritten by an older copy), verifies
 * the whole file before it writes anything (snap_open checks the CRC of
 * the whole file), and leaves the database's update-log watermark at the
 * snapshot's start_ts, so that kurad, started on it with its update log,
 * replays the rows written after the snapshot began.
 */
#include <errno.h>
#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <time.h>

#include "kura/snapshot.h"
#include "ctl.h"

/* Always true now that src/snap/ is in libkura.a; kept so the callers
 * read as they did while the module was being written. */
bool ctl_have_snap(void)
{
    return true;
}

static int no_snap(void)
{
    return ctl_err(CTL_FAIL, "snapshot files need the snapshot module (src/snap/), not in "
                   "this build");
}

/* ---- dump and load, kura format ----------------------------------------- */

typedef struct kdump {
    snap_writer *w;
    int err;
    uint64_t items;
    ctl_progress prog;
} kdump;

static int kdump_item(void *arg, const kura_item *it)
{
    kdump *d = arg;
    int rc = snap_writer_add(d->w, it);
    if (rc) {
        d->err = rc;
        return rc;
    }
    progress_set(&d->prog, ++d->items);
    return 0;
}

int ctl_dump_kura(kura_store *s, const char *path, const char *codec, uint64_t *items)
{
    char err[1024] = "";
    snap_info info;
    kura_store_state st = { 0 };
    kura_store_usage u;
    memset(&info, 0, sizeof(info));
    info.codec = KURA_CODEC_LZO;
    if (codec && codec_by_name(codec, &info.codec) != 0)
        return ctl_err(CTL_USAGE, "--codec is none, zlib, bz2 or lzo, not '%s'", codec);
    s->ops->load_state(s, &st);
    s->ops->usage(s, &u);
    snprintf(info.backend, sizeof(info.backend), "%s", s->ops->name);
    info.start_ts = st.ulog_ts;
    info.created = time(NULL);
    kdump d = { 0 };
    int rc = snap_writer_open(path, &info, 0, NULL, &d.w, err, sizeof(err));
    if (rc)
        return ctl_err(CTL_UNREACHABLE, "%s: %s", path, err);
    kura_clock clk = ctl_db_clock(s);
    progress_start(&d.prog, "dump", "items", u.curr_items);
    int irc = s->ops->iterate(s, &(kura_iter_spec){ .scope = KURA_ITER_ALL }, &clk, kdump_item, &d);
    progress_end(&d.prog);
    if (d.err || irc < 0) {
        snap_writer_abort(d.w);
        return ctl_err(CTL_FAIL, "%s: %s (nothing written)", d.err ? "writing" : "reading the "
                       "database", kura_strerror(d.err ? d.err : irc));
    }
    if ((rc = snap_writer_finish(d.w, st.ulog_ts, &info, err, sizeof(err))))
        return ctl_err(CTL_FAIL, "%s: %s", path, err);
    *items = d.items;
    return CTL_OK;
}

int ctl_load_kura(const char *path, int (*put)(void *arg, kura_item *it), void *arg,
                  ctl_progress *prog)
{
    char err[1024] = "";
    snap_reader *r;
    snap_info info;
    if (!ctl_have_snap())
        return no_snap();
    int rc = snap_open(path, &r, &info, err, sizeof(err));
    if (rc == KURA_ESYS)
        return ctl_err(CTL_UNREACHABLE, "%s: %s", path, err);
    if (rc)
        return ctl_err(CTL_DIFF, "%s: %s (nothing loaded)", path, err);
    progress_start(prog, "load", "bytes", info.raw_bytes);
    for (;;) {
        kura_item it;
        rc = snap_next(r, &it, err, sizeof(err));
        if (rc == SNAP_DONE) {
            rc = CTL_OK;
            break;
        }
        if (rc) {
            rc = ctl_err(CTL_DIFF, "%s: %s (the items before it are loaded)", path, err);
            break;
        }
        if ((rc = put(arg, &it)))
            break;
        progress_set(prog, snap_reader_progress(r));
    }
    progress_end(prog);
    snap_close(r);
    return rc;
}

/* ---- snapshot list, verify, restore ---------------------------------------- */

int snap_cmd_list(int argc, char **argv)
{
    ctl_args a;
    int rc = ctl_parse(&a, "snapshot list", argc, argv, NULL);
    if (rc)
        return rc;
    if (a.npos != 1)
        return ctl_usage(&a, "expected DIR");
    if (!ctl_have_snap())
        return no_snap();
    struct stat st;
    if (stat(a.pos[0], &st) != 0 || !S_ISDIR(st.st_mode))
        return ctl_err(CTL_UNREACHABLE, "%s: %s", a.pos[0],
                       errno && !S_ISDIR(st.st_mode) ? strerror(errno) : "not a directory");
    snap_entry *e;
    size_t n;
    if (snap_list(a.pos[0], &e, &n) != 0)
        return ctl_err(CTL_UNREACHABLE, "%s: cannot list: %s", a.pos[0], strerror(errno));
    /* header and trailer only (snap_peek): "snapshot verify" reads them through */
    for (size_t i = 0; i < n; i++) {
        char date[64], err[600];
        snap_info info;
        ctl_ts_date(e[i].start_ts, date, sizeof(date));
        if (snap_peek(e[i].path, &info, err, sizeof(err)) != KURA_OK) {
            printf("%s  unreadable: %s\n", e[i].path, err);
            continue;
        }
        printf("%s  %" PRIu64 " bytes  %" PRIu64 " items  %s  from %s  start_ts %" PRIu64
               " (%s)  end_ts %" PRIu64 "\n", e[i].path, info.file_bytes, info.items,
               codec_name(info.codec), info.backend, e[i].start_ts, date, info.end_ts);
    }
    if (n == 0)
        printf("no snapshots in %s\n", a.pos[0]);
    free(e);
    return CTL_OK;
}

/* Verifies one file; prints its line.  CTL_OK, CTL_DIFF (damaged) or
 * CTL_UNREACHABLE (cannot read). */
static int verify_one(const char *path)
{
    char err[1024] = "", date[64], end[64];
    snap_reader *r;
    snap_info info;
    int rc = snap_open(path, &r, &info, err, sizeof(err));
    if (rc) {
        printf("damaged  %s: %s\n", path, err);
        return rc == KURA_ESYS ? CTL_UNREACHABLE : CTL_DIFF;
    }
    ctl_progress prog;
    progress_start(&prog, "verify", "bytes", info.raw_bytes);
    uint64_t items = 0;
    for (;;) {
        kura_item it;
        rc = snap_next(r, &it, err, sizeof(err));
        if (rc)
            break;
        items++;
        progress_set(&prog, snap_reader_progress(r));
    }
    progress_end(&prog);
    snap_close(r);
    if (rc != SNAP_DONE) {
        printf("damaged  %s: %s (after %" PRIu64 " items)\n", path, err, items);
        return CTL_DIFF;
    }
    ctl_ts_date(info.start_ts, date, sizeof(date));
    ctl_ts_date(info.end_ts, end, sizeof(end));
    printf("ok       %s: %" PRIu64 " items, %s, format %" PRIu32 ", from %s (sid %" PRIu32
           "), %" PRIu64 " bytes (%" PRIu64 " raw), start_ts %" PRIu64 " (%s), end_ts %" PRIu64
           " (%s)\n", path, info.items, codec_name(info.codec) ? codec_name(info.codec) : "?",
           info.version, info.backend, info.sid, info.file_bytes, info.raw_bytes, info.start_ts, date, info.end_ts, end);
    return CTL_OK;
}

int snap_cmd_verify(int argc, char **argv)
{
    ctl_args a;
    int rc = ctl_parse(&a, "snapshot verify", argc, argv, NULL);
    if (rc)
        return rc;
    if (a.npos != 1)
        return ctl_usage(&a, "expected FILE or DIR");
    if (!ctl_have_snap())
        return no_snap();
    struct stat st;
    if (stat(a.pos[0], &st) != 0)
        return ctl_err(CTL_UNREACHABLE, "%s: %s", a.pos[0], strerror(errno));
    if (!S_ISDIR(st.st_mode))
        return verify_one(a.pos[0]);
    snap_entry *e;
    size_t n;
    if (snap_list(a.pos[0], &e, &n) != 0)
        return ctl_err(CTL_UNREACHABLE, "%s: cannot list: %s", a.pos[0], strerror(errno));
    rc = CTL_OK;
    for (size_t i = 0; i < n; i++) {
        int r = verify_one(e[i].path);
        if (r > rc)
            rc = r;
    }
    if (n == 0)
        printf("no snapshots in %s\n", a.pos[0]);
    free(e);
    return rc;
}

static int restore_put(void *arg, kura_item *it)
{
    ctl_restore *r = arg;
    if (it->exptime != 0 && it->exptime <= r->clk.now) {
        r->expired++;
        return CTL_OK;
    }
    int rc = kura_store_put(r->s, it, KURA_PUT_ANY, 0, &r->clk);
    if (rc)
        return ctl_err(CTL_FAIL, "storing '%.*s': %s", (int)it->klen, it->key, kura_strerror(rc));
    if (it->cas > r->max_cas)
        r->max_cas = it->cas;
    r->items++;
    return CTL_OK;
}

int ctl_snap_into(ctl_restore *r, const char *file)
{
    ctl_progress prog;
    r->clk = ctl_db_clock(r->s);
    return ctl_load_kura(file, restore_put, r, &prog);
}

/* A snapshot's header and trailer, the whole file checked (snap_open). */
int ctl_snap_info(const char *file, snap_info *info, char *err, size_t errlen)
{
    snap_reader *r;
    int rc = snap_open(file, &r, info, err, errlen);
    if (rc == KURA_OK)
        snap_close(r);
    return rc;
}

int snap_cmd_restore(int argc, char **argv)
{
    ctl_args a;
    int rc = ctl_parse(&a, "snapshot restore", argc, argv, NULL);
    if (rc)
        return rc;
    if (a.npos != 2)
        return ctl_usage(&a, "expected FILE DB");
    if (!ctl_have_snap())
        return no_snap();
    const char *file = a.pos[0], *db = a.pos[1];
    char err[1024] = "";
    snap_info info;
    /* the whole file checked before the database is touched */
    rc = ctl_snap_info(file, &info, err, sizeof(err));
    if (rc)
        return ctl_err(rc == KURA_ESYS ? CTL_UNREACHABLE : CTL_DIFF, "%s: %s (nothing restored)",
                       file, err);
    kura_store *s;
    if ((rc = ctl_db_open(db, false, false, &s)))
        return rc;
    if (!snap_store_blank(s)) {     /* the rule kurad's restore at start keeps */
        kura_store_close(s);
        return ctl_err(CTL_FAIL, "%s has been written: a snapshot is restored only into "
                       "a missing or empty database", db);
    }
    ctl_restore rs = { .s = s };
    rc = ctl_snap_into(&rs, file);
    kura_store_state st = { 0 };
    s->ops->load_state(s, &st);
    if (rs.max_cas > st.max_cas)
        st.max_cas = rs.max_cas;
    st.ulog_ts = info.start_ts;     /* kurad replays its update log from here */
    int src = rc ? CTL_OK : s->ops->save_state(s, &st);
    if (!rc && !src)
        src = s->ops->sync(s);
    kura_store_close(s);
    if (rc)
        return rc;
    if (src)
        return ctl_err(CTL_FAIL, "%s: %s", db, kura_strerror(src));
    printf("restored %" PRIu64 " items into %s (%" PRIu64 " already expired, skipped); update "
           "log watermark %" PRIu64 "\n", rs.items, db, rs.expired, info.start_ts);
    return CTL_OK;
}
