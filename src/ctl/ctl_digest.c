/*
 * ctl_digest.c - "kuractl digest MASTER SLAVE": what two servers hold,
 * compared without copying the data, down to each differing key.
 *
 * Three steps over the server's "digest" command (src/proto/digest.c):
 * the bucket digests of both (one walk of each server's items), then the
 * key lists of only the buckets that differ, then a gets of each key
 * that differs on both sides, to say what differs (value, flags, cas; if
 * none of those, the expiry time, which gets does not show).  On servers
 * being written to, a key changed between the steps may be named though
 * it agrees a moment later: compare a replica in sync, or look again.
 */
#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "kura/grow.h"
#include "ctl.h"

typedef struct bucket {
    uint64_t items, hash;
} bucket;

typedef struct keyent {
    char *key;
    uint64_t hash;
} keyent;

typedef struct keylist {
    keyent *v;
    size_t n, cap;
} keylist;

/* Reads lines of a digest reply up to END; each handed to fn.  An error
 * line is CTL_FAIL (printed). */
static int digest_req(ctl_conn *c, const char *req, int (*fn)(void *arg, char *line), void *arg)
{
    int rc = ctl_send(c, req, strlen(req));
    for (;;) {
        const char *l;
        size_t len;
        if (rc || (rc = ctl_line(c, &l, &len)))
            return rc;
        if (strcmp(l, "END") == 0)
            return CTL_OK;
        if (strncmp(l, "DIGEST ", 7) != 0 && strncmp(l, "KEY ", 4) != 0) {
            char r[200];
            snprintf(r, sizeof(r), "%.*s", (int)strcspn(req, "\r"), req);
            if (strstr(l, "too large"))
                return ctl_err(CTL_FAIL, "%s: %s: %s (use --buckets with a larger number)",
                               ctl_conn_name(c), r, l);
            return ctl_err(CTL_FAIL, "%s: %s: %s", ctl_conn_name(c), r, l);
        }
        if ((rc = fn(arg, (char *)l)))
            return rc;
    }
}

typedef struct bucket_arg {
    bucket *b;
    uint32_t n;
} bucket_arg;

static int on_bucket(void *arg, char *l)
{
    bucket_arg *a = arg;
    unsigned long long no, items, hash;
    if (sscanf(l, "DIGEST %llu %llu %llx", &no, &items, &hash) != 3 || no >= a->n)
        return ctl_err(CTL_FAIL, "unexpected digest line: %s", l);
    a->b[no].items = items;
    a->b[no].hash = hash;
    return CTL_OK;
}

static int on_key(void *arg, char *l)
{
    keylist *k = arg;
    char *sp = strrchr(l + 4, ' ');
    if (!sp)
        return ctl_err(CTL_FAIL, "unexpected digest line: %s", l);
    *sp = '\0';
    if (kura_grow(&k->v, &k->cap, k->n + 1, sizeof(*k->v), 64))
        return ctl_err(CTL_FAIL, "out of memory");
    k->v[k->n].key = strdup(l + 4);
    k->v[k->n].hash = strtoull(sp + 1, NULL, 16);
    if (!k->v[k->n].key)
        return ctl_err(CTL_FAIL, "out of memory");
    k->n++;
    return CTL_OK;
}

static int cmp_key(const void *a, const void *b)
{
    return strcmp(((const keyent *)a)->key, ((const keyent *)b)->key);
}

static void keys_free(keylist *k)
{
    for (size_t i = 0; i < k->n; i++)
        free(k->v[i].key);
    free(k->v);
    memset(k, 0, sizeof(*k));
}

/* Says what differs in a key both servers hold. */
static int describe(ctl_conn *m, ctl_conn *s, const char *key)
{
    ctl_value a, b;
    int ra = ctl_gets(m, key, &a);
    if (ra != CTL_OK && ra != CTL_DIFF)
        return ra;
    int rb = ctl_gets(s, key, &b);
    if (rb != CTL_OK && rb != CTL_DIFF) {
        free(a.data);
        return rb;
    }
    char what[200] = "";
    if (ra == CTL_DIFF || rb == CTL_DIFF) {
        snprintf(what, sizeof(what), "gone from %s since the listing",
                 ra == CTL_DIFF ? "master" : "slave");
    } else {
        size_t w = 0;
        if (a.len != b.len || memcmp(a.data, b.data, a.len) != 0)
            w += (size_t)snprintf(what + w, sizeof(what) - w, "value (%zu vs %zu bytes)", a.len,
                                  b.len);
        if (a.flags != b.flags)
            w += (size_t)snprintf(what + w, sizeof(what) - w, "%sflags (%u vs %u)",
                                  w ? ", " : "", a.flags, b.flags);
        if (a.cas != b.cas)
            w += (size_t)snprintf(what + w, sizeof(what) - w, "%scas (%" PRIu64 " vs %" PRIu64 ")",
                                  w ? ", " : "", a.cas, b.cas);
        if (!w)
            snprintf(what, sizeof(what), "expiry time");
    }
    printf("differs   %s: %s\n", key, what);
    free(a.data);
    free(b.data);
    return CTL_OK;
}

