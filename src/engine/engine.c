/*
 * engine.c - memcached's semantics over the storage interface.
 *
 * Every rule a client can observe lives here, once: exptime conversion, the
 * cas counter, set/add/replace/cas conditions, append/prepend keeping the
 * old flags and exptime, incr/decr on 64-bit decimals (wrapping on incr,
 * stopping at 0 on decr, padding a shorter result with spaces as memcached
 * does when it rewrites in place), touch, and flush_all with or without a
 * delay.  Backends only store and fetch (store.h).
 *
 * The cas counter is handed out from an atomic; a high-water mark a block
 * ahead is persisted through the store before any cas beyond it is used, so
 * cas uniques keep growing across restarts and crashes.  A cas is handed
 * out under the key's lock, by the change feed (src/journal/feed.c, which
 * asks the next_cas hook here), so a key's cas values increase in the
 * order its changes are applied.  The reservation is saved outside the
 * store call: before it when the next cas is not covered, and, when a
 * racing change took the last covered one meanwhile, after it (the feed
 * then refused the change, JOURNAL_RESERVE, and it is made again).
 */
#include <pthread.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "kura/buf.h"
#include "kura/observer.h"
#include "engine_int.h"
#include "marks.h"

#define CAS_RESERVE_BLOCK (1ULL << 20)
/* in dual-master mode cas values are clock readings: 2^32 is about a second */
#define DUAL_CAS_RESERVE_BLOCK (1ULL << 32)
/* ... whose low bits are the server id's: no two servers hand out the same
 * cas (if their ids differ in these bits), and of two changes made in the
 * same microsecond and counter step the higher id's is the later */
#define DUAL_TAG_BITS 4

void kura_stats_accumulate(kura_stats_totals *sum, const kura_thread_stats *ts)
{
#define KURA_STAT_SUM(name) sum->name += atomic_load_explicit(&ts->name, memory_order_relaxed);
    KURA_THREAD_STATS(KURA_STAT_SUM)
#undef KURA_STAT_SUM
}

static int64_t wall_now(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_REALTIME_COARSE, &ts);
    return ts.tv_sec;
}

/* do_: state_lock held.  Persists the engine's state through the store,
 * with max_cas as the cas reservation. */
static int do_save_state_max(kura_engine *e, uint64_t max_cas)
{
    kura_store_state st = {
        .max_cas = max_cas,
        .oldest_cas = atomic_load(&e->oldest_cas),
        .flush_at = atomic_load(&e->flush_at),
        .ulog_ts = journal_applied_ts(e->journal),
    };
    if (!e->store->ops->save_state)
        return KURA_OK;
    int rc = e->store->ops->save_state(e->store, &st);
    if (rc == KURA_OK)
        engine_set_saved(e, st.ulog_ts);
    return rc;
}

void engine_set_saved(kura_engine *e, uint64_t ulog_ts)
{
    e->saved_ulog_ts = ulog_ts;
    journal_set_saved(e->journal, ulog_ts);
}

/* do_: state_lock held.  Persists the engine's state as it is. */
static int do_save_state(kura_engine *e)
{
    return do_save_state_max(e, atomic_load(&e->cas_reserved));
}

int engine_save_state_locked(kura_engine *e)
{
    return do_save_state(e);
}

/* The next cas: the counter's, or in dual-master mode the clock's (its
 * values order the changes of both masters, see engine_set_dual). */
static uint64_t take_cas(kura_engine *e)
{
    hlc *c = e->cas_clock;
    return c ? hlc_now_tagged(c, e->cas_tag, DUAL_TAG_BITS) : atomic_fetch_add(&e->next_cas, 1);
}

/* do_: state_lock held.  Makes a reservation past cas durable before any
 * cas up to it is used: the new bound is saved first and published only
 * once saved, since a thread that finds its cas under the published bound
 * uses it without the lock.  A failed save publishes nothing and is
 * returned: the change that wanted the cas fails, rather than use one a
 * restart could hand out again.  A save once per cas_block uniques. */
static int do_reserve(kura_engine *e, uint64_t cas)
{
    if (cas < atomic_load(&e->cas_reserved))
        return KURA_OK;
    uint64_t bound = cas + e->cas_block;
    int rc = do_save_state_max(e, bound);
    if (rc == KURA_OK)
        atomic_store_explicit(&e->cas_reserved, bound, memory_order_release);
    return rc;
}

/* do_: state_lock held.  Hands out a cas unique into *cas: 0 or the
 * error of saving its reservation. */
static int do_next_cas(kura_engine *e, uint64_t *cas)
{
    *cas = take_cas(e);
    return do_reserve(e, *cas);
}

/* do_reserve for a caller without the lock; the common case (cas under
 * the published bound) takes none. */
static int reserve_through(kura_engine *e, uint64_t cas)
{
    if (cas < atomic_load_explicit(&e->cas_reserved, memory_order_acquire))
        return KURA_OK;
    engine_state_lock(e);
    int rc = do_reserve(e, cas);
    engine_state_unlock(e);
    return rc;
}

/* The journal's next_cas hook (journal.h), under the key's lock inside a
 * store call: a cas unique, KURA_OK if the reservation covers it, else
 * JOURNAL_RESERVE (the change is not made; make_again reserves through it
 * after the store call and makes it again).  Cost: one atomic add and one
 * load; nothing saved here. */
static int hook_next_cas(void *arg, uint64_t *cas)
{
    kura_engine *e = arg;
    *cas = take_cas(e);
    return *cas < atomic_load_explicit(&e->cas_reserved, memory_order_acquire)
           ? KURA_OK : JOURNAL_RESERVE;
}

/* The journal's save_state hook: its thread, once a second. */
static uint64_t hook_save_state(void *arg)
{
    kura_engine *e = arg;
    engine_state_lock(e);
    uint64_t w = journal_applied_ts(e->journal);
    if (w != e->saved_ulog_ts)
        (void)do_save_state(e);
    engine_state_unlock(e);
    return w;
}

/* Before a local change's store call: the next cas covered, so that the
 * feed's take (hook_next_cas) finds it reserved (all but a racing change
 * at a block's end).  Two loads when it is.  A failed save is returned
 * for make_again, which reports it if the change then wanted a cas. */
