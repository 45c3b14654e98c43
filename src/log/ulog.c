/*
 * ulog.c - the update log: rows of changes over the segmented log
 * (include/kura/ulog.h says what it is for; docs/formats.md, "The update
 * log", gives the bytes).
 *
 * One mutex (ul_log.mu) serializes what must see the log hold still:
 * appends (so that the order of timestamps is the order in the files, which
 * the reader's binary search relies on), pruning, and a reader's look at the
 * segment table (taking a dup of a segment's descriptor, so that pruning may
 * unlink a segment a reader is still in).  Readers then read with pread
 * through sl_scan, outside the lock; durability (ul_commit) is seglog's
 * group commit, outside it too.
 *
 * A segment's first row is a header row (this server's id, its first
 * timestamp, the timestamp of the last row before it).  seglog's own
 * 32-byte segment header has no room for them and its behaviour is not to
 * change, so the header row goes in front of the first data row in the
 * same sl_append: the two land together at the start of the new segment,
 * or not at all.  Whether an append will start a new segment is decided
 * here by seglog's documented rule (a segment holding records is sealed
 * when the next one would take it past segsiz), under ul_log.mu, where no
 * other append can move the tail between the look and the append.
 */
#include <errno.h>
#include <fcntl.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/file.h>
#include <sys/stat.h>
#include <unistd.h>

#include "kura/bytes.h"
#include "kura/crc32c.h"
#include "kura/fsutil.h"
#include "kura/lockorder.h"
#include "kura/siphash.h"
#include "kura/status.h"
#include "kura/ulog.h"

#define DEFAULT_ULIM    (64ull << 20)
#define SCAN_FIRST      64      /* bytes that always hold a row's length */
#define HDR_ROW_MAX     64      /* a header row is at most 4+10+1+10+5+10 */

struct ul_log {
    sl_log sl;
    ul_config cfg;
    int dirfd;
    int lockfd;                 /* ULOG_LOCK, held exclusively by a writer; -1 read-only */
    hlc own;
    hlc *clock;
    pthread_mutex_t mu;         /* appends, prune, readers' table lookups */
    uint64_t last_ts;           /* under mu: the last data row's timestamp */
    void (*notify)(void *arg);  /* under mu */
    void *notify_arg;
    _Atomic uint64_t start;     /* rows after this are all the changes since (the file
                                   "start"); 0: since the store was empty */
    uint64_t hid;               /* the log's id (the file "hid"); 0: none (read-only) */
};

struct ul_reader {
    ul_log *log;
    uint64_t after;             /* rows up to this are skipped */
    uint32_t seg;
    int fd;                     /* a dup of the segment's: survives a prune */
    uint64_t off;
    sl_scan sc;
};

/* ---- varints and the row format ------------------------------------------ */

static size_t put_var(unsigned char *p, uint64_t v)
{
    return (size_t)(put_varint(p, v) - p);
}

/* Bytes taken (1..10), 0 if p..end ends first, -1 if longer than 10. */
static int get_var(const unsigned char *p, const unsigned char *end, uint64_t *v)
{
    const unsigned char *q = get_varint(p, end, v);
    if (q)
        return (int)(q - p);
    return end - p >= 10 ? -1 : 0;
}

/* Writes a row's bytes up to (not including) the value at b, with the
 * value's bytes in the CRC: crc32c, length, type, ts, sid, the type's
 * fields.  Returns the bytes written; the row is that plus the value. */
size_t ul_encode(unsigned char *b, const ul_row *r)
{
    unsigned char f[UL_ROW_HEAD_MAX];
    size_t n = 0, vlen = r->vlen + r->vlen2;
    f[n++] = r->type;
    n += put_var(f + n, r->ts);
    n += put_var(f + n, r->sid);
    if (r->type != UL_HDR && r->type != UL_MARK)    /* how long before its place here */
        n += put_var(f + n, r->origin_ts && r->origin_ts < r->ts ? r->ts - r->origin_ts : 0);
    switch (r->type) {
    case UL_HDR:
    case UL_MARK:
        n += put_var(f + n, r->prev_ts);
        break;
    case UL_PUT:
        n += put_var(f + n, r->flags);
        n += put_var(f + n, zigzag(r->exptime));
        n += put_var(f + n, r->cas);
        /* fall through - the key as a DEL has it, then the length of the value */
    case UL_DEL:
        n += put_var(f + n, r->klen);
        memcpy(f + n, r->key, r->klen);
        n += r->klen;
        if (r->type == UL_PUT)
            n += put_var(f + n, vlen);
        break;
    case UL_FLUSH:
        n += put_var(f + n, zigzag(r->exptime));
        n += put_var(f + n, r->cas);
        break;
    }
    size_t h = 4;
    h += put_var(b + h, n + (r->type == UL_PUT ? vlen : 0));
    memcpy(b + h, f, n);
    h += n;
    uint32_t crc = crc32c_update(0, b + 4, h - 4);
    if (r->type == UL_PUT) {
        crc = crc32c_update(crc, r->val, r->vlen);
        crc = crc32c_update(crc, r->val2, r->vlen2);
    }
    put32(b, crc);
    return h;
}

