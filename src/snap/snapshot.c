/*
 * snapshot.c - writing and reading snapshot files (include/kura/snapshot.h;
 * the layout is in docs/formats.md, "Snapshots").
 *
 * All numbers are little-endian.  The header is 64 bytes with a CRC of its
 * own, so that a reader can say "not a snapshot", "damaged header" and
 * "written by version N" apart; the trailer is 48 bytes at the very end,
 * so the compressed stream's extent needs no scan, and its CRC covers
 * every byte before it, so any damage anywhere is found before a single
 * item is handed out.
 *
 * Version 2 (what is written) holds blocks of items sorted by key and laid
 * out in columns (snapblock.c), each with its own CRCs, so a reader holds
 * one block at a time and names the block that is damaged.  Version 1 (still
 * read, and written when asked, for older kurads and the tests) is one
 * compressed stream of records
 *     klen u8, flags u32, exptime i64, cas u64, vlen u32, key, value
 * In both, the raw length and the item count are checked at the end.
 */
#include <errno.h>
#include <stdarg.h>
#include <fcntl.h>
#include <limits.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "kura/bytes.h"
#include "kura/crc32c.h"
#include "kura/grow.h"
#include "kura/snapshot.h"
#include "kura/store.h"
#include "snapblock.h"

#define HDR_SIZE        64
#define TRL_SIZE        48
#define TRL_MAGIC       "SNAPEND"       /* with its NUL: 8 bytes */
#define REC_HEAD        25
#define RAW_CHUNK       (256 * 1024)    /* records are gathered this much at a time */
#define IO_CHUNK        (256 * 1024)
#define VAL_MAX         (1u << 30)

/* Writes the reason into err (if given) and returns rc: every error path
 * of this file ends in one call. */
static int fail(char *err, size_t errlen, int rc, const char *fmt, ...)
    __attribute__((format(printf, 4, 5)));

static int fail(char *err, size_t errlen, int rc, const char *fmt, ...)
{
    if (err && errlen) {
        va_list ap;
        va_start(ap, fmt);
        vsnprintf(err, errlen, fmt, ap);
        va_end(ap);
    }
    return rc;
}

static void encode_header(unsigned char *h, const snap_info *in, uint32_t version)
{
    memset(h, 0, HDR_SIZE);
    memcpy(h, SNAP_MAGIC, 8);
    put32(h + 8, version);
    h[12] = (unsigned char)in->codec;
    memcpy(h + 16, in->backend, strnlen(in->backend, 15));
    put32(h + 32, in->sid);
    put64(h + 40, in->start_ts);
    put64(h + 48, (uint64_t)in->created);
    put32(h + 60, crc32c_update(0, h, 60));
}

/* ---- writing ----------------------------------------------------------- */

struct snap_writer {
    const kura_io *io;          /* every call that changes a file */
    int fd;
    char *final_path, *tmp_path, *dir;
    uint32_t version;           /* of the format written */
    codec_stream *enc;          /* v1: the one stream */
    sb_builder *blk;            /* v2: the block being gathered */
    uint32_t crc;               /* of every byte written so far */
    uint64_t off;               /* file bytes written */
    uint64_t items, raw_bytes;
    snap_info info;
    unsigned char *raw;         /* records not yet compressed */
    size_t rlen;
    unsigned char *out;         /* compressed bytes not yet written */
    int err;                    /* sticky: the first failure */
    char errmsg[200];
};

static int w_write(snap_writer *w, const void *p, size_t n)
{
    if (kio_pwrite_all(w->io, w->fd, p, n, (off_t)w->off) < 0) {
        snprintf(w->errmsg, sizeof(w->errmsg), "write %s: %s", w->tmp_path, strerror(errno));
        return w->err = errno == ENOSPC ? KURA_ENOSPC : KURA_EIO;
    }
    w->crc = crc32c_update(w->crc, p, n);
    w->off += n;
    return KURA_OK;
}

