/*
 * dbcompat.c - Tokyo Cabinet's and Kyoto Cabinet's database names and
 * tuning parameters, translated into kura's.
 *
 * A ttserver or ktserver command line names its database the way the
 * Cabinet libraries do ("data.tch#bnum=1000000#opts=ld", "*#capsiz=1g",
 * "casket.kct#pccap=256m#zcomp=lzo"), and kurad takes the same line.  Each
 * parameter of their docs is one of three things here:
 *   - mapped to what kura has: a compression option to zcomp, a cache
 *     size or record count to the cache's cap, xmsiz to msiz, a page
 *     size or page cache within the B+ tree's bounds;
 *   - accepted with no effect, named once in the log at INFO with the
 *     reason (an alignment power means nothing to a log-structured file);
 *   - refused where accepting would silently change what the data means
 *     (a descending key order, an encrypted database, a truncating open).
 * Only the foreign names are translated: kura's own suffixes (.kh, .kb)
 * keep their strict parameters, so a typo in a new command line is still
 * an error.  docs/migration.md has the table this file implements.
 */
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "kura/logf.h"
#include "kura/store.h"
#include "dbcompat.h"

/* What a parameter is for each kind of backend: NULL passes it to the
 * backend unchanged, "=name" renames it, anything else is the reason it
 * has no effect there (logged, then dropped). */
typedef struct compat_param {
    const char *name;
    const char *on[3];          /* indexed by DBK_CACHE, DBK_HASH, DBK_TREE */
} compat_param;

#define NO_FILE "the in-memory cache has no file"
#define NO_PAGES "a hash file has no pages"
#define NOT_CACHED "a file keeps every record: a capacity is for an in-memory database"
#define OWN_LOG "kurad writes its own log (-log, -ld, -le)"

static const compat_param table[] = {
    { "bnum", { NULL, NULL, "the B+ tree has no bucket array" } },
    { "apow", { NO_FILE, "records are packed one after another in the log, not aligned",
                "pages are aligned to their size; records within them are packed" } },
    { "fpow", { NO_FILE, "space is reclaimed by compaction (frag), not a free-block pool",
                "free pages are kept in a list of their own" } },
    { "rcnum", { "the cache is the records themselves",
                 "the index is in memory and values are read through the page cache",
                 "pages are cached (pccap), not records" } },
    { "xmsiz", { NO_FILE, "=msiz", "pages are read into the page cache (pccap), not mapped" } },
    { "msiz", { NO_FILE, NULL, "pages are read into the page cache (pccap), not mapped" } },
    { "dfunit", { NO_FILE, NULL, "free pages are reused as they are freed" } },
    { "lmemb", { "the cache has no pages", NO_PAGES,
                 "pages are filled by bytes (psiz), not by a count of records" } },
    { "nmemb", { "the cache has no pages", NO_PAGES,
                 "pages are filled by bytes (psiz), not by a count of records" } },
    { "lcnum", { "the cache has no pages", NO_PAGES, NULL } },
    { "ncnum", { "the cache has no pages", NO_PAGES, NULL } },
    { "capnum", { "=capcnt", NOT_CACHED, NOT_CACHED } },
    { "capcnt", { NULL, NOT_CACHED, NOT_CACHED } },
    { "ktcapcnt", { "=capcnt", NOT_CACHED, NOT_CACHED } },
    { "capsiz", { NULL, NOT_CACHED, NOT_CACHED } },
    { "ktcapsiz", { "=capsiz", NOT_CACHED, NOT_CACHED } },
    { "zkey", { "only zcomp=arc uses a key, and kura refuses it",
                "only zcomp=arc uses a key, and kura refuses it",
                "only zcomp=arc uses a key, and kura refuses it" } },
    { "log", { OWN_LOG, OWN_LOG, OWN_LOG } },
    { "logkinds", { OWN_LOG, OWN_LOG, OWN_LOG } },
    { "logpx", { OWN_LOG, OWN_LOG, OWN_LOG } },
    { "ktopts", { "an item expires only when it is given an exptime (what ktopts=p asks)",
                  "an item expires only when it is given an exptime (what ktopts=p asks)",
                  "an item expires only when it is given an exptime (what ktopts=p asks)" } },
    { "psiz", { "the cache has no pages", NO_PAGES, NULL } },
    { "pccap", { "the cache has no pages", NO_PAGES, NULL } },
};

/* A note to the server's log (stderr without one). */
#define note(log, ...) kura_logf_hook(log, KURA_LOG_INFO, __VA_ARGS__)

static kura_param *find(kura_params *ps, const char *name)
{
    for (int i = 0; i < ps->count; i++)
        if (strcmp(ps->p[i].name, name) == 0)
            return &ps->p[i];
    return NULL;
}

