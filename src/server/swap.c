/*
 * swap.c - a replica's full copy goes into a store of its own (the
 * shadow) and replaces the served one only once it is complete
 * (docs/replication.md, "A full copy").
 *
 * For a database on disk the shadow is a sibling of the database's path,
 * ".copy.NAME" (the same suffix, so the same backend), opened with the
 * same parameters.  The swap (engine_swap_store holds every other call
 * back): the shadow is closed cleanly, the old store closed, NAME renamed
 * to ".old.NAME", ".copy.NAME" to NAME, the directory synced, NAME opened
 * again, ".old.NAME" removed.  A crash at any step leaves a state the next
 * start repairs (swap_tidy): ".old.NAME" without NAME is renamed back (the
 * swap had not happened; the replica is sent a copy again), ".old.NAME"
 * beside NAME is removed (it had), and a ".copy.NAME" is an unfinished
 * copy, removed.  The in-memory cache's shadow is a second cache: the
 * swap closes the old one.
 *
 * A snapshot restored at start (snapd.c) goes the same way: loaded into
 * ".copy.NAME", which replaces the empty NAME only once it is whole.
 */
#define _XOPEN_SOURCE 700
#include <errno.h>
#include <fcntl.h>
#include <ftw.h>
#include <libgen.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "kura/fsutil.h"
#include "server.h"

static bool in_memory(const char *dbname)
{
    return !dbname || !*dbname || dbname[0] == '*' || dbname[0] == ':';
}

/* The path part of the database name, and a sibling of it named with
 * prefix, with the name's parameters after it (when name is not NULL). */
static void sibling(const char *dbname, const char *prefix, char *path, size_t plen,
                    char *name, size_t nlen)
{
    const char *hash = strchr(dbname, '#');
    size_t len = hash ? (size_t)(hash - dbname) : strlen(dbname);
    char base[4096], dir[4096];
    snprintf(base, sizeof(base), "%.*s", (int)len, dbname);
    snprintf(dir, sizeof(dir), "%.*s", (int)len, dbname);
    const char *b = basename(base), *d = dirname(dir);
    snprintf(path, plen, "%s/%s%s", d, prefix, b);
    if (name)
        snprintf(name, nlen, "%s%s", path, hash ? hash : "");
}

static void db_path(const char *dbname, char *path, size_t plen)
{
    const char *hash = strchr(dbname, '#');
    snprintf(path, plen, "%.*s", (int)(hash ? (size_t)(hash - dbname) : strlen(dbname)), dbname);
}

static void sync_parent(const char *path)
{
    char d[4096];
    snprintf(d, sizeof(d), "%s", path);
    int fd = open(dirname(d), O_RDONLY | O_DIRECTORY | O_CLOEXEC);
    if (fd >= 0) {
        (void)fsync(fd);
        close(fd);
    }
}

int swap_tidy(const char *dbname)
{
    if (in_memory(dbname))
        return 0;
    char path[4096], old[4096], copy[4096];
    struct stat sb;
    db_path(dbname, path, sizeof(path));
    sibling(dbname, ".old.", old, sizeof(old), NULL, 0);
    sibling(dbname, ".copy.", copy, sizeof(copy), NULL, 0);
    if (lstat(old, &sb) == 0) {
        if (lstat(path, &sb) == 0) {
            log_msg(KURA_LOG_INFO, "removing %s, left by a replica's swap that completed", old);
            if (kura_remove_tree(old) < 0)
                log_msg(KURA_LOG_ERROR, "cannot remove %s: %s", old, strerror(errno));
        } else {
            log_msg(KURA_LOG_ERROR, "a replica's swap was cut short: putting %s back as %s", old, path);
            if (rename(old, path) < 0) {
                log_msg(KURA_LOG_ERROR, "cannot rename %s to %s: %s", old, path, strerror(errno));
                return -1;
            }
        }
        sync_parent(path);
    }
    if (lstat(copy, &sb) == 0) {
        log_msg(KURA_LOG_INFO, "removing %s, an unfinished copy from a master", copy);
        if (kura_remove_tree(copy) < 0)
            log_msg(KURA_LOG_ERROR, "cannot remove %s: %s", copy, strerror(errno));
    }
    return 0;
}

