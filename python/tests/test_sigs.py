"""The ctypes signatures of lazyc/_lib.py against the public headers
(include/lazyc.h, lazyc_nn.h, lazyc_optim.h), run by ctest as
test_python_sigs with any Python 3 (no PyTorch, no liblazyc.so: importing
lazyc loads nothing).

Every entry of _SIGS must name a function the headers declare with LZ_API,
with as many arguments, and each argument's and the result's ctypes type
must be the C type's: void, int (and the enums), int64_t, uint64_t, size_t,
float, double; char * as c_char_p; a handle, void * or a struct's address
as c_void_p (or a POINTER of the pointee's type); an array of values
(int64_t *, lz_tensor **) as a POINTER of their type; a function pointer
typedef as the CFUNCTYPE
of the same signature; a struct by value as the ctypes Structure of that
struct, whose fields (names, order, types, array lengths) are the C
struct's. A mismatch is a silent wrong value through ctypes (a pointer
cut to an int, a float read as a double, a counter read from the wrong
offset of lz_metrics), never an error, hence this test.

    python3 python/tests/test_sigs.py [REPO]
"""
import ctypes
import os
import re
import sys
import types

HERE = os.path.dirname(os.path.abspath(__file__))
REPO = sys.argv[1] if len(sys.argv) > 1 else os.path.dirname(os.path.dirname(HERE))
HEADERS = ["lazyc.h", "lazyc_nn.h", "lazyc_optim.h"]

# C scalar types -> the ctypes type that passes them (x86-64 and AArch64
# Linux: int is 32 bits, enums are ints)
SCALARS = {
    "int": ctypes.c_int, "unsigned": ctypes.c_uint, "unsigned int": ctypes.c_uint,
    "int32_t": ctypes.c_int32, "uint32_t": ctypes.c_uint32,
    "int64_t": ctypes.c_int64, "uint64_t": ctypes.c_uint64, "size_t": ctypes.c_size_t,
    "float": ctypes.c_float, "double": ctypes.c_double, "char": ctypes.c_char,
    "uint8_t": ctypes.c_uint8,
}
QUALIFIERS = {"const", "volatile", "struct", "enum", "restrict"}
TYPE_WORDS = {"int", "char", "long", "short", "unsigned", "signed", "float", "double", "void"}


class CType:
    """A parsed C type: base name, pointer depth, array length (None) and,
    for a parameter, its name."""

    def __init__(self, base, ptr=0, array=None, name=None):
        self.base, self.ptr, self.array, self.name = base, ptr, array, name

    def deref(self):
        return CType(self.base, self.ptr - 1)

    def __str__(self):
        return (self.base + (" " + "*" * self.ptr if self.ptr else "") +
                ("[%d]" % self.array if self.array is not None else ""))


def strip_c(text):
    """The header without comments and preprocessor lines, and its
    numeric #defines (array lengths)."""
    text = re.sub(r"/\*.*?\*/", " ", text, flags=re.S)
    text = re.sub(r"//[^\n]*", " ", text)
    text = re.sub(r"\\\n", " ", text)
    defines = dict(re.findall(r"^\s*#\s*define\s+(\w+)\s+\(?(\d+)\)?\s*$", text, re.M))
    return "\n".join(line for line in text.splitlines() if not line.lstrip().startswith("#")), defines


def parse_decl(decl, defines=None):
    """'lz_tensor *const *xs' -> CType('lz_tensor', 2, name='xs');
    'int stride[2]' -> CType('int', 0, 2, 'stride')."""
    toks = re.findall(r"\w+|\*|\[\s*\w*\s*\]|\.\.\.", decl)
    array = None
    for t in toks:
        if t.startswith("["):
            n = t.strip("[] ")
            n = (defines or {}).get(n, n)
            array = int(n) if n.isdigit() else -1      # -1: a length this test cannot read
    words = [t for t in toks if re.match(r"\w", t) and t not in QUALIFIERS]
    name = None
    if len(words) > 1 and words[-1] not in TYPE_WORDS:
        name = words.pop()
    return CType(" ".join(words), toks.count("*"), array, name)


