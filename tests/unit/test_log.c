/*
 * test_log.c - folding of repeated error lines (src/server/log.c).
 *
 * log.c is compiled into this program and writes to a temp file; its clock
 * is moved forward instead of waiting.  Covers: the same error text a
 * thousand times is one line, and once its window is over one summary line
 * gives the count (written by log_tick() or by the next occurrence);
 * different texts are not folded into each other; info lines are never
 * folded; more distinct texts than slots still write every first line.
 */
#include <stdlib.h>
#include <unistd.h>

#include "../../src/server/log.c"
#include "unit.h"

static char path[] = "/tmp/kura-test-log-XXXXXX";

static int count_lines(const char *needle)
{
    FILE *f = fopen(path, "r");
    char line[2048];
    int n = 0;
    if (!f)
        return -1;
    while (fgets(line, sizeof(line), f))
        if (strstr(line, needle))
            n++;
    fclose(f);
    return n;
}

static void test_repeats_folded(void)
{
    for (int i = 0; i < 1000; i++)
        log_msg(KURA_LOG_ERROR, "accept: %s", "Too many open files");
    CHECK_EQ_INT(count_lines("accept: Too many open files"), 1);
    log_msg(KURA_LOG_ERROR, "sync failed: %d", 5);
    CHECK_EQ_INT(count_lines("sync failed: 5"), 1);
    log_tick();                                 /* window not over: nothing */
    CHECK_EQ_INT(count_lines("repeated"), 0);
    clock_skew += REPEAT_WINDOW + 1;
    log_tick();
    CHECK_EQ_INT(count_lines("accept: Too many open files (repeated 999 more times in 10 s)"), 1);
    CHECK_EQ_INT(count_lines("sync failed: 5 (repeated"), 0);   /* it came once */
    /* After its window the text is new again. */
    log_msg(KURA_LOG_ERROR, "accept: %s", "Too many open files");
    CHECK_EQ_INT(count_lines("accept: Too many open files"), 3);
    /* The next occurrence after the window writes the summary too. */
    log_msg(KURA_LOG_ERROR, "accept: %s", "Too many open files");
    clock_skew += REPEAT_WINDOW + 1;
    log_msg(KURA_LOG_ERROR, "accept: %s", "Too many open files");
    CHECK_EQ_INT(count_lines("(repeated 1 more times in 10 s)"), 1);
    CHECK_EQ_INT(count_lines("accept: Too many open files"), 5);
}

static void test_info_not_folded(void)
{
    for (int i = 0; i < 3; i++)
        log_msg(KURA_LOG_INFO, "SIGHUP: reopened the log file %s", "x");
    CHECK_EQ_INT(count_lines("SIGHUP: reopened"), 3);
}

static void test_many_texts(void)
{
    for (int i = 0; i < 3 * REPEAT_SLOTS; i++)
        log_msg(KURA_LOG_ERROR, "distinct %d", i);
    CHECK_EQ_INT(count_lines("distinct "), 3 * REPEAT_SLOTS);
}

int main(void)
{
    int fd = mkstemp(path);
    if (fd < 0)
        return 1;
    close(fd);
    log_init(KURA_LOG_INFO, 0);
    if (log_open(path) < 0)
        return 1;
    log_startup_done();
    RUN(test_repeats_folded);
    RUN(test_info_not_folded);
    RUN(test_many_texts);
    unlink(path);
    UNIT_DONE();
}
