/*
 * dbcompat.h - Tokyo and Kyoto Cabinet database parameters translated into
 * kura's (dbcompat.c), for dbpath.c.
 */
#ifndef KURA_DBCOMPAT_H
#define KURA_DBCOMPAT_H

#include "kura/store.h"

enum { DBK_CACHE = 0, DBK_HASH = 1, DBK_TREE = 2 };

/* Rewrites the parameters of the foreign database name db (already split
 * into ps) for a backend of kind (DBK_*): mapped ones renamed or
 * converted, those with no effect dropped with an INFO line to log (NULL:
 * stderr).  KURA_EINVAL with err written for one kura refuses. */
int kura_dbcompat(const char *db, int kind, kura_params *ps, void (*log)(int, const char *),
                  char *err, size_t errlen);

#endif
