#!/usr/bin/env bash
# tests/cli/test_predict_io.sh: mha-predict output formats, order, stdin streaming,
# training-format input (label ignored), empty lines, --eval --json keys.
source "$(dirname "$0")/lib.sh" "$@"
tiny_config "$TMP/c.json" "$TMP/m" 1
"$TRAIN" --config "$TMP/c.json" --quiet >/dev/null 2>"$TMP/e" || { cat "$TMP/e"; fail "train failed"; finish; }
M="$TMP/m/model.mha"
cut -f2 data/sample/dev.tsv >"$TMP/plain.txt"
n=$(wc -l <"$TMP/plain.txt")
"$PREDICT" --model "$M" "$TMP/plain.txt" >"$TMP/p1" || fail "predict on a file"
[ "$(wc -l <"$TMP/p1")" = "$n" ] || fail "expected $n output lines"
"$PREDICT" --model "$M" - <"$TMP/plain.txt" >"$TMP/p2" || fail "predict on stdin"
cmp -s "$TMP/p1" "$TMP/p2" || fail "stdin and file outputs differ"
"$PREDICT" --model "$M" data/sample/dev.tsv >"$TMP/p3" || fail "predict on TSV input"
cmp -s "$TMP/p1" "$TMP/p3" || fail "labels in the input changed the predictions"
# order: reversed input gives reversed output
tac "$TMP/plain.txt" | "$PREDICT" --model "$M" >"$TMP/p4"
cmp -s <(tac "$TMP/p1") "$TMP/p4" || fail "output order does not follow input order"
awk -F'\t' 'NF != 2 || $2 < 0 || $2 > 1 {bad=1} END {exit bad}' "$TMP/p1" || fail "tsv output is not label<TAB>prob"
"$PREDICT" --model "$M" --top-k 3 "$TMP/plain.txt" | awk -F'\t' 'NF != 6 || $2 < $4 || $4 < $6 {bad=1} END {exit bad}' \
  || fail "--top-k 3 does not give 3 pairs in descending probability"
printf '今天天气很好\n\n\n' | "$PREDICT" --model "$M" >"$TMP/p5"
[ "$(wc -l <"$TMP/p5")" = 3 ] || fail "empty lines must still get one output line each"
"$PREDICT" --model "$M" --format jsonl --top-k 2 "$TMP/plain.txt" | head -1 | grep -qE '^\{"label":"[^"]+","prob":[0-9.e-]+,"top":\[\{' \
  || fail "jsonl output shape"
att=$(printf '好吃的火锅\n' | "$PREDICT" --model "$M" --attention)
grep -q '"tokens":\["好","吃","的","火","锅"\],"attention":\[\[\[\[' <<<"$att" || fail "--attention lacks tokens/attention: ${att:0:200}"
# each attention row (5 keys) sums to 1
row=$(grep -o '"attention":\[\[\[\[[^]]*' <<<"$att" | sed 's/.*\[//')
awk -F, -v r="$row" 'BEGIN{split(r,a,","); s=0; for(i in a) s+=a[i]; exit !(s > 0.999 && s < 1.001)}' || fail "attention row '$row' does not sum to 1"
cmp -s <(printf '好吃的火锅\n' | "$PREDICT" --model "$M" --format jsonl | cut -d'"' -f4) <(grep -o '"label":"[^"]*"' <<<"$att" | head -1 | cut -d'"' -f4) \
  || fail "--attention (math path) changes the prediction"
json=$("$PREDICT" --model "$M" --eval data/sample/dev.tsv --json)
for k in accuracy macro_f1 per_class confusion '"n"'; do grep -q "$k" <<<"$json" || fail "--eval --json lacks $k"; done
"$PREDICT" --model "$M" --eval data/sample/dev.tsv | grep -q "confusion matrix" || fail "text report lacks the confusion matrix"
# bf16 products (fp32 where the CPU lacks AVX512_BF16, with a note): the same lines, labels
# and probabilities within bf16 rounding of the fp32 run
"$PREDICT" --model "$M" --precision bf16 "$TMP/plain.txt" >"$TMP/pb" 2>"$TMP/pb.err" || fail "predict --precision bf16"
paste "$TMP/p1" "$TMP/pb" | awk -F'\t' '{ n++; if ($1 != $3) d++; e = $2 - $4; if (e < 0) e = -e; if (e > m) m = e }
    END { exit !(n > 0 && d <= n / 20 && m < 0.05) }' || fail "bf16 predictions stray from the fp32 ones"
[ "$(wc -l <"$TMP/pb")" = "$(wc -l <"$TMP/p1")" ] || fail "bf16 prediction line count differs"
# int8 linear layers (bf16 where the CPU lacks AVX512_VNNI, with a note): the same, within
# the quantization's error; --device cuda with int8 is a usage error
"$PREDICT" --model "$M" --precision int8 "$TMP/plain.txt" >"$TMP/pi" 2>"$TMP/pi.err" || fail "predict --precision int8"
paste "$TMP/p1" "$TMP/pi" | awk -F'\t' '{ n++; if ($1 != $3) d++; e = $2 - $4; if (e < 0) e = -e; if (e > m) m = e }
    END { exit !(n > 0 && d <= n / 20 && m < 0.05) }' || fail "int8 predictions stray from the fp32 ones"
[ "$(wc -l <"$TMP/pi")" = "$(wc -l <"$TMP/p1")" ] || fail "int8 prediction line count differs"
if grep -q "AVX512_VNNI" "$TMP/pi.err"; then
    cmp -s "$TMP/pi" "$TMP/pb" || fail "int8 without AVX512_VNNI must run as bf16"
else
    [ ! -s "$TMP/pi.err" ] || fail "int8 printed: $(cat "$TMP/pi.err")"
fi
finish
