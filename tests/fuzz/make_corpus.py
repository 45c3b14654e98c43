#!/usr/bin/python3
"""Writes the seed corpora under tests/fuzz/corpus/ from real files: a kurad
with an update log and snapshots (a hash file, then a B+ tree) is given a
few sets, a delete, an incr and a flush_all; its files and kuractl's two
dump formats are cut into the inputs the targets take (fuzz_*.c say how
each is shaped).  Seeds made by hand (protocol requests, conf lines) are
files of their own in the corpus and are left alone.  Run after a format
changes:  make && tests/fuzz/make_corpus.py  (the snapshot seeds named v1-*
were written before snapshot version 2, by the kuractl of that time, and
are kept as they are: the reader still reads version 1).

Each seed is kept small (a few KB); the fuzzer grows from them.

Kyoto Tycoon's seeds (kt, kt_decode) are the requests of
tests/fixtures/kt/replies.json, the ones whose replies were recorded from
ktserver: make_corpus.py --kt writes those alone (no kurad needed).
"""
import glob, os, shutil, socket, subprocess, sys, tempfile, time
sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "lib"))
import kuratest

ROOT = kuratest.ROOT
CORPUS = os.path.join(ROOT, "tests", "fuzz", "corpus")
BUILD = os.path.join(ROOT, os.environ.get("KURA_BUILD", "build-test"))
KURACTL = os.path.join(BUILD, "kuractl")
FIX, ASIS = b"\x01", b"\x00"          # fuzz.h: FUZZ_FIX_CRC


def seed(target, name, data):
    d = os.path.join(CORPUS, target)
    os.makedirs(d, exist_ok=True)
    with open(os.path.join(d, name), "wb") as f:
        f.write(data)


def varint(v):
    out = b""
    while v >= 0x80:
        out += bytes([v & 0x7f | 0x80])
        v >>= 7
    return out + bytes([v])


def row_len(b):
    """Bytes of the update-log row at the start of b (ulog.h)."""
    n, shift, i = 0, 0, 4
    while True:
        n |= (b[i] & 0x7f) << shift
        shift += 7
        i += 1
        if b[i - 1] < 0x80:
            return i + n


def mark(ts, kind):
    """A replication mark row (UL_MARK, 5) with its CRC left 0: seeds
    carrying one set FIX, and the target computes it."""
    body = bytes([5]) + varint(ts) + varint(7) + varint(kind)
    return b"\0\0\0\0" + varint(len(body)) + body


def trimmed(path):
    """A segment file without its preallocated zeros."""
    data = open(path, "rb").read()
    return data.rstrip(b"\0")


def traffic(port):
    s = socket.create_connection(("127.0.0.1", port))
    req = (b"set alpha 5 0 5\r\nhello\r\nset beta 0 3600 3\r\nxyz\r\n"
           b"set n 0 0 2\r\n41\r\nincr n 1\r\ndelete beta\r\n"
           b"set gamma 7 0 300\r\n" + b"g" * 300 + b"\r\n")
    s.sendall(req)
    got = b""
    while got.count(b"\r\n") < 6:
        got += s.recv(4096)
    s.close()


def run(db, bgs, ulog):
    srv = kuratest.Server(db=db, kura_args=["-ulog", ulog, "-bgs", bgs, "-bgsc", "none"])
    try:
        traffic(srv.port)
        c = socket.create_connection(("127.0.0.1", srv.port))
        c.sendall(b"snapshot\r\n")
        c.recv(100)
        c.close()
        kuratest.poll_until(lambda: glob.glob(os.path.join(bgs, "*.ksnap")), what="a snapshot")
    finally:
        srv.stop()


