#!/usr/bin/python3
"""test_daemon.py - kurad run as a real daemon (issue 5).

Covers: -dmn start and stop with a pid file (the parent returns only once
the daemon listens; a live kurad's pid file refuses a second start; a stale
one is replaced); failed starts (port taken, bad option, bad database name,
unwritable log or pid file) return non-zero with the reason on stderr;
root without -u runs as root with one WARNING (the 2009 ttserver install
guide's line starts as is), -u drops to another user; SIGHUP reopens a log
file that was moved; SIGTERM under load and with stuck clients exits 0 in
bounded time (with every acknowledged write back after a restart, for a
persistent database); -conf with the command line overriding it, and the
shipped conf/kurad.conf; the sd_notify messages; `systemd-analyze verify`
of conf/kura.service; kurad under daemontools' supervise (killed,
restarted, stopped with svc -d); the man page.  `make install` is
test_package.py's.

Environment: KURA_BUILD (the build dir holding kurad; tests/run sets it),
KURA_DB (as in tests/lib/kuratest.py: "cache", the default, "hash" for a
hash file in the test's temp dir, "tree" for a B+ tree there, or a database
name where %t is the temp
dir) picks the database of the SIGTERM-under-load test; with the cache the
restart check of acknowledged writes is skipped, since nothing survives.
KURA_TEST_DEADLINE_SCALE multiplies every deadline (sanitizer builds).

Standard library only; TAP lines on stdout; exit status 1 if a test failed.
No fixed sleeps: everything is polled against a deadline.
"""
import ctypes, os, pwd, re, shutil, signal, socket, subprocess, sys, threading, time

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "lib"))
from kuratest import Skip, free_port, missing, not_applicable, run_functions  # noqa: E402

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
BUILD = os.environ.get("KURA_BUILD") or os.path.join(ROOT, "build-test")
BUILD = BUILD if os.path.isabs(BUILD) else os.path.join(ROOT, BUILD)
KURAD = os.path.join(BUILD, "kurad")
SCALE = float(os.environ.get("KURA_TEST_DEADLINE_SCALE", "1"))
IS_ROOT = os.geteuid() == 0
# The test suite runs as root in CI: -u root keeps root without the warning.
USER = ["-u", "root"] if IS_ROOT else []
ROOT_WARNING = "WARNING running as root (no -u USER)"
# the same as kuratest.SANITIZER_RE (ThreadSanitizer included)
SANITIZER_RE = re.compile(r"ERROR: AddressSanitizer|ERROR: LeakSanitizer|runtime error:|"
                          r"ERROR: ThreadSanitizer|WARNING: ThreadSanitizer|"
                          r"SUMMARY: UndefinedBehaviorSanitizer")

# Become a child subreaper: a -dmn daemon, orphaned when its parent exits,
# is then reparented to this process, which can wait for it and read its
# exit status.
PR_SET_CHILD_SUBREAPER = 36
try:
    ctypes.CDLL(None, use_errno=True).prctl(PR_SET_CHILD_SUBREAPER, 1, 0, 0, 0)
    SUBREAPER = True
except Exception:
    SUBREAPER = False


def deadline(seconds):
    return time.monotonic() + seconds * SCALE


def wait_until(pred, seconds, what):
    end = deadline(seconds)
    delay = 0.005
    while True:
        v = pred()
        if v:
            return v
        if time.monotonic() > end:
            raise AssertionError("timed out after %ss waiting for %s" % (seconds * SCALE, what))
        time.sleep(delay)
        delay = min(delay * 2, 0.1)




def connects(port):
    try:
        socket.create_connection(("127.0.0.1", port), timeout=1).close()
        return True
    except OSError:
        return False


def pid_alive(pid):
    """Alive and not a zombie."""
    try:
        with open("/proc/%d/stat" % pid) as f:
            return f.read().rsplit(")", 1)[1].split()[0] != "Z"
    except OSError:
        return False


def read(path):
    try:
        with open(path, "rb") as f:
            return f.read().decode("utf-8", "replace")
    except OSError:
        return ""


def write(path, text):
    with open(path, "w") as f:
        f.write(text)


