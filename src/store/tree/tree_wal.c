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
 *   6 type (1 PUT, 2 DEL, 3 STATE, 4 RUN) | 7 klen | 8 vlen u32 |
 *   12 flags u32 | 16 exptime i64 | 24 cas u64
 * A RUN record (log format version 2) carries, instead of the value, the
 * place a put wrote it to (its overflow run, written once): after the key
 * 24 bytes, 0 the run's first page u64 | 8 bytes stored u32 | 12 codec u8 |
 * 13 kept u8 (1: a touch's, whose item keeps a run an earlier record or
 * the tree names) | 16 CRC-32C of the value u32 (the rest zero); vlen is
 * the value's length.
 * The run is written before the record is appended, and every sync of the
 * log syncs the tree file first (bt_wal_presync, seglog's presync), so a
 * record a sync covered names a run on the disk; the run is not reused
 * before a checkpoint past the record is durable (do_free_run).
 *
 * Replay reads a RUN record's run and checks it (its page checks and the
 * value's CRC).  A run that fails can only belong to a record no sync
 * covered (the kernel wrote the log's page back before the tree file's):
 * nothing after it was acknowledged as durable either, so the log ends
 * there, cut as a torn record is; in a sealed segment (synced, with the
 * tree file before it, when it was sealed) it is damage.  Before replay,
 * the runs of every RUN record from P on are taken out of the free pages
 * (take_runs), so that nothing replay allocates overwrites a run a later
 * record names.
 *
 * At open the tree is as of its meta page's log position P; the records
 * from P on are applied again (bt_wal_replay).  The newest segment may end
 * in a torn record or in the zeros of its preallocated tail: it is cut
 * there.  Segments before P's are no longer needed and are removed, at
 * open and after every checkpoint (do_wal_trim).
 */
#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <sys/stat.h>

#include "kura/crc32c.h"
#include "kura/testhooks.h"
#include "tree_int.h"

static size_t frame_ready(void *arg, unsigned char *head, uint64_t recno)
{
    (void)head;
    (void)recno;
    return *(const size_t *)arg;
}

/* A record this long or shorter is made whole on the stack and appended
 * as one piece: its checksum in two calls (the body, then the head) over
 * contiguous bytes, and one copy into the log; a longer one is appended
 * from its parts. */
#define WAL_WHOLE 512

/* Appends a record: its head, the key, then v0 ++ v1; vlen is the
 * head's value length (a RUN record's is the value's, not its body's). */
static int wal_append(btree *bt, int type, const char *key, size_t klen, const void *v0,
                      size_t l0, const void *v1, size_t l1, uint32_t vlen, uint32_t flags,
                      int64_t exptime, uint64_t cas, uint64_t *lsn)
{
    unsigned char rec[WAL_WHOLE];
    unsigned char *head = rec;
    size_t body = klen + l0 + l1;
    bool whole = BT_REC_HDR + body <= WAL_WHOLE;
    bt_put16(head + 4, BT_REC_MAGIC);
    head[6] = (unsigned char)(type | (klen >> 8) << 3);     /* version 3 */
    head[7] = (unsigned char)klen;
    bt_put32(head + 8, vlen);
    bt_put32(head + 12, flags);
    bt_put64(head + 16, (uint64_t)exptime);
    bt_put64(head + 24, cas);
    struct iovec iov[4];
    int n = 0;
    uint32_t crc;
    if (whole) {
        unsigned char *b = rec + BT_REC_HDR;
        if (klen)                       /* (a record with no key: key may be NULL) */
            memcpy(b, key, klen);
        if (l0)
            memcpy(b + klen, v0, l0);
        if (l1)
            memcpy(b + klen + l0, v1, l1);
        crc = crc32c_update(0, b, body);
        iov[n++] = (struct iovec){ rec, BT_REC_HDR + body };
    } else {
        crc = crc32c_update(0, key, klen);
        if (l0)                         /* (a call saved per empty part) */
            crc = crc32c_update(crc, v0, l0);
        if (l1)
            crc = crc32c_update(crc, v1, l1);
        iov[n++] = (struct iovec){ head, BT_REC_HDR };
        n = sl_iov_kv(iov, n, key, klen, v0, l0, v1, l1);
    }
    bt_put32(head, crc32c_update(crc, head + 4, BT_REC_HDR - 4));
    /* frame: the whole record is the "head" sl_append frames, or the
     * head alone before the body's parts */
    size_t hl = iov[0].iov_len;
    sl_loc loc;
    int rc = sl_append(&bt->log, iov, n, hl, whole ? 0 : body, false, frame_ready, &hl, &loc);
    if (rc == KURA_OK && lsn)
        *lsn = loc.lsn;
    return rc;
}

int do_wal_append(btree *bt, int type, const char *key, size_t klen, const void *v0, size_t l0,
                  const void *v1, size_t l1, uint32_t flags, int64_t exptime, uint64_t cas,
                  uint64_t *lsn)
{
    return wal_append(bt, type, key, klen, v0, l0, v1, l1, (uint32_t)(l0 + l1), flags, exptime,
                      cas, lsn);
}

/* A RUN record: the item whose value (vlen bytes) is in run (kept: a run
 * an earlier record named, which the item keeps). */
static int do_wal_append_run(btree *bt, const char *key, size_t klen, uint32_t vlen,
                             uint32_t flags, int64_t exptime, uint64_t cas, const bt_ovf *run,
                             bool kept, uint64_t *lsn)
{
    unsigned char d[BT_RUN_DESC];
    memset(d, 0, sizeof(d));
    bt_put64(d, run->pgno);
    bt_put32(d + 8, run->bytes);
    d[12] = run->codec;
    d[13] = kept;
    bt_put32(d + 16, run->vcrc);
    int rc = wal_append(bt, BT_REC_RUN, key, klen, d, sizeof(d), NULL, 0, vlen, flags, exptime,
                        cas, lsn);
    if (rc == KURA_OK)
        atomic_fetch_add_explicit(&bt->run_records, 1, memory_order_relaxed);
    return rc;
}

int do_wal_put(btree *bt, const char *key, size_t klen, const void *v0, size_t l0,
               const void *v1, size_t l1, uint32_t flags, int64_t exptime, uint64_t cas,
               const bt_ovf *run, bool kept, uint64_t *lsn)
{
    /* a log of version 1 (an older kurad's) takes no RUN record until it
     * rolls to a segment of this version */
    if (run && !bt->wal_runs) {
        sl_seg *a = sl_seg_get(&bt->log, sl_active_id(&bt->log));
        bt->wal_runs = a && a->version >= BT_WAL_VERSION_RUNS;
    }
    if (run && bt->wal_runs && !KURA_TEST_SWITCH(tree_log_values))
        return do_wal_append_run(bt, key, klen, (uint32_t)(l0 + l1), flags, exptime, cas, run,
                                 kept, lsn);
    return do_wal_append(bt, BT_REC_PUT, key, klen, v0, l0, v1, l1, flags, exptime, cas, lsn);
}

int bt_wal_presync(void *arg)
{
    btree *bt = arg;
    uint64_t w = atomic_load_explicit(&bt->run_writes, memory_order_acquire);
    if (atomic_load_explicit(&bt->run_synced, memory_order_acquire) >= w ||
        KURA_TEST_SWITCH(tree_run_no_presync))
        return 0;
    if (bt->io->fdatasync(bt->io, bt->fd) != 0) {
        int e = errno ? errno : EIO;
        bt_log(bt, KURA_LOG_ERROR, "%s/tree: the sync of large values before the log's: %s",
               bt->dir, strerror(e));
        return e;
    }
    /* every run counted in w is on the disk (another sync may have
     * covered more meanwhile: the count only rises) */
    uint64_t cur = atomic_load_explicit(&bt->run_synced, memory_order_relaxed);
    while (cur < w && !atomic_compare_exchange_weak(&bt->run_synced, &cur, w))
        ;
    return 0;
}

/* Decodes the record at p (avail bytes): its length, SL_NOT_REC, or
 * SL_NEED_MORE with *need. */
static long long rec_decode(const unsigned char *p, size_t avail, uint32_t version, bt_rec *r,
                            size_t *need)
{
    if (avail < BT_REC_HDR) {
        *need = BT_REC_HDR;
        return SL_NEED_MORE;
    }
    if (bt_get16(p + 4) != BT_REC_MAGIC)
        return SL_NOT_REC;
    r->type = p[6];
    r->klen = p[7];
    if (version >= 3) {                 /* the type byte's top 5 bits: klen's 8..12 */
        r->type = p[6] & 7;
        r->klen = (uint16_t)(p[7] | (p[6] >> 3) << 8);
        if (r->klen > KURA_KEY_MAX)
            return SL_NOT_REC;
    }
    r->vlen = bt_get32(p + 8);
    r->flags = bt_get32(p + 12);
    r->exptime = (int64_t)bt_get64(p + 16);
    r->cas = bt_get64(p + 24);
    switch (r->type) {
    case BT_REC_PUT:
        if ((r->klen < 1 && version < 3) || r->vlen > UINT32_MAX - 1024)
            return SL_NOT_REC;          /* version 3: the empty key */
        break;
    case BT_REC_DEL:
        if ((r->klen < 1 && version < 3) || r->vlen)
            return SL_NOT_REC;
        break;
    case BT_REC_STATE:
        if (r->klen || r->vlen != 32)
            return SL_NOT_REC;
        break;
    case BT_REC_RUN:
        if (version < BT_WAL_VERSION_RUNS || (r->klen < 1 && version < 3) ||
            r->vlen > UINT32_MAX - 1024)
            return SL_NOT_REC;
        break;
    default:
        return SL_NOT_REC;
    }
    size_t body = r->type == BT_REC_RUN ? BT_RUN_DESC : r->vlen;
    size_t total = BT_REC_HDR + (size_t)r->klen + body;
    if (avail < total) {
        *need = total;
        return SL_NEED_MORE;
    }
    uint32_t crc = crc32c_update(0, p + BT_REC_HDR, total - BT_REC_HDR);
    if (crc32c_update(crc, p + 4, BT_REC_HDR - 4) != bt_get32(p))
        return SL_NOT_REC;
    r->key = (const char *)p + BT_REC_HDR;
    r->val = p + BT_REC_HDR + r->klen;
    if (r->type == BT_REC_RUN &&
        (bt_get64(r->val) < 2 || r->val[12] > 3 || bt_get32(r->val + 20) ||
         bt_get32(r->val + 8) > UINT32_MAX - 1024 ||
         (!r->val[12] && bt_get32(r->val + 8) != r->vlen) ||
         r->val[13] > 1 || r->val[14] || r->val[15]))
        return SL_NOT_REC;
    return (long long)total;
}

static long long rec_check(void *arg, const unsigned char *p, size_t avail, uint32_t version,
                           size_t *need)
{
    bt_rec tmp;
    if (version < BT_WAL_VERSION_MIN || version > BT_WAL_VERSION)
        return SL_NOT_REC;
    return rec_decode(p, avail, version, arg ? arg : &tmp, need);
}

/* do_replay_one: the RUN record's run fails its checks */
#define RUN_UNWRITTEN 1

/* A RUN record's run as a leaf cell names it; *vcrc the value's CRC. */
static void run_cell(const bt_rec *r, bt_cell *c, uint32_t *vcrc)
{
    memset(c, 0, sizeof(*c));
    c->key = r->key;
    c->klen = r->klen;
    c->vlen = r->vlen;
    c->ovf = true;
    c->ovf_pgno = bt_get64(r->val);
    c->ovf_bytes = bt_get32(r->val + 8);
    c->ovf_codec = r->val[12];
    *vcrc = bt_get32(r->val + 16);
}

/* The value of the run c names in fd (npages pages), read and checked:
 * the run's own checks (its CRC, header, codec) and the value's CRC the
 * record gave.  KURA_OK (*val), RUN_UNWRITTEN, KURA_EIO or KURA_ENOMEM. */
static int run_value(btree *bt, int fd, uint64_t npages, const bt_cell *c, uint32_t vcrc,
                     const unsigned char **val)
{
    int rc = bt_ovf_read_quiet(bt, fd, npages, c, val, NULL);
    if (rc == KURA_EIO || rc == KURA_ENOMEM)
        return rc;
    if (rc || crc32c_update(0, *val, c->vlen) != vcrc)
        return RUN_UNWRITTEN;
    return KURA_OK;
}

/* Applies a RUN record at path: the item names the run, which stays
 * where the put wrote it (taken out of the free pages by take_runs).
 * With -recover the run is in the damaged file: its value goes into a run
 * of the fresh tree, or, if it fails its checks there (overwritten since:
 * a later record of the key follows), the record is skipped. */
static int do_replay_run(btree *bt, bt_path *path, const bt_rec *r)
{
    bt_cell c;
    uint32_t vcrc;
    const unsigned char *val;
    run_cell(r, &c, &vcrc);
    if (bt->salvage_fd >= 0) {
        int rc = run_value(bt, bt->salvage_fd, bt->salvage_npages, &c, vcrc, &val);
        if (rc == RUN_UNWRITTEN)
            return KURA_OK;
        return rc ? rc : do_apply_put(bt, path, r->key, r->klen, r->flags, r->exptime, r->cas,
                                      val, c.vlen, NULL, 0, NULL);
    }
    if (!r->val[13]) {                  /* (a kept run is in no pair: its own
                                           record or the tree has it) */
        if (bt->replay_run_next * 2 >= bt->replay_runs.n)
            return KURA_ECORRUPT;       /* (the first pass saw it: never) */
        bt->replay_run_next++;
    }
    int rc = run_value(bt, bt->fd, bt->npages, &c, vcrc, &val);
    if (rc)
        return rc;
    bt_ovf run = { c.ovf_pgno, c.ovf_bytes, c.ovf_codec, vcrc };
    return do_apply_put(bt, path, r->key, r->klen, r->flags, r->exptime, r->cas, val, c.vlen,
                        NULL, 0, &run);
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
    } else if (r->type == BT_REC_RUN) {
        rc = do_replay_run(bt, &path, r);
    } else if (path.found) {
        bt_cell c;
        int lvl = path.depth - 1;
        pg_leaf_decode(pg_ccell(path.pg[lvl]->data, (unsigned)path.idx[lvl]), &c);
        do_touch_path(bt, &path);
        if (c.ovf)
            do_free_run(bt, c.ovf_pgno, c.ovf_bytes);
        bt->items--;
        bt->bytes -= bt_item_bytes(c.klen, c.vlen, c.flags);
        do_leaf_remove(bt, &path);
    }
    do_path_release(bt, &path);
    return rc;
}

