/*
 * dbfile.c - helpers the file backends share (include/kura/dbfile.h):
 * the database directory and its LOCK, size parameters, the put
 * condition, stats lines, deadlines.
 */
#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <string.h>
#include <sys/file.h>
#include <sys/stat.h>

#include "kura/dbfile.h"
#include "kura/seglog.h"

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

int kura_put_cond_check(int cond, bool live, uint64_t cas, uint64_t cmp_cas)
{
    switch (cond) {
    case KURA_PUT_ANY:
        return KURA_OK;
    case KURA_PUT_ABSENT:
        return live ? KURA_EXISTS : KURA_OK;
    case KURA_PUT_PRESENT:
        return live ? KURA_OK : KURA_NOTFOUND;
    case KURA_PUT_CAS:
        return !live ? KURA_NOTFOUND : cas != cmp_cas ? KURA_EXISTS : KURA_OK;
    default:
        return KURA_EINVAL;
    }
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
