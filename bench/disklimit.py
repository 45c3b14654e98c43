"""disklimit.py - a disk of known bandwidth for benchmarks, made with the
kernel's block I/O throttle.

On a shared VM, `dd oflag=direct` measures whatever cache the host puts in
front of the virtual disk: it swings between 150 and 700 MB/s within
minutes, and no server can be judged against it.  A write limit on the
device, set with the block cgroup (v1 blkio.throttle.write_bps_device, or
v2 io.max), gives a disk whose sequential write bandwidth is the limit:
dd, kurad and memcached run in the limited cgroup and are all held to it,
so "kurad's rate over dd's" measures whether kurad keeps such a disk busy.

    with limited(path, mbps) as lim:     # this process (and its children)
        ...                              # write at most mbps MB/s to path's disk
        lim.written()                    # bytes the throttle let through so far

Needs root and a block cgroup controller; raises OSError otherwise.  Only
writes are limited; reads, and writes by other processes, are not.  The
kernel's flusher threads are not in the cgroup under cgroup v1: pages a
process dirtied and left for them bypass the limit, so written() is
reported beside the server's own write_bytes to show what share passed it.
"""
import contextlib, os

V1 = "/sys/fs/cgroup/blkio"
V2_ROOTS = ("/sys/fs/cgroup/unified", "/sys/fs/cgroup")
NAME = "kura-bench-disklimit"


def whole_disk(path):
    """MAJ:MIN of the block device holding path (a partition's disk)."""
    st = os.stat(path)
    dev = "%d:%d" % (os.major(st.st_dev), os.minor(st.st_dev))
    sys_dev = "/sys/dev/block/" + dev
    if not os.path.exists(sys_dev):
        raise OSError("disklimit: %s is on %s, not a block device" % (path, dev))
    if os.path.exists(os.path.join(sys_dev, "partition")):
        with open(os.path.join(os.path.realpath(sys_dev), "..", "dev")) as f:
            dev = f.read().strip()
    return dev


def _write(path, text):
    with open(path, "w") as f:
        f.write(text)


def _v2_root():
    for r in V2_ROOTS:
        try:
            with open(os.path.join(r, "cgroup.controllers")) as f:
                if "io" in f.read().split():
                    return r
        except OSError:
            pass
    return None


class Limit:
    def __init__(self, cg, kind, dev):
        self.cg, self.kind, self.dev = cg, kind, dev

    def written(self):
        """Bytes written to the device through the limit since it was set."""
        if self.kind == "v1":
            with open(os.path.join(self.cg, "blkio.throttle.io_service_bytes")) as f:
                for line in f:
                    p = line.split()
                    if len(p) == 3 and p[0] == self.dev and p[1] == "Write":
                        return int(p[2])
            return 0
        with open(os.path.join(self.cg, "io.stat")) as f:
            for line in f:
                p = line.split()
                if p and p[0] == self.dev:
                    return int(dict(kv.split("=") for kv in p[1:]).get("wbytes", 0))
        return 0


@contextlib.contextmanager
def limited(path, mbps):
    """Moves this process into a cgroup whose writes to path's disk are held
    to mbps MB/s (10^6 bytes), for the duration; its children inherit it."""
    if os.geteuid() != 0:
        raise OSError("disklimit: a write limit on the disk needs root")
    dev = whole_disk(path)
    bps = int(mbps * 1e6)
    with open("/proc/self/cgroup") as f:
        mine = f.read()
    if os.path.isdir(V1) and os.path.exists(os.path.join(V1, "blkio.throttle.write_bps_device")):
        kind, root = "v1", V1
        old = next((ln.split(":", 2)[2] for ln in mine.splitlines()
                    if ln.split(":")[1] == "blkio"), "/")
        cg = os.path.join(root, NAME)
        os.makedirs(cg, exist_ok=True)
        _write(os.path.join(cg, "blkio.throttle.write_bps_device"), "%s %d" % (dev, bps))
    else:
        root = _v2_root()
        if not root:
            raise OSError("disklimit: no block I/O cgroup controller (blkio or io) here")
        kind = "v2"
        old = next((ln.split(":", 2)[2] for ln in mine.splitlines() if ln.startswith("0::")), "/")
        cg = os.path.join(root, NAME)
        os.makedirs(cg, exist_ok=True)
        _write(os.path.join(cg, "io.max"), "%s wbps=%d" % (dev, bps))
    back = os.path.join(root, old.strip().lstrip("/"))
    _write(os.path.join(cg, "cgroup.procs"), str(os.getpid()))
    try:
        yield Limit(cg, kind, dev)
    finally:
        _write(os.path.join(back, "cgroup.procs"), str(os.getpid()))
        try:
            os.rmdir(cg)            # (fails while a leftover child is in it: harmless)
        except OSError:
            pass
