#!/usr/bin/env bash
# tests/cli/test_predict_io.sh: mha-predict output formats, order, stdin streaming,
# training-format input (label ignored, the format detected from the input whatever the
# model was trained on, with a note; --input-format to force it), empty lines, invalid UTF-8
# and over-long lines (said on stderr, counts in the singular too), --eval --json keys,
# --eval - (stdin), --name=value spellings, --batch-tokens, a line's output the same alone as in
# any batch, options that do not go together; --eval with labels the model does not know,
# columns swapped, --model DIR and a run without model.mha, the hints for a file in another
# format (JSON Lines, fastText or CSV read as TSV).
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
# UTF-16 (its byte-order mark on line 1): refused before any answer, from a file and from stdin
# (read as bytes, its 0x0A bytes made more answers than lines); a NUL byte's note names iconv
printf '今天天气很好\n真好吃\n' | iconv -f UTF-8 -t UTF-16 >"$TMP/u16.txt"
"$PREDICT" --model "$M" "$TMP/u16.txt" >"$TMP/pu" 2>"$TMP/pu.err"; rc=$?
[ $rc = 1 ] && [ ! -s "$TMP/pu" ] && grep -q "u16.txt: the input is UTF-16 (it starts with the byte-order mark FF FE); expected UTF-8: convert it with 'iconv -f UTF-16 -t UTF-8 $TMP/u16.txt > NEW'" "$TMP/pu.err" \
  || fail "UTF-16 file: expected exit 1, no output and the iconv hint (rc $rc): $(cat "$TMP/pu" "$TMP/pu.err")"
"$PREDICT" --model "$M" <"$TMP/u16.txt" >"$TMP/pu" 2>"$TMP/pu.err"; rc=$?
[ $rc = 1 ] && [ ! -s "$TMP/pu" ] && grep -q "<stdin>: the input is UTF-16 .*'iconv -f UTF-16 -t UTF-8 FILE > NEW'" "$TMP/pu.err" \
  || fail "UTF-16 on stdin: expected exit 1, no output and the iconv hint (rc $rc): $(cat "$TMP/pu" "$TMP/pu.err")"
printf 'a\0b\n' | "$PREDICT" --model "$M" >/dev/null 2>"$TMP/pn.err"
grep -q "<stdin>: 1 line held NUL bytes (read as spaces; UTF-16 text without a byte-order mark converts with 'iconv -f UTF-16LE -t UTF-8 FILE > NEW', or UTF-16BE)" "$TMP/pn.err" \
  || fail "a NUL byte: note without the UTF-16 hint: $(cat "$TMP/pn.err")"
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
# --eval with labels the model was not trained on (sklearn's convention; before: it stopped at
# the first, "label 'xx' does not occur in the training set", exit 1): every such line is
# predicted and wrong; each such label is a class of its own after the model's (recall 0, F1 0,
# in macro-F1), with a row in the confusion matrix (which stays square: its column is zeros);
# the loss is over the other lines; one note on stderr names them with their counts
{ cat data/sample/dev.tsv; printf '财经\t股市今天大涨\n房产\t房价又涨了\n财经\t央行宣布降息\n'; } >"$TMP/unk.tsv"
"$PREDICT" --model "$M" --eval data/sample/dev.tsv --json >"$TMP/known.json"
"$PREDICT" --model "$M" --eval "$TMP/unk.tsv" --json >"$TMP/unk.json" 2>"$TMP/unk.err" \
  || fail "--eval with labels the model does not know failed: $(cat "$TMP/unk.err")"
