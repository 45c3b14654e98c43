#!/usr/bin/python3
# Kyoto Tycoon's protocols on the -kt listener (docs/protocol.md, "Kyoto
# Tycoon's protocols"), with a client written here from Kyoto Tycoon's
# protocol description (its spex.html: HTTP, TSV with colenc, the binary
# magic bytes), raw HTTP over a socket, not from kura's code.  The
# comparison with ktserver's own replies and Kyoto Tycoon's client
# programs is test_kt_clients.py's.
#
#  * REST: PUT (X-Kt-Mode add/replace: 450; X-Kt-Xt), GET (X-Kt-Xt), HEAD
#    (Content-Length), DELETE, URL-encoded keys, 404s, another method 501,
#    a /DB/ prefix naming another database 400.
#  * RPC: every procedure (void echo report status clear set add replace
#    append increment increment_double cas remove get check seize set_bulk
#    remove_bulk get_bulk vacuum synchronize match_prefix match_regex and
#    the cursors, one over 30,000 records whose walk pauses between turns;
#    backward (cur_jump_back, cur_step_back) as ktserver answers on a .kct,
#    on every backend, over 5,000 records past every batch size),
#    play_script and tune_replication as ktserver with the
#    feature off, an unknown procedure 501, DB= another database 400.
#  * Encodings: colenc=B, Q and U in, a form body, a GET query string; an
#    output holding a control byte comes back base64 or %XX, as named.
#  * Values across protocols: a record set here is read by memcached's get
#    with flags 0; increment keeps an 8-byte big-endian number.
#  * Binary: set_bulk, remove_bulk, get_bulk (xt, no-reply), play_script
#    answered 0xBF, replication answered 0xBF and closed (as ktserver
#    without an update log), an unknown magic closing.
#  * Keys: up to -kmax (default 1024) through RPC, REST and binary
#    set_bulk/get_bulk, the empty key as ktserver takes it (RPC key=, REST
#    /); a key past -kmax refused as ktserver refuses a failed set (500 and
#    "DB: 2: invalid operation", 0xBF), read as a miss; a larger -kmax
#    takes it.
#  * HTTP: keep-alive, pipelined requests answered in order, HTTP/1.0
#    closing, Connection: close.
#  * Bad input, each class: a request line ktserver does not read (closed
#    without a reply), a request line past 8 KiB (414), too many headers
#    (431), a bad Content-Length (400), a body past the bound (413), a
#    chunked body (501), a request dripping past -tout (408), absurd
#    binary lengths (0xBF, closed); the server serves others after each.
#  * -c counts -kt's connections with memcached's: past it an HTTP client
#    is answered 503 (in HTTP), a memcached one ERROR as before.
#  * The memcached port is unchanged by -kt; -Y asks -kt for Basic
#    credentials; -Z serves -kt over TLS (notls: plaintext), and plaintext
#    on the TLS port gets nothing back.
import base64, os, socket, struct, sys, time, unittest
sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "lib"))
import kuratest
from kuratest import ServerTestCase, Conn, not_applicable

SKIP = kuratest.is_memcached()
WHY = not_applicable("Kyoto Tycoon's protocols are kurad's")
P = struct.pack


class KT:
    """A keep-alive HTTP/1.1 client on one socket."""

    def __init__(self, port, host="127.0.0.1", timeout=None):
        self.s = socket.create_connection((host, port), timeout=timeout or kuratest.SCALE * 10)
        self.buf = b""

    def close(self):
        self.s.close()

    def send(self, data):
        self.s.sendall(data)

    def _fill(self):
        d = self.s.recv(65536)
        if not d:
            raise EOFError("closed; got %r" % self.buf)
        self.buf += d

    def exact(self, n):
        while len(self.buf) < n:
            self._fill()
        out, self.buf = self.buf[:n], self.buf[n:]
        return out

    def response(self, head_only=False):
        while b"\r\n\r\n" not in self.buf:
            self._fill()
        head, self.buf = self.buf.split(b"\r\n\r\n", 1)
        lines = head.split(b"\r\n")
        code = int(lines[0].split(b" ")[1])
        hdrs = {}
        for l in lines[1:]:
            k, v = l.split(b":", 1)
            hdrs[k.strip().lower().decode()] = v.strip().decode()
        body = b""
        if not head_only:
            body = self.exact(int(hdrs.get("content-length", "0")))
        return code, hdrs, body

    def is_closed(self, timeout=5):
        self.s.settimeout(timeout * kuratest.SCALE)
        try:
            while True:
                d = self.s.recv(65536)
                if not d:
                    return True
                self.buf += d
        except socket.timeout:
            return False
        except ConnectionResetError:
            return True

    def http(self, method, path, body=b"", headers=()):
        req = b"%s %s HTTP/1.1\r\nHost: test\r\n" % (method, path)
        for h in headers:
            req += h + b"\r\n"
        if body or method in (b"POST", b"PUT"):
            req += b"Content-Length: %d\r\n" % len(body)
        self.send(req + b"\r\n" + body)
        return self.response(head_only=method == b"HEAD")

    def rpc(self, name, params=(), enc=None):
        """POST /rpc/name with TSV params (a list of (bytes, bytes)); the
        reply's code and its decoded map."""
        def e(x):
            return {None: lambda v: v, b"B": base64.b64encode,
                    b"U": lambda v: b"".join(b"%%%02X" % c for c in v),
                    b"Q": lambda v: b"".join(b"=%02X" % c for c in v)}[enc](x)
        body = b"".join(e(k) + b"\t" + e(v) + b"\n" for k, v in params)
        ct = b"Content-Type: text/tab-separated-values" + (b"; colenc=" + enc if enc else b"")
        code, hdrs, out = self.http(b"POST", b"/rpc/" + name, body, [ct])
        return code, tsv(out, hdrs.get("content-type", ""))


def unquote(v):
    out, i = bytearray(), 0
    while i < len(v):
        if v[i:i + 1] == b"%":
            out.append(int(v[i + 1:i + 3], 16))
            i += 3
        else:
            out.append(v[i])
            i += 1
    return bytes(out)


def tsv(body, ctype):
    dec = (lambda v: v)
    if "colenc=B" in ctype:
        dec = base64.b64decode
    elif "colenc=U" in ctype:
        dec = unquote
    m = {}
    for line in body.split(b"\n"):
        if b"\t" in line:
            k, v = line.split(b"\t", 1)
            m[dec(k)] = dec(v)
    return m


