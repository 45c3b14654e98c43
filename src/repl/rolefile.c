/*
 * rolefile.c - the replication role and term kept beside a server's data
 * (include/kura/rolefile.h has the contract; docs/replication.md, "Roles
 * and terms", the operator's view).
 *
 * Layout, little-endian:
 *
 *     0  "KURAROLE"        magic
 *     8  u32 version       ROLEFILE_VERSION
 *    12  u32 body length   the bytes from 16 to the checksum
 *    16  u64 term
 *    24  u8 role, u8 source, u16 port, u16 former port,
 *        u16 host length, u16 former length, u16 0
 *    36  u64 changed       Unix seconds
 *    44  host, former      the two names, not NUL-terminated
 *     .  u32 CRC-32C       of every byte before it
 *
 * The file is small and rewritten whole with kura_write_file_atomic, so
 * it is either the old state or the new one after a crash; anything else
 * (a torn copy, a bit flipped, another version) fails decoding with the
 * reason, and the caller reports it rather than guess a role.
 */
#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <string.h>
#include <unistd.h>

#include "kura/bytes.h"
#include "kura/crc32c.h"
#include "kura/fsutil.h"
#include "kura/rolefile.h"
#include "kura/status.h"

#define MAGIC "KURAROLE"
#define HEAD 16
#define FIXED 28                        /* body bytes before the names */

static const char *const source_names[ROLE_SRC_COUNT] = {
    [ROLE_SRC_CMDLINE] = "command line", [ROLE_SRC_PROMOTE] = "promote",
    [ROLE_SRC_FOLLOW] = "follow", [ROLE_SRC_SETMST] = "setmst", [ROLE_SRC_HA] = "ha",
    [ROLE_SRC_FENCE] = "fence",
};

const char *role_source_name(role_source s)
{
    return (unsigned)s < ROLE_SRC_COUNT ? source_names[s] : "?";
}

const char *role_kind_name(role_kind k)
{
    switch (k) {
    case ROLE_NONE: return "none";
    case ROLE_MASTER: return "master";
    case ROLE_REPLICA: return "replica";
    case ROLE_FENCED: return "fenced";
    }
    return "?";
}

static void put16(unsigned char *p, uint16_t v)
{
    p[0] = (unsigned char)v;
    p[1] = (unsigned char)(v >> 8);
}

static uint16_t get16(const unsigned char *p)
{
    return (uint16_t)(p[0] | p[1] << 8);
}

size_t rolefile_encode(const role_state *st, unsigned char *buf)
{
    size_t hl = strnlen(st->host, ROLEFILE_HOST_MAX), fl = strnlen(st->former, ROLEFILE_HOST_MAX);
    size_t body = FIXED + hl + fl;
    memcpy(buf, MAGIC, 8);
    put32(buf + 8, ROLEFILE_VERSION);
    put32(buf + 12, (uint32_t)body);
    unsigned char *b = buf + HEAD;
    put64(b, st->term);
    b[8] = (unsigned char)st->role;
    b[9] = (unsigned char)st->source;
    put16(b + 10, (uint16_t)st->port);
    put16(b + 12, (uint16_t)st->former_port);
    put16(b + 14, (uint16_t)hl);
    put16(b + 16, (uint16_t)fl);
    put16(b + 18, 0);
    put64(b + 20, st->changed);
    memcpy(b + FIXED, st->host, hl);
    memcpy(b + FIXED + hl, st->former, fl);
    put32(buf + HEAD + body, crc32c_update(0, buf, HEAD + body));
    return HEAD + body + 4;
}

/* A name as stored: printable ASCII but the space, or empty. */
static bool name_ok(const unsigned char *p, size_t n)
{
    for (size_t i = 0; i < n; i++)
        if (p[i] <= 0x20 || p[i] >= 0x7f)
            return false;
    return true;
}