def parse_params(params):
    params = params.strip()
    if params in ("", "void"):
        return [], False
    parts = [p.strip() for p in params.split(",")]
    variadic = parts[-1] == "..."
    if variadic:
        parts = parts[:-1]
    out = []
    for p in parts:
        t = parse_decl(p)
        if t.array is not None:            # an array parameter is a pointer
            t = CType(t.base, t.ptr + 1, None, t.name)
        out.append(t)
    return out, variadic


def parse_headers(repo):
    """functions: name -> (result CType, [param CType], variadic);
    structs: typedef name -> [(field, CType)]; enums: set of typedef names;
    fnptrs: typedef name -> (result CType, [param CType])."""
    functions, structs, enums, fnptrs = {}, {}, set(), {}
    for h in HEADERS:
        with open(os.path.join(repo, "include", h), encoding="utf-8") as f:
            text, defines = strip_c(f.read())
        for m in re.finditer(r"typedef\s+struct\s*\w*\s*\{(.*?)\}\s*(\w+)\s*;", text, re.S):
            fields = []
            for decl in m.group(1).split(";"):
                if not decl.strip():
                    continue
                # int64_t a, b;  int stride[2], padding[2];  (no `int *p, q` in the headers)
                parts = decl.split(",")
                first = parse_decl(parts[0], defines)
                fields.append((first.name, first))
                for p in parts[1:]:
                    t = parse_decl(first.base + " " + p, defines)
                    fields.append((t.name, t))
            structs[m.group(2)] = fields
        text = re.sub(r"typedef\s+struct\s*\w*\s*\{.*?\}\s*\w+\s*;", " ", text, flags=re.S)
        for m in re.finditer(r"typedef\s+enum\s*\w*\s*\{.*?\}\s*(\w+)\s*;", text, re.S):
            enums.add(m.group(1))
        for m in re.finditer(r"typedef\s+([^;()]+?)\(\s*\*\s*(\w+)\s*\)\s*\(([^)]*)\)\s*;", text):
            fnptrs[m.group(2)] = (parse_decl(m.group(1)), parse_params(m.group(3))[0])
        declared = len(re.findall(r"\bLZ_API\b", text))
        found = 0
        for m in re.finditer(r"\bLZ_API\s+([^;(]+?)\(([^)]*)\)", text):
            found += 1
            ret = parse_decl(m.group(1))
            name = ret.name
            ret.name = None
            args, variadic = parse_params(m.group(2))
            functions[name] = (ret, args, variadic)
        if found != declared:
            raise SystemExit("test_sigs: %s: %d LZ_API declarations, %d parsed: a form this parser "
                             "does not read (a function pointer parameter without a typedef?)"
                             % (h, declared, found))
    return functions, structs, enums, fnptrs


def kind(pt):
    """A ctypes scalar's (size, float/signed/unsigned): c_int64 and
    c_longlong are the same argument on Linux."""
    if not (isinstance(pt, type) and issubclass(pt, ctypes._SimpleCData)) or pt._type_ not in "bBhHiIlLqQfdc":
        return None
    return (ctypes.sizeof(pt), "float" if pt._type_ in "fd" else
            "char" if pt._type_ == "c" else "unsigned" if pt._type_.isupper() else "signed")


def c_struct_name(cls):
    """Conv2dOpts -> lz_conv2d_opts, Metrics -> lz_metrics."""
    return "lz_" + re.sub(r"(?<!^)(?=[A-Z])", "_", cls.__name__).lower()


