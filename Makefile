# kura - top-level Makefile.  Plain `make` needs no configure step.
#
#   make            build kurad, kuractl, kura-bench, kura-enginebench, kura-hitbench (into build/):
#                   release builds, without a test switch (include/kura/testhooks.h)
#   make programs   only kurad and kuractl
#   make run        build, then run kurad in the foreground on localhost:11211
#                   (PORT=N, DB=NAME: see "run" below)
#   make test       make check-layers and check-functions, then build the test tree (build-test/:
#                   the programs, the unit tests and the fuzz replayers, with
#                   the test switches, -DKURA_TEST_HOOKS) and run every test
#                   against it; ends with "N passed, N failed"
#   make test-build only build the test tree (build-test/)
#   make check-layers  every #include in src/ and include/kura/ against the
#                   layers of tools/layers.txt (tools/check-layers)
#   make test-asan  the same suite under AddressSanitizer + UBSan (build-asan/,
#                   with the test switches)
#   make test-tsan  the same suite under ThreadSanitizer (build-tsan/, with the
#                   test switches); any report fails
#   make install    kurad into sbindir, kuractl into bindir, man pages, docs,
#                   conf/ files, the systemd unit; make uninstall removes them.
#                   GNU directory variables and DESTDIR honoured (see below)
#   make install-bench  kura-bench and kura-enginebench into bindir
#   make deb        the Debian package (debian/), built from a copy of the tree
#                   in build-deb/, where the .deb files land
#   make test-deb   make deb, then check the package (tests/integration/test_package.py)
#   make bench      kura beside memcached and the Cabinets (BENCH_ARGS=...), then
#                   bench-repl, bench-tt, then bench/stall.py (a get's wait during listings)
#   make bench-tt   Tokyo Tyrant's protocol beside the text protocol (TT_BENCH_ARGS=...)
#   make bench-kt   ktremotetest bulk against ktserver and kurad -kt (KURA_KT_BIN=DIR)
#   make bench-repl the update log's cost, a replica's lag, a full copy
#   make bench-snapshot  snapshots of 10M items per codec, restores, latency
#   make bench-cache     the cache beside memcached: memory per item, hit ratios,
#                   small-value CPU, warm restart (CACHE_BENCH_ARGS=...)
#   make distclean  clean, and what ./configure wrote
#   make soak       tests/integration/test_soak.py with a 10-minute soak (SOAK_SECONDS=N)
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
# corpus replayers (build-test/fuzz/, run by make test), make fuzz with libFuzzer.
#
# Flags: CFLAGS, CPPFLAGS and LDFLAGS (from the environment, the command line
# or config.mk) are added to the project's own, after them, so a
# distribution's hardening flags and -O level apply.  Without config.mk the
# build uses -Werror (developers and CI keep the tree warning-free); a
# configured build has it only with ./configure --enable-werror (WERROR=).

-include config.mk
BUILD   ?= build
# The test tree: built with the test switches by make test (test-asan and
# test-tsan set it to build-asan, build-tsan).  TEST_HOOKS=1 is what makes
# a tree a test tree; never set it for build/, whose programs are installed.
TEST_BUILD ?= build-test
TEST_HOOKS ?=
CC      ?= cc
OPT     ?= -O2
SAN     ?=
WERROR  ?= -Werror

# Installation directories: GNU's names (./configure writes them to
# config.mk); PREFIX, SYSCONFDIR and SYSTEMDUNITDIR, the older names, still
# work when nothing set the lowercase ones.  Without configure the state
# lives under /var (systemd's StateDirectory= is /var/lib whatever the
# prefix), the configuration under /etc.
PREFIX         ?= /usr/local
SYSCONFDIR     ?= /etc
prefix         ?= $(PREFIX)
exec_prefix    ?= $(prefix)
bindir         ?= $(exec_prefix)/bin
sbindir        ?= $(exec_prefix)/sbin
datarootdir    ?= $(prefix)/share
datadir        ?= $(datarootdir)
sysconfdir     ?= $(SYSCONFDIR)
localstatedir  ?= /var
mandir         ?= $(datarootdir)/man
man1dir        ?= $(mandir)/man1
docdir         ?= $(datarootdir)/doc/kura
SYSTEMDUNITDIR ?= $(prefix)/lib/systemd/system
systemdunitdir ?= $(SYSTEMDUNITDIR)
DESTDIR        ?=

