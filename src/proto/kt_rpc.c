/*
 * kt_rpc.c - Kyoto Tycoon's RPC procedures on one record (POST
 * /rpc/NAME, or GET with a query string), and the dispatch of every
 * procedure: the parameters are st->in (kt.c parsed them), the output a
 * map written as TSV (kt_tsv.c) with ktserver's status: 200 success, 400
 * invalid parameters, 450 logical inconsistency (no record, a record in
 * the way, a cas mismatch, a value that is no number), 500 an internal
 * error, 501 not implemented; a failure's output holds ERROR.
 *
 * Values and expiry are Kyoto Tycoon's: xt is seconds from now, or an
 * absolute time when negative (kt_exptime); "xt" in a reply is the
 * absolute time.  increment keeps an 8-byte big-endian integer and
 * increment_double a 16-byte fixed-point number (8 bytes integer part,
 * 8 bytes of fraction in units of 1e-15, both big-endian), each read and
 * written under the key's lock (engine_modify).  Records are stored with
 * flags 0, so memcached's get reads them as they are (docs/protocol.md).
 * The procedures on several records and the match_* walks are in
 * kt_rpc2.c, the cursors in kt_cur.c.
 */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>

#include "kt_int.h"

/* ---- parameters ------------------------------------------------------------------------- */

/* Kyoto Cabinet's atoi: spaces, a sign, digits up to the first other. */
int64_t kt_atoi(kt_span v)
{
    size_t i = 0;
    while (i < v.n && (v.p[i] == ' ' || v.p[i] == '\t'))
        i++;
    bool neg = i < v.n && v.p[i] == '-';
    if (i < v.n && (v.p[i] == '-' || v.p[i] == '+'))
        i++;
    uint64_t n = 0;
    for (; i < v.n && v.p[i] >= '0' && v.p[i] <= '9'; i++)
        n = n > UINT64_MAX / 10 ? UINT64_MAX : n * 10 + (uint64_t)(v.p[i] - '0');
    if (n > (uint64_t)INT64_MAX)
        return neg ? INT64_MIN : INT64_MAX;
    return neg ? -(int64_t)n : (int64_t)n;
}

static double kt_atof(kt_span v)
{
    char buf[64];
    size_t n = v.n < sizeof(buf) - 1 ? v.n : sizeof(buf) - 1;
    memcpy(buf, v.p, n);
    buf[n] = '\0';
    return strtod(buf, NULL);
}

int64_t kt_param_xt(const kt_req *r)
{
    kt_span v = kt_param(&r->st->in, "xt");
    return v.p ? kt_atoi(v) : INT64_MAX;
}

int kt_error(kt_req *r, int code, const char *msg)
{
    kt_out_set(&r->st->out, "ERROR", 5, msg, strlen(msg));
    return code;
}

/* A store result as a status: 450 for no record, a record in the way or
 * a logical failure; 500 otherwise. */
int kt_db_fail(kt_req *r, int rc, bool logic)
{
    kt_error(r, 0, kt_db_error(rc));
    return logic ? 450 : 500;
}

/* ---- the procedures on one record --------------------------------------------------------- */

static bool key_of(kt_req *r, kt_span *k)
{
    *k = kt_param(&r->st->in, "key");
    return k->p != NULL;
}

static int rpc_store(kt_req *r, int cmd)
{
    kura_session *s = r->s;
    kt_span k, v = kt_param(&r->st->in, "value");
    if (!key_of(r, &k) || !v.p)
        return kt_error(r, 400, "invalid parameters");
    if (!proto_key_ok(k.n, KT_KEY_MAX(r->s)))
        return kt_db_fail(r, KURA_EINVAL, false);
    if (!engine_item_fits(s->engine, k.n, v.n, 0))
        return kt_db_fail(r, KURA_ETOOBIG, false);
    kura_item it = { .key = k.p, .klen = k.n, .val = v.p, .vlen = v.n,
                     .exptime = kt_exptime(s->engine, kt_param_xt(r)) };
    s->dirty = true;
    KURA_STAT_INC(s->stats, cmd_set);
    int rc = engine_store(s->engine, s->stats, cmd, &it, NULL, NULL);
    if (rc == KURA_STORED)
        return 200;
    if (rc == KURA_NOT_STORED)
        return kt_db_fail(r, cmd == KURA_CMD_ADD ? KURA_EXISTS : KURA_NOTFOUND, true);
    return kt_db_fail(r, rc, false);
}