class Client:
    """A raw memcached text-protocol client."""

    def __init__(self, port, timeout=10):
        self.s = socket.create_connection(("127.0.0.1", port), timeout=timeout * SCALE)
        self.buf = b""

    def line(self):
        while b"\r\n" not in self.buf:
            d = self.s.recv(65536)
            if not d:
                raise EOFError("connection closed")
            self.buf += d
        l, self.buf = self.buf.split(b"\r\n", 1)
        return l

    def cmd(self, data):
        self.s.sendall(data)
        return self.line()

    def set(self, key, value):
        return self.cmd(b"set %s 0 0 %d\r\n%s\r\n" % (key, len(value), value))

    def get(self, key):
        self.s.sendall(b"get %s\r\n" % key)
        l = self.line()
        if l == b"END":
            return None
        n = int(l.split()[3])
        while len(self.buf) < n + 2:
            d = self.s.recv(65536)
            if not d:
                raise EOFError("connection closed")
            self.buf += d
        v, self.buf = self.buf[:n], self.buf[n + 2:]
        assert self.line() == b"END"
        return v

    def close(self):
        self.s.close()


def run(args, cwd, timeout=20, env=None):
    """Runs kurad (or anything) to completion; returns (status, stderr)."""
    p = subprocess.run(args, cwd=cwd, stdin=subprocess.DEVNULL, stdout=subprocess.PIPE,
                       stderr=subprocess.PIPE, timeout=timeout * SCALE, env=env)
    out = (p.stdout + p.stderr).decode("utf-8", "replace")
    assert not SANITIZER_RE.search(out), "sanitizer output from %s:\n%s" % (args, out[-4000:])
    return p.returncode, out


def start_daemon(tmp, extra, pidfile="k.pid", log="k.log"):
    """kurad -dmn on a free port; returns (port, pid).  Retries a port that a
    parallel test took between probe and bind."""
    for _ in range(5):
        port = free_port()
        args = [KURAD, "-dmn", "-port", str(port)] + USER + extra
        if pidfile:
            args += ["-pid", pidfile]
        if log:
            args += ["-log", log]
        rc, err = run(args, tmp)
        if rc == 0:
            # The parent returns only once the daemon listens: no waiting here.
            assert connects(port), "kurad -dmn returned 0 but nothing listens on %d" % port
            pid = int(read(os.path.join(tmp, pidfile)).strip()) if pidfile else None
            return port, pid
        if "in use" not in err:
            raise AssertionError("kurad -dmn failed (%d): %s" % (rc, err))
    raise AssertionError("no free port found")


def stop_daemon(pid, timeout=20):
    """SIGTERM; returns the exit status (if this process reaped it) or None."""
    os.kill(pid, signal.SIGTERM)
    if SUBREAPER:
        end = deadline(timeout)
        while time.monotonic() < end:
            try:
                got, st = os.waitpid(pid, os.WNOHANG)
            except ChildProcessError:
                break
            if got == pid:
                return os.waitstatus_to_exitcode(st)
            time.sleep(0.01)
    wait_until(lambda: not pid_alive(pid), timeout, "pid %d to exit" % pid)
    return None


def check_log_clean(path):
    text = read(path)
    assert not SANITIZER_RE.search(text), "sanitizer output in %s:\n%s" % (path, text[-4000:])


def db_name(tmp):
    """The database for tests that care about durability (see KURA_DB)."""
    kdb = os.environ.get("KURA_DB", "cache")
    if kdb in ("", "cache"):
        return "*"
    if kdb == "hash":
        return os.path.join(tmp, "data.kh")
    if kdb == "tree":
        return os.path.join(tmp, "data.kb")
    return kdb.replace("%t", tmp)


def persistent(db):
    return not (db.startswith("*") or db.startswith(":"))


# ---------------------------------------------------------------- the tests

