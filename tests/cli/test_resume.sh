#!/usr/bin/env bash
# tests/cli/test_resume.sh: a run stopped after N updates and resumed from last.mha produces
# exactly the losses of an uninterrupted run (same batches, dropout masks and AdamW state),
# also when stopped mid-epoch; Ctrl-C (SIGINT) saves last.mha and exits 130. A finished run
# has nothing to resume; a new run does not replace one (--overwrite does); a run resumes
# from any working directory, in the folder of its last.mha.
source "$(dirname "$0")/lib.sh" "$@"
tiny_config "$TMP/c.json" "$TMP/full"
"$TRAIN" --config "$TMP/c.json" --quiet >/dev/null 2>"$TMP/full.err" || { cat "$TMP/full.err"; fail "full run failed"; }
! grep -q -E "resolved config|^step " "$TMP/full.err" || fail "--quiet printed the config or progress lines"
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
# Labelled lines without text are skipped on resume as in the fresh run: the same examples and
# batches (a label found only on such lines is no class, and does not stop the resume).
{ cat data/sample/train.tsv; for k in 1 2 3; do printf '体育\t\n新类\t \n'; done; } >"$TMP/nt.tsv"
"$TRAIN" --config "$TMP/c.json" --set data.train="$TMP/nt.tsv" --set output.dir="$TMP/nt" --max-steps 2 \
  >/dev/null 2>"$TMP/nt1.err" || fail "training with lines without text: $(tail -3 "$TMP/nt1.err")"
"$TRAIN" --resume "$TMP/nt/last.mha" --max-steps 4 >/dev/null 2>"$TMP/nt2.err" \
  || fail "resume with lines without text: $(tail -3 "$TMP/nt2.err")"
[ "$(grep -E '^(train|batches)' "$TMP/nt1.err")" = "$(grep -E '^(train|batches)' "$TMP/nt2.err")" ] \
  && grep -q "nt.tsv: 6 lines have a label but no text (first: line 655); skipped" "$TMP/nt2.err" \
  || fail "resume read the training file differently: $(grep -E '^(train|batches)|no text' "$TMP/nt1.err" "$TMP/nt2.err")"
# A finished run resumed: nothing to do, exit 0, nothing appended to metrics.jsonl.
before=$(wc -l <"$TMP/full/metrics.jsonl")
expect_exit 0 "the run is already complete \(123 updates, every epoch\); nothing to do" \
  "$TRAIN" --resume "$TMP/full/last.mha" --quiet
[ "$(wc -l <"$TMP/full/metrics.jsonl")" = "$before" ] || fail "resuming a finished run wrote to metrics.jsonl"
# ... and says so before anything else (no config dump, no data read), here from a copy
out=$(cd "$TMP" && mkdir -p moved && cp full/last.mha full/model.mha moved/ && mv moved moved2 \
      && "$TRAIN" --resume moved2/last.mha 2>&1); rc=$?
[ "$rc" = 0 ] && [ "$(grep -vc '^mha-train: note: continuing in' <<<"$out")" = 1 ] \
  && grep -q "already complete" <<<"$out" || fail "finished run: expected one line before any data, got: $out"
# ... unless it was killed before its model.mha was saved (no dev set: the final parameters)
tiny_config "$TMP/nodev.json" "$TMP/nodev" 1
sed -i 's#"dev": "[^"]*",##' "$TMP/nodev.json"
"$TRAIN" --config "$TMP/nodev.json" --quiet >/dev/null 2>&1 || fail "run without a dev set failed"
cp "$TMP/nodev/model.mha" "$TMP/nodev.model"
rm "$TMP/nodev/model.mha"
"$TRAIN" --resume "$TMP/nodev/last.mha" --quiet >"$TMP/nodev.out" 2>"$TMP/nodev.err" || fail "resume to save model.mha failed"
cmp -s "$TMP/nodev/model.mha" "$TMP/nodev.model" && grep -q "accuracy" "$TMP/nodev.out" \
  || fail "resuming a run killed before model.mha did not save the same model.mha and the test report"
