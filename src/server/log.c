/*
 * log.c - one timestamped line per event, to stderr or to the -log file.
 *
 * Levels: errors always; info by default; -v adds connection-level events;
 * -vv adds every request.  -le keeps errors only, -ld adds debug lines; -v
 * counts up from either.  Lines are written with one write() on an O_APPEND
 * descriptor, so lines from several threads never interleave.
 *
 * SIGHUP reopens the file (after logrotate moved it): the new file is
 * dup2()ed onto the same descriptor number, so a thread writing at that
 * moment writes whole lines to the old file or to the new one.  Until
 * start-up is done, errors are also copied to stderr, so whoever started
 * kurad (or the parent waiting on -dmn) sees why it did not start.
 */
#include <errno.h>
#include <fcntl.h>
#include <stdarg.h>
#include <stdbool.h>
#include <stdio.h>
#include <string.h>
#include <sys/time.h>
#include <time.h>
#include <unistd.h>

#include "server.h"

static int log_level = LOG_INFO;
static int log_fd = STDERR_FILENO;      /* where lines go */
static const char *log_path;            /* -log, or NULL for stderr */
static bool log_starting = true;        /* copy errors to stderr too */
static bool stderr_follows;             /* a daemon's stderr is the log file too */

void log_init(int base, int verbosity)
{
    int level = base + verbosity;
    log_level = level > LOG_DEBUG ? LOG_DEBUG : level;
}

static int open_file(const char *path)
{
    return open(path, O_WRONLY | O_APPEND | O_CREAT | O_CLOEXEC | O_NOCTTY, 0640);
}

int log_open(const char *path)
{
    int fd = open_file(path);
    if (fd < 0) {
        fprintf(stderr, "kurad: cannot open the log file %s: %s\n", path, strerror(errno));
        return -1;
    }
    log_path = path;
    log_fd = fd;
    return 0;
}

void log_reopen(void)
{
    if (!log_path) {
        log_msg(LOG_INFO, "SIGHUP: logging to stderr, no log file to reopen");
        return;
    }
    int fd = open_file(log_path);
    if (fd < 0) {
        log_msg(LOG_ERR, "SIGHUP: cannot reopen the log file %s: %s; still writing to the old one",
                log_path, strerror(errno));
        return;
    }
    /* Same descriptor number, new file: no writer ever sees a closed fd. */
    if (dup2(fd, log_fd) < 0)
        log_msg(LOG_ERR, "SIGHUP: cannot reopen the log file %s: %s", log_path, strerror(errno));
    close(fd);
    if (stderr_follows)
        dup2(log_fd, STDERR_FILENO);
    log_msg(LOG_INFO, "SIGHUP: reopened the log file %s", log_path);
}

void log_chown(uid_t uid, gid_t gid)
{
    if (log_path && fchown(log_fd, uid, gid) < 0)
        log_msg(LOG_ERR, "cannot give the log file %s to uid %d: %s", log_path, (int)uid,
                strerror(errno));
}

void log_startup_done(void)
{
    log_starting = false;
}

int log_stderr_to_file(void)
{
    if (!log_path)
        return -1;
    stderr_follows = true;
    return dup2(log_fd, STDERR_FILENO) < 0 ? -1 : 0;
}

static const char *level_name(int level)
{
    switch (level) {
    case LOG_ERR:     return "ERROR";
    case LOG_INFO:    return "INFO";
    case LOG_VERBOSE: return "VERBOSE";
    default:          return "DEBUG";
    }
}

void log_msg(int level, const char *fmt, ...)
{
    if (level > log_level)
        return;
    char line[1024];
    struct timeval tv;
    struct tm tm;
    gettimeofday(&tv, NULL);
    localtime_r(&tv.tv_sec, &tm);
    size_t n = strftime(line, sizeof(line), "%Y-%m-%dT%H:%M:%S", &tm);
    n += (size_t)snprintf(line + n, sizeof(line) - n, ".%06ld %s ", (long)tv.tv_usec,
                          level_name(level));
    va_list ap;
    va_start(ap, fmt);
    int m = vsnprintf(line + n, sizeof(line) - n - 1, fmt, ap);
    va_end(ap);
    if (m < 0)
        m = 0;
    n += (size_t)m < sizeof(line) - n - 1 ? (size_t)m : sizeof(line) - n - 2;
    line[n++] = '\n';
    ssize_t w = write(log_fd, line, n);
    if (level == LOG_ERR && log_starting && log_fd != STDERR_FILENO)
        w = write(STDERR_FILENO, line, n);
    (void)w;
}

/* -vv: one line per request, as memcached's "<fd command"; bytes that are
 * not printable are shown as '?', and long lines are cut at 200 bytes. */
void log_request(int conn_id, const char *line, size_t len)
{
    char safe[201];
    size_t n = len < 200 ? len : 200;
    for (size_t i = 0; i < n; i++)
        safe[i] = line[i] >= 32 && line[i] < 127 ? line[i] : '?';
    safe[n] = '\0';
    log_msg(LOG_VERBOSE, "<%d %s%s", conn_id, safe, len > n ? "..." : "");
}