def test_dmn_pidfile(tmp):
    port, pid = start_daemon(tmp, ["-v"])
    assert pid_alive(pid)
    assert read("/proc/%d/comm" % pid).strip() == "kurad"
    assert os.readlink("/proc/%d/cwd" % pid) == "/", "the daemon should chdir to /"
    c = Client(port)
    assert c.set(b"k", b"v") == b"STORED"
    assert c.get(b"k") == b"v"
    c.close()
    # A second kurad on the same pid file is refused, with the reason.
    rc, err = run([KURAD, "-dmn", "-port", str(free_port()), "-pid", "k.pid"] + USER, tmp)
    assert rc != 0 and "already running as pid %d" % pid in err, (rc, err)
    assert read(os.path.join(tmp, "k.pid")).strip() == str(pid), "pid file changed"
    # ... also in the foreground.
    rc, err = run([KURAD, "-port", str(free_port()), "-pid", "k.pid"] + USER, tmp)
    assert rc != 0 and "already running" in err, (rc, err)
    st = stop_daemon(pid)
    assert st in (0, None), "exit status %s after SIGTERM" % st
    assert not os.path.exists(os.path.join(tmp, "k.pid")), "pid file left behind"
    log = read(os.path.join(tmp, "k.log"))
    assert "listening" in log and "stopped" in log, log
    check_log_clean(os.path.join(tmp, "k.log"))


def test_stale_pidfile(tmp):
    # A pid that is gone, then one that is alive but not kurad (this test).
    dead = subprocess.Popen(["true"])
    dead.wait()
    for stale in (dead.pid, os.getpid()):
        write(os.path.join(tmp, "k.pid"), "%d\n" % stale)
        port, pid = start_daemon(tmp, [])
        assert pid != stale
        assert stop_daemon(pid) in (0, None)
        assert not os.path.exists(os.path.join(tmp, "k.pid"))
    assert "stale pid file" in read(os.path.join(tmp, "k.log"))


def test_failed_starts(tmp):
    taken = socket.socket()
    taken.bind(("127.0.0.1", 0))
    taken.listen(1)
    port = taken.getsockname()[1]
    cases = [
        ("port taken", ["-port", str(port)], r"Address already in use"),
        ("bad option", ["-port", str(free_port()), "-bogus"], r"unknown option '-bogus'"),
        ("bad value", ["-port", "x"], r"'x' is not a number"),
        ("bad database name", ["-port", str(free_port()), "data.nosuch"], r"unknown suffix"),
        ("bad database parameter", ["-port", str(free_port()), "*#nosuch=1"],
         r"unknown parameter 'nosuch'"),
        ("unwritable log", ["-port", str(free_port()), "-log", "/nonexistent/dir/k.log"],
         r"cannot open the log file /nonexistent/dir/k.log"),
        ("unwritable pid file", ["-port", str(free_port()), "-pid", "/nonexistent/dir/k.pid"],
         r"cannot open the pid file /nonexistent/dir/k.pid"),
    ]
    try:
        for name, args, reason in cases:
            for mode in (["-dmn"], []):
                rc, err = run([KURAD] + mode + USER + args + ["-pid", "f.pid"] *
                              ("-pid" not in args), tmp)
                assert rc != 0, "%s %s: exit status 0" % (name, mode)
                assert re.search(reason, err), "%s %s: no reason on stderr: %r" % (name, mode, err)
                assert not os.path.exists(os.path.join(tmp, "f.pid")), "%s: pid file left" % name
    finally:
        taken.close()


def test_settings_refused(tmp):
    """Settings that cannot be meant stop kurad with exit status 2 and one
    line naming the problem, before anything is opened; where a corrected
    line exists it is shown to start (so the refusal is the reason)."""
    snaps, ulog = os.path.join(tmp, "snaps"), os.path.join(tmp, "ul")
    cases = [  # refused, the reason, a corrected line that starts (or None)
        (["-m", "0"], r"option '-m': the memory limit cannot be 0", ["-m", "1"]),
        (["-m", "100000000000000"], r"more than 64 bits", ["-m", "1000"]),
        ([""], r"the database name is empty", ["*"]),
        (["-bgsi", "5"], r"option '-bgsi' needs '-bgs'", ["-bgsi", "5", "-bgs", snaps]),
        (["-bgsc", "zlib"], r"option '-bgsc' needs '-bgs'", ["-bgsc", "zlib", "-bgs", snaps]),
        (["-ulim", "1m"], r"option '-ulim' needs '-ulog'", ["-ulim", "1m", "-ulog", ulog]),
        (["-mport", "1"], r"option '-mport' needs '-mhost'", None),
        (["-rw"], r"option '-rw' needs '-mhost'", None),
        (["-rts", os.path.join(tmp, "rts")], r"option '-rts' needs '-mhost'", None),
        (["-syncrepl-timeout", "5"], r"option '-syncrepl-timeout' needs '-syncrepl'", None),
    ]
    for args, reason, fixed in cases:
        rc, err = run([KURAD, "-port", str(free_port())] + USER + args, tmp)
        assert rc == 2 and re.search(reason, err), (args, rc, err)
        assert len(err.strip().splitlines()) == 1, (args, err)
        if fixed:
            p, port = start_foreground(tmp, fixed + ([] if "*" in fixed else ["*"]))
            p.send_signal(signal.SIGTERM)
            assert p.wait(30 * SCALE) == 0, fixed


