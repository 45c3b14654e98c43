/*
 * kio_sim.h - fault injection and power-loss simulation for the stores'
 * file I/O (include/kura/kio.h), for the unit tests.
 *
 * Two kura_io tables, each passing every call through to the table below
 * (the system's by default), so the process under test sees an ordinary
 * file system:
 *
 *  - the injector fails the Nth call of a kind with EIO, ENOSPC or (for
 *    pwritev) a short write, optionally only for paths containing a
 *    substring; it counts calls per kind, so a test first runs a workload
 *    to count, then runs it again for every N;
 *  - the recorder logs every change a power loss could undo (writes with
 *    their bytes, truncates, fallocates, punched holes, creations,
 *    renames, unlinks, mkdirs) and every fsync/fdatasync, and builds the crash image at any
 *    cut point k (what the disk may hold after the first k recorded
 *    operations): each file as of its last sync plus a seeded choice of the
 *    writes made after it (dropped, applied, torn at a 512-byte sector, or
 *    with zeroed tail pages), and each directory as of its last fsync plus
 *    a seeded choice of the entries changed since.
 *
 * Both are meant for one test at a time: they are thread-safe (a store's
 * background thread calls in too) but keep their state in memory until
 * freed.
 */
#ifndef KURA_KIO_SIM_H
#define KURA_KIO_SIM_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "kura/kio.h"

/* ---- the injector -------------------------------------------------------- */

enum kio_kind {
    KIO_OPEN = 0, KIO_PWRITEV, KIO_FSYNC, KIO_FDATASYNC, KIO_FALLOCATE, KIO_FTRUNCATE,
    KIO_RENAMEAT, KIO_UNLINKAT, KIO_MKDIRAT, KIO_MMAP, KIO_PUNCH,
    KIO_NKINDS
};

/* The err of a pwritev that writes only part of its bytes (half, rounded
 * down) and returns that count, instead of failing. */
#define KIO_SHORT (-1)

typedef struct kio_inject kio_inject;

/* below: the table calls pass to (NULL: the system's). */
kio_inject *kio_inject_new(const kura_io *below);
void kio_inject_free(kio_inject *in);
const kura_io *kio_inject_io(kio_inject *in);

/* Only calls whose path contains sub are counted and failed (NULL: all).
 * A call on an fd is matched by the path /proc/self/fd names for it; a
 * rename by either of its paths. */
void kio_inject_match(kio_inject *in, const char *sub);
/* Fails the calls of kind numbered nth .. nth+times-1 (1-based, counted
 * since the last reset; times 0: every one from nth on) with errno err
 * (EIO, ENOSPC, ...), or KIO_SHORT for a short pwritev.  One rule at a
 * time: arming replaces the previous rule. */
void kio_inject_fail(kio_inject *in, int kind, uint64_t nth, uint64_t times, int err);
/* Fails every call of kind from the next one on, until disarmed. */
void kio_inject_fail_from_now(kio_inject *in, int kind, int err);
void kio_inject_disarm(kio_inject *in);   /* no more failures; counts go on */
void kio_inject_reset(kio_inject *in);    /* counts back to 0 */
uint64_t kio_inject_calls(kio_inject *in, int kind);   /* matching calls so far */
uint64_t kio_inject_fired(kio_inject *in);             /* failures injected so far */
uint64_t kio_inject_bytes_read(kio_inject *in);        /* by pread, on any path */
/* by pwritev, on any path (not stores into a mapping: open the log with
 * mapwrite=0 to count its bytes) */
uint64_t kio_inject_bytes_written(kio_inject *in);

/* ---- the recorder -------------------------------------------------------- */

typedef struct kio_rec kio_rec;

/* Records what happens under the directory root (which must exist; what
 * it holds now counts as durable).  Calls on other paths pass through
 * unrecorded.  below: NULL for the system's calls. */
kio_rec *kio_rec_new(const char *root, const kura_io *below);
void kio_rec_free(kio_rec *r);
const kura_io *kio_rec_io(kio_rec *r);

/* "fsync lies": syncs pass through but make nothing durable in the
 * images (the negative check of a power-loss test). */
void kio_rec_set_lies(kio_rec *r, bool lies);

/* Operations recorded so far: the cut points are 0 .. this.  A change the
 * store acknowledged as durable when this returned n must be in every
 * image cut at k >= n. */
uint64_t kio_rec_ops(kio_rec *r);

/* Builds in dest (created; removed first if it exists) the tree under root
 * as a power loss after the first k operations may leave it; seed chooses
 * which unsynced changes happened.  0, or -1 with a message in err.
 * Fastest with k ascending across calls (the simulation only goes
 * forward; a smaller k replays from the start). */
int kio_rec_image(kio_rec *r, uint64_t k, uint64_t seed, const char *dest, char *err,
                  size_t errlen);

/* One line saying what operation i was (for a failure's report). */
void kio_rec_describe(kio_rec *r, uint64_t i, char *buf, size_t len);

/* Removes a directory tree (test scratch directories). */
void kio_rmrf(const char *path);

#endif
