/*
 * ctl_dump.c - "kuractl dump" and "kuractl load": a stopped database's live
 * items out to a file, and a file's items into a database.
 *
 * Two formats.  "kura" is the snapshot file (include/kura/snapshot.h,
 * ctl_snap.c): compressed, checked end to end, every field kept (flags,
 * exptime, cas).  "memcached" is the text protocol's set commands,
 *     set KEY FLAGS EXPTIME BYTES\r\nVALUE\r\n
 * which `nc HOST 11211 < FILE` feeds to any memcached; it keeps flags and
 * the expiry time (absolute Unix time, which memcached reads as such) but
 * not the cas: a loaded item gets a new one.  A key the text protocol
 * cannot carry (a space or control byte, stored through the binary
 * protocol) is left out of a memcached dump and counted (exit 4).
 *
 * load detects the format by the first bytes (the snapshot's magic).
 * Items already expired are skipped.  The database's stored max cas is
 * raised past every cas loaded, so the server never hands one out again,
 * and its update-log watermark says "changed without the log" (what a
 * kurad run without -ulog leaves): no log is replayed over loaded items.
 */
#include <errno.h>
#include <stdbool.h>
#include <limits.h>
#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <time.h>

#include "kura/snapshot.h"
#include "ctl.h"

/* ctl_snap.c: the kura format's two ends */
int ctl_dump_kura(kura_store *s, const char *path, const char *codec, uint64_t *items);
int ctl_load_kura(const char *path, int (*put)(void *arg, kura_item *it), void *arg,
                  ctl_progress *prog);

typedef struct mc_dump {
    FILE *f;
    uint64_t items, skipped;
    int err;
    ctl_progress prog;
} mc_dump;

static bool text_key(const char *k, size_t n)
{
    for (size_t i = 0; i < n; i++)
        if ((unsigned char)k[i] <= ' ' || k[i] == 0x7f)
            return false;
    return n > 0;
}

static int mc_item(void *arg, const kura_item *it)
{
    mc_dump *d = arg;
    if (!text_key(it->key, it->klen)) {
        d->skipped++;
        return 0;
    }
    if (fprintf(d->f, "set %.*s %" PRIu32 " %" PRId64 " %zu\r\n", (int)it->klen, it->key,
                it->flags, it->exptime, it->vlen) < 0 ||
        fwrite(it->val, 1, it->vlen, d->f) != it->vlen || fwrite("\r\n", 1, 2, d->f) != 2) {
        d->err = errno ? errno : EIO;
        return 1;
    }
    progress_set(&d->prog, ++d->items);
    return 0;
}

int cmd_dump(int argc, char **argv)
{
    ctl_args a;
    static const ctl_optdef defs[] = { { "-o", true }, { "--format", true },
                                       { "--codec", true }, { NULL, false } };
    int rc = ctl_parse(&a, "dump", argc, argv, defs);
    if (rc)
        return rc;
    if (a.npos != 1)
        return ctl_usage(&a, "expected one DB");
    const char *out = ctl_opt(&a, "-o");
    const char *fmt = ctl_opt(&a, "--format");
    if (out && strcmp(out, "-") == 0)
        out = NULL;
    if (!fmt)
        fmt = out && ctl_have_snap() ? "kura" : "memcached";
    if (strcmp(fmt, "kura") != 0 && strcmp(fmt, "memcached") != 0)
        return ctl_usage(&a, "--format is kura or memcached, not '%s'", fmt);
    bool kura = strcmp(fmt, "kura") == 0;
    if (kura && !out)
        return ctl_usage(&a, "the kura format is written to a file (-o FILE): it is written "
                         "beside it and renamed into place");
    if (kura && !ctl_have_snap())
        return ctl_err(CTL_FAIL, "the kura format needs the snapshot module, not in this build "
                       "(use --format memcached)");
    if (!kura && ctl_has(&a, "--codec"))
        return ctl_usage(&a, "--codec is for the kura format");
    kura_store *s;
    if ((rc = ctl_db_open(a.pos[0], true, false, &s)))
        return rc;
    uint64_t items = 0;
    if (kura) {
        rc = ctl_dump_kura(s, out, ctl_opt(&a, "--codec"), &items);
        kura_store_close(s);
        if (rc == CTL_OK && !g_ctl.quiet)
            fprintf(stderr, "kuractl: dumped %" PRIu64 " items to %s (kura format)\n", items, out);
        return rc;
    }
    mc_dump d = { .f = stdout };
    if (out && !(d.f = fopen(out, "w"))) {
        kura_store_close(s);
        return ctl_err(CTL_UNREACHABLE, "%s: %s", out, strerror(errno));
    }
    kura_store_usage u;
    s->ops->usage(s, &u);
    kura_clock clk = ctl_db_clock(s);
    progress_start(&d.prog, "dump", "items", u.curr_items);
    errno = 0;
    int irc = s->ops->iterate(s, &(kura_iter_spec){ .scope = KURA_ITER_ALL }, &clk, mc_item, &d);
    progress_end(&d.prog);
    kura_store_close(s);
    if (fflush(d.f) != 0 && !d.err)
        d.err = errno;
    if (out && fclose(d.f) != 0 && !d.err)
        d.err = errno;
    if (d.err)
        return ctl_err(CTL_FAIL, "writing %s: %s", out ? out : "stdout", strerror(d.err));
    if (irc < 0)
        return ctl_err(CTL_FAIL, "reading the database: %s (the dump is incomplete; "
                       "kuractl check)", kura_strerror(irc));
    if (!g_ctl.quiet)
        fprintf(stderr, "kuractl: dumped %" PRIu64 " items%s%s (memcached format: the cas is "
                "not kept)\n", d.items, out ? " to " : "", out ? out : "");
    if (d.skipped)
        return ctl_err(CTL_FAIL, "%" PRIu64 " keys left out: the text protocol cannot carry "
                       "them (spaces or control bytes; use --format kura)", d.skipped);
    return CTL_OK;
}

