/*
 * fsutil.c - file-system chores that the server and the tools share
 * (fsutil.h).
 */
#include <errno.h>
#include <stdbool.h>
#include <fcntl.h>
#include <ftw.h>
#include <stdio.h>
#include <sys/stat.h>
#include <unistd.h>

#include "kura/fsutil.h"

static int remove_one(const char *p, const struct stat *sb, int flag, struct FTW *f)
{
    (void)sb; (void)flag; (void)f;
    return remove(p) == 0 || errno == ENOENT ? 0 : -1;
}

int kura_remove_tree(const char *path)
{
    struct stat sb;
    if (lstat(path, &sb) < 0)
        return errno == ENOENT ? 0 : -1;
    return nftw(path, remove_one, 16, FTW_DEPTH | FTW_PHYS);
}

int kura_write_file_atomic(int dirfd, const char *name, const void *buf, size_t len)
{
    char tmp[512];
    if (snprintf(tmp, sizeof(tmp), "%s.tmp", name) >= (int)sizeof(tmp)) {
        errno = ENAMETOOLONG;
        return -1;
    }
    int fd = openat(dirfd, tmp, O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0644);
    if (fd < 0)
        return -1;
    bool ok = write(fd, buf, len) == (ssize_t)len && fsync(fd) == 0;
    int err = errno;
    close(fd);
    if (!ok) {
        errno = err ? err : EIO;
        return -1;
    }
    if (renameat(dirfd, tmp, dirfd, name) < 0 || fsync(dirfd) < 0)
        return -1;
    return 0;
}
