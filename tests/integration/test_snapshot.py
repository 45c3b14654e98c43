#!/usr/bin/python3
"""test_snapshot.py - kurad's snapshots (-bgs, -bgsi, -bgsc, -bgsn, -bgsstop,
the "snapshot" command, "stats snapshot") and the restore at start (issue 11),
on the backend KURA_DB names (tests/run runs it on each).

  Codecs       for none, zlib, bz2 and lzo: items with every field (flags,
               exptime, cas, empty and 200 KB values, 1- and 250-byte keys)
               snapshotted, the database removed, kurad started again: every
               item is back as it was (gets: value, flags, cas), the file's
               header names the codec, and new cas values are above the
               loaded ones.
  UnderLoad    with -ulog: writers set, delete and incr while a snapshot is
               taken and after; the final state is read, kurad is killed
               (-9), the database removed: the snapshot plus the update log's
               rows after it give back that state exactly.
  Kill9        kill -9 while a large bz2 snapshot is being written: only a
               temporary file is left, never under a snapshot's name; the
               next start removes it and restores the previous snapshot.
  Damage       the newest snapshot truncated, bit-flipped, or of an unknown
               version: reported by name, the one before it is used; a block
               damaged under a repaired whole-file checksum is found by the
               block's own CRC and named by its offset.
  OldFormat    a version 1 snapshot (tests/fixtures/snap-v1-lzo.ksnap, written
               by the kuractl before version 2) alone in -bgs: kurad restores
               every item of it with its flags, exptime and cas.
  KeepExisting a database that has data (here after a clean stop) is never
               overwritten by an older snapshot (file backends).
  Periodic     -bgsi 1 takes them by itself and keeps -bgsn of them;
               -bgsstop takes one at a clean stop.
  Command      "snapshot" without -bgs is a SERVER_ERROR naming the option;
               with arguments it is ERROR, as any malformed command.

Every wait polls with a deadline.  Standard library only.
"""
import glob, os, random, shutil, struct, sys, tempfile, threading, time, unittest, zlib
sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "lib"))
import kuratest
from kuratest import Server, stats, poll_until, gets_all, SCALE

CODECS = ["none", "zlib", "bz2", "lzo"]
CODEC_ID = {"none": 0, "zlib": 1, "bz2": 2, "lzo": 3}


def db_name(d):
    kind = kuratest.db_kind()
    return {"hash": os.path.join(d, "data.kh"), "tree": os.path.join(d, "data.kb")}.get(kind)


def remove_db(d):
    for name in ("data.kh", "data.kb"):
        shutil.rmtree(os.path.join(d, name), ignore_errors=True)


def snap_stats(server):
    with server.conn() as c:
        return stats(c, b"snapshot")


def take_snapshot(server, timeout=30):
    """Asks for one and waits for it; returns its path."""
    before = int(snap_stats(server)["snapshot_count"])
    with server.conn() as c:
        assert c.request(b"snapshot\r\n") == b"OK\r\n"

    def done():
        st = snap_stats(server)
        if int(st["snapshot_failures"]):
            raise AssertionError("snapshot failed: %s" % st["snapshot_last_error"])
        return int(st["snapshot_count"]) > before and st["snapshot_running"] == "0" and st
    st = poll_until(done, timeout * SCALE, what="the snapshot")
    return st["snapshot_last_path"]


def snapshots(d):
    return sorted(glob.glob(os.path.join(d, "bgs", "snap-*.ksnap")))


class Base(unittest.TestCase):
    def setUp(self):
        self.dir = tempfile.mkdtemp(prefix="kuratest-snap-")
        self.addCleanup(shutil.rmtree, self.dir, True)

    def start(self, *args, **kw):
        s = Server(db=db_name(self.dir), kura_args=["-bgs", os.path.join(self.dir, "bgs")] +
                   list(args), start_timeout=30, **kw)
        self.addCleanup(s.stop)
        return s

    def fill(self, server, n, seed=1, big=True):
        """n items with varied fields; returns their keys."""
        rnd = random.Random(seed)
        keys = []
        with server.conn(timeout=20) as c:
            for i in range(n):
                k = b"k%d_" % i + b"x" * rnd.randrange(0, 30)
                if i == 0:
                    k = b"a"
                elif i == 1:
                    k = b"K" * 250
                v = bytes(rnd.randrange(256) for _ in range(rnd.randrange(0, 300)))
                if i == 2:
                    v = b""
                elif i == 3 and big:
                    v = bytes(rnd.randrange(256) for _ in range(200 * 1024))
                flags = rnd.choice([0, 1, 0xFFFFFFFF, rnd.randrange(1 << 32)])
                exp = rnd.choice([0, 0, int(time.time()) + 100000, 86400 * 20])
                r = c.request(b"set %s %d %d %d\r\n%s\r\n" % (k, flags, exp, len(v), v))
                assert r == b"STORED\r\n", r
                keys.append(k)
        return keys


