/*
 * cab_tc.c - Tokyo Cabinet's hash (.tch) and B+ tree (.tcb) files through
 * libtokyocabinet (cabinet.h).  Without the library (KURA_HAVE_TC unset)
 * cab_tc_ops is NULL and kuractl says how to get it.
 *
 * Reading walks the file with tc*dbforeach (one pass, no cursor per
 * record).  The file's lock is taken without waiting: a file a running
 * ttserver holds is an error at once, not a hang.  A new file is tuned for the records it will hold: a bucket
 * array of twice their number and 64-bit offsets (HDBTLARGE, BDBTLARGE),
 * so an export past 2 GiB does not fail half way.
 */
#include <stddef.h>

#include "cabinet.h"

#ifndef KURA_HAVE_TC

const cab_ops *const cab_tc_ops = NULL;

#else

#include <stdbool.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <tcutil.h>
#include <tchdb.h>
#include <tcbdb.h>

#define HASH(c) ((TCHDB *)(c)->db)
#define TREE(c) ((TCBDB *)(c)->db)
#define IS_HASH(c) ((c)->kind == CAB_TCH)

static int tc_open(cabinet *c, const char *path, bool write, uint64_t rnum_hint)
{
    int64_t bnum = rnum_hint ? (int64_t)(rnum_hint * 2) : -1;
    bool ok;
    if (IS_HASH(c)) {
        if (!(c->db = tchdbnew()))
            return -1;
        if (write)
            tchdbtune(HASH(c), bnum, -1, -1, HDBTLARGE);
        ok = tchdbopen(HASH(c), path, HDBOLCKNB |
                       (write ? HDBOWRITER | HDBOCREAT | HDBOTRUNC : HDBOREADER));
    } else {
        if (!(c->db = tcbdbnew()))
            return -1;
        if (write)
            tcbdbtune(TREE(c), 0, 0, bnum > 0 ? bnum / 64 : -1, -1, -1, BDBTLARGE);
        ok = tcbdbopen(TREE(c), path, BDBOLCKNB |
                       (write ? BDBOWRITER | BDBOCREAT | BDBOTRUNC : BDBOREADER));
    }
    return ok ? 0 : -1;
}

static uint64_t tc_count(cabinet *c)
{
    return IS_HASH(c) ? tchdbrnum(HASH(c)) : tcbdbrnum(TREE(c));
}

typedef struct tc_walk {
    cab_record_fn fn;
    void *arg;
    int rc;
} tc_walk;

static bool tc_visit(const void *k, int kl, const void *v, int vl, void *op)
{
    tc_walk *w = op;
    w->rc = w->fn(w->arg, k, (size_t)kl, v, (size_t)vl);
    return w->rc == 0;
}

static int tc_each(cabinet *c, cab_record_fn fn, void *arg)
{
    tc_walk w = { fn, arg, 0 };
    bool ok = IS_HASH(c) ? tchdbforeach(HASH(c), tc_visit, &w)
                         : tcbdbforeach(TREE(c), tc_visit, &w);
    return w.rc ? w.rc : ok ? 0 : -1;
}

static int tc_get(cabinet *c, const char *k, size_t kl, char **v, size_t *vl)
{
    int sp;
    void *p = IS_HASH(c) ? tchdbget(HASH(c), k, (int)kl, &sp) : tcbdbget(TREE(c), k, (int)kl, &sp);
    if (!p) {
        int ec = IS_HASH(c) ? tchdbecode(HASH(c)) : tcbdbecode(TREE(c));
        return ec == TCENOREC ? 1 : -1;
    }
    *v = p;
    *vl = (size_t)sp;
    return 0;
}

static int tc_put(cabinet *c, const char *k, size_t kl, const char *v, size_t vl)
{
    bool ok = IS_HASH(c) ? tchdbput(HASH(c), k, (int)kl, v, (int)vl)
                         : tcbdbput(TREE(c), k, (int)kl, v, (int)vl);
    return ok ? 0 : -1;
}

static const char *tc_error(cabinet *c)
{
    if (!c->db)
        return "out of memory";
    return tcerrmsg(IS_HASH(c) ? tchdbecode(HASH(c)) : tcbdbecode(TREE(c)));
}

static cab_failure tc_failure(cabinet *c)
{
    if (!c->db)
        return CAB_UNOPENED;
    switch (IS_HASH(c) ? tchdbecode(HASH(c)) : tcbdbecode(TREE(c))) {
    case TCELOCK:
        return CAB_LOCKED;
    case TCENOFILE: case TCENOPERM: case TCEOPEN: case TCETHREAD:
        return CAB_UNOPENED;
    default:
        return CAB_DAMAGED;             /* TCEMETA, TCEREAD, TCERHEAD, ... */
    }
}

static int tc_close(cabinet *c)
{
    if (!c->db)
        return 0;
    bool ok = IS_HASH(c) ? tchdbclose(HASH(c)) : tcbdbclose(TREE(c));
    if (!ok)
        snprintf(c->err, sizeof(c->err), "%s", tc_error(c));
    if (IS_HASH(c))
        tchdbdel(HASH(c));
    else
        tcbdbdel(TREE(c));
    c->db = NULL;
    return ok ? 0 : -1;
}

static const cab_ops tc_ops = {
    .library = "Tokyo Cabinet",
    .open = tc_open, .count = tc_count, .each = tc_each, .get = tc_get, .put = tc_put,
    .close = tc_close, .error = tc_error, .failure = tc_failure,
};

const cab_ops *const cab_tc_ops = &tc_ops;

#endif