/* ---- load ------------------------------------------------------------------ */

typedef ctl_loader loader;

static int load_put(void *arg, kura_item *it);

void ctl_loader_start(ctl_loader *l, kura_store *s)
{
    memset(l, 0, sizeof(*l));
    l->s = s;
    l->clk = ctl_db_clock(s);
    s->ops->load_state(s, &l->st);
    l->next_cas = l->st.max_cas;
}

int ctl_loader_put(ctl_loader *l, kura_item *it)
{
    return load_put(l, it);
}

int ctl_loader_store(ctl_loader *l, kura_item *it)
{
    if (it->exptime != 0 && it->exptime <= l->clk.now) {
        l->expired++;
        return KURA_OK;
    }
    if (!it->cas)
        it->cas = ++l->next_cas;
    int rc = kura_store_put(l->s, it, KURA_PUT_ANY, 0, &l->clk);
    if (rc)
        return rc;
    if (it->cas > l->max_cas)
        l->max_cas = it->cas;
    progress_set(&l->prog, ++l->items);
    return KURA_OK;
}

/* Stores one item (its cas as given, or a new one if 0). */
static int load_put(void *arg, kura_item *it)
{
    int rc = ctl_loader_store(arg, it);
    if (rc)
        return ctl_err(CTL_FAIL, "storing '%.*s': %s", (int)it->klen, it->key, kura_strerror(rc));
    return CTL_OK;
}

/* memcached's relative expiry (up to 30 days) as absolute time */
static int64_t abs_exptime(int64_t e, int64_t now)
{
    return e > 0 && e <= 60 * 60 * 24 * 30 ? now + e : e < 0 ? now : e;
}

/* The largest value a dump may hold: the item size limit kuractl opens
 * databases with (ctl_db.c). */
#define LOAD_VALUE_MAX (1 << 30)

/* A decimal of digits only, no sign (sscanf's %llu takes "-1" as 2^64-1),
 * that fits in 64 bits. */
static bool digits_u64(const char *s, uint64_t *out)
{
    uint64_t v = 0;
    if (!*s)
        return false;
    for (; *s; s++) {
        if (*s < '0' || *s > '9' || v > (UINT64_MAX - (uint64_t)(*s - '0')) / 10)
            return false;
        v = v * 10 + (uint64_t)(*s - '0');
    }
    *out = v;
    return true;
}

/* sscanf's width for a key: one byte past KURA_KEY_MAX, so that a longer
 * one is seen as too long rather than cut. */
#define KEY_SCAN "4097"
_Static_assert(KURA_KEY_MAX == 4096, "KEY_SCAN is KURA_KEY_MAX + 1");

/* An exptime: digits with an optional leading minus (memcached's
 * "already expired"), within 64 bits. */
static bool parse_exptime(const char *s, long long *out)
{
    uint64_t v;
    bool neg = *s == '-';
    if (!digits_u64(s + neg, &v) || v > (uint64_t)LLONG_MAX)
        return false;
    *out = neg ? -(long long)v : (long long)v;
    return true;
}