def test_root_and_user(tmp):
    if not IS_ROOT:
        raise Skip(not_applicable("not root"))
    # Without -u: runs as root, and says so once at WARNING.  The line of
    # ttserver's 2009 install guide, as it was written there.
    os.mkdir(os.path.join(tmp, "ulog"))
    port = free_port()
    rc, err = run([KURAD, "-port", str(port), "-dmn", "-pid", os.path.join(tmp, "ttserver.pid"),
                   "-log", os.path.join(tmp, "ttserver.log"), "-le", "-ulog",
                   os.path.join(tmp, "ulog") + "/", "-ulim", "128m",
                   os.path.join(tmp, "data.tcb#bnum=100000")], tmp)
    assert rc == 0, err
    pid = int(read(os.path.join(tmp, "ttserver.pid")))
    assert connects(port)
    assert re.search(r"^Uid:\s+0\s", read("/proc/%d/status" % pid), re.M)
    log = read(os.path.join(tmp, "ttserver.log"))
    assert log.count(ROOT_WARNING) == 1, log
    assert ROOT_WARNING in err, err                 # seen by whoever started it, too
    assert stop_daemon(pid) in (0, None)
    # the negative: asked for with -u root, no warning
    p, port = start_foreground(tmp, [])
    p.send_signal(signal.SIGTERM)
    assert p.wait(30 * SCALE) == 0
    assert ROOT_WARNING not in read(os.path.join(tmp, "stderr.log"))
    rc, err = run([KURAD, "-port", str(free_port()), "-u", "no-such-user-kura"], tmp)
    assert rc != 0 and "can't find the user no-such-user-kura" in err, (rc, err)
    try:
        nobody = pwd.getpwnam("nobody")
    except KeyError:
        raise Skip(not_applicable("no user nobody to switch to"))
    # Files opened before the switch; the pid file's directory belongs to the
    # user, so the daemon can remove its pid file at exit.
    piddir = os.path.join(tmp, "run")
    os.mkdir(piddir)
    os.chown(piddir, nobody.pw_uid, nobody.pw_gid)
    os.chmod(tmp, 0o755)
    port = free_port()
    rc, err = run([KURAD, "-dmn", "-port", str(port), "-u", "nobody", "-pid", "run/k.pid",
                   "-log", "k.log"], tmp)
    assert rc == 0, err
    pid = int(read(os.path.join(piddir, "k.pid")))
    status = read("/proc/%d/status" % pid)
    uids = re.search(r"^Uid:\s+(\d+)\s+(\d+)\s+(\d+)\s+(\d+)", status, re.M).groups()
    assert all(int(u) == nobody.pw_uid for u in uids), uids
    assert connects(port)
    # The log file was given to the user, who can reopen it on SIGHUP.
    os.kill(pid, signal.SIGHUP)
    wait_until(lambda: "reopened the log file" in read(os.path.join(tmp, "k.log")), 10,
               "the log reopened by nobody")
    assert stop_daemon(pid) in (0, None)
    assert not os.path.exists(os.path.join(piddir, "k.pid")), "pid file left behind"
    assert "running as user nobody" in read(os.path.join(tmp, "k.log"))


