# kuratest - the harness shared by tests/integration and tests/clients.
#
#  * Server: starts kurad (default) or memcached (env KURA_SERVER=memcached) on
#    a free TCP port in a fresh temp dir, waits (polling, with a deadline) until
#    the process itself listens and accepts, captures stderr to a file, and on
#    stop() raises AssertionError for an unclean exit or sanitizer output.
#  * Conn: a raw socket client: send bytes, read until a terminator or a whole
#    memcached reply with a deadline, detect a closed connection.
#  * ServerTestCase: a unittest.TestCase that gets a fresh server per test.
#  * main(): runs the calling module's TestCases and prints TAP lines.
#
# Environment:
#   KURA_SERVER   "kurad" (default) or "memcached"
#   KURA_BUILD    build dir holding kurad (tests/run sets an absolute path;
#                 default build-test/, the test tree make test builds)
#   KURA_DB       "cache" (default), "hash" (a data.kh file in the temp dir) or
#                 "tree" (a data.kb B+ tree in the temp dir)
#   KURA_TEST_DEADLINE_SCALE  multiply every deadline (slow sanitizer builds)
#   CI=true or KURA_REQUIRE_ALL=1  a skip for a missing dependency is a failure
#
# Skips carry a kind, written as the start of the reason, so that the runner
# and CI can tell "cannot run here" from "could have run, but something is
# not installed": skip reasons are made with not_applicable(why) or
# missing(what).  A skip reason made any other way counts as a missing
# dependency, so a skip never passes CI by accident.
import atexit, os, re, shutil, signal, socket, subprocess, sys, tempfile, threading, time, traceback
import unittest

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
SCALE = float(os.environ.get("KURA_TEST_DEADLINE_SCALE", "1"))
MEMCACHED = os.environ.get("KURA_MEMCACHED", "/usr/bin/memcached")


def server_kind():
    k = os.environ.get("KURA_SERVER", "kurad").strip() or "kurad"
    if k not in ("kurad", "memcached"):
        raise SystemExit("KURA_SERVER must be kurad or memcached, not %r" % k)
    return k


def is_memcached():
    return server_kind() == "memcached"


def kurad_path():
    build = os.environ.get("KURA_BUILD", "build-test")
    if not os.path.isabs(build):
        build = os.path.join(ROOT, build)
    return os.path.join(build, "kurad")


def db_kind():
    """The backend kurad runs on in this test run (KURA_DB): cache or hash."""
    return "memcached" if is_memcached() else (os.environ.get("KURA_DB", "cache") or "cache")


NOT_APPLICABLE = "not applicable"
MISSING = "missing dependency"


def require_all():
    """True when every dependency must be there (CI): a missing-dependency
    skip is then reported as a failure.  tests/run and unit.h test the
    same two variables."""
    return os.environ.get("CI") == "true" or os.environ.get("KURA_REQUIRE_ALL") == "1"


def sanitized():
    """kurad built with AddressSanitizer or ThreadSanitizer: its heap and
    resident size are not glibc's (ASan's quarantine keeps freed memory
    resident, TSan's shadow grows with what it sees)."""
    try:
        with open(kurad_path(), "rb") as f:
            exe = f.read()
        return b"__asan_init" in exe or b"__tsan_init" in exe
    except OSError:
        return False


def not_applicable(why):
    """Skip reason for a test that cannot apply to this run (a kura-only test
    against memcached, a cache-only one on the hash file, root-only as a
    user): never a failure."""
    return "%s: %s" % (NOT_APPLICABLE, why)


def missing(what):
    """Skip reason for a test that could run if `what` were installed (say
    which package brings it): a failure under CI=true or KURA_REQUIRE_ALL=1."""
    return "%s: %s" % (MISSING, what)


def skip_line(n, name, reason):
    """(TAP line, failed) for a skipped test: "ok N - name # SKIP reason",
    or "not ok" when the reason is not "not applicable" and every
    dependency is required.  Shared by every TAP writer of the suite."""
    if require_all() and not reason.startswith(NOT_APPLICABLE + ":"):
        return ("not ok %d - %s # required, but skipped: %s "
                "(CI=true or KURA_REQUIRE_ALL=1)" % (n, name, reason)), True
    return "ok %d - %s # SKIP %s" % (n, name, reason), False


