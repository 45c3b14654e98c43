/*
 * test_cas_reserve.c - the engine's cas reservation (src/engine/engine.c):
 * no cas is used before a reservation past it is saved, and a change whose
 * reservation cannot be saved fails instead of using a cas that a restart
 * could hand out again; and the reservation is saved outside the store's
 * calls, never from inside a put or an update (the journal's feed only
 * takes a cas there).  The store is the in-memory cache with its state
 * ops replaced by a recorder that can be told to fail, and its
 * read-modify-write primitive (every put, delete and update) wrapped to
 * see whether a save comes from inside one.
 */
#include <stdint.h>
#include <string.h>

#include "kura/engine.h"
#include "kura/store.h"
#include "unit.h"

static kura_store_ops ops;              /* the cache's, with the state ops below */
static const kura_store_ops *cache_ops; /* the cache's own */
static int save_result;                 /* what the next save returns */
static int saves;
static int saves_inside;                /* saves made from inside a put or an update */
static int inside;                      /* a put, del or update under way */
static kura_store_state saved;          /* the last state saved */
static kura_engine *racer;              /* set: the next put first uses up the
                                           reservation, as a racing change would */

static int rec_save(kura_store *s, const kura_store_state *st)
{
    (void)s;
    saves++;
    saves_inside += inside > 0;
    if (save_result == KURA_OK)
        saved = *st;
    return save_result;
}

static int rec_load(kura_store *s, kura_store_state *st)
{
    (void)s;
    *st = saved;
    return KURA_OK;
}

/* Every change of the store is one call of its read-modify-write
 * primitive (store.h: a put, a delete, an update). */
static int wrap_rmw(kura_store *s, const char *key, size_t klen, const kura_clock *clk,
                    const kura_rmw_hint *hint, kura_update_fn fn, void *arg)
{
    if (racer && hint->put) {
        /* every reserved cas but the last is taken (observe saves nothing:
         * the last is still covered), so the feed's take finds none left */
        engine_observe_cas(racer, saved.max_cas - 1);
        racer = NULL;
    }
    inside++;
    int rc = cache_ops->rmw(s, key, klen, clk, hint, fn, arg);
    inside--;
    return rc;
}

static kura_engine *open_engine(void)
{
    kura_store_config cfg = { .item_size_max = 1 << 20, .mem_limit = 16 << 20 };
    kura_store *s;
    char err[200];
    if (kura_store_open("*", &cfg, &s, err, sizeof(err)) != KURA_OK)
        return NULL;
    cache_ops = s->ops;
    ops = *s->ops;
    ops.rmw = wrap_rmw;
    ops.save_state = rec_save;
    ops.load_state = rec_load;
    s->ops = &ops;
    kura_engine *e;
    kura_engine_config ec = { .item_size_max = 1 << 20 };
    return engine_open(&e, s, &ec) == KURA_OK ? e : NULL;
}

static int set(kura_engine *e, kura_thread_stats *ts, const char *key, uint64_t *cas)
{
    kura_item it = { .key = key, .klen = strlen(key), .val = "v", .vlen = 1 };
    return engine_store(e, ts, KURA_CMD_SET, &it, NULL, cas);
}

static void test_failed_save_fails_the_write(void)
{
    kura_thread_stats ts = { 0 };
    memset(&saved, 0, sizeof(saved));
    save_result = KURA_EIO;
    kura_engine *e = open_engine();
    REQUIRE(e);
    uint64_t cas = 0;
    /* the first cas needs a reservation; its save fails: so does the set */
    CHECK(set(e, &ts, "a", &cas) < 0);
    CHECK(saves >= 1);
    CHECK_EQ_INT(saved.max_cas, 0);
    kura_item_fn none = NULL;
    CHECK_EQ_INT(engine_get(e, &ts, "a", 1, NULL, none, NULL, NULL), KURA_NOTFOUND);
    /* the save works again: the next set reserves, and its cas is under
     * what was saved */
    save_result = KURA_OK;
    CHECK_EQ_INT(set(e, &ts, "a", &cas), KURA_STORED);
    CHECK(cas > 0 && cas < saved.max_cas);
    /* within the reservation, no save per change */
    int before = saves;
    uint64_t cas2 = 0;
    save_result = KURA_EIO;
    CHECK_EQ_INT(set(e, &ts, "b", &cas2), KURA_STORED);
    CHECK(cas2 > cas && cas2 < saved.max_cas);
    CHECK_EQ_INT(saves, before);
    save_result = KURA_OK;
    engine_close(e);
}

static void test_restart_never_reuses(void)
{
    kura_thread_stats ts = { 0 };
    memset(&saved, 0, sizeof(saved));
    save_result = KURA_OK;
    kura_engine *e = open_engine();
    REQUIRE(e);
    uint64_t cas = 0, last = 0;
    for (int i = 0; i < 100; i++) {
        REQUIRE(set(e, &ts, "k", &cas) == KURA_STORED);
        CHECK(cas > last);
        last = cas;
    }
    /* a crash: the engine is not closed (no final save); a new one starts
     * from what was saved, which is past every cas used */
    CHECK(saved.max_cas >= last);
    kura_engine *e2 = open_engine();
    REQUIRE(e2);
    REQUIRE(set(e2, &ts, "k", &cas) == KURA_STORED);
    CHECK(cas > last);
    engine_close(e2);
    engine_close(e);                    /* the "crashed" one, only to free it */
}

/* The reservation is saved before the store call that needs it, or, when
 * a racing change took the last reserved cas meanwhile, after it (the
 * feed refuses the change and the engine makes it again): never from
 * inside the store's put or update (fails if the feed saves it there). */
static void test_reserved_outside_the_store(void)
{
    kura_thread_stats ts = { 0 };
    memset(&saved, 0, sizeof(saved));
    save_result = KURA_OK;
    saves_inside = 0;
    kura_engine *e = open_engine();
    REQUIRE(e);
    /* the first change reserves */
    uint64_t cas = 0;
    CHECK_EQ_INT(set(e, &ts, "a", &cas), KURA_STORED);
    CHECK(saves >= 1 && cas > 0 && cas < saved.max_cas);
    CHECK_EQ_INT(saves_inside, 0);
    /* the reservation used up between the engine's look and the feed's
     * take: made again past a new one, saved outside */
    uint64_t bound = saved.max_cas;
    racer = e;
    int before = saves;
    CHECK_EQ_INT(set(e, &ts, "b", &cas), KURA_STORED);
    CHECK(racer == NULL);
    CHECK(cas > bound && cas < saved.max_cas);
    CHECK(saves > before);
    CHECK_EQ_INT(saves_inside, 0);
    engine_item_info got;
    CHECK_EQ_INT(engine_get(e, &ts, "b", 1, NULL, NULL, NULL, &got), KURA_OK);
    CHECK(got.cas == cas);
    engine_close(e);
    /* a restart whose first change is an update (incr creating the item) */
    e = open_engine();
    REQUIRE(e);
    bound = saved.max_cas;
    char out[KURA_INCR_MAX_LEN];
    engine_arith_opts viv = { .vivify = true, .initial = 5 };
    engine_item_info info;
    CHECK_EQ_INT(engine_arith(e, &ts, "n", 1, true, 1, &viv, out, &info), KURA_OK);
    CHECK(info.cas > bound && info.cas < saved.max_cas);
    CHECK_EQ_INT(saves_inside, 0);
    engine_close(e);
}

int main(void)
{
    RUN(test_failed_save_fails_the_write);
    RUN(test_restart_never_reuses);
    RUN(test_reserved_outside_the_store);
    UNIT_DONE();
}
