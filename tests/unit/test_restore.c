/*
 * test_restore.c - snapshots taken from a running engine (snap_take) and
 * databases rebuilt from them (snap_restore), on the hash file and the
 * B+ tree: a model of every key is kept after each change; a snapshot is
 * taken while a second thread writes; then, for moments T before, during
 * and after the snapshot and at the end, the database rebuilt up to T
 * holds exactly the model at T (sets, deletes, a flush_all, incr).  A
 * restore into a database with data is refused; a log that does not reach
 * back to the snapshot's start is refused as a gap; with no usable
 * snapshot (all too new) the restore says so.  Negative check: replaying
 * without the rows (ulog_dir NULL) gives the snapshot, which differs from
 * the final model.
 */
#include <inttypes.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "kura/engine.h"
#include "kura/journal.h"
#include "kura/snapshot.h"
#include "kura/store.h"
#include "kura/ulog.h"
#include "unit.h"


#define NKEYS 200
#define NSTEPS 3000
#define VMAX 24

static char dir[256], uldir[300], bgsdir[300];

static void quiet(void *arg, int level, const char *line)
{
    (void)arg; (void)level; (void)line;
}
static void elog(int level, const char *line)
{
    (void)level; (void)line;
}

/* The model: each key's value ("" with present=0: absent) after each step. */
typedef struct state {
    char val[NKEYS][VMAX];
    bool present[NKEYS];
} state;

static state *history;          /* history[i]: after step i */
static uint64_t *step_ts;       /* the log's last row after step i */

static kura_store_config scfg = { .item_size_max = 1 << 20, .sync_mode = KURA_SYNC_NONE,
                                  .mem_limit = 64 << 20, .log = elog };

typedef struct writer {
    kura_engine *e;
    ul_log *log;
    kura_thread_stats ts;
    _Atomic int step;
    _Atomic bool go;            /* the snapshot is starting: write on */
    _Atomic bool taken;         /* it is done: write the last quarter */
} writer;

static void key_of(int k, char *buf) { snprintf(buf, 16, "key%03d", k); }

/* One step of a fixed pseudo-random script. */
static void do_step(writer *w, int i, state *st)
{
    uint32_t r = (uint32_t)i * 2654435761u;
    int k = (int)(r % NKEYS);
    char key[16];
    key_of(k, key);
    int op = (int)((r >> 16) % 10);
    if (i == NSTEPS / 2) {
        engine_flush_all(w->e, &w->ts, 0);
        memset(st->present, 0, sizeof(st->present));
    } else if (op < 6) {
        char v[VMAX];
        snprintf(v, sizeof(v), "v%d", i);
        kura_item it = { .key = key, .klen = strlen(key), .val = v, .vlen = strlen(v) };
        if (engine_store(w->e, &w->ts, KURA_CMD_SET, &it, NULL, NULL) == KURA_OK) {
            snprintf(st->val[k], VMAX, "%s", v);
            st->present[k] = true;
        }
    } else if (op < 8) {
        if (engine_delete(w->e, &w->ts, key, strlen(key), NULL) == KURA_OK)
            st->present[k] = false;
    } else {
        char nv[KURA_INCR_MAX_LEN];
        if (engine_arith(w->e, &w->ts, key, strlen(key), true, 1, NULL, nv, NULL) == KURA_OK)
            snprintf(st->val[k], VMAX, "%s", nv);
    }
}

static void *write_all(void *arg)
{
    writer *w = arg;
    state st;
    memset(&st, 0, sizeof(st));
    for (int i = 0; i < NSTEPS; i++) {
        /* a quarter in, wait for the snapshot to start, so that it starts
         * there however the threads are scheduled and the rest is written
         * while it is taken */
        while (i == NSTEPS / 4 && !atomic_load(&w->go))
            usleep(50);
        /* and the last quarter after it: moments after its end exist */
        while (i == 3 * NSTEPS / 4 && !atomic_load(&w->taken))
            usleep(50);
        do_step(w, i, &st);
        history[i] = st;
        step_ts[i] = ul_last_ts(w->log);
        atomic_store(&w->step, i + 1);
    }
    return NULL;
}

