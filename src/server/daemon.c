/*
 * daemon.c - running as a daemon: -dmn, the pid file, -u, the stop watchdog.
 *
 * -dmn forks before anything is opened (the store, threads, libevent), so
 * the daemon starts exactly as a foreground kurad does.  Until it is ready
 * the daemon's stderr is a pipe to the waiting parent, which copies what it
 * reads to its own stderr: every start-up message, error or not, reaches
 * whoever ran "kurad -dmn".  daemon_ready() sends one NUL byte and lets go
 * of the pipe; the parent then exits 0.  If the pipe closes without the NUL
 * the daemon failed, and the parent exits with the daemon's status.
 *
 * The pid file is locked (flock) for the life of the process, so "is a
 * kurad running on this pid file" is answered by the kernel and a stale
 * file left by a crash is simply taken over.  The lock is taken before the
 * store is opened; the pid is written once kurad listens.
 *
 * -u USER: started as root, kurad becomes USER (as memcached's -u) after
 * binding its sockets and opening its log and pid files, before opening
 * the database (main.c says why).  Started as root without -u, it runs as
 * root and says so once, at WARNING (as ttserver and Redis do: the
 * install guides' command lines run unchanged); "-u root" keeps root
 * without the warning, having been asked for.
 */
#include <errno.h>
#include <fcntl.h>
#include <grp.h>
#include <limits.h>
#include <pthread.h>
#include <pwd.h>
#include <signal.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/file.h>
#include <sys/stat.h>
#include <sys/types.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include "server.h"

/* ---- -u ------------------------------------------------------------ */

int daemon_check_user(const kura_settings *s)
{
    if (s->user && getpwnam(s->user) == NULL) {
        fprintf(stderr, "can't find the user %s to switch to\n", s->user);
        return 2;
    }
    return 0;
}

int daemon_drop_privileges(const kura_settings *s)
{
    if (!s->user || !s->user[0]) {
        if (geteuid() == 0)
            log_msg(KURA_LOG_WARNING, "running as root (no -u USER): -u USER would run it as "
                    "an unprivileged user once the ports are bound (docs/security.md)");
        return 0;
    }
    struct passwd *pw = getpwnam(s->user);
    if (!pw) {
        log_msg(KURA_LOG_ERROR, "can't find the user %s to switch to", s->user);
        return -1;
    }
    if (geteuid() != 0) {
        if (pw->pw_uid != geteuid())
            log_msg(KURA_LOG_INFO, "not started as root: -u %s ignored", s->user);
        return 0;
    }
    if (pw->pw_uid == 0) {
        log_msg(KURA_LOG_INFO, "-u %s: staying root", s->user);
        return 0;
    }
    /* The user will reopen the log on SIGHUP: the file must be theirs.  The
     * unix socket too, as memcached's is its user's. */
    log_chown(pw->pw_uid, pw->pw_gid);
    listener_chown(pw->pw_uid, pw->pw_gid);
    if (initgroups(pw->pw_name, pw->pw_gid) < 0 || setgid(pw->pw_gid) < 0 ||
        setuid(pw->pw_uid) < 0) {
        log_msg(KURA_LOG_ERROR, "cannot become user %s: %s", s->user, strerror(errno));
        return -1;
    }
    if (setuid(0) == 0) {                       /* must be impossible now */
        log_msg(KURA_LOG_ERROR, "still able to become root after switching to %s", s->user);
        return -1;
    }
    log_msg(KURA_LOG_INFO, "running as user %s (uid %d)", s->user, (int)pw->pw_uid);
    return 0;
}

/* ---- -dmn ---------------------------------------------------------- */

/* Absolute copies of relative paths, kept reachable for leak checkers. */
static char *abs_paths[7];

static const char *absolute(const char *path, int slot)
{
    if (!path || path[0] == '/')
        return path;
    char cwd[PATH_MAX];
    if (!getcwd(cwd, sizeof(cwd)))
        return path;                            /* then chdir("/") is skipped */
    size_t n = strlen(cwd) + strlen(path) + 2;
    abs_paths[slot] = malloc(n);
    if (!abs_paths[slot])
        return path;
    snprintf(abs_paths[slot], n, "%s/%s", cwd, path);
    return abs_paths[slot];
}

static int relative_left;                       /* a path could not be made absolute */

