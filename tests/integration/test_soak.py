#!/usr/bin/python3
# kura-test: once
# Load and soak (issue 20, item 7), each against the real kurad:
#  - 10,000 connections held at once (the test raises its own descriptor
#    limit to what it needs, or skips as not applicable under a lower hard
#    limit): each answers, twice, and the server's heap (RssAnon: about
#    5 kB a connection), descriptors and curr_connections stay where the
#    first round left them; all closed, they go back down;
#  - a flood of connections past -c: the excess get memcached's
#    "ERROR Too many open connections" and are closed (memcached 1.6 does
#    that at its -c), while the connections already held keep being served
#    and a new one is served once the flood is gone;
#  - 1,000 slow readers, each sending multi-gets whose replies are many
#    times its socket buffers and never reading: the server's growth stays
#    within its per-connection output bound (64 KiB of replies plus a value;
#    the test fails at the 1 MiB kurad had before), and another client is
#    served meanwhile (kurad only: see the test);
#  - a soak of mixed traffic (text set/get/delete/incr/append, meta, binary;
#    pymemcache, pylibmc and raw sockets; every reply checked against a
#    model of each client's own keys) on every backend (cache, hash file,
#    B+ tree) at once, each a master with -ulog and snapshots every few
#    seconds (-bgs, -bgsi) and a replica (-mhost): the heap (RssAnon; the
#    mapped files' RssFile is reported, not bounded), descriptors
#    (/proc/PID/fd) and threads (/proc/PID/task) of both flat after the
#    warm-up (tolerances below), no error, every acknowledged item on the
#    master, snapshots taken without failure, and the replica's digest
#    equal to the master's at the end (polled, with a deadline).  SOAK_SECONDS sets
#    the soak's length (30 here, 600 under `make soak`); SOAK_FIGURES names
#    a file that gets each backend's figures (RSS, fds, threads) appended.
# The flatness rule is a function of its samples (`growth_error`), checked
# on synthetic series too: a leak of a descriptor a second, of 1 MB a
# second, of a thread, each trips it (the negative checks).
import os, resource, selectors, socket, sys, threading, time, unittest
sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "lib"))
import kuratest
from kuratest import Server, stats, poll_until, kura_only, deadline, digest

MB = 1024 * 1024
TOO_MANY = b"ERROR Too many open connections\r\n"
SOAK_SECONDS = float(os.environ.get("SOAK_SECONDS", "30"))

# Tolerances on growth after the warm-up, per resource: (absolute, fraction
# of the value at the end of the warm-up).  RSS: allocator slack, the hash
# file's and tree's caches filling, the update log's buffers; descriptors:
# a segment or snapshot file open for a moment, a replica's reconnect;
# threads: none come and go in steady state (a snapshot runs on a thread
# that lives as long as the server).
TOLERANCE = {"rss": (16 * MB, 0.10), "fds": (8, 0.0), "threads": (1, 0.0),
             # the hash file's heap grows by steps of ~15 MB for minutes
             # (30 MB at the end of a 30 s soak's warm-up, 86 MB flat from
             # the fourth minute to the tenth of make soak): its index's
             # mappings made resident as huge pages at khugepaged's pace,
             # 16 MB a pass (docs/operations.md, "Memory under load"), up
             # to the index's size; a leak shows in make soak, not in the
             # 30 s run
             "rss_hash": (64 * MB, 0.10)}


def growth_error(name, samples, warmup):
    """None if the samples (one value per sampling, oldest first) stay
    flat after the first `warmup` of them, else a message.  Flat: no
    sample after the warm-up exceeds the value at its end by more than
    TOLERANCE[name], and the mean of the second half of the rest is not
    above the first half's by more than a third of that (a slow leak that
    passes the first rule over a short run still shows as a rising trend;
    one step of the allocator does not)."""
    if len(samples) <= warmup + 1:
        return "%s: %d samples, too few past a warm-up of %d" % (name, len(samples), warmup)
    base = samples[warmup]
    absolute, frac = TOLERANCE[name]
    allowed = absolute + frac * base
    rest = samples[warmup:]
    peak = max(rest)
    if peak - base > allowed:
        return "%s grew from %d to %d after the warm-up (allowed %d): %s" % (
            name, base, peak, allowed, rest)
    half = len(rest) // 2
    first, second = rest[:half], rest[half:]
    if half and sum(second) / len(second) - sum(first) / len(first) > allowed / 3:
        return "%s kept rising: %s" % (name, rest)
    return None


