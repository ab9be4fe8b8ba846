#!/usr/bin/env bash
# tests/cli/test_hostile_input.sh: hostile text for mha-train (as training data) and
# mha-predict (as input): one 10 MB line, a file of only newlines, NUL bytes, GBK instead
# of UTF-8, random binary. Each is handled with a count or one clear FILE:LINE error,
# never a crash, and memory stays bounded: mha-predict's peak RSS on 24 MB of piped input
# is within a few MB of its peak on 4 MB (scripts/stress-predict does the same with 1 GB).
source "$(dirname "$0")/lib.sh" "$@"
good=data/sample/train.tsv
# a tiny model, trained with the given data file and extra --set options
train_on() {   # OUT_NAME DATA [--set ...]
  local out=$1 data=$2; shift 2
  "$TRAIN" --config configs/demo.json --set data.train="$data" --set data.dev= --set data.test= \
    --set model.d_model=8 --set model.n_heads=1 --set model.d_ff=8 --set train.epochs=1 --set data.max_len=8 \
    --set train.threads=1 --set output.dir="$TMP/$out" --quiet "$@"
}
train_on base "$good" >/dev/null 2>"$TMP/base.err" || { cat "$TMP/base.err"; fail "training on the sample failed"; finish; }
M=$TMP/base/model.mha
# predict_lines FILE: mha-predict gives exactly one output line per input line
predict_lines() {
  local want; want=$(awk 'END {print NR}' "$1")
  "$PREDICT" --model "$M" --threads 1 "$1" >"$TMP/pred.out" 2>"$TMP/pred.err" || { fail "predict on $1 failed: $(cat "$TMP/pred.err")"; return; }
  local got; got=$(wc -l <"$TMP/pred.out")
  [ "$got" = "$want" ] || fail "predict on $1: $got output lines for $want input lines"
}

# 1. one line of 10 MB (2 MB of it CJK, then Latin words), between ordinary lines, and
#    one more at the end of the file without a newline
long=$TMP/long.txt
{ yes '这家酒店很好' | head -c 2000000 | tr -d '\n'; yes 'word ' | head -c 8000000 | tr -d '\n'; } >"$long"
{ head -5 "$good"; printf 'pos\t'; cat "$long"; printf '\n'; head -20 "$good" | tail -15; printf 'neg\t'; cat "$long"; } >"$TMP/long.tsv"
train_on long "$TMP/long.tsv" >/dev/null 2>"$TMP/e" || fail "training with 10 MB lines failed: $(tail -3 "$TMP/e")"
grep -q "22 examples, .* 2 over-long lines truncated at data.max_line_bytes" "$TMP/e" || fail "expected 22 examples and 2 over-long lines counted: $(grep '^train' "$TMP/e")"
predict_lines "$TMP/long.tsv"
grep -q "2 lines with text longer than 1048576 bytes were truncated" "$TMP/pred.err" || fail "predict did not count the long lines: $(cat "$TMP/pred.err")"
{ cat "$long"; printf '\n'; } | "$PREDICT" --model "$M" --threads 1 >"$TMP/o" 2>/dev/null && [ "$(wc -l <"$TMP/o")" = 1 ] \
  || fail "a 10 MB line on stdin did not give one prediction"

# 2. a file of only newlines (and one of CRLFs, spaces and tabs)
head -c 200000 /dev/zero | tr '\0' '\n' >"$TMP/newlines.tsv"
expect_exit 1 "newlines.tsv: no examples in 200000 lines" train_on nl "$TMP/newlines.tsv"
predict_lines "$TMP/newlines.tsv"
printf '\r\n \t \r\n\t\n' >"$TMP/blank.tsv"
expect_exit 1 "blank.tsv: no examples in 3 lines" train_on bl "$TMP/blank.tsv" --set data.format=tsv
: >"$TMP/empty.tsv"
expect_exit 1 "empty.tsv: no examples in 0 lines" train_on em "$TMP/empty.tsv"
"$PREDICT" --model "$M" "$TMP/empty.tsv" >"$TMP/o" && [ ! -s "$TMP/o" ] || fail "predict on an empty file: expected no output, exit 0"

# 3. NUL bytes
{ head -3 "$good"; printf 'pos\t前面\000后面\nneg\t\000\000\000\n'; head -6 "$good" | tail -3; } >"$TMP/nul.tsv"
expect_exit 1 "nul.tsv:4: NUL byte at byte offset 10 \(expected UTF-8 text; a UTF-16 file converts with .iconv -f UTF-16LE -t UTF-8 FILE > NEW. \(or UTF-16BE\); to read NUL bytes as spaces instead, set data.replace_invalid=true\)" train_on nul "$TMP/nul.tsv"
train_on nul "$TMP/nul.tsv" --set data.replace_invalid=true >/dev/null 2>"$TMP/e" \
  && grep -q "7 examples" "$TMP/e" && grep -q "1 line.* a label but no text" "$TMP/e" \
  || fail "NUL bytes with replace_invalid (read as spaces, as mha-predict reads them: line 5 is blank): $(tail -3 "$TMP/e")"