void daemon_absolute_paths(kura_settings *s)
{
    s->pid_path = absolute(s->pid_path, 0);
    s->log_path = absolute(s->log_path, 1);
    s->unix_path = absolute(s->unix_path, 2);
    /* "*" and ":" (with their #parameters) are the cache, not a path. */
    if (s->dbname && s->dbname[0] && s->dbname[0] != '*' && s->dbname[0] != ':')
        s->dbname = absolute(s->dbname, 3);
    s->ulog_dir = absolute(s->ulog_dir, 4);
    s->rts_path = absolute(s->rts_path, 5);
    s->bgs_dir = absolute(s->bgs_dir, 6);
    relative_left = (s->pid_path && s->pid_path[0] != '/') ||
                    (s->log_path && s->log_path[0] != '/') ||
                    (s->unix_path && s->unix_path[0] != '/') ||
                    (s->ulog_dir && s->ulog_dir[0] != '/') ||
                    (s->rts_path && s->rts_path[0] != '/') ||
                    (s->bgs_dir && s->bgs_dir[0] != '/');
}

static int ready_fd = -1;                       /* the daemon's end of the pipe */

/* The parent: copies the daemon's start-up messages to stderr and exits 0
 * once it says it is ready, or with its status if it dies first. */
static void __attribute__((noreturn)) wait_for_daemon(pid_t pid, int fd)
{
    char buf[4096];
    for (;;) {
        ssize_t n = read(fd, buf, sizeof(buf));
        if (n < 0 && errno == EINTR)
            continue;
        if (n <= 0)
            break;
        char *nul = memchr(buf, '\0', (size_t)n);
        ssize_t text = nul ? nul - buf : n;
        if (text > 0 && write(STDERR_FILENO, buf, (size_t)text) < 0)
            break;
        if (nul)
            _exit(0);
    }
    int st;
    while (waitpid(pid, &st, 0) < 0) {
        if (errno != EINTR) {
            fprintf(stderr, "kurad: lost the daemon during start-up: %s\n", strerror(errno));
            _exit(1);
        }
    }
    if (WIFEXITED(st) && WEXITSTATUS(st) != 0)
        _exit(WEXITSTATUS(st));
    if (WIFSIGNALED(st))
        fprintf(stderr, "kurad: the daemon was killed by signal %d during start-up\n",
                WTERMSIG(st));
    else
        fprintf(stderr, "kurad: the daemon exited during start-up\n");
    _exit(1);
}

void daemon_detach(void)
{
    int p[2];
    if (pipe2(p, O_CLOEXEC) < 0) {
        fprintf(stderr, "kurad: cannot detach: pipe: %s\n", strerror(errno));
        exit(1);
    }
    fflush(NULL);
    pid_t pid = fork();
    if (pid < 0) {
        fprintf(stderr, "kurad: cannot detach: fork: %s\n", strerror(errno));
        exit(1);
    }
    if (pid > 0) {
        close(p[1]);
        wait_for_daemon(pid, p[0]);
    }
    close(p[0]);
    ready_fd = p[1];
    if (setsid() < 0) {
        fprintf(stderr, "kurad: cannot detach: setsid: %s\n", strerror(errno));
        exit(1);
    }
    if (!relative_left && chdir("/") < 0) {
        fprintf(stderr, "kurad: cannot detach: chdir /: %s\n", strerror(errno));
        exit(1);
    }
    int null = open("/dev/null", O_RDWR | O_CLOEXEC);
    if (null < 0 || dup2(null, STDIN_FILENO) < 0 || dup2(null, STDOUT_FILENO) < 0 ||
        dup2(ready_fd, STDERR_FILENO) < 0) {
        fprintf(stderr, "kurad: cannot detach: /dev/null: %s\n", strerror(errno));
        exit(1);
    }
    close(null);
}

void daemon_ready(void)
{
    log_startup_done();
    /* From now on whatever is written to stderr (a library's message, a
     * sanitizer's report) goes to the -log file too, even in the foreground. */
    int to_file = log_stderr_to_file();
    if (ready_fd < 0)
        return;                                 /* not -dmn */
    /* stderr leaves the pipe first: the parent exits as soon as it reads the
     * NUL, and nothing may be written to a pipe nobody reads. */
    if (to_file < 0) {
        int null = open("/dev/null", O_WRONLY | O_CLOEXEC);
        if (null >= 0) {
            dup2(null, STDERR_FILENO);
            close(null);
        }
    }
    ssize_t n;
    do
        n = write(ready_fd, "", 1);
    while (n < 0 && errno == EINTR);
    close(ready_fd);
    ready_fd = -1;
}

/* ---- the pid file ------------------------------------------------------- */

static int pid_fd = -1;
static const char *pid_path;
static pthread_mutex_t pid_lock = PTHREAD_MUTEX_INITIALIZER;   /* main vs the watchdog */