expect_exit 0 "already complete" "$TRAIN" --resume "$TMP/nodev/last.mha" --quiet
# ... and with a dev set, a finished run whose model.mha went missing: the final parameters,
# evaluated on dev, become the model (before: "best model from update -1" and no model.mha)
cp -r "$TMP/full" "$TMP/lost" && rm "$TMP/lost/model.mha"
"$TRAIN" --resume "$TMP/lost/last.mha" >"$TMP/lost.out" 2>"$TMP/lost.err" || fail "resume without model.mha failed"
grep -q "^resuming $TMP/lost/last.mha at update 123 (after the last epoch)\$" "$TMP/lost.err" \
  || fail "resume after the last epoch: $(grep '^resuming' "$TMP/lost.err")"
grep -q "model.mha is missing (the best parameters are lost); the final parameters, evaluated on dev, become the model" \
  "$TMP/lost.err" && grep -q "best model from update 123 " "$TMP/lost.err" && [ -s "$TMP/lost/model.mha" ] \
  && [ "$(tail -2 "$TMP/lost/metrics.jsonl" | grep -c '"update":123,')" = 2 ] \
  || fail "finished run without model.mha: $(cat "$TMP/lost.err")"
expect_exit 0 "already complete" "$TRAIN" --resume "$TMP/lost/last.mha" --quiet
# A new run in a folder that holds one is refused (exit 2), and the run is left as it was;
# --overwrite starts over (the old checkpoints are gone at once); --overwrite with --resume
# is a usage error.
sum=$(cat "$TMP/full/model.mha" "$TMP/full/last.mha" | cksum)
expect_exit 2 "$TMP/full already holds a run \(last.mha\); continue it with --resume $TMP/full/last.mha, choose another output.dir, or start over with --overwrite" \
  "$TRAIN" --config "$TMP/c.json" --quiet
[ "$(cat "$TMP/full/model.mha" "$TMP/full/last.mha" | cksum)" = "$sum" ] || fail "a refused run changed model.mha or last.mha"
expect_exit 2 "use one of them" "$TRAIN" --resume "$TMP/full/last.mha" --overwrite
cp -r "$TMP/full" "$TMP/over"
sed "s#$TMP/full#$TMP/over#" "$TMP/c.json" >"$TMP/over.json"
"$TRAIN" --config "$TMP/over.json" --overwrite --max-steps 5 --quiet >/dev/null 2>&1 || fail "--overwrite run failed"
[ ! -e "$TMP/over/model.mha" ] && [ "$(grep -c '"type":"train"' "$TMP/over/metrics.jsonl")" = 5 ] \
  || fail "--overwrite left the earlier run's model.mha or metrics behind"
# ... but only once the new run has read its data and built its model: a mistake found on the
# way (here a mistyped training file) leaves the earlier run whole (before: both were gone)
cp "$TMP/full/model.mha" "$TMP/over/" && sum=$(cat "$TMP/over/model.mha" "$TMP/over/last.mha" | cksum)
expect_exit 1 "trian.tsv: cannot open" "$TRAIN" --config "$TMP/over.json" --overwrite --set data.train="$TMP/trian.tsv" --quiet
[ "$(cat "$TMP/over/model.mha" "$TMP/over/last.mha" | cksum)" = "$sum" ] \
  || fail "--overwrite with a mistyped data path removed the earlier run's checkpoints"
rm "$TMP/over/last.mha"
expect_exit 2 "$TMP/over already holds a trained model \(model.mha\); choose another output.dir, or start over with --overwrite" \
  "$TRAIN" --config "$TMP/over.json" --quiet
# Paths are stored absolute and a run continues in the folder of the last.mha it resumes:
# a config with relative paths, started in one folder and resumed from another.
mkdir -p "$TMP/rel/cfg" "$TMP/elsewhere"
cp data/sample/train.tsv data/sample/dev.tsv "$TMP/rel/cfg/"
sed -e "s#\"$PWD/data/sample/\([a-z]*\).tsv\"#\"\1.tsv\"#g" -e 's#"test": "[^"]*",##' \
  -e "s#\"$TMP/rel/run\"#\"../run\"#" <(tiny_config /dev/stdout "$TMP/rel/run" 1) >"$TMP/rel/cfg/c.json"
