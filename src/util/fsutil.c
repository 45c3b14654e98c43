/*
 * fsutil.c - file-system chores that the server and the tools share
 * (fsutil.h).
 */
#include <errno.h>
#include <ftw.h>
#include <stdio.h>
#include <sys/stat.h>

#include "kura/fsutil.h"

static int remove_one(const char *p, const struct stat *sb, int flag, struct FTW *f)
{
    (void)sb; (void)flag; (void)f;
    return remove(p) == 0 || errno == ENOENT ? 0 : -1;
}

int kura_remove_tree(const char *path)
{
    struct stat sb;
    if (lstat(path, &sb) < 0)
        return errno == ENOENT ? 0 : -1;
    return nftw(path, remove_one, 16, FTW_DEPTH | FTW_PHYS);
}