def be64(n):
    return P(">q", n)


class KTCase(ServerTestCase):
    KT_ARGS = ()

    def setUp(self):
        if SKIP:
            self.skipTest(WHY)
        self.ktport = kuratest.free_port()
        self.server = self.start_server(kura_args=("-kt", str(self.ktport)) + self.KT_ARGS,
                                        **self.SERVER_OPTS)
        self.c = self.server.conn()
        self.addCleanup(self.c.close)
        self.k = self.kt()

    def kt(self):
        k = KT(self.ktport)
        self.addCleanup(k.close)
        return k


class KTRest(KTCase):
    def test_put_get_head_delete(self):
        k = self.k
        code, h, _ = k.http(b"PUT", b"/a%20b", b"hello")
        self.assertEqual(code, 201)
        self.assertEqual(h["location"], "http://localhost:%d/a%%20b" % self.ktport)
        code, h, body = k.http(b"GET", b"/a%20b")
        self.assertEqual((code, body), (200, b"hello"))
        self.assertNotIn("x-kt-xt", h)
        code, h, body = k.http(b"HEAD", b"/a%20b")
        self.assertEqual((code, h["content-length"], body), (200, "5", b""))
        # the key is "a b": the memcached port can't say it, but RPC can
        self.assertEqual(k.rpc(b"get", [(b"key", b"a b")]), (200, {b"value": b"hello"}))
        self.assertEqual(k.http(b"DELETE", b"/a%20b")[0], 204)
        code, h, body = k.http(b"GET", b"/a%20b")
        self.assertEqual((code, body), (404, b""))
        self.assertEqual(h["x-kt-error"], "DB: 7: no record: no record")
        self.assertEqual(k.http(b"HEAD", b"/a%20b")[0], 404)
        self.assertEqual(k.http(b"DELETE", b"/a%20b")[0], 404)

    def test_modes_and_xt(self):
        k = self.k
        self.assertEqual(k.http(b"PUT", b"/m", b"1", [b"X-Kt-Mode: replace"])[0], 450)
        self.assertEqual(k.http(b"PUT", b"/m", b"1", [b"X-Kt-Mode: add"])[0], 201)
        code, h, _ = k.http(b"PUT", b"/m", b"2", [b"X-Kt-Mode: add"])
        self.assertEqual(code, 450)
        self.assertIn("record duplication", h["x-kt-error"])
        self.assertEqual(k.http(b"PUT", b"/m", b"3", [b"X-Kt-Mode: replace"])[0], 201)
        xt = int(time.time()) + 3600
        self.assertEqual(k.http(b"PUT", b"/x", b"v", [b"X-Kt-Xt: %d" % xt])[0], 201)
        code, h, body = k.http(b"GET", b"/x")
        self.assertEqual(h["x-kt-xt"], time.strftime("%a, %d %b %Y %H:%M:%S GMT",
                                                     time.gmtime(xt)))
        self.assertEqual(k.rpc(b"get", [(b"key", b"x")])[1][b"xt"], b"%d" % xt)
        # an expiry in the past: gone at once
        self.assertEqual(k.http(b"PUT", b"/y", b"v", [b"X-Kt-Xt: 1000000000"])[0], 201)
        self.assertEqual(k.http(b"GET", b"/y")[0], 404)

    def test_other_method_and_db(self):
        k = self.k
        self.assertEqual(k.http(b"OPTIONS", b"/a")[0], 501)
        self.assertEqual(k.http(b"PUT", b"/0/dbkey", b"v")[0], 201)
        self.assertEqual(k.http(b"GET", b"/dbkey")[2], b"v")
        code, _, body = k.http(b"GET", b"/other/dbkey")
        self.assertEqual((code, body), (400, b"no such database\n"))

    def test_memcached_reads_it(self):
        self.assertEqual(self.k.http(b"PUT", b"/mk", b"hello")[0], 201)
        self.assertEqual(self.c.request(b"get mk\r\n"), b"VALUE mk 0 5\r\nhello\r\nEND\r\n")
        self.assertEqual(self.c.request(b"set mk2 7 0 2\r\nhi\r\n"), b"STORED\r\n")
        self.assertEqual(self.k.http(b"GET", b"/mk2")[2], b"hi")


