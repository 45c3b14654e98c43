/*
 * kio.h - the stores' file I/O, as one table that tests can replace.
 *
 * Every call a store makes that changes a file or makes it durable goes
 * through a kura_io: open, write, sync, preallocate, punch a hole,
 * truncate, rename, unlink, directory sync, and the shared mappings.  The default table calls
 * the system; tests put in their own (SQLite's VFS is the model) to fail the
 * Nth call of a kind with EIO or ENOSPC or a short write, or to record every
 * write and sync and build the image a power loss would leave behind
 * (tests/unit/kio_sim.c).
 *
 * Each entry behaves like the system call it is named after: -1 with errno
 * set on failure (fallocate too: not posix_fallocate's returned error), and
 * short writes are possible.  A store's reads go through the table too
 * (open, pread, read-only mappings); only what it has no entry for goes to
 * the system directly (fstat and stat, lseek(SEEK_DATA), a directory's
 * listing), which is sound because a replacement passes writes to the real
 * file, so the files always hold what the process wrote.
 *
 * A store that writes through a shared mapping (the hash file's mapwrite)
 * does so behind the table's back; a replacement that must see every byte
 * refuses writable mappings (mmap with PROT_WRITE answers MAP_FAILED), and
 * the store then appends with pwritev.
 */
#ifndef KURA_KIO_H
#define KURA_KIO_H

#include <stddef.h>
#include <sys/types.h>
#include <sys/uio.h>

typedef struct kura_io kura_io;

struct kura_io {
    /* openat(2); the only way a store opens a file or directory */
    int (*open)(const kura_io *io, int dirfd, const char *path, int flags, mode_t mode);
    int (*close)(const kura_io *io, int fd);
    ssize_t (*pread)(const kura_io *io, int fd, void *buf, size_t n, off_t off);
    ssize_t (*pwritev)(const kura_io *io, int fd, const struct iovec *iov, int n, off_t off);
    int (*fsync)(const kura_io *io, int fd);        /* also directories */
    int (*fdatasync)(const kura_io *io, int fd);
    int (*fallocate)(const kura_io *io, int fd, off_t off, off_t len);
    int (*ftruncate)(const kura_io *io, int fd, off_t len);
    int (*renameat)(const kura_io *io, int olddirfd, const char *oldpath, int newdirfd,
                    const char *newpath);
    int (*unlinkat)(const kura_io *io, int dirfd, const char *path, int flags);
    int (*mkdirat)(const kura_io *io, int dirfd, const char *path, mode_t mode);
    void *(*mmap)(const kura_io *io, size_t len, int prot, int flags, int fd, off_t off);
    int (*munmap)(const kura_io *io, void *addr, size_t len);
    /* fallocate(FALLOC_FL_PUNCH_HOLE | FALLOC_FL_KEEP_SIZE): the range's
     * blocks are released and read back as zeros, the size unchanged.
     * Only ever a saving of space: a file system without it answers -1
     * with EOPNOTSUPP, and the caller carries on without */
    int (*punch)(const kura_io *io, int fd, off_t off, off_t len);
    void *ctx;                  /* the replacement's own state */
};

/* How long the default table's fsync and fdatasync calls took, since the
 * process started: calls at most kio_sync_bucket_us[i] long counted in
 * bucket[i] (the last bound is UINT32_MAX: every longer call).  Two clock
 * reads and two relaxed atomic adds per sync, nothing beside a sync. */
#define KIO_SYNC_BUCKETS 16
extern const unsigned kio_sync_bucket_us[KIO_SYNC_BUCKETS];
typedef struct kio_sync_latency {
    unsigned long long count, sum_us;
    unsigned long long bucket[KIO_SYNC_BUCKETS];
} kio_sync_latency;
void kio_get_sync_latency(kio_sync_latency *out);

/* The system's calls.  Never NULL; shared, immutable. */
const kura_io *kio_default(void);

/* NULL means the default: what a store does with its config's io. */
static inline const kura_io *kio_or_default(const kura_io *io)
{
    return io ? io : kio_default();
}

/* Writes all n bytes at off (retrying short writes and EINTR); 0, or -1 with
 * errno (ENOSPC for a write that made no progress). */
int kio_pwrite_all(const kura_io *io, int fd, const void *buf, size_t n, off_t off);

#endif