/* Compresses what is gathered in raw (all of it when finish). */
static int w_pump(snap_writer *w, bool finish)
{
    size_t pos = 0;
    for (;;) {
        size_t used, made;
        int rc = codec_run(w->enc, w->raw + pos, w->rlen - pos, &used, w->out, IO_CHUNK, &made,
                           finish);
        pos += used;
        if (rc < 0) {
            snprintf(w->errmsg, sizeof(w->errmsg), "compress: %s", codec_error(w->enc));
            return w->err = rc;
        }
        if (made && w_write(w, w->out, made))
            return w->err;
        if (rc == CODEC_END || (!finish && pos == w->rlen && made < IO_CHUNK))
            break;
    }
    w->rlen = 0;
    return KURA_OK;
}

static int w_raw(snap_writer *w, const void *p, size_t n)
{
    const unsigned char *s = p;
    while (n) {
        size_t k = RAW_CHUNK - w->rlen < n ? RAW_CHUNK - w->rlen : n;
        memcpy(w->raw + w->rlen, s, k);
        w->rlen += k;
        s += k;
        n -= k;
        w->raw_bytes += k;
        if (w->rlen == RAW_CHUNK && w_pump(w, false))
            return w->err;
    }
    return KURA_OK;
}

static char *dir_of(const char *path)
{
    const char *slash = strrchr(path, '/');
    if (!slash)
        return strdup(".");
    if (slash == path)
        return strdup("/");
    return strndup(path, (size_t)(slash - path));
}

static void w_free(snap_writer *w)
{
    codec_free(w->enc);
    sb_builder_free(w->blk);
    free(w->raw);
    free(w->out);
    free(w->final_path);
    free(w->tmp_path);
    free(w->dir);
    free(w);
}

int snap_writer_open(const char *final_path, const snap_info *info, int level,
                     const kura_io *io, snap_writer **out, char *err, size_t errlen)
{
    if (!codec_name(info->codec))
        return fail(err, errlen, KURA_EINVAL, "unknown codec");
    snap_writer *w = calloc(1, sizeof(*w));
    if (!w)
        return KURA_ENOMEM;
    w->fd = -1;
    w->io = kio_or_default(io);
    w->info = *info;
    w->version = info->version == 1 ? 1 : SNAP_VERSION;
    w->final_path = strdup(final_path);
    w->dir = dir_of(final_path);
    const char *base = strrchr(final_path, '/');
    base = base ? base + 1 : final_path;
    size_t tl = strlen(w->dir ? w->dir : "") + strlen(base) + 32;
    w->tmp_path = malloc(tl);
    w->raw = malloc(RAW_CHUNK);
    w->out = malloc(IO_CHUNK);
    if (!w->final_path || !w->dir || !w->tmp_path || !w->raw || !w->out) {
        w_free(w);
        return KURA_ENOMEM;
    }
    snprintf(w->tmp_path, tl, "%s/.%s.%d.tmp", w->dir, base, (int)getpid());
    int rc = KURA_OK;
    if (w->version == 1)
        rc = codec_encoder(info->codec, level, &w->enc);
    else if (!(w->blk = sb_builder_new(info->codec, level)))
        rc = KURA_ENOMEM;
    if (rc) {
        w_free(w);
        return fail(err, errlen, rc, "cannot start the %s encoder", codec_name(info->codec));
    }
    w->fd = w->io->open(w->io, AT_FDCWD, w->tmp_path, O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC,
                        0644);
    if (w->fd < 0) {
        rc = errno == ENOSPC ? KURA_ENOSPC : KURA_ESYS;
        fail(err, errlen, rc, "cannot create %s: %s", w->tmp_path, strerror(errno));
        w_free(w);
        return rc;
    }
    unsigned char h[HDR_SIZE];
    encode_header(h, info, w->version);
    if (w_write(w, h, sizeof(h))) {
        rc = w->err;
        fail(err, errlen, rc, "%s", w->errmsg);
        snap_writer_abort(w);
        return rc;
    }
    *out = w;
    return KURA_OK;
}

/* v2: compresses the block gathered and writes it. */
static int w_block(snap_writer *w)
{
    const unsigned char *b;
    size_t len;
    uint64_t raw;
    int rc = sb_seal(w->blk, &b, &len, &raw, w->errmsg, sizeof(w->errmsg));
    if (rc)
        return w->err = rc;
    w->raw_bytes += raw;
    return w_write(w, b, len);
}