def test_sighup_reopens_log(tmp):
    port, pid = start_daemon(tmp, ["-v"])
    try:
        log, old = os.path.join(tmp, "k.log"), os.path.join(tmp, "k.log.1")
        os.rename(log, old)                     # as logrotate does
        os.kill(pid, signal.SIGHUP)
        wait_until(lambda: "reopened the log file" in read(log), 10, "the reopened log")
        # A new event lands in the new file, not the old one.
        Client(port).close()
        wait_until(lambda: "new connection" in read(log), 10, "a connection logged in the new file")
        assert "listening" in read(old) and "listening" not in read(log)
        assert "reopened" not in read(old)
        # SIGHUP without a move: the same file goes on.
        os.kill(pid, signal.SIGHUP)
        wait_until(lambda: read(log).count("reopened the log file") == 2, 10, "second reopen")
        assert pid_alive(pid)
    finally:
        assert stop_daemon(pid) in (0, None)
    check_log_clean(os.path.join(tmp, "k.log"))


def test_signals(tmp):
    """SIGUSR2 and SIGALRM, whose default action kills, are logged and
    ignored; SIGUSR1 stops cleanly as SIGTERM does (memcached's graceful
    stop): exit 0, the pid file removed, a change made before it kept."""
    db = db_name(tmp)
    p, port = start_foreground(tmp, ["-pid", "k.pid", "-log", "k.log", db])
    c = Client(port)
    c.s.sendall(b"set kept 0 0 2\r\nok\r\n")
    assert c.line() == b"STORED"
    for sig, name in ((signal.SIGUSR2, "User defined signal 2"), (signal.SIGALRM, "Alarm clock")):
        os.kill(p.pid, sig)
        wait_until(lambda: "(%s) ignored" % name in read(os.path.join(tmp, "k.log")), 10,
                   "%s logged" % name)
        c.s.sendall(b"get kept\r\n")
        assert c.line() == b"VALUE kept 0 2" and c.line() == b"ok" and c.line() == b"END"
    c.close()
    assert p.poll() is None, "kurad died of an ignored signal"
    os.kill(p.pid, signal.SIGUSR1)
    assert p.wait(30 * SCALE) == 0
    assert not os.path.exists(os.path.join(tmp, "k.pid")), "pid file left behind"
    log = read(os.path.join(tmp, "k.log"))
    assert "stopping" in log and "stopped" in log, log
    if db == "*":
        return                                  # the cache keeps nothing across a stop
    p, port = start_foreground(tmp, [db])
    c = Client(port)
    c.s.sendall(b"get kept\r\n")
    assert c.line() == b"VALUE kept 0 2"
    c.close()
    p.send_signal(signal.SIGTERM)
    assert p.wait(30 * SCALE) == 0


def malloc_heaps(pid):
    """glibc's malloc arenas other than the main one in process pid: each
    is a heap of 64 MiB of address space aligned on 64 MiB (the part in use
    read-write, the rest reserved with no access), which /proc/PID/maps
    shows as anonymous mappings."""
    heap = 64 << 20
    maps = []
    with open("/proc/%d/maps" % pid) as f:
        for line in f:
            parts = line.split()
            lo, hi = (int(x, 16) for x in parts[0].split("-"))
            maps.append((lo, hi, parts[1], len(parts) > 5))
    n = 0
    for i, (lo, hi, perm, named) in enumerate(maps):
        if named or perm != "rw-p" or lo % heap:
            continue
        end = hi
        if i + 1 < len(maps) and maps[i + 1][0] == hi and \
                maps[i + 1][2] == "---p" and not maps[i + 1][3]:
            end = maps[i + 1][1]
        n += end - lo == heap
    return n


