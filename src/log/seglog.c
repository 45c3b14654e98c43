/*
 * seglog.c - the segmented log: segment files, appends and group commit
 * (include/kura/seglog.h says what the module is and why records are
 * framed by its user; sl_scan.c reads segments back in order).
 *
 * Records are only ever appended, by sl_append() under log->mu, with one
 * pwritev() each (or, below a page, one copy into the write mapping:
 * SL_PWRITE_MIN says why not above): the file is
 * therefore always a sequence of complete records followed by at most one
 * torn record (the one being written when the process died).  A failed or
 * short write is cut off again with ftruncate(), so the log stays a clean
 * prefix and later writes succeed once space returns.  Nothing is buffered
 * in user space: when sl_append() returns, the record is in the page cache
 * and survives kill -9.
 *
 * Durability is sl_commit(): a leader/follower group commit.  The first
 * thread to need a sync becomes the leader and fdatasyncs the active
 * segment; every record appended before it read the log end is covered, and
 * the threads that arrived meanwhile wait on one condition variable and
 * either find themselves covered or elect the next leader.  Sealed segments
 * are fdatasynced when the log rolls past them, so only the active segment
 * ever needs a sync.  A failed sync is sticky (sl_fail): never retried.
 *
 * Moved here from the hash file (hashdb_log.c, hashdb_ckpt.c's segment
 * listing, torn-creation check, set-aside and cut) unchanged in behaviour.
 */
#include <dirent.h>
#include <assert.h>
#include <errno.h>
#include <fcntl.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <sys/uio.h>
#include <time.h>
#include <unistd.h>

#include "kura/grow.h"
#include "kura/logf.h"
#include "kura/seglog.h"
#include "kura/testhooks.h"
#include "kura/status.h"
#include "kura/bytes.h"
#include "kura/crc32c.h"
#include "kura/lockorder.h"
#include "kura/tlbuf.h"

/* sl_logf's sink: the user's hook, or stderr. */
static void sl_log_line(void *arg, int level, const char *line)
{
    sl_log *log = arg;
    if (log->cfg.log)
        log->cfg.log(log->cfg.log_arg, level, line);
    else
        fprintf(stderr, "kura seglog %s: %s\n", log->cfg.dir, line);
}

#define sl_logf(log, level, ...) kura_logf(sl_log_line, log, level, __VA_ARGS__)

int sl_errno_status(int e)
{
    switch (e) {
    case ENOSPC: case EDQUOT: case EFBIG: return KURA_ENOSPC;
    case EIO:    return KURA_EIO;
    case EROFS:  return KURA_EREADONLY;
    case ENOMEM: return KURA_ENOMEM;
    default:     return KURA_ESYS;
    }
}

int sl_init(sl_log *log, const sl_config *cfg)
{
    memset(log, 0, sizeof(*log));
    log->cfg = *cfg;
    log->cfg.io = kio_or_default(cfg->io);
    pthread_mutex_init(&log->seg_mu, NULL);
    pthread_mutex_init(&log->mu, NULL);
    pthread_mutex_init(&log->cmu, NULL);
    pthread_cond_init(&log->ccv, NULL);
    pthread_cond_init(&log->pin_cv, NULL);
    return KURA_OK;
}

void sl_destroy(sl_log *log)
{
    if (!log->cfg.dir)
        return;         /* zeroed, never initialized: its user's open failed first */
    for (uint32_t i = 0; i < SL_SEG_SLOTS; i++) {
        sl_seg *sg = atomic_load(&log->segs[i]);
        if (sg)
            sl_seg_close(log, sg);
    }
    pthread_mutex_destroy(&log->seg_mu);
    pthread_mutex_destroy(&log->mu);
    pthread_mutex_destroy(&log->cmu);
    pthread_cond_destroy(&log->ccv);
    pthread_cond_destroy(&log->pin_cv);
}

void sl_get_stats(sl_log *log, sl_stats *st)
{
    st->syncs = atomic_load(&log->syncs);
    st->sync_errors = atomic_load(&log->sync_errors);
    st->write_errors = atomic_load(&log->write_errors);
    st->read_errors = atomic_load(&log->read_errors);
}

void sl_seg_path(const sl_log *log, uint32_t id, char *buf, size_t len)
{
    snprintf(buf, len, "%s/%08x.seg", log->cfg.dir, id);
}

int sl_fsync_dir(sl_log *log)
{
    const kura_io *io = log->cfg.io;
    if (io->fsync(io, log->cfg.dirfd) == 0)
        return KURA_OK;
    int e = errno;
    sl_fail(log, "fsync of the database directory", e);
    return sl_errno_status(e);
}

void sl_fail(sl_log *log, const char *what, int err)
{
    atomic_fetch_add(&log->sync_errors, 1);
    int none = KURA_OK;
    if (atomic_compare_exchange_strong(&log->failed, &none, KURA_EFAILED))
        sl_logf(log, KURA_LOG_ERROR, "%s failed: %s; the store takes no more writes (reads go on) "
                "until a restart recovers from what is on the disk", what, strerror(err));
}

