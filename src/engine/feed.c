/*
 * feed.c - the change feed: every change the store makes, stamped and
 * logged under the key's lock, in the order it is applied.
 *
 * Stores call the feed (store.h, kura_feed) once they have decided to put
 * or delete, with the key's lock held and before they write; the engine's
 * read-modify-write callbacks (append, incr, touch, gat) call
 * feed_update() from under the same lock.  Either way the cas is handed out
 * there, and the row goes into the update log there, so two racing changes
 * of one key get their cas and their rows in the order the store applies
 * them.
 *
 * The update log is the write-ahead log of the pair.  A row is appended
 * before the store writes the change, so after a kill -9 the log holds
 * every change the store holds, and perhaps a few more: those whose thread
 * was between the two writes.  At open the engine applies again the rows
 * after a watermark kept in the store's state (kura_store_state.ulog_ts):
 * "every row up to here is in the store".  Rows hold results, not commands,
 * so applying one the store already has does no harm, and applying every
 * row after the watermark in log order leaves each key as its last row
 * says.  With -sync always the server's group commit waits for the log
 * alone (engine_commit_source): a change whose row is durable is durable,
 * since recovery puts it back into the store.
 *
 * The watermark.  Each thread inside a change holds a slot with a number
 * no larger than the timestamp its row will get (the clock's last value
 * plus one, written before the row is stamped).  The watermark is the
 * clock's last value, read first, lowered below every occupied slot: a
 * row at or under it was applied already, or its thread's slot would have
 * held it down.  A row the store then failed to write (a disk error after
 * the row was logged) pins the watermark below it for good, so the next
 * start applies it: the log, not the store, is the truth.  A thread saves
 * the watermark once a second (with the store's state, in the store's own
 * log, after the changes it covers) and syncs the update log under
 * -sync interval.
 */
#include <errno.h>
#include <inttypes.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "engine_int.h"

enum { CH_LOCAL = 0, CH_REPLICA, CH_REDO };

/* What the change under way on this thread is, when not a local one. */
typedef struct change_ctx {
    int kind;
    const ul_row *row;                  /* CH_REPLICA: the row received */
    kura_engine *e;
} change_ctx;

static _Thread_local const change_ctx *tl_ctx;
static _Thread_local uint64_t tl_logged_ts;     /* the row this change logged, 0: none */
static _Thread_local uint64_t tl_lsn;           /* the last row this thread appended */
static _Thread_local uint64_t tl_ts;            /* ... and its timestamp */
static _Thread_local const kura_engine *tl_lsn_engine;
static _Thread_local uint64_t tl_last_cas;      /* the cas feed_put last gave (feed_last_cas) */

/* ---- slots: one per thread, taken at its first change ------------------ */

static pthread_once_t slot_once = PTHREAD_ONCE_INIT;
static pthread_key_t slot_key;
static _Atomic bool slot_taken[ENGINE_SLOTS];
static _Thread_local int tl_slot = -1;

static void slot_release(void *p)
{
    atomic_store(&slot_taken[(intptr_t)p - 1], false);
}

static void slot_key_init(void)
{
    (void)pthread_key_create(&slot_key, slot_release);
}

static int my_slot(void)
{
    if (tl_slot >= 0)
        return tl_slot;
    pthread_once(&slot_once, slot_key_init);
    for (int i = 0; i < ENGINE_SLOTS; i++) {
        bool f = false;
        if (atomic_compare_exchange_strong(&slot_taken[i], &f, true)) {
            tl_slot = i;
            (void)pthread_setspecific(slot_key, (void *)(intptr_t)(i + 1));
            return i;
        }
    }
    return ENGINE_SLOTS;                /* the shared overflow slot */
}

int feed_begin(kura_engine *e)
{
    if (!e->ulog)
        return -1;
    int i = my_slot();
    if (i == ENGINE_SLOTS)
        pthread_mutex_lock(&e->overflow_lock);
    tl_logged_ts = 0;
    atomic_store(&e->slots[i].ts, hlc_last(ul_clock(e->ulog)) + 1);
    return i;
}

