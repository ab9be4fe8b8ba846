#!/usr/bin/env bash
# tests/cli/test_fs_errors.sh: file systems that lack flock or fsync, through an LD_PRELOAD
# shim (fail_syscalls.c, the third argument) that makes the call fail with a chosen errno.
#  - flock failing with ENOLCK (NFS without a lock manager) is said as what it is (cannot
#    lock, the reason, what to do), not as "another mha-train is writing to this folder",
#    which only EWOULDBLOCK means;
#  - fsync failing with EINVAL or ENOTSUP (a file system that cannot sync) does not fail the
#    saves: the run finishes and its checkpoints load; an fsync that fails with EIO still does,
#    and the message says the previous checkpoint is untouched only when there was one (and
#    no line or log record says that a model.mha it failed to write was saved);
#  - the output folder moved (and a new one made at its path) between the trainer's check
#    and the save: the checkpoint lands in the run's own folder, never in the new one.
source "$(dirname "$0")/lib.sh" "$@"
SHIM=$(realpath "$3")
# under AddressSanitizer its runtime is not first in the list of libraries once the shim is
# preloaded: that is fine here (the shim replaces no function it intercepts)
export ASAN_OPTIONS="${ASAN_OPTIONS:-}:verify_asan_link_order=0"
shim() { LD_PRELOAD="$SHIM" "$@"; }
tiny_config "$TMP/c.json" "$TMP/run" 1
out=$(MHA_FAKE_FLOCK_ERRNO=37 shim "$TRAIN" --config "$TMP/c.json" --quiet 2>&1 >/dev/null); rc=$?   # 37: ENOLCK
[ "$rc" = 1 ] || fail "flock ENOLCK: exit $rc, expected 1: $out"
grep -q "cannot lock .*/.lock (No locks available); .*file system that supports flock" <<<"$out" \
  || fail "flock ENOLCK: no message naming the failed lock and its reason: $out"
grep -q "another mha-train" <<<"$out" && fail "flock ENOLCK reported as another mha-train: $out"
for e in 22 95; do   # EINVAL, ENOTSUP
  rm -rf "$TMP/run"
  out=$(MHA_FAKE_FSYNC_ERRNO=$e shim "$TRAIN" --config "$TMP/c.json" --quiet 2>&1 >/dev/null); rc=$?
  [ "$rc" = 0 ] || fail "fsync errno $e: exit $rc, expected 0 (the file system cannot sync; the file is whole): $out"
  "$PREDICT" --model "$TMP/run/model.mha" - <<<"一行" >/dev/null 2>&1 || fail "fsync errno $e: model.mha does not load"
done
rm -rf "$TMP/run"
out=$(MHA_FAKE_FSYNC_ERRNO=5 shim "$TRAIN" --config "$TMP/c.json" --quiet 2>&1 >/dev/null); rc=$?   # EIO
[ "$rc" = 1 ] || fail "fsync EIO: exit $rc, expected 1: $out"
grep -q "cannot write checkpoint (Input/output error)" <<<"$out" || fail "fsync EIO: no error: $out"
grep -q "untouched" <<<"$out" && fail "fsync EIO with no earlier checkpoint says one is untouched: $out"
# the failed save was the first model.mha: neither the dev line nor the log says it was saved
rm -rf "$TMP/run"
out=$(MHA_FAKE_FSYNC_ERRNO=5 shim "$TRAIN" --config "$TMP/c.json" 2>&1 >/dev/null)
grep -q "saved model.mha" <<<"$out" && fail "fsync EIO: the dev line says model.mha was saved: $out"
grep -q '"best":true' "$TMP/run/metrics.jsonl" && fail "fsync EIO: metrics.jsonl marks a best model that was not saved"
tiny_config "$TMP/c2.json" "$TMP/run2" 2   # 41 updates an epoch: model.mha and last.mha after the first
"$TRAIN" --config "$TMP/c2.json" --quiet --max-steps 42 >/dev/null 2>&1 || fail "a run without the shim failed"
out=$(MHA_FAKE_FSYNC_ERRNO=5 shim "$TRAIN" --resume "$TMP/run2/last.mha" --quiet 2>&1 >/dev/null); rc=$?
[ "$rc" = 1 ] && grep -q "the previous .*untouched" <<<"$out" || fail "fsync EIO over an earlier checkpoint: exit $rc: $out"

rm -rf "$TMP/run" "$TMP/run-moved"
out=$(MHA_FAKE_MOVE_DIR="$TMP/run" shim "$TRAIN" --config "$TMP/c.json" --quiet 2>&1 >/dev/null); rc=$?
[ -d "$TMP/run-moved" ] || fail "the shim did not move the folder (no checkpoint save went through openat?): $out"
[ -z "$(ls -A "$TMP/run")" ] || fail "folder moved during a save: the run wrote into the new folder at its path: $(ls -A "$TMP/run")"
saved=$(ls "$TMP/run-moved/"*.mha 2>/dev/null | head -1)   # the first save: model.mha (a new best)
[ -n "$saved" ] && "$PREDICT" --model "$saved" - <<<"一行" >/dev/null 2>&1 \
  || fail "folder moved during a save: the checkpoint is not in the run's own folder: $(ls -A "$TMP/run-moved")"
[ "$rc" = 1 ] && grep -q "the output folder was moved or replaced while this run was training" <<<"$out" \
  || fail "folder moved during a save: exit $rc, expected 1 and a message at the next save: $out"
finish
