#!/usr/bin/env bash
# tests/cli/test_exit_codes.sh: usage errors exit 2, data/runtime errors exit 1, each with
# a message that names the file (and line) and what was expected.
source "$(dirname "$0")/lib.sh" "$@"
expect_exit 2 "missing --config" "$TRAIN"
expect_exit 2 "unknown argument" "$TRAIN" --bogus
expect_exit 0 "" "$TRAIN" --help
for prog in "$TRAIN" "$PREDICT"; do   # --version: the version and the commit, exit 0
  v=$("$prog" --version 2>&1); rc=$?
  [ "$rc" = 0 ] && grep -qE "^mha-(train|predict) [0-9]+\.[0-9]+\.[0-9]+( \(.+\))?$" <<<"$v" || fail "$prog --version: exit $rc: $v"
done
expect_exit 2 "unknown argument '--confg' \(did you mean '--config'\?\)" "$TRAIN" --confg configs/demo.json
expect_exit 2 "unexpected argument 'configs/demo.json' \(a config file is given as --config configs/demo.json\)" "$TRAIN" configs/demo.json
expect_exit 2 "--quiet takes no value \(got .--quiet=1.; give --quiet alone\)" "$TRAIN" --config configs/demo.json --quiet=1
expect_exit 2 "--max-steps '0': expected a positive integer" "$TRAIN" --config=configs/demo.json --max-steps=0
expect_exit 2 "did you mean '--top-k'" "$PREDICT" --model x --topk 3
expect_exit 2 "unknown argument '-x' \(options are spelled --name\)" "$TRAIN" -x
expect_exit 2 "--set needs a value after '=' \(got '--set='\)" "$TRAIN" --config configs/demo.json --set=
expect_exit 2 "--resume continues with the config stored in the checkpoint; do not combine it with --config" \
  "$TRAIN" --resume x.mha --config configs/demo.json
expect_exit 2 "--format 'xml': expected tsv or jsonl" "$PREDICT" --model x --format xml
expect_exit 2 "--eval reads its own file; drop the extra input 'b.txt'" "$PREDICT" --model x --eval a.tsv b.txt
expect_exit 2 "--attention goes with predictions, not --eval" "$PREDICT" --model x --attention --eval a.tsv
expect_exit 2 "--json goes with --eval or --info \(use --format jsonl for predictions\)" "$PREDICT" --model x --json
expect_exit 2 "did you mean 'train.lr'" "$TRAIN" --config configs/demo.json --set train.lrr=1
expect_exit 2 "train.lr" "$TRAIN" --config configs/demo.json --set train.lr=-1
expect_exit 2 "n_heads" "$TRAIN" --config configs/demo.json --set model.n_heads=3
expect_exit 2 "cannot read config|No such file" "$TRAIN" --config "$TMP/none.json"
printf 'a\tgood line\nno tab here\n' >"$TMP/bad.tsv"
tiny_config "$TMP/c.json" "$TMP/out"
expect_exit 1 "bad.tsv:2:" "$TRAIN" --config "$TMP/c.json" --set data.train="$TMP/bad.tsv" --set data.format=tsv --quiet
expect_exit 1 "cannot open|No such file" "$TRAIN" --config "$TMP/c.json" --set data.train="$TMP/missing.tsv" --quiet
[ ! -e "$TMP/out" ] || fail "a run that failed on its data left its new output folder behind: $(ls -A "$TMP/out")"
# the folders it made above output.dir go too; one that was there before stays
mkdir "$TMP/there"
expect_exit 1 "No such file" "$TRAIN" --config "$TMP/c.json" --set data.train="$TMP/missing.tsv" \
  --set output.dir="$TMP/there/new1//new2/run/" --quiet
[ -d "$TMP/there" ] && [ -z "$(ls -A "$TMP/there")" ] ||
  fail "a failed run left the folders it made above output.dir: $(cd "$TMP/there" 2>/dev/null && find .)"
# through '..': only the folders it made go (new3), never an empty one that was there (pre)
mkdir "$TMP/there/pre"
expect_exit 1 "No such file" "$TRAIN" --config "$TMP/c.json" --set data.train="$TMP/missing.tsv" \
  --set output.dir="$TMP/there/new3/../pre/run" --quiet
