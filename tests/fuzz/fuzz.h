/*
 * fuzz.h - what the fuzz targets share (tests/fuzz/helpers.c): a temp
 * directory of the process's own for targets whose decoder reads files,
 * and checksum repairs, so that a mutated input still reaches the decoder
 * behind the checksum instead of stopping at it every time.
 *
 * Each target is one fuzz_<name>.c defining LLVMFuzzerTestOneInput.  Built
 * with clang -fsanitize=fuzzer it is a libFuzzer binary (make fuzz); built
 * with the plain compiler and driver.c it replays files and directories
 * through the same function (make test replays tests/fuzz/corpus/<name>/).
 *
 * Targets whose input carries a checksum take a first byte of flags:
 * FUZZ_FIX_CRC set means "repair the checksums before decoding", so that
 * the fuzzer explores what lies behind them; clear means the bytes go in
 * as they are, so that the checks themselves are exercised too.
 */
#ifndef KURA_FUZZ_H
#define KURA_FUZZ_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#define FUZZ_FIX_CRC 1

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

/* The process's temp directory (created on first use under $TMPDIR or
 * /tmp, removed with everything in it at exit). */
const char *fuzz_dir(void);
/* fuzz_dir()/name in a static buffer (one per call site is enough: each
 * target builds its paths once). */
const char *fuzz_path(const char *name);
/* Removes every file below fuzz_dir() (directories stay, empty). */
void fuzz_clear(void);
/* Writes len bytes to fuzz_dir()/name (mkdir -p of the parents); aborts
 * on failure (a full /tmp is not a finding). */
void fuzz_write(const char *name, const void *p, size_t len);
/* A malloc'd copy of data, for decoders that take non-const input. */
unsigned char *fuzz_dup(const uint8_t *data, size_t size);

/* Rewrites the CRC of every update-log row (ulog.h) found back to back in
 * p[0..len), as far as their lengths can be read; returns the bytes they
 * cover. */
size_t fuzz_fix_ul_rows(unsigned char *p, size_t len);

/* An engine over a fresh in-memory cache, small (one bucket a stripe) so
 * that opening one per input is cheap; engine_close() frees it.  Aborts
 * on failure. */
struct kura_engine *fuzz_engine_open(size_t item_size_max);

/* A log function that drops what it is given (stores, replicas). */
void fuzz_quiet(int level, const char *line);

/* Opens the database dbname (a hash file or B+ tree the target wrote in
 * fuzz_dir()) read only, or with recover (salvage, which may write in the
 * directory), quietly; reads every item it lists, byte by byte, and its
 * state.  Returns the store, for more checks (kura_store_close() it), or
 * NULL when it was refused. */
struct kura_store *fuzz_store_walk(const char *dbname, bool recover);

/* Serves data to one protocol session over a fresh in-memory cache, as a
 * connection would (session.c: the protocol targets' shared part). */
void fuzz_session(const uint8_t *data, size_t size);
/* The same on a connection of kt's kind: accepted on -kt, so Kyoto
 * Tycoon's protocols whatever the first byte (kura_session_config.kt). */
void fuzz_session_as(const uint8_t *data, size_t size, bool kt);

/* Repairs a snapshot file's checksums (src/snap/snapshot.c): the header's
 * (bytes 60..63), version 2's blocks' (src/snap/snapblock.c: the head's
 * and, with codec none, the raw bytes'), and the trailer's of the whole
 * file (its last 4 bytes). */
void fuzz_fix_snapshot(unsigned char *f, size_t len);

#endif
