#!/usr/bin/python3
# kura-test: once
"""test_package.py - building and installing kura: configure, make install,
make uninstall, and the Debian package.

Covers: `make install DESTDIR=...` puts exactly the expected files in place
(kurad in sbin, kuractl in bin, man pages, docs, conf examples, the unit
and daemontools files with their paths rewritten for the directories
given; no benchmark tool) and `make uninstall` removes every one of them,
keeping a kurad.conf changed since; the GNU directory variables, the older
PREFIX, SERVICE_NAME/SERVICE_USER (the package's kura.service run as
kura), install-bench; one name for the service, kura, in the unit, the docs,
the man pages, daemontools, logrotate and the package (no "systemctl ...
kurad", "kurad.service", "/etc/service/kurad" or "logrotate.d/kurad" left;
the negative: the man page's old line is caught); ./configure (run on a
copy: autoconf's output never lands in the source tree) writes the libraries, directories, feature
switches and flags into config.mk, -Werror only with --enable-werror, and
finds the required libraries without pkg-config too; the Makefile passes
CFLAGS, CPPFLAGS and LDFLAGS on, with -Werror when there is no config.mk.

With KURA_DEB_DIR (set by `make test-deb`, which builds the package first;
plain `make test` skips these as not applicable, since a package build is
a minute more): the .deb's file list and conffiles, its control data
(version = what its kurad -V prints), its maintainer scripts (the user
kura, the unit enabled, /var/lib/kura purged only on purge), the unit,
hardening-check on kurad and kuractl, lintian without errors, the
packaged kurad with the packaged configuration serving on a free port, and
no test switch in the package's or build/'s kurad and kuractl (release
builds; under plain `make test` the negative: the test tree's hold them).

Environment: KURA_BUILD (the build dir; tests/run sets it), KURA_DEB_DIR.
Standard library only; TAP lines on stdout; exit status 1 if a test failed.
"""
import os, re, shutil, socket, subprocess, sys, time

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "lib"))
from kuratest import Skip, free_port, missing, not_applicable, run_functions  # noqa: E402

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
BUILD = os.environ.get("KURA_BUILD") or os.path.join(ROOT, "build-test")
BUILD = BUILD if os.path.isabs(BUILD) else os.path.join(ROOT, BUILD)
DEB_DIR = os.environ.get("KURA_DEB_DIR", "")
SCALE = float(os.environ.get("KURA_TEST_DEADLINE_SCALE", "1"))
IS_ROOT = os.geteuid() == 0

# What `make install` puts under the prefix (prefix=/usr, sysconfdir=/etc).
DOCS = ["README.md"] + sorted(f for f in os.listdir(os.path.join(ROOT, "docs"))
                              if f.endswith(".md") and f != "HACKING.md")
INSTALLED = {
    "usr/sbin/kurad", "usr/bin/kuractl",
    "usr/share/man/man1/kurad.1", "usr/share/man/man1/kuractl.1",
    "usr/lib/systemd/system/kura.service",
    "etc/kura/kurad.conf", "etc/logrotate.d/kura",
    "usr/share/kura/daemontools/run", "usr/share/kura/daemontools/log/run",
    "usr/share/kura/daemontools/env/KURAD", "usr/share/kura/daemontools/env/KURA_CONF",
    "usr/share/kura/daemontools/env/KURA_USER",
    "usr/share/doc/kura/kurad.conf.example",
} | {"usr/share/doc/kura/" + d for d in DOCS}


def read(path):
    with open(path, "rb") as f:
        return f.read().decode("utf-8", "replace")


def write(path, text):
    with open(path, "w") as f:
        f.write(text)


def run(args, cwd, timeout=60, env=None):
    """(status, stdout + stderr) of a command run to completion."""
    p = subprocess.run(args, cwd=cwd, stdin=subprocess.DEVNULL, stdout=subprocess.PIPE,
                       stderr=subprocess.STDOUT, timeout=timeout * SCALE, env=env)
    return p.returncode, p.stdout.decode("utf-8", "replace")


