/*
 * ulog.h - the update log: every change to the store as a row (the
 * resulting item, a delete, a flush_all), appended to rotating segment
 * files in a directory of its own, for slaves to read from a timestamp on
 * (src/log/ulog.c; the format is in docs/formats.md, "The update log").
 *
 * Rows hold results, never commands ("set k to v with cas 7", not
 * "incr k"), so applying one twice does no harm.  Each carries a
 * timestamp from a hybrid logical clock (hlc.h), unique and increasing in
 * the log's order, the id of the server where the change was made, and a
 * CRC-32C.  The files are a segmented log (seglog.h): rotation at `ulim`
 * bytes (segsiz), group commit, the sticky sync failure and the cut of a
 * torn tail at open are seglog's.  What this module adds is the row
 * format, a header row at the start of each segment (this server's id,
 * the segment's first timestamp, the timestamp of the row before it), a
 * reader that starts after a timestamp, and retention under a total cap.
 *
 * Not yet wired into the engine or the server; see docs/formats.md for
 * what is still to come (-ulog/-ulim/-sid/-ulmax, slaves).
 *
 * Threads: ul_append, ul_prune, ul_reader_* and ul_commit may be called
 * from any threads at once; a reader belongs to one thread.
 */
#ifndef KURA_ULOG_H
#define KURA_ULOG_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "kura/hlc.h"
#include "kura/kio.h"
#include "kura/seglog.h"

#define UL_MAGIC        "KURAULOG"
#define UL_VERSION      1
#define UL_KEY_MAX      4096            /* any store's key limit: KURA_KEY_MAX
                                           (item.h; src/engine/engine.c asserts it) */
#define UL_VAL_MAX      (1u << 30)      /* a row's value, at most */

/* ul_reader_next: no row past the reader yet (not KURA_NOTFOUND, which
 * says the position is no longer held) */
#define UL_CAUGHT_UP    100

typedef enum ul_type {
    UL_HDR = 1,         /* a segment's first row: sid, first ts, prev_ts */
    UL_PUT = 2,         /* the item as it now is */
    UL_DEL = 3,         /* the key is gone */
    UL_FLUSH = 4,       /* flush_all: items stored before `exptime` are dead */
    UL_MARK = 5,        /* never in a file: a replication stream's marker, its
                           kind in prev_ts (src/repl/repl_wire.h) */
} ul_type;

/* A row.  Read back, key and val point into the reader's buffer, valid
 * until its next call.
 *
 * Two timestamps: ts places the row in this log (unique and increasing in
 * the log's order: readers ask for "the rows after ts"), origin_ts is when
 * the change was made, on server sid.  For a change made here they are
 * equal; a row received from a master keeps its origin's sid and
 * origin_ts and gets a ts of this log's, larger than origin_ts, so that
 * slaves can chain and dual masters can order changes by origin. */
typedef struct ul_row {
    uint8_t type;
    uint64_t ts;                /* read: the row's place; ul_append: ignored */
    uint64_t origin_ts;         /* ul_append: 0 for a change made here */
    uint32_t sid;               /* origin server; 0 in ul_append: this log's */
    uint32_t flags;             /* PUT */
    int64_t exptime;            /* PUT: as stored; FLUSH: when it takes effect */
    uint64_t cas;               /* PUT */
    uint64_t prev_ts;           /* HDR: the last row's ts before this segment */
    const void *key;            /* PUT, DEL: 0..UL_KEY_MAX bytes (not NULL) */
    size_t klen;
    const void *val;            /* PUT */
    size_t vlen;
    const void *val2;           /* ul_append: a second part of the value, */
    size_t vlen2;               /* after val (read back as one, in val) */
} ul_row;

/* Where an appended row went: lsn for ul_commit, ts its timestamp. */
typedef struct ul_pos {
    uint64_t lsn;
    uint64_t ts;
    uint32_t seg;
    uint64_t off;
} ul_pos;

