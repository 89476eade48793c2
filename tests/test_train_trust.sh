#!/usr/bin/env bash
# lazyc train keeps work safe (issue "Trust", items 1 and 5):
# - a NaN/Inf loss or parameter stops the run with exit 3 naming the epoch
#   and step, the last checkpoint stays byte for byte, the summary is valid
#   JSON recording the error;
# - checkpoints and summaries are written to a temporary file, fsync'd,
#   renamed and the directory fsync'd; stale temporary files of dead
#   processes go, a live process's stay; write errors (/dev/full, a file
#   size limit) exit 1 with the old checkpoint intact; unusable paths
#   exit 2 before training;
# - --save-every with a mid-epoch resume (stopped by --max-steps, and by
#   kill -9) equals an uninterrupted run bit for bit; the checkpoint
#   records the schedule, batch and rate: a differing resume warns, more
#   --epochs extends the schedule, nothing left to do exits 0 untouched;
#   batch norm's num_batches_tracked counts the steps.
# usage: test_train_trust.sh LAZYC
set -u
lazyc="$1"
. "$(dirname "$0")/require_fmnist.sh" test_train_trust
py=/usr/bin/python3
[ -x "$py" ] || py=$(command -v python3 || true)
if [ -z "$py" ]; then
    echo "SKIPPED: test_train_trust: needs python3 to read JSON and checkpoints"
    exit 77
fi
. "$(dirname "$0")/check.sh"
tmp="$(mktemp -d)"
trap 'chmod -R u+w "$tmp" 2>/dev/null; rm -rf "$tmp"' EXIT
cd "$tmp" || exit 1

