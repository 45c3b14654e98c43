/*
 * hashdb_log.c - segment files, record encoding, appends and group commit.
 *
 * Records are only ever appended, by hd_append() under db->mu, with one
 * pwritev() each: the file is therefore always a sequence of complete
 * records followed by at most one torn record (the one being written when
 * the process died).  A failed or short write is cut off again with
 * ftruncate(), so the store stays a clean prefix and later writes succeed
 * once space returns.  Nothing is buffered in user space: when hd_append()
 * returns, the record is in the page cache and survives kill -9.
 *
 * Durability is hd_commit(): a leader/follower group commit.  The first
 * thread to need a sync becomes the leader and fdatasyncs the active
 * segment; every record appended before it read the log end is covered, and
 * the threads that arrived meanwhile wait on one condition variable and
 * either find themselves covered or elect the next leader.  Sealed segments
 * are fdatasynced when the log rolls past them, so only the active segment
 * ever needs a sync.
 */
#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <sys/uio.h>
#include <time.h>
#include <unistd.h>

#include "crc32c.h"
#include "hashdb_int.h"

int hd_errno_status(int e)
{
    switch (e) {
    case ENOSPC: case EDQUOT: case EFBIG: return KURA_ENOSPC;
    case EIO:    return KURA_EIO;
    case EROFS:  return KURA_EREADONLY;
    case ENOMEM: return KURA_ENOMEM;
    default:     return KURA_ESYS;
    }
}

/* Version 2: crc, magic, type, klen, then varints vlen, flags, exptime
 * (zigzag), cas, seq.  A small record's header is about 17 bytes instead
 * of version 1's fixed 40 (docs/formats.md). */
size_t hd_rec_encode(unsigned char *h, const hd_rec *r)
{
    put32(h, 0);
    h[4] = HD_REC_MAGIC & 0xff;
    h[5] = HD_REC_MAGIC >> 8;
    h[6] = r->type;
    h[7] = r->klen;
    unsigned char *p = h + 8;
    p = put_varint(p, r->vlen);
    p = put_varint(p, r->flags);
    p = put_varint(p, zigzag(r->exptime));
    p = put_varint(p, r->cas);
    p = put_varint(p, r->seq);
    return (size_t)(p - h);
}

/* crc32c over key ++ value, continued over the header after the crc field
 * (so the body's part can be computed before the locks). */
uint32_t hd_rec_crc(const unsigned char *h, size_t hlen, uint32_t body_crc)
{
    return crc32c_update(body_crc, h + 4, hlen - 4);
}

static int decode_v1(const unsigned char *h, size_t avail, hd_rec *r)
{
    if (avail < HD_REC_HDR_V1 || h[4] != (HD_REC_MAGIC_V1 & 0xff) ||
        h[5] != (HD_REC_MAGIC_V1 >> 8))
        return -1;
    r->hlen = HD_REC_HDR_V1;
    r->vlen = get32(h + 8);
    r->flags = get32(h + 12);
    r->exptime = (int64_t)get64(h + 16);
    r->cas = get64(h + 24);
    r->seq = get64(h + 32);
    return 0;
}

static int decode_v2(const unsigned char *h, size_t avail, hd_rec *r)
{
    const unsigned char *end = h + (avail < HD_REC_HDR_MAX ? avail : HD_REC_HDR_MAX), *p;
    uint64_t vlen, flags, exp;
    if (avail < 13 || h[4] != (HD_REC_MAGIC & 0xff) || h[5] != (HD_REC_MAGIC >> 8) ||
        !(p = get_varint(h + 8, end, &vlen)) || !(p = get_varint(p, end, &flags)) ||
        !(p = get_varint(p, end, &exp)) || !(p = get_varint(p, end, &r->cas)) ||
        !(p = get_varint(p, end, &r->seq)) || vlen > UINT32_MAX || flags > UINT32_MAX)
        return -1;
    r->hlen = (uint8_t)(p - h);
    r->vlen = (uint32_t)vlen;
    r->flags = (uint32_t)flags;
    r->exptime = unzigzag(exp);
    return 0;
}

