/*
 * test_snapshot.c - snapshot files (src/snap/): every codec round-trips
 * items with every field (keys of 1 and 250 bytes, empty values, values
 * larger than the writer's and reader's chunks, flags, exptime, cas); a
 * file cut at many lengths, a byte flipped anywhere, an unknown version,
 * bytes appended, a damaged header are all refused by snap_open before
 * any item is handed out; the directory helpers list newest first, keep
 * the newest N and remove what a crash left; a power loss at any step of
 * a snapshot's writing leaves only files that verify (kio_sim's images;
 * negative check with syncs that lie), and a failed fsync, rename or
 * write leaves nothing under the final name.  Version 1 files are still
 * read; in version 2, a damaged, forged or torn block under a repaired
 * whole-file CRC is refused and named by its offset, and the reader holds
 * about three blocks' worth of buffers whatever the file's size (negative
 * check: one item larger than that makes it hold more).
 */
#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "kura/bytes.h"
#include "kura/crc32c.h"
#include "kura/snapshot.h"
#include "kura/store.h"
#include "kio_sim.h"
#include "unit.h"

static char dir[256];

static const kura_codec all[] = { KURA_CODEC_NONE, KURA_CODEC_ZLIB, KURA_CODEC_BZ2,
                                  KURA_CODEC_LZO };

#define NITEMS 2000

/* item i's key (all different): its length */
static bool v1_keys;    /* item 1's key as long as version 1 holds (255), not KURA_KEY_MAX */

static size_t make_key(int i, char *key)
{
    size_t klen = i == 0 ? 1 : i == 1 ? (v1_keys ? 255 : KURA_KEY_MAX) : (size_t)(5 + i % 40);
    for (size_t j = 0; j < klen; j++)
        key[j] = (char)('a' + (i * 7 + (int)j) % 26);
    if (klen > 4)       /* i in 4 hex digits: unique */
        snprintf(key, klen, "%04x", (unsigned)i), key[4] = '_';
    return klen;
}

/* item i: deterministic key, value, fields */
static void make_item(int i, kura_item *it, char *key, unsigned char *val)
{
    size_t klen = make_key(i, key);
    size_t vlen = i == 2 ? 0 : i == 3 ? 700 * 1024 : (size_t)(i * 13 % 300);
    for (size_t j = 0; j < vlen; j++)
        val[j] = (unsigned char)(i % 3 ? 'x' + j % 3 : (j * 2654435761u) >> 13);
    it->key = key;
    it->klen = klen;
    it->val = val;
    it->vlen = vlen;
    it->flags = (uint32_t)i * 2654435761u;
    it->exptime = i % 5 ? 0 : 1900000000 + i;
    it->cas = 1000000007ull * (uint64_t)(i + 1);
}

static unsigned char *valbuf;
static uint32_t wversion;       /* the format written: 0 the current one */

static int write_file_io(const char *path, kura_codec c, int n, const kura_io *io)
{
    snap_info in = { .codec = c, .sid = 7, .start_ts = 12345, .created = 1764547200,
                     .version = wversion };
    strcpy(in.backend, "hash");
    snap_writer *w;
    char err[256];
    int rc = snap_writer_open(path, &in, 0, io, &w, err, sizeof(err));
    if (rc)
        return rc;
    for (int i = 0; i < n; i++) {
        kura_item it;
        char key[KURA_KEY_MAX];
        make_item(i, &it, key, valbuf);
        if ((rc = snap_writer_add(w, &it))) {
            snap_writer_abort(w);
            return rc;
        }
    }
    snap_info out;
    rc = snap_writer_finish(w, 67890, &out, err, sizeof(err));
    if (!rc && (out.items != (uint64_t)n || out.end_ts != 67890))
        rc = -100;
    return rc;
}

static int write_file(const char *path, kura_codec c, int n)
{
    return write_file_io(path, c, n, NULL);
}

/* The index of the item whose key this is (make_item's keys are all
 * different), or -1. */
