#!/usr/bin/env python3
"""The layering rule of docs/design.md ("Layers"), checked on the source.

Every #include "..." in src/, models/ and tools/ is resolved to a file and
both ends are mapped to their floor by folder. The test fails on an include
from a lower floor to a higher one, and on any cycle between two folders
other than the one the design allows (engine <-> autograd), printing the
offending file:line. A folder that has no floor fails too: a new folder
must be placed in the design's floor table, which this test reads (the
one list of floors). Two rules of issue 44 besides: no folder outside
src/backends/ includes a backend's header, and no file of src/ outside
src/backends/ and src/backend/ names a buffer's memory (->data).

Given the build folder, it also reads the library's object files (nm) and
fails on a call or data reference from a lower floor to a function defined
on a higher one: a call through a declaration in a lower header (or the
public header) reaches up as surely as an include does.

usage: test_layers.py [REPO_ROOT [BUILD_DIR]]
"""
import os
import re
import shutil
import subprocess
import sys

# The floors are listed once, in docs/design.md's "Layers" table (floor,
# folders, why): read from there, so the design, this test and the README
# (which points at that table) cannot disagree. A folder's floor is that of
# the nearest listed parent (src/backends/ holds every backend).
DESIGN = os.path.join("docs", "design.md")
# The public headers hold types and declarations only, no code: every
# floor includes them for lz_tensor, lz_dtype and its own public functions.
NOT_FLOORS = {"include": -1}
# A tensor's gradient is made by autograd, and autograd records ops on tensors.
ALLOWED_CYCLES = {frozenset(("src/engine", "src/autograd"))}
# Downward, yet not allowed: ops record IR and never reach the compiler,
# kernels or the executor; backends see programs, never IR nodes.
FORBIDDEN = {
    ("src/ops", "src/compile"), ("src/ops", "src/backends"), ("src/ops", "src/runtime"),
    ("src/backends", "src/ir"),
}
# A backend's headers are its own: every other folder reaches a backend
# through the contract (src/backend/backend.h), by include and by call.
PRIVATE = "src/backends"
# Device memory is the backend's: only the backends and the contract's own
# implementation (src/backend/) name a buffer's memory (lz_buffer.data).
DEVICE_MEMORY = re.compile(r"->\s*data\b")
DEVICE_MEMORY_OK = ("src/backends", "src/backend")
ROW = re.compile(r"^\|\s*(-?\d+)\s*\|\s*([^|]+?)\s*\|")


def read_floors(root):
    """{folder: floor} from the table under "## Layers" in docs/design.md."""
    floors, in_layers = dict(NOT_FLOORS), False
    with open(os.path.join(root, DESIGN), encoding="utf-8") as fh:
        for line in fh:
            if line.startswith("## "):
                in_layers = line.strip() == "## Layers"
                continue
            m = ROW.match(line) if in_layers else None
            if not m:
                continue
            for name in re.findall(r"`([^`]+)/`", m.group(2)):
                folder = "src/" + name if os.path.isdir(os.path.join(root, "src", name)) else name
                floors[folder] = int(m.group(1))
    return floors


FLOORS = {}
SCANNED = ("src", "models", "tools")
INCLUDE = re.compile(r'^\s*#\s*include\s+"([^"]+)"')


def floor_of(folder):
    """The floor of folder: its own, or that of the nearest listed parent."""
    f = folder
    while f:
        if f in FLOORS:
            return f, FLOORS[f]
        f = os.path.dirname(f)
    return None, None


def resolve(root, src_file, inc):
    """The repository path inc names from src_file, as the build resolves it:
    next to the file, then src/, include/ and models/ (include directories)."""
    for base in (os.path.dirname(src_file), "src", "include", "models"):
        cand = os.path.normpath(os.path.join(base, inc))
        if os.path.isfile(os.path.join(root, cand)):
            return cand
    return None


def symbol_problems(root, build):
    """Upward references between the library's object files."""
    objdir = os.path.join(build, "CMakeFiles", "lazyc_objs.dir")
    if not os.path.isdir(objdir) or not shutil.which("nm"):
        return [f"no object files under {objdir} (or no nm): build first"]
    defined, wanted = {}, {}
    for d, _, names in os.walk(objdir):
        for name in names:
            if not name.endswith(".c.o"):
                continue
            obj = os.path.join(d, name)
            src = os.path.relpath(obj, objdir)[:-2]          # src/x/y.c
            if not os.path.isfile(os.path.join(root, src)):
                continue                                     # stale: its source moved
            out = subprocess.run(["nm", obj], capture_output=True, text=True, check=True).stdout
            for line in out.splitlines():
                parts = line.split()
                if len(parts) == 2 and parts[0] == "U":
                    wanted.setdefault(src, set()).add(parts[1])
                elif len(parts) == 3 and parts[1] in "TDBRCV":
                    defined[parts[2]] = src
    problems = []
    for src in sorted(wanted):
        ffolder, ffloor = floor_of(os.path.dirname(src))
        for sym in sorted(wanted[src]):
            if sym not in defined:
                continue
            tfolder, tfloor = floor_of(os.path.dirname(defined[sym]))
            if ffolder is None or tfolder is None or tfolder == ffolder:
                continue
            if tfloor > ffloor:
                problems.append(f"{src}: {ffolder} (floor {ffloor}) calls {sym}, defined in "
                                f"{defined[sym]} on a higher floor ({tfolder}, floor {tfloor})")
            elif (ffolder, tfolder) in FORBIDDEN:
                problems.append(f"{src}: {ffolder} calls {sym}, defined in {defined[sym]}: "
                                f"{ffolder} must not use {tfolder} (docs/design.md, Layers)")
    return problems