class Codecs(Base):
    def test_every_codec_round_trips(self):
        for codec in CODECS:
            with self.subTest(codec=codec):
                shutil.rmtree(os.path.join(self.dir, "bgs"), ignore_errors=True)
                remove_db(self.dir)
                s = self.start("-bgsi", "0", "-bgsc", codec)
                keys = self.fill(s, 300, seed=CODECS.index(codec))
                before = gets_all(s, keys)
                self.assertEqual(len(before), 300)
                path = take_snapshot(s)
                with open(path, "rb") as f:
                    head = f.read(64)
                self.assertEqual(head[:8], b"KURASNAP")
                self.assertEqual(head[12], CODEC_ID[codec])
                s.stop()
                remove_db(self.dir)
                s2 = self.start("-bgsi", "0", "-bgsc", codec)
                self.assertIn("restored 300 items from snapshot", s2.stderr())
                self.assertEqual(gets_all(s2, keys), before)
                # no cas handed out again
                with s2.conn() as c:
                    c.request(b"set fresh 0 0 1\r\nx\r\n")
                cas = gets_all(s2, [b"fresh"])[b"fresh"][2]
                self.assertGreater(cas, max(v[2] for v in before.values()))
                s2.stop()


class UnderLoad(Base):
    def test_snapshot_under_writes_plus_log_is_the_state(self):
        ulog = os.path.join(self.dir, "ulog")
        s = self.start("-bgsi", "0", "-ulog", ulog, threads=4)
        keys = [b"w%d" % i for i in range(400)]
        stop = threading.Event()
        errors = []
        done = [0] * 4

        def writer(n):
            rnd = random.Random(n)
            try:
                with s.conn(timeout=20) as c:
                    while not stop.is_set():
                        k = rnd.choice(keys)
                        op = rnd.random()
                        if op < 0.6:
                            v = b"%d-%d" % (n, rnd.randrange(1 << 30))
                            c.request(b"set %s %d 0 %d\r\n%s\r\n" % (k, n, len(v), v))
                        elif op < 0.8:
                            c.request(b"delete %s\r\n" % k)
                        else:
                            c.request(b"set n%s 0 0 1\r\n1\r\nincr n%s 7\r\n" % (k, k),
                                      replies=2)
                        done[n] += 1
            except Exception as e:
                errors.append(repr(e))
        ts = [threading.Thread(target=writer, args=(n,)) for n in range(4)]
        for t in ts:
            t.start()
        try:
            poll_until(lambda: len(gets_all(s, keys)) > 100, 10 * SCALE, what="writes")
            take_snapshot(s)
            take_snapshot(s)    # a second one under load too; the newest is used
            # writes after it, for the update log to give back
            after = sum(done) + 400
            poll_until(lambda: sum(done) >= after or errors, 20 * SCALE, what="more writes")
        finally:
            stop.set()
            for t in ts:
                t.join()
        self.assertEqual(errors, [])
        allkeys = keys + [b"n" + k for k in keys]
        final = gets_all(s, allkeys)
        s.kill9()
        remove_db(self.dir)
        s2 = self.start("-bgsi", "0", "-ulog", ulog)
        err = s2.stderr()
        self.assertIn("items from snapshot", err)
        self.assertRegex(err, r"[1-9][0-9]* rows applied again")
        self.assertEqual(gets_all(s2, allkeys), final)


