/*
 * tt_misc.c - Tokyo Tyrant's "misc" and "stat" commands.
 *
 * misc names a function and passes it a list of arguments; the reply is
 * [status][count] and count elements ([be32 length][bytes]).  kura
 * answers the functions Tokyo Cabinet's hash database answers (tcadbmisc
 * on a .tch), the same way: put putkeep putcat out get putlist outlist
 * getlist getpart iterinit iternext sync optimize vanish error defrag
 * cacheclear regex; "range", which only the B+ tree answers there,
 * is answered on kura's B+ tree and refused elsewhere.  Everything else
 * fails as ttserver fails it on a hash database, [1][0]: putdup and
 * putdupback (kura keeps one value a key), the table database's setindex,
 * search and genuid, and any unknown name.  misc's option RDBMONOULOG
 * (do not log the change) is accepted and has no effect: kura's update
 * log records every change.
 *
 * stat is ttserver's text of "name\tvalue\n" lines, with kura's values
 * where they map (docs/protocol.md lists them).
 */
#include <ctype.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/resource.h>
#include <time.h>

#include "tt_int.h"

/* The arguments, read in order. */
typedef struct misc_args {
    const char *p;
    uint32_t left;
} misc_args;

static bool next_arg(misc_args *a, const char **v, size_t *n)
{
    if (a->left == 0)
        return false;
    *n = get_be32(a->p);
    *v = a->p + 4;
    a->p += 4 + *n;
    a->left--;
    return true;
}

/* Tokyo's tcatoi: leading blanks, a sign, digits; anything else ends it. */
static long long tc_atoi(const char *p, size_t n)
{
    size_t i = 0;
    while (i < n && isspace((unsigned char)p[i]))
        i++;
    bool neg = false;
    if (i < n && (p[i] == '-' || p[i] == '+'))
        neg = p[i++] == '-';
    long long v = 0;
    for (; i < n && p[i] >= '0' && p[i] <= '9' && v < (1LL << 40); i++)
        v = v * 10 + (p[i] - '0');
    return neg ? -v : v;
}

typedef struct misc_out {
    tt_req *r;
    size_t head;                        /* where [status][count] is */
    uint32_t count;
} misc_out;

static bool add(misc_out *m, const void *p, size_t n)
{
    if (tt_elem(m->r->out, p, n)) {
        m->count++;
        return true;
    }
    m->r->s->close = true;
    return false;
}

/* A value into the reply, straight from the store. */
static int emit_value(void *arg, const kura_item *it)
{
    return add(arg, it->val, it->vlen) ? 0 : KURA_ENOMEM;
}

typedef struct pair_arg {
    misc_out *m;
    const char *key;
    size_t klen;
} pair_arg;

static int emit_pair(void *arg, const kura_item *it)
{
    pair_arg *a = arg;
    return add(a->m, a->key, a->klen) && add(a->m, it->val, it->vlen) ? 0 : KURA_ENOMEM;
}

static bool key_ok(const tt_req *r, size_t n) { return proto_key_ok(n, TT_KEY_MAX(r->s)); }

/* cmd KURA_CMD_APPEND: putcat's append, or add when absent.  The key and
 * the size are checked here, where the arguments are parsed. */
static int set(tt_req *r, int cmd, const char *k, size_t kl, const char *v, size_t vl)
{
    if (!key_ok(r, kl))
        return KURA_NOT_STORED;
    if (!engine_item_fits(r->s->engine, kl, vl, 0))
        return KURA_ETOOBIG;
    return cmd == KURA_CMD_APPEND ? tt_put_cat(r, k, kl, v, vl)
                                  : tt_store(r, cmd, k, kl, v, vl);
}

static int del(tt_req *r, const char *k, size_t kl)
{
    if (!key_ok(r, kl))
        return KURA_NOTFOUND;
    r->s->dirty = true;
    return engine_delete(r->s->engine, r->s->stats, k, kl, NULL);
}