int snap_writer_add(snap_writer *w, const kura_item *it)
{
    if (w->err)
        return w->err;
    if (it->klen > KURA_KEY_MAX || it->vlen > VAL_MAX)
        return KURA_EINVAL;
    if (!w->blk && (it->klen < 1 || it->klen > 255)) {    /* version 1's klen is a byte */
        snprintf(w->errmsg, sizeof(w->errmsg), "a key of %zu bytes: version 1 holds 1 to 255",
                 it->klen);
        return w->err = KURA_EINVAL;
    }
    if (w->blk) {
        if (!sb_fits(w->blk, it) && w_block(w))
            return w->err;
        if (sb_add(w->blk, it)) {
            snprintf(w->errmsg, sizeof(w->errmsg), "out of memory");
            return w->err = KURA_ENOMEM;
        }
        w->items++;
        return KURA_OK;
    }
    unsigned char h[REC_HEAD];
    h[0] = (unsigned char)it->klen;
    put32(h + 1, it->flags);
    put64(h + 5, (uint64_t)it->exptime);
    put64(h + 13, it->cas);
    put32(h + 21, (uint32_t)it->vlen);
    if (w_raw(w, h, sizeof(h)) || w_raw(w, it->key, it->klen) || w_raw(w, it->val, it->vlen))
        return w->err;
    w->items++;
    return KURA_OK;
}

uint64_t snap_writer_items(const snap_writer *w) { return w->items; }
uint64_t snap_writer_bytes(const snap_writer *w) { return w->off; }

void snap_writer_abort(snap_writer *w)
{
    if (!w)
        return;
    if (w->fd >= 0) {
        w->io->close(w->io, w->fd);
        w->io->unlinkat(w->io, AT_FDCWD, w->tmp_path, 0);
    }
    w_free(w);
}

static int fsync_dir(const kura_io *io, const char *dir)
{
    int fd = io->open(io, AT_FDCWD, dir, O_RDONLY | O_DIRECTORY | O_CLOEXEC, 0);
    if (fd < 0)
        return -1;
    int rc = io->fsync(io, fd);
    int saved = errno;
    io->close(io, fd);
    errno = saved;
    return rc;
}

int snap_writer_finish(snap_writer *w, uint64_t end_ts, snap_info *info, char *err,
                       size_t errlen)
{
    int rc = w->err;
    if (!rc)
        rc = !w->blk ? w_pump(w, true) : sb_count(w->blk) ? w_block(w) : KURA_OK;
    if (!rc) {
        unsigned char t[TRL_SIZE];
        memset(t, 0, sizeof(t));
        memcpy(t, TRL_MAGIC, 8);
        put64(t + 8, w->items);
        put64(t + 16, end_ts);
        put64(t + 24, w->raw_bytes);
        put64(t + 32, w->off - HDR_SIZE);
        put32(t + 44, crc32c_update(w->crc, t, 44));
        rc = w_write(w, t, sizeof(t));
    }
    /* fsync before the rename: otherwise a power cut could leave the new
     * name on a file whose bytes never reached the disk */
    if (!rc && w->io->fsync(w->io, w->fd) < 0) {
        snprintf(w->errmsg, sizeof(w->errmsg), "fsync %s: %s", w->tmp_path, strerror(errno));
        rc = KURA_EIO;
    }
    if (!rc && w->io->renameat(w->io, AT_FDCWD, w->tmp_path, AT_FDCWD, w->final_path) < 0) {
        snprintf(w->errmsg, sizeof(w->errmsg), "rename to %s: %s", w->final_path,
                 strerror(errno));
        rc = KURA_ESYS;
    }
    if (rc) {
        fail(err, errlen, rc, "%s", w->errmsg[0] ? w->errmsg : kura_strerror(rc));
        snap_writer_abort(w);
        return rc;
    }
    w->io->close(w->io, w->fd);
    w->fd = -1;
    if (fsync_dir(w->io, w->dir) < 0) {
        /* the file is whole under its name; only its name may not survive
         * a power cut, which is a failure to report, not to undo */
        rc = fail(err, errlen, KURA_EIO, "fsync of the directory %s: %s", w->dir,
                  strerror(errno));
    }
    if (info) {
        *info = w->info;
        info->version = w->version;
        info->end_ts = end_ts;
        info->items = w->items;
        info->raw_bytes = w->raw_bytes;
        info->file_bytes = w->off;
    }
    w_free(w);
    return rc;
}