static void seg_publish(sl_log *log, sl_seg *sg)
{
    pthread_mutex_lock(&log->seg_mu);
    atomic_store_explicit(&log->segs[sg->id % SL_SEG_SLOTS], sg, memory_order_release);
    pthread_mutex_unlock(&log->seg_mu);
}

/* Reserves the active segment's blocks up to cap with fallocate (so a full
 * disk is met here, not as SIGBUS on a store into the mapping) and maps it
 * for writing.  Where the file system cannot preallocate, or the mapping
 * fails, the segment stays unmapped and appends use pwritev. */
static int seg_prealloc(sl_log *log, sl_seg *sg, uint64_t cap)
{
    const kura_io *io = log->cfg.io;
    if (!log->cfg.mapwrite || sg->wmap || sg->map || cap <= sg->size)
        return KURA_OK;
    int r = io->fallocate(io, sg->fd, 0, (off_t)cap) == 0 ? 0 : errno;
    if (r == EOPNOTSUPP || r == EINVAL || r == ENOSYS)
        return KURA_OK;
    if (r != 0) {
        /* a write fault like a failed append: count it, or a full disk met
         * here (the usual place with mapwrite=1) never shows in
         * hash_write_errors */
        atomic_fetch_add(&log->write_errors, 1);
        sl_logf(log, KURA_LOG_ERROR, "cannot reserve %llu bytes for segment %08x: %s",
                (unsigned long long)cap, sg->id, strerror(r));
        if (io->ftruncate(io, sg->fd, (off_t)sg->size) != 0) {}
        return sl_errno_status(r);
    }
    void *m = io->mmap(io, cap, PROT_READ | PROT_WRITE, MAP_SHARED, sg->fd, 0);
    if (m == MAP_FAILED)
        return KURA_OK;
    pthread_mutex_lock(&log->seg_mu);
    sg->wmap = m;
    sg->wmaplen = cap;
    sg->maplen = cap;
    __atomic_store_n(&sg->map, m, __ATOMIC_RELEASE);    /* sl_read's acquire */
    log->mapped += cap;
    pthread_mutex_unlock(&log->seg_mu);
    return KURA_OK;
}

static void seg_unmap(sl_log *log, sl_seg *sg)
{
    pthread_mutex_lock(&log->seg_mu);
    if (sg->map) {
        log->cfg.io->munmap(log->cfg.io, (void *)sg->map, sg->maplen);
        log->mapped -= sg->maplen;
    }
    __atomic_store_n(&sg->map, NULL, __ATOMIC_RELEASE);
    sg->maplen = 0;
    sg->wmap = NULL;
    sg->wmaplen = 0;
    pthread_mutex_unlock(&log->seg_mu);
}

int sl_seg_create(sl_log *log, uint32_t id, uint64_t cap, sl_seg **out)
{
    const kura_io *io = log->cfg.io;
    char path[4200];
    unsigned char h[SL_SEG_HDR];
    int rc = sl_failed(log);
    if (rc)
        return rc;
    if (!cap)
        cap = log->cfg.segsiz;
    sl_seg_path(log, id, path, sizeof(path));
    int fd = io->open(io, AT_FDCWD, path, O_RDWR | O_CREAT | O_EXCL | O_CLOEXEC, 0644);
    if (fd < 0) {
        rc = sl_errno_status(errno);
        atomic_fetch_add(&log->write_errors, 1);
        sl_logf(log, KURA_LOG_ERROR, "cannot create %s: %s", path, strerror(errno));
        return rc;
    }
    memset(h, 0, sizeof(h));
    memcpy(h, log->cfg.magic, 8);
    put32(h + 8, log->cfg.version);
    put32(h + 12, id);
    uint64_t now = (uint64_t)time(NULL);
    put32(h + 16, (uint32_t)now);
    put32(h + 20, (uint32_t)(now >> 32));
    put32(h + 28, crc32c_update(0, h, 28));
    sl_seg *sg = calloc(1, sizeof(*sg));
    if (!sg) {
        rc = KURA_ENOMEM;
    } else if (kio_pwrite_all(io, fd, h, sizeof(h), 0) != 0) {
        rc = sl_errno_status(errno);
        atomic_fetch_add(&log->write_errors, 1);
        sl_logf(log, KURA_LOG_ERROR, "cannot write %s: %s", path, strerror(errno));
    } else {
        sg->id = id;
        sg->fd = fd;
        sg->version = log->cfg.version;
        sg->size = SL_SEG_HDR;
        rc = seg_prealloc(log, sg, cap);
    }
    /* The header (and the preallocated size) are durable before the name
     * is, and the name before any record goes in: a power loss can leave
     * a segment whose creation was cut short only as the newest file, all
     * zeros or shorter than a header, which open recognises and removes
     * (sl_torn_creation).  A failed sync here is sticky like any other. */
    if (rc == KURA_OK && io->fdatasync(io, fd) != 0) {
        rc = sl_errno_status(errno);
        sl_fail(log, "fdatasync of a new segment", errno);
    }
    if (rc == KURA_OK)
        rc = sl_fsync_dir(log);
    if (rc) {
        if (sg && sg->wmap)
            seg_unmap(log, sg);
        free(sg);
        io->close(io, fd);
        io->unlinkat(io, AT_FDCWD, path, 0);
        return rc;
    }
    seg_publish(log, sg);
    *out = sg;
    return KURA_OK;
}