/* The runs of RUN records from index i on that replay did not reach (the
 * log ended before them) are free once the next meta page is durable. */
static void do_free_runs_from(btree *bt, size_t i)
{
    for (; i * 2 + 1 < bt->replay_runs.n; i++)
        if (bt->replay_runs.v[2 * i + 1])
            do_free_pgno(bt, bt->replay_runs.v[2 * i], bt->replay_runs.v[2 * i + 1], false);
    bt->replay_run_next = bt->replay_runs.n / 2;
}

/* Replays segment sg from off.  With `newest`, a record that is not whole
 * ends the log there (cut); otherwise it is damage.  With `first_pass`,
 * nothing is applied: the runs of RUN records are noted in replay_runs,
 * and the pass stops (1) where replay would stop. */
static int replay_seg(btree *bt, sl_seg *sg, uint64_t off, bool newest, bool first_pass,
                      char *err, size_t errlen)
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
        if (rc && first_pass) {
            rc = 1;
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
        if (first_pass) {
            if (r.type == BT_REC_RUN && !r.val[13] &&
                (bt_vec_push(&bt->replay_runs, bt_get64(r.val)) ||
                 bt_vec_push(&bt->replay_runs, bt_ovf_pages(bt, bt_get32(r.val + 8))))) {
                rc = KURA_ENOMEM;
                snprintf(err, errlen, "out of memory");
                break;
            }
            off += len;
            continue;
        }
        rc = do_replay_one(bt, &r);
        if (rc == RUN_UNWRITTEN && newest) {
            /* no sync covered it (formats.md, "How a change becomes
             * durable"): the log ends here, as at a torn record */
            do_free_runs_from(bt, bt->replay_run_next - 1);
            rc = sl_seg_cut(&bt->log, sg, off, "a record whose large value never reached "
                            "the disk", &bt->wal_cut, err, errlen);
            break;
        }
        if (rc == RUN_UNWRITTEN) {
            snprintf(err, errlen, "%s/%08x.seg: the record at offset %llu names a large value "
                     "(page %llu) that fails its checks", bt->dir, sg->id,
                     (unsigned long long)off, (unsigned long long)bt_get64(r.val));
            rc = KURA_ECORRUPT;
            break;
        }
        if (rc) {
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

typedef struct run_span {
    uint64_t pg, n;
} run_span;

static int cmp_span(const void *a, const void *b)
{
    uint64_t x = ((const run_span *)a)->pg, y = ((const run_span *)b)->pg;
    return x < y ? -1 : x > y;
}

/* True if page x lies in one of the m runs (sorted by first page). */
static bool in_runs(const run_span *sp, size_t m, uint64_t x)
{
    size_t lo = 0, hi = m;              /* the first run starting past x */
    while (lo < hi) {
        size_t mid = lo + (hi - lo) / 2;
        if (sp[mid].pg <= x)
            lo = mid + 1;
        else
            hi = mid;
    }
    return lo > 0 && x < sp[lo - 1].pg + sp[lo - 1].n;
}

/* Before replay: the runs the first pass noted are taken out of the free
 * pages, and the file's used part grows to the last of them (the pages
 * past the meta page's count outside every run are free), so that nothing
 * replay allocates (a leaf's copy, a run a PUT record writes) lands on a
 * run a later record names.  A run past the file's end was never written:
 * it is not taken (its count set to 0), and its record fails its check. */
static int take_runs(btree *bt)
{
    bt_vec *rv = &bt->replay_runs;
    size_t k = rv->n / 2, m = 0;
    if (!k)
        return KURA_OK;
    struct stat st;
    uint64_t fpages = fstat(bt->fd, &st) == 0 ? ((uint64_t)st.st_size + bt->psiz - 1) / bt->psiz
                                              : bt->npages;
    run_span *sp = malloc(k * sizeof(*sp));
    if (!sp)
        return KURA_ENOMEM;
    uint64_t end = bt->npages;
    for (size_t i = 0; i < k; i++) {
        uint64_t pg = rv->v[2 * i], n = rv->v[2 * i + 1];
        if (pg < 2 || n > fpages || pg > fpages - n) {
            rv->v[2 * i + 1] = 0;
            continue;
        }
        sp[m++] = (run_span){ pg, n };
        if (pg + n > end)
            end = pg + n;
    }
    if (m > 1)
        qsort(sp, m, sizeof(*sp), cmp_span);
    size_t j = 0;
    for (size_t i = 0; i < bt->freev.n; i++)
        if (!in_runs(sp, m, bt->freev.v[i]))
            bt->freev.v[j++] = bt->freev.v[i];
    bt->freev.n = j;
    int rc = KURA_OK;
    for (uint64_t pg = bt->npages; pg < end && rc == KURA_OK; pg++)
        if (!in_runs(sp, m, pg))
            rc = bt_vec_push(&bt->freev, pg);
    bt->free_sorted = false;
    bt->npages = end;
    free(sp);
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
    /* the first pass: the runs RUN records name leave the free pages (not
     * -recover's: they are in the damaged file) */
    for (size_t i = first; i < n && bt->salvage_fd < 0; i++) {
        sl_seg *s = sl_seg_get(&bt->log, ids[i]);
        uint64_t off = ids[i] == bt->ckpt_seg ? bt->ckpt_off : SL_SEG_HDR;
        if (off > s->size || (rc = replay_seg(bt, s, off, i == n - 1, true, err, errlen)) == 1)
            break;
        if (rc)
            goto out;
    }
    if ((rc = take_runs(bt))) {
        snprintf(err, errlen, "out of memory");
        goto out;
    }
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
        if ((rc = replay_seg(bt, s, off, i == n - 1, false, err, errlen)))
            goto out;
    }
    do_free_runs_from(bt, bt->replay_run_next);
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
    /* an older kurad's segment (version 1) takes no RUN record: sealed if
     * it holds records (an empty one stays until its first roll; do_wal_put
     * logs values meanwhile) */
    if (!bt->cfg.read_only && sg->version != BT_WAL_VERSION)
        (void)sl_roll(&bt->log, 0);
    rc = KURA_OK;
out:
    bt->replaying = false;
    free(bt->replay_runs.v);
    memset(&bt->replay_runs, 0, sizeof(bt->replay_runs));
    bt->replay_run_next = 0;
    if (bt->salvage_fd >= 0) {          /* -recover's damaged file: done with */
        bt->io->close(bt->io, bt->salvage_fd);
        bt->salvage_fd = -1;
    }
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