class Kill9(Base):
    def test_kill9_while_writing_leaves_the_previous_one(self):
        s = self.start("-bgsi", "0", "-bgsc", "bz2", memory_mb=1024)
        rnd = random.Random(5)
        with s.conn(timeout=30) as c:
            c.request(b"set marker 0 0 2\r\nv1\r\n")
        first = take_snapshot(s)
        # enough incompressible data that bz2 takes seconds over it
        chunk = bytes(rnd.randrange(256) for _ in range(64 * 1024))
        with s.conn(timeout=60) as c:
            for i in range(600):
                v = chunk[i % 97:] + chunk[:i % 97]
                c.send(b"set big%d 0 0 %d noreply\r\n%s\r\n" % (i, len(v), v))
            self.assertEqual(c.request(b"set marker 0 0 2\r\nv2\r\n"), b"STORED\r\n")
        with s.conn() as c:
            self.assertEqual(c.request(b"snapshot\r\n"), b"OK\r\n")
        bgs = os.path.join(self.dir, "bgs")
        poll_until(lambda: glob.glob(os.path.join(bgs, ".snap-*.tmp")), 20 * SCALE,
                   interval=0.005, what="the snapshot's temporary file")
        s.kill9()
        self.assertEqual(snapshots(self.dir), [first], "a partial file under a snapshot's name")
        self.assertTrue(glob.glob(os.path.join(bgs, ".snap-*.tmp")))
        remove_db(self.dir)
        s2 = self.start("-bgsi", "0")
        self.assertEqual(gets_all(s2, [b"marker"])[b"marker"][1], b"v1")
        self.assertEqual(glob.glob(os.path.join(bgs, ".snap-*.tmp")), [])
        self.assertIn("unfinished", s2.stderr())


class Damage(Base):
    def two_snapshots(self):
        s = self.start("-bgsi", "0", "-bgsn", "5")
        with s.conn() as c:
            c.request(b"set state 0 0 1\r\nA\r\n")
        older = take_snapshot(s)
        with s.conn() as c:
            c.request(b"set state 0 0 1\r\nB\r\n")
        newer = take_snapshot(s)
        s.stop()
        self.assertEqual(snapshots(self.dir), sorted([older, newer]))
        return older, newer

    def restore_state(self):
        remove_db(self.dir)
        s = self.start("-bgsi", "0", "-bgsn", "5")
        got = gets_all(s, [b"state"]).get(b"state", (0, b"", 0))[1]
        err = s.stderr()
        s.stop()
        return got, err

    def test_damaged_newest_falls_back(self):
        older, newer = self.two_snapshots()
        with open(newer, "rb") as f:
            good = f.read()
        # negative check: intact, the newest is used
        self.assertEqual(self.restore_state()[0], b"B")
        cases = {
            "truncated": good[:len(good) // 2],
            "bit-flipped": good[:70] + bytes([good[70] ^ 4]) + good[71:],
        }
        # the first block's compressed bytes (after the 64-byte header and the
        # 32-byte block head), the whole file's CRC made right again
        blk = bytearray(good)
        blk[64 + 32 + 1] ^= 0x20
        blk[-4:] = struct.pack("<I", crc32c(bytes(blk[:-4])))
        cases["block damaged"] = bytes(blk)
        bad_version = bytearray(good)
        bad_version[8] = 99
        bad_version[60:64] = struct.pack("<I", crc32c(bytes(bad_version[:60])))
        cases["unknown version"] = bytes(bad_version)
        for what, data in cases.items():
            with self.subTest(what=what):
                with open(newer, "wb") as f:
                    f.write(data)
                got, err = self.restore_state()
                self.assertEqual(got, b"A")
                self.assertIn("snapshot %s not used" % newer, err)
                if what == "unknown version":
                    self.assertIn("unknown version (99)", err)
                elif what == "truncated":
                    self.assertIn("truncated", err)
                elif what == "block damaged":
                    self.assertIn("block at offset 64 fails its checksum", err)
                else:
                    self.assertIn("checksum", err)


def crc32c(data):
    """CRC-32C (Castagnoli), as the snapshot header uses."""
    crc = 0xFFFFFFFF
    for b in data:
        crc ^= b
        for _ in range(8):
            crc = (crc >> 1) ^ (0x82F63B78 if crc & 1 else 0)
    return crc ^ 0xFFFFFFFF


FIXTURE_V1 = os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "fixtures",
                          "snap-v1-lzo.ksnap")


