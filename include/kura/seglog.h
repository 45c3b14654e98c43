/*
 * seglog.h - a segmented append-only log: numbered segment files in one
 * directory, appends, group commit, and scanning (src/log/).
 *
 * The hash file's log (src/store/hash/hashdb*.c) is its first user; the update
 * log for replication (rows appended to rotating files, scanned by slaves)
 * is the next.  The module owns the files and everything about getting
 * bytes into them durably: the segment table, the active segment, appends
 * (pwritev, or stores into a preallocated shared mapping), rolling to a new
 * segment, the log sequence number (lsn: bytes appended since open), the
 * leader/follower group commit and its sticky failure, write-behind, reads
 * of a record's bytes, listing segments, and the checks and cuts recovery
 * needs (a torn creation, a damaged segment set aside, a tail cut off).
 *
 * It knows nothing of what a record holds.  Records are opaque, and their
 * framing is the user's, through two callbacks:
 *   - sl_append calls `frame` under the append lock with the record number
 *     it assigns; the callback writes the record's head (which may include
 *     that number and a checksum) and returns its length;
 *   - a scan calls the config's `check` with the bytes at an offset and the
 *     segment's format version; it answers "a valid record of N bytes",
 *     "not a record" or "need N bytes".
 * Why callbacks and not a framing of the log's own: the hash file's record
 * format (versions 1 and 2, docs/formats.md) must stay byte-identical, so
 * old databases open and new ones are readable by older builds of the same
 * format; a log-level frame around the user's record would change every
 * file.  The cost is one indirect call per append, made under the lock.
 *
 * Arrows run one way: the user includes this header, the log never calls
 * into its user except through the callbacks and the log hook.
 *
 * Lock order: the user's locks -> sl_log.mu (appends) -> sl_log.cmu (group
 * commit).  seg_mu (writers of the segment table) is innermost.
 */
#ifndef KURA_SEGLOG_H
#define KURA_SEGLOG_H

#include <pthread.h>
#include <stdatomic.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <sys/uio.h>

#include "kura/kio.h"

#define SL_SEG_SLOTS    65536           /* live segment ids must span fewer */
#define SL_SEG_HDR      32              /* bytes of a segment file header */

/* One segment file.  The fields above `live` are the log's: a user reads
 * id, size, version and sealed (size only where its records are known to
 * be complete: below a location an append returned, or a sealed segment's)
 * and never writes them. */
typedef struct sl_seg {
    uint32_t id;
    int fd;
    uint64_t size;              /* bytes of complete records + header */
    uint32_t version;           /* its records' format (from its header) */
    bool sealed;
    bool trimmed;               /* its preallocated tail cut and synced (roll) */
    const unsigned char *map;   /* mapping for reads (offsets < size), or NULL */
    size_t maplen;
    unsigned char *wmap;        /* active segment: the same mapping, written by
                                   sl_append for records below a page (NULL:
                                   every append uses pwritev) */
    size_t wmaplen;             /* bytes preallocated and mapped */
    size_t populated;           /* bytes of wmap prefaulted */
    uint64_t wb_from;           /* bytes before this are written back (or
                                   their writeback is started) */
    unsigned pins;              /* under mu: users of fd outside mu (a sync,
                                   write-behind); sl_seg_drop waits for 0 */
    /* the user's, never read by the log: kept here so that the user's
     * per-segment bookkeeping costs no lookup of its own */
    _Atomic uint64_t live;      /* hash file: bytes of records the index
                                   points at */
    bool keep;                  /* hash file: compaction failed on it for good */
} sl_seg;

/* Where a record landed. */
typedef struct sl_loc {
    uint32_t seg;
    uint32_t hlen;              /* its head's length, as `frame` returned */
    uint64_t off;
    uint64_t lsn;               /* log position just past the record */
    uint64_t recno;             /* the number `frame` was given */
} sl_loc;

/* The append callback: writes the record's head into head (room for the
 * head_max bytes given to sl_append) and returns its length.  Called under
 * the append lock, so record numbers follow the log's order; recno is the
 * log's last record number + 1.  It must not call into the log. */
typedef size_t (*sl_frame_fn)(void *arg, unsigned char *head, uint64_t recno);

/* The scan callback: avail bytes of a segment of the given format version
 * at p.  Returns the record's length (> 0) if a valid record starts there
 * and all of it is in the avail bytes; SL_NOT_REC if no record starts there
 * (or it is damaged); SL_NEED_MORE with *need set to the bytes it needs
 * (more than avail) to decide.  It judges from the bytes alone. */
