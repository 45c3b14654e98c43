/*
 * rejects.c - the rejects file of kuractl import (rejects.h says its form
 * and why it exists).  Written through stdio, opened only at the first
 * record (an import that stores everything leaves no file), never over an
 * existing file (O_EXCL: a previous import's rejects are not lost), and
 * synced with its directory at the end.  rej_check_file reads one back
 * whole, for the import's verification and for tests.
 */
#include <errno.h>
#include <fcntl.h>
#include <inttypes.h>
#include <libgen.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "rejects.h"

#define REJ_MAGIC "kura-rejects 1\n"

static const char *const words[REJ_COUNT] = {
    [REJ_KEY_EMPTY] = "key-empty",       [REJ_KEY_LONG] = "key-too-long",
    [REJ_VALUE_LARGE] = "value-too-large", [REJ_SHORT_XT] = "short-for-kt",
    [REJ_SHORT_FLAGS] = "short-for-flags", [REJ_STORE_REFUSED] = "store-refused",
};

const char *rej_word(rej_reason r)
{
    return r < REJ_COUNT ? words[r] : "?";
}

const char *rej_default_path(const char *db, char *buf, size_t len)
{
    size_t n = strcspn(db, "#");
    while (n > 1 && db[n - 1] == '/')
        n--;
    int w = snprintf(buf, len, "%.*s.rejects", (int)n, db);
    return w > 0 && (size_t)w < len ? buf : NULL;
}

void rej_init(rejects *r, const char *path)
{
    memset(r, 0, sizeof(*r));
    r->path = path;
}

static int fail(rejects *r)
{
    if (!r->err)
        r->err = errno ? errno : EIO;
    return -1;
}

static int open_file(rejects *r)
{
    int fd = open(r->path, O_WRONLY | O_CREAT | O_EXCL | O_CLOEXEC, 0644);
    if (fd < 0)
        return fail(r);
    if (!(r->f = fdopen(fd, "w"))) {
        close(fd);
        return fail(r);
    }
    if (fputs(REJ_MAGIC, r->f) == EOF)
        return fail(r);
    return 0;
}

int rej_add(rejects *r, rej_reason why, const char *text, const char *k, size_t kl,
            const char *v, size_t vl)
{
    if (r->err)
        return -1;
    if (!r->f && open_file(r) < 0)
        return -1;
    if (fprintf(r->f, "R %zu %zu %s %s\n", kl, vl, rej_word(why), text) < 0 ||
        fwrite(k, 1, kl, r->f) != kl || fputc('\n', r->f) == EOF ||
        (vl && fwrite(v, 1, vl, r->f) != vl) || fputc('\n', r->f) == EOF)
        return fail(r);
    r->count++;
    r->by_reason[why]++;
    return 0;
}

static int sync_dir(const char *path)
{
    char *copy = strdup(path);
    if (!copy)
        return -1;
    int fd = open(dirname(copy), O_RDONLY | O_DIRECTORY | O_CLOEXEC);
    free(copy);
    if (fd < 0)
        return -1;
    int rc = fsync(fd);
    close(fd);
    return rc;
}

int rej_finish(rejects *r)
{
    if (!r->f)
        return r->err ? -1 : 0;
    if (!r->err && (fprintf(r->f, "end %" PRIu64 "\n", r->count) < 0 || fflush(r->f) == EOF ||
                    fsync(fileno(r->f)) < 0))
        fail(r);
    if (fclose(r->f) == EOF)
        fail(r);
    r->f = NULL;
    if (!r->err && sync_dir(r->path) < 0)
        fail(r);
    return r->err ? -1 : 0;
}

const char *rej_summary(const rejects *r, char *buf, size_t len)
{
    size_t n = 0;
    buf[0] = 0;
    for (int i = 0; i < REJ_COUNT && n < len; i++) {
        if (!r->by_reason[i])
            continue;
        int w = snprintf(buf + n, len - n, "%s%" PRIu64 " %s", n ? ", " : "", r->by_reason[i],
                         words[i]);
        if (w < 0)
            break;
        n += (size_t)w;
    }
    return buf;
}

/* Reads "R klen vlen word text\n", key, value: 1, 0 at "end N", -1 bad. */
static int read_record(FILE *f, char *line, size_t cap, uint64_t *end)
{
    if (!fgets(line, (int)cap, f) || !strchr(line, '\n'))
        return -1;
    unsigned long long n;
    char tail;
    if (sscanf(line, "end %llu%c", &n, &tail) == 2 && tail == '\n') {
        *end = n;
        return 0;
    }
    size_t kl, vl;
    char word[32];
    if (sscanf(line, "R %zu %zu %31s ", &kl, &vl, word) != 3)
        return -1;
    bool known = false;
    for (int i = 0; i < REJ_COUNT; i++)
        known |= strcmp(word, words[i]) == 0;
    if (!known || fseeko(f, (off_t)kl, SEEK_CUR) < 0 || fgetc(f) != '\n' ||
        fseeko(f, (off_t)vl, SEEK_CUR) < 0 || fgetc(f) != '\n')
        return -1;
    return 1;
}

int rej_check_file(const char *path, uint64_t *count, char *err, size_t errlen)
{
    FILE *f = fopen(path, "rb");
    if (!f) {
        snprintf(err, errlen, "%s: %s", path, strerror(errno));
        return -1;
    }
    char line[512];
    uint64_t n = 0, end = UINT64_MAX;
    int rc = -1;
    if (!fgets(line, sizeof(line), f) || strcmp(line, REJ_MAGIC) != 0) {
        snprintf(err, errlen, "%s: not a rejects file (no \"kura-rejects 1\" line)", path);
        goto out;
    }
    int got;
    while ((got = read_record(f, line, sizeof(line), &end)) == 1)
        n++;
    if (got < 0 || fgetc(f) != EOF) {
        snprintf(err, errlen, "%s: record %" PRIu64 " is malformed or cut short", path, n + 1);
        goto out;
    }
    if (end != n) {
        snprintf(err, errlen, "%s: %" PRIu64 " records, its end line says %" PRIu64, path, n,
                 end);
        goto out;
    }
    *count = n;
    rc = 0;
out:
    fclose(f);
    return rc;
}
