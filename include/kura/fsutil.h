/*
 * fsutil.h - file-system chores that the server and the tools share.
 */
#ifndef KURA_FSUTIL_H
#define KURA_FSUTIL_H

/* Removes path and, if it is a directory, everything below it, without
 * following symbolic links.  A missing path is not an error.  0, or -1
 * with errno set (what could not be removed stays). */
int kura_remove_tree(const char *path);

#endif
