#!/usr/bin/env bash
# Prints the path of a Python virtual environment's interpreter, creating the
# environment first when it is missing: `scripts/pyenv.sh torch` or
# `scripts/pyenv.sh jax` (the pinned sets in scripts/pyenv/NAME.txt).
#
# Environments live under the user's cache, never in the repository:
# ${XDG_CACHE_HOME:-~/.cache}/lazyc/venv/NAME-HASH, HASH taken from the pinned
# list, so a change to the pins makes a new one and an old one is reused as
# long as the pins stand. A half-finished install (no network, disk full) is
# not taken for a finished one: the folder counts only once its ".complete"
# file is written. LZ_PYENV_DIR=DIR puts them elsewhere.
set -euo pipefail
name="${1:-}"
here="$(cd "$(dirname "$0")" && pwd)"
pins="$here/pyenv/$name.txt"
if [ -z "$name" ] || [ ! -f "$pins" ]; then
  echo "pyenv: usage: scripts/pyenv.sh NAME, NAME one of: $(cd "$here/pyenv" && ls *.txt | sed 's/\.txt$//' | tr '\n' ' ')" >&2
  exit 2
fi
root="${LZ_PYENV_DIR:-${XDG_CACHE_HOME:-$HOME/.cache}/lazyc/venv}"
hash="$(sha256sum "$pins" | cut -c1-12)"
env="$root/$name-$hash"
if [ -f "$env/.complete" ]; then
  echo "$env/bin/python"
  exit 0
fi

# Two callers at once (parallel tests, a benchmark) wait for one install
# instead of removing each other's half-made folder.
mkdir -p "$root"
exec 9>"$root/$name-$hash.lock"
flock 9
if [ -f "$env/.complete" ]; then
  echo "$env/bin/python"
  exit 0
fi

# Debian's interpreter: its venv module comes from python3-venv, which
# scripts/setup.sh installs.
py=/usr/bin/python3
[ -x "$py" ] || py="$(command -v python3)"
if ! "$py" -c 'import venv, ensurepip' 2>/dev/null; then
  echo "pyenv: $py has no venv/ensurepip module; install Debian's python3-venv (scripts/setup.sh does)" >&2
  exit 1
fi

echo "pyenv: creating $env from $pins (once; several GB for torch)" >&2
rm -rf "$env"
"$py" -m venv "$env" >&2
log="$env/install.log"
t0=$(date +%s)
if ! "$env/bin/pip" install --disable-pip-version-check -q -r "$pins" >"$log" 2>&1; then
  echo "pyenv: installing $pins failed (last lines of $log below)." >&2
  if grep -qiE 'connection|resolve|network|timed out|no matching distribution' "$log"; then
    echo "pyenv: PyPI looks unreachable from here: this environment needs the network once; run again when it is back." >&2
  fi
  tail -5 "$log" >&2
  exit 1
fi
touch "$env/.complete"
echo "pyenv: $name ready in $(( $(date +%s) - t0 )) s" >&2
echo "$env/bin/python"
