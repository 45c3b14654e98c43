# ktref - the servers of the Kyoto Tycoon tests: kurad with its -kt
# listener, and ktserver, Kyoto Tycoon 0.9.56's own server, the reference.
#
# Kyoto Tycoon's programs (ktserver, ktremotetest, ktremotemgr) are built
# by hand from their public source (docs/HACKING.md, "Kyoto Tycoon's
# clients") and named by KURA_KT_BIN, the directory holding them and the
# libkyototycoon.so.2 they were linked with; CI has no network to fetch
# that source, so the tests that need them skip as not applicable.
import os, random, signal, socket, subprocess, tempfile, shutil, time
import kuratest

BIN = os.environ.get("KURA_KT_BIN", "")
PROGRAMS = ("ktserver", "ktremotetest", "ktremotemgr")


def why_no_bin():
    """None when KURA_KT_BIN holds Kyoto Tycoon's programs, else the
    reason to skip (not applicable)."""
    if not BIN:
        return kuratest.not_applicable(
            "KURA_KT_BIN is not set: Kyoto Tycoon's ktserver, ktremotetest and ktremotemgr "
            "are built from its source, which CI cannot fetch (docs/HACKING.md)")
    for prog in PROGRAMS:
        if not os.access(os.path.join(BIN, prog), os.X_OK):
            return kuratest.not_applicable("KURA_KT_BIN=%s holds no %s" % (BIN, prog))
    return None


def env():
    """The environment Kyoto Tycoon's programs run in (their library)."""
    return dict(os.environ, LD_LIBRARY_PATH=BIN)


def program(name):
    return os.path.join(BIN, name)


def wait_listening(port, proc, what, host="127.0.0.1", seconds=20):
    """Poll until port accepts (deadline scaled); proc dying or the
    deadline passing raises AssertionError."""
    end = kuratest.deadline(seconds)
    while True:
        try:
            socket.create_connection((host, port), timeout=1).close()
            return
        except OSError:
            if proc is not None and proc.poll() is not None:
                raise AssertionError("%s exited (status %s) before listening on %d"
                                     % (what, proc.returncode, port))
            if time.monotonic() > end:
                raise AssertionError("%s did not listen on %d in time" % (what, port))
            time.sleep(0.02)


def free_port():
    """A free TCP port on 127.0.0.1 below 32768: Kyoto Tycoon's sockets
    (ktserver's, and its clients' connect) refuse a port above INT16_MAX
    as an "invalid address expression", and the kernel's ephemeral ports
    (which kuratest.free_port gets) lie above it."""
    rnd = random.Random()
    for _ in range(200):
        port = rnd.randrange(10000, 32768)
        with socket.socket() as sk:
            try:
                sk.bind(("127.0.0.1", port))
            except OSError:
                continue
            return port
    raise AssertionError("no free port below 32768")


def kt_db(kind):
    """The ktserver database name matching a kura backend (KURA_DB)."""
    return {"tree": "casket.kct", "hash": "casket.kch"}.get(kind, "*")


class KtServer:
    """ktserver on a free port in a temp dir, on db ("casket.kch",
    "casket.kct", "*", relative names inside the temp dir)."""

    def __init__(self, db="casket.kch", threads=4, args=()):
        self.tmpdir = tempfile.mkdtemp(prefix="kuratest-ktserver-")
        self.log = os.path.join(self.tmpdir, "ktserver.log")
        for _ in range(8):
            self.port = free_port()
            argv = [program("ktserver"), "-host", "127.0.0.1", "-port", str(self.port),
                    "-th", str(threads), "-log", self.log, "-ls"] + list(args) + [db]
            self.proc = subprocess.Popen(argv, cwd=self.tmpdir, env=env(),
                                         stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL,
                                         stderr=subprocess.STDOUT, start_new_session=True)
            try:
                wait_listening(self.port, self.proc, "ktserver")
                return
            except AssertionError:
                if self.proc.poll() is None:
                    self.stop()
                    raise
                # a port taken by a parallel test: another one
        raise AssertionError("ktserver did not start: %s" % self.log_text())

    def log_text(self):
        try:
            with open(self.log, errors="replace") as f:
                return f.read()[-4000:]
        except OSError:
            return ""

    def stop(self):
        if self.proc and self.proc.poll() is None:
            self.proc.send_signal(signal.SIGTERM)
            try:
                self.proc.wait(timeout=30 * kuratest.SCALE)
            except subprocess.TimeoutExpired:
                os.killpg(self.proc.pid, signal.SIGKILL)
                self.proc.wait()
        shutil.rmtree(self.tmpdir, ignore_errors=True)


def start_kurad(case, **kw):
    """kurad (KURA_DB's backend) with a -kt listener on a free port, stopped
    at the case's cleanup: (server, kt port)."""
    base = list(kw.pop("kura_args", ()))
    for _ in range(8):
        port = free_port()
        args = base + ["-kt", "127.0.0.1:%d" % port]
        try:
            srv = case.start_server(kura_args=args, **kw)
        except kuratest.ServerError as e:
            if "in use" in str(e) or "EADDRINUSE" in str(e):
                continue
            raise
        wait_listening(port, srv.proc, "kurad's -kt listener")
        return srv, port
    raise AssertionError("no free port for -kt")