(cd "$TMP/rel" && "$TRAIN" --config cfg/c.json --quiet --max-steps 10 >/dev/null 2>"$TMP/rel.err") \
  || fail "run with relative paths failed: $(tail -3 "$TMP/rel.err")"
[ -f "$TMP/rel/run/last.mha" ] || fail "relative output.dir not resolved against the config's folder"
(cd "$TMP/elsewhere" && "$TRAIN" --resume ../rel/run/last.mha --quiet >/dev/null 2>"$TMP/rel2.err") \
  || fail "resume from another folder failed: $(tail -3 "$TMP/rel2.err")"
[ -f "$TMP/rel/run/model.mha" ] && [ -z "$(ls -A "$TMP/elsewhere")" ] \
  || fail "the resumed run did not continue in its own folder: $(ls -R "$TMP/elsewhere" | head -5)"
[ "$(grep -c '"type":"train"' "$TMP/rel/run/metrics.jsonl")" = 41 ] || fail "resumed run did not finish its 41 updates"
# A run folder moved, and a last.mha reached through a link: the run continues in the folder
# that holds the file (with a note where that is not where it started), never beside the link.
(cd "$TMP/rel" && "$TRAIN" --config cfg/c.json --set output.dir=part --quiet --max-steps 10 >/dev/null 2>&1) \
  || fail "partial run failed"
mv "$TMP/rel/part" "$TMP/moved"
"$TRAIN" --resume "$TMP/moved/last.mha" --quiet --max-steps 20 >/dev/null 2>"$TMP/mv.err" || fail "resume of a moved folder failed"
grep -q "note: continuing in $(realpath "$TMP/moved"), the folder of" "$TMP/mv.err" || fail "no note for a moved run folder: $(cat "$TMP/mv.err")"
[ "$(grep -c '"type":"train"' "$TMP/moved/metrics.jsonl")" = 20 ] && [ ! -e "$TMP/rel/part" ] || fail "moved run not continued in place"
mkdir "$TMP/links"
ln -s "$TMP/moved/last.mha" "$TMP/links/last.mha"
"$TRAIN" --resume "$TMP/links/last.mha" --quiet >/dev/null 2>&1 || fail "resume through a link failed"
[ -L "$TMP/links/last.mha" ] && [ "$(ls -A "$TMP/links")" = last.mha ] && [ -f "$TMP/moved/model.mha" ] \
  || fail "resume through a link wrote beside the link: $(ls -l "$TMP/links")"
# last.mha copied alone (its model.mha left behind): the best so far is lost, and said.
tiny_config "$TMP/alone.json" "$TMP/alone-run" 3
"$TRAIN" --config "$TMP/alone.json" --quiet --max-steps 42 >/dev/null 2>&1 || fail "run for the copied last.mha failed"
mkdir "$TMP/alone" && cp "$TMP/alone-run/last.mha" "$TMP/alone/"
"$TRAIN" --resume "$TMP/alone/last.mha" --quiet --max-steps 43 >/dev/null 2>"$TMP/alone.err" || fail "resume of a copied last.mha failed: $(cat "$TMP/alone.err")"
grep -q "warning: .*/alone/model.mha, the best parameters on dev so far (update 41, accuracy 0\.[0-9]*), is missing" "$TMP/alone.err" \
  || fail "last.mha copied without model.mha: no warning that the best so far is lost: $(cat "$TMP/alone.err")"
"$TRAIN" --resume "$TMP/alone-run/last.mha" --quiet --max-steps 43 >/dev/null 2>"$TMP/alone2.err" || fail "resume beside model.mha failed"
! grep -q "warning" "$TMP/alone2.err" || fail "a warning with model.mha in place: $(cat "$TMP/alone2.err")"
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
# --max-steps is a total: a run already there has nothing to do (before: one more update ran),
# and a run folder stands for its last.mha
tiny_config "$TMP/ms.json" "$TMP/ms"
"$TRAIN" --config "$TMP/ms.json" --quiet --max-steps 6 >/dev/null 2>&1 || fail "run to 6 updates failed"
sum=$(cksum <"$TMP/ms/last.mha")
expect_exit 0 "$TMP/ms/last.mha is at update 6, where --max-steps 6 stops; nothing to do" \
  "$TRAIN" --resume "$TMP/ms/last.mha" --max-steps 6