static void drop(kura_params *ps, kura_param *p)
{
    int i = (int)(p - ps->p);
    memmove(&ps->p[i], &ps->p[i + 1], (size_t)(ps->count - i - 1) * sizeof(*p));
    ps->count--;
}

/* Sets name=value, replacing a parameter of that name if there is one. */
static int set(kura_params *ps, const char *name, const char *value)
{
    kura_param *p = find(ps, name);
    if (!p) {
        if (ps->count == KURA_PARAMS_MAX)
            return -1;
        p = &ps->p[ps->count++];
        memset(p, 0, sizeof(*p));
        snprintf(p->name, sizeof(p->name), "%s", name);
    }
    snprintf(p->value, sizeof(p->value), "%s", value);
    return 0;
}

/* Kyoto's zcomp names (zlib, def, gz, lzo, lzma, arc) and kura's (lzo,
 * zlib, bz2, none) to kura's; NULL if refused (err written). */
static const char *zcomp_name(const char *v, const char *db, void (*log)(int, const char *),
                              char *err, size_t errlen)
{
    if (!strcmp(v, "zlib") || !strcmp(v, "def") || !strcmp(v, "gz"))
        return "zlib";
    if (!strcmp(v, "lzo") || !strcmp(v, "bz2") || !strcmp(v, "none"))
        return v;
    if (!strcmp(v, "lzma")) {
        note(log, "database '%s': zcomp=lzma: kura has no lzma; values are compressed with "
             "bz2, the closest in ratio", db);
        return "bz2";
    }
    if (!strcmp(v, "arc"))
        snprintf(err, errlen, "database '%s': zcomp=arc (values encrypted with zkey) is "
                 "refused: kura does not encrypt a database; put it on an encrypted file "
                 "system and leave zcomp out", db);
    else
        snprintf(err, errlen, "database '%s': zcomp=%s: expected zlib, def, gz, lzo, lzma, "
                 "bz2 or none", db, v);
    return NULL;
}

/* opts: Tokyo's letters l (64-bit offsets), d (deflate), b (bzip2), t
 * (TCBS) and Kyoto's s (small), l (linear), c (compress).  A compression
 * letter sets zcomp unless zcomp is given; the rest have no effect. */
static int map_opts(kura_params *ps, int kind, const char *db, void (*log)(int, const char *),
                    char *err, size_t errlen)
{
    kura_param *p = find(ps, "opts");
    if (!p)
        return 0;
    char v[sizeof(p->value)];
    snprintf(v, sizeof(v), "%s", p->value);
    drop(ps, p);
    const char *codec = NULL, *letter = NULL;
    for (const char *c = v; *c; c++) {
        char l[2] = { *c, 0 };
        switch (*c) {
        case 'd': case 'c': codec = "zlib"; letter = *c == 'd' ? "d" : "c"; break;
        case 'b': codec = "bz2"; letter = "b"; break;
        case 't': codec = "lzo"; letter = "t";
            note(log, "database '%s': opts=%s: TCBS is not in kura; lzo, its fast codec, is "
                 "used instead", db, v);
            break;
        case 'l':
            note(log, "database '%s': opts letter 'l' has no effect: %s", db,
                 "offsets are 64-bit and collisions are chained in any case");
            break;
        case 's':
            note(log, "database '%s': opts letter 's' has no effect: %s", db,
                 "kura's record headers are sized by their content");
            break;
        default:
            snprintf(err, errlen, "database '%s': opts=%s: '%s' is none of Tokyo's l, d, b, t "
                     "or Kyoto's s, l, c", db, v, l);
            return KURA_EINVAL;
        }
    }
    if (!codec)
        return 0;
    if (kind == DBK_CACHE) {
        note(log, "database '%s': opts=%s has no effect: the in-memory cache does not "
             "compress", db, v);
        return 0;
    }
    if (find(ps, "zcomp")) {
        note(log, "database '%s': opts letter '%s' has no effect: zcomp=%s chooses the codec",
             db, letter, find(ps, "zcomp")->value);
        return 0;
    }
    if (set(ps, "zcomp", codec)) {
        snprintf(err, errlen, "database '%s': too many parameters", db);
        return KURA_EINVAL;
    }
    note(log, "database '%s': opts letter '%s' maps to zcomp=%s", db, letter, codec);
    return 0;
}

