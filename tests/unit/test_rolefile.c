/*
 * test_rolefile.c - the replication role file (src/repl/rolefile.c): a
 * state saved is loaded back field for field; no file is KURA_NOTFOUND;
 * every torn length, every flipped byte, another version and a bad magic
 * are KURA_ECORRUPT with a reason, never a state; a save over an old
 * file replaces it whole and leaves no temporary file behind.
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "kura/fsutil.h"
#include "kura/rolefile.h"
#include "kura/status.h"
#include "unit.h"

static role_state sample(void)
{
    role_state st = { .term = 7, .role = ROLE_REPLICA, .source = ROLE_SRC_FOLLOW, .port = 11311,
                      .former_port = 11211, .changed = 1700000000 };
    snprintf(st.host, sizeof(st.host), "db2.example");
    snprintf(st.former, sizeof(st.former), "::1");
    return st;
}

static void test_round_trip(void)
{
    char dir[] = "/tmp/kura-rolefile-XXXXXX", err[200] = "", path[300];
    REQUIRE(mkdtemp(dir) != NULL);
    role_state st = sample(), back;
    CHECK_EQ_INT(rolefile_load(dir, &back, err, sizeof(err)), KURA_NOTFOUND);
    CHECK(back.term == 0 && back.role == ROLE_NONE);
    CHECK_EQ_INT(rolefile_save(dir, &st, err, sizeof(err)), KURA_OK);
    CHECK_EQ_INT(rolefile_load(dir, &back, err, sizeof(err)), KURA_OK);
    CHECK(back.term == 7 && back.role == ROLE_REPLICA && back.source == ROLE_SRC_FOLLOW);
    CHECK_EQ_STR(back.host, "db2.example");
    CHECK_EQ_STR(back.former, "::1");
    CHECK(back.port == 11311 && back.former_port == 11211 && back.changed == 1700000000);
    /* replaced whole: a master now, with no host */
    role_state m = { .term = 8, .role = ROLE_MASTER, .source = ROLE_SRC_PROMOTE };
    CHECK_EQ_INT(rolefile_save(dir, &m, err, sizeof(err)), KURA_OK);
    CHECK_EQ_INT(rolefile_load(dir, &back, err, sizeof(err)), KURA_OK);
    CHECK(back.term == 8 && back.role == ROLE_MASTER && back.host[0] == '\0');
    snprintf(path, sizeof(path), "%s/role.tmp", dir);
    CHECK(access(path, F_OK) != 0);
    /* a file cut short on the disk is reported */
    snprintf(path, sizeof(path), "%s/role", dir);
    CHECK(truncate(path, 20) == 0);
    err[0] = '\0';
    CHECK_EQ_INT(rolefile_load(dir, &back, err, sizeof(err)), KURA_ECORRUPT);
    CHECK(err[0] != '\0');
    CHECK(back.term == 0 && back.role == ROLE_NONE);
    kura_remove_tree(dir);
}

static void test_every_corruption(void)
{
    unsigned char buf[ROLEFILE_MAX], bad[ROLEFILE_MAX];
    role_state st = sample(), back;
    char err[200];
    size_t len = rolefile_encode(&st, buf);
    CHECK_EQ_INT(rolefile_decode(buf, len, &back, err, sizeof(err)), KURA_OK);
    int missed = 0;
    for (size_t cut = 0; cut < len; cut++)      /* torn at every length */
        missed += rolefile_decode(buf, cut, &back, err, sizeof(err)) != KURA_ECORRUPT;
    for (size_t i = 0; i < len; i++)            /* each byte flipped */
        for (int bit = 0; bit < 8; bit++) {
            memcpy(bad, buf, len);
            bad[i] ^= (unsigned char)(1u << bit);
            missed += rolefile_decode(bad, len, &back, err, sizeof(err)) != KURA_ECORRUPT;
        }
    CHECK_EQ_INT(missed, 0);
    memcpy(bad, buf, len);                      /* trailing bytes: not the file written */
    bad[len] = 0;
    CHECK_EQ_INT(rolefile_decode(bad, len + 1, &back, err, sizeof(err)), KURA_ECORRUPT);
    CHECK(strstr(err, "torn") != NULL);
    memcpy(bad, buf, len);
    bad[8] = ROLEFILE_VERSION + 1;
    CHECK_EQ_INT(rolefile_decode(bad, len, &back, err, sizeof(err)), KURA_ECORRUPT);
    CHECK(strstr(err, "version") != NULL);
}

static void test_names(void)
{
    CHECK_EQ_STR(role_source_name(ROLE_SRC_CMDLINE), "command line");
    CHECK_EQ_STR(role_source_name(ROLE_SRC_HA), "ha");
    CHECK_EQ_STR(role_kind_name(ROLE_FENCED), "fenced");
    role_state st = sample();
    memset(st.host, 'h', sizeof(st.host) - 1);
    st.host[sizeof(st.host) - 1] = '\0';        /* 255 bytes: the longest kept */
    unsigned char buf[ROLEFILE_MAX];
    role_state back;
    char err[100];
    size_t len = rolefile_encode(&st, buf);
    CHECK(len <= ROLEFILE_MAX);
    CHECK_EQ_INT(rolefile_decode(buf, len, &back, err, sizeof(err)), KURA_OK);
    CHECK(strlen(back.host) == 255);
}

int main(void)
{
    RUN(test_round_trip);
    RUN(test_every_corruption);
    RUN(test_names);
    UNIT_DONE();
}
