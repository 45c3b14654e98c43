/*
 * tree_salvage.c - opening a damaged B+ tree with -recover
 * (docs/formats.md, "Salvage").
 *
 * A tree whose pages fail their checks (a flipped bit, both meta pages
 * torn) is rebuilt rather than repaired in place: the damaged file is set
 * aside as `tree.damaged`, a fresh `tree` is created, every leaf page of
 * the damaged file that passes its checks gives its cells (with their
 * overflow runs, checked too), and then the write-ahead log is replayed
 * over the result as at any open.  Why every leaf page, not only those
 * the root reaches: a damaged branch or meta page would otherwise lose
 * whole subtrees, while copy-on-write leaves older copies of leaves in
 * the file.  Where two pages hold the same key, the cell with the larger
 * cas wins (cas values only grow), so an older copy never replaces a
 * newer one; a key deleted since may come back from an older copy, as
 * with the hash file's salvage (logged, and said in formats.md).
 *
 * Crash safety: the damaged file is only renamed (never written), the
 * fresh tree is checkpointed with its log position at the log's start
 * (so the replay that follows covers every record), and `tree.damaged`
 * is renamed to `tree.salvaged` only once the result is durable.  A
 * salvage cut short leaves `tree.damaged`: a plain open then refuses (the
 * partial tree is not to be served), and the next -recover starts over.
 */
#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

#include "kura/crc32c.h"
#include "tree_int.h"

#define DAMAGED "tree.damaged"
#define SALVAGED "tree.salvaged"

static bool exists(btree *bt, const char *name)
{
    struct stat st;
    return fstatat(bt->dirfd, name, &st, 0) == 0;
}

/* The page size of the damaged file: from a meta slot that checks, else
 * the size at which most pages check. */
static size_t damaged_psiz(btree *bt, int fd)
{
    unsigned char m[512];
    for (int slot = 0; slot < 2; slot++) {
        if (bt->io->pread(bt->io, fd, m, sizeof(m), (off_t)slot * 4096) == (ssize_t)sizeof(m) &&
            bt_get32(m) == crc32c_update(0, m + 4, sizeof(m) - 4) && m[4] == BT_META &&
            memcmp(m + 8, BT_META_MAGIC, 8) == 0) {
            size_t ps = bt_get32(m + 20);
            if (ps >= 4096 && ps <= 32768 && !(ps & (ps - 1)))
                return ps;
        }
    }
    size_t best = bt->psiz;
    int best_ok = 0;
    unsigned char *pg = malloc(32768);
    for (size_t ps = 4096; pg && ps <= 32768; ps *= 2) {
        int ok = 0;
        for (uint64_t pgno = 2; pgno < 66; pgno++)
            if (bt->io->pread(bt->io, fd, pg, ps, (off_t)(pgno * ps)) == (ssize_t)ps &&
                pg_verify(pg, ps, pgno, 0) == KURA_OK)
                ok++;
        if (ok > best_ok) {
            best_ok = ok;
            best = ps;
        }
    }
    free(pg);
    return best;
}

int bt_salvage_begin(btree *bt, bool *salvage, char *err, size_t errlen)
{
    *salvage = false;
    bool interrupted = exists(bt, DAMAGED);
    if (!bt->cfg.recover) {
        if (interrupted) {
            snprintf(err, errlen, "%s: a salvage (-recover) was cut short (%s is there): "
                     "open with -recover to finish it", bt->dir, DAMAGED);
            return KURA_ECORRUPT;
        }
        return KURA_OK;
    }
    if (bt->cfg.read_only) {
        /* a read-only open cannot rebuild: it reads what it can, as a
         * plain one (kuractl check --repair copies what reads back) */
        if (interrupted) {
            snprintf(err, errlen, "%s: a salvage (-recover) was cut short (%s is there): "
                     "open with -recover, not read-only, to finish it", bt->dir, DAMAGED);
            return KURA_ECORRUPT;
        }
        return KURA_OK;
    }
    const kura_io *io = bt->io;
    if (interrupted) {
        /* the partial tree of a salvage cut short: built again */
        if (io->unlinkat(io, bt->dirfd, "tree", 0) != 0 && errno != ENOENT)
            goto syserr;
    } else if (exists(bt, "tree")) {
        if (io->renameat(io, bt->dirfd, "tree", bt->dirfd, DAMAGED) != 0)
            goto syserr;
    } else {
        return KURA_OK;                 /* nothing to salvage: a new tree */
    }
    if (io->fsync(io, bt->dirfd) != 0)
        goto syserr;
    int fd = io->open(io, bt->dirfd, DAMAGED, O_RDONLY | O_CLOEXEC, 0);
    if (fd < 0)
        goto syserr;
    size_t ps = damaged_psiz(bt, fd);
    io->close(io, fd);
    if (bt->psiz != ps && bt->psiz_given)
        bt_log(bt, KURA_LOG_INFO, "%s: psiz=%zu ignored: the damaged file's pages are %zu bytes",
               bt->dir, bt->psiz, ps);
    bt->psiz = ps;                      /* the runs are read and written in its pages */
    *salvage = true;
    return KURA_OK;
syserr:
    snprintf(err, errlen, "%s: cannot set the damaged tree aside: %s", bt->dir, strerror(errno));
    return sl_errno_status(errno);
}

