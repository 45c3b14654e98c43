/*
 * rolefile.h - a server's replication role and term, kept durably beside
 * its data (src/repl/rolefile.c; docs/replication.md, "Roles and terms").
 *
 * The file is DIR/role in the update log's directory (-ulog DIR): a
 * fixed header (magic "KURAROLE", format version, body length), the body,
 * and a CRC-32C of both.  It is replaced whole (written beside, synced,
 * renamed, the directory synced), so a crash leaves the old state or the
 * new one; a file that is short, of another version or fails its checksum
 * is reported (KURA_ECORRUPT with the reason), never used.
 */
#ifndef KURA_ROLEFILE_H
#define KURA_ROLEFILE_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#define ROLEFILE_NAME "role"
#define ROLEFILE_VERSION 1
#define ROLEFILE_HOST_MAX 255

/* What a server is, as persisted.  ROLE_NONE: no role kept (never set, or
 * cleared by "repl reset"): the command line decides; the term is kept. */
typedef enum { ROLE_NONE = 0, ROLE_MASTER = 1, ROLE_REPLICA = 2, ROLE_FENCED = 3 } role_kind;

/* Where the role came from (kuractl repl status shows it). */
typedef enum {
    ROLE_SRC_CMDLINE = 0,               /* the command line (-mhost, or none) */
    ROLE_SRC_PROMOTE,                   /* repl promote */
    ROLE_SRC_FOLLOW,                    /* repl follow */
    ROLE_SRC_SETMST,                    /* Tokyo Tyrant's setmst */
    ROLE_SRC_HA,                        /* automatic failover (etcd) */
    ROLE_SRC_FENCE,                     /* a higher term was heard: fenced, following */
    ROLE_SRC_COUNT
} role_source;

typedef struct role_state {
    uint64_t term;                      /* the replication term: rises with each promote */
    role_kind role;
    role_source source;
    char host[ROLEFILE_HOST_MAX + 1];   /* ROLE_REPLICA: its master; "" otherwise */
    int port;
    /* ROLE_MASTER by promote: the master it replaced, probed so that it
     * learns of the higher term when it comes back ("" when none) */
    char former[ROLEFILE_HOST_MAX + 1];
    int former_port;
    uint64_t changed;                   /* Unix seconds of the last change */
} role_state;

/* "command line", "promote", "follow", "setmst", "ha", "fence". */
const char *role_source_name(role_source s);
/* "none", "master", "replica", "fenced". */
const char *role_kind_name(role_kind k);

/* Reads DIR/role: KURA_OK, KURA_NOTFOUND (no file: *st zeroed, term 0),
 * KURA_ECORRUPT (why in err: torn, another version, bad checksum, bad
 * field) or KURA_EIO (cannot read it; errno's text in err). */
int rolefile_load(const char *dir, role_state *st, char *err, size_t errlen);
/* Replaces DIR/role with st, durably (write beside, fsync, rename, fsync
 * the directory): KURA_OK, KURA_EINVAL (a host too long), or KURA_EIO
 * (errno's text in err). */
int rolefile_save(const char *dir, const role_state *st, char *err, size_t errlen);
/* The encoding (for tests): its length, at most ROLEFILE_MAX bytes. */
#define ROLEFILE_MAX 1024
size_t rolefile_encode(const role_state *st, unsigned char *buf);
int rolefile_decode(const unsigned char *buf, size_t len, role_state *st, char *err,
                    size_t errlen);

#endif
