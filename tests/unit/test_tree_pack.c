/*
 * test_tree_pack.c - the B+ tree file no larger than it must be
 * (src/store/tree/: tree_insert.c's sharing with a sibling, tree_cache.c's
 * lowest-first allocation, tree_commit.c's cut of the file's free end and
 * sealing of the log, tree_pack.c's moves at a close; docs/formats.md
 * "Page reuse"), each with its negative check through a test hook:
 *  - keys in order fill their pages (the right-most split): the file is
 *    within 10% of the cells' bytes; with every split even, it is not;
 *  - keys in random order, with a small cache and a checkpoint every
 *    3,000 puts (copy-on-write moves most pages between two), end in
 *    a file at most 1.3 times the key-order one; without sharing, or with
 *    the file's free end kept, it is not;
 *  - rounds of deleting half the keys and putting them back do not grow
 *    the file (free pages reused); with freed pages never reused, it
 *    grows;
 *  - the log: after each checkpoint only the segment it began is left, and
 *    after a close the log is a segment header; with checkpoints that do
 *    not seal the segment, every record stays until the close.
 * Every file passes the structure check (no page both reachable and free,
 * none leaked) and holds every key.  Power-loss images over page reuse,
 * the cut of the file and the moves at a close are in test_powerloss.c
 * (every tree run closes its store inside the recorded run, and
 * test_tree_reuse_before_durable_is_caught is their negative check).
 */
#include <dirent.h>
#include <stdint.h>
#include <string.h>
#include <sys/stat.h>

#include "unit.h"
#include "hashdb_testlib.h"
#include "tree_testlib.h"
#include "kura/testhooks.h"

#define N 60000
#define SMALL "#psiz=4096#pccap=1m"
#define ROUNDS 4

static kura_clock CLK = { .now = 2000000 };

static int put_num(kura_store *s, uint32_t k, uint32_t v)
{
    char key[16], val[16];
    snprintf(key, sizeof(key), "%08u", k);
    snprintf(val, sizeof(val), "%08u", v % 100000000u);
    kura_item it = { .key = key, .klen = 8, .val = val, .vlen = 8 };
    return kura_store_put(s, &it, KURA_PUT_ANY, 0, &CLK);
}

static int del_num(kura_store *s, uint32_t k)
{
    char key[16];
    snprintf(key, sizeof(key), "%08u", k);
    return kura_store_del(s, key, 8, 0, &CLK);
}

typedef struct want { char v[16]; bool ok; } want;

static int want_cb(void *arg, const kura_item *it)
{
    want *w = arg;
    w->ok = it->vlen == 8 && memcmp(it->val, w->v, 8) == 0;
    return 0;
}

/* every key 1..n holds the value val(k) (val NULL: k): 0 or the number wrong */
static int check_all(kura_store *s, uint32_t n, const uint32_t *val)
{
    int bad = 0;
    for (uint32_t k = 1; k <= n; k++) {
        char key[16];
        want w = { .ok = false };
        snprintf(key, sizeof(key), "%08u", k);
        snprintf(w.v, sizeof(w.v), "%08u", (val ? val[k] : k) % 100000000u);
        if (s->ops->get(s, key, 8, &CLK, want_cb, &w) != KURA_OK || !w.ok)
            bad++;
    }
    return bad;
}

static uint64_t file_size(const char *path, const char *name)
{
    char f[600];
    struct stat st;
    snprintf(f, sizeof(f), "%s/%s", path, name);
    return stat(f, &st) == 0 ? (uint64_t)st.st_size : 0;
}

/* bytes of the log's segment files; *nseg their number */
static uint64_t log_bytes(const char *path, int *nseg)
{
    DIR *d = opendir(path);
    uint64_t sum = 0;
    *nseg = 0;
    for (struct dirent *e; d && (e = readdir(d));) {
        size_t l = strlen(e->d_name);
        if (l > 4 && strcmp(e->d_name + l - 4, ".seg") == 0) {
            sum += file_size(path, e->d_name);
            (*nseg)++;
        }
    }
    if (d)
        closedir(d);
    return sum;
}

