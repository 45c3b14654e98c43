/*
 * hashdb_testlib.h - helpers shared by the hash file tests: temporary
 * directories, opening by name, reading a key into a buffer, copying a
 * database directory as a crash image.
 */
#ifndef KURA_HASHDB_TESTLIB_H
#define KURA_HASHDB_TESTLIB_H

#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <ftw.h>
#include <stdbool.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "kura/store.h"
#include "kura/storedebug.h"
#include "kura/testhooks.h"

static char t_root[256];

static int t_rm_cb(const char *p, const struct stat *sb, int flag, struct FTW *ftw)
{
    (void)sb; (void)flag; (void)ftw;
    return remove(p);
}

static void t_rmrf(const char *p)
{
    nftw(p, t_rm_cb, 16, FTW_DEPTH | FTW_PHYS);
}

__attribute__((unused)) static void t_setup(void)
{
    snprintf(t_root, sizeof(t_root), "/tmp/kura-hashdb-XXXXXX");
    if (!mkdtemp(t_root)) {
        perror("mkdtemp");
        exit(2);
    }
    kura_test.quiet_stores = true;
}

__attribute__((unused)) static void t_teardown(void)
{
    t_rmrf(t_root);
}

/* "<root>/<name>.kh" */
__attribute__((unused)) static const char *t_path(const char *name)
{
    static char buf[8][512];
    static int k;
    char *b = buf[k++ % 8];
    snprintf(b, 512, "%s/%s.kh", t_root, name);
    return b;
}

static kura_store_config t_cfg(int sync)
{
    kura_store_config c;
    memset(&c, 0, sizeof(c));
    c.item_size_max = KURA_ITEM_SIZE_MAX_DEFAULT;
    c.sync_mode = sync;
    return c;
}

static int t_open(const char *path, const char *params, const kura_store_config *cfg,
                  kura_store **s, char *err, size_t errlen)
{
    char name[1024];
    snprintf(name, sizeof(name), "%s%s", path, params ? params : "");
    err[0] = '\0';
    return kura_store_open(name, cfg, s, err, errlen);
}

typedef struct t_val {
    char buf[4096];
    size_t len;
    uint32_t flags;
    int64_t exptime;
    uint64_t cas;
} t_val;

static int t_copy_cb(void *arg, const kura_item *it)
{
    t_val *v = arg;
    v->len = it->vlen < sizeof(v->buf) ? it->vlen : sizeof(v->buf);
    memcpy(v->buf, it->val, v->len);
    v->flags = it->flags;
    v->exptime = it->exptime;
    v->cas = it->cas;
    return 0;
}

__attribute__((unused)) static int t_get(kura_store *s, const char *key, const kura_clock *clk, t_val *v)
{
    memset(v, 0, sizeof(*v));
    return s->ops->get(s, key, strlen(key), clk, t_copy_cb, v);
}

__attribute__((unused)) static int t_put(kura_store *s, const char *key, const char *val, uint32_t flags,
                 int64_t exptime, uint64_t cas, int cond, uint64_t cmp, const kura_clock *clk)
{
    kura_item it = { .key = key, .klen = strlen(key), .val = val, .vlen = strlen(val),
                     .flags = flags, .exptime = exptime, .cas = cas };
    return kura_store_put(s, &it, cond, cmp, clk);
}

/* Copies a database directory file by file (a "crash image" when the
 * source is open: what a kill -9 at this instant would leave). */
__attribute__((unused)) static int t_copy_dir(const char *from, const char *to)
{
    DIR *d = opendir(from);
    if (!d || mkdir(to, 0755) != 0)
        return -1;
    struct dirent *de;
    char a[1024], b[1024], buf[65536];
    while ((de = readdir(d))) {
        if (de->d_name[0] == '.')
            continue;
        snprintf(a, sizeof(a), "%s/%s", from, de->d_name);
        snprintf(b, sizeof(b), "%s/%s", to, de->d_name);
        int in = open(a, O_RDONLY), out = open(b, O_WRONLY | O_CREAT | O_TRUNC, 0644);
        if (in < 0 || out < 0)
            return -1;
        ssize_t n;
        while ((n = read(in, buf, sizeof(buf))) > 0)
            if (write(out, buf, (size_t)n) != n)
                return -1;
        close(in);
        close(out);
    }
    closedir(d);
    return 0;
}