static int item_of(const kura_item *got, int n)
{
    for (int i = 0; i < n; i++) {
        char key[KURA_KEY_MAX];
        if (make_key(i, key) == got->klen && !memcmp(got->key, key, got->klen))
            return i;
    }
    return -1;
}

/* Reads path back and compares every item (version 1 keeps the order
 * written, version 2 sorts each block by key; each item is looked up by
 * its key and must come once); 0 when all match. */
static int read_back(const char *path, int n)
{
    snap_reader *r;
    snap_info info;
    char err[256];
    int rc = snap_open(path, &r, &info, err, sizeof(err));
    if (rc)
        return rc;
    if (info.items != (uint64_t)n || info.start_ts != 12345 || info.end_ts != 67890 ||
        info.sid != 7 || strcmp(info.backend, "hash") || info.created != 1764547200) {
        snap_close(r);
        return -101;
    }
    kura_item got;
    int i = 0;
    char *seen = calloc((size_t)n + 1, 1);
    while ((rc = snap_next(r, &got, err, sizeof(err))) == KURA_OK) {
        kura_item want;
        char key[KURA_KEY_MAX];
        int at = item_of(&got, n);
        if (at < 0 || seen[at]++) {
            snap_close(r);
            free(seen);
            return -104;
        }
        i++;
        make_item(at, &want, key, valbuf);
        if (got.klen != want.klen || memcmp(got.key, want.key, want.klen) ||
            got.vlen != want.vlen || (want.vlen && memcmp(got.val, want.val, want.vlen)) ||
            got.flags != want.flags || got.exptime != want.exptime || got.cas != want.cas) {
            snap_close(r);
            free(seen);
            return -102;
        }
    }
    free(seen);
    snap_close(r);
    if (rc != SNAP_DONE)
        return rc;
    return i == n ? 0 : -103;
}

static void test_round_trip_every_codec(void)
{
    for (size_t c = 0; c < sizeof(all) / sizeof(all[0]); c++) {
        char path[300];
        snprintf(path, sizeof(path), "%s/rt-%s.ksnap", dir, codec_name(all[c]));
        CHECK_EQ_INT(write_file(path, all[c], NITEMS), 0);
        CHECK_EQ_INT(read_back(path, NITEMS), 0);
        snap_info info;
        char err[256];
        CHECK_EQ_INT(snap_verify(path, &info, err, sizeof(err)), 0);
        CHECK_EQ_INT(info.codec, all[c]);
        /* the ends alone say as much */
        snap_info peek;
        CHECK_EQ_INT(snap_peek(path, &peek, err, sizeof(err)), 0);
        CHECK(peek.items == NITEMS && peek.start_ts == 12345 && peek.end_ts == 67890 &&
              peek.codec == all[c] && peek.file_bytes == info.file_bytes);
        /* an empty snapshot is a snapshot */
        snprintf(path, sizeof(path), "%s/empty-%s.ksnap", dir, codec_name(all[c]));
        CHECK_EQ_INT(write_file(path, all[c], 0), 0);
        CHECK_EQ_INT(read_back(path, 0), 0);
    }
}

static unsigned char *slurp(const char *path, size_t *len)
{
    FILE *f = fopen(path, "rb");
    if (!f)
        return NULL;
    fseek(f, 0, SEEK_END);
    *len = (size_t)ftell(f);
    fseek(f, 0, SEEK_SET);
    unsigned char *b = malloc(*len + 1);
    if (fread(b, 1, *len, f) != *len) {
        free(b);
        b = NULL;
    }
    fclose(f);
    return b;
}

static void spit(const char *path, const unsigned char *b, size_t len)
{
    FILE *f = fopen(path, "wb");
    if (f) {
        if (len)
            fwrite(b, 1, len, f);
        fclose(f);
    }
}

