#!/usr/bin/env bash
# tests/cli/test_disk_full.sh: a full disk never costs a checkpoint and is never silent.
#  - /dev/full (always): predictions, the --eval report and mha-train's test report written
#    to a full device are an error (exit 1) naming ENOSPC; metrics.jsonl on a full device is
#    a warning and training goes on (the checkpoints are the state that matters).
#  - tmpfs (needs a private mount namespace: `unshare -m` as root, else `unshare -rm`;
#    skipped with a message where neither can mount): the output folder on a 6 MiB tmpfs,
#    filled up to leave less room than a checkpoint, then filled completely. The checkpoint
#    write fails with a clear error and exit 1, the previous last.mha and model.mha stay
#    byte for byte the same and load, no temporary file is left, and once space is freed
#    --resume finishes the run.
source "$(dirname "$0")/lib.sh" "$@"
tiny_config "$TMP/c.json" "$TMP/run" 1
"$TRAIN" --config "$TMP/c.json" --quiet >/dev/null 2>"$TMP/e" || { cat "$TMP/e"; fail "training failed"; finish; }
M=$TMP/run/model.mha

# to_full WANT PATTERN CMD...: CMD with stdout on /dev/full exits WANT, stderr matches PATTERN.
to_full() {
  local want=$1 pattern=$2; shift 2
  local out rc=0
  out=$("$@" 2>&1 >/dev/full) || rc=$?
  [ "$rc" = "$want" ] || fail "'$*' >/dev/full exited $rc, expected $want: $out"
  grep -qE -- "$pattern" <<<"$out" || fail "'$*' >/dev/full: stderr lacks /$pattern/: $out"
}
cut -f2 data/sample/dev.tsv >"$TMP/plain.txt"
to_full 1 "cannot write predictions to standard output \(No space left on device\)" "$PREDICT" --model "$M" "$TMP/plain.txt"
to_full 1 "cannot write predictions to standard output \(No space left on device\)" "$PREDICT" --model "$M" --format jsonl - <<<"一行"
to_full 1 "cannot write to standard output \(No space left on device\)" "$PREDICT" --model "$M" --eval data/sample/dev.tsv
tiny_config "$TMP/r.json" "$TMP/rep" 1
to_full 1 "cannot write the report to standard output \(No space left on device\)" "$TRAIN" --config "$TMP/r.json" --quiet
"$PREDICT" --model "$TMP/rep/model.mha" - <<<"一行" >/dev/null || fail "model.mha of the run whose report failed does not load"
mkdir -p "$TMP/m"
ln -s /dev/full "$TMP/m/metrics.jsonl"
tiny_config "$TMP/m.json" "$TMP/m" 1
out=$("$TRAIN" --config "$TMP/m.json" --max-steps 3 --quiet 2>&1 >/dev/null) || fail "a run whose metrics.jsonl is on a full device failed: $out"
grep -q "warning: cannot write .*metrics.jsonl (No space left on device)" <<<"$out" || fail "no warning about metrics.jsonl: $out"
[ "$(grep -c "metrics.jsonl" <<<"$out")" = 1 ] || fail "the metrics warning should come once: $out"
"$PREDICT" --model "$TMP/m/last.mha" - <<<"一行" >/dev/null || fail "last.mha of that run does not load"

# metrics.jsonl cut short mid-record (a file size limit: the write stops at the limit, as on a
# disk that fills up mid-line): the partial record is cut back off, so the file holds whole
# lines only and last.mha records its size, not -1 (before: the torn half-line stayed, to be
# joined by a later record, and every later save recorded the size as unknown). A model of a
# few hundred parameters, so that its checkpoints fit under the 8 KiB limit and the log does not.
cat >"$TMP/t.json" <<JSON
{"data": {"train": "$PWD/data/sample/train.tsv", "max_len": 8, "max_vocab": 4},
 "model": {"d_model": 4, "n_heads": 1, "d_ff": 4, "n_layers": 0},
 "train": {"epochs": 1, "batch_size": 1, "threads": 1},
 "output": {"dir": "$TMP/torn"}}
JSON
out=$( (ulimit -f 8; "$TRAIN" --config "$TMP/t.json" --max-steps 200 --quiet 2>&1 >/dev/null) ) \
  || fail "a run whose metrics.jsonl reaches the file size limit failed: $out"
