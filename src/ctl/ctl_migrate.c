/*
 * ctl_migrate.c - "kuractl import FILE DB" and "kuractl export DB FILE":
 * Tokyo Cabinet (.tch, .tcb) and Kyoto Cabinet (.kch, .kct) files in and
 * out of a kura database, through the real libraries (cabinet.h).
 *
 * A file ttserver wrote holds each value as the client gave it.  A file
 * ktserver wrote (its TimedDB) puts a 5-byte big-endian expiry time in
 * front of each value (kttimeddb.h: XTWIDTH 5; XTMAX, 2^40 - 1, is
 * "never"), and ktserver marks the file's opaque area (cabinet.c), so
 * import finds it (--kt auto, the default; --kt yes|no to choose); a
 * Kyoto file without the mark is judged by its values (kt_sniff: every
 * one opening with a plausible expiry, or none, or refused as unclear).  A
 * value written through ktserver's memcached plug-in with opts=f ends
 * with the client's flags, 4 bytes big-endian (ktplugservmemc.cc), which
 * nothing in the file marks: --kt-flags says so.  Both become the item's
 * exptime and flags; export writes them back the same way when asked
 * (--kt also writes ktserver's mark, so that ktserver reads the file as
 * its own).
 *
 * An import throws nothing away: a record the database cannot take
 * (classify(), or the store's refusal) goes whole, as the file has it, to
 * the rejects file (rejects.h), and the import ends with exit 5, the
 * database kept.
 *
 * Each command ends with a verification pass: import reads the file
 * again and finds every record in the database, the item encoded back in
 * the file's layout equal to the record's bytes (not decode's reading
 * checked against itself), the records set aside counted against the
 * rejects file; export reads the new file back and finds every item in
 * it.  A difference is exit 1, with the first keys named.  Into a new
 * database, an import that fails leaves nothing (as load); an export
 * that fails removes its file.
 */
#include <errno.h>
#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

#include "cabinet.h"
#include "ctl.h"
#include "rejects.h"

#define KT_XTWIDTH 5
#define KT_XTMAX ((1LL << 40) - 1)
#define KT_FLAGSWIDTH 4
#define SHOW_MAX 5              /* differing or left-out keys named, at most */

typedef struct codec_opts {
    bool kt;                    /* values behind Kyoto Tycoon's expiry header */
    bool flags;                 /* values end with the plug-in's 4-byte flags */
    size_t kmax;                /* import: the longest key taken (--kmax, bounded
                                   by the database's own limit); 0: KURA_KEY_MAX */
} codec_opts;

static uint64_t be_read(const unsigned char *p, int n)
{
    uint64_t v = 0;
    for (int i = 0; i < n; i++)
        v = v << 8 | p[i];
    return v;
}

static void be_write(unsigned char *p, uint64_t v, int n)
{
    for (int i = n - 1; i >= 0; i--, v >>= 8)
        p[i] = (unsigned char)v;
}

/* Why a record cannot go into the database as it is, under the layout
 * asked: a rej_reason, or -1 when it can (the store may still refuse it:
 * import_record).  Both passes ask it, so that the verification skips
 * exactly the records the import set aside. */
static int classify(const codec_opts *o, size_t kl, size_t vl)
{
    if (kl > (o->kmax ? o->kmax : KURA_KEY_MAX))
        return REJ_KEY_LONG;
    if (o->kt && vl < KT_XTWIDTH)
        return REJ_SHORT_XT;
    if (o->flags && vl < (o->kt ? KT_XTWIDTH : 0) + KT_FLAGSWIDTH)
        return REJ_SHORT_FLAGS;
    return -1;
}

/* What classify's reasons mean, for the rejects file and the messages. */
static const char *reason_text(int why, size_t kmax, char *buf, size_t len)
{
    switch (why) {
    case REJ_KEY_EMPTY: return "empty key (no longer set aside: kura stores it)";
    case REJ_KEY_LONG:
        snprintf(buf, len, "key longer than %zu bytes, the import's key limit (--kmax, at most "
                 "%d; a B+ tree's page size may bound it lower)", kmax ? kmax : KURA_KEY_MAX,
                 KURA_KEY_MAX);
        return buf;
    case REJ_VALUE_LARGE: return "value larger than the item size limit";
    case REJ_SHORT_XT:
        return "value shorter than Kyoto Tycoon's 5-byte expiry header (--kt no reads it as is)";
    case REJ_SHORT_FLAGS:
        return "value shorter than the memcached plug-in's 4-byte flags (without --kt-flags it "
               "is read as is)";
    default: return "the database refused the record as invalid";
    }
}

