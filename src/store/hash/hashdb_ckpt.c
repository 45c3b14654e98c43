/*
 * hashdb_ckpt.c - checkpoints: the index saved, so opening replays little.
 *
 * A checkpoint holds the replay position P (segment, offset) taken when it
 * began, the engine's state and the index's slots (version 8: each
 * stripe's used slots, sorted by place and delta-coded, with its table size
 * and its item and byte counts: hashdb_cktab.c), so that opening puts them
 * back by their tags without reading or hashing a key.  Tables
 * are copied one stripe at a time under its read lock while writers keep
 * going, so the dump is fuzzy; that is safe because replay applies records
 * by sequence number (a record changes an entry only if it is at least as
 * new; the entry's is read from its record), so replaying from P over any
 * state between P and the end of the dump gives the state at the end of the
 * log.  Older checkpoints (versions 1 to 6: one entry per key, with the key)
 * are converted as they are loaded, version 7's 16-byte slots loaded as
 * they are, and a version 8 one written at once.  Before the checkpoint is renamed into place the log
 * is synced, so every record it points at is on disk first.
 *
 * It is written beside (checkpoint.tmp), fdatasynced, the previous one is
 * renamed to checkpoint.prev, the new one renamed into place and the
 * directory fsynced: at every instant at least one complete checkpoint
 * exists.  The new one is then read back and checked whole, and once it
 * passes checkpoint.prev is removed (retire_prev): recovery needs one
 * intact checkpoint and the log from its P, and a second copy of the index
 * (about 20 bytes an item) kept besides, with the segments back to its
 * older P, was a tenth of the database.  Compaction only removes segments
 * older than the older of the two replay positions, so while both files
 * exist (a crash between the renames and the removal) falling back to
 * checkpoint.prev is possible.
 *
 * Recovery decides here what a damaged or torn spot means (the policy);
 * the mechanics it calls on are the log's (src/log/): listing segments,
 * opening them, the torn-creation check, setting a segment aside, cutting
 * a tail with its ERROR line.  The checkpoint's header is filled under the
 * log's append lock (sl_locked), so P, the sequence number and the state
 * agree with one another.
 */
#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <dirent.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

#include "kura/codec.h"
#include "kura/crc32c.h"
#include "hashdb_int.h"
#include "kura/testhooks.h"

