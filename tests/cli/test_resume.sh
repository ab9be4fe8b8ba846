#!/usr/bin/env bash
# tests/cli/test_resume.sh: a run stopped after N updates and resumed from last.mha produces
# exactly the losses of an uninterrupted run (same batches, dropout masks and AdamW state),
# also when stopped mid-epoch; Ctrl-C (SIGINT) saves last.mha and exits 130.
source "$(dirname "$0")/lib.sh" "$@"
tiny_config "$TMP/c.json" "$TMP/full"
"$TRAIN" --config "$TMP/c.json" --quiet >/dev/null 2>"$TMP/full.err" || { cat "$TMP/full.err"; fail "full run failed"; }
for stop in 17 41; do   # mid-epoch and after the first epoch (41 updates per epoch at batch 16)
  tiny_config "$TMP/c$stop.json" "$TMP/part$stop"
  "$TRAIN" --config "$TMP/c$stop.json" --quiet --max-steps $stop >/dev/null 2>"$TMP/p.err" || { cat "$TMP/p.err"; fail "partial run failed"; }
  n=$(grep -c '"type":"train"' "$TMP/part$stop/metrics.jsonl")
  [ "$n" = "$stop" ] || fail "stopped run logged $n updates, expected $stop"
  "$TRAIN" --resume "$TMP/part$stop/last.mha" --quiet >/dev/null 2>"$TMP/r.err" || { cat "$TMP/r.err"; fail "resume failed"; }
  a=$(grep '"type":"train"' "$TMP/full/metrics.jsonl" | sed 's/.*"loss":\([^,]*\),.*/\1/')
  b=$(grep '"type":"train"' "$TMP/part$stop/metrics.jsonl" | sed 's/.*"loss":\([^,]*\),.*/\1/')
  [ -n "$a" ] && [ "$a" = "$b" ] || fail "losses after resuming at $stop differ from the uninterrupted run: $(diff <(echo "$a") <(echo "$b") | head -5)"
  # the best models must be the same parameters: identical probabilities on dev
  cmp -s <("$PREDICT" --model "$TMP/full/model.mha" data/sample/dev.tsv) <("$PREDICT" --model "$TMP/part$stop/model.mha" data/sample/dev.tsv) \
    || fail "model.mha after resuming at $stop predicts differently from the uninterrupted run"
done
# SIGINT: saves last.mha, exits 130, and the run resumes.
tiny_config "$TMP/ci.json" "$TMP/int" 200
"$TRAIN" --config "$TMP/ci.json" --quiet >/dev/null 2>"$TMP/int.err" &
pid=$!
for _ in $(seq 100); do [ -s "$TMP/int/metrics.jsonl" ] && break; sleep 0.1; done
sleep 0.3
kill -INT $pid
rc=0; wait $pid || rc=$?
[ "$rc" = 130 ] || fail "SIGINT exit status $rc, expected 130: $(cat "$TMP/int.err")"
grep -q "interrupted" "$TMP/int.err" || fail "no 'interrupted' message"
"$PREDICT" --model "$TMP/int/last.mha" - <<<"测试一下" >/dev/null || fail "last.mha after SIGINT does not load"
# A second trainer on the same folder is refused while the first holds the lock.
"$TRAIN" --resume "$TMP/int/last.mha" --quiet >/dev/null 2>&1 &
pid=$!
sleep 1
expect_exit 1 "another mha-train" "$TRAIN" --resume "$TMP/int/last.mha" --quiet
kill -INT $pid; wait $pid || true
finish