def cache_only(f):
    """Decorator: behaviour of an in-memory cache (eviction, memory limits)."""
    return unittest.skipIf(db_kind() not in ("memcached", "cache"),
                           not_applicable("in-memory cache behaviour"))(f)


def kura_only(f):
    """Decorator: a kurad-only test; skipped when KURA_SERVER=memcached."""
    return unittest.skipIf(is_memcached(), not_applicable("kurad-only behaviour"))(f)


def deadline(seconds):
    return time.monotonic() + seconds * SCALE


class ServerError(AssertionError):
    pass


_reapers = []   # (Server, Thread) for servers whose stop finishes in the background
_servers = []   # every Server made, for _tidy at exit


def _tidy():
    """At exit: a server still running is killed, and the temp dir of every
    server whose stop found nothing wrong is removed.  A server killed by
    its test (kill9, then never stopped cleanly) would otherwise leave its
    dir behind, an update log's 256 MB segment included: hundreds of them
    fill a disk over a few runs of the suites.  The dir of a server whose
    stop reported a problem is kept for a look (the failure says where)."""
    for srv in _servers:
        if srv.proc is not None and srv.proc.poll() is None:
            _kill(srv.proc)
        if not getattr(srv, "problems", None):
            shutil.rmtree(srv.tmpdir, ignore_errors=True)


atexit.register(_tidy)


SANITIZER_RE = re.compile(r"ERROR: AddressSanitizer|ERROR: LeakSanitizer|runtime error:|"
                          r"ERROR: ThreadSanitizer|WARNING: ThreadSanitizer|SUMMARY: UndefinedBehaviorSanitizer")


def _listening_inodes(port, state="0A"):
    """Inodes of the sockets in LISTEN state (or another: "01" is
    ESTABLISHED) on 127.0.0.1/any:port."""
    inodes = set()
    for path in ("/proc/net/tcp", "/proc/net/tcp6"):
        try:
            with open(path) as f:
                next(f)
                for line in f:
                    parts = line.split()
                    local, st, inode = parts[1], parts[3], parts[9]
                    if st == state and int(local.rsplit(":", 1)[1], 16) == port:
                        inodes.add(inode)
        except OSError:
            pass
    return inodes


def _pid_sockets(pid):
    """Inodes of the sockets process pid has open."""
    out = set()
    try:
        for fd in os.listdir("/proc/%d/fd" % pid):
            try:
                link = os.readlink("/proc/%d/fd/%s" % (pid, fd))
            except OSError:
                continue
            if link.startswith("socket:["):
                out.add(link[8:-1])
    except OSError:
        pass
    return out


def _pid_has_socket(pid, inodes):
    return bool(_pid_sockets(pid) & inodes)


def accepted_sockets(pid, port):
    """How many connections process pid has accepted on its port `port`
    and not closed (sockets of its in ESTABLISHED state on that port)."""
    return len(_pid_sockets(pid) & _listening_inodes(port, state="01"))


def _owns_listener(pid, port):
    """True if the server process, or a process of its process group (a
    wrapper script may have started it), listens on port."""
    inodes = _listening_inodes(port)
    if not inodes:
        return False
    if _pid_has_socket(pid, inodes):
        return True
    for d in os.listdir("/proc"):
        if d.isdigit() and int(d) != pid:
            try:
                with open("/proc/%s/stat" % d) as f:
                    pgrp = int(f.read().rsplit(")", 1)[1].split()[2])
            except (OSError, ValueError, IndexError):
                continue
            if pgrp == pid and _pid_has_socket(int(d), inodes):
                return True
    return False


def preload(case, name, **extra):
    """The environment that preloads tests/shim/NAME.c's library (make
    builds it) into a server, with extra variables; skips case (a missing
    dependency) when it is not built."""
    shim = os.path.join(os.environ.get("KURA_BUILD", "build-test"), "tests", "lib%s.so" % name)
    if not os.path.exists(shim):
        case.skipTest(missing("%s (make builds it)" % shim))
    return dict(extra, LD_PRELOAD=os.path.abspath(shim),
                ASAN_OPTIONS=os.environ.get("ASAN_OPTIONS", "") + ":verify_asan_link_order=0")