int sl_seg_open(sl_log *log, uint32_t id, sl_seg **out, char *err, size_t errlen)
{
    const kura_io *io = log->cfg.io;
    char path[4200];
    unsigned char h[SL_SEG_HDR];
    struct stat st;
    sl_seg_path(log, id, path, sizeof(path));
    if (atomic_load(&log->segs[id % SL_SEG_SLOTS])) {
        snprintf(err, errlen, "%s: segment ids span more than %d", path, SL_SEG_SLOTS);
        return KURA_EINVAL;
    }
    int fd = io->open(io, AT_FDCWD, path, (log->cfg.read_only ? O_RDONLY : O_RDWR) |
                      O_CLOEXEC, 0);
    if (fd < 0) {
        snprintf(err, errlen, "%s: %s", path, strerror(errno));
        return sl_errno_status(errno);
    }
    ssize_t n = io->pread(io, fd, h, sizeof(h), 0);
    if (fstat(fd, &st) != 0 || n != (ssize_t)sizeof(h) || memcmp(h, log->cfg.magic, 8) != 0 ||
        get32(h + 28) != crc32c_update(0, h, 28) || get32(h + 12) != id) {
        snprintf(err, errlen, "%s: bad segment header at offset 0", path);
        io->close(io, fd);
        return KURA_ECORRUPT;
    }
    uint32_t version = get32(h + 8);
    if (version >= 32 || !(log->cfg.versions & (1u << version))) {
        snprintf(err, errlen, "%s: unsupported format version %u", path, version);
        io->close(io, fd);
        return KURA_EINVAL;
    }
    sl_seg *sg = calloc(1, sizeof(*sg));
    if (!sg) {
        io->close(io, fd);
        return KURA_ENOMEM;
    }
    sg->id = id;
    sg->fd = fd;
    sg->version = version;
    sg->size = (uint64_t)st.st_size;
    seg_publish(log, sg);
    *out = sg;
    return KURA_OK;
}

/* Maps a sealed segment for reading if the msiz budget allows. */
void sl_seg_map(sl_log *log, sl_seg *sg)
{
    if (__atomic_load_n(&sg->map, __ATOMIC_ACQUIRE) || !log->cfg.msiz || sg->size == 0)
        return;
    pthread_mutex_lock(&log->seg_mu);
    if (log->mapped + sg->size <= log->cfg.msiz) {
        void *m = log->cfg.io->mmap(log->cfg.io, sg->size, PROT_READ, MAP_SHARED, sg->fd, 0);
        if (m != MAP_FAILED) {
            (void)madvise(m, sg->size, MADV_RANDOM);
            sg->maplen = sg->size;
            log->mapped += sg->size;
            /* readers (sl_read) load it without seg_mu: maplen before it */
            __atomic_store_n(&sg->map, m, __ATOMIC_RELEASE);
        }
    }
    pthread_mutex_unlock(&log->seg_mu);
}

void sl_unmap_active(sl_log *log)
{
    sl_seg *a = log->active;
    if (!a)
        return;
    if (a->wmap)
        seg_unmap(log, a);
    /* The preallocated tail goes too, so that the next open finds the end
     * of the log at the end of the file instead of reading a hundred MB
     * of zeros to learn that nothing was cut (sl_seg_cut).  Not synced
     * for its own sake: a tail of zeros is a tail of zeros either way. */
    if (!log->cfg.read_only && !sl_failed(log) &&
        log->cfg.io->ftruncate(log->cfg.io, a->fd, (off_t)a->size) != 0)
        sl_logf(log, KURA_LOG_ERROR, "cannot trim segment %08x: %s", a->id, strerror(errno));
}

void sl_seg_close(sl_log *log, sl_seg *sg)
{
    pthread_mutex_lock(&log->seg_mu);
    if (sl_seg_get(log, sg->id) == sg)
        atomic_store(&log->segs[sg->id % SL_SEG_SLOTS], NULL);
    if (sg->map) {
        log->cfg.io->munmap(log->cfg.io, (void *)sg->map, sg->maplen);
        log->mapped -= sg->maplen;
    }
    pthread_mutex_unlock(&log->seg_mu);
    log->cfg.io->close(log->cfg.io, sg->fd);
    free(sg);
}

static void seg_unpin(sl_log *log, sl_seg *sg)
{
    lockorder_lock(&log->mu, log->cfg.lock_rank);
    if (--sg->pins == 0)
        pthread_cond_broadcast(&log->pin_cv);
    lockorder_unlock(&log->mu, log->cfg.lock_rank);
}

void sl_seg_drop(sl_log *log, sl_seg *sg)
{
    char path[4200];
    sl_seg_path(log, sg->id, path, sizeof(path));
    lockorder_lock(&log->mu, log->cfg.lock_rank);
    while (sg->pins)
        pthread_cond_wait(&log->pin_cv, &log->mu);
    lockorder_unlock(&log->mu, log->cfg.lock_rank);
    sl_seg_close(log, sg);
    if (log->cfg.io->unlinkat(log->cfg.io, AT_FDCWD, path, 0) != 0)
        sl_logf(log, KURA_LOG_ERROR, "cannot remove %s: %s", path, strerror(errno));
    sl_fsync_dir(log);
}

