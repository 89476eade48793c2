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

No circle of files, either, inside a folder or across: a file and its
header (x.c, x.h) are one module, and module A uses B when one of A's
files includes B's header or (from the objects of every target) takes a
symbol B's file defines. A circle of modules fails the test, printed with
what ties it, unless all of it lies in the one circle the design allows
(ALLOWED_CIRCLE, engine and autograd); a module listed there that is no
longer in a circle fails too, so that the list only shrinks.

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
# The one circle of files (docs/design.md, "Layers"): a tensor holds its
# autograd record and autograd records ops on tensors; a tensor joins the
# open scope when made and leaves it when freed; recording one in eager mode
# runs the barrier, which cuts tensors.
ALLOWED_CIRCLE = frozenset(("src/engine/tensor", "src/autograd/autograd", "src/engine/scope",
                            "src/engine/step"))
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


def module_of(path):
    """A file's module: x.c and x.h are one."""
    return os.path.splitext(path)[0]


def symbol_uses(root, build):
    """(from module, to module) -> "file calls symbol" from the object files of
    every target, a symbol taken where its own target defines it, else from
    the one file that does."""
    cmake = os.path.join(build, "CMakeFiles")
    if not os.path.isdir(cmake) or not shutil.which("nm"):
        return None
    defined, wanted = {}, []   # symbol -> {target: source}; (target, source, symbol)
    for target in sorted(os.listdir(cmake)):
        objdir = os.path.join(cmake, target)
        for d, _, names in os.walk(objdir):
            for name in names:
                if not name.endswith(".c.o"):
                    continue
                obj = os.path.join(d, name)
                src = os.path.relpath(obj, objdir)[:-2]
                if not src.startswith(tuple(t + "/" for t in SCANNED)) or \
                        not os.path.isfile(os.path.join(root, src)):
                    continue
                out = subprocess.run(["nm", obj], capture_output=True, text=True, check=True).stdout
                for line in out.splitlines():
                    parts = line.split()
                    if len(parts) == 2 and parts[0] == "U":
                        wanted.append((target, src, parts[1]))
                    elif len(parts) == 3 and parts[1] in "TDBRCV":
                        defined.setdefault(parts[2], {})[target] = src
    uses = {}
    for target, src, sym in wanted:
        where = defined.get(sym, {})
        to = where.get(target)
        if not to and len(set(where.values())) == 1:
            to = next(iter(where.values()))
        if to and module_of(to) != module_of(src):
            uses.setdefault((module_of(src), module_of(to)), f"{src} calls {sym} ({to})")
    return uses


def circles(uses):
    """The strongly connected sets of more than one module (Tarjan's)."""
    graph = {}
    for a, b in uses:
        graph.setdefault(a, set()).add(b)
        graph.setdefault(b, set())
    index, low, stack, on, found = {}, {}, [], set(), []
    for start in sorted(graph):
        if start in index:
            continue
        work = [(start, iter(sorted(graph[start])))]
        index[start] = low[start] = len(index)
        stack.append(start)
        on.add(start)
        while work:
            v, it = work[-1]
            w = next(it, None)
            if w is None:
                work.pop()
                if work:
                    low[work[-1][0]] = min(low[work[-1][0]], low[v])
                if low[v] == index[v]:
                    comp = set()
                    while True:
                        x = stack.pop()
                        on.discard(x)
                        comp.add(x)
                        if x == v:
                            break
                    if len(comp) > 1:
                        found.append(comp)
            elif w not in index:
                index[w] = low[w] = len(index)
                stack.append(w)
                on.add(w)
                work.append((w, iter(sorted(graph[w]))))
            elif w in on:
                low[v] = min(low[v], index[w])
    return found


def circle_problems(includes, symbols):
    """A circle of modules outside ALLOWED_CIRCLE, or a listed module in none."""
    uses = dict(includes)
    for k, v in (symbols or {}).items():
        uses.setdefault(k, v)
    problems, seen = [], set()
    for comp in circles(uses):
        seen |= comp
        if comp <= ALLOWED_CIRCLE:
            continue
        ties = [f"    {a} -> {b}: {w}" for (a, b), w in sorted(uses.items()) if a in comp and b in comp]
        problems.append(f"circle of files: {', '.join(sorted(comp))}; break it by moving what they "
                        "share into a file both use (docs/design.md, Layers)\n" + "\n".join(ties))
    if symbols is not None:
        for m in sorted(ALLOWED_CIRCLE - seen):
            problems.append(f"{m} is in no circle of files now: take it off ALLOWED_CIRCLE "
                            "(tests/test_layers.py) and docs/design.md, Layers")
    return problems


def main():
    root = sys.argv[1] if len(sys.argv) > 1 else os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
    build = sys.argv[2] if len(sys.argv) > 2 else None
    FLOORS.update(read_floors(root))
    problems = []
    if len(FLOORS) <= len(NOT_FLOORS):
        problems.append(f"{DESIGN}: no floor table under \"## Layers\" (| floor | folder | why |)")
    edges = {}   # (from folder, to folder) -> first "file:line"
    module_uses = {}   # (from module, to module) -> first "file:line includes header"
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
                        if target.startswith(tuple(t + "/" for t in SCANNED)) and \
                                module_of(target) != module_of(path):
                            module_uses.setdefault((module_of(path), module_of(target)),
                                                   f"{where} includes {target}")
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
    problems += circle_problems(module_uses, symbol_uses(root, build) if build else None)
    for p in problems:
        print(p)
    if problems:
        print(f"test_layers: {len(problems)} violation(s) of the layering in docs/design.md")
        return 1
    print(f"test_layers: {len(FLOORS) - len(NOT_FLOORS)} folders on the floors of {DESIGN}; "
          f"{len(edges)} folder-to-folder include edges, all downward "
          "(engine <-> autograd the one allowed cycle), none into a backend's headers; "
          "no ->data outside src/backends/ and src/backend/"
          + ("; no call reaches a higher floor" if build else "")
          + ("; no circle of files" if build else "; no circle of files by include")
          + f" but {', '.join(sorted(ALLOWED_CIRCLE))}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
