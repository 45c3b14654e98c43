/*
 * keyset.h - a set of keys (0..KURA_KEY_MAX bytes), for a replica receiving a full
 * copy: the keys it held that the copy has not brought yet (slave.c).
 */
#ifndef KURA_REPL_KEYSET_H
#define KURA_REPL_KEYSET_H

#include <stdbool.h>
#include <stddef.h>

typedef struct keyset keyset;

keyset *keyset_new(void);
void keyset_free(keyset *ks);
bool keyset_add(keyset *ks, const char *key, size_t klen);        /* false: no memory */
void keyset_remove(keyset *ks, const void *key, size_t klen);
size_t keyset_count(const keyset *ks);
/* fn for every key still in the set; stops at (and returns) a negative return */
int keyset_each(keyset *ks, int (*fn)(void *arg, const char *key, size_t klen), void *arg);

#endif