/* seg_first is written by one thread at a time (the user's compaction,
 * under its own lock) and read by anyone as where to start looking: relaxed
 * atomics, since a stale value is still a lower bound of the live ids. */
uint32_t sl_first(sl_log *log)
{
    return __atomic_load_n(&log->seg_first, __ATOMIC_RELAXED);
}

void sl_first_advance(sl_log *log, uint32_t limit)
{
    uint32_t first = sl_first(log);
    while (first < limit && !sl_seg_get(log, first))
        first++;
    __atomic_store_n(&log->seg_first, first, __ATOMIC_RELAXED);
}

uint32_t sl_active_id(sl_log *log)
{
    lockorder_lock(&log->mu, log->cfg.lock_rank);
    uint32_t id = log->active->id;
    lockorder_unlock(&log->mu, log->cfg.lock_rank);
    return id;
}

void sl_seg_each(sl_log *log, void (*fn)(void *arg, sl_seg *sg), void *arg)
{
    lockorder_lock(&log->mu, log->cfg.lock_rank);
    uint32_t hi = log->active->id;
    pthread_mutex_lock(&log->seg_mu);
    /* up to hi and no further: with hi the largest id (a file named
     * ffffffff.seg), "id <= hi" would hold for ever (found by fuzz_hash) */
    for (uint32_t id = sl_first(log); id <= hi; id++) {
        sl_seg *sg = sl_seg_get(log, id);
        if (sg)
            fn(arg, sg);
        if (id == hi)
            break;
    }
    pthread_mutex_unlock(&log->seg_mu);
    lockorder_unlock(&log->mu, log->cfg.lock_rank);
}

void sl_start(sl_log *log, sl_seg *last, uint32_t first)
{
    const kura_io *io = log->cfg.io;
    log->active = last;
    if (!log->cfg.read_only && last->size < log->cfg.segsiz && !last->wmap) {
        /* cut anything after the last record, then reserve and map again */
        if (io->ftruncate(io, last->fd, (off_t)last->size) != 0 ||
            seg_prealloc(log, last, log->cfg.segsiz) != KURA_OK)
            sl_logf(log, KURA_LOG_INFO, "segment %08x: appending with write() (no preallocation)",
                    last->id);
    }
    log->seg_first = first;
    for (uint32_t id = first; id < last->id; id++) {
        sl_seg *sg = sl_seg_get(log, id);
        if (sg) {
            sg->sealed = true;
            sl_seg_map(log, sg);
        }
    }
}

/* ---- listing and recovery's checks --------------------------------------- */

static int cmp_u32(const void *a, const void *b)
{
    uint32_t x = *(const uint32_t *)a, y = *(const uint32_t *)b;
    return x < y ? -1 : x > y;
}

int sl_list(sl_log *log, uint32_t **ids, size_t *n)
{
    int fd = openat(log->cfg.dirfd, ".", O_RDONLY | O_DIRECTORY | O_CLOEXEC);
    DIR *d = fd >= 0 ? fdopendir(fd) : NULL;
    size_t cap = 16;
    *n = 0;
    *ids = malloc(cap * sizeof(uint32_t));
    if (!d || !*ids) {
        if (fd >= 0)
            close(fd);
        return KURA_ESYS;
    }
    struct dirent *de;
    while ((de = readdir(d))) {
        unsigned id;
        char tail[8];
        if (strlen(de->d_name) != 12 || sscanf(de->d_name, "%8x%7s", &id, tail) != 2 ||
            strcmp(tail, ".seg") != 0)
            continue;
        if (kura_grow(ids, &cap, *n + 1, sizeof(uint32_t), cap)) {
            closedir(d);
            return KURA_ENOMEM;
        }
        (*ids)[(*n)++] = id;
    }
    closedir(d);
    qsort(*ids, *n, sizeof(uint32_t), cmp_u32);
    return KURA_OK;
}

/* The newest segment's header is not there: shorter than a header, or a
 * header of zeros (the file's name reached the disk, its first page did
 * not).  sl_seg_create syncs the header before any record goes in and
 * every sync covers the whole file, so no sync of this file ever completed
 * and nothing in it was acknowledged as durable: the process or the power
 * died while creating it, or before its first sync.  It is removed, with
 * an ERROR line saying how many bytes went with it.  A header that is
 * there but wrong is damage, not this: it needs -recover. */
