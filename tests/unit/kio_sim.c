/*
 * kio_sim.c - the fault injector and the power-loss recorder of kio_sim.h.
 *
 * Both sit between a store and the table below them (the system's) and
 * pass every call through, so the store's process sees its files as they
 * are; what they add is on the side: the injector replaces the Nth call of
 * a kind by a failure, the recorder keeps a log of every change and sync.
 *
 * The recorder's model of the disk after a power loss, per object (a file
 * or a directory, known by its inode: fds are dup'ed and reused, names
 * change, and an inode number may be reused once a file is gone, so a
 * creation always starts a new object):
 *
 *  - a file holds what its last completed fsync/fdatasync covered; a sync
 *    covers the changes recorded before the call began (not those that
 *    raced with it).  The changes since (writes, truncates, fallocates,
 *    punched holes) reach the disk the way the page cache writes back: page by page, in
 *    any order, each 4 KiB page as it was at some moment since the sync
 *    (so a later write may be there and an earlier one not, and a write
 *    spanning pages may be torn at a page boundary), the size apart from
 *    the data (a size ahead of the pages leaves zeroed tail pages, as ext4
 *    may), and a page being written when the power went torn at a 512-byte
 *    sector.  A page never holds an older write over a newer one: the page
 *    cache has only the newest bytes.  Choosing per write instead would
 *    make states no disk can reach (two records sharing a sector, one on
 *    disk and the other not).
 *  - a directory holds the entries its last fsync covered; each later
 *    creation, rename, unlink or mkdir in it may or may not have happened.
 *    A rename is atomic: the file is under the old name or the new one.
 *
 * The simulation only moves forward (the durable state after the first k
 * operations, and what is pending then); an image at cut k is drawn from
 * it.  Images at ascending cut points therefore cost the operations once,
 * plus the size of the files per image.
 */
#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <ftw.h>
#include <limits.h>
#include <pthread.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

#include "kio_sim.h"

/* ---- shared helpers -------------------------------------------------------- */

static void *xrealloc(void *p, size_t n)
{
    void *q = realloc(p, n ? n : 1);
    if (!q) {
        fprintf(stderr, "kio_sim: out of memory\n");
        abort();
    }
    return q;
}

/* Grows an array *pp of *cap elements of size sz to hold need. */
static void grow(void *pp, size_t *cap, size_t need, size_t sz)
{
    if (need <= *cap)
        return;
    size_t c = *cap ? *cap : 8;
    while (c < need)
        c *= 2;
    *(void **)pp = xrealloc(*(void **)pp, c * sz);
    *cap = c;
}

/* The absolute path of (dirfd, path), from what /proc says dirfd is. */
static int resolve(int dirfd, const char *path, char *out, size_t len)
{
    char base[PATH_MAX];
    if (path[0] == '/')
        return snprintf(out, len, "%s", path) < (int)len ? 0 : -1;
    if (dirfd == AT_FDCWD) {
        if (!getcwd(base, sizeof(base)))
            return -1;
    } else {
        char link[64];
        snprintf(link, sizeof(link), "/proc/self/fd/%d", dirfd);
        ssize_t n = readlink(link, base, sizeof(base) - 1);
        if (n < 0)
            return -1;
        base[n] = '\0';
    }
    return snprintf(out, len, "%s/%s", base, path) < (int)len ? 0 : -1;
}

static int fd_path(int fd, char *out, size_t len)
{
    char link[64];
    snprintf(link, sizeof(link), "/proc/self/fd/%d", fd);
    ssize_t n = readlink(link, out, len - 1);
    if (n < 0)
        return -1;
    out[n] = '\0';
    return 0;
}

static int rm_cb(const char *p, const struct stat *sb, int flag, struct FTW *ftw)
{
    (void)sb; (void)flag; (void)ftw;
    return remove(p);
}

void kio_rmrf(const char *path)
{
    nftw(path, rm_cb, 16, FTW_DEPTH | FTW_PHYS);
}

static uint64_t splitmix(uint64_t *s)
{
    uint64_t z = (*s += 0x9E3779B97F4A7C15ULL);
    z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ULL;
    z = (z ^ (z >> 27)) * 0x94D049BB133111EBULL;
    return z ^ (z >> 31);
}

static size_t iov_total(const struct iovec *iov, int n)
{
    size_t t = 0;
    for (int i = 0; i < n; i++)
        t += iov[i].iov_len;
    return t;
}

/* ---- the injector -------------------------------------------------------- */

struct kio_inject {
    kura_io io;                 /* first: the table handed to the store */
    const kura_io *below;
    pthread_mutex_t mu;
    char *match;
    uint64_t calls[KIO_NKINDS];
    int kind;                   /* armed rule; -1 none */
    uint64_t nth, times;
    int err;
    uint64_t fired;
    uint64_t bytes_read;        /* by pread, every path (not failed, not matched) */
    uint64_t bytes_written;     /* by pwritev, every path (as returned) */
};

static kio_inject *IN(const kura_io *io)
{
    return io->ctx;
}

/* Counts the call if it matches and says whether to fail it: 0, an errno,
 * or KIO_SHORT. */
static int in_decide(kio_inject *in, int kind, const char *p1, const char *p2, int fd)
{
    char buf[PATH_MAX];
    int fail = 0;
    pthread_mutex_lock(&in->mu);
    if (in->match) {
        bool hit = (p1 && strstr(p1, in->match)) || (p2 && strstr(p2, in->match));
        if (!hit && fd >= 0 && fd_path(fd, buf, sizeof(buf)) == 0 && strstr(buf, in->match))
            hit = true;
        if (!hit) {
            pthread_mutex_unlock(&in->mu);
            return 0;
        }
    }
    uint64_t n = ++in->calls[kind];
    if (in->kind == kind && n >= in->nth && (in->times == 0 || n < in->nth + in->times)) {
        fail = in->err;
        in->fired++;
    }
    pthread_mutex_unlock(&in->mu);
    return fail;
}

