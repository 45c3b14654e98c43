/*
 * ttrestore.c - Tokyo Tyrant's restore (tcrmgr restore [-ts N] [-rcc]
 * host upath): the update log in a directory on the server replayed into
 * the store from a timestamp, on the snapshot thread (snapd.c runs it as
 * a job; the client's connection waits for the reply, its worker serves
 * the others).
 *
 * Two kinds of directory: ttserver's (files NNNNNNNN.ulog, read as
 * ttserver 1.1.41's tculog.c reads them) and kura's own (-ulog's, through
 * ul_reader).  A ttserver record is [0xC9][ts: 64 bits][sid: 16][mid: 16]
 * [size: 32] then size bytes: the request as it came on the wire (0xC8, the
 * command, its fields and data; misc without its options field) and one
 * byte more, 0 when the command succeeded there.  Each is replayed here
 * as a request of Tokyo Tyrant's protocol, through a session of its own,
 * so it means what the same request means from a client; misc gets its
 * options field (0) back.  Records before ts are skipped; ttserver's
 * start (the newest file whose first record is 30 s or more before ts)
 * is kept, as its reader stops at a bad magic byte or a torn record,
 * ending the restore as a success.  With RDBROCHKCON (opts bit 0) a
 * record whose outcome here differs from the logged one ends the restore
 * as a failure, as ttserver's consistency check does (addint and
 * adddouble: only a failure where the log says success).  A command
 * ttserver does not log is a failure, as there.
 *
 * kura's rows are results, not requests: each is applied as a master's
 * row is on a replica (engine_apply_row: with its cas and origin); -rcc
 * has nothing to compare.  A directory holding neither replays nothing
 * and answers success, as ttserver does.  A log read while rows are appended to it (the
 * server's own directory) stops at the row that was last when it began.
 */
#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "kura/bytes.h"
#include "kura/grow.h"
#include "kura/ulog.h"
#include "server.h"

#define TTUL_MAGIC      0xC9
#define TTUL_HEAD       17              /* magic, ts, sid, mid, size */
#define TTUL_DEVIANCE   30000000ull     /* tculog.c's TCULTMDEVALW, in microseconds */
#define TTUL_REC_MAX    (1u << 30)      /* a record larger is not one */
#define RDBROCHKCON     1

/* ---- ttserver's directory ---------------------------------------------- */

/* The largest N of a file NNNNNNNN.ulog (as tcatoi reads the name: its
 * leading digits); 0: none. */
static int tt_max_id(const char *dir)
{
    DIR *d = opendir(dir);
    if (!d)
        return -1;
    int max = 0;
    struct dirent *de;
    while ((de = readdir(d)) != NULL) {
        size_t n = strlen(de->d_name);
        if (n > 5 && strcmp(de->d_name + n - 5, ".ulog") == 0 && de->d_name[0] >= '0' &&
            de->d_name[0] <= '9') {
            int id = atoi(de->d_name);
            if (id > max)
                max = id;
        }
    }
    closedir(d);
    return max;
}

static int tt_open(const char *dir, int id)
{
    char path[4200];
    snprintf(path, sizeof(path), "%s/%08d.ulog", dir, id);
    return open(path, O_RDONLY | O_CLOEXEC);
}

/* Reads n bytes; false at the end of the file or a short read. */
static bool read_all(int fd, void *p, size_t n)
{
    while (n) {
        ssize_t r = read(fd, p, n);
        if (r < 0 && errno == EINTR)
            continue;
        if (r <= 0)
            return false;
        p = (char *)p + r;
        n -= (size_t)r;
    }
    return true;
}

/* The file to start from, as tculrdnew picks it: going down from the
 * newest, the first whose first record is at least 30 s before ts. */
static int tt_first_id(const char *dir, int max, uint64_t ts)
{
    uint64_t bts = ts > TTUL_DEVIANCE ? ts - TTUL_DEVIANCE : 0;
    int num = 0;
    for (int i = max; i > 0; i--) {
        int fd = tt_open(dir, i);
        if (fd < 0)
            break;
        unsigned char b[9];
        uint64_t fts = INT64_MAX;
        if (read_all(fd, b, sizeof(b)))
            fts = get_be64(b + 1);
        close(fd);
        num = i;
        if (bts >= fts)
            break;
    }
    return num < 1 ? 1 : num;
}

/* A restore writes: only where writes are taken (a master not fenced, a
 * -rw replica), checked before it starts and before each record or row,
 * so a fence or a follow mid-replay ends it (KURA_EREPLICA, answered 1).
 * kura's rows go in as a master's do on a replica (engine_apply_row),
 * past the engine's replica switch, so this is the only check they meet. */
static int restore_writable(struct kura_server *srv)
{
    return repl_role_is_writable(srv) ? KURA_OK : KURA_EREPLICA;
}