def main():
    root = sys.argv[1] if len(sys.argv) > 1 else os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
    build = sys.argv[2] if len(sys.argv) > 2 else None
    FLOORS.update(read_floors(root))
    problems = []
    if len(FLOORS) <= len(NOT_FLOORS):
        problems.append(f"{DESIGN}: no floor table under \"## Layers\" (| floor | folder | why |)")
    edges = {}   # (from folder, to folder) -> first "file:line"
    for top in SCANNED:
        for d, _, names in os.walk(os.path.join(root, top)):
            for name in sorted(names):
                if not name.endswith((".c", ".h")):
                    continue
                path = os.path.relpath(os.path.join(d, name), root)
                ffolder, ffloor = floor_of(os.path.dirname(path))
                if ffolder is None:
                    problems.append(f"{path}: folder {os.path.dirname(path)} has no floor "
                                    f"(place it in the floor table of {DESIGN}, \"Layers\")")
                    continue
                # models/ and tools/ see the public headers alone: no buffer there
                memory_ok = not path.startswith("src/") or any(
                    ffolder == f or ffolder.startswith(f + "/") for f in DEVICE_MEMORY_OK)
                with open(os.path.join(root, path), encoding="utf-8", errors="replace") as fh:
                    for lineno, line in enumerate(fh, 1):
                        if not memory_ok and DEVICE_MEMORY.search(line.split("//")[0]):
                            problems.append(f"{path}:{lineno}: names a buffer's memory (->data): only "
                                            "the backends and src/backend/ may; move values through "
                                            "backend/buffer.h (lz_buffer_write, _read, _fill, ...)")
                        m = INCLUDE.match(line)
                        if not m:
                            continue
                        target = resolve(root, path, m.group(1))
                        where = f"{path}:{lineno}"
                        if target is None:
                            problems.append(f"{where}: #include \"{m.group(1)}\" names no file")
                            continue
                        tfolder, tfloor = floor_of(os.path.dirname(target))
                        if tfolder is None or tfolder == ffolder:
                            continue
                        if tfloor > ffloor:
                            problems.append(f"{where}: {ffolder} (floor {ffloor}) includes "
                                            f"{target} from a higher floor ({tfolder}, floor {tfloor})")
                        elif (ffolder, tfolder) in FORBIDDEN:
                            problems.append(f"{where}: {ffolder} includes {target}: {ffolder} "
                                            f"must not use {tfolder} (docs/design.md, Layers)")
                        elif tfolder.startswith(PRIVATE) and not ffolder.startswith(PRIVATE):
                            problems.append(f"{where}: {ffolder} includes {target}, a backend's own "
                                            "header: reach a backend through backend/backend.h")
                        edges.setdefault((ffolder, tfolder), where)
    # Cycles between folders: any pair of folders that reach each other.
    # One across floors always holds an upward include, reported above; so
    # only a cycle between folders on one floor is reported here.
    reach = {}
    folders = {a for a, _ in edges} | {b for _, b in edges}
    for a in folders:
        seen, todo = set(), [a]
        while todo:
            x = todo.pop()
            for (p, q) in edges:
                if p == x and q not in seen:
                    seen.add(q)
                    todo.append(q)
        reach[a] = seen
    for a in sorted(folders):
        for b in sorted(folders):
            if a < b and FLOORS[a] == FLOORS[b] and b in reach[a] and a in reach[b]:
                if frozenset((a, b)) in ALLOWED_CYCLES and (a, b) in edges and (b, a) in edges:
                    continue
                via = [w for (p, q), w in edges.items() if (p, q) in ((a, b), (b, a))]
                problems.append(f"cycle between {a} and {b}" + (f" (e.g. {', '.join(via)})" if via else ""))
    if build:
        problems += symbol_problems(root, build)
    for p in problems:
        print(p)
    if problems:
        print(f"test_layers: {len(problems)} violation(s) of the layering in docs/design.md")
        return 1
    print(f"test_layers: {len(FLOORS) - len(NOT_FLOORS)} folders on the floors of {DESIGN}; "
          f"{len(edges)} folder-to-folder include edges, all downward "
          "(engine <-> autograd the one allowed cycle), none into a backend's headers; "
          "no ->data outside src/backends/ and src/backend/"
          + ("; no call reaches a higher floor" if build else ""))
    return 0


if __name__ == "__main__":
    sys.exit(main())