def test_one_malloc_arena_for_the_cache(tmp):
    """Serving the cache, kurad keeps to one malloc arena (so memory stays
    at -m plus a fixed overhead), which mallopt can only give before any
    thread exists: with four workers and a replica's thread (-rw, so
    that it takes writes) all allocating, no arena but the main one
    exists.  Negative check: the
    hash file, which does not ask for one arena, under the same traffic
    has arenas of its threads' own, so the count does see them."""
    with open(KURAD, "rb") as f:
        exe = f.read()
    if b"__asan_init" in exe or b"__tsan_init" in exe:
        raise Skip(not_applicable("a sanitizer's allocator has no glibc arenas"))
    counts = {}
    for name, db in (("cache", "*"), ("hash", os.path.join(tmp, "a.kh"))):
        p, port = start_foreground(tmp, ["-th", "4", "-mhost", "127.0.0.1", "-mport",
                                         str(free_port()), "-rw", "-ulog",
                                         os.path.join(tmp, name + ".ul"), db])
        try:
            clients = [Client(port) for _ in range(8)]
            for i, c in enumerate(clients * 4):
                assert c.set(b"k%d" % i, b"v" * (100 + 50 * i)) == b"STORED"
            for c in clients:
                c.close()
            counts[name] = malloc_heaps(p.pid)
        finally:
            p.send_signal(signal.SIGTERM)
            p.wait(30 * SCALE)
    assert counts["cache"] == 0 and counts["hash"] >= 1, counts


def start_foreground(tmp, extra, env=None):
    for _ in range(5):
        port = free_port()
        err = open(os.path.join(tmp, "stderr.log"), "ab")
        p = subprocess.Popen([KURAD, "-port", str(port)] + USER + extra, cwd=tmp,
                             stdin=subprocess.DEVNULL, stdout=err, stderr=err, env=env)
        err.close()
        wait_until(lambda: p.poll() is not None or connects(port), 20, "kurad to listen")
        if p.poll() is None:
            return p, port
        if "in use" not in read(os.path.join(tmp, "stderr.log")):
            raise AssertionError("kurad exited: " + read(os.path.join(tmp, "stderr.log")))
    raise AssertionError("no free port found")


def test_sigterm_under_load(tmp):
    db = db_name(tmp)
    p, port = start_foreground(tmp, ["-th", "2", db])
    acked = {}                                  # key -> value, only once STORED was read
    lock = threading.Lock()
    stop = threading.Event()

    def writer(n):
        try:
            c = Client(port)
            i = 0
            while not stop.is_set():
                k, v = b"w%d-%d" % (n, i), b"value-%d-%d" % (n, i) * 3
                if c.set(k, v) != b"STORED":
                    break
                with lock:
                    acked[k] = v
                i += 1
        except (OSError, EOFError):
            pass                                # the server went away: expected

    # Stuck clients must not hold the stop up: one sent half a request, one
    # pipelines gets and never reads the replies.
    half = socket.create_connection(("127.0.0.1", port))
    half.sendall(b"set half 0 0 100\r\n0123456789")
    deaf = socket.create_connection(("127.0.0.1", port))
    deaf.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, 4096)
    threads = [threading.Thread(target=writer, args=(n,), daemon=True) for n in range(4)]
    for t in threads:
        t.start()
    Client(port).set(b"big", b"x" * 500000)
    deaf.setblocking(False)
    sent = 0
    try:
        while sent < 8 << 20:
            sent += deaf.send(b"get big\r\n" * 1000)
    except BlockingIOError:
        pass                                    # its buffers are full: it is stuck
    wait_until(lambda: len(acked) >= 2000, 30, "2000 acknowledged writes")
    p.send_signal(signal.SIGTERM)
    try:
        rc = p.wait(30 * SCALE)
    except subprocess.TimeoutExpired:
        p.kill()
        raise AssertionError("kurad did not exit within 30 s of SIGTERM under load")
    stop.set()
    for t in threads:
        t.join(10)
    half.close()
    deaf.close()
    err = read(os.path.join(tmp, "stderr.log"))
    assert rc == 0, "exit status %s after SIGTERM: %s" % (rc, err[-2000:])
    assert "stopped" in err and not SANITIZER_RE.search(err), err[-4000:]
    if not persistent(db):
        print("# database %s is the cache: acknowledged writes not checked after restart"
              " (set KURA_DB=hash once the hash file backend exists)" % db)
        return
    p, port = start_foreground(tmp, [db])
    try:
        c = Client(port)
        missing = [k for k, v in sorted(acked.items()) if c.get(k) != v]
        c.close()
        assert not missing, "%d of %d acknowledged writes lost, e.g. %r" % (
            len(missing), len(acked), missing[:5])
    finally:
        p.send_signal(signal.SIGTERM)
        assert p.wait(30 * SCALE) == 0