static int reserve_ahead(kura_engine *e)
{
    uint64_t next = e->cas_clock ? hlc_last(e->cas_clock) + 1
                                 : atomic_load_explicit(&e->next_cas, memory_order_relaxed);
    return reserve_through(e, next);
}

/* After a local change's store call: true if the feed refused it for a
 * cas past the reservation (JOURNAL_RESERVE: nothing was made) and the
 * reservation through that cas is now saved: make it again.  Else *rc is
 * the change's result (the failed save's error, ahead's or this one's, in
 * place of JOURNAL_RESERVE). */
static bool make_again(kura_engine *e, const journal_change *ch, int ahead, int *rc)
{
    if (*rc != JOURNAL_RESERVE)
        return false;
    *rc = ahead != KURA_OK ? ahead : reserve_through(e, ch->cas);
    return *rc == KURA_OK;
}

/* A cas from elsewhere (a master's row, a row applied again at open): the
 * ones handed out here from now on are larger. */
void engine_observe_cas(kura_engine *e, uint64_t cas)
{
    if (e->cas_clock) {
        hlc_observe(e->cas_clock, cas);
    } else {
        uint64_t cur = atomic_load(&e->next_cas);
        while (cas >= cur && !atomic_compare_exchange_weak(&e->next_cas, &cur, cas + 1))
            ;
    }
    /* a failed save is not this caller's to report: the next cas handed
     * out here is above this one and tries the reservation again */
    (void)reserve_through(e, cas);
}

int engine_set_dual(kura_engine *e, uint32_t sid)
{
    e->cas_tag = sid & ((1u << DUAL_TAG_BITS) - 1);
    ul_log *log = journal_ulog(e->journal);
    if (!log)
        return KURA_EINVAL;
    hlc *c = ul_clock(log);
    /* past every cas handed out before, whichever way */
    hlc_observe(c, atomic_load(&e->next_cas));
    hlc_observe(c, atomic_load(&e->cas_reserved));
    int rc = journal_set_dual(e->journal);
    if (rc)
        return rc;
    e->cas_block = DUAL_CAS_RESERVE_BLOCK;
    e->cas_clock = c;
    return KURA_OK;
}

void engine_set_replica(kura_engine *e, bool replica)
{
    atomic_store(&e->replica, replica);
    journal_set_replica(e->journal, replica);
}

/* Every use of e->store outside state_lock is inside the gate once a
 * store swap is possible (engine_enable_swap: a replica), so that
 * engine_swap_store can wait until no call is inside; the read side is
 * shared, and costs nothing when swaps are not enabled. */
static void gate_in(kura_engine *e)
{
    if (e->gated)
        pthread_rwlock_rdlock(&e->gate);
}

static void gate_out(kura_engine *e)
{
    if (e->gated)
        pthread_rwlock_unlock(&e->gate);
}

/* The arg is written before the function, which is published with
 * release: a worker that sees the function sees its arg. */
void engine_set_write_gate(kura_engine *e, bool (*gate)(void *arg), void *arg)
{
    atomic_store_explicit(&e->write_gate, NULL, memory_order_release);
    atomic_store_explicit(&e->write_gate_arg, arg, memory_order_relaxed);
    atomic_store_explicit(&e->write_gate, gate, memory_order_release);
}

static int local_change(kura_engine *e)
{
    if (atomic_load_explicit(&e->replica, memory_order_relaxed))
        return KURA_EREPLICA;
    bool (*gate)(void *) = atomic_load_explicit(&e->write_gate, memory_order_acquire);
    return gate && !gate(atomic_load_explicit(&e->write_gate_arg, memory_order_relaxed))
           ? KURA_EREPLICA : KURA_OK;
}

int engine_open(kura_engine **out, kura_store *store, const kura_engine_config *cfg)
{
    kura_engine *e = calloc(1, sizeof(*e));
    if (!e)
        return KURA_ENOMEM;
    e->store = store;
    e->item_size_max = cfg && cfg->item_size_max ? cfg->item_size_max : KURA_ITEM_SIZE_MAX_DEFAULT;
    /* memcached pretends it started 2 s early so that absolute exptimes
     * just before start-up still count as past. */
    e->started = wall_now() - 2;
    pthread_mutex_init(&e->state_lock, NULL);
    pthread_rwlock_init(&e->gate, NULL);
    e->marks = marks_new(cfg ? cfg->marks_sets : 0);
    journal_hooks hooks = { hook_next_cas, hook_save_state, e };
    if (!e->marks || journal_new(&hooks, &e->journal) != KURA_OK) {
        journal_free(e->journal);
        marks_free(e->marks);
        pthread_rwlock_destroy(&e->gate);
        pthread_mutex_destroy(&e->state_lock);
        free(e);
        return KURA_ENOMEM;
    }

    kura_store_state st = {0};
    if (store->ops->load_state) {
        int rc = store->ops->load_state(store, &st);
        if (rc < 0) {
            journal_free(e->journal);
            marks_free(e->marks);
            pthread_mutex_destroy(&e->state_lock);
            pthread_rwlock_destroy(&e->gate);
            free(e);
            return rc;
        }
    }
    atomic_store(&e->next_cas, st.max_cas + 1);
    atomic_store(&e->cas_reserved, st.max_cas);   /* the first next_cas() reserves */
    atomic_store(&e->oldest_cas, st.oldest_cas);
    atomic_store(&e->flush_at, st.flush_at);
    engine_set_saved(e, st.ulog_ts);
    e->cas_block = CAS_RESERVE_BLOCK;
    journal_hook(e->journal, store);
    *out = e;
    return KURA_OK;
}

void engine_close(kura_engine *e)
{
    if (!e)
        return;
    journal_stop(e->journal);
    engine_state_lock(e);
    /* Nothing above next_cas was handed out: a clean stop saves exactly that. */
    uint64_t used = e->cas_clock ? hlc_last(e->cas_clock) : atomic_load(&e->next_cas) - 1;
    if (used < atomic_load(&e->cas_reserved))
        atomic_store(&e->cas_reserved, used > 0 ? used : 0);
    do_save_state(e);
    engine_state_unlock(e);
    kura_store_close(e->store);
    journal_free(e->journal);
    marks_free(e->marks);
    pthread_mutex_destroy(&e->state_lock);
    pthread_rwlock_destroy(&e->gate);
    free(e);
}