void feed_end(kura_engine *e, int slot, int rc)
{
    if (slot < 0)
        return;
    if (rc < 0 && tl_logged_ts) {
        /* logged, then not applied: the next start applies it */
        uint64_t want = tl_logged_ts - 1, cur = atomic_load(&e->pinned);
        while ((cur == 0 || want < cur) &&
               !atomic_compare_exchange_weak(&e->pinned, &cur, want))
            ;
        if (e->log) {
            char line[200];
            snprintf(line, sizeof(line), "a change is in the update log but the store "
                     "failed to write it (%s): it is applied at the next start",
                     kura_strerror(rc));
            e->log(KURA_LOG_ERROR, line);
        }
    }
    atomic_store(&e->slots[slot].ts, 0);
    if (slot == ENGINE_SLOTS)
        pthread_mutex_unlock(&e->overflow_lock);
}

uint64_t feed_watermark(kura_engine *e)
{
    if (!e->ulog)
        return UINT64_MAX;              /* nothing to apply again: see engine_attach_ulog */
    uint64_t w = hlc_last(ul_clock(e->ulog));
    for (int i = 0; i <= ENGINE_SLOTS; i++) {
        uint64_t s = atomic_load(&e->slots[i].ts);
        if (s && s - 1 < w)
            w = s - 1;
    }
    uint64_t p = atomic_load(&e->pinned);
    if (p && p < w)
        w = p;
    /* never back: a lower value saved after a higher one would only make
     * the next start apply more rows, but the watermark means "applied" */
    return w > e->saved_ulog_ts ? w : e->saved_ulog_ts;
}

uint64_t engine_applied_ts(kura_engine *e)
{
    pthread_mutex_lock(&e->state_lock);
    uint64_t w = feed_watermark(e);
    pthread_mutex_unlock(&e->state_lock);
    return w;
}

/* ---- dual master: recent deletes ------------------------------------------------ */

/*
 * A dual master orders two changes of a key by their timestamps (the cas of
 * an item is its clock reading, engine_set_dual).  An item carries its own;
 * a deleted key carries nothing, so the time of each delete is kept here
 * for TOMB_KEEP, or until TOMB_SLOTS/2 newer ones push it out: within that
 * window a set older than the delete, arriving after it from the other
 * master, is not applied.  Keys are kept as 64-bit hashes (a collision
 * could only hold back an older set of another key).
 */
#define TOMB_SLOTS (1u << 16)
#define TOMB_KEEP_US (600ull * 1000000)

typedef struct tomb {
    uint64_t h, ts;                     /* ts 0: empty */
} tomb;

struct tombs {
    pthread_mutex_t mu;
    size_t n;
    tomb t[TOMB_SLOTS];
};

static uint64_t tomb_hash(const void *key, size_t klen)
{
    const unsigned char *p = key;
    uint64_t h = 1469598103934665603ull ^ klen;
    for (size_t i = 0; i < klen; i++)
        h = (h ^ p[i]) * 1099511628211ull;
    return h ^ (h >> 31);
}

static tomb *tomb_slot(struct tombs *tb, uint64_t h)
{
    size_t i = h & (TOMB_SLOTS - 1);
    while (tb->t[i].ts && tb->t[i].h != h)
        i = (i + 1) & (TOMB_SLOTS - 1);
    return &tb->t[i];
}

/* Keeps the newer half when full: older deletes are forgotten first. */
static void tomb_purge(struct tombs *tb, uint64_t newest)
{
    static tomb old[TOMB_SLOTS];        /* under tb->mu; one engine purges at a time */
    uint64_t cut = hlc_us(newest) > TOMB_KEEP_US ? hlc_make(hlc_us(newest) - TOMB_KEEP_US, 0)
                                                 : 0;
    uint64_t lo = UINT64_MAX, hi = 0;
    for (size_t i = 0; i < TOMB_SLOTS; i++)
        if (tb->t[i].ts) {
            lo = tb->t[i].ts < lo ? tb->t[i].ts : lo;
            hi = tb->t[i].ts > hi ? tb->t[i].ts : hi;
        }
    if (lo + (hi - lo) / 2 > cut)
        cut = lo + (hi - lo) / 2;       /* at least half goes */
    memcpy(old, tb->t, sizeof(old));
    memset(tb->t, 0, sizeof(tb->t));
    tb->n = 0;
    for (size_t i = 0; i < TOMB_SLOTS; i++)
        if (old[i].ts > cut) {
            *tomb_slot(tb, old[i].h) = old[i];
            tb->n++;
        }
}

static void tomb_put(struct tombs *tb, const void *key, size_t klen, uint64_t ts)
{
    uint64_t h = tomb_hash(key, klen);
    pthread_mutex_lock(&tb->mu);
    if (tb->n >= TOMB_SLOTS / 2)
        tomb_purge(tb, ts);
    tomb *t = tomb_slot(tb, h);
    if (!t->ts)
        tb->n++;
    t->h = h;
    if (ts > t->ts)
        t->ts = ts;
    pthread_mutex_unlock(&tb->mu);
}

