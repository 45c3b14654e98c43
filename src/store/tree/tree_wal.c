/*
 * tree_wal.c - the B+ tree's write-ahead log: its records, and replay.
 *
 * The log is seglog (src/log/, the hash file's log): numbered segment
 * files in the database directory, appends, the group commit and its
 * sticky failure.  Every change is one record carrying its result (the
 * whole item, or a delete, or the engine's state), appended under the tree
 * lock before the tree changes, so the log's order is the order of the
 * changes and replaying a record twice does no harm.
 *
 * A record is a 32-byte head then the key and the value (STATE: max_cas,
 * oldest_cas, flush_at, ulog_ts, 8 bytes each):
 *   0 crc32c of key ++ value, continued over bytes 4..31 | 4 magic "Kt" |
 *   6 type (1 PUT, 2 DEL, 3 STATE) | 7 klen | 8 vlen u32 | 12 flags u32 |
 *   16 exptime i64 | 24 cas u64
 *
 * At open the tree is as of its meta page's log position P; the records
 * from P on are applied again (bt_wal_replay).  The newest segment may end
 * in a torn record or in the zeros of its preallocated tail: it is cut
 * there.  Segments before P's are no longer needed and are removed, at
 * open and after every checkpoint (do_wal_trim).
 */
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "kura/crc32c.h"
#include "tree_int.h"

static size_t frame_ready(void *arg, unsigned char *head, uint64_t recno)
{
    (void)head;
    (void)recno;
    return *(const size_t *)arg;
}

int do_wal_append(btree *bt, int type, const char *key, size_t klen, const void *v0, size_t l0,
                  const void *v1, size_t l1, uint32_t flags, int64_t exptime, uint64_t cas,
                  uint64_t *lsn)
{
    unsigned char head[BT_REC_HDR];
    bt_put16(head + 4, BT_REC_MAGIC);
    head[6] = (unsigned char)type;
    head[7] = (unsigned char)klen;
    bt_put32(head + 8, (uint32_t)(l0 + l1));
    bt_put32(head + 12, flags);
    bt_put64(head + 16, (uint64_t)exptime);
    bt_put64(head + 24, cas);
    uint32_t crc = crc32c_update(0, key, klen);
    crc = crc32c_update(crc, v0, l0);
    crc = crc32c_update(crc, v1, l1);
    bt_put32(head, crc32c_update(crc, head + 4, BT_REC_HDR - 4));
    struct iovec iov[4];
    int n = 0;
    iov[n++] = (struct iovec){ head, BT_REC_HDR };
    if (klen)
        iov[n++] = (struct iovec){ (void *)key, klen };
    if (l0)
        iov[n++] = (struct iovec){ (void *)v0, l0 };
    if (l1)
        iov[n++] = (struct iovec){ (void *)v1, l1 };
    size_t hl = BT_REC_HDR;
    sl_loc loc;
    int rc = sl_append(&bt->log, iov, n, BT_REC_HDR, klen + l0 + l1, false, frame_ready, &hl,
                       &loc);
    if (rc == KURA_OK && lsn)
        *lsn = loc.lsn;
    return rc;
}

/* Decodes the record at p (avail bytes): its length, SL_NOT_REC, or
 * SL_NEED_MORE with *need. */
static long long rec_decode(const unsigned char *p, size_t avail, bt_rec *r, size_t *need)
{
    if (avail < BT_REC_HDR) {
        *need = BT_REC_HDR;
        return SL_NEED_MORE;
    }
    if (bt_get16(p + 4) != BT_REC_MAGIC)
        return SL_NOT_REC;
    r->type = p[6];
    r->klen = p[7];
    r->vlen = bt_get32(p + 8);
    r->flags = bt_get32(p + 12);
    r->exptime = (int64_t)bt_get64(p + 16);
    r->cas = bt_get64(p + 24);
    switch (r->type) {
    case BT_REC_PUT:
        if (r->klen < 1 || r->vlen > UINT32_MAX - 1024)
            return SL_NOT_REC;
        break;
    case BT_REC_DEL:
        if (r->klen < 1 || r->vlen)
            return SL_NOT_REC;
        break;
    case BT_REC_STATE:
        if (r->klen || r->vlen != 32)
            return SL_NOT_REC;
        break;
    default:
        return SL_NOT_REC;
    }
    size_t total = BT_REC_HDR + (size_t)r->klen + r->vlen;
    if (avail < total) {
        *need = total;
        return SL_NEED_MORE;
    }
    uint32_t crc = crc32c_update(0, p + BT_REC_HDR, total - BT_REC_HDR);
    if (crc32c_update(crc, p + 4, BT_REC_HDR - 4) != bt_get32(p))
        return SL_NOT_REC;
    r->key = (const char *)p + BT_REC_HDR;
    r->val = p + BT_REC_HDR + r->klen;
    return (long long)total;
}

