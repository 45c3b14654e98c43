#!/usr/bin/python3
"""test_migration.py - moving from Tokyo Tyrant and Kyoto Tycoon (issue 21,
items 1, 2 and 4; issue 33, items 4 and 5; docs/migration.md).

Covers: command lines written from ttserver 1.1's and ktserver 0.9's
documentation (the install guide's ttserver line first) start kurad and
serve; every Tokyo and Kyoto database parameter is mapped or accepted with
its reason logged (the log lines checked), and those kura refuses (rcomp
other than lex, zcomp=arc, mode=t or r) and the databases it does not serve
(.tct .tcf .kcd .kcf) exit 2 with a line naming them; #capcnt caps the
cache's count (checked against a cache without it); each ttserver and
ktserver option is mapped, noted or refused by name (Lua -ext/-scr, -mul,
-skel refused with exit 2); an unknown multi-letter option is "unknown
option" (not "-m etrics"), while memcached's glued "-p11211" still works;
ktserver's memcached plug-in (-plsv ktplugservmemc.so -plex port=N) is a
second port serving the same data; a ttserver master and replica pair
from Tokyo Tyrant's manual replicate; kuractl import of real files made by
Debian's tchmgr, tcbmgr, kchashmgr and kctreemgr (values read back
through kurad), export back to each kind (read back with the same tools),
Kyoto Tycoon's expiry header and the memcached plug-in's flags (--kt,
--kt-flags; with --kt no the header stays in the value), and the
verification pass catching a record the import left out (a test switch,
KURACTL_TEST_IMPORT_DROP_FIRST, drops one: exit 1, the key named); a
file a running server holds refused at once (exit 3), and a damaged one
(.tch, .tcb, .kch cut short) refused as damaged (exit 4, one line, no word
of a running server); a
ktserver file without its mark judged by its values;
records the database cannot take (long keys in all 8 pairs, the other
reasons) set aside whole in the rejects file, exit 5, the database kept.

The Cabinet tools and libraries are Debian's tokyocabinet-bin,
kyotocabinet-utils, libtokyocabinet-dev and libkyotocabinet-dev: absent,
their tests skip as missing.  Runs once (it picks its own databases).
Standard library only; TAP on stdout; no fixed sleeps.
"""
# kura-test: once
import fcntl, os, re, shutil, signal, socket, subprocess, sys

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "lib"))
from kuratest import SANITIZER_RE, Skip, free_port, missing, poll_until, run_functions  # noqa: E402

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
BUILD = os.environ.get("KURA_BUILD") or os.path.join(ROOT, "build-test")
BUILD = BUILD if os.path.isabs(BUILD) else os.path.join(ROOT, BUILD)
KURAD = os.path.join(BUILD, "kurad")
KURACTL = os.path.join(BUILD, "kuractl")
SCALE = float(os.environ.get("KURA_TEST_DEADLINE_SCALE", "1"))
USER = ["-u", "root"] if os.geteuid() == 0 else []

import time  # noqa: E402


def wait_until(pred, seconds, what):
    return poll_until(pred, timeout=seconds, what=what)


def read(path):
    try:
        with open(path, "rb") as f:
            return f.read().decode("utf-8", "replace")
    except OSError:
        return ""


def run(args, cwd, timeout=60, env=None, input=None):
    p = subprocess.run(args, cwd=cwd, input=input, stdout=subprocess.PIPE,
                       stderr=subprocess.PIPE, timeout=timeout * SCALE, env=env)
    err = p.stderr.decode("utf-8", "replace")
    assert not SANITIZER_RE.search(err), "sanitizer output from %s:\n%s" % (args, err[-4000:])
    return p.returncode, p.stdout.decode("utf-8", "replace"), err


def request(port, data, until=b"END\r\n"):
    with socket.create_connection(("127.0.0.1", port), timeout=10 * SCALE) as s:
        s.sendall(data)
        got = b""
        while not got.endswith(until):
            chunk = s.recv(65536)
            if not chunk:
                break
            got += chunk
        return got


def serves(port, key=b"migr"):
    """A set and a get of it through the memcached text protocol."""
    r = request(port, b"set %s 5 0 3\r\nabc\r\nget %s\r\n" % (key, key))
    assert r == b"STORED\r\nVALUE %s 5 3\r\nabc\r\nEND\r\n" % key, r


def connects(port):
    try:
        socket.create_connection(("127.0.0.1", port), timeout=1).close()
        return True
    except OSError:
        return False


class Kurad:
    """kurad started with a ttserver/ktserver line: the program name
    replaced, every port number of the line swapped for a free one
    (PORT, PORT2 in the line), in the foreground unless -dmn is there."""

    def __init__(self, tmp, line):
        self.tmp = tmp
        self.port, self.port2 = free_port(), free_port()
        self.args = [a.replace("PORT2", str(self.port2)).replace("PORT", str(self.port))
                     .replace("TMP", tmp) for a in line]
        self.log = os.path.join(tmp, "stderr.log")
        self.proc = None
        self.pid = None

    def start(self):
        argv = [KURAD] + USER + self.args[1:]
        if "-dmn" in self.args:
            rc, out, err = run(argv, self.tmp)
            assert rc == 0, (argv, out, err)
            self.pid = int(read(self.pidfile()).strip())
        else:
            err = open(self.log, "ab")
            self.proc = subprocess.Popen(argv, cwd=self.tmp, stdin=subprocess.DEVNULL,
                                         stdout=err, stderr=err)
            err.close()
            self.pid = self.proc.pid
            wait_until(lambda: self.proc.poll() is not None or connects(self.listen_port()), 20,
                       "kurad to listen")
            assert self.proc.poll() is None, (argv, read(self.log))
        return self

    def pidfile(self):
        return self.args[self.args.index("-pid") + 1]

    def listen_port(self):
        return int(self.args[self.args.index("-port") + 1]) if "-port" in self.args else 11211

    def stop(self):
        os.kill(self.pid, signal.SIGTERM)
        if self.proc:
            assert self.proc.wait(30 * SCALE) == 0, read(self.log)
        else:
            wait_until(lambda: not os.path.exists("/proc/%d" % self.pid), 30, "kurad to stop")
        for log in (self.log, os.path.join(self.tmp, "tt.log"), os.path.join(self.tmp, "kt.log")):
            text = read(log)
            assert not SANITIZER_RE.search(text), "sanitizer output in %s:\n%s" % (log, text[-4000:])