/* Before each record or row: the writes may go on, and kurad is not
 * stopping (its stop waits for this thread: a long replay ends at the
 * next record, answered to no one, as its connection is going too). */
static int restore_go_on(struct kura_server *srv)
{
    return snapd_stopping() ? KURA_EFAILED : restore_writable(srv);
}

typedef struct tt_replay {
    struct kura_server *srv;
    kura_session *sess;
    kura_buf out, req;
    uint64_t applied, skipped;
} tt_replay;

/* One record's request (rec, size bytes, its outcome byte last) through
 * the session: 0 with *ok the outcome here, or an error (a command
 * ttserver does not log, a request the protocol refuses). */
static int tt_redo(tt_replay *rp, const unsigned char *rec, size_t size, bool *ok)
{
    if (size < 3 || rec[0] != 0xC8)
        return KURA_ECORRUPT;
    const unsigned char *body = rec;
    size_t len = size - 1;
    switch (rec[1]) {
    case 0x10: case 0x11: case 0x12: case 0x13: case 0x20:  /* put putkeep putcat putshl out */
    case 0x60: case 0x61: case 0x70: case 0x71: case 0x72:  /* addint adddouble sync optimize vanish */
        break;
    case 0x90: {                        /* misc: [nsiz][anum] here, [nsiz][opts][anum] there */
        if (len < 10)
            return KURA_ECORRUPT;
        kura_buf_clear(&rp->req);
        static const unsigned char zero[4];
        if (!kura_buf_append(&rp->req, rec, 6) || !kura_buf_append(&rp->req, zero, 4) ||
            !kura_buf_append(&rp->req, rec + 6, len - 6))
            return KURA_ENOMEM;
        body = (const unsigned char *)rp->req.data;
        len += 4;
        break;
    }
    default:
        return KURA_ECORRUPT;
    }
    kura_buf_clear(&rp->out);
    size_t used = 0;
    for (int turns = 0; used < len && turns < 1000; turns++) {
        used += kura_session_process(rp->sess, (char *)body + used, len - used, &rp->out);
        if (kura_session_closing(rp->sess))
            return KURA_ECORRUPT;
    }
    if (used != len || kura_buf_size(&rp->out) == 0)
        return KURA_ECORRUPT;
    *ok = rp->out.data[0] == 0;
    return KURA_OK;
}

/* Whether the outcome here matches the logged one, as tculogadbredo
 * judges it. */
static bool tt_consistent(uint8_t cmd, bool logged_ok, bool ok)
{
    if (cmd == 0x60 || cmd == 0x61)
        return !(logged_ok && !ok);
    return logged_ok == ok;
}

/* Replays the records of file fd from ts on.  0 at the end (or where
 * ttserver's reader stops), or an error. */
static int tt_replay_file(tt_replay *rp, int fd, uint64_t ts, bool check, const char *dir,
                          int id)
{
    unsigned char head[TTUL_HEAD];
    unsigned char *rec = NULL;
    size_t cap = 0;
    int rc = KURA_OK;
    while (read_all(fd, head, sizeof(head))) {
        uint32_t size = get_be32(head + 13);
        if (head[0] != TTUL_MAGIC || size > TTUL_REC_MAX) {
            log_msg(KURA_LOG_ERROR, "Tokyo Tyrant restore: %s/%08d.ulog: a record without "
                    "its magic byte; the replay ends there, as ttserver's does", dir, id);
            break;
        }
        if (size > cap) {
            unsigned char *n = realloc(rec, size);
            if (!n) {
                rc = KURA_ENOMEM;
                break;
            }
            rec = n;
            cap = size;
        }
        if (!read_all(fd, rec, size))
            break;                      /* a torn tail: the end, as ttserver's reader */
        if (get_be64(head + 1) < ts) {
            rp->skipped++;
            continue;
        }
        bool ok = false;
        if ((rc = restore_go_on(rp->srv)) != KURA_OK)
            break;
        if ((rc = tt_redo(rp, rec, size, &ok)) != KURA_OK) {
            log_msg(KURA_LOG_ERROR, "Tokyo Tyrant restore: %s/%08d.ulog: a record of command "
                    "0x%02x that is not replayed (%s)", dir, id, size > 1 ? rec[1] : 0,
                    kura_strerror(rc));
            break;
        }
        rp->applied++;
        if (check && !tt_consistent(rec[1], rec[size - 1] == 0, ok)) {
            log_msg(KURA_LOG_ERROR, "Tokyo Tyrant restore: %s/%08d.ulog: record %" PRIu64
                    " (command 0x%02x) %s here, where the log says it %s (-rcc)", dir, id,
                    rp->applied, rec[1], ok ? "succeeded" : "failed",
                    rec[size - 1] == 0 ? "succeeded" : "failed");
            rc = KURA_EFAILED;
            break;
        }
    }
    free(rec);
    return rc;
}

