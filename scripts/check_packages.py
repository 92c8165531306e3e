#!/usr/bin/python3
"""Checks that a fresh Debian 12 gets everything the configure, the build and the tests use.

Run after the test command has built everything (CI runs it from .ci/run):
    /usr/bin/python3 scripts/check_packages.py [--build-dir build]

What counts as "used" is read from the build tree, not guessed:
  * configure: every CMake file the configure read (build.ninja's RERUN_CMAKE inputs: package
    config files, find modules) and every file path it found (CMakeCache.txt FILEPATH entries:
    libraries, headers, programs);
  * build: every header each object was compiled with (`ninja -t deps`, the compiler's own record),
    every library and tool on the compile and link lines (`ninja -t commands`), and the shared
    libraries the built executables load (ldd);
  * tests: each ctest command's program, the Python modules the test scripts import (resolved
    with /usr/bin/python3 without importing them) and the programs they look up with
    shutil.which(...).
Each file is mapped to the Debian package that owns it (dpkg's file lists). The check then asks
apt what a fresh system would hold: from an empty dpkg status, `apt-get --simulate
--no-install-recommends install` of the base system (every Essential/Priority: required package,
as mmdebstrap's minbase), apt, git and scripts/setup.sh's list. A used package outside that set
is an error: on a fresh machine its files would be missing (this is how ocl-icd-opencl-dev, only
recommended by libdnnl-dev, broke the configure). So is a used file that no package owns outside
the repository (/usr/local, a pyenv interpreter): a fresh machine would not have it either.

Exit status 0 when every used package is reachable, 1 otherwise (each offender is printed with
the file that needed it), 2 when the check itself cannot run (no build tree, no apt lists).
"""
import argparse
import ast
import json
import os
import re
import shlex
import subprocess
import sys
import tempfile
import time

REPO = os.path.realpath(os.path.join(os.path.dirname(os.path.abspath(__file__)), ".."))


def run(cmd, **kw):
    return subprocess.run(cmd, check=True, stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                          text=True, **kw).stdout


def fail_setup(msg):
    print("check_packages: cannot run: " + msg, file=sys.stderr)
    sys.exit(2)


# ---------------------------------------------------------------------------------------------
# What the configure, the build and the tests used: {path: reason}
# ---------------------------------------------------------------------------------------------

def configure_files(build, used):
    ninja = open(os.path.join(build, "build.ninja"), encoding="utf-8").read()
    # build build.ninja: RERUN_CMAKE | <every file CMake read> (newlines escaped with $)
    m = re.search(r"^build build\.ninja.*?: RERUN_CMAKE[^|]*\|(.*?)(?<!\$)\n", ninja, re.S | re.M)
    if not m:
        fail_setup("no RERUN_CMAKE rule in build.ninja (not a Ninja build?)")
    for tok in m.group(1).replace("$\n", " ").split():
        tok = tok.replace("$:", ":").replace("$ ", " ")
        if os.path.isabs(tok):
            used.setdefault(tok, "configure read it")
    cache = open(os.path.join(build, "CMakeCache.txt"), encoding="utf-8").read()
    for name, value in re.findall(r"^([A-Za-z0-9_.-]+):FILEPATH=(.*)$", cache, re.M):
        for v in value.split(";"):
            if os.path.isabs(v) and os.path.isfile(v):
                used.setdefault(v, "configure found it (" + name + ")")


def build_files(build, used):
    deps = run(["ninja", "-C", build, "-t", "deps"])
    obj = None
    for line in deps.splitlines():
        if line and not line.startswith(" "):
            obj = line.split(":")[0]
            continue
        path = line.strip()
        if path and os.path.isabs(path):
            used.setdefault(path, "compiled into " + os.path.basename(obj or "?"))
    commands = run(["ninja", "-C", build, "-t", "commands"])
    libdirs = ["/usr/lib/x86_64-linux-gnu", "/usr/lib", "/lib/x86_64-linux-gnu"]
    seen_tools = set()
    for line in commands.splitlines():
        try:
            argv = shlex.split(line)
        except ValueError:
            continue
        # "cd dir && tool ..." and ": && tool ..." chains: every word after a separator is a tool.
        starts = [0] + [i + 1 for i, a in enumerate(argv) if a in ("&&", ";", "||")]
        for i in starts:
            if i < len(argv) and argv[i] not in ("cd", ":") and argv[i] not in seen_tools:
                seen_tools.add(argv[i])
                tool = argv[i] if os.path.isabs(argv[i]) else which(argv[i])
                if tool:
                    used.setdefault(tool, "build tool")
        for a in argv:
            if a.startswith("-l") and len(a) > 2 and "/" not in a:
                for d in libdirs:
                    for ext in (".so", ".a"):
                        p = os.path.join(d, "lib" + a[2:] + ext)
                        if os.path.exists(p):
                            used.setdefault(p, "linked (" + a + ")")
            elif os.path.isabs(a) and re.search(r"\.(so(\.\d+)*|a)$", a):
                used.setdefault(a, "linked")
    for root, _, names in os.walk(build):
        if "CMakeFiles" in root:
            continue
        for n in names:
            p = os.path.join(root, n)
            if os.access(p, os.X_OK) and is_elf(p):
                for lib in re.findall(r"=> (/\S+)", run_quiet(["ldd", p])):
                    used.setdefault(lib, "loaded by " + os.path.relpath(p, build))