def need(*tools):
    for t in tools:
        if not shutil.which(t):
            pkg = "tokyocabinet-bin" if t.startswith("tc") else "kyotocabinet-utils"
            raise Skip(missing("%s (apt-get install %s)" % (t, pkg)))


def need_import(tmp, kind):
    """kuractl built with the library for kind ("Tokyo"/"Kyoto")."""
    rc, out, err = run([KURACTL, "import", "-h"], tmp)
    probe = os.path.join(tmp, "probe.%s" % ("tch" if kind == "Tokyo" else "kch"))
    need("tchmgr" if kind == "Tokyo" else "kchashmgr")
    run(["tchmgr" if kind == "Tokyo" else "kchashmgr", "create", probe], tmp)
    rc, out, err = run([KURACTL, "-q", "import", probe, os.path.join(tmp, "probe.kh")], tmp)
    shutil.rmtree(os.path.join(tmp, "probe.kh"), ignore_errors=True)
    os.unlink(probe)
    if "built without" in err:
        raise Skip(missing("kuractl built with %s Cabinet (apt-get install %s, then make)" % (
            kind, "libtokyocabinet-dev" if kind == "Tokyo" else "libkyotocabinet-dev")))
    assert rc == 0, err


# ---- command lines ------------------------------------------------------------

# Written from ttserver's and ktserver's documentation (their usage, man
# pages and the Tokyo Tyrant manual's examples); PORT is a free port.
LINES = [
    # the install guide's line (its paths under the test's directory)
    ("ttserver -dmn -pid TMP/tt.pid -log TMP/tt.log -le -ulog TMP/ -ulim 128m "
     "TMP/data.tcb#bnum=100000 -port PORT", []),
    ("ttserver -port PORT -thnum 8 -tout 30 -kl -uas "
     "TMP/casket.tch#bnum=1000000#apow=4#fpow=10#opts=ld#rcnum=10000#xmsiz=268435456#dfunit=8",
     ["opts letter 'd' maps to zcomp=zlib", "apow has no effect", "fpow has no effect",
      "rcnum has no effect", "xmsiz maps to msiz", "option '-kl' has no effect without -pid",
      "option '-uas' has no effect"]),
    ("ttserver -host 127.0.0.1 -port PORT TMP/casket.tcb#lmemb=1024#nmemb=2048#bnum=131071"
     "#apow=8#fpow=10#opts=lb#lcnum=4096#ncnum=512#xmsiz=67108864#dfunit=8#mode=wc",
     ["lmemb has no effect", "nmemb has no effect", "bnum has no effect",
      "opts letter 'b' maps to zcomp=bz2", "xmsiz has no effect", "dfunit has no effect",
      "mode=wc has no effect"]),
    ("ttserver -port PORT *#bnum=1000000#capnum=1000000#capsiz=1073741824",
     ["capnum maps to capcnt"]),
    ("ttserver -port PORT +#capnum=100000#capsiz=64m", ["database '+': the in-memory cache"]),
    ("ktserver -host 127.0.0.1 -port PORT -th 16 -log TMP/kt.log -ls -ulog TMP/ulog "
     "-ulim 104857600 -uasi 10 -sid 1 TMP/casket.kch#opts=l#bnum=2000000#msiz=1g#dfunit=8"
     "#log=TMP/db.log#logkinds=debug#logpx=db",
     ["opts letter 'l' has no effect", "option '-uasi' has no effect", "log has no effect",
      "logkinds has no effect", "logpx has no effect"]),
    ("ktserver -port PORT -tout 10 -li -oat -oas -onr -asi 10 -ash "
     "TMP/casket.kct#opts=c#zcomp=lzo#psiz=32768#pccap=256m#rcomp=lex#apow=8#fpow=10#msiz=64m",
     ["option '-oas' maps to -sync always", "option '-oat' has no effect",
      "option '-onr' has no effect", "option '-asi' has no effect",
      "opts letter 'c' has no effect: zcomp=lzo chooses the codec", "msiz has no effect"]),
    ("ktserver -port PORT -le *#bnum=1000000#capcnt=1000000#capsiz=512m#opts=c#zcomp=def"
     "#zkey=secret", []),
    ("ktserver -port PORT -plsv /usr/local/libexec/ktplugservmemc.so "
     "-plex port=PORT2#opts=f#th=4 %#psiz=8192#pccap=64m#rcomp=lex",
     ["ktserver's memcached plug-in: port", "option '-plex opts=f' has no effect",
      "psiz has no effect", "rcomp=lex has no effect"]),
    ("ktserver -port PORT -bgs TMP/bgs -bgsi 60 -bgsc lzma -riv 0.04 -otl -onl -cmd TMP "
     ":#bnum=100000#ktopts=p#ktcapcnt=5000",
     ["kura has no lzma; snapshots are compressed with bz2", "option '-riv' has no effect",
      "option '-otl' has no effect", "option '-onl' has no effect", "option '-cmd' has no effect",
      "ktopts has no effect", "ktcapcnt maps to capcnt", "database ':'"]),
    ("ktserver -port PORT -lz -- -#type=kch#bnum=1000", []),
    ("ktserver -port PORT TMP/data.db#type=kct#pccap=32m#psiz=4096", []),
]


