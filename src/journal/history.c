/*
 * history.c - the history vector: for each origin server id, the highest
 * origin timestamp of a row this server holds (journal.h says what it is
 * for; docs/replication.md, "History and divergence", how replication
 * uses it; docs/formats.md, "The history file", the bytes).
 *
 * Rows flow from server to server in order, so holding origin o's row at
 * t means holding every row of o up to t: a vector of one number per
 * origin describes all of this server's history, and a replica whose entry
 * for some origin is above its master's holds rows the master never had.
 *
 * Kept in memory beside the update log, noted as each row is appended
 * (feed.c: one small table under a mutex of its own), and kept durable
 * without reading the whole log at each start: the file "history" in the
 * log's directory holds the vector as of a log timestamp (as_of), and a
 * start reads it and notes only the rows after as_of.  It is rewritten
 * (beside, synced, renamed) when the log moves to a new segment (the
 * journal's thread looks once a second), at a clean stop, and when a
 * replica's full copy replaces the store (journal_history_reset).  Its
 * as_of is the watermark: every row up to it has finished its change, so
 * it was noted before the vector was read; and the log is synced before
 * the file is written, so the file never counts a row a crash could cut
 * from the log's tail.
 */
#include <errno.h>
#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <fcntl.h>
#include <unistd.h>

#include "kura/crc32c.h"
#include "kura/fsutil.h"
#include "journal_int.h"

#define HIST_FILE "history"
#define HIST_MAGIC "kura-history"
#define HIST_VERSION 1

/* ---- the vector (pure) ------------------------------------------------------- */

bool journal_hist_note(journal_hist *h, uint32_t sid, uint64_t ts)
{
    for (size_t i = 0; i < h->n; i++) {
        if (h->e[i].sid == sid) {
            if (ts > h->e[i].ts)
                h->e[i].ts = ts;
            return true;
        }
    }
    if (h->n == JOURNAL_HIST_MAX)
        return false;
    h->e[h->n].sid = sid;
    h->e[h->n].ts = ts;
    h->n++;
    return true;
}

uint64_t journal_hist_get(const journal_hist *h, uint32_t sid)
{
    for (size_t i = 0; i < h->n; i++)
        if (h->e[i].sid == sid)
            return h->e[i].ts;
    return 0;
}

static int by_sid(const void *a, const void *b)
{
    const journal_hist_entry *x = a, *y = b;
    return x->sid < y->sid ? -1 : x->sid > y->sid;
}

int journal_hist_format(const journal_hist *h, char *buf, size_t cap)
{
    journal_hist s = *h;
    size_t off = 0;
    qsort(s.e, s.n, sizeof(s.e[0]), by_sid);
    if (cap)
        buf[0] = '\0';
    for (size_t i = 0; i < s.n; i++) {
        int n = snprintf(buf + off, cap - off, "%s%u:%" PRIu64, i ? "," : "", s.e[i].sid,
                         s.e[i].ts);
        if (n < 0 || (size_t)n >= cap - off)
            return -1;
        off += (size_t)n;
    }
    return (int)off;
}

int journal_hist_parse(const char *s, journal_hist *h)
{
    memset(h, 0, sizeof(*h));
    if (!*s || strcmp(s, "-") == 0)
        return KURA_OK;
    while (*s) {
        char *end;
        errno = 0;
        unsigned long sid = strtoul(s, &end, 10);
        if (end == s || *end != ':' || sid == 0 || sid > 65535)
            return KURA_EINVAL;
        s = end + 1;
        unsigned long long ts = strtoull(s, &end, 10);
        if (end == s || errno || (*end && (*end != ',' || !end[1])))
            return KURA_EINVAL;
        if (!journal_hist_note(h, (uint32_t)sid, ts))
            return KURA_EINVAL;
        s = *end ? end + 1 : end;
    }
    return KURA_OK;
}

uint32_t journal_hist_ahead(const journal_hist *mine, const journal_hist *theirs)
{
    for (size_t i = 0; i < mine->n; i++)
        if (mine->e[i].ts > journal_hist_get(theirs, mine->e[i].sid))
            return mine->e[i].sid;
    return 0;
}

