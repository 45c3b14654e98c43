/*
 * snapshot.h - snapshot files: every live item of a store at one moment,
 * compressed, checked end to end (src/snap/).  kurad writes them in the
 * background (-bgs), loads the newest good one into a missing or empty
 * database, and kuractl dumps, loads, verifies and restores with them: it
 * is also the portable dump format.  docs/formats.md has the layout.
 *
 * A file is a header (uncompressed, with its own CRC), the items
 * compressed (version 2: blocks of up to 4 MiB, sorted by key and laid
 * out in columns, each block with its CRCs; version 1, still read: one
 * compressed stream of records), and a trailer (item count, the update-log timestamp at
 * which the copy ended, the raw stream's length, CRC-32C of every byte of
 * the file before it).  A writer writes beside the final name, fsyncs,
 * renames into place and fsyncs the directory, so a reader sees a whole
 * file or none.  A reader checks the header and the trailer's CRC over
 * the whole file before it hands out the first item, so a truncated,
 * bit-flipped or unknown-version file is refused before anything is
 * loaded from it.
 *
 * A snapshot taken by a running server is fuzzy: a change made while it
 * was taken may or may not be in it.  Its start_ts says every update-log
 * row up to that timestamp is in it; replaying the rows after start_ts in
 * order over it gives the server's state (rows are results, not commands,
 * so replaying one whose effect is already in it does no harm).  Replaying
 * up to a time T >= end_ts gives the state at T exactly.
 */
#ifndef KURA_SNAPSHOT_H
#define KURA_SNAPSHOT_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "kura/codec.h"
#include "kura/item.h"
#include "kura/kio.h"

#define SNAP_MAGIC      "KURASNAP"
#define SNAP_VERSION    3       /* what a writer writes unless told 1 (3: blocks may
                                   be wide, holding keys over 255 bytes) */
#define SNAP_VERSION_MIN 1      /* the oldest a reader reads */
#define SNAP_SUFFIX     ".ksnap"
#define SNAP_BLOCK_MAX  (16u << 20)     /* v2: a block of several items stays under this raw */

typedef struct snap_info {
    uint32_t version;           /* a writer's: 1 writes the old stream format (for
                                   older kurads and tests), else SNAP_VERSION */
    kura_codec codec;
    char backend[16];           /* "cache", "hash", "tree": where it was taken */
    uint32_t sid;               /* the server id (0: none) */
    uint64_t start_ts;          /* every update-log row up to this is in it (0: no log) */
    int64_t created;            /* Unix time the copy began */
    /* from the trailer (snap_open fills them; a writer's are ignored) */
    uint64_t end_ts;            /* the log's last row when the copy ended */
    uint64_t items;
    uint64_t raw_bytes;         /* the uncompressed stream's (v2: blocks') length */
    uint64_t file_bytes;
} snap_info;

/* ---- writing ----------------------------------------------------------- */

typedef struct snap_writer snap_writer;

/* Starts `final_path`: writes to a temporary file beside it (same
 * directory, a name starting with "." and ending ".tmp").  info gives the
 * header's fields (version is set here).  0, or KURA_E* with err set. */
int snap_writer_open(const char *final_path, const snap_info *info, int level,
                     const kura_io *io, snap_writer **out, char *err, size_t errlen);
/* Adds one item (a key of 1..250 bytes, any value up to 1 GiB). */
int snap_writer_add(snap_writer *w, const kura_item *it);
/* Ends the stream, writes the trailer, fsyncs, renames into place and
 * fsyncs the directory; frees w.  On failure the temporary file is removed
 * and the final name untouched.  *info (if not NULL) gets what was written. */
int snap_writer_finish(snap_writer *w, uint64_t end_ts, snap_info *info, char *err,
                       size_t errlen);
/* Gives up: removes the temporary file, frees w. */
void snap_writer_abort(snap_writer *w);
uint64_t snap_writer_items(const snap_writer *w);
uint64_t snap_writer_bytes(const snap_writer *w);   /* compressed bytes so far */

/* ---- reading ----------------------------------------------------------- */

typedef struct snap_reader snap_reader;

/* Opens and checks a file: header, version, trailer, CRC of the whole
 * file (one read through it).  0, or KURA_ECORRUPT (damaged, truncated,
 * not a snapshot), KURA_EINVAL (a version this build does not know),
 * KURA_ESYS (cannot read); err says which. */
int snap_open(const char *path, snap_reader **out, snap_info *info, char *err, size_t errlen);
/* Reads only the two ends of a file (header, version, trailer in place)
 * into *info, without the whole file's checksum: for listing.  The same
 * errors as snap_open for what it checks. */
int snap_peek(const char *path, snap_info *info, char *err, size_t errlen);
/* The next item (valid until the next call): 0; SNAP_DONE after the last
 * one (the item count and the stream's length checked); KURA_ECORRUPT. */
#define SNAP_DONE 1
int snap_next(snap_reader *r, kura_item *it, char *err, size_t errlen);
/* Raw bytes of the stream consumed so far (for progress against raw_bytes). */
uint64_t snap_reader_progress(const snap_reader *r);
/* Bytes of buffers the reader holds now: about three times a block's
 * (SB_TARGET, 16 MiB, or one larger item's) for version 2, whatever the
 * file's size. */
