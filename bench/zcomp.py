#!/usr/bin/python3
"""zcomp.py - file size and set/get speed of a database with #zcomp
none/lzo/zlib (docs/formats.md, the hash file's "Compression", and the
B+ tree's).

For each codec: a fresh database, kurad with one worker thread pinned to
one CPU (taskset), this client on the other; N values of SIZE bytes of
text-like data (words of a fixed vocabulary drawn by a Zipf law, as in
text: lzo takes them to about 55%, zlib to about 35%) set over CONNS connections that each keep DEPTH requests in
flight, then every key read back the same way (and checked); after a
clean stop, the bytes of the database's files.

    bench/zcomp.py [--db kh|kb] [--n 20000] [--size 20000] [--conns 16]
                   [--depth 16] [--codecs none,lzo,zlib] [--kurad build/kurad]

Standard library only.  Figures from a shared machine vary by +-20%.
"""
import argparse, os, random, shutil, socket, subprocess, sys, tempfile, threading, time


def text_values(n_distinct, size, seed=1):
    rng = random.Random(seed)
    letters = "etaoinshrdlucmfwypvbgkjqxz"
    vocab = ["".join(rng.choice(letters[:rng.randint(8, 26)]) for _ in range(rng.randint(2, 10)))
             for _ in range(2000)]
    weights = [1.0 / (r + 1) for r in range(len(vocab))]     # Zipf, as words in text
    out = []
    for _ in range(n_distinct):
        words = rng.choices(vocab, weights, k=size // 3)
        out.append(" ".join(words).encode()[:size])
    return out


def free_port():
    s = socket.socket()
    s.bind(("127.0.0.1", 0))
    p = s.getsockname()[1]
    s.close()
    return p


def wait_port(port, proc, timeout=30):
    end = time.time() + timeout
    while time.time() < end:
        if proc.poll() is not None:
            raise SystemExit("kurad exited: %s" % proc.returncode)
        try:
            socket.create_connection(("127.0.0.1", port), 0.2).close()
            return
        except OSError:
            time.sleep(0.05)
    raise SystemExit("kurad did not listen")


def recv_replies(sock, buf, count, term_of):
    """Reads count replies; term_of(buf) -> length of the first complete
    reply or 0.  Returns the rest of the buffer."""
    got = 0
    while got < count:
        n = term_of(buf)
        if n:
            buf = buf[n:]
            got += 1
            continue
        chunk = sock.recv(1 << 20)
        if not chunk:
            raise SystemExit("connection closed")
        buf += chunk
    return buf


def stored_len(buf):
    i = buf.find(b"\r\n")
    if i < 0:
        return 0
    if buf[:i] != b"STORED":
        raise SystemExit("set: %r" % buf[:200])
    return i + 2


def make_get_len(check):
    def get_len(buf):
        if buf.startswith(b"END\r\n"):
            raise SystemExit("get: a key is missing")
        i = buf.find(b"\r\n")
        if i < 0:
            return 0
        hdr = buf[:i].split()
        n = int(hdr[3])
        end = i + 2 + n + 2 + 5
        if len(buf) < end:
            return 0
        if buf[end - 5:end] != b"END\r\n":
            raise SystemExit("get: bad reply")
        check(hdr[1], buf[i + 2:i + 2 + n])
        return end
    return get_len


def run_load(port, keys, req_of, term_of, conns, depth):
    """Sends req_of(key) for every key over conns connections, depth in
    flight each; returns the seconds it took."""
    parts = [keys[i::conns] for i in range(conns)]
    errors = []

    def worker(part):
        try:
            s = socket.create_connection(("127.0.0.1", port))
            s.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
            buf = b""
            for i in range(0, len(part), depth):
                batch = part[i:i + depth]
                s.sendall(b"".join(req_of(k) for k in batch))
                buf = recv_replies(s, buf, len(batch), term_of)
            s.close()
        except BaseException as e:      # noqa: reported below
            errors.append(e)

    ts = [threading.Thread(target=worker, args=(p,)) for p in parts]
    t0 = time.perf_counter()
    for t in ts:
        t.start()
    for t in ts:
        t.join()
    if errors:
        raise errors[0]
    return time.perf_counter() - t0


def dir_bytes(path):
    total = 0
    for root, _, files in os.walk(path):
        for f in files:
            total += os.path.getsize(os.path.join(root, f))
    return total


def one(args, codec, values):
    tmp = tempfile.mkdtemp(prefix="kura-zcomp-")
    db = os.path.join(tmp, "data." + args.db)
    param = "" if codec == "none" else "#zcomp=" + codec
    port = free_port()
    cmd = ["taskset", "-c", args.server_cpu, args.kurad, "-host", "127.0.0.1", "-port",
           str(port), "-th", "1", "-u", "root", db + param]
    proc = subprocess.Popen(cmd, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE)
    try:
        wait_port(port, proc)
        keys = [b"key%06d" % i for i in range(args.n)]
        nv = len(values)

        def val(k):
            return values[int(k[3:]) % nv]

        def set_req(k):
            v = val(k)
            return b"set %s 0 0 %d\r\n%s\r\n" % (k, len(v), v)

        def check(k, v):
            if v != val(k):
                raise SystemExit("get %r: the value differs" % k)

        ts = run_load(port, keys, set_req, stored_len, args.conns, args.depth)
        random.Random(2).shuffle(keys)
        tg = run_load(port, keys, lambda k: b"get %s\r\n" % k, make_get_len(check),
                      args.conns, args.depth)
    finally:
        proc.terminate()
        proc.wait(60)
    size = dir_bytes(db)
    shutil.rmtree(tmp, ignore_errors=True)
    return size, args.n / ts, args.n / tg


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--db", default="kh", choices=("kh", "kb"))
    ap.add_argument("--n", type=int, default=20000)
    ap.add_argument("--size", type=int, default=20000)
    ap.add_argument("--conns", type=int, default=16)
    ap.add_argument("--depth", type=int, default=16)
    ap.add_argument("--codecs", default="none,lzo,zlib")
    ap.add_argument("--runs", type=int, default=1)
    ap.add_argument("--server-cpu", default="1")
    ap.add_argument("--kurad", default=os.path.join(os.path.dirname(os.path.abspath(__file__)),
                                                    "..", "build", "kurad"))
    args = ap.parse_args()
    values = text_values(256, args.size)
    print("| zcomp | %s | sets/s | gets/s |" % ("hash file" if args.db == "kh" else "tree file"))
    print("|---|---|---|---|")
    for codec in args.codecs.split(","):
        res = [one(args, codec, values) for _ in range(args.runs)]
        res.sort(key=lambda r: r[1])
        size, sets, gets = res[len(res) // 2][0], res[len(res) // 2][1], \
            sorted(r[2] for r in res)[len(res) // 2]
        print("| %s | %.0f MB | %.1fk | %.1fk |" % (codec, size / 1e6, sets / 1e3, gets / 1e3),
              flush=True)


if __name__ == "__main__":
    main()
