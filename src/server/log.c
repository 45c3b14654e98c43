/*
 * log.c - one timestamped line per event, to stderr or to the -log file.
 *
 * Levels: errors and warnings always; info by default; -v adds
 * connection-level events; -vv adds every request.  -le keeps errors and
 * warnings only, -ld adds debug lines; -v counts up from either.  Lines
 * are written with one write() on an O_APPEND descriptor, so lines from
 * several threads never interleave.
 *
 * SIGHUP reopens the file (after logrotate moved it): the new file is
 * dup2()ed onto the same descriptor number, so a thread writing at that
 * moment writes whole lines to the old file or to the new one.  Until
 * start-up is done, errors and warnings are also copied to stderr, so
 * whoever started kurad (or the parent waiting on -dmn) sees why it did
 * not start, or that it runs as root.
 *
 * Repeats are folded.  A fault that recurs on every attempt (a full disk, a
 * descriptor shortage, a store's log hook reporting the same failure) must
 * not write a line per attempt: the log would grow by megabytes a second
 * and bury the first line, the one that matters.  Error lines are keyed on
 * their formatted text (so a store's lines, which arrive as "%s", fold too):
 * the same text again within REPEAT_WINDOW seconds of its line is counted,
 * not written, and once the window is over (at the next occurrence, or at
 * log_tick() on the main thread's one-second timer) one line gives the text
 * and the count.  Other levels are never folded: info lines are single
 * events an operator asked for (a SIGHUP, a stop), and -v connection lines
 * and -vv request traces repeat by nature.
 */
#include <errno.h>
#include <fcntl.h>
#include <pthread.h>
#include <stdarg.h>
#include <stdbool.h>
#include <stdio.h>
#include <string.h>
#include <sys/time.h>
#include <time.h>
#include <unistd.h>

#include "server.h"

static int log_level = KURA_LOG_INFO;
static int log_fd = STDERR_FILENO;      /* where lines go */
static const char *log_path;            /* -log, or NULL for stderr */
static _Atomic bool log_starting = true;    /* copy errors to stderr too (read by any thread) */
static bool stderr_follows;             /* a daemon's stderr is the log file too */

void log_init(int base, int verbosity)
{
    int level = base + verbosity;
    log_level = level > KURA_LOG_DEBUG ? KURA_LOG_DEBUG : level;
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
        log_msg(KURA_LOG_INFO, "SIGHUP: logging to stderr, no log file to reopen");
        return;
    }
    int fd = open_file(log_path);
    if (fd < 0) {
        log_msg(KURA_LOG_ERROR, "SIGHUP: cannot reopen the log file %s: %s; still writing to the old one",
                log_path, strerror(errno));
        return;
    }
    /* Same descriptor number, new file: no writer ever sees a closed fd. */
    if (dup2(fd, log_fd) < 0)
        log_msg(KURA_LOG_ERROR, "SIGHUP: cannot reopen the log file %s: %s", log_path, strerror(errno));
    close(fd);
    if (stderr_follows)
        dup2(log_fd, STDERR_FILENO);
    log_msg(KURA_LOG_INFO, "SIGHUP: reopened the log file %s", log_path);
}

void log_chown(uid_t uid, gid_t gid)
{
    if (log_path && fchown(log_fd, uid, gid) < 0)
        log_msg(KURA_LOG_ERROR, "cannot give the log file %s to uid %d: %s", log_path, (int)uid,
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
    case KURA_LOG_ERROR:     return "ERROR";
    case KURA_LOG_WARNING:   return "WARNING";
    case KURA_LOG_INFO:    return "INFO";
    case KURA_LOG_VERBOSE: return "VERBOSE";
    default:          return "DEBUG";
    }
}

#define MSG_MAX 960                     /* a message's text, timestamp excluded */
#define REPEAT_WINDOW 10                /* seconds a repeated text is counted, not written */
#define REPEAT_SLOTS 16                 /* distinct texts followed at once */

typedef struct repeat_slot {
    bool used;
    int level;
    uint32_t hash;
    double first;                       /* monotonic seconds of the line written */
    unsigned long suppressed;           /* repeats not written since */
    size_t len;
    char text[MSG_MAX];
} repeat_slot;

static pthread_mutex_t repeat_lock = PTHREAD_MUTEX_INITIALIZER;
static repeat_slot repeats[REPEAT_SLOTS];

static double clock_skew;               /* seconds added to the clock: tests/unit/test_log.c */

