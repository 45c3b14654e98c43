#!/usr/bin/env python3
"""Failover by command: "repl promote", "repl follow" and kuractl's tree.

  Docs         docs/replication.md's failover block run as written (its
               "kuractl" lines through sh, NEW/OLD/OTHER replaced by the
               servers' addresses; its comment steps done by the test,
               which fails if their text changes without it), with OLD up,
               and with OLD killed (-9) first under -syncrepl 1: every line
               ends (each within the test's deadline), NEW chosen as the
               docs say (the highest position) has every acknowledged
               write.  Negative: the former step 2 never ends with OLD dead
  Load         master M (-syncrepl 1) with replica R1 and R1's replica R2; a
               writer on M; kuractl repl promote R1 (role "master" at once,
               its rts file holds the position it reported), writes go to
               R1, kuractl repl follow M R1: every acknowledged write is on
               R1, then on M and R2 (digest equal to R1's); R2 stayed
               connected and has R1's new writes within a deadline.
               Negative check: the same without -syncrepl loses acknowledged
               writes (so the check can fail)
  Master down  kill -9 of the master, then promote: its replica's own
               replica gets the new writes without reconnecting
  Durable      a promotion whose position cannot be synced (the failsync
               shim) is refused and the server stays a replica; negative
               check: the same steps without the failure promote it
  Copy         a former master told to follow a master whose log was pruned
               takes a full copy over its store; its own keys go, digest equal
  Errors       promote of a non-replica, follow of itself, bad addresses, a
               server with no place for a position, usage errors; the raw
               commands' replies
  Itself       follow (kuractl) and Tokyo Tyrant's setmst naming this server
               by any spelling are refused and change nothing: v4-mapped
               IPv6, short and decimal IPv4, 0.0.0.0, localhost; on a
               server listening on 0.0.0.0 and [::], any 127.x, ::1, :: and
               the machine's interface addresses too.  Negative: the same
               spellings with another server's port are followed
  Tree         kuractl repl status over fake servers: a tree three deep,
               each state (connected, reconnecting with its next attempt,
               copying, unreachable, an older master's line), unknown lags
               never "in sync", a cycle visited once, a chain deeper than 8
               listed but not asked; exit 0 only when all are in sync
"""
import fcntl, os, re, socket, struct, subprocess, sys, threading, time, unittest

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "lib"))
import kuratest
from kuratest import Server, poll_until, kura_only, stats, digest

ROOT = os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "..")
TIMEOUT = 60 * kuratest.SCALE
SYNCREPL_TIMEOUT_MS = int(min(1000 * kuratest.SCALE, 6000))


def kuractl_path():
    return os.path.join(os.path.dirname(kuratest.kurad_path()), "kuractl")


def run(*args, timeout=TIMEOUT):
    """(exit code, stdout, stderr) of kuractl with args."""
    p = subprocess.run([kuractl_path()] + [str(a) for a in args], stdout=subprocess.PIPE,
                       stderr=subprocess.PIPE, timeout=timeout)
    return p.returncode, p.stdout.decode("utf-8", "replace"), p.stderr.decode("utf-8", "replace")


def addr(server):
    return "127.0.0.1:%d" % server.port


def start(sid, master=None, ulog=True, args=(), **kw):
    """A kurad with its own -sid and -ulog (in its temp dir), a replica of
    master when given."""
    s = Server(start=False, **kw)          # the backend of KURA_DB (tests/run: each)
    a = ["-sid", str(sid)] + list(args)
    if ulog:
        a += ["-ulog", os.path.join(s.tmpdir, "ulog")]
    if master is not None:
        a += ["-mhost", "127.0.0.1", "-mport", str(master.port)]
    s.kura_args = a
    return s.start()


def repl_stats(server):
    with server.conn() as c:
        return stats(c, b"repl")


def caught_up(replica, master):
    """The replica is connected at its master's last row."""
    m, r = repl_stats(master), repl_stats(replica)
    return r.get("repl_connected") == "1" and int(r["repl_position"]) >= int(m["ulog_last_ts"])


def rts_file(server):
    """The position in a server's rts file (-ulog DIR: DIR/rts), as text."""
    try:
        with open(os.path.join(server.tmpdir, "ulog", "rts")) as f:
            return f.read().split()[0]
    except (OSError, IndexError):
        return None


def get(server, key):
    with server.conn() as c:
        r = c.request(b"get " + key + b"\r\n")
    if r == b"END\r\n":
        return None
    return r.split(b"\r\n")[1]


def interface_addresses():
    """The machine's own addresses but loopback and link-local ones: (IPv4
    list from SIOCGIFADDR, IPv6 list from /proc/net/if_inet6)."""
    v4, v6 = [], []
    for _, name in socket.if_nameindex():
        with socket.socket(socket.AF_INET, socket.SOCK_DGRAM) as s:
            try:
                r = fcntl.ioctl(s.fileno(), 0x8915, struct.pack("256s", name.encode()[:15]))
            except OSError:
                continue                        # no IPv4 address
        a = socket.inet_ntoa(r[20:24])
        if not a.startswith("127."):
            v4.append(a)
    try:
        with open("/proc/net/if_inet6") as f:
            for ln in f:
                hexa, scope = ln.split()[0], ln.split()[3]
                if scope == "00":               # global: not link-local, not loopback
                    v6.append(socket.inet_ntop(socket.AF_INET6, bytes.fromhex(hexa)))
    except OSError:
        pass
    return v4, v6


