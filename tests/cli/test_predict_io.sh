#!/usr/bin/env bash
# tests/cli/test_predict_io.sh: mha-predict output formats, order, stdin streaming,
# training-format input (label ignored, the format detected from the input whatever the
# model was trained on, with a note; --input-format to force it), empty lines, invalid UTF-8
# and over-long lines (said on stderr, counts in the singular too), --eval --json keys,
# --eval - (stdin), --name=value spellings, --batch-tokens, a line's output the same alone as in
# any batch, options that do not go together.
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
printf '今天天气很好\n\n\n' | "$PREDICT" --model "$M" >"$TMP/p5" 2>"$TMP/p5.err"
[ "$(wc -l <"$TMP/p5")" = 3 ] || fail "empty lines must still get one output line each"
grep -q "<stdin>: 2 of 3 lines had no character the model knows" "$TMP/p5.err" || fail "empty lines not counted: $(cat "$TMP/p5.err")"
# JSON Lines input to a model trained on TSV: detected, the label left out of the text
awk -F'\t' '{ printf "{\"label\": \"%s\", \"text\": \"%s\"}\n", $1, $2 }' data/sample/dev.tsv >"$TMP/dev.jsonl"
"$PREDICT" --model "$M" "$TMP/dev.jsonl" >"$TMP/pj" || fail "predict on JSON Lines input"
cmp -s "$TMP/p1" "$TMP/pj" || fail "JSON Lines input predicts differently from the same plain text"
cmp -s <("$PREDICT" --model "$M" --eval "$TMP/dev.jsonl" --json) <("$PREDICT" --model "$M" --eval data/sample/dev.tsv --json) \
  || fail "--eval on JSON Lines differs from --eval on the same TSV"
# invalid UTF-8 (GBK): predictions go on, stderr says where and what to do, then counts
printf '今天天气很好\n' | iconv -f UTF-8 -t GBK >"$TMP/gbk.txt"
cat "$TMP/gbk.txt" "$TMP/gbk.txt" >>"$TMP/gbk2.txt"
"$PREDICT" --model "$M" "$TMP/gbk2.txt" >"$TMP/pg" 2>"$TMP/pg.err" || fail "predict on GBK input failed"
[ "$(wc -l <"$TMP/pg")" = 2 ] || fail "GBK input: expected 2 output lines"
grep -q "gbk2.txt:1: invalid UTF-8 .*iconv -f GBK -t UTF-8" "$TMP/pg.err" && grep -q "gbk2.txt: 2 of 2 lines held invalid UTF-8" "$TMP/pg.err" \
  || fail "GBK input not reported: $(cat "$TMP/pg.err")"
# --eval on bad bytes (GBK text under a UTF-8 label, a NUL byte): evaluated, and counted on stderr
{ head -3 data/sample/dev.tsv; printf '美食\t'; printf '今天天气很好\n' | iconv -f UTF-8 -t GBK;
  printf '美食\t今天\0天气\n'; } >"$TMP/bad.tsv"
"$PREDICT" --model "$M" --eval "$TMP/bad.tsv" --json >"$TMP/pe" 2>"$TMP/pe.err" || fail "--eval on bad bytes failed: $(cat "$TMP/pe.err")"
grep -q '"n":5' "$TMP/pe" || fail "--eval on bad bytes: expected 5 examples: $(cat "$TMP/pe")"
grep -q "bad.tsv: 2 of 5 lines held invalid UTF-8 or NUL bytes .*iconv -f GBK -t UTF-8" "$TMP/pe.err" \
  || fail "--eval did not report the bad bytes: $(cat "$TMP/pe.err")"