size_t snap_reader_footprint(const snap_reader *r);
void snap_close(snap_reader *r);

/* Opens, reads every item, checks the count: 0 or as snap_open/snap_next. */
int snap_verify(const char *path, snap_info *info, char *err, size_t errlen);

/* ---- a directory of snapshots ----------------------------------------- */

/* The name of a snapshot that starts at update-log timestamp start_ts,
 * taken at stamp_us (Unix time in microseconds):
 * "snap-<start_ts: 16 hex digits>-<stamp_us: 16 hex digits>.ksnap", so
 * that names sort by position in the log, then by time (a server without
 * an update log gives every snapshot start_ts 0).  buf needs 48 bytes. */
void snap_name(char *buf, size_t len, uint64_t start_ts, uint64_t stamp_us);

typedef struct snap_entry {
    char path[4096];
    uint64_t start_ts;          /* from the name */
    uint64_t stamp_us;
} snap_entry;

/* The snapshots in dir (by their names), newest first; *out is malloc'd.
 * 0 (n may be 0; a missing dir is empty), or KURA_ESYS. */
int snap_list(const char *dir, snap_entry **out, size_t *n);
/* Removes temporary files a crash left in dir; returns how many. */
int snap_tidy(const char *dir, const kura_io *io);
/* Keeps the newest `keep` snapshots, removes the others. */
int snap_prune(const char *dir, unsigned keep, const kura_io *io);

/* ---- taking and loading (src/snap/snaptake.c, snapload.c) -------------- */

struct kura_engine;
struct kura_store;
struct ul_log;

typedef struct snap_take_cfg {
    const char *dir;            /* where snapshots live (must exist) */
    const char *path;           /* or the file to write, whatever its name (its
                                   directory must exist; dir and keep unused) */
    kura_codec codec;
    int level;                  /* 0: the codec's default */
    unsigned keep;              /* then keep the newest this many (0: all) */
    uint32_t sid;
    struct ul_log *ulog;        /* the engine's update log, or NULL */
    const kura_io *io;          /* the file calls (NULL: the system's) */
    /* called now and then with items written so far (NULL: none) */
    void (*progress)(void *arg, uint64_t items, uint64_t bytes);
    void *progress_arg;
} snap_take_cfg;

/* Writes every live item of e to a new snapshot in cfg->dir (or at
 * cfg->path: written beside it, fsynced, renamed over it), from the
 * caller's thread, with no store lock held while it compresses or writes
 * (engine_walk).  start_ts is the engine's update-log watermark when the
 * copy begins (0 without a log), end_ts the log's last row when it ends.
 * *out gets what was written (its path in path).  0 or KURA_E*, err set. */
int snap_take(struct kura_engine *e, const snap_take_cfg *cfg, snap_info *out, char *path,
              size_t plen, char *err, size_t errlen);

/* Loads every item of the snapshot at path that is live at `now` into s
 * with its cas, flags and exptime, through the store's put (the store has
 * no feed yet: nothing is logged, no cas is handed out).  *max_cas gets
 * the largest cas loaded.  Stops at the first error, with s partly
 * loaded: the caller loads into a store it can throw away.  progress as
 * above (items, raw bytes read). */
/* True for a store never written: no items, and a state nothing has set
 * (a database whose items were all deleted has a watermark or a cas).
 * Only such a store is loaded from a snapshot. */
bool snap_store_blank(struct kura_store *s);

int snap_load(struct kura_store *s, const char *path, int64_t now, snap_info *info,
              uint64_t *max_cas, void (*progress)(void *arg, uint64_t items, uint64_t bytes),
              void *progress_arg, char *err, size_t errlen);

/* ---- restoring a database (src/snap/restore.c) ---------------------- */

typedef struct snap_restore_cfg {
    const char *dbname;         /* the database to build: missing or empty */
    const struct kura_store_config *store_cfg;
    const char *snapshot;       /* this file; or NULL: the newest usable in bgs_dir */
    const char *bgs_dir;
    const char *ulog_dir;       /* the update log to replay after it; NULL: none */
    uint64_t until_ts;          /* apply rows up to this (UINT64_MAX: all); with
                                   bgs_dir, the snapshot must have ended by then */
    void (*progress)(void *arg, const char *phase, uint64_t done, uint64_t total);
    void *progress_arg;
} snap_restore_cfg;

typedef struct snap_restore_result {
    char snapshot[4096];        /* the file used ("" if none) */
    snap_info info;
    uint64_t items;             /* items loaded */
    uint64_t rows;              /* update-log rows applied */
    uint64_t last_ts;           /* the last row applied (0: none) */
} snap_restore_result;

/* Builds cfg->dbname from a snapshot, then the update log's rows after
 * the snapshot's start up to until_ts (a log that ends earlier is applied
 * whole; res->last_ts says where it stopped).  Refuses a database that
 * has data (KURA_EXISTS) and a log whose oldest row is after the
 * snapshot's start (a gap: KURA_ECORRUPT).  With bgs_dir, a snapshot that
 * fails to verify is skipped for the one before it.  0 or KURA_E*, err
 * set. */
int snap_restore(const snap_restore_cfg *cfg, snap_restore_result *res, char *err,
                 size_t errlen);

#endif