/* One cell of a damaged leaf into the fresh tree, unless a cell of the
 * same key with a cas at least as large is there: 1 stored, 0 not, or an
 * error of the fresh tree (a full disk). */
static int do_salvage_cell(btree *bt, int fd, uint64_t npages, const bt_cell *c, uint64_t *lost)
{
    bt_path path;
    int rc = do_reserve(bt, 2 * (size_t)bt->height + 8);
    if (rc == KURA_OK)
        rc = do_descend(bt, c->key, c->klen, &path);
    if (rc)
        return rc;
    if (path.found) {
        bt_cell have;
        int lvl = path.depth - 1;
        pg_leaf_decode(pg_ccell(path.pg[lvl]->data, (unsigned)path.idx[lvl]), &have);
        if (have.cas >= c->cas) {
            do_path_release(bt, &path);
            return 0;
        }
    }
    const unsigned char *val = c->val;
    if (c->ovf && do_ovf_read_fd(bt, fd, npages, c, &val) != KURA_OK) {
        (*lost)++;                      /* its run is damaged: the key is lost */
        do_path_release(bt, &path);
        return 0;
    }
    rc = do_apply_put(bt, &path, c->key, c->klen, c->flags, c->exptime, c->cas, val, c->vlen,
                      NULL, 0, NULL);
    do_path_release(bt, &path);
    return rc ? rc : 1;
}

int do_salvage_load(btree *bt, char *err, size_t errlen)
{
    const kura_io *io = bt->io;
    int fd = io->open(io, bt->dirfd, DAMAGED, O_RDONLY | O_CLOEXEC, 0);
    struct stat st;
    if (fd < 0 || fstat(fd, &st) != 0) {
        snprintf(err, errlen, "%s/%s: %s", bt->dir, DAMAGED, strerror(errno));
        if (fd >= 0)
            io->close(io, fd);
        return sl_errno_status(errno);
    }
    /* rounded up: a compressed page at the file's end ends before its slot */
    uint64_t npages = ((uint64_t)st.st_size + bt->psiz - 1) / bt->psiz, leaves = 0, bad = 0,
             items = 0, lost = 0;
    unsigned char *pg = malloc(bt->psiz);
    int rc = pg ? KURA_OK : KURA_ENOMEM;
    /* checkpoints say "replay from the log's start": every record then
     * goes over what the pages gave */
    bt->replaying = true;
    bt->wal_at_seg = bt->ckpt_seg;
    bt->wal_at_off = bt->ckpt_off;
    for (uint64_t pgno = 2; pgno < npages && rc == KURA_OK; pgno++) {
        int lr = bt_page_load(bt, fd, pgno, 0, pg);   /* decompressed if it was */
        if (lr == KURA_EIO) {
            bad++;
            continue;
        }
        if (lr != KURA_OK) {
            /* a page header naming this page, that fails: a damaged page
             * (an overflow run's later pages and unused ones have none) */
            if ((pg_type(pg) == BT_LEAF || pg_type(pg) == BT_BRANCH) && bt_get64(pg + 8) == pgno)
                bad++;
            continue;
        }
        if (pg_type(pg) != BT_LEAF)
            continue;
        leaves++;
        for (unsigned i = 0; i < pg_n(pg) && rc == KURA_OK; i++) {
            bt_cell c;
            pg_leaf_decode(pg_ccell(pg, i), &c);
            int r = do_salvage_cell(bt, fd, npages, &c, &lost);
            if (r < 0)
                rc = r;
            else
                items += (uint64_t)r;
        }
        if (rc == KURA_OK && bt->ndirty >= bt->cap / 2)
            rc = do_checkpoint(bt);
    }
    if (rc == KURA_OK)
        rc = do_checkpoint(bt);
    bt->replaying = false;
    free(pg);
    /* kept for the log's replay: RUN records name runs of this file */
    bt->salvage_fd = fd;
    bt->salvage_npages = npages;
    if (rc) {
        snprintf(err, errlen, "%s: salvage: %s", bt->dir, kura_strerror(rc));
        return rc;
    }
    bt_log(bt, KURA_LOG_INFO, "%s: salvaged %llu items from %llu intact leaf pages of %s; "
           "%llu damaged pages, %llu values with a damaged run lost; keys deleted since an "
           "older copy of their leaf may be back", bt->dir, (unsigned long long)items,
           (unsigned long long)leaves, DAMAGED, (unsigned long long)bad,
           (unsigned long long)lost);
    return KURA_OK;
}

int bt_salvage_end(btree *bt)
{
    const kura_io *io = bt->io;
    if (io->renameat(io, bt->dirfd, DAMAGED, bt->dirfd, SALVAGED) != 0 ||
        io->fsync(io, bt->dirfd) != 0) {
        bt_log(bt, KURA_LOG_ERROR, "%s: cannot rename %s to %s: %s", bt->dir, DAMAGED,
               SALVAGED, strerror(errno));
        return sl_errno_status(errno);
    }
    return KURA_OK;
}