# Libraries: configure finds them with pkg-config or AC_CHECK_LIB; these are
# Debian's names, for a build without configure.
LIBEVENT_LIBS ?= -levent
ZLIB_LIBS     ?= -lz
BZIP2_LIBS    ?= -lbz2
LZO2_LIBS     ?= -llzo2
DEP_CFLAGS  = $(LIBEVENT_CFLAGS) $(ZLIB_CFLAGS) $(BZIP2_CFLAGS) $(LZO2_CFLAGS)

# Tokyo and Kyoto Cabinet, optional, for kuractl import/export only
# (src/ctl/cab_tc.c, cab_kc.c): config.mk says whether configure found
# them; without it, Debian's headers say.  kuractl links them when present.
HAVE_TOKYOCABINET ?= $(if $(wildcard /usr/include/tcbdb.h),1)
HAVE_KYOTOCABINET ?= $(if $(wildcard /usr/include/kclangc.h),1)
TOKYOCABINET_LIBS ?= -ltokyocabinet
KYOTOCABINET_LIBS ?= -lkyotocabinet
CAB_CFLAGS = $(if $(HAVE_TOKYOCABINET),-DKURA_HAVE_TC $(TOKYOCABINET_CFLAGS)) \
             $(if $(HAVE_KYOTOCABINET),-DKURA_HAVE_KC $(KYOTOCABINET_CFLAGS))
CAB_LIBS   = $(if $(HAVE_TOKYOCABINET),$(TOKYOCABINET_LIBS)) \
             $(if $(HAVE_KYOTOCABINET),$(KYOTOCABINET_LIBS))

# Cyrus SASL, optional, for -S (src/proto/sasl.c, in libkura.a): config.mk
# says whether configure found it; without it, Debian's header says.  When
# present every program links it; without it -S is refused at start.
HAVE_SASL ?= $(if $(wildcard /usr/include/sasl/sasl.h),1)
SASL_LIBS ?= -lsasl2

# OpenSSL, optional, for TLS (-Z, src/server/tls.c; replicas' -mtls and
# kuractl -tls, src/util/tlsio.c): config.mk says whether configure found
# it; without it, Debian's header says.  Without it -Z and -mtls are
# refused at start and kuractl -tls says so.
HAVE_OPENSSL ?= $(if $(wildcard /usr/include/openssl/ssl.h),1)
OPENSSL_LIBS ?= -lssl -lcrypto

CFLAGS_BASE = -std=c11 -D_GNU_SOURCE -g $(OPT) -Wall -Wextra $(WERROR) -pthread \
              -Iinclude -fno-strict-aliasing $(SAN) $(if $(TEST_HOOKS),-DKURA_TEST_HOOKS)
CFLAGS_ALL  = $(CFLAGS_BASE) $(DEP_CFLAGS) $(CPPFLAGS) $(CFLAGS)
CFLAGS_ALL += $(if $(HAVE_OPENSSL),-DKURA_HAVE_OPENSSL $(OPENSSL_CFLAGS))
LIBS        = $(LDFLAGS) $(LIBEVENT_LIBS) $(ZLIB_LIBS) $(BZIP2_LIBS) $(LZO2_LIBS) -lm -pthread $(SAN)
LIBS       += $(if $(HAVE_SASL),$(SASL_LIBS))
LIBS       += $(if $(HAVE_OPENSSL),$(OPENSSL_LIBS))

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

.PHONY: all programs run test test-run test-build test-ha check-layers test-asan test-tsan check install \
        install-bench uninstall clean distclean deb test-deb bench bench-repl bench-snapshot \
        bench-tt bench-kt fuzz fuzz-build soak bench-footprint bench-cache check-functions test-fresh FORCE
# kura-enginebench too: a measurement with a stale one would time old code.
# A test tree (TEST_HOOKS=1) also holds what only the tests use.
all: $(KURAD) $(KURACTL) $(BENCH) $(BUILD)/kura-enginebench $(BUILD)/kura-hitbench \
     $(if $(TEST_HOOKS),$(UNIT_BIN) $(BUILD)/tests/libfailsync.so $(BUILD)/tests/libnoipv6.so \
       $(FUZZ_BIN))