class Checker:
    def __init__(self, L, functions, structs, enums, fnptrs):
        self.L, self.functions, self.structs, self.enums, self.fnptrs = L, functions, structs, enums, fnptrs
        self.by_struct = {}
        for v in vars(L).values():
            if isinstance(v, type) and issubclass(v, ctypes.Structure) and v is not ctypes.Structure:
                self.by_struct[c_struct_name(v)] = v

    def scalar(self, base):
        if base in self.enums:
            return ctypes.c_int
        return SCALARS.get(base)

    def compatible(self, ct, pt):
        """Why the ctypes type pt cannot carry the C type ct, or None."""
        if ct.array is not None:
            if not (isinstance(pt, type) and issubclass(pt, ctypes.Array)):
                return "C %s is an array, ctypes %s is not" % (ct, pt)
            if ct.array < 0 or pt._length_ != ct.array:
                return "C %s has %d elements, ctypes %d" % (ct, ct.array, pt._length_)
            return self.compatible(CType(ct.base, ct.ptr), pt._type_)
        if ct.ptr == 0 and ct.base == "void":
            return None if pt is None else "C void, ctypes %s" % pt
        if ct.ptr == 0 and ct.base in self.fnptrs:
            if not (isinstance(pt, type) and issubclass(pt, ctypes._CFuncPtr)):
                return "C %s is a function pointer, ctypes %s is not a CFUNCTYPE" % (ct.base, pt)
            res, args = self.fnptrs[ct.base]
            if len(args) != len(pt._argtypes_):
                return "C %s takes %d arguments, the CFUNCTYPE %d" % (ct.base, len(args), len(pt._argtypes_))
            why = self.compatible(res, pt._restype_)
            for i, a in enumerate(args):
                why = why or self.compatible(a, pt._argtypes_[i])
            return why and "%s: %s" % (ct.base, why)
        if ct.ptr == 0 and ct.base in self.structs:
            want = self.by_struct.get(ct.base)
            if want is None:
                return "C struct %s by value has no ctypes Structure in _lib.py" % ct.base
            return None if pt is want else "C %s by value, ctypes %s" % (ct.base, getattr(pt, "__name__", pt))
        if ct.ptr == 0:
            s = self.scalar(ct.base)
            if s is None:
                return "C type %s is not known to this test" % ct
            same = pt is s or kind(pt) == kind(s)
            return None if same else "C %s, ctypes %s" % (ct, getattr(pt, "__name__", pt))
        # a pointer: c_void_p stands for void *, an opaque handle (lz_tensor *,
        # lz_sgd *) or an options struct's address; an array of values
        # (int64_t *, lz_tensor **) takes a POINTER of their type
        if pt is ctypes.c_void_p:
            if ct.ptr == 1 and (ct.base == "void" or ct.base.startswith("lz_") and ct.base not in self.enums):
                return None
            return "C %s, ctypes c_void_p: a pointer to values takes POINTER(their type)" % ct
        if pt is ctypes.c_char_p:
            return None if ct.base == "char" and ct.ptr == 1 else "C %s, ctypes c_char_p" % ct
        if isinstance(pt, type) and issubclass(pt, ctypes._Pointer):
            why = self.compatible(ct.deref(), pt._type_)
            return why and "C %s, ctypes POINTER(%s): %s" % (ct, pt._type_.__name__, why)
        return "C %s is a pointer, ctypes %s is not" % (ct, getattr(pt, "__name__", pt))

    def check_function(self, name, res, args):
        if name not in self.functions:
            return ["%s: not declared (LZ_API) in include/%s" % (name, ", ".join(HEADERS))]
        cres, cargs, variadic = self.functions[name]
        errs = []
        if args is None:
            if not variadic:
                errs.append("%s: argtypes None (unchecked) is kept for variadic functions" % name)
            return errs
        if variadic:
            errs.append("%s: variadic in C: its argtypes must be None" % name)
        if len(args) != len(cargs):
            errs.append("%s: C takes %d arguments, _SIGS %d" % (name, len(cargs), len(args)))
            return errs
        why = self.compatible(cres, res)
        if why:
            errs.append("%s: result: %s" % (name, why))
        for i, (ct, pt) in enumerate(zip(cargs, args)):
            why = self.compatible(ct, pt)
            if why:
                errs.append("%s: argument %d (%s): %s" % (name, i + 1, ct.name or "?", why))
        return errs

    def check_struct(self, cname, cls):
        if cname not in self.structs:
            return ["%s: no struct %s in the headers" % (cls.__name__, cname)]
        cf, pf = self.structs[cname], cls._fields_
        errs = []
        cn, pn = [n for n, _ in cf], [f[0] for f in pf]
        if cn != pn:
            i = next((i for i, (a, b) in enumerate(zip(cn, pn)) if a != b), min(len(cn), len(pn)))
            errs.append("%s: %d fields, C %s %d; field %d is %s in ctypes, %s in C" % (
                cls.__name__, len(pn), cname, len(cn), i, pn[i] if i < len(pn) else "(none)",
                cn[i] if i < len(cn) else "(none)"))
            return errs
        for (n, ct), f in zip(cf, pf):
            why = self.compatible(ct, f[1])
            if why:
                errs.append("%s.%s: %s" % (cls.__name__, n, why))
        return errs