static int load_memcached(loader *l, FILE *f, const char *name)
{
    char *line = NULL, *val = NULL;
    size_t cap = 0, vcap = 0;
    ssize_t n;
    uint64_t lineno = 0;
    int rc = CTL_OK;
    while ((n = getline(&line, &cap, f)) > 0) {
        lineno++;
        while (n > 0 && (line[n - 1] == '\n' || line[n - 1] == '\r'))
            line[--n] = '\0';
        if (n == 0)
            continue;
        char cmd[16], key[KURA_KEY_MAX + 2], fl[24], ex[24], by[24];
        uint64_t flags, bytes;
        long long exptime;
        int end = 0;
        /* "delete KEY": a replica's saved rows (docs/replication.md) hold
         * deletes too */
        if (sscanf(line, "%15s %" KEY_SCAN "s%n", cmd, key, &end) == 2 && strcmp(cmd, "delete") == 0 &&
            strlen(key) <= KURA_KEY_MAX && (!line[end] || strcmp(line + end, " noreply") == 0)) {
            int drc = kura_store_del(l->s, key, strlen(key), 0, &l->clk);
            if (drc && drc != KURA_NOTFOUND) {
                rc = ctl_err(CTL_FAIL, "deleting '%s': %s", key, kura_strerror(drc));
                break;
            }
            l->deleted += drc == KURA_OK;
            continue;
        }
        end = 0;
        if (sscanf(line, "%15s %" KEY_SCAN "s %23s %23s %23s%n", cmd, key, fl, ex, by, &end) != 5 ||
            strcmp(cmd, "set") != 0 || strlen(key) > KURA_KEY_MAX ||
            !digits_u64(fl, &flags) || flags > UINT32_MAX || !parse_exptime(ex, &exptime) ||
            !digits_u64(by, &bytes) || (line[end] && strcmp(line + end, " noreply") != 0)) {
            rc = ctl_err(CTL_FAIL, "%s line %" PRIu64 ": not 'set KEY FLAGS EXPTIME BYTES' "
                         "or 'delete KEY': %.80s",
                         name, lineno, line);
            break;
        }
        if (bytes > LOAD_VALUE_MAX) {
            rc = ctl_err(CTL_FAIL, "%s line %" PRIu64 ": a value of %" PRIu64 " bytes is past "
                         "the largest item (%d bytes)", name, lineno, bytes, LOAD_VALUE_MAX);
            break;
        }
        if (bytes + 2 > vcap) {
            char *nv = realloc(val, bytes + 2);
            if (!nv) {
                rc = ctl_err(CTL_FAIL, "out of memory for a value of %" PRIu64 " bytes", bytes);
                break;
            }
            val = nv;
            vcap = bytes + 2;
        }
        if (fread(val, 1, bytes + 2, f) != bytes + 2 || val[bytes] != '\r' ||
            val[bytes + 1] != '\n') {
            rc = ctl_err(CTL_FAIL, "%s line %" PRIu64 ": the value of '%s' is cut short or not "
                         "ended by CRLF", name, lineno, key);
            break;
        }
        lineno++;                       /* the value's line: messages name the file's lines */
        kura_item it = { .key = key, .klen = strlen(key), .val = val, .vlen = bytes,
                         .flags = (uint32_t)flags,
                         .exptime = abs_exptime(exptime, l->clk.now) };
        if ((rc = load_put(l, &it)))
            break;
    }
    if (!rc && ferror(f))
        rc = ctl_err(CTL_UNREACHABLE, "reading %s: %s", name, strerror(errno));
    free(line);
    free(val);
    return rc;
}

/* A stream that reads pre[0..n) and then f (closing it closes f, unless
 * f is stdin): fopencookie, so getline and fread work on it as on f. */
typedef struct pre_rd {
    char pre[8];
    size_t pos, len;
    FILE *f;
} pre_rd;

static ssize_t pre_read(void *cookie, char *buf, size_t size)
{
    pre_rd *r = cookie;
    if (r->pos < r->len) {
        size_t k = r->len - r->pos < size ? r->len - r->pos : size;
        memcpy(buf, r->pre + r->pos, k);
        r->pos += k;
        return (ssize_t)k;
    }
    size_t got = fread(buf, 1, size, r->f);
    return got == 0 && ferror(r->f) ? -1 : (ssize_t)got;
}

static int pre_close(void *cookie)
{
    pre_rd *r = cookie;
    int rc = r->f == stdin ? 0 : fclose(r->f);
    free(r);
    return rc;
}

static FILE *prefixed(const char *pre, size_t n, FILE *f)
{
    pre_rd *r = calloc(1, sizeof(*r));
    if (!r)
        return NULL;
    memcpy(r->pre, pre, n);
    r->len = n;
    r->f = f;
    cookie_io_functions_t io = { .read = pre_read, .close = pre_close };
    FILE *pf = fopencookie(r, "r", io);
    if (!pf)
        free(r);
    return pf;
}