static void t_stat_cb(void *arg, const char *name, const char *value)
{
    char **want = arg;
    if (strcmp(name, want[0]) == 0)
        snprintf(want[1], 64, "%s", value);
}

__attribute__((unused)) static uint64_t t_stat(kura_store *s, const char *name)
{
    char val[64] = "0";
    char *want[2] = { (char *)name, val };
    s->ops->stats(s, t_stat_cb, want);
    return strtoull(val, NULL, 10);
}

/* Names of the segment files, newest last. */
__attribute__((unused)) static int t_last_segment(const char *dir, char *out, size_t len)
{
    DIR *d = opendir(dir);
    struct dirent *de;
    char best[256] = "";
    if (!d)
        return -1;
    while ((de = readdir(d)))
        if (strstr(de->d_name, ".seg") && strcmp(de->d_name, best) > 0)
            memcpy(best, de->d_name, strlen(de->d_name) + 1);
    closedir(d);
    if (strlen(dir) + strlen(best) + 2 > len)
        return -1;
    sprintf(out, "%s/%s", dir, best);
    return best[0] ? 0 : -1;
}

/* One record's header as docs/formats.md describes it, read here
 * independently of the store's own code (versions 2 to 4; no checks
 * beyond the shape): 0 and its type, key and value lengths and header
 * length, or -1 where the bytes are no header of that version. */
typedef struct t_rec {
    int type;
    size_t hlen, klen, vlen;
} t_rec;

static const unsigned char *t_varint(const unsigned char *p, const unsigned char *end,
                                     uint64_t *v)
{
    *v = 0;
    for (int shift = 0; p < end && shift < 64; shift += 7) {
        *v |= (uint64_t)(*p & 0x7f) << shift;
        if (!(*p++ & 0x80))
            return p;
    }
    return NULL;
}

__attribute__((unused)) static int t_rec_parse(const unsigned char *b, size_t len,
                                               uint32_t version, t_rec *r)
{
    const unsigned char *p, *end = b + len;
    uint64_t v, vlen;
    if (len < 8)
        return -1;
    if (version >= 4) {
        /* crc, descriptor (10 ffff ccc tt: type - 1, flags and exptime
         * present, cas mode), klen, vlen, [flags], [exptime], seq, [cas] */
        unsigned d = b[4];
        if ((d & 0xc0) != 0x80 || (d & 0x30) == 0x30)
            return -1;
        r->type = (int)(d & 3) + 1;
        r->klen = b[5];
        if (!(p = t_varint(b + 6, end, &vlen)))
            return -1;
        int more = 1 + !!(d & 4) + !!(d & 8) + ((d & 0x30) == 0x20);
        while (more-- > 0)
            if (!(p = t_varint(p, end, &v)))
                return -1;
    } else {
        /* crc, "Kr", type, klen, vlen, flags, exptime, cas, seq */
        if (b[4] != 'K' || b[5] != 'r')
            return -1;
        r->type = b[6];
        r->klen = b[7];
        if (!(p = t_varint(b + 8, end, &vlen)))
            return -1;
        for (int i = 0; i < 4; i++)
            if (!(p = t_varint(p, end, &v)))
                return -1;
    }
    if (r->type == 4 && (p >= end || !(p = t_varint(p + 1, end, &v))))   /* codec, rawlen */
        return -1;
    r->hlen = (size_t)(p - b);
    r->vlen = (size_t)vlen;
    return 0;
}

/* Where the PUT records of a segment file begin (t_rec_parse): offs gets
 * up to max offsets and, after them, the end of the last record; returns
 * how many.  Reading stops at the first bytes that are no record. */
__attribute__((unused)) static int t_seg_records(const char *seg, uint64_t *offs, int max)
{
    FILE *f = fopen(seg, "rb");
    static unsigned char buf[1 << 20];
    size_t len = f ? fread(buf, 1, sizeof(buf), f) : 0;
    if (f)
        fclose(f);
    int n = 0;
    uint64_t off = 32;
    uint32_t version = len >= 12 ? (uint32_t)buf[8] | (uint32_t)buf[9] << 8 : 0;
    t_rec r;
    while (off + 8 <= len && t_rec_parse(buf + off, len - off, version, &r) == 0) {
        if (r.type == 1 && n < max)
            offs[n++] = off;
        off += r.hlen + r.klen + r.vlen;
    }
    offs[n] = off;
    return n;
}

#endif