def free_port():
    s = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
    s.bind(("127.0.0.1", 0))
    port = s.getsockname()[1]
    s.close()
    return port


class Server:
    """One server process on a free port in its own temp dir.

    Memcached-style options map to both servers:
      memory_mb (-m), item_max (-I, e.g. '2m'), conns (-c), threads (-t/-th),
      verbose (-v).  kura-only: idle_timeout (-tout), db (database name; '%t'
      is replaced by the temp dir), kura_args.  memcached-only: mc_args.
    kind: None = KURA_SERVER; or 'kurad' / 'memcached' explicitly.
    nofile: (soft, hard) RLIMIT_NOFILE the server starts under.
    env: variables added to the server's environment (e.g. LD_PRELOAD).
    host: the address it listens on (-host / -l), 127.0.0.1 by default;
      None gives none, so kurad listens where it does by default (its
      `addresses()` then say where).  Clients use `self.host`, the first
      address the server listens on, never a name that may resolve to
      another address ("localhost" is ::1 first on a stock Debian).
    """

    def __init__(self, kind=None, memory_mb=None, item_max=None, conns=None, threads=4,
                 verbose=False, db=None, idle_timeout=None, kura_args=(), mc_args=(),
                 start=True, start_timeout=10, nofile=None, env=None, port=None,
                 host="127.0.0.1"):
        self.nofile = nofile
        self.listen_host = host
        self.host = host or "127.0.0.1"    # kurad's default includes it
        self.fixed_port = port          # listen here (a restart on the same port)
        self.env = dict(os.environ, **env) if env else None
        self.kind = kind or server_kind()
        self.memory_mb, self.item_max, self.conns = memory_mb, item_max, conns
        self.threads, self.verbose, self.idle_timeout = threads, verbose, idle_timeout
        self.kura_args, self.mc_args = list(kura_args), list(mc_args)
        self.start_timeout = start_timeout
        self.tmpdir = tempfile.mkdtemp(prefix="kuratest-%s-" % self.kind)
        _servers.append(self)
        if db is None and self.kind == "kurad":
            kdb = os.environ.get("KURA_DB", "cache")
            if kdb == "hash":
                db = os.path.join(self.tmpdir, "data.kh")
            elif kdb == "tree":
                db = os.path.join(self.tmpdir, "data.kb")
            elif kdb not in ("cache", ""):
                db = kdb.replace("%t", self.tmpdir)
        elif db is not None:
            db = db.replace("%t", self.tmpdir)
        self.db = db
        self.proc = None
        self.port = None
        self.stderr_path = os.path.join(self.tmpdir, "stderr.log")
        self.stdout_path = os.path.join(self.tmpdir, "stdout.log")
        self._stopped = False
        if start:
            self.start()

    # -- command line --------------------------------------------------
    def argv(self, port):
        user = ["-u", "root"] if os.geteuid() == 0 else []
        if self.kind == "memcached":
            a = [MEMCACHED, "-U", "0"] + (["-l", self.listen_host] if self.listen_host else []) + \
                ["-p", str(port), "-t", str(self.threads)] + user
        else:
            a = [kurad_path()] + (["-host", self.listen_host] if self.listen_host else []) + \
                ["-port", str(port), "-th", str(self.threads)] + user
        if self.memory_mb is not None:
            a += ["-m", str(self.memory_mb)]
        if self.item_max is not None:
            a += ["-I", str(self.item_max)]
        if self.conns is not None:
            a += ["-c", str(self.conns)]
        if self.verbose:
            a += ["-v"]
        if self.kind == "memcached":
            a += self.mc_args
        else:
            if self.idle_timeout is not None:
                a += ["-tout", str(self.idle_timeout)]
            a += self.kura_args
            if self.db:
                a += [self.db]
        return a

    # -- life cycle ----------------------------------------------------
    def start(self):
        if self.kind == "kurad" and not os.access(kurad_path(), os.X_OK):
            raise ServerError("no kurad at %s (build it, or set KURA_SERVER=memcached)" % kurad_path())
        last = ""
        for attempt in range(8):
            port = self.fixed_port or free_port()
            err = open(self.stderr_path, "ab")
            out = open(self.stdout_path, "ab")
            self.argv_used = self.argv(port)
            pre = None
            if self.nofile:
                import resource
                pre = lambda: resource.setrlimit(resource.RLIMIT_NOFILE, self.nofile)
            proc = subprocess.Popen(self.argv_used, cwd=self.tmpdir, stdin=subprocess.DEVNULL,
                                    stdout=out, stderr=err, start_new_session=True,
                                    preexec_fn=pre, env=self.env)
            err.close(); out.close()
            status = self._wait_ready(proc, port)
            if status == "ready":
                self.proc, self.port = proc, port
                return self
            if status == "timeout":
                _kill(proc)
                raise ServerError("server did not listen on port %d within %ss: %s\n%s"
                                  % (port, self.start_timeout, " ".join(self.argv_used), self.stderr()))
            last = self.stderr()
            if not re.search(r"in use|EADDRINUSE|bind|listen", last, re.I):
                raise ServerError("server exited at start (status %s): %s\n%s"
                                  % (proc.returncode, " ".join(self.argv_used), last))
            # port collision with a parallel test: try another port
        raise ServerError("could not find a free port: %s" % last)

    def _wait_ready(self, proc, port):
        end = deadline(self.start_timeout)
        delay = 0.002
        while time.monotonic() < end:
            if proc.poll() is not None:
                return "exited"
            if _owns_listener(proc.pid, port):
                try:
                    s = socket.create_connection((self.host, port), timeout=1)
                    s.close()
                    return "ready"
                except OSError:
                    pass
            time.sleep(delay)
            delay = min(delay * 2, 0.05)
        return "timeout"

    def stderr(self):
        try:
            with open(self.stderr_path, "rb") as f:
                return f.read().decode("utf-8", "replace")
        except OSError:
            return ""

    def alive(self):
        return self.proc is not None and self.proc.poll() is None

    def stop(self, check=True, timeout=10, status=0):
        """SIGTERM, wait with a deadline, SIGKILL.  With check, raise
        ServerError on an exit status other than `status` (kurad exits 1
        when it could not sync at the stop) or sanitizer output in stderr.

        memcached (the reference) acts on signals only from its once-a-second
        clock tick, so waiting for it would cost ~1 s per test: its stop is
        finished by a background reaper thread, and main() reports a bad
        memcached exit as a failed test line of its own."""
        if self._stopped or self.proc is None:
            return
        self._stopped = True
        if self.proc.poll() is None:
            self.proc.send_signal(signal.SIGTERM)
        if self.kind == "memcached":
            t = threading.Thread(target=self._finish_stop, args=(False, timeout), daemon=True)
            t.start()
            _reapers.append((self, t))
            return
        self._finish_stop(check, timeout, status)

    def _finish_stop(self, check, timeout, status=0):
        problems = []
        try:
            self.proc.wait(timeout * SCALE)
        except subprocess.TimeoutExpired:
            problems.append("server ignored SIGTERM for %ss; killed" % timeout)
            _kill(self.proc)
        else:
            if self.proc.returncode != status:
                problems.append("server exit status %s, wanted %s (after SIGTERM, or died "
                                "during the test)" % (self.proc.returncode, status))
        err = self.stderr()
        if SANITIZER_RE.search(err):
            problems.append("sanitizer output in stderr")
        self.problems = problems
        if problems:
            msg = "%s (%s)\n--- stderr ---\n%s" % ("; ".join(problems), " ".join(self.argv_used), err[-8000:])
            if check:
                raise ServerError(msg)
            self.problem_text = msg
        else:
            shutil.rmtree(self.tmpdir, ignore_errors=True)

    def kill9(self):
        _kill(self.proc)
        self._stopped = True

    # -- clients -------------------------------------------------------
    def conn(self, timeout=5):
        return Conn(self.port, host=self.host, timeout=timeout)

    def addresses(self):
        """The addresses kurad says it listens on (its "listening on A and
        B port N" line), in its order."""
        m = re.search(r"kurad \S+ listening on (.+?) port %d\b" % self.port, self.stderr())
        return m.group(1).split(" and ") if m else []

    def request(self, data, **kw):
        with self.conn() as c:
            return c.request(data, **kw)

    def __enter__(self):
        return self

    def __exit__(self, et, ev, tb):
        self.stop(check=et is None)

    def __repr__(self):
        return "<Server %s port %s>" % (self.kind, self.port)