static double mono_now(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + (double)ts.tv_nsec / 1e9 + clock_skew;
}

/* Writes one line: timestamp, level, the text. */
static void emit(int level, const char *text, size_t len)
{
    char line[64 + MSG_MAX + 64];
    struct timeval tv;
    struct tm tm;
    gettimeofday(&tv, NULL);
    localtime_r(&tv.tv_sec, &tm);
    size_t n = strftime(line, sizeof(line), "%Y-%m-%dT%H:%M:%S", &tm);
    n += (size_t)snprintf(line + n, sizeof(line) - n, ".%06ld %s ", (long)tv.tv_usec,
                          level_name(level));
    if (len > sizeof(line) - n - 1)
        len = sizeof(line) - n - 1;
    memcpy(line + n, text, len);
    n += len;
    line[n++] = '\n';
    ssize_t w = write(log_fd, line, n);
    if (level <= KURA_LOG_WARNING && log_starting && log_fd != STDERR_FILENO)
        w = write(STDERR_FILENO, line, n);
    (void)w;
}

/* The line that closes a slot's window: its text and how often it came. */
static void emit_summary(const repeat_slot *r)
{
    char text[MSG_MAX + 64];
    int n = snprintf(text, sizeof(text), "%.*s (repeated %lu more times in %d s)",
                     (int)r->len, r->text, r->suppressed, REPEAT_WINDOW);
    if (n > 0)
        emit(r->level, text, (size_t)n < sizeof(text) ? (size_t)n : sizeof(text) - 1);
}

static uint32_t text_hash(const char *p, size_t n)
{
    uint32_t h = 2166136261u;           /* FNV-1a */
    for (size_t i = 0; i < n; i++)
        h = (h ^ (unsigned char)p[i]) * 16777619u;
    return h;
}

/* True if this text was written less than REPEAT_WINDOW seconds ago (it is
 * then only counted).  Otherwise it gets a slot, and the caller writes it;
 * a summary due for the slot it replaces is written first. */
static bool is_repeat(int level, const char *text, size_t len)
{
    uint32_t h = text_hash(text, len);
    double now = mono_now();
    repeat_slot *free_slot = NULL, *oldest = NULL;
    bool repeat = false;
    pthread_mutex_lock(&repeat_lock);
    for (int i = 0; i < REPEAT_SLOTS; i++) {
        repeat_slot *r = &repeats[i];
        if (!r->used) {
            if (!free_slot)
                free_slot = r;
            continue;
        }
        if (!oldest || r->first < oldest->first)
            oldest = r;
        if (r->hash != h || r->len != len || memcmp(r->text, text, len) != 0)
            continue;
        if (now - r->first < REPEAT_WINDOW) {
            r->suppressed++;
            repeat = true;
        } else {
            if (r->suppressed)
                emit_summary(r);
            r->first = now;             /* this one is written: a new window */
            r->suppressed = 0;
        }
        pthread_mutex_unlock(&repeat_lock);
        return repeat;
    }
    repeat_slot *r = free_slot ? free_slot : oldest;
    if (r->used && r->suppressed)
        emit_summary(r);
    *r = (repeat_slot){ .used = true, .level = level, .hash = h, .first = now, .len = len };
    memcpy(r->text, text, len);
    pthread_mutex_unlock(&repeat_lock);
    return false;
}

void log_tick(void)
{
    double now = mono_now();
    pthread_mutex_lock(&repeat_lock);
    for (int i = 0; i < REPEAT_SLOTS; i++) {
        repeat_slot *r = &repeats[i];
        if (r->used && now - r->first >= REPEAT_WINDOW) {
            if (r->suppressed)
                emit_summary(r);
            r->used = false;            /* quiet for a window: forget it */
        }
    }
    pthread_mutex_unlock(&repeat_lock);
}

void log_msg(int level, const char *fmt, ...)
{
    if (level > log_level)
        return;
    char text[MSG_MAX];
    va_list ap;
    va_start(ap, fmt);
    int m = vsnprintf(text, sizeof(text), fmt, ap);
    va_end(ap);
    if (m < 0)
        m = 0;
    size_t len = (size_t)m < sizeof(text) ? (size_t)m : sizeof(text) - 1;
    if (level == KURA_LOG_ERROR && is_repeat(level, text, len))
        return;
    emit(level, text, len);
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
    log_msg(KURA_LOG_VERBOSE, "<%d %s%s", conn_id, safe, len > n ? "..." : "");
}