long long ul_decode(const unsigned char *p, size_t avail, ul_row *row, size_t *need)
{
    uint64_t len, v;
    if (avail < 5) {
        *need = 5;
        return SL_NEED_MORE;
    }
    int vl = get_var(p + 4, p + avail, &len);
    if (vl < 0)
        return SL_NOT_REC;
    if (vl == 0) {
        *need = 14;             /* the longest length */
        return avail >= 14 ? SL_NOT_REC : SL_NEED_MORE;
    }
    /* at least type, ts, sid; at most a head and the largest value */
    if (len < 3 || len > UL_ROW_HEAD_MAX + (uint64_t)UL_VAL_MAX)
        return SL_NOT_REC;
    size_t total = 4 + (size_t)vl + (size_t)len;
    if (avail < total) {
        *need = total;
        return SL_NEED_MORE;
    }
    if (crc32c_update(0, p + 4, total - 4) != get32(p))
        return SL_NOT_REC;

    const unsigned char *q = p + 4 + vl, *end = p + total;
    int k;
    memset(row, 0, sizeof(*row));
    row->type = *q++;
#define VAR(dst) do { if ((k = get_var(q, end, &v)) <= 0) return SL_NOT_REC; \
                      q += k; (dst) = v; } while (0)
    VAR(row->ts);
    VAR(v);
    if (v > UINT32_MAX)
        return SL_NOT_REC;
    row->sid = (uint32_t)v;
    row->origin_ts = row->ts;
    if (row->type != UL_HDR && row->type != UL_MARK) {
        VAR(v);
        if (v > row->ts)
            return SL_NOT_REC;
        row->origin_ts = row->ts - v;
    }
    switch (row->type) {
    case UL_HDR:
    case UL_MARK:
        VAR(row->prev_ts);
        break;
    case UL_PUT:
        VAR(v);
        if (v > UINT32_MAX)
            return SL_NOT_REC;
        row->flags = (uint32_t)v;
        VAR(v);
        row->exptime = unzigzag(v);
        VAR(row->cas);
        /* fall through */
    case UL_DEL:
        VAR(row->klen);
        if (row->klen > UL_KEY_MAX || row->klen > (size_t)(end - q))
            return SL_NOT_REC;
        row->key = q;
        q += row->klen;
        if (row->type == UL_PUT) {
            VAR(row->vlen);
            if (row->vlen != (size_t)(end - q))
                return SL_NOT_REC;
            row->val = q;
            q += row->vlen;
        }
        break;
    case UL_FLUSH:
        VAR(v);
        row->exptime = unzigzag(v);
        VAR(row->cas);
        break;
    default:
        return SL_NOT_REC;
    }
#undef VAR
    return q == end ? (long long)total : SL_NOT_REC;
}

/* seglog's check: arg is where the row goes (a scan's), or NULL */
static long long ul_check(void *arg, const unsigned char *p, size_t avail, uint32_t version,
                          size_t *need)
{
    ul_row tmp, *row = arg ? arg : &tmp;
    if (version != UL_VERSION)
        return SL_NOT_REC;
    long long n = ul_decode(p, avail, row, need);
    return n > 0 && row->type == UL_MARK ? SL_NOT_REC : n;   /* a stream's, never a file's */
}

static size_t frame_ready(void *arg, unsigned char *head, uint64_t recno)
{
    /* the head is built before the append, under ul_log.mu: only its length */
    (void)head;
    (void)recno;
    return *(const size_t *)arg;
}

static void logf_(ul_log *log, int level, const char *msg)
{
    if (log->cfg.log)
        log->cfg.log(log->cfg.log_arg, level, msg);
    else
        fprintf(stderr, "kura ulog %s: %s\n", log->cfg.dir, msg);
}

/* ---- segments ------------------------------------------------------------ */

/* The header row of segment id; log->mu held (sizes hold still).  0; 1 if
 * the segment holds no row yet; KURA_NOTFOUND if it is not there;
 * KURA_ECORRUPT if its first row is not a header. */