def zcomp_records(port):
    """A compressible value of 8 KiB stored; the store's count of values it
    holds compressed (hash file or tree)."""
    v = b"compressible " * 640
    r = request(port, b"set big 0 0 %d\r\n%s\r\n" % (len(v), v), until=b"\r\n")
    assert r == b"STORED\r\n", r
    st = request(port, b"stats\r\n")
    m = re.search(rb"STAT (?:hash_zcomp_records|tree_zcomp_runs) (\d+)", st)
    return int(m.group(1)) if m else None


# The effect of a mapping, where it shows: line index -> check(port, log).
EFFECTS = {
    1: lambda port, log: zcomp_records(port) >= 1,          # opts=d: zcomp=zlib
    6: lambda port, log: "sync always" in log,              # -oas
}


def check_line(tmp, line, want, effect=None):
    k = Kurad(tmp, line.split(" ")).start()
    try:
        serves(k.listen_port())
        if effect:
            assert effect(k.listen_port(), read(k.log)), "the mapping's effect: " + line
        if "-plex" in k.args:
            # the plug-in's port: the same data as -port
            r = request(k.port2, b"get migr\r\n")
            assert r == b"VALUE migr 5 3\r\nabc\r\nEND\r\n", r
            serves(k.port2, b"viaplugin")
            r = request(k.port, b"get viaplugin\r\n")
            assert r.startswith(b"VALUE viaplugin 5 3\r\n"), r
    finally:
        k.stop()
    log = read(k.log) + read(os.path.join(tmp, "kt.log")) + read(os.path.join(tmp, "tt.log"))
    for w in want:
        assert w in log, "%r not logged by %s:\n%s" % (w, line, log)


def test_command_lines(tmp):
    for i, (line, want) in enumerate(LINES):
        d = os.path.join(tmp, "l%d" % i)
        os.mkdir(d)
        check_line(d, line, want, EFFECTS.get(i))
    # and the same compressible value without the mapping is stored as it is
    d = os.path.join(tmp, "plain")
    os.mkdir(d)
    k = Kurad(d, ["ttserver", "-port", "PORT", "TMP/casket.tch#opts=l"]).start()
    try:
        assert zcomp_records(k.port) == 0
    finally:
        k.stop()


def test_install_guide_line_persists(tmp):
    """The install guide's line: -dmn, the pid file, the log, the update
    log; what it stored is there after a restart."""
    line = LINES[0][0].split(" ")
    k = Kurad(tmp, line).start()
    serves(k.port)
    k.stop()
    assert os.path.isdir(os.path.join(tmp, "data.tcb")), os.listdir(tmp)
    assert any(f.endswith(".seg") for f in os.listdir(tmp)), os.listdir(tmp)   # -ulog TMP/
    k2 = Kurad(tmp, line)
    k2.port = k.port
    k2.args = k.args
    k2.start()
    try:
        r = request(k.port, b"get migr\r\n")
        assert r == b"VALUE migr 5 3\r\nabc\r\nEND\r\n", r
    finally:
        k2.stop()


def test_kl_stops_the_old_server(tmp):
    """ttserver's -kl: the kurad the pid file names is stopped (SIGTERM, a
    clean stop) before the new one starts on it."""
    old = Kurad(tmp, ("ttserver -dmn -port PORT -pid TMP/k.pid -log TMP/old.log "
                      "TMP/data.tch").split(" ")).start()
    serves(old.port)
    new = Kurad(tmp, ("ttserver -kl -dmn -port PORT -pid TMP/k.pid -log TMP/new.log "
                      "TMP/data.tch").split(" "))
    new.start()
    try:
        assert not os.path.exists("/proc/%d" % old.pid) or \
            " Z " in read("/proc/%d/stat" % old.pid), "the old kurad still runs"
        assert "stopped" in read(os.path.join(tmp, "old.log")), read(os.path.join(tmp, "old.log"))
        assert "-kl: stopping kurad pid %d" % old.pid in read(os.path.join(tmp, "new.log"))
        r = request(new.port, b"get migr\r\n")        # the data the old one stored
        assert r == b"VALUE migr 5 3\r\nabc\r\nEND\r\n", r
    finally:
        new.stop()
    # without -kl the same start is refused while the old one runs
    again = Kurad(tmp, ("ttserver -dmn -port PORT -pid TMP/k.pid -log TMP/new.log "
                        "TMP/data.tch").split(" ")).start()
    try:
        rc, out, err = run([KURAD] + USER + ["-dmn", "-port", str(free_port()), "-pid",
                                              os.path.join(tmp, "k.pid"),
                                              os.path.join(tmp, "other.tch")], tmp)
        assert rc != 0 and "already running" in err, err
    finally:
        again.stop()


def test_ttserver_replication(tmp):
    """Tokyo Tyrant manual's master and replica (-ulog -sid, -mhost -mport
    -rts, with -rcc) replicate."""
    m = Kurad(tmp, ("ttserver -port PORT -ulog TMP/ulog-1 -sid 1 TMP/casket-1.tch").split(" "))
    m.start()
    try:
        s = Kurad(tmp, ("ttserver -port PORT -ulog TMP/ulog-2 -sid 2 -mhost 127.0.0.1 "
                        "-mport %d -rts TMP/2.rts -rcc TMP/casket-2.tch" % m.port).split(" "))
        s.log = os.path.join(tmp, "replica.log")
        s.start()
        try:
            request(m.port, b"set repl 0 0 2\r\nok\r\n", until=b"\r\n")
            wait_until(lambda: request(s.port, b"get repl\r\n").startswith(b"VALUE repl"), 30,
                       "the replica to have the key")
            assert "option '-rcc' has no effect" in read(s.log), read(s.log)
        finally:
            s.stop()
    finally:
        m.stop()


# ---- refusals -------------------------------------------------------------------