class KTRpc(KTCase):
    def test_void_echo_report_status(self):
        k = self.k
        self.assertEqual(k.rpc(b"void"), (200, {}))
        self.assertEqual(k.rpc(b"echo", [(b"a", b"1"), (b"b", b"2"), (b"a", b"3")]),
                         (200, {b"a": b"3", b"b": b"2"}))
        code, m = k.rpc(b"report")
        self.assertEqual(code, 200)
        for f in (b"db_0", b"db_total_count", b"serv_conn_count", b"conf_kt_version"):
            self.assertIn(f, m)
        k.rpc(b"set", [(b"key", b"s1"), (b"value", b"v")])
        code, m = k.rpc(b"status")
        self.assertEqual((code, m[b"count"]), (200, b"1"))
        self.assertIn(b"size", m)

    def test_set_add_replace_append_remove(self):
        k = self.k
        self.assertEqual(k.rpc(b"set", [(b"key", b"k")])[0], 400)
        self.assertEqual(k.rpc(b"set", [(b"key", b"k"), (b"value", b"v1")]), (200, {}))
        code, m = k.rpc(b"add", [(b"key", b"k"), (b"value", b"v2")])
        self.assertEqual(code, 450)
        self.assertIn(b"ERROR", m)
        self.assertEqual(k.rpc(b"replace", [(b"key", b"nokey"), (b"value", b"x")])[0], 450)
        self.assertEqual(k.rpc(b"replace", [(b"key", b"k"), (b"value", b"v3")])[0], 200)
        self.assertEqual(k.rpc(b"append", [(b"key", b"k"), (b"value", b"+")])[0], 200)
        self.assertEqual(k.rpc(b"append", [(b"key", b"k2"), (b"value", b"new")])[0], 200)
        self.assertEqual(k.rpc(b"get", [(b"key", b"k")]), (200, {b"value": b"v3+"}))
        self.assertEqual(k.rpc(b"get", [(b"key", b"k2")]), (200, {b"value": b"new"}))
        self.assertEqual(k.rpc(b"remove", [(b"key", b"k")]), (200, {}))
        self.assertEqual(k.rpc(b"remove", [(b"key", b"k")])[0], 450)
        self.assertEqual(k.rpc(b"get", [(b"key", b"k")])[0], 450)

    def test_xt(self):
        k = self.k
        now = int(time.time())
        k.rpc(b"set", [(b"key", b"t"), (b"value", b"v"), (b"xt", b"1000")])
        xt = int(k.rpc(b"get", [(b"key", b"t")])[1][b"xt"])
        self.assertTrue(now + 1000 <= xt <= int(time.time()) + 1000, xt)
        k.rpc(b"set", [(b"key", b"t2"), (b"value", b"v"), (b"xt", b"-%d" % (now + 5000))])
        self.assertEqual(k.rpc(b"check", [(b"key", b"t2")]),
                         (200, {b"vsiz": b"1", b"xt": b"%d" % (now + 5000)}))
        k.rpc(b"set", [(b"key", b"t3"), (b"value", b"v"), (b"xt", b"-1000")])
        self.assertEqual(k.rpc(b"get", [(b"key", b"t3")])[0], 450)

    def test_increment(self):
        k = self.k
        self.assertEqual(k.rpc(b"increment", [(b"key", b"n"), (b"num", b"5")]),
                         (200, {b"num": b"5"}))
        self.assertEqual(k.rpc(b"increment", [(b"key", b"n"), (b"num", b"-7")]),
                         (200, {b"num": b"-2"}))
        self.assertEqual(k.rpc(b"get", [(b"key", b"n")])[1][b"value"], be64(-2))
        self.assertEqual(self.c.request(b"get n\r\n"), b"VALUE n 0 8\r\n" + be64(-2) + b"\r\nEND\r\n")
        self.assertEqual(k.rpc(b"increment", [(b"key", b"m"), (b"num", b"1"), (b"orig", b"try")])[0],
                         450)
        self.assertEqual(k.rpc(b"increment", [(b"key", b"n"), (b"num", b"9"), (b"orig", b"set")]),
                         (200, {b"num": b"9"}))
        self.assertEqual(k.rpc(b"increment", [(b"key", b"o"), (b"num", b"1"), (b"orig", b"10")]),
                         (200, {b"num": b"11"}))
        k.rpc(b"set", [(b"key", b"txt"), (b"value", b"12")])
        self.assertEqual(k.rpc(b"increment", [(b"key", b"txt"), (b"num", b"1")])[0], 450)
        self.assertEqual(k.rpc(b"increment_double", [(b"key", b"d"), (b"num", b"1.5")]),
                         (200, {b"num": b"1.500000"}))
        self.assertEqual(k.rpc(b"increment_double", [(b"key", b"d"), (b"num", b"0.25")]),
                         (200, {b"num": b"1.750000"}))
        v = k.rpc(b"get", [(b"key", b"d")])[1][b"value"]
        self.assertEqual(v, be64(1) + be64(750000000000000))

    def test_cas_check_seize(self):
        k = self.k
        k.rpc(b"set", [(b"key", b"c"), (b"value", b"old")])
        self.assertEqual(k.rpc(b"cas", [(b"key", b"c"), (b"oval", b"x"), (b"nval", b"n")])[0], 450)
        self.assertEqual(k.rpc(b"cas", [(b"key", b"c"), (b"oval", b"old"), (b"nval", b"new")])[0],
                         200)
        self.assertEqual(k.rpc(b"cas", [(b"key", b"c2"), (b"nval", b"born")])[0], 200)
        self.assertEqual(k.rpc(b"cas", [(b"key", b"c2"), (b"nval", b"again")])[0], 450)
        self.assertEqual(k.rpc(b"cas", [(b"key", b"c2"), (b"oval", b"born")])[0], 200)
        self.assertEqual(k.rpc(b"check", [(b"key", b"c2")])[0], 450)
        self.assertEqual(k.rpc(b"check", [(b"key", b"c")]), (200, {b"vsiz": b"3"}))
        self.assertEqual(k.rpc(b"seize", [(b"key", b"c")]), (200, {b"value": b"new"}))
        self.assertEqual(k.rpc(b"seize", [(b"key", b"c")])[0], 450)

    def test_bulk(self):
        k = self.k
        recs = [(b"_k%d" % i, b"v%d" % i) for i in range(50)]
        self.assertEqual(k.rpc(b"set_bulk", recs + [(b"xt", b"100")]), (200, {b"num": b"50"}))
        code, m = k.rpc(b"get_bulk", [(b"_k1", b""), (b"_k2", b""), (b"_none", b"")])
        self.assertEqual((code, m), (200, {b"_k1": b"v1", b"_k2": b"v2", b"num": b"2"}))
        self.assertEqual(k.rpc(b"remove_bulk", [(b"_k1", b""), (b"_none", b"")]),
                         (200, {b"num": b"1"}))
        self.assertEqual(k.rpc(b"status")[1][b"count"], b"49")

    def test_server_procedures(self):
        k = self.k
        k.rpc(b"set", [(b"key", b"a"), (b"value", b"1")])
        self.assertEqual(k.rpc(b"synchronize")[0], 200)
        self.assertEqual(k.rpc(b"vacuum")[0], 200)
        self.assertEqual(k.rpc(b"clear")[0], 200)
        self.assertEqual(k.rpc(b"status")[1][b"count"], b"0")
        code, m = k.rpc(b"play_script", [(b"name", b"x")])
        self.assertEqual((code, m), (501, {b"ERROR": b"the scripting extention is disabled"}))
        self.assertEqual(k.rpc(b"tune_replication", [(b"host", b"h")]),
                         (501, {b"ERROR": b"the RTS file is not set"}))
        self.assertEqual(k.rpc(b"nosuch"), (501, {b"ERROR": b"not implemented: nosuch"}))
        self.assertEqual(k.rpc(b"get", [(b"DB", b"other"), (b"key", b"a")]),
                         (400, {b"ERROR": b"no such database"}))
        self.assertEqual(k.rpc(b"get", [(b"DB", b"0"), (b"key", b"a")])[0], 450)

    def test_match(self):
        k = self.k
        keys = [b"pre%04d" % i for i in range(1500)] + [b"other%d" % i for i in range(10)]
        for i in range(0, len(keys), 500):
            k.rpc(b"set_bulk", [(b"_" + x, b"v") for x in keys[i:i + 500]])
        code, m = k.rpc(b"match_prefix", [(b"prefix", b"pre")])
        self.assertEqual((code, m[b"num"]), (200, b"1500"))
        self.assertEqual(sorted(x[1:] for x in m if x != b"num"), keys[:1500])
        self.assertEqual(sorted(m[x] for x in m if x != b"num"),
                         sorted(b"%d" % i for i in range(1500)))
        code, m = k.rpc(b"match_prefix", [(b"prefix", b"pre"), (b"max", b"3")])
        self.assertEqual(m[b"num"], b"3")
        code, m = k.rpc(b"match_regex", [(b"regex", b"^other[0-4]$")])
        self.assertEqual(sorted(x for x in m if x != b"num"),
                         [b"_other%d" % i for i in range(5)])
        self.assertEqual(k.rpc(b"match_regex", [(b"regex", b"(a)\\1")])[0], 450)
        self.assertEqual(k.rpc(b"match_regex", [(b"regex", b"(")])[0], 450)

    def test_cursors(self):
        k = self.k
        k.rpc(b"set_bulk", [(b"_c%d" % i, b"v%d" % i) for i in range(5)])
        self.assertEqual(k.rpc(b"cur_jump", [(b"CUR", b"1")]), (200, {}))
        seen = []
        for _ in range(5):
            code, m = k.rpc(b"cur_get", [(b"CUR", b"1"), (b"step", b"")])
            self.assertEqual(code, 200)
            seen.append((m[b"key"], m[b"value"]))
        self.assertEqual(seen, [(b"c%d" % i, b"v%d" % i) for i in range(5)])    # key order
        self.assertEqual(k.rpc(b"cur_get", [(b"CUR", b"1")])[0], 450)
        self.assertEqual(k.rpc(b"cur_jump", [(b"CUR", b"1"), (b"key", b"c2")]), (200, {}))
        self.assertEqual(k.rpc(b"cur_get_key", [(b"CUR", b"1")]), (200, {b"key": b"c2"}))
        self.assertEqual(k.rpc(b"cur_get_value", [(b"CUR", b"1")]), (200, {b"value": b"v2"}))
        self.assertEqual(k.rpc(b"cur_set_value", [(b"CUR", b"1"), (b"value", b"X")])[0], 200)
        self.assertEqual(k.rpc(b"get", [(b"key", b"c2")])[1], {b"value": b"X"})
        self.assertEqual(k.rpc(b"cur_remove", [(b"CUR", b"1")])[0], 200)
        self.assertEqual(k.rpc(b"cur_get_key", [(b"CUR", b"1")]), (200, {b"key": b"c3"}))
        self.assertEqual(k.rpc(b"cur_seize", [(b"CUR", b"1")]), (200, {b"key": b"c3", b"value": b"v3"}))
        self.assertEqual(k.rpc(b"cur_step", [(b"CUR", b"1")])[0], 450)     # c4 was current
        self.assertEqual(k.rpc(b"cur_delete", [(b"CUR", b"1")]), (200, {}))
        self.assertEqual(k.rpc(b"cur_get", [(b"CUR", b"1")])[0], 450)     # a fresh cursor
        self.assertEqual(k.rpc(b"cur_get", [])[0], 400)
        for i in range(2, 65):
            self.assertEqual(k.rpc(b"cur_jump", [(b"CUR", b"%d" % i)])[0], 200)
        self.assertEqual(k.rpc(b"cur_jump", [(b"CUR", b"99")])[0], 400)     # the 65th

    def fill(self, prefix, n):
        """Records PREFIX00000 .. PREFIX(n-1), set 1,000 at a time."""
        for i in range(0, n, 1000):
            self.k.rpc(b"set_bulk", [(b"_%s%05d" % (prefix, j), b"v")
                                     for j in range(i, min(n, i + 1000))])

    def drain(self, cur):
        """cur_get_key with step until it fails: its status, the keys."""
        got = []
        while True:
            code, m = self.k.rpc(b"cur_get_key", [(b"CUR", cur), (b"step", b"")])
            if code != 200:
                return code, got
            got.append(m[b"key"])

    def test_cursor_back(self):
        """cur_jump_back and cur_step_back as ktserver 0.9 answers them on a
        .kct (the same requests sent to it, replies compared): descending
        key order, the last key at or before KEY, 450 with no record, a
        step against the walk's direction, removal moving backward."""
        k = self.k
        C = [(b"CUR", b"1")]

        def key(extra=()):
            code, m = k.rpc(b"cur_get_key", C + list(extra))
            return code, m.get(b"key") if code == 200 else None

        self.assertEqual(k.rpc(b"cur_jump_back", C)[0], 450)                 # empty
        self.assertEqual(k.rpc(b"cur_step_back", C)[0], 450)
        k.rpc(b"set_bulk", [(b"_c%d" % i, b"v%d" % i) for i in range(5)])
        self.assertEqual(k.rpc(b"cur_jump_back", C), (200, {}))                # the last
        self.assertEqual(k.rpc(b"cur_get", C), (200, {b"key": b"c4", b"value": b"v4"}))
        self.assertEqual([key([(b"step", b"")]) for _ in range(6)],
                         [(200, b"c%d" % i) for i in range(4, -1, -1)] + [(450, None)])
        for at, want in ((b"c2", b"c2"), (b"c25", b"c2"), (b"zz", b"c4")):
            self.assertEqual(k.rpc(b"cur_jump_back", C + [(b"key", at)]), (200, {}))
            self.assertEqual(key(), (200, want))
        for at in (b"a", b"c", b""):                         # below every key: no record
            self.assertEqual(k.rpc(b"cur_jump_back", C + [(b"key", at)])[0], 450)
            self.assertEqual(key(), (450, None))
        self.assertEqual(k.rpc(b"cur_step", C)[0], 450)
        self.assertEqual(k.rpc(b"cur_step_back", C)[0], 450)
        # forward, then back: the previous key; past the first, no record
        self.assertEqual(k.rpc(b"cur_jump", C + [(b"key", b"c2")]), (200, {}))
        self.assertEqual(k.rpc(b"cur_step_back", C), (200, {}))
        self.assertEqual(key(), (200, b"c1"))
        self.assertEqual(k.rpc(b"cur_step_back", C), (200, {}))
        self.assertEqual(k.rpc(b"cur_step_back", C)[0], 450)
        self.assertEqual(key(), (450, None))
        self.assertEqual(k.rpc(b"cur_step", C)[0], 450)
        # back, then forward, then back again
        self.assertEqual(k.rpc(b"cur_jump_back", C + [(b"key", b"c3")]), (200, {}))
        self.assertEqual(k.rpc(b"cur_step", C), (200, {}))
        self.assertEqual(key(), (200, b"c4"))
        self.assertEqual(k.rpc(b"cur_step_back", C), (200, {}))
        self.assertEqual(key(), (200, b"c3"))
        # after a backward move, a removal moves to the previous key
        self.assertEqual(k.rpc(b"cur_remove", C), (200, {}))
        self.assertEqual(key(), (200, b"c2"))
        self.assertEqual(k.rpc(b"cur_seize", C), (200, {b"key": b"c2", b"value": b"v2"}))
        self.assertEqual(key(), (200, b"c1"))
        self.assertEqual(k.rpc(b"cur_jump_back", C), (200, {}))
        self.assertEqual(k.rpc(b"cur_set_value", C + [(b"value", b"X"), (b"step", b"")])[0], 200)
        self.assertEqual(k.rpc(b"cur_get", C), (200, {b"key": b"c1", b"value": b"v1"}))
        self.assertEqual(k.rpc(b"get", [(b"key", b"c4")])[1], {b"value": b"X"})
        # a key longer than any stored one
        self.assertEqual(k.rpc(b"cur_jump_back", C + [(b"key", b"c4" + b"z" * 300)]), (200, {}))
        self.assertEqual(key(), (200, b"c4"))
        self.assertEqual(k.rpc(b"cur_jump", C + [(b"key", b"c0" + b"z" * 300)]), (200, {}))
        self.assertEqual(key(), (200, b"c1"))
        self.assertEqual(k.rpc(b"cur_delete", C), (200, {}))
        self.assertEqual(k.rpc(b"cur_step_back", C)[0], 450)               # a fresh cursor

    def test_cursor_back_over_batches(self):
        """5,000 records walked backward from the last, each once, in
        descending order: past the B+ tree's listing batches (256 keys) and
        the sorted pass's (4,096) on the hash file and the cache."""
        k = self.k
        n = 5000
        self.fill(b"b", n)
        self.assertEqual(k.rpc(b"cur_jump_back", [(b"CUR", b"3")]), (200, {}))
        code, got = self.drain(b"3")
        self.assertEqual((code, got), (450, [b"b%05d" % j for j in range(n - 1, -1, -1)]))

    def test_cursor_over_many(self):
        """30,000 records: on the hash file and the cache a cursor's sorted
        walk takes more than one turn (16 listing steps) to find a key, and
        pauses; the keys still come in order, each once."""
        k = self.k
        n = 30000
        self.fill(b"m", n)
        self.assertEqual(k.rpc(b"cur_jump", [(b"CUR", b"7"), (b"key", b"m29990")]), (200, {}))
        code, got = self.drain(b"7")
        self.assertEqual((code, got), (450, [b"m%05d" % j for j in range(29990, n)]))
        self.assertEqual(k.rpc(b"cur_jump", [(b"CUR", b"7")]), (200, {}))
        self.assertEqual(k.rpc(b"cur_get_key", [(b"CUR", b"7")]), (200, {b"key": b"m00000"}))
        self.assertEqual(k.rpc(b"cur_step", [(b"CUR", b"7")]), (200, {}))
        self.assertEqual(k.rpc(b"cur_get_key", [(b"CUR", b"7")]), (200, {b"key": b"m00001"}))
        # backward over as many: each backward move pauses as the forward ones
        self.assertEqual(k.rpc(b"cur_jump_back", [(b"CUR", b"7"), (b"key", b"m00005x")]),
                         (200, {}))
        code, got = self.drain(b"7")
        self.assertEqual((code, got), (450, [b"m%05d" % j for j in range(5, -1, -1)]))
        self.assertEqual(k.rpc(b"cur_jump_back", [(b"CUR", b"7")]), (200, {}))
        self.assertEqual(k.rpc(b"cur_step_back", [(b"CUR", b"7")]), (200, {}))
        self.assertEqual(k.rpc(b"cur_get_key", [(b"CUR", b"7")]), (200, {b"key": b"m29998"}))

    def test_encodings(self):
        k = self.k
        for enc in (b"B", b"Q", b"U"):
            key, val = b"enc\t" + enc, b"line\nbreak\x00\x01\xff"
            self.assertEqual(k.rpc(b"set", [(b"key", key), (b"value", val)], enc=enc)[0], 200)
            self.assertEqual(k.rpc(b"get", [(b"key", key)], enc=enc), (200, {b"value": val}))
        # the reply's encoding: ktserver's choice, named in Content-Type
        k.rpc(b"set", [(b"key", b"bin"), (b"value", bytes(range(256)))], enc=b"B")
        code, h, body = k.http(b"POST", b"/rpc/get", b"key\tbin\n",
                               [b"Content-Type: text/tab-separated-values"])
        self.assertEqual(h["content-type"], "text/tab-separated-values; colenc=B")
        self.assertEqual(tsv(body, h["content-type"])[b"value"], bytes(range(256)))
        k.rpc(b"set", [(b"key", b"ctl"), (b"value", b"a\x01b")], enc=b"U")
        code, h, body = k.http(b"POST", b"/rpc/get", b"key\tctl\n",
                               [b"Content-Type: text/tab-separated-values"])
        self.assertEqual((h["content-type"], body), ("text/tab-separated-values; colenc=U",
                                                     b"value\ta%01b\n"))
        # a form, and a GET with a query
        code, h, body = k.http(b"POST", b"/rpc/set", b"key=f%20k&value=a+b",
                               [b"Content-Type: application/x-www-form-urlencoded"])
        self.assertEqual(code, 200)
        code, h, body = k.http(b"GET", b"/rpc/get?key=f%20k")
        self.assertEqual((code, body), (200, b"value\ta b\n"))