kura_store *engine_store_of(kura_engine *e) { return e->store; }
kura_journal *engine_journal(kura_engine *e) { return e->journal; }
int64_t engine_now(kura_engine *e) { (void)e; return wall_now(); }
int64_t engine_started(kura_engine *e) { return e->started; }
int64_t engine_disk_full_at(kura_engine *e) { return atomic_load(&e->disk_full_at); }
size_t engine_item_size_max(const kura_engine *e) { return e->item_size_max; }

kura_clock engine_clock(kura_engine *e)
{
    kura_clock c = {
        .now = wall_now(),
        .oldest_cas = atomic_load_explicit(&e->oldest_cas, memory_order_acquire),
        .flush_at = atomic_load_explicit(&e->flush_at, memory_order_acquire),
    };
    if (c.flush_at != 0 && c.now > c.flush_at) {
        /* The delayed flush's second has passed: everything stored up to
         * now is flushed, which the watermark expresses from here on. */
        engine_state_lock(e);
        uint64_t oldest;
        /* a reservation that cannot be saved leaves the delayed flush as
         * it is (its second has passed, so items still read as flushed);
         * the next call tries again */
        if (atomic_load(&e->flush_at) == c.flush_at && do_next_cas(e, &oldest) == KURA_OK) {
            atomic_store(&e->oldest_cas, oldest);
            atomic_store(&e->flush_at, 0);
            do_save_state(e);
        }
        engine_state_unlock(e);
        c.oldest_cas = atomic_load(&e->oldest_cas);
        c.flush_at = atomic_load(&e->flush_at);
    }
    return c;
}

void engine_tick(kura_engine *e)
{
    kura_clock c = engine_clock(e);
    /* every cas handed out from here on is above this one (dual master:
     * cas values are clock readings) */
    uint64_t next = e->cas_clock ? hlc_last(e->cas_clock) + 1 : atomic_load(&e->next_cas);
    marks_tick(e->marks, next, c.now);
}

int64_t engine_abs_exptime(kura_engine *e, int64_t exptime)
{
    if (exptime < 0)
        exptime = KURA_REALTIME_MAXDELTA + 1;       /* memcached: already expired */
    if (exptime == 0)
        return 0;
    if (exptime > KURA_REALTIME_MAXDELTA) {
        if (exptime <= e->started)
            return 1;                               /* in the past: expired */
        return exptime;
    }
    return wall_now() + exptime;
}

bool engine_item_fits(const kura_engine *e, size_t klen, uint64_t vlen, uint32_t flags)
{
    return kura_item_wire_total(klen, vlen, flags) <= e->item_size_max;
}

/* ---- the rules --------------------------------------------------------------
 *
 * One implementation of each operation, for every protocol: the options
 * (engine.h) add what meta and binary ask for (a cas on any change, vivify
 * on a miss, the invalidation of md/ms I, the recache token), and info
 * reports what their replies show (new cas, exptimes, access marks); no
 * options is the text protocol's command.  Each public call is its
 * *_gated body inside the store-swap gate.
 *
 * Every change goes through the journal below (journal.h) as a
 * journal_change on the caller's stack: local_change first, then
 * journal_begin/journal_end around the store call, the change handed to
 * the store's feed in the clock (feed_ctx) and to journal_update by the
 * update callback (fed), which hands out the cas under the key's lock.  A
 * change the feed refused for want of reserved cas values is made again
 * (make_again).  The marks are read and changed under the key's lock too,
 * inside the callbacks, so that two readers racing for a recache token
 * cannot both win it. */

/* A local put as one change: the new cas in *cas. */
static int fed_put(kura_engine *e, kura_clock *clk, const kura_item *it, int cond,
                   uint64_t cmp_cas, uint64_t *cas)
{
    journal_change ch = { .kind = JOURNAL_LOCAL };
    int ahead = reserve_ahead(e), rc;
    clk->feed_ctx = &ch;
    do {
        journal_begin(e->journal, &ch);
        rc = kura_store_put(e->store, it, cond, cmp_cas, clk);
        journal_end(e->journal, &ch, rc);
    } while (make_again(e, &ch, ahead, &rc));
    *cas = ch.cas;
    return rc;
}

/* A change decided by an update callback, as ch (the callback calls fed
 * with it). */
static int fed_update(kura_engine *e, journal_change *ch, const char *key, size_t klen,
                      kura_clock *clk, kura_update_fn fn, void *arg)
{
    int ahead = reserve_ahead(e), rc;
    *ch = (journal_change){ .kind = JOURNAL_LOCAL };
    clk->feed_ctx = ch;
    do {
        journal_begin(e->journal, ch);
        rc = kura_store_update(e->store, key, klen, clk, fn, arg);
        journal_end(e->journal, ch, rc);
    } while (make_again(e, ch, ahead, &rc));
    return rc;
}

/* In an update callback: the change decided in out, of key (cur's, or a
 * new item's), stamped and logged as ch (journal_update: a REPLACE gets
 * its cas); a change the journal refuses is not made. */
static int fed(kura_engine *e, journal_change *ch, const char *key, size_t klen,
               const kura_item *cur, kura_update *out)
{
    int rc = journal_update(e->journal, ch, key, klen, cur, out);
    if (rc != KURA_OK)
        out->action = KURA_UPDATE_KEEP;
    return rc;
}

/* ---- get / gat / touch ---------------------------------------------------- */

typedef struct get_arg {
    kura_engine *e;
    const engine_get_opts *o;
    engine_item_info *info;
    kura_item_fn fn;            /* may be NULL */
    void *arg;
    const char *key;
    size_t klen;
    bool touch_cmd;             /* the touch command: leaves the access marks
                                   alone, and a store error is not a miss */
    int64_t now, touch_abs, vivify_abs, recache_abs;
    journal_change *ch;         /* gat, touch, mg N: the change */
} get_arg;