/* A file's record as a kura item (key and value pointing into it), for a
 * record classify() lets in.  An expiry header of 0 (a time long past)
 * stays past, not "never". */
static void decode(const codec_opts *o, const char *k, size_t kl, const char *v, size_t vl,
                   kura_item *it)
{
    memset(it, 0, sizeof(*it));
    it->key = k;
    it->klen = kl;
    if (o->kt) {
        int64_t xt = (int64_t)be_read((const unsigned char *)v, KT_XTWIDTH);
        it->exptime = xt >= KT_XTMAX ? 0 : xt == 0 ? 1 : xt;
        v += KT_XTWIDTH;
        vl -= KT_XTWIDTH;
    }
    if (o->flags) {
        it->flags = (uint32_t)be_read((const unsigned char *)v + vl - KT_FLAGSWIDTH,
                                      KT_FLAGSWIDTH);
        vl -= KT_FLAGSWIDTH;
    }
    it->val = v;
    it->vlen = vl;
}

/* An item as a file's value: malloc'd into *buf (grown as needed). */
static size_t encode(const codec_opts *o, const kura_item *it, unsigned char **buf, size_t *cap)
{
    size_t n = it->vlen + (o->kt ? KT_XTWIDTH : 0) + (o->flags ? KT_FLAGSWIDTH : 0);
    if (n > *cap) {
        unsigned char *nb = realloc(*buf, n);
        if (!nb)
            return SIZE_MAX;
        *buf = nb;
        *cap = n;
    }
    unsigned char *p = *buf;
    if (o->kt) {
        be_write(p, it->exptime > 0 ? (uint64_t)it->exptime : (uint64_t)KT_XTMAX, KT_XTWIDTH);
        p += KT_XTWIDTH;
    }
    if (it->vlen)
        memcpy(p, it->val, it->vlen);
    if (o->flags)
        be_write(p + it->vlen, it->flags, KT_FLAGSWIDTH);
    return n;
}

static void show_key(const char *what, const char *k, size_t kl)
{
    fprintf(stderr, "kuractl:   %s: '", what);
    for (size_t i = 0; i < kl && i < 80; i++)
        fputc(k[i] > ' ' && k[i] < 0x7f ? k[i] : '?', stderr);
    fprintf(stderr, "'%s\n", kl > 80 ? "..." : "");
}

/* ---- Kyoto Tycoon's expiry header, judged from the records --------------- */

/* A header ktserver could have written: "never" (XTMAX), or a time past
 * 2^24 (the memcached plug-in reads an exptime up to 2^24 as relative and
 * adds the clock, a larger one as absolute: ktplugservmemc.cc) and not
 * more than a century ahead.  A text value (its first byte printable)
 * never passes; random bytes do about once in 150. */
#define KT_XT_LOW (1LL << 24)
#define KT_XT_AHEAD (100LL * 366 * 86400)

typedef struct kt_sniff {
    int64_t now;
    uint64_t n, plausible, never;
    int64_t xt_min, xt_max;             /* over the timed headers */
    ctl_progress prog;
} kt_sniff;

static void sniff_value(kt_sniff *sn, const char *v, size_t vl)
{
    sn->n++;
    if (vl < KT_XTWIDTH)
        return;
    int64_t xt = (int64_t)be_read((const unsigned char *)v, KT_XTWIDTH);
    if (xt == KT_XTMAX) {
        sn->plausible++;
        sn->never++;
    } else if (xt > KT_XT_LOW && xt <= sn->now + KT_XT_AHEAD) {
        if (sn->plausible - sn->never == 0 || xt < sn->xt_min)
            sn->xt_min = xt;
        if (xt > sn->xt_max)
            sn->xt_max = xt;
        sn->plausible++;
    }
}

