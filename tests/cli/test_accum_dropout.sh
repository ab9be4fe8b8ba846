#!/usr/bin/env bash
# tests/cli/test_accum_dropout.sh: with train.grad_accum > 1 every micro-batch draws its own
# dropout stream (the trainer seeds it with the micro-batch's index, update * grad_accum + k),
# so the micro-batches of one update do not share masks. Shown with the parameters frozen
# (train.lr=1e-30 moves no weight), unbucketed full batches and heavy dropout: an update of 2
# micro-batches has the mean loss of the 2 grad_accum=1 updates over the same batches, which
# draw different streams. Micro-batches seeded by the update alone (one mask for the update)
# or by update * grad_accum (k ignored) give other losses.
source "$(dirname "$0")/lib.sh" "$@"
field() { sed "s/.*\"$1\":\([^,}]*\).*/\1/"; }
losses() { grep '"type":"train"' "$1/metrics.jsonl" | field loss; }
tiny_config "$TMP/c.json" "$TMP/unused" 1
# 654 examples in unbucketed batches of 16: the first 40 are full, so the 2 micro-batches of
# each of the first updates weigh the same
common=(--config "$TMP/c.json" --set train.lr=1e-30 --set data.bucket=false --set train.batch_size=16
        --set model.dropout=0.5 --set model.attn_dropout=0.3 --quiet)
"$TRAIN" "${common[@]}" --set output.dir="$TMP/one" --max-steps 8 >/dev/null 2>"$TMP/one.err" \
  || { cat "$TMP/one.err"; fail "grad_accum=1 run failed"; finish; }
"$TRAIN" "${common[@]}" --set output.dir="$TMP/two" --set train.grad_accum=2 --max-steps 4 >/dev/null 2>"$TMP/two.err" \
  || { cat "$TMP/two.err"; fail "grad_accum=2 run failed"; finish; }
mapfile -t one < <(losses "$TMP/one")
mapfile -t two < <(losses "$TMP/two")
[ "${#one[@]}" = 8 ] && [ "${#two[@]}" = 4 ] || fail "${#one[@]} and ${#two[@]} train records, expected 8 and 4"
# dropout matters here: the 8 single-batch losses all differ (none of them repeats a mask and a batch)
[ "$(printf '%s\n' "${one[@]}" | sort -u | wc -l)" = 8 ] || fail "grad_accum=1 losses repeat: ${one[*]}"
for u in 0 1 2 3; do
  a=${one[$((2 * u))]} b=${one[$((2 * u + 1))]} got=${two[$u]}
  awk -v a="$a" -v b="$b" -v g="$got" 'BEGIN { w = (a + b) / 2; d = g - w; if (d < 0) d = -d; exit !(d <= 1e-6 * w) }' \
    || fail "update $((u + 1)) of grad_accum=2: loss $got, but its micro-batches alone (grad_accum=1 updates" \
            "$((2 * u + 1)) and $((2 * u + 2))) have $a and $b (mean $(awk -v a="$a" -v b="$b" 'BEGIN{printf "%.9g", (a + b) / 2}')):" \
            "the micro-batches of an update do not draw the dropout streams of their own index"
done
finish