static int do_seg_header(ul_log *log, uint32_t id, ul_row *hdr)
{
    sl_seg *sg = sl_seg_get(&log->sl, id);
    if (!sg)
        return KURA_NOTFOUND;
    if (sg->size <= SL_SEG_HDR)
        return 1;
    size_t len = sg->size - SL_SEG_HDR < HDR_ROW_MAX ? (size_t)(sg->size - SL_SEG_HDR)
                                                     : HDR_ROW_MAX;
    const unsigned char *p;
    uint32_t version;
    size_t need;
    int rc = sl_read(&log->sl, id, SL_SEG_HDR, len, &p, &version);
    if (rc)
        return rc;
    if (version != UL_VERSION || ul_decode(p, len, hdr, &need) <= 0 || hdr->type != UL_HDR)
        return KURA_ECORRUPT;
    return KURA_OK;
}

/* The timestamp a reader must be at or past; log->mu held.  The oldest
 * segment's header says what came before it.  Segment 1 with no row yet
 * is a log that never held any; an empty oldest segment of a later id
 * (its first rows cut as a torn tail after every older one was pruned)
 * knows nothing of what went before: only positions from now on. */
static uint64_t do_from_ts(ul_log *log)
{
    uint32_t first = sl_first(&log->sl);
    uint64_t start = atomic_load(&log->start), from;
    ul_row h;
    int rc = do_seg_header(log, first, &h);
    if (rc == KURA_OK)
        from = h.prev_ts;
    else if (rc == 1 && first == 1)
        from = 0;
    else
        from = hlc_last(log->clock);
    return from > start ? from : start;
}

typedef struct tail_arg {
    sl_tail t;
} tail_arg;

static void get_tail(void *arg, const sl_tail *t)
{
    ((tail_arg *)arg)->t = *t;
}

/* Scans segment sg from its start: *last_ts gets its last data row's
 * timestamp (unchanged if none), *max_ts the largest seen (a header's
 * too).  With cut, a row that is not whole ends the segment there (the
 * torn tail); without, it is an error. */
static int scan_seg(ul_log *log, sl_seg *sg, bool cut, uint64_t *last_ts, uint64_t *max_ts,
                    uint64_t *cutb, char *err, size_t errlen)
{
    sl_scan sc;
    uint64_t off = SL_SEG_HDR;
    int rc;
    sl_scan_init(&sc, &log->sl, sg, SCAN_FIRST);
    for (;;) {
        const unsigned char *p;
        size_t len;
        ul_row row;
        rc = sl_scan_rec(&sc, off, &row, &p, &len);
        if (rc == 1) {
            rc = KURA_OK;
            break;
        }
        if (rc == KURA_ECORRUPT && cut) {
            rc = sl_seg_cut(&log->sl, sg, off, "a torn row", cutb, err, errlen);
            break;
        }
        if (rc) {
            snprintf(err, errlen, "%s/%08x.seg: %s at offset %llu", log->cfg.dir, sg->id,
                     rc == KURA_ECORRUPT ? "a damaged row" : "cannot read",
                     (unsigned long long)off);
            break;
        }
        if (row.type != UL_HDR)
            *last_ts = row.ts;
        if (row.ts > *max_ts)
            *max_ts = row.ts;
        off += len;
    }
    sl_scan_done(&sc);
    return rc;
}

static int load_start(ul_log *log, char *err, size_t errlen);
static int load_hid(ul_log *log, char *err, size_t errlen);

/* A writer holds the directory's lock file exclusively for as long as the
 * log is open, so a second writer (a kuractl prune beside a running
 * kurad, or a second kurad on the same -ulog) is refused instead of
 * deleting or appending under the first.  Readers take no lock: they
 * change nothing, and are safe beside the writer.  The file has a name of
 * its own, so a log kept in the database's directory does not contend
 * with the database's LOCK. */
#define ULOG_LOCK "ulog.lock"

static int lock_dir(ul_log *log, char *err, size_t errlen)
{
    log->lockfd = openat(log->dirfd, ULOG_LOCK, O_RDWR | O_CREAT | O_CLOEXEC, 0644);
    if (log->lockfd < 0) {
        snprintf(err, errlen, "%s/" ULOG_LOCK ": %s", log->cfg.dir, strerror(errno));
        return sl_errno_status(errno);
    }
    if (flock(log->lockfd, LOCK_EX | LOCK_NB) != 0) {
        snprintf(err, errlen, "%s: in use by another process (%s)", log->cfg.dir,
                 errno == EWOULDBLOCK ? "locked" : strerror(errno));
        return KURA_EINVAL;
    }
    return KURA_OK;
}

/* Opens the log's n segments (ids, in order; a gap is refused) and reads
 * the newest for the last ts and a torn tail (older ones only while it
 * holds no row; bytes cut added to *cutb); with none, creates the first
 * as new_id (refused read-only).  *sgp: the newest. */
