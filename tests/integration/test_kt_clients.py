#!/usr/bin/python3
# Kyoto Tycoon's own clients against kurad's -kt listener, on every backend
# (issue 34, item 5): ktremotetest order, order -rnd, bulk, bulk -bin,
# wicked and usual (4 threads each), each ending "ok" with exit status 0,
# against kurad and, on the same requests, against ktserver (on a .kch for
# the hash file and the cache, a .kct for the B+ tree) to show they pass
# there; and ktremotemgr set (plain, -add, -rep, -app, -inci, -xt), get
# (-px, -pt, -rm), list (-pv, -max, a start key), report, inform, remove
# and clear (KNOWN_GAPS apart: list -des, checked to differ until kurad's
# cursors walk backwards), whose standard output, error lines (the port taken out) and
# exit status must be ktserver's (list in key order on the tree; as a set
# elsewhere, the order of a hash database being its own; inform's count
# line; report's db_total_count line).
#
# The programs are built from Kyoto Tycoon 0.9.56's public source, which
# this tree does not carry (docs/HACKING.md, "Kyoto Tycoon's clients"):
# KURA_KT_BIN names the directory holding ktserver, ktremotetest and
# ktremotemgr (and libkyototycoon.so.2).  Without it the tests skip as not
# applicable: CI has no network to fetch the source.
import os, subprocess, sys, unittest
sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "lib"))
import kuratest
import ktref
from kuratest import ServerTestCase, not_applicable

RNUM = 1000
# ktremotemgr steps where kurad does not (yet) answer as ktserver, with the
# reason; test_ktremotemgr_known_gaps checks that each still differs (once
# one does not, it fails until the entry is removed and the step joins
# test_ktremotemgr's)
KNOWN_GAPS = {
    ("list", "-des"): "a descending list walks a cursor backwards: kurad does on every "
                      "backend, ktserver on a .kct only (a .kch answers 501), so on the "
                      "hash file and the cache the two differ",
}
# The backends where kurad answers such a step as ktserver: the gap is
# closed there and the step is compared with the others.
GAPS_CLOSED_ON = {("list", "-des"): {"tree"}}
MODES = [("order", []), ("order", ["-rnd"]), ("bulk", []), ("bulk", ["-bin"]),
         ("wicked", []), ("usual", [])]


def why_not():
    if kuratest.is_memcached():
        return not_applicable("Kyoto Tycoon's protocols are kurad's")
    return ktref.why_no_bin()


def run(prog, args, timeout=600):
    p = subprocess.run([ktref.program(prog)] + [str(a) for a in args], env=ktref.env(),
                       cwd=ktref.BIN, stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                       timeout=timeout * kuratest.SCALE)
    return p.returncode, p.stdout.decode("utf-8", "replace"), p.stderr.decode("utf-8", "replace")