expect_exit 0 "is at update 6, where --max-steps 4 stops" "$TRAIN" --resume "$TMP/ms/" --max-steps 4
[ "$(cksum <"$TMP/ms/last.mha")" = "$sum" ] && [ "$(grep -c '"type":"train"' "$TMP/ms/metrics.jsonl")" = 6 ] \
  || fail "a resume already at --max-steps trained"
"$TRAIN" --resume "$TMP/ms" --max-steps 8 --quiet >/dev/null 2>"$TMP/ms.err" || fail "--resume FOLDER: $(cat "$TMP/ms.err")"
[ "$(grep -c '"type":"train"' "$TMP/ms/metrics.jsonl")" = 8 ] || fail "--resume FOLDER --max-steps 8 did not train to update 8"
# Killed during its test report (after "training done"): --resume gives the report, once in
# metrics.jsonl, and trains nothing more, also after an early stop (before: "already
# complete", and the report was never given)
for _ in $(seq 1500); do cat data/sample/test.tsv; done >"$TMP/bigtest.tsv"   # a report of ~2 s
kill_in_report() {   # NAME EPOCHS UPDATES [--set ...]: a run killed in its report, resumed
  local name=$1 epochs=$2 updates=$3 pid
  shift 3
  tiny_config "$TMP/$name.json" "$TMP/$name" "$epochs"
  : >"$TMP/$name.err"
  "$TRAIN" --config "$TMP/$name.json" --set data.test="$TMP/bigtest.tsv" "$@" --quiet >"$TMP/$name.out" 2>"$TMP/$name.err" &
  pid=$!
  for _ in $(seq 3000); do grep -q "training done" "$TMP/$name.err" && break; sleep 0.01; done
  kill -KILL $pid 2>/dev/null; wait $pid 2>/dev/null
  if [ -s "$TMP/$name.out" ]; then
    echo "note: $name: the test report ended before the kill; the killed-report case was not reached"
    return
  fi
  "$TRAIN" --resume "$TMP/$name" >"$TMP/$name.out2" 2>"$TMP/$name.err2" || fail "$name: resume after a kill during the report: $(tail -3 "$TMP/$name.err2")"
  grep -q "accuracy" "$TMP/$name.out2" && [ "$(grep -c '"type":"test"' "$TMP/$name/metrics.jsonl")" = 1 ] \
    && [ "$(grep -c '"type":"train"' "$TMP/$name/metrics.jsonl")" = "$updates" ] \
    || fail "$name: resume after a kill during the test report: no report, not one test record, or not $updates updates: $(cat "$TMP/$name.out2" "$TMP/$name.err2" | tail -5)"
  expect_exit 0 "already complete" "$TRAIN" --resume "$TMP/$name"
}
kill_in_report tr 1 41
kill_in_report trstop 5 20 --set train.lr=1e-12 --set train.eval_every=5 --set train.patience=3
# The training file changed under a run: --resume refuses (before: it went on with other
# batches, or at lr 0 past the new end), and a class the run never had says why
cp data/sample/train.tsv "$TMP/chg.tsv"
"$TRAIN" --config "$TMP/c.json" --set data.train="$TMP/chg.tsv" --set output.dir="$TMP/chg" --max-steps 5 --quiet \
  >/dev/null 2>&1 || fail "run on a copy of the training file failed"
head -300 data/sample/train.tsv >"$TMP/chg.tsv"
expect_exit 1 "$TMP/chg/last.mha: the training data changed since this run started \($TMP/chg.tsv: 300 examples now, 654 then; or this mha reads some lines differently from the one that started the run\)" \
  "$TRAIN" --resume "$TMP/chg"
{ cat data/sample/train.tsv; printf '财经\t股市今天大涨\n'; } >"$TMP/chg.tsv"
expect_exit 1 "chg.tsv:655: label '财经' does not occur in the training set \(known labels: [^)]*\); the classes of a run are fixed when it starts: has $TMP/chg.tsv changed since\?" \
  "$TRAIN" --resume "$TMP/chg"   # (the advice for a dev or test file's class is not given for it)