static int get(tt_req *r, const char *k, size_t kl, kura_item_fn fn, void *arg)
{
    if (!key_ok(r, kl))
        return KURA_NOTFOUND;
    return engine_get(r->s->engine, r->s->stats, k, kl, NULL, fn, arg, NULL);
}

static bool is(const char *name, size_t n, const char *lit)
{
    return strlen(lit) == n && memcmp(name, lit, n) == 0;
}

/* A misc function: true if it succeeded (its elements are in the reply),
 * false if it failed; a paused walk leaves st->walk.kind set.  name is
 * the function's name as asked (one function serves several). */
typedef bool misc_fn(tt_req *r, const char *name, misc_args *a, misc_out *m);

/* put, putkeep, putcat: key, value */
static bool misc_put(tt_req *r, const char *name, misc_args *a, misc_out *m)
{
    (void)m;
    const char *k = NULL, *v = NULL;
    size_t kl = 0, vl = 0;
    if (a->left < 2)
        return false;
    next_arg(a, &k, &kl);
    next_arg(a, &v, &vl);
    int cmd = name[3] == 'k' ? KURA_CMD_ADD : name[3] == 'c' ? KURA_CMD_APPEND
                                                               : KURA_CMD_SET;
    return set(r, cmd, k, kl, v, vl) == KURA_STORED;
}

static bool misc_del(tt_req *r, const char *name, misc_args *a, misc_out *m)
{
    (void)name, (void)m;
    const char *k = NULL;
    size_t kl = 0;
    return a->left >= 1 && next_arg(a, &k, &kl) && del(r, k, kl) == KURA_OK;
}

static bool misc_get(tt_req *r, const char *name, misc_args *a, misc_out *m)
{
    (void)name;
    const char *k = NULL;
    size_t kl = 0;
    return a->left >= 1 && next_arg(a, &k, &kl) && get(r, k, kl, emit_value, m) == KURA_OK;
}

static bool misc_putlist(tt_req *r, const char *name, misc_args *a, misc_out *m)
{
    (void)name, (void)m;
    const char *k = NULL, *v = NULL;
    size_t kl = 0, vl = 0;
    while (a->left >= 2) {
        next_arg(a, &k, &kl);
        next_arg(a, &v, &vl);
        if (set(r, KURA_CMD_SET, k, kl, v, vl) != KURA_STORED)
            return false;
    }
    return true;
}

static bool misc_outlist(tt_req *r, const char *name, misc_args *a, misc_out *m)
{
    (void)name, (void)m;
    const char *k = NULL;
    size_t kl = 0;
    while (next_arg(a, &k, &kl))
        if (del(r, k, kl) < 0)
            return false;
    return true;
}

static bool misc_getlist(tt_req *r, const char *name, misc_args *a, misc_out *m)
{
    (void)name;
    const char *k = NULL;
    size_t kl = 0;
    while (next_arg(a, &k, &kl)) {
        pair_arg p = { m, k, kl };
        if (get(r, k, kl, emit_pair, &p) < 0)
            return false;
    }
    return true;
}

/* getpart: key [offset [length]] */
static bool misc_getpart(tt_req *r, const char *name, misc_args *a, misc_out *m)
{
    (void)name;
    const char *k = NULL, *v = NULL;
    size_t kl = 0, vl = 0;
    if (!next_arg(a, &k, &kl) || !key_ok(r, kl) || tt_read(r, k, kl) != KURA_OK)
        return false;
    long long off = 0, len = -1;
    if (next_arg(a, &v, &vl))
        off = tc_atoi(v, vl);
    if (next_arg(a, &v, &vl))
        len = tc_atoi(v, vl);
    if (off < 0)
        off = 0;
    kura_buf *val = &r->st->scratch;
    if ((size_t)off >= val->len)
        return false;
    size_t n = val->len - (size_t)off;
    if (len >= 0 && (size_t)len < n)
        n = (size_t)len;
    return add(m, val->data + off, n);
}