static uint32_t *shuffled(uint32_t n, uint64_t seed)
{
    uint32_t *o = malloc((n + 1) * sizeof(*o));
    for (uint32_t i = 0; i < n; i++)
        o[i] = i + 1;
    uint64_t x = seed | 1;
    for (uint32_t i = n - 1; i > 0; i--) {
        x ^= x << 13; x ^= x >> 7; x ^= x << 17;
        uint32_t j = (uint32_t)(x % (i + 1));
        uint32_t t = o[i];
        o[i] = o[j];
        o[j] = t;
    }
    return o;
}

/* Loads keys 1..N (in order, or shuffled) into a new tree, a checkpoint
 * every N/20 puts, closes it,
 * reopens it to check every key and its structure; the tree file's bytes
 * (0 on a failure, said). */
static uint64_t load(const char *name, bool random)
{
    const char *p = tpath(name);
    kura_store *s = t_open_tree(p, SMALL);
    if (!s)
        return 0;
    uint32_t *o = random ? shuffled(N, 7) : NULL;
    int fails = 0;
    for (uint32_t i = 0; i < N; i++) {
        fails += put_num(s, o ? o[i] : i + 1, o ? o[i] : i + 1) != KURA_OK;
        /* checkpoints at fixed points (the background's depend on time):
         * copy-on-write moves most pages between two in random order */
        if (i % (N / 20) == N / 20 - 1)
            fails += btree_debug_checkpoint(s) != KURA_OK;
    }
    free(o);
    kura_store_close(s);
    CHECK_EQ_INT(fails, 0);
    if (!(s = t_open_tree(p, SMALL)))
        return 0;
    CHECK_EQ_INT(check_all(s, N, NULL), 0);
    CHECK_EQ_INT(check_tree(s), 0);
    kura_store_close(s);
    uint64_t bytes = file_size(p, "tree");
    printf("# %s: %llu bytes, %.1f a record\n", name, (unsigned long long)bytes,
           (double)bytes / N);
    return bytes;
}

/* An 8-byte key and value: a cell of 3 + 4 varints (cas up to 3 bytes) +
 * 16, and its 2-byte slot. */
#define CELL_BYTES (3 + 6 + 16 + 2)

static void test_key_order_fills_pages(void)
{
    uint64_t full = load("order", false);
    /* the cells' bytes, and a page header (40) a page of 4096 */
    double ideal = (double)N * CELL_BYTES * 4096.0 / 4056.0;
    CHECK(full > 0 && full <= ideal * 1.10);
    /* negative: every split even (and no sharing, which would fill the
     * left halves again), the pages half full */
    kura_test.tree_even_split = kura_test.tree_no_share = true;
    uint64_t half = load("order-even", false);
    kura_test.tree_even_split = kura_test.tree_no_share = false;
    CHECK(half > ideal * 1.10);
}

static void test_random_order_within_1_3(void)
{
    uint64_t ord = load("rorder", false);
    uint64_t rnd = load("random", true);
    printf("# random / key order: %.2f\n", ord ? (double)rnd / (double)ord : 0);
    CHECK(ord > 0 && rnd > 0 && rnd * 10 <= ord * 13);
    /* negative checks: without sharing a full leaf with a sibling; with
     * the file's free end kept (no cut, so the moves of the close are of
     * no use) */
    kura_test.tree_no_share = true;
    uint64_t noshare = load("random-noshare", true);
    kura_test.tree_no_share = false;
    printf("# without sharing: %.2f\n", ord ? (double)noshare / (double)ord : 0);
    CHECK(noshare * 10 > ord * 13);
    kura_test.tree_keep_tail = true;
    uint64_t keep = load("random-keeptail", true);
    kura_test.tree_keep_tail = false;
    printf("# free end kept: %.2f\n", ord ? (double)keep / (double)ord : 0);
    CHECK(keep * 10 > ord * 13);
}

/* Rounds of deleting every other key and putting them back, checkpoints
 * between: the file after the last round against the file after the load
 * (both after a close); returns last / first. */