int hd_rec_decode(const unsigned char *h, size_t avail, uint32_t version, hd_rec *r)
{
    if (avail < 8)
        return -1;
    r->crc = get32(h);
    r->type = h[6];
    r->klen = h[7];
    if ((version == 1 ? decode_v1 : decode_v2)(h, avail, r) != 0)
        return -1;
    switch (r->type) {
    case HD_REC_PUT: return r->klen ? 0 : -1;
    case HD_REC_DEL: return r->klen && r->vlen == 0 ? 0 : -1;
    case HD_REC_STATE: return r->klen == 0 && r->vlen == 24 ? 0 : -1;
    }
    return -1;
}

void hd_seg_path(const hashdb *db, uint32_t id, char *buf, size_t len)
{
    snprintf(buf, len, "%s/%08x.seg", db->dir, id);
}

hd_seg *hd_seg_get(hashdb *db, uint32_t id)
{
    hd_seg *sg = atomic_load_explicit(&db->segs[id % HD_SEG_SLOTS], memory_order_acquire);
    return sg && sg->id == id ? sg : NULL;
}

int hd_fsync_dir(hashdb *db)
{
    if (db->io->fsync(db->io, db->dirfd) == 0)
        return KURA_OK;
    int e = errno;
    hd_fail(db, "fsync of the database directory", e);
    return hd_errno_status(e);
}

static void seg_publish(hashdb *db, hd_seg *sg)
{
    pthread_mutex_lock(&db->seg_mu);
    atomic_store_explicit(&db->segs[sg->id % HD_SEG_SLOTS], sg, memory_order_release);
    pthread_mutex_unlock(&db->seg_mu);
}

/* Reserves the active segment's blocks up to cap with fallocate (so a full
 * disk is met here, not as SIGBUS on a store into the mapping) and maps it
 * for writing.  Where the file system cannot preallocate, or the mapping
 * fails, the segment stays unmapped and appends use pwritev. */
int hd_seg_prealloc(hashdb *db, hd_seg *sg, uint64_t cap)
{
    if (!db->mapwrite || sg->wmap || sg->map || cap <= sg->size)
        return KURA_OK;
    int r = db->io->fallocate(db->io, sg->fd, 0, (off_t)cap) == 0 ? 0 : errno;
    if (r == EOPNOTSUPP || r == EINVAL || r == ENOSYS)
        return KURA_OK;
    if (r != 0) {
        /* a write fault like a failed append: count it, or a full disk met
         * here (the usual place with mapwrite=1) never shows in
         * hash_write_errors (found by tests/integration/test_persist.py) */
        atomic_fetch_add(&db->write_errors, 1);
        hd_log(db, KURA_LOG_ERROR, "cannot reserve %llu bytes for segment %08x: %s",
               (unsigned long long)cap, sg->id, strerror(r));
        if (db->io->ftruncate(db->io, sg->fd, (off_t)sg->size) != 0) {}
        return hd_errno_status(r);
    }
    void *m = db->io->mmap(db->io, cap, PROT_READ | PROT_WRITE, MAP_SHARED, sg->fd, 0);
    if (m == MAP_FAILED)
        return KURA_OK;
    pthread_mutex_lock(&db->seg_mu);
    sg->wmap = m;
    sg->wmaplen = cap;
    sg->maplen = cap;
    sg->map = m;
    db->mapped += cap;
    pthread_mutex_unlock(&db->seg_mu);
    return KURA_OK;
}