# an over-long line is cut at a character boundary (1048576 falls inside a 3-byte 好), so
# valid UTF-8 stays valid: counted as truncated, never as invalid UTF-8; the same in --eval
{ yes 好 | head -n 400000 | tr -d '\n'; echo; } >"$TMP/long.txt"
cat "$TMP/long.txt" | "$PREDICT" --model "$M" >"$TMP/pl" 2>"$TMP/pl.err" || fail "predict on a 1.2 MB line failed"
[ "$(wc -l <"$TMP/pl")" = 1 ] || fail "a 1.2 MB line: expected 1 output line"
grep -q "<stdin>: 1 line with text longer than 1048576 bytes was truncated$" "$TMP/pl.err" && ! grep -q "UTF-8" "$TMP/pl.err" \
  || fail "a long valid line: expected only '1 line ... was truncated': $(cat "$TMP/pl.err")"
{ head -3 data/sample/dev.tsv; printf '美食\t'; cat "$TMP/long.txt"; } >"$TMP/long.tsv"
"$PREDICT" --model "$M" --eval "$TMP/long.tsv" --json >"$TMP/el" 2>"$TMP/el.err" || fail "--eval with a long line failed: $(cat "$TMP/el.err")"
grep -q "long.tsv: 1 line with text longer than 1048576 bytes .* was truncated" "$TMP/el.err" && ! grep -q "UTF-8" "$TMP/el.err" \
  || fail "--eval did not report the truncated line: $(cat "$TMP/el.err")"
# data.max_line_bytes bounds the text, not the line: a TSV line whose text is 1048575 bytes
# (349,525 x 好) is not cut for its label; a blank-looking first line (spaces, U+3000) does not
# decide the format, and a byte-order mark mid-input (cat a b) is not read as text
{ printf '  \xe3\x80\x80 \n'; printf '\xef\xbb\xbf美食\t'; yes 好 | head -n 349525 | tr -d '\n'; echo; } >"$TMP/fit.tsv"
"$PREDICT" --model "$M" --attention "$TMP/fit.tsv" >"$TMP/pf" 2>"$TMP/pf.err" || fail "predict on fit.tsv failed: $(cat "$TMP/pf.err")"
! grep -q "truncated" "$TMP/pf.err" || fail "a text of exactly data.max_line_bytes was cut for its label: $(cat "$TMP/pf.err")"
grep -q "read as TSV (line 2 has a tab)" "$TMP/pf.err" || fail "a blank first line decided the format: $(cat "$TMP/pf.err")"
[ "$(sed -n 2p "$TMP/pf" | grep -o '"美"' | wc -l)" = 0 ] || fail "the label was read as text after a blank first line"
# singular counts: "1 of 1 line", "1 line held", "its label is a guess"
{ cat "$TMP/gbk.txt"; printf 'a\0b\n'; } | "$PREDICT" --model "$M" >/dev/null 2>"$TMP/p1.err"
grep -q "<stdin>: 1 of 2 lines held invalid UTF-8" "$TMP/p1.err" && grep -q "<stdin>: 1 line held NUL bytes" "$TMP/p1.err" \
  || fail "singular/plural counts: $(cat "$TMP/p1.err")"
"$PREDICT" --model "$M" "$TMP/gbk.txt" >/dev/null 2>"$TMP/p1.err"
grep -q "gbk.txt: 1 of 1 line held invalid UTF-8" "$TMP/p1.err" || fail "'1 of 1 line': $(cat "$TMP/p1.err")"
printf '\n' | "$PREDICT" --model "$M" >/dev/null 2>"$TMP/p1.err"
grep -q "<stdin>: 1 of 1 line had no character the model knows .*: its label is a guess" "$TMP/p1.err" \
  || fail "one unknown line: $(cat "$TMP/p1.err")"
# auto-detection other than plain text says so once, with the way out; --input-format forces
# the format (no note), plain reads the label as text
printf '酒店\t干净\n' | "$PREDICT" --model "$M" >/dev/null 2>"$TMP/pn.err"
grep -q "^mha-predict: note: <stdin>: read as TSV (line 1 has a tab): the first column of each line is a label and is ignored; give --input-format plain" "$TMP/pn.err" \
  || fail "a tab in line 1: no note: $(cat "$TMP/pn.err")"