/* ---- reading ----------------------------------------------------------- */

struct snap_reader {
    int fd;
    snap_info info;
    sb_reader *blk;             /* v2: the block being handed out */
    codec_stream *dec;          /* v1: the stream */
    uint64_t body_end;          /* file offset where the compressed stream stops */
    uint64_t in_off;            /* next file offset to read */
    unsigned char *in;          /* compressed bytes read, not yet decoded */
    size_t in_pos, in_len;
    bool dec_end;
    unsigned char *raw;         /* decoded bytes */
    size_t r_pos, r_len, r_cap;
    uint64_t consumed;          /* raw bytes handed out as records */
    uint64_t items;
};

/* Checks a snapshot's two ends (header, version, codec, trailer in place)
 * and fills *info from them: what can be known without reading the file
 * through.  0, or KURA_ECORRUPT / KURA_EINVAL / KURA_ESYS with err set. */
static int check_ends(int fd, const char *path, snap_info *info, uint32_t *crc_want, char *err,
                      size_t errlen)
{
    struct stat stb;
    unsigned char h[HDR_SIZE], t[TRL_SIZE];
    const char *why;
    if (fstat(fd, &stb) < 0)
        return fail(err, errlen, KURA_ESYS, "%s: %s", path, strerror(errno));
    uint64_t size = (uint64_t)stb.st_size;
    if (size < HDR_SIZE || pread(fd, h, HDR_SIZE, 0) != HDR_SIZE || memcmp(h, SNAP_MAGIC, 8)) {
        why = "not a snapshot (no header)";
    } else if (get32(h + 60) != crc32c_update(0, h, 60)) {
        why = "its header fails its checksum";
    } else if (get32(h + 8) < SNAP_VERSION_MIN || get32(h + 8) > SNAP_VERSION) {
        char v[16];
        snprintf(v, sizeof(v), "%u", get32(h + 8));
        return fail(err, errlen, KURA_EINVAL, "%s: written by an unknown version (%s)", path, v);
    } else if (!codec_name((kura_codec)h[12])) {
        why = "its header names an unknown codec";
    } else if (size < HDR_SIZE + TRL_SIZE ||
               pread(fd, t, TRL_SIZE, (off_t)(size - TRL_SIZE)) != TRL_SIZE ||
               memcmp(t, TRL_MAGIC, 8) || get64(t + 32) != size - HDR_SIZE - TRL_SIZE) {
        why = "it is truncated (no trailer at its end)";
    } else {
        memset(info, 0, sizeof(*info));
        info->version = get32(h + 8);
        info->codec = (kura_codec)h[12];
        memcpy(info->backend, h + 16, 15);
        info->sid = get32(h + 32);
        info->start_ts = get64(h + 40);
        info->created = (int64_t)get64(h + 48);
        info->items = get64(t + 8);
        info->end_ts = get64(t + 16);
        info->raw_bytes = get64(t + 24);
        info->file_bytes = size;
        *crc_want = get32(t + 44);
        return KURA_OK;
    }
    return fail(err, errlen, KURA_ECORRUPT, "%s: %s", path, why);
}

int snap_peek(const char *path, snap_info *info, char *err, size_t errlen)
{
    int fd = open(path, O_RDONLY | O_CLOEXEC);
    if (fd < 0)
        return fail(err, errlen, errno == ENOENT ? KURA_NOTFOUND : KURA_ESYS, "%s: %s", path,
                    strerror(errno));
    uint32_t crc;
    int rc = check_ends(fd, path, info, &crc, err, errlen);
    close(fd);
    return rc;
}