static void test_damage_is_refused(void)
{
    for (size_t c = 0; c < sizeof(all) / sizeof(all[0]); c++) {
        char path[300], bad[320];
        snprintf(path, sizeof(path), "%s/dmg-%s.ksnap", dir, codec_name(all[c]));
        snprintf(bad, sizeof(bad), "%s/bad.ksnap", dir);
        REQUIRE(write_file(path, all[c], 300) == 0);
        size_t len;
        unsigned char *b = slurp(path, &len);
        REQUIRE(b);
        char err[256];
        snap_info info;
        int refused = 0, tried = 0;
        /* cut short at many lengths, the empty file included */
        for (size_t cut = 0; cut < len; cut += len / 37 + 1) {
            spit(bad, b, cut);
            tried += 2;
            refused += snap_verify(bad, &info, err, sizeof(err)) == KURA_ECORRUPT;
            refused += snap_peek(bad, &info, err, sizeof(err)) == KURA_ECORRUPT;
        }
        /* one bit flipped, across the whole file */
        for (size_t at = 0; at < len; at += len / 53 + 1) {
            b[at] ^= 0x10;
            spit(bad, b, len);
            b[at] ^= 0x10;
            tried++;
            refused += snap_verify(bad, &info, err, sizeof(err)) == KURA_ECORRUPT;
        }
        /* bytes appended */
        unsigned char *longer = malloc(len + 5);
        memcpy(longer, b, len);
        memcpy(longer + len, "xxxxx", 5);
        spit(bad, longer, len + 5);
        free(longer);
        tried++;
        refused += snap_verify(bad, &info, err, sizeof(err)) == KURA_ECORRUPT;
        CHECK_EQ_INT(refused, tried);
        /* negative check: the untouched bytes pass */
        spit(bad, b, len);
        CHECK_EQ_INT(snap_verify(bad, &info, err, sizeof(err)), 0);
        /* a version this build does not know: its own error, named */
        b[8] = 99;
        uint32_t crc = crc32c_update(0, b, 60);
        for (int i = 0; i < 4; i++)
            b[60 + i] = (unsigned char)(crc >> (8 * i));
        spit(bad, b, len);
        CHECK_EQ_INT(snap_verify(bad, &info, err, sizeof(err)), KURA_EINVAL);
        CHECK(strstr(err, "unknown version") != NULL);
        free(b);
    }
    char err[256];
    snap_info info;
    char missing[300];
    snprintf(missing, sizeof(missing), "%s/none.ksnap", dir);
    CHECK_EQ_INT(snap_verify(missing, &info, err, sizeof(err)), KURA_NOTFOUND);
}

/* A stream whose trailer and checksum are right but whose records are
 * wrong (a writer bug, or damage before the checksum was taken): found by
 * the count, never read past. */
static void test_count_mismatch(void)
{
    char path[300];
    snprintf(path, sizeof(path), "%s/count.ksnap", dir);
    REQUIRE(write_file(path, KURA_CODEC_NONE, 10) == 0);
    size_t len;
    unsigned char *b = slurp(path, &len);
    REQUIRE(b);
    /* trailer at len-48: items at +8; fix its CRC after the change */
    b[len - 48 + 8] = 11;
    uint32_t crc = crc32c_update(0, b, len - 4);
    for (int i = 0; i < 4; i++)
        b[len - 4 + i] = (unsigned char)(crc >> (8 * i));
    spit(path, b, len);
    free(b);
    char err[256];
    snap_info info;
    CHECK_EQ_INT(snap_verify(path, &info, err, sizeof(err)), KURA_ECORRUPT);
}

