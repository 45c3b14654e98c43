/*
 * dbpath.c - from a database name on the command line to an open store.
 *
 * Names follow ttserver and ktserver: "*" or ":" is the in-memory cache;
 * otherwise the file suffix picks the backend and "#name=value" parameters
 * tune it, e.g. "data.kh#bnum=1000000#msiz=1g".  Tokyo and Kyoto Cabinet
 * suffixes are accepted as aliases so existing command lines keep working
 * (the file formats are kura's own).  An unknown suffix or a parameter no
 * backend understood is an error that names it.
 */
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "kura/backends.h"
#include "kura/store.h"

typedef int (*backend_open_fn)(const char *path, kura_params *params,
                               const kura_store_config *cfg, kura_store **out,
                               char *err, size_t errlen);

typedef struct backend {
    const char *suffix;         /* ".kh", or "*" for the in-memory names */
    backend_open_fn open;
} backend;

static const struct {
    const char *suffix;
    int kind;                   /* 0 cache, 1 hash file, 2 B+ tree */
} suffixes[] = {
    { ".kh", 1 }, { ".tch", 1 }, { ".kch", 1 },
    { ".kb", 2 }, { ".tcb", 2 }, { ".kct", 2 },
};

int kura_parse_size(const char *s, uint64_t *out)
{
    char *end;
    errno = 0;
    if (!s || !*s || *s == '-')
        return KURA_EINVAL;
    unsigned long long v = strtoull(s, &end, 10);
    if (errno || end == s)
        return KURA_EINVAL;
    uint64_t mul = 1;
    switch (*end) {
    case 'k': case 'K': mul = 1ULL << 10; end++; break;
    case 'm': case 'M': mul = 1ULL << 20; end++; break;
    case 'g': case 'G': mul = 1ULL << 30; end++; break;
    case 't': case 'T': mul = 1ULL << 40; end++; break;
    }
    if (*end == 'b' || *end == 'B')
        end++;
    if (*end != '\0' || (v != 0 && mul > UINT64_MAX / v))
        return KURA_EINVAL;
    *out = v * mul;
    return KURA_OK;
}

const char *kura_param_take(kura_params *params, const char *name)
{
    for (int i = 0; i < params->count; i++) {
        if (strcmp(params->p[i].name, name) == 0) {
            params->p[i].used = true;
            return params->p[i].value;
        }
    }
    return NULL;
}

int kura_params_reject_unused(const kura_params *params, const char *path,
                              char *err, size_t errlen)
{
    for (int i = 0; i < params->count; i++) {
        if (!params->p[i].used) {
            snprintf(err, errlen, "database name '%s': unknown parameter '%s'",
                     path, params->p[i].name);
            return KURA_EINVAL;
        }
    }
    return KURA_OK;
}

/* Splits "path#a=b#c=d" into path (written to pathbuf) and params. */
static int split_name(const char *dbname, char *pathbuf, size_t pathlen,
                      kura_params *params, char *err, size_t errlen)
{
    const char *hash = strchr(dbname, '#');
    size_t plen = hash ? (size_t)(hash - dbname) : strlen(dbname);
    if (plen >= pathlen) {
        snprintf(err, errlen, "database path too long");
        return KURA_EINVAL;
    }
    memcpy(pathbuf, dbname, plen);
    pathbuf[plen] = '\0';
    memset(params, 0, sizeof(*params));
    while (hash) {
        const char *item = hash + 1;
        hash = strchr(item, '#');
        size_t ilen = hash ? (size_t)(hash - item) : strlen(item);
        if (ilen == 0)
            continue;
        const char *eq = memchr(item, '=', ilen);
        if (!eq || eq == item) {
            snprintf(err, errlen, "database parameter '%.*s' is not of the form name=value",
                     (int)ilen, item);
            return KURA_EINVAL;
        }
        size_t nlen = (size_t)(eq - item), vlen = ilen - nlen - 1;
        if (params->count == KURA_PARAMS_MAX || nlen >= sizeof(params->p[0].name) ||
            vlen >= sizeof(params->p[0].value)) {
            snprintf(err, errlen, "database parameter '%.*s' is too long or one too many",
                     (int)ilen, item);
            return KURA_EINVAL;
        }
        kura_param *p = &params->p[params->count++];
        memcpy(p->name, item, nlen);
        memcpy(p->value, eq + 1, vlen);
    }
    return KURA_OK;
}

/* True if a name's path part (before any #param) names the cache. */
static bool names_cache(const char *path_part, size_t len)
{
    return len == 0 || (len == 1 && (path_part[0] == '*' || path_part[0] == ':'));
}

bool kura_dbname_is_cache(const char *dbname)
{
    return !dbname || names_cache(dbname, strcspn(dbname, "#"));
}

int kura_store_open(const char *dbname, const kura_store_config *cfg,
                    kura_store **out, char *err, size_t errlen)
{
    char path[4096];
    kura_params params;
    int kind = -1, rc;

    if (!dbname || !*dbname)
        dbname = "*";
    rc = split_name(dbname, path, sizeof(path), &params, err, errlen);
    if (rc)
        return rc;
    if (names_cache(path, strlen(path))) {
        kind = 0;
    } else {
        size_t len = strlen(path);
        for (size_t i = 0; i < sizeof(suffixes) / sizeof(suffixes[0]); i++) {
            size_t sl = strlen(suffixes[i].suffix);
            if (len > sl && strcmp(path + len - sl, suffixes[i].suffix) == 0)
                kind = suffixes[i].kind;
        }
    }
    backend_open_fn open = kind == 0 ? cache_open : kind == 1 ? hashdb_open
                         : kind == 2 ? btree_open : NULL;
    if (kind < 0) {
        snprintf(err, errlen, "database name '%s': unknown suffix (use *, .kh, .tch, .kch, "
                 ".kb, .tcb or .kct)", path);
        return KURA_EINVAL;
    }
    if (!open) {
        snprintf(err, errlen, "database name '%s': this backend is not built yet", path);
        return KURA_EINVAL;
    }
    rc = open(path, &params, cfg, out, err, errlen);
    if (rc)
        return rc;
    /* A backend should have called kura_params_reject_unused() before it
     * touched the disk; this is the safety net. */
    rc = kura_params_reject_unused(&params, path, err, errlen);
    if (rc) {
        kura_store_close(*out);
        *out = NULL;
    }
    return rc;
}
