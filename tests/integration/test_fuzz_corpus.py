#!/usr/bin/python3
# The fuzz targets' corpora replayed (tests/fuzz/): each target built with the
# plain driver (build-test/fuzz/fuzz_<name>, driver.c) runs every file of
# tests/fuzz/corpus/<name>/ once through its decoder.  Every file there is a
# seed or a finding kept as a regression input: a crash, a sanitizer report
# (under make test-asan) or an abort from a target's own checks fails here.
# Also: every target has a corpus of at least one file, and every corpus a
# target.
#
# kura-test: once
import os, subprocess, sys, unittest
sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "lib"))
import kuratest

ROOT = kuratest.ROOT
FUZZ = os.path.join(ROOT, "tests", "fuzz")
CORPUS = os.path.join(FUZZ, "corpus")
BUILD = os.environ.get("KURA_BUILD", "build-test")
if not os.path.isabs(BUILD):
    BUILD = os.path.join(ROOT, BUILD)


def targets():
    return sorted(f[len("fuzz_"):-2] for f in os.listdir(FUZZ)
                  if f.startswith("fuzz_") and f.endswith(".c"))


class CorpusTest(unittest.TestCase):
    def test_every_target_has_a_corpus(self):
        have = set(d for d in os.listdir(CORPUS) if os.path.isdir(os.path.join(CORPUS, d)))
        for t in targets():
            self.assertIn(t, have, "tests/fuzz/fuzz_%s.c has no corpus directory" % t)
            self.assertTrue(os.listdir(os.path.join(CORPUS, t)), "corpus/%s is empty" % t)
        for d in have:
            self.assertIn(d, targets(), "corpus/%s has no target tests/fuzz/fuzz_%s.c" % (d, d))


def replay_test(name):
    def test(self):
        prog = os.path.join(BUILD, "fuzz", "fuzz_" + name)
        self.assertTrue(os.path.exists(prog), "%s was not built" % prog)
        files = [f for f in os.listdir(os.path.join(CORPUS, name)) if not f.startswith(".")]
        p = subprocess.run([prog, os.path.join(CORPUS, name)], cwd=ROOT,
                           stdout=subprocess.PIPE, stderr=subprocess.STDOUT,
                           timeout=120 * kuratest.SCALE)
        out = p.stdout.decode("utf-8", "replace")
        self.assertEqual(p.returncode, 0, "fuzz_%s exited %d:\n%s" % (name, p.returncode,
                                                                       out[-4000:]))
        self.assertIn("replayed %d inputs" % len(files), out)
    return test


for _t in targets():
    setattr(CorpusTest, "test_replay_" + _t, replay_test(_t))

if __name__ == "__main__":
    kuratest.main()