def _kill(proc):
    if proc and proc.poll() is None:
        try:
            os.killpg(proc.pid, signal.SIGKILL)
        except OSError:
            proc.kill()
        proc.wait()


class Closed(Exception):
    """The peer closed the connection before the expected reply."""
    def __init__(self, got):
        Exception.__init__(self, "connection closed; got %r" % got[:300])
        self.got = got


class Conn:
    """A raw client connection.  Every read has a deadline (timeout seconds)."""

    def __init__(self, port, host="127.0.0.1", timeout=5):
        self.timeout = timeout * SCALE
        self.sock = socket.create_connection((host, port), timeout=self.timeout)
        self.sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
        self.buf = b""
        self.eof = False

    def close(self):
        if self.sock:
            self.sock.close()
            self.sock = None

    def __enter__(self):
        return self

    def __exit__(self, *a):
        self.close()

    def send(self, data):
        self.sock.sendall(data)

    def _fill(self, end):
        """Read more bytes into buf; False on EOF.  Raises TimeoutError at end."""
        if self.eof:
            return False
        left = end - time.monotonic()
        if left <= 0:
            raise TimeoutError("no reply within deadline; have %r" % self.buf[:300])
        self.sock.settimeout(left)
        try:
            d = self.sock.recv(1 << 20)
        except socket.timeout:
            raise TimeoutError("no reply within deadline; have %r" % self.buf[:300])
        except ConnectionResetError:
            d = b""
        if not d:
            self.eof = True
            return False
        self.buf += d
        return True

    def recv_until(self, term=b"\r\n", timeout=None):
        end = time.monotonic() + (timeout * SCALE if timeout else self.timeout)
        while True:
            i = self.buf.find(term)
            if i >= 0:
                out, self.buf = self.buf[:i + len(term)], self.buf[i + len(term):]
                return out
            if not self._fill(end):
                got, self.buf = self.buf, b""
                raise Closed(got)

    def recv_exact(self, n, timeout=None):
        end = time.monotonic() + (timeout * SCALE if timeout else self.timeout)
        while len(self.buf) < n:
            if not self._fill(end):
                got, self.buf = self.buf, b""
                raise Closed(got)
        out, self.buf = self.buf[:n], self.buf[n:]
        return out

    def line(self, timeout=None):
        return self.recv_until(b"\r\n", timeout)

    def reply(self, timeout=None):
        """One complete memcached text reply: a line, or VALUE blocks up to
        END, or STAT lines up to END, or a meta "VA" line and its value;
        returned as the exact bytes."""
        first = self.line(timeout)
        if first.startswith(b"VALUE "):
            out = first
            cur = first
            while True:
                parts = cur.split()
                n = int(parts[3])
                out += self.recv_exact(n + 2, timeout)
                cur = self.line(timeout)
                out += cur
                if cur == b"END\r\n":
                    return out
                if not cur.startswith(b"VALUE "):
                    return out  # malformed; let the caller compare
        if first.startswith(b"VA "):
            # a meta reply with a value: "VA <n> <flags>\r\n<data>\r\n"
            try:
                n = int(first.split()[1])
            except (IndexError, ValueError):
                return first
            return first + self.recv_exact(n + 2, timeout)
        if first.startswith(b"STAT ") or first.startswith(b"ITEM "):
            out = first
            while True:
                cur = self.line(timeout)
                out += cur
                if cur == b"END\r\n" or not (cur.startswith(b"STAT ") or cur.startswith(b"ITEM ")):
                    return out
        return first

    def request(self, data, replies=1, timeout=None):
        """Send data, return the bytes of `replies` complete replies."""
        self.send(data)
        return b"".join(self.reply(timeout) for _ in range(replies))

    def replies(self, data, timeout=None):
        """Like transcript(), but a list of the separate replies (with
        b"<closed>" as the last element if the server closed)."""
        self.send(data + b"version\r\n")
        out = []
        while True:
            try:
                r = self.reply(timeout)
            except Closed as e:
                if e.got:
                    out.append(e.got)
                out.append(b"<closed>")
                return out
            if r.startswith(b"VERSION "):
                return out
            out.append(r)

    def transcript(self, data, timeout=None):
        """Send data followed by a `version` sentinel; return every reply byte
        before the sentinel's VERSION line (b"<closed>" appended if the server
        closed instead)."""
        self.send(data + b"version\r\n")
        out = b""
        while True:
            try:
                r = self.reply(timeout)
            except Closed as e:
                return out + e.got + b"<closed>"
            if r.startswith(b"VERSION "):
                return out
            out += r

    def read_available(self, timeout=0.2):
        """Whatever arrives within timeout (no error if nothing does)."""
        end = time.monotonic() + timeout * SCALE
        try:
            while self._fill(end):
                pass
        except TimeoutError:
            pass
        got, self.buf = self.buf, b""
        return got

    def read_to_close(self, timeout=None):
        """All bytes until the peer closes; raises TimeoutError if it doesn't."""
        end = time.monotonic() + (timeout * SCALE if timeout else self.timeout)
        while self._fill(end):
            pass
        got, self.buf = self.buf, b""
        return got

    def is_closed(self, timeout=1.0):
        """True if the peer closes within timeout (any pending data is dropped)."""
        end = time.monotonic() + timeout * SCALE
        try:
            while self._fill(end):
                self.buf = b""
        except TimeoutError:
            return False
        return True


