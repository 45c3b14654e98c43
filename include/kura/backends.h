/*
 * backends.h - the constructor of each backend, for kura_store_open
 * (src/store/dbpath.c), which picks one by the database name's suffix.
 *
 * Declared once here, and included by each backend's definition as well
 * as by dbpath.c, so that a change of signature fails to compile instead
 * of calling through a mismatched prototype.  Everything else about a
 * backend is reached through its kura_store_ops table (store.h); callers
 * outside src/store open a store with kura_store_open.
 *
 * Each constructor takes the path without its "#name=value" parameters,
 * takes the parameters it knows from params (kura_param_take) and rejects
 * the rest before it creates or changes anything
 * (kura_params_reject_unused); on error it returns a negative status, sets
 * *out to NULL and writes a message naming the problem into err.
 */
#ifndef KURA_BACKENDS_H
#define KURA_BACKENDS_H

#include <stddef.h>

#include "kura/store.h"

/* The in-memory cache, "*" or ":" (src/store/cache/cache.c). */
int cache_open(const char *path, kura_params *params, const kura_store_config *cfg,
               kura_store **out, char *err, size_t errlen);

/* The hash file, ".kh" (and ".tch", ".kch"): src/store/hash/. */
int hashdb_open(const char *path, kura_params *params, const kura_store_config *cfg,
                kura_store **out, char *err, size_t errlen);

/* The B+ tree, ".kb" (and ".tcb", ".kct"): src/store/tree/. */
int btree_open(const char *path, kura_params *params, const kura_store_config *cfg,
               kura_store **out, char *err, size_t errlen);

#endif