static int tt_restore(kura_server *srv, const char *dir, int max, uint64_t ts, bool check)
{
    static kura_thread_stats stats;     /* the snapshot thread's: jobs run one at a time */
    kura_session_config sc = { .engine = srv->engine, .stats = &stats, .server = &srv->info,
                               .conn_id = -1 };
    tt_replay rp = { .srv = srv, .sess = kura_session_new(&sc) };
    if (!rp.sess)
        return KURA_ENOMEM;
    int rc = KURA_OK;
    for (int id = tt_first_id(dir, max, ts); id <= max && rc == KURA_OK; id++) {
        int fd = tt_open(dir, id);
        if (fd < 0)
            break;                      /* ttserver's reader ends at a missing file */
        rc = tt_replay_file(&rp, fd, ts, check, dir, id);
        close(fd);
    }
    kura_session_free(rp.sess);
    kura_buf_free(&rp.out);
    kura_buf_free(&rp.req);
    if (rc == KURA_OK)
        log_msg(KURA_LOG_INFO, "Tokyo Tyrant restore from %s: %" PRIu64 " records replayed, %"
                PRIu64 " before %" PRIu64 " skipped", dir, rp.applied, rp.skipped, ts);
    return rc;
}

/* ---- kura's own directory ------------------------------------------------ */

static void ul_quiet(void *arg, int level, const char *line)
{
    (void)arg;
    if (level == KURA_LOG_ERROR)
        log_msg(KURA_LOG_ERROR, "Tokyo Tyrant restore: %s", line);
}

static int kura_restore(kura_server *srv, const char *dir, uint64_t ts)
{
    ul_config uc = { .dir = dir, .read_only = true, .log = ul_quiet };
    ul_log *log = NULL;
    ul_reader *rd = NULL;
    char err[300] = "";
    int rc = ul_open(&uc, &log, NULL, err, sizeof(err));
    if (rc == KURA_NOTFOUND) {
        /* no segment: nothing to replay, which ttserver answers 0 */
        log_msg(KURA_LOG_INFO, "Tokyo Tyrant restore: no update log in %s: nothing replayed",
                dir);
        return KURA_OK;
    }
    if (rc) {
        log_msg(KURA_LOG_ERROR, "Tokyo Tyrant restore: %s is neither ttserver's update log "
                "nor kura's: %s", dir, err[0] ? err : kura_strerror(rc));
        return rc;
    }
    uint64_t last = ul_last_ts(log), n = 0;
    if ((rc = ul_reader_open(log, ts ? ts - 1 : 0, &rd)) == KURA_NOTFOUND)
        log_msg(KURA_LOG_ERROR, "Tokyo Tyrant restore: %s no longer holds the rows from %"
                PRIu64, dir, ts);
    while (rc == KURA_OK) {
        ul_row row;
        rc = ul_reader_next(rd, &row);
        if (rc == UL_CAUGHT_UP || (rc == KURA_OK && row.ts > last)) {
            rc = KURA_OK;
            break;
        }
        if (rc == KURA_OK && (rc = restore_go_on(srv)) == KURA_OK &&
            (rc = engine_apply_row(srv->engine, &row)) == KURA_OK)
            n++;
    }
    if (rd)
        ul_reader_close(rd);
    ul_close(log);
    if (rc == KURA_OK)
        log_msg(KURA_LOG_INFO, "Tokyo Tyrant restore from kura's update log %s: %" PRIu64
                " rows applied", dir, n);
    else if (rc != KURA_EREPLICA && !snapd_stopping())     /* ttrestore_run says why */
        log_msg(KURA_LOG_ERROR, "Tokyo Tyrant restore from %s failed: %s", dir,
                kura_strerror(rc));
    return rc;
}

int ttrestore_run(struct kura_server *srv, const char *dir, uint64_t ts, int opts)
{
    if (restore_writable(srv) != KURA_OK) {
        log_msg(KURA_LOG_ERROR, "Tokyo Tyrant restore: refused: this server takes no writes "
                "(a read-only replica, or a fenced master)");
        return KURA_EREPLICA;
    }
    int max = tt_max_id(dir);
    if (max < 0) {
        log_msg(KURA_LOG_ERROR, "Tokyo Tyrant restore: cannot read %s: %s", dir,
                strerror(errno));
        return KURA_ESYS;
    }
    int rc = max == 0 ? kura_restore(srv, dir, ts)
                      : tt_restore(srv, dir, max, ts, (opts & RDBROCHKCON) != 0);
    if (rc == KURA_EREPLICA || (rc != KURA_OK && snapd_stopping()))
        log_msg(KURA_LOG_ERROR, "Tokyo Tyrant restore from %s: stopped: %s", dir,
                rc == KURA_EREPLICA ? "this server takes writes no more (fenced, or following "
                "a master)" : "kurad is stopping");
    return rc;
}
