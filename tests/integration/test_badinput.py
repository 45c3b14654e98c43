#!/usr/bin/python3
# Bad input, one class per test: 251-byte keys, control characters in keys,
# negative / huge / non-numeric lengths, values longer or shorter than
# declared, missing CRLF (LF only, CR only), a 100 KB line without newline,
# binary garbage, unknown commands, wrong token counts and bad numbers, a
# client sending one byte at a time, a client disconnecting mid-value, a
# thousand connections opened and dropped.  Every expected reply is memcached
# 1.6.18's exact answer; after each case the test checks whether the
# connection stayed open (as memcached's does) and that the server still
# serves another client correctly.
import os, random, socket, struct, sys, time
sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "lib"))
import kuratest
from kuratest import ServerTestCase, stats, poll_until

K250 = b"k" * 250
K251 = b"k" * 251
BADFMT = b"CLIENT_ERROR bad command line format\r\n"
BADCHUNK = b"CLIENT_ERROR bad data chunk\r\n"


class Helpers(ServerTestCase):

    def still_open(self, c=None):
        """The connection answers a further request (so it was not closed)."""
        c = c or self.c
        self.assertEqual(c.request(b"set _alive 0 0 1\r\n1\r\n"), b"STORED\r\n")

    def expect(self, data, reply, c=None):
        c = c or self.c
        self.assertEqual(c.transcript(data), reply, "request %r" % data[:200])


