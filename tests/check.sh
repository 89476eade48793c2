# Sourced by the shell tests: `check NAME EXPR` counts EXPR's truth (eval'd,
# so $? of the command before it is still there) and names what failed;
# `check_done` prints ctest's "N passed, N failed" line and returns non-zero
# on any failure (make it the script's last command).
passed=0
failed=0
check() { if eval "$2"; then passed=$((passed + 1)); else failed=$((failed + 1)); echo "FAILED: $1" >&2; fi; }
check_done() { echo "$passed passed, $failed failed"; [ "$failed" -eq 0 ]; }