"$PREDICT" --model "$M" data/sample/dev.tsv 2>&1 >/dev/null | grep -c "note: .*read as TSV" | grep -qx 1 || fail "the TSV note is not said exactly once"
"$PREDICT" --model "$M" "$TMP/dev.jsonl" 2>&1 >/dev/null | grep -q "note: .*dev.jsonl: read as JSON Lines (line 1" || fail "no note for JSON Lines input"
"$PREDICT" --model "$M" --input-format tsv data/sample/dev.tsv >"$TMP/pf" 2>"$TMP/pf.err" && cmp -s "$TMP/p1" "$TMP/pf" && [ ! -s "$TMP/pf.err" ] \
  || fail "--input-format tsv: other predictions, or a note: $(cat "$TMP/pf.err")"
"$PREDICT" --model "$M" --input-format=jsonl "$TMP/dev.jsonl" 2>&1 >"$TMP/pf" | grep -q . && fail "--input-format=jsonl printed a note"
cmp -s "$TMP/p1" "$TMP/pf" || fail "--input-format=jsonl predicts differently"
"$PREDICT" --model "$M" --input-format plain data/sample/dev.tsv >"$TMP/pf" 2>"$TMP/pf.err" && ! cmp -s "$TMP/p1" "$TMP/pf" && [ ! -s "$TMP/pf.err" ] \
  || fail "--input-format plain did not read the label column as text: $(cat "$TMP/pf.err")"
# lines not in the input's format are still predicted (whole, as text) and counted, with the
# first one's reason (before: silently, the JSON's braces and keys as the text)
printf '{"label":"体育","content":"这家店不错"}\n{"text":"足球"}\n{"text": 5}\n' \
  | "$PREDICT" --model "$M" --input-format jsonl >"$TMP/pu" 2>"$TMP/pu.err"
[ "$(wc -l <"$TMP/pu")" = 3 ] && grep -q '^mha-predict: <stdin>: 2 of 3 lines were not JSON Lines with a "text" string (first: line 1: missing field "text".*); they were read whole as text$' "$TMP/pu.err" \
  || fail "JSON Lines without a text field: $(cat "$TMP/pu.err")"
printf '{"text":"足\\u0000球"}\n' | "$PREDICT" --model "$M" --input-format jsonl 2>&1 >/dev/null \
  | grep -q "1 of 1 line was not JSON Lines with a \"text\" string (first: line 1: a string holds \\\\u0000, a NUL character" \
  || fail "a JSON text with \\u0000 is not counted"
printf '体育\t足球\n没有制表符\n' | "$PREDICT" --model "$M" 2>&1 >/dev/null \
  | grep -q "<stdin>: 1 of 2 lines was not TSV (label<TAB>text) (first: line 2: no tab between label and text" \
  || fail "a line without a tab among TSV lines is not counted"
# line by line: a whole line is answered while the next is still unfinished (a producer whose
# writes end mid-line), and an empty or odd label loses no text: the label is not read
mkfifo "$TMP/slow"
"$PREDICT" --model "$M" <"$TMP/slow" >"$TMP/slow.out" 2>/dev/null &
pid=$!
exec 3>"$TMP/slow"
printf '篮球比赛\n美食' >&3
for _ in $(seq 100); do [ -s "$TMP/slow.out" ] && break; sleep 0.05; done
[ "$(wc -l <"$TMP/slow.out")" = 1 ] || fail "the first line was not answered while the second was unfinished (before: held back)"
printf '很好\n' >&3
exec 3>&-
wait $pid
[ "$(wc -l <"$TMP/slow.out")" = 2 ] || fail "streamed input: $(wc -l <"$TMP/slow.out") answers for 2 lines"
want=$(printf '篮球比赛今晚开始\n' | "$PREDICT" --model "$M" --top-k 2)
for line in '体育\t篮球比赛今晚开始' '\t篮球比赛今晚开始' ' \t篮球比赛今晚开始'; do
  [ "$(printf "$line\n" | "$PREDICT" --model "$M" --top-k 2 2>/dev/null)" = "$want" ] || fail "TSV line '$line' predicted differently from its text"
