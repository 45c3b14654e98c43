/*
 * count.c - the number of live items and their bytes, exact at once
 * (engine_usage_exact), for Tokyo Tyrant's rnum, size and stat, whose
 * clients (tcrtest misc among them) expect a vanish, an out or a putkeep
 * to show in the next rnum.
 *
 * A store's counters (engine_usage) include dead items until they are
 * reclaimed: a flush_all (Tokyo Tyrant's vanish) only raises the cas
 * watermark, and the sweep reclaims the items under it a few thousand a
 * second, so for seconds after a vanish the store still counts what it
 * flushed.  memcached's curr_items behaves the same, and stays so.
 *
 * So the flush is counted when it is made, in O(1): when the watermark
 * rises (a flush_all, a delayed flush's second passing, a flush row
 * replayed or replicated), every item the store holds is under it, and
 * the store's counters then are what it flushed (engine_count_note).
 * From there the stores count every removed item whose cas was under the
 * watermark (kura_store_usage.flushed_gone, and its bytes), so the
 * flushed items still counted are those noted less those gone since, and
 * the live ones the rest: two reads of the counters, whatever the store
 * holds.  A new store (a full copy swapped in) starts with nothing
 * flushed.
 *
 * The note reads the store's counters, whose locks rank below the
 * engine's state_lock (lockorder.h), so it is made once that lock is let
 * go, numbered by the change it follows (engine_count_epoch) so that two
 * flushes noted out of order keep the later.  Two cases are not known at
 * once: an engine opened under a watermark (a flush before a restart),
 * whose store may still hold flushed items nobody counted, and a delayed
 * flush_all whose second passed (the watermark is raised inside
 * engine_clock, where the store may not be read).  There the next call
 * walks the live keys once (keys only: the hash file reads its index, not
 * its records), and a walk whose count held still notes the difference;
 * until one does, each call walks.
 *
 * Inexact only in a race no client can order: a change made by another
 * client while a flush is made (between the watermark's rise and the
 * note), or an item removed under a clock read before the flush, may be
 * counted on the wrong side until the next flush (never below zero).  Items that
 * expired and are not yet reclaimed stay counted (Tokyo Tyrant's clients
 * set no expiry; docs/migration.md says so).
 */
#include <sched.h>
#include <stdatomic.h>

#include "kura/testhooks.h"

#include "engine_int.h"

typedef struct ledger {
    bool known;
    uint64_t items, bytes, gone, gone_bytes;
} ledger;

/* The ledger's writers (a flush's note, a walk's) take turns: rare and
 * short, so they spin. */
static void ledger_lock(kura_engine *e)
{
    while (atomic_flag_test_and_set(&e->count_busy))
        sched_yield();
}

static void ledger_unlock(kura_engine *e)
{
    atomic_flag_clear(&e->count_busy);
}

/* ledger_lock held: writes the ledger of watermark change `epoch` as a
 * seqlock, unless a later change was noted already. */
static void do_ledger_set(kura_engine *e, uint64_t epoch, const ledger *l)
{
    if (epoch < atomic_load(&e->count_noted))
        return;
    atomic_store(&e->count_noted, epoch);
    atomic_fetch_add(&e->count_seq, 1);
    atomic_store(&e->count_items, l->items);
    atomic_store(&e->count_bytes, l->bytes);
    atomic_store(&e->count_gone, l->gone);
    atomic_store(&e->count_gone_bytes, l->gone_bytes);
    atomic_store(&e->count_known, l->known);
    atomic_fetch_add(&e->count_seq, 1);
}

static ledger ledger_get(kura_engine *e)
{
    ledger l;
    for (;;) {
        uint64_t s0 = atomic_load(&e->count_seq);
        l.items = atomic_load(&e->count_items);
        l.bytes = atomic_load(&e->count_bytes);
        l.gone = atomic_load(&e->count_gone);
        l.gone_bytes = atomic_load(&e->count_gone_bytes);
        l.known = atomic_load(&e->count_known);
        if (!(s0 & 1) && atomic_load(&e->count_seq) == s0)
            return l;
    }
}

/* The store's counters with its flushed_gone ones read on both sides
 * unchanged, so that no removal falls between (a few tries; then the
 * last read, off by what a concurrent sweep removed meanwhile). */