/* Reads and updates the marks of a live item (key lock held), fills info. */
static void get_marks(get_arg *g, const kura_item *cur, int64_t exptime_now)
{
    const engine_get_opts *o = g->o;
    int64_t exp_r = o->recache_after_touch ? exptime_now : cur->exptime;
    marks_op op = {
        .bump = !o->no_bump,
        .take_token = o->recache && exp_r != 0 && exp_r < g->recache_abs,
        .take_if_stale = true,
    };
    marks_prev prev;
    bool won = marks_access(g->e->marks, cur->key, cur->klen, cur->cas, g->now, &op, &prev);
    engine_item_info *in = g->info;
    in->fetched = prev.bits & MARK_FETCHED;
    in->last_access = prev.atime;
    in->stale = prev.bits & MARK_STALE;
    in->token_sent = prev.bits & MARK_TOKEN;
    in->won = won;
    in->created = false;
    in->old_exptime = cur->exptime;
    in->exptime = exptime_now;
    in->cas = cur->cas;
    in->key_binary = prev.bits & MARK_KEY_BINARY;
}

static int get_read_cb(void *arg, const kura_item *cur)
{
    get_arg *g = arg;
    get_marks(g, cur, cur->exptime);
    return g->fn ? g->fn(g->arg, cur) : 0;
}

/* gat, touch, mg N: the item's new exptime (or the created item), logged,
 * and the item shown to fn as it is now. */
static int get_update_cb(void *arg, const kura_item *cur, kura_update *out)
{
    get_arg *g = arg;
    kura_item shown;
    int rc;

    if (!cur) {
        if (!g->o->vivify)
            return KURA_NOTFOUND;
        out->action = KURA_UPDATE_REPLACE;
        out->flags = 0;
        out->exptime = g->vivify_abs;
        if ((rc = fed(g->e, g->ch, g->key, g->klen, NULL, out)) != KURA_OK)
            return rc;
        shown = (kura_item){ .key = g->key, .klen = g->klen, .val = "", .vlen = 0,
                             .flags = 0, .exptime = g->vivify_abs, .cas = out->cas };
        marks_set(g->e->marks, g->key, g->klen, out->cas, g->now,
                  MARK_TOKEN | (g->o->no_bump ? 0 : MARK_FETCHED));
        *g->info = (engine_item_info){ .won = true, .created = true, .last_access = g->now,
                                       .exptime = g->vivify_abs, .cas = out->cas };
    } else {
        shown = *cur;
        if (g->o->touch) {
            shown.exptime = g->touch_abs;
            out->action = KURA_UPDATE_TOUCH;
            out->exptime = g->touch_abs;
            if ((rc = fed(g->e, g->ch, cur->key, cur->klen, cur, out)) != KURA_OK)
                return rc;
        }
        if (!g->touch_cmd)
            get_marks(g, cur, shown.exptime);
    }
    if (g->fn)
        g->fn(g->arg, &shown);
    return KURA_OK;
}

static int get_gated(kura_engine *e, kura_thread_stats *ts, get_arg *g)
{
    const engine_get_opts *o = g->o;
    kura_clock clk = engine_clock(e);
    int rc;

    g->now = clk.now;
    if (o->recache)
        g->recache_abs = engine_abs_exptime(e, o->recache_exptime);
    if (o->touch || o->vivify) {
        if ((rc = local_change(e)) != KURA_OK)
            return rc;
        if (o->touch)
            g->touch_abs = engine_abs_exptime(e, o->exptime);
        if (o->vivify)
            g->vivify_abs = engine_abs_exptime(e, o->vivify_exptime);
        journal_change ch;
        g->ch = &ch;
        rc = fed_update(e, &ch, g->key, g->klen, &clk, get_update_cb, g);
    } else {
        rc = e->store->ops->get(e->store, g->key, g->klen, &clk, get_read_cb, g);
    }
    if (o->touch) {
        KURA_STAT_INC(ts, cmd_touch);
        if (rc == KURA_OK)
            KURA_STAT_INC(ts, touch_hits);
        else if (rc == KURA_NOTFOUND || !g->touch_cmd)
            KURA_STAT_INC(ts, touch_misses);
    } else {
        KURA_STAT_INC(ts, cmd_get);
        if (rc == KURA_OK)
            KURA_STAT_INC(ts, get_hits);
        else
            KURA_STAT_INC(ts, get_misses);
        if (rc == KURA_EXPIRED)
            KURA_STAT_INC(ts, get_expired);
        else if (rc == KURA_FLUSHED)
            KURA_STAT_INC(ts, get_flushed);
    }
    if (rc < 0) {
        if (!g->touch_cmd)
            KURA_STAT_INC(ts, store_errors);
        return rc;
    }
    return rc == KURA_OK ? KURA_OK : KURA_NOTFOUND;
}

/* ---- storage commands ---------------------------------------------------- */

typedef struct store_arg {
    kura_engine *e;
    const kura_item *in;
    bool append;
    int64_t exptime;            /* absolute */
    uint64_t cas_in, new_cas;
    int64_t now;
    journal_change *ch;         /* append, prepend, ms I: the change */
} store_arg;

/* append/prepend: the old item keeps its flags and exptime; memcached
 * refuses (NOT_STORED) when the result would be too large.  A cas, when
 * given, must match (memcached's "simplified" check). */
static int concat_cb(void *arg, const kura_item *cur, kura_update *out)
{
    store_arg *a = arg;
    if (!cur)
        return KURA_NOT_STORED;
    if (a->cas_in && cur->cas != a->cas_in)
        return KURA_STORE_EXISTS;
    if (kura_item_wire_total(cur->klen, (uint64_t)cur->vlen + a->in->vlen, cur->flags)
            > a->e->item_size_max)
        return KURA_NOT_STORED;
    out->action = KURA_UPDATE_REPLACE;
    out->flags = cur->flags;
    out->exptime = cur->exptime;
    if (a->append) {
        out->part[0].base = cur->val;  out->part[0].len = cur->vlen;
        out->part[1].base = a->in->val; out->part[1].len = a->in->vlen;
    } else {
        out->part[0].base = a->in->val; out->part[0].len = a->in->vlen;
        out->part[1].base = cur->val;  out->part[1].len = cur->vlen;
    }
    int rc = fed(a->e, a->ch, cur->key, cur->klen, cur, out);
    if (rc != KURA_OK)
        return rc;
    a->new_cas = out->cas;
    return KURA_STORED;
}

/* ms I with a cas: a matching cas stores as cas does; an older one stores
 * too, keeping the exptime, marked stale, the token state carried over. */