programs: $(KURAD) $(KURACTL)

# LD_PRELOAD shims for the daemon's tests: failsync.c fails fsync/fdatasync
# on demand (the sync-failure tests), noipv6.c makes a host without IPv6
# (test_loopback.py).  Built without the sanitizers: each is loaded into a
# process whose runtime is already set up.
$(BUILD)/tests/lib%.so: tests/shim/%.c
	@mkdir -p $(dir $@)
	$(CC) -std=c11 -O2 -Wall -Wextra $(WERROR) -fPIC -shared -o $@ $< -ldl

# What this build is made with: compiler, flags, libraries and the optional
# libraries found.  Rewritten only when that changes, and every object
# depends on it, so that a build made before libssl-dev or libsasl2-dev was
# installed (the README's quick start, then its test line) is made again
# with them, instead of leaving a kurad without TLS or SASL.
BUILD_FLAGS = $(CC) $(CFLAGS_ALL) | $(LIBS) | $(CAB_CFLAGS) $(CAB_LIBS) | sasl $(HAVE_SASL) \
              $(SASL_CFLAGS)
$(BUILD)/flags: FORCE
	@mkdir -p $(dir $@)
	@printf '%s\n' '$(subst ','\'',$(BUILD_FLAGS))' | cmp -s - $@ || \
	    printf '%s\n' '$(subst ','\'',$(BUILD_FLAGS))' > $@

FORCE:

$(BUILD)/%.o: %.c $(BUILD)/flags
	@mkdir -p $(dir $@)
	$(CC) $(CFLAGS_ALL) -MMD -MP -c -o $@ $<

$(BUILD)/libkura.a: $(LIB_OBJ)
	@rm -f $@
	ar rcs $@ $^

$(KURAD): $(SERVER_OBJ) $(BUILD)/libkura.a
	$(CC) $(CFLAGS_ALL) -o $@ $(SERVER_OBJ) $(BUILD)/libkura.a $(LIBS)

$(KURACTL): $(CTL_OBJ) $(BUILD)/libkura.a
	$(CC) $(CFLAGS_ALL) -o $@ $(CTL_OBJ) $(BUILD)/libkura.a $(CAB_LIBS) $(LIBS)

$(BUILD)/src/ctl/cab_tc.o $(BUILD)/src/ctl/cab_kc.o: CFLAGS_ALL += $(CAB_CFLAGS)
$(BUILD)/src/proto/sasl.o: CFLAGS_ALL += $(if $(HAVE_SASL),-DKURA_HAVE_SASL $(SASL_CFLAGS))

# libkura.a for its TLS client (kura/tlsio.h: --tls-ca)
$(BUILD)/kura-bench: $(BENCH_SRC:%.c=$(BUILD)/%.o) $(BUILD)/libkura.a
	$(CC) $(CFLAGS_ALL) -o $@ $^ $(LIBS)

# In-process engine benchmark (bench/engine/); the library is linked whole so
# that backends which exist replace the weak stand-ins (see the source).
$(BUILD)/kura-enginebench: $(BUILD)/bench/engine/kura-enginebench.o $(BUILD)/libkura.a
	$(CC) $(CFLAGS_ALL) -o $@ $< -Wl,--whole-archive $(BUILD)/libkura.a \
	    -Wl,--no-whole-archive $(LIBS)

# The CPU one call (one event-loop turn) of each listing costs (bench/turns/).
$(BUILD)/kura-turnbench: $(BUILD)/bench/turns/kura-turnbench.o $(BUILD)/libkura.a
	$(CC) $(CFLAGS_ALL) -o $@ $< -Wl,--whole-archive $(BUILD)/libkura.a \
	    -Wl,--no-whole-archive $(LIBS)

# A snapshot of N kura-bench-shaped items without a server (bench/snapgen/).
$(BUILD)/kura-snapgen: $(BUILD)/bench/snapgen/kura-snapgen.o $(BUILD)/libkura.a
	$(CC) $(CFLAGS_ALL) -o $@ $^ $(LIBS)