def check(L, repo):
    c = Checker(L, *parse_headers(repo))
    errs = []
    for name, (res, args) in L._SIGS.items():
        errs += c.check_function(name, res, args)
    for cname, cls in sorted(c.by_struct.items()):
        errs += c.check_struct(cname, cls)
    return errs, c


def main():
    sys.path.insert(0, os.path.join(REPO, "python"))
    import lazyc                      # noqa: F401  (loads no library)
    from lazyc import _lib as L
    failed = 0

    def ok(cond, what):
        nonlocal failed
        print(("ok   " if cond else "FAIL ") + what)
        failed += not cond

    with open("/proc/self/maps") as f:
        ok("liblazyc" not in f.read(), "import lazyc loads no liblazyc.so")

    errs, c = check(L, REPO)
    for e in errs:
        print("  " + e)
    ok(not errs, "%d signatures of _SIGS and %d Structures against the headers"
       % (len(L._SIGS), len(c.by_struct)))
    ok(len(c.functions) > 150 and len(c.structs) >= 10 and "lz_dtype" in c.enums and "lz_step_fn" in c.fnptrs,
       "the headers parse (%d functions, %d structs)" % (len(c.functions), len(c.structs)))

    # the check catches a change on either side (each broken once, in a
    # copy of _lib's names)
    def broken(**names):
        return types.SimpleNamespace(**dict(vars(L), **names))

    def new_errors(ns):      # those the unbroken names do not have
        return [x for x in check(ns, REPO)[0] if x not in errs]

    for name, sig, expect in [
            ("lz_dim", (ctypes.c_int, [L.T, ctypes.c_int]), "result"),             # int64_t read as int
            ("lz_scalar", (L.T, [ctypes.c_double]), "argument 1"),                # float passed as double
            ("lz_slice", (L.T, [L.T, ctypes.c_int, ctypes.c_int64]), "arguments"),  # one argument fewer
            ("lz_cat", (L.T, [L.T, ctypes.c_int, ctypes.c_int]), "argument 1"),    # an array as one tensor
            ("lz_sgd_new", (ctypes.c_void_p, [ctypes.POINTER(L.T), ctypes.c_int, L.AdamwOpts]),
             "argument 3"),                                                       # another struct
            ("lz_not_in_the_header", (None, []), "not declared")]:
        e = new_errors(broken(_SIGS={name: sig}))
        ok(len(e) == 1 and expect in e[0], "a changed _SIGS entry fails: %s" % (e or ["(none)"])[0])
    f = L.Metrics._fields_
    swapped = type("Metrics", (ctypes.Structure,), {"_fields_": f[:12] + [f[13], f[12]] + f[14:]})
    e = [x for x in new_errors(broken(Metrics=swapped)) if x.startswith("Metrics")]
    ok(len(e) == 1, "Metrics with two fields swapped fails: %s" % (e or ["(none)"])[0])
    shorter = type("SgdOpts", (ctypes.Structure,), {"_fields_": L.SgdOpts._fields_[:-1]})
    e = [x for x in new_errors(broken(SgdOpts=shorter)) if x.startswith("SgdOpts")]
    ok(len(e) == 1, "SgdOpts without its last field fails: %s" % (e or ["(none)"])[0])
    c2 = Checker(L, *parse_headers(REPO))
    c2.functions["lz_ndim"] = (CType("int64_t"), c2.functions["lz_ndim"][1], False)
    e = c2.check_function("lz_ndim", *L._SIGS["lz_ndim"])
    ok(len(e) == 1, "a changed header declaration fails: %s" % (e or ["(none)"])[0])

    print("%d failed" % failed)
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
