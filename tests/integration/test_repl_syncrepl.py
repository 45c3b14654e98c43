#!/usr/bin/python3
# kura-test: once
"""test_repl_syncrepl.py - -syncrepl after a timeout (issue 32): a write no
replica confirms in time is settled once, and the master goes on.

  Settled      master M (-syncrepl 1, -syncrepl-fail close) and replica R;
               R is stopped (SIGSTOP), so it acks nothing: a set on M
               waits one -syncrepl-timeout and its connection closes
               unanswered, repl_syncrepl_timeouts 1 and one ERROR line.
               Then M sits idle for three timeouts: the counter stays 1
               and no second ERROR line (nor a folded repeat) is logged.
               Negative: before the fix the group committer waited for
               the same row again and again, one timeout and one line each.
  Later write  R resumed (SIGCONT) and caught up: a later set on M is
               acknowledged, read on R at once, with no timeout counted on
               the way (the committer does not wait for the old row first).
"""
import os, signal, sys, time, unittest
sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "lib"))
import kuratest
from kuratest import Server, kura_only, stats

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from test_repl import SYNCREPL_TIMEOUT_MS, wait_caught_up

WAIT_LINE = "fewer than 1 replicas confirmed a change"


def stopped(pid):
    """True once every thread of pid is stopped (state T): a SIGSTOP is
    queued by kill() and takes effect when each thread next runs, so on a
    loaded machine the replica could still ack a row sent right after."""
    tasks = os.listdir("/proc/%d/task" % pid)
    for tid in tasks:
        with open("/proc/%d/task/%s/stat" % (pid, tid)) as f:
            if f.read().rsplit(")", 1)[1].split()[0] != "T":
                return False
    return True


def timeouts(server):
    with server.conn() as c:
        return int(stats(c)["repl_syncrepl_timeouts"])


@kura_only
class SyncreplTimeout(unittest.TestCase):

    def server(self, args):
        """A kurad with an update log in its temp dir, stopped at the end."""
        s = Server(start=False)
        s.kura_args = ["-ulog", os.path.join(s.tmpdir, "ulog")] + args
        s.start()
        self.addCleanup(s.stop)
        return s

    def test_timeout_is_settled_once(self):
        m = self.server(["-sid", "1", "-syncrepl", "1",
                              "-syncrepl-timeout", str(SYNCREPL_TIMEOUT_MS)])
        r = self.server(["-sid", "2", "-mhost", "127.0.0.1", "-mport", str(m.port)])
        with m.conn() as c:
            self.assertEqual(c.request(b"set before 0 0 1\r\nb\r\n"), b"STORED\r\n")
        wait_caught_up(m, r)
        self.assertEqual(timeouts(m), 0)

        os.kill(r.proc.pid, signal.SIGSTOP)
        self.addCleanup(os.kill, r.proc.pid, signal.SIGCONT)   # before its stop
        kuratest.poll_until(lambda: stopped(r.proc.pid), what="the replica stopped")
        with m.conn() as c:
            c.send(b"set held 0 0 1\r\nh\r\n")
            self.assertTrue(c.is_closed(timeout=SYNCREPL_TIMEOUT_MS / 1000 * 4 + 10),
                            "closed without a reply")
        self.assertEqual(timeouts(m), 1)

        # idle for three timeouts: failing at the first new timeout seen
        end = time.monotonic() + 3 * SYNCREPL_TIMEOUT_MS / 1000
        while time.monotonic() < end and timeouts(m) == 1:
            time.sleep(0.05)
        self.assertEqual(timeouts(m), 1, "timeouts counted while idle")
        err = m.stderr()
        self.assertEqual(err.count(WAIT_LINE), 1, err)
        self.assertNotIn("repeated", err)

        os.kill(r.proc.pid, signal.SIGCONT)
        wait_caught_up(m, r)
        with m.conn() as c, r.conn() as rc:
            self.assertEqual(c.request(b"set after 0 0 1\r\na\r\n"), b"STORED\r\n")
            self.assertEqual(rc.request(b"get after\r\n"), b"VALUE after 0 1\r\na\r\nEND\r\n")
        self.assertEqual(timeouts(m), 1, "the later write waited a timeout")
        self.assertEqual(m.stderr().count(WAIT_LINE), 1)


if __name__ == "__main__":
    kuratest.main()