static int open_segments(ul_log *log, const uint32_t *ids, size_t n, uint32_t new_id,
                         sl_seg **sgp, uint64_t *cutb, char *err, size_t errlen)
{
    const ul_config *cfg = &log->cfg;
    uint64_t max_ts = 0;
    int rc;
    sl_seg *sg = NULL;
    for (size_t i = 0; i < n; i++) {
        if (ids[i] != ids[0] + i) {
            snprintf(err, errlen, "%s: segment %08x is missing", cfg->dir,
                     ids[0] + (uint32_t)i);
            return KURA_ECORRUPT;
        }
        if ((rc = sl_seg_open(&log->sl, ids[i], &sg, err, errlen)))
            return rc;
    }
    if (!n && cfg->read_only) {
        snprintf(err, errlen, "%s: no update log segments", cfg->dir);
        return KURA_NOTFOUND;
    }
    if (!n) {
        if ((rc = sl_seg_create(&log->sl, new_id, 0, &sg))) {
            snprintf(err, errlen, "%s: cannot create the first segment", cfg->dir);
            return rc;
        }
    } else {
        /* the newest segment is the only one that can end in a torn row:
         * the older ones were synced whole when the log rolled past them.
         * Only if it holds no row are older ones read for the last ts. */
        uint64_t last = 0;
        for (size_t i = n; i-- > 0 && !last;) {
            sl_seg *s = sl_seg_get(&log->sl, ids[i]);
            if ((rc = scan_seg(log, s, i == n - 1, &last, &max_ts, cutb, err, errlen)))
                return rc;
        }
        log->last_ts = last;
        hlc_observe(log->clock, max_ts);
    }
    *sgp = sg;
    return KURA_OK;
}

int ul_open(const ul_config *cfg, ul_log **out, uint64_t *cut, char *err, size_t errlen)
{
    uint64_t cutb = 0;
    uint32_t *ids = NULL;
    size_t n = 0;
    int rc;
    *out = NULL;
    snprintf(err, errlen, "ok");
    ul_log *log = calloc(1, sizeof(*log));
    if (!log)
        return KURA_ENOMEM;
    log->cfg = *cfg;
    hlc_init(&log->own, NULL);
    log->clock = cfg->clock ? cfg->clock : &log->own;
    pthread_mutex_init(&log->mu, NULL);
    log->lockfd = -1;
    log->dirfd = open(cfg->dir, O_RDONLY | O_DIRECTORY | O_CLOEXEC);
    if (log->dirfd < 0) {
        snprintf(err, errlen, "%s: %s", cfg->dir, strerror(errno));
        rc = sl_errno_status(errno);
        goto fail;
    }
    if (!cfg->read_only && (rc = lock_dir(log, err, errlen)))
        goto fail;
    sl_config c = { .dir = cfg->dir, .dirfd = log->dirfd, .io = cfg->io,
                    .version = UL_VERSION, .versions = 1u << UL_VERSION,
                    .segsiz = cfg->ulim ? cfg->ulim : DEFAULT_ULIM,
                    .mapwrite = cfg->mapwrite && !cfg->read_only, .check = ul_check,
                    .read_only = cfg->read_only, .log = cfg->log, .log_arg = cfg->log_arg,
                    .lock_rank = LOCK_RANK_ULOG_SEG };
    memcpy(c.magic, UL_MAGIC, 8);
    sl_init(&log->sl, &c);
    if ((rc = sl_list(&log->sl, &ids, &n))) {
        snprintf(err, errlen, "%s: cannot list the segments", cfg->dir);
        goto fail;
    }
    /* a torn creation goes, and its id is the one to create again if it
     * was the only segment (the ids of pruned segments are not reused) */
    uint32_t new_id = n ? ids[n - 1] : 1;
    if (n && sl_torn_creation(&log->sl, ids[n - 1], &cutb))
        n--;
    sl_seg *sg = NULL;
    if ((rc = open_segments(log, ids, n, new_id, &sg, &cutb, err, errlen)))
        goto fail;
    uint32_t first = n ? ids[0] : new_id;
    /* no row held and earlier segments pruned: nothing tells what came
     * before, so only positions from now on are served (do_from_ts) */
    if (!log->last_ts && first != 1)
        log->last_ts = hlc_now(log->clock);
    sl_start(&log->sl, sg, first);
    free(ids);
    ids = NULL;
    if ((rc = load_start(log, err, errlen)) || (rc = load_hid(log, err, errlen)))
        goto fail;
    hlc_observe(log->clock, atomic_load(&log->start));
    if (cut)
        *cut = cutb;
    *out = log;
    return KURA_OK;
fail:
    free(ids);
    if (log->lockfd >= 0)
        close(log->lockfd);
    if (log->dirfd >= 0) {
        sl_destroy(&log->sl);
        close(log->dirfd);
    }
    pthread_mutex_destroy(&log->mu);
    free(log);
    return rc;
}

