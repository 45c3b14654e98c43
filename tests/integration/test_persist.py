#!/usr/bin/python3
# kura-test: once
"""test_persist.py - the hash file (and the B+ tree) over the network,
against the real kurad (issue 3, item 8; issue 12).

Every test names its own hash file (a `data.kh` directory in a temp dir of
its own, given to Server as `db`), so the file runs once, whatever KURA_DB
says (the marker line above tells tests/run so).  Covers:

  Restart      every field (value, flags, cas, exptime) back after SIGTERM
               and a restart; incr/append/prepend/touch/delete/cas before it;
               cas uniques keep increasing; flush_all, and flush_all with a
               delay (still pending at the stop), survive a restart.
  Crash        4 connections write under load (set, append, incr, delete;
               values derived from key and version) in each -sync mode;
               SIGKILL at a random moment (seeded RNG, KURA_TEST_SEED);
               restart; every acknowledged change is there (a key with an
               unacknowledged op in flight may hold the old or the new
               value); 3 rounds per mode on the same file, small segments and
               checkpoints so rolls, checkpoints and compaction happen under
               load.
  GroupCommit  -sync always: 16 connections writing at once all get their
               replies, sharing fsyncs (hash_syncs < writes); a pipeline of
               200 sets on one connection; SIGKILL right after the last reply
               loses nothing.
  Corruption   flipped bytes in the replayed log: kurad refuses to start
               (exit status, file and offset named); -recover serves, says
               what it lost, intact keys are back.  Flipped bytes in
               checkpointed data: the read fails with SERVER_ERROR (never
               served), -recover drops it.  A torn last record (truncated
               file, or a partial write followed by zeros): recovered
               automatically, logged, everything but that record is back.
  DiskFull     a small tmpfs (root only; skipped otherwise): fill until a
               set answers SERVER_ERROR; reads go on, stored values intact,
               the server never dies; writes succeed again once space is
               freed; a restart has every acknowledged value.  Both append
               paths (mapwrite=1 and 0).  RLIMIT_FSIZE: a record past the
               file size limit fails with SERVER_ERROR, nothing else does.
  LargeValue   -I 128m: a 100 MB value set and read back, and after restart.
  Tree*        Restart, Crash, GroupCommit and LargeValue again on a B+ tree
               (data.kb; the crash rounds with a 1 MB page cache of 4 KB
               pages, so checkpoints, splits and evictions run under load).
  Expiry       exptime 1 items disappear; get reclaims them, the sweep
               reclaims the rest (curr_items falls, hash_expired_bytes 0).

Environment: KURA_BUILD, KURA_TEST_DEADLINE_SCALE (see lib/kuratest.py);
KURA_TEST_SEED fixes the crash test's random choices (the seed is printed).
Standard library only; waits poll with deadlines.
"""
import glob, os, random, shutil, signal, socket, struct, subprocess, sys, tempfile, threading, time
import unittest
sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "lib"))
import kuratest
from kuratest import Server, Conn, Closed, stats, poll_until, free_port, SCALE

MB = 1024 * 1024
SEED = int(os.environ.get("KURA_TEST_SEED") or random.SystemRandom().randrange(1 << 30))
print("# KURA_TEST_SEED=%d" % SEED, flush=True)


# ---------------------------------------------------------------- helpers