def make_env(**extra):
    """The environment for a make of our own: no MAKEFLAGS of the make that
    runs the suite (its BUILD=, SAN= and -j would leak in), no flags."""
    env = {k: v for k, v in os.environ.items()
           if k not in ("MAKEFLAGS", "MFLAGS", "MAKELEVEL", "CFLAGS", "CPPFLAGS", "LDFLAGS")}
    env.update(extra)
    return env


def need_make():
    if not shutil.which("make"):
        raise Skip(missing("make (apt-get install build-essential)"))


def make(args, cwd=ROOT, env=None, timeout=300):
    return run(["make", "-s", "-C", cwd, "BUILD=" + BUILD] + args, cwd,
               timeout=timeout, env=env or make_env())


def files_under(d):
    """Every file and symlink under d, relative to it."""
    out = set()
    for base, dirs, files in os.walk(d):
        for f in files:
            out.add(os.path.relpath(os.path.join(base, f), d))
        for x in dirs:
            if os.path.islink(os.path.join(base, x)):
                out.add(os.path.relpath(os.path.join(base, x), d))
    return out


def test_make_install_uninstall(tmp):
    need_make()
    dest = os.path.join(tmp, "dest")
    dirs = ["DESTDIR=" + dest, "prefix=/usr", "sysconfdir=/etc", "localstatedir=/var",
            "systemdunitdir=/usr/lib/systemd/system", "docdir=/usr/share/doc/kura",
            "mandir=/usr/share/man"]
    rc, out = make(["install"] + dirs)
    assert rc == 0, out
    got = files_under(dest)
    assert got == INSTALLED, "make install: missing %s, unexpected %s" % (
        sorted(INSTALLED - got), sorted(got - INSTALLED))
    for x in ("usr/sbin/kurad", "usr/bin/kuractl", "usr/share/kura/daemontools/run",
              "usr/share/kura/daemontools/log/run"):
        assert os.access(os.path.join(dest, x), os.X_OK), x + " is not executable"
    unit = read(os.path.join(dest, "usr/lib/systemd/system/kura.service"))
    assert "\nExecStart=/usr/sbin/kurad -conf /etc/kura/kurad.conf\n" in unit, unit
    assert "\nDynamicUser=yes\n" in unit and "\nUser=" not in unit
    assert read(os.path.join(dest, "usr/share/kura/daemontools/env/KURAD")) == "/usr/sbin/kurad\n"
    assert read(os.path.join(dest, "usr/share/kura/daemontools/env/KURA_CONF")) == \
        "/etc/kura/kurad.conf\n"
    conf = read(os.path.join(dest, "etc/kura/kurad.conf"))
    assert "\ndatabase /var/lib/kura/data.kh\n" in conf, conf
    assert read(os.path.join(dest, "usr/share/man/man1/kurad.1")) == \
        read(os.path.join(ROOT, "docs/kurad.1"))
    # A second install keeps the configuration an operator changed.
    write(os.path.join(dest, "etc/kura/kurad.conf"), conf + "th 2\n")
    rc, out = make(["install"] + dirs)
    assert rc == 0, out
    assert read(os.path.join(dest, "etc/kura/kurad.conf")).endswith("th 2\n")
    # uninstall: the changed configuration stays, said so; then without it,
    # nothing is left but the shared directories.
    rc, out = make(["uninstall"] + dirs)
    assert rc == 0, out
    assert files_under(dest) == {"etc/kura/kurad.conf"}, files_under(dest)
    assert "was changed since install: kept" in out, out
    os.unlink(os.path.join(dest, "etc/kura/kurad.conf"))
    rc, out = make(["install"] + dirs)
    assert rc == 0, out
    rc, out = make(["uninstall"] + dirs)
    assert rc == 0, out
    assert files_under(dest) == set(), files_under(dest)
    for d in ("usr/share/kura", "usr/share/doc/kura", "etc/kura"):
        assert not os.path.exists(os.path.join(dest, d)), d + " left behind"
    # uninstall of nothing installed is not an error
    rc, out = make(["uninstall"] + dirs)
    assert rc == 0, out