class BadInput(Helpers):

    # -- keys ------------------------------------------------------------
    def test_key_251_bytes(self):
        # 250 is the longest key; 251 is rejected on every command that takes a key
        self.expect(b"set " + K250 + b" 0 0 1\r\nx\r\n", b"STORED\r\n")
        self.expect(b"get " + K250 + b"\r\n", b"VALUE " + K250 + b" 0 1\r\nx\r\nEND\r\n")
        # the value line that follows a rejected set is read as a command
        self.expect(b"set " + K251 + b" 0 0 1\r\nx\r\n", BADFMT + b"ERROR\r\n")
        self.expect(b"add " + K251 + b" 0 0 1\r\nx\r\n", BADFMT + b"ERROR\r\n")
        self.expect(b"cas " + K251 + b" 0 0 1 1\r\nx\r\n", BADFMT + b"ERROR\r\n")
        self.expect(b"get " + K251 + b"\r\n", BADFMT)
        self.expect(b"gets a " + K251 + b" b\r\n", BADFMT)
        self.expect(b"gat 0 " + K251 + b"\r\n", BADFMT)
        self.expect(b"delete " + K251 + b"\r\n", BADFMT)
        self.expect(b"incr " + K251 + b" 1\r\n", BADFMT)
        self.expect(b"decr " + K251 + b" 1\r\n", BADFMT)
        self.expect(b"touch " + K251 + b" 1\r\n", BADFMT)
        # the 250-byte key is still there; a 1000-byte key is no different
        self.expect(b"get " + K250 + b"\r\n", b"VALUE " + K250 + b" 0 1\r\nx\r\nEND\r\n")
        self.expect(b"set " + b"z" * 1000 + b" 0 0 1\r\nx\r\n", BADFMT + b"ERROR\r\n")
        self.still_open()
        self.check_serving()

    def test_control_chars_in_key(self):
        # memcached's ASCII protocol splits tokens on ' ' only: tab, \x01, \x0b,
        # \x7f and bytes >= 0x80 are ordinary key bytes (stored and found again)
        for key in (b"a\x01b", b"a\tb", b"a\x0bb", b"a\x7fb", b"\x1b[0m", b"\xc3\xa9t\xc3\xa9"):
            self.expect(b"set " + key + b" 0 0 1\r\nx\r\n", b"STORED\r\n")
            self.expect(b"get " + key + b"\r\n", b"VALUE " + key + b" 0 1\r\nx\r\nEND\r\n")
        self.expect(b"get a\x01b a\tb\r\n",
                    b"VALUE a\x01b 0 1\r\nx\r\nVALUE a\tb 0 1\r\nx\r\nEND\r\n")
        self.expect(b"delete a\x01b\r\n", b"DELETED\r\n")
        # a NUL byte ends the command line (C string): "set a\0b 0 0 1" is "set a"
        self.expect(b"set a\x00b 0 0 1\r\nx\r\n", b"ERROR\r\nERROR\r\n")
        self.expect(b"set a 0 0 1\r\ny\r\n", b"STORED\r\n")
        self.expect(b"get a\x00b c\r\n", b"VALUE a 0 1\r\ny\r\nEND\r\n")
        # a lone CR inside a key is a key byte too
        self.expect(b"get a\rb\r\n", b"END\r\n")
        self.still_open()
        self.check_serving()

    # -- lengths -----------------------------------------------------------
    def test_negative_length(self):
        self.expect(b"set a 0 0 -1\r\nx\r\n", BADFMT + b"ERROR\r\n")
        self.expect(b"set a 0 0 -1 noreply\r\nx\r\n", b"ERROR\r\n")   # error silenced too
        self.expect(b"append a 0 0 -5\r\nx\r\n", BADFMT + b"ERROR\r\n")
        self.expect(b"get a\r\n", b"END\r\n")
        self.still_open()
        self.check_serving()

    def test_huge_length(self):
        # over INT_MAX - 2, or out of range for strtol: a format error, nothing swallowed
        for n in (b"2147483646", b"2147483647", b"2147483648", b"4294967295",
                  b"99999999999999999999", b"18446744073709551616"):
            self.expect(b"set a 0 0 " + n + b"\r\nx\r\n", BADFMT + b"ERROR\r\n")
        self.expect(b"get a\r\n", b"END\r\n")
        self.still_open()
        self.check_serving()

    def test_length_over_item_limit(self):
        # a valid length above the item size: the reply comes after the server
        # has read and thrown away the whole value; the connection stays usable
        n = 2 * 1024 * 1024
        self.c.send(b"set big 0 0 %d\r\n" % n)
        self.c.send(b"v" * n + b"\r\n")
        self.assertEqual(self.c.reply(timeout=20), b"SERVER_ERROR object too large for cache\r\n")
        self.expect(b"get big\r\n", b"END\r\n")
        self.still_open()
        self.check_serving()

    def test_non_numeric_length(self):
        for n in (b"abc", b"1x", b"0x10", b"1.5", b"--1"):
            self.expect(b"set a 0 0 " + n + b"\r\nx\r\n", BADFMT + b"ERROR\r\n")
        # leading + and zeros are accepted by strtol
        self.expect(b"set a 0 0 +1\r\nx\r\nset b 0 0 01\r\ny\r\nget a b\r\n",
                    b"STORED\r\nSTORED\r\nVALUE a 0 1\r\nx\r\nVALUE b 0 1\r\ny\r\nEND\r\n")
        self.still_open()
        self.check_serving()

    def test_bad_flags_exptime_cas_delta(self):
        self.expect(b"set a -1 0 1\r\nx\r\n", BADFMT + b"ERROR\r\n")
        self.expect(b"set a abc 0 1\r\nx\r\n", BADFMT + b"ERROR\r\n")
        self.expect(b"set a 0 abc 1\r\nx\r\n", BADFMT + b"ERROR\r\n")
        self.expect(b"set a 0 99999999999999999999 1\r\nx\r\n", BADFMT + b"ERROR\r\n")
        self.expect(b"set a 4294967295 0 1\r\nx\r\nget a\r\n",
                    b"STORED\r\nVALUE a 4294967295 1\r\nx\r\nEND\r\n")
        self.expect(b"cas a 0 0 1 abc\r\nx\r\n", BADFMT + b"ERROR\r\n")
        self.expect(b"cas a 0 0 1 -1\r\nx\r\n", BADFMT + b"ERROR\r\n")
        self.expect(b"cas a 0 0 1 18446744073709551616\r\nx\r\n", BADFMT + b"ERROR\r\n")
        self.expect(b"set n 0 0 1\r\n5\r\n", b"STORED\r\n")
        for d in (b"-1", b"abc", b"1x", b"18446744073709551616"):
            self.expect(b"incr n " + d + b"\r\n", b"CLIENT_ERROR invalid numeric delta argument\r\n")
            self.expect(b"decr n " + d + b"\r\n", b"CLIENT_ERROR invalid numeric delta argument\r\n")
        self.expect(b"touch n abc\r\n", b"CLIENT_ERROR invalid exptime argument\r\n")
        self.expect(b"gat abc n\r\n", b"CLIENT_ERROR invalid exptime argument\r\n")
        self.expect(b"flush_all abc\r\n", b"CLIENT_ERROR invalid exptime argument\r\n")
        self.expect(b"verbosity abc\r\n", BADFMT)
        self.expect(b"get n\r\n", b"VALUE n 0 1\r\n5\r\nEND\r\n")
        self.still_open()
        self.check_serving()

    # -- data blocks ---------------------------------------------------------
    def test_value_longer_than_declared(self):
        self.expect(b"set a 0 0 1\r\nz\r\n", b"STORED\r\n")
        # the server reads len+2 bytes ("xyz"), which do not end in CRLF: bad data
        # chunk; what follows is read as the next command line
        self.expect(b"set a 0 0 1\r\nxyz\r\n", BADCHUNK + b"ERROR\r\n")
        self.expect(b"set a 0 0 1\r\nxyzw\r\n", BADCHUNK + b"ERROR\r\n")
        self.expect(b"set a 0 0 1 noreply\r\nxyz\r\n", b"ERROR\r\n")
        self.expect(b"get a\r\n", b"VALUE a 0 1\r\nz\r\nEND\r\n")     # old value kept
        self.still_open()
        self.check_serving()

    def test_value_shorter_than_declared(self):
        self.expect(b"set a 0 0 1\r\nz\r\n", b"STORED\r\n")
        # 7 bytes are taken as the value: "ab\r\nget", then " a" is a command
        self.expect(b"set a 0 0 5\r\nab\r\nget a\r\n", BADCHUNK + b"ERROR\r\n")
        self.expect(b"get a\r\n", b"VALUE a 0 1\r\nz\r\nEND\r\n")
        # a shorter value whose declared length happens to end on CRLF is stored
        self.expect(b"set b 0 0 5\r\nab\r\nd\r\nget b\r\n", b"STORED\r\nVALUE b 0 5\r\nab\r\nd\r\nEND\r\n")
        # the server waits for the rest of a value: nothing comes back meanwhile
        self.c.send(b"set c 0 0 10\r\n12345")
        self.assertEqual(self.c.read_available(0.3), b"")
        self.c.send(b"67890\r\n")
        self.assertEqual(self.c.reply(), b"STORED\r\n")
        self.still_open()
        self.check_serving()

    def test_value_binary_safe(self):
        v = bytes(range(256)) + b"\r\n\r\n\x00END\r\n"
        self.expect(b"set bin 0 0 %d\r\n" % len(v) + v + b"\r\n", b"STORED\r\n")
        self.expect(b"get bin\r\n", b"VALUE bin 0 %d\r\n" % len(v) + v + b"\r\nEND\r\n")

    # -- line endings --------------------------------------------------------
    def test_missing_crlf_lf_only(self):
        # a command line may end in LF alone; a value block must end in CRLF
        self.expect(b"set a 0 0 1\nx\r\nget a\n", b"STORED\r\nVALUE a 0 1\r\nx\r\nEND\r\n")
        self.expect(b"get a\n\n", b"VALUE a 0 1\r\nx\r\nEND\r\nERROR\r\n")
        self.expect(b"set a 0 0 1\r\ny\nget a\r\n", BADCHUNK + b"ERROR\r\n")
        self.expect(b"set a 0 0 2\r\ny\n\r\nget a\r\n", b"STORED\r\nVALUE a 0 2\r\ny\n\r\nEND\r\n")
        self.still_open()
        self.check_serving()

    def test_missing_crlf_cr_only(self):
        self.expect(b"set a 0 0 1\r\nx\r\n", b"STORED\r\n")
        # CR alone does not end a line: the server keeps waiting for LF
        self.c.send(b"get a\r")
        self.assertEqual(self.c.read_available(0.3), b"")
        self.c.send(b"\n")
        self.assertEqual(self.c.reply(), b"VALUE a 0 1\r\nx\r\nEND\r\n")
        # "get a\rget a\r\n" is one line asking for the key "a\rget" and "a"
        self.expect(b"get a\rget a\r\n", b"VALUE a 0 1\r\nx\r\nEND\r\n")
        # a lone "\r" line (LF-terminated) is an unknown command
        self.expect(b"\r\n", b"ERROR\r\n")
        self.expect(b"get a\n\r\n", b"VALUE a 0 1\r\nx\r\nEND\r\nERROR\r\n")
        # value block ending in CR CR
        self.expect(b"set a 0 0 1\r\ny\r\r", BADCHUNK)
        self.expect(b"get a\r\n", b"VALUE a 0 1\r\nx\r\nEND\r\n")
        self.still_open()
        self.check_serving()

    # -- long lines ----------------------------------------------------------
    def test_100kb_line_without_newline(self):
        # more than 2048 bytes without LF: memcached closes the connection,
        # unless the line starts with "get " or "gets " (a huge multi-get)
        self.c.send(b"x" * 100 * 1024)
        self.assertTrue(self.c.is_closed(5), "connection not closed after 100 KB without newline")
        with self.server.conn() as c:
            c.send(b"set " + b"x" * 100 * 1024)
            self.assertTrue(c.is_closed(5))
        with self.server.conn() as c:
            c.send(b"x" * 2048)                      # exactly 2048: still waiting
            self.assertFalse(c.is_closed(0.3))
            c.send(b"x")                             # 2049: closed
            self.assertTrue(c.is_closed(5))
        self.check_serving()

    def test_100kb_get_line(self):
        # a 100 KB "get" line is legal: many keys ...
        self.expect(b"set k7 0 0 1\r\nx\r\n", b"STORED\r\n")
        keys = b" ".join(b"k%d" % i for i in range(15000))
        self.assertGreater(len(keys), 100 * 1024 - 20000)
        self.c.send(b"get " + keys)
        self.assertFalse(self.c.is_closed(0.3))
        self.c.send(b"\r\n")
        self.assertEqual(self.c.reply(), b"VALUE k7 0 1\r\nx\r\nEND\r\n")
        # ... but one 100 KB key is a format error once the line ends
        self.c.send(b"get " + b"x" * 100 * 1024)
        self.assertFalse(self.c.is_closed(0.3))
        self.c.send(b"\r\n")
        self.assertEqual(self.c.reply(), BADFMT)
        self.still_open()
        self.check_serving()

    # -- garbage -------------------------------------------------------------
    def test_binary_garbage(self):
        rnd = random.Random(20240601)
        # 20 lines of random bytes (no LF, no NUL, first byte not 0x80, which
        # would switch memcached to its binary protocol): ERROR for each
        lines = [bytes(rnd.randrange(11, 256) for _ in range(50)) for _ in range(20)]
        self.expect(b"\r\n".join(lines) + b"\r\n", b"ERROR\r\n" * 20)
        g = bytes(b for b in (rnd.randrange(1, 256) for _ in range(1000)) if b not in (10, 0x80))
        self.expect(b"\xfe" + g + b"\r\n", b"ERROR\r\n")
        self.still_open()
        # 5000 random bytes with no newline at all: closed
        with self.server.conn() as c:
            c.send(bytes(rnd.randrange(11, 256) for _ in range(5000)))
            self.assertTrue(c.is_closed(5))
        self.check_serving()

    def test_unknown_commands(self):
        for line in (b"bogus", b"GET a", b"Set a 0 0 1", b"getx a", b"sets", b"a", b"ab",
                     b"", b" ", b"   ", b"get", b"get ", b"gets", b"gat",
                     b"incrr a 1", b"flush", b"stat", b"quitx"):
            self.expect(line + b"\r\n", b"ERROR\r\n")
        # an unknown command's "value" is just another unknown command
        self.expect(b"foo a 0 0 5\r\nhello\r\n", b"ERROR\r\nERROR\r\n")
        self.expect(b"stats bogus\r\n", b"ERROR\r\n")
        # (but "gat 0" with no key is an empty multi-get)
        self.expect(b"gat 0\r\n", b"END\r\n")
        self.still_open()
        self.check_serving()

    def test_wrong_token_counts(self):
        cases = [
            (b"set a 0 0\r\n", b"ERROR\r\n"),
            (b"set a 0 0 1 noreply extra\r\nx\r\n", b"ERROR\r\nERROR\r\n"),
            (b"add a\r\n", b"ERROR\r\n"),
            (b"replace a 0\r\n", b"ERROR\r\n"),
            (b"append a 0 0\r\n", b"ERROR\r\n"),
            (b"prepend\r\n", b"ERROR\r\n"),
            (b"cas a 0 0 1\r\nx\r\n", b"ERROR\r\nERROR\r\n"),
            (b"cas a 0 0 1 1 noreply x\r\nx\r\n", b"ERROR\r\nERROR\r\n"),
            (b"incr a\r\n", b"ERROR\r\n"),
            (b"incr a 1 noreply x\r\n", b"ERROR\r\n"),
            (b"decr\r\n", b"ERROR\r\n"),
            (b"touch a\r\n", b"ERROR\r\n"),
            (b"touch a 1 noreply x\r\n", b"ERROR\r\n"),
            (b"delete\r\n", b"ERROR\r\n"),
            (b"delete a 0 noreply x\r\n", b"ERROR\r\n"),
            (b"delete a 1\r\n", b"CLIENT_ERROR bad command line format.  Usage: delete <key> [noreply]\r\n"),
            (b"delete a x\r\n", b"CLIENT_ERROR bad command line format.  Usage: delete <key> [noreply]\r\n"),
            (b"delete a 0 0\r\n", b"CLIENT_ERROR bad command line format.  Usage: delete <key> [noreply]\r\n"),
            (b"verbosity\r\n", b"ERROR\r\n"),
            (b"verbosity 1 2 3\r\n", b"ERROR\r\n"),
            (b"flush_all 1 2 3\r\n", b"ERROR\r\n"),
        ]
        for req, rep in cases:
            self.expect(req, rep)
        self.still_open()
        self.check_serving()

    # -- slow, broken and many clients ------------------------------------------
    def test_one_byte_at_a_time(self):
        conv = [
            (b"set slow 5 0 5\r\nhello\r\n", b"STORED\r\n"),
            (b"get slow\r\n", b"VALUE slow 5 5\r\nhello\r\nEND\r\n"),
            (b"append slow 0 0 3\r\n!!!\r\n", b"STORED\r\n"),
            (b"gets nope slow\r\n", None),
            (b"set n 0 0 2\r\n41\r\nincr n 1\r\n", b"STORED\r\n42\r\n"),
            (b"delete slow\r\n", b"DELETED\r\n"),
            (b"get slow n\r\n", b"VALUE n 0 2\r\n42\r\nEND\r\n"),
        ]
        c = self.c
        for req, rep in conv:
            for i in range(len(req)):
                c.send(req[i:i + 1])
            if rep is None:
                r = c.reply()
                self.assertTrue(r.startswith(b"VALUE slow 5 8 ") and r.endswith(b"\r\nhello!!!\r\nEND\r\n"), r)
            else:
                self.assertEqual(c.recv_exact(len(rep)), rep)
        self.check_serving()

    def test_disconnect_mid_value(self):
        c = self.server.conn()
        c.send(b"set a 0 0 100\r\n" + b"x" * 50)
        c.close()
        c = self.server.conn()
        c.send(b"set b 0 0 10\r\nabc")
        # abortive close (RST)
        c.sock.setsockopt(socket.SOL_SOCKET, socket.SO_LINGER, struct.pack("ii", 1, 0))
        c.close()
        c = self.server.conn()
        c.send(b"set c 0 0 1\r")                        # mid command line
        c.close()
        c = self.server.conn()
        c.send(b"get " + b"k " * 5000)                 # mid long multi-get
        c.close()
        self.expect(b"get a b c\r\n", b"END\r\n")
        self.check_serving()

    def test_disconnect_with_unread_replies(self):
        # the client sends many gets of a big value and leaves without reading
        v = b"v" * 100000
        self.expect(b"set big 0 0 %d\r\n" % len(v) + v + b"\r\n", b"STORED\r\n")
        for _ in range(3):
            c = self.server.conn()
            c.send(b"get big\r\n" * 200)
            c.sock.setsockopt(socket.SOL_SOCKET, socket.SO_LINGER, struct.pack("ii", 1, 0))
            c.close()
        self.check_serving()
        self.assertEqual(self.c.request(b"get big\r\n"), b"VALUE big 0 100000\r\n" + v + b"\r\nEND\r\n")