static int sniff_record(void *arg, const char *k, size_t kl, const char *v, size_t vl)
{
    kt_sniff *sn = arg;
    (void)k, (void)kl;
    sniff_value(sn, v, vl);
    progress_set(&sn->prog, sn->n);
    return 0;
}

enum { SNIFF_PLAIN, SNIFF_KT, SNIFF_UNSURE };

/* The verdict: every value with a plausible header (at least three, or
 * one saying "never") is ktserver's layout; none, or one in twenty at
 * most (chance, in binary values), plain; anything between, unsure. */
static int sniff_verdict(const kt_sniff *sn)
{
    if (sn->n > 0 && sn->plausible == sn->n && (sn->n >= 3 || sn->never > 0))
        return SNIFF_KT;
    if (sn->plausible * 20 <= sn->n)
        return SNIFF_PLAIN;
    return SNIFF_UNSURE;
}

/* ---- the verification pass (both commands) ------------------------------- */

typedef struct verifier {
    kura_store *s;
    kura_clock clk;
    codec_opts o;
    bool whole;                 /* import: flags and exptime must be as the layout says */
    uint64_t checked, differ, skipped, rejected;
    ctl_progress prog;
    const char *raw;            /* the record's value as the file has it */
    size_t rawlen;
    unsigned char *buf;         /* the database's item encoded back */
    size_t cap;
    const char *const *refused; /* keys the store refused (import: set aside) */
    size_t nrefused;
    kt_sniff sniff;             /* the layout judged again (import --kt auto) */
    bool same;
} verifier;

/* The database's item written in the file's layout (encode, not decode's
 * inverse) must be the file's bytes exactly. */
static int same_item(void *arg, const kura_item *got)
{
    verifier *v = arg;
    size_t n = encode(&v->o, got, &v->buf, &v->cap);
    v->same = n == v->rawlen && (n == 0 || memcmp(v->buf, v->raw, n) == 0) &&
              (!v->whole || ((v->o.flags || got->flags == 0) && (v->o.kt || got->exptime == 0)));
    return 0;
}

static bool was_refused(const verifier *v, const char *k, size_t kl)
{
    for (size_t i = 0; i < v->nrefused; i++)
        if (strlen(v->refused[i]) == kl && memcmp(v->refused[i], k, kl) == 0)
            return true;
    return false;
}

/* A record of the file: the database must hold it (records set aside,
 * and those already expired, are counted, not looked for). */
static int verify_record(void *arg, const char *k, size_t kl, const char *val, size_t vl)
{
    verifier *v = arg;
    kura_item want;
    progress_set(&v->prog, v->checked + v->skipped + v->rejected + 1);
    sniff_value(&v->sniff, val, vl);
    if (classify(&v->o, kl, vl) >= 0) {
        v->rejected++;
        return 0;
    }
    decode(&v->o, k, kl, val, vl, &want);
    if (want.exptime != 0 && want.exptime <= v->clk.now) {
        v->skipped++;
        return 0;
    }
    v->raw = val;
    v->rawlen = vl;
    v->same = false;
    int rc = v->s->ops->get(v->s, k, kl, &v->clk, same_item, v);
    if (rc != KURA_OK && was_refused(v, k, kl)) {
        v->rejected++;
        return 0;
    }
    v->checked++;
    if (rc != KURA_OK || !v->same) {
        if (++v->differ <= SHOW_MAX)
            show_key(rc != KURA_OK ? "missing" : "differs", k, kl);
    }
    return 0;
}

/* ---- import ---------------------------------------------------------------- */

typedef struct importer {
    ctl_loader l;
    codec_opts o;
    rejects rej;
    uint64_t read;
    char **refused;             /* keys (NUL-free copies) the store refused */
    size_t nrefused, refcap;
} importer;

/* Sets a record aside whole, with why; names the first few. */
static int reject(importer *im, int why, const char *k, size_t kl, const char *v, size_t vl)
{
    char buf[256];
    const char *text = reason_text(why, im->o.kmax, buf, sizeof(buf));
    if (rej_add(&im->rej, (rej_reason)why, text, k, kl, v, vl) < 0)
        return ctl_err(CTL_FAIL, "%s: writing a rejected record: %s (the import stops: a "
                       "record is never dropped)", im->rej.path, strerror(im->rej.err));
    if (im->rej.count <= SHOW_MAX) {
        snprintf(buf, sizeof(buf), "set aside (%s)", rej_word((rej_reason)why));
        show_key(buf, k, kl);
    }
    return 0;
}