static long long rec_check(void *arg, const unsigned char *p, size_t avail, uint32_t version,
                           size_t *need)
{
    bt_rec tmp;
    if (version != BT_WAL_VERSION)
        return SL_NOT_REC;
    return rec_decode(p, avail, arg ? arg : &tmp, need);
}

/* Applies one record to the tree (no log record written). */
static int do_replay_one(btree *bt, const bt_rec *r)
{
    if (r->type == BT_REC_STATE) {
        bt->state.max_cas = bt_get64(r->val);
        bt->state.oldest_cas = bt_get64(r->val + 8);
        bt->state.flush_at = (int64_t)bt_get64(r->val + 16);
        bt->state.ulog_ts = bt_get64(r->val + 24);
        return KURA_OK;
    }
    bt_path path;
    int rc = do_reserve(bt, 2 * (size_t)bt->height + 8);
    if (rc == KURA_OK)
        rc = do_descend(bt, r->key, r->klen, &path);
    if (rc)
        return rc;
    if (r->type == BT_REC_PUT) {
        rc = do_apply_put(bt, &path, r->key, r->klen, r->flags, r->exptime, r->cas, r->val,
                          r->vlen, NULL, 0, NULL);
    } else if (path.found) {
        bt_cell c;
        int lvl = path.depth - 1;
        pg_leaf_decode(pg_ccell(path.pg[lvl]->data, (unsigned)path.idx[lvl]), &c);
        do_touch_path(bt, &path);
        if (c.ovf)
            do_free_pgno(bt, c.ovf_pgno, bt_ovf_pages(bt, c.ovf_bytes), false);
        bt->items--;
        bt->bytes -= bt_item_bytes(c.klen, c.vlen, c.flags);
        do_leaf_remove(bt, &path);
    }
    do_path_release(bt, &path);
    return rc;
}

/* Replays segment sg from off.  With `newest`, a record that is not whole
 * ends the log there (cut); otherwise it is damage. */
static int replay_seg(btree *bt, sl_seg *sg, uint64_t off, bool newest, char *err,
                      size_t errlen)
{
    sl_scan sc;
    int rc;
    sl_scan_init(&sc, &bt->log, sg, BT_REC_HDR);
    for (;;) {
        const unsigned char *p;
        size_t len;
        bt_rec r;
        rc = sl_scan_rec(&sc, off, &r, &p, &len);
        if (rc == 1) {
            rc = KURA_OK;
            break;
        }
        if (rc == KURA_ECORRUPT && newest) {
            rc = sl_seg_cut(&bt->log, sg, off, "a torn record", &bt->wal_cut, err, errlen);
            break;
        }
        if (rc) {
            snprintf(err, errlen, "%s/%08x.seg: %s at offset %llu", bt->dir, sg->id,
                     rc == KURA_ECORRUPT ? "a damaged record" : "cannot read",
                     (unsigned long long)off);
            break;
        }
        if ((rc = do_replay_one(bt, &r))) {
            snprintf(err, errlen, "%s/%08x.seg: cannot apply the record at offset %llu: %s",
                     bt->dir, sg->id, (unsigned long long)off, kura_strerror(rc));
            break;
        }
        atomic_fetch_add_explicit(&bt->recovered_records, 1, memory_order_relaxed);
        off += len;
        /* the cache's bound holds during replay too: a checkpoint as of
         * this record (the log before it is then not needed) */
        if (bt->ndirty >= bt->cap / 2) {
            bt->wal_at_seg = sg->id;
            bt->wal_at_off = off;
            if ((rc = do_checkpoint(bt))) {
                snprintf(err, errlen, "%s: checkpoint during replay: %s", bt->dir,
                         kura_strerror(rc));
                break;
            }
        }
    }
    sl_scan_done(&sc);
    return rc;
}

