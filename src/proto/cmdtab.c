/*
 * cmdtab.c - the text protocol's command table (cmdtab.h): the built-in
 * commands of text.c plus what the server's modules register, and the
 * stats groups they add.
 *
 * Every request looks its command up, so the lookup is a hash of the name
 * (FNV-1a over a few bytes) into an open-addressed index twice the size of
 * the table, then one comparison: as cheap as the first entry of a linear
 * search, and it stays so as commands are added.  The table is a fixed
 * array, filled before the workers start and only read after that, so the
 * request path takes no lock and follows no pointer but the table's.
 */
#include <stdlib.h>
#include <string.h>

#include "proto_int.h"

#define CMDTAB_MAX 64                   /* commands, built-ins included */
#define CMDTAB_SLOTS 128                /* index slots: a power of two, 2 x CMDTAB_MAX */
#define CMDTAB_STATS_MAX 16             /* stats providers */

typedef struct stats_group {
    const char *group;                  /* NULL: plain "stats" */
    kura_stats_fn fn;
    void *ctx;
} stats_group;

struct kura_cmdtab {
    text_command cmd[CMDTAB_MAX];
    size_t len[CMDTAB_MAX];             /* strlen(cmd[i].name) */
    int ncmd;
    unsigned char slot[CMDTAB_SLOTS];   /* 1 + an index into cmd; 0 = empty */
    stats_group stats[CMDTAB_STATS_MAX];
    int nstats;
};

static unsigned name_hash(const char *p, size_t n)
{
    uint32_t h = 2166136261u;
    for (size_t i = 0; i < n; i++)
        h = (h ^ (unsigned char)p[i]) * 16777619u;
    return (unsigned)(h ^ h >> 16);
}

/* The names are a few bytes: a loop here costs less than a call to memcmp. */
static bool same_name(const char *a, const char *b, size_t len)
{
    for (size_t i = 0; i < len; i++)
        if (a[i] != b[i])
            return false;
    return true;
}

const text_command *cmdtab_find(const kura_cmdtab *t, const char *name, size_t len)
{
    if (len > KURA_CMD_NAME_MAX)
        return NULL;
    for (unsigned i = name_hash(name, len);; i++) {
        unsigned s = t->slot[i & (CMDTAB_SLOTS - 1)];
        if (s == 0)
            return NULL;
        if (t->len[s - 1] == len && same_name(t->cmd[s - 1].name, name, len))
            return &t->cmd[s - 1];
    }
}

static int enter(kura_cmdtab *t, const text_command *c)
{
    size_t len = c->name ? strlen(c->name) : 0;
    if (len == 0 || len > KURA_CMD_NAME_MAX)
        return KURA_EINVAL;
    if (cmdtab_find(t, c->name, len))
        return KURA_EXISTS;
    if (t->ncmd == CMDTAB_MAX)
        return KURA_ENOMEM;
    unsigned i = name_hash(c->name, len);
    while (t->slot[i & (CMDTAB_SLOTS - 1)])
        i++;
    t->cmd[t->ncmd] = *c;
    t->len[t->ncmd] = len;
    t->ncmd++;
    t->slot[i & (CMDTAB_SLOTS - 1)] = (unsigned char)t->ncmd;
    return KURA_OK;
}

kura_cmdtab *kura_cmdtab_new(void)
{
    kura_cmdtab *t = calloc(1, sizeof(*t));
    if (!t)
        return NULL;
    size_t n;
    const text_builtin *b = text_builtin_commands(&n);
    for (size_t i = 0; i < n; i++) {
        text_command c = {
            .name = b[i].name, .handler = b[i].handler, .update_cmd = b[i].update_cmd,
            .min_tokens = b[i].min_tokens, .max_tokens = b[i].max_tokens,
            .exact_pair = b[i].exact_pair,
        };
        if (enter(t, &c) != KURA_OK)
            abort();                    /* text.c's table is wrong: a programming error */
    }
    return t;
}

void kura_cmdtab_free(kura_cmdtab *t)
{
    free(t);
}

int kura_cmdtab_add(kura_cmdtab *t, const kura_command *c)
{
    if (!c->fn)
        return KURA_EINVAL;
    text_command e = {
        .name = c->name, .min_tokens = c->min_tokens, .max_tokens = c->max_tokens,
        .fn = c->fn, .ctx = c->ctx,
    };
    return enter(t, &e);
}

int kura_cmdtab_add_stats(kura_cmdtab *t, const char *group, kura_stats_fn fn, void *ctx)
{
    if (!fn || (group && (!*group || strlen(group) > KURA_CMD_NAME_MAX)))
        return KURA_EINVAL;
    if (t->nstats == CMDTAB_STATS_MAX)
        return KURA_ENOMEM;
    t->stats[t->nstats++] = (stats_group){ group, fn, ctx };
    return KURA_OK;
}

bool cmdtab_stats(const kura_cmdtab *t, const char *group, size_t glen, kura_stat_fn emit,
                  void *arg)
{
    bool found = false;
    for (int i = 0; i < t->nstats; i++) {
        const stats_group *g = &t->stats[i];
        bool match = group ? g->group && strlen(g->group) == glen &&
                                 memcmp(g->group, group, glen) == 0
                           : g->group == NULL;
        if (match) {
            g->fn(g->ctx, emit, arg);
            found = true;
        }
    }
    return found;
}