REFUSED = [
    (["-ext", "x.lua"], "option '-ext' is refused: Lua"),
    (["-extpc", "f", "10"], "option '-extpc' is refused: Lua"),
    (["-scr", "x.lua"], "option '-scr' is refused: Lua"),
    (["-mul", "4"], "option '-mul' is refused"),
    (["-skel", "x.so"], "option '-skel' is refused"),
    (["-mask", "all"], "option '-mask' is refused"),
    (["-unmask", "get"], "option '-unmask' is refused"),
    (["-ord"], "option '-ord' is refused"),
    (["-pldb", "x.so"], "option '-pldb' is refused"),
    (["-plsv", "/usr/lib/ktplugservdummy.so"], "only ktserver's memcached plug-in"),
    (["-plex", "port=1"], "needs -plsv"),
    (["-plsv", "ktplugservmemc.so", "-plex", "port=1#opts=q"], "queue mode"),
    (["-matrix"], "unknown option '-matrix'"),
    (["-lx"], "unknown option '-lx'"),
    (["-pfoo"], "unknown option '-pfoo'"),
    (["x.tct"], "Tokyo table database"),
    (["x.tcf"], "Tokyo fixed-length database"),
    (["x.kcd"], "Kyoto directory hash database"),
    (["x.kcf"], "Kyoto directory tree database"),
    (["x#type=kcd"], "Kyoto directory hash database"),
    (["x.kct#rcomp=dec"], "rcomp=dec is refused"),
    (["x.kct#rcomp=decdesc"], "rcomp=decdesc is refused"),
    (["x.kct#rcomp=lexdesc"], "rcomp=lexdesc is refused"),
    (["%#rcomp=dec"], "rcomp=dec is refused"),
    (["x.kch#zcomp=arc#zkey=k"], "zcomp=arc"),
    (["x.tch#mode=wct"], "mode=wct is refused"),
    (["x.tch#mode=r"], "reader only"),
    (["x.tch#opts=q"], "'q' is none of"),
    (["a.kch", "b.kch"], "more than one database"),
]


def test_refused(tmp):
    for extra, want in REFUSED:
        rc, out, err = run([KURAD] + USER + ["-port", str(free_port())] + extra, tmp)
        assert rc == 2, (extra, rc, err)
        assert want in err, (extra, err)
        # one line says it (besides -u root's INFO line)
        said = [l for l in err.splitlines() if " INFO " not in l]
        assert len(said) == 1 and want in said[0], (extra, err)
    for name in ("x.tct", "x.kch", "x.tcb", "x.kct#rcomp=dec"):
        assert not os.path.exists(os.path.join(tmp, name.split("#")[0])), name


def test_glued_short_options(tmp):
    """memcached's -p11211 and -l127.0.0.1 keep working; -li, -ls, -lz are
    ktserver's log levels, not -l with a value."""
    port = free_port()
    k = Kurad(tmp, ["kurad", "-pPORT", "-l127.0.0.1", "-t2", "-m16", "-li"])
    k.port = port
    k.args = ["kurad", "-p%d" % port, "-l127.0.0.1", "-t2", "-m16", "-li"]
    k.args.append("-port")      # listen_port() reads it; -port wins over -p, same value
    k.args.append(str(port))
    k.start()
    try:
        serves(port)
    finally:
        k.stop()


def test_ttserver_unix_socket(tmp):
    """ttserver's -port 0 -host PATH is a unix socket at PATH."""
    path = os.path.join(tmp, "tt.sock")
    p = subprocess.Popen([KURAD] + USER + ["-port", "0", "-host", path, "*"], cwd=tmp,
                         stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL,
                         stderr=subprocess.PIPE)
    try:
        def unix_conn():
            # bound early, listening once the workers run: poll a connect
            c = socket.socket(socket.AF_UNIX)
            c.settimeout(10 * SCALE)
            try:
                c.connect(path)
                return c
            except OSError:
                c.close()
                return None
        s = wait_until(lambda: p.poll() is not None or unix_conn(), 20, "the socket")
        assert p.poll() is None, p.stderr.read()
        s.sendall(b"set u 0 0 1\r\nx\r\nget u\r\n")
        got = b""
        while not got.endswith(b"END\r\n"):
            chunk = s.recv(4096)
            assert chunk, got
            got += chunk
        s.close()
        assert got == b"STORED\r\nVALUE u 0 1\r\nx\r\nEND\r\n", got
    finally:
        p.send_signal(signal.SIGTERM)
        p.wait(30 * SCALE)


def test_conf_file(tmp):
    """The same options in a conf file: mapped, noted, the plug-in's port,
    and a refused one refused with its file and line."""
    port, port2 = free_port(), free_port()
    conf = os.path.join(tmp, "k.conf")
    with open(conf, "w") as f:
        f.write("port %d\nuas\noas\nplsv /usr/libexec/ktplugservmemc.so\n"
                "plex port=%d#opts=f\ndatabase %s/c.kch#opts=c#apow=3\n" % (port, port2, tmp))
    k = Kurad(tmp, ["kurad", "-conf", conf, "-port", str(port)])
    k.port = port
    k.start()
    try:
        serves(port)
        r = request(port2, b"get migr\r\n")
        assert r == b"VALUE migr 5 3\r\nabc\r\nEND\r\n", r
    finally:
        k.stop()
    log = read(k.log)
    for w in ("option '-uas' has no effect", "option '-oas' maps to -sync always",
              "port %d is a second port" % port2, "opts letter 'c' maps to zcomp=zlib",
              "apow has no effect"):
        assert w in log, (w, log)
    with open(conf, "w") as f:
        f.write("port %d\next /etc/tt/x.lua\n" % port)
    rc, out, err = run([KURAD] + USER + ["-conf", conf], tmp)
    assert rc == 2 and "k.conf:2: option '-ext' is refused: Lua" in err, err


def test_help_lists_mapping(tmp):
    rc, out, err = run([KURAD, "-h"], tmp)
    assert rc == 0, err
    for name in ("-uas", "-rcc", "-li", "-ls", "-lz", "-uasi", "-oat", "-oas", "-onl", "-otl",
                 "-onr", "-asi", "-ash", "-riv", "-plsv", "-plex", "-pldb", "-ext", "-scr",
                 "-mul", "-skel", "-kl", "-cmd", "-mask", "-unmask", "-bgc", ".tct"):
        assert name in out, name


