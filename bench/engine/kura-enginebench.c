/*
 * kura-enginebench - in-process write and read of N records through the
 * storage interface (include/kura/store.h), no network: kura's counterpart of
 * `tchtest write` / `tchtest read` and `kchashtest order -set` / `-get`.
 *
 *   kura-enginebench [-rnd] [-text] [-th N] [-sync none|interval|always] DBNAME RNUM
 *
 * Keys and values are both the 8-byte decimal string "%08d" of 1..RNUM, as in
 * tchtest and kchashtest; with -text, a user table's records instead: keys
 * "user:%08d" and values of about 100 bytes of words (a field list naming
 * the key, then words drawn from a small vocabulary), the data that page
 * compression (#zcomp) is for.  Write phase: open, RNUM puts, close (so a file
 * backend's close/sync is paid, as tchtest pays tchdbclose).  Read phase:
 * open again, RNUM gets each checked against what was written, close.  The
 * in-memory cache ("*") cannot be reopened, so both phases share one open and
 * the close is timed with the read phase.  -rnd visits keys in a random
 * order; -th N splits the keys over N threads.
 *
 * Prints the phase times and one machine line:
 *   RESULT db=... rnum=... write_s=... read_s=... write_ops=... read_ops=...
 *          put_s=... get_s=... (the put and get loops alone, without open/close)
 *          get_cpu_s=... (the process's CPU time, user + system, over the get
 *          loop: comparable while other work loads the machine)
 * Exit 0 success, 1 the store failed (message on stderr), 2 usage,
 * 3 a read returned something else than was written.
 */
#include <pthread.h>
#include <stdatomic.h>
#include <stdbool.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <sys/resource.h>

#include "kura/store.h"

static kura_store *store;
static kura_clock clk;
static long rnum;
static int nthreads = 1;
static bool rnd, text;
static uint32_t *order;         /* key numbers in visiting order, if -rnd */
static _Atomic long bad, failed;
static _Atomic int first_err;

static double now(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + (double)ts.tv_nsec / 1e9;
}

static inline long key_at(long i) { return rnd ? (long)order[i] : i + 1; }

typedef struct check { const char *want; size_t len; bool ok; } check;

static int on_get(void *arg, const kura_item *it)
{
    check *c = arg;
    c->ok = it->vlen == c->len && memcmp(it->val, c->want, c->len) == 0;
    return 0;
}

/* -text: key k's record; the lengths of key and value */
static void text_record(long k, char *key, size_t *klen, char *val, size_t *vlen)
{
    static const char *words[] = { "active", "premium", "berlin", "tokyo", "newsletter",
                                   "verified", "mobile", "desktop", "en-US", "ja-JP",
                                   "2026-11-30", "free", "trial", "admin", "guest", "none" };
    *klen = (size_t)snprintf(key, 24, "user:%08ld", k);
    size_t n = (size_t)snprintf(val, 160, "{\"id\":%ld,\"name\":\"user%ld\",\"tags\":\"", k,
                                k % 9973);
    uint64_t x = (uint64_t)k * 0x9E3779B97F4A7C15ULL;
    while (n < 96) {
        x = x * 6364136223846793005ULL + 1442695040888963407ULL;
        n += (size_t)snprintf(val + n, 160 - n, "%s ", words[x >> 60]);
    }
    n += (size_t)snprintf(val + n, 160 - n, "\"}");
    *vlen = n;
}

typedef struct job { long from, to; bool write; } job;

static void *run(void *arg)
{
    job *j = arg;
    char buf[24], vbuf[200];
    for (long i = j->from; i < j->to; i++) {
        long k = key_at(i);
        size_t klen = 8, vlen = 8;
        const char *val = buf;
        if (text) {
            text_record(k, buf, &klen, vbuf, &vlen);
            val = vbuf;
        } else {
            snprintf(buf, sizeof(buf), "%08ld", k);
        }
        int rc;
        if (j->write) {
            kura_item it = { .key = buf, .klen = klen, .val = val, .vlen = vlen,
                             .cas = (uint64_t)k };
            rc = kura_store_put(store, &it, KURA_PUT_ANY, 0, &clk);
        } else {
            check c = { val, vlen, false };
            rc = store->ops->get(store, buf, klen, &clk, on_get, &c);
            if (rc == KURA_OK && !c.ok)
                atomic_fetch_add(&bad, 1);
            if (rc == KURA_NOTFOUND) {
                atomic_fetch_add(&bad, 1);
                rc = KURA_OK;
            }
        }
        if (rc != KURA_OK) {
            int zero = 0;
            atomic_compare_exchange_strong(&first_err, &zero, rc);
            atomic_fetch_add(&failed, 1);
            return NULL;
        }
    }
    return NULL;
}

static void phase(bool write)
{
    pthread_t th[64];
    job jobs[64];
    for (int t = 0; t < nthreads; t++) {
        jobs[t].from = rnum * t / nthreads;
        jobs[t].to = rnum * (t + 1) / nthreads;
        jobs[t].write = write;
        if (nthreads == 1)
            run(&jobs[t]);
        else if (pthread_create(&th[t], NULL, run, &jobs[t])) {
            fprintf(stderr, "kura-enginebench: pthread_create failed\n");
            exit(1);
        }
    }
    if (nthreads > 1)
        for (int t = 0; t < nthreads; t++)
            pthread_join(th[t], NULL);
}