bool sl_torn_creation(sl_log *log, uint32_t id, uint64_t *cut)
{
    char path[4200];
    unsigned char buf[4096];
    struct stat st;
    sl_seg_path(log, id, path, sizeof(path));
    const kura_io *io = log->cfg.io;
    int fd = io->open(io, AT_FDCWD, path, O_RDONLY | O_CLOEXEC, 0);
    if (fd < 0)
        return false;
    bool torn = fstat(fd, &st) == 0;
    uint64_t nonzero = 0;
    for (uint64_t o = 0; torn && o < (uint64_t)st.st_size; o += sizeof(buf)) {
        ssize_t n = io->pread(io, fd, buf, sizeof(buf), (off_t)o);
        if (n <= 0) {
            torn = n == 0;
            break;
        }
        for (ssize_t i = 0; i < n; i++) {
            if (buf[i] && o + (uint64_t)i < SL_SEG_HDR && st.st_size >= SL_SEG_HDR)
                torn = false;       /* a header is there: damage, not this */
            nonzero += buf[i] != 0;
        }
    }
    io->close(io, fd);
    if (!torn)
        return false;
    sl_logf(log, KURA_LOG_ERROR, "%s: removing the newest segment, whose creation or first sync "
            "did not complete (%lld bytes, %llu of them not zero: written after the last sync, "
            "never acknowledged as durable)", path, (long long)st.st_size,
            (unsigned long long)nonzero);
    *cut += (uint64_t)st.st_size;
    if (!log->cfg.read_only) {
        log->cfg.io->unlinkat(log->cfg.io, AT_FDCWD, path, 0);
        sl_fsync_dir(log);
    }
    return true;
}

/* -recover: a segment that cannot be opened is renamed aside to
 * "<id>.seg.damaged" (kept for whoever wants to look, no longer part of the
 * log), so the next plain open does not meet it again. */
void sl_set_aside(sl_log *log, uint32_t id)
{
    char path[4200], aside[4300];
    sl_seg_path(log, id, path, sizeof(path));
    snprintf(aside, sizeof(aside), "%s.damaged", path);
    if (log->cfg.read_only)
        return;
    if (log->cfg.io->renameat(log->cfg.io, AT_FDCWD, path, AT_FDCWD, aside) != 0)
        sl_logf(log, KURA_LOG_ERROR, "cannot rename %s aside: %s", path, strerror(errno));
    else
        sl_logf(log, KURA_LOG_ERROR, "%s: renamed to %s", path, aside);
    sl_fsync_dir(log);
}

/* Bytes that are not zero in [off, end) of fd: what a cut there loses. */
static uint64_t nonzero_bytes(const kura_io *io, int fd, uint64_t off, uint64_t end)
{
    static const unsigned char zero[4096];
    unsigned char buf[4096];
    uint64_t n = 0;
    for (uint64_t o = off; o < end; o += sizeof(buf)) {
        /* unwritten extents of a preallocated tail read as a hole here
         * (where the file system says so): skip them without reading */
        off_t d = lseek(fd, (off_t)o, SEEK_DATA);
        if (d < 0)
            break;              /* ENXIO: nothing but holes to the end */
        if ((uint64_t)d > o)
            o = (uint64_t)d;
        if (o >= end)
            break;
        size_t want = end - o < sizeof(buf) ? (size_t)(end - o) : sizeof(buf);
        ssize_t got = io->pread(io, fd, buf, want, (off_t)o);
        if (got <= 0)
            break;
        if (memcmp(buf, zero, (size_t)got) == 0)
            continue;
        for (ssize_t i = 0; i < got; i++)
            n += buf[i] != 0;
    }
    return n;
}

/* Zeros alone (a preallocated tail) go silently; if anything else goes,
 * an ERROR line says where and how much: a cut is data lost, even when it
 * was never acknowledged as durable. */
int sl_seg_cut(sl_log *log, sl_seg *sg, uint64_t off, const char *why, uint64_t *cut,
               char *err, size_t errlen)
{
    char path[4200];
    sl_seg_path(log, sg->id, path, sizeof(path));
    uint64_t lost = nonzero_bytes(log->cfg.io, sg->fd, off, sg->size);
    if (lost) {
        sl_logf(log, KURA_LOG_ERROR, "%s: %s at offset %llu: cutting off the %llu bytes from "
                "there (%llu of them not zero; written after the last completed sync)", path,
                why, (unsigned long long)off, (unsigned long long)(sg->size - off),
                (unsigned long long)lost);
        *cut += sg->size - off;
    }
    if (!log->cfg.read_only && log->cfg.io->ftruncate(log->cfg.io, sg->fd, (off_t)off) != 0) {
        snprintf(err, errlen, "%s: cannot truncate to %llu: %s", path,
                 (unsigned long long)off, strerror(errno));
        return sl_errno_status(errno);
    }
    sg->size = off;
    return KURA_OK;
}

/* ---- appends ------------------------------------------------------------- */

/* The user's sync before one that makes records durable (cfg.presync):
 * 0 or an errno. */
static int presync(sl_log *log)
{
    return log->cfg.presync ? log->cfg.presync(log->cfg.presync_arg) : 0;
}

/* Seals the active segment and starts the next, large enough for a record
 * of rlen bytes (cap: that many bytes reserved instead of segsiz, if not
 * 0); log->mu held.  The old segment is trimmed and synced
 * first: a failed sync stops every write (sl_fail) and nothing is sealed; a
 * failed creation (a full disk) leaves the old segment active, synced, and
 * taking no records until a later roll succeeds. */