# This server (listening on 127.0.0.1, as kuratest starts it), spelled in
# ways that name the same address.
SELF_SPELLINGS = ["127.0.0.1:%d", "localhost:%d", "[::ffff:127.0.0.1]:%d", "[::ffff:7f00:1]:%d",
                  "127.1:%d", "2130706433:%d", "0.0.0.0:%d", "[::ffff:0.0.0.0]:%d"]


def setmst(server, host, port):
    """Tokyo Tyrant's setmst (tcrmgr setmst): the request written from the
    protocol (magic 0xC8, command 0x78, host size, port, ts, options, host),
    answered with one status byte."""
    req = b"\xc8\x78" + struct.pack(">IIQI", len(host), port, 0, 0) + host
    with server.conn() as c:
        c.send(req)
        return c.recv_exact(1, timeout=TIMEOUT)


class Writer:
    """Sets <prefix><i> = v<i> (prefix k by default) one at a time on the
    current target; records the keys whose STORED came back.  A write
    without its reply (the master closed the connection: -syncrepl's
    timeout) is retried on the target of the moment, as a client retries
    an unacknowledged write."""

    def __init__(self, target, prefix=b"k"):
        self.target = target
        self.prefix = prefix
        self.acked = {}
        self.failed = 0
        self.stop = False
        self.lock = threading.Lock()
        self.thread = threading.Thread(target=self._run, daemon=True)
        self.thread.start()

    def _run(self):
        i, conn, on = 0, None, None
        while not self.stop:
            key, val = self.prefix + b"%d" % i, b"v%d" % i
            try:
                if conn is None or on is not self.target:
                    if conn:
                        conn.close()
                    on = self.target
                    conn = on.conn(timeout=10)
                r = conn.request(b"set %s 0 0 %d\r\n%s\r\n" % (key, len(val), val))
            except (OSError, kuratest.Closed, AssertionError):
                r = None
            if r == b"STORED\r\n":
                with self.lock:
                    self.acked[key] = val
                i += 1
            else:               # refused, cut, or unanswered: the same key again
                with self.lock:
                    self.failed += 1
                if conn:
                    conn.close()
                conn = None
                time.sleep(0.01)
        if conn:
            conn.close()

    def count(self):
        with self.lock:
            return len(self.acked)

    def finish(self):
        self.stop = True
        self.thread.join(30)
        with self.lock:
            return dict(self.acked)


def failover_block():
    """docs/replication.md's failover commands: the indented block after
    "### Failover" that starts with "# 1."."""
    text = open(os.path.join(ROOT, "docs", "replication.md")).read()
    sec = text[text.index("### Failover"):]
    lines = []
    for ln in sec[sec.index("    # 1."):].split("\n"):
        if not ln.startswith("    "):
            break
        lines.append(ln[4:])
    return lines


# The comment steps of the block, which the test itself does (kept equal to
# the docs: a changed step fails the test until the test is changed too).
DOC_STEPS = [
    "# 1. stop the writes to OLD (if it is still up)",
    "# 2. OLD up: wait (60 s at most) until NEW has every row of OLD; OLD down: go on",
    "# 3. NEW takes writes",
    "# 4. point the writers at NEW",
    "# 5. the other replicas of OLD follow NEW",
    "# 6. OLD follows NEW if it is up (exit 3: OLD is down, see below)",
    "# 7. OTHER, and OLD if up, connected to NEW and caught up (60 s at most each)",
    "# 8. the whole tree under NEW, in sync (60 s at most)",
]

# The runbook's step 2 before issue 32: with OLD dead it never ended.
OLD_STEP_2 = "until kuractl repl status NEW:11211; do sleep 1; done"


def sh(cmd, names, timeout=TIMEOUT):
    """cmd through sh with kuractl on the PATH and the names replaced:
    (exit status, stdout, stderr)."""
    for k, v in names.items():
        cmd = cmd.replace(k, v)
    env = dict(os.environ, PATH=os.path.dirname(kuractl_path()) + ":" + os.environ["PATH"])
    p = subprocess.run(["sh", "-c", cmd], env=env, stdout=subprocess.PIPE,
                       stderr=subprocess.PIPE, timeout=timeout)
    return p.returncode, p.stdout.decode(), p.stderr.decode()