/* The time of the last delete of key still remembered, 0 if none. */
static uint64_t tomb_get(struct tombs *tb, const void *key, size_t klen)
{
    uint64_t h = tomb_hash(key, klen);
    pthread_mutex_lock(&tb->mu);
    uint64_t ts = tomb_slot(tb, h)->ts;
    pthread_mutex_unlock(&tb->mu);
    return ts;
}

/* ---- logging ------------------------------------------------------------- */

static int append(kura_engine *e, ul_row *r)
{
    const change_ctx *cx = tl_ctx;
    if (cx && cx->kind == CH_REPLICA) {
        r->origin_ts = cx->row->origin_ts;
        r->sid = cx->row->sid;
    }
    ul_pos pos;
    int rc = ul_append(e->ulog, r, &pos);
    if (rc)
        return rc;
    tl_logged_ts = pos.ts;
    tl_lsn = pos.lsn;
    tl_ts = pos.ts;
    tl_lsn_engine = e;
    return KURA_OK;
}

static int feed_put(void *arg, kura_item *it)
{
    kura_engine *e = arg;
    const change_ctx *cx = tl_ctx;
    if (!cx)
        it->cas = engine_next_cas(e);
    tl_last_cas = it->cas;
    if (!e->ulog || (cx && cx->kind == CH_REDO))
        return KURA_OK;
    ul_row r = {
        .type = UL_PUT, .key = it->key, .klen = it->klen, .val = it->val, .vlen = it->vlen,
        .flags = it->flags, .exptime = it->exptime, .cas = it->cas,
    };
    return append(e, &r);
}

static int feed_del(void *arg, const char *key, size_t klen)
{
    kura_engine *e = arg;
    const change_ctx *cx = tl_ctx;
    if (!e->ulog || (cx && cx->kind == CH_REDO))
        return KURA_OK;
    ul_row r = { .type = UL_DEL, .key = key, .klen = klen };
    int rc = append(e, &r);
    if (rc == KURA_OK && e->tombs)
        tomb_put(e->tombs, key, klen, cx ? cx->row->origin_ts : tl_logged_ts);
    return rc;
}

int feed_update(kura_engine *e, const kura_item *cur, kura_update *up)
{
    return feed_update_key(e, cur ? cur->key : NULL, cur ? cur->klen : 0, cur, up);
}

int feed_update_key(kura_engine *e, const char *key, size_t klen, const kura_item *cur,
                    kura_update *up)
{
    ul_row r = { .type = UL_PUT, .key = key, .klen = klen };
    switch (up->action) {
    case KURA_UPDATE_REPLACE:
        if (!tl_ctx)
            up->cas = engine_next_cas(e);   /* a replica's row keeps its own */
        if (!e->ulog)
            return KURA_OK;
        r.flags = up->flags;
        r.exptime = up->exptime;
        r.cas = up->cas;
        r.val = up->part[0].base;
        r.vlen = up->part[0].len;
        r.val2 = up->part[1].base;
        r.vlen2 = up->part[1].len;
        break;
    case KURA_UPDATE_TOUCH:
        if (!e->ulog || !cur)
            return KURA_OK;
        r.flags = cur->flags;
        r.exptime = up->exptime;
        r.cas = cur->cas;
        r.val = cur->val;
        r.vlen = cur->vlen;
        break;
    case KURA_UPDATE_REMOVE:
        if (!e->ulog || !cur)
            return KURA_OK;
        r.type = UL_DEL;
        break;
    default:
        return KURA_OK;
    }
    if (!r.key)
        return KURA_EINVAL;
    int rc = append(e, &r);
    if (rc == KURA_OK && r.type == UL_DEL && e->tombs)
        tomb_put(e->tombs, r.key, r.klen, tl_ctx ? tl_ctx->row->origin_ts : tl_logged_ts);
    return rc;
}

uint64_t feed_last_cas(void)
{
    return tl_last_cas;
}

int feed_flush(kura_engine *e, uint64_t oldest_cas, int64_t flush_at)
{
    if (!e->ulog || (tl_ctx && tl_ctx->kind == CH_REDO))
        return KURA_OK;
    ul_row r = { .type = UL_FLUSH, .cas = oldest_cas, .exptime = flush_at };
    return append(e, &r);
}