/* ---- the journal's vector ---------------------------------------------------------- */

/* A change made here (the write path) raises this server's own entry with
 * a compare-and-swap, no lock; a row from another origin takes the lock. */
void history_note(struct kura_journal *j, uint32_t sid, uint64_t origin_ts, uint32_t seg)
{
    if (atomic_load_explicit(&j->hist_seg, memory_order_relaxed) != seg)
        atomic_store_explicit(&j->hist_seg, seg, memory_order_relaxed);
    if (sid == 0 || sid == j->hist_own_sid) {
        uint64_t cur = atomic_load_explicit(&j->hist_own_ts, memory_order_relaxed);
        while (origin_ts > cur &&
               !atomic_compare_exchange_weak_explicit(&j->hist_own_ts, &cur, origin_ts,
                                                      memory_order_relaxed,
                                                      memory_order_relaxed))
            ;
        return;
    }
    pthread_mutex_lock(&j->hist_lock);
    if (!journal_hist_note(&j->hist, sid, origin_ts))
        j->hist_full = true;            /* logged once, by the journal's thread */
    pthread_mutex_unlock(&j->hist_lock);
}

/* Sets the vector (the lock held): this server's own entry apart. */
static void hist_set(struct kura_journal *j, const journal_hist *h)
{
    j->hist = *h;
    atomic_store(&j->hist_own_ts, journal_hist_get(h, j->hist_own_sid));
}

void journal_history(struct kura_journal *j, journal_hist *out)
{
    pthread_mutex_lock(&j->hist_lock);
    *out = j->hist;
    uint64_t own = atomic_load(&j->hist_own_ts);
    pthread_mutex_unlock(&j->hist_lock);
    if (own)                            /* (a table full of other origins leaves it out:
                                           logged once as full) */
        (void)journal_hist_note(out, j->hist_own_sid, own);
}

int journal_history_format(struct kura_journal *j, char *buf, size_t cap)
{
    journal_hist h;
    journal_history(j, &h);
    return journal_hist_format(&h, buf, cap);
}

/* The file: "kura-history 1 <as_of> <crc32c of line 2, hex>\n<vector>\n". */
static int save(struct kura_journal *j, ul_log *log, const journal_hist *h, uint64_t as_of)
{
    char vec[JOURNAL_HIST_MAX * 28 + 2], b[sizeof(vec) + 80];
    if (journal_hist_format(h, vec, sizeof(vec)) < 0)
        return KURA_EINVAL;
    int n = snprintf(b, sizeof(b), HIST_MAGIC " %d %" PRIu64 " %08x\n%s\n", HIST_VERSION, as_of,
                     crc32c_update(0, vec, strlen(vec)), vec);
    int dfd = open(ul_dir(log), O_RDONLY | O_DIRECTORY | O_CLOEXEC);
    int rc = dfd >= 0 && kura_write_file_atomic(dfd, HIST_FILE, b, (size_t)n) == 0
             ? KURA_OK : KURA_EIO;
    if (rc != KURA_OK) {
        char line[300];
        snprintf(line, sizeof(line), "update log: cannot write %s/" HIST_FILE ": %s (the next "
                 "start reads more of the log for its history)", ul_dir(log),
                 strerror(errno));
        if (j->log)
            j->log(KURA_LOG_ERROR, line);
    }
    if (dfd >= 0)
        close(dfd);
    return rc;
}

int history_load_file(const char *dir, journal_hist *h, uint64_t *as_of)
{
    char path[4200], b[JOURNAL_HIST_MAX * 28 + 120];
    snprintf(path, sizeof(path), "%s/" HIST_FILE, dir);
    memset(h, 0, sizeof(*h));
    *as_of = 0;
    FILE *f = fopen(path, "r");
    if (!f)
        return errno == ENOENT ? KURA_NOTFOUND : KURA_EIO;
    size_t n = fread(b, 1, sizeof(b) - 1, f);
    fclose(f);
    b[n] = '\0';
    int ver;
    unsigned long long ts;
    unsigned crc;
    int used = 0;
    if (sscanf(b, HIST_MAGIC " %d %llu %x\n%n", &ver, &ts, &crc, &used) != 3 || !used ||
        ver != HIST_VERSION)
        return KURA_ECORRUPT;
    char *vec = b + used, *nl = strchr(vec, '\n');
    if (!nl || nl[1])
        return KURA_ECORRUPT;
    *nl = '\0';
    if (crc32c_update(0, vec, strlen(vec)) != crc || journal_hist_parse(vec, h) != KURA_OK)
        return KURA_ECORRUPT;
    *as_of = ts;
    return KURA_OK;
}

