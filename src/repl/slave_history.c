/*
 * slave_history.c - the replica's history check (slave.c's first comment
 * says when it runs): before any row is applied, the master's history
 * against this server's; rows this server holds that the master never had
 * are divergence, saved to a file beside the update log for an operator
 * (kuractl load), then a full copy is asked for, or the server stops.
 */
#include <errno.h>
#include <fcntl.h>
#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "slave_int.h"

static bool text_key(const void *key, size_t n)
{
    const unsigned char *k = key;
    for (size_t i = 0; i < n; i++)
        if (k[i] <= ' ' || k[i] == 0x7f)
            return false;
    return n > 0;
}

/* One row in the memcached text format "kuractl load" reads: 1 written,
 * 0 skipped (a key the text protocol cannot carry, a flush_all), -1 error. */
static int save_row(FILE *f, const ul_row *r)
{
    if (r->type == UL_FLUSH || !text_key(r->key, r->klen))
        return 0;
    if (r->type == UL_DEL)
        return fprintf(f, "delete %.*s\r\n", (int)r->klen, (const char *)r->key) < 0 ? -1 : 1;
    if (fprintf(f, "set %.*s %" PRIu32 " %" PRId64 " %zu\r\n", (int)r->klen,
                (const char *)r->key, r->flags, r->exptime, r->vlen) < 0 ||
        fwrite(r->val, 1, r->vlen, f) != r->vlen || fwrite("\r\n", 1, 2, f) != 2)
        return -1;
    return 1;
}

/* Writes the rows of this server's update log that the master never had
 * (origin o's rows past theirs[o], where mine[o] is above it) to a new file
 * beside the log, synced: KURA_OK with the path and counts, or an error. */
static int save_diverged(repl_slave *s, const journal_hist *mine, const journal_hist *theirs,
                         uint32_t msid, char *path, size_t plen, uint64_t *rows,
                         uint64_t *skipped)
{
    ul_log *log = s->cfg.ulog;
    uint64_t from = UINT64_MAX;
    for (size_t i = 0; i < mine->n; i++) {
        uint64_t t = journal_hist_get(theirs, mine->e[i].sid);
        if (mine->e[i].ts > t && t < from)
            from = t;
    }
    ul_extent ex;
    ul_get_extent(log, &ex);
    if (from < ex.from_ts)
        from = ex.from_ts;              /* the rows before are not held any more */
    time_t now = time(NULL);
    struct tm tm;
    char stamp[32];
    gmtime_r(&now, &tm);
    strftime(stamp, sizeof(stamp), "%Y%m%dT%H%M%SZ", &tm);
    FILE *f = NULL;
    for (int i = 1; !f && i < 100; i++) {       /* never over an earlier one */
        snprintf(path, plen, "%s/diverged-%s-from-sid%u%s%.0d.txt", ul_dir(log), stamp, msid,
                 i > 1 ? "-" : "", i > 1 ? i : 0);
        f = fopen(path, "wx");
        if (!f && errno != EEXIST)
            break;
    }
    if (!f)
        return sl_errno_status(errno);
    ul_reader *rd;
    int rc = ul_reader_open(log, from, &rd);
    *rows = *skipped = 0;
    if (rc == KURA_OK) {
        ul_row r;
        while ((rc = ul_reader_next(rd, &r)) == KURA_OK) {
            if (r.origin_ts <= journal_hist_get(theirs, r.sid))
                continue;
            int w = save_row(f, &r);
            if (w < 0) {
                rc = KURA_EIO;
                break;
            }
            *(w ? rows : skipped) += 1;
        }
        ul_reader_close(rd);
        if (rc == UL_CAUGHT_UP)
            rc = KURA_OK;
    }
    if (fflush(f) != 0 || fsync(fileno(f)) != 0)
        rc = rc ? rc : KURA_EIO;
    fclose(f);
    return rc;
}

/* The master's welcome against this server's history, before any row is
 * applied: 0 (go on), SESS_DIVERGED (saved; ask for a copy), SESS_FAILED
 * (could not save: nothing changes, tried again) or SESS_FATAL (refuse). */