@kura_only
class FailoverTest(unittest.TestCase):

    def keep(self, *servers):
        """Each stopped at the end, checked for a clean exit."""
        for s in servers:
            self.addCleanup(s.stop)

    # ---- the docs, as written ------------------------------------------------
    def run_runbook(self, old_dead):
        """The block with OLD up (writes stopped at step 1), or with OLD
        killed under writes first (-syncrepl 1: each acknowledged write is
        on a replica) and NEW the replica with the highest position, as the
        docs say.  Returns (old, new, other, under, acknowledged, outputs)."""
        lines = failover_block()
        self.assertEqual([ln for ln in lines if ln.startswith("#")], DOC_STEPS)
        old = start(1, args=["-syncrepl", "1", "-syncrepl-timeout", str(SYNCREPL_TIMEOUT_MS)])
        a, b = start(2, master=old), start(3, master=old)
        w = Writer(old)
        poll_until(lambda: w.count() >= 50, timeout=TIMEOUT, what="writes on OLD")
        if old_dead:
            old.kill9()
            acked = w.finish()
            # both saw the stream end: every row that reached them is applied
            poll_until(lambda: all(repl_stats(s)["repl_connected"] == "0" for s in (a, b)),
                       timeout=TIMEOUT, what="the replicas to see OLD gone")
            pos = {s: int(repl_stats(s)["repl_position"]) for s in (a, b)}
            new, other = (a, b) if pos[a] >= pos[b] else (b, a)
        else:
            new, other = a, b
        under = start(4, master=new)            # a replica of NEW: stays as it is
        self.keep(new, other, under)
        if not old_dead:
            self.keep(old)
        names = {"OLD:11211": addr(old), "NEW:11211": addr(new), "OTHER:11211": addr(other)}
        ran = []
        for ln in lines:
            if ln == DOC_STEPS[0] and not old_dead:
                acked = w.finish()
            elif ln == DOC_STEPS[3]:
                # the writers' next 200 writes go to NEW (done before step 5:
                # under a write stream that never pauses, a replica is in
                # sync only at the instants it has NEW's last row, and step
                # 7's wait would wait for such an instant)
                w = Writer(new, prefix=b"n")     # keys of its own: OLD's stay OLD's
                poll_until(lambda: w.count() >= 200, timeout=TIMEOUT, what="writes on NEW")
                acked.update(w.finish())
            elif not ln.startswith("#"):
                rc, out, err = sh(ln, names, timeout=TIMEOUT + 70)   # its own waits: 60 s
                self.assertEqual(rc, 0, "%s: %s %s" % (ln, out, err))
                ran.append((ln, out))
        self.assertEqual(len(ran), 7)
        self.assertRegex(ran[1][1], r"^PROMOTED \d+ \d+\n$")
        self.assertEqual(ran[2][1], "OK following %s\n" % addr(new))
        self.assertEqual(ran[3][1], "" if old_dead else "OK following %s\n" % addr(new))
        # the writes went on at NEW; every one acknowledged anywhere is there
        for k, v in acked.items():
            self.assertEqual(get(new, k), v, k)
        for s in (other, under) if old_dead else (old, other, under):
            poll_until(lambda: caught_up(s, new), timeout=TIMEOUT, what="%r to catch up" % s)
            self.assertEqual(digest(s), digest(new))
        self.assertEqual(repl_stats(new)["repl_role"], "master")
        # the last status (run until 0) showed the whole tree
        head = "%s: master" % addr(new)
        tree = head + ran[6][1].split(head)[-1]
        self.assertEqual(tree.count(" sid "), 2 if old_dead else 3, tree)
        return old, new, other, under, acked, ran

    def test_docs_failover_steps(self):
        old, new, other, under, acked, ran = self.run_runbook(old_dead=False)
        self.assertEqual(repl_stats(old)["repl_role"], "replica")

    def test_docs_failover_steps_old_master_dead(self):
        """Issue 32: step 2 looped for ever with OLD dead.  Each step now ends
        (within the test's deadline, or sh() fails), and NEW has every write
        OLD acknowledged."""
        old, new, other, under, acked, ran = self.run_runbook(old_dead=True)
        self.assertGreaterEqual(len([k for k in acked if k.startswith(b"k")]), 50)
        # negative: the former step 2 against a replica of a dead master
        # does not end (stopped here after 3 s)
        a = start(5)
        r = start(6, master=a)
        self.keep(r)
        a.request(b"set x 0 0 1\r\n1\r\n")
        poll_until(lambda: caught_up(r, a), timeout=TIMEOUT, what="r to catch up")
        a.kill9()
        with self.assertRaises(subprocess.TimeoutExpired):
            sh(OLD_STEP_2, {"NEW:11211": addr(r)}, timeout=3)

    # ---- under load ----------------------------------------------------------------
    def promote_under_load(self, syncrepl):
        extra = ["-syncrepl", "1", "-syncrepl-timeout", str(SYNCREPL_TIMEOUT_MS)] if syncrepl else []
        m = start(1, args=extra)
        r1 = start(2, master=m)
        r2 = start(3, master=r1)
        self.keep(m, r1, r2)
        w = Writer(m)
        poll_until(lambda: w.count() >= 200, timeout=TIMEOUT, what="writes on M")
        connects = repl_stats(r2)["repl_connects"]
        before = repl_stats(r1)
        self.assertEqual(before["repl_role"], "replica")
        rc, out, err = run("repl", "promote", addr(r1))
        self.assertEqual(rc, 0, err)
        pos, own = map(int, re.fullmatch(r"PROMOTED (\d+) (\d+)\n", out).groups())
        # the role changed before the answer; the position is durable
        self.assertEqual(repl_stats(r1)["repl_role"], "master")
        self.assertGreaterEqual(pos, int(before["repl_position"]))
        self.assertEqual(rts_file(r1), str(pos))
        # the writer goes on at M until a write fails there (or some more
        # were acknowledged: without -syncrepl nothing waits for R1)
        n, failed = w.count(), w.failed
        poll_until(lambda: w.failed > failed or w.count() >= n + 20, timeout=TIMEOUT,
                   what="more writes on M after the promotion")
        w.target = r1
        poll_until(lambda: w.count() >= n + 100, timeout=TIMEOUT, what="writes on R1")
        rc, out, err = run("repl", "follow", addr(m), addr(r1))
        self.assertEqual((rc, out), (0, "OK following %s\n" % addr(r1)), err)
        acked = w.finish()
        lost = [k for k, v in acked.items() if get(r1, k) != v]
        return m, r1, r2, acked, lost, connects

    def test_promote_follow_under_load(self):
        m, r1, r2, acked, lost, connects = self.promote_under_load(syncrepl=True)
        self.assertEqual(lost, [], "acknowledged writes missing on the new master")
        for s in (m, r2):
            poll_until(lambda: caught_up(s, r1), timeout=TIMEOUT, what="%r to catch up" % s)
            for k, v in acked.items():
                self.assertEqual(get(s, k), v, k)
            self.assertEqual(digest(s), digest(r1))
        # R2 never had to reconnect: its master was promoted in place
        st = repl_stats(r2)
        self.assertEqual((st["repl_connected"], st["repl_connects"]), ("1", connects))

    def test_negative_without_syncrepl_acked_writes_are_lost(self):
        """The check above can fail: without -syncrepl, M acknowledges writes
        R1 never gets once R1 stopped following."""
        m, r1, r2, acked, lost, connects = self.promote_under_load(syncrepl=False)
        self.assertNotEqual(lost, [])

    def test_replica_of_promoted_gets_new_writes(self):
        m = start(1)
        r1 = start(2, master=m)
        r2 = start(3, master=r1)
        self.keep(m, r1, r2)
        m.request(b"set a 0 0 1\r\n1\r\n")
        poll_until(lambda: get(r2, b"a") == b"1", timeout=TIMEOUT, what="the chain")
        self.assertEqual(r1.request(b"set b 0 0 1\r\n2\r\n"),
                         b"SERVER_ERROR this server is a read-only replica (write to its master)\r\n")
        self.assertRegex(r1.request(b"repl promote\r\n"), rb"^PROMOTED \d+ \d+\r\n$")
        self.assertEqual(r1.request(b"set b 0 0 1\r\n2\r\n"), b"STORED\r\n")
        poll_until(lambda: get(r2, b"b") == b"2", timeout=TIMEOUT, what="R2 to get R1's write")
        # M, still up, is told of R1's higher term by R1's probe (issue 32):
        # it stops taking writes and follows R1, and gets R1's write
        poll_until(lambda: repl_stats(m).get("repl_master") == addr(r1), timeout=TIMEOUT,
                   what="M to follow R1")
        poll_until(lambda: get(m, b"b") == b"2", timeout=TIMEOUT, what="M to get R1's write")
        self.assertEqual(m.request(b"set c 0 0 1\r\n3\r\n"),
                         b"SERVER_ERROR this server is a read-only replica (write to its master)\r\n")

    def test_tt_setmst_follows_and_promotes(self):
        """Tokyo Tyrant's setmst (tcrmgr setmst) is the same as follow, and
        an empty host the same as promote: the request written from the
        protocol (magic 0xC8, command 0x78, host size, port, ts, options,
        host), answered with one status byte (setmst() above)."""
        m = start(1)
        r = start(2)                    # a master of its own, told to follow m
        self.keep(m, r)
        m.request(b"set a 0 0 1\r\n1\r\n")
        self.assertEqual(setmst(r, b"127.0.0.1", m.port), b"\x00")
        poll_until(lambda: get(r, b"a") == b"1", timeout=TIMEOUT, what="r to follow m")
        self.assertEqual(r.request(b"set b 0 0 1\r\n2\r\n"),
                         b"SERVER_ERROR this server is a read-only replica (write to its master)\r\n")
        self.assertEqual(setmst(r, b"", 0), b"\x00")      # promoted
        self.assertEqual(r.request(b"set b 0 0 1\r\n2\r\n"), b"STORED\r\n")
        # not a replica any more: nothing to stop, 0 as ttserver answers it
        self.assertEqual(setmst(r, b"", 0), b"\x00")
        self.assertEqual(r.request(b"set c 0 0 1\r\n3\r\n"), b"STORED\r\n")
        self.assertEqual(setmst(r, b"127.0.0.1", r.port), b"\x01")   # itself

    def test_setmst_host_escaped_in_log(self):
        """Issue 32: setmst's host went into the log as it came, so a newline
        in it wrote a line of the sender's.  Every control byte is escaped
        (\\xNN); the forged text stays inside setmst's own line."""
        m = start(1)
        self.keep(m)
        forged = b"2026-01-01T00:00:00.000000 ERROR forged line"
        for host in (b"evil\n" + forged, b"evil\r\n" + forged, b"x\x1b[2Jy\x7fz\x9b"):
            self.assertEqual(setmst(m, host, 11211), b"\x01", host)
        log = m.stderr()
        lines = log.split("\n")
        self.assertFalse([ln for ln in lines if ln.startswith(forged.decode())], log)
        self.assertEqual(sum("Tokyo Tyrant setmst" in ln for ln in lines), 3, log)
        self.assertIn("Tokyo Tyrant setmst evil\\x0a%s:11211" % forged.decode(), log)
        self.assertIn("Tokyo Tyrant setmst evil\\x0d\\x0a2026", log)
        self.assertIn("Tokyo Tyrant setmst x\\x1b[2Jy\\x7fz\\x9b:11211", log)
        self.assertNotIn("\x1b", log)
        # the text command: a control byte is a bad address, and not echoed
        with m.conn() as c:
            self.assertEqual(c.request(b"repl follow a\x1bb:1\r\n"),
                             b"CLIENT_ERROR bad address (HOST[:PORT], port 1-65535)\r\n")
        self.assertEqual(repl_stats(m)["repl_role"], "master")

    def test_promote_with_master_down(self):
        """The usual failover: the master is gone (kill -9); the replica is
        promoted at once and its own replica follows it without a restart."""
        m = start(1)
        r1 = start(2, master=m)
        r2 = start(3, master=r1)
        self.keep(r1, r2)
        m.request(b"set a 0 0 1\r\n1\r\n")
        poll_until(lambda: get(r2, b"a") == b"1", timeout=TIMEOUT, what="the chain")
        m.kill9()
        poll_until(lambda: repl_stats(r1)["repl_connected"] == "0", timeout=TIMEOUT,
                   what="R1 to see its master gone")
        rc, out, err = run("repl", "promote", addr(r1))
        self.assertEqual(rc, 0, err)
        self.assertRegex(out, r"^PROMOTED \d+ \d+\n$")
        self.assertEqual(r1.request(b"set b 0 0 1\r\n2\r\n"), b"STORED\r\n")
        poll_until(lambda: get(r2, b"b") == b"2", timeout=TIMEOUT, what="R2 to get R1's write")
        self.assertEqual(repl_stats(r2)["repl_connects"], "1")

    def test_promote_refused_when_the_position_cannot_be_made_durable(self):
        """A promotion writes the position first: when the sync under it
        fails (the failsync shim), the server stays a replica and says so.
        Negative check: the same steps without the failure promote it."""
        shim = os.path.join(os.environ.get("KURA_BUILD", "build-test"), "tests", "libfailsync.so")
        if not os.path.exists(shim):
            self.skipTest(kuratest.missing("%s (make builds it)" % shim))
        for fail in (True, False):
            m = start(1)
            # the cache: its store has no sync of its own, so the update
            # log's (the rts file's, once a second) is the first to fail; on
            # a file store a write syncs the store's log and the failure
            # stops the replica applying b (the check is the same code)
            r1 = Server(start=False, threads=2, db="*")
            trigger = os.path.join(r1.tmpdir, "fail-now")
            r1.env = dict(os.environ, LD_PRELOAD=os.path.abspath(shim),
                          KURA_FAILSYNC_TRIGGER=trigger,
                          ASAN_OPTIONS=os.environ.get("ASAN_OPTIONS", "") +
                          ":verify_asan_link_order=0")
            # -sync none: no sync but the rts file's (once a second, after
            # the rows of a batch are applied), so b is applied first
            r1.kura_args = ["-sid", "2", "-sync", "none", "-ulog", os.path.join(r1.tmpdir, "ulog"),
                            "-mhost", "127.0.0.1", "-mport", str(m.port)]
            r1.start()
            self.addCleanup(m.stop)
            self.addCleanup(r1.stop, check=False)   # a failed sync: no clean stop
            m.request(b"set a 0 0 1\r\n1\r\n")
            poll_until(lambda: caught_up(r1, m), timeout=TIMEOUT, what="R1 to catch up")
            # a's position in the rts file: no sync is due until b comes
            pos = repl_stats(r1)["repl_position"]
            poll_until(lambda: rts_file(r1) == pos, timeout=TIMEOUT, what="the rts file")
            if fail:
                open(trigger, "w").close()
            m.request(b"set b 0 0 1\r\n2\r\n")
            poll_until(lambda: caught_up(r1, m), timeout=TIMEOUT, what="R1 to apply b")
            reply = r1.request(b"repl promote\r\n")
            if fail:
                self.assertRegex(reply, rb"^SERVER_ERROR the position \(\d+\) could not be "
                                        rb"written durably .*: still a replica\r\n$")
                self.assertEqual(repl_stats(r1)["repl_role"], "replica")
                self.assertTrue(r1.request(b"set c 0 0 1\r\n3\r\n").startswith(b"SERVER_ERROR"))
            else:
                self.assertRegex(reply, rb"^PROMOTED \d+ \d+\r\n$")
                self.assertEqual(repl_stats(r1)["repl_role"], "master")

    def test_follow_takes_a_copy_over_the_store(self):
        """A server that started as a master follows one whose log no longer
        starts at the beginning: it takes a full copy over its store (not
        swappable: it was not started as a replica), and the keys the copy
        does not bring go; the two then hold the same."""
        a = start(1, args=["-ulim", "64k", "-ulmax", "192k"])
        b = start(2)
        self.keep(a, b)
        val = b"x" * 1000
        with a.conn() as c:
            for i in range(600):
                c.request(b"set k%d 0 0 %d\r\n%s\r\n" % (i % 300, len(val), val))
            poll_until(lambda: int(stats(c)["ulog_from_ts"]) > 0, timeout=TIMEOUT,
                       what="a's oldest rows pruned")
        with b.conn() as c:
            for i in range(50):
                c.request(b"set own%d 0 0 1\r\nb\r\n" % i)
        self.assertEqual(b.request(b"repl follow 127.0.0.1:%d\r\n" % a.port),
                         b"OK following 127.0.0.1:%d\r\n" % a.port)
        poll_until(lambda: caught_up(b, a), timeout=TIMEOUT, what="b to take the copy")
        self.assertEqual(repl_stats(b)["repl_copies_received"], "1")
        self.assertIsNone(get(b, b"own1"))
        self.assertEqual(digest(b), digest(a))

    # ---- errors ------------------------------------------------------------------
    def test_errors(self):
        m = start(1)
        bare = start(5, ulog=False)             # nowhere to keep a position
        self.keep(m, bare)
        rc, out, err = run("repl", "promote", addr(m))
        self.assertEqual((rc, out), (4, ""))
        self.assertIn("SERVER_ERROR not a replica: nothing to promote", err)
        for target, why in (("127.0.0.1:%d" % m.port, "cannot follow itself"),
                            ("localhost:%d" % m.port, "cannot follow itself"),
                            ("127.0.0.1:0", "bad address"),
                            ("127.0.0.1:99999", "bad address"),
                            ("127.0.0.1:x", "bad address"),
                            ("no-such-host.invalid:11211", "bad address")):
            rc, out, err = run("repl", "follow", addr(m), target)
            self.assertEqual((rc, out), (4, ""), target)
            self.assertIn(why, err, target)
        rc, out, err = run("repl", "follow", addr(bare), addr(m))
        self.assertEqual(rc, 4)
        self.assertIn("-ulog DIR (or -rts FILE)", err)
        self.assertEqual(repl_stats(m)["repl_role"], "master")     # refusals changed nothing
        self.assertEqual(repl_stats(bare)["repl_role"], "none")
        for args in (["repl"], ["repl", "sideways"], ["repl", "follow"],
                     ["repl", "promote", "a", "b"], ["repl", "status", "a", "b"],
                     ["repl", "follow", "a", "b", "c"]):
            rc, out, err = run(*args)
            self.assertEqual(rc, 2, args)
            self.assertIn("usage", err, args)
        rc, out, err = run("-t", "2", "repl", "promote", "127.0.0.1:1")
        self.assertEqual(rc, 3)
        with m.conn() as c:
            self.assertEqual(c.request(b"repl promote x\r\n"),
                             b"CLIENT_ERROR usage: repl promote [force]\r\n")
            self.assertEqual(c.request(b"repl follow\r\n"),
                             b"CLIENT_ERROR usage: repl follow HOST[:PORT]\r\n")
            self.assertEqual(c.request(b"repl follow a b\r\n"),
                             b"CLIENT_ERROR usage: repl follow HOST[:PORT]\r\n")
            self.assertEqual(c.request(b"repl 1\r\n"), b"ERROR\r\n")
            self.assertEqual(c.request(b"repl follow 127.0.0.1:%d\r\n" % m.port),
                             b"CLIENT_ERROR 127.0.0.1:%d is this server: it cannot follow "
                             b"itself\r\n" % m.port)
            self.assertEqual(c.request(b"get a\r\n"), b"END\r\n")   # still serving

    def test_follow_itself_by_any_spelling(self):
        """Issue 32: "[::ffff:127.0.0.1]:PORT" made a server follow itself
        and refuse every write.  Addresses are compared, not spellings."""
        m = start(1)
        other = start(2)
        self.keep(m, other)
        for sp in SELF_SPELLINGS:
            target = sp % m.port
            rc, out, err = run("repl", "follow", addr(m), target)
            self.assertEqual((rc, out), (4, ""), target)
            self.assertIn("is this server: it cannot follow itself", err, target)
            host = re.sub(r"^\[|\]$", "", target.rsplit(":", 1)[0]).encode()
            self.assertEqual(setmst(m, host, m.port), b"\x01", target)
        self.assertEqual(repl_stats(m)["repl_role"], "master")
        self.assertEqual(m.request(b"set a 0 0 1\r\n1\r\n"), b"STORED\r\n")
        self.assertNotIn("following", m.stderr())
        # negative: the same spellings with another server's port are followed
        for sp in SELF_SPELLINGS:
            rc, out, err = run("repl", "follow", addr(other), sp % m.port)
            self.assertEqual((rc, out), (0, "OK following %s\n" % (sp % m.port)
                                         .replace("[", "").replace("]", "")), err)
        poll_until(lambda: get(other, b"a") == b"1", timeout=TIMEOUT, what="other follows m")

    def test_follow_itself_wildcard_listener(self):
        """Listening on 0.0.0.0 and [::], a server answers on every address of
        the machine: any of them with its port is itself."""
        w = start(1, args=["-host", "0.0.0.0,::"])
        self.keep(w)
        v4, v6 = interface_addresses()
        targets = [sp % w.port for sp in SELF_SPELLINGS] + [
            "127.0.0.2:%d" % w.port, "127.1.2.3:%d" % w.port, "[::ffff:127.0.0.2]:%d" % w.port,
            "[::1]:%d" % w.port, "[::]:%d" % w.port]
        targets += ["%s:%d" % (a, w.port) for a in v4] + ["[::ffff:%s]:%d" % (a, w.port) for a in v4]
        targets += ["[%s]:%d" % (a, w.port) for a in v6]
        for target in targets:
            rc, out, err = run("repl", "follow", addr(w), target)
            self.assertEqual((rc, out), (4, ""), target)
            self.assertIn("cannot follow itself", err, target)
        self.assertEqual(repl_stats(w)["repl_role"], "master")
        self.assertEqual(w.request(b"set a 0 0 1\r\n1\r\n"), b"STORED\r\n")
        # negative: another port on the same addresses is not this server
        rc, out, err = run("repl", "follow", addr(w), "127.0.0.2:%d" % (w.port ^ 1))
        self.assertEqual((rc, out), (0, "OK following 127.0.0.2:%d\n" % (w.port ^ 1)), err)

    def test_follow_and_back(self):
        """A master told to follow becomes read-only and gets the other's
        data; promoted back, it takes writes again."""
        a = start(1)
        b = start(2)
        self.keep(a, b)
        a.request(b"set x 0 0 1\r\n1\r\n")
        b.request(b"set y 0 0 1\r\n2\r\n")
        self.assertEqual(b.request(b"repl follow 127.0.0.1:%d\r\n" % a.port),
                         b"OK following 127.0.0.1:%d\r\n" % a.port)
        self.assertEqual(repl_stats(b)["repl_role"], "replica")
        # b's own row y is one a never had: with the history check, b takes
        # a full copy; promote refuses while a copy arrives, so wait for it
        poll_until(lambda: caught_up(b, a) and repl_stats(b)["repl_copying"] == "0",
                   timeout=TIMEOUT, what="b to catch up with a")
        self.assertEqual(get(b, b"x"), b"1")
        self.assertEqual(b.request(b"set z 0 0 1\r\n3\r\n"),
                         b"SERVER_ERROR this server is a read-only replica (write to its master)\r\n")
        rc, out, err = run("repl", "status", addr(b))
        self.assertIn("replica of 127.0.0.1:%d" % a.port, out)
        self.assertRegex(b.request(b"repl promote\r\n"), rb"^PROMOTED \d+ \d+\r\n$")
        self.assertEqual(b.request(b"set z 0 0 1\r\n3\r\n"), b"STORED\r\n")
        self.assertEqual(repl_stats(b)["repl_role"], "master")