int hd_seg_create(hashdb *db, uint32_t id, uint64_t cap, hd_seg **out)
{
    char path[4200];
    unsigned char h[HD_SEG_HDR];
    int rc = hd_failed(db);
    if (rc)
        return rc;
    hd_seg_path(db, id, path, sizeof(path));
    int fd = db->io->open(db->io, AT_FDCWD, path, O_RDWR | O_CREAT | O_EXCL | O_CLOEXEC, 0644);
    if (fd < 0) {
        rc = hd_errno_status(errno);
        atomic_fetch_add(&db->write_errors, 1);
        hd_log(db, KURA_LOG_ERROR, "cannot create %s: %s", path, strerror(errno));
        return rc;
    }
    memset(h, 0, sizeof(h));
    memcpy(h, HD_SEG_MAGIC, 8);
    put32(h + 8, HD_VERSION);
    put32(h + 12, id);
    put64(h + 16, (uint64_t)time(NULL));
    put32(h + 28, crc32c_update(0, h, 28));
    hd_seg *sg = calloc(1, sizeof(*sg));
    if (!sg) {
        rc = KURA_ENOMEM;
    } else if (kio_pwrite_all(db->io, fd, h, sizeof(h), 0) != 0) {
        rc = hd_errno_status(errno);
        atomic_fetch_add(&db->write_errors, 1);
        hd_log(db, KURA_LOG_ERROR, "cannot write %s: %s", path, strerror(errno));
    } else {
        sg->id = id;
        sg->fd = fd;
        sg->version = HD_VERSION;
        sg->size = HD_SEG_HDR;
        rc = hd_seg_prealloc(db, sg, cap);
    }
    /* The header (and the preallocated size) are durable before the name
     * is, and the name before any record goes in: a power loss can leave
     * a segment whose creation was cut short only as the newest file, all
     * zeros or shorter than a header, which open recognises and removes
     * (hd_recover).  A failed sync here is sticky like any other. */
    if (rc == KURA_OK && db->io->fdatasync(db->io, fd) != 0) {
        rc = hd_errno_status(errno);
        hd_fail(db, "fdatasync of a new segment", errno);
    }
    if (rc == KURA_OK)
        rc = hd_fsync_dir(db);
    if (rc) {
        if (sg && sg->wmap)
            hd_seg_unmap(db, sg);
        free(sg);
        db->io->close(db->io, fd);
        db->io->unlinkat(db->io, AT_FDCWD, path, 0);
        return rc;
    }
    seg_publish(db, sg);
    *out = sg;
    return KURA_OK;
}

int hd_seg_open(hashdb *db, uint32_t id, hd_seg **out, char *err, size_t errlen)
{
    char path[4200];
    unsigned char h[HD_SEG_HDR];
    struct stat st;
    hd_seg_path(db, id, path, sizeof(path));
    if (atomic_load(&db->segs[id % HD_SEG_SLOTS])) {
        snprintf(err, errlen, "%s: segment ids span more than %d", path, HD_SEG_SLOTS);
        return KURA_EINVAL;
    }
    int fd = db->io->open(db->io, AT_FDCWD, path, (db->cfg.read_only ? O_RDONLY : O_RDWR) |
                          O_CLOEXEC, 0);
    if (fd < 0) {
        snprintf(err, errlen, "%s: %s", path, strerror(errno));
        return hd_errno_status(errno);
    }
    ssize_t n = db->io->pread(db->io, fd, h, sizeof(h), 0);
    if (fstat(fd, &st) != 0 || n != (ssize_t)sizeof(h) || memcmp(h, HD_SEG_MAGIC, 8) != 0 ||
        get32(h + 28) != crc32c_update(0, h, 28) || get32(h + 12) != id) {
        snprintf(err, errlen, "%s: bad segment header at offset 0", path);
        db->io->close(db->io, fd);
        return KURA_ECORRUPT;
    }
    uint32_t version = get32(h + 8);
    if (version != 1 && version != HD_VERSION) {
        snprintf(err, errlen, "%s: unsupported format version %u", path, version);
        db->io->close(db->io, fd);
        return KURA_EINVAL;
    }
    hd_seg *sg = calloc(1, sizeof(*sg));
    if (!sg) {
        db->io->close(db->io, fd);
        return KURA_ENOMEM;
    }
    sg->id = id;
    sg->fd = fd;
    sg->version = version;
    sg->size = (uint64_t)st.st_size;
    seg_publish(db, sg);
    *out = sg;
    return KURA_OK;
}

/* Maps a sealed segment for reading if the msiz budget allows. */
void hd_seg_map(hashdb *db, hd_seg *sg)
{
    if (sg->map || !db->msiz || sg->size == 0)
        return;
    pthread_mutex_lock(&db->seg_mu);
    if (db->mapped + sg->size <= db->msiz) {
        void *m = db->io->mmap(db->io, sg->size, PROT_READ, MAP_SHARED, sg->fd, 0);
        if (m != MAP_FAILED) {
            sg->maplen = sg->size;
            db->mapped += sg->size;
            atomic_thread_fence(memory_order_release);
            sg->map = m;
        }
    }
    pthread_mutex_unlock(&db->seg_mu);
}