expect_exit 1 "$TMP/chg.tsv: cannot open \(No such file or directory\); the run reads the training file it started with, by the path stored in its last.mha: put the file back there to resume" \
  bash -c "mv '$TMP/chg.tsv' '$TMP/chg-moved.tsv' && exec '$TRAIN' --resume '$TMP/chg'"
cp data/sample/train.tsv "$TMP/chg.tsv"
"$TRAIN" --resume "$TMP/chg" --max-steps 7 --quiet >/dev/null 2>"$TMP/chg.err" || fail "resume on the restored file: $(cat "$TMP/chg.err")"
# The thread count changes no bit (the linear backward's blocks follow the shapes alone): a
# model wide enough for threaded products gives the same losses and gradient norms on 1 and 2
# threads, so a run with train.threads = 0 resumed on a machine with other cores goes on exactly.
for t in 1 2; do
  "$TRAIN" --config "$TMP/c.json" --set output.dir="$TMP/thr$t" --set train.threads=$t --set model.d_model=128 \
    --set model.d_ff=512 --set train.batch_size=64 --max-steps 6 --quiet >/dev/null 2>&1 || fail "run on $t threads failed"
done
[ "$(grep '"type":"train"' "$TMP/thr1/metrics.jsonl" | sed 's/"elapsed[^,}]*//')" = \
  "$(grep '"type":"train"' "$TMP/thr2/metrics.jsonl" | sed 's/"elapsed[^,}]*//')" ] \
  || fail "1 and 2 threads train differently: $(diff "$TMP/thr1/metrics.jsonl" "$TMP/thr2/metrics.jsonl" | head -4)"
# A second trainer on the same folder is refused while the first holds the lock.
"$TRAIN" --resume "$TMP/int/last.mha" --quiet >/dev/null 2>&1 &
pid=$!
sleep 1
expect_exit 1 "another mha-train" "$TRAIN" --resume "$TMP/int/last.mha" --quiet
kill -INT $pid; wait $pid || true
# The training state a resumed run saves is the uninterrupted run's (helper-80): without a test
# set, test_reported stays false (before: a resume made it true); a best dev metric that is NaN
# or infinite comes back as it was (before: cJSON wrote null, read back as 0, which later
# evaluations compare against differently than against -inf)
state_field() { grep -a "\"$2\":" "$1" | tr -d ' \t'; }
tiny_config "$TMP/nt.json" "$TMP/nt_a" 2
sed -i 's#"test": "[^"]*",##' "$TMP/nt.json"
"$TRAIN" --config "$TMP/nt.json" --quiet >/dev/null 2>&1 || fail "no-test run failed"
"$TRAIN" --config "$TMP/nt.json" --set output.dir="$TMP/nt_b" --max-steps 5 --quiet >/dev/null 2>&1
"$TRAIN" --resume "$TMP/nt_b" --quiet >/dev/null 2>&1 || fail "no-test resume failed"
[ "$(state_field "$TMP/nt_a/last.mha" test_reported)" = "$(state_field "$TMP/nt_b/last.mha" test_reported)" ] \
  || fail "without a test set, a resumed run's test_reported differs: $(state_field "$TMP/nt_b/last.mha" test_reported)"
for leg in a b; do
  steps=(); [ $leg = b ] && steps=(--max-steps 50)
  "$TRAIN" --config "$TMP/c.json" --set output.dir="$TMP/nan_$leg" --set train.lr=1e20 --set train.max_bad_steps=1000 \
    --set train.metric=loss --quiet "${steps[@]}" >/dev/null 2>&1
done
"$TRAIN" --resume "$TMP/nan_b" --quiet >/dev/null 2>&1
want=$(state_field "$TMP/nan_a/last.mha" best_metric)
[ -n "$want" ] && [ "$want" = "$(state_field "$TMP/nan_b/last.mha" best_metric)" ] \
  || fail "best_metric after a resume: $(state_field "$TMP/nan_b/last.mha" best_metric), uninterrupted: $want"
finish