[ -d "$TMP/there/pre" ] || fail "a failed run removed an empty folder that was there before it (output.dir through '..')"
[ ! -e "$TMP/there/new3" ] || fail "a failed run left new3, which it made (output.dir through '..')"
mkdir "$TMP/kept"   # a folder that was there before stays, lock file and all
expect_exit 1 "No such file" "$TRAIN" --config "$TMP/c.json" --set data.train="$TMP/missing.tsv" --set output.dir="$TMP/kept" --quiet
[ -d "$TMP/kept" ] || fail "a failed run removed an output folder it did not create"
grep '^体育' data/sample/train.tsv >"$TMP/one.tsv"
expect_exit 1 "one.tsv: every example has the label '体育' \(expected at least 2 classes" \
  "$TRAIN" --config "$TMP/c.json" --set data.train="$TMP/one.tsv" --quiet
# label and text swapped: a class per example is refused, with the likely cause
awk -F'\t' '{print $2"\t"$1}' data/sample/train.tsv >"$TMP/swap.tsv"
expect_exit 1 "swap.tsv: [0-9]+ of 654 examples have a label no other example has \(e.g. '.*'\); are the label and the text swapped\?" \
  "$TRAIN" --config "$TMP/c.json" --set data.train="$TMP/swap.tsv" --quiet
# a first column of ids (id<TAB>label<TAB>text): said so, with the command that drops it
awk -F'\t' '{print NR"\t"$1"\t"$2}' data/sample/train.tsv >"$TMP/ids.tsv"
expect_exit 1 "ids.tsv: 654 of 654 examples have a label no other example has, a number \(e.g. '[0-9]+'\): is the first column an id\? .*'cut -f2- $TMP/ids.tsv > NEW' drops a first column" \
  "$TRAIN" --config "$TMP/c.json" --set data.train="$TMP/ids.tsv" --quiet
{ printf 'qid\tlabel\ttext_a\n'; cat "$TMP/ids.tsv"; } >"$TMP/ids_header.tsv"   # a header the reader does not know
expect_exit 1 "ids_header.tsv: 655 of 655 examples have a label no other example has, a number \(e.g. '[0-9]+'\): is the first column an id\?" \
  "$TRAIN" --config "$TMP/c.json" --set data.train="$TMP/ids_header.tsv" --quiet
# ... but many classes with few examples each are not refused: 20 classes twice, one once,
# which a note names (with its line)
for k in $(seq 20); do printf 'c%d\t第%d类的例子\nc%d\t另一个第%d类\n' "$k" "$k" "$k" "$k"; done >"$TMP/few.tsv"
printf 'c21\t只有一个\n' >>"$TMP/few.tsv"
"$TRAIN" --config "$TMP/c.json" --set data.train="$TMP/few.tsv" --set data.dev= --set data.test= --max-steps 1 \
  --set output.dir="$TMP/few" --quiet >/dev/null 2>"$TMP/e" || fail "21 classes in 41 examples refused: $(cat "$TMP/e")"
grep -q "few.tsv:41: the class 'c21' has this one example: too few to learn; a mistyped label?" "$TMP/e" \
  || fail "a class with one example: no note: $(cat "$TMP/e")"
# a first line of column names the reader does not know becomes a class of one: a note says so
{ printf 'cls\tsentence_text\n'; cat data/sample/train.tsv; printf '美食\t好\n科技\t新\n'; } >"$TMP/hdr_unknown.tsv"
"$TRAIN" --config "$TMP/c.json" --set data.train="$TMP/hdr_unknown.tsv" --set data.dev= --set data.test= --max-steps 1 \
  --set output.dir="$TMP/hdr_unknown" --quiet >/dev/null 2>"$TMP/e" \
  && grep -q "hdr_unknown.tsv:1: the class 'cls' has this one example: a line of column names?" "$TMP/e" \
  || fail "an unknown header line: no note: $(cat "$TMP/e")"