/* rcomp: kura orders keys as bytes (lex) and nothing else. */
static int map_rcomp(kura_params *ps, int kind, const char *db, void (*log)(int, const char *),
                     char *err, size_t errlen)
{
    kura_param *p = find(ps, "rcomp");
    if (!p)
        return 0;
    if (strcmp(p->value, "lex") != 0) {
        snprintf(err, errlen, "database '%s': rcomp=%s is refused: kura keeps keys in byte "
                 "order (lex) only, and range listings would not come in the order asked; "
                 "leave rcomp out", db, p->value);
        return KURA_EINVAL;
    }
    if (kind != DBK_TREE)
        note(log, "database '%s': rcomp=lex has no effect: %s", db,
             kind == DBK_CACHE ? "the in-memory cache keeps no order"
                               : "a hash file keeps no order");
    drop(ps, p);
    return 0;
}

/* mode: Tokyo's open mode letters w (writer), r (reader), c (create),
 * t (truncate), e (no lock), f (non-blocking lock). */
static int map_mode(kura_params *ps, const char *db, void (*log)(int, const char *),
                    char *err, size_t errlen)
{
    kura_param *p = find(ps, "mode");
    if (!p)
        return 0;
    if (strchr(p->value, 't')) {
        snprintf(err, errlen, "database '%s': mode=%s is refused: 't' empties the database at "
                 "every start, which kura does not do (remove the database first, or "
                 "flush_all)", db, p->value);
        return KURA_EINVAL;
    }
    if (strchr(p->value, 'r') && !strchr(p->value, 'w')) {
        snprintf(err, errlen, "database '%s': mode=%s (reader only) is refused: a read-only "
                 "kurad is a replica (-mhost)", db, p->value);
        return KURA_EINVAL;
    }
    if (p->value[strspn(p->value, "wrcef")]) {
        snprintf(err, errlen, "database '%s': mode=%s: expected letters of w, r, c, t, e, f",
                 db, p->value);
        return KURA_EINVAL;
    }
    note(log, "database '%s': mode=%s has no effect: kurad always opens its database to "
         "write, creating it, with its own lock", db, p->value);
    drop(ps, p);
    return 0;
}

/* A size parameter of the B+ tree brought within kura's bounds:
 * psiz a power of two from 4 KiB to 32 KiB, pccap at least 1 MiB. */
static void clamp_tree(kura_params *ps, const char *db, void (*log)(int, const char *))
{
    kura_param *p = find(ps, "psiz");
    uint64_t v;
    if (p && kura_parse_size(p->value, &v) == KURA_OK) {
        uint64_t n = 4096;
        while (n < v && n < 32768)
            n *= 2;
        if (n != v) {
            char b[32];
            snprintf(b, sizeof(b), "%llu", (unsigned long long)n);
            note(log, "database '%s': psiz=%s is taken as %s (kura's pages are a power of two "
                 "from 4096 to 32768 bytes)", db, p->value, b);
            snprintf(p->value, sizeof(p->value), "%s", b);
        }
    }
    p = find(ps, "pccap");
    if (p && kura_parse_size(p->value, &v) == KURA_OK && v < (1 << 20)) {
        note(log, "database '%s': pccap=%s is taken as 1m (%s)", db, p->value,
             "the smallest page cache kura keeps");
        snprintf(p->value, sizeof(p->value), "1m");
    }
}

int kura_dbcompat(const char *db, int kind, kura_params *ps, void (*log)(int, const char *),
                  char *err, size_t errlen)
{
    int rc;
    if ((rc = map_mode(ps, db, log, err, errlen)) ||
        (rc = map_rcomp(ps, kind, db, log, err, errlen)) ||
        (rc = map_opts(ps, kind, db, log, err, errlen)))
        return rc;
    kura_param *z = find(ps, "zcomp");
    if (z) {
        const char *name = zcomp_name(z->value, db, log, err, errlen);
        if (!name)
            return KURA_EINVAL;
        if (kind == DBK_CACHE) {
            note(log, "database '%s': zcomp=%s has no effect: the in-memory cache does not "
                 "compress", db, z->value);
            drop(ps, z);
        } else if (name != z->value) {
            snprintf(z->value, sizeof(z->value), "%s", name);
        }
    }
    for (size_t t = 0; t < sizeof(table) / sizeof(table[0]); t++) {
        kura_param *p = find(ps, table[t].name);
        const char *on = table[t].on[kind];
        if (!p || !on)
            continue;
        if (on[0] == '=') {
            if (find(ps, on + 1)) {
                note(log, "database '%s': %s has no effect: %s is given too", db, p->name,
                     on + 1);
                drop(ps, p);
            } else {
                note(log, "database '%s': %s maps to %s", db, p->name, on + 1);
                snprintf(p->name, sizeof(p->name), "%s", on + 1);
            }
            continue;
        }
        note(log, "database '%s': %s has no effect: %s", db, p->name, on);
        drop(ps, p);
    }
    if (kind == DBK_TREE)
        clamp_tree(ps, db, log);
    return KURA_OK;
}