int snap_open(const char *path, snap_reader **out, snap_info *info, char *err, size_t errlen)
{
    int fd = open(path, O_RDONLY | O_CLOEXEC);
    if (fd < 0)
        return fail(err, errlen, errno == ENOENT ? KURA_NOTFOUND : KURA_ESYS, "%s: %s", path,
                    strerror(errno));
    snap_info in;
    uint32_t crc_want;
    snap_reader *r = NULL;
    unsigned char *buf = NULL;
    int rc = check_ends(fd, path, &in, &crc_want, err, errlen);
    if (rc)
        goto bad;
    /* one pass over the whole file for its checksum, before any item */
    buf = malloc(IO_CHUNK);
    if (!buf) {
        rc = KURA_ENOMEM;
        goto bad;
    }
    uint32_t crc = 0;
    uint64_t size = in.file_bytes;
    for (uint64_t off = 0; off < size - 4;) {
        size_t n = size - 4 - off < IO_CHUNK ? (size_t)(size - 4 - off) : IO_CHUNK;
        ssize_t got = pread(fd, buf, n, (off_t)off);
        if (got <= 0) {
            rc = fail(err, errlen, KURA_ESYS, "%s: read: %s", path,
                      got < 0 ? strerror(errno) : "the file shrank");
            goto bad;
        }
        crc = crc32c_update(crc, buf, (size_t)got);
        off += (uint64_t)got;
    }
    if (crc != crc_want) {
        rc = fail(err, errlen, KURA_ECORRUPT, "%s: %s", path, "it fails its checksum (damaged)");
        goto bad;
    }
    r = calloc(1, sizeof(*r));
    if (!r) {
        rc = KURA_ENOMEM;
        goto bad;
    }
    r->fd = fd;
    r->in = buf;
    r->info = in;
    r->body_end = size - TRL_SIZE;
    r->in_off = HDR_SIZE;
    if (in.version == 1)
        rc = codec_decoder(r->info.codec, &r->dec);
    else if (!(r->blk = sb_reader_new(in.codec)))
        rc = KURA_ENOMEM;
    if (rc) {
        free(r);
        goto bad;
    }
    if (info)
        *info = r->info;
    *out = r;
    return KURA_OK;
bad:
    free(buf);
    close(fd);
    return rc;
}

/* Makes room in raw for at least IO_CHUNK / 4 more decoded bytes. */
static int r_room(snap_reader *r)
{
    return kura_grow(&r->raw, &r->r_cap, r->r_len + IO_CHUNK / 4, 1, RAW_CHUNK) ? KURA_ENOMEM
                                                                                : KURA_OK;
}

/* Decodes more into raw, so that at least `want` bytes are there from
 * r_pos; 0, or KURA_ECORRUPT when the stream ends first.  raw grows with
 * what the stream holds, not with what a record says it will: a damaged
 * or forged length costs no more memory than the bytes that follow it. */
static int r_fill(snap_reader *r, size_t want, char *err, size_t errlen)
{
    if (r->r_pos) {     /* move the unread part to the front */
        memmove(r->raw, r->raw + r->r_pos, r->r_len - r->r_pos);
        r->r_len -= r->r_pos;
        r->r_pos = 0;
    }
    while (r->r_len < want) {
        if (r->dec_end)
            return fail(err, errlen, KURA_ECORRUPT, "the stream ends inside a record");
        if (r->in_pos == r->in_len && r->in_off < r->body_end) {
            size_t n = r->body_end - r->in_off < IO_CHUNK ? (size_t)(r->body_end - r->in_off)
                                                          : IO_CHUNK;
            ssize_t got = pread(r->fd, r->in, n, (off_t)r->in_off);
            if (got <= 0)
                return fail(err, errlen, KURA_ESYS, "read: %s",
                            got < 0 ? strerror(errno) : "the file shrank");
            r->in_off += (uint64_t)got;
            r->in_pos = 0;
            r->in_len = (size_t)got;
        }
        if (r_room(r) != KURA_OK)
            return KURA_ENOMEM;
        bool last = r->in_off == r->body_end;
        size_t used, made;
        int rc = codec_run(r->dec, r->in + r->in_pos, r->in_len - r->in_pos, &used,
                           r->raw + r->r_len, r->r_cap - r->r_len, &made, last);
        r->in_pos += used;
        r->r_len += made;
        if (rc < 0)
            return fail(err, errlen, rc, "decompress: %s", codec_error(r->dec));
        if (rc == CODEC_END) {
            r->dec_end = true;
            if (r->in_pos != r->in_len || r->in_off != r->body_end)
                return fail(err, errlen, KURA_ECORRUPT,
                            "bytes follow the end of the compressed stream");
        }
    }
    return KURA_OK;
}