class KTBinary(KTCase):
    @staticmethod
    def bulk_set(recs, flags=0):
        return b"\xb8" + P(">II", flags, len(recs)) + b"".join(
            P(">HIIq", 0, len(k), len(v), xt) + k + v for k, v, xt in recs)

    @staticmethod
    def keys_req(magic, keys, flags=0, db=0):
        return magic + P(">II", flags, len(keys)) + b"".join(P(">HI", db, len(k)) + k for k in keys)

    def test_bulk_ops(self):
        k = self.k
        never = (1 << 40) - 1
        k.send(self.bulk_set([(b"b1", b"one", 1 << 40), (b"b2", b"two", 3600)]))
        self.assertEqual(k.exact(5), b"\xb8" + P(">I", 2))
        k.send(self.keys_req(b"\xba", [b"b1", b"b2", b"none"]))
        self.assertEqual(k.exact(5), b"\xba" + P(">I", 2))
        db, kl, vl, xt = struct.unpack(">HIIq", k.exact(18))
        self.assertEqual((db, k.exact(kl), k.exact(vl), xt), (0, b"b1", b"one", never))
        db, kl, vl, xt = struct.unpack(">HIIq", k.exact(18))
        self.assertEqual((k.exact(kl), k.exact(vl)), (b"b2", b"two"))
        self.assertTrue(abs(xt - (time.time() + 3600)) < 60, xt)
        # no reply; then a remove_bulk whose reply proves the order
        k.send(self.bulk_set([(b"b3", b"three", 1 << 40)], flags=1) +
               self.keys_req(b"\xb9", [b"b1", b"b3", b"none"]))
        self.assertEqual(k.exact(5), b"\xb9" + P(">I", 2))
        k.send(self.keys_req(b"\xb9", [b"b2"], flags=1) + self.keys_req(b"\xba", [b"b2"]))
        self.assertEqual(k.exact(5), b"\xba" + P(">I", 0))
        # another database's records are passed over
        k.send(self.keys_req(b"\xba", [b"b2"], db=1))
        self.assertEqual(k.exact(5), b"\xba" + P(">I", 0))
        # HTTP on the same connection afterwards
        self.assertEqual(k.http(b"GET", b"/b1")[0], 404)

    def test_play_script_and_others(self):
        k = self.k
        k.send(b"\xb4" + P(">III", 0, 3, 1) + b"fun" + P(">II", 1, 1) + b"ab")
        self.assertEqual(k.exact(1), b"\xbf")
        k.send(b"\xb4" + P(">III", 1, 3, 0) + b"fun" + self.keys_req(b"\xba", []))
        self.assertEqual(k.exact(5), b"\xba" + P(">I", 0))     # no reply to the first
        k2 = self.kt()
        k2.send(b"\xb1" + P(">IQH", 0, 0, 1))
        self.assertEqual(k2.exact(1), b"\xbf")  # as ktserver without an update log
        self.assertTrue(k2.is_closed())
        k3 = self.kt()
        k3.send(b"\xb0\x00\x00")
        self.assertTrue(k3.is_closed())
        k4 = self.kt()
        k4.send(b"\xb8" + P(">II", 0, 1) + P(">HIIq", 0, 1 << 29, 0, 0))
        self.assertEqual(k4.exact(1), b"\xbf")
        self.assertTrue(k4.is_closed())
        self.assertEqual(k.http(b"GET", b"/x")[0], 404)