typedef struct mod_arg {
    kura_engine *e;
    int64_t exptime;
    kt_span add;                        /* append's */
    int64_t num, orig;                  /* increment's */
    double dnum, dorig;                 /* increment_double's */
    unsigned char buf[16];
    int64_t result;
    double dresult;
} mod_arg;

/* append: the value added to the record's, or the record made of it. */
static int append_fn(void *arg, const kura_item *cur, engine_mod *out)
{
    mod_arg *a = arg;
    if (cur) {
        out->part[0].base = cur->val;
        out->part[0].len = cur->vlen;
    }
    out->part[1].base = a->add.p;
    out->part[1].len = a->add.n;
    out->exptime = a->exptime;
    return KURA_OK;
}

static int modify(kt_req *r, const kt_span *k, engine_modify_fn fn, void *a)
{
    kura_session *s = r->s;
    if (!proto_key_ok(k->n, KT_KEY_MAX(r->s)))
        return KURA_EINVAL;
    s->dirty = true;
    KURA_STAT_INC(s->stats, cmd_set);
    return engine_modify(s->engine, k->p, k->n, fn, a, NULL);
}

static int rpc_append(kt_req *r)
{
    kt_span k;
    mod_arg a = { .add = kt_param(&r->st->in, "value") };
    if (!key_of(r, &k) || !a.add.p)
        return kt_error(r, 400, "invalid parameters");
    a.exptime = kt_exptime(r->s->engine, kt_param_xt(r));
    int rc = modify(r, &k, append_fn, &a);
    return rc == KURA_OK ? 200 : kt_db_fail(r, rc, false);
}

/* increment: Kyoto Cabinet's rules.  A record of other than 8 bytes
 * fails; orig INT64_MIN ("try") fails on a missing record, INT64_MAX
 * ("set") sets num whatever is there. */
static int incr_fn(void *arg, const kura_item *cur, engine_mod *out)
{
    mod_arg *a = arg;
    int64_t n = a->num;
    if (cur) {
        if (cur->vlen != 8)
            return KURA_EXISTS;         /* logical inconsistency */
        if (a->orig != INT64_MAX) {
            int64_t old = (int64_t)get_be64(cur->val);
            if (a->num == 0) {
                a->result = old;
                return KURA_NOT_STORED; /* nothing to change */
            }
            n = (int64_t)((uint64_t)old + (uint64_t)a->num);
        }
    } else {
        if (a->orig == INT64_MIN)
            return KURA_EXISTS;
        if (a->orig != INT64_MAX)
            n = (int64_t)((uint64_t)n + (uint64_t)a->orig);
    }
    a->result = n;
    put_be64(a->buf, (uint64_t)n);
    out->part[0].base = a->buf;
    out->part[0].len = 8;
    out->exptime = a->exptime;
    return KURA_OK;
}

#define KT_DECUNIT 1000000000000000LL

static double fixed_to_double(const unsigned char *p)
{
    int64_t integ = (int64_t)get_be64(p), fract = (int64_t)get_be64(p + 8);
    if (integ == INT64_MIN && fract == INT64_MIN)
        return NAN;
    if (integ == INT64_MAX)
        return HUGE_VAL;
    if (integ == INT64_MIN)
        return -HUGE_VAL;
    return (double)integ + (double)fract / KT_DECUNIT;
}

static void double_to_fixed(double d, unsigned char *p)
{
    int64_t integ, fract;
    if (isnan(d)) {
        integ = fract = INT64_MIN;
    } else if (isinf(d)) {
        integ = d > 0 ? INT64_MAX : INT64_MIN;
        fract = 0;
    } else {
        double ip;
        double fp = modf(d, &ip);
        integ = (int64_t)ip;
        fract = (int64_t)(fp * KT_DECUNIT);
    }
    put_be64(p, (uint64_t)integ);
    put_be64(p + 8, (uint64_t)fract);
}

static int incr_double_fn(void *arg, const kura_item *cur, engine_mod *out)
{
    mod_arg *a = arg;
    double n = a->dnum;
    bool set = isinf(a->dorig) && a->dorig > 0;
    if (cur) {
        if (cur->vlen != 16)
            return KURA_EXISTS;
        if (!set) {
            double old = fixed_to_double(cur->val);
            if (isnan(old) || isinf(old))
                return KURA_EXISTS;
            if (n == 0.0) {
                a->dresult = old;
                return KURA_NOT_STORED;
            }
            n += old;
        }
    } else {
        if (isinf(a->dorig) && a->dorig < 0)
            return KURA_EXISTS;
        if (!set)
            n += a->dorig;
    }
    a->dresult = n;
    double_to_fixed(n, a->buf);
    out->part[0].base = a->buf;
    out->part[0].len = 16;
    out->exptime = a->exptime;
    return KURA_OK;
}