static int do_roll(sl_log *log, uint64_t rlen, uint64_t want)
{
    const kura_io *io = log->cfg.io;
    sl_seg *old = log->active, *nw;
    uint64_t segsiz = want ? want : log->cfg.segsiz;
    uint64_t cap = segsiz > SL_SEG_HDR + rlen ? segsiz : SL_SEG_HDR + rlen;
    if (atomic_load(&log->segs[(old->id + 1) % SL_SEG_SLOTS])) {
        /* the user's compaction keeps the span of live ids far below this */
        sl_logf(log, KURA_LOG_ERROR, "segment %08x would reuse the table slot of a live "
                "segment: refusing writes until compaction catches up", old->id + 1);
        return KURA_ENOSPC;
    }
    if (!old->trimmed) {
        /* the old mapping stays for readers (offsets below size only) until
         * the segment is dropped; its preallocated tail is cut off */
        old->wmap = NULL;
        if (io->ftruncate(io, old->fd, (off_t)old->size) != 0)
            sl_logf(log, KURA_LOG_ERROR, "cannot trim segment %08x: %s", old->id,
                    strerror(errno));
        uint64_t l = atomic_load(&log->lsn);
        int pe = presync(log);
        if (pe) {
            sl_fail(log, "the user's sync before a segment's seal", pe);
            return sl_failed(log);
        }
        if (io->fdatasync(io, old->fd) != 0) {
            int e = errno;
            sl_fail(log, "fdatasync while sealing a segment", e);
            return sl_failed(log);
        }
        old->trimmed = true;
        /* everything so far is on disk: earlier segments were synced when
         * they were sealed */
        pthread_mutex_lock(&log->cmu);
        if (log->synced_lsn < l)
            log->synced_lsn = l;
        pthread_cond_broadcast(&log->ccv);
        pthread_mutex_unlock(&log->cmu);
    }
    int rc = sl_seg_create(log, old->id + 1, cap, &nw);
    if (rc)
        return rc;
    old->sealed = true;
    /* Its pages leave this process's resident set: they are on disk (synced
     * above) and stay in the page cache, from which a reader faults back
     * what it reads.  Kept, every page of every live segment counted in
     * kurad's RSS: with -ulog's defaults 4 GB on a soak of a 5 MB data set
     * (test_soak.py).  Zapping the mapping's entries costs about a
     * millisecond per 64 MB, once a segment.  Only what is mapped: a
     * record longer than the mapping went past it with pwritev, and the
     * range past the mapping is other memory of the process. */
    if (old->map && old->size && old->maplen && !KURA_TEST_SWITCH(sl_keep_sealed_resident))
        (void)madvise((void *)old->map, old->size < old->maplen ? old->size : old->maplen,
                      MADV_DONTNEED);
    sl_seg_map(log, old);
    log->active = nw;
    atomic_store_explicit(&log->rolls, atomic_load_explicit(&log->rolls, memory_order_relaxed)
                          + 1, memory_order_relaxed);
    return KURA_OK;
}

/* Faults in the write mapping's pages from off on, a run of POPULATE bytes
 * past end, with one madvise: a page fault per 4 KiB page, taken by the
 * appends one at a time, costs more (each is a trap, dear under
 * virtualization).  Only a hint: where it fails, the pages fault as usual.
 * The run is short because log->mu is held meanwhile. */
#define POPULATE (512u << 10)

static void populate_ahead(sl_seg *a, uint64_t off, uint64_t end)
{
    uint64_t from = off & ~(uint64_t)4095;
    if (from < a->populated)
        from = a->populated;
    uint64_t to = (end + POPULATE + 4095) & ~(uint64_t)4095;
    if (to > a->wmaplen)
        to = a->wmaplen;
#ifdef MADV_POPULATE_WRITE
    (void)madvise(a->wmap + from, to - from, MADV_POPULATE_WRITE);
#endif
    a->populated = to;
}

/* A record of at least this many bytes goes in with pwritev even where the
 * active segment is mapped for writing.  A store through the mapping
 * faults each page in first, and a page of a preallocated (fallocate:
 * unwritten) block is read in as zeros, which the kernel writes with a
 * memset before the copy overwrites them: every byte is written twice,
 * into memory the page cache has just taken, and on this project's VMs
 * that zeroing took half of a worker's time under 20 KB sets (perf:
 * filemap_fault -> ext4_mpage_readpages -> memset, below madvise).  The
 * kernel's write() fills a whole page straight from the caller's bytes and
 * reads nothing.  A large folio dirtied through the mapping is also
 * written back whole, again at every write-behind that finds it re-dirtied
 * (1.2 bytes written per byte appended, against 1.0 with pwritev).  Small
 * records would pay a system call each instead: three times the CPU of a
 * store at 512 bytes, still more at 1 KiB, about even at 2 KiB; from a
 * page on pwritev wins clearly (docs/benchmarks.md, "20 KB sets and the
 * disk"), so records below a page keep the mapping.  The two write the
 * same page cache: a reader of the mapping sees either. */
#define SL_PWRITE_MIN 4096u

/* Seals the active segment if it holds records, so that a user whose
 * checkpoint covers everything appended so far can drop it (the B+ tree's
 * log stays bounded by its checkpoints instead of by segsiz). */