static int in_open(const kura_io *io, int dirfd, const char *path, int flags, mode_t mode)
{
    int e = in_decide(IN(io), KIO_OPEN, path, NULL, -1);
    if (e > 0) {
        errno = e;
        return -1;
    }
    return IN(io)->below->open(IN(io)->below, dirfd, path, flags, mode);
}

static int in_close(const kura_io *io, int fd)
{
    return IN(io)->below->close(IN(io)->below, fd);
}

static ssize_t in_pread(const kura_io *io, int fd, void *buf, size_t n, off_t off)
{
    ssize_t r = IN(io)->below->pread(IN(io)->below, fd, buf, n, off);
    if (r > 0)
        __atomic_add_fetch(&IN(io)->bytes_read, (uint64_t)r, __ATOMIC_RELAXED);
    return r;
}

static ssize_t in_pwritev(const kura_io *io, int fd, const struct iovec *iov, int n, off_t off)
{
    const kura_io *b = IN(io)->below;
    int e = in_decide(IN(io), KIO_PWRITEV, NULL, NULL, fd);
    if (e == KIO_SHORT) {
        /* half the bytes, as a full disk or a signal may leave */
        size_t want = iov_total(iov, n) / 2, got = 0;
        struct iovec v[64];
        int vn = 0;
        for (int i = 0; i < n && i < 64 && got < want; i++) {
            size_t l = iov[i].iov_len < want - got ? iov[i].iov_len : want - got;
            v[vn++] = (struct iovec){ iov[i].iov_base, l };
            got += l;
        }
        return want ? b->pwritev(b, fd, v, vn, off) : 0;
    }
    if (e > 0) {
        errno = e;
        return -1;
    }
    ssize_t w = b->pwritev(b, fd, iov, n, off);
    if (w > 0)
        __atomic_add_fetch(&IN(io)->bytes_written, (uint64_t)w, __ATOMIC_RELAXED);
    return w;
}

