/*
 * journal.h - durability, one layer below the engine (src/journal/): the
 * change feed, the watermark, the history vector, the commit interface
 * and the group committer.
 *
 * The engine hands out cas values and applies memcached's rules; the
 * journal makes its changes durable and repeatable: the change feed logs
 * every change as a row of the update log under the key's lock
 * (src/journal/feed.c), the watermark says which rows the store already
 * holds (watermark.c), a dual master's recent deletes decide which of a
 * peer's rows win (tombs.c), and the group committer makes replies wait
 * until what they answer is durable (committer.c) through one commit
 * interface, implemented by the store, the update log and the wait for
 * replicas (commit.c).
 *
 * The journal knows nothing of the engine.  What it needs from above it is
 * given: a cas for a local change and the engine's state save, as the two
 * hooks of journal_new (journal_hooks); what one change is and what the
 * journal did with it, in the caller's journal_change, which reaches the
 * store's feed through the store call's clock (kura_clock.feed_ctx).  The
 * engine applies rows (at open and from a master) through its own calls
 * (engine_attach_log, engine_apply_row, src/engine/durable.c).
 */
#ifndef KURA_JOURNAL_H
#define KURA_JOURNAL_H

#include <stdbool.h>
#include <stdint.h>

#include "kura/fence.h"
#include "kura/store.h"
#include "kura/ulog.h"

typedef struct kura_journal kura_journal;

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

/* The update log as a commit source (its rows make the store's changes
 * durable), with the replicas' wait when set (journal_set_replica_wait).
 * false: no update log attached (engine_commit_source then takes the
 * store). */
bool journal_commit_source(kura_journal *j, kura_commit *out);

/* Semi-synchronous replication: the commit source also waits for
 * wait(arg, ts), which returns once replicas hold every row up to ts: 0,
 * KURA_COMMIT_ABANDONED, or a negative error (final, as a failed sync).
 * The commit sequence becomes the rows' timestamps (with -sync always the
 * log is synced first).  Set before journal_commit_source() is asked. */
void journal_set_replica_wait(kura_journal *j, int (*wait)(void *arg, uint64_t ts), void *arg);

/* ---- the group committer (src/journal/committer.c) ------------------------ */

typedef struct journal_committer journal_committer;

