#!/usr/bin/python3
# Tokyo Tyrant's own test clients against kurad, on every backend (issue 33,
# item 1): tcrtest write, read, remove, rcat, misc (three times, each after
# the database holds records, so that its opening vanish has something to
# flush), wicked, and tcrmttest write, read, remove, typical, each run
# ending "ok" with exit status 0.  The table modes are left out: kura
# serves no table database (.tct), and ttserver fails them too on a hash
# or tree.
#
# The clients are built from Tokyo Tyrant 1.1.41's public source, which
# this tree does not carry (docs/HACKING.md, "Tokyo Tyrant's clients"):
# KURA_TT_BIN names the directory holding tcrtest and tcrmttest (and the
# libtokyotyrant they were linked with).  Without it the tests skip as not
# applicable: CI has no network to fetch the source.
import os, subprocess, sys, unittest
sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "lib"))
import kuratest
from kuratest import ServerTestCase, not_applicable

BIN = os.environ.get("KURA_TT_BIN", "")
RNUM = 5000


def why_not():
    if kuratest.is_memcached():
        return not_applicable("Tokyo Tyrant's protocol is kurad's")
    if not BIN:
        return not_applicable("KURA_TT_BIN is not set: Tokyo Tyrant's tcrtest and tcrmttest are "
                              "built from its source, which CI cannot fetch (docs/HACKING.md)")
    for prog in ("tcrtest", "tcrmttest"):
        if not os.access(os.path.join(BIN, prog), os.X_OK):
            return not_applicable("KURA_TT_BIN=%s holds no %s" % (BIN, prog))
    return None


@unittest.skipIf(why_not() is not None, why_not() or "")
class TTClients(ServerTestCase):
    def run_client(self, prog, mode, *args):
        env = dict(os.environ, LD_LIBRARY_PATH=BIN)
        argv = [os.path.join(BIN, prog), mode, "-port", str(self.server.port)] + \
            [str(a) for a in args]
        p = subprocess.run(argv, cwd=BIN, env=env, stdout=subprocess.PIPE,
                           stderr=subprocess.STDOUT, timeout=600 * kuratest.SCALE)
        out = p.stdout.decode("utf-8", "replace")
        self.assertTrue(p.returncode == 0 and out.rstrip().endswith("ok"),
                        "%s %s: exit %d\n%s" % (prog, mode, p.returncode,
                                                "\n".join(out.splitlines()[-15:])))

    def test_tcrtest(self):
        for mode, args in (("write", ["127.0.0.1", RNUM]), ("read", ["127.0.0.1"]),
                           ("remove", ["127.0.0.1"]), ("rcat", ["127.0.0.1", RNUM]),
                           ("write", ["127.0.0.1", RNUM]), ("misc", ["127.0.0.1", RNUM]),
                           ("misc", ["127.0.0.1", RNUM]), ("misc", ["127.0.0.1", RNUM]),
                           ("wicked", ["127.0.0.1", RNUM])):
            with self.subTest(mode=mode):
                self.run_client("tcrtest", mode, *args)

    def test_tcrmttest(self):
        for mode, args in (("write", ["-tnum", 4, "127.0.0.1", RNUM]),
                           ("read", ["-tnum", 4, "127.0.0.1"]),
                           ("remove", ["-tnum", 4, "127.0.0.1"]),
                           ("typical", ["-tnum", 4, "127.0.0.1", RNUM])):
            with self.subTest(mode=mode):
                self.run_client("tcrmttest", mode, *args)


if __name__ == "__main__":
    kuratest.main()