static int note_refused(importer *im, const char *k, size_t kl)
{
    if (memchr(k, 0, kl))
        return 0;               /* was_refused cannot name it; counted missing */
    if (im->nrefused == im->refcap) {
        size_t cap = im->refcap ? im->refcap * 2 : 16;
        char **n = realloc(im->refused, cap * sizeof(*n));
        if (!n)
            return -1;
        im->refused = n;
        im->refcap = cap;
    }
    if (!(im->refused[im->nrefused] = strndup(k, kl)))
        return -1;
    im->nrefused++;
    return 0;
}

static int import_record(void *arg, const char *k, size_t kl, const char *v, size_t vl)
{
    importer *im = arg;
    kura_item it;
    im->read++;
    int why = classify(&im->o, kl, vl);
    if (why >= 0)
        return reject(im, why, k, kl, v, vl);
#ifdef KURA_TEST_HOOKS
    /* a test's switch (test builds only, testhooks.h): the first record is
     * left out unsaid, which the verification pass must catch
     * (tests/integration/test_migration.py) */
    if (im->read == 1 && getenv("KURACTL_TEST_IMPORT_DROP_FIRST"))
        return 0;
#endif
    decode(&im->o, k, kl, v, vl, &it);
    int rc = ctl_loader_store(&im->l, &it);
    if (rc == KURA_ETOOBIG || rc == KURA_EINVAL) {
        if (note_refused(im, k, kl) < 0)
            return ctl_err(CTL_FAIL, "out of memory");
        return reject(im, rc == KURA_ETOOBIG ? REJ_VALUE_LARGE : REJ_STORE_REFUSED, k, kl, v,
                      vl);
    }
    if (rc)
        return ctl_err(CTL_FAIL, "storing '%.*s': %s", (int)kl, k, kura_strerror(rc));
    return 0;
}

static void date_of(int64_t t, char *buf, size_t len)
{
    time_t tt = (time_t)t;
    struct tm tm;
    if (!gmtime_r(&tt, &tm) || !strftime(buf, len, "%Y-%m-%d", &tm))
        snprintf(buf, len, "%lld", (long long)t);
}

/* --kt auto: ktserver's mark in the file says; without one (a Kyoto file
 * ktserver's mark is missing from), the records themselves: each value
 * read once (kt_sniff).  Says which layout and why; an unsure verdict is
 * refused (CTL_FAIL) before anything is written.  *by_records: chosen so. */
