/*
 * ctl_check.c - "kuractl check DB [--repair]": every record and structure
 * of a stopped database verified, and a damaged one rebuilt.
 *
 * The check is the backend's (include/kura/storecheck.h): for the hash
 * file every segment is read record by record and the index compared with
 * the records (hashdb_check); for the B+ tree the structure check
 * (btree_debug_check: pages, order, depth, counts, free space) and then a
 * walk reading every item's value, overflow pages included.  A database
 * too damaged to open is reported as damage too; a hash file is then
 * opened again with its recovery (read-only: nothing is written) so the
 * rest can still be checked.
 *
 * --repair never edits the damaged files in place: it copies every item
 * that reads back intact (the hash file opened with its own recovery,
 * which skips damaged records and regions) into a fresh database beside
 * it, with the stored state (max cas, flush watermark, update-log
 * watermark), checks the copy, then renames the old database aside
 * (NAME.damaged-YYYYmmdd-HHMMSS) and the copy into its place.  Items
 * whose only intact record is older than a damaged newer one come back in
 * their older version, as the backend's own recovery would bring them.
 */
#include <errno.h>
#include <fcntl.h>
#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include "kura/storecheck.h"
#include "ctl.h"

typedef struct check_ctx {
    uint64_t problems;
    ctl_progress prog;
} check_ctx;

static void on_damage(void *arg, const char *line)
{
    check_ctx *c = arg;
    if (c->prog.drawn && c->prog.tty)
        fputc('\n', stderr);
    printf("damage: %s\n", line);
    fflush(stdout);
    c->problems++;
}

static void on_progress(void *arg, uint64_t done, uint64_t total)
{
    check_ctx *c = arg;
    c->prog.total = total;
    progress_set(&c->prog, done);
}

typedef struct walk {
    uint64_t items;
    check_ctx *c;
} walk;

static int count_item(void *arg, const kura_item *it)
{
    walk *w = arg;
    (void)it;
    progress_set(&w->c->prog, ++w->items);
    return 0;
}

/* Checks an open store; problems counted in c. */
static int check_store(kura_store *s, check_ctx *c)
{
    kura_store_usage u;
    s->ops->usage(s, &u);
    if (strcmp(s->ops->name, "hash") == 0) {
        kura_check_report r;
        kura_check_cb cb = { on_damage, on_progress, c };
        progress_start(&c->prog, "check", "bytes", 0);
        int rc = hashdb_check(s, &r, &cb);
        progress_end(&c->prog);
        printf("segments %" PRIu64 ", %" PRIu64 " bytes read\n", r.segments, r.bytes);
        printf("records %" PRIu64 " intact (%" PRIu64 " item versions, %" PRIu64
               " deletions), %" PRIu64 " damaged (%" PRIu64 " bytes)\n", r.records, r.puts,
               r.dels, r.damaged, r.damaged_bytes);
        printf("index %" PRIu64 " entries checked, %" PRIu64 " disagree with the records\n",
               r.entries, r.index_bad);
        if (rc)
            return ctl_err(CTL_FAIL, "the check stopped: %s", kura_strerror(rc));
    } else if (strcmp(s->ops->name, "tree") == 0) {
        char err[1024];
        uint64_t leaked = 0;
        int rc = btree_debug_check(s, &leaked, err, sizeof(err));
        if (rc == KURA_ENOMEM)
            return ctl_err(CTL_FAIL, "the check stopped: out of memory");
        if (rc)
            on_damage(c, err);
        if (rc)
            printf("structure damaged\n");
        else
            printf("structure ok; %" PRIu64 " pages neither reachable nor free (leaked, "
                   "harmless)\n", leaked);
        /* every value read back: overflow pages are checked only so */
        walk w = { .c = c };
        progress_start(&c->prog, "check", "items", u.curr_items);
        rc = s->ops->iterate(s, &(kura_iter_spec){ .scope = KURA_ITER_ALL }, NULL, count_item, &w);
        progress_end(&c->prog);
        if (rc) {
            char line[200];
            snprintf(line, sizeof(line), "reading the items: %s (the lines above name the "
                     "pages)", kura_strerror(rc));
            on_damage(c, line);
        } else if (w.items != u.curr_items) {
            char line[200];
            snprintf(line, sizeof(line), "%" PRIu64 " items read, %" PRIu64 " counted",
                     w.items, u.curr_items);
            on_damage(c, line);
        }
        printf("items %" PRIu64 " read back\n", w.items);
    } else {
        return ctl_err(CTL_USAGE, "no check for the %s backend", s->ops->name);
    }
    printf("items %" PRIu64 ", %" PRIu64 " bytes\n", u.curr_items, u.bytes);
    return CTL_OK;
}