static void test_directory(void)
{
    char sub[300];
    snprintf(sub, sizeof(sub), "%s/dir", dir);
    mkdir(sub, 0755);
    uint64_t ts[] = { 5, 0x1234567890, 77 };
    for (int i = 0; i < 3; i++) {
        char name[64], path[400];
        snap_name(name, sizeof(name), ts[i], 1000 + (uint64_t)i);
        snprintf(path, sizeof(path), "%s/%s", sub, name);
        REQUIRE(write_file(path, KURA_CODEC_LZO, 3) == 0);
    }
    char junk[400];
    snprintf(junk, sizeof(junk), "%s/.snap-0000000000000009-0000000000000001.ksnap.1.tmp", sub);
    spit(junk, (const unsigned char *)"x", 1);
    snprintf(junk, sizeof(junk), "%s/notes.txt", sub);
    spit(junk, (const unsigned char *)"x", 1);
    snap_entry *v;
    size_t n;
    REQUIRE(snap_list(sub, &v, &n) == 0);
    CHECK_EQ_INT(n, 3);
    if (n == 3) {
        CHECK(v[0].start_ts == 0x1234567890 && v[1].start_ts == 77 && v[2].start_ts == 5);
        CHECK(strstr(v[0].path, "snap-0000001234567890-00000000000003e9.ksnap") != NULL);
    }
    free(v);
    CHECK_EQ_INT(snap_tidy(sub, NULL), 1);
    CHECK_EQ_INT(snap_prune(sub, 2, NULL), 0);
    REQUIRE(snap_list(sub, &v, &n) == 0);
    CHECK_EQ_INT(n, 2);
    free(v);
    CHECK_EQ_INT(access(junk, F_OK), 0);        /* other files are left alone */
    snprintf(junk, sizeof(junk), "%s/nothere", dir);
    REQUIRE(snap_list(junk, &v, &n) == 0);
    CHECK_EQ_INT(n, 0);
}

/* Does every file in d under a snapshot's name verify?  How many do;
 * *has_new: the one named newname is among them. */
static int verified_in(const char *d, const char *newname, bool *all_ok, bool *has_new)
{
    snap_entry *v;
    size_t n;
    *all_ok = true;
    *has_new = false;
    if (snap_list(d, &v, &n) != 0) {
        *all_ok = false;
        return 0;
    }
    int good = 0;
    for (size_t i = 0; i < n; i++) {
        snap_info info;
        char err[300];
        if (snap_verify(v[i].path, &info, err, sizeof(err)) == 0)
            good++;
        else
            *all_ok = false;
        if (strstr(v[i].path, newname))
            *has_new = true;
    }
    free(v);
    return good;
}

/* Power loss while a snapshot is written (kio_sim's recorder): at every
 * cut point, with several choices of what reached the disk, every file
 * under a snapshot's name verifies, the previous snapshot is there, and
 * once snap_writer_finish returned the new one is there too.  Negative
 * check: with syncs that make nothing durable ("fsync lies"), some image
 * shows a snapshot's name on a file that does not verify, or loses the
 * finished one: the fsync before the rename, and the directory's after
 * it, are what the first half tests. */
static int power_loss_run(bool lies, int *bad_images)
{
    char root[300], img[300], oldp[400], newp[400], newname[64], oldname[64];
    snprintf(root, sizeof(root), "%s/pl", dir);
    snprintf(img, sizeof(img), "%s/pl-image", dir);
    kio_rmrf(root);
    mkdir(root, 0755);
    snap_name(oldname, sizeof(oldname), 100, 1);
    snap_name(newname, sizeof(newname), 200, 2);
    snprintf(oldp, sizeof(oldp), "%s/%s", root, oldname);
    snprintf(newp, sizeof(newp), "%s/%s", root, newname);
    if (write_file(oldp, KURA_CODEC_LZO, 50) != 0)
        return -1;
    kio_rec *r = kio_rec_new(root, NULL);
    kio_rec_set_lies(r, lies);
    /* 400 items: a few hundred KB in several writes */
    int rc = write_file_io(newp, KURA_CODEC_NONE, 400, kio_rec_io(r));
    uint64_t done = kio_rec_ops(r);
    int images = 0;
    *bad_images = 0;
    for (uint64_t k = 0; !rc && k <= done; k++) {
        for (uint64_t seed = 1; seed <= 4; seed++) {
            char err[300];
            if (kio_rec_image(r, k, seed * 7919 + k, img, err, sizeof(err)) != 0) {
                printf("# image at %llu: %s\n", (unsigned long long)k, err);
                rc = -1;
                break;
            }
            char ip[600];
            snprintf(ip, sizeof(ip), "%s/%s", img, oldname);
            bool all_ok, has_new;
            verified_in(img, newname, &all_ok, &has_new);
            bool ok = all_ok && access(ip, F_OK) == 0 && (k < done || has_new);
            if (!ok && !lies && *bad_images == 0) {
                char what[300];
                kio_rec_describe(r, k ? k - 1 : 0, what, sizeof(what));
                printf("# cut %llu/%llu seed %llu (after: %s): every name verifies %d, the new "
                       "one there %d\n", (unsigned long long)k, (unsigned long long)done,
                       (unsigned long long)seed, what, all_ok, has_new);
            }
            *bad_images += !ok;
            images++;
        }
    }
    kio_rec_free(r);
    kio_rmrf(img);
    kio_rmrf(root);
    return rc ? rc : images;
}