class ManyConnections(Helpers):
    # room for 1000 clients at once (memcached reserves some fds below -c)
    SERVER_OPTS = {"conns": 4096}

    def test_thousand_connections_opened_and_dropped(self):
        conns = []
        try:
            for i in range(1000):
                s = socket.create_connection(("127.0.0.1", self.server.port), timeout=10 * kuratest.SCALE)
                if i % 4 == 1:
                    s.sendall(b"get x\r\n")
                elif i % 4 == 2:
                    s.sendall(b"set half 0 0 10\r\nabc")
                elif i % 4 == 3:
                    s.setsockopt(socket.SOL_SOCKET, socket.SO_LINGER, struct.pack("ii", 1, 0))
                conns.append(s)
            # every one of them was accepted and served
            probe = conns[1]
            self.assertEqual(_recv_exact(probe, 5), b"END\r\n")
            self.check_serving()
        finally:
            for s in conns:
                s.close()
        self.check_serving()

        def settled():
            st = stats(self.c)
            return int(st["curr_connections"]) <= 3 and st
        poll_until(settled, 10, what="curr_connections back to the test's own")
        self.expect(b"get half\r\n", b"END\r\n")
        self.check_serving()

    def test_thousand_sequential_connections(self):
        for i in range(1000):
            s = socket.create_connection(("127.0.0.1", self.server.port), timeout=10 * kuratest.SCALE)
            if i % 2:
                s.sendall(b"version\r\n")
            s.close()
        self.check_serving()


def _recv_exact(s, n, timeout=10):
    s.settimeout(timeout * kuratest.SCALE)
    buf = b""
    while len(buf) < n:
        d = s.recv(n - len(buf))
        if not d:
            break
        buf += d
    return buf


if __name__ == "__main__":
    kuratest.main()