def stats(conn, sub=b""):
    """Dict of a `stats [sub]` reply."""
    r = conn.request(b"stats" + (b" " + sub if sub else b"") + b"\r\n")
    d = {}
    for ln in r.split(b"\r\n"):
        p = ln.split(b" ", 2)
        if len(p) == 3 and p[0] == b"STAT":
            d[p[1].decode()] = p[2].decode()
    return d


def rss(server):
    """The server process's resident memory in bytes (VmRSS)."""
    with open("/proc/%d/status" % server.proc.pid) as f:
        for line in f:
            if line.startswith("VmRSS:"):
                return int(line.split()[1]) * 1024
    raise AssertionError("no VmRSS")


def digest(server, n=64):
    """The lines of kura's `digest N` reply (a hash per bucket of keys), to
    compare a master and its replica."""
    with server.conn() as c:
        c.send(b"digest %d\r\n" % n)
        lines = []
        while True:
            ln = c.line()
            if ln == b"END\r\n":
                return lines
            lines.append(ln)


def gets_all(server, keys, timeout=20):
    """{key: (flags, value, cas)} of the keys present, by one gets each."""
    out = {}
    with server.conn(timeout=timeout) as c:
        for k in keys:
            r = c.request(b"gets " + k + b"\r\n")
            if r == b"END\r\n":
                continue
            head, rest = r.split(b"\r\n", 1)
            p = head.split()
            out[k] = (int(p[2]), rest[:int(p[3])], int(p[4]))
    return out


