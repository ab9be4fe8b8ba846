#!/usr/bin/env bash
# tests/cli/test_bad_steps_resume.sh: the count of non-finite updates in a row (bad_steps,
# stopped at train.max_bad_steps) is part of last.mha's training state, and --resume restores
# it: a diverging run (train.lr=1e6, no clipping: updates 3 on are non-finite) stopped in the
# middle of its streak and resumed stops at the same update, with the same count and the same
# metrics.jsonl, as the run that was never interrupted. A resume that starts the count again
# from 0 trains non-finite updates past the limit.
source "$(dirname "$0")/lib.sh" "$@"
tiny_config "$TMP/c.json" "$TMP/full" 1
div=(--set train.lr=1e6 --set train.clip_norm=0 --set train.max_bad_steps=4)
diverged() { grep -o 'training diverged: [0-9]* non-finite updates in a row at update [0-9]*' "$1"; }
trains() { grep '"type":"train"' "$1/metrics.jsonl"; }
rc=0; "$TRAIN" --config "$TMP/c.json" "${div[@]}" --quiet >/dev/null 2>"$TMP/full.err" || rc=$?
want=$(diverged "$TMP/full.err")
[ "$rc" = 1 ] && [ -n "$want" ] || { cat "$TMP/full.err"; fail "uninterrupted run: exit $rc, expected 1 with 'training diverged'"; finish; }
last=$(sed 's/.* at update //' <<<"$want")   # the update it stopped at (6 here: 3, 4, 5, 6 skipped)
for stop in $((last - 2)) $((last - 1)); do   # stopped with 2, then 3, skipped updates in a row
  tiny_config "$TMP/c$stop.json" "$TMP/part$stop" 1
  "$TRAIN" --config "$TMP/c$stop.json" "${div[@]}" --quiet --max-steps "$stop" >/dev/null 2>"$TMP/p$stop.err" \
    || { cat "$TMP/p$stop.err"; fail "run stopped at update $stop failed"; continue; }
  trains "$TMP/part$stop" | tail -1 | grep -q "\"update\":$stop,.*\"skipped\":true" \
    || fail "the run stopped at update $stop is not in a streak of skipped updates: $(trains "$TMP/part$stop" | tail -1)"
  rc=0; "$TRAIN" --resume "$TMP/part$stop/last.mha" --quiet >/dev/null 2>"$TMP/r$stop.err" || rc=$?
  got=$(diverged "$TMP/r$stop.err")
  [ "$rc" = 1 ] && [ "$got" = "$want" ] \
    || fail "resumed at update $stop: exit $rc, '${got:-no divergence}'; the uninterrupted run: '$want' (bad_steps not restored by --resume?)"
  # the warnings count on from the stored streak: update stop+1 is number stop-1 in a row
  grep -q "warning: update $((stop + 1)): .*update skipped ($((stop - 1)) in a row)" "$TMP/r$stop.err" \
    || fail "resumed at update $stop: update $((stop + 1)) not counted as skipped update $((stop - 1)) in a row: $(grep warning "$TMP/r$stop.err" | head -1)"
  [ "$(trains "$TMP/full")" = "$(trains "$TMP/part$stop")" ] \
    || fail "resumed at update $stop: metrics.jsonl's train records differ from the uninterrupted run's: $(diff <(trains "$TMP/full") <(trains "$TMP/part$stop") | head -4)"
done
finish
