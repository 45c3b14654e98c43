#!/usr/bin/python3
# The test runner and the skip kinds themselves: tests/run run on a made-up
# source tree (KURA_TEST_ROOT) of tiny test programs, and the harnesses'
# skip helpers (tests/lib/kuratest.py, tests/unit/unit.h) run with and
# without CI=true / KURA_REQUIRE_ALL=1.  Covers: a skip is counted as
# skipped, not passed, in the program's line and the closing line
# "N passed, N failed, N skipped"; a missing-dependency skip fails under
# CI=true (in the harnesses, and in the runner for a program that writes its
# own TAP) while a not-applicable one does not; a program that exits non-zero
# without "not ok", one that prints no test line at all, one whose plan
# disagrees with its lines, and one that was not built are failures.
#
# kura-test: once
import os, re, shutil, subprocess, sys, tempfile, unittest
sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "lib"))
import kuratest

ROOT = kuratest.ROOT
RUNNER = os.path.join(ROOT, "tests", "run")
CLOSING = re.compile(r"^(\d+) passed, (\d+) failed, (\d+) skipped$", re.M)

# Each fake program: a Python file printing the given output and exiting with
# the given status.
PLAIN_OK = "print('ok 1 - a'); print('ok 2 - b'); print('1..2')"
SKIP_NA = "print('ok 1 - a'); print('ok 2 - b # SKIP not applicable: not here'); print('1..2')"
SKIP_MISSING = ("print('ok 1 - a'); print('ok 2 - b # SKIP missing dependency: frob "
                "(apt-get install frob)'); print('1..2')")
SKIP_BARE = "print('ok 1 - a # skip no reason given'); print('1..1')"
EXIT_1 = "import sys; print('ok 1 - a'); print('1..1'); sys.exit(1)"
NO_TAP = "print('hello, but no test line')"
SHORT_PLAN = "print('1..3'); print('ok 1 - a')"


def clean_env(**extra):
    """This process's environment without the variables that change the
    runner's and the harnesses' verdicts (CI sets them for the whole run)."""
    env = {k: v for k, v in os.environ.items()
           if k not in ("CI", "KURA_REQUIRE_ALL", "KURA_DB", "KURA_TEST_ROOT", "KURA_BUILD")}
    env.update(extra)
    return env


class RunnerCase(unittest.TestCase):

    def setUp(self):
        self.tree = tempfile.mkdtemp(prefix="kura-runner-")
        self.addCleanup(shutil.rmtree, self.tree, True)
        for d in ("tests/unit", "tests/integration", "build-test/tests"):
            os.makedirs(os.path.join(self.tree, d))

    def prog(self, name, body):
        """A fake integration program tests/integration/test_<name>.py."""
        with open(os.path.join(self.tree, "tests", "integration", "test_%s.py" % name), "w") as f:
            f.write("# kura-test: once\n" + body + "\n")

    def run_runner(self, **env):
        p = subprocess.run(["/usr/bin/python3", RUNNER], cwd=self.tree,
                           env=clean_env(KURA_TEST_ROOT=self.tree, **env),
                           stdout=subprocess.PIPE, stderr=subprocess.STDOUT,
                           timeout=60 * kuratest.SCALE)
        out = p.stdout.decode("utf-8", "replace")
        last = out.rstrip("\n").splitlines()[-1]
        m = CLOSING.match(last)
        self.assertTrue(m, "closing line %r is not \"N passed, N failed, N skipped\":\n%s"
                        % (last, out))
        return tuple(int(x) for x in m.groups()), p.returncode, out

    def prog_line(self, out, name):
        for line in out.splitlines():
            if "test_%s.py" % name in line and re.search(r"\d+ skipped", line):
                return line
        self.fail("no line for %s in:\n%s" % (name, out))

    def test_skip_is_counted_as_skipped(self):
        self.prog("plain", PLAIN_OK)
        self.prog("skipna", SKIP_NA)
        self.prog("skipdep", SKIP_MISSING)
        counts, rc, out = self.run_runner()
        self.assertEqual(counts, (4, 0, 2), out)
        self.assertEqual(rc, 0, out)
        self.assertRegex(self.prog_line(out, "skipna"), r"\b1 passed +0 failed +1 skipped")
        self.assertRegex(self.prog_line(out, "plain"), r"\b2 passed +0 failed +0 skipped")
        self.assertIn("ok 2 - b # SKIP not applicable: not here", out)   # says what went untested

    def test_missing_dependency_fails_under_ci(self):
        self.prog("skipna", SKIP_NA)
        self.prog("skipdep", SKIP_MISSING)
        self.prog("skipbare", SKIP_BARE)       # a skip of no kind is not excused either
        for env in ({"CI": "true"}, {"KURA_REQUIRE_ALL": "1"}):
            with self.subTest(env=env):
                counts, rc, out = self.run_runner(**env)
                self.assertEqual(counts, (2, 2, 1), out)
                self.assertNotEqual(rc, 0, out)
                self.assertRegex(self.prog_line(out, "skipdep"), r"^FAIL ")
                self.assertRegex(self.prog_line(out, "skipna"), r"^ok ")
        counts, rc, out = self.run_runner(CI="false")
        self.assertEqual(counts, (2, 0, 3), out)

    def test_nonzero_exit_without_not_ok_fails(self):
        self.prog("exit1", EXIT_1)
        counts, rc, out = self.run_runner()
        self.assertEqual(counts, (1, 1, 0), out)
        self.assertNotEqual(rc, 0)
        self.assertIn("exit status 1 without a \"not ok\" line", out)

    def test_no_tap_lines_fails(self):
        self.prog("notap", NO_TAP)
        counts, rc, out = self.run_runner()
        self.assertEqual(counts, (0, 1, 0), out)
        self.assertNotEqual(rc, 0)
        self.assertIn("no TAP test line", out)

    def test_short_plan_fails(self):
        self.prog("short", SHORT_PLAN)
        counts, rc, out = self.run_runner()
        self.assertEqual(counts, (1, 1, 0), out)
        self.assertIn("the plan 1..3 does not match the 1 test lines", out)

    def test_unbuilt_unit_program_fails(self):
        with open(os.path.join(self.tree, "tests", "unit", "test_gone.c"), "w") as f:
            f.write("/* its binary was never built */\n")
        counts, rc, out = self.run_runner()
        self.assertEqual(counts, (0, 1, 0), out)
        self.assertIn("was not built", out)


