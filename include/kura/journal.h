/*
 * journal.h - durability: the commit interface, the group committer, and
 * the update log's side of the engine (src/journal/).
 *
 * The engine hands out cas values and applies memcached's rules; the
 * journal makes its changes durable and repeatable: the change feed logs
 * every change as a row of the update log under the key's lock
 * (src/journal/feed.c), the watermark says which rows the store already
 * holds (watermark.c), rows are applied again at open and from a master
 * (apply.c, with dual master's recent deletes in tombs.c), and the group
 * committer makes replies wait until what they answer is durable
 * (committer.c) through one commit interface, implemented by the store,
 * the update log and the wait for replicas (commit.c).
 */
#ifndef KURA_JOURNAL_H
#define KURA_JOURNAL_H

#include <stdbool.h>
#include <stdint.h>

#include "kura/engine.h"
#include "kura/ulog.h"

/* ---- the commit interface ------------------------------------------------- */

/*
 * Something that makes changes durable in order: a store (an adapter over
 * the write_seq, thread_seq and commit of its kura_store_ops, which stay
 * there: every backend fills them in beside its other ops), the update log
 * (its log sequence numbers), or the update log plus the wait for
 * replicas (its rows' timestamps, which replicas acknowledge).
 *
 * write_seq(ctx): a number covering every change made so far.
 * thread_seq(ctx): one covering every change the calling thread made (at
 * most write_seq); unchanged across a batch, the batch changed nothing.
 * commit(ctx, seq): returns once every change up to seq is durable: 0,
 * KURA_COMMIT_ABANDONED (replicas did not confirm in time: the replies
 * waiting are not sent, later changes go on), or a negative error (final).
 */
#define KURA_COMMIT_ABANDONED 1

typedef struct kura_commit {
    const char *name;                   /* "store", "ulog", "ulog+replicas" */
    uint64_t (*write_seq)(void *ctx);
    uint64_t (*thread_seq)(void *ctx);
    int (*commit)(void *ctx, uint64_t seq);
    void *ctx;
} kura_commit;

/* A store as a commit source.  false if it has nothing to commit (no
 * write_seq or commit: the cache, a store under -sync none). */
bool journal_commit_store(kura_store *s, kura_commit *out);

/* What the server's group commit syncs and waits for (set *out): the
 * update log when there is one (its rows make the store's changes
 * durable), with the replicas' wait when set (journal_set_replica_wait);
 * else the store, found under the engine's swap gate when the store can be
 * swapped.  false: nothing to commit. */
bool journal_commit_source(kura_engine *e, kura_commit *out);

/* Semi-synchronous replication: the commit source also waits for
 * wait(arg, ts), which returns once replicas hold every row up to ts: 0,
 * KURA_COMMIT_ABANDONED, or a negative error (final, as a failed sync).
 * The commit sequence becomes the rows' timestamps (with -sync always the
 * log is synced first).  Set before journal_commit_source() is asked. */
void journal_set_replica_wait(kura_engine *e, int (*wait)(void *arg, uint64_t ts), void *arg);

/* ---- the group committer (src/journal/committer.c) ------------------------ */

typedef struct journal_committer journal_committer;

typedef struct committer_config {
    kura_commit source;
    void (*wake)(void *arg);            /* after each commit: look at the held replies */
    void *wake_arg;
    void (*log)(int level, const char *line);   /* the one line at a failed sync */
} committer_config;

/* Starts the thread.  durable starts at the source's write_seq.  0, or
 * KURA_ENOMEM / KURA_ESYS (*out NULL). */
int committer_start(const committer_config *cfg, journal_committer **out);
/* Makes everything durable one last time (unless a commit has failed),
 * wakes the waiters and ends the thread.  Call before the threads that
 * ask (the workers) stop; changes made after it are never acknowledged.
 * NULL: nothing. */
void committer_stop(journal_committer *c);
/* Frees it, after every thread that may ask has stopped.  NULL: nothing. */
void committer_free(journal_committer *c);