int slave_history_check(repl_slave *s, const repl_welcome *w)
{
    if (s->cfg.rw || !s->cfg.ulog)
        return 0;                       /* a dual master keeps its rule; no log: no history */
    journal_hist theirs, mine;
    if (!w->ext || journal_hist_parse(w->hist, &theirs) != KURA_OK) {
        if (!s->hist_warned)
            logf_(s, LOG_WARN, "replica: WARNING: master %s:%d sends no history (an older kura, "
                  "or another server): this replica cannot check that it holds no rows the "
                  "master never had", s->host, s->port);
        s->hist_warned = true;
        return 0;
    }
    journal_history(engine_journal(s->cfg.engine), &mine);
    uint32_t o = journal_hist_ahead(&mine, &theirs);
    if (!o || (s->want_copy && w->boot))
        return 0;                       /* (its rows are saved: the copy asked for comes) */
    if (s->want_copy) {
        /* saved already, and the master did not send the copy asked for */
        slave_set_state(s, REPL_ST_DIVERGED);
        slave_fail(s, KURA_LOG_ERROR, "master %s:%d did not send the full copy asked for (copy=1); "
                   "nothing applied, retrying", s->host, s->port);
        return SESS_FAILED;
    }
    slave_set_state(s, REPL_ST_DIVERGED);
    atomic_fetch_add(&s->divergences, 1);
    char path[4300];
    uint64_t rows = 0, skipped = 0;
    int rc = save_diverged(s, &mine, &theirs, w->msid, path, sizeof(path), &rows, &skipped);
    if (rc != KURA_OK) {
        slave_fail(s, KURA_LOG_ERROR, "diverged from master %s:%d (origin %u: rows up to %"
                   PRIu64 " here, %" PRIu64 " there), and cannot save its rows to %s: %s; "
                   "nothing applied, retrying", s->host, s->port, o, journal_hist_get(&mine, o),
                   journal_hist_get(&theirs, o), path, kura_strerror(rc));
        return SESS_FAILED;
    }
    char extra[96] = "";
    if (skipped)
        snprintf(extra, sizeof(extra), " (%" PRIu64 " flush_all rows or keys the text format "
                 "cannot carry left out)", skipped);
    logf_(s, LOG_WARN, "replica: WARNING: diverged from master %s:%d (sid %u): this server holds "
          "%" PRIu64 " rows the master never had (origin %u: up to %" PRIu64 " here, %" PRIu64
          " there); saved to %s%s (kuractl load DB FILE applies them); %s", s->host, s->port,
          w->msid, rows, o, journal_hist_get(&mine, o), journal_hist_get(&theirs, o), path,
          extra, s->cfg.divergence_refuse ? "stopping (-repl-divergence refuse)"
                                           : "taking a full copy from the master");
    pthread_mutex_lock(&s->lock);
    snprintf(s->last_error, sizeof(s->last_error), "diverged: %" PRIu64 " rows saved to %.400s",
             rows, path);
    pthread_mutex_unlock(&s->lock);
    if (s->cfg.divergence_refuse) {
        logf_(s, KURA_LOG_ERROR, "replica: stopped on divergence. Inspect the saved rows, "
              "apply them where they belong (kuractl load DB %s), then either start this "
              "server again as a replica with -repl-divergence copy (it replaces its data by a "
              "full copy), or remove its data (database and update log) and start it with "
              "-mhost for a full copy", path);
        if (s->cfg.fatal)
            s->cfg.fatal(s->cfg.fatal_arg, 2);
        return SESS_FATAL;
    }
    if (w->boot)
        return 0;                       /* the copy that follows replaces the data */
    s->want_copy = true;
    return SESS_DIVERGED;
}

int slave_term_check(repl_slave *s, uint64_t term)
{
    if (!s->cfg.term)
        return 0;
    uint64_t mine = s->cfg.term(s->cfg.term_arg);
    if (term < mine) {
        slave_set_state(s, REPL_ST_REFUSED);
        slave_fail(s, KURA_LOG_ERROR, "master %s:%d is at term %" PRIu64 ", older than this "
                   "server's (%" PRIu64 "): a master that was replaced; nothing applied from it "
                   "(repl follow the current master)", s->host, s->port, term, mine);
        return -1;
    }
    if (term > mine) {
        char peer[300];
        snprintf(peer, sizeof(peer), "%s:%d", s->host, s->port);
        s->cfg.heard_term(s->cfg.term_arg, term, true, peer);
    }
    return 0;
}
