/*
 * cabinet.c - which Cabinet a file is, and which library reads it
 * (cabinet.h).  The headers are read here, not by the libraries, so that a
 * file is named correctly even where its library is not built in.
 *
 * Tokyo Cabinet's files begin "ToKyO CaBiNeT\n", the database type at
 * byte 32 (0 hash, 1 B+ tree; tchdb.c).  Kyoto Cabinet's begin "KC\n", the
 * type at byte 8 (0x30 hash, 0x31 tree) and a 16-byte opaque area at byte
 * 48 (kchashdb.h: MOFFTYPE, MOFFOPAQUE); a tree is kept in a hash file, so
 * both kinds have it there.  Kyoto Tycoon's TimedDB marks that area with
 * 0xbb and its options byte after it (kttimeddb.h: MAGICDATA; TPERSIST,
 * 1 << 1, says its values carry no expiry header).
 */
#include <fcntl.h>
#include <stdio.h>
#include <string.h>
#include <unistd.h>

#include "cabinet.h"

#define TC_MAGIC "ToKyO CaBiNeT\n"
#define KC_MAGIC "KC\n"
#define KT_MAGICDATA 0xbb
#define KT_TPERSIST (1 << 1)

static int read_head(const char *path, unsigned char *buf, size_t n)
{
    int fd = open(path, O_RDONLY | O_CLOEXEC);
    if (fd < 0)
        return -1;
    ssize_t got = pread(fd, buf, n, 0);
    close(fd);
    return got == (ssize_t)n ? 0 : -1;
}

int cab_kind_of_file(const char *path)
{
    unsigned char h[64];
    if (read_head(path, h, sizeof(h)) < 0)
        return -1;
    if (memcmp(h, TC_MAGIC, strlen(TC_MAGIC)) == 0)
        return h[32] == 0 ? CAB_TCH : h[32] == 1 ? CAB_TCB : -1;
    if (memcmp(h, KC_MAGIC, strlen(KC_MAGIC)) == 0)
        return h[8] == 0x30 ? CAB_KCH : h[8] == 0x31 ? CAB_KCT : -1;
    return -1;
}

int cab_kt_mark(const char *path, bool *persist)
{
    unsigned char h[64];
    if (read_head(path, h, sizeof(h)) < 0)
        return -1;
    if (memcmp(h, KC_MAGIC, strlen(KC_MAGIC)) != 0 || h[48] != KT_MAGICDATA)
        return 0;
    *persist = (h[49] & KT_TPERSIST) != 0;
    return 1;
}

int cab_kt_set_mark(const char *path)
{
    static const unsigned char mark[2] = { KT_MAGICDATA, 0 };   /* no TPERSIST */
    int fd = open(path, O_WRONLY | O_CLOEXEC);
    if (fd < 0)
        return -1;
    int rc = pwrite(fd, mark, sizeof(mark), 48) == (ssize_t)sizeof(mark) && fsync(fd) == 0
             ? 0 : -1;
    close(fd);
    return rc;
}

int cab_kind_of_name(const char *path)
{
    static const char *const sfx[] = { ".tch", ".tcb", ".kch", ".kct" };
    size_t len = strlen(path);
    for (int i = 0; i < 4; i++)
        if (len > 4 && strcmp(path + len - 4, sfx[i]) == 0)
            return i;
    return -1;
}

const char *cab_kind_name(cab_kind k)
{
    static const char *const names[] = {
        "Tokyo Cabinet hash (.tch)", "Tokyo Cabinet B+ tree (.tcb)",
        "Kyoto Cabinet hash (.kch)", "Kyoto Cabinet B+ tree (.kct)",
    };
    return names[k];
}

const cab_ops *cab_ops_of(cab_kind k, char *err, size_t errlen)
{
    bool tokyo = k == CAB_TCH || k == CAB_TCB;
    const cab_ops *ops = tokyo ? cab_tc_ops : cab_kc_ops;
    if (!ops)
        snprintf(err, errlen, "this kuractl is built without %s (rebuild with Debian's %s "
                 "installed)", tokyo ? "Tokyo Cabinet" : "Kyoto Cabinet",
                 tokyo ? "libtokyocabinet-dev" : "libkyotocabinet-dev");
    return ops;
}