def test_capcnt(tmp):
    """*#capcnt=N: at most about N items (each of 256 stripes its share,
    rounded up); the same load without it keeps every item."""
    def load(db):
        k = Kurad(tmp, ["kurad", "-port", "PORT", db]).start()
        try:
            batch = b"".join(b"set c%05d 0 0 1 noreply\r\nv\r\n" % i for i in range(3000))
            request(k.port, batch + b"get c02999\r\n")
            st = request(k.port, b"stats\r\n")
            items = int(re.search(rb"STAT curr_items (\d+)", st).group(1))
            ev = int(re.search(rb"STAT evictions (\d+)", st).group(1))
            return items, ev
        finally:
            k.stop()
    items, ev = load("*#capcnt=1000")
    assert 0 < items <= 1024 and ev >= 3000 - 1024, (items, ev)
    items, ev = load("*")
    assert items == 3000 and ev == 0, (items, ev)


# ---- kuractl import and export ----------------------------------------------------

RECORDS = [(b"key%04d" % i, b"value %d " % i + bytes(range(32, 127)) * (i % 5)) for i in range(2000)]


def tsv(tmp, hexed=False):
    path = os.path.join(tmp, "in.tsv")
    with open(path, "wb") as f:
        for k, v in RECORDS:
            f.write((k.hex().encode() + b"\t" + v.hex().encode()) if hexed else k + b"\t" + v)
            f.write(b"\n")
    return path


def make_file(tmp, tool, suffix):
    path = os.path.join(tmp, "src." + suffix)
    cmd = "importtsv" if tool.startswith("tc") else "import"
    rc, out, err = run([tool, cmd, path, tsv(tmp)], tmp)
    assert rc == 0, (tool, err)
    return path


def listing(tool, path, tmp):
    rc, out, err = run([tool, "list", "-pv", "-px", path], tmp)
    assert rc == 0, err
    got = {}
    for line in out.splitlines():
        k, v = line.split("\t")
        got[bytes.fromhex(k.replace(" ", ""))] = bytes.fromhex(v.replace(" ", ""))
    return got


def fetch_all(port, keys):
    got = {}
    for i in range(0, len(keys), 100):
        r = request(port, b"get " + b" ".join(keys[i:i + 100]) + b"\r\n")
        pos = 0
        while True:
            m = re.compile(rb"VALUE (\S+) (\d+) (\d+)\r\n").match(r, pos)
            if not m:
                break
            n = int(m.group(3))
            got[m.group(1)] = (int(m.group(2)), r[m.end():m.end() + n])
            pos = m.end() + n + 2
    return got


TOOLS = [("tchmgr", "tch", "Tokyo"), ("tcbmgr", "tcb", "Tokyo"),
         ("kchashmgr", "kch", "Kyoto"), ("kctreemgr", "kct", "Kyoto")]


def test_import_export_round_trips(tmp):
    for tool, sfx, kind in TOOLS:
        need(tool)
        need_import(tmp, kind)
    for tool, sfx, kind in TOOLS:
        src = make_file(tmp, tool, sfx)
        for backend in ("kh", "kb"):
            db = os.path.join(tmp, "%s-%s.%s" % (sfx, backend, backend))
            rc, out, err = run([KURACTL, "import", src, db], tmp)
            assert rc == 0, err
            assert "imported 2000 of 2000 records" in err and "verified: all 2000" in err, err
            # the values through kurad
            k = Kurad(tmp, ["kurad", "-port", "PORT", db]).start()
            try:
                got = fetch_all(k.port, [r[0] for r in RECORDS])
            finally:
                k.stop()
            assert got == {key: (0, v) for key, v in RECORDS}, (sfx, backend)
        # out to every kind, read back with the kind's own tool
        for tool2, sfx2, _ in TOOLS:
            out_file = os.path.join(tmp, "from-%s.%s" % (sfx, sfx2))
            rc, out, err = run([KURACTL, "export", os.path.join(tmp, "%s-kb.kb" % sfx), out_file],
                               tmp)
            assert rc == 0, err
            assert "verified: all 2000 records read back" in err, err
            assert listing(tool2, out_file, tmp) == dict(RECORDS), (sfx, sfx2)
        rc, out, err = run([KURACTL, "export", os.path.join(tmp, "%s-kb.kb" % sfx), out_file], tmp)
        assert rc == 2 and "exists" in err, err


def kt_value(value, exptime=None, flags=None):
    xt = (1 << 40) - 1 if exptime is None else exptime
    v = xt.to_bytes(5, "big") + value
    return v + flags.to_bytes(4, "big") if flags is not None else v