printf '体肓\t错字\n' >>"$TMP/hdr_unknown.tsv"
"$TRAIN" --config "$TMP/c.json" --set data.train="$TMP/hdr_unknown.tsv" --set data.dev= --set data.test= --max-steps 1 \
  --set output.dir="$TMP/hdr_unknown" --overwrite --quiet >/dev/null 2>"$TMP/e" \
  && grep -q "hdr_unknown.tsv: 2 classes have a single example, too few to learn ('cls' on line 1, '体肓' on line 658); mistyped labels?" "$TMP/e" \
  || fail "two classes of one example: no note: $(cat "$TMP/e")"
# a dev file with a class the training set lacks: where, and what to do
{ head -3 data/sample/dev.tsv; printf '财经\t股市\n'; } >"$TMP/dev_new.tsv"
expect_exit 1 "dev_new.tsv:4: label '财经' does not occur in the training set \(known labels: .*\); a dev or test file holds the training set's classes only: remove that class's lines \('mha-predict --eval' scores a file with them, as errors\)" \
  "$TRAIN" --config "$TMP/c.json" --set data.dev="$TMP/dev_new.tsv" --set output.dir="$TMP/dev_new" --quiet
# a header line is skipped with a note (training and --eval); extra columns are noted
{ printf 'label\ttext\n'; cat data/sample/train.tsv; } >"$TMP/hdr.tsv"
"$TRAIN" --config "$TMP/c.json" --set data.train="$TMP/hdr.tsv" --set data.test="$TMP/hdr.tsv" --max-steps 1 \
  --set output.dir="$TMP/notes" --quiet --overwrite >/dev/null 2>"$TMP/e" \
  && [ "$(grep -c "hdr.tsv:1 holds column names (a header line); skipped" "$TMP/e")" = 2 ] \
  && grep -q "654 examples" "$TMP/e" && grep -q "4 classes: 体育 旅游 科技 美食$" "$TMP/e" \
  || fail "header line in training: $(cat "$TMP/e")"
"$PREDICT" --model "$TMP/notes/last.mha" --eval "$TMP/hdr.tsv" >/dev/null 2>"$TMP/e" \
  && grep -q "mha-predict: note: .*hdr.tsv:1 holds column names (a header line); skipped" "$TMP/e" \
  || fail "header line in --eval: $(cat "$TMP/e")"
# --eval of a file whose labels say why they are not the model's: a first column of ids (a few
# of which would match numeric classes; a header line first), GBK labels
M=$TMP/notes/last.mha
{ printf 'qid\tlabel\ttext_a\n'; awk -F'\t' '{print NR-1"\t"$1"\t"$2}' data/sample/dev.tsv; } >"$TMP/dev_ids.tsv"
expect_exit 1 "dev_ids.tsv: none of its 121 labelled lines has a label of the training set .*they are numbers, a different one on each line: is the first column an id\?" \
  "$PREDICT" --model "$M" --eval "$TMP/dev_ids.tsv"
# ... while a file with classes the model lacks, one of them GBK, is scored (those lines as errors)
{ head -50 data/sample/dev.tsv; for i in $(seq 70); do printf '其他\t第%d行\n' "$i"; done;
  printf '\xb2\xe2\t一行\n'; } >"$TMP/dev_mixed.tsv"
"$PREDICT" --model "$M" --eval "$TMP/dev_mixed.tsv" --json >"$TMP/o" 2>"$TMP/e" && grep -q '"n":121' "$TMP/o" \
  || fail "--eval with unknown classes, one of them GBK: not scored: $(cat "$TMP/e")"
iconv -f UTF-8 -t GBK data/sample/dev.tsv >"$TMP/dev_gbk.tsv"
expect_exit 1 "dev_gbk.tsv: none of its 120 labelled lines .*a label held bytes that are not UTF-8, read as U\+FFFD: if the file is GBK, convert it with 'iconv -f GBK -t UTF-8 FILE > NEW'" \
  "$PREDICT" --model "$M" --eval "$TMP/dev_gbk.tsv"