#define CK_HDR_V2 80           /* versions 1 and 2 */
#define CK_HDR_V3 96           /* version 3: the hash key after the rest */
#define CK_HDR 104             /* version 4: the update log's timestamp after that */
#define CK_ENT_V1 48            /* version 1: fixed fields, then the key */
#define CK_ENT_MAX (2 + 7 * 10) /* version 2: klen, hlen and flagged, six varints
                                   (seven for a compressed record's), the key */
#define CK_TRAILER 24
#define CK_VERSION 8            /* written; 7 loaded as it is, 1 to 6 converted */
#define CK_FLAGGED 0x80         /* in the hlen byte: client flags not 0 */
#define CK_ZCOMP 0x40           /* version 6, in the hlen byte: a compressed
                                   record's, its raw length after seq */
#define CK_BLOCK_MAX (1u << 20) /* version 5: raw bytes of entries a block holds */


typedef struct wbuf {
    const kura_io *io;
    int fd;
    unsigned char *buf;
    size_t len, cap;
    uint64_t off;               /* bytes written to the file so far */
    uint32_t crc;               /* of every byte written */
    int err;                    /* errno of the first failed write */
} wbuf;

static void wb_write(wbuf *w, const unsigned char *p, size_t n)
{
    size_t done = 0;
    uint64_t at = w->off;
    while (!w->err && done < n) {
        struct iovec v = { (void *)(p + done), n - done };
        ssize_t k = w->io->pwritev(w->io, w->fd, &v, 1, (off_t)(w->off + done));
        if (k < 0 && errno == EINTR)
            continue;
        if (k <= 0)
            w->err = k < 0 ? errno : ENOSPC;
        else
            done += (size_t)k;
    }
    /* one long run per buffer is cheaper than a call per field */
    w->crc = crc32c_update(w->crc, p, done);
    w->off += done;
    /* start writing it back now, so the fdatasync at the end waits for
     * little more than the last buffer (only a hint: errors show there) */
    if (!w->err && done)
        (void)sync_file_range(w->fd, (off_t)at, (off_t)done, SYNC_FILE_RANGE_WRITE);
}

/* Writes what is buffered.  (Versions 5 and 6 wrote their entries in LZO
 * blocks; versions 7 and 8 write their tables: hashdb_cktab.c.) */
static void wb_flush(wbuf *w)
{
    if (!w->len || w->err)
        return;
    wb_write(w, w->buf, w->len);
    w->len = 0;
}

/* Room for n more bytes (n < cap) at the end of the buffer. */
static unsigned char *wb_room(wbuf *w, size_t n)
{
    if (w->len + n > w->cap)
        wb_flush(w);
    return w->buf + w->len;
}

static void wb_put(wbuf *w, const void *p, size_t n)
{
    if (n >= w->cap) {                  /* a stripe's slots may be more */
        wb_flush(w);
        wb_write(w, p, n);
        return;
    }
    memcpy(wb_room(w, n), p, n);
    w->len += n;
}

/* The checkpoint's header, filled under the log's append lock. */
typedef struct ck_head {
    hashdb *db;
    unsigned char *h;
    hd_pos *P;
} ck_head;

static void ck_head_locked(void *arg, const sl_tail *t)
{
    ck_head *c = arg;
    hashdb *db = c->db;
    unsigned char *h = c->h;
    c->P->seg = t->seg;
    c->P->off = t->off;
    memcpy(h, HD_CKPT_MAGIC, 8);
    put32(h + 8, CK_VERSION);
    put32(h + 16, t->seg);
    put64(h + 24, t->off);
    put64(h + 32, t->recno);    /* the last sequence number handed out */
    put64(h + 40, db->state.max_cas);
    put64(h + 48, db->state.oldest_cas);
    put64(h + 56, (uint64_t)db->state.flush_at);
    put64(h + 64, db->state_seq);
    put64(h + 72, db->max_cas_seen);
    put64(h + 80, db->arena.key.k0);
    put64(h + 88, db->arena.key.k1);
    put64(h + 96, db->state.ulog_ts);
    atomic_store(&db->ckpt_lsn, t->lsn);
    atomic_store(&db->ckpt_rolls, t->rolls);
}

static bool retire_prev(hashdb *db, const char *prev, hd_pos P);

/* The checkpoint's bytes into w (its file, tmp): a header with P (set) and
 * the state, every stripe's table, the trailer with the count and CRC. */
static int write_dump(hashdb *db, wbuf *w, int version, hd_pos *P, hd_ckscratch *sc,
                      const char *tmp)
{
    unsigned char h[CK_HDR], t[CK_TRAILER];
    uint64_t count = 0;
    memset(h, 0, sizeof(h));
    /* P, the sequence number and the state as one consistent view: taken
     * under the log's append lock, which the framing callback that hands
     * out sequence numbers runs under too */
    ck_head ch = { db, h, P };
    sl_locked(&db->log, ck_head_locked, &ch);
    /* the log must be on disk before the checkpoint is renamed into place:
     * start its writeback now, to overlap the dump (hd_sync_now waits) */
    sl_writeback_hint(&db->log);
    if (version != CK_VERSION)
        put32(h + 8, version);
    wb_put(w, h, sizeof(h));
    for (int i = 0; i < HD_STRIPES && !w->err; i++) {
        uint64_t items;
        size_t n = hd_cktab_encode(&db->stripes[i], version, sc, &items);
        if (!n)
            return KURA_ENOMEM;
        count += items;
        wb_put(w, sc->out, n);
    }
    memcpy(t, HD_CKPT_END, 8);
    put64(t + 8, count);
    wb_put(w, t, 16);
    wb_flush(w);
    put32(t + 16, w->crc);
    put32(t + 20, 0);
    wb_put(w, t + 16, 8);
    wb_flush(w);
    if (w->err) {
        int rc = hd_errno_status(w->err);
        hd_log(db, KURA_LOG_ERROR, "cannot write %s: %s", tmp, strerror(w->err));
        return rc;
    }
    return KURA_OK;
}

/* The dump at tmp made durable after every record it names, then renamed
 * into place (the current one becoming checkpoint.prev), the directory
 * synced; closes w's file. */
static int put_in_place(hashdb *db, wbuf *w, const char *tmp, const char *cur,
                        const char *prev)
{
    /* every record the checkpoint points at must be on disk before it is */
    int rc = hd_sync_now(db);
    if (rc)
        return rc;
    if (db->io->fdatasync(db->io, w->fd) != 0) {
        hd_fail(db, "fdatasync of a checkpoint", errno);
        return hd_failed(db);
    }
    db->io->close(db->io, w->fd);
    w->fd = -1;
    if (db->io->renameat(db->io, AT_FDCWD, cur, AT_FDCWD, prev) != 0 && errno != ENOENT) {
        rc = hd_errno_status(errno);
        hd_log(db, KURA_LOG_ERROR, "rename %s: %s", cur, strerror(errno));
        return rc;
    }
    if (db->io->renameat(db->io, AT_FDCWD, tmp, AT_FDCWD, cur) != 0) {
        rc = hd_errno_status(errno);
        hd_log(db, KURA_LOG_ERROR, "rename %s: %s", tmp, strerror(errno));
        return rc;
    }
    return hd_fsync_dir(db);   /* failed: sticky, the renames may not be durable */
}

int hd_ckpt_write(hashdb *db)
{
    char tmp[4200], cur[4200], prev[4200];
    wbuf w = { .io = db->io, .fd = -1, .cap = 1 << 20 };
    hd_pos P;
    int rc = KURA_OK;
    hd_ckscratch sc = { 0 };
    int version = KURA_TEST_SWITCH(hashdb_ckpt_v7) ? 7 : CK_VERSION;

    if (db->cfg.read_only)
        return KURA_OK;
    pthread_mutex_lock(&db->ckpt_mu);
    /* only a checkpoint changes ckpt_lsn, under ckpt_mu */
    uint64_t saved_lsn = atomic_load(&db->ckpt_lsn);
    snprintf(tmp, sizeof(tmp), "%s/checkpoint.tmp", db->dir);
    snprintf(cur, sizeof(cur), "%s/checkpoint", db->dir);
    snprintf(prev, sizeof(prev), "%s/checkpoint.prev", db->dir);
    w.buf = malloc(w.cap);
    if ((rc = hd_failed(db)))
        goto out;       /* after a failed sync no checkpoint is trusted */
    /* 0600: it holds the database's hash key, which clients must not learn */
    w.fd = db->io->open(db->io, AT_FDCWD, tmp, O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0600);
    if (!w.buf || w.fd < 0) {
        rc = w.buf ? hd_errno_status(errno) : KURA_ENOMEM;
        hd_log(db, KURA_LOG_ERROR, "cannot create %s: %s", tmp, strerror(errno));
        goto out;
    }

    if ((rc = write_dump(db, &w, version, &P, &sc, tmp)) ||
        (rc = put_in_place(db, &w, tmp, cur, prev)))
        goto out;
    db->ckpt_prev = retire_prev(db, prev, P) ? P : db->ckpt_cur;
    db->ckpt_cur = P;
    db->ckpt_count++;
    atomic_fetch_add(&db->checkpoints, 1);
    hd_retired_drop(db);
out:
    if (w.fd >= 0)
        db->io->close(db->io, w.fd);
    free(w.buf);
    hd_ckscratch_free(&sc);
    if (rc) {
        db->io->unlinkat(db->io, AT_FDCWD, tmp, 0);
        atomic_store(&db->ckpt_lsn, saved_lsn);     /* counts from the last one again */
    }
    pthread_mutex_unlock(&db->ckpt_mu);
    return rc;
}

/* A checkpoint file checked whole and mapped; loaded by ck_load(). */
typedef struct ck_file {
    bool exists, valid;
    const unsigned char *map;
    size_t len;
    hd_pos P;
    uint64_t seq, count;
    uint32_t version;
    bool has_key;               /* version 3: the database's hash key */
    siphash_key key;
    char why[4400];
} ck_file;

static void ck_check(hashdb *db, const char *name, ck_file *ck)
{
    char path[4200];
    struct stat st;
    memset(ck, 0, sizeof(*ck));
    snprintf(path, sizeof(path), "%s/%s", db->dir, name);
    int fd = db->io->open(db->io, db->dirfd, name, O_RDONLY | O_CLOEXEC, 0);
    if (fd < 0) {
        if (errno != ENOENT) {
            ck->exists = true;
            snprintf(ck->why, sizeof(ck->why), "%s: %s", path, strerror(errno));
        }
        return;
    }
    ck->exists = true;
    if (fstat(fd, &st) != 0 || st.st_size < CK_HDR_V2 + CK_TRAILER) {
        snprintf(ck->why, sizeof(ck->why), "%s: too short (%lld bytes)", path,
                 (long long)st.st_size);
        db->io->close(db->io, fd);
        return;
    }
    void *m = db->io->mmap(db->io, (size_t)st.st_size, PROT_READ, MAP_PRIVATE, fd, 0);
    db->io->close(db->io, fd);
    if (m == MAP_FAILED) {
        snprintf(ck->why, sizeof(ck->why), "%s: mmap: %s", path, strerror(errno));
        return;
    }
    ck->map = m;
    ck->len = (size_t)st.st_size;
    const unsigned char *p = m, *t = p + ck->len - CK_TRAILER;
    if (memcmp(p, HD_CKPT_MAGIC, 8) != 0 || memcmp(t, HD_CKPT_END, 8) != 0) {
        snprintf(ck->why, sizeof(ck->why), "%s: bad magic at offset %zu", path,
                 memcmp(p, HD_CKPT_MAGIC, 8) ? (size_t)0 : ck->len - CK_TRAILER);
        return;
    }
    ck->version = get32(p + 8);
    if ((ck->version < 1 || ck->version > CK_VERSION) ||
        (ck->version == 3 && ck->len < CK_HDR_V3 + CK_TRAILER) ||
        (ck->version >= 4 && ck->len < CK_HDR + CK_TRAILER)) {
        snprintf(ck->why, sizeof(ck->why), "%s: unsupported version %u", path, get32(p + 8));
        return;
    }
    if (crc32c_update(0, p, ck->len - 8) != get32(t + 16)) {
        snprintf(ck->why, sizeof(ck->why), "%s: checksum mismatch (file of %zu bytes)",
                 path, ck->len);
        return;
    }
    ck->P.seg = get32(p + 16);
    ck->P.off = get64(p + 24);
    ck->seq = get64(p + 32);
    ck->count = get64(t + 8);
    ck->has_key = ck->version >= 3;
    if (ck->has_key) {
        ck->key.k0 = get64(p + 80);
        ck->key.k1 = get64(p + 88);
    }
    ck->valid = true;
}

static void ck_release(hashdb *db, ck_file *ck)
{
    if (ck->map)
        db->io->munmap(db->io, (void *)ck->map, ck->len);
    ck->map = NULL;
}

/* After a checkpoint at P is in place: true when it reads back whole
 * (its checksum, from the file) and checkpoint.prev is gone, so that only
 * the log from P need be kept.  Not durable by itself: a removal lost to a
 * crash leaves a fallback that the next checkpoint removes.  A checkpoint
 * that does not read back keeps the previous one, with an ERROR line. */
static bool retire_prev(hashdb *db, const char *prev, hd_pos P)
{
    ck_file ck;
    if (KURA_TEST_SWITCH(hashdb_keep_ckpt_prev))
        return false;
    ck_check(db, "checkpoint", &ck);
    bool ok = ck.valid && ck.P.seg == P.seg && ck.P.off == P.off;
    ck_release(db, &ck);
    if (!ok) {
        hd_log(db, KURA_LOG_ERROR, "the checkpoint just written does not read back (%s): "
               "keeping checkpoint.prev", ck.why[0] ? ck.why : "another replay position");
        return false;
    }
    if (db->io->unlinkat(db->io, AT_FDCWD, prev, 0) != 0 && errno != ENOENT) {
        hd_log(db, KURA_LOG_ERROR, "cannot remove %s: %s", prev, strerror(errno));
        return false;
    }
    return true;
}

/* One checkpoint entry, decoded. */
typedef struct ck_ent {
    size_t klen, hlen;
    bool flagged, zcomp;
    const char *key;
    uint32_t seg, off, vlen, rawlen;
    int64_t exptime;
    uint64_t cas, seq;
} ck_ent;

/* Each decodes the entry at p (before end) into f and returns where the
 * next begins, or NULL when it is malformed. */
static const unsigned char *ck_ent_v1(const unsigned char *p, const unsigned char *end,
                                      ck_ent *f)
{
    if (p + CK_ENT_V1 > end || p[0] == 0 || p + CK_ENT_V1 + p[0] > end ||
        get64(p + 8) > UINT32_MAX)
        return NULL;
    f->klen = p[0];
    f->hlen = HD_REC_HDR_V1;    /* it points at version 1 records */
    f->flagged = false;         /* not kept: "bytes" misses 4 until rewritten */
    f->zcomp = false;
    f->key = (const char *)p + CK_ENT_V1;
    f->seg = get32(p + 4);
    f->off = (uint32_t)get64(p + 8);
    f->vlen = f->rawlen = get32(p + 16);
    f->exptime = (int64_t)get64(p + 24);
    f->cas = get64(p + 32);
    f->seq = get64(p + 40);
    return p + CK_ENT_V1 + f->klen;
}

/* Versions 2 to 6 (6 may set CK_ZCOMP: a raw length follows seq). */
static const unsigned char *ck_ent_v2(const unsigned char *p, const unsigned char *end,
                                      uint32_t version, ck_ent *f)
{
    uint64_t seg, off, vlen, exp, raw;
    unsigned zmask = version >= 6 ? CK_ZCOMP : 0;
    if (end - p < 2 || p[0] == 0 || (p[1] & ~(CK_FLAGGED | zmask)) < 8 ||
        (p[1] & ~(CK_FLAGGED | zmask)) > HD_REC_HDR_MAX)
        return NULL;
    f->klen = *p++;
    f->hlen = *p & ~(CK_FLAGGED | zmask);
    f->zcomp = *p & zmask;
    f->flagged = *p++ & CK_FLAGGED;
    if (!(p = get_varint(p, end, &seg)) || !(p = get_varint(p, end, &off)) ||
        !(p = get_varint(p, end, &vlen)) || !(p = get_varint(p, end, &exp)) ||
        !(p = get_varint(p, end, &f->cas)) || !(p = get_varint(p, end, &f->seq)) ||
        seg > UINT32_MAX || off > UINT32_MAX || vlen > UINT32_MAX)
        return NULL;
    raw = vlen;
    if (f->zcomp && (!(p = get_varint(p, end, &raw)) || raw > UINT32_MAX))
        return NULL;
    if (f->klen > (size_t)(end - p))
        return NULL;
    f->rawlen = (uint32_t)raw;
    f->key = (const char *)p;
    f->seg = (uint32_t)seg;
    f->off = (uint32_t)off;
    f->vlen = (uint32_t)vlen;
    f->exptime = unzigzag(exp);
    return p + f->klen;
}

/* One entry of an older checkpoint into the index: a slot, counted.  A
 * checkpoint names each key once, so no lookup (which would read records
 * of segments not open yet). */
static int ck_put(hashdb *db, const ck_ent *f)
{
    uint64_t hv = hd_hash(db, f->key, f->klen);
    hd_stripe *s = hd_stripe_of(db, hv);
    if (!hdx_room(s))
        return KURA_ENOMEM;
    hd_ent ev = { .sl = hdx_insert(s, hv), .seg = f->seg, .off = f->off, .vlen = f->vlen,
                  .rawlen = f->rawlen, .hlen = (uint8_t)f->hlen, .klen = (uint16_t)f->klen,
                  .marks = (uint8_t)((f->flagged ? HD_FLAGGED : 0) | (f->zcomp ? HD_ZCOMP : 0)) };
    hdx_set(ev.sl, f->seg, f->off, hd_rec_size(f->hlen, f->klen, f->vlen), ev.marks);
    hd_ent_ref_bytes(db, s, &ev);
    if (f->seq > db->seq)
        db->seq = f->seq;
    return KURA_OK;
}

static int ck_load_blocks(hashdb *db, ck_file *ck, const unsigned char *p,
                          const unsigned char *end, char *err, size_t errlen);

/* Loads a checked checkpoint into the (empty) index: version 7's tables
 * stripe by stripe (each in cache while it fills); an older one's entries
 * converted to slots, each key hashed under the open's key (a version 1 or
 * 2 checkpoint holds none, and kura_test.hashdb_fresh_key ignores an older
 * one's), and a version 7 checkpoint asked for at once. */
static int ck_load(hashdb *db, ck_file *ck, char *err, size_t errlen)
{
    const unsigned char *p = ck->map, *end = ck->map + ck->len - CK_TRAILER;
    db->seq = get64(p + 32);
    db->state.max_cas = get64(p + 40);
    db->state.oldest_cas = get64(p + 48);
    db->state.flush_at = (int64_t)get64(p + 56);
    db->state_seq = get64(p + 64);
    db->max_cas_seen = get64(p + 72);
    db->state.ulog_ts = ck->version >= 4 ? get64(p + 96) : 0;
    p += ck->version >= 4 ? CK_HDR : ck->version == 3 ? CK_HDR_V3 : CK_HDR_V2;
    if (ck->version >= 7) {
        if (ck->version < CK_VERSION) {
            hd_log(db, KURA_LOG_INFO, "checkpoint version %u: writing version %d (smaller) "
                   "after loading it", ck->version, CK_VERSION);
            db->need_ckpt = true;
        }
        return hd_cktab_load(db, (int)ck->version, ck->map, p, end, ck->count, err, errlen);
    }
    hd_log(db, KURA_LOG_INFO, "checkpoint version %u (an entry per key): converting it to "
           "version %d (the index's tables), %llu entries", ck->version, CK_VERSION,
           (unsigned long long)ck->count);
    db->need_ckpt = true;
    hdx_reserve(db, ck->count);
    if (ck->version >= 5)
        return ck_load_blocks(db, ck, p, end, err, errlen);
    for (uint64_t i = 0; i < ck->count; i++) {
        ck_ent f;
        const unsigned char *next = ck->version == 1 ? ck_ent_v1(p, end, &f)
                                                     : ck_ent_v2(p, end, ck->version, &f);
        if (!next) {
            snprintf(err, errlen, "%s/checkpoint: bad entry %llu at offset %zu", db->dir,
                     (unsigned long long)i, (size_t)(p - ck->map));
            return KURA_ECORRUPT;
        }
        if (ck_put(db, &f))
            return KURA_ENOMEM;
        p = next;
    }
    return KURA_OK;
}

/* Version 5: the entries in LZO blocks, each decompressed into one buffer
 * and read as version 2 entries; the block's lengths are checked before
 * anything is read (the file's CRC, checked already, covers the bytes). */
static int ck_load_blocks(hashdb *db, ck_file *ck, const unsigned char *p,
                          const unsigned char *end, char *err, size_t errlen)
{
    unsigned char *raw = malloc(CK_BLOCK_MAX);
    uint64_t i = 0;
    int rc = KURA_OK;
    if (!raw)
        return KURA_ENOMEM;
    while (p < end && rc == KURA_OK) {
        size_t at = (size_t)(p - ck->map);
        uint32_t rlen = end - p >= 8 ? get32(p) : 0, zlen = end - p >= 8 ? get32(p + 4) : 0;
        if (end - p < 8 || rlen == 0 || rlen > CK_BLOCK_MAX || zlen > (size_t)(end - p - 8) ||
            codec_decompress(KURA_CODEC_LZO, p + 8, zlen, raw, rlen) != KURA_OK) {
            snprintf(err, errlen, "%s/checkpoint: bad block at offset %zu", db->dir, at);
            rc = KURA_ECORRUPT;
            break;
        }
        p += 8 + zlen;
        const unsigned char *q = raw, *qend = raw + rlen;
        while (q < qend) {
            ck_ent f;
            const unsigned char *next = ck_ent_v2(q, qend, ck->version, &f);
            if (!next || i == ck->count) {
                snprintf(err, errlen, "%s/checkpoint: bad entry %llu in the block at offset %zu",
                         db->dir, (unsigned long long)i, at);
                rc = KURA_ECORRUPT;
                break;
            }
            if (ck_put(db, &f)) {
                rc = KURA_ENOMEM;
                break;
            }
            i++;
            q = next;
        }
    }
    free(raw);
    if (rc == KURA_OK && i != ck->count) {
        snprintf(err, errlen, "%s/checkpoint: %llu entries, its trailer says %llu", db->dir,
                 (unsigned long long)i, (unsigned long long)ck->count);
        rc = KURA_ECORRUPT;
    }
    return rc;
}

/* ---- recovery ---------------------------------------------------------- */

static int apply(hashdb *db, uint32_t seg, uint64_t off, const hd_rec *r, const unsigned char *p)
{
    if (r->seq > db->seq)
        db->seq = r->seq;
    if (r->type == HD_REC_STATE) {
        if (r->seq > db->state_seq) {
            const unsigned char *v = p + r->hlen;
            db->state_seq = r->seq;
            db->state.max_cas = get64(v);
            db->state.oldest_cas = get64(v + 8);
            db->state.flush_at = (int64_t)get64(v + 16);
            db->state.ulog_ts = r->vlen >= 32 ? get64(v + 24) : 0;
        }
        return KURA_OK;
    }
    if (off > UINT32_MAX)
        return KURA_ECORRUPT;
    const char *key = (const char *)p + r->hlen;
    uint64_t hv = hd_hash(db, key, r->klen);
    hd_stripe *s = hd_stripe_of(db, hv);
    bool zcomp = r->type == HD_REC_ZPUT;
    hd_ent ev, *e = hdx_find(db, s, hv, key, r->klen, &ev);
    if (e && (hd_rec_is_put(r->type) ? r->seq < e->seq : r->seq <= e->seq))
        return KURA_OK;     /* an older version, or a copy of one */
    if (db->cksum && !KURA_TEST_SWITCH(hashdb_cksum_unmarked))
        db->cksum[s - db->stripes].stale = true;    /* its table is read at the end */
    if (!e && !hdx_room(s))
        return KURA_ENOMEM;
    if (e && !e->dead)
        hd_ent_unref_bytes(db, s, e);
    hd_slot *sl = e ? e->sl : hdx_insert(s, hv);
    uint64_t rlen = hd_rec_size(r->hlen, r->klen, r->vlen);
    if (r->type == HD_REC_DEL) {
        /* kept, naming the deletion, until the end of replay: an older
         * version met later (a compacted copy) must not bring it back */
        hdx_set(sl, seg, off, rlen, HD_DEAD);
        return KURA_OK;
    }
    if (r->cas > db->max_cas_seen)
        db->max_cas_seen = r->cas;
    hd_ent n = { .sl = sl, .seg = seg, .off = (uint32_t)off, .vlen = r->vlen,
                 .rawlen = r->rawlen, .hlen = r->hlen, .klen = r->klen,
                 .marks = (uint8_t)((r->flags ? HD_FLAGGED : 0) | (zcomp ? HD_ZCOMP : 0)) };
    hdx_set(sl, seg, off, rlen, n.marks);
    hd_ent_ref_bytes(db, s, &n);
    return KURA_OK;
}

/* True if the bytes at off hold no record at all: a zero header, and for a
 * segment other than the newest, nothing but zeros to its end (which only
 * a crash between creating the next segment and trimming this one leaves). */
static bool zero_from(hd_scan *sc, uint64_t off, bool last)
{
    unsigned char z[4096];
    if (off >= sc->fsize)
        return false;
    for (uint64_t o = off; o < sc->fsize; o += sizeof(z)) {
        size_t n = sc->fsize - o < sizeof(z) ? (size_t)(sc->fsize - o) : sizeof(z);
        size_t probe = sc->version == 1 ? HD_REC_HDR_V1 : 16;
        if (o == off && n > probe && last)
            n = probe;
        ssize_t got = sc->io->pread(sc->io, sc->fd, z, n, (off_t)o);
        if (got != (ssize_t)n)
            return false;
        for (size_t i = 0; i < n; i++)
            if (z[i])
                return false;
        if (last)
            return true;
    }
    return true;
}

/* True if [from, to) (a record that fails its checks, up to the next valid
 * one) shows what a power loss leaves in the unsynced tail of a log: a run
 * of zeros that ends at a 4 KiB page boundary.  Every byte of the log is
 * written once, so a byte on the disk is either its final value or still
 * zero; and the kernel writes whole pages back, each with the content it
 * had at that moment (records up to some point, zeros after), and a page
 * cut short by the power loss is torn at a sector, its later sectors
 * holding what they held before (again records, then zeros).  So stale
 * bytes are always a zero run reaching the end of their page, however
 * short (test_powerloss found pages whose stale part was the first 3
 * bytes of a record's crc, and records whose head was a page's last
 * bytes).  Damage from bit flips does not have that shape, unless it hits
 * a record whose bytes just before a page boundary happen to be zero. */
static bool stale_page_in(const kura_io *io, int fd, uint64_t from, uint64_t to)
{
    for (uint64_t b = (from + 4096) & ~(uint64_t)4095; b <= to; b += 4096) {
        unsigned char c;
        if (io->pread(io, fd, &c, 1, (off_t)(b - 1)) == 1 && c == 0)
            return true;
    }
    return false;
}

/* Replays one segment from off.  last: the newest segment, whose torn tail
 * is cut off rather than reported. */
static int replay_segment(hashdb *db, hd_seg *sg, uint64_t off, bool last,
                          char *err, size_t errlen)
{
    hd_scan sc;
    hd_rec r;
    const unsigned char *p;
    int rc = KURA_OK;
    char path[4200];
    sl_seg_path(&db->log, sg->id, path, sizeof(path));
    hd_scan_init(db, &sc, sg);
    while (off < sg->size) {
        int s = hd_scan_rec(&sc, off, &r, &p);
        if (s == KURA_OK) {
            rc = apply(db, sg->id, off, &r, p);
            if (rc)
                break;
            db->recovered_records++;
            off += hd_rec_size(r.hlen, r.klen, r.vlen);
            continue;
        }
        if (s == KURA_ENOMEM) {
            rc = s;
            break;
        }
        if (s == KURA_ECORRUPT && zero_from(&sc, off, last)) {
            /* never written: a preallocated tail, or (last segment only) a
             * page the kernel had not written back when the power went */
            if (off < sg->size)
                rc = sl_seg_cut(&db->log, sg, off, "a never-written tail",
                                &db->truncated_bytes, err, errlen);
            break;
        }
        uint64_t next = hd_scan_resync(&sc, off);
        if (s == KURA_ECORRUPT && last && next >= sg->size) {
            /* a torn tail: the record being written when we stopped */
            rc = sl_seg_cut(&db->log, sg, off, "a torn record", &db->truncated_bytes, err,
                            errlen);
            break;
        }
        if (s == KURA_ECORRUPT && last && stale_page_in(db->io, sg->fd, off, next)) {
            /* a page that never reached the disk (power loss: the kernel
             * writes pages back in any order); nothing after it was ever
             * covered by a completed sync, so it is cut like a torn tail */
            rc = sl_seg_cut(&db->log, sg, off, "an unwritten page", &db->truncated_bytes,
                            err, errlen);
            break;
        }
        if (!db->cfg.recover) {
            snprintf(err, errlen, "%s: %s at offset %llu (start with recovery to salvage the "
                     "intact records)", path, s == KURA_EIO ? "read error" : "corrupt record",
                     (unsigned long long)off);
            rc = s == KURA_EIO ? KURA_EIO : KURA_ECORRUPT;
            break;
        }
        hd_log(db, KURA_LOG_ERROR, "%s: skipping %llu damaged bytes at offset %llu", path,
               (unsigned long long)(next - off), (unsigned long long)off);
        db->recovery_lost++;
        off = next;
    }
    hd_scan_done(&sc);
    return rc;
}

/* Live bytes summed for up to LIVE_IDS segments (by id modulo: segments
 * are numbered in order, so the ones a store keeps rarely collide) before
 * they are added to theirs: a table's slots name segments in no order, and
 * an atomic add for each would have the threads of hd_each_stripe fight
 * over a few lines. */
#define LIVE_IDS 64
typedef struct live_sums {
    uint32_t id[LIVE_IDS];      /* 0: none (no segment is 0) */
    uint64_t bytes[LIVE_IDS];
} live_sums;

static void live_put(hashdb *db, live_sums *ls, int k)
{
    hd_seg *sg = hd_seg_get(db, ls->id[k]);
    atomic_fetch_add_explicit(&sg->live, ls->bytes[k], memory_order_relaxed);
    ls->id[k] = 0;
}

static void live_flush(hashdb *db, live_sums *ls)
{
    for (int k = 0; k < LIVE_IDS; k++)
        if (ls->id[k])
            live_put(db, ls, k);
}

static inline void live_add(hashdb *db, live_sums *ls, uint32_t id, uint64_t bytes)
{
    int k = (int)(id % LIVE_IDS);
    if (ls->id[k] != id) {
        if (ls->id[k])
            live_put(db, ls, k);
        ls->id[k] = id;
        ls->bytes[k] = 0;
    }
    ls->bytes[k] += bytes;
}

/* One stripe after replay (without recovery): its tombstones dropped, its
 * entries' segments checked (the first missing one kept in missing[i]),
 * their live bytes summed. */
static void finish_stripe(hashdb *db, int i, int worker, void *arg)
{
    (void)worker;
    uint32_t *missing = arg;
    hd_stripe *s = &db->stripes[i];
    live_sums ls = { 0 };
    const hd_cksum *cs = db->cksum ? &db->cksum[i] : NULL;
    if (cs && cs->valid && !cs->stale) {
        /* its slots are the checkpoint's, summed as they loaded: no dead
         * mark among them (the load refuses one) */
        for (uint32_t k = 0; k < cs->n; k++) {
            if (!hd_seg_get(db, cs->run[k].seg))
                missing[i] = missing[i] ? missing[i] : cs->run[k].seg;
            else
                live_add(db, &ls, cs->run[k].seg, cs->run[k].bytes);
        }
        live_flush(db, &ls);
        return;
    }
    for (size_t j = 0; j < s->nslot; j++) {
        hd_slot *sl = &s->slot[j];
        if (!hd_slot_used(sl))
            continue;
        if (sl->tag & HD_DEAD)
            hdx_remove(s, sl);
        else if (!hd_seg_get(db, sl->seg))
            missing[i] = missing[i] ? missing[i] : sl->seg;
        else
            live_add(db, &ls, sl->seg, sl->rlen);
    }
    live_flush(db, &ls);
}

/* After replay: drop tombstones, check every entry's segment exists (and
 * with recovery, that its record is intact, counting the totals again),
 * sum the segments' live bytes from the slots (no record read).  Without
 * recovery, on the stripes in parallel (hd_each_stripe): it reads every
 * slot of the index. */
static int finish_index(hashdb *db, char *err, size_t errlen)
{
    if (!db->cfg.recover) {
        uint32_t *missing = calloc(HD_STRIPES, sizeof(*missing));
        if (!missing) {
            snprintf(err, errlen, "out of memory");
            return KURA_ENOMEM;
        }
        /* threads only for an index worth them: a small store's open
         * (every test's) starts none */
        uint64_t used = 0;
        for (int i = 0; i < HD_STRIPES; i++)
            used += db->stripes[i].count;
        hd_each_stripe(db, used, finish_stripe, missing);
        int rc = KURA_OK;
        for (int i = 0; i < HD_STRIPES && !rc; i++)
            if (missing[i]) {
                snprintf(err, errlen, "%s/%08x.seg: missing, but the index points "
                         "into it (start with recovery to salvage the rest)",
                         db->dir, missing[i]);
                rc = KURA_ECORRUPT;
            }
        free(missing);
        return rc;
    }
    live_sums ls = { 0 };
    for (int i = 0; i < HD_STRIPES; i++) {
        hd_stripe *s = &db->stripes[i];
        uint64_t items = 0, bytes = 0;
        for (size_t j = 0; j < s->nslot; j++) {
            hd_slot *sl = &s->slot[j];
            if (!hd_slot_used(sl))
                continue;
            if (sl->tag & HD_DEAD) {
                hdx_remove(s, sl);
                continue;
            }
            hd_seg *sg = hd_seg_get(db, sl->seg);
            hd_ent ev;
            const unsigned char *p;
            hd_rec r;
            kura_item it;
            int rc = sg ? hdx_decode(db, sl, &ev) : KURA_NOTFOUND;
            if (rc == KURA_OK)
                rc = hd_read_item(db, &ev, &it, &p, &r);
            if (rc != KURA_OK) {
                hd_log(db, KURA_LOG_ERROR, "%s/%08x.seg offset %u: %s: an item lost",
                       db->dir, sl->seg, sl->off,
                       sg ? "its record is damaged" : "segment missing");
                db->recovery_lost++;
                hdx_remove(s, sl);
                continue;
            }
            items++;
            bytes += kura_item_wire_total(ev.klen, ev.rawlen, ev.marks & HD_FLAGGED);
            live_add(db, &ls, sl->seg, sl->rlen);
        }
        atomic_store_explicit(&s->items, items, memory_order_relaxed);
        atomic_store_explicit(&s->bytes, bytes, memory_order_relaxed);
    }
    live_flush(db, &ls);
    return KURA_OK;
}

/* Picks the newer intact checkpoint of cur and prev (read by the caller)
 * and loads it, or, with none, decides where a replay starts.  Sets *use
 * to the one loaded (NULL for none) and *P to where replay starts. */
static int load_checkpoint(hashdb *db, const uint32_t *ids, size_t nids, ck_file *cur,
                           ck_file *prev, ck_file **use, hd_pos *P, char *err, size_t errlen)
{
    int rc;
    *use = NULL;
    if (cur->valid && (!prev->valid || cur->seq >= prev->seq))
        *use = cur;
    else if (prev->valid)
        *use = prev;
    if (cur->exists && !cur->valid)
        hd_log(db, KURA_LOG_ERROR, "checkpoint damaged (%s)%s", cur->why,
               *use ? "; using checkpoint.prev and replaying more of the log" : "");

    if (*use) {
        *P = (*use)->P;
        /* the database's hash key, before anything is hashed (else the
         * one hdx_init drew stays, and the next checkpoint keeps it) */
        if ((*use)->has_key && (!KURA_TEST_SWITCH(hashdb_fresh_key) || (*use)->version >= 7))
            db->arena.key = (*use)->key;   /* version 7's tables are laid out by it */
        KURA_TEST_SET(hashdb_fresh_key, false);
        rc = ck_load(db, *use, err, errlen);
        if (rc)
            return rc;
        ck_file *other = *use == cur ? prev : cur;
        db->ckpt_cur = *P;
        db->ckpt_prev = other->valid && other->P.seg < P->seg ? other->P : *P;
        if (other->valid && other->P.seg == P->seg && other->P.off < P->off)
            db->ckpt_prev = other->P;
    } else if (cur->exists || prev->exists) {
        if (!db->cfg.recover) {
            snprintf(err, errlen, "%s: no intact checkpoint (%s); start with recovery to "
                     "rebuild the index by scanning every segment", db->dir,
                     cur->why[0] ? cur->why : prev->why);
            return KURA_ECORRUPT;
        }
        hd_log(db, KURA_LOG_ERROR, "no intact checkpoint: rebuilding the index from every segment "
               "(keys deleted long ago may reappear)");
        P->seg = nids ? ids[0] : 1;
    } else if (nids && ids[0] != 1 && !db->cfg.recover) {
        snprintf(err, errlen, "%s: checkpoint files are missing; start with recovery to "
                 "rebuild the index", db->dir);
        return KURA_ECORRUPT;
    } else {
        P->seg = nids ? ids[0] : 1;   /* never checkpointed: a full replay is exact */
    }
    return KURA_OK;
}

/* Opens every segment of ids into segs (a lookup in replay reads the
 * record an entry names, which may lie in any of them).  A newest segment
 * torn at its creation leaves *nids one shorter; with recovery, a damaged
 * one is set aside (its slot stays NULL). */
static int open_segments(hashdb *db, const uint32_t *ids, size_t *nids, hd_seg **segs,
                         char *err, size_t errlen)
{
    for (size_t i = 0; i < *nids; i++) {
        hd_seg *sg;
        char e2[300];
        int rc = sl_seg_open(&db->log, ids[i], &sg, e2, sizeof(e2));
        if (rc == KURA_ECORRUPT && i == *nids - 1 &&
            sl_torn_creation(&db->log, ids[i], &db->truncated_bytes)) {
            (*nids)--;  /* died while creating it: it never held a record */
            break;
        }
        if (rc) {
            if (!db->cfg.recover || rc == KURA_ENOMEM) {
                snprintf(err, errlen, "%s", e2);
                return rc;
            }
            hd_log(db, KURA_LOG_ERROR, "%s: skipped", e2);
            db->recovery_lost++;
            sl_set_aside(&db->log, ids[i]);
            continue;
        }
        segs[i] = sg;
    }
    return KURA_OK;
}

/* Replays the segments at or after P, in order; a gap or a segment
 * shorter than P says is corruption (with recovery: logged, lost). */
static int replay_segments(hashdb *db, const uint32_t *ids, size_t nids, hd_seg **segs,
                           hd_pos P, char *err, size_t errlen)
{
    uint32_t expect = P.seg;
    for (size_t i = 0; i < nids; i++) {
        hd_seg *sg = segs[i];
        if (!sg || ids[i] < P.seg)
            continue;
        if (ids[i] != expect) {
            if (!db->cfg.recover) {
                snprintf(err, errlen, "%s/%08x.seg: missing from the log", db->dir, expect);
                return KURA_ECORRUPT;
            }
            hd_log(db, KURA_LOG_ERROR, "%s/%08x.seg: missing from the log", db->dir, expect);
            db->recovery_lost++;
        }
        expect = ids[i] + 1;
        uint64_t start = ids[i] == P.seg ? P.off : HD_SEG_HDR;
        if (start > sg->size) {
            if (!db->cfg.recover) {
                snprintf(err, errlen, "%s/%08x.seg: shorter (%llu bytes) than the checkpoint "
                         "says (%llu)", db->dir, ids[i], (unsigned long long)sg->size,
                         (unsigned long long)start);
                return KURA_ECORRUPT;
            }
            start = sg->size;
        }
        int rc = replay_segment(db, sg, start, i == nids - 1, err, errlen);
        if (rc)
            return rc;
    }
    return KURA_OK;
}

/* Makes the newest segment the active one (a new one if there is none),
 * the others sealed; sequence numbers go on from the highest seen. */
static int start_log(hashdb *db, const uint32_t *ids, size_t nids, hd_pos P, char *err,
                     size_t errlen)
{
    hd_seg *last = nids ? hd_seg_get(db, ids[nids - 1]) : NULL;
    if (!last) {
        if (db->cfg.read_only) {
            snprintf(err, errlen, "%s: no segment to open read-only", db->dir);
            return KURA_EINVAL;
        }
        int rc = sl_seg_create(&db->log, nids ? ids[nids - 1] + 1 : P.seg, 0, &last);
        if (rc) {
            snprintf(err, errlen, "%s: cannot create a segment: %s", db->dir, kura_strerror(rc));
            return rc;
        }
    }
    sl_start(&db->log, last, nids ? ids[0] : last->id);
    sl_set_recno(&db->log, db->seq);
    return KURA_OK;
}

int hd_recover(hashdb *db, char *err, size_t errlen)
{
    uint32_t *ids = NULL;
    size_t nids = 0;
    ck_file cur, prev, *use = NULL;
    hd_seg **segs = NULL;
    hd_pos P = { 1, HD_SEG_HDR };
    int rc;
    char tmp[4200];

    db->recovering = true;      /* live bytes summed by finish_index */
    snprintf(tmp, sizeof(tmp), "%s/checkpoint.tmp", db->dir);
    if (!db->cfg.read_only)
        db->io->unlinkat(db->io, AT_FDCWD, tmp, 0);
    rc = sl_list(&db->log, &ids, &nids);
    if (rc) {
        snprintf(err, errlen, "%s: cannot list the directory", db->dir);
        return rc;
    }
    ck_check(db, "checkpoint", &cur);
    ck_check(db, "checkpoint.prev", &prev);
    if ((rc = load_checkpoint(db, ids, nids, &cur, &prev, &use, &P, err, errlen)))
        goto out;

    /* open every segment first, then replay those at or after P */
    segs = calloc(nids ? nids : 1, sizeof(*segs));
    if (!segs) {
        snprintf(err, errlen, "out of memory");
        rc = KURA_ENOMEM;
        goto out;
    }
    if ((rc = open_segments(db, ids, &nids, segs, err, errlen)) ||
        (rc = replay_segments(db, ids, nids, segs, P, err, errlen)) ||
        (rc = finish_index(db, err, errlen)) ||
        (rc = start_log(db, ids, nids, P, err, errlen)))
        goto out;
    if (!use) {
        db->ckpt_cur = db->ckpt_prev = P;
        db->need_ckpt = true;
    }
    if (db->cfg.recover)
        db->need_ckpt = true;
    rc = KURA_OK;
out:
    db->recovering = false;
    hd_cksum_free(db);
    ck_release(db, &cur);
    ck_release(db, &prev);
    free(segs);
    free(ids);
    return rc;
}