/* ---- applying rows: recovery and replicas -------------------------------- */

/* state_lock not held */
static int apply_flush(kura_engine *e, const ul_row *row)
{
    if (row->cas)
        engine_observe_cas(e, row->cas);
    pthread_mutex_lock(&e->state_lock);
    if (row->cas) {
        if (row->cas > atomic_load(&e->oldest_cas))
            atomic_store(&e->oldest_cas, row->cas);
    }
    if (row->exptime > 0 && row->exptime > atomic_load(&e->flush_at))
        atomic_store(&e->flush_at, row->exptime);
    int rc = feed_flush(e, row->cas, row->exptime);
    if (rc == KURA_OK)
        rc = engine_save_state_locked(e);
    pthread_mutex_unlock(&e->state_lock);
    return rc;
}

/* Dual master: a row is applied only over an older item (cas at most the
 * row's: a touch keeps the cas), and a set not over a newer delete. */
static int lww_cb(void *arg, const kura_item *cur, kura_update *out)
{
    const change_ctx *cx = arg;
    const ul_row *r = cx->row;
    kura_engine *e = cx->e;
    if (r->type == UL_PUT) {
        if (cur ? r->cas < cur->cas : tomb_get(e->tombs, r->key, r->klen) > r->cas)
            return KURA_OK;             /* what is here is newer */
        out->action = KURA_UPDATE_REPLACE;
        out->flags = r->flags;
        out->exptime = r->exptime;
        out->cas = r->cas;
        out->part[0].base = r->val;
        out->part[0].len = r->vlen;
    } else {
        if (!cur) {
            tomb_put(e->tombs, r->key, r->klen, r->origin_ts);
            return KURA_OK;
        }
        if (cur->cas > r->origin_ts)
            return KURA_OK;             /* set after the delete was made */
        out->action = KURA_UPDATE_REMOVE;
    }
    int rc = feed_update_key(e, r->key, r->klen, cur, out);
    if (rc)
        out->action = KURA_UPDATE_KEEP;
    return rc;
}

static int apply_row(kura_engine *e, const ul_row *row, int kind)
{
    change_ctx cx = { kind, row, e };
    kura_clock clk = engine_clock(e);
    int rc;

    if (row->type == UL_FLUSH) {
        tl_ctx = &cx;
        rc = apply_flush(e, row);
        tl_ctx = NULL;
        return rc;
    }
    if (row->type != UL_PUT && row->type != UL_DEL)
        return KURA_OK;                 /* header rows are not changes */
    int slot = feed_begin(e);
    tl_ctx = &cx;
    if (kind == CH_REPLICA && e->tombs) {
        engine_observe_cas(e, row->type == UL_PUT ? row->cas : row->origin_ts);
        rc = e->store->ops->update(e->store, row->key, row->klen, &clk, lww_cb, &cx);
    } else if (row->type == UL_PUT) {
        engine_observe_cas(e, row->cas);
        kura_item it = {
            .key = row->key, .klen = row->klen, .val = row->val, .vlen = row->vlen,
            .flags = row->flags, .exptime = row->exptime, .cas = row->cas,
        };
        rc = e->store->ops->put(e->store, &it, KURA_PUT_ANY, 0, &clk);
    } else {
        rc = e->store->ops->del(e->store, row->key, row->klen, 0, &clk);
        if (rc == KURA_NOTFOUND)
            rc = KURA_OK;
    }
    tl_ctx = NULL;
    feed_end(e, slot, rc);
    return rc;
}

int engine_apply_row(kura_engine *e, const ul_row *row)
{
    engine_gate_in(e);
    int rc = apply_row(e, row, CH_REPLICA);
    engine_gate_out(e);
    return rc;
}

/* ---- attaching the update log --------------------------------------------- */

static void logf_(kura_engine *e, int level, const char *fmt, ...)
    __attribute__((format(printf, 3, 4)));
static void logf_(kura_engine *e, int level, const char *fmt, ...)
{
    char line[400];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(line, sizeof(line), fmt, ap);
    va_end(ap);
    if (e->log)
        e->log(level, line);
    else
        fprintf(stderr, "%s\n", line);
}

static void *feed_main(void *arg);