def test_conf_file(tmp):
    conf_port, cmd_port = free_port(), free_port()
    write(os.path.join(tmp, "k.conf"),
          "# a comment\n\n"
          "port %d   # trailing comment\n"
          "-th 2\n"
          "database *#capsiz=16m\n"
          "recover no\n"
          "pid k.pid\n" % conf_port)
    # The command line overrides the file's port.
    rc, err = run([KURAD, "-conf", "k.conf", "-dmn", "-port", str(cmd_port), "-log", "k.log"]
                  + USER, tmp)
    assert rc == 0, err
    pid = int(read(os.path.join(tmp, "k.pid")))
    assert connects(cmd_port) and not connects(conf_port)
    c = Client(cmd_port)
    c.s.sendall(b"stats settings\r\n")
    lines = []
    while not lines or lines[-1] != b"END":
        lines.append(c.line())
    c.close()
    assert b"STAT num_threads 2" in lines, lines
    assert stop_daemon(pid) in (0, None)
    # Errors name the file and the line.
    for text, reason in (("port 1\nbogus 2\n", r"k2.conf:2: unknown option '-bogus'"),
                         ("th many\n", r"k2.conf:1: option '-th': 'many' is not a number"),
                         ("dmn maybe\n", r"k2.conf:1: option '-dmn' takes no value"),
                         ("conf x\n", r"not allowed in a conf file"),
                         # a NUL would cut the line ("port 1"), garbage is not text
                         ("port 1\0 2\n", r"k2.conf:1: a control byte in the line: 'port 1\\x00 2'"),
                         ("th 2\nport 1\x1b[31m\n", r"k2.conf:2: a control byte.*\\x1b\[31m")):
        write(os.path.join(tmp, "k2.conf"), text)
        rc, err = run([KURAD, "-conf", "k2.conf"] + USER, tmp)
        assert rc == 2 and re.search(reason, err), (text, rc, err)
    rc, err = run([KURAD, "-conf", "no-such.conf"] + USER, tmp)
    assert rc == 2 and "cannot read the conf file no-such.conf" in err, err
    # The shipped example parses; its database is overridden here.
    p, port = start_foreground(tmp, ["-conf", os.path.join(ROOT, "conf", "kurad.conf"), "*"])
    p.send_signal(signal.SIGTERM)
    assert p.wait(30 * SCALE) == 0


def test_sd_notify(tmp):
    for name in (os.path.join(tmp, "notify.sock"), "@kura-test-notify-%d" % os.getpid()):
        s = socket.socket(socket.AF_UNIX, socket.SOCK_DGRAM)
        s.bind(name if name[0] != "@" else "\0" + name[1:])
        s.settimeout(20 * SCALE)
        env = dict(os.environ, NOTIFY_SOCKET=name)
        p, port = start_foreground(tmp, [], env=env)
        try:
            msg = s.recv(4096).decode()
            assert "READY=1" in msg and "MAINPID=%d" % p.pid in msg, msg
            # the default: both loopbacks (127.0.0.1 alone on a host without ::1)
            assert re.search(r"STATUS=listening on 127\.0\.0\.1( and ::1)? port %d," % port,
                             msg), msg
        finally:
            p.send_signal(signal.SIGTERM)
        assert "STOPPING=1" in s.recv(4096).decode()
        assert p.wait(30 * SCALE) == 0
        s.close()


def test_systemd_unit(tmp):
    sa = shutil.which("systemd-analyze")
    if not sa:
        raise Skip(missing("systemd-analyze (apt-get install systemd)"))
    # verify wants the ExecStart binary to exist and the man page it names.
    unit = read(os.path.join(ROOT, "conf", "kura.service"))
    assert "ExecStart=/usr/local/sbin/kurad " in unit
    write(os.path.join(tmp, "kura.service"), unit.replace("/usr/local/sbin/kurad", KURAD))
    os.makedirs(os.path.join(tmp, "man", "man1"))
    shutil.copy(os.path.join(ROOT, "docs", "kurad.1"), os.path.join(tmp, "man", "man1"))
    env = dict(os.environ, MANPATH=os.path.join(tmp, "man"))
    man = [] if shutil.which("man") else ["--man=no"]    # without man-db, skip that check
    rc, out = run([sa, "verify"] + man + [os.path.join(tmp, "kura.service")], tmp, env=env,
                  timeout=60)
    assert rc == 0 and "kura.service" not in out, out