void ul_close(ul_log *log)
{
    if (!log)
        return;
    sl_unmap_active(&log->sl);
    sl_destroy(&log->sl);
    if (log->lockfd >= 0)
        close(log->lockfd);                 /* releases the flock */
    close(log->dirfd);
    pthread_mutex_destroy(&log->mu);
    free(log);
}

/* ---- appends ------------------------------------------------------------- */

static bool row_ok(const ul_row *r)
{
    switch (r->type) {
    case UL_PUT:
        if (r->vlen > UL_VAL_MAX || r->vlen2 > UL_VAL_MAX - r->vlen ||
            (r->vlen && !r->val) || (r->vlen2 && !r->val2))
            return false;
        /* fall through */
    case UL_DEL:
        return r->key && r->klen <= UL_KEY_MAX;
    case UL_FLUSH:
        return true;
    default:
        return false;           /* header rows are the log's own */
    }
}

int ul_append(ul_log *log, const ul_row *row, ul_pos *pos)
{
    unsigned char head[HDR_ROW_MAX + UL_ROW_HEAD_MAX];
    if (!row_ok(row))
        return KURA_EINVAL;
    lockorder_lock(&log->mu, LOCK_RANK_ULOG);
    int rc = sl_failed(&log->sl);
    if (rc)
        goto out;
    if (row->origin_ts)
        hlc_observe(log->clock, row->origin_ts);
    ul_row r = *row;
    r.ts = hlc_now(log->clock);
    r.sid = row->sid ? row->sid : log->cfg.sid;
    uint64_t ts = r.ts;
    unsigned char drow[UL_ROW_HEAD_MAX];
    size_t dlen = ul_encode(drow, &r);
    size_t vlen = r.vlen + r.vlen2;
    uint64_t rlen = dlen + vlen;

    /* seglog's rule for sealing (sl_append): a segment that holds records
     * takes no record that would carry it past segsiz */
    tail_arg ta;
    sl_locked(&log->sl, get_tail, &ta);
    bool rolls = sl_would_roll(&log->sl, ta.t.off, rlen);
    bool with_hdr = rolls || ta.t.off == SL_SEG_HDR;
    size_t hlen = 0;
    if (with_hdr) {
        ul_row h = { .type = UL_HDR, .prev_ts = log->last_ts, .ts = ts, .sid = log->cfg.sid };
        hlen = ul_encode(head, &h);
    }
    memcpy(head + hlen, drow, dlen);
    size_t total = hlen + dlen;
    struct iovec iov[3] = { { head, total } };
    int niov = 1;
    if (r.vlen)
        iov[niov++] = (struct iovec){ (void *)r.val, r.vlen };
    if (r.vlen2)
        iov[niov++] = (struct iovec){ (void *)r.val2, r.vlen2 };
    sl_loc loc;
    rc = sl_append(&log->sl, iov, niov, sizeof(head), vlen, false, frame_ready, &total, &loc);
    if (rc)
        goto out;
    if (with_hdr != (loc.off == SL_SEG_HDR))
        logf_(log, KURA_LOG_ERROR, "a segment's first row and its header row disagree "
              "(seglog's sealing rule changed?): readers may search it wrongly");
    log->last_ts = ts;
    if (log->notify)
        log->notify(log->notify_arg);
    pos->lsn = loc.lsn;
    pos->ts = ts;
    pos->seg = loc.seg;
    pos->off = loc.off + hlen;
out:
    lockorder_unlock(&log->mu, LOCK_RANK_ULOG);
    return rc;
}

int ul_commit(ul_log *log, uint64_t lsn)
{
    return sl_commit(&log->sl, lsn);
}

int ul_sync_now(ul_log *log)
{
    return sl_sync_now(&log->sl);
}

int ul_failed(ul_log *log)
{
    return sl_failed(&log->sl);
}

#define START_FILE "start"

/* The file holds the timestamp in decimal; written beside, synced,
 * renamed, the directory synced. */
int ul_set_complete(ul_log *log, bool complete)
{
    if (log->cfg.read_only)
        return KURA_EREADONLY;
    if (complete) {
        if (atomic_load(&log->start) == 0)
            return KURA_OK;
        if (unlinkat(log->dirfd, START_FILE, 0) < 0 && errno != ENOENT)
            return sl_errno_status(errno);
        atomic_store(&log->start, 0);
        return fsync(log->dirfd) == 0 ? KURA_OK : sl_errno_status(errno);
    }
    /* past every row held: no position reached so far is served */
    uint64_t start = hlc_now(log->clock);
    char b[32];
    int n = snprintf(b, sizeof(b), "%llu\n", (unsigned long long)start);
    if (kura_write_file_atomic(log->dirfd, START_FILE, b, (size_t)n) < 0)
        return sl_errno_status(errno);
    atomic_store(&log->start, start);
    return KURA_OK;
}

