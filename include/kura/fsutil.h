/*
 * fsutil.h - file-system chores that the server and the tools share.
 */
#ifndef KURA_FSUTIL_H
#define KURA_FSUTIL_H

/* Removes path and, if it is a directory, everything below it, without
 * following symbolic links.  A missing path is not an error.  0, or -1
 * with errno set (what could not be removed stays). */
int kura_remove_tree(const char *path);

#include <stddef.h>

/* Replaces dirfd/name with len bytes at buf so that a crash leaves the old
 * file or the new one, whole: written to name.tmp, synced, renamed over
 * name, the directory synced.  0, or -1 with errno set. */
int kura_write_file_atomic(int dirfd, const char *name, const void *buf, size_t len);

#endif