# ---- kuractl's tree over fake servers ---------------------------------------------

class FakeStats:
    """Answers "stats repl" with the lines lines() gives (a list of (name,
    value)), on a port of its own, to any number of connections."""

    def __init__(self):
        self.ls = socket.socket()
        self.ls.bind(("127.0.0.1", 0))
        self.ls.listen(16)
        self.port = self.ls.getsockname()[1]
        self.lines = []
        self.asked = 0
        threading.Thread(target=self._serve, daemon=True).start()

    def addr(self):
        return "127.0.0.1:%d" % self.port

    def _serve(self):
        while True:
            try:
                a, _ = self.ls.accept()
            except OSError:
                return
            threading.Thread(target=self._one, args=(a,), daemon=True).start()

    def _one(self, a):
        f = a.makefile("rb")
        try:
            for ln in f:
                if ln.strip() == b"stats repl":
                    self.asked += 1
                    a.sendall(b"".join(b"STAT %s %s\r\n" % (n.encode(), v.encode())
                                       for n, v in self.lines) + b"END\r\n")
                else:
                    a.sendall(b"ERROR\r\n")
        except OSError:
            pass
        finally:
            a.close()

    def close(self):
        self.ls.close()


def master_lines(last, replicas):
    return [("repl_role", "master"), ("ulog_last_ts", str(last)),
            ("repl_replicas", str(len(replicas)))] + \
           [("repl_replica_%d" % sid, v) for sid, v in replicas]