static int store_stale_cb(void *arg, const kura_item *cur, kura_update *out)
{
    store_arg *a = arg;
    if (!cur)
        return KURA_STORE_NOT_FOUND;
    if (cur->cas != a->cas_in && a->cas_in > cur->cas)
        return KURA_STORE_EXISTS;
    bool stale = cur->cas != a->cas_in;
    out->action = KURA_UPDATE_REPLACE;
    out->flags = a->in->flags;
    out->exptime = stale ? cur->exptime : a->exptime;
    out->part[0].base = a->in->val;
    out->part[0].len = a->in->vlen;
    int rc = fed(a->e, a->ch, cur->key, cur->klen, cur, out);
    if (rc != KURA_OK)
        return rc;
    a->new_cas = out->cas;
    if (stale) {
        marks_prev prev;
        static const marks_op look;
        marks_access(a->e->marks, cur->key, cur->klen, cur->cas, a->now, &look, &prev);
        marks_set(a->e->marks, cur->key, cur->klen, out->cas, a->now,
                  MARK_STALE | (prev.bits & MARK_TOKEN));
    }
    return KURA_STORED;
}

static int store_gated(kura_engine *e, kura_thread_stats *ts, int cmd, const kura_item *in,
                       const engine_store_opts *o, uint64_t *cas_out)
{
    uint64_t cas_in = o ? o->cas_in : 0;
    kura_clock clk = engine_clock(e);
    store_arg a = { e, in, cmd == KURA_CMD_APPEND, 0, 0, 0, clk.now, NULL };
    int rc;

    if ((rc = local_change(e)) != KURA_OK)
        goto done;
    if (cmd == KURA_CMD_ADD)
        cas_in = 0;                     /* add with a cas is an add */
    if (cas_in && (cmd == KURA_CMD_SET || cmd == KURA_CMD_REPLACE))
        cmd = KURA_CMD_CAS;
    bool concat = cmd == KURA_CMD_APPEND || cmd == KURA_CMD_PREPEND;
    a.cas_in = cas_in;
    a.exptime = engine_abs_exptime(e, in->exptime);
    if (concat || (cmd == KURA_CMD_CAS && o && o->invalidate)) {
        journal_change ch;
        a.ch = &ch;
        rc = fed_update(e, &ch, in->key, in->klen, &clk, concat ? concat_cb : store_stale_cb,
                        &a);
        if (rc == KURA_NOTFOUND)
            rc = concat ? KURA_NOT_STORED : KURA_STORE_NOT_FOUND;
    } else {
        kura_item it = *in;
        it.exptime = a.exptime;
        it.cas = 0;                     /* the feed hands it out, under the key's lock */
        static const int cond_of[] = {
            [KURA_CMD_SET] = KURA_PUT_ANY, [KURA_CMD_ADD] = KURA_PUT_ABSENT,
            [KURA_CMD_REPLACE] = KURA_PUT_PRESENT, [KURA_CMD_CAS] = KURA_PUT_CAS,
        };
        uint64_t cas;
        rc = fed_put(e, &clk, &it, cond_of[cmd], cas_in, &cas);
        if (rc == KURA_OK)
            a.new_cas = cas;
        /* add over a live item, replace of a missing one: NOT_STORED */
        rc = rc == KURA_OK ? KURA_STORED
           : rc == KURA_EXISTS ? (cmd == KURA_CMD_CAS ? KURA_STORE_EXISTS : KURA_NOT_STORED)
           : rc == KURA_NOTFOUND ? (cmd == KURA_CMD_CAS ? KURA_STORE_NOT_FOUND : KURA_NOT_STORED)
           : rc;
    }
    if (rc == KURA_STORED) {
        KURA_STAT_INC(ts, total_items);
        if (cas_out)
            *cas_out = a.new_cas;
        /* added to what a stale store marked; an append or prepend makes
         * an item memcached does not mark, whatever the request's form */
        if (o && o->key_binary && !concat) {
            marks_op kb = { .set = MARK_KEY_BINARY };
            marks_prev prev;
            marks_access(e->marks, in->key, in->klen, a.new_cas, clk.now, &kb, &prev);
        }
    }
    if (cmd == KURA_CMD_CAS) {
        if (rc == KURA_STORED) KURA_STAT_INC(ts, cas_hits);
        else if (rc == KURA_STORE_EXISTS) KURA_STAT_INC(ts, cas_badval);
        else if (rc == KURA_STORE_NOT_FOUND) KURA_STAT_INC(ts, cas_misses);
    }
done:
    if (rc == KURA_ENOMEM)
        KURA_STAT_INC(ts, store_no_memory);
    else if (rc < 0)
        KURA_STAT_INC(ts, store_errors);
    if (rc == KURA_ENOSPC)
        atomic_store(&e->disk_full_at, engine_now(e));   /* /health (metrics.c) */
    return rc;
}

/* ---- delete -------------------------------------------------------------- */

typedef struct delete_arg {
    kura_engine *e;
    const engine_delete_opts *o;
    int64_t exptime, now;
    journal_change *ch;         /* md I: the change */
} delete_arg;

/* md I: the item stays, marked stale with a new cas; its token is free again. */
static int invalidate_cb(void *arg, const kura_item *cur, kura_update *out)
{
    delete_arg *d = arg;
    if (!cur)
        return KURA_NOTFOUND;
    if (d->o->cas_in && cur->cas != d->o->cas_in)
        return KURA_EXISTS;
    out->action = KURA_UPDATE_REPLACE;
    out->flags = cur->flags;
    out->exptime = d->o->touch ? d->exptime : cur->exptime;
    out->part[0].base = cur->val;
    out->part[0].len = cur->vlen;
    int rc = fed(d->e, d->ch, cur->key, cur->klen, cur, out);
    if (rc != KURA_OK)
        return rc;
    marks_set(d->e->marks, cur->key, cur->klen, out->cas, d->now, MARK_STALE);
    return KURA_OK;
}