# A cache's hit ratio, get then set on a miss (bench/hits/; bench/cache.py runs it).
$(BUILD)/kura-hitbench: $(BUILD)/bench/hits/kura-hitbench.o
	$(CC) $(CFLAGS_ALL) -o $@ $^ -lm

# kura beside memcached and the Cabinets (bench/run.py --help; under 10 min).
bench: $(KURAD) $(BUILD)/kura-bench $(BUILD)/kura-enginebench $(BUILD)/kura-turnbench
	/usr/bin/python3 bench/run.py --build $(BUILD) $(BENCH_ARGS)
	/usr/bin/python3 bench/repl.py --build $(BUILD) $(REPL_BENCH_ARGS)
	/usr/bin/python3 bench/tt.py --build $(BUILD) $(TT_BENCH_ARGS)
	/usr/bin/python3 bench/stall.py --build $(BUILD) $(STALL_BENCH_ARGS)
	$(BUILD)/kura-turnbench

# Tokyo Tyrant's protocol beside the text protocol, each backend (bench/tt.py --help).
bench-tt: $(KURAD) $(BUILD)/kura-bench
	/usr/bin/python3 bench/tt.py --build $(BUILD) $(TT_BENCH_ARGS)

# Kyoto Tycoon's ktremotetest bulk against ktserver and kurad -kt (bench/kt.py;
# KURA_KT_BIN names the programs, built by hand: docs/HACKING.md).
bench-kt: $(KURAD)
	/usr/bin/python3 bench/kt.py --build $(BUILD) $(KT_BENCH_ARGS)

# The update log's cost, a replica's lag, a full copy (bench/repl.py --help).
bench-repl: $(KURAD) $(BUILD)/kura-bench
	/usr/bin/python3 bench/repl.py --build $(BUILD) $(REPL_BENCH_ARGS)

# Snapshots on Kyoto Tycoon's workload: 10M items, each codec, restores,
# latency during one (bench/snapshot.py --help; about 10 minutes, 4 GB of disk).
bench-snapshot: $(KURAD) $(BUILD)/kura-bench
	/usr/bin/python3 bench/snapshot.py --build $(BUILD) $(SNAPSHOT_BENCH_ARGS)

# Issue 23's figures beside their yardsticks: the engine in both orders, 20 KB
# gets' server CPU, -th 2, 20 KB sets against dd (bench/footprint.py --help).
bench-footprint: $(KURAD) $(BUILD)/kura-bench $(BUILD)/kura-enginebench
	/usr/bin/python3 bench/footprint.py --build $(BUILD) $(FOOTPRINT_BENCH_ARGS)

# Issue 35's figures: the cache beside memcached, memory per item, hit ratios,
# small-value CPU, warm restart (bench/cache.py --help; a few minutes).
bench-cache: $(KURAD) $(BUILD)/kura-bench $(BUILD)/kura-hitbench
	/usr/bin/python3 bench/cache.py --build $(BUILD) $(CACHE_BENCH_ARGS)

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
$(BUILD)/fuzz/fuzz_tt $(BUILD)/fuzz/fuzz_kt: $(BUILD)/tests/fuzz/session.o

# the conf-file parser and its option table are kurad's
$(BUILD)/fuzz/fuzz_conf: $(BUILD)/src/server/conf.o $(BUILD)/src/server/options.o

# kuractl load's decoder is in kuractl: its objects, with kuractl.c's main()
# renamed so that the target's (or libFuzzer's) is the program's
$(BUILD)/fuzz/fuzz_ctl_load: $(filter-out %/kuractl.o,$(CTL_OBJ)) $(BUILD)/fuzz/kuractl-nomain.o
$(BUILD)/fuzz/fuzz_ctl_load: LIBS += $(CAB_LIBS)
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
# and a cache of 4 stripes, not 256 (src/store/cache/cache.c): the
# protocol targets open one per input and a listing in an input visits each;
# 4 journal slots and 4 access-mark locks (made and cleared per input, for
# one thread), Tokyo Tyrant's and Kyoto Tycoon's walks paused every 16 keys
# (a short seed pauses)
FUZZ_CFLAGS = -Wno-gnu-variable-sized-type-not-at-end -Wno-unused-function -DCACHE_STRIPE_BITS=2 \
              -DJOURNAL_SLOTS=4 -DMARKS_LOCKS=4 -DTT_WALK_SLICE=16 -DKT_WALK_SLICE=16