/* ---- repair ------------------------------------------------------------------ */

typedef struct copy {
    kura_store *dst;
    kura_clock clk;
    uint64_t items, max_cas;
    int err;
    ctl_progress prog;
} copy;

static int copy_item(void *arg, const kura_item *it)
{
    copy *c = arg;
    int rc = kura_store_put(c->dst, it, KURA_PUT_ANY, 0, &c->clk);
    if (rc) {
        c->err = rc;
        return rc;
    }
    if (it->cas > c->max_cas)
        c->max_cas = it->cas;
    progress_set(&c->prog, ++c->items);
    return 0;
}

/* name "dir/x.kh#p=1" -> "dir/x.<tag>.kh#p=1" (the suffix picks the backend) */
static void sibling(const char *name, const char *tag, char *out, size_t len)
{
    size_t plen = strcspn(name, "#");
    const char *dot = NULL;
    for (size_t i = 0; i < plen; i++)
        if (name[i] == '.')
            dot = name + i;
        else if (name[i] == '/')
            dot = NULL;
    size_t stem = dot ? (size_t)(dot - name) : plen;
    snprintf(out, len, "%.*s.%s%s", (int)stem, name, tag, name + stem);
}

static void path_of(const char *name, char *out, size_t len)
{
    snprintf(out, len, "%.*s", (int)strcspn(name, "#"), name);
}

static int fsync_parent(const char *path)
{
    char dir[4096];
    snprintf(dir, sizeof(dir), "%s", path);
    char *slash = strrchr(dir, '/');
    if (slash == dir)
        dir[1] = '\0';
    else if (slash)
        *slash = '\0';
    else
        snprintf(dir, sizeof(dir), ".");
    int fd = open(dir, O_RDONLY | O_DIRECTORY | O_CLOEXEC);
    int rc = fd >= 0 && fsync(fd) == 0 ? 0 : -1;
    if (fd >= 0)
        close(fd);
    return rc;
}

