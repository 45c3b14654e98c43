/*
 * kura-turnbench - the work one turn of a listing costs its worker.
 *
 * A connection calls the protocol once per turn of its worker's event
 * loop; the worker's other connections wait for that call to return.  So
 * the longest call of a listing is how long it can hold up another client
 * of its worker, whatever the machine's load, which bench/stall.py's
 * latencies cannot separate from the scheduler's.  This program drives a
 * session as the connection does (no network), over a store of N items
 * (key:%08d, 10-byte values), and times each call of each listing in CPU
 * time of the calling thread: calls, total, p99 and longest call.  Each
 * listing runs `runs` times: the total is the least (the run least
 * disturbed by other work on the machine), the calls' figures are over
 * every run.
 *
 *     kura-turnbench [items [dbname [runs [request]]]]
 *         default 500000, "*" (the cache; a path ending .kh or .kb for the
 *         others), 3, and the five listings of bench/stall.py; a request
 *         given (without its \r\n) is the only one run, "-" none (for
 *         counting instructions under callgrind: a run with a listing less
 *         the run without is the listing's own)
 *
 * Built against another build's library (the session interface is the
 * same), it gives that build's figures: docs/benchmarks.md has both.
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "kura/proto.h"

static double cpu_now(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_THREAD_CPUTIME_ID, &ts);
    return ts.tv_sec + ts.tv_nsec / 1e9;
}

static int cmp_double(const void *a, const void *b)
{
    double x = *(const double *)a, y = *(const double *)b;
    return x < y ? -1 : x > y;
}

/* Answers the request over as many calls as it takes; returns the calls. */
static size_t answer(kura_session *s, const char *req, size_t len, kura_buf *out,
                     double **times, size_t *cap)
{
    size_t calls = 0, pos = 0;
    while (pos < len) {
        out->len = 0;
        double t0 = cpu_now();
        size_t used = kura_session_process(s, (char *)req + pos, len - pos, out);
        double t = cpu_now() - t0;
        if (times) {
            if (calls == *cap) {
                *cap = *cap ? *cap * 2 : 1024;
                *times = realloc(*times, *cap * sizeof(**times));
                if (!*times)
                    abort();
            }
            (*times)[calls] = t;
        }
        calls++;
        pos += used;
        if (used == 0 && !kura_session_out_full(s))
            break;                      /* wants more input: not a whole request */
    }
    return calls;
}

int main(int argc, char **argv)
{
    long items = argc > 1 ? atol(argv[1]) : 500000;
    const char *db = argc > 2 ? argv[2] : "*";
    int runs = argc > 3 ? atoi(argv[3]) : 3;
    if (runs < 1)
        runs = 1;
    kura_store_config cfg = { .mem_limit = 4096ull << 20, .item_size_max = 1 << 20 };
    kura_store *st;
    kura_engine *e;
    char err[256];
    if (kura_store_open(db, &cfg, &st, err, sizeof(err)) != KURA_OK) {
        fprintf(stderr, "kura-turnbench: %s: %s\n", db, err);
        return 1;
    }
    kura_engine_config ecfg = { .item_size_max = 1 << 20 };
    if (engine_open(&e, st, &ecfg) != KURA_OK)
        return 1;
    kura_thread_stats stats[2];
    memset(stats, 0, sizeof(stats));
    kura_server_info info = { .nthreads = 1, .thread_stats = stats };
    pthread_mutex_init(&info.reset_lock, NULL);
    kura_cmdtab *cmds = kura_cmdtab_new();
    if (!cmds || listing_register(cmds) != KURA_OK || digest_register(cmds) != KURA_OK)
        return 1;
    kura_session_config sc = { .engine = e, .stats = &stats[0], .server = &info, .cmds = cmds };
    kura_session *s = kura_session_new(&sc);
    kura_buf in = { 0 }, out = { 0 };
    for (long i = 0; i < items; i++) {
        char line[64];
        int n = snprintf(line, sizeof(line), "set key:%08ld 0 0 10 noreply\r\n0123456789\r\n", i);
        kura_buf_append(&in, line, (size_t)n);
        if (in.len > (1 << 20) || i == items - 1) {
            answer(s, in.data, in.len, &out, NULL, NULL);
            in.len = 0;
        }
    }
    const char *reqs[] = {
        "lru_crawler metadump all\r\n", "keys\r\n", "keys limit=100000\r\n",
        "rget key:00000000 key:99999999 0 0 100000\r\n", "digest 256\r\n",
    };
    size_t nreq = sizeof(reqs) / sizeof(reqs[0]);
    char one[512];
    if (argc > 4) {
        snprintf(one, sizeof(one), "%s\r\n", argv[4]);
        reqs[0] = one;
        nreq = strcmp(argv[4], "-") ? 1 : 0;
    }
    printf("%-44s %7s %9s %9s %9s\n", "listing", "calls", "cpu s", "p99 ms", "max ms");
    double *times = NULL, *all = NULL;
    size_t cap = 0, acap = 0;
    for (size_t r = 0; r < nreq; r++) {
        double best = 0;
        size_t calls = 0, n = 0;
        for (int k = 0; k < runs; k++) {
            calls = answer(s, reqs[r], strlen(reqs[r]), &out, &times, &cap);
            double total = 0;
            for (size_t i = 0; i < calls; i++)
                total += times[i];
            if (k == 0 || total < best)
                best = total;
            if (n + calls > acap) {
                acap = (n + calls) * 2;
                if (!(all = realloc(all, acap * sizeof(*all))))
                    abort();
            }
            memcpy(all + n, times, calls * sizeof(*times));
            n += calls;
        }
        qsort(all, n, sizeof(*all), cmp_double);
        printf("%-44.*s %7zu %9.3f %9.2f %9.2f\n", (int)strlen(reqs[r]) - 2, reqs[r], calls,
               best, all[n * 99 / 100] * 1e3, all[n - 1] * 1e3);
        fflush(stdout);
    }
    free(times);
    free(all);
    kura_session_free(s);
    kura_cmdtab_free(cmds);
    engine_close(e);
    kura_buf_free(&in);
    kura_buf_free(&out);
    return 0;
}