fuzz:
	$(MAKE) BUILD=build-fuzz CC=clang OPT=-O1 SAN="$(FUZZ_SAN)" FUZZ_ENGINE=-fsanitize=fuzzer \
	    CFLAGS="$(FUZZ_CFLAGS)" fuzz-build
	/usr/bin/python3 tests/fuzz/run --build build-fuzz --seconds $(FUZZ_SECONDS) $(FUZZ_TARGETS)

fuzz-build: $(FUZZ_BIN)

# make run [PORT=11211] [DB=var/kura.kh] [RUN_ARGS='-th 8 ...']: the server
# in the foreground on PORT of the loopback (127.0.0.1 and ::1), its data in
# DB, a hash file under ./var/ by default (DB='*' serves the in-memory cache
# instead; RUN_DB is DB's older name and still works), with RUN_ARGS' other
# options.  As root, -u root keeps root for this developer's shortcut
# without kurad's warning about it.
RUN_DB ?= var/kura.kh
DB ?= $(RUN_DB)
PORT ?= 11211
run: $(KURAD)
	@mkdir -p var
	./$(KURAD) $$([ "$$(id -u)" = 0 ] && echo -u root) -port '$(PORT)' $(RUN_ARGS) '$(DB)'

# Each test program prints TAP lines; tests/run collects them and prints the
# closing "N passed, N failed" line.  KURA_BUILD tells the tests which kurad.
# The suite runs against a tree of its own, built with the test switches
# (testhooks.h): $(TEST_BUILD), never build/, whose programs are release ones.
test: check-layers check-functions
	$(MAKE) BUILD=$(TEST_BUILD) TEST_HOOKS=1 test-run

test-run: all
	KURA_BUILD=$(BUILD) /usr/bin/python3 tests/run $(TESTS)

test-build:
	$(MAKE) BUILD=$(TEST_BUILD) TEST_HOOKS=1 all

# Lower layers never include higher ones (tools/layers.txt).
check-layers:
	/usr/bin/python3 tools/check-layers

check: test

# No function in src/ over 120 lines (tools/long-functions; Debian's
# universal-ctags, which the README's test command installs); make test runs it.
check-functions:
	tools/long-functions -max 120 src

# The load and soak test at length: tests/integration/test_soak.py with its
# mixed-traffic soak SOAK_SECONDS long on each backend (make test runs it 30 s);
# each backend's figures are appended to $(TEST_BUILD)/soak-figures.txt.
SOAK_SECONDS ?= 600
soak: test-build
	SOAK_SECONDS=$(SOAK_SECONDS) KURA_TEST_TIMEOUT=$$(( $(SOAK_SECONDS) + 300 )) \
	    SOAK_FIGURES=$(TEST_BUILD)/soak-figures.txt \
	    KURA_BUILD=$(TEST_BUILD) /usr/bin/python3 tests/run test_soak.py

# The failover fault test at length (tests/integration/test_ha.py: etcd,
# three kurad and HAProxy): HA_FAULTS faults with an HA_TTL-second lease
# (make test runs 4 with 2 s), its TAP lines and the distribution of the
# times from each fault to the next acknowledged write printed.
HA_FAULTS ?= 24
HA_TTL ?= 5
test-ha: test-build
	KURA_HA_FAULTS=$(HA_FAULTS) KURA_HA_TTL=$(HA_TTL) KURA_BUILD=$(TEST_BUILD) \
	    /usr/bin/python3 tests/integration/test_ha.py Checker Faults

# The sanitized builds also check the cross-module lock order
# (include/kura/lockorder.h): a thread taking a lock out of rank aborts.
LOCK_ORDER_CHECK = -DKURA_LOCK_ORDER_CHECK