int bt_wal_open(btree *bt, char *err, size_t errlen)
{
    uint32_t *ids = NULL;
    size_t n = 0;
    uint64_t cut = 0;
    int rc;
    if ((rc = sl_list(&bt->log, &ids, &n))) {
        snprintf(err, errlen, "%s: cannot list the log's segments", bt->dir);
        return rc;
    }
    if (n && sl_torn_creation(&bt->log, ids[n - 1], &cut))
        n--;
    bt->wal_cut += cut;
    /* segments before the meta page's are not needed any more */
    size_t first = 0;
    while (first < n && ids[first] < bt->ckpt_seg)
        first++;
    sl_seg *sg = NULL;
    for (size_t i = first; i < n; i++) {
        if (ids[i] != ids[first] + (i - first)) {
            snprintf(err, errlen, "%s: log segment %08x is missing", bt->dir,
                     ids[first] + (uint32_t)(i - first));
            rc = KURA_ECORRUPT;
            goto out;
        }
        if ((rc = sl_seg_open(&bt->log, ids[i], &sg, err, errlen)))
            goto out;
    }
    bt->replaying = true;
    for (size_t i = first; i < n; i++) {
        sl_seg *s = sl_seg_get(&bt->log, ids[i]);
        uint64_t off = ids[i] == bt->ckpt_seg ? bt->ckpt_off : SL_SEG_HDR;
        if (off > s->size) {
            snprintf(err, errlen, "%s/%08x.seg: shorter (%llu bytes) than the tree's log "
                     "position %llu", bt->dir, ids[i], (unsigned long long)s->size,
                     (unsigned long long)off);
            rc = KURA_ECORRUPT;
            goto out;
        }
        if ((rc = replay_seg(bt, s, off, i == n - 1, err, errlen)))
            goto out;
    }
    bt->replaying = false;
    if (first == n) {
        uint32_t id = n && ids[n - 1] >= bt->ckpt_seg ? ids[n - 1] + 1 : bt->ckpt_seg;
        if (id == 0)
            id = 1;
        if ((rc = sl_seg_create(&bt->log, id, 0, &sg))) {
            snprintf(err, errlen, "%s: cannot create a log segment: %s", bt->dir,
                     kura_strerror(rc));
            goto out;
        }
    }
    /* the older ones go (the meta page that made them useless is durable) */
    for (size_t i = 0; i < first && !bt->cfg.read_only; i++) {
        char path[4200];
        sl_seg_path(&bt->log, ids[i], path, sizeof(path));
        (void)bt->io->unlinkat(bt->io, AT_FDCWD, path, 0);
    }
    if (first && !bt->cfg.read_only)
        (void)sl_fsync_dir(&bt->log);
    sl_start(&bt->log, sg, first < n ? ids[first] : sg->id);
    bt->wal_started = true;
    rc = KURA_OK;
out:
    bt->replaying = false;
    free(ids);
    return rc;
}

void do_wal_trim(btree *bt)
{
    if (!bt->wal_started)
        return;
    uint32_t first = sl_first(&bt->log), active = sl_active_id(&bt->log);
    bool dropped = false;
    for (uint32_t id = first; id < bt->ckpt_seg && id < active; id++) {
        sl_seg *sg = sl_seg_get(&bt->log, id);
        if (sg) {
            sl_seg_drop(&bt->log, sg);
            dropped = true;
        }
    }
    if (dropped)
        sl_first_advance(&bt->log, bt->ckpt_seg < active ? bt->ckpt_seg : active);
}

long long bt_wal_check(void *arg, const unsigned char *p, size_t avail, uint32_t version,
                       size_t *need)
{
    return rec_check(arg, p, avail, version, need);
}