done
for line in '{"label":"","text":"篮球比赛今晚开始"}' '{"label":null,"text":"篮球比赛今晚开始"}' '{"label":1.5,"text":"篮球比赛今晚开始"}'; do
  got=$(printf '%s\n' "$line" | "$PREDICT" --model "$M" --top-k 2 2>"$TMP/lab.err")
  [ "$got" = "$want" ] && ! grep -q "were not\|was not" "$TMP/lab.err" || fail "JSON line '$line' predicted differently from its text: $(cat "$TMP/lab.err")"
done
[ "$(printf '__label__ 篮球比赛今晚开始\n' | "$PREDICT" --model "$M" --top-k 2 2>/dev/null)" = "$want" ] || fail "'__label__ TEXT' predicted differently"
# fastText lines are detected too (note once), and predict as their texts do
awk -F'\t' '{ printf "__label__%s %s\n", $1, $2 }' data/sample/dev.tsv >"$TMP/dev.ft"
"$PREDICT" --model "$M" "$TMP/dev.ft" >"$TMP/pft" 2>"$TMP/pft.err" || fail "predict on fastText input"
[ "$(grep -c 'note: .*dev.ft: read as fastText (line 1 starts with __label__): the __label__ words of each line are labels and are ignored' "$TMP/pft.err")" = 1 ] \
  || fail "fastText input: not one note: $(cat "$TMP/pft.err")"
cmp -s "$TMP/p1" "$TMP/pft" || fail "fastText input predicts other than its texts"
# a UTF-8 byte-order mark before the first line is skipped: fastText input is still detected,
# and its first line parsed (else "__label__..." would be read as text)
{ printf '\xef\xbb\xbf'; cat "$TMP/dev.ft"; } | "$PREDICT" --model "$M" --top-k 4 2>"$TMP/pbom.err" >"$TMP/pbom"
"$PREDICT" --model "$M" --top-k 4 "$TMP/plain.txt" >"$TMP/pnobom"
cmp -s "$TMP/pbom" "$TMP/pnobom" && grep -q "read as fastText (line 1 starts with __label__)" "$TMP/pbom.err" \
  || fail "fastText input after a byte-order mark: not detected, or other predictions: $(cat "$TMP/pbom.err")"
# a line that is not in the detected format (no tab after TSV lines) is read whole as its text
{ head -3 data/sample/dev.tsv; sed -n 4p "$TMP/plain.txt"; } | "$PREDICT" --model "$M" 2>/dev/null | sed -n 4p >"$TMP/pmix"
[ -s "$TMP/pmix" ] && cmp -s "$TMP/pmix" <(sed -n 4p "$TMP/p1") || fail "a plain line among TSV lines not read as its text"
expect_exit 2 "--input-format 'xml': expected auto, plain, tsv, fasttext or jsonl" "$PREDICT" --model "$M" --input-format xml
expect_exit 2 "--batch-size '0': expected an integer from 1 to 1000000" "$PREDICT" --model "$M" --batch-size 0
expect_exit 2 "--batch-size '2147483647': expected an integer from 1 to 1000000" "$PREDICT" --model "$M" --batch-size 2147483647
# --device auto with int8: the cpu (before: refused); -- ends the options
printf '足球\n' >"$TMP/-x.txt"
(cd "$TMP" && "$PREDICT" --model "$M" --precision int8 --device auto -- -x.txt) >"$TMP/pa" 2>/dev/null && [ "$(wc -l <"$TMP/pa")" = 1 ] \
  || fail "--precision int8 --device auto -- -x.txt"
expect_exit 2 "--threads 'two': expected an integer from 0 \(all cores\) to 4096" "$PREDICT" --model "$M" --threads two
# (before: up to 1000000 threads were started, and 100000 crashed in the OpenMP runtime)
expect_exit 2 "--threads '100000': expected an integer from 0 \(all cores\) to 4096" "$PREDICT" --model "$M" --threads 100000
expect_exit 2 "--device 'gpu': expected cpu, cuda or auto" "$PREDICT" --model "$M" --device gpu
expect_exit 2 "unknown option '--frobnicate'" "$PREDICT" --model "$M" --frobnicate
expect_exit 2 "--input-format plain goes with predictions: --eval needs labelled lines" "$PREDICT" --model "$M" --eval data/sample/dev.tsv --input-format plain
expect_exit 1 "dev.tsv:1: missing __label__ prefix" "$PREDICT" --model "$M" --eval data/sample/dev.tsv --input-format fasttext
# --eval - reads the labelled lines from standard input (a pipe), named <stdin> in messages
cmp -s <(cat data/sample/dev.tsv | "$PREDICT" --model "$M" --eval - --json) <("$PREDICT" --model "$M" --eval data/sample/dev.tsv --json) \
  || fail "--eval - on a pipe differs from --eval FILE"