/* v2: the block's next item, loading the next block when it has none. */
static int next_v2(snap_reader *r, kura_item *it, char *err, size_t errlen)
{
    while (sb_next(r->blk, it)) {
        if (r->in_off == r->body_end) {
            /* a clean end: the count and the length must agree */
            if (r->items != r->info.items || r->consumed != r->info.raw_bytes)
                return fail(err, errlen, KURA_ECORRUPT,
                            "the blocks end before the item count its trailer gives");
            return SNAP_DONE;
        }
        uint64_t raw;
        int rc = sb_load(r->blk, r->fd, r->in_off, r->body_end, &r->in_off, &raw, err, errlen);
        if (rc)
            return rc;
        r->consumed += raw;
        if (r->consumed > r->info.raw_bytes)
            return fail(err, errlen, KURA_ECORRUPT, "the blocks run past the stream's length");
    }
    if (++r->items > r->info.items)
        return fail(err, errlen, KURA_ECORRUPT, "more items than its trailer gives");
    return KURA_OK;
}

int snap_next(snap_reader *r, kura_item *it, char *err, size_t errlen)
{
    if (r->blk)
        return next_v2(r, it, err, errlen);
    if (r->r_len - r->r_pos < REC_HEAD) {
        int rc = r_fill(r, REC_HEAD, err, errlen);
        if (rc == KURA_ECORRUPT && r->r_len == r->r_pos && r->dec_end) {
            /* a clean end: the count and the length must agree */
            if (r->items != r->info.items || r->consumed != r->info.raw_bytes)
                return fail(err, errlen, KURA_ECORRUPT,
                            "the stream ends before the item count its trailer gives");
            return SNAP_DONE;
        }
        if (rc)
            return rc;
    }
    const unsigned char *h = r->raw + r->r_pos;
    size_t klen = h[0];
    uint32_t vlen = get32(h + 21);
    if (klen < 1 || klen > KURA_KEY_MAX || vlen > VAL_MAX)
        return fail(err, errlen, KURA_ECORRUPT, "a record has an impossible length");
    size_t need = REC_HEAD + klen + vlen;
    if (r->consumed + need > r->info.raw_bytes)
        return fail(err, errlen, KURA_ECORRUPT, "a record runs past the stream's length");
    if (r->r_len - r->r_pos < need) {
        int rc = r_fill(r, need, err, errlen);
        if (rc)
            return rc;
        h = r->raw + r->r_pos;
    }
    it->klen = klen;
    it->flags = get32(h + 1);
    it->exptime = (int64_t)get64(h + 5);
    it->cas = get64(h + 13);
    it->vlen = vlen;
    it->key = (const char *)h + REC_HEAD;
    it->val = h + REC_HEAD + klen;
    r->r_pos += need;
    r->consumed += need;
    if (++r->items > r->info.items)
        return fail(err, errlen, KURA_ECORRUPT, "more items than its trailer gives");
    return KURA_OK;
}

uint64_t snap_reader_progress(const snap_reader *r) { return r->consumed; }

size_t snap_reader_footprint(const snap_reader *r)
{
    return IO_CHUNK + r->r_cap + (r->blk ? sb_footprint(r->blk) : 0);
}

void snap_close(snap_reader *r)
{
    if (!r)
        return;
    close(r->fd);
    sb_reader_free(r->blk);
    codec_free(r->dec);
    free(r->in);
    free(r->raw);
    free(r);
}

int snap_verify(const char *path, snap_info *info, char *err, size_t errlen)
{
    snap_reader *r;
    int rc = snap_open(path, &r, info, err, errlen);
    if (rc)
        return rc;
    kura_item it;
    while ((rc = snap_next(r, &it, err, errlen)) == KURA_OK)
        ;
    snap_close(r);
    return rc == SNAP_DONE ? KURA_OK : rc;
}