static int choose_kt(const ctl_args *a, const char *file, cabinet *c, bool *kt, bool *by_records)
{
    const char *v = ctl_opt(a, "--kt");
    *by_records = false;
    if (v && strcmp(v, "auto")) {
        if (strcmp(v, "yes") && strcmp(v, "no"))
            return ctl_usage(a, "--kt is auto, yes or no, not '%s'", v);
        *kt = !strcmp(v, "yes");
        return CTL_OK;
    }
    *kt = false;
    if (c->kind != CAB_KCH && c->kind != CAB_KCT)
        return CTL_OK;                  /* ktserver writes Kyoto files only */
    bool persist = false;
    if (cab_kt_mark(file, &persist) == 1) {
        *kt = !persist;
        if (!g_ctl.quiet)
            fprintf(stderr, "kuractl: %s bears ktserver's mark%s\n", file, *kt
                    ? ": each value's 5-byte expiry header is read as the exptime (--kt no to "
                      "keep it in the value)"
                    : " with values stored plainly (persist): read as they are");
        return CTL_OK;
    }
    kt_sniff sn = { .now = (int64_t)time(NULL) };
    progress_start(&sn.prog, "layout", "records", c->ops->count(c));
    int rc = c->ops->each(c, sniff_record, &sn);
    progress_end(&sn.prog);
    if (rc < 0)
        return ctl_err(CTL_FAIL, "%s: reading it: %s", file, c->ops->error(c));
    *by_records = true;
    int verdict = sniff_verdict(&sn);
    if (verdict == SNIFF_UNSURE)
        return ctl_err(CTL_FAIL, "%s: its layout is unclear: no ktserver mark, and %" PRIu64
                       " of its %" PRIu64 " values open with what could be Kyoto Tycoon's "
                       "expiry header, %" PRIu64 " do not; nothing imported: --kt yes reads "
                       "a header in each value, --kt no reads them as they are", file,
                       sn.plausible, sn.n, sn.n - sn.plausible);
    *kt = verdict == SNIFF_KT;
    if (g_ctl.quiet)
        return CTL_OK;
    if (*kt) {
        char from[32] = "", to[32] = "";
        date_of(sn.xt_min, from, sizeof(from));
        date_of(sn.xt_max, to, sizeof(to));
        fprintf(stderr, "kuractl: %s has no ktserver mark, but each of its %" PRIu64 " values "
                "opens with a plausible Kyoto Tycoon expiry header (%" PRIu64 " never, %"
                PRIu64 " timed%s%s%s%s): read as ktserver's layout, the header as the "
                "exptime (--kt no keeps it in the value)\n", file, sn.n, sn.never,
                sn.n - sn.never, sn.n > sn.never ? ", " : "", sn.n > sn.never ? from : "",
                sn.n > sn.never ? " to " : "", sn.n > sn.never ? to : "");
    } else if (sn.n) {
        fprintf(stderr, "kuractl: %s: no ktserver mark, and %" PRIu64 " of its %" PRIu64
                " values open with no plausible Kyoto Tycoon expiry header: read as they "
                "are (--kt yes reads a header)\n", file, sn.n - sn.plausible, sn.n);
    }
    return CTL_OK;
}

static int open_cabinet(cabinet *c, cab_kind kind, const char *path, bool write, uint64_t hint)
{
    char err[256];
    memset(c, 0, sizeof(*c));
    c->kind = kind;
    if (!(c->ops = cab_ops_of(kind, err, sizeof(err))))
        return ctl_err(CTL_FAIL, "%s: %s", path, err);
    if (c->ops->open(c, path, write, hint) < 0) {
        int rc;
        cab_failure why = c->ops->failure(c);
        switch (why == CAB_DAMAGED && write ? CAB_UNOPENED : why) {
        case CAB_LOCKED:
            rc = ctl_err(CTL_UNREACHABLE, "%s: cannot open it with %s: %s (a file a running "
                         "server holds is refused, not waited for: stop the server, or copy "
                         "the file)", path, c->ops->library, c->ops->error(c));
            break;
        case CAB_DAMAGED:
            rc = ctl_err(CTL_FAIL, "%s: damaged: %s finds %s (the file is cut short or "
                         "overwritten; nothing was imported)", path, c->ops->library,
                         c->ops->error(c));
            break;
        default:
            rc = ctl_err(CTL_UNREACHABLE, "%s: cannot open it with %s: %s", path,
                         c->ops->library, c->ops->error(c));
        }
        c->ops->close(c);
        return rc;
    }
    return CTL_OK;
}

static void free_refused(importer *im)
{
    for (size_t i = 0; i < im->nrefused; i++)
        free(im->refused[i]);
    free(im->refused);
}

/* The verification pass of an import: every record the file holds is in
 * the database as the file has it, or was set aside (the rejects file
 * read back whole and counted); a layout chosen by the records is judged
 * again on this second read. */