int sl_roll(sl_log *log, uint64_t cap)
{
    if (log->cfg.read_only)
        return KURA_EREADONLY;
    int rc = sl_failed(log);
    if (rc)
        return rc;
    lockorder_lock(&log->mu, log->cfg.lock_rank);
    if (log->active && log->active->size > SL_SEG_HDR)
        rc = do_roll(log, 0, cap);
    lockorder_unlock(&log->mu, log->cfg.lock_rank);
    return rc;
}

int sl_append(sl_log *log, struct iovec *iov, int n, size_t head_max, size_t body_len,
              bool numbered, sl_frame_fn frame, void *arg, sl_loc *out)
{
    int rc = KURA_OK;

    if (log->cfg.read_only)
        return KURA_EREADONLY;
    if ((rc = sl_failed(log)))
        return rc;
    lockorder_lock(&log->mu, log->cfg.lock_rank);
    uint64_t recno = log->recno + 1;
    size_t hlen = frame(arg, iov[0].iov_base, recno);
    assert(hlen <= head_max);   /* frame stayed in the room the caller gave */
    iov[0].iov_len = hlen;
    uint64_t rlen = hlen + body_len;
    sl_seg *a = log->active;
    /* a segment of an older format (opened from an older database) takes
     * no new records: they go to a new segment */
    if (a->version != log->cfg.version ||
        sl_would_roll(log, a->size, rlen)) {
        rc = do_roll(log, rlen, 0);
        if (rc)
            goto out;
        a = log->active;
    }

    uint64_t off = a->size, done = 0;
    if (a->wmap && off + rlen <= a->wmaplen &&
        (rlen < SL_PWRITE_MIN || KURA_TEST_SWITCH(sl_large_via_map))) {
        /* a store into the shared mapping is in the page cache at once:
         * it survives the death of the process like a write() would */
        if (off + rlen > a->populated)
            populate_ahead(a, off, off + rlen);
        unsigned char *d = a->wmap + off;
        for (int i = 0; i < n; i++) {
            memcpy(d, iov[i].iov_base, iov[i].iov_len);
            d += iov[i].iov_len;
        }
        done = rlen;
    }
    struct iovec *v = iov;
    int vn = n;
    while (done < rlen) {
        ssize_t w = log->cfg.io->pwritev(log->cfg.io, a->fd, v, vn, (off_t)(off + done));
        if (w < 0 && errno == EINTR)
            continue;
        if (w <= 0) {
            int e = w < 0 ? errno : ENOSPC;
            rc = sl_errno_status(e);
            atomic_fetch_add(&log->write_errors, 1);
            sl_logf(log, KURA_LOG_ERROR, "write to segment %08x at offset %llu failed: %s",
                    a->id, (unsigned long long)off, strerror(e));
            /* undo the partial record; a mapped segment keeps its mapped
             * size (stores into pages past the end of the file would fault)
             * and gets zeros where the record began */
            uint64_t cut = off;
            if (a->wmap) {
                if (off < a->wmaplen) {
                    uint64_t z = a->wmaplen - off < done ? a->wmaplen - off : done;
                    memset(a->wmap + off, 0, z);
                }
                cut = off > a->wmaplen ? off : a->wmaplen;
            }
            if (log->cfg.io->ftruncate(log->cfg.io, a->fd, (off_t)cut) != 0)
                sl_logf(log, KURA_LOG_ERROR, "cannot cut segment %08x back to %llu: %s", a->id,
                        (unsigned long long)cut, strerror(errno));
            goto out;
        }
        done += (uint64_t)w;
        size_t left = (size_t)w;
        while (vn && left >= v->iov_len) {
            left -= v->iov_len;
            v++;
            vn--;
        }
        if (vn && left) {
            /* v points into the caller's iov[], which is its to change */
            v->iov_base = (char *)v->iov_base + left;
            v->iov_len -= left;
        }
    }
    if (numbered)
        log->recno = recno;
    a->size = off + rlen;
    out->seg = a->id;
    out->hlen = (uint32_t)hlen;
    out->off = off;
    out->recno = recno;
    /* lsn changes only here, under mu: a plain store (release, for the
     * readers outside mu) instead of a locked add */
    out->lsn = atomic_load_explicit(&log->lsn, memory_order_relaxed) + rlen;
    atomic_store_explicit(&log->lsn, out->lsn, memory_order_release);
out:
    lockorder_unlock(&log->mu, log->cfg.lock_rank);
    return rc;
}

void sl_locked(sl_log *log, void (*fn)(void *arg, const sl_tail *t), void *arg)
{
    lockorder_lock(&log->mu, log->cfg.lock_rank);
    sl_tail t = { .seg = log->active ? log->active->id : 0,
                  .off = log->active ? log->active->size : 0,
                  .lsn = atomic_load(&log->lsn), .recno = log->recno,
                  .rolls = atomic_load(&log->rolls) };
    fn(arg, &t);
    lockorder_unlock(&log->mu, log->cfg.lock_rank);
}

void sl_set_recno(sl_log *log, uint64_t recno)
{
    lockorder_lock(&log->mu, log->cfg.lock_rank);
    log->recno = recno;
    lockorder_unlock(&log->mu, log->cfg.lock_rank);
}

/* ---- durability ---------------------------------------------------------- */

