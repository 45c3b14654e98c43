/*
 * journal_int.h - the journal's state, shared by the files of
 * src/journal/: the change feed (feed.c), the watermark's slots
 * (watermark.c), the recent deletes of a dual master (tombs.c), attaching
 * the update log and its thread (attach.c), the history vector
 * (history.c) and the commit sources (commit.c).
 *
 * The engine owns one (kura_engine.journal) and calls it through
 * journal.h; what the journal needs of the engine comes through the hooks
 * given to journal_new, and nothing here includes the engine's headers.
 */
#ifndef KURA_JOURNAL_INT_H
#define KURA_JOURNAL_INT_H

#include <pthread.h>
#include <stdatomic.h>

#include "kura/journal.h"

/* Threads that may be inside a change at once, each with a slot of its own
 * (watermark.c); a thread beyond them waits for the one overflow slot.
 * make fuzz builds 4 (-DJOURNAL_SLOTS=4): its targets are one thread, and
 * the protocol targets clear an engine's 16 KB of slots per input. */
#ifndef JOURNAL_SLOTS
#define JOURNAL_SLOTS 256
#endif

typedef struct journal_slot {
    _Atomic uint64_t ts;                /* 0, or a bound below the row in flight */
    char pad[56];
} journal_slot;

struct kura_journal {
    journal_hooks hooks;                /* the engine's cas and state save */
    kura_feed feed;                     /* the store's feed points here */
    ul_log *ulog;                       /* NULL: none */
    int ulog_sync;                      /* enum kura_sync_mode */
    void (*log)(int level, const char *line);
    _Atomic bool replica;               /* journal_set_replica */
    _Atomic uint64_t pinned;            /* a row the store failed to apply: the
                                           watermark stays below it (0: none) */
    _Atomic uint64_t saved;             /* the watermark the engine last saved */
    journal_slot slots[JOURNAL_SLOTS + 1];
    pthread_mutex_t overflow_lock;      /* held across a change in the last slot */
    struct tombs *tombs;                /* dual master: recent deletes (tombs.c) */
    int (*replica_wait)(void *arg, uint64_t ts);    /* -syncrepl: replicas have ts */
    void *replica_wait_arg;
    pthread_t thread;                   /* saves the watermark, syncs (interval) */
    pthread_mutex_t thread_lock;
    pthread_cond_t thread_wake;
    bool thread_stop, thread_running;
    /* history.c: the history vector, its segment and its file */
    pthread_mutex_t hist_lock;          /* hist, hist_full */
    journal_hist hist;                  /* every origin's entry but this server's own: */
    uint32_t hist_own_sid;              /* the log's sid, set at attach */
    _Atomic uint64_t hist_own_ts;       /* its entry, kept apart: a change made here
                                           raises it without the lock */
    _Atomic uint32_t hist_seg;          /* the segment of the last row noted */
    bool hist_full, hist_full_logged;   /* an origin past JOURNAL_HIST_MAX was met */
    pthread_mutex_t hist_save_lock;     /* one writer of the file at a time */
    uint32_t hist_saved_seg;            /* hist_save_lock: hist_seg at the last save */
};

/* feed.c: the calling thread's last row, if it was appended to j's log
 * (false: none, or another journal's): the commit interface's thread_seq,
 * which is per thread by its definition (journal.h, kura_commit). */
bool feed_thread_pos(const struct kura_journal *j, uint64_t *lsn, uint64_t *ts);

/* tombs.c: the recent deletes of a dual master. */
struct tombs *tombs_new(void);
void tombs_free(struct tombs *tb);
void tombs_put(struct tombs *tb, const void *key, size_t klen, uint64_t ts);
uint64_t tombs_get(struct tombs *tb, const void *key, size_t klen);

/* watermark.c */
void watermark_init(struct kura_journal *j);
void watermark_destroy(struct kura_journal *j);

/* history.c: a row appended (sid: its origin, 0: this server); the file read at
 * attach (and the rows after it noted); saved when the segment moved on
 * (or always, force) as of the watermark as_of. */
void history_note(struct kura_journal *j, uint32_t sid, uint64_t origin_ts, uint32_t seg);
int history_load(struct kura_journal *j, ul_log *log);
int history_load_file(const char *dir, journal_hist *h, uint64_t *as_of);
void history_tick(struct kura_journal *j, uint64_t as_of, bool force);
void history_init(struct kura_journal *j);
void history_destroy(struct kura_journal *j);

/* attach.c: the journal's thread. */
void attach_init(struct kura_journal *j);
void attach_destroy(struct kura_journal *j);

/* One line to the server's log (journal_attach's logfn), or stderr
 * without one. */
void journal_log(struct kura_journal *j, int level, const char *line);

#endif