def derive(key, ver, n):
    """A value of n bytes determined by key and version."""
    unit = b"%s:%d;" % (key, ver)
    return (unit * (n // len(unit) + 1))[:n]


def parse_values(reply):
    """{key: (flags, value, cas or None)} of a get/gets reply."""
    out = {}
    i = 0
    while True:
        j = reply.index(b"\r\n", i)
        line = reply[i:j]
        if line == b"END":
            return out
        p = line.split()
        if p[0] != b"VALUE":
            raise AssertionError("unexpected reply line %r" % line[:200])
        n = int(p[3])
        out[p[1]] = (int(p[2]), reply[j + 2:j + 2 + n], int(p[4]) if len(p) > 4 else None)
        i = j + 2 + n + 2


def get_many(conn, keys, cmd=b"gets", batch=100):
    out = {}
    keys = list(keys)
    for i in range(0, len(keys), batch):
        r = conn.request(cmd + b" " + b" ".join(keys[i:i + batch]) + b"\r\n", timeout=30)
        if r.startswith(b"SERVER_ERROR") or r.startswith(b"ERROR") or r.startswith(b"CLIENT_ERROR"):
            raise AssertionError("%s of %d keys: %r" % (cmd, len(keys[i:i + batch]), r[:200]))
        out.update(parse_values(r))
    return out


def seg_files(db):
    return sorted(glob.glob(os.path.join(db, "*.seg")))


def varint(data, pos):
    """(value, next position) of the LEB128 varint at pos."""
    v = shift = 0
    while True:
        b = data[pos]
        pos += 1
        v |= (b & 0x7F) << shift
        shift += 7
        if not b & 0x80:
            return v, pos


def records(path):
    """[(offset, type, key, vlen, value offset)] of the records in a segment
    file, read as docs/formats.md describes them (stops at the first
    non-record, e.g. the zeros of the preallocated tail): record format 4
    (a descriptor byte, then klen, vlen, the fields it says are there, seq)
    or 2 and 3 ("Kr", type, klen, then five varints)."""
    with open(path, "rb") as f:
        data = f.read()
    version = struct.unpack_from("<I", data, 8)[0] if len(data) >= 12 else 0
    off, out = 32, []
    while off + 8 <= len(data):
        try:
            typ, klen, vlen, pos = header(data, off, version)
        except (IndexError, ValueError):
            break
        end = pos + klen + vlen
        if end > len(data):
            break
        out.append((off, typ, data[pos:pos + klen], vlen, pos + klen))
        off = end
    return out


def header(data, off, version):
    """(type, klen, vlen, end of header) of the record header at off;
    ValueError where there is none."""
    if version >= 4:
        d = data[off + 4]
        if d & 0xC0 != 0x80 or d & 0x30 == 0x30:
            raise ValueError("no version 4 header")
        typ, klen = (d & 3) + 1, data[off + 5]
        vlen, pos = varint(data, off + 6)
        # flags, exptime if present; seq; a cas delta if present
        for _ in range(bool(d & 4) + bool(d & 8) + 1 + (d & 0x30 == 0x20)):
            _, pos = varint(data, pos)
    else:
        if data[off + 4:off + 6] != b"Kr":
            raise ValueError("no version 2 or 3 header")
        typ, klen = data[off + 6], data[off + 7]
        vlen, pos = varint(data, off + 8)
        for _ in range(4):          # flags, exptime, cas, seq
            _, pos = varint(data, pos)
    if typ == 4:                    # a compressed PUT: codec, raw length
        _, pos = varint(data, pos + 1)
    return typ, klen, vlen, pos


def checkpoint_pos(db):
    """(segment id, offset) of the newest checkpoint's replay position."""
    with open(os.path.join(db, "checkpoint"), "rb") as f:
        h = f.read(32)
    assert h[:8] == b"KURAHCKP", h[:8]
    return struct.unpack_from("<I", h, 16)[0], struct.unpack_from("<Q", h, 24)[0]


def xor_bytes(path, off, n):
    with open(path, "r+b") as f:
        f.seek(off)
        b = f.read(n)
        f.seek(off)
        f.write(bytes(x ^ 0xA5 for x in b))


def store_lines(conn, data, n, timeout=None):
    """Send a pipeline and return its n reply lines."""
    conn.send(data)
    return [conn.line(timeout) for _ in range(n)]


class PersistCase(unittest.TestCase):
    """A test with a hash file of its own (self.db) and helpers to start
    kurad on it again and again.  The Tree* subclasses run the same tests on
    a B+ tree (KIND names the backend's stats prefix)."""
    DB_NAME = "data.kh"
    KIND = "hash"

    def setUp(self):
        self.dir = tempfile.mkdtemp(prefix="kuratest-persist-")
        self.addCleanup(shutil.rmtree, self.dir, True)
        self.db = os.path.join(self.dir, self.DB_NAME)

    def assert_nothing_lost(self, st):
        """The hash file's -recover drops what it cannot read and counts it;
        the tree refuses to open instead, so has nothing to count."""
        if self.KIND == "hash":
            self.assertEqual(int(st["hash_recovery_lost"]), 0)

    def start(self, params="", sync=None, recover=False, args=(), db=None, **kw):
        a = list(args)
        if sync:
            a += ["-sync", sync]
        if recover:
            a += ["-recover"]
        s = Server(kind="kurad", db=(db or self.db) + params, kura_args=a, **kw)
        self.addCleanup(self._cleanup, s)
        return s

    def _cleanup(self, s):
        try:
            s.stop()        # raises if it died or wrote sanitizer output
        finally:
            shutil.rmtree(s.tmpdir, ignore_errors=True)

    def start_fails(self, params="", recover=False, **kw):
        """Run kurad on the database expecting it to refuse: (status, stderr)."""
        s = Server(kind="kurad", db=self.db + params, start=False,
                   kura_args=["-recover"] if recover else [], **kw)
        try:
            argv = s.argv(free_port())
            try:
                p = subprocess.run(argv, cwd=s.tmpdir, stdin=subprocess.DEVNULL,
                                   stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                                   timeout=15 * SCALE)
            except subprocess.TimeoutExpired as e:
                raise AssertionError("kurad started on a damaged file instead of refusing:\n%s"
                                     % (e.stderr or b"").decode("utf-8", "replace"))
            return p.returncode, p.stderr.decode("utf-8", "replace")
        finally:
            shutil.rmtree(s.tmpdir, ignore_errors=True)

    def stop(self, s):
        """SIGTERM; the server must exit 0 without sanitizer output."""
        s.stop()


# ---------------------------------------------------------------- 1. restart

class Restart(PersistCase):

    def test_every_field_survives(self):
        s = self.start()
        c = s.conn(timeout=10)
        t0 = time.time()
        model = {}      # key -> (flags, value); kind of expiry in kinds
        kinds = {}
        # A "soon" item (exptime 4) set or touched at wall time t expires
        # once the server's clock reaches int(t) + 4, never earlier: until
        # then it must be there.  soon_exp holds that second per key, so that
        # a slow run (a sanitizer build on a loaded machine) that reaches
        # a check after it allows the item to be gone instead of failing.
        soon_exp = {}
        data = b""
        for i in range(400):
            key = b"r%03d" % i
            flags = (i * 2654435761) % (1 << 32)
            kind = ("never", "rel", "abs", "soon")[i % 4]
            exptime = {"never": 0, "rel": 3600, "abs": int(t0) + 7200, "soon": 4}[kind]
            val = derive(key, 0, 1 + (i * 37) % 3000)
            data += b"set %s %d %d %d\r\n%s\r\n" % (key, flags, exptime, len(val), val)
            model[key], kinds[key] = (flags, val), kind
            if kind == "soon":
                soon_exp[key] = int(t0) + 4
        self.assertEqual(set(store_lines(c, data, 400)), {b"STORED\r\n"})

        def may_be_gone(key):
            """True if the soon item could have expired by now."""
            return kinds[key] == "soon" and time.time() >= soon_exp[key]

        # counters
        for i in range(20):
            key = b"n%02d" % i
            self.assertEqual(c.request(b"set %s 3 0 3\r\n100\r\n" % key), b"STORED\r\n")
            self.assertEqual(c.request(b"incr %s %d\r\n" % (key, i * 1000)),
                             b"%d\r\n" % (100 + i * 1000))
            model[key], kinds[key] = (3, b"%d" % (100 + i * 1000)), "never"
        # append / prepend keep flags and exptime
        for i in range(0, 40, 4):
            key = b"r%03d" % i
            self.assertEqual(c.request(b"append %s 0 0 4\r\n+app\r\n" % key), b"STORED\r\n")
            self.assertEqual(c.request(b"prepend %s 0 0 4\r\npre+\r\n" % key), b"STORED\r\n")
            f, v = model[key]
            model[key] = (f, b"pre+" + v + b"+app")
        # touch: soon -> an hour, never -> soon
        for i in range(3, 40, 4):
            key = b"r%03d" % i
            r = c.request(b"touch %s 3600\r\n" % key)
            if r == b"NOT_FOUND\r\n" and may_be_gone(key):
                del model[key]          # expired before the touch: a slow run
                kinds[key] = "gone"
                continue
            self.assertEqual(r, b"TOUCHED\r\n", key)
            kinds[key] = "rel"
        for i in range(40, 60, 4):
            key = b"r%03d" % i
            t = time.time()
            self.assertEqual(c.request(b"touch %s 4\r\n" % key), b"TOUCHED\r\n")
            kinds[key] = "soon"
            soon_exp[key] = int(t) + 4
        # delete
        deleted = [b"r%03d" % i for i in range(100, 140)]
        for key in deleted:
            r = c.request(b"delete %s\r\n" % key)
            if not (r == b"NOT_FOUND\r\n" and may_be_gone(key)):     # expired: a slow run
                self.assertEqual(r, b"DELETED\r\n", key)
            del model[key]
        # cas
        before = get_many(c, [b"r200", b"r201"])
        self.assertEqual(c.request(b"cas r200 9 0 3 %d\r\nnew\r\n" % before[b"r200"][2]), b"STORED\r\n")
        self.assertEqual(c.request(b"cas r201 9 0 3 %d\r\nnew\r\n" % (before[b"r201"][2] + 12345)),
                         b"EXISTS\r\n")
        model[b"r200"] = (9, b"new")

        got = get_many(c, model)
        for key in list(model):
            if key not in got and may_be_gone(key):
                del model[key]          # expired already: a slow run
        self.assertEqual({k: v[:2] for k, v in got.items()}, model)
        cas = {k: v[2] for k, v in got.items()}
        max_cas = max(cas.values())
        self.assertEqual(len(set(cas.values())), len(cas), "cas uniques repeat")
        self.stop(s)

        s = self.start()
        c = s.conn(timeout=10)
        got = get_many(c, list(model) + deleted)
        for key, (f, v) in model.items():
            if key not in got and may_be_gone(key):
                continue
            self.assertIn(key, got, "%r (%s) lost by the restart" % (key, kinds[key]))
            self.assertEqual(got[key], (f, v, cas[key]), "%r changed by the restart" % key)
        for key in deleted:
            self.assertNotIn(key, got, "deleted %r came back" % key)
        # cas uniques keep increasing
        self.assertEqual(c.request(b"set fresh 0 0 1\r\nx\r\n"), b"STORED\r\n")
        fresh = get_many(c, [b"fresh"])[b"fresh"][2]
        self.assertGreater(fresh, max_cas, "a new cas after the restart is not above the old ones")
        self.assertEqual(c.request(b"incr n05 1\r\n"), b"5101\r\n")
        # the "soon" keys expire on time (within a few seconds of their
        # second, however long the restart took); the others stay
        soon = [k for k in model if kinds[k] == "soon"]
        last = max(soon_exp[k] for k in soon) if soon else time.time()
        poll_until(lambda: not get_many(c, soon, b"get"), timeout=max(0, last + 1 - time.time()) + 5,
                   what="the 4 s items to expire after the restart")
        got = get_many(c, [k for k in model if kinds[k] != "soon"])
        self.assertEqual(len(got), len(model) - len(soon))
        self.assert_nothing_lost(stats(c))
        c.close()
        self.stop(s)

    def test_item_bytes_survive_restarts(self):
        # "bytes" (memcached's item sizes, 4 more for non-zero flags) is the
        # same after a clean stop (loaded from the checkpoint) and after
        # kill -9 (replayed from the log)
        s = self.start()
        c = s.conn(timeout=10)
        data = b"".join(b"set b%03d %d 0 %d\r\n%s\r\n" % (i, i % 3, 1 + i % 50, b"v" * (1 + i % 50))
                        for i in range(300))
        self.assertEqual(set(store_lines(c, data, 300)), {b"STORED\r\n"})
        want = int(stats(c)["bytes"])
        c.close()
        self.stop(s)
        for how in ("clean stop", "kill -9"):
            s = self.start()
            c = s.conn(timeout=10)
            self.assertEqual(int(stats(c)["bytes"]), want, "bytes after a " + how)
            self.assertEqual(c.request(b"set late 5 0 1\r\nx\r\n"), b"STORED\r\n")
            want = int(stats(c)["bytes"])
            c.close()
            if how == "clean stop":
                s.kill9()
                shutil.rmtree(s.tmpdir, ignore_errors=True)
            else:
                self.stop(s)

    def test_flush_all_survives(self):
        s = self.start()
        c = s.conn()
        old = [b"a%02d" % i for i in range(50)]
        for k in old:
            self.assertEqual(c.request(b"set %s 1 0 2\r\nvv\r\n" % k), b"STORED\r\n")
        self.assertEqual(c.request(b"flush_all\r\n"), b"OK\r\n")
        after = [b"b%02d" % i for i in range(10)]
        for k in after:
            self.assertEqual(c.request(b"set %s 2 0 2\r\nww\r\n" % k), b"STORED\r\n")
        self.assertEqual(get_many(c, old, b"get"), {})
        self.assertEqual(len(get_many(c, after, b"get")), 10)
        self.stop(s)

        s = self.start()
        c = s.conn()
        self.assertEqual(get_many(c, old, b"get"), {}, "flushed items came back after a restart")
        self.assertEqual(len(get_many(c, after, b"get")), 10, "items set after flush_all lost")
        # a delayed flush, pending at the stop
        tf = time.time()
        self.assertEqual(c.request(b"flush_all 2\r\n"), b"OK\r\n")
        late = [b"c%02d" % i for i in range(10)]
        for k in late:
            self.assertEqual(c.request(b"set %s 3 0 2\r\nxx\r\n" % k), b"STORED\r\n")
        self.stop(s)

        s = self.start()
        c = s.conn()
        # "flush_all 2" at second N flushes when the clock reaches N + 1
        # (memcached's oldest_live, realtime(2) - 1): before that, which may
        # be a moment after tf, everything is still there
        items = get_many(c, after + late, b"get")
        if time.time() < int(tf) + 1:
            self.assertEqual(len(items), 20, "the delayed flush happened early")
        # (a restart slower than the delay leaves no time at all: the flush
        # is due by then, and gets some seconds more)
        poll_until(lambda: not get_many(c, after + late, b"get"),
                   timeout=max(0, tf + 2 + 3 - time.time()) + 3,
                   what="the delayed flush_all, pending across a restart, to happen")
        # new items after the flush are kept, here and after a restart
        def set_new():
            c.request(b"set d00 4 0 2\r\nyy\r\n")
            return get_many(c, [b"d00"], b"get")
        poll_until(set_new, timeout=3, what="a set after the delayed flush to stay")
        self.stop(s)
        s = self.start()
        c = s.conn()
        self.assertEqual(get_many(c, [b"d00"] + old + after + late, b"get"), {b"d00": (4, b"yy", None)})
        self.stop(s)


# ---------------------------------------------------------------- 2. crash

class Writer(threading.Thread):
    """Writes to its own keys over one connection, one request at a time,
    and keeps the acknowledged state of each key (model).  The key whose
    request is in flight when the connection dies is in pending as
    (old, new): either is acceptable after the restart."""

    def __init__(self, port, wid, model, seed, nkeys=120):
        threading.Thread.__init__(self, daemon=True)
        self.port, self.wid, self.model = port, wid, model
        self.rng = random.Random(seed)
        self.keys = [b"w%d_s%03d" % (wid, i) for i in range(nkeys)] + \
                    [b"w%d_n%03d" % (wid, i) for i in range(nkeys // 4)]
        self.pending = {}
        self.acks = 0
        self.error = None
        self.ver = 0

    def op(self, key):
        """(request, expected reply, new model value) for a random op."""
        rng, old = self.rng, self.model.get(key)
        self.ver += 1
        ver = (self.wid << 40) | self.ver
        counter = b"_n" in key
        r = rng.random()
        if r < 0.1:
            return b"delete %s\r\n" % key, b"DELETED\r\n" if old else b"NOT_FOUND\r\n", None
        if counter:
            if old is None or r < 0.25:
                n = b"%d" % (ver % 100000)
                return (b"set %s 0 0 %d\r\n%s\r\n" % (key, len(n), n), b"STORED\r\n", (0, n))
            d = rng.randrange(1, 1000)
            v = int(old[1]) + d
            return b"incr %s %d\r\n" % (key, d), b"%d\r\n" % v, (old[0], b"%d" % v)
        if r < 0.35 and (old is None or len(old[1]) < 6000):
            suf = derive(key, ver, rng.randrange(1, 200))
            if old is None:
                return b"append %s 0 0 %d\r\n%s\r\n" % (key, len(suf), suf), b"NOT_STORED\r\n", None
            return (b"append %s 0 0 %d\r\n%s\r\n" % (key, len(suf), suf), b"STORED\r\n",
                    (old[0], old[1] + suf))
        flags = ver % 65536
        n = rng.choice((1, 10, 100, 1000, 3000)) + rng.randrange(100)
        val = derive(key, ver, n)
        return b"set %s %d 0 %d\r\n%s\r\n" % (key, flags, n, val), b"STORED\r\n", (flags, val)

    def run(self):
        try:
            c = Conn(self.port, timeout=20)
        except OSError as e:
            self.error = "connect: %s" % e
            return
        try:
            while True:
                key = self.rng.choice(self.keys)
                req, want, new = self.op(key)
                old = self.model.get(key)
                self.pending[key] = (old, new)
                try:
                    c.send(req)
                    got = c.line()
                except (Closed, OSError):
                    return          # the server was killed: this op stays pending
                if got != want:
                    self.error = "%r answered %r, expected %r" % (req[:60], got, want)
                    return
                del self.pending[key]
                if new is None:
                    self.model.pop(key, None)
                else:
                    self.model[key] = new
                self.acks += 1
        except Exception as e:      # reported by the test
            self.error = "%s: %s" % (type(e).__name__, e)
        finally:
            c.close()


class Crash(PersistCase):
    PARAMS = "#segsiz=256k#ckpt=64k"
    WORK_STATS = ("hash_checkpoints", "hash_compactions", "hash_segments")

    def crash_rounds(self, mode, rounds=3, writers=4):
        rng = random.Random("%d-%s" % (SEED, mode))
        models = [dict() for _ in range(writers)]
        total_acks = 0
        work = {"acks": 0, "in flight": 0}
        for rnd in range(rounds):
            s = self.start(self.PARAMS, sync=mode)
            ws = [Writer(s.port, w, models[w], rng.randrange(1 << 30)) for w in range(writers)]
            for w in ws:
                w.start()
            poll_until(lambda: all(w.acks >= 20 or w.error or not w.is_alive() for w in ws),
                       timeout=20, what="every writer to have some writes acknowledged")
            time.sleep(rng.uniform(0.2, 1.0))     # the random moment of the kill
            with s.conn() as sc:                  # what the load made the store do
                st = stats(sc)
            s.kill9()
            for k in self.WORK_STATS:
                work[k] = work.get(k, 0) + int(st[k])
            for w in ws:
                w.join(20 * SCALE)
                self.assertFalse(w.is_alive(), "writer %d still running after the kill" % w.wid)
                self.assertIsNone(w.error, "writer %d: %s (round %d, sync %s)" % (w.wid, w.error, rnd, mode))
                total_acks += w.acks
            killed_log = s.stderr()
            shutil.rmtree(s.tmpdir, ignore_errors=True)

            s = self.start(self.PARAMS, sync=mode)
            c = s.conn(timeout=20)
            for w in ws:
                got = get_many(c, w.keys, b"get")
                for key in w.keys:
                    have = got.get(key)
                    have = have[:2] if have else None
                    if key in w.pending:
                        old, new = w.pending[key]
                        self.assertIn(have, (old, new),
                                      "sync %s round %d: %r (in flight at the kill) is neither the "
                                      "old nor the new value (seed %d)" % (mode, rnd, key, SEED))
                        if have is None:
                            w.model.pop(key, None)
                        else:
                            w.model[key] = have
                    else:
                        want = w.model.get(key)
                        self.assertEqual(have, want,
                                         "sync %s round %d: acknowledged state of %r lost (seed %d)\n"
                                         "log before the kill:\n%s\nlog of the restart:\n%s"
                                         % (mode, rnd, key, SEED, killed_log[-3000:], s.stderr()[-3000:]))
            st = stats(c)
            self.assertEqual(stats(c, b"settings")["kura_sync"], mode)
            work["acks"] += sum(w.acks for w in ws)
            work["in flight"] += sum(len(w.pending) for w in ws)
            self.assert_nothing_lost(st)
            c.close()
            self.stop(s)
        self.assertGreater(total_acks, 100)
        print("# sync %s: %s" % (mode, ", ".join("%s %d" % kv for kv in sorted(work.items()))), flush=True)
        # a clean restart after the last round still has everything
        s = self.start(self.PARAMS, sync=mode)
        c = s.conn(timeout=20)
        for w, m in enumerate(models):
            keys = [k for k in (b"w%d_s%03d" % (w, i) for i in range(120))] + \
                   [b"w%d_n%03d" % (w, i) for i in range(30)]
            got = get_many(c, keys, b"get")
            self.assertEqual({k: v[:2] for k, v in got.items()}, m)
        c.close()
        self.stop(s)

    def test_kill9_sync_none(self):
        self.crash_rounds("none")

    def test_kill9_sync_interval(self):
        self.crash_rounds("interval")

    def test_kill9_sync_always(self):
        self.crash_rounds("always")


# ---------------------------------------------------------------- 3. group commit

class GroupCommit(PersistCase):

    def test_many_writers_sync_always(self):
        s = self.start(sync="always", threads=4)
        c = s.conn()
        syncs0 = int(stats(c)[self.KIND + "_syncs"])
        nconn, per = 16, 40
        errors, done = [], []

        def writer(w):
            try:
                with s.conn(timeout=20) as wc:
                    for i in range(per):
                        key = b"g%02d_%03d" % (w, i)
                        val = derive(key, 1, 50 + i)
                        r = wc.request(b"set %s %d 0 %d\r\n%s\r\n" % (key, w, len(val), val))
                        if r != b"STORED\r\n":
                            errors.append((key, r))
                            return
                done.append(w)
            except Exception as e:
                errors.append((w, repr(e)))

        ts = [threading.Thread(target=writer, args=(w,)) for w in range(nconn)]
        t0 = time.monotonic()
        for t in ts:
            t.start()
        for t in ts:
            t.join(60 * SCALE)
        elapsed = time.monotonic() - t0
        self.assertEqual(errors, [])
        self.assertEqual(sorted(done), list(range(nconn)))
        syncs = int(stats(c)[self.KIND + "_syncs"]) - syncs0
        writes = nconn * per
        print("# group commit: %d writes from %d connections, %d fdatasyncs, %.2fs"
              % (writes, nconn, syncs, elapsed), flush=True)
        self.assertGreater(syncs, 0)
        self.assertLess(syncs, writes * 3 // 4, "concurrent writers do not share syncs")
        # one connection, 200 sets in one send: every reply comes
        data = b"".join(b"set p%03d 0 0 3\r\nabc\r\n" % i for i in range(200))
        self.assertEqual(store_lines(c, data, 200, timeout=30), [b"STORED\r\n"] * 200)
        # acknowledged, then SIGKILL: all there
        s.kill9()
        s = self.start(sync="always")
        c = s.conn()
        got = get_many(c, [b"g%02d_%03d" % (w, i) for w in range(nconn) for i in range(per)], b"get")
        self.assertEqual(len(got), writes)
        for key, (f, v, _) in got.items():
            self.assertEqual((f, v), (int(key[1:3]), derive(key, 1, 50 + int(key[4:]))))
        self.assertEqual(len(get_many(c, [b"p%03d" % i for i in range(200)], b"get")), 200)
        c.close()
        self.stop(s)


# ---------------------------------------------------------------- 4. corruption

class Corruption(PersistCase):
    PARAMS = "#segsiz=1m"

    def fill(self, n=200, vlen=500):
        s = self.start(self.PARAMS)
        c = s.conn()
        data = b"".join(b"set k%03d %d 0 %d\r\n%s\r\n" % (i, i, vlen, derive(b"k%03d" % i, 0, vlen))
                        for i in range(n))
        self.assertEqual(set(store_lines(c, data, n)), {b"STORED\r\n"})
        c.close()
        return s, {b"k%03d" % i: (i, derive(b"k%03d" % i, 0, vlen)) for i in range(n)}

    def check_keys(self, s, model, missing=()):
        with s.conn() as c:
            got = get_many(c, model, b"get")
        for key, want in model.items():
            if key in missing:
                self.assertNotIn(key, got, "damaged %r served" % key)
            else:
                self.assertEqual(got.get(key, (None,))[:2], want, "intact %r not back" % key)

    def middle_put(self, seg):
        recs = [r for r in records(seg) if r[1] == 1]
        self.assertGreater(len(recs), 10)
        return recs[len(recs) // 2]

    def test_flipped_bytes_in_log_refused_then_recovered(self):
        s, model = self.fill()
        s.kill9()           # no checkpoint at close: the open replays these records
        shutil.rmtree(s.tmpdir, ignore_errors=True)
        seg = seg_files(self.db)[-1]
        off, _, key, vlen, voff = self.middle_put(seg)
        self.assertGreater(off, checkpoint_pos(self.db)[1], "record already checkpointed")
        xor_bytes(seg, voff + vlen // 2, 4)

        rc, err = self.start_fails(self.PARAMS)
        self.assertNotEqual(rc, 0, "kurad served a damaged file:\n" + err)
        self.assertIn("%s: corrupt record at offset %d" % (seg, off), err)
        self.assertIn("recover", err)

        s = self.start(self.PARAMS, recover=True)
        err = s.stderr()
        self.assertIn("skipping", err)
        self.assertRegex(err, r"lost [1-9]\d* records")
        with s.conn() as c:
            self.assertGreaterEqual(int(stats(c)["hash_recovery_lost"]), 1)
        self.check_keys(s, model, missing={key})
        self.stop(s)
        # salvaged for good: starts without -recover, same contents
        s = self.start(self.PARAMS)
        self.check_keys(s, model, missing={key})
        self.stop(s)

    def test_flipped_bytes_in_checkpointed_data(self):
        s, model = self.fill()
        self.stop(s)        # a clean stop writes a checkpoint covering the records
        seg = seg_files(self.db)[-1]
        off, _, key, vlen, voff = self.middle_put(seg)
        self.assertLess(off, checkpoint_pos(self.db)[1], "record not checkpointed at the stop")
        xor_bytes(seg, voff + vlen // 2, 4)

        s = self.start(self.PARAMS)     # not scanned at open (open is not O(size))
        with s.conn() as c:
            r = c.request(b"get %s\r\n" % key)
            self.assertTrue(r.startswith(b"SERVER_ERROR"), "damaged record: %r" % r[:100])
            self.assertEqual(c.request(b"get k000\r\n"), b"VALUE k000 0 500\r\n%s\r\nEND\r\n" % model[b"k000"][1])
            self.assertGreaterEqual(int(stats(c)["hash_corrupt_reads"]), 1)
        poll_until(lambda: "corrupt record in %s at offset %d" % (seg, off) in s.stderr(), timeout=3,
                   what="the log to name the damaged record")
        self.assertRegex(s.stderr(), r" ERROR hash file .*: corrupt record in ")   # a level to alert on
        self.check_keys(s, {k: v for k, v in model.items() if k != key})
        self.stop(s)

        s = self.start(self.PARAMS, recover=True)
        with s.conn() as c:
            self.assertGreaterEqual(int(stats(c)["hash_recovery_lost"]), 1)
        self.check_keys(s, model, missing={key})
        self.stop(s)

    def torn(self, how):
        s, model = self.fill()
        s.kill9()
        shutil.rmtree(s.tmpdir, ignore_errors=True)
        seg = seg_files(self.db)[-1]
        off, typ, key, vlen, voff = records(seg)[-1]
        self.assertEqual((typ, key), (1, b"k199"))
        cut = voff + vlen // 2
        if how == "truncate":
            os.truncate(seg, cut)
        else:               # a partial memcpy into the mapping: zeros after it
            with open(seg, "r+b") as f:
                f.seek(cut)
                f.write(bytes(voff + vlen - cut))
        s = self.start(self.PARAMS)
        self.assertIn("%s: a torn record at offset" % seg, s.stderr())
        # every cut of data is an ERROR line saying what went
        self.assertRegex(s.stderr(), r" ERROR hash file .*: a torn record at offset \d+: cutting off")
        with s.conn() as c:
            self.assertGreater(int(stats(c)["hash_truncated_bytes"]), 0)
            self.assertEqual(c.request(b"set after 0 0 5\r\nafter\r\n"), b"STORED\r\n")
        self.check_keys(s, model, missing={key})
        self.stop(s)
        s = self.start(self.PARAMS)
        self.check_keys(s, model, missing={key})
        with s.conn() as c:
            self.assertEqual(c.request(b"get after\r\n"), b"VALUE after 0 5\r\nafter\r\nEND\r\n")
            self.assertEqual(int(stats(c)["hash_truncated_bytes"]), 0)
        self.stop(s)

    def test_torn_tail_truncated(self):
        self.torn("truncate")

    def test_torn_tail_zeros(self):
        self.torn("zeros")


# ---------------------------------------------------------------- 5. disk full

class DiskFull(PersistCase):

    def mount_tmpfs(self, size):
        return kuratest.mount_tmpfs(self, self.dir, size)

    def fill_and_recover(self, mapwrite):
        mnt = self.mount_tmpfs(8 * MB)
        filler = os.path.join(mnt, "filler")
        with open(filler, "wb") as f:
            f.write(b"\xff" * (3 * MB))
        db = os.path.join(mnt, "data.kh")
        params = "#segsiz=1m#mapwrite=%d" % mapwrite
        s = self.start(params, db=db)
        c = s.conn(timeout=10)
        model = {}
        err = None
        for i in range(1000):
            key = b"f%04d" % i
            val = derive(key, 0, 60000)
            r = c.request(b"set %s %d 0 %d\r\n%s\r\n" % (key, i, len(val), val))
            if r == b"STORED\r\n":
                model[key] = (i, val)
                continue
            err = r
            break
        self.assertIsNotNone(err, "8 MB tmpfs never filled up")
        self.assertTrue(err.startswith(b"SERVER_ERROR"), "reply on a full disk: %r" % err)
        print("# mapwrite=%d: full after %d values: %r" % (mapwrite, len(model), err), flush=True)
        self.assertGreater(len(model), 10)
        # more writes fail the same way, and the server stays up
        for i in range(5):
            r = c.request(b"set more%d 0 0 60000\r\n%s\r\n" % (i, b"m" * 60000))
            self.assertTrue(r.startswith(b"SERVER_ERROR"), r)
        # reads work, nothing stored is damaged
        self.assertEqual({k: v[:2] for k, v in get_many(c, model, b"get").items()}, model)
        st = stats(c)
        self.assertGreater(int(st["hash_write_errors"]), 0)
        # a delete needs a tombstone: it either works or fails cleanly
        r = c.request(b"delete f0000\r\n")
        self.assertIn(r[:12], (b"DELETED\r\n", b"SERVER_ERROR"), r)
        if r == b"DELETED\r\n":
            del model[b"f0000"]
        self.assertTrue(s.alive())
        # a clean stop and a start on the full disk
        c.close()
        self.stop(s)
        s = self.start(params, db=db)
        c = s.conn(timeout=10)
        self.assertEqual({k: v[:2] for k, v in get_many(c, model, b"get").items()}, model)
        # space returns: writes succeed again
        os.unlink(filler)
        val = derive(b"again", 0, 60000)
        self.assertEqual(c.request(b"set again 1 0 60000\r\n%s\r\n" % val), b"STORED\r\n")
        model[b"again"] = (1, val)
        for i in range(10):
            key = b"g%04d" % i
            val = derive(key, 0, 60000)
            self.assertEqual(c.request(b"set %s 2 0 %d\r\n%s\r\n" % (key, len(val), val)), b"STORED\r\n")
            model[key] = (2, val)
        self.assertEqual({k: v[:2] for k, v in get_many(c, model, b"get").items()}, model)
        c.close()
        self.stop(s)
        s = self.start(params, db=db)
        with s.conn(timeout=10) as c:
            got = get_many(c, list(model) + [b"f0000"], b"get")
            self.assertEqual({k: v[:2] for k, v in got.items()}, model)
        self.stop(s)

    def test_rlimit_fsize(self):
        """A file size limit (RLIMIT_FSIZE, inherited from this process at
        the fork): a record that would make a segment file larger fails with
        SERVER_ERROR (kurad ignores SIGXFSZ), everything else goes on."""
        import resource
        soft, hard = resource.getrlimit(resource.RLIMIT_FSIZE)
        limit = 4 * MB
        if hard != resource.RLIM_INFINITY and hard < limit:
            self.skipTest(kuratest.not_applicable("hard RLIMIT_FSIZE below 4 MB"))
        params = "#segsiz=1m"
        resource.setrlimit(resource.RLIMIT_FSIZE, (limit, hard))
        try:
            s = self.start(params, item_max="16m")
        finally:
            resource.setrlimit(resource.RLIMIT_FSIZE, (soft, hard))
        c = s.conn(timeout=20)
        model = {}
        for i in range(4):      # 2 MB records: each gets a segment of its own, below the limit
            key = b"big%d" % i
            val = derive(key, 0, 2 * MB)
            self.assertEqual(c.request(b"set %s 5 0 %d\r\n%s\r\n" % (key, len(val), val)), b"STORED\r\n")
            model[key] = (5, val)
        huge = derive(b"huge", 0, 6 * MB)
        r = c.request(b"set huge 0 0 %d\r\n%s\r\n" % (len(huge), huge))
        self.assertTrue(r.startswith(b"SERVER_ERROR"), "a record past RLIMIT_FSIZE: %r" % r)
        print("# RLIMIT_FSIZE: %r" % r, flush=True)
        self.assertEqual(c.request(b"get huge\r\n"), b"END\r\n")
        self.assertEqual(c.request(b"set small 1 0 2\r\nok\r\n"), b"STORED\r\n")
        model[b"small"] = (1, b"ok")
        self.assertEqual({k: v[:2] for k, v in get_many(c, model, b"get").items()}, model)
        self.assertGreater(int(stats(c)["hash_write_errors"]), 0)
        c.close()
        self.stop(s)
        s = self.start(params, item_max="16m")
        with s.conn(timeout=20) as c:
            got = get_many(c, list(model) + [b"huge"], b"get")
            self.assertEqual({k: v[:2] for k, v in got.items()}, model)
        self.stop(s)

    def test_tmpfs_full_mapwrite(self):
        self.fill_and_recover(1)

    def test_tmpfs_full_pwrite(self):
        self.fill_and_recover(0)


# ---------------------------------------------------------------- 6. large values

def get_large(conn, key, timeout=60):
    """A get of one big value, read into a bytearray (no quadratic copying)."""
    conn.send(b"get %s\r\n" % key)
    hdr = conn.line(timeout)
    p = hdr.split()
    if p[:2] != [b"VALUE", key]:
        raise AssertionError("get %r: %r" % (key, hdr[:200]))
    flags, n = int(p[2]), int(p[3])
    buf = bytearray(n + 2)
    mv = memoryview(buf)
    have = min(len(conn.buf), n + 2)
    mv[:have] = conn.buf[:have]
    conn.buf = conn.buf[have:]
    end = time.monotonic() + timeout * SCALE
    while have < n + 2:
        left = end - time.monotonic()
        if left <= 0:
            raise TimeoutError("large get: %d of %d bytes" % (have, n + 2))
        conn.sock.settimeout(left)
        k = conn.sock.recv_into(mv[have:])
        if k == 0:
            raise Closed(b"")
        have += k
    assert buf[n:] == b"\r\n"
    assert conn.line(timeout) == b"END\r\n"
    del mv
    return flags, buf[:n]


class LargeValue(PersistCase):

    def test_100mb_value(self):
        n = 100 * MB
        val = random.Random(SEED).randbytes(n)
        s = self.start("#segsiz=16m", item_max="128m")
        c = s.conn(timeout=60)
        c.sock.settimeout(120 * SCALE)
        c.sock.sendall(b"set big 77 0 %d\r\n" % n)
        c.sock.sendall(val)
        c.sock.sendall(b"\r\nset small 1 0 2\r\nok\r\n")
        self.assertEqual(c.line(120), b"STORED\r\n")
        self.assertEqual(c.line(), b"STORED\r\n")
        f, got = get_large(c, b"big")
        self.assertTrue(f == 77 and got == val, "the 100 MB value read back differs")
        del got
        c.close()
        self.stop(s)
        s = self.start("#segsiz=16m", item_max="128m")
        c = s.conn(timeout=60)
        f, got = get_large(c, b"big")
        self.assertTrue(f == 77 and got == val, "the 100 MB value differs after a restart")
        self.assertEqual(c.request(b"get small\r\n"), b"VALUE small 1 2\r\nok\r\nEND\r\n")
        c.close()
        self.stop(s)


# ---------------------------------------------------------------- 6b. the B+ tree

class TreeRestart(Restart):
    DB_NAME, KIND = "data.kb", "tree"


class TreeCrash(Crash):
    DB_NAME, KIND = "data.kb", "tree"
    # a small cache and page: checkpoints, splits and evictions under load
    PARAMS = "#segsiz=256k#ckpt=64k#pccap=1m#psiz=4096"
    WORK_STATS = ("tree_checkpoints", "tree_splits", "tree_merges")


class TreeGroupCommit(GroupCommit):
    DB_NAME, KIND = "data.kb", "tree"


class TreeLargeValue(LargeValue):
    DB_NAME, KIND = "data.kb", "tree"


# ---------------------------------------------------------------- 7. expiry

class Expiry(PersistCase):

    def test_expired_items_reclaimed(self):
        s = self.start()
        c = s.conn()
        short = [b"e%03d" % i for i in range(300)]
        keep = [b"p%03d" % i for i in range(50)]
        data = b"".join(b"set %s 0 1 100\r\n%s\r\n" % (k, derive(k, 0, 100)) for k in short)
        data += b"".join(b"set %s 0 0 100\r\n%s\r\n" % (k, derive(k, 0, 100)) for k in keep)
        self.assertEqual(set(store_lines(c, data, 350)), {b"STORED\r\n"})
        self.assertEqual(int(stats(c)["total_items"]), 350)
        # they disappear (invisible at once once expired)
        poll_until(lambda: not get_many(c, short[:1], b"get"), timeout=4, what="an exptime 1 item to expire")
        # get reclaims a third of them (they may straddle a second: poll), the
        # sweep the rest
        poll_until(lambda: not get_many(c, short[:100], b"get"), timeout=3,
                   what="100 exptime 1 items to expire")
        self.assertLessEqual(int(stats(c)["curr_items"]), 250, "get did not reclaim expired items")
        # the sweep works 5 ms a second on the main thread (main.c), so a
        # pass over 1,024 stripes takes longer in a sanitizer build
        poll_until(lambda: int(stats(c)["curr_items"]) == 50, timeout=20,
                   what="curr_items to fall to the 50 items without exptime")
        poll_until(lambda: int(stats(c)["hash_expired_bytes"]) == 0, timeout=20,
                   what="hash_expired_bytes to fall to 0")
        self.assertEqual(get_many(c, short, b"get"), {})
        self.assertEqual(len(get_many(c, keep, b"get")), 50)
        c.close()
        self.stop(s)
        s = self.start()
        with s.conn() as c:
            self.assertEqual(int(stats(c)["curr_items"]), 50)
            self.assertEqual(get_many(c, short, b"get"), {})
            self.assertEqual(len(get_many(c, keep, b"get")), 50)
        self.stop(s)


if __name__ == "__main__":
    kuratest.main()