void hd_seg_unmap(hashdb *db, hd_seg *sg)
{
    pthread_mutex_lock(&db->seg_mu);
    if (sg->map) {
        db->io->munmap(db->io, (void *)sg->map, sg->maplen);
        db->mapped -= sg->maplen;
    }
    sg->map = NULL;
    sg->maplen = 0;
    sg->wmap = NULL;
    sg->wmaplen = 0;
    pthread_mutex_unlock(&db->seg_mu);
}

void hd_seg_close(hashdb *db, hd_seg *sg)
{
    pthread_mutex_lock(&db->seg_mu);
    if (hd_seg_get(db, sg->id) == sg)
        atomic_store(&db->segs[sg->id % HD_SEG_SLOTS], NULL);
    if (sg->map) {
        db->io->munmap(db->io, (void *)sg->map, sg->maplen);
        db->mapped -= sg->maplen;
    }
    pthread_mutex_unlock(&db->seg_mu);
    db->io->close(db->io, sg->fd);
    free(sg);
}

void hd_seg_drop(hashdb *db, hd_seg *sg)
{
    char path[4200];
    hd_seg_path(db, sg->id, path, sizeof(path));
    pthread_mutex_lock(&db->mu);
    while (sg->pins)
        pthread_cond_wait(&db->pin_cv, &db->mu);
    pthread_mutex_unlock(&db->mu);
    hd_seg_close(db, sg);
    if (db->io->unlinkat(db->io, AT_FDCWD, path, 0) != 0)
        hd_log(db, KURA_LOG_ERROR, "cannot remove %s: %s", path, strerror(errno));
    hd_fsync_dir(db);
}

/* Seals the active segment and starts the next, large enough for a record
 * of rlen bytes; db->mu held.  The old segment is trimmed and synced first:
 * a failed sync stops every write (hd_fail) and nothing is sealed; a failed
 * creation (a full disk) leaves the old segment active, synced, and taking
 * no records until a later roll succeeds. */
static int do_roll(hashdb *db, uint64_t rlen)
{
    hd_seg *old = db->active, *nw;
    uint64_t cap = db->segsiz > HD_SEG_HDR + rlen ? db->segsiz : HD_SEG_HDR + rlen;
    if (atomic_load(&db->segs[(old->id + 1) % HD_SEG_SLOTS])) {
        /* compaction keeps the span of live ids far below this */
        hd_log(db, KURA_LOG_ERROR, "segment %08x would reuse the table slot of a live segment: "
               "refusing writes until compaction catches up", old->id + 1);
        return KURA_ENOSPC;
    }
    if (!old->trimmed) {
        /* the old mapping stays for readers (offsets below size only) until
         * the segment is compacted away; its preallocated tail is cut off */
        old->wmap = NULL;
        if (db->io->ftruncate(db->io, old->fd, (off_t)old->size) != 0)
            hd_log(db, KURA_LOG_ERROR, "cannot trim segment %08x: %s", old->id, strerror(errno));
        uint64_t l = atomic_load(&db->lsn);
        if (db->io->fdatasync(db->io, old->fd) != 0) {
            int e = errno;
            hd_fail(db, "fdatasync while sealing a segment", e);
            return hd_failed(db);
        }
        old->trimmed = true;
        /* everything so far is on disk: earlier segments were synced when
         * they were sealed */
        pthread_mutex_lock(&db->cmu);
        if (db->synced_lsn < l)
            db->synced_lsn = l;
        pthread_cond_broadcast(&db->ccv);
        pthread_mutex_unlock(&db->cmu);
    }
    int rc = hd_seg_create(db, old->id + 1, cap, &nw);
    if (rc)
        return rc;
    old->sealed = true;
    hd_seg_map(db, old);
    db->active = nw;
    db->sealed_since_ckpt = true;
    return KURA_OK;
}