def diag(msg):
    print("# " + msg, flush=True)


def proc_fds(pid):
    return len(os.listdir("/proc/%d/fd" % pid))


def proc_threads(pid):
    return len(os.listdir("/proc/%d/task" % pid))


def proc_status(pid, field):
    with open("/proc/%d/status" % pid) as f:
        for line in f:
            if line.startswith(field + ":"):
                return int(line.split()[1]) * 1024
    raise AssertionError("no %s" % field)


def sample(pid):
    """rss is the anonymous part (RssAnon: the heap, where a leak shows);
    file is the file-backed part (RssFile: the update log's and the hash
    file's mapped pages, page cache the kernel can take back), reported
    but not bounded here."""
    return {"rss": proc_status(pid, "RssAnon"), "file": proc_status(pid, "RssFile"),
            "fds": proc_fds(pid), "threads": proc_threads(pid)}


def sanitized():
    """AddressSanitizer's quarantine keeps freed memory resident and
    ThreadSanitizer's shadow grows with what it sees, so the heap's bounds
    are measured without one (descriptors, threads, errors and digests are
    checked either way)."""
    return kuratest.sanitized()


def raise_nofile(need):
    """Raises this process's soft RLIMIT_NOFILE to `need` (up to the hard
    limit); returns the hard limit if that is too low, else None."""
    soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    if hard != resource.RLIM_INFINITY and hard < need:
        return hard
    if soft == resource.RLIM_INFINITY or soft < need:
        resource.setrlimit(resource.RLIMIT_NOFILE, (need, hard))
    return None


def connect_all(port, n, timeout=60):
    """n connected, non-blocking sockets (fails if any cannot connect)."""
    socks = []
    end = deadline(timeout)
    for _ in range(n):
        while True:
            try:
                s = socket.create_connection(("127.0.0.1", port), timeout=5)
                break
            except OSError:
                if time.monotonic() > end:
                    raise
        s.setblocking(False)
        socks.append(s)
    return socks


def round_trip(socks, request, reply, timeout=60):
    """Sends request on every socket, then reads until each answered
    exactly reply (a wrong or missing answer fails)."""
    sel = selectors.DefaultSelector()
    got = {}
    for s in socks:
        s.sendall(request)
        got[s.fileno()] = b""
        sel.register(s, selectors.EVENT_READ)
    left = len(socks)
    end = deadline(timeout)
    try:
        while left:
            if time.monotonic() > end:
                raise AssertionError("%d of %d connections did not answer" % (left, len(socks)))
            for key, _ in sel.select(1.0):
                s = key.fileobj
                d = s.recv(4096)
                if not d:
                    raise AssertionError("a held connection was closed")
                got[s.fileno()] += d
                if len(got[s.fileno()]) >= len(reply):
                    if got[s.fileno()] != reply:
                        raise AssertionError("wrong answer: %r" % got[s.fileno()])
                    sel.unregister(s)
                    left -= 1
    finally:
        sel.close()


def curr_connections(server):
    with server.conn() as c:
        return int(stats(c)["curr_connections"])