def main():
    tmp = tempfile.mkdtemp(prefix="kura-corpus-")
    try:
        h, t = os.path.join(tmp, "h.kh"), os.path.join(tmp, "t.kb")
        # the smallest page, the one fuzz_tree_page.c takes
        run(h, os.path.join(tmp, "snap"), os.path.join(tmp, "ulog"))
        run(t + "#psiz=4096", os.path.join(tmp, "snap2"), os.path.join(tmp, "ulog2"))

        seg = trimmed(sorted(glob.glob(os.path.join(tmp, "ulog", "*.seg")))[0])
        rows = seg[32:]
        seed("ulog_row", "rows", ASIS + rows)
        seed("ulog_row", "rows-fix", FIX + rows)
        seed("ulog_file", "segment", ASIS + seg)
        seed("ulog_file", "segment-fix", FIX + seg)
        # a master streams rows without the segment's header row, with marks:
        # heartbeats, and COPY_DONE (2) after a full copy
        data = rows[row_len(rows):]
        seed("repl", "repl", ASIS + b"REPL 0 7\r\n" + data)
        seed("repl", "repl-heartbeat", FIX + b"REPL 0 7\r\n" + data + mark(1 << 60, 1))
        seed("repl", "boot", FIX + b"BOOT 5 7\r\n" + data + mark(5, 2) + data)
        seed("repl", "boot-rw", b"\x03" + b"BOOT 5 7\r\n" + data + mark(5, 2))   # FIX | FUZZ_RW

        snap = open(sorted(glob.glob(os.path.join(tmp, "snap", "*.ksnap")))[0], "rb").read()
        seed("snapshot", "none", ASIS + snap)
        seed("snapshot", "none-fix", FIX + snap)

        # hash/v3-*: the same seeds from a kurad that wrote record format 3,
        # left alone (old segments still open)
        hseg = trimmed(sorted(glob.glob(os.path.join(h, "*.seg")))[-1])
        ckpt = open(os.path.join(h, "checkpoint"), "rb").read()
        seed("hash", "segment", FIX + hseg)
        seed("hash", "segment-ckpt", ASIS + hseg + ckpt)
        seed("hash", "segment-ckpt-fix", FIX + hseg + ckpt)
        seed("hash", "segment-ckpt-recover", b"\x03" + hseg + ckpt)    # FIX | FUZZ_RECOVER

        tseg = trimmed(sorted(glob.glob(os.path.join(t, "*.seg")))[-1])
        seed("tree_wal", "wal", FIX + tseg)
        seed("tree_wal", "wal-asis", ASIS + tseg)
        tree = open(os.path.join(t, "tree"), "rb").read()
        for i in range(2, len(tree) // 4096):
            page = tree[i * 4096:(i + 1) * 4096]
            if page[4] in (2, 3):               # a branch or a leaf
                seed("tree_page", "page%d" % i, FIX + page.rstrip(b"\0"))

        for fmt in ("kura", "memcached"):
            out = os.path.join(tmp, "dump." + fmt)
            subprocess.run([KURACTL, "dump", h, "-o", out, "--format", fmt, "--codec", "none"]
                           if fmt == "kura" else [KURACTL, "dump", h, "-o", out, "--format", fmt],
                           check=True)
            seed("ctl_load", fmt, FIX + open(out, "rb").read())
    finally:
        shutil.rmtree(tmp, ignore_errors=True)


def kt_seeds():
    """kt: each case of the KT fixture as one connection's bytes; kt_decode:
    its HTTP requests, TSV and form bodies, Content-Types and binary
    requests, behind the selector byte fuzz_kt_decode.c reads (value mod 5,
    then the parameter), each shape once (an HTTP request by its method,
    procedure and uncommon header names, a TSV body by its encoding and
    its names)."""
    import json, re
    with open(os.path.join(ROOT, "tests", "fixtures", "kt", "replies.json")) as f:
        cases = json.load(f)["cases"]
    sel = lambda which, arg: bytes([which + 5 * arg])
    seen = set()

    def once(kind, shape, name, data):
        if (kind, shape) not in seen and len(data) <= 4096:
            seen.add((kind, shape))
            seed("kt_decode", "%s-%d-%s" % (kind, len(seen), name), data)

    for c in cases:
        reqs = [e["req"].encode("latin-1") for e in c["exchanges"]]
        name = c["name"].replace(" ", "-") + ("" if c["db"] == "any" else "-" + c["db"])
        data = b"".join(reqs)
        if len(data) <= 8192:
            seed("kt", name, data)
        for e, r in zip(c["exchanges"], reqs):
            if e.get("binary"):
                once("bin", r[:1] + r[1:5] + bytes([len(r) > 64]), name, sel(4, 0) + r)
                continue
            if not r:
                continue
            head, _, body = r.partition(b"\r\n\r\n")
            lines = head.split(b"\r\n")
            method, target = lines[0].split(b" ")[:2]
            target = re.sub(rb"[?].*", b"", target) if target.startswith(b"/rpc/") else b"/KEY"
            names = b",".join(sorted(l.split(b":")[0].lower() for l in lines[1:]
                                     if not l.lower().startswith((b"host:", b"content-"))))
            once("http", method + b" " + target + b" " + names, name, sel(0, 50) + r)
            ctype = [l.split(b":", 1)[1].strip() for l in lines[1:]
                     if l.lower().startswith(b"content-type:")]
            if not body or not ctype:
                continue
            once("ctype", ctype[0], name, sel(3, 0) + ctype[0])
            if b"urlencoded" in ctype[0]:
                once("form", body, name, sel(2, 20) + body)
            else:
                # arg % 4 picks the encoding (none, B, Q, U), 1 + arg the pairs' bound
                arg = {b"B": 9, b"Q": 10, b"U": 11}.get(ctype[0][-1:], 8)
                cols = b",".join(sorted(set(l.split(b"\t")[0] for l in body.split(b"\n"))))
                once("tsv", bytes([arg]) + cols, name, sel(1, arg) + body)


if __name__ == "__main__":
    if sys.argv[1:] == ["--kt"]:
        kt_seeds()
    else:
        main()
        kt_seeds()