def svstat_pid(service):
    rc, out = run(["svstat", service], "/")
    m = re.search(r": up \(pid (\d+)\)", out)
    return int(m.group(1)) if m else None


def test_daemontools(tmp):
    for tool in ("supervise", "svc", "svstat", "envdir"):
        if not shutil.which(tool):
            raise Skip(missing("%s (apt-get install daemontools)" % tool))
    service = os.path.join(tmp, "service")
    shutil.copytree(os.path.join(ROOT, "conf", "daemontools"), service)
    rc, out = run(["sh", "-n", os.path.join(service, "log", "run")], tmp)
    assert rc == 0, out
    port = free_port()
    write(os.path.join(tmp, "test.conf"), "port %d\nth 2\ndatabase *\n" % port)
    write(os.path.join(service, "env", "KURAD"), KURAD + "\n")
    write(os.path.join(service, "env", "KURA_USER"), pwd.getpwuid(os.geteuid()).pw_name + "\n")
    write(os.path.join(service, "env", "KURA_CONF"), os.path.join(tmp, "test.conf") + "\n")
    out = open(os.path.join(tmp, "supervise.log"), "wb")
    sup = subprocess.Popen(["supervise", service], stdin=subprocess.DEVNULL, stdout=out,
                           stderr=subprocess.STDOUT, start_new_session=True)
    out.close()
    try:
        first = wait_until(lambda: svstat_pid(service), 20, "svstat to say up")
        wait_until(lambda: connects(port), 20, "kurad under supervise to listen")
        os.kill(first, signal.SIGKILL)           # a crash
        second = wait_until(lambda: (svstat_pid(service) or first) != first and
                            svstat_pid(service), 30, "supervise to restart kurad")
        wait_until(lambda: connects(port), 20, "the restarted kurad to listen")
        c = Client(port)
        assert c.set(b"k", b"v") == b"STORED"
        c.close()
        rc, o = run(["svc", "-d", service], tmp)
        assert rc == 0, o
        wait_until(lambda: not pid_alive(second), 30, "svc -d to stop kurad")
        wait_until(lambda: ": down " in run(["svstat", service], "/")[1], 10, "svstat down")
        assert not connects(port)
        log = read(os.path.join(tmp, "supervise.log"))
        assert "stopped" in log and not SANITIZER_RE.search(log), log[-4000:]
    finally:
        run(["svc", "-dx", service], tmp)
        try:
            sup.wait(10 * SCALE)
        except subprocess.TimeoutExpired:
            os.killpg(sup.pid, signal.SIGKILL)
            sup.wait()


def test_man_page(tmp):
    page = os.path.join(ROOT, "docs", "kurad.1")
    text = read(page)
    # Every option of kurad -h is documented.
    rc, usage = run([KURAD, "-h"], tmp)
    assert rc == 0
    names = re.findall(r"^  (-[^ ,]+(?:, -[^ ,]+)*)", usage, re.M)
    for group in names:
        for name in group.split(", "):
            assert "\\" + name in text or name.replace("-", "\\-") in text, \
                "%s is not in docs/kurad.1" % name
    if not shutil.which("groff"):
        raise Skip(missing("groff to render it (apt-get install groff-base)"))
    rc, out = run(["groff", "-man", "-ww", "-z", page], tmp)
    assert rc == 0 and not out.strip(), out


TESTS = [test_dmn_pidfile, test_stale_pidfile, test_failed_starts, test_root_and_user,
         test_settings_refused, test_sighup_reopens_log, test_signals,
         test_one_malloc_arena_for_the_cache,
         test_sigterm_under_load, test_conf_file, test_sd_notify,
         test_systemd_unit, test_daemontools, test_man_page]


def main():
    if not os.access(KURAD, os.X_OK):
        print("not ok 1 - kurad is built (no %s)" % KURAD)
        return 1
    return run_functions(TESTS, "kura-daemon-")


if __name__ == "__main__":
    sys.exit(main())
