# ktclient - a small client of Kyoto Tycoon 0.9's protocols, for the tests.
#
# Written from Kyoto Tycoon's protocol description (its doc/spex.html,
# "Protocol": TSV-RPC over HTTP, the RESTful interface, the binary
# protocol), not from kura's code, so that a test using it checks kura
# against the description and against ktserver's recorded replies
# (tests/fixtures/kt/), never against itself.
#
#  * HTTP/1.1 over one kept-alive socket, written and read by hand (not
#    http.client), so that a test sees the status line, every header and
#    the body exactly as the server sent them, and can send any bytes.
#  * TSV-RPC: POST /rpc/NAME with a body of "key<TAB>value" lines,
#    encoded with colenc=B (base64), Q (quoted-printable) or U (URL
#    encoding) when asked; a reply's body decoded by the colenc of its
#    Content-Type.  Also the other two input forms: a form-urlencoded body
#    and a query string.
#  * REST: GET, HEAD, PUT (X-Kt-Mode, X-Kt-Xt), DELETE of /KEY, the key
#    URL-encoded.
#  * The binary protocol: set_bulk (0xB8), remove_bulk (0xB9), get_bulk
#    (0xBA), play_script (0xB4): requests built, replies read by their
#    magic byte (0xBF: an error, nothing trails).
import base64, binascii, socket, struct, time, urllib.parse

MAGIC_SET_BULK, MAGIC_REMOVE_BULK, MAGIC_GET_BULK = 0xB8, 0xB9, 0xBA
MAGIC_PLAY_SCRIPT, MAGIC_ERROR = 0xB4, 0xBF
FLAG_NOREPLY = 0x01
TSV = "text/tab-separated-values"


class Closed(Exception):
    """The server closed the connection before a whole reply."""


# -- column encodings ----------------------------------------------------

def _qp_encode(b):
    return binascii.b2a_qp(b, quotetabs=True, istext=False)


def col_encode(b, colenc):
    if colenc is None:
        return b
    if colenc == "B":
        return base64.b64encode(b)
    if colenc == "U":
        return urllib.parse.quote_from_bytes(b, safe="").encode()
    if colenc == "Q":
        return _qp_encode(b)
    raise ValueError("colenc %r" % colenc)


def col_decode(b, colenc):
    if colenc is None:
        return b
    if colenc == "B":
        return base64.b64decode(b)
    if colenc == "U":
        return urllib.parse.unquote_to_bytes(b)
    if colenc == "Q":
        return binascii.a2b_qp(b)
    raise ValueError("colenc %r" % colenc)


def tsv_encode(pairs, colenc=None):
    """The body of a TSV request: one "key<TAB>value" line a record."""
    return b"".join(col_encode(k, colenc) + b"\t" + col_encode(v, colenc) + b"\n"
                    for k, v in pairs)


def content_type(colenc=None):
    return TSV + ("; colenc=%s" % colenc if colenc else "")


def parse_content_type(value):
    """(media type, colenc or None) of a Content-Type value."""
    parts = [p.strip() for p in value.split(";")]
    colenc = None
    for p in parts[1:]:
        if p.lower().startswith("colenc="):
            colenc = p.split("=", 1)[1].strip().upper() or None
    return parts[0].lower(), colenc


def tsv_decode(body, ctype):
    """[(key, value)] of a TSV body under Content-Type ctype.  A line
    without a tab is a key with an empty value (SIGNALBROAD in the
    description); empty lines are skipped."""
    _, colenc = parse_content_type(ctype or "")
    out = []
    for line in body.split(b"\n"):
        if line.endswith(b"\r"):
            line = line[:-1]
        if not line:
            continue
        k, _, v = line.partition(b"\t")
        out.append((col_decode(k, colenc), col_decode(v, colenc)))
    return out


def form_encode(pairs):
    return b"&".join(urllib.parse.quote_from_bytes(k, safe="").encode() + b"=" +
                     urllib.parse.quote_from_bytes(v, safe="").encode() for k, v in pairs)