/* Write-behind, called by the user's background thread: once `wbehind`
 * bytes of whole pages have been appended to the active segment since the
 * last call that acted, starts their writeback (sync_file_range, which does
 * not wait for the disk).  Dirty log pages then go out steadily instead of
 * in the kernel's large bursts, and the next sync finds little left to
 * wait for.  Not on the request path: submitting writeback costs CPU,
 * which the writers would otherwise pay. */
void sl_writebehind(sl_log *log)
{
    if (!log->cfg.wbehind || log->cfg.read_only)
        return;
    lockorder_lock(&log->mu, log->cfg.lock_rank);
    sl_seg *a = log->active;
    uint64_t from = a->wb_from, to = a->size & ~(uint64_t)4095;
    bool go = to > from && to - from >= log->cfg.wbehind;
    if (go) {
        a->wb_from = to;
        a->pins++;              /* the segment may be sealed and dropped meanwhile */
    }
    lockorder_unlock(&log->mu, log->cfg.lock_rank);
    if (go) {
        /* a hint to the kernel, not a write: it bypasses cfg.io (errors
         * show at the next sync, which goes through it) */
        (void)sync_file_range(a->fd, (off_t)from, (off_t)(to - from), SYNC_FILE_RANGE_WRITE);
        seg_unpin(log, a);
    }
}

/* Starts writeback of the whole active segment (a hint, like the above):
 * a checkpoint calls it so that the sync it waits for later overlaps its
 * dump. */
void sl_writeback_hint(sl_log *log)
{
    lockorder_lock(&log->mu, log->cfg.lock_rank);
    sl_seg *a = log->active;
    a->pins++;
    lockorder_unlock(&log->mu, log->cfg.lock_rank);
    (void)sync_file_range(a->fd, 0, 0, SYNC_FILE_RANGE_WRITE);
    seg_unpin(log, a);
}

/* Group commit.  A sync that fails is never retried: the kernel may have
 * dropped the pages it could not write, so a later sync that succeeds would
 * prove nothing about them.  The failure is sticky (sl_fail): every commit
 * not covered by an earlier successful sync returns it, and synced_lsn
 * never moves again. */
int sl_commit(sl_log *log, uint64_t lsn)
{
    int rc = KURA_OK;
    pthread_mutex_lock(&log->cmu);
    while (log->synced_lsn < lsn) {
        if ((rc = sl_failed(log)))
            break;
        if (log->syncing) {
            pthread_cond_wait(&log->ccv, &log->cmu);
            continue;
        }
        log->syncing = true;
        pthread_mutex_unlock(&log->cmu);

        lockorder_lock(&log->mu, log->cfg.lock_rank);
        uint64_t target = atomic_load(&log->lsn);
        sl_seg *a = log->active;
        a->pins++;              /* kept open through the sync (sl_seg_drop waits) */
        lockorder_unlock(&log->mu, log->cfg.lock_rank);
        /* the user's file first: no record this sync makes durable may
         * name bytes of it that are not */
        const char *what = "the user's sync before the log's";
        int e = presync(log);
        atomic_fetch_add(&log->syncs, 1);
        if (!e && log->cfg.io->fdatasync(log->cfg.io, a->fd) != 0) {
            e = errno;
            what = "fdatasync of the log";
        }
        seg_unpin(log, a);
        if (e)
            sl_fail(log, what, e);

        pthread_mutex_lock(&log->cmu);
        log->syncing = false;
        /* A sync of the same file that failed meanwhile (a segment's seal,
         * under mu) may have consumed the error this one would have seen:
         * once any sync has failed, none counts. */
        if (!e && !sl_failed(log) && target > log->synced_lsn)
            log->synced_lsn = target;
        pthread_cond_broadcast(&log->ccv);
    }
    pthread_mutex_unlock(&log->cmu);
    return rc;
}

int sl_sync_now(sl_log *log)
{
    return sl_commit(log, atomic_load(&log->lsn));
}

/* ---- reading ------------------------------------------------------------- */

int sl_read(sl_log *log, uint32_t segid, uint64_t off, size_t len, const unsigned char **pp,
            uint32_t *version)
{
    sl_seg *sg = sl_seg_get(log, segid);
    if (!sg)
        return KURA_NOTFOUND;
    *version = sg->version;
    const unsigned char *map = __atomic_load_n(&sg->map, __ATOMIC_ACQUIRE);
    if (map && off + len <= sg->maplen) {
        *pp = map + off;
        return KURA_OK;
    }
    unsigned char *b = tlbuf(TLB_LOG_READ, len);
    if (!b)
        return KURA_ENOMEM;
    uint64_t got = 0;
    while (got < len) {
        ssize_t n = log->cfg.io->pread(log->cfg.io, sg->fd, b + got, len - got,
                                       (off_t)(off + got));
        if (n < 0 && errno == EINTR)
            continue;
        if (n < 0) {
            sl_logf(log, KURA_LOG_ERROR, "read of segment %08x at offset %llu failed: %s",
                    segid, (unsigned long long)off, strerror(errno));
            atomic_fetch_add(&log->read_errors, 1);
            return KURA_EIO;
        }
        if (n == 0)
            break;
        got += (uint64_t)n;
    }
    if (got < len)
        return KURA_ECORRUPT;
    *pp = b;
    return KURA_OK;
}
