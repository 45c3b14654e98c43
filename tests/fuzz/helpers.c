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
#include "fuzz.h"

static char dir[4096];

static int rm_one(const char *path, const struct stat *st, int flag, struct FTW *ftw)
{
    (void)st;
    (void)flag;
    if (ftw->level > 0 || strcmp(path, dir) != 0)
        remove(path);
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
    nftw(fuzz_dir(), rm_one, 16, FTW_DEPTH | FTW_PHYS);
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
    put32(f + len - 4, crc32c_update(0, f, len - 4));
}