static void open_store(const char *dbname, const kura_store_config *cfg)
{
    char err[512] = "";
    int rc = kura_store_open(dbname, cfg, &store, err, sizeof(err));
    if (rc) {
        fprintf(stderr, "kura-enginebench: cannot open '%s': %s (%s)\n", dbname,
                err[0] ? err : "no message", kura_strerror(rc));
        exit(1);
    }
}

static void check_failed(const char *what)
{
    if (atomic_load(&failed)) {
        fprintf(stderr, "kura-enginebench: %s failed: %s\n", what,
                kura_strerror(atomic_load(&first_err)));
        exit(1);
    }
}

static double cpu_now(void)
{
    struct rusage ru;
    getrusage(RUSAGE_SELF, &ru);
    return (double)(ru.ru_utime.tv_sec + ru.ru_stime.tv_sec) +
           (double)(ru.ru_utime.tv_usec + ru.ru_stime.tv_usec) / 1e6;
}

static void usage(void)
{
    fprintf(stderr, "usage: kura-enginebench [-rnd] [-text] [-th N] [-sync none|interval|always] "
                    "DBNAME RNUM\n  DBNAME: \"*\" (cache), \"path.kh#bnum=...\" (hash file), ...\n");
    exit(2);
}

int main(int argc, char **argv)
{
    kura_store_config cfg = {
        .mem_limit = 4ull << 30,
        .item_size_max = KURA_ITEM_SIZE_MAX_DEFAULT,
        .sync_mode = KURA_SYNC_NONE,
    };
    int i = 1;
    for (; i < argc && argv[i][0] == '-' && argv[i][1]; i++) {
        if (!strcmp(argv[i], "-rnd")) {
            rnd = true;
        } else if (!strcmp(argv[i], "-text")) {
            text = true;
        } else if (!strcmp(argv[i], "-th") && i + 1 < argc) {
            nthreads = atoi(argv[++i]);
            if (nthreads < 1 || nthreads > 64) usage();
        } else if (!strcmp(argv[i], "-sync") && i + 1 < argc) {
            const char *m = argv[++i];
            cfg.sync_mode = !strcmp(m, "none") ? KURA_SYNC_NONE
                          : !strcmp(m, "interval") ? KURA_SYNC_INTERVAL
                          : !strcmp(m, "always") ? KURA_SYNC_ALWAYS : -1;
            if (cfg.sync_mode < 0) usage();
        } else {
            usage();
        }
    }
    if (argc - i != 2)
        usage();
    const char *dbname = argv[i];
    rnum = atol(argv[i + 1]);
    if (rnum < 1 || rnum > 99999999)
        usage();
    clk.now = (int64_t)time(NULL);
    clk.oldest_cas = 0;
    if (rnd) {
        order = malloc((size_t)rnum * sizeof(*order));
        if (!order) return 1;
        for (long k = 0; k < rnum; k++) order[k] = (uint32_t)(k + 1);
        uint64_t s = 88172645463325252ull;
        for (long k = rnum - 1; k > 0; k--) {
            s ^= s << 13; s ^= s >> 7; s ^= s << 17;
            long j = (long)(s % (uint64_t)(k + 1));
            uint32_t t = order[k]; order[k] = order[j]; order[j] = t;
        }
    }
    bool memory = !strcmp(dbname, "*") || !strcmp(dbname, ":") || dbname[0] == '*' ||
                  dbname[0] == ':';

    double t0 = now();
    open_store(dbname, &cfg);
    double tp0 = now();
    phase(true);
    double tp1 = now();
    check_failed("put");
    if (!memory)
        kura_store_close(store);
    double t1 = now();
    if (!memory)
        open_store(dbname, &cfg);
    double tg0 = now(), cg0 = cpu_now();
    phase(false);
    double tg1 = now(), cg1 = cpu_now();
    check_failed("get");
    kura_store_close(store);
    double t2 = now();

    double ws = t1 - t0, rs = t2 - t1;
    printf("db: %s\nrnum: %ld\nthreads: %d\norder: %s\nwrite: %.3f s (%.0f ops/s)\n"
           "read: %.3f s (%.0f ops/s)\nmismatches: %ld\n", dbname, rnum, nthreads,
           rnd ? "random" : "sequential", ws, (double)rnum / ws, rs, (double)rnum / rs,
           atomic_load(&bad));
    printf("RESULT db=%s rnum=%ld threads=%d rnd=%d write_s=%.4f read_s=%.4f "
           "write_ops=%.0f read_ops=%.0f put_s=%.4f get_s=%.4f mismatches=%ld get_cpu_s=%.4f\n",
           dbname, rnum, nthreads, rnd, ws, rs, (double)rnum / ws, (double)rnum / rs, tp1 - tp0,
           tg1 - tg0, atomic_load(&bad), cg1 - cg0);
    return atomic_load(&bad) ? 3 : 0;
}