typedef struct ul_config {
    const char *dir;            /* must exist; must outlive the log */
    uint32_t sid;               /* this server's id */
    uint64_t ulim;              /* a segment rotates past this many bytes */
    hlc *clock;                 /* shared with its user; NULL: the log's own */
    const kura_io *io;          /* NULL: the default */
    bool mapwrite;              /* seglog's: append through a shared mapping */
    void (*log)(void *arg, int level, const char *line);   /* NULL: stderr */
    void *log_arg;
    /* Open to read only (kuractl ulog list/show, beside a running server):
     * nothing in the directory changes (a torn tail is left on disk and
     * only skipped, no segment is created: a directory without one is
     * KURA_NOTFOUND); appends, prune and ul_set_complete are refused. */
    bool read_only;
} ul_config;

typedef struct ul_log ul_log;

/* Opens (or creates) the log in cfg->dir: every segment opened, a torn
 * creation of the newest removed, the newest scanned and cut at its first
 * row that is not whole (a torn tail; an ERROR line says how much went),
 * the clock moved past the last timestamp found.  *cut gets the bytes cut
 * (may be NULL).  0 or KURA_E*, with err saying why. */
int ul_open(const ul_config *cfg, ul_log **out, uint64_t *cut, char *err, size_t errlen);
/* Closes; the caller has stopped every other user (readers included). */
void ul_close(ul_log *log);

/* Appends a row (type PUT, DEL or FLUSH) stamped with a new timestamp
 * from the clock (first moved past row->origin_ts, if given), as pos->ts.  The
 * row is in the page cache on return, durable after ul_commit(pos->lsn).
 * KURA_EINVAL for a bad row, KURA_EFAILED once a sync has failed, or
 * another KURA_E* (the row is then not in the log). */
int ul_append(ul_log *log, const ul_row *row, ul_pos *pos);
/* fn(arg) is called after every append, under the log's append lock: it
 * must be quick and must not call into the log (the replication master
 * wakes its waiting streams with it).  NULL: none. */
void ul_set_notify(ul_log *log, void (*fn)(void *arg), void *arg);
/* Durable up to lsn: seglog's group commit; a failure is sticky. */
int ul_commit(ul_log *log, uint64_t lsn);
int ul_sync_now(ul_log *log);
int ul_failed(ul_log *log);             /* KURA_EFAILED once a sync failed */
uint64_t ul_last_ts(ul_log *log);       /* the last row's timestamp, 0: none */
uint64_t ul_write_lsn(ul_log *log);     /* covers every row appended so far */
hlc *ul_clock(ul_log *log);

/* Whether the log holds every change since its store was empty.  Set when
 * a new log starts over an empty store: a new replica then needs no copy
 * while the first file is held.  Cleared when the store holds changes the
 * log does not (a new log over a non-empty store, a store changed without
 * the log): the log then holds every change only from now on, positions
 * before now are not held (from_ts, ul_reader_open) and a replica there
 * gets a full copy rather than a gap.  Kept in the file "start" (the
 * timestamp from which the log is whole; no file: since empty), written
 * beside, synced and renamed.  0 or KURA_E*. */
int ul_set_complete(ul_log *log, bool complete);
bool ul_complete(ul_log *log);
/* The timestamp from which the log is whole (the file "start"); 0: since
 * the store was empty.  A reader opened before it moved is behind it. */
uint64_t ul_start(ul_log *log);

/* The log's id: random, 64 bits, made with the log (the file "hid", 16
 * hex digits), never 0 on a log open to write.  A timestamp counts in the
 * log whose id goes with it: a replica keeps its master's id beside its
 * position.  A log directory made anew gets a new id. */
uint64_t ul_log_id(ul_log *log);
uint32_t ul_sid(ul_log *log);          /* cfg->sid: the id of its own rows */
/* The directory (cfg->dir). */
const char *ul_dir(ul_log *log);

/* The log's extent: from_ts, the timestamp a reader must be at or past to
 * be served (every row after it is held); bytes and segments held. */