def fixture_v1_items():
    """What FIXTURE_V1 holds: (key, flags, exptime, value), set in this
    order into a new store, so the n-th has cas n (1-based)."""
    items = [(b"a", 0, 0, b"1"), (b"K" * 250, 0xFFFFFFFF, 0, b"long key"), (b"empty", 7, 0, b""),
             (b"future", 1, 2000000000, b"expires in 2033"),
             (b"big", 42, 0, bytes((i * 7) % 251 for i in range(20000)))]
    for i in range(50):
        items.append((b"item:%03d" % i, i, 0, b"value number %d " % i * 3))
    return items


class OldFormat(Base):
    def test_version_1_restores(self):
        with open(FIXTURE_V1, "rb") as f:
            data = f.read()
        self.assertEqual(data[8:12], struct.pack("<I", 1))     # what it tests
        os.makedirs(os.path.join(self.dir, "bgs"))
        name = "snap-0000000000000000-0000000000000001.ksnap"
        with open(os.path.join(self.dir, "bgs", name), "wb") as f:
            f.write(data)
        s = self.start("-bgsi", "0")
        items = fixture_v1_items()
        got = gets_all(s, [k for k, _, _, _ in items])
        self.assertEqual(sorted(got), sorted(k for k, _, _, _ in items))
        for n, (k, flags, exp, v) in enumerate(items, 1):
            self.assertEqual(got[k], (flags, v, n), k[:20])
        with s.conn() as c:
            r = c.request(b"mg future t\r\n")     # "HD t<seconds left>": exptime kept
        self.assertTrue(r.startswith(b"HD t"), r)
        self.assertGreater(int(r[4:].split()[0]), 10 ** 8, r)


class KeepExisting(Base):
    def test_existing_database_is_never_overwritten(self):
        if kuratest.db_kind() == "cache":
            self.skipTest(kuratest.not_applicable("the cache starts empty every time"))
        s = self.start("-bgsi", "0")
        with s.conn() as c:
            c.request(b"set state 0 0 3\r\nold\r\nset gone 0 0 1\r\nx\r\n")
        take_snapshot(s)
        with s.conn() as c:
            c.request(b"set state 0 0 3\r\nnew\r\ndelete gone\r\n")
        s.stop()
        s2 = self.start("-bgsi", "0")
        got = gets_all(s2, [b"state", b"gone"])
        self.assertEqual(got[b"state"][1], b"new")
        self.assertNotIn(b"gone", got)
        self.assertNotIn("from snapshot", s2.stderr())


class Periodic(Base):
    def test_interval_keep_and_at_stop(self):
        s = self.start("-bgsi", "1", "-bgsn", "2", "-bgsstop")
        with s.conn() as c:
            c.request(b"set a 0 0 1\r\n1\r\n")
        poll_until(lambda: int(snap_stats(s)["snapshot_count"]) >= 3, 20 * SCALE,
                   what="three periodic snapshots")
        poll_until(lambda: len(snapshots(self.dir)) == 2, 5 * SCALE, what="pruning to -bgsn 2")
        names = snapshots(self.dir)
        s.stop()
        after = snapshots(self.dir)
        self.assertEqual(len(after), 2)
        self.assertGreater(after[-1], names[-1], "no snapshot at the clean stop")


class Command(Base):
    def test_without_bgs_and_bad_arguments(self):
        s = Server(db=db_name(self.dir))
        self.addCleanup(s.stop)
        with s.conn() as c:
            self.assertEqual(c.request(b"snapshot\r\n"),
                             b"SERVER_ERROR snapshots are not enabled (start kurad with -bgs DIR)\r\n")
            self.assertEqual(c.request(b"snapshot now\r\n"), b"ERROR\r\n")
            self.assertEqual(c.request(b"stats snapshot\r\n"), b"END\r\n")
        s.stop()
        s2 = self.start("-bgsi", "0")
        with s2.conn() as c:
            self.assertEqual(c.request(b"snapshot now please\r\n"), b"ERROR\r\n")
            self.assertEqual(stats(c, b"snapshot")["snapshot_count"], "0")


if __name__ == "__main__":
    kuratest.main()