static int delete_gated(kura_engine *e, kura_thread_stats *ts, const char *key, size_t klen,
                        const engine_delete_opts *o)
{
    static const engine_delete_opts none;
    kura_clock clk = engine_clock(e);
    int rc = local_change(e);
    if (rc != KURA_OK)
        return rc;
    o = o ? o : &none;
    if (o->invalidate) {
        delete_arg d = { e, o, o->touch ? engine_abs_exptime(e, o->exptime) : 0, clk.now,
                          NULL };
        journal_change ch;
        d.ch = &ch;
        rc = fed_update(e, &ch, key, klen, &clk, invalidate_cb, &d);
    } else {
        journal_change ch = { .kind = JOURNAL_LOCAL };      /* a delete takes no cas */
        clk.feed_ctx = &ch;
        journal_begin(e->journal, &ch);
        rc = kura_store_del(e->store, key, klen, o->cas_in, &clk);
        journal_end(e->journal, &ch, rc);
    }
    if (o->unlink)
        return rc == KURA_NOTFOUND ? KURA_OK : rc;
    if (rc == KURA_OK && !o->invalidate)
        KURA_STAT_INC(ts, delete_hits);
    else if (rc == KURA_NOTFOUND || rc == KURA_EXISTS)
        KURA_STAT_INC(ts, delete_misses);
    return rc;
}

/* ---- read-modify-write of a value (engine_modify) ------------------------ */

typedef struct modify_arg {
    kura_engine *e;
    const char *key;
    size_t klen;
    engine_modify_fn fn;
    void *arg;
    uint64_t cas;
    journal_change *ch;                 /* the change */
} modify_arg;

/* fn's new version, checked against -I and fed (its cas handed out), all
 * under the key's lock. */
static int modify_cb(void *arg, const kura_item *cur, kura_update *out)
{
    modify_arg *m = arg;
    engine_mod mod;
    memset(&mod, 0, sizeof(mod));
    int rc = m->fn(m->arg, cur, &mod);
    if (rc != KURA_OK)
        return rc;
    size_t l0 = mod.part[0].base ? mod.part[0].len : 0;
    size_t l1 = mod.part[1].base ? mod.part[1].len : 0;
    if (l1 > SIZE_MAX - l0 || !engine_item_fits(m->e, m->klen, (uint64_t)l0 + l1, mod.flags))
        return KURA_ETOOBIG;
    out->action = KURA_UPDATE_REPLACE;
    out->flags = mod.flags;
    out->exptime = mod.exptime;
    out->part[0].base = mod.part[0].base;
    out->part[0].len = l0;
    out->part[1].base = mod.part[1].base;
    out->part[1].len = l1;
    if ((rc = fed(m->e, m->ch, m->key, m->klen, cur, out)) != KURA_OK)
        return rc;
    m->cas = out->cas;
    return KURA_OK;
}

static int modify_gated(kura_engine *e, const char *key, size_t klen, engine_modify_fn fn,
                        void *arg, uint64_t *cas_out)
{
    kura_clock clk = engine_clock(e);
    int rc = local_change(e);
    if (rc != KURA_OK)
        return rc;
    modify_arg m = { e, key, klen, fn, arg, 0, NULL };
    journal_change ch;
    m.ch = &ch;
    rc = fed_update(e, &ch, key, klen, &clk, modify_cb, &m);
    if (rc == KURA_OK && cas_out)
        *cas_out = m.cas;
    if (rc == KURA_ENOSPC)
        atomic_store(&e->disk_full_at, engine_now(e));   /* /health (metrics.c) */
    return rc;
}

/* ---- incr / decr: a modify of a 64-bit decimal ----------------------------- */

/* Parses a stored value as memcached's safe_strtoull does: leading white
 * space, an optional sign, decimal digits, then the end of the value, white
 * space or a NUL (memcached reads the value as a C string, so "12\0x" is
 * 12); a value that would be negative is not a number. */
static bool parse_stored_u64(const char *s, size_t len, uint64_t *out)
{
    size_t i = 0;
    bool neg = false;
    uint64_t v = 0;

    while (i < len && (s[i] == ' ' || (s[i] >= '\t' && s[i] <= '\r')))
        i++;
    if (i < len && (s[i] == '+' || s[i] == '-'))
        neg = s[i++] == '-';
    size_t digits = i;
    while (i < len && s[i] >= '0' && s[i] <= '9') {
        unsigned d = (unsigned)(s[i] - '0');
        if (v > (UINT64_MAX - d) / 10)
            return false;                   /* ERANGE */
        v = v * 10 + d;
        i++;
    }
    if (i == digits)
        return false;
    if (i < len && !(s[i] == ' ' || (s[i] >= '\t' && s[i] <= '\r') || s[i] == '\0'))
        return false;
    if (neg) {
        v = (uint64_t)0 - v;
        if ((int64_t)v < 0)
            return false;
    }
    *out = v;
    return true;
}

typedef struct arith_arg {
    const engine_arith_opts *o;
    engine_item_info *info;
    bool incr;
    uint64_t delta;
    char *result;                       /* KURA_INCR_MAX_LEN bytes */
    char *pad;                          /* heap spaces when the padding is long */
    int64_t touch_abs, vivify_abs;
} arith_arg;

static const char spaces[256] = { [0 ... 255] = ' ' };

/* The new value: created with the initial value on a vivifying miss, else
 * the live item's number changed, its flags and exptime kept (or the
 * exptime set). */
static int arith_modify(void *arg, const kura_item *cur, engine_mod *out)
{
    arith_arg *x = arg;
    uint64_t v;

    if (!cur) {
        if (!x->o->vivify)
            return KURA_NOTFOUND;
        size_t n = kura_fmt_u64(x->result, x->o->initial);
        x->result[n] = '\0';
        out->exptime = x->vivify_abs;
        out->part[0].base = x->result;
        out->part[0].len = n;
        *x->info = (engine_item_info){ .created = true, .exptime = x->vivify_abs };
        return KURA_OK;
    }
    if (x->o->cas_in && cur->cas != x->o->cas_in)
        return KURA_EXISTS;
    *x->info = (engine_item_info){ .old_exptime = cur->exptime };
    if (cur->vlen == 0 || !parse_stored_u64(cur->val, cur->vlen, &v))
        return KURA_NON_NUMERIC;
    if (x->incr)
        v += x->delta;                      /* wraps at 2^64, as memcached */
    else
        v = x->delta > v ? 0 : v - x->delta;
    size_t n = kura_fmt_u64(x->result, v);
    x->result[n] = '\0';

    out->flags = cur->flags;
    out->exptime = x->o->touch ? x->touch_abs : cur->exptime;
    out->part[0].base = x->result;
    out->part[0].len = n;
    /* memcached rewrites a shorter number in place, padded with spaces to
     * the old length; clients see that padding, so we keep it. */
    if (n < cur->vlen) {
        size_t padlen = cur->vlen - n;
        if (padlen <= sizeof(spaces)) {
            out->part[1].base = spaces;
        } else {
            free(x->pad);               /* made again (make_again): a new length */
            x->pad = malloc(padlen);
            if (!x->pad)
                return KURA_ENOMEM;         /* nothing fed: nothing written */
            memset(x->pad, ' ', padlen);
            out->part[1].base = x->pad;
        }
        out->part[1].len = padlen;
    }
    x->info->exptime = out->exptime;
    return KURA_OK;
}