def test_kyoto_tycoon_layouts(tmp):
    """A file as ktserver and its memcached plug-in (opts=f) write it: the
    5-byte expiry header (found by the file's mark), the 4-byte flags."""
    need("kchashmgr")
    need_import(tmp, "Kyoto")
    later = int(time.time()) + 86400
    recs = [(b"plain", kt_value(b"hello", None, 0)), (b"timed", kt_value(b"soon", later, 42)),
            (b"gone", kt_value(b"old", 1000, 1))]
    path = os.path.join(tmp, "kt.kch")
    with open(os.path.join(tmp, "kt.tsv"), "wb") as f:
        for k, v in recs:
            f.write(k.hex().encode() + b"\t" + v.hex().encode() + b"\n")
    rc, out, err = run(["kchashmgr", "import", "-sx", path, os.path.join(tmp, "kt.tsv")], tmp)
    assert rc == 0, err
    # ktserver's TimedDB marks the opaque area (kttimeddb.h MAGICDATA)
    with open(path, "r+b") as f:
        f.seek(48)
        f.write(b"\xbb\x00")

    def dump(db):
        rc, out, err = run([KURACTL, "dump", db], tmp)
        assert rc == 0, err
        return out

    rc, out, err = run([KURACTL, "import", path, os.path.join(tmp, "a.kh"), "--kt-flags"], tmp)
    assert rc == 0 and "bears ktserver's mark" in err and "1 items already expired" in err, err
    d = dump(os.path.join(tmp, "a.kh"))
    assert "set plain 0 0 5\r\nhello\r\n" in d and \
        "set timed 42 %d 4\r\nsoon\r\n" % later in d and "gone" not in d, d
    # without --kt-flags the flags stay in the value
    rc, out, err = run([KURACTL, "import", path, os.path.join(tmp, "b.kh")], tmp)
    assert rc == 0, err
    assert "set timed 0 %d 8\r\nsoon\x00\x00\x00*\r\n" % later in dump(os.path.join(tmp, "b.kh"))
    # --kt no: the header is part of the value
    rc, out, err = run([KURACTL, "import", path, os.path.join(tmp, "c.kh"), "--kt", "no"], tmp)
    assert rc == 0, err
    assert "set plain 0 0 14\r\n" in dump(os.path.join(tmp, "c.kh"))
    # and back out as ktserver writes it: header, flags, mark
    out_file = os.path.join(tmp, "back.kch")
    rc, out, err = run([KURACTL, "export", os.path.join(tmp, "a.kh"), out_file, "--kt",
                        "--kt-flags"], tmp)
    assert rc == 0, err
    with open(out_file, "rb") as f:
        assert f.read(64)[48] == 0xbb
    got = listing("kchashmgr", out_file, tmp)
    assert got == {b"plain": kt_value(b"hello", None, 0), b"timed": kt_value(b"soon", later, 42)}, got
    # a value too short for the layout asked is an error naming the key
    rc, out, err = run([KURACTL, "import", path, os.path.join(tmp, "d.kh"), "--kt", "yes",
                        "--kt-flags"], tmp)
    assert rc == 0, err
    short = os.path.join(tmp, "short.kch")
    run(["kchashmgr", "create", short], tmp)
    run(["kchashmgr", "set", short, "tiny", "abc"], tmp)
    rc, out, err = run([KURACTL, "import", short, os.path.join(tmp, "e.kh"), "--kt", "yes"], tmp)
    assert rc == 5 and "'tiny'" in err and "short-for-kt" in err, err
    assert read_rejects(os.path.join(tmp, "e.kh.rejects")) == [("short-for-kt", b"tiny", b"abc")]
    assert os.path.isdir(os.path.join(tmp, "e.kh")), "the import removed its database"


def kch_of(tmp, name, recs):
    """A .kch written with kchashmgr, raw values (hex in), no ktserver mark."""
    path = os.path.join(tmp, name)
    with open(path + ".tsv", "wb") as f:
        for k, v in recs:
            f.write(k.hex().encode() + b"\t" + v.hex().encode() + b"\n")
    rc, out, err = run(["kchashmgr", "import", "-sx", path, path + ".tsv"], tmp)
    assert rc == 0, err
    with open(path, "rb") as f:
        assert f.read(64)[48] != 0xbb, "kchashmgr wrote ktserver's mark"
    return path


def test_kyoto_tycoon_layout_without_mark(tmp):
    """A .kch written through ktserver's memcached plug-in (opts=f) but
    without ktserver's mark at byte 48: --kt auto finds the 5-byte expiry
    header in every value and says so; values, flags and exptime come out
    right and verify.  Before, it kept the header in each value, dropped the
    expiry and said "verified".  A file of plain values is read plainly; one
    that is neither (some values with a plausible header, others without) is
    refused, nothing created, until --kt yes or no says."""
    need("kchashmgr")
    need_import(tmp, "Kyoto")
    later = int(time.time()) + 86400
    recs = [(b"k%03d" % i, kt_value(b"val %d" % i, later + i if i % 3 else None, i)) for i in range(60)]
    path = kch_of(tmp, "memc.kch", recs)
    db = os.path.join(tmp, "memc.kh")
    rc, out, err = run([KURACTL, "import", path, db, "--kt-flags"], tmp)
    assert rc == 0, err
    assert "has no ktserver mark, but each of its 60 values opens with a plausible Kyoto " \
        "Tycoon expiry header (20 never, 40 timed" in err and "verified: all 60" in err, err
    want = {b"k%03d" % i: (i, later + i if i % 3 else 0, b"val %d" % i) for i in range(60)}
    assert dump_items(db, tmp) == want
    # plain values: text, and binary ones of which a few open like a header by chance
    import random
    rnd = random.Random(33)
    plain = [(b"t%03d" % i, b"text value %d" % i) for i in range(50)] + \
        [(b"b%03d" % i, bytes(rnd.randrange(256) for _ in range(12))) for i in range(200)]
    path = kch_of(tmp, "plain.kch", plain)
    rc, out, err = run([KURACTL, "import", path, os.path.join(tmp, "plain.kh")], tmp)
    assert rc == 0 and "no plausible Kyoto Tycoon expiry header: read as they are" in err, err
    assert dump_items(os.path.join(tmp, "plain.kh"), tmp) == {k: (0, 0, v) for k, v in plain}
    # half and half: refused until told
    mixed = recs[:30] + plain[:30]
    path = kch_of(tmp, "mixed.kch", mixed)
    rc, out, err = run([KURACTL, "import", path, os.path.join(tmp, "mixed.kh")], tmp)
    assert rc == 4 and "layout is unclear" in err and "30 of its 60 values" in err, (rc, err)
    assert not os.path.exists(os.path.join(tmp, "mixed.kh")), "a refused import made a database"
    rc, out, err = run([KURACTL, "import", path, os.path.join(tmp, "mixed.kh"), "--kt", "no"], tmp)
    assert rc == 0, err
    assert dump_items(os.path.join(tmp, "mixed.kh"), tmp) == {k: (0, 0, v) for k, v in mixed}