#define IN_FD_CALL(name, KIND, ...)                                     \
    int e = in_decide(IN(io), KIND, NULL, NULL, fd);                    \
    if (e > 0) {                                                        \
        errno = e;                                                      \
        return -1;                                                      \
    }                                                                   \
    return IN(io)->below->name(IN(io)->below, fd, ##__VA_ARGS__)

static int in_fsync(const kura_io *io, int fd) { IN_FD_CALL(fsync, KIO_FSYNC); }
static int in_fdatasync(const kura_io *io, int fd) { IN_FD_CALL(fdatasync, KIO_FDATASYNC); }
static int in_fallocate(const kura_io *io, int fd, off_t off, off_t len)
{
    IN_FD_CALL(fallocate, KIO_FALLOCATE, off, len);
}
static int in_ftruncate(const kura_io *io, int fd, off_t len)
{
    IN_FD_CALL(ftruncate, KIO_FTRUNCATE, len);
}
static int in_punch(const kura_io *io, int fd, off_t off, off_t len)
{
    IN_FD_CALL(punch, KIO_PUNCH, off, len);
}

static int in_renameat(const kura_io *io, int od, const char *op, int nd, const char *np)
{
    int e = in_decide(IN(io), KIO_RENAMEAT, op, np, -1);
    if (e > 0) {
        errno = e;
        return -1;
    }
    return IN(io)->below->renameat(IN(io)->below, od, op, nd, np);
}

static int in_unlinkat(const kura_io *io, int dirfd, const char *path, int flags)
{
    int e = in_decide(IN(io), KIO_UNLINKAT, path, NULL, -1);
    if (e > 0) {
        errno = e;
        return -1;
    }
    return IN(io)->below->unlinkat(IN(io)->below, dirfd, path, flags);
}

static int in_mkdirat(const kura_io *io, int dirfd, const char *path, mode_t mode)
{
    int e = in_decide(IN(io), KIO_MKDIRAT, path, NULL, -1);
    if (e > 0) {
        errno = e;
        return -1;
    }
    return IN(io)->below->mkdirat(IN(io)->below, dirfd, path, mode);
}

static void *in_mmap(const kura_io *io, size_t len, int prot, int flags, int fd, off_t off)
{
    int e = in_decide(IN(io), KIO_MMAP, NULL, NULL, fd);
    if (e > 0) {
        errno = e;
        return MAP_FAILED;
    }
    return IN(io)->below->mmap(IN(io)->below, len, prot, flags, fd, off);
}

static int in_munmap(const kura_io *io, void *addr, size_t len)
{
    return IN(io)->below->munmap(IN(io)->below, addr, len);
}

kio_inject *kio_inject_new(const kura_io *below)
{
    kio_inject *in = calloc(1, sizeof(*in));
    if (!in)
        return NULL;
    in->io = (kura_io){ in_open, in_close, in_pread, in_pwritev, in_fsync, in_fdatasync,
                        in_fallocate, in_ftruncate, in_renameat, in_unlinkat, in_mkdirat,
                        in_mmap, in_munmap, in_punch, in };
    in->below = kio_or_default(below);
    in->kind = -1;
    pthread_mutex_init(&in->mu, NULL);
    return in;
}

void kio_inject_free(kio_inject *in)
{
    if (!in)
        return;
    pthread_mutex_destroy(&in->mu);
    free(in->match);
    free(in);
}

const kura_io *kio_inject_io(kio_inject *in)
{
    return &in->io;
}

void kio_inject_match(kio_inject *in, const char *sub)
{
    pthread_mutex_lock(&in->mu);
    free(in->match);
    in->match = sub ? strdup(sub) : NULL;
    pthread_mutex_unlock(&in->mu);
}

void kio_inject_fail(kio_inject *in, int kind, uint64_t nth, uint64_t times, int err)
{
    pthread_mutex_lock(&in->mu);
    in->kind = kind;
    in->nth = nth;
    in->times = times;
    in->err = err;
    pthread_mutex_unlock(&in->mu);
}

void kio_inject_fail_from_now(kio_inject *in, int kind, int err)
{
    kio_inject_fail(in, kind, kio_inject_calls(in, kind) + 1, 0, err);
}

void kio_inject_disarm(kio_inject *in)
{
    pthread_mutex_lock(&in->mu);
    in->kind = -1;
    pthread_mutex_unlock(&in->mu);
}

void kio_inject_reset(kio_inject *in)
{
    pthread_mutex_lock(&in->mu);
    memset(in->calls, 0, sizeof(in->calls));
    in->fired = 0;
    __atomic_store_n(&in->bytes_read, 0, __ATOMIC_RELAXED);
    __atomic_store_n(&in->bytes_written, 0, __ATOMIC_RELAXED);
    pthread_mutex_unlock(&in->mu);
}

uint64_t kio_inject_calls(kio_inject *in, int kind)
{
    pthread_mutex_lock(&in->mu);
    uint64_t n = in->calls[kind];
    pthread_mutex_unlock(&in->mu);
    return n;
}

uint64_t kio_inject_bytes_read(kio_inject *in)
{
    return __atomic_load_n(&in->bytes_read, __ATOMIC_RELAXED);
}

uint64_t kio_inject_bytes_written(kio_inject *in)
{
    return __atomic_load_n(&in->bytes_written, __ATOMIC_RELAXED);
}

uint64_t kio_inject_fired(kio_inject *in)
{
    pthread_mutex_lock(&in->mu);
    uint64_t n = in->fired;
    pthread_mutex_unlock(&in->mu);
    return n;
}

/* ---- the recorder: the log ------------------------------------------------ */

enum rop_kind { R_WRITE, R_TRUNC, R_ALLOC, R_SYNC, R_CREATE, R_MKDIR, R_RENAME, R_UNLINK,
                R_PUNCH };

/* One recorded operation. */
typedef struct rop {
    uint8_t kind;
    uint32_t obj;               /* the file (data ops, sync) or the directory (dir ops) */
    uint32_t obj2;              /* rename: the new name's directory */
    uint32_t child;             /* create, mkdir, rename: the object named */
    uint64_t off, len;          /* write, punch: range; trunc: len; alloc: new end;
                                   sync: upto */
    unsigned char *data;        /* write */
    char *name, *name2;         /* dir ops: the name (and the new one) */
} rop;

typedef struct sbuf {
    unsigned char *p;
    size_t len, cap;
} sbuf;

typedef struct sent {
    char *name;
    uint32_t obj;
} sent;

typedef struct sdir {
    sent *e;
    size_t n, cap;
} sdir;

/* A file or directory, by inode. */
typedef struct sobj {
    dev_t dev;
    ino_t ino;
    bool dir;
    bool bound;                 /* the inode is this object's (not reused since) */
    char name[64];              /* last name known, for reports */
    sbuf init;                  /* content when recording began (files) */
    sdir init_ents;             /* entries when recording began (dirs) */
} sobj;

/* The simulated disk: what is durable per object, what is pending. */
typedef struct sstate {
    sbuf data;                  /* durable content */
    uint64_t *pend;             /* pending data ops (indices), in order */
    size_t npend, cappend;
} sstate;

/* A directory op not yet durable: need has bit 0 while its directory is
 * unsynced, bit 1 while the rename target's directory is. */
typedef struct dpend {
    uint64_t op;
    uint8_t need;
} dpend;

struct kio_rec {
    kura_io io;
    const kura_io *below;
    pthread_mutex_t mu;
    bool lies;
    sobj *objs;
    size_t nobj, capobj;
    rop *ops;
    uint64_t nops;
    size_t capops;
    /* the simulation */
    sstate *st;
    size_t capst;
    sdir *dents;                /* durable entries of each directory, by object */
    size_t capdents;
    uint64_t pos;               /* ops applied */
    dpend *dp;
    size_t ndp, capdp;
};

static kio_rec *REC(const kura_io *io)
{
    return io->ctx;
}

static void sb_set_len(sbuf *b, size_t n)
{
    grow(&b->p, &b->cap, n, 1);
    if (n > b->len)
        memset(b->p + b->len, 0, n - b->len);
    b->len = n;
}

static void sb_write(sbuf *b, uint64_t off, const void *p, size_t n)
{
    if (off + n > b->len)
        sb_set_len(b, off + n);
    memcpy(b->p + off, p, n);
}

static void sb_copy(sbuf *to, const sbuf *from)
{
    to->len = 0;
    sb_set_len(to, from->len);
    if (from->len)
        memcpy(to->p, from->p, from->len);
}

static void sd_free(sdir *d)
{
    for (size_t i = 0; i < d->n; i++)
        free(d->e[i].name);
    free(d->e);
    memset(d, 0, sizeof(*d));
}

static void sd_copy(sdir *to, const sdir *from)
{
    sd_free(to);
    grow(&to->e, &to->cap, from->n, sizeof(sent));
    for (size_t i = 0; i < from->n; i++)
        to->e[i] = (sent){ strdup(from->e[i].name), from->e[i].obj };
    to->n = from->n;
}

static sent *sd_find(sdir *d, const char *name)
{
    for (size_t i = 0; i < d->n; i++)
        if (strcmp(d->e[i].name, name) == 0)
            return &d->e[i];
    return NULL;
}

static void sd_set(sdir *d, const char *name, uint32_t obj)
{
    sent *e = sd_find(d, name);
    if (e) {
        e->obj = obj;
        return;
    }
    grow(&d->e, &d->cap, d->n + 1, sizeof(sent));
    d->e[d->n++] = (sent){ strdup(name), obj };
}

static void sd_del(sdir *d, const char *name)
{
    sent *e = sd_find(d, name);
    if (!e)
        return;
    free(e->name);
    *e = d->e[--d->n];
}

/* The object bound to an inode, or -1.  Caller holds mu. */
static long obj_find(kio_rec *r, dev_t dev, ino_t ino)
{
    for (size_t i = r->nobj; i-- > 0;)
        if (r->objs[i].bound && r->objs[i].ino == ino && r->objs[i].dev == dev)
            return (long)i;
    return -1;
}

/* A new object for an inode (unbinding any older object of that inode,
 * whose file is gone).  Caller holds mu. */
static uint32_t obj_new(kio_rec *r, dev_t dev, ino_t ino, bool dir, const char *name)
{
    long old = obj_find(r, dev, ino);
    if (old >= 0)
        r->objs[old].bound = false;
    grow(&r->objs, &r->capobj, r->nobj + 1, sizeof(sobj));
    sobj *o = &r->objs[r->nobj];
    memset(o, 0, sizeof(*o));
    o->dev = dev;
    o->ino = ino;
    o->dir = dir;
    o->bound = true;
    snprintf(o->name, sizeof(o->name), "%s", name);
    grow(&r->st, &r->capst, r->nobj + 1, sizeof(sstate));
    memset(&r->st[r->nobj], 0, sizeof(sstate));
    grow(&r->dents, &r->capdents, r->nobj + 1, sizeof(sdir));
    memset(&r->dents[r->nobj], 0, sizeof(sdir));
    return (uint32_t)r->nobj++;
}

static long fd_obj(kio_rec *r, int fd)
{
    struct stat st;
    if (fstat(fd, &st) != 0)
        return -1;
    return obj_find(r, st.st_dev, st.st_ino);
}

/* The directory object holding the last component of an absolute path,
 * and that component; -1 if the directory is not recorded. */
static long parent_obj(kio_rec *r, const char *abs, const char **name)
{
    char dir[PATH_MAX];
    const char *slash = strrchr(abs, '/');
    struct stat st;
    if (!slash)
        return -1;
    size_t n = (size_t)(slash - abs);
    memcpy(dir, abs, n);
    dir[n] = '\0';
    if (n == 0)
        strcpy(dir, "/");
    *name = slash + 1;
    if (stat(dir, &st) != 0)
        return -1;
    return obj_find(r, st.st_dev, st.st_ino);
}

static uint64_t rec_push(kio_rec *r, rop op)
{
    grow(&r->ops, &r->capops, r->nops + 1, sizeof(rop));
    r->ops[r->nops] = op;
    return r->nops++;
}

/* ---- the recorder: the table ----------------------------------------------- */

static int rc_open(const kura_io *io, int dirfd, const char *path, int flags, mode_t mode)
{
    kio_rec *r = REC(io);
    char abs[PATH_MAX];
    struct stat st;
    bool creating = (flags & O_CREAT) && fstatat(dirfd, path, &st, AT_SYMLINK_NOFOLLOW) != 0 &&
                    errno == ENOENT;
    int fd = r->below->open(r->below, dirfd, path, flags, mode);
    if (fd < 0 || fstat(fd, &st) != 0 || resolve(dirfd, path, abs, sizeof(abs)) != 0)
        return fd;
    int saved = errno;
    pthread_mutex_lock(&r->mu);
    const char *name;
    long dir = parent_obj(r, abs, &name);
    long obj = obj_find(r, st.st_dev, st.st_ino);
    if (creating && dir >= 0) {
        uint32_t c = obj_new(r, st.st_dev, st.st_ino, false, name);
        rec_push(r, (rop){ .kind = R_CREATE, .obj = (uint32_t)dir, .child = c,
                           .name = strdup(name) });
    } else if (obj >= 0 && (flags & O_TRUNC) && (flags & O_ACCMODE) != O_RDONLY &&
               S_ISREG(st.st_mode)) {
        rec_push(r, (rop){ .kind = R_TRUNC, .obj = (uint32_t)obj, .len = 0 });
    }
    pthread_mutex_unlock(&r->mu);
    errno = saved;
    return fd;
}

static int rc_close(const kura_io *io, int fd)
{
    return REC(io)->below->close(REC(io)->below, fd);
}

static ssize_t rc_pread(const kura_io *io, int fd, void *buf, size_t n, off_t off)
{
    return REC(io)->below->pread(REC(io)->below, fd, buf, n, off);
}

static ssize_t rc_pwritev(const kura_io *io, int fd, const struct iovec *iov, int n, off_t off)
{
    kio_rec *r = REC(io);
    ssize_t w = r->below->pwritev(r->below, fd, iov, n, off);
    if (w <= 0)
        return w;
    int saved = errno;
    unsigned char *copy = xrealloc(NULL, (size_t)w);
    size_t got = 0;
    for (int i = 0; i < n && got < (size_t)w; i++) {
        size_t l = iov[i].iov_len < (size_t)w - got ? iov[i].iov_len : (size_t)w - got;
        memcpy(copy + got, iov[i].iov_base, l);
        got += l;
    }
    pthread_mutex_lock(&r->mu);
    long obj = fd_obj(r, fd);
    if (obj >= 0) {
        rec_push(r, (rop){ .kind = R_WRITE, .obj = (uint32_t)obj, .off = (uint64_t)off,
                           .len = (uint64_t)w, .data = copy });
        copy = NULL;
    }
    pthread_mutex_unlock(&r->mu);
    free(copy);
    errno = saved;
    return w;
}

/* A sync makes durable what was recorded before it began. */
static int rc_sync(kio_rec *r, int fd, bool data_only)
{
    pthread_mutex_lock(&r->mu);
    uint64_t upto = r->nops;
    pthread_mutex_unlock(&r->mu);
    int rc = data_only ? r->below->fdatasync(r->below, fd) : r->below->fsync(r->below, fd);
    if (rc != 0)
        return rc;
    pthread_mutex_lock(&r->mu);
    long obj = fd_obj(r, fd);
    if (obj >= 0 && !r->lies)
        rec_push(r, (rop){ .kind = R_SYNC, .obj = (uint32_t)obj, .len = upto });
    pthread_mutex_unlock(&r->mu);
    return 0;
}

static int rc_fsync(const kura_io *io, int fd)
{
    return rc_sync(REC(io), fd, false);
}

static int rc_fdatasync(const kura_io *io, int fd)
{
    return rc_sync(REC(io), fd, true);
}

static int rc_fallocate(const kura_io *io, int fd, off_t off, off_t len)
{
    kio_rec *r = REC(io);
    int rc = r->below->fallocate(r->below, fd, off, len);
    if (rc != 0)
        return rc;
    pthread_mutex_lock(&r->mu);
    long obj = fd_obj(r, fd);
    if (obj >= 0)
        rec_push(r, (rop){ .kind = R_ALLOC, .obj = (uint32_t)obj, .len = (uint64_t)(off + len) });
    pthread_mutex_unlock(&r->mu);
    return 0;
}

static int rc_ftruncate(const kura_io *io, int fd, off_t len)
{
    kio_rec *r = REC(io);
    int rc = r->below->ftruncate(r->below, fd, len);
    if (rc != 0)
        return rc;
    pthread_mutex_lock(&r->mu);
    long obj = fd_obj(r, fd);
    if (obj >= 0)
        rec_push(r, (rop){ .kind = R_TRUNC, .obj = (uint32_t)obj, .len = (uint64_t)len });
    pthread_mutex_unlock(&r->mu);
    return 0;
}

static int rc_renameat(const kura_io *io, int od, const char *op, int nd, const char *np)
{
    kio_rec *r = REC(io);
    char a[PATH_MAX], b[PATH_MAX];
    struct stat st;
    bool known = fstatat(od, op, &st, AT_SYMLINK_NOFOLLOW) == 0 &&
                 resolve(od, op, a, sizeof(a)) == 0 && resolve(nd, np, b, sizeof(b)) == 0;
    int rc = r->below->renameat(r->below, od, op, nd, np);
    if (rc != 0 || !known)
        return rc;
    pthread_mutex_lock(&r->mu);
    const char *n1, *n2;
    long d1 = parent_obj(r, a, &n1), d2 = parent_obj(r, b, &n2);
    long c = obj_find(r, st.st_dev, st.st_ino);
    if (d1 >= 0 && d2 >= 0 && c >= 0) {
        rec_push(r, (rop){ .kind = R_RENAME, .obj = (uint32_t)d1, .obj2 = (uint32_t)d2,
                           .child = (uint32_t)c, .name = strdup(n1), .name2 = strdup(n2) });
        snprintf(r->objs[c].name, sizeof(r->objs[c].name), "%s", n2);
    }
    pthread_mutex_unlock(&r->mu);
    return 0;
}

static int rc_unlinkat(const kura_io *io, int dirfd, const char *path, int flags)
{
    kio_rec *r = REC(io);
    char a[PATH_MAX];
    bool known = resolve(dirfd, path, a, sizeof(a)) == 0;
    int rc = r->below->unlinkat(r->below, dirfd, path, flags);
    if (rc != 0 || !known)
        return rc;
    pthread_mutex_lock(&r->mu);
    const char *name;
    long d = parent_obj(r, a, &name);
    if (d >= 0)
        rec_push(r, (rop){ .kind = R_UNLINK, .obj = (uint32_t)d, .name = strdup(name) });
    pthread_mutex_unlock(&r->mu);
    return 0;
}

static int rc_mkdirat(const kura_io *io, int dirfd, const char *path, mode_t mode)
{
    kio_rec *r = REC(io);
    char a[PATH_MAX];
    struct stat st;
    int rc = r->below->mkdirat(r->below, dirfd, path, mode);
    if (rc != 0 || resolve(dirfd, path, a, sizeof(a)) != 0 || stat(a, &st) != 0)
        return rc;
    pthread_mutex_lock(&r->mu);
    const char *name;
    long d = parent_obj(r, a, &name);
    if (d >= 0) {
        uint32_t c = obj_new(r, st.st_dev, st.st_ino, true, name);
        rec_push(r, (rop){ .kind = R_MKDIR, .obj = (uint32_t)d, .child = c,
                           .name = strdup(name) });
    }
    pthread_mutex_unlock(&r->mu);
    return 0;
}

/* A hole punched: pending like a write (it may or may not have happened
 * in an image until a sync covers it); once it has, its bytes read as
 * zeros and the size stays (KEEP_SIZE). */
static int rc_punch(const kura_io *io, int fd, off_t off, off_t len)
{
    kio_rec *r = REC(io);
    int rc = r->below->punch(r->below, fd, off, len);
    if (rc != 0)
        return rc;
    int saved = errno;
    pthread_mutex_lock(&r->mu);
    long obj = fd_obj(r, fd);
    if (obj >= 0)
        rec_push(r, (rop){ .kind = R_PUNCH, .obj = (uint32_t)obj, .off = (uint64_t)off,
                           .len = (uint64_t)len });
    pthread_mutex_unlock(&r->mu);
    errno = saved;
    return 0;
}

/* Bytes stored through a writable shared mapping would escape the log:
 * refused, so the store appends with pwritev (kio.h). */
static void *rc_mmap(const kura_io *io, size_t len, int prot, int flags, int fd, off_t off)
{
    kio_rec *r = REC(io);
    if ((prot & PROT_WRITE) && (flags & MAP_SHARED)) {
        errno = ENODEV;
        return MAP_FAILED;
    }
    return r->below->mmap(r->below, len, prot, flags, fd, off);
}

static int rc_munmap(const kura_io *io, void *addr, size_t len)
{
    return REC(io)->below->munmap(REC(io)->below, addr, len);
}

/* What root holds now: durable from the start. */
static int snapshot(kio_rec *r, const char *path, uint32_t dir)
{
    DIR *d = opendir(path);
    struct dirent *de;
    if (!d)
        return -1;
    while ((de = readdir(d))) {
        char p[PATH_MAX];
        struct stat st;
        if (strcmp(de->d_name, ".") == 0 || strcmp(de->d_name, "..") == 0)
            continue;
        snprintf(p, sizeof(p), "%s/%s", path, de->d_name);
        if (lstat(p, &st) != 0 || !(S_ISDIR(st.st_mode) || S_ISREG(st.st_mode)))
            continue;
        uint32_t o = obj_new(r, st.st_dev, st.st_ino, S_ISDIR(st.st_mode), de->d_name);
        sd_set(&r->objs[dir].init_ents, de->d_name, o);
        if (S_ISDIR(st.st_mode)) {
            if (snapshot(r, p, o) != 0) {
                closedir(d);
                return -1;
            }
            continue;
        }
        FILE *f = fopen(p, "rb");
        if (!f) {
            closedir(d);
            return -1;
        }
        sb_set_len(&r->objs[o].init, (size_t)st.st_size);
        size_t got = st.st_size ? fread(r->objs[o].init.p, 1, (size_t)st.st_size, f) : 0;
        fclose(f);
        r->objs[o].init.len = got;
    }
    closedir(d);
    return 0;
}

static void sim_reset(kio_rec *r);

kio_rec *kio_rec_new(const char *root, const kura_io *below)
{
    struct stat st;
    if (stat(root, &st) != 0 || !S_ISDIR(st.st_mode))
        return NULL;
    kio_rec *r = calloc(1, sizeof(*r));
    if (!r)
        return NULL;
    r->io = (kura_io){ rc_open, rc_close, rc_pread, rc_pwritev, rc_fsync, rc_fdatasync,
                       rc_fallocate, rc_ftruncate, rc_renameat, rc_unlinkat, rc_mkdirat,
                       rc_mmap, rc_munmap, rc_punch, r };
    r->below = kio_or_default(below);
    pthread_mutex_init(&r->mu, NULL);
    obj_new(r, st.st_dev, st.st_ino, true, "");     /* object 0: the root */
    if (snapshot(r, root, 0) != 0) {
        kio_rec_free(r);
        return NULL;
    }
    sim_reset(r);
    return r;
}

void kio_rec_free(kio_rec *r)
{
    if (!r)
        return;
    for (uint64_t i = 0; i < r->nops; i++) {
        free(r->ops[i].data);
        free(r->ops[i].name);
        free(r->ops[i].name2);
    }
    for (size_t i = 0; i < r->nobj; i++) {
        free(r->objs[i].init.p);
        sd_free(&r->objs[i].init_ents);
        free(r->st[i].data.p);
        sd_free(&r->dents[i]);
        free(r->st[i].pend);
    }
    free(r->ops);
    free(r->objs);
    free(r->st);
    free(r->dents);
    free(r->dp);
    pthread_mutex_destroy(&r->mu);
    free(r);
}

const kura_io *kio_rec_io(kio_rec *r)
{
    return &r->io;
}

void kio_rec_set_lies(kio_rec *r, bool lies)
{
    pthread_mutex_lock(&r->mu);
    r->lies = lies;
    pthread_mutex_unlock(&r->mu);
}

uint64_t kio_rec_ops(kio_rec *r)
{
    pthread_mutex_lock(&r->mu);
    uint64_t n = r->nops;
    pthread_mutex_unlock(&r->mu);
    return n;
}

void kio_rec_describe(kio_rec *r, uint64_t i, char *buf, size_t len)
{
    static const char *kinds[] = { "write", "truncate", "fallocate", "sync", "create",
                                   "mkdir", "rename", "unlink", "punch" };
    pthread_mutex_lock(&r->mu);
    if (i >= r->nops) {
        snprintf(buf, len, "op %llu: (end)", (unsigned long long)i);
    } else {
        const rop *o = &r->ops[i];
        const char *on = r->objs[o->obj].name;
        switch (o->kind) {
        case R_WRITE: case R_PUNCH:
            snprintf(buf, len, "op %llu: %s %s [%llu, +%llu)", (unsigned long long)i,
                     kinds[o->kind], on, (unsigned long long)o->off, (unsigned long long)o->len);
            break;
        case R_TRUNC: case R_ALLOC:
            snprintf(buf, len, "op %llu: %s %s to %llu", (unsigned long long)i, kinds[o->kind],
                     on, (unsigned long long)o->len);
            break;
        case R_SYNC:
            snprintf(buf, len, "op %llu: sync %s%s (covers ops < %llu)", (unsigned long long)i,
                     on, r->objs[o->obj].dir ? "/" : "", (unsigned long long)o->len);
            break;
        case R_RENAME:
            snprintf(buf, len, "op %llu: rename %s -> %s", (unsigned long long)i, o->name,
                     o->name2);
            break;
        default:
            snprintf(buf, len, "op %llu: %s %s", (unsigned long long)i, kinds[o->kind], o->name);
        }
    }
    pthread_mutex_unlock(&r->mu);
}

/* ---- the recorder: the simulation ------------------------------------------ */

static void sim_reset(kio_rec *r)
{
    for (size_t i = 0; i < r->nobj; i++) {
        sstate *s = &r->st[i];
        sb_copy(&s->data, &r->objs[i].init);
        sd_copy(&r->dents[i], &r->objs[i].init_ents);
        s->npend = 0;
    }
    r->ndp = 0;
    r->pos = 0;
}

static void apply_data(sbuf *b, const rop *o)
{
    switch (o->kind) {
    case R_WRITE:
        sb_write(b, o->off, o->data, o->len);
        break;
    case R_TRUNC:
        sb_set_len(b, o->len);
        break;
    case R_ALLOC:
        if (o->len > b->len)
            sb_set_len(b, o->len);
        break;
    case R_PUNCH:
        if (o->off < b->len)
            memset(b->p + o->off, 0,
                   (o->off + o->len < b->len ? o->off + o->len : b->len) - o->off);
        break;
    }
}

/* Applies a directory op to the entries of the directories in ents. */
static void apply_dir(sdir *ents, const rop *o)
{
    switch (o->kind) {
    case R_CREATE: case R_MKDIR:
        sd_set(&ents[o->obj], o->name, o->child);
        break;
    case R_UNLINK:
        sd_del(&ents[o->obj], o->name);
        break;
    case R_RENAME: {
        /* the file moves: if its creation has not happened (not durable,
         * not chosen), the rename having happened means both did */
        sent *e = sd_find(&ents[o->obj], o->name);
        uint32_t c = e ? e->obj : o->child;
        sd_del(&ents[o->obj], o->name);
        sd_set(&ents[o->obj2], o->name2, c);
        break;
    }
    }
}

static void sim_step(kio_rec *r)
{
    uint64_t i = r->pos++;
    const rop *o = &r->ops[i];
    sstate *s = &r->st[o->obj];
    switch (o->kind) {
    case R_WRITE: case R_TRUNC: case R_ALLOC: case R_PUNCH:
        grow(&s->pend, &s->cappend, s->npend + 1, sizeof(uint64_t));
        s->pend[s->npend++] = i;
        break;
    case R_CREATE: case R_MKDIR: case R_RENAME: case R_UNLINK:
        grow(&r->dp, &r->capdp, r->ndp + 1, sizeof(dpend));
        r->dp[r->ndp++] = (dpend){ i, (uint8_t)(o->kind == R_RENAME && o->obj2 != o->obj ? 3 : 1) };
        break;
    case R_SYNC:
        if (r->objs[o->obj].dir) {
            for (size_t j = 0; j < r->ndp; j++) {
                const rop *d = &r->ops[r->dp[j].op];
                if (r->dp[j].op >= o->len)
                    break;
                if (d->obj == o->obj)
                    r->dp[j].need &= (uint8_t)~1;
                if (d->kind == R_RENAME && d->obj2 == o->obj)
                    r->dp[j].need &= (uint8_t)~2;
            }
            /* the durable prefix joins the durable tree (a durable op
             * behind a pending one waits, and is applied in an image
             * whatever the seed says) */
            size_t k = 0;
            while (k < r->ndp && r->dp[k].need == 0)
                apply_dir(r->dents, &r->ops[r->dp[k++].op]);
            memmove(r->dp, r->dp + k, (r->ndp - k) * sizeof(dpend));
            r->ndp -= k;
        } else {
            size_t j = 0;
            while (j < s->npend && s->pend[j] < o->len) {
                apply_data(&s->data, &r->ops[s->pend[j]]);
                j++;
            }
            memmove(s->pend, s->pend + j, (s->npend - j) * sizeof(uint64_t));
            s->npend -= j;
        }
        break;
    }
}

/* ---- the recorder: images -------------------------------------------------- */

/* How an image treats the changes pending at its cut point, chosen by its
 * seed: the plain cases (nothing reached the disk; everything did, as
 * after kill -9) and the mixed ones (an ordered prefix, then a torn
 * write; or each change on its own). */
enum { ST_NONE, ST_ALL, ST_PREFIX, ST_RANDOM };

typedef struct img {
    kio_rec *r;
    uint64_t rng;
    int style;
    sdir *view;                 /* each directory's entries in this image */
} img;

static uint64_t rnd(img *m, uint64_t n)
{
    return n ? splitmix(&m->rng) % n : 0;
}

/* A pending change's effect on the file size. */
static uint64_t size_after(uint64_t size, const rop *o)
{
    if (o->kind == R_TRUNC)
        return o->len;
    if (o->kind == R_PUNCH)
        return size;            /* KEEP_SIZE */
    uint64_t end = o->kind == R_WRITE ? o->off + o->len : o->len;
    return end > size ? end : size;
}

/* The file's content in this image.  The page cache writes a file back
 * page by page, in any order, each page as it is at that moment: so each
 * 4 KiB page independently holds the durable bytes with some prefix of the
 * pending changes applied (its "version"), and the size (metadata, written
 * apart from the data) is that of some version too.  A size ahead of the
 * pages leaves zeroed tail pages, as ext4 may; pages at different
 * versions tear a write at page boundaries and let a later write be there
 * while an earlier one is not.  A page being written when the power went
 * may be torn at a 512-byte sector: its first sectors at its version,
 * the rest at an older one. */
#define PG 4096
#define SECT 512

static void file_content(img *m, uint32_t obj, sbuf *out)
{
    kio_rec *r = m->r;
    sstate *s = &r->st[obj];
    size_t n = s->npend;
    sb_copy(out, &s->data);
    if (n == 0 || m->style == ST_NONE)
        return;
    /* the final size, and how far any version reaches */
    uint64_t size = s->data.len, reach = s->data.len, t = s->data.len;
    for (size_t j = 0; j < n; j++) {
        t = size_after(t, &r->ops[s->pend[j]]);
        if (t > reach)
            reach = t;
    }
    size_t vsize = m->style == ST_ALL ? n : (size_t)rnd(m, n + 1);
    size_t global = m->style == ST_PREFIX ? (size_t)rnd(m, n + 1) : 0;
    if (m->style == ST_PREFIX)
        vsize = global;
    for (size_t j = 0; j < vsize; j++)
        size = size_after(size, &r->ops[s->pend[j]]);
    /* each page at its version, built from the durable bytes */
    sb_set_len(out, reach);
    for (uint64_t pg = 0; pg < reach; pg += PG) {
        uint64_t pe = pg + PG < reach ? pg + PG : reach;
        size_t v = m->style == ST_ALL ? n : m->style == ST_PREFIX ? global : (size_t)rnd(m, n + 1);
        /* torn: sectors from cut on stay at an older version */
        bool torn = m->style != ST_ALL && rnd(m, m->style == ST_PREFIX ? 16 : 5) == 0 && v > 0;
        uint64_t cut = torn ? pg + SECT * (1 + rnd(m, PG / SECT - 1)) : pe;
        size_t older = torn ? (size_t)rnd(m, v) : v;
        for (int part = 0; part < 2; part++) {
            uint64_t lo = part ? cut : pg, hi = part ? pe : (cut < pe ? cut : pe);
            size_t ver = part ? older : v;
            if (lo >= hi)
                continue;
            /* start from the durable bytes (zeros past the durable size) */
            memset(out->p + lo, 0, hi - lo);
            if (lo < s->data.len)
                memcpy(out->p + lo, s->data.p + lo,
                       (s->data.len < hi ? s->data.len : hi) - lo);
            for (size_t j = 0; j < ver; j++) {
                const rop *o = &r->ops[s->pend[j]];
                if (o->kind == R_WRITE) {
                    uint64_t a = o->off > lo ? o->off : lo;
                    uint64_t b = o->off + o->len < hi ? o->off + o->len : hi;
                    if (a < b)
                        memcpy(out->p + a, o->data + (a - o->off), b - a);
                } else if (o->kind == R_PUNCH) {
                    /* the hole: zeros where it meets the page */
                    uint64_t a = o->off > lo ? o->off : lo;
                    uint64_t b = o->off + o->len < hi ? o->off + o->len : hi;
                    if (a < b)
                        memset(out->p + a, 0, b - a);
                } else if (o->kind == R_TRUNC && o->len < hi) {
                    /* cut off: what was past it reads as zeros */
                    uint64_t a = o->len > lo ? o->len : lo;
                    memset(out->p + a, 0, hi - a);
                }
            }
        }
    }
    out->len = size;
}

static int materialize(img *m, uint32_t dir, const char *path, int depth, char *err,
                       size_t errlen)
{
    kio_rec *r = m->r;
    sbuf content = { 0 };
    int rc = 0;
    if (depth > 16 || mkdir(path, 0755) != 0) {
        snprintf(err, errlen, "mkdir %s: %s", path, depth > 16 ? "too deep" : strerror(errno));
        return -1;
    }
    const sdir *d = &m->view[dir];
    for (size_t i = 0; i < d->n && rc == 0; i++) {
        char p[PATH_MAX];
        uint32_t c = d->e[i].obj;
        snprintf(p, sizeof(p), "%s/%s", path, d->e[i].name);
        if (r->objs[c].dir) {
            rc = materialize(m, c, p, depth + 1, err, errlen);
            continue;
        }
        file_content(m, c, &content);
        int fd = open(p, O_WRONLY | O_CREAT | O_TRUNC, 0644);
        size_t done = 0;
        while (fd >= 0 && done < content.len) {
            ssize_t w = write(fd, content.p + done, content.len - done);
            if (w <= 0)
                break;
            done += (size_t)w;
        }
        if (fd < 0 || done < content.len) {
            snprintf(err, errlen, "writing %s: %s", p, strerror(errno));
            rc = -1;
        }
        if (fd >= 0)
            close(fd);
    }
    free(content.p);
    return rc;
}

int kio_rec_image(kio_rec *r, uint64_t k, uint64_t seed, const char *dest, char *err,
                  size_t errlen)
{
    pthread_mutex_lock(&r->mu);
    if (k > r->nops) {
        snprintf(err, errlen, "cut point %llu past the %llu operations recorded",
                 (unsigned long long)k, (unsigned long long)r->nops);
        pthread_mutex_unlock(&r->mu);
        return -1;
    }
    if (k < r->pos)
        sim_reset(r);
    while (r->pos < k)
        sim_step(r);
    img m = { .r = r, .rng = seed * 0x2545F4914F6CDD1DULL ^ k };
    uint64_t x = rnd(&m, 10);
    m.style = x < 2 ? ST_NONE : x < 4 ? ST_ALL : x < 7 ? ST_PREFIX : ST_RANDOM;
    m.view = calloc(r->nobj, sizeof(sdir));
    for (size_t i = 0; i < r->nobj; i++)
        if (r->objs[i].dir)
            sd_copy(&m.view[i], &r->dents[i]);
    size_t L = (size_t)rnd(&m, r->ndp + 1);
    for (size_t j = 0; j < r->ndp; j++) {
        bool happened = r->dp[j].need == 0 || m.style == ST_ALL ||
                        (m.style == ST_PREFIX && j < L) || (m.style == ST_RANDOM && rnd(&m, 2));
        if (happened)
            apply_dir(m.view, &r->ops[r->dp[j].op]);
    }
    kio_rmrf(dest);
    int rc = materialize(&m, 0, dest, 0, err, errlen);
    for (size_t i = 0; i < r->nobj; i++)
        sd_free(&m.view[i]);
    free(m.view);
    pthread_mutex_unlock(&r->mu);
    return rc;
}