# Sanitized code runs several times slower: the tests' deadlines stretch.
test-asan:
	KURA_TEST_DEADLINE_SCALE=3 $(MAKE) TEST_BUILD=build-asan OPT=-O1 \
	    SAN="-fsanitize=address,undefined -fno-sanitize-recover=undefined -fno-omit-frame-pointer \
	    $(LOCK_ORDER_CHECK)" test

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
	    $(MAKE) TEST_BUILD=build-tsan OPT=-O1 SAN="-fsanitize=thread -fno-omit-frame-pointer \
	    $(LOCK_ORDER_CHECK)" test

# Paths inside conf/ are written for prefix=/usr/local, sysconfdir=/etc and
# localstatedir=/var; install rewrites them for the ones given (the unit's
# StateDirectory= is /var/lib/kura whatever localstatedir says, so the unit's
# /var paths stay).  SERVICE_NAME names the unit file (kura.service, the
# package's name, by default) and logrotate's; SERVICE_USER, if set,
# replaces the unit's DynamicUser=yes by that user and group (the Debian
# package's kura, which it creates).  An existing kurad.conf is never
# overwritten, and uninstall removes it only if it is still the one
# installed.  sd_notify needs no library (notify.c).
SERVICE_NAME ?= kura
SERVICE_USER ?=
FIXPATHS = sed -e 's\#/usr/local/sbin/\#$(sbindir)/\#g' -e 's\#/usr/local/bin/\#$(bindir)/\#g' \
               -e 's\#/etc/kura/\#$(sysconfdir)/kura/\#g'
FIXVAR   = sed -e 's\#/var/lib/kura\#$(localstatedir)/lib/kura\#g' \
           -e 's\#/var/log/kura/\#$(localstatedir)/log/kura/\#g'
FIXUSER  = $(if $(SERVICE_USER),-e 's/^DynamicUser=yes$$/User=$(SERVICE_USER)\nGroup=$(SERVICE_USER)/') \
           -e 's/systemctl \(enable --now\|edit\) kura\b/systemctl \1 $(SERVICE_NAME)/'