def url_key(key, db=None):
    """The request path of a REST request on key (bytes)."""
    path = "/" + urllib.parse.quote_from_bytes(key, safe="")
    if db is not None:
        path = "/" + urllib.parse.quote(str(db), safe="") + path
    return path


# -- replies -------------------------------------------------------------

class Reply:
    """One HTTP reply: status_line (str, without CRLF), code, headers (a
    list of (name, value) as sent), body (bytes); raw is every byte."""

    def __init__(self, status_line, headers, body, raw):
        self.status_line, self.headers, self.body, self.raw = status_line, headers, body, raw
        self.code = int(status_line.split()[1])

    def header(self, name, default=None):
        name = name.lower()
        for k, v in self.headers:
            if k.lower() == name:
                return v
        return default

    @property
    def records(self):
        """The body as [(key, value)] when it is TSV, else None."""
        ct = self.header("content-type", "")
        if parse_content_type(ct)[0] != TSV:
            return None
        return tsv_decode(self.body, ct)

    def get(self, key):
        for k, v in self.records or []:
            if k == key:
                return v
        return None

    def __repr__(self):
        return "<Reply %s %r %r>" % (self.status_line, self.headers, self.body[:200])


class Client:
    """One connection to a Kyoto Tycoon server (ktserver or kurad -kt)."""

    def __init__(self, port, host="127.0.0.1", timeout=10.0):
        self.host, self.port, self.timeout = host, port, timeout
        self.sock = socket.create_connection((host, port), timeout=timeout)
        self.buf = b""

    def close(self):
        if self.sock:
            self.sock.close()
            self.sock = None

    def __enter__(self):
        return self

    def __exit__(self, *a):
        self.close()

    # -- bytes -----------------------------------------------------------
    def send(self, data):
        self.sock.sendall(data)

    def _more(self, end):
        left = end - time.monotonic()
        if left <= 0:
            raise socket.timeout("no whole reply within %.1f s (have %r)" %
                                 (self.timeout, self.buf[:200]))
        self.sock.settimeout(left)
        chunk = self.sock.recv(65536)
        if not chunk:
            raise Closed(self.buf)
        self.buf += chunk

    def _take(self, n, end):
        while len(self.buf) < n:
            self._more(end)
        out, self.buf = self.buf[:n], self.buf[n:]
        return out

    def read_reply(self, head=False):
        """One HTTP reply; head: the request was HEAD (no body follows)."""
        end = time.monotonic() + self.timeout
        while b"\r\n\r\n" not in self.buf:
            self._more(end)
        top, self.buf = self.buf.split(b"\r\n\r\n", 1)
        lines = top.decode("latin-1").split("\r\n")
        headers = [tuple(x.strip() for x in l.split(":", 1)) for l in lines[1:] if ":" in l]
        reply = Reply(lines[0], headers, b"", b"")
        length = reply.header("content-length")
        if head or reply.code in (204, 304) or 100 <= reply.code < 200:
            body = b""
        elif length is not None:
            body = self._take(int(length), end)
        else:
            # no length: the body runs to the close
            try:
                while True:
                    self._more(end)
            except Closed:
                pass
            body, self.buf = self.buf, b""
        reply.body = body
        reply.raw = top + b"\r\n\r\n" + body
        return reply

    def exchange(self, data, head=False):
        """Send raw bytes, read one HTTP reply."""
        self.send(data)
        return self.read_reply(head=head)

    # -- HTTP ------------------------------------------------------------
    @staticmethod
    def message(method, path, headers=(), body=None, version="HTTP/1.1", host="localhost"):
        out = ["%s %s %s" % (method, path, version), "Host: %s" % host]
        out += ["%s: %s" % kv for kv in headers]
        if body is not None:
            out.append("Content-Length: %d" % len(body))
        return ("\r\n".join(out) + "\r\n\r\n").encode("latin-1") + (body or b"")

    def request(self, method, path, headers=(), body=None, version="HTTP/1.1"):
        return self.exchange(self.message(method, path, headers, body, version),
                             head=(method == "HEAD"))

    # -- TSV-RPC ---------------------------------------------------------
    @staticmethod
    def rpc_message(name, pairs=(), colenc=None, form=False, query=False):
        pairs = [(as_bytes(k), as_bytes(v)) for k, v in pairs]
        if query:
            q = form_encode(pairs).decode()
            return Client.message("GET", "/rpc/%s%s" % (name, "?" + q if q else ""))
        if form:
            return Client.message("POST", "/rpc/" + name,
                                  [("Content-Type", "application/x-www-form-urlencoded")],
                                  form_encode(pairs))
        return Client.message("POST", "/rpc/" + name, [("Content-Type", content_type(colenc))],
                              tsv_encode(pairs, colenc))

    def rpc(self, name, pairs=(), **kw):
        """Call procedure name with [(key, value)]; the Reply (records,
        code: 200, 450 as the description says)."""
        return self.exchange(self.rpc_message(name, pairs, **kw))

    # -- REST ------------------------------------------------------------
    def rest_get(self, key, db=None):
        return self.request("GET", url_key(as_bytes(key), db))

    def rest_head(self, key, db=None):
        return self.request("HEAD", url_key(as_bytes(key), db))

    def rest_put(self, key, value, mode=None, xt=None, db=None):
        h = []
        if mode:
            h.append(("X-Kt-Mode", mode))
        if xt is not None:
            h.append(("X-Kt-Xt", str(xt)))
        return self.request("PUT", url_key(as_bytes(key), db), h, as_bytes(value))

    def rest_delete(self, key, db=None):
        return self.request("DELETE", url_key(as_bytes(key), db))

    # -- binary protocol -------------------------------------------------
    def bin_exchange(self, data, noreply=False):
        """Send a binary request; read its reply (None under no-reply):
        (magic, hits or rnum, [records]) where a record of get_bulk is
        (dbidx, key, value, xt) and of play_script (key, value)."""
        self.send(data)
        if noreply:
            return None
        end = time.monotonic() + self.timeout
        magic = self._take(1, end)[0]
        if magic == MAGIC_ERROR:
            return (magic, None, [])
        n = struct.unpack(">I", self._take(4, end))[0]
        recs = []
        if magic == MAGIC_GET_BULK:
            for _ in range(n):
                dbidx, ks, vs, xt = struct.unpack(">HIIq", self._take(18, end))
                recs.append((dbidx, self._take(ks, end), self._take(vs, end), xt))
        elif magic == MAGIC_PLAY_SCRIPT:
            for _ in range(n):
                ks, vs = struct.unpack(">II", self._take(8, end))
                recs.append((self._take(ks, end), self._take(vs, end)))
        return (magic, n, recs)