#define SL_NOT_REC      (-1)
#define SL_NEED_MORE    0
typedef long long (*sl_check_fn)(void *arg, const unsigned char *p, size_t avail,
                                 uint32_t version, size_t *need);

typedef struct sl_config {
    const char *dir;            /* the directory (paths in messages, files) */
    int dirfd;                  /* open on dir: synced after names change */
    const kura_io *io;          /* every file change goes through it */
    char magic[8];              /* of a segment file's header */
    uint32_t version;           /* format version of new segments */
    uint32_t versions;          /* accepted at open: bit v for version v */
    uint64_t segsiz;            /* a segment is sealed past this */
    uint64_t msiz;              /* bytes of sealed segments mapped for reads */
    uint64_t wbehind;           /* write-behind step, 0 = none */
    bool mapwrite;              /* append through a shared mapping */
    bool read_only;
    sl_check_fn check;          /* the records' framing, for scans */
    /* messages (ERROR lines on cuts and failures); NULL: stderr */
    void (*log)(void *arg, int level, const char *line);
    void *log_arg;
    int lock_rank;              /* the append lock's rank (lockorder.h); 0: unchecked */
    /* Called before every sync that makes records durable (a group
     * commit's, a segment's seal), after the records it covers were
     * appended: a user whose records name bytes in a file of its own (the
     * B+ tree's large values) syncs that file here, so that a durable
     * record never names unwritten bytes.  Returns 0 or an errno, which
     * fails the log for good (sl_fail) as the log's own sync would.  It
     * may run under the append lock: it must not call into the log or take
     * a lock the user holds while appending.  NULL: none. */
    int (*presync)(void *arg);
    void *presync_arg;
} sl_config;

/* The log.  Its fields are the module's; users embed it and call the
 * functions below. */
typedef struct sl_log {
    sl_config cfg;

    /* segments: slot id % SL_SEG_SLOTS; written under seg_mu, read freely
     * by anyone who knows (by the user's own locking) that a record there
     * is live */
    pthread_mutex_t seg_mu;
    sl_seg *_Atomic segs[SL_SEG_SLOTS];
    uint32_t seg_first;         /* lowest id that may exist */
    uint64_t mapped;            /* bytes mapped (msiz budget) */

    /* appends, serialized by mu */
    pthread_mutex_t mu;
    sl_seg *active;
    pthread_cond_t pin_cv;      /* with mu: a segment's pins fell to 0 */
    _Atomic uint64_t lsn;       /* bytes appended since open (monotonic) */
    uint64_t recno;             /* last record number handed out */
    _Atomic uint64_t rolls;     /* segments sealed since open */

    /* group commit */
    pthread_mutex_t cmu;
    pthread_cond_t ccv;
    uint64_t synced_lsn;
    bool syncing;
    _Atomic int failed;         /* sticky: a sync failed (sl_fail) */

    _Atomic uint64_t syncs, sync_errors, write_errors, read_errors;
} sl_log;

typedef struct sl_stats {
    uint64_t syncs, sync_errors, write_errors, read_errors;
} sl_stats;

/* ---- setup ---------------------------------------------------------------- */

/* Copies cfg (dir must outlive the log); no file is touched.  0 or KURA_E*. */
int sl_init(sl_log *log, const sl_config *cfg);
/* Closes every segment and frees the locks; the log is unused after.  A
 * zeroed sl_log that sl_init never saw is left alone. */
void sl_destroy(sl_log *log);

/* ---- the segment table ------------------------------------------------- */

static inline sl_seg *sl_seg_get(sl_log *log, uint32_t id)
{
    sl_seg *sg = atomic_load_explicit(&log->segs[id % SL_SEG_SLOTS], memory_order_acquire);
    return sg && sg->id == id ? sg : NULL;
}
void sl_seg_path(const sl_log *log, uint32_t id, char *buf, size_t len);
/* Segment ids present in the directory, sorted (*ids malloc'ed). */
int sl_list(sl_log *log, uint32_t **ids, size_t *n);
/* Opens an existing segment: its header checked, its size the file's.
 * KURA_ECORRUPT for a bad header, KURA_EINVAL for a format version not in
 * cfg.versions or an id whose slot is taken; err says which. */
int sl_seg_open(sl_log *log, uint32_t id, sl_seg **out, char *err, size_t errlen);
/* Creates segment id with cap bytes reserved (0: segsiz; mapped too, with
 * mapwrite); its header is durable, then its name. */
