/*
 * test_hello.c - the first lines of a replication stream (src/repl/hello.c):
 * a replica's request and a master's welcome carry the replication term
 * (term=, docs/replication.md "Roles and terms") through format, parse and
 * the connection hand-off's five numbers; a request or welcome without it
 * (an older kurad) has no term, not term 0 taken as known; a bad value is
 * refused; unknown keys are ignored.
 */
#include <string.h>

#include "kura/repl.h"
#include "unit.h"

/* The words after "repl" of a request line, as the text parser splits it. */
static int parse_line(const char *line, repl_hello *h)
{
    char buf[400], err[200];
    const char *words[REPL_HELLO_WORDS];
    size_t lens[REPL_HELLO_WORDS];
    int n = 0;
    snprintf(buf, sizeof(buf), "%s", line);
    buf[strcspn(buf, "\r\n")] = '\0';
    char *save, *w = strtok_r(buf, " ", &save);         /* "repl" */
    while ((w = strtok_r(NULL, " ", &save)) != NULL && n < REPL_HELLO_WORDS) {
        words[n] = w;
        lens[n++] = strlen(w);
    }
    return repl_hello_parse(words, lens, n, h, err, sizeof(err));
}

static void test_request_term(void)
{
    repl_hello h = { .after = 42, .sid = 7, .hid = 0xabc, .imax = 1 << 20, .port = 11311,
                     .has_term = true, .term = 18446744073709551615ULL }, back;
    char line[300];
    REQUIRE(repl_hello_format(line, sizeof(line), &h) > 0);
    CHECK(strstr(line, " term=18446744073709551615\r\n") != NULL);
    CHECK_EQ_INT(parse_line(line, &back), KURA_OK);
    CHECK(back.has_term && back.term == h.term && back.after == 42 && back.sid == 7);
    uint64_t arg[5];
    repl_hello packed = back, un;
    repl_hello_pack(&packed, arg);
    repl_hello_unpack(arg, &un);
    CHECK(un.has_term && un.term == h.term && un.port == 11311 && un.hid == 0xabc);
    /* without term=: an older replica, no term known */
    CHECK_EQ_INT(parse_line("repl 5 3 hid=0000000000000001", &back), KURA_OK);
    CHECK(!back.has_term);
    repl_hello_pack(&back, arg);
    repl_hello_unpack(arg, &un);
    CHECK(!un.has_term);
    CHECK_EQ_INT(parse_line("repl 5 3 term=x", &back), KURA_EINVAL);
    CHECK_EQ_INT(parse_line("repl 5 3 term=", &back), KURA_EINVAL);
    CHECK_EQ_INT(parse_line("repl 5 3 newer=1 term=4", &back), KURA_OK);
    CHECK(back.has_term && back.term == 4);
}

static void test_welcome_term(void)
{
    repl_welcome w = { .boot = true, .pos = 9, .msid = 2, .hid = 5, .imax = 100,
                       .has_term = true, .term = 3 }, back;
    char line[REPL_WELCOME_MAX];
    REQUIRE(repl_welcome_format(line, sizeof(line), &w, true) > 0);
    CHECK_EQ_INT(repl_welcome_parse(line, &back), KURA_OK);
    CHECK(back.boot && back.pos == 9 && back.has_term && back.term == 3);
    REQUIRE(repl_welcome_format(line, sizeof(line), &w, false) > 0);  /* the short form */
    CHECK(strstr(line, "term=") == NULL);
    CHECK_EQ_INT(repl_welcome_parse("REPL 1 2 hid=0000000000000005 imax=1 hist=-\r\n", &back),
                 KURA_OK);
    CHECK(!back.has_term);
    CHECK_EQ_INT(repl_welcome_parse("REPL 1 2 term=-1\r\n", &back), KURA_EINVAL);
}

int main(void)
{
    RUN(test_request_term);
    RUN(test_welcome_term);
    UNIT_DONE();
}