/* At attach: the file's vector, then the rows after its as_of (all of the
 * log's without a usable file). */
int history_load(struct kura_journal *j, ul_log *log)
{
    journal_hist h;
    uint64_t as_of;
    int rc = history_load_file(ul_dir(log), &h, &as_of);
    if (rc != KURA_OK && rc != KURA_NOTFOUND) {
        journal_log(j, KURA_LOG_ERROR, "update log: its history file is damaged: reading the "
                    "whole log for it");
        memset(&h, 0, sizeof(h));
        as_of = 0;
    }
    ul_extent ex;
    ul_get_extent(log, &ex);
    ul_reader *rd;
    uint64_t rows = 0;
    rc = ul_reader_open(log, as_of > ex.from_ts ? as_of : ex.from_ts, &rd);
    if (rc == KURA_OK) {
        ul_row row;
        while ((rc = ul_reader_next(rd, &row)) == KURA_OK) {
            if (!journal_hist_note(&h, row.sid, row.origin_ts))
                j->hist_full = true;
            rows++;
        }
        ul_reader_close(rd);
        if (rc == UL_CAUGHT_UP)
            rc = KURA_OK;
    }
    if (rc < 0)
        return rc;
    pthread_mutex_lock(&j->hist_lock);
    j->hist_own_sid = ul_sid(log);
    hist_set(j, &h);
    pthread_mutex_unlock(&j->hist_lock);
    j->hist_saved_seg = ex.last_seg;
    if (rows)
        rc = save(j, log, &h, ul_last_ts(log));
    return rc == KURA_OK || rc == KURA_EIO ? KURA_OK : rc;
}

void history_tick(struct kura_journal *j, uint64_t as_of, bool force)
{
    if (!j->ulog)
        return;
    pthread_mutex_lock(&j->hist_save_lock);
    uint32_t seg = atomic_load(&j->hist_seg);
    journal_hist h;
    journal_history(j, &h);
    pthread_mutex_lock(&j->hist_lock);
    bool full = j->hist_full && !j->hist_full_logged;
    j->hist_full_logged |= full;
    pthread_mutex_unlock(&j->hist_lock);
    if (full)
        journal_log(j, KURA_LOG_ERROR, "update log: rows from more than 128 origin servers: "
                    "the history keeps the first 128 (divergence from the others is not seen)");
    /* the log is synced first: the file never counts a row that a crash
     * could still cut from the log's tail (under -sync none or interval) */
    if ((force || seg != j->hist_saved_seg) && ul_sync_now(j->ulog) == KURA_OK) {
        if (save(j, j->ulog, &h, as_of) == KURA_OK)
            j->hist_saved_seg = seg;
    }
    pthread_mutex_unlock(&j->hist_save_lock);
}

int journal_history_reset(struct kura_journal *j, const journal_hist *h)
{
    if (!j->ulog)
        return KURA_OK;
    pthread_mutex_lock(&j->hist_save_lock);
    pthread_mutex_lock(&j->hist_lock);
    hist_set(j, h);
    pthread_mutex_unlock(&j->hist_lock);
    /* the rows the log holds up to now are not what this server holds any
     * more: the next start reads only those after */
    int rc = save(j, j->ulog, h, ul_last_ts(j->ulog));
    pthread_mutex_unlock(&j->hist_save_lock);
    return rc;
}

void history_init(struct kura_journal *j)
{
    pthread_mutex_init(&j->hist_lock, NULL);
    pthread_mutex_init(&j->hist_save_lock, NULL);
}

void history_destroy(struct kura_journal *j)
{
    pthread_mutex_destroy(&j->hist_lock);
    pthread_mutex_destroy(&j->hist_save_lock);
}
