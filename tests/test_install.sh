#!/usr/bin/env bash
# Installs the build into a temporary prefix, then builds an example against
# it the way a user would (pkg-config), shared and static, and runs it: each
# must exit 0 and print a loss that goes down. (The README's own example is
# test_readme_example's.)
# usage: test_install.sh BUILD_DIR EXAMPLE.c
set -euo pipefail
build=$1 example=$2
cc=${CC:-cc}

tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
prefix=$tmp/prefix

cmake --install "$build" --prefix "$prefix" > "$tmp/install.log" \
  || { cat "$tmp/install.log"; exit 1; }

pc=$(find "$prefix" -name lazyc.pc)
[ -n "$pc" ] || { echo "FAIL: no lazyc.pc under $prefix"; exit 1; }
for f in include/lazyc.h include/lazyc_nn.h include/lazyc_optim.h bin/lazyc; do
  [ -e "$prefix/$f" ] || { echo "FAIL: $f not installed"; exit 1; }
done
PKG_CONFIG_PATH=$(dirname "$pc")
export PKG_CONFIG_PATH
pkg-config --exists lazyc || { echo "FAIL: pkg-config cannot read $pc"; cat "$pc"; exit 1; }
libdir=$(pkg-config --variable=libdir lazyc)
case "$libdir" in "$prefix"/*) ;; *) echo "FAIL: libdir $libdir is outside $prefix"; exit 1;; esac

# The example must build from the installed header alone, not the source tree.
cp "$example" "$tmp/train_mlp.c"
cd "$tmp"

check_run() { # name: run ./name, expect exit 0 and a falling loss
  local name=$1 out
  out=$("./$name") || { echo "FAIL: $name exited $?"; echo "$out"; exit 1; }
  echo "$out" | awk -v name="$name" '
    / loss / { v = $NF + 0; if (n == 0) first = v; last = v; n++ }
    END {
      if (n < 2) { print "FAIL: " name " printed " n " loss lines"; exit 1 }
      if (!(last < 0.5 * first)) { print "FAIL: " name " loss " first " -> " last " did not fall"; exit 1 }
      print name ": " n " loss lines, " first " -> " last
    }' || { echo "$out"; exit 1; }
}

# shared: the command line in the example's header comment
# shellcheck disable=SC2046
$cc -std=c11 -Wall -Wextra -Werror train_mlp.c $(pkg-config --cflags --libs lazyc) -o train_shared
# ldd's output is read whole first: with pipefail, `ldd | grep -q` fails
# whenever grep exits at its match before ldd has finished writing (SIGPIPE)
libs=$(ldd ./train_shared)
grep -q "$libdir/liblazyc.so" <<<"$libs" \
  || { echo "FAIL: train_shared does not load liblazyc.so from $libdir"; echo "$libs"; exit 1; }
check_run train_shared

# static: Libs.private must be enough to resolve every symbol of liblazyc.a
static_libs=$(pkg-config --static --libs lazyc | sed 's/-llazyc\b/-l:liblazyc.a/')
# shellcheck disable=SC2046,SC2086
$cc -std=c11 -Wall -Wextra -Werror train_mlp.c $(pkg-config --cflags lazyc) $static_libs -o train_static
if ldd ./train_static | grep -q liblazyc; then
  echo "FAIL: train_static still loads liblazyc.so"; exit 1
fi
check_run train_static

# lazyc_nn.h, lazyc_optim.h and the version, from the installed headers and
# library: the zoo builds a model and an optimizer over it, lz_version() is
# the header's, pkg-config agrees
cat > nn_version.c <<'EOF_C'
#include <lazyc_nn.h>
#include <lazyc_optim.h>
#include <stdio.h>
#include <string.h>
int main(void) {
    lz_model *m = lz_model_new("cnn", "smoke", 1);
    if (!m || !lz_model_names()[0] || strcmp(lz_version(), LZ_VERSION_STRING) != 0) return 1;
    lz_tensor *ps[64];
    int n = lz_params_trainable_list(lz_model_params(m), ps, 64);
    lz_optimizer *opt = lz_optimizer_adamw(ps, n, (lz_adamw_opts){.decoupled = 1});
    if (!opt || strcmp(lz_optimizer_name(opt), "adamw") != 0) return 1;
    lz_optimizer_free(opt);
    printf("%s %d.%d.%d %lld\n", lz_version(), LZ_VERSION_MAJOR, LZ_VERSION_MINOR, LZ_VERSION_PATCH,
           (long long)lz_params_numel(lz_model_params(m), 1));
    lz_model_free(m);
    return 0;
}
EOF_C
# shellcheck disable=SC2046
$cc -std=c11 -Wall -Wextra -Werror nn_version.c $(pkg-config --cflags --libs lazyc) -o nn_version
v=$(./nn_version) || { echo "FAIL: nn_version exited $?"; exit 1; }
pcv=$(pkg-config --modversion lazyc)
case "$v" in "$pcv $pcv "*) ;; *) echo "FAIL: version '$v' is not pkg-config's $pcv"; exit 1;; esac
echo "nn_version: $v"
echo "test_install: ok"