int engine_attach_ulog(kura_engine *e, ul_log *log, int sync_mode,
                       void (*logfn)(int level, const char *line), uint64_t *redone)
{
    kura_store_state st = { 0 };
    int rc;
    e->log = logfn;
    e->ulog_sync = sync_mode;
    *redone = 0;
    if (e->store->ops->load_state && (rc = e->store->ops->load_state(e->store, &st)) < 0)
        return rc;

    uint64_t w = st.ulog_ts;
    ul_extent ex;
    ul_get_extent(log, &ex);
    kura_store_usage u = { 0 };
    e->store->ops->usage(e->store, &u);
    if (ul_last_ts(log) == 0 && ex.from_ts == 0 && u.curr_items == 0)
        rc = ul_set_complete(log, true);            /* a new log over an empty store */
    else if (w == UINT64_MAX || (ul_last_ts(log) == 0 && u.curr_items))
        rc = ul_set_complete(log, false);           /* the store holds more than the log */
    else
        rc = KURA_OK;
    if (rc)
        return rc;
    ul_get_extent(log, &ex);            /* from_ts moved if the log is whole only from now */
    if (w == UINT64_MAX) {
        /* the store ran without the log since: what the log holds is older
         * than the store, and nothing is applied again */
        logf_(e, KURA_LOG_INFO, "update log: the store was changed without it since its last "
              "row; its rows are not applied again");
        w = ul_last_ts(log) > ex.from_ts ? ul_last_ts(log) : ex.from_ts;
    } else if (w < ex.from_ts) {
        if (w)
            logf_(e, KURA_LOG_ERROR, "update log: it starts after the store's watermark "
                  "(%" PRIu64 " < %" PRIu64 "): applying the rows it holds", w, ex.from_ts);
        w = ex.from_ts;
    }

    ul_reader *rd;
    if ((rc = ul_reader_open(log, w, &rd)) != KURA_OK)
        return rc;
    ul_row row;
    while ((rc = ul_reader_next(rd, &row)) == KURA_OK) {
        if ((rc = apply_row(e, &row, CH_REDO)) < 0)
            break;
        (*redone)++;
    }
    ul_reader_close(rd);
    if (rc != UL_CAUGHT_UP && rc < 0)
        return rc;

    e->ulog = log;
    pthread_mutex_lock(&e->state_lock);
    e->saved_ulog_ts = 0;
    rc = engine_save_state_locked(e);
    pthread_mutex_unlock(&e->state_lock);
    if (rc < 0 && rc != KURA_EREADONLY)
        return rc;
    e->feed_stop = false;
    if (pthread_create(&e->feed_thread, NULL, feed_main, e) != 0) {
        e->ulog = NULL;
        return KURA_ESYS;
    }
    e->feed_running = true;
    return KURA_OK;
}

/* ---- the feed thread: the watermark, and -sync interval --------------------- */

static void *feed_main(void *arg)
{
    kura_engine *e = arg;
    pthread_mutex_lock(&e->feed_lock);
    while (!e->feed_stop) {
        struct timespec until;
        clock_gettime(CLOCK_MONOTONIC, &until);
        until.tv_sec += 1;
        while (!e->feed_stop &&
               pthread_cond_timedwait(&e->feed_wake, &e->feed_lock, &until) != ETIMEDOUT)
            ;
        if (e->feed_stop)
            break;
        pthread_mutex_unlock(&e->feed_lock);
        feed_tick(e);
        pthread_mutex_lock(&e->feed_lock);
    }
    pthread_mutex_unlock(&e->feed_lock);
    return NULL;
}

void feed_tick(kura_engine *e)
{
    if (e->ulog_sync == KURA_SYNC_INTERVAL && !ul_failed(e->ulog))
        (void)ul_sync_now(e->ulog);     /* a failure is sticky in the log and logged there */
    pthread_mutex_lock(&e->state_lock);
    if (feed_watermark(e) != e->saved_ulog_ts)
        (void)engine_save_state_locked(e);
    pthread_mutex_unlock(&e->state_lock);
}

void feed_init(kura_engine *e)
{
    e->feed = (kura_feed){ feed_put, feed_del, e };
    e->store->feed = &e->feed;
    pthread_mutex_init(&e->overflow_lock, NULL);
    pthread_mutex_init(&e->feed_lock, NULL);
    pthread_condattr_t ca;
    pthread_condattr_init(&ca);
    pthread_condattr_setclock(&ca, CLOCK_MONOTONIC);
    pthread_cond_init(&e->feed_wake, &ca);
    pthread_condattr_destroy(&ca);
}

