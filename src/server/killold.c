/*
 * killold.c - ttserver's -kl: the server the pid file names is stopped
 * before this one starts, as ttserver does, so that a restart script
 * written for it ("ttserver -kl -pid PID ...") restarts kurad.
 *
 * SIGTERM, then a wait for the process to be gone: up to 60 seconds, a
 * kurad's own stop watchdog (a clean stop syncs the store), then SIGKILL,
 * which loses nothing a kurad acknowledged.  Only a process whose name is
 * kurad or ttserver is signalled: a pid file left by a crash may name a
 * pid the system has since given to something else.
 */
#include <errno.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "server.h"

#define KILL_WAIT_MS 60000
#define KILL9_WAIT_MS 5000

static bool gone(pid_t pid)
{
    if (kill(pid, 0) < 0 && errno == ESRCH)
        return true;
    char path[64], stat[256] = "";
    snprintf(path, sizeof(path), "/proc/%d/stat", (int)pid);
    FILE *f = fopen(path, "re");
    if (!f)
        return false;
    bool zombie = fgets(stat, sizeof(stat), f) && strstr(stat, ") Z ");
    fclose(f);
    return zombie;
}

static bool wait_gone(pid_t pid, int ms)
{
    struct timespec tick = { 0, 50 * 1000 * 1000 };
    for (int waited = 0; waited < ms; waited += 50) {
        if (gone(pid))
            return true;
        nanosleep(&tick, NULL);
    }
    return gone(pid);
}

int kill_old_server(const char *pid_path)
{
    FILE *f = fopen(pid_path, "re");
    long pid = 0;
    if (!f)
        return 0;
    if (fscanf(f, "%ld", &pid) != 1)
        pid = 0;
    fclose(f);
    if (pid <= 1 || pid > 1 << 30 || (pid_t)pid == getpid() || gone((pid_t)pid))
        return 0;
    char path[64], comm[32] = "";
    snprintf(path, sizeof(path), "/proc/%ld/comm", pid);
    if ((f = fopen(path, "re"))) {
        if (!fgets(comm, sizeof(comm), f))
            comm[0] = '\0';
        fclose(f);
    }
    comm[strcspn(comm, "\n")] = '\0';
    if (strcmp(comm, "kurad") != 0 && strcmp(comm, "ttserver") != 0) {
        log_msg(KURA_LOG_INFO, "-kl: %s names pid %ld, which is %s%s%s, not a kurad or "
                "ttserver: not signalled", pid_path, pid, comm[0] ? "'" : "unknown",
                comm, comm[0] ? "'" : "");
        return 0;
    }
    log_msg(KURA_LOG_INFO, "-kl: stopping %s pid %ld (SIGTERM)", comm, pid);
    if (kill((pid_t)pid, SIGTERM) < 0) {
        log_msg(KURA_LOG_ERROR, "-kl: cannot signal pid %ld: %s", pid, strerror(errno));
        return -1;
    }
    if (wait_gone((pid_t)pid, KILL_WAIT_MS))
        return 0;
    log_msg(KURA_LOG_ERROR, "-kl: pid %ld still running after %d s: SIGKILL", pid,
            KILL_WAIT_MS / 1000);
    kill((pid_t)pid, SIGKILL);
    if (wait_gone((pid_t)pid, KILL9_WAIT_MS))
        return 0;
    log_msg(KURA_LOG_ERROR, "-kl: pid %ld does not end", pid);
    return -1;
}