def test_files(build, used):
    raw = run(["ctest", "--test-dir", build, "--show-only=json-v1"])
    scripts, run_modules = set(), set()
    for t in json.loads(raw).get("tests", []):
        cmd = t.get("command") or []
        if not cmd:
            continue
        prog = cmd[0] if os.path.isabs(cmd[0]) else which(cmd[0])
        if prog:
            used.setdefault(prog, "runs test " + t["name"])
        for a in cmd[1:]:
            if a.endswith(".py") and os.path.isfile(a):
                scripts.add(a)
        if "-m" in cmd[1:-1]:  # python3 -m pytest FILE: the runner module is used too
            run_modules.add(cmd[cmd.index("-m") + 1].split(".")[0])
    modules, programs = set(run_modules), set()
    for s in scripts:
        src = open(s, encoding="utf-8").read()
        for node in ast.walk(ast.parse(src)):
            if isinstance(node, ast.Import):
                modules.update(a.name.split(".")[0] for a in node.names)
            elif isinstance(node, ast.ImportFrom) and node.module and node.level == 0:
                modules.add(node.module.split(".")[0])
        programs.update(re.findall(r"shutil\.which\(\s*[\"']([\w.+-]+)[\"']", src))
    probe = ("import importlib.util, json, sys\n"
             "out = {}\n"
             "for m in sys.argv[1:]:\n"
             "    try:\n"
             "        s = importlib.util.find_spec(m)\n"
             "    except Exception:\n"
             "        s = None\n"
             "    out[m] = None if s is None else (s.origin or '')\n"
             "print(json.dumps(out))\n")
    found = json.loads(run(["/usr/bin/python3", "-c", probe] + sorted(modules),
                           cwd=os.path.join(REPO, "tests")))
    # The repository's own modules: tests/*.py, the Python package (python/attnlab, built into
    # the build folder), and modules beside a test script (python/tests' conftest).
    local_dirs = {os.path.join(REPO, "tests"), os.path.join(REPO, "python")}
    local_dirs.update(os.path.dirname(os.path.abspath(s)) for s in scripts)
    missing = []
    for m, origin in sorted(found.items()):
        if origin is None:
            if not any(os.path.exists(os.path.join(d, m + ".py")) or
                       os.path.isfile(os.path.join(d, m, "__init__.py")) for d in local_dirs):
                missing.append(m)
        elif origin not in ("", "built-in", "frozen") and os.path.isabs(origin):
            used.setdefault(origin, "imported by the Python tests (" + m + ")")
    for p in sorted(programs):
        path = which(p)
        if path:
            used.setdefault(path, "run by the Python tests")
        else:
            missing.append(p + " (program)")
    return missing


def which(prog):
    for d in os.environ.get("PATH", "/usr/bin:/bin").split(":") + ["/usr/bin", "/bin"]:
        p = os.path.join(d, prog)
        if os.path.isfile(p) and os.access(p, os.X_OK):
            return p
    return None


def is_elf(path):
    try:
        with open(path, "rb") as f:
            return f.read(4) == b"\x7fELF"
    except OSError:
        return False


def run_quiet(cmd):
    r = subprocess.run(cmd, stdout=subprocess.PIPE, stderr=subprocess.DEVNULL, text=True)
    return r.stdout


# ---------------------------------------------------------------------------------------------
# Files to packages, and what a fresh system holds
# ---------------------------------------------------------------------------------------------

def file_owners():
    """path -> package, from dpkg's file lists (both /usr and merged-/usr spellings)."""
    owners = {}
    info = "/var/lib/dpkg/info"
    for n in os.listdir(info):
        if not n.endswith(".list"):
            continue
        pkg = n[:-5].split(":")[0]
        with open(os.path.join(info, n), encoding="utf-8", errors="replace") as f:
            for line in f:
                owners.setdefault(line.rstrip("\n"), pkg)
    return owners


