/*
 * notify.c - systemd's readiness protocol (sd_notify), without libsystemd.
 *
 * Under a unit with Type=notify, systemd puts the path of a unix datagram
 * socket in $NOTIFY_SOCKET; a service says "READY=1" there once it serves,
 * "STOPPING=1" when it begins to stop, and "WATCHDOG=1" regularly if the
 * unit sets WatchdogSec= (then $WATCHDOG_USEC holds the interval).  The
 * protocol is one datagram of "KEY=value" lines, and a path starting with
 * '@' names an abstract socket.  That is all libsystemd's sd_notify() does
 * for us, so kurad speaks it itself: one code path, no build-time option,
 * and no library to link.  Without $NOTIFY_SOCKET every call is a no-op.
 */
#include <errno.h>
#include <stddef.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/un.h>
#include <time.h>
#include <unistd.h>

#include "server.h"

/* Sends one datagram to $NOTIFY_SOCKET.  Returns 0, or -1 (not under
 * systemd, or the send failed; a failure is logged once). */
static int notify_send(const char *msg)
{
    const char *path = getenv("NOTIFY_SOCKET");
    if (!path || !path[0])
        return -1;
    struct sockaddr_un sa = { .sun_family = AF_UNIX };
    size_t len = strlen(path);
    if ((path[0] != '/' && path[0] != '@') || len >= sizeof(sa.sun_path)) {
        log_msg(KURA_LOG_ERROR, "NOTIFY_SOCKET=%s: not a unix socket path", path);
        return -1;
    }
    memcpy(sa.sun_path, path, len);
    if (path[0] == '@')
        sa.sun_path[0] = '\0';                  /* abstract namespace */
    socklen_t salen = (socklen_t)(offsetof(struct sockaddr_un, sun_path) + len);
    int fd = socket(AF_UNIX, SOCK_DGRAM | SOCK_CLOEXEC, 0);
    if (fd < 0) {
        log_msg(KURA_LOG_ERROR, "sd_notify: socket: %s", strerror(errno));
        return -1;
    }
    ssize_t n = sendto(fd, msg, strlen(msg), MSG_NOSIGNAL, (struct sockaddr *)&sa, salen);
    int err = errno;
    close(fd);
    if (n < 0) {
        static int reported;
        if (!reported++)
            log_msg(KURA_LOG_ERROR, "sd_notify to %s: %s", path, strerror(err));
        return -1;
    }
    return 0;
}

void notify_ready(const char *status)
{
    char msg[512];
    snprintf(msg, sizeof(msg), "READY=1\nMAINPID=%d\nSTATUS=%s", (int)getpid(), status);
    notify_send(msg);
}

void notify_stopping(void)
{
    notify_send("STOPPING=1\nSTATUS=stopping");
}

/* Called from the one-second tick: pets systemd's watchdog at half its
 * interval.  The tick runs on the main thread's event loop, so a main loop
 * that stops turning stops the petting and systemd restarts kurad. */
void notify_watchdog(void)
{
    static int enabled = -1;                    /* -1 not looked at yet */
    static long long interval_ms;
    static struct timespec last;
    if (enabled < 0) {
        const char *usec = getenv("WATCHDOG_USEC");
        const char *pid = getenv("WATCHDOG_PID");
        enabled = usec && atoll(usec) > 0 && (!pid || atol(pid) == (long)getpid());
        if (enabled)
            interval_ms = atoll(usec) / 1000;
    }
    if (!enabled)
        return;
    struct timespec now;
    clock_gettime(CLOCK_MONOTONIC, &now);
    long long since = (now.tv_sec - last.tv_sec) * 1000LL + (now.tv_nsec - last.tv_nsec) / 1000000;
    if (last.tv_sec == 0 || since >= interval_ms / 2 - 500) {
        notify_send("WATCHDOG=1");
        last = now;
    }
}
