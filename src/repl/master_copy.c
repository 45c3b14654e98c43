/*
 * master_copy.c - the full copy that copy streams share (master_int.h).
 *
 * A copy is the store's items as PUT rows at the watermark W, spooled by a
 * thread of its own (engine_walk copies batches out of the store and calls
 * back with no store lock held; no network peer is waited for while the
 * copy is taken) to an unlinked file in the update log's directory, and
 * read by the copy streams behind the writer, on the loop thread.
 *
 * One spool at a time: a replica asking while one exists shares it (same
 * W: every stream reading it has acked W, so retention keeps the rows
 * after W for all of them), and it is deleted when its last reader is
 * done.  At most COPIES_MAX streams receive a copy at once.  The spool
 * never takes the room the update log needs: before it starts, the
 * directory's free space (statvfs) must hold the store's live size plus
 * a margin and cfg.spool_reserve (-ulim, the log's next file, plus 8 MB);
 * while it is written, it stops if the free space falls below the reserve.
 * A copy refused so is a refusal the replica sees, and retries with its
 * backoff; the master's own writes never meet ENOSPC because of a copy.
 */
#include <errno.h>
#include <fcntl.h>
#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/statvfs.h>
#include <unistd.h>

#include "kura/journal.h"
#include "master_int.h"

#define SPOOL_FLUSH (256 * 1024)        /* bytes encoded before a write */
#define SPOOL_CHECK (1ULL << 20)        /* bytes written between looks at the free space */
#define SPOOL_MARGIN (1ULL << 20)
#define SPOOL_ROW_HEAD 48               /* a row's bytes beyond its key and value, at most
                                           about (the store counts items as memcached does) */
#define PUMP_CHUNK (64 * 1024)

static uint64_t spool_dir_free(const char *dir)
{
    struct statvfs vs;
    if (statvfs(dir, &vs) != 0)
        return UINT64_MAX;              /* unknown: the writes' own errors stop it */
    return (uint64_t)vs.f_bavail * vs.f_frsize;
}

static const char *spool_dir(const repl_master *m)
{
    return m->cfg.tmpdir ? m->cfg.tmpdir : "/tmp";
}

typedef struct writer {
    spool *sp;
    unsigned char *buf;
    size_t len, cap;
    uint64_t checked;                   /* written at the last look at the free space */
    int err;                            /* errno of a failed write */
    bool no_room;
} writer;

static int writer_flush(writer *w)
{
    spool *sp = w->sp;
    repl_master *m = sp->m;
    uint64_t at = atomic_load(&sp->written);
    if (at - w->checked >= SPOOL_CHECK) {
        w->checked = at;
        if (spool_dir_free(spool_dir(m)) < m->cfg.spool_reserve) {
            w->no_room = true;
            return KURA_EIO;
        }
    }
    size_t off = 0;
    while (off < w->len) {
        ssize_t n = pwrite(sp->fd, w->buf + off, w->len - off, (off_t)(at + off));
        if (n < 0 && errno == EINTR)
            continue;
        if (n <= 0) {
            w->err = n < 0 ? errno : EIO;
            return KURA_EIO;
        }
        off += (size_t)n;
    }
    w->len = 0;
    atomic_store(&sp->written, at + off);
    loop_wake(m);                       /* its readers have more */
    return 0;
}

static int spool_batch(void *arg, const kura_item *items, size_t n)
{
    writer *w = arg;
    spool *sp = w->sp;
    if (atomic_load(&sp->cancel))
        return KURA_EIO;
    for (size_t i = 0; i < n; i++) {
        const kura_item *it = &items[i];
        ul_row r = {
            .type = UL_PUT, .ts = sp->start, .origin_ts = sp->start, .sid = sp->m->cfg.sid,
            .key = it->key, .klen = it->klen, .val = it->val, .vlen = it->vlen,
            .flags = it->flags, .exptime = it->exptime, .cas = it->cas,
        };
        if (repl_buf_row(&w->buf, &w->len, &w->cap, &r) != KURA_OK)
            return KURA_ENOMEM;
        sp->items++;
    }
    return w->len >= SPOOL_FLUSH ? writer_flush(w) : 0;
}

