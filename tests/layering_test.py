#!/usr/bin/env python3
"""The include structure docs/ARCHITECTURE.md draws, checked on the code.

1. Library code (src/<folder>/, not *_test.cc or *test_util.h) includes only the folders its
   layer may use (ALLOWED below, the same table as docs/ARCHITECTURE.md); tests may also use
   higher layers to build their inputs (a real model for a cache test).
2. No include cycle between modules anywhere in src/, tools/, bench/, fuzz/, include/ (a module
   is X.h with its X.cc: checkpoint.cc including llmc.h while llmc.h includes checkpoint.h is a
   cycle between the two modules even though no header includes itself).
3. Every folder under src/ has a row in ALLOWED and a paragraph in docs/ARCHITECTURE.md.

Exit status 0 when all hold; otherwise every violation is printed and the status is 1.
"""
import argparse
import os
import re
import sys

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))

# folder -> folders its library code may include (besides itself and include/attnlab/).
ALLOWED = {
    "core": set(),
    "engine": {"core"},
    "dist": {"core"},
    "report": {"core"},
    "tokenizer": {"core"},
    "cache": {"core", "engine"},
    "model": {"core", "engine", "cache", "dist"},
    "formats": {"core", "model"},
    "inference": {"core", "engine", "cache", "model"},
    "diagnostics": {"core", "engine", "cache", "model", "dist"},
    "train": {"core", "engine", "cache", "model", "formats", "dist"},
    "experiments": {"core", "engine", "cache", "model", "formats", "tokenizer", "inference", "dist",
                    "diagnostics", "train", "report"},
}

INCLUDE = re.compile(r'^\s*#\s*include\s+"([^"]+)"', re.M)


def is_test(path):
    name = os.path.basename(path)
    return name.endswith("_test.cc") or "test_util" in name or name.startswith("test_")


def source_files():
    for top in ("src", "tools", "bench", "fuzz", "include", "tests"):
        for root, _, files in os.walk(os.path.join(ROOT, top)):
            for f in files:
                if f.endswith((".cc", ".h")):
                    yield os.path.relpath(os.path.join(root, f), ROOT)


def resolve(includer, target):
    """The repository path an include names, or None for a system or generated header."""
    for base in ("src", "include", "tools", os.path.dirname(includer)):
        p = os.path.normpath(os.path.join(base, target))
        if os.path.isfile(os.path.join(ROOT, p)):
            return p
    return None


def module(path):
    return os.path.splitext(path)[0]


def main():
    global ROOT
    parser = argparse.ArgumentParser()
    parser.add_argument("--root", default=ROOT, help="the tree to check (this checkout)")
    args, _ = parser.parse_known_args()  # ctest also passes --attnlab
    ROOT = os.path.abspath(args.root)
    errors = []
    graph = {}
    for path in source_files():
        with open(os.path.join(ROOT, path), encoding="utf-8") as f:
            text = f.read()
        graph.setdefault(module(path), [])
        for target in INCLUDE.findall(text):
            dep = resolve(path, target)
            if dep is None:
                continue
            if module(dep) != module(path):
                graph[module(path)].append(module(dep))
            parts = path.split(os.sep)
            if parts[0] != "src" or is_test(path):
                continue
            folder = parts[1]
            dparts = dep.split(os.sep)
            if dparts[0] != "src" or dparts[1] == folder:
                continue
            if folder not in ALLOWED:
                continue  # reported below
            if dparts[1] not in ALLOWED[folder]:
                errors.append(f"{path} includes {dep}: src/{folder}/ may include only "
                              f"{sorted(ALLOWED[folder]) or 'nothing but include/attnlab'}")

    # File-level cycles (iterative DFS, colours: 0 new, 1 on the stack, 2 done).
    for deps in list(graph.values()):
        for d in deps:
            graph.setdefault(d, [])
    colour = {p: 0 for p in graph}
    for start in sorted(graph):
        if colour[start]:
            continue
        stack = [(start, iter(graph[start]))]
        colour[start] = 1
        while stack:
            node, it = stack[-1]
            nxt = next(it, None)
            if nxt is None:
                colour[node] = 2
                stack.pop()
            elif colour.get(nxt, 2) == 1:
                cycle = [n for n, _ in stack]
                cycle = cycle[cycle.index(nxt):] + [nxt]
                errors.append("include cycle between modules (X.h + X.cc): " +
                              " -> ".join(cycle))
            elif colour.get(nxt, 2) == 0:
                colour[nxt] = 1
                stack.append((nxt, iter(graph[nxt])))

    with open(os.path.join(ROOT, "docs", "ARCHITECTURE.md"), encoding="utf-8") as f:
        arch = f.read()
    for folder in sorted(os.listdir(os.path.join(ROOT, "src"))):
        if not os.path.isdir(os.path.join(ROOT, "src", folder)):
            continue
        if folder not in ALLOWED:
            errors.append(f"src/{folder}/ has no row in tests/layering_test.py's ALLOWED table")
        if f"src/{folder}/" not in arch:
            errors.append(f"src/{folder}/ is not described in docs/ARCHITECTURE.md")

    for e in errors:
        print(e)
    print(f"{len(graph)} modules, {sum(len(v) for v in graph.values())} project includes, "
          f"{len(errors)} violations")
    return 1 if errors else 0


if __name__ == "__main__":
    sys.exit(main())