typedef struct cmp {
    const state *want;
    int seen, wrong;
} cmp;

static int cmp_item(void *arg, const kura_item *it)
{
    cmp *c = arg;
    int k = atoi(it->key + 3);
    c->seen++;
    if (it->klen != 6 || k < 0 || k >= NKEYS || !c->want->present[k] ||
        it->vlen != strlen(c->want->val[k]) || memcmp(it->val, c->want->val[k], it->vlen))
        c->wrong++;
    return 0;
}

/* Does the database hold exactly st? */
static bool db_is(const char *db, const state *st)
{
    kura_store *s;
    char err[300];
    if (kura_store_open(db, &scfg, &s, err, sizeof(err)))
        return false;
    kura_engine *e;
    kura_engine_config ec = { .item_size_max = 1 << 20 };
    if (engine_open(&e, s, &ec)) {
        kura_store_close(s);
        return false;
    }
    cmp c = { .want = st };
    engine_iterate(e, cmp_item, &c);
    engine_close(e);
    int want = 0;
    for (int k = 0; k < NKEYS; k++)
        want += st->present[k];
    if (c.wrong || c.seen != want)
        printf("# %s: %d items, %d wrong, %d expected\n", db, c.seen, c.wrong, want);
    return c.wrong == 0 && c.seen == want;
}

static int restore_to(const char *db, uint64_t until, const char *ulog, snap_restore_result *res,
                      char *err, size_t errlen)
{
    snap_restore_cfg rc = { .dbname = db, .store_cfg = &scfg, .bgs_dir = bgsdir,
                            .ulog_dir = ulog, .until_ts = until };
    return snap_restore(&rc, res, err, errlen);
}

