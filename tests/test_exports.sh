#!/usr/bin/env bash
# The public surface: installed into a temporary prefix, liblazyc.so exports
# exactly the functions declared in the installed headers, both ways (a
# function declared without LZ_API is missing from the library; an internal
# function without hidden visibility is an extra export). Functions are read
# from the headers by the compiler (gcc -aux-info), not by pattern matching.
# usage: test_exports.sh BUILD_DIR
set -euo pipefail
build=$1
# -aux-info (the declarations as the compiler read them) is GCC's
command -v gcc > /dev/null || { echo "SKIP: test_exports reads the headers with gcc -aux-info"; exit 77; }
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT

cmake --install "$build" --prefix "$tmp/p" > "$tmp/install.log" || { cat "$tmp/install.log"; exit 1; }
so=$(find "$tmp/p" -name 'liblazyc.so' | head -1)
[ -n "$so" ] || { echo "FAIL: no liblazyc.so installed"; exit 1; }
headers=$(cd "$tmp/p/include" && ls ./*.h)
[ -n "$headers" ] || { echo "FAIL: no headers installed"; exit 1; }

# every installed header on its own compiles (self-contained) and together
for h in $headers; do echo "#include \"$h\""; done > "$tmp/all.c"
gcc -std=c11 -Wall -Wextra -Werror -I"$tmp/p/include" -fsyntax-only -aux-info "$tmp/aux.txt" "$tmp/all.c"
# declarations (:NC), not definitions (static inline helpers: :NF)
grep -F "$tmp/p/include/" "$tmp/aux.txt" | grep ':NC \*/' \
  | sed -E 's/^.*[ *]([A-Za-z_][A-Za-z_0-9]*) \(.*$/\1/' | sort -u > "$tmp/declared"
nm -D --defined-only "$so" | awk '{print $NF}' | sed 's/@.*//' | sort -u > "$tmp/exported"

n_decl=$(wc -l < "$tmp/declared")
[ "$n_decl" -ge 150 ] || { echo "FAIL: only $n_decl functions read from the headers"; exit 1; }
missing=$(comm -23 "$tmp/declared" "$tmp/exported")
extra=$(comm -13 "$tmp/declared" "$tmp/exported")
[ -z "$missing" ] || { echo "FAIL: declared in the installed headers but not exported (LZ_API missing?):"; echo "$missing"; exit 1; }
[ -z "$extra" ] || { echo "FAIL: exported but not declared in the installed headers:"; echo "$extra"; exit 1; }
nm -D --defined-only "$so" | awk '$2 != "T" { bad = 1; print } END { exit bad }' \
  || { echo "FAIL: the library exports data or weak symbols (above)"; exit 1; }
echo "test_exports: $n_decl functions, declared = exported"