void feed_stop(kura_engine *e)
{
    if (!e->feed_running)
        return;
    pthread_mutex_lock(&e->feed_lock);
    e->feed_stop = true;
    pthread_cond_signal(&e->feed_wake);
    pthread_mutex_unlock(&e->feed_lock);
    pthread_join(e->feed_thread, NULL);
    e->feed_running = false;
}

int feed_dual(kura_engine *e)
{
    struct tombs *tb = calloc(1, sizeof(*tb));
    if (!tb)
        return KURA_ENOMEM;
    pthread_mutex_init(&tb->mu, NULL);
    e->tombs = tb;
    return KURA_OK;
}

void feed_destroy(kura_engine *e)
{
    feed_stop(e);
    if (e->tombs) {
        pthread_mutex_destroy(&e->tombs->mu);
        free(e->tombs);
    }
    pthread_mutex_destroy(&e->overflow_lock);
    pthread_mutex_destroy(&e->feed_lock);
    pthread_cond_destroy(&e->feed_wake);
}

/* ---- the group-commit source: the update log ------------------------------- */

static kura_engine *of_source(kura_store *s)
{
    return (kura_engine *)((char *)s - offsetof(kura_engine, commit_source));
}

static uint64_t src_write_seq(kura_store *s)
{
    return ul_write_lsn(of_source(s)->ulog);
}

static uint64_t src_thread_seq(kura_store *s)
{
    kura_engine *e = of_source(s);
    return tl_lsn_engine == e ? tl_lsn : ul_write_lsn(e->ulog);
}

static int src_commit(kura_store *s, uint64_t seq)
{
    return ul_commit(of_source(s)->ulog, seq);
}

static const kura_store_ops source_ops = {
    .name = "ulog",
    .write_seq = src_write_seq,
    .commit = src_commit,
    .thread_seq = src_thread_seq,
};

/* With a wait for replicas (-syncrepl) the sequence is the rows'
 * timestamps, which is what replicas acknowledge. */
static uint64_t ts_write_seq(kura_store *s)
{
    return ul_last_ts(of_source(s)->ulog);
}

static uint64_t ts_thread_seq(kura_store *s)
{
    kura_engine *e = of_source(s);
    return tl_lsn_engine == e ? tl_ts : ul_last_ts(e->ulog);
}

static int ts_commit(kura_store *s, uint64_t ts)
{
    kura_engine *e = of_source(s);
    if (e->ulog_sync == KURA_SYNC_ALWAYS) {
        int rc = ul_commit(e->ulog, ul_write_lsn(e->ulog));
        if (rc)
            return rc;
    }
    return e->commit_wait(e->commit_wait_arg, ts);
}

static const kura_store_ops ts_source_ops = {
    .name = "ulog+replicas",
    .write_seq = ts_write_seq,
    .commit = ts_commit,
    .thread_seq = ts_thread_seq,
};

void engine_set_commit_wait(kura_engine *e, int (*wait)(void *arg, uint64_t ts), void *arg)
{
    e->commit_wait = wait;
    e->commit_wait_arg = arg;
}

/* Without an update log, a replica whose store may be swapped commits its
 * store through these, which find the store under the gate. */
static uint64_t st_write_seq(kura_store *s)
{
    kura_engine *e = of_source(s);
    engine_gate_in(e);
    uint64_t v = e->store->ops->write_seq(e->store);
    engine_gate_out(e);
    return v;
}

static uint64_t st_thread_seq(kura_store *s)
{
    kura_engine *e = of_source(s);
    engine_gate_in(e);
    kura_store *st = e->store;
    uint64_t v = st->ops->thread_seq ? st->ops->thread_seq(st) : st->ops->write_seq(st);
    engine_gate_out(e);
    return v;
}

static int st_commit(kura_store *s, uint64_t seq)
{
    kura_engine *e = of_source(s);
    engine_gate_in(e);
    int rc = e->store->ops->commit(e->store, seq);
    engine_gate_out(e);
    return rc;
}

static const kura_store_ops store_source_ops = {
    .name = "store",
    .write_seq = st_write_seq,
    .commit = st_commit,
    .thread_seq = st_thread_seq,
};

kura_store *engine_commit_source(kura_engine *e)
{
    if (!e->ulog && (!e->gated || !e->store->ops->commit))
        return e->store;
    if (!e->ulog) {
        e->commit_source.ops = &store_source_ops;
        return &e->commit_source;
    }
    e->commit_source.ops = e->commit_wait ? &ts_source_ops : &source_ops;
    return &e->commit_source;
}
