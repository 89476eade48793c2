#!/usr/bin/env python3
"""Every link in the documentation resolves, and so does every pointer
into docs/ from the source.

Markdown (README.md, CONTRIBUTING.md, docs/*.md): each relative link
[text](path#anchor) names a file or folder inside the repository, and its
#anchor (or a bare #anchor into the same page) is a heading of that page,
spelled as GitHub spells anchors. Links inside code (fenced blocks,
indented blocks, `spans`) are not links and are skipped; http(s) and
mailto links are not fetched.

Source (src/, include/, tests/, tools/, bench/, models/, examples/,
python/, scripts/, CMakeLists.txt, Makefile): each docs/<page>.md it names
exists; a docs/<page>.md#<anchor> is a heading of that page; a pointer
written docs/<page>.md, "Heading" (the quoted text may wrap across comment
lines) is the start of one of that page's headings.

Prints each broken link as FILE:LINE: what is wrong, and exits 1 if there
is any.

usage: test_doc_links.py [REPO_ROOT]
"""
import os
import re
import sys

SOURCE_DIRS = ["src", "include", "tests", "tools", "bench", "models", "examples", "python", "scripts"]
SOURCE_FILES = ["CMakeLists.txt", "Makefile"]
SOURCE_EXT = (".c", ".h", ".py", ".sh", ".txt", ".cmake", ".toml", ".in")


def slug(heading):
    """GitHub's anchor for a heading: lower case, punctuation but - and _
    dropped, each space a hyphen."""
    s = heading.strip().lower()
    s = re.sub(r"[^\w\- ]", "", s)
    return s.replace(" ", "-")


def strip_code(text):
    """The page with code blanked out, line numbers kept."""
    out, fenced = [], False
    for line in text.split("\n"):
        if re.match(r"^\s*(```|~~~)", line):
            fenced = not fenced
            out.append("")
        elif fenced or line.startswith("    ") or line.startswith("\t"):
            out.append("")
        else:
            out.append(re.sub(r"`[^`]*`", "", line))
    return "\n".join(out)


def headings(path, cache={}):
    """Anchors and heading texts of a markdown page."""
    if path not in cache:
        anchors, texts, seen = set(), [], {}
        with open(path, encoding="utf-8") as f:
            fenced = False
            for line in f:
                if re.match(r"^\s*(```|~~~)", line):
                    fenced = not fenced
                    continue
                m = None if fenced else re.match(r"^#{1,6}\s+(.*?)\s*#*\s*$", line)
                if not m:
                    continue
                text = m.group(1)
                base = slug(text)
                n = seen.get(base, 0)
                seen[base] = n + 1
                anchors.add(base if n == 0 else "%s-%d" % (base, n))
                texts.append(re.sub(r"\s+", " ", text.replace("`", "")).lower())
        cache[path] = (anchors, texts)
    return cache[path]


def inside(root, path):
    return os.path.commonpath([root, os.path.realpath(path)]) == root


def check_markdown(root, page, errors):
    with open(page, encoding="utf-8") as f:
        text = strip_code(f.read())
    rel = os.path.relpath(page, root)
    for m in re.finditer(r"\]\(([^)\s]+)(?:\s+\"[^\"]*\")?\)", text):
        target = m.group(1)
        line = text.count("\n", 0, m.start()) + 1
        where = "%s:%d: %s" % (rel, line, target)
        if re.match(r"^[a-z][a-z0-9+.-]*:", target):
            continue  # http:, https:, mailto:
        path, _, anchor = target.partition("#")
        dest = os.path.normpath(os.path.join(os.path.dirname(page), path)) if path else page
        if not inside(root, dest):
            errors.append("%s: points outside the repository" % where)
        elif not os.path.exists(dest):
            errors.append("%s: no such file" % where)
        elif anchor:
            if not dest.endswith(".md"):
                errors.append("%s: an anchor into a file that is not markdown" % where)
            elif anchor not in headings(dest)[0]:
                errors.append("%s: no heading with anchor #%s in %s"
                              % (where, anchor, os.path.relpath(dest, root)))


def source_files(root):
    for name in SOURCE_FILES:
        if os.path.isfile(os.path.join(root, name)):
            yield os.path.join(root, name)
    for d in SOURCE_DIRS:
        for dirpath, dirnames, filenames in os.walk(os.path.join(root, d)):
            dirnames[:] = [x for x in dirnames if x not in ("corpus", "regressions", "__pycache__")]
            for name in sorted(filenames):
                if name.endswith(SOURCE_EXT):
                    yield os.path.join(dirpath, name)


def check_source(root, path, errors):
    try:
        with open(path, encoding="utf-8") as f:
            text = f.read()
    except UnicodeDecodeError:
        return
    rel = os.path.relpath(path, root)
    for m in re.finditer(r"docs/([A-Za-z0-9_-]+\.md)(#[A-Za-z0-9_-]+)?", text):
        line = text.count("\n", 0, m.start()) + 1
        page = os.path.join(root, "docs", m.group(1))
        where = "%s:%d: %s" % (rel, line, m.group(0))
        if not os.path.isfile(page):
            errors.append("%s: no such page" % where)
            continue
        anchors, texts = headings(page)
        if m.group(2):
            if m.group(2)[1:] not in anchors:
                errors.append("%s: no such heading" % where)
            continue
        # docs/<page>.md, "Heading": the text after it, comment leaders removed
        after = text[m.end():m.end() + 300]
        after = re.sub(r"\n\s*(\*|#+|//)?\s*", " ", after)
        q = re.match(r"[,:]?\s+\"([^\"]{1,100})\"", after)
        if q:
            want = re.sub(r"\s+", " ", q.group(1).replace("`", "")).strip().lower()
            if not any(t.startswith(want) for t in texts):
                errors.append('%s, "%s": no heading starts so' % (where, q.group(1)))


def main():
    root = os.path.realpath(sys.argv[1] if len(sys.argv) > 1 else
                            os.path.join(os.path.dirname(__file__), ".."))
    pages = [os.path.join(root, p) for p in ("README.md", "CONTRIBUTING.md")]
    docs = os.path.join(root, "docs")
    pages += sorted(os.path.join(docs, p) for p in os.listdir(docs) if p.endswith(".md"))
    errors = []
    for page in pages:
        if os.path.isfile(page):
            check_markdown(root, page, errors)
        else:
            errors.append("%s: missing" % os.path.relpath(page, root))
    n_src = 0
    for path in source_files(root):
        n_src += 1
        check_source(root, path, errors)
    for e in errors:
        print("FAILED: " + e)
    print("test_doc_links: %d pages, %d source files, %d broken" % (len(pages), n_src, len(errors)))
    return 1 if errors else 0


if __name__ == "__main__":
    sys.exit(main())