uint64_t ul_start(ul_log *log)
{
    return atomic_load(&log->start);
}

bool ul_complete(ul_log *log)
{
    return atomic_load(&log->start) == 0;
}

/* At open: the file "start", if there is one (a log that does not reach
 * back to an empty store). */
static int load_start(ul_log *log, char *err, size_t errlen)
{
    int fd = openat(log->dirfd, START_FILE, O_RDONLY | O_CLOEXEC);
    if (fd < 0)
        return errno == ENOENT ? KURA_OK : sl_errno_status(errno);
    char b[32] = "";
    ssize_t n = read(fd, b, sizeof(b) - 1);
    close(fd);
    char *end;
    unsigned long long v = n > 0 ? strtoull(b, &end, 10) : 0;
    if (n <= 0 || v == 0 || *end != '\n') {
        snprintf(err, errlen, "%s/%s does not hold a timestamp", log->cfg.dir, START_FILE);
        return KURA_ECORRUPT;
    }
    atomic_store(&log->start, v);
    return KURA_OK;
}

#define HID_FILE "hid"

/* At open: the log's id, from the file "hid" (16 hex digits); a log
 * without one (new, or made before ids) gets a new random one, so a
 * directory made anew never continues an older log's id.  Read-only: 0
 * when there is none. */
static int load_hid(ul_log *log, char *err, size_t errlen)
{
    char b[40] = "";
    int fd = openat(log->dirfd, HID_FILE, O_RDONLY | O_CLOEXEC);
    if (fd >= 0) {
        ssize_t n = read(fd, b, sizeof(b) - 1);
        close(fd);
        char *end;
        unsigned long long v = n > 0 ? strtoull(b, &end, 16) : 0;
        if (n <= 0 || v == 0 || *end != '\n') {
            snprintf(err, errlen, "%s/%s does not hold a log id", log->cfg.dir, HID_FILE);
            return KURA_ECORRUPT;
        }
        log->hid = v;
        return KURA_OK;
    }
    if (errno != ENOENT)
        return sl_errno_status(errno);
    if (log->cfg.read_only)
        return KURA_OK;
    siphash_key k;
    if (siphash_random_key(&k) != 0)
        return KURA_ESYS;
    uint64_t hid = k.k0 ^ k.k1 ? k.k0 ^ k.k1 : 1;
    int n = snprintf(b, sizeof(b), "%016llx\n", (unsigned long long)hid);
    if (kura_write_file_atomic(log->dirfd, HID_FILE, b, (size_t)n) < 0) {
        snprintf(err, errlen, "%s/%s: %s", log->cfg.dir, HID_FILE, strerror(errno));
        return sl_errno_status(errno);
    }
    log->hid = hid;
    return KURA_OK;
}

uint32_t ul_sid(ul_log *log)
{
    return log->cfg.sid;
}

uint64_t ul_log_id(ul_log *log)
{
    return log->hid;
}

const char *ul_dir(ul_log *log)
{
    return log->cfg.dir;
}

void ul_set_notify(ul_log *log, void (*fn)(void *arg), void *arg)
{
    lockorder_lock(&log->mu, LOCK_RANK_ULOG);
    log->notify = fn;
    log->notify_arg = arg;
    lockorder_unlock(&log->mu, LOCK_RANK_ULOG);
}

uint64_t ul_write_lsn(ul_log *log)
{
    return sl_lsn(&log->sl);
}

hlc *ul_clock(ul_log *log)
{
    return log->clock;
}

uint64_t ul_last_ts(ul_log *log)
{
    lockorder_lock(&log->mu, LOCK_RANK_ULOG);
    uint64_t ts = log->last_ts;
    lockorder_unlock(&log->mu, LOCK_RANK_ULOG);
    return ts;
}

/* log->mu held */
static void do_extent(ul_log *log, ul_extent *ex)
{
    memset(ex, 0, sizeof(*ex));
    ex->first_seg = sl_first(&log->sl);
    ex->last_seg = sl_active_id(&log->sl);
    for (uint32_t id = ex->first_seg; id <= ex->last_seg; id++) {
        sl_seg *sg = sl_seg_get(&log->sl, id);
        if (sg) {
            ex->bytes += sg->size;
            ex->segs++;
        }
    }
    ex->from_ts = do_from_ts(log);
}

void ul_get_extent(ul_log *log, ul_extent *ex)
{
    lockorder_lock(&log->mu, LOCK_RANK_ULOG);
    do_extent(log, ex);
    lockorder_unlock(&log->mu, LOCK_RANK_ULOG);
}

