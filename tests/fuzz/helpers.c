/*
 * helpers.c - the fuzz targets' shared helpers (fuzz.h).
 */
#include <errno.h>
#include <fcntl.h>
#include <ftw.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "kura/bytes.h"
#include "kura/crc32c.h"
#include "kura/engine.h"
#include "kura/store.h"
#include "fuzz.h"

static char dir[4096];

/* nftw callbacks: every file and directory below dir, or only the files
 * (fuzz_clear: removing and making directories again costs milliseconds
 * on some file systems, a file's unlink much less) */
static int rm_one(const char *path, const struct stat *st, int flag, struct FTW *ftw)
{
    (void)st;
    if (ftw->level > 0)
        flag == FTW_DP ? rmdir(path) : unlink(path);
    return 0;
}

static int rm_file(const char *path, const struct stat *st, int flag, struct FTW *ftw)
{
    (void)st;
    if (ftw->level > 0 && flag != FTW_DP)
        unlink(path);
    return 0;
}

static void remove_dir(void)
{
    if (!dir[0])
        return;
    nftw(dir, rm_one, 16, FTW_DEPTH | FTW_PHYS);
    rmdir(dir);
}

const char *fuzz_dir(void)
{
    if (!dir[0]) {
        const char *t = getenv("TMPDIR");
        snprintf(dir, sizeof(dir), "%s/kura-fuzz.XXXXXX", t && *t ? t : "/tmp");
        if (!mkdtemp(dir)) {
            perror("fuzz: mkdtemp");
            abort();
        }
        atexit(remove_dir);
    }
    return dir;
}

const char *fuzz_path(const char *name)
{
    static char path[8192];
    snprintf(path, sizeof(path), "%s/%s", fuzz_dir(), name);
    return path;
}

void fuzz_clear(void)
{
    nftw(fuzz_dir(), rm_file, 16, FTW_DEPTH | FTW_PHYS);
}

void fuzz_write(const char *name, const void *p, size_t len)
{
    char path[8192];
    snprintf(path, sizeof(path), "%s/%s", fuzz_dir(), name);
    for (char *s = strchr(path + strlen(fuzz_dir()) + 1, '/'); s; s = strchr(s + 1, '/')) {
        *s = '\0';
        if (mkdir(path, 0700) != 0 && errno != EEXIST) {
            perror(path);
            abort();
        }
        *s = '/';
    }
    int fd = open(path, O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0600);
    if (fd < 0 || (len && write(fd, p, len) != (ssize_t)len) || close(fd) != 0) {
        perror(path);
        abort();
    }
}

unsigned char *fuzz_dup(const uint8_t *data, size_t size)
{
    unsigned char *p = malloc(size ? size : 1);
    if (!p)
        abort();
    if (size)
        memcpy(p, data, size);
    return p;
}

size_t fuzz_fix_ul_rows(unsigned char *p, size_t len)
{
    size_t off = 0;
    while (len - off >= 5) {
        uint64_t rl;
        const unsigned char *q = get_varint(p + off + 4, p + len, &rl);
        if (!q || rl > len - (size_t)(q - p))
            break;
        size_t total = (size_t)(q - (p + off)) + (size_t)rl;
        put32(p + off, crc32c_update(0, p + off + 4, total - 4));
        off += total;
    }
    return off;
}

void fuzz_fix_snapshot(unsigned char *f, size_t len)
{
    if (len < 64 + 48)
        return;
    put32(f + 60, crc32c_update(0, f, 60));
    /* version 2: each block's CRC of its head and compressed bytes, and,
     * with codec none (the compressed bytes are the raw ones), of its raw
     * bytes; blocks in order while their lengths stay inside the body */
    for (size_t at = 64; get32(f + 8) == 2 && len - 48 - at >= 32;) {
        unsigned char *h = f + at;
        size_t fc = get32(h + 12), vc = get32(h + 20);
        if (fc > len - 48 - at - 32 || vc > len - 48 - at - 32 - fc)
            break;
        if (f[12] == 0 && fc == get32(h + 8) && vc == get32(h + 16))
            put32(h + 24, crc32c_update(0, h + 32, fc + vc));
        put32(h + 28, crc32c_update(crc32c_update(0, h, 28), h + 32, fc + vc));
        at += 32 + fc + vc;
    }
    put32(f + len - 4, crc32c_update(0, f, len - 4));
}

kura_engine *fuzz_engine_open(size_t item_size_max)
{
    kura_store_config cfg = { .mem_limit = 4 << 20, .item_size_max = item_size_max };
    kura_store *st;
    kura_engine *e;
    char err[256];
    /* a table of 64 sets of marks (6 KB) instead of 16,384 (1.5 MiB),
     * allocated and freed per input: the same code, evicting sooner */
    kura_engine_config ecfg = { .item_size_max = item_size_max, .marks_sets = 64 };
    if (kura_store_open("*#bnum=64", &cfg, &st, err, sizeof(err)) != KURA_OK ||
        engine_open(&e, st, &ecfg) != KURA_OK)
        abort();
    return e;
}

void fuzz_quiet(int level, const char *line)
{
    (void)level;
    (void)line;
}

static int read_item(void *arg, const kura_item *it)
{
    unsigned *sum = arg;
    if (it->klen == 0 || it->klen > 250)
        abort();
    for (size_t i = 0; i < it->vlen; i++)      /* every byte handed out is read */
        *sum += ((const unsigned char *)it->val)[i];
    return 0;
}

kura_store *fuzz_store_walk(const char *dbname, bool recover)
{
    kura_store_config cfg = { .item_size_max = 1 << 20, .read_only = !recover,
                              .recover = recover, .log = fuzz_quiet };
    kura_store *s;
    char err[512];
    if (kura_store_open(dbname, &cfg, &s, err, sizeof(err)) != KURA_OK)
        return NULL;
    kura_clock clk = { .now = 1700000000 };
    unsigned sum = 0;
    s->ops->iterate(s, &(kura_iter_spec){ .scope = KURA_ITER_ALL }, &clk, read_item, &sum);
    kura_store_state st;
    s->ops->load_state(s, &st);
    return s;
}