def test_verification_catches_a_missing_record(tmp):
    """The verification pass reads the file again: a record the import
    did not store (KURACTL_TEST_IMPORT_DROP_FIRST) is named, exit 1."""
    need("tchmgr")
    need_import(tmp, "Tokyo")
    src = make_file(tmp, "tchmgr", "tch")
    env = dict(os.environ, KURACTL_TEST_IMPORT_DROP_FIRST="1")
    rc, out, err = run([KURACTL, "import", src, os.path.join(tmp, "x.kh")], tmp, env=env)
    assert rc == 1 and "missing: 'key" in err and "1 of 2000 records are not" in err, (rc, err)
    rc, out, err = run([KURACTL, "import", src, os.path.join(tmp, "y.kh")], tmp)
    assert rc == 0, err


# ---- an import keeps every record: what the database cannot take is set aside --------

def read_rejects(path):
    """A rejects file (docs/migration.md, "Rejected records") as a list of
    (reason, key, value); asserts its form and its end line."""
    with open(path, "rb") as f:
        data = f.read()
    assert data.startswith(b"kura-rejects 1\n"), data[:40]
    pos, out = len(b"kura-rejects 1\n"), []
    while not data.startswith(b"end ", pos):
        eol = data.index(b"\n", pos)
        tag, kl, vl, reason, text = data[pos:eol].split(b" ", 4)
        assert tag == b"R" and text, data[pos:eol]
        kl, vl = int(kl), int(vl)
        key = data[eol + 1:eol + 1 + kl]
        assert data[eol + 1 + kl:eol + 2 + kl] == b"\n"
        value = data[eol + 2 + kl:eol + 2 + kl + vl]
        assert data[eol + 2 + kl + vl:eol + 3 + kl + vl] == b"\n"
        out.append((reason.decode(), key, value))
        pos = eol + 3 + kl + vl
    assert data[pos:] == b"end %d\n" % len(out), data[pos:]
    return out


def dump_items(db, tmp):
    """Every item of a database through kuractl dump (memcached format)."""
    p = subprocess.run([KURACTL, "-q", "dump", db], stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                       cwd=tmp, timeout=120 * SCALE)
    assert p.returncode == 0, p.stderr
    got, pos, data = {}, 0, p.stdout
    line = re.compile(rb"set (\S+) (\d+) (\d+) (\d+)\r\n")
    while pos < len(data):
        m = line.match(data, pos)
        assert m, data[pos:pos + 80]
        n = int(m.group(4))
        got[m.group(1)] = (int(m.group(2)), int(m.group(3)), data[m.end():m.end() + n])
        pos = m.end() + n + 2
    return got


LONG_GOOD = [(b"rec%06d" % i, b"v%d" % i + bytes(range(0x80, 0x80 + i % 100))) for i in range(10050)]
LONG_KEYS = [(b"long%03d-" % i + bytes([0x41 + i % 26]) * (243 + i) + b"\xe9\xff end", b"value of %d" % i)
             for i in range(100)]


def test_import_sets_long_keys_aside(tmp):
    """100 keys of 257 to 356 bytes among 10,150 records, from each of the
    four kinds into both file backends: under the default --kmax (1024)
    every record is stored and verified (before -kmax, the 100 were set
    aside as longer than memcached's 250); under --kmax 300 the 56 longer
    than 300 bytes are in the rejects file whole with their reason, exit 5,
    the database kept with every other record."""
    for tool, sfx, kind in TOOLS:
        need(tool)
        need_import(tmp, kind)
    recs = LONG_GOOD + LONG_KEYS
    over = [(k, v) for k, v in LONG_KEYS if len(k) > 300]
    assert len(over) == 56 and min(len(k) for k, v in LONG_KEYS) > 250
    with open(os.path.join(tmp, "long.tsv"), "wb") as f:
        for k, v in recs:
            f.write(k.hex().encode() + b"\t" + v.hex().encode() + b"\n")
    with open(os.path.join(tmp, "long-raw.tsv"), "wb") as f:   # Tokyo's tools take no hex
        for k, v in recs:
            f.write(k + b"\t" + v + b"\n")
    for tool, sfx, kind in TOOLS:
        src = os.path.join(tmp, "long." + sfx)
        args = ([tool, "importtsv", src, os.path.join(tmp, "long-raw.tsv")] if kind == "Tokyo"
                else [tool, "import", "-sx", src, os.path.join(tmp, "long.tsv")])
        rc, out, err = run(args, tmp)
        assert rc == 0, err
        assert listing(tool, src, tmp) == dict(recs), "the source file %s" % sfx
        for backend in ("kh", "kb"):
            # every record, long keys too
            db = os.path.join(tmp, "all-%s.%s" % (sfx, backend))
            rc, out, err = run([KURACTL, "import", src, db], tmp, timeout=300)
            assert rc == 0, (sfx, backend, rc, err)
            assert "verified: all 10150 records are in the database" in err, err
            assert not os.path.exists(db + ".rejects")
            # the long keys hold a space: kura's dump format carries them
            dump = os.path.join(tmp, "d.kura")
            rc, out, err = run([KURACTL, "dump", "--format", "kura", "-o", dump, db], tmp,
                               timeout=300)
            assert rc == 0 and "dumped 10150 items" in err, err
            os.unlink(dump)
            rc, out, err = run([KURACTL, "check", db], tmp, timeout=300)
            assert rc == 0, out + err
            # --kmax 300: the longer ones set aside
            db = os.path.join(tmp, "long-%s.%s" % (sfx, backend))
            rc, out, err = run([KURACTL, "import", "--kmax", "300", src, db], tmp, timeout=300)
            assert rc == 5, (sfx, backend, rc, err)
            assert "imported 10094 of 10150 records" in err and \
                "56 records set aside whole in %s.rejects (56 key-too-long)" % db in err and \
                "verified: all 10094 records are in the database" in err, err
            assert os.path.isdir(db), "the database was removed"
            rej = read_rejects(db + ".rejects")
            assert sorted(rej) == sorted(("key-too-long", k, v) for k, v in over), (sfx, backend)
            # a second import would overwrite nothing: the old rejects are refused
            rc, out, err = run([KURACTL, "import", "--kmax", "300", src, db], tmp)
            assert rc == 2 and "exists" in err, err
            # --rejects elsewhere: the same records, the same file
            other = os.path.join(tmp, "other.rejects")
            rc, out, err = run([KURACTL, "-q", "import", "--kmax", "300", src, db,
                                "--rejects", other], tmp, timeout=300)
            assert rc == 5, err
            assert sorted(read_rejects(other)) == sorted(rej)
            os.unlink(other)
    # --kmax out of its bounds: refused, saying them
    for bad in ("249", "4097", "x"):
        rc, out, err = run([KURACTL, "import", "--kmax", bad, src, os.path.join(tmp, "n.kh")], tmp)
        assert rc == 2 and "--kmax" in err, (bad, rc, err)
        assert not os.path.exists(os.path.join(tmp, "n.kh"))