typedef struct committer_config {
    kura_commit source;
    void (*wake)(void *arg);            /* after each commit: look at the held replies */
    void *wake_arg;
    void (*log)(int level, const char *line);   /* the one line at a failed sync */
    const kura_fence *fence;            /* closed: no reply is sent, the waiters are
                                           closed (failover, src/ha/); NULL: none */
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

/* ---- the journal under the engine (src/journal/feed.c, attach.c) ----------- */

/* What the journal needs from the engine above it, both called with arg
 * and with no lock of the journal's held. */
typedef struct journal_hooks {
    /* A cas for a local change (JOURNAL_LOCAL), called under the key's
     * lock from inside the store call: KURA_OK, JOURNAL_RESERVE (*cas is
     * past what the engine has reserved: the change is not made; the
     * engine reserves through *cas outside the store and makes it again),
     * or an error.  Never calls into the store. */
    int (*next_cas)(void *arg, uint64_t *cas);
    /* The journal's thread, once a second: saves the engine's state with
     * the watermark (journal_applied_ts) if it moved since the last save,
     * and returns the watermark it looked at. */
    uint64_t (*save_state)(void *arg);
    void *arg;
} journal_hooks;

/* Never returned outside the engine: see journal_hooks.next_cas. */
#define JOURNAL_RESERVE (-100)

/* 0, or KURA_ENOMEM (*out NULL). */
int journal_new(const journal_hooks *hooks, kura_journal **out);
/* Stops the thread (journal_stop) and frees.  NULL: nothing. */
void journal_free(kura_journal *j);
/* Ends the journal's thread and saves the history a last time; before
 * the engine's last state save.  Again, or never started: nothing. */
void journal_stop(kura_journal *j);
/* s's changes go through the journal's feed from now on (the store at
 * open, and one swapped in). */
void journal_hook(kura_journal *j, kura_store *s);
/* The update log attached, NULL if none. */
ul_log *journal_ulog(kura_journal *j);
/* A read-only replica: its own rows (deletes after a copy, evictions) are
 * housekeeping, not history. */
void journal_set_replica(kura_journal *j, bool replica);
/* Dual master: keeps the recent deletes (tombs.c).  0 or KURA_ENOMEM. */
int journal_set_dual(kura_journal *j);

/* Attaching the update log (engine_attach_log does it in this order):
 * journal_attach decides from s's saved state and the log's extent which
 * rows the store may lack, hands each to redo(arg, row) (the engine
 * applies it as a JOURNAL_REDO change, not logged again), counts them in
 * *redone, loads the history, and makes log the feed's: every change is a
 * row of it from then on (it must stay open until journal_free).  logfn
 * as the store's.  The engine then saves its state, and journal_start
 * starts the thread (saves the watermark through the save_state hook once
 * a second, syncs the log under -sync interval; on KURA_ESYS the log is
 * detached again). */
int journal_attach(kura_journal *j, kura_store *s, ul_log *log, int sync_mode,
                   void (*logfn)(int level, const char *line),
                   int (*redo)(void *arg, const ul_row *row), void *arg, uint64_t *redone);
int journal_start(kura_journal *j);        /* 0 or KURA_ESYS */

/* One change, on its caller's stack: what kind it is (a local change, a
 * master's row, a row applied again at open), and what the journal did
 * with it.  The engine begins it before the store call that may make it,
 * hands it to the store in the clock (kura_clock.feed_ctx) and to
 * journal_update from its update callbacks, and ends it after. */
enum { JOURNAL_LOCAL = 0, JOURNAL_REPLICA, JOURNAL_REDO };
typedef struct journal_change {
    int kind;
    const ul_row *row;          /* JOURNAL_REPLICA: the row received (its cas,
                                   sid and origin_ts are kept) */
    int slot;                   /* journal_begin's watermark slot, -1: none */
    uint64_t logged_ts;         /* the row this change appended, 0: none */
    uint64_t cas;               /* the cas handed out for it (a put's is not
                                   returned by the store) */
} journal_change;

/* Around every store call that may change something: begin before it (a
 * watermark slot while the row is in flight), end after with the store's
 * result (a row logged but not applied holds the watermark below it). */
void journal_begin(kura_journal *j, journal_change *ch);
void journal_end(kura_journal *j, journal_change *ch, int rc);
/* For update callbacks (under the key's lock): stamps (a cas for a local
 * REPLACE, through the next_cas hook) and logs the item about to be
 * written (REPLACE/TOUCH) or the removal of key; cur is the live item or
 * NULL.  A non-zero return cancels the change. */
int journal_update(kura_journal *j, journal_change *ch, const char *key, size_t klen,
                   const kura_item *cur, kura_update *up);
/* Dual master, a peer's row (ch JOURNAL_REPLICA) in an update callback:
 * decides whether it wins over cur (the latest cas, a delete remembered
 * for a while), fills *up (KEEP if not) and logs it. */
int journal_lww(kura_journal *j, journal_change *ch, const kura_item *cur, kura_update *up);
bool journal_dual(kura_journal *j);
/* flush_all: logs it (the engine's state lock held); ch NULL: a local one. */
int journal_flush(kura_journal *j, journal_change *ch, uint64_t oldest_cas,
                  int64_t flush_at);

/* The watermark (watermark.c): every row of the update log up to this
 * timestamp is in the store (UINT64_MAX without a log), never below the
 * last one saved.  A copy of the store taken from now on, followed by the
 * rows after it, is the store as of any later moment. */
uint64_t journal_applied_ts(kura_journal *j);
/* The engine saved ts as the store's watermark (0: forget the last save:
 * a new log or a store swapped in). */
void journal_set_saved(kura_journal *j, uint64_t ts);
/* A store swapped in: a row the old one failed to apply no longer holds
 * the watermark down. */
void journal_unpin(kura_journal *j);
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
void journal_history(kura_journal *j, journal_hist *out);
int journal_history_format(kura_journal *j, char *buf, size_t cap);
/* Replaces it (a replica whose store a master's full copy replaced holds
 * the master's history from then on) and saves it before returning: 0 or
 * KURA_EIO (logged). */
int journal_history_reset(kura_journal *j, const journal_hist *h);

#endif