[ "$(grep -c "warning: cannot write .*metrics.jsonl (File too large)" <<<"$out")" = 1 ] || fail "metrics.jsonl over the limit: not one warning: $out"
size=$(stat -c %s "$TMP/torn/metrics.jsonl")
[ "$size" -gt 0 ] && [ "$size" -le 8192 ] || fail "metrics.jsonl is $size bytes"
[ -z "$(tail -c 1 "$TMP/torn/metrics.jsonl" | tr -d '\n')" ] || fail "metrics.jsonl ends in a partial record: $(tail -c 80 "$TMP/torn/metrics.jsonl")"
grep -vqx '{"type":"train".*}' "$TMP/torn/metrics.jsonl" && fail "metrics.jsonl holds a torn line: $(grep -vx '{"type":"train".*}' "$TMP/torn/metrics.jsonl" | head -2)"
saved=$(grep -ao '"metrics_bytes":[[:space:]]*[-0-9]*' "$TMP/torn/last.mha" | grep -o '[-0-9]*$')
[ "$saved" = "$size" ] || fail "last.mha records metrics.jsonl as $saved bytes, the file has $size"
"$TRAIN" --resume "$TMP/torn/last.mha" --max-steps 210 --quiet >/dev/null 2>&1 || fail "--resume after the torn log failed"
grep -vqx '{"type":"train".*}' "$TMP/torn/metrics.jsonl" && fail "metrics.jsonl after --resume holds a torn line"

# The tmpfs scenario, in a private mount namespace (the mount vanishes with it).
tmpfs_scenario() {
  D=$TMP/disk
  mkdir -p "$D"
  if ! mount -t tmpfs -o size=6m tmpfs "$D" 2>"$TMP/mount.err"; then
    echo "SKIP tmpfs: cannot mount ($(cat "$TMP/mount.err"))"
    return 0
  fi
  tiny_config "$TMP/d.json" "$D/run" 3
  "$TRAIN" --config "$TMP/d.json" --max-steps 45 --quiet >/dev/null 2>"$TMP/d1.err" || fail "first run on tmpfs failed: $(tail -3 "$TMP/d1.err")"
  [ -f "$D/run/model.mha" ] && [ -f "$D/run/last.mha" ] || { fail "first run left no checkpoints"; return 0; }
  cp "$D/run/model.mha" "$TMP/model.before"
  cp "$D/run/last.mha" "$TMP/last.before"
  local ck; ck=$(stat -c %s "$D/run/model.mha")
  # 1. less room than a checkpoint: the next save fails part-way
  dd if=/dev/zero of="$D/fill" bs=64k status=none 2>/dev/null
  truncate -s "-$((ck / 2))" "$D/fill"
  expect_exit 1 "cannot write checkpoint \(No space left on device\); the previous .* is untouched" \
    "$TRAIN" --resume "$D/run/last.mha" --quiet
  # 2. no room at all: metrics.jsonl too
  dd if=/dev/zero of="$D/fill" bs=4k oflag=append conv=notrunc status=none 2>/dev/null
  local out rc=0
  out=$("$TRAIN" --resume "$D/run/last.mha" --max-steps 50 --quiet 2>&1 >/dev/null) || rc=$?
  [ "$rc" = 1 ] || fail "resume on a full disk exited $rc, expected 1: $out"
  grep -q "cannot write checkpoint (No space left on device)" <<<"$out" || fail "no checkpoint error on a full disk: $out"
  # (metrics.jsonl: the resume first drops the records step 1's run wrote after its last save,
  # which frees room for this run's few; without that, its writes fail with a warning)
  grep -qE "warning: cannot write .*metrics.jsonl|removed [0-9]+ records written after last.mha was saved" <<<"$out" \
    || fail "neither a metrics warning nor the dropped records on a full disk: $out"
  for f in model last; do
    cmp -s "$D/run/$f.mha" "$TMP/$f.before" || fail "$f.mha changed although its write failed"
    "$PREDICT" --model "$D/run/$f.mha" - <<<"一行" >/dev/null || fail "$f.mha does not load after the failed writes"
  done
  local left; left=$(compgen -G "$D/run/.*.tmp.*" || true)
  [ -z "$left" ] || fail "temporary files left after the failed writes: $left"
  # 3. space again: the run finishes
  rm -f "$D/fill"
  "$TRAIN" --resume "$D/run/last.mha" --quiet >/dev/null 2>"$TMP/d3.err" || fail "resume after freeing space failed: $(tail -3 "$TMP/d3.err")"
  grep -q "training done" "$TMP/d3.err" || fail "the resumed run did not finish: $(tail -3 "$TMP/d3.err")"
  "$PREDICT" --model "$D/run/model.mha" - <<<"一行" >/dev/null || fail "final model.mha does not load"
  umount "$D" 2>/dev/null || true
  echo "tmpfs: checked (checkpoint $ck bytes, disk 6 MiB)"
}
ns=()
if unshare -m true 2>/dev/null; then ns=(unshare -m)
elif unshare -rm true 2>/dev/null; then ns=(unshare -rm)
fi
if [ ${#ns[@]} -eq 0 ]; then
  echo "SKIP tmpfs: no private mount namespace here (unshare -m / -rm refused); /dev/full cases only"
else
  export TRAIN PREDICT TMP PWD
  "${ns[@]}" bash -c "$(declare -f tmpfs_scenario fail expect_exit tiny_config finish); FAILS=0; cd '$PWD'; tmpfs_scenario; finish" \
    || fail "the tmpfs scenario failed (see above)"
fi
finish