[ "$(cat data/sample/dev.tsv | "$PREDICT" --model "$M" --eval - | head -1)" = "<stdin>" ] || fail "--eval - report not headed <stdin>"
expect_exit 1 "^mha-predict: error: <stdin>:2: label 'xx' does not occur in the training set" "$PREDICT" --model "$M" --eval - \
  < <(head -1 data/sample/dev.tsv; printf 'xx\t干净\n')
# --name=value for every value option; flags take no value
"$PREDICT" --model="$M" --top-k=2 --format=tsv --batch-size=8 --batch-tokens=100 --threads=1 --device=cpu --precision=fp32 "$TMP/plain.txt" >"$TMP/pv" \
  && cmp -s "$TMP/pv" <("$PREDICT" --model "$M" --top-k 2 --format tsv --batch-size 8 --batch-tokens 100 --threads 1 --device cpu --precision fp32 "$TMP/plain.txt") || fail "--name=value spellings"
# A line's output does not depend on the lines batched with it: byte for byte the same with
# any --batch-size, --batch-tokens or --threads, and alone, in fp32, bf16 and int8. fp32 (and
# a precision that falls back to it, with a note) where the linear forward runs on our own
# AVX2 product (an x86-64 CPU with AVX2 and FMA, kernels/cpu/gemm_f32.h) or on OpenBLAS's
# AVX-512 kernels, the ones its verbose start-up line names SkylakeX or Cooperlake. The tiny
# model's products are all small (the padded path); a second model with d_model 64 and d_ff
# 128 has larger ones.
# Everywhere: batching never changes a label (the sums' order at most moves a probability in
# its last digit, so only a tie to that precision could)
for bt in 0 1 37; do
  "$PREDICT" --model "$M" --batch-tokens $bt "$TMP/plain.txt" >"$TMP/pbt" || fail "--batch-tokens $bt failed"
  cmp -s <(cut -f1 "$TMP/pbt") <(cut -f1 "$TMP/p1") || fail "--batch-tokens $bt changed labels"
done
core=$(OPENBLAS_VERBOSE=2 "$PREDICT" --help 2>&1 >/dev/null | sed -n 's/^Core: //p' | head -1)
avx2_fma=0
[ "$(uname -m)" = x86_64 ] && grep -qw avx2 /proc/cpuinfo && grep -qw fma /proc/cpuinfo && avx2_fma=1
case "$core" in SkylakeX|Cooperlake) fp32_invariant=1 ;; *) fp32_invariant=$avx2_fma ;; esac
echo "fp32 batch invariance checked: $([ "$fp32_invariant" = 1 ] && echo yes || echo no) (OpenBLAS kernels '${core:-unknown}', AVX2 and FMA: $avx2_fma)"
sed 's/"d_model": 32, "n_heads": 2, "d_ff": 64/"d_model": 64, "n_heads": 2, "d_ff": 128/' "$TMP/c.json" \
  | sed "s|\"dir\": \"$TMP/m\"|\"dir\": \"$TMP/m64\"|" >"$TMP/c64.json"