def test_import_rejects_other_reasons(tmp):
    """The reasons besides a long key, each a word of its own: a value too
    short for the layout asked (--kt yes, --kt-flags); the value is kept as
    the file had it (header and all).  The empty key is stored, as Tokyo
    and Kyoto Cabinet store it (before, it was set aside as key-empty)."""
    need("kchashmgr")
    need_import(tmp, "Kyoto")
    path = os.path.join(tmp, "mixed.kch")
    recs = [(b"", kt_value(b"empty key")), (b"tiny", b"abc"), (b"six", kt_value(b"x")[:6]),
            (b"good", kt_value(b"fine", None, 7))]
    with open(os.path.join(tmp, "mixed.tsv"), "wb") as f:
        for k, v in recs:
            f.write(k.hex().encode() + b"\t" + v.hex().encode() + b"\n")
    rc, out, err = run(["kchashmgr", "import", "-sx", path, os.path.join(tmp, "mixed.tsv")], tmp)
    assert rc == 0, err
    db = os.path.join(tmp, "m.kh")
    rc, out, err = run([KURACTL, "import", path, db, "--kt", "yes", "--kt-flags"], tmp)
    assert rc == 5 and "imported 2 of 4 records" in err, (rc, err)
    assert "verified: all 2 records are in the database" in err, err
    assert sorted(read_rejects(db + ".rejects")) == sorted([
        ("short-for-kt", b"tiny", b"abc"), ("short-for-flags", b"six", kt_value(b"x")[:6])])


def test_import_refusals(tmp):
    junk = os.path.join(tmp, "junk.tch")
    with open(junk, "wb") as f:
        f.write(b"not a cabinet file at all, not at all" * 3)
    rc, out, err = run([KURACTL, "import", junk, os.path.join(tmp, "j.kh")], tmp)
    assert rc == 4 and "neither a Tokyo Cabinet" in err, err
    rc, out, err = run([KURACTL, "import", os.path.join(tmp, "nosuch.tch"),
                        os.path.join(tmp, "j.kh")], tmp)
    assert rc == 3, err
    rc, out, err = run([KURACTL, "export", "x.kh", "out.tct"], tmp)
    assert rc == 2 and "suffix" in err, err
    rc, out, err = run([KURACTL, "export", "x.kh", "out.tch", "--kt"], tmp)
    assert rc == 2 and "Kyoto Tycoon" in err, err
    # kurad pointed at a Cabinet file says how to bring it over
    need("tchmgr")
    f = os.path.join(tmp, "real.tch")
    run(["tchmgr", "create", f], tmp)
    # a file a running server holds (its lock taken here) is refused at once, not waited for
    need_import(tmp, "Tokyo")
    fd = os.open(f, os.O_RDWR)
    try:
        fcntl.lockf(fd, fcntl.LOCK_EX)
        rc, out, err = run([KURACTL, "import", f, os.path.join(tmp, "l.kh")], tmp)
        assert rc == 3 and "not waited for" in err, (rc, err)
    finally:
        os.close(fd)
    rc, out, err = run([KURAD] + USER + ["-port", str(free_port()), f], tmp)
    assert rc != 0 and "kuractl import" in err, err
    # a damaged file (cut short: its header or size does not hold) is said to
    # be damaged, with no hint about a running server (nothing holds it)
    for tool, kind, ext in (("tchmgr", "Tokyo", "tch"), ("tcbmgr", "Tokyo", "tcb"),
                            ("kchashmgr", "Kyoto", "kch")):
        need(tool)
        need_import(tmp, kind)
        whole = os.path.join(tmp, "whole." + ext)
        run([tool, "create", whole], tmp)
        run([tool, "set" if kind == "Kyoto" else "put", whole, "k", "v"], tmp)
        with open(whole, "rb") as src:
            data = src.read()
        cut = os.path.join(tmp, "cut." + ext)
        with open(cut, "wb") as dst:
            dst.write(data[:200 if ext == "tcb" else 300 if ext == "tch" else 600])
        rc, out, err = run([KURACTL, "import", cut, os.path.join(tmp, "c.kh")], tmp)
        assert rc == 4, (ext, rc, err)
        assert "damaged" in err and "running server" not in err, (ext, err)
        assert len(err.strip().splitlines()) == 1, (ext, err)


TESTS = [test_command_lines, test_install_guide_line_persists, test_kl_stops_the_old_server,
         test_ttserver_replication,
         test_refused, test_glued_short_options, test_ttserver_unix_socket,
         test_conf_file, test_help_lists_mapping, test_capcnt,
         test_import_export_round_trips, test_kyoto_tycoon_layouts,
         test_kyoto_tycoon_layout_without_mark,
         test_verification_catches_a_missing_record, test_import_sets_long_keys_aside,
         test_import_rejects_other_reasons, test_import_refusals]

if __name__ == "__main__":
    sys.exit(run_functions(TESTS, "kura-migration-"))