class ManyConnections(kuratest.ServerTestCase):
    # each test starts the server it needs
    def setUp(self):
        pass

    def server(self, **kw):
        s = Server(**kw)
        self.addCleanup(s.stop)
        return s

    def test_10000_connections_held(self):
        n = 10000
        need = n + 512                      # this process's sockets (the server has its own)
        low = raise_nofile(need)
        if low is not None:
            self.skipTest(kuratest.not_applicable(
                "the hard descriptor limit (%d) is below the %d this test needs" % (low, need)))
        s = self.server(conns=n + 64, nofile=(n + 256, n + 256))
        pid = s.proc.pid
        base = sample(pid)
        socks = connect_all(s.port, n)
        try:
            round_trip(socks, b"version\r\n", s.request(b"version\r\n"))
            first = sample(pid)
            self.assertEqual(curr_connections(s), n + 1)
            # the same connections again, storing and reading
            round_trip(socks, b"set k 0 0 1\r\nx\r\nget k\r\n",
                       b"STORED\r\nVALUE k 0 1\r\nx\r\nEND\r\n")
            round_trip(socks, b"version\r\n", s.request(b"version\r\n"))
            second = sample(pid)
            diag("10k connections: RSS %d -> %d -> %d kB, fds %d -> %d -> %d"
                          % (base["rss"] // 1024, first["rss"] // 1024, second["rss"] // 1024,
                             base["fds"], first["fds"], second["fds"]))
            self.assertGreaterEqual(first["fds"] - base["fds"], n - 8)
            self.assertLessEqual(second["fds"], first["fds"] + 8)
            if not sanitized():
                self.assertLessEqual(second["rss"], first["rss"] + 16 * MB + first["rss"] // 10)
            # what a held idle connection costs (buffers, session): ~10 kB
            # measured; 64 kB each is the bound
            if not sanitized():
                self.assertLess(first["rss"] - base["rss"], n * 64 * 1024)
        finally:
            for so in socks:
                so.close()
        poll_until(lambda: curr_connections(s) == 1, timeout=deadline(30) - time.monotonic(),
                   what="every connection to be closed")
        poll_until(lambda: proc_fds(pid) <= base["fds"] + 2, timeout=10,
                   what="the server's descriptors to go back down")

    def test_flood_past_c(self):
        cap, held_n, flood_n = 200, 150, 1000
        low = raise_nofile(held_n + flood_n + 512)
        if low is not None:
            self.skipTest(kuratest.not_applicable("hard descriptor limit %d" % low))
        s = self.server(conns=cap)
        held = connect_all(s.port, held_n)
        ok = threading.Event()
        errors = []

        def keep_serving():
            # the held connections go on being answered during the flood
            try:
                i = 0
                while not ok.is_set():
                    round_trip(held[i % 10::10], b"set f%d 0 0 2\r\nhi\r\nget f%d\r\n" % (i, i),
                               b"STORED\r\nVALUE f%d 0 2\r\nhi\r\nEND\r\n" % i)
                    i += 1
            except Exception as e:      # reported by the test below
                errors.append(e)
        t = threading.Thread(target=keep_serving)
        t.start()
        refused = accepted = 0
        flood = []
        try:
            for _ in range(flood_n):
                try:
                    c = socket.create_connection(("127.0.0.1", s.port), timeout=10)
                except OSError:
                    continue
                flood.append(c)
                c.sendall(b"version\r\n")
            for c in flood:
                c.settimeout(10 * kuratest.SCALE)
                buf = b""
                try:
                    while True:
                        d = c.recv(4096)
                        if not d:
                            break
                        buf += d
                        if buf.endswith(b"\r\n") and buf.startswith(b"VERSION"):
                            break
                except ConnectionResetError:
                    pass
                if buf.startswith(b"VERSION"):
                    accepted += 1
                else:
                    # refused with memcached's line, then closed by the server
                    self.assertIn(buf, (TOO_MANY, b""))
                    refused += 1
        finally:
            ok.set()
            t.join()
            for c in flood:
                c.close()
        self.assertEqual(errors, [])
        self.assertGreater(refused, flood_n // 2)
        self.assertLessEqual(accepted + held_n, cap)
        poll_until(lambda: curr_connections(s) == held_n + 1, timeout=30,
                   what="the flood's connections to be gone")
        round_trip(held, b"get f0\r\n", b"VALUE f0 0 2\r\nhi\r\nEND\r\n")
        for c in held:
            c.close()

    # kurad's bound; memcached 1.6.18 passed it once here (~30 kB each) and
    # in later runs left the other client unanswered past its deadline
    @kura_only
    @unittest.skipIf(sanitized(), kuratest.not_applicable(
        "a sanitizer's allocator keeps freed memory resident: measured without one"))
    def test_1000_slow_readers(self):
        n, keys, vsize = 1000, 40, 64 * 1024
        low = raise_nofile(n + 512)
        if low is not None:
            self.skipTest(kuratest.not_applicable("hard descriptor limit %d" % low))
        s = self.server(conns=n + 64, nofile=(n + 256, n + 256), item_max="2m")
        pid = s.proc.pid
        with s.conn() as c:
            for i in range(keys):
                self.assertEqual(c.request(b"set big%d 0 0 %d\r\n%s\r\n"
                                           % (i, vsize, bytes([65 + i % 26]) * vsize)),
                                 b"STORED\r\n")
        base = sample(pid)
        line = b"get " + b" ".join(b"big%d" % i for i in range(keys)) + b"\r\n"
        slow = []
        for _ in range(n):
            so = socket.create_connection(("127.0.0.1", s.port))
            so.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, 4096)
            so.sendall(line * 4)            # ~10 MB of replies, never read
            slow.append(so)
        try:
            # the server has done what it can once hits stop moving
            with s.conn() as c:
                last = {"v": None, "same": 0}

                def settled():
                    v = int(stats(c)["get_hits"])
                    last["same"] = last["same"] + 1 if v == last["v"] else 0
                    last["v"] = v
                    return last["same"] >= 10
                poll_until(settled, timeout=120, interval=0.1, what="the slow readers to stall")
                # another client is served, byte-exact
                got = c.request(b"get big3\r\n", timeout=10)
                self.assertEqual(got, b"VALUE big3 0 %d\r\n%s\r\nEND\r\n" % (vsize, b"D" * vsize))
            grown = sample(pid)["rss"] - base["rss"]
            diag("1000 slow readers: server grew %d kB (%d kB each)"
                          % (grown // 1024, grown // 1024 // n))
            # bound: the replies' high-water mark (64 KiB) plus one value a
            # connection, doubled for the buffer's growth; ~80 kB each
            # measured (memcached ~30 kB).  With the mark at 1 MiB, as
            # before this test, kurad grew ~900 kB each and this fails.
            self.assertLess(grown, n * 2 * (64 * 1024 + vsize))
        finally:
            for so in slow:
                so.close()
        poll_until(lambda: curr_connections(s) == 1, timeout=60, what="the readers to be gone")


class Flatness(unittest.TestCase):
    """growth_error itself, on synthetic samples (the negative checks of
    the soak's bounds)."""

    def test_flat_series_pass(self):
        noisy = [100 * MB + (i % 3) * MB for i in range(30)]
        self.assertIsNone(growth_error("rss", noisy, 10))
        self.assertIsNone(growth_error("fds", [40, 41, 40, 42, 40] * 6, 10))
        self.assertIsNone(growth_error("threads", [9] * 30, 10))

    def test_leaks_trip(self):
        self.assertIsNotNone(growth_error("rss", [100 * MB + i * MB for i in range(60)], 10))
        self.assertIsNotNone(growth_error("fds", [40 + i for i in range(30)], 10))
        self.assertIsNotNone(growth_error("threads", [9] * 20 + [11] * 10, 10))
        # a slow one that stays under the bound's first rule over this run
        slow = [100 * MB + i * MB // 2 for i in range(60)]
        self.assertIsNotNone(growth_error("rss", slow, 10))
        # the hash file's looser bound still catches 2 MB a second
        self.assertIsNotNone(growth_error("rss_hash", [30 * MB + 2 * i * MB for i in range(60)], 10))

    def test_too_few_samples_fail(self):
        self.assertIsNotNone(growth_error("fds", [1, 2, 3], 10))


# -- the soak --------------------------------------------------------------

class Model:
    """What one client stored under its own keys; a reply that disagrees
    is an error."""

    def __init__(self):
        self.items = {}
        self.errors = []

    def check(self, what, got, want):
        if got != want:
            self.errors.append("%s: got %r, want %r" % (what, got, want))
            return False
        return True


def value_for(rnd, key):
    n = rnd.choice((1, 10, 100, 1000, 4000)) if rnd.random() < 0.99 else 100000
    return (key * (n // len(key) + 1))[:n]


def traffic_pymemcache(port, prefix, stop, m, seed):
    import random
    from pymemcache.client.base import Client
    rnd = random.Random(seed)
    mc = Client(("127.0.0.1", port), timeout=30 * kuratest.SCALE)
    while not stop.is_set():
        k = "%s%d" % (prefix, rnd.randrange(500))
        op = rnd.random()
        if op < 0.4:
            v = value_for(rnd, k.encode())
            m.check("set " + k, mc.set(k, v, noreply=False), True)
            m.items[k] = v
        elif op < 0.75:
            m.check("get " + k, mc.get(k), m.items.get(k))
        elif op < 0.85:
            m.check("delete " + k, mc.delete(k, noreply=False), k in m.items)
            m.items.pop(k, None)
        elif op < 0.95:
            c = prefix + "ctr%d" % rnd.randrange(20)
            if c not in m.items:
                m.check("set " + c, mc.set(c, b"0", noreply=False), True)
                m.items[c] = b"0"
            want = int(m.items[c]) + 3
            m.check("incr " + c, mc.incr(c, 3, noreply=False), want)
            m.items[c] = str(want).encode()
        else:
            ks = ["%s%d" % (prefix, rnd.randrange(500)) for _ in range(20)]
            got = mc.get_many(ks)
            m.check("get_many", got, {k: m.items[k] for k in ks if k in m.items})
    mc.close()


def traffic_pylibmc(port, prefix, stop, m, seed):
    import random
    import pylibmc
    rnd = random.Random(seed)
    mc = pylibmc.Client(["127.0.0.1:%d" % port], binary=True)
    while not stop.is_set():
        k = "%s%d" % (prefix, rnd.randrange(500))
        op = rnd.random()
        if op < 0.4:
            v = value_for(rnd, k.encode())
            m.check("bin set " + k, mc.set(k, v), True)
            m.items[k] = v
        elif op < 0.8:
            m.check("bin get " + k, mc.get(k), m.items.get(k))
        elif op < 0.9:
            m.check("bin delete " + k, mc.delete(k), k in m.items)
            m.items.pop(k, None)
        else:
            c = prefix + "ctr%d" % rnd.randrange(20)
            if c not in m.items:
                m.check("bin set " + c, mc.set(c, b"0"), True)
                m.items[c] = b"0"
            want = int(m.items[c]) + 5
            m.check("bin incr " + c, mc.incr(c, 5), want)
            m.items[c] = str(want).encode()
    mc.disconnect_all()


def traffic_meta(port, prefix, stop, m, seed):
    import random
    rnd = random.Random(seed)
    with kuratest.Conn(port, timeout=30 * kuratest.SCALE) as c:
        while not stop.is_set():
            k = "%s%d" % (prefix, rnd.randrange(500))
            kb = k.encode()
            op = rnd.random()
            if op < 0.35:
                v = value_for(rnd, kb)
                m.check("ms " + k, c.request(b"ms %s %d T0\r\n%s\r\n" % (kb, len(v), v)),
                        b"HD\r\n")
                m.items[k] = v
            elif op < 0.7:
                got = c.request(b"mg %s v k\r\n" % kb)
                v = m.items.get(k)
                m.check("mg " + k, got, b"EN k%s\r\n" % kb if v is None else
                        b"VA %d k%s\r\n%s\r\n" % (len(v), kb, v))
            elif op < 0.8:
                m.check("md " + k, c.request(b"md %s\r\n" % kb),
                        b"HD\r\n" if k in m.items else b"NF\r\n")
                m.items.pop(k, None)
            elif op < 0.9:
                ck = prefix + "ctr%d" % rnd.randrange(20)
                want = int(m.items.get(ck, b"0")) + 7 if ck in m.items else 0
                got = c.request(b"ma %s N0 J0 D7 v\r\n" % ck.encode())
                m.check("ma " + ck, got, b"VA %d\r\n%d\r\n" % (len(str(want)), want))
                m.items[ck] = str(want).encode()
            else:
                # text append and a pipelined multi-get on the same connection
                if k in m.items:
                    m.check("append " + k, c.request(b"append %s 0 0 2\r\nzz\r\n" % kb),
                            b"STORED\r\n")
                    m.items[k] += b"zz"
                m.check("mn", c.request(b"mn\r\n"), b"MN\r\n")


def traffic_raw_text(port, prefix, stop, m, seed):
    import random
    rnd = random.Random(seed)
    with kuratest.Conn(port, timeout=30 * kuratest.SCALE) as c:
        while not stop.is_set():
            # a pipeline of sets then one multi-get of them
            ks = ["%s%d" % (prefix, rnd.randrange(300)) for _ in range(10)]
            req = b""
            for k in ks:
                v = value_for(rnd, k.encode())
                req += b"set %s 5 0 %d noreply\r\n%s\r\n" % (k.encode(), len(v), v)
                m.items[k] = v
            uniq = list(dict.fromkeys(ks))
            got = c.request(req + b"get " + b" ".join(k.encode() for k in uniq) + b"\r\n",
                            timeout=30 * kuratest.SCALE)
            want = b"".join(b"VALUE %s 5 %d\r\n%s\r\n" % (k.encode(), len(m.items[k]), m.items[k])
                            for k in uniq) + b"END\r\n"
            m.check("pipelined get", got, want)
            if rnd.random() < 0.3:
                k = ks[0]
                m.check("delete " + k, c.request(b"delete %s\r\n" % k.encode()),
                        b"DELETED\r\n")
                m.items.pop(k, None)


def run_soak(kind, seconds, report):
    """One master (with -ulog, snapshots every 3 s) and its replica on
    backend `kind`, under mixed traffic for `seconds`; appends errors to
    report[kind] (an empty list: passed)."""
    import tempfile, shutil
    errs = report.setdefault(kind, [])
    d = tempfile.mkdtemp(prefix="kuratest-soak-%s-" % kind)
    # the hash file and the tree checkpoint (and the hash file compacts) every
    # few MB of log, so that the run reaches the steady state those reach
    # and goes through them many times (at their defaults the first
    # checkpoint, 64 MB of log in, came after the warm-up: a one-time step
    # of the hash file's heap of 14 MB then)
    ext = {"cache": None, "hash": ".kh#ckpt=4m#segsiz=8m",
           "tree": ".kb#ckpt=1m#segsiz=4m"}[kind]

    def dbname(name):
        return os.path.join(d, name + ext) if ext else None
    m = r = None
    try:
        # a small update log (8 MB files, 32 MB in all) reaches its steady
        # state within the warm-up: with the defaults (256 MB, 4 GB) its
        # files, each a descriptor and mapped, keep adding up for an hour
        # (a 10-minute soak: 7 to 11 descriptors more, RssFile 2 -> 4 GB)
        ul = ["-ulim", "8m", "-ulmax", "32m"]
        m = Server(db=dbname("m"), kura_args=ul + ["-sid", "1", "-ulog", os.path.join(d, "m.ul"),
                                               "-bgs", os.path.join(d, "m.bgs"), "-bgsi", "3"])
        r = Server(db=dbname("r"), kura_args=ul + ["-sid", "2", "-ulog", os.path.join(d, "r.ul"),
                                               "-mhost", "127.0.0.1", "-mport", str(m.port)])
        stop = threading.Event()
        clients = [(traffic_pymemcache, "pm:"), (traffic_pylibmc, "pl:"),
                   (traffic_meta, "mt:"), (traffic_raw_text, "rt:"),
                   (traffic_pymemcache, "pm2:")]
        models = [Model() for _ in clients]
        threads = []

        def run(fn, prefix, model, seed):
            try:
                fn(m.port, prefix, stop, model, seed)
            except Exception as e:
                model.errors.append("%s: %r" % (fn.__name__, e))
        for i, ((fn, prefix), model) in enumerate(zip(clients, models)):
            t = threading.Thread(target=run, args=(fn, prefix, model, i + 1))
            t.start()
            threads.append(t)
        samples = {"master": [], "replica": []}
        end = time.monotonic() + seconds
        while time.monotonic() < end and all(t.is_alive() for t in threads):
            samples["master"].append(sample(m.proc.pid))
            samples["replica"].append(sample(r.proc.pid))
            stop.wait(1.0)          # the sampling period, not a synchronisation
        stop.set()
        for t in threads:
            t.join(60)
        for model in models:
            errs.extend(model.errors[:5])
        warm = max(3, len(samples["master"]) // 3)
        for who, ss in samples.items():
            for res in ("fds", "threads") if sanitized() else ("rss", "fds", "threads"):
                name = "rss_hash" if res == "rss" and kind == "hash" else res
                e = growth_error(name, [x[res] for x in ss], warm)
                if e:
                    errs.append("%s %s" % (who, e))
        report.setdefault("figures", []).append(
            "%s: %d samples; master RssAnon %d -> %d kB (RssFile %d -> %d kB), fds %d -> %d, "
            "threads %d -> %d; replica RssAnon %d -> %d kB" % (
                kind, len(samples["master"]),
                samples["master"][warm]["rss"] // 1024, samples["master"][-1]["rss"] // 1024,
                samples["master"][warm]["file"] // 1024, samples["master"][-1]["file"] // 1024,
                samples["master"][warm]["fds"], samples["master"][-1]["fds"],
                samples["master"][warm]["threads"], samples["master"][-1]["threads"],
                samples["replica"][warm]["rss"] // 1024, samples["replica"][-1]["rss"] // 1024))
        # every acknowledged item is there, on the master
        with m.conn() as c:
            for model in models:
                for k, v in model.items.items():
                    got = c.request(b"get %s\r\n" % k.encode())
                    if not got.endswith(b"\r\n%s\r\nEND\r\n" % v):
                        errs.append("master lost %s: %r" % (k, got[:80]))
                        break
            st = stats(c, b"snapshot")
        if int(st["snapshot_count"]) < 1 or int(st["snapshot_failures"]):
            errs.append("snapshots: %d taken, %s failed (%s)" % (
                int(st["snapshot_count"]), st["snapshot_failures"], st["snapshot_last_error"]))
        # the replica catches up: its digest equals the master's
        want = None

        def equal():
            nonlocal want
            want = digest(m)
            return digest(r) == want
        try:
            poll_until(equal, timeout=60, interval=0.2, what="the replica's digest")
        except AssertionError as e:
            errs.append(str(e))
        for s in (m, r):
            s.stop()
    except Exception as e:
        errs.append("%s: %r" % (kind, e))
    finally:
        for s in (r, m):
            if s:
                s.stop(check=False)
        shutil.rmtree(d, True)


class Soak(unittest.TestCase):

    @kura_only
    def test_mixed_traffic_every_backend(self):
        try:
            import pymemcache, pylibmc  # noqa: F401
        except ImportError:
            self.skipTest(kuratest.missing("pymemcache and pylibmc "
                                           "(apt-get install python3-pymemcache python3-pylibmc)"))
        report = {}
        runs = [threading.Thread(target=run_soak, args=(kind, SOAK_SECONDS, report))
                for kind in ("cache", "hash", "tree")]
        for t in runs:
            t.start()
        for t in runs:
            t.join()
        for line in report.pop("figures", []):
            diag(line)
            if os.environ.get("SOAK_FIGURES"):     # the runner shows no diag of a pass
                with open(os.environ["SOAK_FIGURES"], "a") as f:
                    f.write(line + "\n")
        self.maxDiff = None
        self.assertEqual(report, {"cache": [], "hash": [], "tree": []})


if __name__ == "__main__":
    kuratest.main()