MAN1     = docs/kurad.1 docs/kuractl.1
DOCS     = README.md $(filter-out docs/HACKING.md,$(sort $(wildcard docs/*.md)))
SHAREDIR = $(datadir)/kura
D        = $(DESTDIR)

install: $(KURAD) $(KURACTL)
	install -d $(D)$(sbindir) $(D)$(bindir) $(D)$(man1dir) $(D)$(docdir) \
	    $(D)$(systemdunitdir) $(D)$(sysconfdir)/kura $(D)$(sysconfdir)/logrotate.d \
	    $(D)$(SHAREDIR)/daemontools/log $(D)$(SHAREDIR)/daemontools/env
	install -m 755 $(KURAD) $(D)$(sbindir)/kurad
	install -m 755 $(KURACTL) $(D)$(bindir)/kuractl
	install -m 644 $(MAN1) $(D)$(man1dir)/
	install -m 644 $(DOCS) $(D)$(docdir)/
	install -m 644 conf/kurad.conf $(D)$(docdir)/kurad.conf.example
	$(FIXPATHS) $(FIXUSER) conf/kura.service > $(D)$(systemdunitdir)/$(SERVICE_NAME).service
	chmod 644 $(D)$(systemdunitdir)/$(SERVICE_NAME).service
	$(FIXPATHS) conf/kurad.conf | $(FIXVAR) > $(BUILD)/kurad.conf.installed
	[ -e $(D)$(sysconfdir)/kura/kurad.conf ] || \
	    install -m 644 $(BUILD)/kurad.conf.installed $(D)$(sysconfdir)/kura/kurad.conf
	$(FIXVAR) conf/logrotate > $(D)$(sysconfdir)/logrotate.d/$(SERVICE_NAME)
	chmod 644 $(D)$(sysconfdir)/logrotate.d/$(SERVICE_NAME)
	install -m 755 conf/daemontools/run $(D)$(SHAREDIR)/daemontools/run
	install -m 755 conf/daemontools/log/run $(D)$(SHAREDIR)/daemontools/log/run
	for f in conf/daemontools/env/*; do \
	    $(FIXPATHS) "$$f" > $(D)$(SHAREDIR)/daemontools/env/$${f##*/} || exit 1; done

# The load generator and the engine benchmark, for measuring an installed
# machine (docs/benchmarks.md); not part of a server's install.
install-bench: $(BENCH) $(BUILD)/kura-enginebench
	install -d $(D)$(bindir)
	install -m 755 $(BENCH) $(BUILD)/kura-enginebench $(D)$(bindir)/

# Removes what install and install-bench put in place, and the directories
# that are kura's own once empty; the shared ones (bin, man1, ...) stay.
uninstall:
	rm -f $(D)$(sbindir)/kurad $(D)$(bindir)/kuractl $(D)$(bindir)/kura-bench \
	    $(D)$(bindir)/kura-enginebench $(addprefix $(D)$(man1dir)/,$(notdir $(MAN1))) \
	    $(addprefix $(D)$(docdir)/,$(notdir $(DOCS)) kurad.conf.example) \
	    $(D)$(systemdunitdir)/$(SERVICE_NAME).service $(D)$(sysconfdir)/logrotate.d/$(SERVICE_NAME) \
	    $(addprefix $(D)$(SHAREDIR)/daemontools/,run log/run \
	        $(patsubst conf/daemontools/%,%,$(wildcard conf/daemontools/env/*)))
	$(FIXPATHS) conf/kurad.conf | $(FIXVAR) | cmp -s - $(D)$(sysconfdir)/kura/kurad.conf && \
	    rm -f $(D)$(sysconfdir)/kura/kurad.conf || true
	@[ ! -e $(D)$(sysconfdir)/kura/kurad.conf ] || \
	    echo "uninstall: $(D)$(sysconfdir)/kura/kurad.conf was changed since install: kept"
	-rmdir $(addprefix $(D)$(SHAREDIR)/,daemontools/env daemontools/log daemontools) \
	    $(D)$(SHAREDIR) $(D)$(docdir) $(D)$(sysconfdir)/kura 2>/dev/null

# The Debian package, built by dpkg-buildpackage from a copy of the tree
# (what git would not ignore) in build-deb/src: the build runs `make
# distclean` and writes its results into the parent directory, neither of
# which should touch this tree.  The .deb files land in build-deb/.
# Needs the Build-Depends of debian/control and dpkg-dev (devscripts for
# debuild, lintian to check: docs/operations.md).
DEB_DIR   ?= build-deb
DEB_FLAGS ?= -us -uc -b -Jauto
deb:
	rm -rf $(DEB_DIR) && mkdir -p $(DEB_DIR)/src
	tar -cf - --exclude=./.git --exclude=./build --exclude='./build-*' --exclude=./var \
	    --exclude=./config.mk --exclude=./config.log --exclude=./config.status \
	    --exclude=./configure --exclude=./aclocal.m4 --exclude=./autom4te.cache \
	    --exclude=./bench/results --exclude=__pycache__ . | tar -xf - -C $(DEB_DIR)/src
	cd $(DEB_DIR)/src && dpkg-buildpackage $(DEB_FLAGS)
	@ls -l $(DEB_DIR)/*.deb

# make deb, then the package's checks in tests/integration/test_package.py
# (file list, control data, maintainer scripts, hardening-check, lintian,
# the packaged kurad serving), which plain `make test` skips.
test-deb: deb programs
	KURA_DEB_DIR=$(CURDIR)/$(DEB_DIR) KURA_BUILD=$(BUILD) /usr/bin/python3 tests/run test_package

# The README's two quick-start commands on a new machine: a fresh minimal
# Debian 12 chroot (debootstrap), then only those lines, as root
# (tests/fresh/run says how; about half an hour, most of it apt and make
# test).  Not part of make test.  Where it cannot run (not root, no
# debootstrap) the script exits 77 with its reason, which is no failure
# here; KEEP=1 keeps the chroot.
test-fresh:
	tests/fresh/run || { rc=$$?; [ $$rc = 77 ] || exit $$rc; }

clean:
	rm -rf build build-test build-asan build-tsan build-deb build-fuzz

distclean: clean
	rm -rf config.mk config.log config.status autom4te.cache

-include $(shell find $(BUILD) -name '*.d' 2>/dev/null)