static int repair(const char *name)
{
    char tmpname[4300], tmppath[4300], path[4096], aside[4400], tag[64];
    kura_store *src, *dst;
    snprintf(tag, sizeof(tag), "repair-%ld", (long)getpid());
    sibling(name, tag, tmpname, sizeof(tmpname));
    path_of(tmpname, tmppath, sizeof(tmppath));
    path_of(name, path, sizeof(path));
    if (ctl_db_exists(tmpname))
        return ctl_err(CTL_FAIL, "%s exists already: remove it first", tmppath);
    int rc = ctl_db_open(name, true, true, &src);
    if (rc)
        return rc == CTL_DIFF ? CTL_FAIL : rc;
    if ((rc = ctl_db_open(tmpname, false, false, &dst))) {
        kura_store_close(src);
        return rc;
    }
    copy c = { .dst = dst, .clk = ctl_db_clock(src) };
    kura_store_usage u;
    src->ops->usage(src, &u);
    progress_start(&c.prog, "repair", "items", u.curr_items);
    int irc = src->ops->iterate(src, &(kura_iter_spec){ .scope = KURA_ITER_ALL }, &c.clk, copy_item, &c);
    progress_end(&c.prog);
    kura_store_state st = { 0 };
    src->ops->load_state(src, &st);
    if (c.max_cas > st.max_cas)
        st.max_cas = c.max_cas;
    kura_store_close(src);
    if (c.err) {
        kura_store_close(dst);
        return ctl_err(CTL_FAIL, "repair: writing %s: %s (the damaged database is untouched; "
                       "remove %s)", tmppath, kura_strerror(c.err), tmppath);
    }
    if (irc)
        printf("repair: the walk over the items stopped at damage (%s): items past it are "
               "lost\n", kura_strerror(irc));
    if ((rc = dst->ops->save_state(dst, &st)) || (rc = dst->ops->sync(dst))) {
        kura_store_close(dst);
        return ctl_err(CTL_FAIL, "repair: %s: %s (the damaged database is untouched)", tmppath,
                       kura_strerror(rc));
    }
    kura_store_close(dst);
    time_t t = time(NULL);
    struct tm tm;
    char when[32];
    gmtime_r(&t, &tm);
    strftime(when, sizeof(when), "%Y%m%d-%H%M%S", &tm);
    snprintf(aside, sizeof(aside), "%s.damaged-%s", path, when);
    if (rename(path, aside) != 0)
        return ctl_err(CTL_FAIL, "repair: cannot rename %s to %s: %s (the copy is in %s)", path,
                       aside, strerror(errno), tmppath);
    if (rename(tmppath, path) != 0 || fsync_parent(path) != 0)
        return ctl_err(CTL_FAIL, "repair: cannot rename %s to %s: %s (the old database is %s)",
                       tmppath, path, strerror(errno), aside);
    printf("repaired: %" PRIu64 " items copied into a new %s; the damaged one is now %s\n",
           c.items, path, aside);
    return CTL_OK;
}

/* What the backend reported while opening the database (a damaged
 * checkpoint, records its recovery skipped): damage found by the check.
 * Except the tail a crash leaves (bytes written after the last completed
 * sync, never acknowledged: seglog's cut), which is no damage: the server
 * cuts it at its next start and loses nothing it acknowledged. */
static check_ctx *open_ctx;
static void open_error(const char *line)
{
    if (strstr(line, "after the last completed sync") ||
        strstr(line, "never acknowledged as durable")) {
        printf("crash tail (not damage): %s\n", line);
        return;
    }
    on_damage(open_ctx, line);
}

int cmd_check(int argc, char **argv)
{
    ctl_args a;
    static const ctl_optdef defs[] = { { "--repair", false }, { NULL, false } };
    int rc = ctl_parse(&a, "check", argc, argv, defs);
    if (rc)
        return rc;
    if (a.npos != 1)
        return ctl_usage(&a, "expected one DB");
    check_ctx c = { 0 };
    kura_store *s;
    open_ctx = &c;
    ctl_store_error_hook = open_error;
    rc = ctl_db_open(a.pos[0], true, false, &s);
    if (rc == CTL_DIFF) {
        /* too damaged to open as it is: the damage is the finding; the
         * backend's recovery (read-only) lets the rest be checked */
        c.problems++;
        rc = ctl_db_open(a.pos[0], true, true, &s);
        if (rc == CTL_DIFF)
            rc = CTL_OK, s = NULL;
    }
    ctl_store_error_hook = NULL;
    if (rc)
        return rc;
    if (s) {
        printf("checking %s (%s)\n", a.pos[0], s->ops->name);
        rc = check_store(s, &c);
        kura_store_close(s);
        if (rc)
            return rc;
    }
    if (!c.problems) {
        printf("ok: no damage found\n");
        return CTL_OK;
    }
    printf("damaged: %" PRIu64 " problems found\n", c.problems);
    if (!ctl_has(&a, "--repair"))
        return CTL_DIFF;
    fflush(stdout);
    rc = repair(a.pos[0]);
    if (rc)
        return rc;
    /* the copy checked as the original was */
    check_ctx again = { 0 };
    if ((rc = ctl_db_open(a.pos[0], true, false, &s)))
        return ctl_err(CTL_FAIL, "the repaired database does not open");
    rc = check_store(s, &again);
    kura_store_close(s);
    if (rc || again.problems)
        return ctl_err(CTL_FAIL, "the repaired database still fails its check");
    printf("the repaired database checks clean\n");
    return CTL_DIFF;
}