def as_bytes(x):
    if isinstance(x, bytes):
        return x
    return str(x).encode("utf-8")


def bin_set_bulk(recs, flags=0):
    """recs: [(key, value, xt)] or [(key, value, xt, dbidx)]."""
    out = struct.pack(">BII", MAGIC_SET_BULK, flags, len(recs))
    for r in recs:
        k, v, xt = as_bytes(r[0]), as_bytes(r[1]), r[2]
        dbidx = r[3] if len(r) > 3 else 0
        out += struct.pack(">HIIq", dbidx, len(k), len(v), xt) + k + v
    return out


def _bin_keys(magic, keys, flags):
    out = struct.pack(">BII", magic, flags, len(keys))
    for k in keys:
        dbidx = 0
        if isinstance(k, tuple):
            k, dbidx = k
        k = as_bytes(k)
        out += struct.pack(">HI", dbidx, len(k)) + k
    return out


def bin_remove_bulk(keys, flags=0):
    """keys: [key] or [(key, dbidx)]."""
    return _bin_keys(MAGIC_REMOVE_BULK, keys, flags)


def bin_get_bulk(keys, flags=0):
    return _bin_keys(MAGIC_GET_BULK, keys, flags)


def bin_play_script(name, recs, flags=0):
    name = as_bytes(name)
    out = struct.pack(">BIII", MAGIC_PLAY_SCRIPT, flags, len(name), len(recs)) + name
    for k, v in recs:
        k, v = as_bytes(k), as_bytes(v)
        out += struct.pack(">II", len(k), len(v)) + k + v
    return out