def test_install_directories(tmp):
    """Other directories, the package's unit name and user, install-bench."""
    need_make()
    dest = os.path.join(tmp, "dest")
    dirs = ["DESTDIR=" + dest, "prefix=/opt/kura", "exec_prefix=/opt/kura",
            "bindir=/opt/kura/bin", "sbindir=/opt/kura/sbin", "datarootdir=/opt/kura/share",
            "datadir=/opt/kura/share", "mandir=/opt/kura/man", "docdir=/opt/kura/doc",
            "sysconfdir=/opt/kura/etc", "localstatedir=/srv",
            "systemdunitdir=/opt/kura/units", "SERVICE_NAME=kura", "SERVICE_USER=kura"]
    rc, out = make(["install", "install-bench"] + dirs)
    assert rc == 0, out
    got = files_under(dest)
    for f in ("opt/kura/sbin/kurad", "opt/kura/bin/kuractl", "opt/kura/bin/kura-bench",
              "opt/kura/bin/kura-enginebench", "opt/kura/man/man1/kurad.1",
              "opt/kura/doc/operations.md", "opt/kura/units/kura.service",
              "opt/kura/etc/kura/kurad.conf", "opt/kura/etc/logrotate.d/kura",
              "opt/kura/share/kura/daemontools/env/KURAD"):
        assert f in got, "%s not installed: %s" % (f, sorted(got))
    unit = read(os.path.join(dest, "opt/kura/units/kura.service"))
    assert "\nExecStart=/opt/kura/sbin/kurad -conf /opt/kura/etc/kura/kurad.conf\n" in unit
    assert "\nUser=kura\nGroup=kura\n" in unit and "DynamicUser=yes" not in unit, unit
    assert "\ndatabase /srv/lib/kura/data.kh\n" in read(
        os.path.join(dest, "opt/kura/etc/kura/kurad.conf"))
    assert "/srv/log/kura/kurad.log {" in read(os.path.join(dest, "opt/kura/etc/logrotate.d/kura"))
    rc, out = make(["uninstall"] + dirs)
    assert rc == 0, out
    assert files_under(dest) == set(), files_under(dest)
    # The older names, where no config.mk sets the lowercase ones.
    if not os.path.exists(os.path.join(ROOT, "config.mk")):
        old = ["DESTDIR=" + dest, "PREFIX=/usr/local", "SYSCONFDIR=/etc/x"]
        rc, out = make(["install"] + old)
        assert rc == 0, out
        got = files_under(dest)
        assert {"usr/local/sbin/kurad", "usr/local/lib/systemd/system/kura.service",
                "etc/x/kura/kurad.conf"} <= got, sorted(got)
        rc, out = make(["uninstall"] + old)
        assert rc == 0 and files_under(dest) == set(), (out, files_under(dest))


def make_n(cwd, env, target="programs"):
    """The commands make would run to build kurad (from scratch), with the
    Makefile's own optimization and no sanitizer: a sanitized suite's OPT
    and SAN (exported by its make) are left out."""
    env = {k: v for k, v in env.items() if k not in ("OPT", "SAN")}
    rc, out = run(["make", "-n", "-C", cwd, "-f", os.path.join(ROOT, "Makefile"),
                   "BUILD=" + os.path.join(cwd, "b"), target], cwd, env=env)
    assert rc == 0, out
    cc = [l for l in out.splitlines() if " -c -o " in l and "src/server/main.c" in l]
    link = [l for l in out.splitlines() if re.search(r" -o \S*/kurad ", l)]
    assert cc and link, out
    return cc[0], link[0]


def tree_view(tmp):
    """A directory holding symlinks to the sources, where a config.mk can be
    put without touching the source tree."""
    view = os.path.join(tmp, "view")
    os.makedirs(view)
    for x in ("src", "include", "tests", "bench", "conf", "docs", "README.md"):
        os.symlink(os.path.join(ROOT, x), os.path.join(view, x))
    return view