static void usage_steady(kura_store *s, kura_store_usage *u)
{
    for (int i = 0; i < 8; i++) {
        kura_store_usage a;
        s->ops->usage(s, &a);
        s->ops->usage(s, u);
        if (a.flushed_gone == u->flushed_gone && a.curr_items == u->curr_items &&
            a.bytes == u->bytes)
            return;
    }
}

uint64_t engine_count_epoch(kura_engine *e)
{
    return atomic_fetch_add(&e->count_epoch, 1) + 1;
}

void engine_count_note(kura_engine *e, uint64_t epoch, bool flushed)
{
    kura_store_usage u;
    usage_steady(e->store, &u);
    ledger l = { true, 0, 0, u.flushed_gone, u.flushed_gone_bytes };
    if (flushed) {
        l.items = u.curr_items;
        l.bytes = u.bytes;
    }
    ledger_lock(e);
    do_ledger_set(e, epoch, &l);
    ledger_unlock(e);
}

void engine_count_forget(kura_engine *e, uint64_t epoch)
{
    ledger l = { false, 0, 0, 0, 0 };
    ledger_lock(e);
    do_ledger_set(e, epoch, &l);
    ledger_unlock(e);
}

/* u less what the ledger says is still flushed in it. */
static void apply_ledger(const ledger *l, kura_store_usage *u)
{
    uint64_t gi = u->flushed_gone - l->gone, gb = u->flushed_gone_bytes - l->gone_bytes;
    uint64_t di = l->items > gi ? l->items - gi : 0, db = l->bytes > gb ? l->bytes - gb : 0;
    u->curr_items = u->curr_items > di ? u->curr_items - di : 0;
    u->bytes = u->bytes > db ? u->bytes - db : 0;
}

typedef struct live_count {
    uint64_t items, bytes;
} live_count;

static int count_one(void *arg, const kura_item *it)
{
    live_count *c = arg;
    c->items++;
    /* as the stores count (item.h): in a keys-only walk of the hash file
     * flags only says zero or not, which is all this sum needs */
    c->bytes += kura_item_wire_total(it->klen, it->vlen, it->flags);
    return 0;
}

static uint64_t write_seq(kura_store *s)
{
    return s->ops->write_seq ? s->ops->write_seq(s) : 0;
}

/* Gate held, ledger unknown: counts the live keys; a count that held
 * still across the walk (no write, no removal, the same watermark) is
 * noted in the ledger.  O(items). */
static void walk_count(kura_engine *e, const kura_clock *clk, kura_store_usage *u)
{
    kura_store *s = e->store;
    KURA_TEST_CALL(count_walked);
    uint64_t epoch = atomic_load(&e->count_epoch);
    uint64_t seq = write_seq(s);
    live_count c = { 0, 0 };
    int rc = s->ops->iterate(s, &(kura_iter_spec){ .scope = KURA_ITER_ALL, .keys_only = true },
                             clk, count_one, &c);
    if (rc != KURA_OK)
        return;                         /* the store's counters, dead items and all */
    kura_store_usage after;
    s->ops->usage(s, &after);
    if (after.curr_items == u->curr_items && after.bytes == u->bytes &&
        after.flushed_gone == u->flushed_gone && write_seq(s) == seq &&
        c.items <= u->curr_items && c.bytes <= u->bytes && clk->flush_at == 0) {
        ledger l = { true, u->curr_items - c.items, u->bytes - c.bytes, u->flushed_gone,
                     u->flushed_gone_bytes };
        ledger_lock(e);
        /* noted only if no watermark change came since the walk began */
        if (atomic_load(&e->count_epoch) == epoch && !atomic_load(&e->count_known))
            do_ledger_set(e, epoch, &l);
        ledger_unlock(e);
    }
    u->curr_items = c.items;
    u->bytes = c.bytes;
}

void engine_usage_exact(kura_engine *e, kura_store_usage *u)
{
    kura_clock clk = engine_clock(e);
    engine_gate_in(e);
    kura_store *s = e->store;
    ledger l = ledger_get(e);
    s->ops->usage(s, u);
    if (clk.flush_at != 0 && clk.flush_at <= clk.now) {
        /* a delayed flush's second: every item reads as flushed */
        u->curr_items = 0;
        u->bytes = 0;
    } else if (l.known) {
        apply_ledger(&l, u);
    } else {
        walk_count(e, &clk, u);
    }
    engine_gate_out(e);
}