static void run(const char *suffix)
{
    char cmd[400], db[300];
    snprintf(dir, sizeof(dir), "/tmp/kura-restore-%d", (int)getpid());
    snprintf(cmd, sizeof(cmd), "rm -rf %s", dir);
    if (system(cmd) != 0) {}
    mkdir(dir, 0755);
    snprintf(uldir, sizeof(uldir), "%s/ul", dir);
    snprintf(bgsdir, sizeof(bgsdir), "%s/bgs", dir);
    mkdir(uldir, 0755);
    mkdir(bgsdir, 0755);
    snprintf(db, sizeof(db), "%s/db%s", dir, suffix);

    writer w = { 0 };
    kura_store *s;
    char err[600];
    REQUIRE(kura_store_open(db, &scfg, &s, err, sizeof(err)) == 0);
    kura_engine_config ec = { .item_size_max = 1 << 20 };
    REQUIRE(engine_open(&w.e, s, &ec) == 0);
    ul_config uc = { .dir = uldir, .sid = 3, .ulim = 1 << 14, .log = quiet };
    uint64_t cut, redone;
    REQUIRE(ul_open(&uc, &w.log, &cut, err, sizeof(err)) == 0);
    REQUIRE(engine_attach_log(w.e, w.log, KURA_SYNC_NONE, elog, &redone) == 0);

    pthread_t th;
    pthread_create(&th, NULL, write_all, &w);
    while (atomic_load(&w.step) < NSTEPS / 4)
        usleep(100);
    atomic_store(&w.go, true);
    snap_take_cfg tc = { .dir = bgsdir, .codec = KURA_CODEC_LZO, .sid = 3, .ulog = w.log };
    snap_info info;
    char path[4200];
    int before = atomic_load(&w.step);
    CHECK_EQ_INT(snap_take(w.e, &tc, &info, path, sizeof(path), err, sizeof(err)), 0);
    int after = atomic_load(&w.step);
    atomic_store(&w.taken, true);
    pthread_join(th, NULL);
    printf("# snapshot of %" PRIu64 " items taken during steps %d..%d\n", info.items, before,
           after);
    engine_close(w.e);
    ul_close(w.log);

    /* moments from the snapshot's end to the last step, the flush among
     * them when the snapshot ended before it */
    int moments[10], nm = 0;
    for (int j = 0; j < 8; j++)
        moments[nm++] = after + (NSTEPS - 1 - after) * j / 7;
    moments[nm++] = NSTEPS / 2;
    moments[nm++] = NSTEPS / 2 + 1;
    int restored = 0;
    for (int m = 0; m < nm; m++) {
        int i = moments[m];
        if (i >= NSTEPS || step_ts[i] < info.end_ts)
            continue;
        /* the flush's moments may coincide with a spread one, depending on
         * where the snapshot ended: each moment is restored once */
        bool again = false;
        for (int n = 0; n < m; n++)
            again |= moments[n] == i;
        if (again)
            continue;
        char out[300];
        snprintf(out, sizeof(out), "%s/at%d%s", dir, i, suffix);
        snap_restore_result res;
        int rc = restore_to(out, step_ts[i], uldir, &res, err, sizeof(err));
        if (rc)
            printf("# restore to step %d: %s\n", i, err);
        CHECK_EQ_INT(rc, 0);
        CHECK(db_is(out, &history[i]));
        restored++;
    }
    CHECK(restored >= 7);
    /* a moment before the snapshot ended: none qualifies */
    {
        char out[300];
        snprintf(out, sizeof(out), "%s/early%s", dir, suffix);
        snap_restore_result res;
        CHECK_EQ_INT(restore_to(out, step_ts[0], uldir, &res, err, sizeof(err)), KURA_NOTFOUND);
    }
    /* everything; and negative check: the snapshot alone is not the end */
    {
        char out[300], out2[300];
        snprintf(out, sizeof(out), "%s/all%s", dir, suffix);
        snprintf(out2, sizeof(out2), "%s/snaponly%s", dir, suffix);
        snap_restore_result res;
        CHECK_EQ_INT(restore_to(out, UINT64_MAX, uldir, &res, err, sizeof(err)), 0);
        CHECK(db_is(out, &history[NSTEPS - 1]));
        CHECK(res.rows > 0);
        CHECK_EQ_INT(restore_to(out2, UINT64_MAX, NULL, &res, err, sizeof(err)), 0);
        CHECK(!db_is(out2, &history[NSTEPS - 1]));
        /* into a database with data: refused */
        CHECK_EQ_INT(restore_to(out, UINT64_MAX, uldir, &res, err, sizeof(err)), KURA_EXISTS);
    }
    /* a log that no longer reaches back to the snapshot: every file but
     * the newest gone (the snapshot started in the first quarter) */
    {
        snprintf(cmd, sizeof(cmd), "cd %s && ls | grep '[.]seg$' | sort | head -n -1 | xargs rm -f",
                 uldir);
        CHECK_EQ_INT(system(cmd), 0);
        char out[300];
        snprintf(out, sizeof(out), "%s/gap%s", dir, suffix);
        snap_restore_result res;
        int rc = restore_to(out, UINT64_MAX, uldir, &res, err, sizeof(err));
        if (rc != KURA_ECORRUPT)
            printf("# gap: %d %s\n", rc, err);
        CHECK_EQ_INT(rc, KURA_ECORRUPT);
        CHECK(strstr(err, "are not there") != NULL);
    }
    snprintf(cmd, sizeof(cmd), "rm -rf %s", dir);
    if (system(cmd) != 0) {}
}

static void test_hash(void) { run(".kh"); }
static void test_tree(void) { run(".kb"); }

int main(void)
{
    history = calloc(NSTEPS, sizeof(*history));
    step_ts = calloc(NSTEPS, sizeof(*step_ts));
    RUN(test_hash);
    RUN(test_tree);
    free(history);
    free(step_ts);
    UNIT_DONE();
}