class KTKeys(KTCase):
    """Keys of 0 to -kmax bytes, as Tokyo Tyrant's protocol takes them."""
    LONG = 1000

    def key(self, n, c=b"k"):
        return (c * n)[:n]

    def test_long_key_rpc_rest_binary(self):
        k = self.k
        k1 = self.key(self.LONG, b"r")
        self.assertEqual(k.rpc(b"set", [(b"key", k1), (b"value", b"rpc")]), (200, {}))
        self.assertEqual(k.rpc(b"get", [(b"key", k1)]), (200, {b"value": b"rpc"}))
        self.assertEqual(k.http(b"GET", b"/" + k1)[2], b"rpc")
        k2 = self.key(self.LONG, b"s")
        self.assertEqual(k.http(b"PUT", b"/" + k2, b"rest")[0], 201)
        code, _, body = k.http(b"GET", b"/" + k2)
        self.assertEqual((code, body), (200, b"rest"))
        self.assertEqual(k.rpc(b"get", [(b"key", k2)]), (200, {b"value": b"rest"}))
        k3 = self.key(self.LONG, b"t")
        k.send(KTBinary.bulk_set([(k3, b"bin", 1 << 40)]))
        self.assertEqual(k.exact(5), b"\xb8" + P(">I", 1))
        k.send(KTBinary.keys_req(b"\xba", [k3]))
        self.assertEqual(k.exact(5), b"\xba" + P(">I", 1))
        db, kl, vl, xt = struct.unpack(">HIIq", k.exact(18))
        self.assertEqual((k.exact(kl), k.exact(vl)), (k3, b"bin"))
        self.assertEqual(k.rpc(b"get_bulk", [(b"_" + k1, b""), (b"_" + k3, b"")])[1],
                         {b"_" + k1: b"rpc", b"_" + k3: b"bin", b"num": b"2"})
        # memcached's protocols keep 250: the same record is not theirs to name
        self.assertEqual(self.c.request(b"get " + k1 + b"\r\n")[:12], b"CLIENT_ERROR")
        self.assertEqual(k.rpc(b"remove", [(b"key", k1)]), (200, {}))
        self.assertEqual(k.http(b"DELETE", b"/" + k2)[0], 204)
        self.assertEqual(k.rpc(b"get", [(b"key", k1)])[0], 450)

    def test_cursor_over_long_keys(self):
        # a cursor's batch keeps each key whole, past 255 bytes (a length
        # kept in one byte wrapped: 300 read as 44, and the walk went astray)
        k = self.k
        keys = [self.key(n, c) for n, c in ((300, b"a"), (self.LONG, b"b"), (256, b"c"))]
        for i, key in enumerate(keys):
            self.assertEqual(k.rpc(b"set", [(b"key", key), (b"value", b"v%d" % i)]), (200, {}))
        C = [(b"CUR", b"7")]
        self.assertEqual(k.rpc(b"cur_jump", C), (200, {}))
        seen = []
        for _ in keys:
            code, m = k.rpc(b"cur_get", C + [(b"step", b"")])
            self.assertEqual(code, 200)
            seen.append((m[b"key"], m[b"value"]))
        self.assertEqual(sorted(seen), sorted((key, b"v%d" % i) for i, key in enumerate(keys)))
        self.assertEqual(k.rpc(b"cur_get", C)[0], 450)
        self.assertEqual(k.rpc(b"cur_jump_back", C), (200, {}))
        code, m = k.rpc(b"cur_get_key", C)
        self.assertEqual((code, m[b"key"]), (200, seen[-1][0]))

    def test_empty_key(self):
        # ktserver: RPC key= (empty) and REST / are the empty key
        k = self.k
        self.assertEqual(k.rpc(b"set", [(b"key", b""), (b"value", b"e")]), (200, {}))
        self.assertEqual(k.http(b"GET", b"/")[2], b"e")
        self.assertEqual(k.http(b"PUT", b"/", b"e2")[0], 201)
        self.assertEqual(k.rpc(b"get", [(b"key", b"")]), (200, {b"value": b"e2"}))
        self.assertEqual(k.http(b"DELETE", b"/")[0], 204)
        self.assertEqual(k.rpc(b"get", [(b"key", b"")])[0], 450)

    def past_kmax(self, n):
        """A key of n bytes (past -kmax) is refused as a failed set."""
        k = self.k
        long = self.key(n)
        code, m = k.rpc(b"set", [(b"key", long), (b"value", b"v")])
        self.assertEqual(code, 500)
        self.assertTrue(m[b"ERROR"].startswith(b"DB: 2: invalid operation"), m)
        code, h, _ = k.http(b"PUT", b"/" + long, b"v")
        self.assertEqual(code, 500)
        self.assertTrue(h["x-kt-error"].startswith("DB: 2: invalid operation"), h)
        self.assertEqual(k.rpc(b"set_bulk", [(b"_" + long, b"v")])[0], 500)
        self.assertEqual(k.rpc(b"get", [(b"key", long)])[0], 450)
        self.assertEqual(k.http(b"GET", b"/" + long)[0], 404)
        self.assertEqual(k.rpc(b"remove", [(b"key", long)])[0], 450)
        k2 = self.kt()
        k2.send(KTBinary.bulk_set([(long, b"v", 1 << 40)]))
        self.assertEqual(k2.exact(1), b"\xbf")
        self.assertEqual(k.rpc(b"status")[1][b"count"], b"0")

    def test_past_kmax_refused(self):
        # 1025 bytes: past the default -kmax (1024), within KURA_KEY_MAX
        self.past_kmax(1025)
        self.past_kmax(5000)
        self.assertEqual(self.k.rpc(b"set", [(b"key", self.key(1024)), (b"value", b"v")])[0],
                         200)