def mount_tmpfs(case, parent, size):
    """A tmpfs of size bytes mounted at parent/mnt for the test case (a
    small disk to fill), unmounted at its cleanup; skips the test as not
    applicable when not root or when mounting is not allowed."""
    if os.geteuid() != 0:
        case.skipTest(not_applicable("needs root to mount a tmpfs"))
    mnt = os.path.join(parent, "mnt")
    os.mkdir(mnt)
    p = subprocess.run(["mount", "-t", "tmpfs", "-o", "size=%d" % size, "tmpfs", mnt],
                       stdout=subprocess.PIPE, stderr=subprocess.STDOUT)
    if p.returncode != 0:
        case.skipTest(not_applicable(
            "cannot mount a tmpfs here: %s" % p.stdout.decode(errors="replace").strip()))
    case.addCleanup(subprocess.run, ["umount", "-l", mnt])
    return mnt


def poll_until(fn, timeout=5.0, interval=0.02, what="condition"):
    """Call fn() until it returns a true value; AssertionError at the deadline."""
    end = deadline(timeout)
    while True:
        v = fn()
        if v:
            return v
        if time.monotonic() >= end:
            raise AssertionError("timed out waiting for %s (last %r)" % (what, v))
        time.sleep(interval)


def early_in_second(room=0.5):
    """Returns once at least `room` seconds of the current wall-clock second
    are left (waiting for the next one if need be).  Servers count time in
    whole seconds: a pipeline that must run within one second ("flush_all
    2" and a get right after it, which a boundary between them would turn
    into a flushed get) starts here.  An alignment to the clock, not a
    synchronisation with anything."""
    frac = time.time() % 1.0
    if frac > 1.0 - room:
        time.sleep(1.0 - frac + 0.001)