def test_flags_without_configure(tmp):
    need_make()
    view = tree_view(tmp)
    cc, link = make_n(view, make_env(CFLAGS="-DKURA_T_CFLAGS", CPPFLAGS="-DKURA_T_CPPFLAGS",
                                     LDFLAGS="-Wl,-z,now"))
    for f in ("-Werror", "-DKURA_T_CFLAGS", "-DKURA_T_CPPFLAGS"):
        assert f in cc.split(), "%s not in %s" % (f, cc)
    assert "-Wl,-z,now" in link.split() and "-levent" in link.split(), link
    # the distribution's flags come after the project's, so they win
    assert cc.index("-DKURA_T_CFLAGS") > cc.index("-O2"), cc


def test_configure(tmp):
    need_make()
    for tool, pkg in (("autoreconf", "autoconf"), ("aclocal", "automake"),
                      ("pkg-config", "pkg-config")):
        if not shutil.which(tool):
            raise Skip(missing("%s (apt-get install %s)" % (tool, pkg)))
    src = os.path.join(tmp, "src")
    os.makedirs(os.path.join(src, "src", "server"))
    for f in ("configure.ac", "config.mk.in"):
        shutil.copy(os.path.join(ROOT, f), src)
    shutil.copy(os.path.join(ROOT, "src/server/main.c"), os.path.join(src, "src/server"))
    rc, out = run(["autoreconf", "-fi"], src, timeout=120)
    assert rc == 0, out
    env = make_env(CFLAGS="-O2 -DKURA_T_CFLAGS", CPPFLAGS="-DKURA_T_CPPFLAGS",
                   LDFLAGS="-Wl,-z,relro")
    rc, out = run(["./configure", "--prefix=/usr", "--sysconfdir=/etc", "--without-openssl",
                   "--with-sasl=no"], src, timeout=120, env=env)
    assert rc == 0, out
    for lib in ("libevent", "zlib", "bzip2", "lzo2"):
        assert re.search(r"^configure: %s: (pkg-config %s|-l\w+)$" % (lib, lib), out, re.M), out
    assert re.search(r"^  openssl +no \(--without-openssl\)$", out, re.M), out
    assert re.search(r"^  sasl +no \(--without-sasl\)$", out, re.M), out
    assert re.search(r"^  tokyocabinet +(yes \(.*\)|no)$", out, re.M), out
    assert re.search(r"^  kyotocabinet +(yes \(.*\)|no)$", out, re.M), out
    mk = read(os.path.join(src, "config.mk"))
    vals = dict(re.findall(r"^(\w+) *= *(.*?) *$", mk, re.M))
    assert vals["prefix"] == "/usr" and vals["sysconfdir"] == "/etc", mk
    assert vals["localstatedir"] == "/var" and vals["sbindir"] == "${exec_prefix}/sbin", mk
    assert vals["WERROR"] == "" and vals["HAVE_OPENSSL"] == "" and vals["HAVE_SASL"] == "", mk
    assert vals["HAVE_TOKYOCABINET"] in ("", "1") and vals["HAVE_KYOTOCABINET"] in ("", "1")
    assert "-DKURA_T_CFLAGS" in vals["CFLAGS"] and vals["CPPFLAGS"] == "-DKURA_T_CPPFLAGS"
    assert vals["LDFLAGS"] == "-Wl,-z,relro" and "-levent" in vals["LIBEVENT_LIBS"], mk
    # The Makefile takes it: no -Werror, the flags, the libraries found.
    view = tree_view(tmp)
    shutil.copy(os.path.join(src, "config.mk"), view)
    cc, link = make_n(view, make_env())
    assert "-Werror" not in cc.split() and "-DKURA_T_CPPFLAGS" in cc.split(), cc
    assert "-Wl,-z,relro" in link.split() and "-llzo2" in link.split(), link
    rc, out = run(["make", "-n", "-C", view, "-f", os.path.join(ROOT, "Makefile"), "install",
                   "BUILD=" + os.path.join(view, "b")], view, env=make_env())
    assert rc == 0 and "/usr/sbin/kurad" in out and "/usr/share/doc/kura/" in out, out
    # --enable-werror, and no pkg-config at all: AC_CHECK_LIB finds the libraries.
    env["PKG_CONFIG"] = "/nonexistent"
    rc, out = run(["./configure", "--enable-werror"], src, timeout=120, env=env)
    assert rc == 0, out
    for name, lib in (("libevent", "event"), ("zlib", "z"), ("bzip2", "bz2"), ("lzo2", "lzo2")):
        assert "\nconfigure: %s: -l%s\n" % (name, lib) in out, out
    vals = dict(re.findall(r"^(\w+) *= *(.*?) *$", read(os.path.join(src, "config.mk")), re.M))
    assert vals["WERROR"] == "-Werror" and vals["LZO2_LIBS"] == "-llzo2", vals
    assert vals["prefix"] == "/usr/local" and vals["localstatedir"] == "/var", vals
    # --with-X=yes for a library that is not there stops configure (not
    # there: pkg-config is gone and the link test's answer is cached as no).
    rc, out = run(["./configure", "--with-kyotocabinet=yes"], src, timeout=120,
                  env=dict(env, ac_cv_lib_kyotocabinet_kcdbnew="no"))
    assert rc != 0 and "--with-kyotocabinet: kyotocabinet not found" in out, out