grep -q '"d_model": 64' "$TMP/c64.json" && grep -q "$TMP/m64" "$TMP/c64.json" || fail "could not derive the d_model 64 config"
"$TRAIN" --config "$TMP/c64.json" --quiet >/dev/null 2>"$TMP/e64" || fail "train d_model 64: $(cat "$TMP/e64")"
cut -f2 data/sample/train.tsv data/sample/dev.tsv >"$TMP/many.txt"
for model in "$M" "$TMP/m64/model.mha"; do
  for prec in fp32 bf16 int8; do
    "$PREDICT" --model "$model" --precision $prec --format jsonl --top-k 3 "$TMP/many.txt" >"$TMP/inv" 2>"$TMP/inv.err" \
      || fail "predict --precision $prec"
    if [ "$fp32_invariant" = 0 ] && { [ $prec = fp32 ] || [ -s "$TMP/inv.err" ]; }; then continue; fi
    # (--batch-size 1000: one batch of all 774 lines, a head of more rows than its padding's)
    for opts in "--batch-size 1" "--batch-size 5 --threads 2" "--batch-tokens 0" "--batch-tokens 37 --threads 2" \
        "--batch-size 1000 --batch-tokens 0"; do
      "$PREDICT" --model "$model" --precision $prec --format jsonl --top-k 3 $opts "$TMP/many.txt" 2>/dev/null \
        | cmp -s - "$TMP/inv" || fail "$model $prec: $opts changes the output"
    done
    for i in 1 2 3 4 5 6 7 8; do
      sed -n "${i}p" "$TMP/many.txt" | "$PREDICT" --model "$model" --precision $prec --format jsonl --top-k 3 2>/dev/null \
        | cmp -s - <(sed -n "${i}p" "$TMP/inv") || fail "$model $prec: line $i alone differs from line $i in the file"
    done
  done
done
expect_exit 2 "--batch-tokens '-5': expected an integer from 0 \(no cap\) to 1000000" "$PREDICT" --model "$M" --batch-tokens -5
expect_exit 2 "--batch-tokens 'x': expected an integer from 0 \(no cap\) to 1000000" "$PREDICT" --model "$M" --batch-tokens=x
cmp -s <("$PREDICT" --model "$M" --eval=data/sample/dev.tsv --input-format=tsv --json) <("$PREDICT" --model "$M" --eval data/sample/dev.tsv --json) \
  || fail "--eval=FILE differs from --eval FILE"
expect_exit 2 "--json takes no value \(got '--json=1'" "$PREDICT" --model "$M" --eval data/sample/dev.tsv --json=1
expect_exit 2 "--attention takes no value" "$PREDICT" --model "$M" --attention=yes
expect_exit 2 "--top-k needs a value after '='" "$PREDICT" --model "$M" --top-k=
expect_exit 2 "unknown option '--modle=x'" "$PREDICT" --modle=x
# options that do not go together, or are not options
expect_exit 2 "--attention writes JSON Lines; drop --format tsv" "$PREDICT" --model "$M" --attention --format tsv
expect_exit 2 "unknown option '-k' \(options are spelled --name\)" "$PREDICT" --model "$M" -k 3
expect_exit 2 "--format goes with predictions, not --eval" "$PREDICT" --model "$M" --eval data/sample/dev.tsv --format jsonl
expect_exit 2 "--top-k goes with predictions, not --eval" "$PREDICT" --model "$M" --top-k 2 --eval data/sample/dev.tsv
expect_exit 2 "more than one input file" "$PREDICT" --model "$M" - -
# --device cuda where no GPU can run it (skipped on a machine with one): the option's own words
if ! "$PREDICT" --model "$M" --device cuda "$TMP/plain.txt" >/dev/null 2>&1; then
  expect_exit 1 "^mha-predict: error: --device cuda: .*; use --device cpu or auto" "$PREDICT" --model "$M" --device cuda "$TMP/plain.txt"
fi
"$PREDICT" --model "$M" --format jsonl --top-k 2 "$TMP/plain.txt" | head -1 | grep -qE '^\{"label":"[^"]+","prob":[0-9.e-]+,"top":\[\{' \
  || fail "jsonl output shape"
# jsonl probabilities carry the tsv output's 6 decimals, not a float's noise as a double
! "$PREDICT" --model "$M" --format jsonl --top-k 2 "$TMP/plain.txt" | grep -qE '"prob":[0-9]\.[0-9]{7,}' \
  || fail "jsonl probabilities with more than 6 decimals"
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