def owner_of(path, owners):
    cands = [path, os.path.realpath(path)]
    for p in list(cands):
        for a, b in (("/usr/lib/", "/lib/"), ("/lib/", "/usr/lib/"), ("/usr/bin/", "/bin/"),
                     ("/bin/", "/usr/bin/"), ("/usr/sbin/", "/sbin/"), ("/sbin/", "/usr/sbin/"),
                     ("/lib64/", "/usr/lib64/")):
            if p.startswith(a):
                cands.append(b + p[len(a):])
    for c in cands:
        if c in owners and not os.path.isdir(c):
            return owners[c]
    return None


def setup_packages():
    out = run([os.path.join(REPO, "scripts", "setup.sh"), "--print-packages"])
    return out.split()


def fresh_system(pkgs):
    """The packages apt would install on an empty system for base + apt + git + pkgs."""
    required = set()
    for stanza in run(["apt-cache", "dumpavail"]).split("\n\n"):
        if re.search(r"^(Priority: required|Essential: yes)$", stanza, re.M):
            m = re.search(r"^Package: (\S+)$", stanza, re.M)
            if m:
                required.add(m.group(1))
    if not required:
        fail_setup("apt knows no packages (run apt-get update first)")
    with tempfile.TemporaryDirectory() as tmp:
        status, ext = os.path.join(tmp, "status"), os.path.join(tmp, "extended_states")
        open(status, "w").close()
        open(ext, "w").close()
        r = subprocess.run(["apt-get", "--simulate", "-o", "Dir::State::status=" + status,
                            "-o", "Dir::State::extended_states=" + ext,
                            "-o", "Debug::NoLocking=1", "--no-install-recommends", "install"]
                           + sorted(required) + ["apt", "git"] + pkgs,
                           stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    if r.returncode != 0:
        fail_setup("apt-get --simulate failed:\n" + r.stdout[-2000:] + r.stderr[-2000:])
    return set(re.findall(r"^Inst (\S+)", r.stdout, re.M))


IGNORED_PREFIXES = ("/proc/", "/sys/", "/dev/", "/tmp/", "/etc/ld.so.cache")


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--build-dir", default=os.path.join(REPO, "build"))
    ap.add_argument("--verbose", action="store_true", help="list every used package")
    args = ap.parse_args()
    build = os.path.realpath(args.build_dir)
    if not os.path.isfile(os.path.join(build, "build.ninja")):
        fail_setup(build + " has no build.ninja: run scripts/test.sh (or build.sh) first")
    t0 = time.time()
    used = {}
    configure_files(build, used)
    build_files(build, used)
    missing_modules = test_files(build, used)
    owners = file_owners()
    by_pkg, unowned = {}, {}
    for path, why in sorted(used.items()):
        real = os.path.realpath(path)
        if (real.startswith(REPO + os.sep) or real.startswith(build + os.sep)
                or path.startswith(REPO + os.sep) or path.startswith(IGNORED_PREFIXES)
                or "__pycache__" in path):
            continue
        pkg = owner_of(path, owners)
        if pkg is None:
            unowned[path] = why
        else:
            by_pkg.setdefault(pkg, (path, why))
    listed = setup_packages()
    fresh = fresh_system(listed)
    problems = []
    for pkg, (path, why) in sorted(by_pkg.items()):
        if pkg not in fresh:
            problems.append("package %s is used but a fresh system would not have it: "
                            "not in scripts/setup.sh, not a hard dependency of one there "
                            "(e.g. %s: %s)" % (pkg, path, why))
    for path, why in sorted(unowned.items()):
        problems.append("%s is used (%s) but no Debian package owns it: a fresh system would "
                        "not have it" % (path, why))
    for m in missing_modules:
        problems.append("the Python tests use %s, which /usr/bin/python3 cannot find" % m)
    if args.verbose:
        for pkg, (path, why) in sorted(by_pkg.items()):
            print("  %-28s %s (%s)" % (pkg, path, why))
    print("check_packages: %d files used by configure/build/tests -> %d Debian packages; "
          "a fresh Debian with setup.sh's %d packages has %d; %.1f s"
          % (len(used), len(by_pkg), len(listed), len(fresh), time.time() - t0))
    if problems:
        for p in problems:
            print("check_packages: FAIL: " + p)
        print("check_packages: %d problem(s). Add the package to DEB_PACKAGES in "
              "scripts/setup.sh, or stop using it." % len(problems))
        return 1
    print("check_packages: OK: every package used is installed by scripts/setup.sh or pulled in "
          "by one (without recommends)")
    return 0


if __name__ == "__main__":
    sys.exit(main())
