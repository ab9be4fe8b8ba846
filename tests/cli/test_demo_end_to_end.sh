#!/usr/bin/env bash
# tests/cli/test_demo_end_to_end.sh: trains configs/demo.json (the sample data shipped in
# data/sample) end to end and asserts the dev and test accuracy stay above a floor; then
# mha-predict --eval agrees with the trainer's own test report.
source "$(dirname "$0")/lib.sh" "$@"
FLOOR=0.80
"$TRAIN" --config configs/demo.json --set output.dir="$TMP/demo" --set train.threads=1 --quiet >"$TMP/train.out" 2>"$TMP/train.err" \
  || { cat "$TMP/train.err"; fail "demo training failed"; finish; }
[ -s "$TMP/demo/model.mha" ] || fail "no model.mha"
[ -s "$TMP/demo/last.mha" ] || fail "no last.mha"
best_dev=$(grep '"type":"dev"' "$TMP/demo/metrics.jsonl" | sed 's/.*"accuracy":\([0-9.e-]*\).*/\1/' | sort -g | tail -1)
echo "best dev accuracy $best_dev"
awk -v a="$best_dev" -v f=$FLOOR 'BEGIN{exit !(a >= f)}' || fail "dev accuracy $best_dev below $FLOOR"
json=$("$PREDICT" --model "$TMP/demo/model.mha" --eval data/sample/test.tsv --json)
acc=$(sed 's/.*"accuracy":\([0-9.e-]*\).*/\1/' <<<"$json")
echo "test accuracy $acc"
awk -v a="$acc" -v f=$FLOOR 'BEGIN{exit !(a >= f)}' || fail "test accuracy $acc below $FLOOR"
trainer_acc=$(grep '"type":"test"' "$TMP/demo/metrics.jsonl" | sed 's/.*"accuracy":\([0-9.e-]*\).*/\1/')
awk -v a="$acc" -v b="$trainer_acc" 'BEGIN{d=a-b; exit !(d < 1e-9 && d > -1e-9)}' \
  || fail "mha-predict --eval accuracy $acc differs from the trainer's test accuracy $trainer_acc"
finish