int rolefile_decode(const unsigned char *buf, size_t len, role_state *st, char *err,
                    size_t errlen)
{
    memset(st, 0, sizeof(*st));
    if (len < HEAD + FIXED + 4 || memcmp(buf, MAGIC, 8) != 0) {
        snprintf(err, errlen, len < 8 || memcmp(buf, MAGIC, 8) != 0 ? "not a role file (bad "
                 "magic)" : "torn: %zu bytes, shorter than any role file", len);
        return KURA_ECORRUPT;
    }
    uint32_t version = get32(buf + 8), body = get32(buf + 12);
    if (version != ROLEFILE_VERSION) {
        snprintf(err, errlen, "format version %u, this kurad reads %u", version,
                 ROLEFILE_VERSION);
        return KURA_ECORRUPT;
    }
    if (body < FIXED || body > ROLEFILE_MAX || (size_t)HEAD + body + 4 != len) {
        snprintf(err, errlen, "torn: %zu bytes where the header says %u", len,
                 HEAD + body + 4);
        return KURA_ECORRUPT;
    }
    if (crc32c_update(0, buf, HEAD + body) != get32(buf + HEAD + body)) {
        snprintf(err, errlen, "checksum mismatch");
        return KURA_ECORRUPT;
    }
    const unsigned char *b = buf + HEAD;
    size_t hl = get16(b + 14), fl = get16(b + 16);
    if (b[8] > ROLE_FENCED || b[9] >= ROLE_SRC_COUNT || hl > ROLEFILE_HOST_MAX ||
        fl > ROLEFILE_HOST_MAX || FIXED + hl + fl != body || !name_ok(b + FIXED, hl) ||
        !name_ok(b + FIXED + hl, fl) || (b[8] == ROLE_REPLICA && (hl == 0 || !get16(b + 10)))) {
        snprintf(err, errlen, "a field out of range");
        return KURA_ECORRUPT;
    }
    st->term = get64(b);
    st->role = (role_kind)b[8];
    st->source = (role_source)b[9];
    st->port = get16(b + 10);
    st->former_port = get16(b + 12);
    st->changed = get64(b + 20);
    memcpy(st->host, b + FIXED, hl);
    memcpy(st->former, b + FIXED + hl, fl);
    return KURA_OK;
}

int rolefile_load(const char *dir, role_state *st, char *err, size_t errlen)
{
    char path[4200];
    unsigned char buf[ROLEFILE_MAX + 64];
    memset(st, 0, sizeof(*st));
    snprintf(path, sizeof(path), "%s/%s", dir, ROLEFILE_NAME);
    int fd = open(path, O_RDONLY | O_CLOEXEC);
    if (fd < 0) {
        if (errno == ENOENT)
            return KURA_NOTFOUND;
        snprintf(err, errlen, "%s", strerror(errno));
        return KURA_EIO;
    }
    size_t len = 0;
    ssize_t n;
    while (len < sizeof(buf) && (n = read(fd, buf + len, sizeof(buf) - len)) != 0) {
        if (n < 0) {
            if (errno == EINTR)
                continue;
            snprintf(err, errlen, "%s", strerror(errno));
            close(fd);
            return KURA_EIO;
        }
        len += (size_t)n;
    }
    close(fd);
    return rolefile_decode(buf, len, st, err, errlen);
}

int rolefile_save(const char *dir, const role_state *st, char *err, size_t errlen)
{
    unsigned char buf[ROLEFILE_MAX];
    if (strlen(st->host) > ROLEFILE_HOST_MAX || strlen(st->former) > ROLEFILE_HOST_MAX) {
        snprintf(err, errlen, "a host name longer than %d bytes", ROLEFILE_HOST_MAX);
        return KURA_EINVAL;
    }
    size_t len = rolefile_encode(st, buf);
    int dfd = open(dir, O_RDONLY | O_DIRECTORY | O_CLOEXEC);
    int rc = dfd >= 0 ? kura_write_file_atomic(dfd, ROLEFILE_NAME, buf, len) : -1;
    int e = errno;
    if (dfd >= 0)
        close(dfd);
    if (rc < 0) {
        snprintf(err, errlen, "%s", strerror(e));
        return KURA_EIO;
    }
    return KURA_OK;
}