def within_one_second(attempt, tries=10):
    """Runs attempt() until one run starts and ends within one wall-clock
    second, and returns that run's result.  kurad reads the wall clock while
    it answers, so a run that did fit saw one second throughout.  A starting
    margin (early_in_second) is not enough on its own: a loaded machine, a
    sanitizer build or a parallel suite can stretch a run past any margin.
    attempt must be safe to repeat.  A server whose clock ticks on a timer
    of its own (memcached) is not covered: see repeat_until_alike."""
    for _ in range(tries):
        early_in_second()
        start = time.time()
        result = attempt()
        if int(time.time()) == int(start):
            return result
    raise AssertionError("none of %d runs fitted within one second" % tries)


def repeat_until_alike(attempt, tries=5):
    """Runs attempt(), which returns a pair of replies (memcached's and
    kurad's to one step), until they are equal or tries runs have been made;
    returns the last pair.  memcached moves its clock on a timer of its own,
    not at the wall clock's seconds, so whether a run straddled one of its
    seconds cannot be measured from outside: a step whose replies depend on
    the second is repeated instead.  attempt must be safe to repeat."""
    for _ in range(tries):
        early_in_second()
        a, b = attempt()
        if a == b:
            break
    return a, b


class ServerTestCase(unittest.TestCase):
    """Each test gets self.server (started with SERVER_OPTS) and self.c, a
    connection to it.  A server that dies or reports sanitizer errors fails
    the test in cleanup."""
    SERVER_OPTS = {}

    def setUp(self):
        self.server = self.start_server(**self.SERVER_OPTS)
        self.c = self.server.conn()
        self.addCleanup(self.c.close)

    def start_server(self, **kw):
        s = Server(**kw)
        self.addCleanup(s.stop)
        return s

    def check_serving(self, server=None):
        """A fresh connection can still set and get."""
        server = server or self.server
        with server.conn() as c:
            key = b"probe_%d" % os.getpid()
            self.assertEqual(c.request(b"set " + key + b" 5 0 2\r\nhi\r\n"), b"STORED\r\n")
            self.assertEqual(c.request(b"get " + key + b"\r\n"),
                             b"VALUE " + key + b" 5 2\r\nhi\r\nEND\r\n")


# -- TAP output ------------------------------------------------------------

