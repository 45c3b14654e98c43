/*
 * cab_kc.c - Kyoto Cabinet's hash (.kch) and B+ tree (.kct) files through
 * libkyotocabinet's C API, kclangc.h (cabinet.h).  Without the library
 * (KURA_HAVE_KC unset) cab_kc_ops is NULL and kuractl says how to get it.
 *
 * Reading walks the file with kcdbiterate, read-only (one pass under the
 * library's own lock, no cursor per record).  A new file's kind follows
 * its suffix (the polymorphic database's rule) and is tuned for the
 * records it will hold: "#bnum=" twice their number.  A file read is
 * mapped whole ("#msiz=" its size) rather than read a record at a time.
 */
#include <stddef.h>

#include "cabinet.h"

#ifndef KURA_HAVE_KC

const cab_ops *const cab_kc_ops = NULL;

#else

#include <stdbool.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <kclangc.h>

#define KDB(c) ((KCDB *)(c)->db)

static int kc_open(cabinet *c, const char *path, bool write, uint64_t rnum_hint)
{
    char name[4200];
    struct stat st;
    if (!(c->db = kcdbnew()))
        return -1;
    if (write && rnum_hint)
        snprintf(name, sizeof(name), "%s#bnum=%llu", path,
                 (unsigned long long)(c->kind == CAB_KCH ? rnum_hint * 2 : rnum_hint / 32 + 1));
    else if (!write && stat(path, &st) == 0)
        /* the whole file mapped: the walk reads it without a pread per record */
        snprintf(name, sizeof(name), "%s#msiz=%llu", path, (unsigned long long)st.st_size);
    else
        snprintf(name, sizeof(name), "%s", path);
    /* without waiting for the lock: a file a running ktserver holds is an
     * error at once, not a hang */
    uint32_t mode = KCOTRYLOCK | (write ? KCOWRITER | KCOCREATE | KCOTRUNCATE : KCOREADER);
    return kcdbopen(KDB(c), name, mode) ? 0 : -1;
}

static uint64_t kc_count(cabinet *c)
{
    int64_t n = kcdbcount(KDB(c));
    return n < 0 ? 0 : (uint64_t)n;
}

typedef struct kc_walk {
    cab_record_fn fn;
    void *arg;
    int rc;
} kc_walk;

static const char *kc_visit(const char *k, size_t kl, const char *v, size_t vl, size_t *sp,
                            void *opq)
{
    kc_walk *w = opq;
    (void)sp;
    /* a stop: the walk goes on to its end without calling fn again (the C
     * API has no way to stop it) */
    if (w->rc == 0)
        w->rc = w->fn(w->arg, k, kl, v, vl);
    return KCVISNOP;
}

static int kc_each(cabinet *c, cab_record_fn fn, void *arg)
{
    kc_walk w = { fn, arg, 0 };
    int32_t ok = kcdbiterate(KDB(c), kc_visit, &w, 0);
    return w.rc ? w.rc : ok ? 0 : -1;
}

static int kc_get(cabinet *c, const char *k, size_t kl, char **v, size_t *vl)
{
    size_t sp;
    char *p = kcdbget(KDB(c), k, kl, &sp);
    if (!p)
        return kcdbecode(KDB(c)) == KCENOREC ? 1 : -1;
    /* kcfree, not free, owns it: copied so the caller frees it as usual */
    *v = malloc(sp ? sp : 1);
    if (*v)
        memcpy(*v, p, sp);
    kcfree(p);
    if (!*v)
        return -1;
    *vl = sp;
    return 0;
}

static int kc_put(cabinet *c, const char *k, size_t kl, const char *v, size_t vl)
{
    return kcdbset(KDB(c), k, kl, v, vl) ? 0 : -1;
}

static const char *kc_error(cabinet *c)
{
    return c->db ? kcdbemsg(KDB(c)) : "out of memory";
}

/* Kyoto Cabinet reports a lock held elsewhere (KCOTRYLOCK) as a system
 * error, "fcntl failed". */
static cab_failure kc_failure(cabinet *c)
{
    if (!c->db)
        return CAB_UNOPENED;
    int32_t code = kcdbecode(KDB(c));
    if (code == KCESYSTEM && strstr(kcdbemsg(KDB(c)), "fcntl"))
        return CAB_LOCKED;
    return code == KCENOREPOS || code == KCENOPERM || code == KCESYSTEM ? CAB_UNOPENED
                                                                        : CAB_DAMAGED;
}

static int kc_close(cabinet *c)
{
    if (!c->db)
        return 0;
    int32_t ok = kcdbclose(KDB(c));
    if (!ok)
        snprintf(c->err, sizeof(c->err), "%s", kc_error(c));
    kcdbdel(KDB(c));
    c->db = NULL;
    return ok ? 0 : -1;
}

static const cab_ops kc_ops = {
    .library = "Kyoto Cabinet",
    .open = kc_open, .count = kc_count, .each = kc_each, .get = kc_get, .put = kc_put,
    .close = kc_close, .error = kc_error, .failure = kc_failure,
};

const cab_ops *const cab_kc_ops = &kc_ops;

#endif
