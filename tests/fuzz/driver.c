/*
 * driver.c - main() for the fuzz targets when built without libFuzzer
 * (the plain compiler, make test): replays every file named, and every
 * file in every directory named (sorted, so runs are alike), through
 * LLVMFuzzerTestOneInput, one at a time.
 *
 * Prints a line per file only with -v; ends with "replayed N inputs" and
 * exits 0, or exits non-zero when a file cannot be read.  A finding shows
 * as a crash (abort, a sanitizer report under make test-asan), which is
 * what the corpus replay in tests/integration/test_fuzz_corpus.py looks
 * for.  The input is copied into a buffer of exactly its size, as libFuzzer
 * does, so that a read past its end is seen by AddressSanitizer.
 *
 * As libFuzzer does (-malloc_limit_mb, which defaults to tests/fuzz/run's
 * -rss_limit_mb), a single allocation of FUZZ_MALLOC_LIMIT or more is a
 * finding: the program aborts, naming its size.  The Makefile links the
 * replayers with -Wl,--wrap for malloc, calloc and realloc, so that the
 * library's calls come here first.
 */
#include <dirent.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

#include "fuzz.h"

#define FUZZ_MALLOC_LIMIT ((size_t)2048 << 20)

void *__real_malloc(size_t n);
void *__real_calloc(size_t n, size_t size);
void *__real_realloc(void *p, size_t n);
void *__wrap_malloc(size_t n);
void *__wrap_calloc(size_t n, size_t size);
void *__wrap_realloc(void *p, size_t n);

static void limit(size_t n)
{
    if (n >= FUZZ_MALLOC_LIMIT) {
        fprintf(stderr, "fuzz driver: an allocation of %zu bytes (the limit is %zu: "
                "libFuzzer's out-of-memory)\n", n, FUZZ_MALLOC_LIMIT);
        abort();
    }
}

void *__wrap_malloc(size_t n)
{
    limit(n);
    return __real_malloc(n);
}

void *__wrap_calloc(size_t n, size_t size)
{
    if (size && n > SIZE_MAX / size)
        return NULL;
    limit(n * size);
    return __real_calloc(n, size);
}

void *__wrap_realloc(void *p, size_t n)
{
    limit(n);
    return __real_realloc(p, n);
}

static int verbose;
static unsigned long replayed;

static int replay_file(const char *path)
{
    FILE *f = fopen(path, "rb");
    if (!f) {
        perror(path);
        return -1;
    }
    size_t cap = 4096, len = 0;
    unsigned char *buf = malloc(cap);
    size_t n;
    while (buf && (n = fread(buf + len, 1, cap - len, f)) > 0) {
        len += n;
        if (len == cap) {
            unsigned char *nb = realloc(buf, cap *= 2);
            if (!nb)
                free(buf);
            buf = nb;
        }
    }
    int bad = !buf || ferror(f);
    fclose(f);
    if (bad) {
        fprintf(stderr, "%s: cannot read\n", path);
        free(buf);
        return -1;
    }
    unsigned char *exact = malloc(len ? len : 1);
    if (!exact)
        abort();
    memcpy(exact, buf, len);
    free(buf);
    if (verbose)
        fprintf(stderr, "replay %s (%zu bytes)\n", path, len);
    LLVMFuzzerTestOneInput(exact, len);
    free(exact);
    replayed++;
    return 0;
}

static int cmp(const void *a, const void *b)
{
    return strcmp(*(char *const *)a, *(char *const *)b);
}

static int replay(const char *path)
{
    struct stat st;
    if (stat(path, &st) != 0) {
        perror(path);
        return -1;
    }
    if (!S_ISDIR(st.st_mode))
        return replay_file(path);
    struct dirent **names;
    int n = scandir(path, &names, NULL, NULL);
    if (n < 0) {
        perror(path);
        return -1;
    }
    char **paths = calloc((size_t)n + 1, sizeof(char *));
    int np = 0, rc = 0;
    for (int i = 0; i < n; i++) {
        if (names[i]->d_name[0] != '.' && paths &&
            asprintf(&paths[np], "%s/%s", path, names[i]->d_name) >= 0)
            np++;
        free(names[i]);
    }
    free(names);
    if (!paths)
        return -1;
    qsort(paths, (size_t)np, sizeof(char *), cmp);
    for (int i = 0; i < np; i++) {
        if (rc == 0 && replay(paths[i]) != 0)
            rc = -1;
        free(paths[i]);
    }
    free(paths);
    return rc;
}

int main(int argc, char **argv)
{
    int rc = 0, files = 0;
    for (int i = 1; i < argc; i++) {
        if (strcmp(argv[i], "-v") == 0) {
            verbose = 1;
            continue;
        }
        files++;
        if (replay(argv[i]) != 0)
            rc = 1;
    }
    if (!files) {
        fprintf(stderr, "usage: %s [-v] FILE|DIR...  (replays each input once)\n", argv[0]);
        return 2;
    }
    printf("replayed %lu inputs\n", replayed);
    return rc;
}
