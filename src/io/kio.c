/*
 * kio.c - the default kura_io: the system's own calls (include/kura/kio.h).
 *
 * A table rather than direct calls so that tests can put a fault injector
 * or a power-loss recorder between a store and the disk; in production the
 * cost is one indirect call per file operation, next to a system call.
 */
#include <errno.h>
#include <fcntl.h>
#include <limits.h>
#include <stdatomic.h>
#include <stdio.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

#include "kura/kio.h"

static int sys_open(const kura_io *io, int dirfd, const char *path, int flags, mode_t mode)
{
    (void)io;
    return openat(dirfd, path, flags, mode);
}

static int sys_close(const kura_io *io, int fd)
{
    (void)io;
    return close(fd);
}

static ssize_t sys_pread(const kura_io *io, int fd, void *buf, size_t n, off_t off)
{
    (void)io;
    return pread(fd, buf, n, off);
}

static ssize_t sys_pwritev(const kura_io *io, int fd, const struct iovec *iov, int n, off_t off)
{
    (void)io;
    return pwritev(fd, iov, n, off);
}

/* The syncs' latency (kio.h): Prometheus' default buckets, in
 * microseconds, from 100us to 10s, and one for anything longer. */
const unsigned kio_sync_bucket_us[KIO_SYNC_BUCKETS] = {
    100, 250, 500, 1000, 2500, 5000, 10000, 25000, 50000, 100000, 250000, 500000,
    1000000, 2500000, 10000000, UINT_MAX,
};
static _Atomic unsigned long long sync_sum_us, sync_bucket[KIO_SYNC_BUCKETS];

static unsigned long long now_us(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (unsigned long long)ts.tv_sec * 1000000u + (unsigned long long)ts.tv_nsec / 1000u;
}

static void sync_done(unsigned long long since)
{
    unsigned long long us = now_us() - since;
    int i = 0;
    while (us > kio_sync_bucket_us[i] && i < KIO_SYNC_BUCKETS - 1)
        i++;
    atomic_fetch_add_explicit(&sync_bucket[i], 1, memory_order_relaxed);
    atomic_fetch_add_explicit(&sync_sum_us, us, memory_order_relaxed);
}

void kio_get_sync_latency(kio_sync_latency *out)
{
    /* the count is the buckets' sum, so +Inf equals it, as Prometheus wants */
    out->sum_us = atomic_load(&sync_sum_us);
    for (int i = 0; i < KIO_SYNC_BUCKETS; i++)
        out->bucket[i] = atomic_load(&sync_bucket[i]);
    out->count = 0;
    for (int i = 0; i < KIO_SYNC_BUCKETS; i++)
        out->count += out->bucket[i];
}

static int sys_fsync(const kura_io *io, int fd)
{
    (void)io;
    unsigned long long t = now_us();
    int r = fsync(fd);
    sync_done(t);
    return r;
}

static int sys_fdatasync(const kura_io *io, int fd)
{
    (void)io;
    unsigned long long t = now_us();
    int r = fdatasync(fd);
    sync_done(t);
    return r;
}

/* posix_fallocate returns its error; the table's entries set errno. */
static int sys_fallocate(const kura_io *io, int fd, off_t off, off_t len)
{
    (void)io;
    int r = posix_fallocate(fd, off, len);
    if (r == 0)
        return 0;
    errno = r;
    return -1;
}

static int sys_ftruncate(const kura_io *io, int fd, off_t len)
{
    (void)io;
    return ftruncate(fd, len);
}

static int sys_renameat(const kura_io *io, int olddirfd, const char *oldpath, int newdirfd,
                        const char *newpath)
{
    (void)io;
    return renameat(olddirfd, oldpath, newdirfd, newpath);
}

static int sys_unlinkat(const kura_io *io, int dirfd, const char *path, int flags)
{
    (void)io;
    return unlinkat(dirfd, path, flags);
}

static int sys_mkdirat(const kura_io *io, int dirfd, const char *path, mode_t mode)
{
    (void)io;
    return mkdirat(dirfd, path, mode);
}

static void *sys_mmap(const kura_io *io, size_t len, int prot, int flags, int fd, off_t off)
{
    (void)io;
    return mmap(NULL, len, prot, flags, fd, off);
}

static int sys_munmap(const kura_io *io, void *addr, size_t len)
{
    (void)io;
    return munmap(addr, len);
}

static int sys_punch(const kura_io *io, int fd, off_t off, off_t len)
{
    (void)io;
#if defined(FALLOC_FL_PUNCH_HOLE) && defined(FALLOC_FL_KEEP_SIZE)
    return fallocate(fd, FALLOC_FL_PUNCH_HOLE | FALLOC_FL_KEEP_SIZE, off, len);
#else
    (void)fd; (void)off; (void)len;
    errno = EOPNOTSUPP;
    return -1;
#endif
}

static const kura_io sys_io = {
    .open = sys_open,
    .close = sys_close,
    .pread = sys_pread,
    .pwritev = sys_pwritev,
    .fsync = sys_fsync,
    .fdatasync = sys_fdatasync,
    .fallocate = sys_fallocate,
    .ftruncate = sys_ftruncate,
    .renameat = sys_renameat,
    .unlinkat = sys_unlinkat,
    .mkdirat = sys_mkdirat,
    .mmap = sys_mmap,
    .munmap = sys_munmap,
    .punch = sys_punch,
};

const kura_io *kio_default(void)
{
    return &sys_io;
}

int kio_pwrite_all(const kura_io *io, int fd, const void *buf, size_t n, off_t off)
{
    const char *p = buf;
    while (n) {
        struct iovec v = { (void *)p, n };
        ssize_t w = io->pwritev(io, fd, &v, 1, off);
        if (w < 0) {
            if (errno == EINTR)
                continue;
            return -1;
        }
        if (w == 0) {
            errno = ENOSPC;
            return -1;
        }
        p += w;
        n -= (size_t)w;
        off += w;
    }
    return 0;
}
