/*
 * dbpath.c - from a database name on the command line to an open store.
 *
 * Names follow ttserver and ktserver: "*", "%", "+", ":" and "-" are the
 * in-memory cache; otherwise the file suffix picks the backend and
 * "#name=value" parameters tune it, e.g. "data.kh#bnum=1000000#msiz=1g".
 * Tokyo and Kyoto Cabinet suffixes are accepted as aliases so existing
 * command lines keep working (the file formats are kura's own), their
 * parameters translated by dbcompat.c; the kinds kura does not serve
 * (.tct, .tcf, .kcd, .kcf) are refused with what to use instead.  An
 * unknown suffix or a parameter no backend understood is an error that
 * names it.
 */
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "kura/backends.h"
#include "kura/store.h"
#include "dbcompat.h"

typedef int (*backend_open_fn)(const char *path, kura_params *params,
                               const kura_store_config *cfg, kura_store **out,
                               char *err, size_t errlen);

typedef struct backend {
    const char *suffix;         /* ".kh", or "*" for the in-memory names */
    backend_open_fn open;
} backend;

static const struct {
    const char *suffix;
    int kind;                   /* DBK_HASH or DBK_TREE (dbcompat.h) */
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

/* The in-memory names of ttserver and ktserver: "*" (cache hash), "%"
 * (cache tree), ":" (stash), "-" (prototype hash), "+" (prototype tree).
 * All open kura's in-memory cache; what each loses is logged once. */
static const struct {
    char name;
    const char *note;           /* NULL: nothing lost */
} memory_names[] = {
    { '*', NULL },
    { ':', "database ':': the in-memory cache; it evicts the least recently used items past "
           "-m or #capsiz, where Kyoto's stash grows without bound" },
    { '-', "database '-': the in-memory cache; it evicts the least recently used items past "
           "-m or #capsiz, where a prototype hash grows without bound" },
    { '+', "database '+': the in-memory cache; its keys are not kept in order (a listing "
           "comes in hash order) and it evicts past -m or #capsiz: a .kct or .kb file keeps "
           "keys in order" },
    { '%', "database '%': the in-memory cache; its keys are not kept in order (a listing "
           "comes in hash order): a .kct or .kb file keeps keys in order" },
};

/* Database kinds kura does not serve, with what to use instead. */
static const struct {
    const char *suffix, *instead;
} refused[] = {
    { ".tct", "a Tokyo table database (columns, indexes, queries) is not served: kura stores "
              "one value per key; keep the row serialized in the value, in a .tch or .kh" },
    { ".tcf", "a Tokyo fixed-length database (numeric keys, fixed-size values) is not served: "
              "use a .tch or .kh hash file with the number as the key" },
    { ".kcd", "a Kyoto directory hash database (a file per record) is not served: use a .kch "
              "or .kh hash file" },
    { ".kcf", "a Kyoto directory tree database (a file per record) is not served: use a .kct "
              "or .kb B+ tree" },
};

/* True if a name's path part (before any #param) names the cache. */
static bool names_cache(const char *path_part, size_t len)
{
    if (len == 0)
        return true;
    for (size_t i = 0; len == 1 && i < sizeof(memory_names) / sizeof(memory_names[0]); i++)
        if (path_part[0] == memory_names[i].name)
            return true;
    return false;
}

bool kura_dbname_is_cache(const char *dbname)
{
    return !dbname || names_cache(dbname, strcspn(dbname, "#"));
}

static bool ends_with(const char *s, const char *suffix)
{
    size_t len = strlen(s), sl = strlen(suffix);
    return len > sl && strcmp(s + len - sl, suffix) == 0;
}

/* The backend kind (DBK_*) of a name's path, and whether the name is a
 * ttserver/ktserver one (translated by dbcompat.c); -1 with err written
 * if kura does not serve it.  Kyoto's "#type=" parameter, when given,
 * chooses the kind instead of the suffix. */
static int name_kind(const char *path, kura_params *params, bool *foreign,
                     const kura_store_config *cfg, char *err, size_t errlen)
{
    char typed[8] = "";
    for (int i = 0; i < params->count; i++)
        if (strcmp(params->p[i].name, "type") == 0) {
            snprintf(typed, sizeof(typed), "%s", params->p[i].value);
            memmove(&params->p[i], &params->p[i + 1],
                    (size_t)(params->count - i - 1) * sizeof(params->p[0]));
            params->count--;
            break;
        }
    const char *name = typed[0] ? typed : path;
    *foreign = true;
    for (size_t i = 0; i < sizeof(refused) / sizeof(refused[0]); i++)
        if (ends_with(name, refused[i].suffix) || strcmp(name, refused[i].suffix + 1) == 0) {
            snprintf(err, errlen, "database name '%s': %s", path, refused[i].instead);
            return -1;
        }
    if (names_cache(name, strlen(name))) {
        for (size_t i = 0; i < sizeof(memory_names) / sizeof(memory_names[0]); i++)
            if (name[0] == memory_names[i].name && memory_names[i].note) {
                if (cfg && cfg->log)
                    cfg->log(KURA_LOG_INFO, memory_names[i].note);
                else
                    fprintf(stderr, "%s\n", memory_names[i].note);
            }
        return DBK_CACHE;
    }
    for (size_t i = 0; i < sizeof(suffixes) / sizeof(suffixes[0]); i++)
        if (ends_with(name, suffixes[i].suffix) || strcmp(name, suffixes[i].suffix + 1) == 0) {
            *foreign = strcmp(suffixes[i].suffix, ".kh") && strcmp(suffixes[i].suffix, ".kb");
            return suffixes[i].kind;
        }
    snprintf(err, errlen, "database name '%s': unknown suffix (use *, %%, +, :, -, .kh, .tch, "
             ".kch, .kb, .tcb or .kct)", path);
    return -1;
}

/* A Tokyo or Kyoto Cabinet file where kura's database directory would be:
 * say how to bring it over rather than "not a directory". */
static int refuse_cabinet_file(const char *path, char *err, size_t errlen)
{
    char head[16] = "";
    FILE *f = fopen(path, "rb");
    if (!f)
        return KURA_OK;
    size_t got = fread(head, 1, sizeof(head), f);
    fclose(f);
    const char *which = got >= 14 && memcmp(head, "ToKyO CaBiNeT\n", 14) == 0 ? "Tokyo"
                      : got >= 3 && memcmp(head, "KC\n", 3) == 0 ? "Kyoto" : NULL;
    if (!which)
        return KURA_OK;
    snprintf(err, errlen, "%s is a %s Cabinet file, which kura does not open in place: "
             "kuractl import %s NEWDB brings its records into a kura database (with the "
             "server stopped; docs/migration.md)", path, which, path);
    return KURA_EINVAL;
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
    bool foreign;
    kind = name_kind(path, &params, &foreign, cfg, err, errlen);
    if (kind < 0)
        return KURA_EINVAL;
    if (foreign && (rc = kura_dbcompat(path, kind, &params, cfg ? cfg->log : NULL, err, errlen)))
        return rc;
    backend_open_fn open = kind == DBK_CACHE ? cache_open : kind == DBK_HASH ? hashdb_open
                         : btree_open;
    if ((rc = refuse_cabinet_file(path, err, errlen)))
        return rc;
    rc = open(path, &params, cfg, out, err, errlen);
    if (rc)
        return rc;
    /* the limits the interpreter (update.c) checks: -I (the files' default
     * when unset; the cache has none then) and read-only */
    size_t item_max = cfg ? cfg->item_size_max : 0;
    (*out)->item_max = item_max || kind == DBK_CACHE ? item_max : KURA_ITEM_SIZE_MAX_DEFAULT;
    (*out)->read_only = cfg && cfg->read_only;
    /* A backend should have called kura_params_reject_unused() before it
     * touched the disk; this is the safety net. */
    rc = kura_params_reject_unused(&params, path, err, errlen);
    if (rc) {
        kura_store_close(*out);
        *out = NULL;
    }
    return rc;
}