uint64_t committer_write_seq(journal_committer *c);
/* The source's thread_seq, or its write_seq where it has none. */
uint64_t committer_thread_seq(journal_committer *c);
uint64_t committer_durable(journal_committer *c);
bool committer_failed(journal_committer *c);     /* a commit failed: for good (NULL: false) */
/* Asks for every change up to seq to be made durable; the wake callback
 * runs once it is (or once it is known it never will be). */
void committer_request(journal_committer *c, uint64_t seq);

/* What a waiter whose replies need sequence `target` durable does. */
enum { COMMIT_SEND, COMMIT_WAIT, COMMIT_CLOSE };
int commit_fate(journal_committer *c, uint64_t target);
/* The decision itself, pure: from the durable and abandoned sequences and
 * whether a commit has failed. */
int commit_fate_of(uint64_t target, uint64_t durable, uint64_t abandoned, bool failed);
/* The committer's next step, from its state (pure). */
enum { COMMIT_STEP_WAIT, COMMIT_STEP_SYNC, COMMIT_STEP_EXIT };
int commit_next_step(bool stop, bool has_failed, uint64_t requested, uint64_t durable);

/* ---- the update log under the engine (src/journal/attach.c, apply.c) ------ */

/* From here on every change is also a row of log (which must stay open
 * until engine_close).  First applies again the rows after the store's
 * watermark (those a crash may have kept from the store), counted in
 * *redone.  sync_mode: the server's -sync (interval: the log is synced
 * once a second by the journal's thread).  logfn as the store's. */
int journal_attach(kura_engine *e, ul_log *log, int sync_mode,
                   void (*logfn)(int level, const char *line), uint64_t *redone);
/* Applies a row received from a master (PUT, DEL, FLUSH; others ignored):
 * the item with its cas, logged here with its origin's sid and origin_ts.
 * Allowed on a replica. */
int journal_apply_row(kura_engine *e, const ul_row *row);
/* Every row of the update log up to this timestamp is in the store (the
 * watermark, watermark.c): a copy of the store taken from now on, followed
 * by the rows after it, is the store as of any later moment. */
uint64_t journal_applied_ts(kura_engine *e);

/* ---- the history vector (src/journal/history.c) ---------------------------- */

/* For each origin server id, the highest origin timestamp of a row this
 * server holds (rows flow in order: holding origin o's row at t means
 * holding all of o's rows up to t).  Replication compares a replica's with
 * its master's: an entry above the master's is a row the master never had
 * (docs/replication.md, "History and divergence").  Written "sid:ts,..."
 * in sid order ("" when empty). */
#define JOURNAL_HIST_MAX 128

typedef struct journal_hist_entry {
    uint32_t sid;
    uint64_t ts;
} journal_hist_entry;

typedef struct journal_hist {
    size_t n;
    journal_hist_entry e[JOURNAL_HIST_MAX];
} journal_hist;

/* Raises sid's entry to ts (never lowers it): false if the table is full. */
bool journal_hist_note(journal_hist *h, uint32_t sid, uint64_t ts);
uint64_t journal_hist_get(const journal_hist *h, uint32_t sid);    /* 0: none */
/* "sid:ts,..." into buf: its length, or -1 if cap is too small. */
int journal_hist_format(const journal_hist *h, char *buf, size_t cap);
/* The same back ("" or "-": empty): KURA_OK or KURA_EINVAL. */
int journal_hist_parse(const char *s, journal_hist *h);
/* The first origin whose entry in mine is above theirs (mine holds rows of
 * it that theirs does not), or 0: none. */
uint32_t journal_hist_ahead(const journal_hist *mine, const journal_hist *theirs);

/* This server's history (empty without an update log), and as text. */
void journal_history(kura_engine *e, journal_hist *out);
int journal_history_format(kura_engine *e, char *buf, size_t cap);
/* Replaces it (a replica whose store a master's full copy replaced holds
 * the master's history from then on) and saves it before returning: 0 or
 * KURA_EIO (logged). */
int journal_history_reset(kura_engine *e, const journal_hist *h);

#endif