def deb_files():
    if not DEB_DIR:
        raise Skip(not_applicable("the package is checked by `make test-deb` (no KURA_DEB_DIR)"))
    debs = sorted(f for f in os.listdir(DEB_DIR) if re.match(r"kura_.*\.deb$", f))
    assert len(debs) == 1, "want one kura_*.deb in %s: %s" % (DEB_DIR, os.listdir(DEB_DIR))
    return os.path.join(DEB_DIR, debs[0])


def test_deb_contents(tmp):
    deb = deb_files()
    rc, out = run(["dpkg-deb", "-c", deb], tmp)
    assert rc == 0, out
    listing = {}
    for line in out.splitlines():
        f = line.split()
        listing[f[5].lstrip(".")] = f[0]
    want = {
        "/usr/sbin/kurad": "-rwxr-xr-x", "/usr/bin/kuractl": "-rwxr-xr-x",
        "/lib/systemd/system/kura.service": "-rw-r--r--",
        "/etc/kura/kurad.conf": "-rw-r--r--", "/etc/logrotate.d/kura": "-rw-r--r--",
        "/usr/share/man/man1/kurad.1.gz": "-rw-r--r--",
        "/usr/share/man/man1/kuractl.1.gz": "-rw-r--r--",
        "/usr/share/doc/kura/copyright": "-rw-r--r--",
        "/usr/share/doc/kura/changelog.Debian.gz": "-rw-r--r--",
        "/usr/share/doc/kura/kurad.conf.example": "-rw-r--r--",
        "/usr/share/kura/daemontools/run": "-rwxr-xr-x",
        "/usr/share/kura/daemontools/log/run": "-rwxr-xr-x",
        "/usr/share/kura/daemontools/env/KURAD": "-rw-r--r--",
    }
    for f, mode in want.items():
        assert listing.get(f) == mode, "%s: %s in the package, want %s" % (
            f, listing.get(f, "missing"), mode)
    docs = {f for f in listing if f.startswith("/usr/share/doc/kura/")}
    for d in DOCS:
        assert ("/usr/share/doc/kura/" + d) in docs or \
               ("/usr/share/doc/kura/%s.gz" % d) in docs, d + " not in the package"
    for f in listing:
        assert not re.search(r"kura-bench|enginebench|/var/lib/kura|\.a$|/tests?/", f), \
            f + " should not be in the package"
    assert not any(f.startswith("/usr/lib/systemd") for f in listing), \
        "the unit belongs in /lib/systemd/system on Debian 12"
    # the debug symbols, as dh builds them
    assert any(f.startswith("kura-dbgsym_") for f in os.listdir(DEB_DIR))

    ctl = os.path.join(tmp, "control")
    rc, out = run(["dpkg-deb", "-e", deb, ctl], tmp)
    assert rc == 0, out
    assert read(os.path.join(ctl, "conffiles")).split() == \
        ["/etc/kura/kurad.conf", "/etc/logrotate.d/kura"]
    control = read(os.path.join(ctl, "control"))
    assert re.search(r"^Depends: .*\badduser\b.*libevent", control, re.M), control
    version = re.search(r"^Version: (\S+)", control, re.M).group(1)
    postinst = read(os.path.join(ctl, "postinst"))
    assert "adduser --system --group" in postinst and " kura\n" in postinst, postinst
    assert postinst.index("adduser") < postinst.index("deb-systemd-helper enable 'kura.service'")
    assert "install -d -o kura -g kura -m 0750 /var/lib/kura" in postinst
    postrm = read(os.path.join(ctl, "postrm"))
    assert re.search(r'if \[ "\$1" = purge \]; then\n\s+rm -rf /var/lib/kura', postrm), postrm
    assert "#DEBHELPER#" not in postinst + postrm

    # Unpacked into a clean directory: the unit, the version, and the
    # packaged kurad serving with the packaged configuration.
    x = os.path.join(tmp, "x")
    rc, out = run(["dpkg-deb", "-x", deb, x], tmp)
    assert rc == 0, out
    unit = read(os.path.join(x, "lib/systemd/system/kura.service"))
    for line in ("Type=notify", "ExecStart=/usr/sbin/kurad -conf /etc/kura/kurad.conf",
                 "User=kura", "Group=kura", "StateDirectory=kura"):
        assert "\n%s\n" % line in unit, line + " not in the packaged unit"
    assert "DynamicUser=yes" not in unit
    kurad = os.path.join(x, "usr/sbin/kurad")
    rc, out = run([kurad, "-V"], tmp)
    assert rc == 0 and out.startswith("kurad %s " % version.rsplit("-", 1)[0]), (version, out)
    conf = os.path.join(x, "etc/kura/kurad.conf")
    assert "\ndatabase /var/lib/kura/data.kh\n" in read(conf)
    port = free_port()
    err = open(os.path.join(tmp, "kurad.log"), "wb")
    p = subprocess.Popen([kurad, "-conf", conf, "-port", str(port)] +
                         (["-u", "root"] if IS_ROOT else []) +
                         [os.path.join(tmp, "data.kh")], cwd=tmp, stdin=subprocess.DEVNULL,
                         stdout=err, stderr=err)
    err.close()
    try:
        end = time.monotonic() + 20 * SCALE
        while True:
            try:
                s = socket.create_connection(("127.0.0.1", port), timeout=5 * SCALE)
                break
            except OSError:
                assert p.poll() is None and time.monotonic() < end, \
                    read(os.path.join(tmp, "kurad.log"))
                time.sleep(0.05)
        s.sendall(b"set k 0 0 5\r\nhello\r\nget k\r\n")
        want = b"STORED\r\nVALUE k 0 5\r\nhello\r\nEND\r\n"
        got = b""
        while len(got) < len(want):
            chunk = s.recv(4096)
            assert chunk, got
            got += chunk
        assert got == want, got
        s.close()
    finally:
        p.terminate()
        assert p.wait(30 * SCALE) == 0, read(os.path.join(tmp, "kurad.log"))