/* ---- retention ----------------------------------------------------------- */

/* The timestamp of segment id's last row: the next segment's header holds
 * it; an empty next one (the active, or one whose rows a torn tail cut)
 * leaves the log's last.  log->mu held.  0 or KURA_E*. */
static int do_seg_last(ul_log *log, uint32_t id, uint64_t *last)
{
    ul_row h;
    int hr = do_seg_header(log, id + 1, &h);
    if (hr < 0)
        return hr;
    *last = hr == KURA_OK ? h.prev_ts : log->last_ts;
    return KURA_OK;
}

/* Removes sg, the oldest segment, counting it in res; log->mu held. */
static void do_drop_oldest(ul_log *log, sl_seg *sg, uint32_t active, ul_prune_result *res)
{
    uint64_t size = sg->size;
    sl_seg_drop(&log->sl, sg);
    sl_first_advance(&log->sl, active);
    res->segs++;
    res->bytes += size;
}

int ul_prune(ul_log *log, uint64_t keep_after_ts, uint64_t max_total, ul_prune_result *res)
{
    ul_extent ex;
    int rc = KURA_OK;
    memset(res, 0, sizeof(*res));
    if (log->cfg.read_only)
        return KURA_EREADONLY;
    lockorder_lock(&log->mu, LOCK_RANK_ULOG);
    do_extent(log, &ex);
    uint64_t total = ex.bytes;
    for (uint32_t id = ex.first_seg; max_total && total > max_total && id < ex.last_seg; id++) {
        sl_seg *sg = sl_seg_get(&log->sl, id);
        uint64_t seg_last;
        if (!sg)
            continue;
        if ((rc = do_seg_last(log, id, &seg_last)))
            break;
        total -= sg->size;
        do_drop_oldest(log, sg, ex.last_seg, res);
        if (seg_last > keep_after_ts)
            res->forced++;
    }
    res->from_ts = do_from_ts(log);
    lockorder_unlock(&log->mu, LOCK_RANK_ULOG);
    if (res->forced) {
        char msg[200];
        snprintf(msg, sizeof(msg), "the update log passed its cap of %llu bytes: removed %u "
                 "segments still needed after timestamp %llu", (unsigned long long)max_total,
                 res->forced, (unsigned long long)keep_after_ts);
        logf_(log, KURA_LOG_ERROR, msg);
    }
    return rc;
}

int ul_prune_before(ul_log *log, uint64_t ts, ul_prune_result *res)
{
    ul_extent ex;
    int rc = KURA_OK;
    memset(res, 0, sizeof(*res));
    if (log->cfg.read_only)
        return KURA_EREADONLY;
    lockorder_lock(&log->mu, LOCK_RANK_ULOG);
    do_extent(log, &ex);
    for (uint32_t id = ex.first_seg; id < ex.last_seg; id++) {
        sl_seg *sg = sl_seg_get(&log->sl, id);
        uint64_t seg_last;
        if (!sg)
            continue;
        if ((rc = do_seg_last(log, id, &seg_last)) || seg_last > ts)
            break;
        do_drop_oldest(log, sg, ex.last_seg, res);
    }
    res->from_ts = do_from_ts(log);
    lockorder_unlock(&log->mu, LOCK_RANK_ULOG);
    return rc;
}

/* ---- segments, for tools --------------------------------------------------- */

int ul_segments(ul_log *log, ul_seg_info **out, size_t *n)
{
    ul_extent ex;
    *out = NULL;
    *n = 0;
    lockorder_lock(&log->mu, LOCK_RANK_ULOG);
    do_extent(log, &ex);
    ul_seg_info *v = calloc(ex.segs ? ex.segs : 1, sizeof(*v));
    if (!v) {
        lockorder_unlock(&log->mu, LOCK_RANK_ULOG);
        return KURA_ENOMEM;
    }
    for (uint32_t id = ex.first_seg; id <= ex.last_seg; id++) {
        sl_seg *sg = sl_seg_get(&log->sl, id);
        if (!sg || *n == ex.segs)
            continue;
        ul_seg_info *si = &v[(*n)++];
        struct stat st;
        si->id = id;
        si->bytes = sg->size;
        si->file_bytes = fstat(sg->fd, &st) == 0 ? (uint64_t)st.st_size : sg->size;
        sl_scan sc;
        uint64_t off = SL_SEG_HDR;
        sl_scan_init(&sc, &log->sl, sg, SCAN_FIRST);
        for (;;) {
            const unsigned char *p;
            size_t len;
            ul_row row;
            int rc = off < sg->size ? sl_scan_rec(&sc, off, &row, &p, &len) : 1;
            if (rc) {
                si->damaged = rc == 1 ? 0 : rc;
                break;
            }
            if (row.type == UL_HDR) {
                si->sid = row.sid;
                si->prev_ts = row.prev_ts;
            } else {
                if (!si->first_ts)
                    si->first_ts = row.ts;
                si->last_ts = row.ts;
                si->rows++;
            }
            off += len;
        }
        sl_scan_done(&sc);
    }
    lockorder_unlock(&log->mu, LOCK_RANK_ULOG);
    *out = v;
    return KURA_OK;
}

