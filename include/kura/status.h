/*
 * status.h - the status codes every module returns, and the log levels
 * every module reports at.
 *
 * Functions return KURA_OK (0), a positive outcome (KURA_NOTFOUND, ...)
 * or a negative error (KURA_E*); kura_strerror() names each.  They sit
 * below every other module (util/, log/, codec/ and the stores use them
 * alike), so no layer has to include the header of the one it serves.
 */
#ifndef KURA_STATUS_H
#define KURA_STATUS_H

/* Outcomes (>= 0) and errors (< 0) shared by every module. */
enum kura_status {
    KURA_OK = 0,
    KURA_NOTFOUND = 1,          /* no live item under this key */
    KURA_EXISTS = 2,            /* a live item is there, or its cas differs */
    KURA_EXPIRED = 3,           /* get only: an item was there but had expired */
    KURA_FLUSHED = 4,           /* get only: an item was there but was flushed */

    KURA_ENOMEM = -1,           /* no room, even after eviction */
    KURA_ETOOBIG = -2,          /* larger than the item size limit */
    KURA_EIO = -3,              /* the device failed a read or write */
    KURA_ENOSPC = -4,           /* the file system is full */
    KURA_ECORRUPT = -5,         /* stored bytes fail their checksum */
    KURA_EINVAL = -6,           /* bad argument or bad database name */
    KURA_EREADONLY = -7,        /* the store is read-only (damaged, or opened so) */
    KURA_ESYS = -8,             /* another system error; errno-like detail is logged */
    KURA_EFAILED = -9,          /* writes stopped for good: a sync failed (restart) */
    KURA_EREPLICA = -10,        /* this server is a read-only replica */
};

/* A short phrase for a status ("I/O error"); never NULL. */
const char *kura_strerror(int rc);

/* Levels of the lines modules hand to a log callback (the server's log
 * writes them; -le keeps errors and warnings only, -ld adds debug). */
enum kura_log_level {
    KURA_LOG_ERROR = 0,         /* damage, failed I/O: someone should look */
    KURA_LOG_WARNING,           /* works, but not as it should (running as root) */
    KURA_LOG_INFO,              /* what open and recovery did */
    KURA_LOG_VERBOSE,           /* -v: per-connection events */
    KURA_LOG_DEBUG,             /* -ld, -vv */
};

#endif
