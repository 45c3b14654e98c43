/*
 * fdlimit.c - file descriptors for -c connections, with a reserve the
 * connections can never take.
 *
 * The store opens files while it serves (the hash file's segments,
 * checkpoints, compaction's new segments).  If connections could use every
 * descriptor, a connection flood would make those opens fail with EMFILE,
 * which the store must treat as an I/O error.  So kurad makes the limit hold
 * -c connections plus what is open at start-up plus FD_RESERVE, and the
 * listener refuses connections past -c (listener.c): the reserve stays free.
 *
 * As memcached does, the limit is raised at start (the soft limit, and the
 * hard one too where the process may: as root with CAP_SYS_RESOURCE), and an
 * explicit -c that does not fit is refused with a message that says so.  A
 * default -c (none given) is lowered to fit instead, so kurad still starts
 * under a small `ulimit -n`, saying what it did.  The check runs twice:
 * before the store opens (fail fast) and after (the store's own descriptors
 * are then counted).
 */
#include <dirent.h>
#include <errno.h>
#include <stdio.h>
#include <string.h>
#include <sys/resource.h>

#include "server.h"

/* Kept free of connections: the store's files as it grows (segments,
 * checkpoint temporaries, compaction), a log reopen, a connection being
 * refused past -c (accepted, told, closed). */
#define FD_RESERVE 64

/* Descriptors each worker adds when it starts: a notify pipe and its event
 * base's epoll descriptor (both checks run before the workers start). */
#define FD_PER_WORKER 3
/* A replication stream (-repl-max of them) is a connection (-c) and holds
 * one more: its update-log reader's file.  Then the replication loop's
 * base and eventfd, and a full copy's spool file. */
#define FD_REPL_FIXED 4
/* Beyond what is needed, the soft limit is raised this much more where the
 * hard limit allows (no privilege needed): a hash file adds a descriptor
 * per segment it creates (128 MB each by default), so growth of half a
 * terabyte in one run stays clear of the reserve. */
#define FD_GROWTH 4096
/* -metrics: its connections (METRICS_MAX_CONNS in metrics.c), its
 * listening socket, stop pipe and event base. */
#define FD_METRICS 24

/* Descriptors open now, or a generous guess if /proc is not mounted. */
static long fds_open(void)
{
    DIR *d = opendir("/proc/self/fd");
    if (!d)
        return 64;
    long n = 0;
    struct dirent *e;
    while ((e = readdir(d)) != NULL)
        if (e->d_name[0] != '.')
            n++;
    closedir(d);
    return n - 1;                       /* opendir's own descriptor */
}

int fdlimit_setup(kura_settings *s)
{
    struct rlimit rl;
    if (getrlimit(RLIMIT_NOFILE, &rl) < 0) {
        log_msg(KURA_LOG_ERROR, "cannot read the file descriptor limit: %s", strerror(errno));
        return -1;
    }
    long fixed = fds_open() + FD_RESERVE + FD_PER_WORKER * s->threads +
                 (s->metrics ? FD_METRICS : 0);
    if (s->ulog_dir)
        fixed += s->repl_max + FD_REPL_FIXED;
    rlim_t need = (rlim_t)s->maxconns + (rlim_t)fixed, room = need + FD_GROWTH;
    if (rl.rlim_cur != RLIM_INFINITY && rl.rlim_cur < room && rl.rlim_cur < rl.rlim_max) {
        struct rlimit more = { rl.rlim_max == RLIM_INFINITY || rl.rlim_max >= room ? room :
                               rl.rlim_max, rl.rlim_max };
        if (setrlimit(RLIMIT_NOFILE, &more) == 0)
            rl.rlim_cur = more.rlim_cur;
    }
    if (rl.rlim_cur != RLIM_INFINITY && rl.rlim_cur < need) {
        struct rlimit want = { need, rl.rlim_max };
        if (want.rlim_max != RLIM_INFINITY && want.rlim_max < need)
            want.rlim_max = need;       /* works as root with CAP_SYS_RESOURCE */
        if (setrlimit(RLIMIT_NOFILE, &want) == 0) {
            log_msg(KURA_LOG_INFO, "file descriptor limit raised from %llu to %llu for -c %d",
                    (unsigned long long)rl.rlim_cur, (unsigned long long)need, s->maxconns);
        } else if (!s->maxconns_given && rl.rlim_max != RLIM_INFINITY &&
                   rl.rlim_max > (rlim_t)fixed) {
            /* No -c given: serve as many connections as the limit allows. */
            want.rlim_cur = want.rlim_max = rl.rlim_max;
            if (rl.rlim_cur < rl.rlim_max && setrlimit(RLIMIT_NOFILE, &want) < 0)
                want.rlim_cur = rl.rlim_cur;
            long fit = (long)want.rlim_cur - fixed;
            if (fit < 1)
                goto refuse;
            log_msg(KURA_LOG_INFO, "maximum connections lowered from %d to %ld to fit the file "
                    "descriptor limit of %llu (give -c to insist)", s->maxconns, fit,
                    (unsigned long long)want.rlim_cur);
            s->maxconns = (int)fit;
        } else {
            goto refuse;
        }
    }
    return 0;

refuse:
    log_msg(KURA_LOG_ERROR, "-c %d%s needs %llu file descriptors (%d connections, %ld open, %d "
            "reserved for the store, the workers and replication) but the limit is %llu and cannot be "
            "raised (hard limit %llu): raise it (ulimit -n, systemd LimitNOFILE=) or lower -c",
            s->maxconns, s->maxconns_given ? "" : " (the default)", (unsigned long long)need,
            s->maxconns, fds_open(),
            (int)(fixed - fds_open()), (unsigned long long)rl.rlim_cur,
            (unsigned long long)rl.rlim_max);
    return -1;
}
