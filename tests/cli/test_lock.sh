#!/usr/bin/env bash
# tests/cli/test_lock.sh: one mha-train per output folder. While a run holds OUT/.lock a
# second run on the same folder (--config or --resume) is refused with exit 1 before it
# touches anything, and the first run finishes with all its records; a run on another
# folder is not affected; after SIGKILL the lock is gone with the process, so --resume
# starts at once even though OUT/.lock is still there.
source "$(dirname "$0")/lib.sh" "$@"
tiny_config "$TMP/a.json" "$TMP/a" 5000   # long enough to outlive the checks; stopped with SIGINT
tiny_config "$TMP/b.json" "$TMP/b" 1
"$TRAIN" --config "$TMP/a.json" --quiet >/dev/null 2>"$TMP/a.err" &
pid=$!
for _ in $(seq 200); do [ -s "$TMP/a/last.mha" ] && break; sleep 0.05; done
[ -s "$TMP/a/last.mha" ] || fail "the first run wrote no last.mha"
kill -0 $pid 2>/dev/null || fail "the first run ended too early for this test: $(tail -3 "$TMP/a.err")"
expect_exit 1 "another mha-train is writing to this folder" "$TRAIN" --config "$TMP/a.json" --quiet
expect_exit 1 "another mha-train is writing to this folder" "$TRAIN" --resume "$TMP/a/last.mha" --quiet
# the same folder spelled differently is the same lock
expect_exit 1 "another mha-train" "$TRAIN" --config "$TMP/a.json" --set output.dir="$TMP/./a/" --quiet
# another folder trains meanwhile
"$TRAIN" --config "$TMP/b.json" --quiet >/dev/null 2>"$TMP/b.err" || fail "a run on another folder failed: $(tail -3 "$TMP/b.err")"
kill -0 $pid 2>/dev/null || fail "the first run ended before the refusals were checked (make it longer)"
kill -INT $pid
rc=0; wait $pid || rc=$?
[ "$rc" = 130 ] || fail "the first run exited $rc after the refused runs, expected 130 (SIGINT): $(tail -3 "$TMP/a.err")"
# its log holds updates 1, 2, ..., n exactly once: no refused run truncated or wrote it
grep '"type":"train"' "$TMP/a/metrics.jsonl" | sed 's/.*"update":\([0-9]*\),.*/\1/' \
  | awk '$1 != NR {bad=1} END {exit bad || NR == 0}' || fail "the first run's metrics.jsonl was touched by a refused run"
# SIGKILL leaves OUT/.lock behind, but not the lock.
rm -rf "$TMP/a"   # a fresh run: the wait below must see its own last.mha and log, not the last run's
"$TRAIN" --config "$TMP/a.json" --quiet >/dev/null 2>&1 &
pid=$!
for _ in $(seq 200); do [ -s "$TMP/a/last.mha" ] && grep -q '"update":45,' "$TMP/a/metrics.jsonl" 2>/dev/null && break; sleep 0.05; done
kill -KILL $pid; { wait $pid; } 2>/dev/null
[ -e "$TMP/a/.lock" ] || fail "expected the lock file to remain after SIGKILL"
start=$SECONDS
"$TRAIN" --resume "$TMP/a/last.mha" --max-steps 50 --quiet >/dev/null 2>"$TMP/r.err" || fail "--resume after SIGKILL failed: $(tail -3 "$TMP/r.err")"
[ $((SECONDS - start)) -lt 60 ] || fail "--resume after SIGKILL waited for the dead run's lock"
finish