class KTKeysKmax(KTKeys):
    """-kmax 2048: a 2000-byte key is taken, one of 2049 is not."""
    KT_ARGS = ("-kmax", "2048")
    LONG = 2000

    def test_past_kmax_refused(self):
        self.past_kmax(2049)
        self.assertEqual(self.k.rpc(b"set", [(b"key", self.key(1025)), (b"value", b"v")])[0],
                         200)


class KTHttp(KTCase):
    SERVER_OPTS = {"idle_timeout": 2}

    def test_pipeline_and_keepalive(self):
        k = self.k
        reqs = b"".join(b"PUT /p%d HTTP/1.1\r\nContent-Length: 2\r\n\r\nv%d" % (i, i % 10)
                        for i in range(100))
        reqs += b"".join(b"GET /p%d HTTP/1.1\r\n\r\n" % i for i in range(100))
        k.send(reqs)
        for i in range(100):
            self.assertEqual(k.response()[0], 201)
        for i in range(100):
            code, _, body = k.response()
            self.assertEqual((code, body), (200, b"v%d" % (i % 10)))
        k.send(b"GET /p1 HTTP/1.0\r\n\r\n")
        code, h, body = k.response()
        self.assertEqual((code, h.get("connection"), body), (200, "close", b"v1"))
        self.assertTrue(k.is_closed())
        k2 = self.kt()
        k2.send(b"GET /p1 HTTP/1.0\r\nConnection: keep-alive\r\n\r\nGET /p2 HTTP/1.1\r\n"
                b"Connection: close\r\n\r\n")
        self.assertEqual(k2.response()[2], b"v1")
        self.assertEqual(k2.response()[1].get("connection"), "close")
        self.assertTrue(k2.is_closed())

    def bad(self, data, code):
        k = self.kt()
        k.send(data)
        if code is None:
            self.assertTrue(k.is_closed())
            self.assertEqual(k.buf, b"")
        else:
            got, h, body = k.response()
            self.assertEqual((got, h.get("connection")), (code, "close"))
            self.assertTrue(body.startswith(b"%d " % code), body)
            self.assertTrue(k.is_closed())
        self.assertEqual(self.kt().http(b"GET", b"/none")[0], 404)  # others are served

    def test_bad_input(self):
        self.bad(b"GARBAGE\r\n\r\n", None)
        self.bad(b"GET / HTTP/2.0\r\n\r\n", None)
        self.bad(b"GET  HTTP/1.1\r\n\r\n", None)
        self.bad(b"GET /" + b"a" * 9000 + b" HTTP/1.1\r\n\r\n", 414)
        self.bad(b"GET /a HTTP/1.1\r\n" + b"X-A: b\r\n" * 101 + b"\r\n", 431)
        self.bad(b"GET /a HTTP/1.1\r\nX-A: " + b"b" * 9000 + b"\r\n\r\n", 431)
        self.bad(b"PUT /a HTTP/1.1\r\nContent-Length: 12x\r\n\r\n", 400)
        self.bad(b"PUT /a HTTP/1.1\r\nContent-Length: 99999999999\r\n\r\n", 413)
        self.bad(b"POST /rpc/set HTTP/1.1\r\nTransfer-Encoding: chunked\r\n\r\n", 501)

    def test_drip_past_deadline(self):
        k = self.kt()
        k.send(b"PUT /slow HTTP/1.1\r\nContent-Length: 1000\r\n\r\nab")
        end = kuratest.deadline(2 + 10)
        got = None
        while time.monotonic() < end:
            k.send(b"x")                # never idle: the whole request's deadline ends it
            time.sleep(0.2)
            try:
                k.s.settimeout(0.01)
                d = k.s.recv(4096)
            except socket.timeout:
                continue
            except (ConnectionResetError, BrokenPipeError):
                break
            got = d
            break
        self.assertIsNotNone(got)
        self.assertTrue(got.startswith(b"HTTP/1.1 408 "), got)
        self.assertEqual(self.kt().http(b"GET", b"/slow")[0], 404)


