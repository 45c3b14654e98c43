/*
 * fuzz_conf.c - kurad's conf-file parser (src/server/conf.c, -conf FILE)
 * and the option table every line goes through (options_set() in
 * src/server/options.c): names with and without dashes, switches with
 * yes/no, numbers, sizes, the database line, comments, control bytes.
 *
 * Input: the file, written to the temp dir and read by conf_load() over
 * the defaults.  Both objects are kurad's, linked here (Makefile).  What
 * the settings then hold is not used: what is under test is the reading.
 * The values conf.c keeps for the life of the process (settings point into
 * them; leak checkers see them reachable) grow by at most an input's
 * length each time: a few hundred MB over a long run, under the RSS limit
 * tests/fuzz/run sets.
 */
#include "../../src/server/server.h"
#include "fuzz.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    fuzz_write("kurad.conf", data, size);
    kura_settings s;
    options_defaults(&s);
    conf_load(&s, fuzz_path("kurad.conf"));
    return 0;
}