static void test_power_loss(void)
{
    int bad;
    int images = power_loss_run(false, &bad);
    CHECK(images > 20);
    CHECK_EQ_INT(bad, 0);
    printf("# %d power-loss images, %d bad\n", images, bad);
    images = power_loss_run(true, &bad);
    CHECK(images > 20);
    CHECK(bad > 0);             /* negative check: without durable syncs it fails */
    printf("# with syncs that lie: %d images, %d bad\n", images, bad);
}

/* A failed fsync or rename: the finish reports it, the temporary file is
 * gone and the final name was never used; the failed sync is not retried. */
static void test_sync_failure(void)
{
    char sub[300], p[400];
    snprintf(sub, sizeof(sub), "%s/fail", dir);
    mkdir(sub, 0755);
    snprintf(p, sizeof(p), "%s/snap-0000000000000001-0000000000000001.ksnap", sub);
    static const int kinds[] = { KIO_FSYNC, KIO_RENAMEAT, KIO_PWRITEV };
    for (int i = 0; i < 3; i++) {
        kio_inject *in = kio_inject_new(NULL);
        kio_inject_fail(in, kinds[i], 1, 1, kinds[i] == KIO_PWRITEV ? ENOSPC : EIO);
        int rc = write_file_io(p, KURA_CODEC_LZO, 50, kio_inject_io(in));
        CHECK(rc != 0);
        CHECK_EQ_INT(kio_inject_fired(in), 1);
        CHECK_EQ_INT(kio_inject_calls(in, KIO_FSYNC), kinds[i] == KIO_FSYNC ? 1 : kinds[i] == KIO_RENAMEAT);
        kio_inject_free(in);
        CHECK(access(p, F_OK) != 0);
        DIR *d = opendir(sub);
        int files = 0;
        struct dirent *de;
        while (d && (de = readdir(d)))
            files += de->d_name[0] != '.' || strstr(de->d_name, ".tmp") != NULL;
        if (d)
            closedir(d);
        CHECK_EQ_INT(files, 0);
    }
}

static void rm_rf(const char *path)
{
    DIR *d = opendir(path);
    if (d) {
        struct dirent *de;
        while ((de = readdir(d)))
            if (strcmp(de->d_name, ".") && strcmp(de->d_name, "..")) {
                char p[600];
                snprintf(p, sizeof(p), "%s/%s", path, de->d_name);
                rm_rf(p);
            }
        closedir(d);
        rmdir(path);
    } else {
        unlink(path);
    }
}

static void test_version_1_still_read(void)
{
    for (size_t c = 0; c < sizeof(all) / sizeof(all[0]); c++) {
        char path[300];
        snprintf(path, sizeof(path), "%s/v1-%s.ksnap", dir, codec_name(all[c]));
        wversion = 1;
        v1_keys = true;
        CHECK_EQ_INT(write_file(path, all[c], NITEMS), 0);
        wversion = 0;
        CHECK_EQ_INT(read_back(path, NITEMS), 0);
        v1_keys = false;
        snap_info info;
        char err[256];
        CHECK_EQ_INT(snap_verify(path, &info, err, sizeof(err)), 0);
        CHECK_EQ_INT((int)info.version, 1);
        snprintf(path, sizeof(path), "%s/v2-%s.ksnap", dir, codec_name(all[c]));
        CHECK_EQ_INT(write_file(path, all[c], NITEMS), 0);
        CHECK_EQ_INT(snap_verify(path, &info, err, sizeof(err)), 0);
        CHECK_EQ_INT((int)info.version, SNAP_VERSION);
    }
}