/* Faults in the write mapping's pages from off on, a run of POPULATE bytes
 * past end, with one madvise: a page fault per 4 KiB page, taken by the
 * appends one at a time, costs more (each is a trap, dear under
 * virtualization).  Only a hint: where it fails, the pages fault as usual.
 * The run is short because db->mu is held meanwhile. */
#define POPULATE (512u << 10)

static void populate_ahead(hd_seg *a, uint64_t off, uint64_t end)
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

/* A record this large has its pages faulted in before the log lock is
 * taken (fault_in_outside), so the writers queued behind it wait for the
 * copy only. */
#define FAULT_OUTSIDE_MIN (1u << 20)

/* Faults in the pages where a record of rlen bytes would go now.  Only a
 * guess, made without holding mu through it: the end of the log may move
 * meanwhile, and faulting pages another record then fills is harmless.
 * Should the segment be sealed meanwhile, the pages past its new end make
 * madvise fail (EFAULT); should its mapping even be gone, madvise fails or
 * faults in pages of whatever is mapped there now: both harmless. */
static void fault_in_outside(hashdb *db, uint64_t rlen)
{
    pthread_mutex_lock(&db->mu);
    hd_seg *a = db->active;
    unsigned char *base = a->wmap;
    uint64_t from = a->size & ~(uint64_t)4095, cap = a->wmaplen, end = a->size + rlen;
    pthread_mutex_unlock(&db->mu);
#ifdef MADV_POPULATE_WRITE
    if (base && end <= cap)
        (void)madvise(base + from, end - from, MADV_POPULATE_WRITE);
#else
    (void)base; (void)from; (void)cap; (void)end;
#endif
}