def test_deb_hardening(tmp):
    deb = deb_files()
    if not shutil.which("hardening-check"):
        raise Skip(missing("hardening-check (apt-get install devscripts)"))
    x = os.path.join(tmp, "x")
    rc, out = run(["dpkg-deb", "-x", deb, x], tmp)
    assert rc == 0, out
    # --nocfprotection: no Debian 12 program has the IBT/SHSTK property
    # (debian/README.source)
    rc, out = run(["hardening-check", "--nocfprotection", os.path.join(x, "usr/sbin/kurad"),
                   os.path.join(x, "usr/bin/kuractl")], tmp)
    assert rc == 0, out
    for check in ("Position Independent Executable", "Stack protected",
                  "Fortify Source functions", "Read-only relocations", "Immediate binding"):
        assert len(re.findall(r"^ %s: yes" % check, out, re.M)) == 2, out


def test_deb_lintian(tmp):
    deb_files()
    if not shutil.which("lintian"):
        raise Skip(missing("lintian (apt-get install lintian)"))
    changes = [f for f in os.listdir(DEB_DIR) if f.endswith(".changes")]
    assert len(changes) == 1, os.listdir(DEB_DIR)
    rc, out = run(["lintian", "--pedantic", os.path.join(DEB_DIR, changes[0])], tmp,
                  timeout=300)
    errors = [l for l in out.splitlines() if l.startswith("E:")]
    assert not errors, out
    # every warning is justified in debian/README.source
    source = read(os.path.join(ROOT, "debian", "README.source"))
    for tag in re.findall(r"^[WIP]: \S+: (\S+)", out, re.M):
        assert tag in source, "lintian's %s is not explained in debian/README.source:\n%s" % (
            tag, out)