predict_lines "$TMP/nul.tsv"
grep -q "2 lines held NUL bytes" "$TMP/pred.err" || fail "predict did not count the NUL lines: $(cat "$TMP/pred.err")"
# lines that start with NUL, end in CR, or are nothing but NUL (stdin, no trailing newline)
printf '\000\000\r\n\000x\n\000' | "$PREDICT" --model "$M" >"$TMP/o" 2>"$TMP/e" && [ "$(wc -l <"$TMP/o")" = 3 ] \
  && grep -q "3 lines held NUL bytes" "$TMP/e" || fail "NUL-led lines on stdin: $(cat "$TMP/e")"

# 4. GBK instead of UTF-8 ("这家酒店很好" in GBK, written as bytes)
gbk='\xd5\xe2\xbc\xd2\xbe\xc6\xb5\xea\xba\xdc\xba\xc3'
{ printf "pos\t$gbk\n"; head -5 "$good"; printf "neg\t$gbk$gbk\n"; } >"$TMP/gbk.tsv"
expect_exit 1 "gbk.tsv:1: invalid UTF-8 at byte offset 4 \(expected UTF-8 text" train_on gbk "$TMP/gbk.tsv"
train_on gbk "$TMP/gbk.tsv" --set data.replace_invalid=true >/dev/null 2>"$TMP/e" || fail "GBK with replace_invalid failed: $(tail -3 "$TMP/e")"
predict_lines "$TMP/gbk.tsv"
printf "$gbk\n" | "$PREDICT" --model "$M" >"$TMP/o" 2>"$TMP/e" && [ "$(wc -l <"$TMP/o")" = 1 ] || fail "predict on GBK stdin: $(cat "$TMP/e")"
# GBK in a JSON Lines file and a fastText file: the same error, with the line
printf "{\"label\": \"a\", \"text\": \"$gbk\"}\n" >"$TMP/gbk.jsonl"
expect_exit 1 "gbk.jsonl:1: invalid UTF-8" train_on gbkj "$TMP/gbk.jsonl" --set data.format=auto
printf "__label__a ok\n__label__b $gbk\n" >"$TMP/gbk.ft"
expect_exit 1 "gbk.ft:2: invalid UTF-8 at byte offset 11" train_on gbkf "$TMP/gbk.ft" --set data.format=auto

# 5. random binary
head -c 1000000 /dev/urandom >"$TMP/random.bin"
out=$(train_on rnd "$TMP/random.bin" 2>&1 >/dev/null); rc=$?
[ "$rc" = 1 ] && grep -qE "random.bin:[0-9]+: " <<<"$out" || fail "training on random bytes: exit $rc, expected 1 with FILE:LINE: $out"
out=$(train_on rnd "$TMP/random.bin" --set data.replace_invalid=true 2>&1 >/dev/null); rc=$?
[ "$rc" -le 1 ] || fail "training on random bytes with replace_invalid crashed (exit $rc): $out"
predict_lines "$TMP/random.bin"
# a folder as input is a read error, not an empty input
expect_exit 1 "read error \(Is a directory\)" "$PREDICT" --model "$M" "$TMP"

# 6. bounded memory: peak RSS on 4 MB and 24 MB piped into mha-predict
peak_kb() {   # BYTES: pipe BYTES of text lines into mha-predict; print its VmHWM (kB)
  local lines=$(($1 / 100)) fifo=$TMP/fifo.$1
  mkfifo "$fifo"
  "$PREDICT" --model "$M" --threads 1 <"$fifo" >"$TMP/peak.out" 2>/dev/null &
  local pid=$!
  exec 3>"$fifo"
  yes '这家酒店的早餐很丰富，服务也很周到，下次还会再来。房间干净整洁。' | head -n "$lines" >&3   # 100 bytes a line
  local end=$((SECONDS + 120))
  while [ "$(wc -l <"$TMP/peak.out")" -lt "$lines" ] && [ $SECONDS -lt $end ]; do sleep 0.1; done
  sed -n 's/^VmHWM:[[:space:]]*\([0-9]*\) kB/\1/p' "/proc/$pid/status"
  exec 3>&-
  wait $pid
}
if [ -n "${MHA_SANITIZED:-}" ]; then
  echo "peak RSS check skipped in the sanitizer build (ASan's quarantine keeps freed memory resident)"
elif [ -r /proc/self/status ]; then
  small=$(peak_kb 4000000) big=$(peak_kb 24000000)
  echo "mha-predict peak RSS: $small kB on 4 MB, $big kB on 24 MB of piped input"
  [ -n "$small" ] && [ -n "$big" ] && [ $((big - small)) -lt 8192 ] || fail "peak RSS grew from $small kB to $big kB (expected flat)"
fi
finish