/* increment and increment_double: num added, orig where there is no
 * record ("try": fail, "set": num whatever is there). */
static int rpc_increment(kt_req *r, bool dbl)
{
    kt_span k, n = kt_param(&r->st->in, "num"), o = kt_param(&r->st->in, "orig");
    if (!key_of(r, &k) || !n.p)
        return kt_error(r, 400, "invalid parameters");
    bool try = kt_span_is(o, "try"), set = kt_span_is(o, "set");
    mod_arg a = { .exptime = kt_exptime(r->s->engine, kt_param_xt(r)) };
    if (dbl) {
        a.dnum = kt_atof(n);
        a.dorig = !o.p ? 0 : try ? -INFINITY : set ? INFINITY : kt_atof(o);
    } else {
        a.num = kt_atoi(n);
        a.orig = !o.p ? 0 : try ? INT64_MIN : set ? INT64_MAX : kt_atoi(o);
    }
    int rc = modify(r, &k, dbl ? incr_double_fn : incr_fn, &a);
    if (rc == KURA_OK || rc == KURA_NOT_STORED) {
        if (dbl)
            kt_out_setf(&r->st->out, "num", "%f", a.dresult);
        else
            kt_out_setf(&r->st->out, "num", "%lld", (long long)a.result);
        return 200;
    }
    if (rc == KURA_EXISTS) {
        kt_error(r, 0, "DB: 8: logical inconsistency: logical inconsistency");
        return 450;
    }
    return kt_db_fail(r, rc, false);
}

static int take_rec(void *arg, const kura_item *it)
{
    rec *g = arg;
    g->exptime = it->exptime;
    g->vlen = it->vlen;
    g->cas = it->cas;
    if (!g->want_val)
        return 0;
    g->val->len = 0;
    return kura_buf_append(g->val, it->val, it->vlen) ? 0 : KURA_ENOMEM;
}

int kt_read(kt_req *r, const char *key, size_t klen, rec *g)
{
    if (!proto_key_ok(klen, KT_KEY_MAX(r->s)))
        return KURA_NOTFOUND;
    return engine_get(r->s->engine, r->s->stats, key, klen, NULL, take_rec, g, NULL);
}

/* get, check and seize (the value taken and the record removed, the
 * removal on the cas read, so a change in between is not lost). */
static int rpc_get(kt_req *r, bool value, bool seize)
{
    kt_span k;
    if (!key_of(r, &k))
        return kt_error(r, 400, "invalid parameters");
    rec g = { &r->st->reply, value, 0, 0, 0 };
    for (int tries = 0;; tries++) {
        int rc = kt_read(r, k.p, k.n, &g);
        if (rc != KURA_OK)
            return kt_db_fail(r, rc, rc == KURA_NOTFOUND);
        if (!seize)
            break;
        r->s->dirty = true;
        rc = engine_delete(r->s->engine, r->s->stats, k.p, k.n,
                           &(engine_delete_opts){ .cas_in = g.cas });
        if (rc == KURA_OK)
            break;
        if (rc != KURA_EXISTS || tries > 16)
            return kt_db_fail(r, rc == KURA_EXISTS ? KURA_ESYS : rc, rc == KURA_NOTFOUND);
    }
    if (value)
        kt_out_set(&r->st->out, "value", 5, r->st->reply.data, r->st->reply.len);
    else
        kt_out_setf(&r->st->out, "vsiz", "%llu", (unsigned long long)g.vlen);
    if (g.exptime)
        kt_out_setf(&r->st->out, "xt", "%lld", (long long)g.exptime);
    return 200;
}

static int rpc_remove(kt_req *r)
{
    kt_span k;
    if (!key_of(r, &k))
        return kt_error(r, 400, "invalid parameters");
    int rc = KURA_NOTFOUND;
    if (proto_key_ok(k.n, KT_KEY_MAX(r->s))) {
        r->s->dirty = true;
        rc = engine_delete(r->s->engine, r->s->stats, k.p, k.n, NULL);
    }
    return rc == KURA_OK ? 200 : kt_db_fail(r, rc, rc == KURA_NOTFOUND);
}

/* cas: oval must be the value (absent: no record must be there), nval
 * becomes it (absent: the record is removed). */
typedef struct cas_arg {
    kt_span oval, nval;
    int64_t exptime;
} cas_arg;