class KTAuth(KTCase):
    def setUp(self):
        if SKIP:
            self.skipTest(WHY)
        d = kuratest.Server(start=False).tmpdir
        self.pw = os.path.join(d, "pw")
        with open(self.pw, "w") as f:
            f.write("u:secret\n")
        self.KT_ARGS = ("-Y", self.pw)
        self.ktport = kuratest.free_port()
        self.server = self.start_server(kura_args=("-kt", str(self.ktport), "-Y", self.pw))
        self.k = self.kt()

    def test_basic(self):
        k = self.k
        code, h, _ = k.http(b"GET", b"/a")
        self.assertEqual(code, 401)
        self.assertIn("Basic", h["www-authenticate"])
        good = b"Authorization: Basic " + base64.b64encode(b"u:secret")
        bad = b"Authorization: Basic " + base64.b64encode(b"u:wrong")
        self.assertEqual(k.http(b"PUT", b"/a", b"v", [bad])[0], 401)
        self.assertEqual(k.http(b"PUT", b"/a", b"v", [good])[0], 201)
        self.assertEqual(k.http(b"GET", b"/a", b"", [good])[2], b"v")
        k.send(b"\xba" + P(">II", 0, 0))
        self.assertTrue(k.is_closed())


def make_certs(d):
    """A CA and a server certificate (localhost, 127.0.0.1) it signs; EC
    keys, quicker to make than test_tls.py's RSA set."""
    import subprocess
    ec = ["-newkey", "ec", "-pkeyopt", "ec_paramgen_curve:prime256v1", "-nodes"]
    with open(os.path.join(d, "san.ext"), "w") as f:
        f.write("subjectAltName=DNS:localhost,IP:127.0.0.1\n")
    for args in (["req", "-x509"] + ec + ["-keyout", "ca.key", "-out", "ca.pem", "-days", "2",
                                          "-subj", "/CN=kura kt test ca"],
                 ["req"] + ec + ["-keyout", "srv.key", "-out", "srv.csr", "-subj",
                                 "/CN=localhost"],
                 ["x509", "-req", "-in", "srv.csr", "-CA", "ca.pem", "-CAkey", "ca.key",
                  "-CAcreateserial", "-out", "srv.pem", "-days", "2", "-extfile", "san.ext"]):
        subprocess.run(["openssl"] + args, cwd=d, check=True, capture_output=True, timeout=60)