int ctl_loader_finish(ctl_loader *l)
{
    kura_store *s = l->s;
    kura_store_state st = l->st;
    int rc;
    if (l->max_cas > st.max_cas)
        st.max_cas = l->max_cas;
    /* the store changed without its update log, as under a kurad run
     * without -ulog (src/journal/attach.c): a log met later is not replayed over it and
     * its replicas get a full copy */
    st.ulog_ts = UINT64_MAX;
    if ((rc = s->ops->save_state(s, &st)))
        return ctl_err(CTL_FAIL, "saving the database's state: %s", kura_strerror(rc));
    if ((rc = s->ops->sync(s)))
        return ctl_err(CTL_FAIL, "syncing the database: %s", kura_strerror(rc));
    if (l->deleted && !g_ctl.quiet)
        fprintf(stderr, "kuractl: %" PRIu64 " items deleted by delete lines\n", l->deleted);
    if (l->expired && !g_ctl.quiet)
        fprintf(stderr, "kuractl: %" PRIu64 " items already expired, skipped\n", l->expired);
    return CTL_OK;
}

int ctl_load_file(kura_store *s, const char *path, uint64_t *items)
{
    bool from_stdin = strcmp(path, "-") == 0;
    FILE *f = from_stdin ? stdin : fopen(path, "rb");
    if (!f)
        return ctl_err(CTL_UNREACHABLE, "%s: %s", path, strerror(errno));
    char magic[8] = { 0 };
    size_t got = fread(magic, 1, sizeof(magic), f);
    bool is_snap = got == 8 && memcmp(magic, SNAP_MAGIC, 8) == 0;
    loader l;
    ctl_loader_start(&l, s);
    int rc;
    if (is_snap) {
        if (!from_stdin)
            fclose(f);
        if (from_stdin)
            return ctl_err(CTL_USAGE, "a kura-format file is loaded from its path, not stdin");
        if (!ctl_have_snap())
            return ctl_err(CTL_FAIL, "%s is in the kura format, which needs the snapshot "
                           "module, not in this build", path);
        rc = ctl_load_kura(path, load_put, &l, &l.prog);
    } else {
        /* the bytes read to look go back in front (stdin cannot rewind) */
        FILE *pf = prefixed(magic, got, f);
        if (!pf) {
            if (!from_stdin)
                fclose(f);
            return ctl_err(CTL_FAIL, "out of memory");
        }
        f = pf;
        progress_start(&l.prog, "load", "items", 0);
        rc = load_memcached(&l, f, from_stdin ? "stdin" : path);
        progress_end(&l.prog);
        fclose(f);          /* and the file under it */
    }
    if (rc || (rc = ctl_loader_finish(&l)))
        return rc;
    *items = l.items;
    return CTL_OK;
}

int cmd_load(int argc, char **argv)
{
    ctl_args a;
    int rc = ctl_parse(&a, "load", argc, argv, NULL);
    if (rc)
        return rc;
    if (a.npos != 2)
        return ctl_usage(&a, "expected DB FILE (FILE - is stdin)");
    if (strcmp(a.pos[1], "-") != 0) {
        struct stat st;
        if (stat(a.pos[1], &st) != 0)
            return ctl_err(CTL_UNREACHABLE, "%s: %s", a.pos[1], strerror(errno));
    }
    /* A load into a new database that fails leaves nothing: a half-made
     * database would start a server on part of the data.  Into an existing
     * one, the items before the failure stay (as a memcached fed the same
     * lines keeps them), and the message says where it stopped. */
    bool existed = ctl_db_exists(a.pos[0]);
    kura_store *s;
    if ((rc = ctl_db_open(a.pos[0], false, false, &s)))
        return rc;
    uint64_t items = 0;
    rc = ctl_load_file(s, a.pos[1], &items);
    kura_store_close(s);
    if (rc != CTL_OK && !existed) {
        if (ctl_db_remove(a.pos[0]) == 0)
            fprintf(stderr, "kuractl: %s removed: the load into it failed\n", a.pos[0]);
        else
            fprintf(stderr, "kuractl: %s is partly loaded and could not be removed: %s\n",
                    a.pos[0], strerror(errno));
    }
    if (rc == CTL_OK && !g_ctl.quiet)
        fprintf(stderr, "kuractl: loaded %" PRIu64 " items into %s\n", items, a.pos[0]);
    return rc;
}
