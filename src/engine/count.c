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
 * Here the counters are trusted once a walk has shown them to hold no
 * dead item under the watermark they are read with (ec_clean: the
 * watermark, plus one, for which a walk found every counted item live;
 * 0 = not shown, as at start, where the file may hold items a flush left
 * before a restart).  Under another watermark (a flush since, a delayed
 * flush pending, a full copy swapped in) the live items are walked
 * (keys only: the hash file reads its index, not its records) and
 * counted; when that count is the store's, unchanged across the walk,
 * the watermark is marked clean and later calls cost two reads of the
 * counters.  So the cost of exactness is a walk per call from a flush
 * until the sweep has reclaimed what it flushed, O(items) each.
 *
 * Items that expired and are not yet reclaimed stay counted (Tokyo
 * Tyrant's clients set no expiry; docs/migration.md says so).
 */
#include <stdatomic.h>

#include "engine_int.h"

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

void engine_usage_exact(kura_engine *e, kura_store_usage *u)
{
    kura_clock clk = engine_clock(e);
    engine_gate_in(e);
    kura_store *s = e->store;
    uint64_t seq = write_seq(s);
    s->ops->usage(s, u);
    uint64_t mark = clk.flush_at == 0 ? clk.oldest_cas + 1 : 0;
    if (mark != 0 && atomic_load_explicit(&e->count_clean, memory_order_acquire) == mark) {
        engine_gate_out(e);
        return;
    }
    live_count c = { 0, 0 };
    int rc = s->ops->iterate(s, &(kura_iter_spec){ .scope = KURA_ITER_ALL, .keys_only = true },
                             &clk, count_one, &c);
    kura_store_usage after;
    s->ops->usage(s, &after);
    if (rc == KURA_OK && mark != 0 && c.items == u->curr_items && c.bytes == u->bytes &&
        after.curr_items == u->curr_items && after.bytes == u->bytes && write_seq(s) == seq)
        atomic_store_explicit(&e->count_clean, mark, memory_order_release);
    engine_gate_out(e);
    if (rc == KURA_OK) {
        u->curr_items = c.items;
        u->bytes = c.bytes;
    }
}