# an option that takes one value, given twice: a usage error (before, the last one won)
expect_exit 2 "--config is given twice; give it once" "$TRAIN" --config "$TMP/c.json" --config="$TMP/c.json"
expect_exit 2 "--max-steps is given twice; give it once" "$TRAIN" --config "$TMP/c.json" --max-steps 1 --max-steps 2
expect_exit 2 "--model is given twice; give it once" "$PREDICT" --model "$M" --model "$M" data/sample/dev.tsv
expect_exit 2 "--eval is given twice; give it once" "$PREDICT" --model "$M" --eval data/sample/dev.tsv --eval=data/sample/test.tsv
# a checkpoint given as the config: said so, with the commands that take it
expect_exit 2 "last.mha: an mha checkpoint, not a JSON config \(mha-train --resume $TMP/notes continues the run in that folder from its last.mha" \
  "$TRAIN" --config "$M"
# --info on a run folder that has a last.mha and no model.mha yet: describes the last.mha
[ ! -e "$TMP/few/model.mha" ] && "$PREDICT" --model "$TMP/few" --info 2>"$TMP/e" | head -1 | grep -q "few/last.mha: training state (last.mha)" \
  || fail "--info on a folder with only last.mha: $(cat "$TMP/e")"
awk -F'\t' '{print $1"\t"$2"\textra"}' data/sample/train.tsv >"$TMP/extra.tsv"
"$TRAIN" --config "$TMP/c.json" --set data.train="$TMP/extra.tsv" --max-steps 1 \
  --set output.dir="$TMP/notes" --quiet --overwrite >/dev/null 2>"$TMP/e" \
  && grep -q "extra.tsv: 654 lines have more than two tab-separated columns (first: line 1); everything after the first tab is read as the text" "$TMP/e" \
  || fail "extra columns: $(cat "$TMP/e")"
expect_exit 2 "missing --model" "$PREDICT"
expect_exit 2 "top-k" "$PREDICT" --model x --top-k 0
expect_exit 2 "expected fp32, bf16 or int8" "$PREDICT" --model x --precision fp16
expect_exit 2 "int8 runs on the cpu only" "$PREDICT" --model x --precision int8 --device cuda
expect_exit 1 "nothere.mha" "$PREDICT" --model "$TMP/nothere.mha"
printf 'not a checkpoint at all, just text\n' >"$TMP/fake.mha"
expect_exit 1 "not an mha checkpoint" "$PREDICT" --model "$TMP/fake.mha"
: >"$TMP/empty.mha"
expect_exit 1 "too short" "$PREDICT" --model "$TMP/empty.mha"
# A batch_size far above the data's size: the model's buffers for the data's size (batches of
# 654, not 10^6; the batcher's buffers, ids only, are still laid out for train.batch_size)
"$TRAIN" --config "$TMP/c.json" --set output.dir="$TMP/huge" --set train.batch_size=1000000 \
  --max-steps 1 --quiet >/dev/null 2>"$TMP/huge.err" || fail "train.batch_size=1000000 on 654 lines: $(tail -2 "$TMP/huge.err")"
# A model that does not fit in memory: exit 1, what it needs and what to lower (its batch: the
# 654 training examples, not the 4096 asked, which no batch of this data reaches). The CPU
# backend refuses a buffer larger than the machine's memory whatever the overcommit policy
# (under AddressSanitizer, whose limit is 1 TiB, the 2 TiB request must return NULL rather
# than abort).
ASAN_OPTIONS="${ASAN_OPTIONS:-}:allocator_may_return_null=1" \
expect_exit 1 "out of memory allocating 327.0 GiB, one buffer of the .* needs at batch 654 x 65536 tokens, [0-9.]+ GiB of it for its [0-9]+ parameters and their gradients \(try a smaller train.batch_size or data.max_len\)" \
    "$TRAIN" --config "$TMP/c.json" --set train.batch_size=4096 --set data.max_len=65536 --set model.d_model=2048 \
    --set model.n_heads=8 --set model.d_ff=4096 --quiet
# ... and where the parameters take the memory, a smaller model is what to try (before: the batch,
# already 1 x 8 tokens): 1024 layers of width 4096 (825 GiB of parameters, one buffer)
ASAN_OPTIONS="${ASAN_OPTIONS:-}:allocator_may_return_null=1" \
expect_exit 1 "needs at batch 1 x 8 tokens, .* for its [0-9]+ parameters and their gradients \(try a smaller model.d_model, model.d_ff, model.n_layers or data.max_vocab\)" \
    "$TRAIN" --config "$TMP/c.json" --set train.batch_size=1 --set data.max_len=8 --set model.d_model=4096 \
    --set model.n_heads=8 --set model.d_ff=16384 --set model.n_layers=1024 --quiet
