/*
 * value.c - a get's value into its reply: copied, or referenced.
 *
 * A value of PROTO_VALUE_REF_MIN bytes or more that its store lets keep
 * (item.h's kura_vref: the tree's cache of large values) is not copied
 * into the output: the output holds a reference to it (buf.h), sent from
 * where it lies by the connection's sendmsg and released once sent, as
 * memcached sends an item with its refcount held.  The copy was a tenth
 * of kurad's CPU on 20 KB gets from the tree (docs/benchmarks.md).
 * Every protocol's get (text, meta, binary) appends its value here, so
 * the rule is in one place; the replies' bytes are the same either way.
 */
#include <pthread.h>
#include <stdlib.h>

#include "kura/testhooks.h"
#include "proto_int.h"

#ifdef KURA_TEST_HOOKS
static pthread_once_t hooks_once = PTHREAD_ONCE_INIT;

static void read_hooks(void)
{
    /* the integration tests' negative check (testhooks.h; test builds only) */
    if (getenv("KURA_TEST_VREF_EARLY"))
        kura_test.vref_early_release = true;
}
#endif

bool proto_append_value(kura_buf *out, const kura_item *it)
{
    if (proto_value_by_ref(it) && kura_buf_append_ref(out, it->val, it->vlen, it->vref)) {
#ifdef KURA_TEST_HOOKS
        pthread_once(&hooks_once, read_hooks);
#endif
        if (KURA_TEST_SWITCH(vref_early_release))
            kura_buf_release_last_ref(out);
        return true;
    }
    return kura_buf_append(out, it->val, it->vlen);
}