@unittest.skipIf(why_not() is not None, why_not() or "")
class KTClients(ServerTestCase):
    def setUp(self):
        pass    # each test starts the servers it needs

    def reference(self):
        srv = ktref.KtServer(ktref.kt_db(kuratest.db_kind()))
        self.addCleanup(srv.stop)
        return srv.port

    def kurad(self):
        return ktref.start_kurad(self)[1]

    def ktremotetest(self, port, who):
        for mode, extra in MODES:
            with self.subTest(server=who, mode=" ".join([mode] + extra)):
                rc, out, err = run("ktremotetest", [mode, "-th", 4] + extra +
                                   ["-host", "127.0.0.1", "-port", port, RNUM])
                self.assertTrue(rc == 0 and out.rstrip().endswith("ok"),
                                "ktremotetest %s %s against %s: exit %d\n%s\n%s" %
                                (mode, " ".join(extra), who, rc,
                                 "\n".join(out.splitlines()[-15:]), err[-3000:]))

    def test_ktremotetest_ktserver(self):
        self.ktremotetest(self.reference(), "ktserver")

    def test_ktremotetest_kurad(self):
        self.ktremotetest(self.kurad(), "kurad")

    def ktremotemgr(self, steps):
        """The same ktremotemgr commands against ktserver and kurad, step by
        step: [(step, kurad's (status, output, errors), ktserver's)]."""
        ports = {"ktserver": self.reference(), "kurad": self.kurad()}
        ordered = kuratest.db_kind() == "tree"
        out = []
        for step in steps:
            got = {}
            for who, port in ports.items():
                rc, text, err = run("ktremotemgr", [step[0], "-host", "127.0.0.1",
                                                    "-port", port] + step[1:], timeout=60)
                err = err.replace(":%d:" % port, ":PORT:").replace(ktref.program(""), "")
                got[who] = (rc, self.shape(step, text, ordered), err)
            out.append((step, got["kurad"], got["ktserver"]))
        return out

    def test_ktremotemgr(self):
        """The same output and exit status as against ktserver, step by step
        (but for KNOWN_GAPS)."""
        steps = [
            ["clear"], ["set", "k1", "v1"], ["set", "-add", "k1", "v2"], ["get", "k1"],
            ["get", "none"], ["set", "-rep", "none", "x"], ["set", "-rep", "k1", "v3"],
            ["set", "-app", "k1", "+"], ["get", "k1"], ["set", "k2", "v2"],
            ["set", "-inci", "n", "5"], ["set", "-inci", "n", "-7"], ["get", "-px", "n"],
            ["set", "-incd", "d", "1.5"], ["set", "-xt", "-4102444800", "x", "expires"],
            ["get", "-pt", "x"], ["set", "-sx", "6869", "6c6f"], ["get", "hi"],
            ["list"], ["list", "-pv"], ["list", "-pv", "-px", "-pt"], ["list", "-max", "2"],
            ["list", "k2"], ["inform"], ["remove", "k1"], ["remove", "k1"],
            ["get", "-rm", "k2"], ["get", "k2"], ["list"], ["report"], ["clear"], ["list"],
            ["inform"]]
        for step, kurad, ktserver in self.ktremotemgr(steps):
            with self.subTest(step=" ".join(step)):
                self.assertEqual(kurad, ktserver)

    def test_ktremotemgr_known_gaps(self):
        """KNOWN_GAPS: kurad still answers them otherwise than ktserver."""
        steps = [["clear"], ["set", "k1", "v1"], ["set", "k2", "v2"], ["set", "k3", "v3"]]
        for step, kurad, ktserver in self.ktremotemgr(steps + [list(g) for g in KNOWN_GAPS]):
            if tuple(step) in KNOWN_GAPS and \
                    kuratest.db_kind() not in GAPS_CLOSED_ON.get(tuple(step), ()):
                with self.subTest(step=" ".join(step)):
                    print("# known gap, ktremotemgr %s: %s" % (" ".join(step),
                                                               KNOWN_GAPS[tuple(step)]))
                    self.assertNotEqual(kurad, ktserver, "kurad now answers as ktserver "
                                        "does: remove it from KNOWN_GAPS")
            else:
                self.assertEqual(kurad, ktserver, step)

    @staticmethod
    def shape(step, out, ordered):
        """What of ktremotemgr's output is compared: a list's lines as a set
        where the order is the database's own (a hash; from a start key, a
        hash's records are its own, so none; with -max, their number); of
        inform (the status procedure), the count line; of report (the
        server's figures), the db_total_count line."""
        if step[0] == "list" and not ordered:
            lines = out.splitlines()
            if len(step) > 1 and not step[-1].startswith("-") and step[-2] != "-max":
                return "(from a start key, in the hash's own order)"
            if "-max" in step:
                return "%d lines" % len(lines)
            return "\n".join(sorted(lines))
        if step[0] == "inform":
            return "\n".join(l for l in out.splitlines() if l.startswith("count: "))
        if step[0] == "report":
            return "\n".join(l for l in out.splitlines() if l.startswith("db_total_count:"))
        return out


if __name__ == "__main__":
    kuratest.main()