static void *spool_main(void *arg)
{
    spool *sp = arg;
    repl_master *m = sp->m;
    writer w = { .sp = sp };
    int rc = engine_walk(m->cfg.engine, spool_batch, &w);
    if (rc == 0 && w.len)
        rc = writer_flush(&w);
    free(w.buf);
    if (rc == 0) {
        logf_(m, KURA_LOG_INFO, "full copy at %" PRIu64 ": %" PRIu64 " items spooled (%" PRIu64
              " bytes)", sp->start, sp->items, atomic_load(&sp->written));
    } else if (!atomic_load(&sp->cancel)) {
        if (w.no_room)
            logf_(m, KURA_LOG_ERROR, "full copy abandoned: the free space in %s fell below "
                  "what the update log needs (%" PRIu64 " bytes)", spool_dir(m),
                  m->cfg.spool_reserve);
        else
            logf_(m, KURA_LOG_ERROR, "cannot spool the full copy in %s: %s", spool_dir(m),
                  w.err ? strerror(w.err) : kura_strerror(rc));
    }
    atomic_store(&sp->state, rc == 0 ? SPOOL_DONE : SPOOL_FAILED);
    loop_wake(m);
    return NULL;
}

static int spool_file(const char *dir)
{
    int fd = open(dir, O_TMPFILE | O_RDWR | O_CLOEXEC, 0600);
    if (fd < 0) {
        char path[4200];
        snprintf(path, sizeof(path), "%s/copy.XXXXXX", dir);
        fd = mkostemp(path, O_CLOEXEC);
        if (fd >= 0)
            unlink(path);
    }
    return fd;
}

spool *spool_get(repl_master *m, char *why, size_t whylen)
{
    spool *sp = m->spool;
    if (sp && atomic_load(&sp->state) != SPOOL_FAILED) {
        sp->users++;                    /* shared: its readers hold W in the log */
        return sp;
    }
    if (sp) {
        snprintf(why, whylen, "a full copy failed and its streams are ending; try again later");
        return NULL;
    }
    const char *dir = spool_dir(m);
    kura_store_usage u;
    engine_usage(m->cfg.engine, &u);
    uint64_t need = u.bytes + u.curr_items * SPOOL_ROW_HEAD + SPOOL_MARGIN;
    uint64_t room = spool_dir_free(dir);
    if (room < need + m->cfg.spool_reserve) {
        snprintf(why, whylen, "no room for a full copy in %s (needs %" PRIu64 " bytes, %" PRIu64
                 " free)", dir, need + m->cfg.spool_reserve, room);
        return NULL;
    }
    sp = calloc(1, sizeof(*sp));
    if (!sp) {
        snprintf(why, whylen, "out of memory");
        return NULL;
    }
    sp->m = m;
    sp->fd = spool_file(dir);
    if (sp->fd < 0) {
        snprintf(why, whylen, "cannot create a full copy's spool file in %s: %s", dir,
                 strerror(errno));
        free(sp);
        return NULL;
    }
    sp->start = journal_applied_ts(engine_journal(m->cfg.engine));
    sp->users = 1;
    int err = pthread_create(&sp->thread, NULL, spool_main, sp);
    if (err) {
        snprintf(why, whylen, "cannot start a full copy: %s", strerror(err));
        close(sp->fd);
        free(sp);
        return NULL;
    }
    m->spool = sp;
    atomic_fetch_add(&m->spools, 1);
    return sp;
}

void spool_put(repl_master *m, spool *sp)
{
    if (--sp->users > 0)
        return;
    atomic_store(&sp->cancel, true);    /* the walk stops at its next batch */
    pthread_join(sp->thread, NULL);
    close(sp->fd);
    if (m->spool == sp)
        m->spool = NULL;
    free(sp);
}

int spool_pump(peer *p)
{
    spool *sp = p->sp;
    int state = atomic_load(&sp->state);
    uint64_t written = atomic_load(&sp->written);
    if (p->soff < written) {
        char chunk[PUMP_CHUNK];
        size_t n = written - p->soff < sizeof(chunk) ? (size_t)(written - p->soff)
                                                     : sizeof(chunk);
        ssize_t r = pread(sp->fd, chunk, n, (off_t)p->soff);
        if (r <= 0 || peer_queue(p, chunk, (size_t)r) < 0) {
            logf_(p->m, KURA_LOG_ERROR, "replica %s: cannot read the copy's spool: %s", p->name,
                  r < 0 ? strerror(errno) : "short read");
            return -1;
        }
        p->soff += (uint64_t)r;
        return 0;
    }
    if (state == SPOOL_FAILED)
        return -1;
    return state == SPOOL_DONE ? SPOOL_PUMP_ALL : SPOOL_PUMP_WAIT;
}