int sl_seg_create(sl_log *log, uint32_t id, uint64_t cap, sl_seg **out);
void sl_seg_map(sl_log *log, sl_seg *sg);       /* for reads, if msiz allows */
void sl_seg_close(sl_log *log, sl_seg *sg);     /* closes, frees */
void sl_seg_drop(sl_log *log, sl_seg *sg);      /* waits for pins, closes, unlinks */
/* True (and the file removed, unless read-only) when segment id, the
 * newest, has no header: its creation did not complete.  *cut gets its
 * size.  An ERROR line says what went. */
bool sl_torn_creation(sl_log *log, uint32_t id, uint64_t *cut);
/* Renames segment id aside to "<name>.damaged" (not when read-only). */
void sl_set_aside(sl_log *log, uint32_t id);
/* Cuts sg at off (the file too unless read-only); *cut += the bytes cut
 * when any is not zero, with an ERROR line naming why. */
int sl_seg_cut(sl_log *log, sl_seg *sg, uint64_t off, const char *why, uint64_t *cut,
               char *err, size_t errlen);

/* After opening: sg becomes the active segment (its tail past size cut,
 * then reserved and mapped again), every other open segment below it is
 * sealed and mapped, and `first` is the lowest id. */
void sl_start(sl_log *log, sl_seg *active, uint32_t first);
/* Lowest id that may exist; raised past dropped ones up to limit. */
uint32_t sl_first(sl_log *log);
void sl_first_advance(sl_log *log, uint32_t limit);
uint32_t sl_active_id(sl_log *log);
/* fn for every segment from the first to the active, under the table's
 * locks (it must not call into the log). */
void sl_seg_each(sl_log *log, void (*fn)(void *arg, sl_seg *sg), void *arg);

/* ---- appends --------------------------------------------------------------- */

/* Appends one record: iov[0] is the head (iov_base with room for head_max
 * bytes; frame fills it), iov[1..n) the body, body_len bytes in all.  With
 * `numbered` the record takes the next record number (frame gets it; it is
 * the log's once the append succeeds); without, frame gets it too but the
 * number is not used up.  0, or KURA_E* (the record is then not in the
 * log: a partial write is cut off again). */
/* The body's parts of a key-value record, key ++ v0 ++ v1, appended to
 * iov[n..] for sl_append (empty parts left out: a NULL pointer with a
 * zero length is never passed on); returns the new count (at most n + 3). */
static inline int sl_iov_kv(struct iovec *iov, int n, const void *key, size_t klen,
                            const void *v0, size_t l0, const void *v1, size_t l1)
{
    if (klen)
        iov[n++] = (struct iovec){ (void *)key, klen };
    if (l0)
        iov[n++] = (struct iovec){ (void *)v0, l0 };
    if (l1)
        iov[n++] = (struct iovec){ (void *)v1, l1 };
    return n;
}

int sl_append(sl_log *log, struct iovec *iov, int n, size_t head_max, size_t body_len,
              bool numbered, sl_frame_fn frame, void *arg, sl_loc *out);

/* The tail as one consistent view, for a user's fn run under the append
 * lock (sl_locked): no record is appended meanwhile. */
typedef struct sl_tail {
    uint32_t seg;               /* the active segment */
    uint64_t off;               /* its size: where the next record goes */
    uint64_t lsn;
    uint64_t recno;             /* last record number handed out */
    uint64_t rolls;
} sl_tail;
void sl_locked(sl_log *log, void (*fn)(void *arg, const sl_tail *t), void *arg);
void sl_set_recno(sl_log *log, uint64_t recno);     /* at open, before appends */
/* Seals the active segment now if it holds records (a new one takes the
 * next, with cap bytes reserved: 0 for segsiz; a user about to close
 * passes SL_SEG_HDR, as the next open reserves the active segment's room
 * anyway); 0 or KURA_E* as for a roll by sl_append. */
int sl_roll(sl_log *log, uint64_t cap);
/* The roll rule: a segment whose tail is at `size` (its header included)
 * takes a record of rlen bytes unless it holds records already and the
 * record would carry it past segsiz (an empty segment takes any record).
 * sl_append rolls by it; a user that frames its records by where they
 * fall (the update log's segment-opening row) asks it first. */
static inline bool sl_would_roll(const sl_log *log, uint64_t size, uint64_t rlen)
{
    return size > SL_SEG_HDR && size + rlen > log->cfg.segsiz;
}
static inline uint64_t sl_lsn(sl_log *log)
{
    return atomic_load(&log->lsn);
}
static inline uint64_t sl_rolls(sl_log *log)
{
    return atomic_load_explicit(&log->rolls, memory_order_relaxed);
}