static int arith_gated(kura_engine *e, kura_thread_stats *ts, const char *key, size_t klen,
                       bool incr, uint64_t delta, const engine_arith_opts *o,
                       char out[KURA_INCR_MAX_LEN], engine_item_info *info)
{
    static const engine_arith_opts none;
    engine_item_info scratch;
    arith_arg x = { o ? o : &none, info ? info : &scratch, incr, delta, out, NULL, 0, 0 };
    if (x.o->touch)
        x.touch_abs = engine_abs_exptime(e, x.o->exptime);
    if (x.o->vivify)
        x.vivify_abs = engine_abs_exptime(e, x.o->vivify_exptime);
    int rc = modify_gated(e, key, klen, arith_modify, &x, &x.info->cas);
    free(x.pad);
    if (rc == KURA_OK) {
        if (incr) KURA_STAT_INC(ts, incr_hits); else KURA_STAT_INC(ts, decr_hits);
    } else if (rc == KURA_NOTFOUND) {
        if (incr) KURA_STAT_INC(ts, incr_misses); else KURA_STAT_INC(ts, decr_misses);
    }
    return rc;
}

/* ---- flush_all ------------------------------------------------------------ */

/*
 * memcached: oldest_live = (delay > 0 ? realtime(delay) : now) - 1; when that
 * is not in the future, items with cas below a fresh cas are flushed at once.
 * Items stored at or before oldest_live die once the clock reaches it, which
 * makes every item invisible during that second; flush_at records it.
 */
static int flush_gated(kura_engine *e, kura_thread_stats *ts, int64_t delay)
{
    int64_t now = wall_now();
    int64_t oldest_live = (delay > 0 ? engine_abs_exptime(e, delay) : now) - 1;
    int rc;

    KURA_STAT_INC(ts, cmd_flush);
    if ((rc = local_change(e)) != KURA_OK)
        return rc;
    engine_state_lock(e);
    uint64_t oldest = 0;
    if (oldest_live <= now)
        rc = do_next_cas(e, &oldest);
    int64_t at = oldest_live >= now ? oldest_live : 0;
    /* logged first: a flush the log refuses is not made */
    if (rc == KURA_OK && (rc = journal_flush(e->journal, NULL, oldest, at)) == KURA_OK) {
        if (oldest)
            atomic_store(&e->oldest_cas, oldest);
        atomic_store(&e->flush_at, at);
        rc = do_save_state(e);
    }
    engine_state_unlock(e);
    return rc;
}

int engine_iterate(kura_engine *e, kura_item_fn fn, void *arg)
{
    kura_clock clk = engine_clock(e);
    gate_in(e);
    int rc = e->store->ops->iterate(e->store, &(kura_iter_spec){ .scope = KURA_ITER_ALL }, &clk, fn, arg);
    gate_out(e);
    return rc;
}

long engine_sweep(kura_engine *e, size_t budget)
{
    kura_clock clk = engine_clock(e);
    gate_in(e);
    long n = e->store->ops->sweep ? e->store->ops->sweep(e->store, &clk, budget) : 0;
    gate_out(e);
    return n;
}

int engine_sync(kura_engine *e)
{
    if (journal_ulog(e->journal)) {
        int rc = ul_sync_now(journal_ulog(e->journal));
        if (rc)
            return rc;
    }
    gate_in(e);
    int rc = e->store->ops->sync ? e->store->ops->sync(e->store) : KURA_OK;
    gate_out(e);
    return rc;
}

void engine_usage(kura_engine *e, kura_store_usage *u)
{
    gate_in(e);
    e->store->ops->usage(e->store, u);
    gate_out(e);
}

void engine_backend_stats(kura_engine *e, kura_stat_fn emit, void *arg)
{
    gate_in(e);
    if (e->store->ops->stats)
        e->store->ops->stats(e->store, emit, arg);
    gate_out(e);
}

const char *engine_backend(kura_engine *e)
{
    gate_in(e);
    const char *name = e->store->ops->name;     /* the ops tables are static */
    gate_out(e);
    return name;
}

void engine_gate_in(kura_engine *e) { gate_in(e); }
void engine_gate_out(kura_engine *e) { gate_out(e); }

/* ---- the entry points a store swap waits for (engine_swap_store) ------------ */

/* The observer (include/kura/observer.h: the "watch" stream): a get's
 * item_get event needs the size of what it found, which the caller's fn
 * sees; while fetchers are observed, fn is called through this. */
typedef struct watch_get {
    kura_item_fn fn;
    void *arg;
    uint64_t size;
} watch_get;

static int watch_get_fn(void *arg, const kura_item *it)
{
    watch_get *w = arg;
    w->size = it->vlen;
    return w->fn ? w->fn(w->arg, it) : 0;
}

/* A get or touch while fetchers are observed: through watch_get_fn, then
 * its item_get event.  Apart from the common path, which it leaves as it
 * was (one load of the observed mask). */
static int __attribute__((noinline)) get_watched(kura_engine *e, kura_thread_stats *ts,
                                                 get_arg *g)
{
    watch_get wg = { g->fn, g->arg, 0 };
    g->fn = watch_get_fn;
    g->arg = &wg;
    gate_in(e);
    int rc = get_gated(e, ts, g);
    gate_out(e);
    engine_observed_get(g->key, g->klen, rc == KURA_OK, wg.size);
    return rc;
}