TEST_SWITCHES = (b"KURA_TEST_", b"KURACTL_TEST_")


def switches_in(path):
    with open(path, "rb") as f:
        data = f.read()
    return [s.decode() for s in TEST_SWITCHES if s in data]


def test_release_without_test_switches(tmp):
    """A release build (build/ under make test-deb, and the package) holds no
    test switch (include/kura/testhooks.h): no KURA_TEST_ or KURACTL_TEST_
    variable name in kurad or kuractl.  Under make test, whose programs are
    the test tree's, the negative: the same search finds them there."""
    progs = [os.path.join(BUILD, "kurad"), os.path.join(BUILD, "kuractl")]
    if not DEB_DIR:
        for p in progs:
            assert switches_in(p), "%s: a test tree's program without its test switches" % p
        return
    x = os.path.join(tmp, "x")
    rc, out = run(["dpkg-deb", "-x", deb_files(), x], tmp)
    assert rc == 0, out
    progs += [os.path.join(x, "usr/sbin/kurad"), os.path.join(x, "usr/bin/kuractl")]
    for p in progs:
        assert switches_in(p) == [], "%s holds test switches: %s" % (p, switches_in(p))


# Ways of naming the service kurad rather than kura (the daemon is kurad;
# the service, its unit, daemontools directory and logrotate file are kura).
OLD_SERVICE_NAME = re.compile(r"systemctl(?:[ \t]+[\w\\-]+){0,2}?[ \t]+kurad\b|"
                              r"journalctl[ \t]+\\?-u[ \t]+kurad\b|kurad\.service|"
                              r"/etc/service/kurad\b|service-kurad\b|logrotate\.d/kurad\b|"
                              r"systemd-analyze security[ \t]+kurad\b")


def test_one_service_name(tmp):
    old = "systemctl enable \\-\\-now kurad\nsystemctl reload kurad      # SIGHUP\n"
    assert len(OLD_SERVICE_NAME.findall(old)) == 2, "the check misses the old man page's lines"
    found = []
    for top in ("README.md", "Makefile", "docs", "conf", "debian"):
        path = os.path.join(ROOT, top)
        files = [path] if os.path.isfile(path) else \
            [os.path.join(d, f) for d, _, fs in os.walk(path) for f in fs]
        for f in files:
            if f.endswith(".json") or "benchmarks" in f:
                continue
            text = read(f)
            found += ["%s: %s" % (os.path.relpath(f, ROOT), m)
                      for m in OLD_SERVICE_NAME.findall(text)]
    assert not found, "the service named kurad: %s" % found
    unit = read(os.path.join(ROOT, "conf", "kura.service"))
    assert "systemctl enable --now kura\n" in unit, unit


TESTS = [test_make_install_uninstall, test_one_service_name, test_install_directories,
         test_flags_without_configure, test_configure, test_deb_contents, test_deb_hardening,
         test_deb_lintian, test_release_without_test_switches]


def main():
    return run_functions(TESTS, "kura-package-")


if __name__ == "__main__":
    sys.exit(main())