/* Is pid a running kurad?  A pid reused by another program is not. */
static bool is_kurad(pid_t pid)
{
    if (pid <= 0 || pid == getpid())
        return false;
    if (kill(pid, 0) < 0 && errno != EPERM)
        return false;
    char path[64], comm[64] = "";
    snprintf(path, sizeof(path), "/proc/%d/comm", (int)pid);
    FILE *f = fopen(path, "re");
    if (!f)
        return true;                            /* no /proc: assume it is */
    bool yes = fgets(comm, sizeof(comm), f) && strncmp(comm, "kurad", 5) == 0;
    fclose(f);
    return yes;
}

static pid_t read_pid(int fd)
{
    char buf[32];
    ssize_t n = pread(fd, buf, sizeof(buf) - 1, 0);
    if (n <= 0)
        return 0;
    buf[n] = '\0';
    long pid = strtol(buf, NULL, 10);
    return pid > 0 && pid <= INT_MAX ? (pid_t)pid : 0;
}

int pidfile_lock(const char *path)
{
    int fd = open(path, O_RDWR | O_CREAT | O_CLOEXEC | O_NOCTTY, 0644);
    if (fd < 0) {
        log_msg(KURA_LOG_ERROR, "cannot open the pid file %s: %s", path, strerror(errno));
        return -1;
    }
    pid_t other = read_pid(fd);
    if (flock(fd, LOCK_EX | LOCK_NB) < 0) {
        if (errno == EWOULDBLOCK)
            log_msg(KURA_LOG_ERROR, "kurad is already running as pid %d (pid file %s)", (int)other,
                    path);
        else
            log_msg(KURA_LOG_ERROR, "cannot lock the pid file %s: %s", path, strerror(errno));
        close(fd);
        return -1;
    }
    /* Unlocked, yet naming a live kurad: one that does not lock (started
     * another way, or the file was replaced under it).  Refuse all the same. */
    if (is_kurad(other)) {
        log_msg(KURA_LOG_ERROR, "kurad is already running as pid %d (pid file %s)", (int)other, path);
        close(fd);
        return -1;
    }
    if (other)
        log_msg(KURA_LOG_INFO, "replacing the stale pid file %s (pid %d is gone)", path, (int)other);
    if (ftruncate(fd, 0) < 0) {
        log_msg(KURA_LOG_ERROR, "cannot write the pid file %s: %s", path, strerror(errno));
        close(fd);
        return -1;
    }
    pid_fd = fd;
    pid_path = path;
    return 0;
}

int pidfile_write(void)
{
    if (pid_fd < 0)
        return 0;
    char buf[32];
    int n = snprintf(buf, sizeof(buf), "%d\n", (int)getpid());
    if (pwrite(pid_fd, buf, (size_t)n, 0) != n) {
        log_msg(KURA_LOG_ERROR, "cannot write the pid file %s: %s", pid_path, strerror(errno));
        return -1;
    }
    return 0;
}

void pidfile_remove(void)
{
    pthread_mutex_lock(&pid_lock);
    if (pid_fd < 0) {
        pthread_mutex_unlock(&pid_lock);
        return;
    }
    /* Remove it only if it is still ours: the file at that path may have
     * been replaced. */
    struct stat a, b;
    if (fstat(pid_fd, &a) == 0 && stat(pid_path, &b) == 0 && a.st_dev == b.st_dev &&
        a.st_ino == b.st_ino && unlink(pid_path) < 0) {
        /* After -u the directory may not be ours to change: at least stop
         * the file from naming this process. */
        log_msg(KURA_LOG_ERROR, "cannot remove the pid file %s: %s", pid_path, strerror(errno));
        if (ftruncate(pid_fd, 0) < 0)
            log_msg(KURA_LOG_ERROR, "cannot empty the pid file %s: %s", pid_path, strerror(errno));
    }
    close(pid_fd);
    pid_fd = -1;
    pthread_mutex_unlock(&pid_lock);
}

/* ---- the stop watchdog ---------------------------------------------- */

static void *watchdog_main(void *arg)
{
    int seconds = (int)(intptr_t)arg;
    struct timespec ts = { seconds, 0 };
    while (nanosleep(&ts, &ts) < 0 && errno == EINTR)
        ;
    log_msg(KURA_LOG_ERROR, "stop: still not done after %d s; exiting without a clean close", seconds);
    pidfile_remove();
    _exit(1);
    return NULL;
}

void daemon_stop_watchdog(int seconds)
{
    pthread_t t;
    pthread_attr_t attr;
    pthread_attr_init(&attr);
    pthread_attr_setdetachstate(&attr, PTHREAD_CREATE_DETACHED);
    if (pthread_create(&t, &attr, watchdog_main, (void *)(intptr_t)seconds) != 0)
        log_msg(KURA_LOG_ERROR, "stop: cannot start the watchdog thread; stopping without it");
    pthread_attr_destroy(&attr);
}