static int verify_import(const char *file, cabinet *c, importer *im, bool by_records)
{
    verifier v = { .s = im->l.s, .clk = im->l.clk, .o = im->o, .whole = true,
                   .refused = (const char *const *)im->refused, .nrefused = im->nrefused,
                   .sniff = { .now = im->l.clk.now } };
    progress_start(&v.prog, "verify", "records", c->ops->count(c));
    int rc = c->ops->each(c, verify_record, &v);
    progress_end(&v.prog);
    free(v.buf);
    if (rc < 0)
        return ctl_err(CTL_FAIL, "%s: reading it again: %s", file, c->ops->error(c));
    if (v.differ)
        return ctl_err(CTL_DIFF, "verification: %" PRIu64 " of %" PRIu64 " records are not in "
                       "the database as the file has them", v.differ, v.checked);
    if (by_records && (sniff_verdict(&v.sniff) == SNIFF_KT) != im->o.kt)
        return ctl_err(CTL_DIFF, "verification: read again, %s's values do not bear the "
                       "layout chosen (%" PRIu64 " of %" PRIu64 " with a plausible header)",
                       file, v.sniff.plausible, v.sniff.n);
    uint64_t in_file = 0;
    char err[512];
    if (im->rej.count && rej_check_file(im->rej.path, &in_file, err, sizeof(err)) < 0)
        return ctl_err(CTL_DIFF, "verification: %s", err);
    if (v.rejected != im->rej.count || in_file != im->rej.count)
        return ctl_err(CTL_DIFF, "verification: %" PRIu64 " records to set aside, %" PRIu64
                       " set aside, %" PRIu64 " in %s", v.rejected, im->rej.count, in_file,
                       im->rej.path);
    if (!g_ctl.quiet)
        fprintf(stderr, "kuractl: verified: all %" PRIu64 " records are in the database%s\n",
                v.checked, im->rej.count ? ", the others in the rejects file" : "");
    return CTL_OK;
}

static int do_import(const ctl_args *a, const char *file, kura_store *s, cabinet *c,
                     const codec_opts *o, bool by_records, const char *rej_path)
{
    importer im = { .o = *o };
    rej_init(&im.rej, rej_path);
    uint64_t total = c->ops->count(c);
    ctl_loader_start(&im.l, s);
    progress_start(&im.l.prog, "import", "records", total);
    int rc = c->ops->each(c, import_record, &im);
    progress_end(&im.l.prog);
    if (rc < 0)
        rc = ctl_err(CTL_FAIL, "%s: reading it: %s", file, c->ops->error(c));
    if (rej_finish(&im.rej) < 0 && !rc)
        rc = ctl_err(CTL_FAIL, "%s: writing it: %s", rej_path, strerror(im.rej.err));
    if (!rc)
        rc = ctl_loader_finish(&im.l);
    if (rc) {
        free_refused(&im);
        return rc;
    }
    if (!g_ctl.quiet) {
        fprintf(stderr, "kuractl: imported %" PRIu64 " of %" PRIu64 " records from %s (%s%s%s)"
                "\n", im.l.items, im.read, file, cab_kind_name(c->kind),
                im.o.kt ? ", Kyoto Tycoon expiry" : "", im.o.flags ? ", plug-in flags" : "");
        if (im.rej.count) {
            char sum[256];
            fprintf(stderr, "kuractl: %" PRIu64 " records set aside whole in %s (%s)\n",
                    im.rej.count, rej_path, rej_summary(&im.rej, sum, sizeof(sum)));
        }
    }
    if (!ctl_has(a, "--no-verify"))
        rc = verify_import(file, c, &im, by_records);
    free_refused(&im);
    if (!rc && im.rej.count)
        rc = ctl_err(CTL_REJECTS, "%" PRIu64 " records the database cannot take are in %s "
                     "(the database keeps the %" PRIu64 " others)", im.rej.count, rej_path,
                     im.l.items);
    return rc;
}