static bool misc_iterinit(tt_req *r, const char *name, misc_args *a, misc_out *m)
{
    (void)name, (void)m;
    const char *k = NULL;
    size_t kl = 0;
    if (next_arg(a, &k, &kl))
        tt_iterinit(r, k, kl);
    else
        tt_iterinit(r, NULL, 0);
    return true;
}

static bool misc_iternext(tt_req *r, const char *name, misc_args *a, misc_out *m)
{
    (void)name, (void)a;
    const char *key;
    size_t klen;
    if (tt_iternext(r, &key, &klen) != KURA_OK)
        return false;
    char kc[KURA_KEY_MAX];          /* the next call may move the iterator's batch */
    memcpy(kc, key, klen);
    if (!add(m, kc, klen))
        return false;
    get(r, kc, klen, emit_value, m);    /* removed meanwhile: the key alone */
    return true;
}

static bool misc_sync(tt_req *r, const char *name, misc_args *a, misc_out *m)
{
    (void)name, (void)a, (void)m;
    return engine_sync(r->s->engine) >= 0;
}

static bool misc_vanish(tt_req *r, const char *name, misc_args *a, misc_out *m)
{
    (void)name, (void)a, (void)m;
    r->s->dirty = true;
    return engine_flush_all(r->s->engine, r->s->stats, 0) >= 0;
}

/* optimize, defrag, cacheclear: kura compacts and caches by itself */
static bool misc_nothing(tt_req *r, const char *name, misc_args *a, misc_out *m)
{
    (void)r, (void)name, (void)a, (void)m;
    return true;
}

static bool misc_error(tt_req *r, const char *name, misc_args *a, misc_out *m)
{
    (void)r, (void)name, (void)a;
    return add(m, "0: success", 10);
}

/* regex: pattern [max]; range: [start [max [end]]], on an ordered store
 * only.  The walk writes the whole reply itself (m->head SIZE_MAX). */
static bool misc_walk(tt_req *r, const char *name, misc_args *a, misc_out *m)
{
    const char *v = NULL;
    size_t vl = 0;
    bool range = name[1] == 'a';
    if (range && !engine_list_ordered(r->s->engine))
        return false;               /* a hash database has no range */
    const char *b = NULL, *e = NULL;
    size_t bl = 0, el = 0;
    long long max = 0;
    if (!next_arg(a, &b, &bl)) {
        if (!range)
            return false;
        b = NULL;
    }
    if (next_arg(a, &v, &vl))
        max = tc_atoi(v, vl);
    if (range && next_arg(a, &e, &el) && !key_ok(r, el))
        return false;
    if (range && b && !key_ok(r, bl))
        return false;
    kura_list_spec spec = { 0 };
    if (range) {
        spec = (kura_list_spec){ .start = b, .slen = bl, .end = e, .elen = el,
                                 .end_open = true };
    }
    size_t mark = r->out->len;
    r->out->len = m->head;          /* the walk writes the whole reply itself */
    if (!tt_walk_run(r, range ? TT_WALK_RANGE : TT_WALK_REGEX, &spec,
                     max < 1 ? UINT64_MAX : (uint64_t)max, b, bl)) {
        r->out->len = mark;
        return true;                /* paused: st->walk.kind says so */
    }
    m->head = SIZE_MAX;             /* answered */
    return true;
}

/* The functions kura answers; any other name (putdup, setindex, search,
 * genuid, unknown) fails. */
static const struct {
    const char *name;
    misc_fn *fn;
} misc_fns[] = {
    { "put", misc_put }, { "putkeep", misc_put }, { "putcat", misc_put },
    { "out", misc_del }, { "get", misc_get }, { "putlist", misc_putlist },
    { "outlist", misc_outlist }, { "getlist", misc_getlist }, { "getpart", misc_getpart },
    { "iterinit", misc_iterinit }, { "iternext", misc_iternext }, { "sync", misc_sync },
    { "vanish", misc_vanish }, { "optimize", misc_nothing }, { "defrag", misc_nothing },
    { "cacheclear", misc_nothing }, { "error", misc_error }, { "regex", misc_walk },
    { "range", misc_walk },
};