int cmd_digest(int argc, char **argv)
{
    ctl_args a;
    static const ctl_optdef defs[] = { { "--buckets", true }, { NULL, false } };
    int rc = ctl_parse(&a, "digest", argc, argv, defs);
    if (rc)
        return rc;
    if (a.npos != 2)
        return ctl_usage(&a, "expected MASTER SLAVE (two server addresses)");
    uint64_t n = 256;
    if (ctl_has(&a, "--buckets") &&
        (rc = ctl_num(&a, "--buckets", ctl_opt(&a, "--buckets"), &n)))
        return rc;
    if (n < 1 || n > 65536)
        return ctl_usage(&a, "--buckets is from 1 to 65536");
    ctl_conn *m = NULL, *s = NULL;
    bucket *bm = calloc(n, sizeof(*bm)), *bs = calloc(n, sizeof(*bs));
    keylist km = { 0 }, ks = { 0 };
    uint64_t differ = 0, items_m = 0, items_s = 0;
    if (!bm || !bs) {
        rc = ctl_err(CTL_FAIL, "out of memory");
        goto out;
    }
    if ((rc = ctl_connect(a.pos[0], &m)) || (rc = ctl_connect(a.pos[1], &s)))
        goto out;
    char req[64];
    snprintf(req, sizeof(req), "digest %" PRIu64 "\r\n", n);
    bucket_arg am = { bm, (uint32_t)n }, as = { bs, (uint32_t)n };
    if ((rc = digest_req(m, req, on_bucket, &am)) || (rc = digest_req(s, req, on_bucket, &as)))
        goto out;
    for (uint64_t b = 0; b < n; b++) {
        items_m += bm[b].items;
        items_s += bs[b].items;
        if (bm[b].items == bs[b].items && bm[b].hash == bs[b].hash)
            continue;
        snprintf(req, sizeof(req), "digest %" PRIu64 " %" PRIu64 "\r\n", n, b);
        if ((rc = digest_req(m, req, on_key, &km)) || (rc = digest_req(s, req, on_key, &ks)))
            goto out;
        if (km.n)           /* qsort of NULL is undefined even for 0 items */
            qsort(km.v, km.n, sizeof(*km.v), cmp_key);
        if (ks.n)
            qsort(ks.v, ks.n, sizeof(*ks.v), cmp_key);
        size_t i = 0, j = 0;
        while (i < km.n || j < ks.n) {
            int c = i == km.n ? 1 : j == ks.n ? -1 : strcmp(km.v[i].key, ks.v[j].key);
            if (c < 0) {
                printf("missing   %s: on the slave (%s)\n", km.v[i++].key, a.pos[1]);
                differ++;
            } else if (c > 0) {
                printf("extra     %s: only on the slave (%s)\n", ks.v[j++].key, a.pos[1]);
                differ++;
            } else {
                if (km.v[i].hash != ks.v[j].hash) {
                    differ++;
                    if ((rc = describe(m, s, km.v[i].key)))
                        goto out;
                }
                i++;
                j++;
            }
        }
        keys_free(&km);
        keys_free(&ks);
    }
    if (differ)
        printf("%" PRIu64 " keys differ (master %s: %" PRIu64 " items, slave %s: %" PRIu64
               " items)\n", differ, a.pos[0], items_m, a.pos[1], items_s);
    else
        printf("same: %" PRIu64 " items on each\n", items_m);
    rc = differ ? CTL_DIFF : CTL_OK;
out:
    keys_free(&km);
    keys_free(&ks);
    ctl_close(m);
    ctl_close(s);
    free(bm);
    free(bs);
    return rc;
}