static int cas_fn(void *arg, const kura_item *cur, engine_mod *out)
{
    cas_arg *a = arg;
    bool match = a->oval.p ? cur && cur->vlen == a->oval.n &&
                                 memcmp(cur->val, a->oval.p, a->oval.n) == 0
                           : !cur;
    if (!match)
        return KURA_EXISTS;
    out->part[0].base = a->nval.p;
    out->part[0].len = a->nval.n;
    out->exptime = a->exptime;
    return KURA_OK;
}

static int rpc_cas(kt_req *r)
{
    kt_span k;
    if (!key_of(r, &k))
        return kt_error(r, 400, "invalid parameters");
    cas_arg a = { kt_param(&r->st->in, "oval"), kt_param(&r->st->in, "nval"),
                  kt_exptime(r->s->engine, kt_param_xt(r)) };
    int rc;
    if (a.nval.p) {
        rc = modify(r, &k, cas_fn, &a);
    } else {
        rec g = { &r->st->reply, true, 0, 0, 0 };
        rc = kt_read(r, k.p, k.n, &g);
        bool match = a.oval.p ? rc == KURA_OK && r->st->reply.len == a.oval.n &&
                                    memcmp(r->st->reply.data, a.oval.p, a.oval.n) == 0
                              : rc == KURA_NOTFOUND;
        if (rc < 0)
            return kt_db_fail(r, rc, false);
        rc = !match ? KURA_EXISTS : rc == KURA_NOTFOUND ? KURA_OK
             : engine_delete(r->s->engine, r->s->stats, k.p, k.n,
                             &(engine_delete_opts){ .cas_in = g.cas });
        if (rc == KURA_NOTFOUND)
            rc = KURA_EXISTS;
        r->s->dirty = true;
    }
    if (rc == KURA_OK)
        return 200;
    if (rc == KURA_EXISTS) {
        kt_error(r, 0, "DB: 8: logical inconsistency: status conflict");
        return 450;
    }
    return kt_db_fail(r, rc, false);
}

/* ---- the server's procedures --------------------------------------------------------------- */

static int rpc_status(kt_req *r)
{
    kura_session *s = r->s;
    kura_store_usage u;
    engine_usage_exact(s->engine, &u);
    kt_outmap *o = &r->st->out;
    kt_out_setf(o, "count", "%llu", (unsigned long long)u.curr_items);
    kt_out_setf(o, "size", "%llu", (unsigned long long)u.bytes);
    kt_out_setf(o, "path", "%s", s->server->dbname ? s->server->dbname : "*");
    kt_out_setf(o, "type", "%s", engine_backend(s->engine));
    kt_out_setf(o, "realtype", "%s", engine_backend(s->engine));
    return 200;
}

static int rpc_report(kt_req *r)
{
    kura_session *s = r->s;
    kura_server_info *si = s->server;
    kura_store_usage u;
    engine_usage_exact(s->engine, &u);
    kt_outmap *o = &r->st->out;
    int64_t now = engine_now(s->engine);
    kt_out_setf(o, "db_0", "count=%llu size=%llu path=%s", (unsigned long long)u.curr_items,
                (unsigned long long)u.bytes, si->dbname ? si->dbname : "*");
    kt_out_setf(o, "db_total_count", "%llu", (unsigned long long)u.curr_items);
    kt_out_setf(o, "db_total_size", "%llu", (unsigned long long)u.bytes);
    kt_out_setf(o, "serv_conn_count", "%llu",
                (unsigned long long)atomic_load(&si->curr_connections));
    kt_out_setf(o, "serv_task_count", "0");
    kt_out_setf(o, "serv_thread_count", "%d", si->nthreads);
    kt_out_setf(o, "serv_current_time", "%lld.000000", (long long)now);
    kt_out_setf(o, "serv_running_term", "%lld.000000", (long long)(now - si->started));
    kt_out_setf(o, "serv_proc_id", "%d", (int)si->pid);
    kt_out_setf(o, "conf_kt_version", "%s (kura %s)", KT_VERSION, KURA_VERSION);
    kt_out_setf(o, "conf_kt_features", "(kura)");
    kt_out_setf(o, "conf_kc_version", "(kura %s)", KURA_VERSION);
    kt_out_setf(o, "conf_os_name", "Linux");
    return 200;
}

/* What kura cannot be: ktserver's answers with the feature off. */
static int rpc_refused(kt_req *r, const char *name)
{
    if (strcmp(name, "play_script") == 0)
        return kt_error(r, 501, "the scripting extention is disabled");
    if (strcmp(name, "tune_replication") == 0)
        return kt_error(r, 501, "the RTS file is not set");
    return kt_error(r, 400, "no update log allows no replication");     /* ulog_* */
}