/* Runs the function named: true if it succeeded (its elements are in the
 * reply), false if it failed; a paused walk leaves st->walk.kind set. */
static bool run(tt_req *r, const char *name, size_t nlen, misc_args a, misc_out *m)
{
    for (size_t i = 0; i < sizeof(misc_fns) / sizeof(misc_fns[0]); i++)
        if (is(name, nlen, misc_fns[i].name))
            return misc_fns[i].fn(r, name, &a, m);
    return false;                       /* putdup, setindex, search, genuid, unknown */
}

void tt_misc(tt_req *r)
{
    misc_args a = { r->body + r->f[0], r->f[2] };
    misc_out m = { r, r->out->len, 0 };
    if (!tt_code_u32(r, 0, 0))
        return;
    bool ok = run(r, r->body, r->f[0], a, &m);
    if (r->st->walk.kind) {
        r->out->len = m.head;           /* paused: nothing of it yet */
        return;
    }
    if (m.head == SIZE_MAX || r->s->close)
        return;
    if (!ok) {
        r->out->len = m.head;
        tt_code_u32(r, 1, 0);
        return;
    }
    put_be32((unsigned char *)r->out->data + m.head + 1, m.count);
}

/* ---- stat ---------------------------------------------------------------------------- */

static const char *db_type(const char *backend)
{
    if (strcmp(backend, "tree") == 0)
        return "B+ tree";
    if (strcmp(backend, "cache") == 0)
        return "on-memory hash";
    return "hash";
}

void tt_stat(tt_req *r)
{
    static const char *const names[] = {
#define TT_COUNTER_NAME(name) #name,
        TT_COUNTERS(TT_COUNTER_NAME)
#undef TT_COUNTER_NAME
    };
    kura_session *s = r->s;
    kura_server_info *si = s->server;
    struct timespec now;
    clock_gettime(CLOCK_REALTIME, &now);
    double t = (double)now.tv_sec + now.tv_nsec / 1e9;
    kura_store_usage u;
    engine_usage_exact(s->engine, &u);
    struct rusage ru;
    getrusage(RUSAGE_SELF, &ru);
    double load[1] = { 0 };
    if (getloadavg(load, 1) < 1)
        load[0] = 0;
    char buf[4096];
    int n = snprintf(buf, sizeof(buf),
                     "version\t1.1.41\nlibver\t324\nprotver\t0.91\nos\tLinux\n"
                     "time\t%.6f\npid\t%lld\nsid\t%lu\ntype\t%s\npath\t%s\n"
                     "rnum\t%llu\nsize\t%llu\nbigend\t0\nfd\t%d\nloadavg\t%.6f\n"
                     "ru_user\t%.6f\nru_sys\t%.6f\nru_real\t%.6f\n",
                     t, si ? (long long)si->pid : 0LL, si ? (unsigned long)si->sid : 0UL, db_type(engine_backend(s->engine)),
                     si && si->dbname ? si->dbname : "*", (unsigned long long)u.curr_items,
                     (unsigned long long)u.bytes, s->conn_id, load[0],
                     ru.ru_utime.tv_sec + ru.ru_utime.tv_usec / 1e6,
                     ru.ru_stime.tv_sec + ru.ru_stime.tv_usec / 1e6,
                     si ? t - (double)si->started : 0.0);
    for (int i = 0; i < TTC_COUNT && n > 0 && (size_t)n < sizeof(buf); i++)
        n += snprintf(buf + n, sizeof(buf) - (size_t)n, "cnt_%s\t%llu\n", names[i],
                      (unsigned long long)atomic_load_explicit(&tt_counts[i],
                                                               memory_order_relaxed));
    if (n < 0 || (size_t)n >= sizeof(buf))
        n = 0;
    if (tt_code_u32(r, 0, (uint32_t)n) && !kura_buf_append(r->out, buf, (size_t)n))
        s->close = true;
}