# Parameter buffers that each fit in memory but, with what training adds (gradients, AdamW's
# moments, the best copy: 5 x the parameters), do not: refused before they are touched (before:
# the OOM killer ended the run, exit 137, without a word). Layers of 12.6M parameters (50 MiB),
# as many as make the parameters 24% of the machine's memory. Where the kernel refuses the
# address space itself (vm.overcommit_memory=2, a ulimit -v), the allocation fails first: the
# out-of-memory message, which then names the model too. Without meson's MALLOC_PERTURB_, which
# has glibc fill every allocation: that would touch them.
mem_kib=$(awk '/^MemTotal:/ {print $2}' /proc/meminfo)
layers=$(( (mem_kib * 1024 / 100 * 24) / (12594176 * 4) + 1 ))
if [ -n "$mem_kib" ] && [ "$layers" -le 1024 ]; then
  ASAN_OPTIONS="${ASAN_OPTIONS:-}:allocator_may_return_null=1" MALLOC_PERTURB_=0 \
  expect_exit 1 "cpu backend: (training a model of [0-9]+ parameters \($layers layers\) needs [0-9.]+ GiB for them, their gradients, AdamW's two moments and the best model's copy, more than this machine's [0-9.]+ GiB of memory|out of memory allocating .*) \(try a smaller model.d_model, model.d_ff, model.n_layers or data.max_vocab\)" \
    "$TRAIN" --config "$TMP/c.json" --set train.batch_size=1 --set data.max_len=8 --set model.d_model=1024 \
    --set model.n_heads=8 --set model.d_ff=4096 --set "model.n_layers=$layers" --quiet
else
  echo "skipped the memory-sum check: a machine of ${mem_kib:-?} KiB needs more than 1024 layers"
fi
# ... but not the activations, which a batch touches only up to its longest example: a long
# data.max_len on short texts trains (the first version of the check refused this, counting
# 64 x 32768 tokens of activations against the memory; MALLOC_PERTURB_ would touch them all)
MALLOC_PERTURB_=0 "$TRAIN" --config "$TMP/c.json" --set output.dir="$TMP/longmax" --set data.max_len=32768 --set train.batch_size=64 \
  --max-steps 1 --quiet >/dev/null 2>"$TMP/longmax.err" || fail "data.max_len 32768 on short texts: $(tail -1 "$TMP/longmax.err")"
# Non-finite training: updates are skipped with a warning, then the run stops (exit 1)
# without writing a checkpoint of diverged parameters.
out=$("$TRAIN" --config "$TMP/c.json" --set output.dir="$TMP/div" --set train.lr=1e6 --set train.clip_norm=0 2>&1 >/dev/null); rc=$?
[ "$rc" = 1 ] || fail "diverging run exited $rc, expected 1"
grep -q "update skipped" <<<"$out" || fail "no skipped-update warning: $out"
grep -q "training diverged" <<<"$out" || fail "no divergence error: $out"
[ ! -e "$TMP/div/last.mha" ] && [ ! -e "$TMP/div/model.mha" ] || fail "the diverged run wrote a checkpoint"
# The trainer reads each update's outcome one update late (model/optimizer.h): the warnings
# still name 5 consecutive updates, the error the last of them, and metrics.jsonl has a record
# for each update before it, the skipped ones marked.
warned=$(grep -o "warning: update [0-9]*" <<<"$out" | grep -o "[0-9]*$" | tr '\n' ' ')
last=$(grep -o "in a row at update [0-9]*" <<<"$out" | grep -o "[0-9]*$")
first=$((${last:-0} - 4))
[ "$warned" = "$(seq -s ' ' "$first" "$last") " ] || fail "skipped updates warned: '$warned', error at update '$last'"
logged=$(grep -c '"type":"train"' "$TMP/div/metrics.jsonl")
[ "$logged" = $((${last:-0} - 1)) ] || fail "metrics.jsonl has $logged train records, expected $((${last:-0} - 1))"
[ "$(grep -c '"skipped":true' "$TMP/div/metrics.jsonl")" = 4 ] || fail "metrics.jsonl: not 4 skipped records"
# a label with a control character (JSON allows it): refused, it would break the reports' lines
printf '{"label":"a\\tb","text":"好"}\n{"label":"c","text":"坏"}\n' >"$TMP/ctl.jsonl"
expect_exit 1 "ctl.jsonl:1: label 'a.b' holds the control character 0x09" \
  "$TRAIN" --config "$TMP/c.json" --set data.train="$TMP/ctl.jsonl" --set data.format=jsonl --quiet