/* ---- durability ------------------------------------------------------------ */

int sl_commit(sl_log *log, uint64_t lsn);       /* durable up to lsn (group commit) */
int sl_sync_now(sl_log *log);                   /* durable up to the current end */
void sl_writebehind(sl_log *log);               /* background: start writeback */
void sl_writeback_hint(sl_log *log);            /* start writeback of the whole tail */
/* Drops the active segment's mapping (appends then use pwritev) and cuts
 * its preallocated tail; only while no other thread uses the log (a close). */
void sl_unmap_active(sl_log *log);
int sl_fsync_dir(sl_log *log);                  /* a failure is sticky */
/* Records a failed sync (or a write whose fate is unknown) for good: from
 * now on every append and commit is refused with KURA_EFAILED; cleared only
 * by a restart, which recovers from what is really on the disk.  Logs once.
 * The user calls it too for syncs of its own files (a checkpoint). */
void sl_fail(sl_log *log, const char *what, int err);
static inline int sl_failed(sl_log *log)
{
    return atomic_load_explicit(&log->failed, memory_order_acquire);
}
int sl_errno_status(int e);                     /* an errno as KURA_E* */
void sl_get_stats(sl_log *log, sl_stats *st);

/* ---- reading --------------------------------------------------------------- */

/* The len bytes at (seg, off): through the read mapping, or read into a
 * per-thread buffer (valid until this thread's next sl_read); *version
 * gets the segment's format.  The caller
 * keeps the segment from being dropped meanwhile (its own locks).
 * KURA_NOTFOUND: no such segment; KURA_ECORRUPT: the file ends before;
 * KURA_EIO (logged, counted); KURA_ENOMEM. */
int sl_read(sl_log *log, uint32_t seg, uint64_t off, size_t len, const unsigned char **p,
            uint32_t *version);

/* Sequential reading of a segment through a window buffer filled with pread
 * (an I/O error is a status, not a SIGBUS), every record judged by
 * cfg.check. */
typedef struct sl_scan {
    const kura_io *io;          /* the log's */
    int fd;
    uint32_t version;           /* the segment's format */
    uint64_t fsize;
    sl_check_fn check;
    size_t first;               /* bytes shown to check first */
    unsigned char *buf;
    size_t cap;
    uint64_t base;
    size_t len;
    /* sl_scan_crc's prefix checksums: pcrc[i] is the CRC of the window's
     * bytes from where the table began up to cbase + i * SL_CRC_STEP;
     * cbase is the window's base while pn > 0 (pn 0: no table yet) */
    uint32_t *pcrc;
    size_t pn, pcap;
    uint64_t cbase;
    uint32_t x2n[64];           /* x^(8 * 2^k) mod the polynomial; x2n[0] 0 until made */
    uint64_t crc_bytes;         /* bytes sl_scan_crc checksummed (tests count the work) */
} sl_scan;
void sl_scan_init(sl_scan *sc, sl_log *log, const sl_seg *sg, size_t first);
void sl_scan_done(sl_scan *sc);
/* Frees the read window (up to 1 MB); the next read allocates it again. */
void sl_scan_shed(sl_scan *sc);
/* KURA_OK with the record at off in *p (valid until the next call) and its
 * length in *len; 1 at the end of the segment; KURA_ECORRUPT when no valid
 * record is at off; KURA_EIO; KURA_ENOMEM.  arg goes to check. */
int sl_scan_rec(sl_scan *sc, uint64_t off, void *arg, const unsigned char **p, size_t *len);
/* The next offset after off where a valid record starts, or fsize. */
uint64_t sl_scan_resync(sl_scan *sc, uint64_t off, void *arg);
/* The CRC-32C of n bytes at p: what crc32c_update(0, p, n) gives, for a
 * check to call on the bytes a scan showed it.  A resync tries every
 * offset of damaged bytes, and garbage can claim a long record at each:
 * checksumming each claim afresh was quadratic in the garbage's length.
 * During a check, a long range in the scan's window is instead taken from
 * prefix checksums kept with the window (each byte checksummed once) and
 * the CRC's linearity, so a claim costs at most about SL_CRC_DIRECT bytes
 * of checksum however long it is.  Elsewhere it is crc32c_update. */
#define SL_CRC_STEP     256u
#define SL_CRC_DIRECT   (16u << 10)
uint32_t sl_scan_crc(const unsigned char *p, size_t n);

#endif