/* ---- version 2's blocks --------------------------------------------- */

#define BIG_ITEMS 60000         /* of 1,000-byte values: about four blocks */

/* A file of several blocks (lzo): item i has key "big:<i>" and a value
 * of vlen bytes, half of them pattern, half a counter. */
static int write_big(const char *path, int n, size_t vlen)
{
    snap_info in = { .codec = KURA_CODEC_LZO, .created = 1764547200 };
    strcpy(in.backend, "hash");
    snap_writer *w;
    char err[256];
    int rc = snap_writer_open(path, &in, 0, NULL, &w, err, sizeof(err));
    if (rc)
        return rc;
    unsigned char *v = malloc(vlen + 1);
    for (int i = 0; i < n && !rc; i++) {
        char key[32];
        for (size_t j = 0; j < vlen; j++)
            v[j] = (unsigned char)(j < vlen / 2 ? (size_t)('a' + (i + (int)j) % 26)
                                                : ((size_t)i * 31 + j) >> 3);
        kura_item it = { .key = key, .klen = (size_t)snprintf(key, sizeof(key), "big:%d", i),
                         .val = v, .vlen = vlen, .flags = (uint32_t)i, .cas = (uint64_t)i + 1 };
        rc = snap_writer_add(w, &it);
    }
    free(v);
    if (rc) {
        snap_writer_abort(w);
        return rc;
    }
    return snap_writer_finish(w, 1, NULL, err, sizeof(err));
}

/* The file offsets of its blocks (at most max); how many. */
static int block_offsets(const unsigned char *b, size_t len, size_t *off, int max)
{
    int n = 0;
    for (size_t at = 64; at + 48 < len && n < max;) {
        if (memcmp(b + at, "KSBK", 4))
            return -1;
        off[n++] = at;
        at += 32 + get32(b + at + 12) + get32(b + at + 20);
    }
    return n;
}

static void fix_block_head(unsigned char *h, const unsigned char *comp)
{
    put32(h + 28, crc32c_update(crc32c_update(0, h, 28), comp,
                                (size_t)get32(h + 12) + get32(h + 20)));
}

static void fix_file_crc(unsigned char *b, size_t len)
{
    put32(b + len - 4, crc32c_update(0, b, len - 4));
}

/* Verifies b as a file: the result, err filled. */
static int verify_bytes(const unsigned char *b, size_t len, char *err, size_t errlen)
{
    char bad[320];
    snap_info info;
    snprintf(bad, sizeof(bad), "%s/blk.ksnap", dir);
    spit(bad, b, len);
    return snap_verify(bad, &info, err, errlen);
}

