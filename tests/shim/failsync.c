/*
 * failsync.c - an LD_PRELOAD shim that makes fsync and fdatasync fail, for
 * the tests that check what kurad does when the disk fails a sync
 * (tests/integration/test_syncfail.py).
 *
 * Once the file named by KURA_FAILSYNC_TRIGGER exists, every fsync and
 * fdatasync of the process fails with EIO without reaching the kernel, and
 * appends one line to the file named by KURA_FAILSYNC_LOG (so the test can
 * count the attempts: a server that retried a failed sync would show many).
 * The test creates the trigger at the moment the disk should "fail".
 *
 * The stores' own tests inject faults through kura_io (tests/unit/kio_sim.c);
 * this shim is for the whole daemon over the network, where no test code
 * runs inside the process.
 */
#define _GNU_SOURCE
#include <dlfcn.h>
#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

static int failing(void)
{
    const char *t = getenv("KURA_FAILSYNC_TRIGGER");
    return t && access(t, F_OK) == 0;
}

static void note(const char *what, int fd)
{
    const char *path = getenv("KURA_FAILSYNC_LOG");
    if (!path)
        return;
    char line[64];
    int n = snprintf(line, sizeof(line), "%s %d\n", what, fd);
    int lfd = open(path, O_WRONLY | O_CREAT | O_APPEND | O_CLOEXEC, 0644);
    if (lfd >= 0) {
        if (write(lfd, line, (size_t)n) != n) {}
        close(lfd);
    }
}

int fsync(int fd)
{
    static int (*real)(int);
    if (failing()) {
        note("fsync", fd);
        errno = EIO;
        return -1;
    }
    if (!real)
        real = (int (*)(int))dlsym(RTLD_NEXT, "fsync");
    return real(fd);
}

int fdatasync(int fd)
{
    static int (*real)(int);
    if (failing()) {
        note("fdatasync", fd);
        errno = EIO;
        return -1;
    }
    if (!real)
        real = (int (*)(int))dlsym(RTLD_NEXT, "fdatasync");
    return real(fd);
}