int cmd_import(int argc, char **argv)
{
    ctl_args a;
    static const ctl_optdef defs[] = { { "--kt", true }, { "--kt-flags", false },
                                       { "--no-verify", false }, { "--rejects", true },
                                       { "--kmax", true }, { NULL, false } };
    int rc = ctl_parse(&a, "import", argc, argv, defs);
    if (rc)
        return rc;
    uint64_t kmax = KURA_KEY_MAX_DEFAULT;
    if (ctl_has(&a, "--kmax") && (rc = ctl_num(&a, "--kmax", ctl_opt(&a, "--kmax"), &kmax)))
        return rc;
    if (kmax < KURA_KEY_MC_MAX || kmax > KURA_KEY_MAX)
        return ctl_usage(&a, "--kmax %llu: the longest key is from %d to %d bytes",
                         (unsigned long long)kmax, KURA_KEY_MC_MAX, KURA_KEY_MAX);
    if (a.npos != 2)
        return ctl_usage(&a, "expected FILE DB");
    const char *file = a.pos[0], *db = a.pos[1];
    char rej_buf[4200];
    const char *rej_path = ctl_opt(&a, "--rejects");
    if (!rej_path && !(rej_path = rej_default_path(db, rej_buf, sizeof(rej_buf))))
        return ctl_usage(&a, "DB's name is too long");
    struct stat st;
    if (stat(rej_path, &st) == 0)
        return ctl_usage(&a, "%s exists: a previous import's rejects (move it away, or "
                         "--rejects another path)", rej_path);
    if (stat(file, &st) != 0)
        return ctl_err(CTL_UNREACHABLE, "%s: %s", file, strerror(errno));
    int kind = cab_kind_of_file(file);
    if (kind < 0)
        return ctl_err(CTL_FAIL, "%s is neither a Tokyo Cabinet hash or B+ tree file nor a "
                       "Kyoto Cabinet one (.tch .tcb .kch .kct)", file);
    cabinet c;
    if ((rc = open_cabinet(&c, (cab_kind)kind, file, false, 0)))
        return rc;
    codec_opts o = { .flags = ctl_has(&a, "--kt-flags"), .kmax = (size_t)kmax };
    bool by_records;
    if ((rc = choose_kt(&a, file, &c, &o.kt, &by_records))) {
        c.ops->close(&c);
        return rc;
    }
    bool existed = ctl_db_exists(db);
    kura_store *s;
    if ((rc = ctl_db_open(db, false, false, &s))) {
        c.ops->close(&c);
        return rc;
    }
    if (s->key_max && o.kmax > s->key_max)
        o.kmax = s->key_max;            /* the B+ tree's page size bounds its keys */
    rc = do_import(&a, file, s, &c, &o, by_records, rej_path);
    kura_store_close(s);
    c.ops->close(&c);
    if (rc != CTL_OK && rc != CTL_DIFF && rc != CTL_REJECTS && !existed) {
        if (ctl_db_remove(db) == 0)
            fprintf(stderr, "kuractl: %s removed: the import into it failed%s%s%s\n", db,
                    stat(rej_path, &st) == 0 ? " (the records set aside so far stay in " : "",
                    stat(rej_path, &st) == 0 ? rej_path : "",
                    stat(rej_path, &st) == 0 ? ")" : "");
        else
            fprintf(stderr, "kuractl: %s is partly imported and could not be removed: %s\n",
                    db, strerror(errno));
    }
    return rc;
}

/* ---- export ---------------------------------------------------------------- */

typedef struct exporter {
    cabinet *c;
    codec_opts o;
    unsigned char *buf;
    size_t cap;
    uint64_t items, lost_exptime, lost_flags;
    ctl_progress prog;
    int err;
} exporter;

static int export_item(void *arg, const kura_item *it)
{
    exporter *e = arg;
    size_t n = encode(&e->o, it, &e->buf, &e->cap);
    if (n == SIZE_MAX) {
        e->err = ENOMEM;
        return 1;
    }
    if (e->c->ops->put(e->c, it->key, it->klen, (const char *)e->buf, n) < 0) {
        e->err = -1;
        return 1;
    }
    e->lost_exptime += !e->o.kt && it->exptime != 0;
    e->lost_flags += !e->o.flags && it->flags != 0;
    progress_set(&e->prog, ++e->items);
    return 0;
}

