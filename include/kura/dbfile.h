/*
 * dbfile.h - what the file backends (the hash file, src/store/hash/, and
 * the B+ tree, src/store/tree/) share beyond the store interface: opening
 * a database directory and its LOCK, size parameters, the put condition,
 * stats lines, clocks and deadlines, and the background threads
 * (src/store/dbfile.c).
 *
 * Both backends keep a database as a directory with a LOCK file, take
 * "#name=size" parameters, and decide set/add/replace/cas the same way;
 * the code for that is here once.
 */
#ifndef KURA_DBFILE_H
#define KURA_DBFILE_H

#include <pthread.h>
#include <stdbool.h>
#include <stdint.h>
#include <time.h>

#include "kura/store.h"

/* Takes parameter `name` (if given) as a size from lo to hi into *v; an
 * error names the backend (`what`, e.g. "hash file") and the range. */
int kura_param_size(kura_params *params, const char *what, const char *name, uint64_t *v,
                    uint64_t lo, uint64_t hi, char *err, size_t errlen);

/* Opens the database directory `path` (`what`: how a message calls such a
 * database), creating it unless read_only (then its name is made durable
 * in its parent), and takes its LOCK file (exclusive; shared when
 * read_only).  *dirfd and *lockfd are set (-1 when not opened); the caller
 * closes them.  A plain file at path is refused.  0 or KURA_E*, err set. */
int kura_db_dir_open(const kura_io *io, const char *path, bool read_only, const char *what,
                     int *dirfd, int *lockfd, char *err, size_t errlen);

/* One "stats" line of a number. */
void kura_emit_u64(kura_stat_fn emit, void *arg, const char *name, uint64_t v);

/* The realtime clock plus ms, for pthread_cond_timedwait. */
struct timespec kura_deadline_in(long ms);

/* The monotonic clock in seconds. */
double kura_mono(void);

/* The pause before the next try of failed background work (a checkpoint
 * on a full disk, say): 1 s, doubling up to 30 s.  No error path retries
 * without waiting, and the log is not flooded. */
double kura_backoff_next(double backoff);

/*
 * A file backend's background threads.  work(arg) runs every 100 ms, on a
 * thread of its own (checkpoints, compaction); under -sync interval,
 * sync(arg) runs once a second on another, so that the promise ("at most
 * about the last second is lost") holds however long a round of work
 * takes.  Both are called with no lock held, and return soon after
 * kura_bg_stopping() turns true.
 */
typedef struct kura_bg {
    void (*work)(void *arg);
    void (*sync)(void *arg);
    void *arg;
    pthread_mutex_t mu;
    pthread_cond_t cv;
    /* set under mu (so that a thread's condition wait cannot miss it), read
     * without it between pieces of work, hence atomic */
    _Atomic bool stopping;
    pthread_t work_thread, sync_thread;
    bool work_running, sync_running;
} kura_bg;

/* At the database's allocation, so that kura_bg_destroy is always safe. */
void kura_bg_init(kura_bg *b);
/* Starts work, and sync unless it is NULL; `what` names the backend in an
 * error.  0 or KURA_ESYS, err set (what started is stopped by destroy). */
int kura_bg_start(kura_bg *b, void (*work)(void *), void (*sync)(void *), void *arg,
                  const char *what, char *err, size_t errlen);
bool kura_bg_stopping(kura_bg *b);
/* Stops and joins the threads (at close, before the database goes). */
void kura_bg_stop(kura_bg *b);
void kura_bg_destroy(kura_bg *b);

#endif