static void test_damaged_block_named(void)
{
    char path[300], err[512], want[128];
    snprintf(path, sizeof(path), "%s/big.ksnap", dir);
    REQUIRE(write_big(path, BIG_ITEMS, 1000) == 0);
    size_t len, off[16];
    unsigned char *b = slurp(path, &len);
    REQUIRE(b);
    int nb = block_offsets(b, len, off, 16);
    CHECK(nb >= 3);
    REQUIRE(nb >= 2);
    /* negative check: as written, it verifies */
    CHECK_EQ_INT(verify_bytes(b, len, err, sizeof(err)), 0);
    /* a byte of the second block's compressed bytes: its CRC */
    size_t at = off[1] + 32 + 100;
    b[at] ^= 0x01;
    fix_file_crc(b, len);
    CHECK_EQ_INT(verify_bytes(b, len, err, sizeof(err)), KURA_ECORRUPT);
    snprintf(want, sizeof(want), "block at offset %zu fails its checksum", off[1]);
    CHECK(strstr(err, want) != NULL);
    b[at] ^= 0x01;
    /* a head that claims more raw bytes than a block of several items
     * holds, its CRCs right: refused before anything is allocated */
    unsigned char *h = b + off[1];
    uint32_t saved = get32(h + 16);
    put32(h + 16, 1u << 30);
    fix_block_head(h, h + 32);
    fix_file_crc(b, len);
    CHECK_EQ_INT(verify_bytes(b, len, err, sizeof(err)), KURA_ECORRUPT);
    CHECK(strstr(err, "impossible lengths") != NULL);
    put32(h + 16, saved);
    /* torn: its compressed length runs past the file's end (found before
     * its CRC, which would need the bytes that are not there) */
    saved = get32(h + 20);
    put32(h + 20, saved + (uint32_t)len);
    fix_file_crc(b, len);
    CHECK_EQ_INT(verify_bytes(b, len, err, sizeof(err)), KURA_ECORRUPT);
    CHECK(strstr(err, "runs past the end") != NULL);
    put32(h + 20, saved);
    /* a block whose raw bytes do not fit its columns: one item more said */
    put32(h + 4, get32(h + 4) + 1);
    fix_block_head(h, h + 32);
    fix_file_crc(b, len);
    CHECK_EQ_INT(verify_bytes(b, len, err, sizeof(err)), KURA_ECORRUPT);
    put32(h + 4, get32(h + 4) - 1);
    /* and put back, all is well again */
    fix_block_head(h, h + 32);
    fix_file_crc(b, len);
    CHECK_EQ_INT(verify_bytes(b, len, err, sizeof(err)), 0);
    free(b);
}

/* The most the reader held while it read path through; its item count. */
static size_t read_footprint(const char *path, uint64_t *items)
{
    snap_reader *r;
    snap_info info;
    char err[256];
    if (snap_open(path, &r, &info, err, sizeof(err)))
        return 0;
    size_t most = 0;
    kura_item it;
    *items = 0;
    while (snap_next(r, &it, err, sizeof(err)) == KURA_OK) {
        size_t f = snap_reader_footprint(r);
        most = f > most ? f : most;
        ++*items;
    }
    snap_close(r);
    return most;
}

static void test_reader_memory_bounded(void)
{
    char path[300];
    snprintf(path, sizeof(path), "%s/big.ksnap", dir);
    REQUIRE(write_big(path, BIG_ITEMS, 1000) == 0);
    snap_info info;
    char err[256];
    REQUIRE(snap_peek(path, &info, err, sizeof(err)) == 0);
    size_t bound = 3 * (size_t)SNAP_BLOCK_MAX + (1u << 20);
    CHECK(info.raw_bytes > bound);     /* a whole-file buffer would not fit */
    uint64_t items;
    size_t most = read_footprint(path, &items);
    printf("# %llu raw bytes read holding at most %zu\n", (unsigned long long)info.raw_bytes,
           most);
    CHECK_EQ_INT((int)items, BIG_ITEMS);
    CHECK(most > 0 && most <= bound);
    /* negative check: one item larger than the bound is a block of its
     * own, and the reader holds it (the bound is per block, not per file) */
    snprintf(path, sizeof(path), "%s/huge.ksnap", dir);
    REQUIRE(write_big(path, 2, bound) == 0);
    most = read_footprint(path, &items);
    CHECK_EQ_INT((int)items, 2);
    CHECK(most > bound);
}

int main(void)
{
    snprintf(dir, sizeof(dir), "/tmp/kura-test-snapshot-XXXXXX");
    if (!mkdtemp(dir))
        return 1;
    valbuf = malloc(1024 * 1024);
    RUN(test_round_trip_every_codec);
    RUN(test_damage_is_refused);
    RUN(test_count_mismatch);
    RUN(test_directory);
    RUN(test_power_loss);
    RUN(test_sync_failure);
    RUN(test_version_1_still_read);
    RUN(test_damaged_block_named);
    RUN(test_reader_memory_bounded);
    free(valbuf);
    rm_rf(dir);
    UNIT_DONE();
}
