#!/usr/bin/python3
# A real client: PHP's memcached extension (php-memcached on libmemcached,
# through php-cli) with the binary protocol off, exercising set/get/getMulti/
# setMulti/add/replace/append/prepend/cas/increment/decrement/delete/touch/
# flush/getStats/getVersion; each PHP check is reported as its own line.
import os, shutil, subprocess, sys, unittest
sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "lib"))
import kuratest
from kuratest import ServerTestCase

PHP = shutil.which("php")

SCRIPT = r'''<?php
$port = (int)$argv[1];
$m = new Memcached();
$m->setOption(Memcached::OPT_BINARY_PROTOCOL, false);
$m->setOption(Memcached::OPT_COMPRESSION, false);
$m->setOption(Memcached::OPT_TCP_NODELAY, true);
$m->addServer("127.0.0.1", $port);
function check($name, $cond) { echo ($cond ? "PASS " : "FAIL ") . $name . "\n"; }

check("binary protocol off", $m->getOption(Memcached::OPT_BINARY_PROTOCOL) == false);
check("set", $m->set("a", "hello") === true);
check("get", $m->get("a") === "hello");
check("get miss", $m->get("nope") === false && $m->getResultCode() == Memcached::RES_NOTFOUND);
check("set int", $m->set("i", 42) && $m->get("i") === 42);
check("set array", $m->set("arr", array("x" => 1, "y" => array(2, 3))) && $m->get("arr") === array("x" => 1, "y" => array(2, 3)));
$items = array();
for ($i = 0; $i < 50; $i++) { $items["k$i"] = "v$i"; }
check("setMulti", $m->setMulti($items) === true);
$got = $m->getMulti(array_merge(array_keys($items), array("missing")));
check("getMulti", $got == $items);
check("add new", $m->add("b", "1") === true);
check("add existing", $m->add("b", "2") === false && $m->getResultCode() == Memcached::RES_NOTSTORED);
check("replace existing", $m->replace("b", "3") === true && $m->get("b") === "3");
check("replace missing", $m->replace("nope", "3") === false);
check("append", $m->append("b", "4") === true);
check("prepend", $m->prepend("b", "2") === true && $m->get("b") === "234");
check("append missing", $m->append("nope", "x") === false);
$m->set("c", "v1");
$r = $m->get("c", null, Memcached::GET_EXTENDED);
check("get extended cas", is_array($r) && $r["value"] === "v1" && $r["cas"] > 0);
check("cas ok", $m->cas($r["cas"], "c", "v2") === true && $m->get("c") === "v2");
check("cas stale", $m->cas($r["cas"], "c", "v3") === false && $m->getResultCode() == Memcached::RES_DATA_EXISTS);
check("cas missing", $m->cas($r["cas"], "nope", "v3") === false && $m->getResultCode() == Memcached::RES_NOTFOUND);
$m->set("n", "10");
check("increment", $m->increment("n", 5) === 15);
check("decrement to 0", $m->decrement("n", 100) === 0);
check("increment missing", $m->increment("nope", 1) === false);
$m->set("n", "18446744073709551615");
check("increment wraps", $m->increment("n", 1) === 0);
check("delete", $m->delete("a") === true && $m->get("a") === false);
check("delete missing", $m->delete("a") === false && $m->getResultCode() == Memcached::RES_NOTFOUND);
check("deleteMulti", count($m->deleteMulti(array("k1", "k2"))) == 2 && $m->get("k1") === false);
$m->set("t", "1");
check("touch", $m->touch("t", 100) === true);
check("touch missing", $m->touch("nope", 100) === false);
$big = str_repeat("0123456789", 90000);
check("900 KB value", $m->set("big", $big) && $m->get("big") === $big);
check("too large refused", $m->set("huge", str_repeat("x", 2 * 1024 * 1024)) === false);
check("still usable", $m->get("big") === $big);
$st = $m->getStats();
$s = reset($st);
check("getStats", is_array($s) && isset($s["curr_items"]) && isset($s["cmd_get"]) && isset($s["pid"]));
$v = $m->getVersion();
check("getVersion", is_array($v) && strlen(reset($v)) > 0);
check("flush", $m->flush() === true);
check("empty after flush", $m->get("b") === false && $m->get("big") === false);
echo "DONE\n";
'''


class Php(ServerTestCase):

    @unittest.skipIf(PHP is None, kuratest.missing("php (apt-get install php-cli)"))
    def test_php_memcached_extension(self):
        script = os.path.join(self.server.tmpdir, "client.php")
        with open(script, "w") as f:
            f.write(SCRIPT)
        p = subprocess.run([PHP, "-d", "display_errors=stderr", script, str(self.server.port)],
                           stdout=subprocess.PIPE, stderr=subprocess.STDOUT, timeout=60)
        out = p.stdout.decode("utf-8", "replace")
        if "Class \"Memcached\" not found" in out or "Class 'Memcached' not found" in out:
            self.skipTest(kuratest.missing("the Memcached class (apt-get install php-memcached)"))
        lines = out.splitlines()
        for ln in lines:
            if ln.startswith("PASS ") or ln.startswith("FAIL "):
                with self.subTest(php=ln[5:]):
                    self.assertTrue(ln.startswith("PASS "), ln)
        self.assertEqual(p.returncode, 0, out)
        self.assertIn("DONE", lines, out)
        self.assertGreaterEqual(sum(1 for ln in lines if ln.startswith("PASS ")), 30, out)


if __name__ == "__main__":
    kuratest.main()