int hd_append(hashdb *db, int type, const char *key, size_t klen,
              const void *v0, size_t l0, const void *v1, size_t l1,
              uint32_t body_crc, uint32_t flags, int64_t exptime, uint64_t cas,
              uint64_t seq, hd_loc *out)
{
    unsigned char h[HD_REC_HDR_MAX];
    struct iovec iov[4];
    int n = 0, rc = KURA_OK;
    hd_rec r = { .type = (uint8_t)type, .klen = (uint8_t)klen, .vlen = (uint32_t)(l0 + l1),
                 .flags = flags, .exptime = exptime, .cas = cas };

    if (db->cfg.read_only)
        return KURA_EREADONLY;
    if ((rc = hd_failed(db)))
        return rc;
    iov[n++] = (struct iovec){ h, 0 };      /* its length once encoded */
    if (klen)
        iov[n++] = (struct iovec){ (void *)key, klen };
    if (l0)
        iov[n++] = (struct iovec){ (void *)v0, l0 };
    if (l1)
        iov[n++] = (struct iovec){ (void *)v1, l1 };

    if (db->mapwrite && l0 + l1 >= FAULT_OUTSIDE_MIN)
        fault_in_outside(db, hd_rec_size(HD_REC_HDR_MAX, klen, l0 + l1));
    pthread_mutex_lock(&db->mu);
    r.seq = seq ? seq : db->seq + 1;
    size_t hlen = hd_rec_encode(h, &r);
    put32(h, hd_rec_crc(h, hlen, body_crc));
    iov[0].iov_len = hlen;
    uint64_t rlen = hd_rec_size(hlen, klen, l0 + l1);
    hd_seg *a = db->active;
    /* a segment of the first format (opened from an older database) takes
     * no new records: they go to a new segment */
    if (a->version != HD_VERSION || (a->size > HD_SEG_HDR && a->size + rlen > db->segsiz)) {
        rc = do_roll(db, rlen);
        if (rc)
            goto out;
        a = db->active;
    }

    uint64_t off = a->size, done = 0;
    if (a->wmap && off + rlen <= a->wmaplen) {
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
        ssize_t w = db->io->pwritev(db->io, a->fd, v, vn, (off_t)(off + done));
        if (w < 0 && errno == EINTR)
            continue;
        if (w <= 0) {
            int e = w < 0 ? errno : ENOSPC;
            rc = hd_errno_status(e);
            atomic_fetch_add(&db->write_errors, 1);
            hd_log(db, KURA_LOG_ERROR, "write to segment %08x at offset %llu failed: %s", a->id,
                   (unsigned long long)off, strerror(e));
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
            if (db->io->ftruncate(db->io, a->fd, (off_t)cut) != 0)
                hd_log(db, KURA_LOG_ERROR, "cannot cut segment %08x back to %llu: %s", a->id,
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
            /* v points into iov[]; adjusting it is fine (iov is ours) */
            v->iov_base = (char *)v->iov_base + left;
            v->iov_len -= left;
        }
    }
    if (!seq)
        db->seq++;
    a->size = off + rlen;
    db->appended_since_ckpt += rlen;
    if (type == HD_REC_PUT && cas > db->max_cas_seen)
        db->max_cas_seen = cas;
    out->seg = a->id;
    out->hlen = (uint32_t)hlen;
    out->off = off;
    out->seq = r.seq;
    /* lsn changes only here, under mu: a plain store (release, for the
     * readers outside mu) instead of a locked add */
    out->lsn = atomic_load_explicit(&db->lsn, memory_order_relaxed) + rlen;
    atomic_store_explicit(&db->lsn, out->lsn, memory_order_release);
out:
    pthread_mutex_unlock(&db->mu);
    return rc;
}

/* Write-behind, called by the background thread: once `wbehind` bytes of
 * whole pages have been appended to the active segment since the last
 * call that acted, starts their writeback (sync_file_range, which does not
 * wait for the disk).  Dirty log pages then go out steadily instead of in
 * the kernel's large bursts, and the next sync (-sync always, the interval,
 * a checkpoint, a segment's seal, a clean stop) finds little left to wait
 * for.  Not on the request path: submitting writeback costs CPU, which the
 * writers would otherwise pay. */
void hd_writebehind(hashdb *db)
{
    if (!db->wbehind || db->cfg.read_only)
        return;
    pthread_mutex_lock(&db->mu);
    hd_seg *a = db->active;
    uint64_t from = a->wb_from, to = a->size & ~(uint64_t)4095;
    bool go = to > from && to - from >= db->wbehind;
    if (go) {
        a->wb_from = to;
        a->pins++;              /* the segment may be sealed and dropped meanwhile */
    }
    pthread_mutex_unlock(&db->mu);
    if (go) {
        /* a hint to the kernel, not a write: it bypasses db->io (errors
         * show at the next sync, which goes through it) */
        (void)sync_file_range(a->fd, (off_t)from, (off_t)(to - from), SYNC_FILE_RANGE_WRITE);
        hd_seg_unpin(db, a);
    }
}

void hd_seg_unpin(hashdb *db, hd_seg *sg)
{
    pthread_mutex_lock(&db->mu);
    if (--sg->pins == 0)
        pthread_cond_broadcast(&db->pin_cv);
    pthread_mutex_unlock(&db->mu);
}

void hd_fail(hashdb *db, const char *what, int err)
{
    atomic_fetch_add(&db->sync_errors, 1);
    int none = KURA_OK;
    if (atomic_compare_exchange_strong(&db->failed, &none, KURA_EFAILED))
        hd_log(db, KURA_LOG_ERROR, "%s failed: %s; the store takes no more writes (reads go on) "
               "until a restart recovers from what is on the disk", what, strerror(err));
}

/* Group commit.  A sync that fails is never retried: the kernel may have
 * dropped the pages it could not write, so a later sync that succeeds would
 * prove nothing about them.  The failure is sticky (hd_fail): every commit
 * not covered by an earlier successful sync returns it, and synced_lsn
 * never moves again. */
int hd_commit(hashdb *db, uint64_t lsn)
{
    int rc = KURA_OK;
    pthread_mutex_lock(&db->cmu);
    while (db->synced_lsn < lsn) {
        if ((rc = hd_failed(db)))
            break;
        if (db->syncing) {
            pthread_cond_wait(&db->ccv, &db->cmu);
            continue;
        }
        db->syncing = true;
        pthread_mutex_unlock(&db->cmu);

        pthread_mutex_lock(&db->mu);
        uint64_t target = atomic_load(&db->lsn);
        hd_seg *a = db->active;
        a->pins++;              /* kept open through the sync (hd_seg_drop waits) */
        pthread_mutex_unlock(&db->mu);
        int e = 0;
        atomic_fetch_add(&db->syncs, 1);
        if (db->io->fdatasync(db->io, a->fd) != 0)
            e = errno;
        hd_seg_unpin(db, a);
        if (e)
            hd_fail(db, "fdatasync of the log", e);

        pthread_mutex_lock(&db->cmu);
        db->syncing = false;
        if (!e && target > db->synced_lsn)
            db->synced_lsn = target;
        pthread_cond_broadcast(&db->ccv);
    }
    pthread_mutex_unlock(&db->cmu);
    return rc;
}

int hd_sync_now(hashdb *db)
{
    return hd_commit(db, atomic_load(&db->lsn));
}

/* Per-thread buffer for records read with pread. */
typedef struct tl_buf {
    unsigned char *p;
    size_t cap;
} tl_buf;

static pthread_key_t tl_key;
static pthread_once_t tl_once = PTHREAD_ONCE_INIT;

static void tl_free(void *p)
{
    tl_buf *b = p;
    free(b->p);
    free(b);
}

static void tl_init(void)
{
    pthread_key_create(&tl_key, tl_free);
}

static unsigned char *tl_get(size_t n)
{
    pthread_once(&tl_once, tl_init);
    tl_buf *b = pthread_getspecific(tl_key);
    if (!b) {
        b = calloc(1, sizeof(*b));
        if (!b)
            return NULL;
        pthread_setspecific(tl_key, b);
    }
    if (b->cap < n || (b->cap > (4u << 20) && n < (64u << 10))) {
        size_t cap = n < 4096 ? 4096 : n;
        unsigned char *p = malloc(cap);
        if (!p)
            return NULL;
        free(b->p);
        b->p = p;
        b->cap = cap;
    }
    return b->p;
}

int hd_read_record(hashdb *db, const hd_ent *e, const unsigned char **recp, hd_rec *r)
{
    uint32_t segid = e->seg;
    uint64_t off = e->off;
    hd_seg *sg = hd_seg_get(db, segid);
    uint64_t rlen = hd_rec_size(e->hlen, e->klen, e->vlen);
    const unsigned char *p;
    if (!sg) {
        hd_log(db, KURA_LOG_ERROR, "segment %08x is missing (record at offset %llu)", segid,
               (unsigned long long)off);
        atomic_fetch_add(&db->corrupt_reads, 1);
        return KURA_ECORRUPT;
    }
    const unsigned char *map = sg->map;
    if (map && off + rlen <= sg->maplen) {
        p = map + off;
    } else {
        unsigned char *b = tl_get(rlen);
        if (!b)
            return KURA_ENOMEM;
        uint64_t got = 0;
        while (got < rlen) {
            ssize_t n = db->io->pread(db->io, sg->fd, b + got, rlen - got, (off_t)(off + got));
            if (n < 0 && errno == EINTR)
                continue;
            if (n < 0) {
                hd_log(db, KURA_LOG_ERROR, "read of segment %08x at offset %llu failed: %s", segid,
                       (unsigned long long)off, strerror(errno));
                atomic_fetch_add(&db->read_errors, 1);
                return KURA_EIO;
            }
            if (n == 0)
                break;
            got += (uint64_t)n;
        }
        if (got < rlen)
            goto corrupt;
        p = b;
    }
    if (hd_rec_decode(p, e->hlen, sg->version, r) != 0 || r->hlen != e->hlen ||
        r->type != HD_REC_PUT || r->klen != e->klen || r->vlen != e->vlen)
        goto corrupt;
    if (hd_rec_crc(p, r->hlen, crc32c_update(0, p + r->hlen, rlen - r->hlen)) != r->crc)
        goto corrupt;
    *recp = p;
    return KURA_OK;
corrupt:
    atomic_fetch_add(&db->corrupt_reads, 1);
    hd_log(db, KURA_LOG_ERROR, "corrupt record in %s/%08x.seg at offset %llu", db->dir, segid,
           (unsigned long long)off);
    return KURA_ECORRUPT;
}