kura_store *swap_open_shadow(void *arg)
{
    kura_server *srv = arg;
    const char *dbname = srv->settings->dbname;
    char name[4200] = "*", path[4096] = "";
    if (!in_memory(dbname)) {
        sibling(dbname, ".copy.", path, sizeof(path), name, sizeof(name));
        if (kura_remove_tree(path) < 0) {
            log_msg(KURA_LOG_ERROR, "cannot remove %s: %s", path, strerror(errno));
            return NULL;
        }
    } else if (dbname) {
        snprintf(name, sizeof(name), "%s", dbname);
    }
    kura_store *s;
    char err[512] = "";
    kura_store_config cfg = srv->store_cfg;
    cfg.deferred_commit = false;        /* nothing waits for the shadow's commits */
    int rc = kura_store_open(name, &cfg, &s, err, sizeof(err));
    if (rc) {
        log_msg(KURA_LOG_ERROR, "cannot create the copy's store %s: %s", name,
                err[0] ? err : kura_strerror(rc));
        return NULL;
    }
    /* if it is ever served, the update log's rows so far are older than it */
    kura_store_state st = { .ulog_ts = UINT64_MAX };
    if (s->ops->save_state && (rc = s->ops->save_state(s, &st)) < 0) {
        log_msg(KURA_LOG_ERROR, "cannot write the copy's state: %s", kura_strerror(rc));
        kura_store_close(s);
        return NULL;
    }
    return s;
}

int swap_files(const char *dbname, bool then_remove_old)
{
    char path[4096], oldp[4096], copy[4096];
    struct stat sb;
    db_path(dbname, path, sizeof(path));
    sibling(dbname, ".old.", oldp, sizeof(oldp), NULL, 0);
    sibling(dbname, ".copy.", copy, sizeof(copy), NULL, 0);
    int rc = KURA_OK;
    bool had = lstat(path, &sb) == 0;
    if ((had && rename(path, oldp) < 0) || rename(copy, path) < 0) {
        log_msg(KURA_LOG_ERROR, "cannot put the copy in place of %s: %s", path, strerror(errno));
        rc = KURA_ESYS;
        if (access(oldp, F_OK) == 0 && access(path, F_OK) != 0)
            (void)rename(oldp, path);
    }
    sync_parent(path);
    if (rc == KURA_OK && then_remove_old)
        swap_remove_old(dbname);
    return rc;
}

void swap_remove_old(const char *dbname)
{
    char oldp[4096];
    sibling(dbname, ".old.", oldp, sizeof(oldp), NULL, 0);
    if (kura_remove_tree(oldp) < 0)
        log_msg(KURA_LOG_ERROR, "cannot remove %s: %s", oldp, strerror(errno));
}

typedef struct swap_arg {
    kura_server *srv;
    kura_store *shadow;
} swap_arg;

/* engine_swap_store's callback: every other call into the engine waits. */
static int swap_now(void *arg, kura_store *old, kura_store **now)
{
    swap_arg *sa = arg;
    kura_server *srv = sa->srv;
    kura_store *shadow = sa->shadow;
    const char *dbname = srv->settings->dbname;
    kura_store_close(old);
    if (in_memory(dbname)) {
        *now = shadow;
        return KURA_OK;
    }
    kura_store_close(shadow);
    int rc = swap_files(dbname, false);
    char err[512] = "";
    int orc = kura_store_open(dbname, &srv->store_cfg, now, err, sizeof(err));
    if (orc) {
        log_msg(KURA_LOG_ERROR, "cannot open %s after the swap: %s", dbname,
                err[0] ? err : kura_strerror(orc));
        *now = NULL;
        return orc;
    }
    if (rc == KURA_OK)
        swap_remove_old(dbname);
    return rc;
}

int swap_in(void *arg, kura_store *shadow)
{
    swap_arg sa = { arg, shadow };
    kura_server *srv = arg;
    int rc = engine_swap_store(srv->engine, swap_now, &sa);
    if (rc && !engine_store_of(srv->engine)) {
        /* neither the copy nor the old store can be opened: nothing to serve */
        log_msg(KURA_LOG_ERROR, "no database to serve after a failed swap: exiting");
        _exit(1);
    }
    return rc;
}