int engine_get(kura_engine *e, kura_thread_stats *ts, const char *key, size_t klen,
               const engine_get_opts *o, kura_item_fn fn, void *arg, engine_item_info *info)
{
    static const engine_get_opts none;
    engine_item_info scratch;
    get_arg g = { e, o ? o : &none, info ? info : &scratch, fn, arg, key, klen, false,
                  0, 0, 0, 0, NULL };
    if (engine_observing(KURA_OBSERVE_FETCHERS))
        return get_watched(e, ts, &g);
    gate_in(e);
    int rc = get_gated(e, ts, &g);
    gate_out(e);
    return rc;
}

int engine_touch(kura_engine *e, kura_thread_stats *ts, const char *key, size_t klen,
                 int64_t exptime)
{
    engine_get_opts o = { .touch = true, .exptime = exptime };
    engine_item_info scratch;
    get_arg g = { e, &o, &scratch, NULL, NULL, key, klen, true, 0, 0, 0, 0, NULL };
    if (engine_observing(KURA_OBSERVE_FETCHERS))
        return get_watched(e, ts, &g);
    gate_in(e);
    int rc = get_gated(e, ts, &g);
    gate_out(e);
    return rc;
}

/* A store's item_store line, as memcached 1.6.18 words it. */
static void watch_store(kura_engine *e, int cmd, const kura_item *in, const engine_store_opts *o,
                        int rc)
{
    static const char *const cmds[] = { "set", "add", "replace", "append", "prepend", "cas" };
    const char *status = rc == KURA_STORED ? "stored" : rc == KURA_NOT_STORED ? "not_stored"
                         : rc == KURA_STORE_EXISTS ? "exists"
                         : rc == KURA_STORE_NOT_FOUND ? "not_found"
                         : rc == KURA_ENOMEM ? "no_memory" : "error";
    bool cas = o && o->cas_in && cmd != KURA_CMD_APPEND && cmd != KURA_CMD_PREPEND &&
               cmd != KURA_CMD_ADD;
    int k = cas ? KURA_CMD_CAS : cmd >= 0 && cmd <= KURA_CMD_CAS ? cmd : KURA_CMD_SET;
    long long ttl = in->exptime && cmd != KURA_CMD_APPEND && cmd != KURA_CMD_PREPEND
                    ? (long long)(engine_abs_exptime(e, in->exptime) - engine_now(e)) : 0;
    engine_observed_store(in->key, in->klen, status, cmds[k], ttl < 0 ? 0 : ttl, in->vlen);
}

int engine_store(kura_engine *e, kura_thread_stats *ts, int cmd, const kura_item *in,
                 const engine_store_opts *o, uint64_t *cas_out)
{
    gate_in(e);
    int rc = store_gated(e, ts, cmd, in, o, cas_out);
    gate_out(e);
    if (engine_observing(KURA_OBSERVE_MUTATIONS))
        watch_store(e, cmd, in, o, rc);
    return rc;
}

int engine_delete(kura_engine *e, kura_thread_stats *ts, const char *key, size_t klen,
                  const engine_delete_opts *o)
{
    gate_in(e);
    int rc = delete_gated(e, ts, key, klen, o);
    gate_out(e);
    if (engine_observing(KURA_OBSERVE_FETCHERS) && !(o && o->unlink))
        engine_observed_get(key, klen, rc != KURA_NOTFOUND && rc >= 0, 0);
    return rc;
}

int engine_arith(kura_engine *e, kura_thread_stats *ts, const char *key, size_t klen,
                 bool incr, uint64_t delta, const engine_arith_opts *o,
                 char out[KURA_INCR_MAX_LEN], engine_item_info *info)
{
    gate_in(e);
    int rc = arith_gated(e, ts, key, klen, incr, delta, o, out, info);
    gate_out(e);
    if (engine_observing(KURA_OBSERVE_FETCHERS))
        engine_observed_get(key, klen, rc != KURA_NOTFOUND && rc >= 0,
                            rc == KURA_OK ? strlen(out) : 0);
    return rc;
}

int engine_modify(kura_engine *e, const char *key, size_t klen, engine_modify_fn fn, void *arg,
                  uint64_t *cas_out)
{
    gate_in(e);
    int rc = modify_gated(e, key, klen, fn, arg, cas_out);
    gate_out(e);
    return rc;
}

int engine_flush_all(kura_engine *e, kura_thread_stats *ts, int64_t delay)
{
    gate_in(e);
    int rc = flush_gated(e, ts, delay);
    gate_out(e);
    return rc;
}

int engine_swap_store(kura_engine *e,
                      int (*swap)(void *arg, kura_store *old, kura_store **now), void *arg)
{
    if (!e->gated)
        return KURA_EINVAL;
    pthread_rwlock_wrlock(&e->gate);
    /* unranked (lockorder.h): no change is in flight under the gate, and
     * the swap closes and opens stores, taking their locks under this one */
    pthread_mutex_lock(&e->state_lock);
    kura_store *ns = NULL;
    int rc = swap(arg, e->store, &ns);
    e->store = ns;
    if (ns)
        journal_hook(e->journal, ns);
    if (rc == KURA_OK) {
        kura_store_state st = { 0 };
        rc = ns->ops->load_state ? ns->ops->load_state(ns, &st) : KURA_OK;
        /* the copy's items are the master's, with its cas values; nothing
         * in it is flushed, and the rows logged so far are older than it */
        if (rc == KURA_OK) {
            if (e->cas_clock)
                hlc_observe(e->cas_clock, st.max_cas);
            uint64_t cur = atomic_load(&e->next_cas);
            if (st.max_cas >= cur)
                atomic_store(&e->next_cas, st.max_cas + 1);
            atomic_store(&e->cas_reserved, 0);      /* the next cas reserves anew */
            atomic_store(&e->oldest_cas, 0);
            atomic_store(&e->flush_at, 0);
            engine_set_saved(e, 0);
            journal_unpin(e->journal);
            rc = do_save_state(e);
        }
    }
    pthread_mutex_unlock(&e->state_lock);
    pthread_rwlock_unlock(&e->gate);
    return rc;
}

void engine_enable_swap(kura_engine *e)
{
    e->gated = true;
}