class TapResult(unittest.TestResult):
    def __init__(self, stream=sys.stdout):
        unittest.TestResult.__init__(self)
        self.n = 0
        self.stream = stream
        self.t0 = {}

    def _name(self, test):
        return "%s.%s" % (type(test).__name__, test._testMethodName) if hasattr(test, "_testMethodName") else str(test)

    def _out(self, s):
        self.stream.write(s + "\n")
        self.stream.flush()

    def _diag(self, err):
        txt = "".join(traceback.format_exception(*err)) if isinstance(err, tuple) else str(err)
        for ln in txt.rstrip().splitlines():
            self._out("# " + ln)

    def startTest(self, test):
        unittest.TestResult.startTest(self, test)
        self.t0[test] = time.monotonic()
        self._had_sub_fail = False

    def stopTest(self, test):
        unittest.TestResult.stopTest(self, test)
        if os.environ.get("KURA_TEST_TIMES"):
            self._out("# %.2fs %s" % (time.monotonic() - self.t0.get(test, time.monotonic()), self._name(test)))

    def addSuccess(self, test):
        unittest.TestResult.addSuccess(self, test)
        if not getattr(self, "_had_sub_fail", False):
            self.n += 1
            self._out("ok %d - %s" % (self.n, self._name(test)))

    def addFailure(self, test, err):
        unittest.TestResult.addFailure(self, test, err)
        self._diag(self._exc_info_to_string(err, test))
        self.n += 1
        self._out("not ok %d - %s" % (self.n, self._name(test)))

    def addError(self, test, err):
        unittest.TestResult.addError(self, test, err)
        self._diag(self._exc_info_to_string(err, test))
        self.n += 1
        self._out("not ok %d - %s" % (self.n, self._name(test)))

    def addSubTest(self, test, subtest, err):
        unittest.TestResult.addSubTest(self, test, subtest, err)
        if err is not None:
            self._diag(self._exc_info_to_string(err, test))
            self.n += 1
            self._out("not ok %d - %s" % (self.n, subtest.id().split(".", 1)[-1]))
            self._had_sub_fail = True

    def addSkip(self, test, reason):
        self.n += 1
        line, failed = skip_line(self.n, self._name(test), reason)
        if failed:
            # a failure, so that wasSuccessful() and the exit status agree
            self.failures.append((test, line))
        else:
            unittest.TestResult.addSkip(self, test, reason)
        self._out(line)

    def addExpectedFailure(self, test, err):
        unittest.TestResult.addExpectedFailure(self, test, err)
        self.n += 1
        self._out("ok %d - %s # TODO expected failure" % (self.n, self._name(test)))

    def addUnexpectedSuccess(self, test):
        unittest.TestResult.addUnexpectedSuccess(self, test)
        self.n += 1
        self._out("not ok %d - %s # unexpected success" % (self.n, self._name(test)))


class Skip(Exception):
    """Raised by a test function of run_functions() with a reason made by
    missing() or not_applicable(): the kind decides whether CI fails on it."""


def run_functions(tests, prefix):
    """TAP for plain test functions (test_daemon.py, test_package.py): each
    test_NAME(tmp) runs with a fresh temp dir (named PREFIX..., kept and
    named on a failure) and passes unless it raises; Skip skips.  Only those
    whose NAME contains an argument run.  Returns the exit status: 1 if a
    test failed."""
    only = sys.argv[1:]
    failed = 0
    n = 0
    for t in tests:
        name = t.__name__[5:]
        if only and not any(o in name for o in only):
            continue
        n += 1
        tmp = tempfile.mkdtemp(prefix=prefix)
        try:
            t(tmp)
            print("ok %d - %s" % (n, name), flush=True)
            shutil.rmtree(tmp, ignore_errors=True)
        except Skip as e:
            line, bad = skip_line(n, name, str(e))
            failed += bad
            print(line, flush=True)
            shutil.rmtree(tmp, ignore_errors=True)
        except Exception:
            failed += 1
            print("not ok %d - %s" % (n, name))
            for l in traceback.format_exc().splitlines():
                print("# " + l)
            print("# files kept in " + tmp, flush=True)
    print("1..%d" % n)
    return 1 if failed else 0


def main(module="__main__"):
    """Run every TestCase of the module (or those whose name contains an
    argument) and print TAP.  Exit status 1 on any failure."""
    mod = sys.modules[module]
    suite = unittest.defaultTestLoader.loadTestsFromModule(mod)
    want = sys.argv[1:]
    if want:
        def flat(s):
            for t in s:
                if isinstance(t, unittest.TestSuite):
                    yield from flat(t)
                else:
                    yield t
        suite = unittest.TestSuite([t for t in flat(suite) if any(w in t.id() for w in want)])
    res = TapResult()
    t0 = time.monotonic()
    suite.run(res)
    for srv, t in _reapers:
        t.join()
        if getattr(srv, "problems", None):
            res.n += 1
            res.failures.append((None, srv.problem_text))
            res._diag(srv.problem_text)
            res._out("not ok %d - %s server on port %s stopped uncleanly" % (res.n, srv.kind, srv.port))
    print("1..%d" % res.n)
    print("# %d tests, %d failures, %d errors, %d skipped in %.1fs (server: %s)"
          % (res.testsRun, len(res.failures), len(res.errors), len(res.skipped),
             time.monotonic() - t0, server_kind()), flush=True)
    sys.exit(0 if res.wasSuccessful() else 1)
