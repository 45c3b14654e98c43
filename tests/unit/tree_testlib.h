/*
 * tree_testlib.h - helpers shared by the B+ tree's tests (test_tree.c,
 * test_tree_zcomp.c): a database's path under the test directory, a log
 * callback that counts ERROR lines, the structure check with no page
 * leaked, a byte of a file flipped (damage), a tree opened quietly
 * (t_open_tree).  Include after
 * hashdb_testlib.h (t_root).
 */
#ifndef KURA_TREE_TESTLIB_H
#define KURA_TREE_TESTLIB_H

#include <fcntl.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <unistd.h>

#include "kura/store.h"
#include "kura/storedebug.h"
#include "kura/testhooks.h"

int btree_debug_check(kura_store *s, uint64_t *leaked, char *err, size_t errlen);

/* "<test dir>/<name>.kb"; eight results may be held at once */
__attribute__((unused)) static const char *tpath(const char *name)
{
    static char buf[8][512];
    static int k;
    char *b = buf[k++ % 8];
    snprintf(b, 512, "%s/%s.kb", t_root, name);
    return b;
}

static int n_errors;            /* ERROR lines logged so far */

__attribute__((unused)) static void quiet_log(int level, const char *line)
{
    if (level == KURA_LOG_ERROR)
        n_errors++;
    if (getenv("KURA_TEST_VERBOSE"))
        printf("# log: %s\n", line);
}

/* A tree opened with no syncs and quiet_log: NULL (and why, printed) if it
 * does not open. */
__attribute__((unused)) static kura_store *t_open_tree(const char *path, const char *params)
{
    char err[600];
    kura_store *s = NULL;
    kura_store_config c = t_cfg(KURA_SYNC_NONE);
    c.log = quiet_log;
    if (t_open(path, params, &c, &s, err, sizeof(err)) != KURA_OK) {
        printf("# open %s%s: %s\n", path, params ? params : "", err);
        return NULL;
    }
    return s;
}

/* the structure check, and no page leaked: 0, the check's error, or -100 */
__attribute__((unused)) static int check_tree(kura_store *s)
{
    char err[300];
    uint64_t leaked = 0;
    int rc = btree_debug_check(s, &leaked, err, sizeof(err));
    if (rc)
        printf("# check: %s\n", err);
    else if (leaked)
        printf("# check: %llu pages leaked\n", (unsigned long long)leaked);
    return rc ? rc : leaked ? -100 : 0;
}

/* Flips bits of the byte at off (twice mends it). */
__attribute__((unused)) static void flip(const char *file, off_t off)
{
    int fd = open(file, O_RDWR);
    unsigned char b;
    if (fd < 0 || pread(fd, &b, 1, off) != 1) {
        if (fd >= 0)
            close(fd);
        return;
    }
    b ^= 0x5a;
    if (pwrite(fd, &b, 1, off) != 1)
        printf("# flip failed\n");
    close(fd);
}

#endif
