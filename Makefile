# kura - top-level Makefile.  Plain `make` needs no configure step.
#
#   make            build kurad, kuractl, kura-bench and the unit tests (into build/)
#   make run        build, then run kurad in the foreground on 127.0.0.1:11211
#   make test       build and run every test; ends with "N passed, N failed"
#   make test-asan  the same suite under AddressSanitizer + UBSan (build-asan/)
#   make test-tsan  the same suite under ThreadSanitizer (build-tsan/); any
#                   report fails
#   make install    binaries, man pages, conf/ files; PREFIX=/usr/local DESTDIR=
#                   SYSCONFDIR=/etc SYSTEMDUNITDIR=PREFIX/lib/systemd/system honoured
#   make bench      kura beside memcached and the Cabinets (BENCH_ARGS=...), then
#                   bench-repl
#   make bench-repl the update log's cost, a replica's lag, a full copy
#   make bench-snapshot  snapshots of 10M items per codec, restores, latency
#   make fuzz       build the fuzz targets with clang's libFuzzer (build-fuzz/) and
#                   run each FUZZ_SECONDS=N seconds (FUZZ_TARGETS=names: only those);
#                   ends with "N passed, N failed"
#
# Sources are found by wildcard: every src/*/*.c and src/*/*/*.c (a backend
# has a folder of its own: src/store/hash/, src/store/cache/) except src/server
# and src/ctl goes into libkura.a; src/server/*.c make kurad; src/ctl/*.c make
# kuractl (the operator's tool, docs/kuractl.1); tests/unit/test_*.c are one program each,
# and every other tests/unit/*.c (test support, such as kio_sim.c) is linked
# into each of them.  tests/fuzz/fuzz_*.c are one fuzz target each
# (tests/fuzz/fuzz.h): plain builds link them with tests/fuzz/driver.c into
# corpus replayers (build/fuzz/, run by make test), make fuzz with libFuzzer.

-include config.mk
PREFIX  ?= /usr/local
DESTDIR ?=
SYSCONFDIR     ?= /etc
SYSTEMDUNITDIR ?= $(PREFIX)/lib/systemd/system
BUILD   ?= build
CC      ?= cc
OPT     ?= -O2
SAN     ?=

CFLAGS_BASE = -std=c11 -D_GNU_SOURCE -g $(OPT) -Wall -Wextra -Werror -pthread \
              -Iinclude -fno-strict-aliasing $(SAN)
CFLAGS_ALL  = $(CFLAGS_BASE) $(CFLAGS)
LIBS        = -levent -lz -lbz2 -llzo2 -lm -pthread $(SAN)