static double churn(const char *name, int rounds)
{
    const char *p = tpath(name);
    kura_store *s = t_open_tree(p, SMALL);
    if (!s)
        return 0;
    uint32_t *val = calloc(N + 1, sizeof(*val));
    uint32_t *o = shuffled(N, 11);
    for (uint32_t i = 0; i < N; i++)
        put_num(s, o[i], val[o[i]] = o[i]);
    kura_store_close(s);
    uint64_t first = file_size(p, "tree");
    int fails = 0;
    for (int round = 1; round <= rounds; round++) {
        if (!(s = t_open_tree(p, SMALL)))
            break;
        for (uint32_t i = (uint32_t)round % 2; i < N; i += 2)
            fails += del_num(s, o[i]) != KURA_OK;
        fails += btree_debug_checkpoint(s) != KURA_OK;
        for (uint32_t i = (uint32_t)round % 2; i < N; i += 2)
            fails += put_num(s, o[i], val[o[i]] = o[i] + 1000000u * (uint32_t)round) != KURA_OK;
        kura_store_close(s);
    }
    CHECK_EQ_INT(fails, 0);
    uint64_t last = file_size(p, "tree");
    if ((s = t_open_tree(p, SMALL))) {
        CHECK_EQ_INT(check_all(s, N, val), 0);
        if (!kura_test.tree_no_reuse)   /* (which loses the pages it frees) */
            CHECK_EQ_INT(check_tree(s), 0);
        kura_store_close(s);
    }
    free(o);
    free(val);
    printf("# %s: %llu bytes after the load, %llu after %d rounds\n", name,
           (unsigned long long)first, (unsigned long long)last, rounds);
    return first ? (double)last / (double)first : 0;
}

static void test_free_pages_reused(void)
{
    double r = churn("churn", ROUNDS);
    CHECK(r > 0 && r <= 1.15);
    /* negative: freed pages never reused (the switch stays on through the
     * last open, which frees pages too; one round: the file grows fast) */
    kura_test.tree_no_reuse = true;
    double nr = churn("churn-noreuse", 1);
    kura_test.tree_no_reuse = false;
    CHECK(nr > 1.15);
}

/* Puts 40000 records of 100 bytes (about 5 MB of log), a checkpoint every
 * 4000; returns the log's bytes after the close (0 on a failure). */
static uint64_t log_run(const char *name, int *worst_nseg)
{
    const char *p = tpath(name);
    const char *params = "#psiz=4096#ckpt=256k";
    kura_store *s = t_open_tree(p, params);
    if (!s)
        return 0;
    char key[32], val[100];
    memset(val, 'v', sizeof(val));
    int fails = 0;
    *worst_nseg = 0;
    for (uint32_t i = 1; i <= 40000; i++) {
        snprintf(key, sizeof(key), "log%08u", i * 7919u % 40009u);
        kura_item it = { .key = key, .klen = strlen(key), .val = val, .vlen = sizeof(val) };
        fails += kura_store_put(s, &it, KURA_PUT_ANY, 0, &CLK) != KURA_OK;
        if (i % 4000 == 0) {
            fails += btree_debug_checkpoint(s) != KURA_OK;
            int nseg;
            (void)log_bytes(p, &nseg);
            if (nseg > *worst_nseg)
                *worst_nseg = nseg;
        }
    }
    kura_store_close(s);
    CHECK_EQ_INT(fails, 0);
    int nseg;
    uint64_t bytes = log_bytes(p, &nseg);
    if ((s = t_open_tree(p, params))) {
        kura_store_usage u;
        s->ops->usage(s, &u);
        CHECK_EQ_INT(u.curr_items, 40000);
        CHECK_EQ_INT(check_tree(s), 0);
        kura_store_close(s);
    }
    printf("# %s: %llu bytes of log in %d segments after the close, at most %d segments "
           "after a checkpoint\n", name, (unsigned long long)bytes, nseg, *worst_nseg);
    return bytes;
}

static void test_wal_bounded_by_checkpoints(void)
{
    int worst;
    uint64_t b = log_run("wal", &worst);
    CHECK(b > 0 && b <= 4096);
    CHECK_EQ_INT(worst, 1);
    /* negative: checkpoints that leave the segment as it is */
    kura_test.tree_keep_wal = true;
    uint64_t kept = log_run("wal-kept", &worst);
    kura_test.tree_keep_wal = false;
    CHECK(kept > 4000000);
}

int main(void)
{
    t_setup();
    /* Checkpoints where the tests and a full cache ask only: the background
     * thread's come by a timer, so the sizes measured here would depend on
     * how fast the test runs (a sanitizer build beside other suites). */
    kura_test.bg_hold = true;
    RUN(test_key_order_fills_pages);
    RUN(test_random_order_within_1_3);
    RUN(test_free_pages_reused);
    RUN(test_wal_bounded_by_checkpoints);
    t_teardown();
    UNIT_DONE();
}