def replica_lines(master, state, pos, lag_us, replicas=(), last=0, **more):
    l = [("repl_role", "replica"), ("ulog_last_ts", str(last or pos)),
         ("repl_master", master), ("repl_state", state),
         ("repl_connected", "1" if state == "connected" else "0"),
         ("repl_copying", "1" if state == "copying" else "0"),
         ("repl_position", str(pos)), ("repl_lag_us", lag_us)]
    l += [(k, v) for k, v in more.items()]
    return l + [("repl_replica_%d" % sid, v) for sid, v in replicas]


def line(fake_or_port, state, acked, sent, rows, us):
    port = fake_or_port if isinstance(fake_or_port, int) else fake_or_port.port
    return "127.0.0.1:%d,state=%s,acked=%d,sent=%d,lag_rows=%s,lag_us=%s" % (
        port, state, acked, sent, rows, us)


class TreeTest(unittest.TestCase):

    def setUp(self):
        self.fakes = [FakeStats() for _ in range(5)]

    def tearDown(self):
        for f in self.fakes:
            f.close()

    def test_tree_in_sync(self):
        a, b, c = self.fakes[:3]
        T = 1000 << 12
        a.lines = master_lines(T, [(2, line(b, "streaming", T, T, 0, 0))])
        b.lines = replica_lines(a.addr(), "connected", T, "0",
                                [(3, line(c, "streaming", T, T, 0, 0))])
        c.lines = replica_lines(b.addr(), "connected", T, "0")
        rc, out, err = run("repl", "status", a.addr())
        self.assertEqual(rc, 0, out + err)
        want = ["%s: master; last row %d" % (a.addr(), T),
                "  sid 2 %s: connected, in sync, position %d" % (b.addr(), T),
                "    sid 3 %s: connected, in sync, position %d" % (c.addr(), T)]
        got = out.splitlines()
        self.assertEqual(len(got), 3, out)
        for g, w in zip(got, want):
            self.assertTrue(g.startswith(w), (g, w))
            self.assertNotIn("unknown", g)
        self.assertTrue(got[1].endswith("lag 0 rows, 0.000 s"), got[1])
        # the replica asked directly: its master, and its own replica below it
        rc, out, err = run("repl", "status", b.addr())
        self.assertEqual(rc, 0, out + err)
        self.assertIn("replica of %s: connected, in sync" % a.addr(), out)
        self.assertIn("  sid 3 %s: connected, in sync" % c.addr(), out)

    def test_tree_states(self):
        a, b, c, d, e = self.fakes
        T = 5000 << 12
        dead = kuratest.free_port()
        a.lines = master_lines(T, [
            (2, line(b, "streaming", T, T, 0, 0)),
            (3, line(c, "streaming", T - 4096, T, 7, 1000)),
            (4, line(dead, "streaming", T, T, 0, 0)),
            (5, "127.0.0.1:40000,acked=%d,lag_us=0,lag_rows=0" % T),   # an older master
            (6, line(d, "copying", 0, 0, "unknown", "unknown")),
        ])
        # b: in sync, with a replica e that is reconnecting, and a cycle back to a
        b.lines = replica_lines(a.addr(), "connected", T, "0", [
            (7, line(e, "streaming", T - 8192, T, "unknown", "unknown")),
            (1, line(a, "streaming", T, T, 0, 0))], last=T)
        c.lines = replica_lines(a.addr(), "connected", T - 4096, "1000")
        d.lines = replica_lines(a.addr(), "copying", 0, "unknown")
        e.lines = replica_lines(b.addr(), "reconnecting", T - 8192, "unknown",
                                repl_next_attempt_ms="1600",
                                repl_last_error="connection refused")
        rc, out, err = run("repl", "status", a.addr())
        self.assertEqual(rc, 1, out + err)
        got = {ln.split()[1]: ln for ln in out.splitlines() if ln.lstrip().startswith("sid ")}
        self.assertIn("connected, in sync", got["2"])
        self.assertIn("connected, not in sync", got["3"])
        self.assertIn("lag 7 rows, 0.001 s", got["3"])
        self.assertIn("unreachable", got["4"])
        self.assertIn("its master says: streaming", got["4"])
        self.assertNotIn(", in sync", got["4"])
        self.assertIn("its serving port: not in this master's stats", got["5"])
        self.assertIn("in sync", got["5"])     # by the older master's own line
        self.assertIn("copying, not in sync", got["6"])
        self.assertIn("lag unknown", got["6"])
        self.assertIn("reconnecting, not in sync, next attempt in 1.6 s", got["7"])
        self.assertIn("lag unknown (connection refused)", got["7"])
        self.assertTrue(got["7"].startswith("    sid 7"), got["7"])
        self.assertIn("(listed above)", got["1"])          # the cycle: a once
        self.assertEqual(a.asked, 1)

    def test_tree_depth_bounded(self):
        """A chain deeper than 8: the ninth level is listed, not asked."""
        chain = [FakeStats() for _ in range(11)]
        self.fakes += chain
        T = 7000 << 12
        chain[0].lines = master_lines(T, [(2, line(chain[1], "streaming", T, T, 0, 0))])
        for i in range(1, 11):
            below = [(i + 2, line(chain[i + 1], "streaming", T, T, 0, 0))] if i < 10 else []
            chain[i].lines = replica_lines(chain[i - 1].addr(), "connected", T, "0", below)
        rc, out, err = run("repl", "status", chain[0].addr())
        self.assertEqual(rc, 1, out)
        got = out.splitlines()
        self.assertEqual(len(got), 10, out)
        self.assertIn("sid 10 %s: (deeper than the tree shown: not asked)" % chain[9].addr(),
                      got[9])
        self.assertEqual([f.asked for f in chain], [1] * 9 + [0, 0])

    def test_unknown_lag_is_never_in_sync(self):
        """Negative check of the rule: a connected replica whose lags are
        unknown (a new stream, or a server that does not say) is not in sync
        unless its position is its master's last row."""
        a, b = self.fakes[:2]
        T = 9000 << 12
        a.lines = master_lines(T, [(2, line(b, "streaming", T - 4096, T, "unknown", "unknown"))])
        b.lines = replica_lines(a.addr(), "connected", T - 4096, "unknown")
        rc, out, err = run("repl", "status", a.addr())
        self.assertEqual(rc, 1, out)
        self.assertIn("not in sync", out)
        b.lines = replica_lines(a.addr(), "connected", T, "unknown")
        rc, out, err = run("repl", "status", a.addr())
        self.assertEqual(rc, 0, out)


if __name__ == "__main__":
    kuratest.main()