LIB_SRC    = $(sort $(filter-out src/server/% src/ctl/%,$(wildcard src/*/*.c src/*/*/*.c)))
SERVER_SRC = $(sort $(wildcard src/server/*.c))
CTL_SRC    = $(sort $(wildcard src/ctl/*.c))
UNIT_SRC   = $(sort $(wildcard tests/unit/test_*.c))
UNIT_SUPPORT_SRC = $(sort $(filter-out tests/unit/test_%.c,$(wildcard tests/unit/*.c)))
BENCH_SRC  = $(sort $(wildcard bench/*.c))
FUZZ_SRC   = $(sort $(wildcard tests/fuzz/fuzz_*.c))

LIB_OBJ    = $(LIB_SRC:%.c=$(BUILD)/%.o)
SERVER_OBJ = $(SERVER_SRC:%.c=$(BUILD)/%.o)
CTL_OBJ    = $(CTL_SRC:%.c=$(BUILD)/%.o)
UNIT_BIN   = $(UNIT_SRC:tests/unit/%.c=$(BUILD)/tests/%)
UNIT_SUPPORT_OBJ = $(UNIT_SUPPORT_SRC:%.c=$(BUILD)/%.o)
FUZZ_BIN   = $(FUZZ_SRC:tests/fuzz/%.c=$(BUILD)/fuzz/%)
# libFuzzer's main() under make fuzz (FUZZ_ENGINE set), the replay driver's otherwise,
# which takes every malloc, calloc and realloc first to hold them to libFuzzer's limit
FUZZ_MAIN  = $(if $(FUZZ_ENGINE),,$(BUILD)/tests/fuzz/driver.o)
FUZZ_LINK  = $(if $(FUZZ_ENGINE),$(FUZZ_ENGINE),-Wl,--wrap=malloc,--wrap=calloc,--wrap=realloc)
FUZZ_SUPPORT_OBJ = $(BUILD)/tests/fuzz/helpers.o $(FUZZ_MAIN)
# kept (make would delete them as intermediate and rebuild them every time)
.SECONDARY: $(UNIT_SUPPORT_OBJ) $(FUZZ_SUPPORT_OBJ) $(FUZZ_SRC:%.c=$(BUILD)/%.o) \
            $(BUILD)/tests/fuzz/session.o
KURAD      = $(BUILD)/kurad
KURACTL    = $(BUILD)/kuractl
BENCH      = $(if $(BENCH_SRC),$(BUILD)/kura-bench)

.PHONY: all run test test-asan test-tsan check install clean bench bench-repl bench-snapshot \
        fuzz fuzz-build
# kura-enginebench too: a measurement with a stale one would time old code
all: $(KURAD) $(KURACTL) $(BENCH) $(BUILD)/kura-enginebench $(UNIT_BIN) $(BUILD)/tests/libfailsync.so \
     $(FUZZ_BIN)

# An LD_PRELOAD shim that fails fsync/fdatasync on demand, for the daemon's
# sync-failure tests (tests/shim/failsync.c).  Built without the sanitizers:
# it is loaded into a process whose runtime is already set up.
$(BUILD)/tests/libfailsync.so: tests/shim/failsync.c
	@mkdir -p $(dir $@)
	$(CC) -std=c11 -O2 -Wall -Wextra -Werror -fPIC -shared -o $@ $< -ldl

$(BUILD)/%.o: %.c
	@mkdir -p $(dir $@)
	$(CC) $(CFLAGS_ALL) -MMD -MP -c -o $@ $<

$(BUILD)/libkura.a: $(LIB_OBJ)
	@rm -f $@
	ar rcs $@ $^

$(KURAD): $(SERVER_OBJ) $(BUILD)/libkura.a
	$(CC) $(CFLAGS_ALL) -o $@ $(SERVER_OBJ) $(BUILD)/libkura.a $(LIBS)

$(KURACTL): $(CTL_OBJ) $(BUILD)/libkura.a
	$(CC) $(CFLAGS_ALL) -o $@ $(CTL_OBJ) $(BUILD)/libkura.a $(LIBS)

$(BUILD)/kura-bench: $(BENCH_SRC:%.c=$(BUILD)/%.o)
	$(CC) $(CFLAGS_ALL) -o $@ $^ $(LIBS)

# In-process engine benchmark (bench/engine/); the library is linked whole so
# that backends which exist replace the weak stand-ins (see the source).
$(BUILD)/kura-enginebench: $(BUILD)/bench/engine/kura-enginebench.o $(BUILD)/libkura.a
	$(CC) $(CFLAGS_ALL) -o $@ $< -Wl,--whole-archive $(BUILD)/libkura.a \
	    -Wl,--no-whole-archive $(LIBS)

# kura beside memcached and the Cabinets (bench/run.py --help; under 10 min).
bench: $(KURAD) $(BUILD)/kura-bench $(BUILD)/kura-enginebench
	/usr/bin/python3 bench/run.py --build $(BUILD) $(BENCH_ARGS)
	/usr/bin/python3 bench/repl.py --build $(BUILD) $(REPL_BENCH_ARGS)

# The update log's cost, a replica's lag, a full copy (bench/repl.py --help).
bench-repl: $(KURAD) $(BUILD)/kura-bench
	/usr/bin/python3 bench/repl.py --build $(BUILD) $(REPL_BENCH_ARGS)

# Snapshots on Kyoto Tycoon's workload: 10M items, each codec, restores,
# latency during one (bench/snapshot.py --help; about 10 minutes, 4 GB of disk).
bench-snapshot: $(KURAD) $(BUILD)/kura-bench
	/usr/bin/python3 bench/snapshot.py --build $(BUILD) $(SNAPSHOT_BENCH_ARGS)

$(BUILD)/tests/%: $(BUILD)/tests/unit/%.o $(UNIT_SUPPORT_OBJ) $(BUILD)/libkura.a
	@mkdir -p $(dir $@)
	$(CC) $(CFLAGS_ALL) -o $@ $< $(UNIT_SUPPORT_OBJ) $(BUILD)/libkura.a $(LIBS)

# A fuzz target: its object, the shared helpers and libkura.a (plus, for a
# decoder that lives in kurad or kuractl, the objects named below).
$(BUILD)/fuzz/%: $(BUILD)/tests/fuzz/%.o $(FUZZ_SUPPORT_OBJ) $(BUILD)/libkura.a
	@mkdir -p $(dir $@)
	$(CC) $(CFLAGS_ALL) $(FUZZ_LINK) -o $@ $(filter %.o,$^) $(BUILD)/libkura.a $(LIBS)

# the protocol targets share their session (tests/fuzz/session.c)
$(BUILD)/fuzz/fuzz_text $(BUILD)/fuzz/fuzz_meta $(BUILD)/fuzz/fuzz_binary: $(BUILD)/tests/fuzz/session.o

# the conf-file parser and its option table are kurad's
$(BUILD)/fuzz/fuzz_conf: $(BUILD)/src/server/conf.o $(BUILD)/src/server/options.o

# kuractl load's decoder is in kuractl: its objects, with kuractl.c's main()
# renamed so that the target's (or libFuzzer's) is the program's
$(BUILD)/fuzz/fuzz_ctl_load: $(filter-out %/kuractl.o,$(CTL_OBJ)) $(BUILD)/fuzz/kuractl-nomain.o
$(BUILD)/fuzz/kuractl-nomain.o: $(BUILD)/src/ctl/kuractl.o
	@mkdir -p $(dir $@)
	objcopy --redefine-sym main=kuractl_main $< $@

# Each target runs FUZZ_SECONDS seconds from its corpus in tests/fuzz/corpus/
# (new inputs go to a scratch copy under build-fuzz/, crashes to
# build-fuzz/findings/); tests/fuzz/run says what it does.  Debian's clang
# with libFuzzer: apt-get install clang libclang-rt-14-dev.
FUZZ_SECONDS ?= 10
FUZZ_SAN = -fsanitize=address,undefined,fuzzer-no-link -fno-sanitize-recover=undefined \
           -fno-omit-frame-pointer
# clang names a GNU extension gcc takes silently (tree_int.h's page header
# in the page cache's structs) and a static inline helper left unused in a .c file
FUZZ_CFLAGS = -Wno-gnu-variable-sized-type-not-at-end -Wno-unused-function
fuzz:
	$(MAKE) BUILD=build-fuzz CC=clang OPT=-O1 SAN="$(FUZZ_SAN)" FUZZ_ENGINE=-fsanitize=fuzzer \
	    CFLAGS="$(FUZZ_CFLAGS)" fuzz-build
	/usr/bin/python3 tests/fuzz/run --build build-fuzz --seconds $(FUZZ_SECONDS) $(FUZZ_TARGETS)

fuzz-build: $(FUZZ_BIN)

# Starts the server in the foreground on the embedded default: a hash file
# under ./var/ (RUN_DB='*' serves the in-memory cache instead).  As root,
# kurad wants -u USER (as memcached does); -u root keeps root for this
# developer's shortcut.
RUN_DB ?= var/kura.kh
run: $(KURAD)
	@mkdir -p var
	./$(KURAD) $$([ "$$(id -u)" = 0 ] && echo -u root) $(RUN_ARGS) $(RUN_DB)

# Each test program prints TAP lines; tests/run collects them and prints the
# closing "N passed, N failed" line.  KURA_BUILD tells the tests which kurad.
test: all
	KURA_BUILD=$(BUILD) /usr/bin/python3 tests/run $(TESTS)

check: test

# Sanitized code runs several times slower: the tests' deadlines stretch.
test-asan:
	KURA_TEST_DEADLINE_SCALE=3 $(MAKE) BUILD=build-asan OPT=-O1 \
	    SAN="-fsanitize=address,undefined -fno-sanitize-recover=undefined -fno-omit-frame-pointer" test

# ThreadSanitizer: every report is a failure.  halt_on_error stops the
# program at the first report and exitcode=66 makes its exit status say so,
# which tests/run counts as a failure even without a "not ok" line; kurad's
# stderr is also searched for reports by tests/lib/kuratest.py.  Deliberate,
# documented races are explicit relaxed atomics in the code, not
# suppressions; tests/tsan.supp holds only what the code cannot express.
# TSan is slower than ASan (and its memory use makes deadlines tighter), so
# the deadlines stretch further.
# die_after_fork=0: test_hashdb_crash forks a child that opens a store (and
# so starts threads) after the parent has had threads of its own; TSan
# refuses that by default, though the child only uses what it creates.
TSAN_OPTIONS_RUN = halt_on_error=1 exitcode=66 second_deadlock_stack=1 die_after_fork=0 \
                   suppressions=$(CURDIR)/tests/tsan.supp
# The whole suite, kurad under the integration and client tests included,
# takes about 5 minutes on 2 cores (ASan about as long), within CI's budget.
test-tsan:
	TSAN_OPTIONS="$(TSAN_OPTIONS_RUN)" KURA_TEST_DEADLINE_SCALE=5 \
	    $(MAKE) BUILD=build-tsan OPT=-O1 SAN="-fsanitize=thread -fno-omit-frame-pointer" test

# Paths inside the service files are written for PREFIX=/usr/local and
# SYSCONFDIR=/etc; install rewrites them for the ones given.  An existing
# kurad.conf is never overwritten.  sd_notify needs no library (notify.c).
FIXPATHS = sed -e 's\#/usr/local/bin/\#$(PREFIX)/bin/\#g' -e 's\#/etc/kura/\#$(SYSCONFDIR)/kura/\#g'
SHARE    = $(DESTDIR)$(PREFIX)/share

install: $(KURAD) $(KURACTL) $(BENCH)
	install -d $(DESTDIR)$(PREFIX)/bin $(SHARE)/man/man1 $(SHARE)/doc/kura \
	    $(DESTDIR)$(SYSTEMDUNITDIR) $(DESTDIR)$(SYSCONFDIR)/kura $(DESTDIR)$(SYSCONFDIR)/logrotate.d \
	    $(SHARE)/kura/daemontools/log $(SHARE)/kura/daemontools/env
	install -m 755 $(KURAD) $(KURACTL) $(BENCH) $(DESTDIR)$(PREFIX)/bin/
	for m in docs/*.1; do [ -f "$$m" ] && install -m 644 "$$m" $(SHARE)/man/man1/; done; true
	install -m 644 README.md docs/options.md docs/operations.md docs/protocol.md $(SHARE)/doc/kura/
	$(FIXPATHS) conf/kurad.service > $(DESTDIR)$(SYSTEMDUNITDIR)/kurad.service
	chmod 644 $(DESTDIR)$(SYSTEMDUNITDIR)/kurad.service
	install -m 644 conf/kurad.conf $(SHARE)/doc/kura/kurad.conf.example
	[ -e $(DESTDIR)$(SYSCONFDIR)/kura/kurad.conf ] || \
	    install -m 644 conf/kurad.conf $(DESTDIR)$(SYSCONFDIR)/kura/kurad.conf
	install -m 644 conf/logrotate $(DESTDIR)$(SYSCONFDIR)/logrotate.d/kurad
	install -m 755 conf/daemontools/run $(SHARE)/kura/daemontools/run
	install -m 755 conf/daemontools/log/run $(SHARE)/kura/daemontools/log/run
	for f in conf/daemontools/env/*; do \
	    $(FIXPATHS) "$$f" > $(SHARE)/kura/daemontools/env/$$(basename "$$f"); done

clean:
	rm -rf build build-asan build-tsan build-fuzz

-include $(shell find $(BUILD) -name '*.d' 2>/dev/null)