# [CLS] under a causal mask sees only itself: refused (before: a model that ignored its text)
expect_exit 2 "key 'model.causal': true with model.pooling = \"cls\" would let \[CLS\], the first position, attend only to itself" \
  "$TRAIN" --config "$TMP/c.json" --set model.causal=true --set model.pooling=cls
# a relation broken by --set names the file's line and the --set that broke it
expect_exit 2 "c.json:[0-9]+: key 'model.n_heads': 2 does not divide model.d_model = 15 .* \(model.d_model comes from --set\)" \
  "$TRAIN" --config "$TMP/c.json" --set model.d_model=15
expect_exit 2 "key 'output.dir' is empty" "$TRAIN" --config "$TMP/c.json" --set output.dir=
touch "$TMP/afile"
expect_exit 2 "$TMP/afile: output.dir names a file, not a folder \(choose another output.dir\)" \
  "$TRAIN" --config "$TMP/c.json" --set output.dir="$TMP/afile"
expect_exit 2 "$TMP/afile/sub/run: output.dir goes through a file, not a folder \(choose another output.dir\)" \
  "$TRAIN" --config "$TMP/c.json" --set output.dir="$TMP/afile/sub/run"   # (before: exit 1)
expect_exit 2 "$TMP/afile/: output.dir names a file, not a folder" "$TRAIN" --config "$TMP/c.json" --set output.dir="$TMP/afile/"
# an empty value is no value (before: "--model ''" read as a checkpoint path, exit 1)
expect_exit 2 "^mha-predict: --model needs a value \(got an empty one\)" "$PREDICT" --model '' -
expect_exit 2 "^mha-train: --config needs a value \(got an empty one\)" "$TRAIN" --config ''
# standard output closed: the report fails loudly, and nothing lands in a file the run opened
# (before: the test report was written into OUTPUT_DIR/.lock, exit 0)
rc=0; "$TRAIN" --config "$TMP/c.json" --set output.dir="$TMP/closed" --set train.epochs=1 --quiet >&- 2>"$TMP/e" || rc=$?
[ "$rc" = 1 ] && grep -q "cannot write the report to standard output" "$TMP/e" && [ ! -s "$TMP/closed/.lock" ] \
  || fail "training with stdout closed: exit $rc, $(cat "$TMP/e"), .lock holds $(wc -c <"$TMP/closed/.lock") bytes"
rc=0; "$PREDICT" --model "$TMP/closed/last.mha" <&- >/dev/null 2>"$TMP/e" || rc=$?
[ "$rc" = 1 ] && grep -q "<stdin>: read error (Bad file descriptor)" "$TMP/e" || fail "predict with stdin closed: exit $rc, $(cat "$TMP/e")"
rc=0; "$PREDICT" --model "$TMP/closed/last.mha" --eval - <&- >/dev/null 2>"$TMP/e" || rc=$?
[ "$rc" = 1 ] && grep -q "<stdin>: read error (Bad file descriptor)" "$TMP/e" || fail "--eval - with stdin closed: exit $rc, $(cat "$TMP/e")"
rc=0; "$PREDICT" --model "$TMP/closed/last.mha" data/sample/test.tsv >&- 2>"$TMP/e" || rc=$?
[ "$rc" = 1 ] && grep -q "cannot write predictions to standard output" "$TMP/e" || fail "predict with stdout closed: exit $rc, $(cat "$TMP/e")"
finish