[ "$(grep -c "^mha-predict: note: $TMP/unk.tsv: 3 of 123 lines have a label the model was not trained on (first: line 121): '财经' (2 lines), '房产' (1 line)\. They are predicted and count as errors: in accuracy's denominator, and each label as a class of its own (recall 0, F1 0) in macro-F1; the loss leaves them out$" "$TMP/unk.err")" = 1 ] \
  || fail "unknown labels: not one note naming them: $(cat "$TMP/unk.err")"
grep -q '"n":123,"unknown_label_lines":3,' "$TMP/unk.json" && grep -q '"labels":\["体育","旅游","科技","美食","财经","房产"\]' "$TMP/unk.json" \
  && grep -q '{"label":"财经","precision":0,"recall":0,"f1":0,"support":2,"in_macro_f1":true,"in_model":false}' "$TMP/unk.json" \
  && grep -q '{"label":"房产","precision":0,"recall":0,"f1":0,"support":1,"in_macro_f1":true,"in_model":false}' "$TMP/unk.json" \
  && [ "$(grep -o '"in_model":true' "$TMP/unk.json" | wc -l)" = 4 ] || fail "unknown labels: --json classes: $(cat "$TMP/unk.json")"
# the confusion matrix: 6 rows of 6; the unknown labels' rows hold their 2 and 1 lines, in the
# model's 4 columns; nobody is predicted into their columns
sed 's/.*"confusion":\[\(.*\)\]}$/\1/' "$TMP/unk.json" | grep -o '\[[^]]*\]' | tr -d '[]' \
  | awk -F, 'NF != 6 || $5 + 0 != 0 || $6 + 0 != 0 { bad = 1 } NR == 5 { u5 = $1 + $2 + $3 + $4 } NR == 6 { u6 = $1 + $2 + $3 + $4 }
             END { exit !(NR == 6 && !bad && u5 == 2 && u6 == 1) }' || fail "unknown labels: confusion matrix: $(cat "$TMP/unk.json")"
# accuracy: the same right answers over 123 lines; macro-F1: the mean of the 6 (or fewer
# classes') F1 in the report; loss: that of the 120 known lines
field() { sed "s/.*\"$1\":\([^,}]*\).*/\1/" "$2"; }
awk -v a="$(field accuracy "$TMP/known.json")" -v b="$(field accuracy "$TMP/unk.json")" 'BEGIN { d = a * 120 - b * 123; exit !(d < 1e-6 && d > -1e-6) }' \
  || fail "unknown labels: accuracy $(field accuracy "$TMP/unk.json") is not the 120 lines' right answers over 123"
grep -o '"f1":[^,]*,"support":[^,]*,"in_macro_f1":true' "$TMP/unk.json" | sed 's/"f1":\([^,]*\),.*/\1/' \
  | awk -v m="$(field macro_f1 "$TMP/unk.json")" '{ s += $1; n++ } END { d = s / n - m; exit !(n == 6 && d < 1e-9 && d > -1e-9) }' \
  || fail "unknown labels: macro_f1 is not the mean over the 6 classes of per_class: $(cat "$TMP/unk.json")"
awk -v a="$(field loss "$TMP/known.json")" -v b="$(field loss "$TMP/unk.json")" 'BEGIN { d = a - b; exit !(d < 1e-5 && d > -1e-5) }' \
  || fail "unknown labels: the loss is not that of the known lines"
cmp -s "$TMP/unk.json" <("$PREDICT" --model "$M" --eval "$TMP/unk.tsv" --json --threads 1 2>/dev/null) \
  || fail "unknown labels: one thread (one batch at a time) gives another report"
"$PREDICT" --model "$M" --eval "$TMP/unk.tsv" >"$TMP/unk.txt" 2>/dev/null || fail "unknown labels: the text report failed"
grep -q "^财经 (unknown)  *0.0000  0.0000  0.0000        2$" "$TMP/unk.txt" \
  && grep -q "^(unknown: 2 labels the model was not trained on, in 3 of the 123 lines: counted as errors, with recall 0 and F1 0 in macro-F1; the loss is the mean over the other 120)$" "$TMP/unk.txt" \
  && grep -qE "^5 房产 \(unknown\) +0 +0 +0 +[01] +0 +0$" "$TMP/unk.txt" \
  && grep -q "^accuracy $(printf '%.4f' "$(field accuracy "$TMP/unk.json")")  macro-F1 $(printf '%.4f' "$(field macro_f1 "$TMP/unk.json")") " "$TMP/unk.txt" \
  || fail "unknown labels: the text report: $(cat "$TMP/unk.txt")"
"$PREDICT" --model "$M" --eval - < <(head -1 data/sample/dev.tsv; printf 'xx\t干净\n') 2>&1 >/dev/null \
  | grep -q "^mha-predict: note: <stdin>: 1 of 2 lines has a label the model was not trained on (first: line 2): 'xx' (1 line)\. It is predicted and counts as an error" \
  || fail "one unknown label: not said in the singular"
# no label the model knows at all: the wrong file, an error
expect_exit 1 "^mha-predict: error: <stdin>: none of its 3 labelled lines has a label of the training set \(its labels: 'xx' \(2 lines\), 'yy' \(1 line\); the training set's: 体育, 旅游, 科技, 美食\): is it the right file for this model\?$" \
  "$PREDICT" --model "$M" --eval - < <(printf 'yy\t干净\nxx\t好吃\nxx\t很好\n')
# columns swapped (text<TAB>label): an error that says so and how to swap them, before any
# prediction is written (before: the labels were predicted, with a note that the first column
# was ignored); in --eval too (before: "label '...' does not occur in the training set")
awk -F'\t' -v OFS='\t' '{print $2, $1}' data/sample/dev.tsv >"$TMP/sw.tsv"
expect_exit 1 "^mha-predict: error: $TMP/sw.tsv: the columns look swapped: in 120 of 120 lines the second column \(the text, in label<TAB>text\) is a label of the model \(体育, 旅游, 科技, 美食\) and the first is not \(first: line 1\); expected the text alone or 'label<TAB>text': swap the columns with awk -F'.t' -v OFS='.t' '\{print .2, .1\}' FILE > NEW, or keep the text alone with cut -f1 FILE > NEW$" \
  "$PREDICT" --model "$M" "$TMP/sw.tsv"
[ -z "$("$PREDICT" --model "$M" "$TMP/sw.tsv" 2>/dev/null)" ] || fail "swapped columns: predictions were written"
expect_exit 1 "^mha-predict: error: <stdin>: the columns look swapped: in 20 of 20 lines" "$PREDICT" --model "$M" - \
  < <(for _ in $(seq 10); do printf '晚上去操场跑圈\t体育\n香辣蟹炒得太入味\t 美食 \n'; done)
# ... but not on fewer than 20 lines (an interactive pipe's first answer may come after one),
# nor with an id column first (id<TAB>label: a number is no text)
printf '晚上去操场跑圈\t体育\n' | "$PREDICT" --model "$M" >/dev/null 2>&1 || fail "one text<TAB>label line refused as swapped"
for i in $(seq 30); do printf '%d\t体育\n' "$i"; done | "$PREDICT" --model "$M" >/dev/null 2>"$TMP/ids.err" \
  || fail "id<TAB>label lines refused as swapped: $(cat "$TMP/ids.err")"
expect_exit 1 "^mha-predict: error: $TMP/sw.tsv: the label and text look swapped: in 120 of 120 lines the text is a label of the training set \(体育, 旅游, 科技, 美食\) and the label is not \(first: line 1\); expected 'label<TAB>text': swap the columns with awk -F'.t' -v OFS='.t' '\{print .2, .1\}' FILE > NEW$" \
  "$PREDICT" --model "$M" --eval "$TMP/sw.tsv"
# ... but not a few such lines among label<TAB>text ones, nor a file of labels as plain text,
# nor label<TAB>label lines
{ head -20 data/sample/dev.tsv; printf '体育\t美食\n'; } | "$PREDICT" --model "$M" >"$TMP/few" 2>/dev/null && [ "$(wc -l <"$TMP/few")" = 21 ] \
  || fail "a line whose text is a label among 20 ordinary ones was refused"
printf '体育\n美食\n' | "$PREDICT" --model "$M" >"$TMP/few" 2>/dev/null && [ "$(wc -l <"$TMP/few")" = 2 ] \
  || fail "plain text lines that are labels were refused"
printf '体育\t体育\n美食\t美食\n' | "$PREDICT" --model "$M" >"$TMP/few" 2>/dev/null && [ "$(wc -l <"$TMP/few")" = 2 ] \
  || fail "label<TAB>label lines were refused as swapped"
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
# ... and the same numbers as the tsv output, as many as --top-k asks (1 by default)
tsv_probs=$("$PREDICT" --model "$M" --top-k 2 "$TMP/plain.txt" | cut -f2,4 | tr '\t' ' ')
json_probs=$("$PREDICT" --model "$M" --format jsonl --top-k 2 "$TMP/plain.txt" \
  | python3 -c 'import json, sys
for l in sys.stdin: print(" ".join("%.6f" % t["prob"] for t in json.loads(l)["top"]))')
[ -n "$tsv_probs" ] && [ "$tsv_probs" = "$json_probs" ] || fail "jsonl top-2 probabilities differ from the tsv output's: $(diff <(echo "$tsv_probs") <(echo "$json_probs") | head -4)"
# a blank line inside TSV input is no line "not TSV": answered (one output line each), no note
printf '体育\t足球比赛\n\n科技\t新手机\n' | "$PREDICT" --model "$M" >"$TMP/bl.out" 2>"$TMP/bl.err" || fail "TSV with a blank line: failed"
[ "$(wc -l <"$TMP/bl.out")" = 3 ] && ! grep -q "not TSV" "$TMP/bl.err" \
  || fail "TSV with a blank line: $(wc -l <"$TMP/bl.out") outputs (expected 3), stderr: $(cat "$TMP/bl.err")"
# a text of exactly data.max_line_bytes (1 MiB) is whole; one byte more is cut, and said
for bytes in 1048576 1048577; do
  head -c "$bytes" /dev/zero | tr '\0' 'a' >"$TMP/exact.txt"; echo >>"$TMP/exact.txt"
  "$PREDICT" --model "$M" "$TMP/exact.txt" >/dev/null 2>"$TMP/exact.err" || fail "a $bytes-byte line: failed"
  if [ $bytes = 1048576 ]; then ! grep -q "truncated" "$TMP/exact.err" || fail "a line of exactly max_line_bytes said truncated: $(cat "$TMP/exact.err")"
  else grep -q "1 line with text longer than 1048576 bytes was truncated" "$TMP/exact.err" || fail "a line of max_line_bytes + 1: $(cat "$TMP/exact.err")"; fi
done
tops=$("$PREDICT" --model "$M" --format jsonl "$TMP/plain.txt" | python3 -c 'import json,sys; print(sorted({len(json.loads(l)["top"]) for l in sys.stdin}))')
[ "$tops" = "[1]" ] || fail "jsonl without --top-k: top lists of lengths $tops, expected [1]"
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
# --model DIR reads DIR/model.mha (before: "not a regular file"); a run stopped before it saved
# its model.mha (--max-steps without a dev set: only last.mha) is named as such, with both
# ways on (before: "cannot open checkpoint (No such file or directory)")
"$PREDICT" --model "$TMP/m" "$TMP/plain.txt" | cmp -s - "$TMP/p1" || fail "--model DIR does not predict as DIR/model.mha"
"$PREDICT" --model "$TMP/m/" "$TMP/plain.txt" | cmp -s - "$TMP/p1" || fail "--model DIR/ does not predict as DIR/model.mha"
"$TRAIN" --config "$TMP/c.json" --set data.dev= --set data.test= --set output.dir="$TMP/stopped" --max-steps 2 --quiet \
  >/dev/null 2>"$TMP/stopped.err" || fail "a run stopped by --max-steps: $(cat "$TMP/stopped.err")"
[ -f "$TMP/stopped/last.mha" ] && [ ! -e "$TMP/stopped/model.mha" ] || fail "a run stopped by --max-steps: expected last.mha alone: $(ls "$TMP/stopped")"
S=$TMP/stopped
for model in "$S/model.mha" "$S" "$S/"; do
  expect_exit 1 "^mha-predict: error: $S/model.mha: no such file: the run in $S has not finished \(or was stopped before it saved its model\): $S/last.mha holds its latest parameters \(mha-predict --model $S/last.mha\), or finish the run with mha-train --resume $S/last.mha$" \
    "$PREDICT" --model "$model" "$TMP/plain.txt"
done
# another missing name beside last.mha is a typo, not the unfinished run's model.mha
expect_exit 1 "^mha-predict: error: $S/modle.mha: cannot open checkpoint \(No such file or directory\)$" "$PREDICT" --model "$S/modle.mha" "$TMP/plain.txt"
(cd "$S" && "$PREDICT" --model model.mha - </dev/null 2>&1 | grep -q "the run in \. has not finished .*--model \./last.mha") \
  || fail "model.mha missing in the working directory: no hint"
"$PREDICT" --model "$S/last.mha" "$TMP/plain.txt" >"$TMP/pl2" && [ "$(wc -l <"$TMP/pl2")" = "$n" ] || fail "--model DIR/last.mha of a stopped run"
mkdir "$TMP/nothing"
expect_exit 1 "^mha-predict: error: $TMP/nothing is a folder, not a regular file, and holds no model.mha or last.mha \(expected an mha checkpoint, or the output folder of an mha-train run\)$" \
  "$PREDICT" --model "$TMP/nothing" "$TMP/plain.txt"
expect_exit 1 "^mha-predict: error: $TMP/nothing/model.mha: cannot open checkpoint \(No such file or directory\)$" \
  "$PREDICT" --model "$TMP/nothing/model.mha" "$TMP/plain.txt"
# a labelled file in another format than --input-format says: which format it looks like
expect_exit 1 "^mha-predict: error: $TMP/dev.jsonl:1: no tab between label and text \(expected 'label<TAB>text'\); the line looks like JSON Lines: give --input-format jsonl \(or auto\)$" \
  "$PREDICT" --model "$M" --eval "$TMP/dev.jsonl" --input-format tsv
expect_exit 1 "^mha-predict: error: $TMP/dev.ft:1: no tab between label and text \(expected 'label<TAB>text'\); the line looks like fastText: give --input-format fasttext \(or auto\)$" \
  "$PREDICT" --model "$M" --eval "$TMP/dev.ft" --input-format tsv
tr '\t' , <data/sample/dev.tsv >"$TMP/dev.csv"
expect_exit 1 "^mha-predict: error: $TMP/dev.csv:1: cannot tell the format: .*; the line looks like CSV \(comma-separated\), and mha reads TSV: convert simple CSV with sed 's/,/.t/' FILE > NEW \(the first comma of each line becomes a tab; for quoted fields use Python's csv module\)$" \
  "$PREDICT" --model "$M" --eval "$TMP/dev.csv"
sed 's/,/\t/' "$TMP/dev.csv" | cmp -s - data/sample/dev.tsv || fail "the suggested sed command does not turn the CSV back into the TSV"
# a checkpoint given as the input (mha-predict --model M M): said before any answer (before: one
# answer per 0x0A byte of it, and a note about NUL bytes and UTF-16, exit 0); --eval too
out=$("$PREDICT" --model "$M" "$M" 2>"$TMP/ck.err"); rc=$?
[ "$rc" = 1 ] && [ -z "$out" ] && grep -q "^mha-predict: error: $M: an mha checkpoint, not text to label (the model goes in --model" "$TMP/ck.err" \
  || fail "a checkpoint as input: exit $rc, $(wc -l <<<"$out") lines out: $(cat "$TMP/ck.err")"
expect_exit 1 "^mha-predict: error: <stdin>: an mha checkpoint, not text to label" "$PREDICT" --model "$M" - <"$M"
expect_exit 1 "^mha-predict: error: $M: an mha checkpoint, not a file of labelled texts" "$PREDICT" --model "$M" --eval "$M"
# a line over data.max_line_bytes whose bad bytes come at the cut: replaced, then cut, as training
# and --eval read it (before: the cut came first and backed over the stray continuation bytes
# and the character before them, leaving "ab" of "abc" + 1.1 MB of 0x80, and no invalid-UTF-8 note)
{ printf 'abc'; head -c 1100000 /dev/zero | tr '\0' '\200'; printf '\n'; } >"$TMP/cont.txt"
n=$("$PREDICT" --model "$M" --attention --input-format plain "$TMP/cont.txt" 2>"$TMP/cont.err" \
  | python3 -c 'import json, sys; print(len(json.loads(sys.stdin.readline())["tokens"]))')
[ "${n:-0}" -gt 1 ] && grep -q "invalid UTF-8" "$TMP/cont.err" \
  || fail "a long line with bad bytes at the cut: $n tokens (expected abc and U+FFFD ones), $(cat "$TMP/cont.err")"
finish