/* ---- readers ------------------------------------------------------------- */

/* Points rd at the start of segment id; rd->log->mu held. */
static int do_reader_seg(ul_reader *rd, uint32_t id)
{
    sl_seg *sg = sl_seg_get(&rd->log->sl, id);
    if (!sg)
        return KURA_NOTFOUND;
    int fd = fcntl(sg->fd, F_DUPFD_CLOEXEC, 0);
    if (fd < 0)
        return sl_errno_status(errno);
    if (rd->fd >= 0) {
        close(rd->fd);
        sl_scan_done(&rd->sc);
    }
    sl_scan_init(&rd->sc, &rd->log->sl, sg, SCAN_FIRST);
    rd->sc.fd = fd;
    rd->fd = fd;
    rd->seg = id;
    rd->off = SL_SEG_HDR;
    return KURA_OK;
}

int ul_reader_open(ul_log *log, uint64_t after, ul_reader **out)
{
    ul_reader *rd = calloc(1, sizeof(*rd));
    if (!rd)
        return KURA_ENOMEM;
    rd->log = log;
    rd->after = after;
    rd->fd = -1;
    lockorder_lock(&log->mu, LOCK_RANK_ULOG);
    int rc = KURA_OK;
    if (after < do_from_ts(log)) {
        rc = KURA_NOTFOUND;
        goto out;
    }
    /* segments are in timestamp order: the last one whose first row is at
     * or before `after` holds the first row past it, or (if its rows end
     * at `after`) the one after it does; before every first row: the
     * oldest.  A segment with no row yet sorts last. */
    uint32_t lo = sl_first(&log->sl), hi = sl_active_id(&log->sl), start = lo;
    while (lo <= hi) {
        uint32_t mid = lo + (hi - lo) / 2;
        ul_row h;
        int hr = do_seg_header(log, mid, &h);
        if (hr < 0) {
            rc = hr;
            goto out;
        }
        if (hr == KURA_OK && h.ts <= after) {
            start = mid;
            lo = mid + 1;
        } else {
            if (mid == 0)
                break;
            hi = mid - 1;
        }
    }
    rc = do_reader_seg(rd, start);
out:
    lockorder_unlock(&log->mu, LOCK_RANK_ULOG);
    if (rc) {
        ul_reader_close(rd);
        return rc;
    }
    *out = rd;
    return KURA_OK;
}

int ul_reader_next(ul_reader *rd, ul_row *row)
{
    ul_log *log = rd->log;
    for (;;) {
        const unsigned char *p;
        size_t len;
        int rc = sl_scan_rec(&rd->sc, rd->off, row, &p, &len);
        if (rc == KURA_OK) {
            rd->off += len;
            if (row->type == UL_HDR || row->ts <= rd->after)
                continue;
            rd->after = row->ts;
            return KURA_OK;
        }
        if (rc != 1)
            return rc;
        /* the end of what the reader knew of this segment: it may have
         * grown (the active one), or been sealed, with the next to read */
        lockorder_lock(&log->mu, LOCK_RANK_ULOG);
        sl_seg *sg = sl_seg_get(&log->sl, rd->seg);
        if (!sg) {
            rc = KURA_NOTFOUND;         /* pruned before its end was known */
        } else if (sg->size > rd->sc.fsize) {
            /* more rows: the scan's window may end short of them, so it
             * is read afresh (the scan is seglog's public struct) */
            rd->sc.fsize = sg->size;
            rd->sc.len = 0;
            rc = -100;
        } else if (rd->seg < sl_active_id(&log->sl)) {
            rc = do_reader_seg(rd, rd->seg + 1);
            if (rc == KURA_OK)
                rc = -100;
        } else {
            rc = UL_CAUGHT_UP;
        }
        lockorder_unlock(&log->mu, LOCK_RANK_ULOG);
        if (rc != -100)
            return rc;
    }
}

void ul_reader_shed(ul_reader *rd)
{
    if (rd->fd >= 0)
        sl_scan_shed(&rd->sc);
}

void ul_reader_close(ul_reader *rd)
{
    if (!rd)
        return;
    if (rd->fd >= 0) {
        close(rd->fd);
        sl_scan_done(&rd->sc);
    }
    free(rd);
}