class HarnessSkips(unittest.TestCase):
    """The skip helpers of kuratest.py and unit.h print each kind as the
    runner expects, and fail a missing dependency when CI requires all."""

    PY = """
import os, sys, unittest
sys.path.insert(0, %r)
import kuratest

class T(unittest.TestCase):
    def test_a_runs(self):
        pass
    @unittest.skipIf(True, kuratest.not_applicable("cannot apply"))
    def test_b_na(self):
        pass
    def test_c_missing(self):
        self.skipTest(kuratest.missing("frob (apt-get install frob)"))

if __name__ == "__main__":
    kuratest.main()
""" % os.path.join(ROOT, "tests", "lib")

    C = r"""
#include "unit.h"
static void test_a_runs(void) { CHECK(1); }
static void test_b_na(void) { SKIP_NA("cannot apply"); }
static void test_c_missing(void) { SKIP_MISSING("frob (apt-get install frob)"); }
static void test_d_failed_then_skipped(void) { CHECK(0); SKIP_NA("too late"); }
int main(void)
{
    RUN(test_a_runs);
    RUN(test_b_na);
    RUN(test_c_missing);
    RUN(test_d_failed_then_skipped);
    UNIT_DONE();
}
"""

    def setUp(self):
        self.dir = tempfile.mkdtemp(prefix="kura-harness-")
        self.addCleanup(shutil.rmtree, self.dir, True)

    def run_prog(self, argv, **env):
        p = subprocess.run(argv, env=clean_env(**env), stdout=subprocess.PIPE,
                           stderr=subprocess.STDOUT, timeout=60 * kuratest.SCALE)
        return p.returncode, p.stdout.decode("utf-8", "replace")

    def test_kuratest_skip_kinds(self):
        path = os.path.join(self.dir, "t.py")
        with open(path, "w") as f:
            f.write(self.PY)
        rc, out = self.run_prog(["/usr/bin/python3", path])
        self.assertEqual(rc, 0, out)
        self.assertIn("ok 1 - T.test_a_runs\n", out)
        self.assertIn("ok 2 - T.test_b_na # SKIP not applicable: cannot apply\n", out)
        self.assertIn("ok 3 - T.test_c_missing # SKIP missing dependency: frob", out)
        for env in ({"CI": "true"}, {"KURA_REQUIRE_ALL": "1"}):
            rc, out = self.run_prog(["/usr/bin/python3", path], **env)
            self.assertEqual(rc, 1, out)
            self.assertIn("ok 2 - T.test_b_na # SKIP not applicable: cannot apply\n", out)
            self.assertIn("not ok 3 - T.test_c_missing # required, but skipped: "
                          "missing dependency: frob", out)

    def test_unit_h_skip_kinds(self):
        src = os.path.join(self.dir, "t.c")
        exe = os.path.join(self.dir, "t")
        with open(src, "w") as f:
            f.write(self.C)
        p = subprocess.run(["cc", "-std=c11", "-D_GNU_SOURCE", "-Wall", "-Wextra", "-Werror",
                            "-I", os.path.join(ROOT, "tests", "unit"), "-o", exe, src],
                           stdout=subprocess.PIPE, stderr=subprocess.STDOUT)
        self.assertEqual(p.returncode, 0, p.stdout.decode("utf-8", "replace"))
        rc, out = self.run_prog([exe])
        self.assertEqual(rc, 1, out)         # test_d failed
        self.assertIn("ok 1 - test_a_runs\n", out)
        self.assertIn("ok 2 - test_b_na # SKIP not applicable: cannot apply\n", out)
        self.assertIn("ok 3 - test_c_missing # SKIP missing dependency: frob", out)
        self.assertIn("not ok 4 - test_d_failed_then_skipped\n", out)
        rc, out = self.run_prog([exe], CI="true")
        self.assertIn("ok 2 - test_b_na # SKIP not applicable: cannot apply\n", out)
        self.assertIn("not ok 3 - test_c_missing # required, but skipped: "
                      "missing dependency: frob", out)


if __name__ == "__main__":
    kuratest.main()