static int do_export(const ctl_args *a, kura_store *s, const char *file, cab_kind kind)
{
    exporter e = { .o = { .kt = ctl_has(a, "--kt"), .flags = ctl_has(a, "--kt-flags") } };
    kura_store_usage u;
    s->ops->usage(s, &u);
    cabinet c;
    int rc = open_cabinet(&c, kind, file, true, u.curr_items);
    if (rc)
        return rc;
    e.c = &c;
    kura_clock clk = ctl_db_clock(s);
    progress_start(&e.prog, "export", "items", u.curr_items);
    int irc = s->ops->iterate(s, &(kura_iter_spec){ .scope = KURA_ITER_ALL }, &clk,
                              export_item, &e);
    progress_end(&e.prog);
    free(e.buf);
    if (e.err) {
        rc = ctl_err(CTL_FAIL, "%s: writing it: %s", file,
                     e.err == ENOMEM ? "out of memory" : c.ops->error(&c));
        c.ops->close(&c);
        return rc;
    }
    if (c.ops->close(&c) < 0)
        return ctl_err(CTL_FAIL, "%s: closing it: %s", file, c.err);
    /* ktserver (and import --kt auto) know such a file by its mark */
    if (e.o.kt && cab_kt_set_mark(file) < 0)
        return ctl_err(CTL_FAIL, "%s: marking it as Kyoto Tycoon's: %s", file, strerror(errno));
    if (irc < 0)
        return ctl_err(CTL_FAIL, "reading the database: %s (kuractl check)", kura_strerror(irc));
    if (!g_ctl.quiet) {
        fprintf(stderr, "kuractl: exported %" PRIu64 " items to %s (%s)\n", e.items, file,
                cab_kind_name(kind));
        if (e.lost_exptime)
            fprintf(stderr, "kuractl: %" PRIu64 " items had an exptime, which the file does "
                    "not keep (--kt keeps it, as ktserver does)\n", e.lost_exptime);
        if (e.lost_flags)
            fprintf(stderr, "kuractl: %" PRIu64 " items had flags, which the file does not "
                    "keep (--kt-flags keeps them, as ktserver's memcached plug-in does)\n",
                    e.lost_flags);
    }
    if (ctl_has(a, "--no-verify"))
        return CTL_OK;
    /* the new file read back: each of its records is in the database */
    if ((rc = open_cabinet(&c, kind, file, false, 0)))
        return rc;
    verifier v = { .s = s, .clk = clk, .o = e.o };
    uint64_t count = c.ops->count(&c);
    progress_start(&v.prog, "verify", "records", count);
    rc = c.ops->each(&c, verify_record, &v);
    progress_end(&v.prog);
    free(v.buf);
    if (rc < 0)
        rc = ctl_err(CTL_FAIL, "%s: reading it back: %s", file, c.ops->error(&c));
    c.ops->close(&c);
    if (rc)
        return rc;
    if (v.differ || count != e.items)
        return ctl_err(CTL_DIFF, "verification: %s holds %" PRIu64 " records for %" PRIu64
                       " items exported, %" PRIu64 " not as the database has them", file, count,
                       e.items, v.differ);
    if (!g_ctl.quiet)
        fprintf(stderr, "kuractl: verified: all %" PRIu64 " records read back\n", v.checked);
    return CTL_OK;
}

int cmd_export(int argc, char **argv)
{
    ctl_args a;
    static const ctl_optdef defs[] = { { "--kt", false }, { "--kt-flags", false },
                                       { "--force", false }, { "--no-verify", false },
                                       { NULL, false } };
    int rc = ctl_parse(&a, "export", argc, argv, defs);
    if (rc)
        return rc;
    if (a.npos != 2)
        return ctl_usage(&a, "expected DB FILE");
    const char *db = a.pos[0], *file = a.pos[1];
    int kind = cab_kind_of_name(file);
    if (kind < 0)
        return ctl_usage(&a, "FILE's suffix chooses its kind: .tch, .tcb, .kch or .kct");
    if ((ctl_has(&a, "--kt") || ctl_has(&a, "--kt-flags")) && (kind == CAB_TCH || kind == CAB_TCB))
        return ctl_usage(&a, "--kt and --kt-flags are Kyoto Tycoon's layouts: for a .kch or "
                         ".kct file");
    struct stat st;
    if (!ctl_has(&a, "--force") && stat(file, &st) == 0)
        return ctl_usage(&a, "%s exists (--force replaces it)", file);
    char err[256];
    if (!cab_ops_of((cab_kind)kind, err, sizeof(err)))
        return ctl_err(CTL_FAIL, "%s", err);
    kura_store *s;
    if ((rc = ctl_db_open(db, true, false, &s)))
        return rc;
    rc = do_export(&a, s, file, (cab_kind)kind);
    kura_store_close(s);
    if (rc != CTL_OK && rc != CTL_DIFF && unlink(file) == 0)
        fprintf(stderr, "kuractl: %s removed: the export failed\n", file);
    return rc;
}