typedef struct ul_extent {
    uint64_t from_ts;
    uint64_t bytes;
    uint32_t segs;
    uint32_t first_seg, last_seg;
} ul_extent;
void ul_get_extent(ul_log *log, ul_extent *ex);

/* ---- reading ----------------------------------------------------------- */

typedef struct ul_reader ul_reader;
/* A reader of the rows with ts > after, in order.  KURA_NOTFOUND: the
 * position is no longer held (rows after `after` were pruned: the reader
 * needs a bootstrap instead). */
int ul_reader_open(ul_log *log, uint64_t after, ul_reader **out);
/* The next row (never a header row) in *row: 0; UL_CAUGHT_UP when there is none yet
 * (call again later: rows appended meanwhile follow); KURA_NOTFOUND when
 * the next segment was pruned before the reader got to it; KURA_ECORRUPT,
 * KURA_EIO, KURA_ENOMEM. */
int ul_reader_next(ul_reader *rd, ul_row *row);
void ul_reader_close(ul_reader *rd);
/* Frees the reader's read window (up to 1 MB) while it waits for rows
 * (the replication master's idle streams); the next read takes it again. */
void ul_reader_shed(ul_reader *rd);

/* ---- retention --------------------------------------------------------- */

typedef struct ul_prune_result {
    uint32_t segs;              /* segments removed */
    uint64_t bytes;             /* their bytes */
    uint32_t forced;            /* of them, holding rows after keep_after_ts */
    uint64_t from_ts;           /* the log's from_ts after (ul_extent) */
} ul_prune_result;
/* Removes the oldest segments while the bytes held pass max_total (0: no
 * cap, nothing removed).  A segment holding rows after keep_after_ts (what
 * a slave still needs) goes only because the cap forces it, and is then
 * counted in res->forced: that slave will find its position no longer held.
 * The active segment is never removed.  0 or KURA_E*. */
int ul_prune(ul_log *log, uint64_t keep_after_ts, uint64_t max_total, ul_prune_result *res);

/* Removes the oldest segments whose every row is at or before ts (a
 * backup or every replica has them), never the active one: what
 * "kuractl ulog prune --keep-after" asks for.  0 or KURA_E*. */
int ul_prune_before(ul_log *log, uint64_t ts, ul_prune_result *res);

/* ---- segments, for tools ------------------------------------------------ */

typedef struct ul_seg_info {
    uint32_t id;
    uint64_t bytes;             /* the file's records (its size on disk may be
                                   larger: the active segment is preallocated) */
    uint64_t file_bytes;
    uint64_t rows;              /* data rows (the header row not counted) */
    uint32_t sid;               /* from the header row (0: none yet) */
    uint64_t prev_ts;           /* the header row's: the last row before it */
    uint64_t first_ts, last_ts; /* of its data rows (0: none) */
    int damaged;                /* 0, or the status that stopped its scan */
} ul_seg_info;
/* Every segment, oldest first, each scanned for its rows (*out malloc'd).
 * Cost: a read of the whole log.  0 or KURA_E*. */
int ul_segments(ul_log *log, ul_seg_info **out, size_t *n);

/* ---- the row format (for tests and tools) ------------------------------ */

#define UL_ROW_HEAD_MAX (4 + 10 + 1 + 10 + 10 + 5 + 5 + 10 + 10 + 5 + UL_KEY_MAX + 5)
/* Encodes row (its ts, sid and origin_ts as given; origin_ts 0 = ts) up
 * to its value into b (UL_ROW_HEAD_MAX bytes); the row on the wire or on
 * disk is those bytes, then val, then val2.  Returns the bytes written. */
size_t ul_encode(unsigned char *b, const ul_row *row);
/* Decodes the row at p (avail bytes): its length (> 0), SL_NOT_REC, or
 * SL_NEED_MORE with *need set: seglog's check contract. */
long long ul_decode(const unsigned char *p, size_t avail, ul_row *row, size_t *need);

#endif