class KTTls(unittest.TestCase):
    """-kt under -Z: TLS as on -l's addresses; notls: turns it off."""

    def test_tls_and_notls(self):
        if SKIP:
            self.skipTest(WHY)
        import shutil, ssl, tempfile
        import test_tls
        why = test_tls.kurad_has_tls()
        if why:
            self.skipTest(why)
        d = tempfile.mkdtemp(prefix="kuratest-kttls-")
        self.addCleanup(shutil.rmtree, d, True)
        make_certs(d)
        opts = "ssl_chain_cert=%s/srv.pem,ssl_key=%s/srv.key" % (d, d)
        for notls in (False, True):
            port = kuratest.free_port()
            spec = ("notls:127.0.0.1:%d" if notls else "127.0.0.1:%d") % port
            srv = kuratest.Server(kind="kurad", kura_args=["-Z", "-o", opts, "-kt", spec])
            self.addCleanup(srv.stop)
            k = KT(port)
            self.addCleanup(k.close)
            if not notls:
                ctx = ssl.create_default_context(cafile=os.path.join(d, "ca.pem"))
                k.s = ctx.wrap_socket(k.s, server_hostname="localhost")
            self.assertEqual(k.http(b"PUT", b"/t", b"secret")[0], 201)
            self.assertEqual(k.http(b"GET", b"/t")[2], b"secret")
            if not notls:
                plain = KT(port)        # plaintext on the TLS port: no byte back, closed
                self.addCleanup(plain.close)
                plain.send(b"GET /t HTTP/1.1\r\n\r\n")
                self.assertTrue(plain.is_closed())
                self.assertEqual(plain.buf, b"")


class KTMemcachedPort(KTCase):
    def test_unchanged(self):
        """-kt leaves the memcached port as it was: memcached's answer to
        HTTP there, and its commands."""
        with self.server.conn() as c:
            c.send(b"GET / HTTP/1.0\r\n\r\n")
            self.assertEqual(c.line(), b"ERROR\r\n")
        self.assertEqual(self.c.request(b"set a 1 0 1\r\nx\r\n"), b"STORED\r\n")
        self.assertEqual(self.k.http(b"GET", b"/a")[2], b"x")

    def test_past_c(self):
        """-c counts -kt's connections with the others; past it an HTTP
        client is told 503 in HTTP, a memcached one ERROR as before."""
        port = kuratest.free_port()
        srv = self.start_server(conns=3, kura_args=("-kt", str(port)))
        held = [KT(port), KT(port)]
        for k in held:
            self.addCleanup(k.close)
            self.assertEqual(k.http(b"GET", b"/x")[0], 404)
        with srv.conn() as c:           # the third: memcached's
            self.assertEqual(c.request(b"version\r\n")[:8], b"VERSION ")
            extra = KT(port)
            self.addCleanup(extra.close)
            code, h, body = extra.response()
            self.assertEqual((code, h["connection"], body),
                             (503, "close", b"too many open connections\n"))
            self.assertTrue(extra.is_closed())
            other = srv.conn()          # a memcached client past -c: as before
            self.addCleanup(other.close)
            self.assertEqual(other.line(), b"ERROR Too many open connections\r\n")

    def test_bad_kt_option(self):
        import subprocess
        for spec, why in ((b"abc", b"no port"), (b"70000", b"not from 1 to 65535"),
                          (b"notls:", b"no port"), (b"h:0", b"from 1 to 65535")):
            p = subprocess.run([kuratest.kurad_path(), "-port", "0", "-kt", spec],
                               capture_output=True, timeout=30)
            self.assertEqual(p.returncode, 2, spec)
            self.assertIn(why, p.stderr)

    def test_refused_with_sasl_alone(self):
        srv = kuratest.Server(start=False, kura_args=("-kt", "1978", "-S"))
        import subprocess
        p = subprocess.run(srv.argv(kuratest.free_port()), capture_output=True, timeout=30)
        self.assertEqual(p.returncode, 2)
        self.assertIn(b"-kt with -S", p.stderr)


if __name__ == "__main__":
    kuratest.main()