static int rpc_server(kt_req *r, const char *name)
{
    kura_session *s = r->s;
    int rc = KURA_OK;
    if (strcmp(name, "clear") == 0) {
        s->dirty = true;
        rc = engine_flush_all(s->engine, s->stats, 0);
    } else if (strcmp(name, "synchronize") == 0) {
        rc = engine_sync(s->engine);
    }                                   /* vacuum: kura compacts its files itself */
    return rc < 0 ? kt_db_fail(r, rc, false) : 200;
}

/* ---- dispatch -------------------------------------------------------------------------------- */

/* The status of procedure name; -1 when it paused. */
static int run(kt_req *r, const char *name)
{
    if (strcmp(name, "void") == 0)
        return 200;
    if (strcmp(name, "echo") == 0) {
        for (size_t i = 0; i < r->st->in.n; i++)
            kt_out_set(&r->st->out, r->st->in.v[i].k.p, r->st->in.v[i].k.n, r->st->in.v[i].v.p,
                       r->st->in.v[i].v.n);
        return 200;
    }
    if (strcmp(name, "report") == 0)
        return rpc_report(r);
    if (!strcmp(name, "play_script") || !strcmp(name, "tune_replication") ||
        !strcmp(name, "ulog_list") || !strcmp(name, "ulog_remove"))
        return rpc_refused(r, name);
    if (!kt_our_db(r->s, kt_param(&r->st->in, "DB")))
        return kt_error(r, 400, "no such database");
    static const struct { const char *name; int cmd; } stores[] = {
        { "set", KURA_CMD_SET }, { "add", KURA_CMD_ADD }, { "replace", KURA_CMD_REPLACE } };
    for (size_t i = 0; i < sizeof(stores) / sizeof(*stores); i++)
        if (strcmp(name, stores[i].name) == 0)
            return rpc_store(r, stores[i].cmd);
    if (!strcmp(name, "status"))
        return rpc_status(r);
    if (!strcmp(name, "clear") || !strcmp(name, "synchronize") || !strcmp(name, "vacuum"))
        return rpc_server(r, name);
    if (!strcmp(name, "append"))
        return rpc_append(r);
    if (!strcmp(name, "increment") || !strcmp(name, "increment_double"))
        return rpc_increment(r, name[9] == '_');
    if (!strcmp(name, "cas"))
        return rpc_cas(r);
    if (!strcmp(name, "remove"))
        return rpc_remove(r);
    if (!strcmp(name, "get") || !strcmp(name, "check") || !strcmp(name, "seize"))
        return rpc_get(r, name[0] != 'c', name[1] == 'e' && name[0] == 's');
    int kind = !strcmp(name, "match_prefix") ? 1 : !strcmp(name, "match_regex") ? 2
               : !strcmp(name, "match_similar") ? 3 : 0;
    if (kind) {
        bool paused = false;
        int code = kt_rpc_match(r, kind, &paused);
        return paused ? -1 : code;
    }
    if (!strncmp(name, "cur_", 4))
        return kt_rpc_cursor(r, name + 4);
    int code = kt_rpc_bulk(r, name);
    if (code)
        return code;
    char msg[96];
    snprintf(msg, sizeof(msg), "not implemented: %.64s", name);
    return kt_error(r, 501, msg);
}

/* ktserver's conditions: WAIT=NAME holds the request until another
 * sends SIGNAL=NAME, or WAITTIME passes.  A kura worker is never held:
 * a WAIT is answered at once as one that timed out (503), so no request
 * waits and a SIGNAL wakes nobody (SIGNALED 0). */
bool kt_rpc(kt_req *r, const char *name, size_t nlen)
{
    kt_state *st = r->st;
    kt_out_reset(&st->out);
    int code;
    if (kt_param(&st->in, "WAIT").p)
        code = kt_error(r, 503, "the condition timed out");
    else
        code = strlen(name) == nlen ? run(r, name) : kt_error(r, 501, "not implemented");
    if (code < 0)
        return false;
    if (kt_param(&st->in, "SIGNAL").p)
        kt_out_setf(&st->out, "SIGNALED", "0");
    st->reply.len = 0;
    int enc = 0;
    if (!kt_out_write(&st->out, &st->reply, &enc)) {
        r->s->close = true;
        return true;
    }
    char h[96];
    snprintf(h, sizeof(h), "Content-Type: text/tab-separated-values%s\r\n",
             enc == 'B' ? "; colenc=B" : enc == 'U' ? "; colenc=U" : "");
    kt_respond(r, code, h, st->reply.data, st->reply.len);
    return true;
}
