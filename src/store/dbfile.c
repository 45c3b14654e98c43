/*
 * dbfile.c - helpers the file backends share (include/kura/dbfile.h):
 * the database directory and its LOCK, size parameters, the put
 * condition, stats lines, clocks, deadlines, the background threads.
 */
#include <errno.h>
#include <stdatomic.h>
#include <fcntl.h>
#include <stdio.h>
#include <string.h>
#include <sys/file.h>
#include <sys/stat.h>

#include "kura/dbfile.h"
#include "kura/seglog.h"
#include "kura/testhooks.h"

int kura_param_size(kura_params *params, const char *what, const char *name, uint64_t *v,
                    uint64_t lo, uint64_t hi, char *err, size_t errlen)
{
    const char *s = kura_param_take(params, name);
    if (!s)
        return KURA_OK;
    if (kura_parse_size(s, v) != KURA_OK || *v < lo || *v > hi) {
        snprintf(err, errlen, "%s parameter %s=%s: expected a size from %llu to %llu", what,
                 name, s, (unsigned long long)lo, (unsigned long long)hi);
        return KURA_EINVAL;
    }
    return KURA_OK;
}

/* mkdir, and the new name made durable in its parent */
static int make_dir(const kura_io *io, const char *path, char *err, size_t errlen)
{
    if (io->mkdirat(io, AT_FDCWD, path, 0755) != 0) {
        snprintf(err, errlen, "cannot create %s: %s", path, strerror(errno));
        return sl_errno_status(errno);
    }
    char parent[4200];
    snprintf(parent, sizeof(parent), "%s", path);
    char *slash = strrchr(parent, '/');
    if (slash == parent)
        parent[1] = '\0';
    else if (slash)
        *slash = '\0';
    else
        snprintf(parent, sizeof(parent), ".");
    int pfd = io->open(io, AT_FDCWD, parent, O_RDONLY | O_DIRECTORY | O_CLOEXEC, 0);
    int bad = pfd < 0 || io->fsync(io, pfd) != 0 ? errno : 0;
    if (pfd >= 0)
        io->close(io, pfd);
    if (bad) {
        snprintf(err, errlen, "cannot make %s durable: %s", path, strerror(bad));
        return sl_errno_status(bad);
    }
    return KURA_OK;
}

int kura_db_dir_open(const kura_io *io, const char *path, bool read_only, const char *what,
                     int *dirfd, int *lockfd, char *err, size_t errlen)
{
    struct stat st;
    int rc;
    *dirfd = *lockfd = -1;
    if (stat(path, &st) != 0) {
        if (errno != ENOENT || read_only) {
            snprintf(err, errlen, "%s: %s", path, strerror(errno));
            return sl_errno_status(errno);
        }
        if ((rc = make_dir(io, path, err, errlen)))
            return rc;
    } else if (!S_ISDIR(st.st_mode)) {
        snprintf(err, errlen, "%s: not a kura %s database (it is a file; kura's %s database "
                 "is a directory)", path, what, what);
        return KURA_EINVAL;
    }
    *dirfd = io->open(io, AT_FDCWD, path, O_RDONLY | O_DIRECTORY | O_CLOEXEC, 0);
    if (*dirfd < 0) {
        snprintf(err, errlen, "%s: %s", path, strerror(errno));
        return sl_errno_status(errno);
    }
    *lockfd = io->open(io, *dirfd, "LOCK", (read_only ? O_RDONLY : O_RDWR | O_CREAT) | O_CLOEXEC,
                       0644);
    if (*lockfd >= 0 && flock(*lockfd, (read_only ? LOCK_SH : LOCK_EX) | LOCK_NB) != 0) {
        snprintf(err, errlen, "%s: in use by another process (%s)", path,
                 errno == EWOULDBLOCK ? "locked" : strerror(errno));
        return KURA_EINVAL;
    }
    if (*lockfd < 0 && !read_only) {
        snprintf(err, errlen, "%s/LOCK: %s", path, strerror(errno));
        return sl_errno_status(errno);
    }
    return KURA_OK;
}

void kura_emit_u64(kura_stat_fn emit, void *arg, const char *name, uint64_t v)
{
    char buf[32];
    snprintf(buf, sizeof(buf), "%llu", (unsigned long long)v);
    emit(arg, name, buf);
}

struct timespec kura_deadline_in(long ms)
{
    struct timespec ts;
    clock_gettime(CLOCK_REALTIME, &ts);
    ts.tv_sec += ms / 1000;
    ts.tv_nsec += (ms % 1000) * 1000000L;
    if (ts.tv_nsec >= 1000000000L) {
        ts.tv_sec++;
        ts.tv_nsec -= 1000000000L;
    }
    return ts;
}

double kura_mono(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + ts.tv_nsec / 1e9;
}

double kura_backoff_next(double backoff)
{
    return backoff <= 0 ? 1 : backoff * 2 > 30 ? 30 : backoff * 2;
}

/* ---- background threads ----------------------------------------------- */

void kura_bg_init(kura_bg *b)
{
    memset(b, 0, sizeof(*b));
    pthread_mutex_init(&b->mu, NULL);
    pthread_cond_init(&b->cv, NULL);
}

/* Calls fn every period_ms until the stop (unless held: kura_test.bg_hold). */
static void bg_loop(kura_bg *b, long period_ms, void (*fn)(void *), bool holdable)
{
    pthread_mutex_lock(&b->mu);
    while (!b->stopping) {
        struct timespec ts = kura_deadline_in(period_ms);
        pthread_cond_timedwait(&b->cv, &b->mu, &ts);
        if (b->stopping)
            break;
        pthread_mutex_unlock(&b->mu);
        if (!holdable || !KURA_TEST_SWITCH(bg_hold))
            fn(b->arg);
        pthread_mutex_lock(&b->mu);
    }
    pthread_mutex_unlock(&b->mu);
}

static void *work_main(void *arg)
{
    kura_bg *b = arg;
    bg_loop(b, 100, b->work, true);
    return NULL;
}

static void *sync_main(void *arg)
{
    kura_bg *b = arg;
    bg_loop(b, 1000, b->sync, false);
    return NULL;
}

int kura_bg_start(kura_bg *b, void (*work)(void *), void (*sync)(void *), void *arg,
                  const char *what, char *err, size_t errlen)
{
    b->work = work;
    b->sync = sync;
    b->arg = arg;
    if (pthread_create(&b->work_thread, NULL, work_main, b) != 0) {
        snprintf(err, errlen, "cannot start the %s's background thread", what);
        return KURA_ESYS;
    }
    b->work_running = true;
    if (sync) {
        if (pthread_create(&b->sync_thread, NULL, sync_main, b) != 0) {
            snprintf(err, errlen, "cannot start the %s's sync thread", what);
            return KURA_ESYS;
        }
        b->sync_running = true;
    }
    return KURA_OK;
}

bool kura_bg_stopping(kura_bg *b)
{
    return atomic_load(&b->stopping);
}

void kura_bg_stop(kura_bg *b)
{
    if (!b->work_running && !b->sync_running)
        return;
    pthread_mutex_lock(&b->mu);
    b->stopping = true;
    pthread_cond_broadcast(&b->cv);
    pthread_mutex_unlock(&b->mu);
    if (b->work_running)
        pthread_join(b->work_thread, NULL);
    if (b->sync_running)
        pthread_join(b->sync_thread, NULL);
    b->work_running = b->sync_running = false;
}

void kura_bg_destroy(kura_bg *b)
{
    kura_bg_stop(b);
    pthread_mutex_destroy(&b->mu);
    pthread_cond_destroy(&b->cv);
}