# strict JSON (NaN and Infinity refused); prints the value of a Python
# expression over the object `j`
json() { "$py" - "$1" "$2" <<'EOF'
import json, sys
def bad(c): raise ValueError("not JSON: " + c)
j = json.load(open(sys.argv[1]), parse_constant=bad)
v = eval(sys.argv[2])
print(*v) if isinstance(v, tuple) else print(v)
EOF
}
# a checkpoint's header metadata value, or a check over its tensors:
# "finite" -> True when every F32 is finite; "nbt" -> the set of the
# num_batches_tracked values
ckpt() { "$py" - "$1" "$2" <<'EOF'
import json, math, struct, sys
b = open(sys.argv[1], 'rb').read()
n = struct.unpack('<Q', b[:8])[0]
h = json.loads(b[8:8 + n])
data = b[8 + n:]
what = sys.argv[2]
def values(k, fmt, size):
    s, e = h[k]['data_offsets']
    return struct.unpack('<%d%s' % ((e - s) // size, fmt), data[s:e])
if what == 'finite':
    print(all(math.isfinite(v) for k in h if k != '__metadata__' and h[k]['dtype'] == 'F32'
              for v in values(k, 'f', 4)))
elif what == 'nbt':
    print(sorted({v for k in h if k.endswith('num_batches_tracked') for v in values(k, 'q', 8)}))
else:
    print(h['__metadata__'][what])
EOF
}

small=(--data fashion-mnist --train-limit 1024 --test-limit 200 --batch 128)   # 8 steps per epoch

# ---- A: 2 epochs uninterrupted; every write durable (strace, when present)
if command -v strace >/dev/null && strace -f -o /dev/null true 2>/dev/null; then
    # LeakSanitizer cannot run under ptrace: in a sanitizer build this run
    # alone skips the leak check (the other runs keep it)
    ASAN_OPTIONS="${ASAN_OPTIONS:+$ASAN_OPTIONS:}detect_leaks=0" \
    strace -f -y -e trace=fsync,rename,renameat,renameat2 -o "$tmp/trace" \
        "$lazyc" train "${small[@]}" --epochs 2 --save "$tmp/a.st" --summary "$tmp/a.json" >"$tmp/log" 2>&1
    rc=$?
    # per file: fsync of the temporary file, rename over the target, fsync of the directory
    order() { grep -v "resumed\|exited" "$tmp/trace" | sed 's/^[0-9]* *//' | awk -v f="$tmp/$1" -v d="$tmp" '
        index($0, "fsync(") == 1 && index($0, "<" f ".tmp") { s = 1; next }
        s == 1 && index($0, "rename") == 1 && index($0, "\"" f "\")") { s = 2; next }
        s == 2 && index($0, "fsync(") == 1 && index($0, "<" d ">)") { n++; s = 0 }
        END { print n + 0 }'; }
    check "the checkpoint's 2 saves were fsync'd, renamed, and the directory fsync'd ($(order a.st))" '[ "$(order a.st)" -eq 2 ]'
    check "the summary's writes were fsync'd, renamed, and the directory fsync'd ($(order a.json))" '[ "$(order a.json)" -ge 3 ]'
else
    echo "SKIPPED (part): strace is missing or cannot trace here; fsync order not checked"
    "$lazyc" train "${small[@]}" --epochs 2 --save "$tmp/a.st" --summary "$tmp/a.json" >"$tmp/log" 2>&1
    rc=$?
fi
check "run A exits 0" '[ $rc -eq 0 ] || { tail -5 "$tmp/log" >&2; false; }'
check "no temporary file is left" '! ls "$tmp" | grep -q "\.tmp"'
check "A's summary is valid JSON with status done" '[ "$(json a.json "j[\"status\"], j[\"exit_code\"], j[\"error\"]")" = "done 0 None" ]'
check "A's checkpoint records the run: step 16, 8 steps per epoch, batch 128, lr 0.002, 2-epoch schedule" \
    '[ "$(ckpt a.st step) $(ckpt a.st steps_per_epoch) $(ckpt a.st batch) $(ckpt a.st lr) $(ckpt a.st schedule_epochs)" = "16 8 128 0.002 2" ]'
check "batch norm's num_batches_tracked counts the 16 steps" '[ "$(ckpt a.st nbt)" = "[16]" ]'

# ---- B: stopped mid-epoch by --max-steps after a --save-every save, resumed
"$lazyc" train "${small[@]}" --epochs 2 --save-every 3 --max-steps 5 --save b.st --summary b.json >"$tmp/log" 2>&1
rc=$?
check "B stops after 5 steps, exit 0" '[ $rc -eq 0 ] && grep -q "stopped after 5 steps (--max-steps) at epoch 1, step 5 of 8" "$tmp/log"'
check "B's checkpoint is mid-epoch: epoch 0 done, 5 batches into the next" \
    '[ "$(ckpt b.st epoch) $(ckpt b.st batch_in_epoch) $(ckpt b.st step)" = "0 5 5" ]'
check "B's summary says stopped; no evaluation ran, so its accuracy is null, not NaN" \
    '[ "$(json b.json "j[\"status\"], j[\"test_accuracy\"]")" = "stopped None" ] && grep -q "\"test_accuracy\": null" b.json'
"$lazyc" train "${small[@]}" --epochs 2 --save-every 3 --resume b.st --save b.st --summary b2.json >"$tmp/log" 2>&1
check "B resumes at epoch 1 step 6" '[ $? -eq 0 ] && grep -q "resuming b.st at epoch 1, step 6 of 8" "$tmp/log"'
check "the mid-epoch resume equals the uninterrupted run bit for bit" 'cmp -s a.st b.st'

# ---- K: killed with SIGKILL at some point after its first save, resumed.
# Whenever the kill lands, the resumed run must equal A.
"$lazyc" train "${small[@]}" --epochs 2 --save-every 1 --save k.st --summary k.json >/dev/null 2>&1 &
kpid=$!
for _ in $(seq 600); do [ -s k.st ] && break; sleep 0.05; done
kill -9 $kpid 2>/dev/null
wait $kpid 2>/dev/null
check "K saved before it was killed" '[ -s k.st ]'
check "the summary of a killed run is valid JSON" 'json k.json "j[\"status\"]" >/dev/null'
sh -c 'exit 0' & dead=$!
wait $dead
touch "k.st.tmp$dead" "k.st.tmp$$"     # a dead process's temporary file, and a live one's
"$lazyc" train "${small[@]}" --epochs 2 --save-every 1 --resume k.st --save k.st --summary k2.json >"$tmp/log" 2>&1
check "the killed run resumes, exit 0" '[ $? -eq 0 ] || { tail -3 "$tmp/log" >&2; false; }'
check "the resumed killed run equals the uninterrupted run bit for bit" 'cmp -s a.st k.st'
check "a dead process's temporary files are removed (K's too)" '[ ! -e "k.st.tmp$dead" ] && [ ! -e "k.st.tmp$kpid" ]'
check "a live process's temporary file is left alone" '[ -e "k.st.tmp$$" ]'
rm -f "k.st.tmp$$"

# ---- nothing left to do: exit 0, summary and checkpoint untouched
echo '{"sentinel": 1}' >keep.json
cp a.st a.copy
"$lazyc" train "${small[@]}" --epochs 2 --resume a.st --save a.st --summary keep.json >"$tmp/log" 2>&1
check "a resume with nothing left to do says so and exits 0" '[ $? -eq 0 ] && grep -q "nothing left to do" "$tmp/log"'
check "... and leaves the summary and the checkpoint alone" \
    '[ "$(cat keep.json)" = "{\"sentinel\": 1}" ] && cmp -s a.st a.copy'

# ---- a resume with other settings warns
"$lazyc" train "${small[@]}" --epochs 3 --batch 64 --lr 0.001 --max-steps 1 --resume a.st --summary w.json >"$tmp/log" 2>&1
check "a resume with another --batch and --lr warns about both and runs" \
    '[ $? -eq 0 ] && grep -q "warning: resuming a.st with --batch 64; it was written with 128" "$tmp/log" &&
     grep -q "warning: resuming a.st with --lr 0.001; it was written with 0.002" "$tmp/log"'
"$lazyc" train "${small[@]}" --epochs 3 --max-steps 1 --resume a.st --summary w.json >"$tmp/log" 2>&1
check "a resume with the same settings does not warn" '[ $? -eq 0 ] && ! grep -q warning "$tmp/log"'

# ---- more --epochs extends the schedule: epoch 2 of a run planned for 1
# continues on the 2-epoch cosine (rate 1e-3 at its middle), not past the
# 1-epoch cosine's end (0, then climbing back)
"$lazyc" train "${small[@]}" --epochs 1 --save e.st --summary e.json >/dev/null 2>&1
"$lazyc" train "${small[@]}" --epochs 2 --resume e.st --save e.st --summary e2.json >"$tmp/log" 2>&1
check "extending says how the schedule changes" \
    '[ $? -eq 0 ] && grep -q "extends the checkpoint.s 1-epoch cosine schedule to 2 epochs" "$tmp/log"'
check "the extended epoch starts at rate 1e-3 and decreases" \
    '[ "$(json e2.json "abs(j[\"epochs\"][0][\"lr_first\"] - 1e-3) < 1e-9 and j[\"epochs\"][0][\"lr_last\"] < 1e-4")" = True ]'
check "the new checkpoint records the 2-epoch schedule" '[ "$(ckpt e.st schedule_epochs)" = 2 ]'

# ---- non-finite values: a rate of 10 with weight decay 10 diverges
cp a.st n.st
"$lazyc" train "${small[@]}" --epochs 6 --lr 10 --weight-decay 10 --resume n.st --save n.st --summary n.json >"$tmp/log" 2>&1
rc=$?
check "a diverging run exits 3 (got $rc)" '[ $rc -eq 3 ]'
check "the message names the epoch and step and the untouched checkpoint" \
    'grep -Eq "(at|after) epoch [0-9]+, step [0-9]+ of 8 \(training step [0-9]+\): training stopped; the last checkpoint, n.st \(training step 16\), is untouched" "$tmp/log"'
check "the last good checkpoint is byte for byte what it was" 'cmp -s a.st n.st'
check "the summary is valid JSON recording the error" \
    '[ "$(json n.json "j[\"status\"], j[\"exit_code\"], \"training stopped\" in j[\"error\"], j[\"nonfinite_at\"][\"epoch\"] >= 3")" = "nonfinite 3 True True" ]'
"$lazyc" train "${small[@]}" --epochs 3 --lr 10 --weight-decay 10 --summary l.json >"$tmp/log" 2>&1
rc=$?
check "a NaN loss stops the run with exit 3, naming where (got $rc)" \
    '[ $rc -eq 3 ] && grep -Eq "the loss is (nan|inf|-inf) at epoch [0-9]+, step [0-9]+ of 8" "$tmp/log"'
check "a NaN loss is recorded in valid JSON, the epoch's mean as null or a number" \
    '[ "$(json l.json "j[\"status\"]")" = nonfinite ] && ! grep -Eqi ": -?(nan|inf|infinity)[,}]" l.json'
"$lazyc" train "${small[@]}" --epochs 3 --lr 10 --weight-decay 10 --save-every 1 --save s1.st --summary s1.json >"$tmp/log" 2>&1
rc=$?
check "saving every step, the run still stops with exit 3" '[ $rc -eq 3 ]'
check "... and every value in the last checkpoint it wrote is finite" '[ -s s1.st ] && [ "$(ckpt s1.st finite)" = True ]'

# ---- write errors
"$lazyc" train "${small[@]}" --epochs 1 --summary /dev/full >"$tmp/log" 2>&1
check "a summary on /dev/full exits 1 before training" \
    '[ $? -eq 1 ] && grep -q "/dev/full: write failed: No space left on device" "$tmp/log" && ! grep -q "^epoch 1:" "$tmp/log"'
"$lazyc" train "${small[@]}" --epochs 1 --save /dev/full --summary full.json >"$tmp/log" 2>&1
check "a checkpoint on /dev/full exits 1 with the reason" \
    '[ $? -eq 1 ] && grep -q "cannot save the checkpoint: .*/dev/full: write failed: No space left on device" "$tmp/log"'
check "... /dev/full is still a device and the summary records the error" \
    '[ -c /dev/full ] && [ "$(json full.json "j[\"status\"], j[\"exit_code\"]")" = "failed 1" ]'
cp a.st u.st
# a file size limit of 400 KiB: the summary fits, the 600 KB checkpoint does not
( trap '' XFSZ; ulimit -f 400; exec "$lazyc" train "${small[@]}" --epochs 3 --resume u.st --save u.st --summary u.json ) >"$tmp/log" 2>&1
check "a failed checkpoint write exits 1 and says the file is as it was" \
    '[ $? -eq 1 ] && grep -q "u.st: write failed: File too large (the file is as it was)" "$tmp/log"'
check "... the previous checkpoint is intact and no temporary file is left" \
    'cmp -s a.st u.st && ! ls | grep -q "^u.st.tmp"'

# ---- unusable paths are found before training
touch afile
"$lazyc" train "${small[@]}" --save afile/x.st --summary p.json >"$tmp/log" 2>&1
check "a --save under a regular file exits 2 before training" \
    '[ $? -eq 2 ] && grep -q "\-\-save afile/x.st: Not a directory" "$tmp/log" && [ ! -e p.json ]'
"$lazyc" train "${small[@]}" --save "$tmp" --summary p.json >"$tmp/log" 2>&1
check "a --save that is a directory exits 2" '[ $? -eq 2 ] && grep -q "is a directory" "$tmp/log"'
"$lazyc" train "${small[@]}" --save-every 2 --summary p.json >"$tmp/log" 2>&1
check "--save-every without --save exits 2" '[ $? -eq 2 ] && grep -q "needs --save" "$tmp/log"'
"$lazyc" train "${small[@]}" --summary "$tmp/new/deeper/s.json" --epochs 1 --test-limit 100 >/dev/null 2>&1
check "missing output directories are made" '[ -s "$tmp/new/deeper/s.json" ]'
mkdir ro && chmod 555 ro
as_user=()
if [ "$(id -u)" = 0 ]; then
    # root writes anywhere: run as nobody, who cannot
    if command -v setpriv >/dev/null; then
        chmod 755 "$tmp"
        as_user=(setpriv --reuid=65534 --regid=65534 --clear-groups)
    else
        as_user=(skip)
    fi
fi
if [ "${as_user[0]:-}" = skip ]; then
    echo "SKIPPED (part): running as root without setpriv, a write-protected directory cannot be tested"
else
    "${as_user[@]}" "$lazyc" train "${small[@]}" --save "$tmp/ro/c.st" --summary "$tmp/ro/s.json" >"$tmp/log" 2>&1
    check "a write-protected directory exits 2 before training, saying why" \
        '[ $? -eq 2 ] && grep -q "ro/s.json: cannot create a file beside it: Permission denied" "$tmp/log" && ! grep -q "^epoch" "$tmp/log"'
fi

check_done
