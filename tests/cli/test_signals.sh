#!/usr/bin/env bash
# tests/cli/test_signals.sh: how mha-train and mha-predict meet the signals and limits of the
# world around them, and output folders that change under a running run.
#  - SIGHUP (the ssh session gone) saves last.mha and exits 130, as SIGINT does; under nohup
#    (SIGHUP ignored at the start) it stays ignored;
#  - stderr a pipe whose reader is gone (`mha-train 2>&1 | tee log`, tee killed): the writes
#    fail (EPIPE) and the run goes on to the end and saves (before: killed by SIGPIPE, no save);
#  - over `ulimit -f`: "cannot write checkpoint (File too large)" and exit 1, and mha-predict's
#    "cannot write predictions ... (File too large)" (before: killed by SIGXFSZ, no message);
#  - an interrupt during the end-of-epoch dev evaluation stops at once (before: the evaluation
#    ran on, the next epoch's update too), and --resume does that evaluation: the same
#    metrics.jsonl and the same model.mha, byte for byte, as an uninterrupted run; the same for
#    an evaluation of train.eval_every in the middle of an epoch (last.mha says it is due);
#  - the output folder moved aside during the run and a new one made at its path: the run
#    refuses to save there (exit 1, says why) and the new folder stays empty;
#  - the process keeps its name after its re-exec (pgrep mha-train finds it, not "exe");
#    train.threads 0 follows OMP_NUM_THREADS when it is set;
#  - --resume takes --set train.device / train.threads, refuses the keys that change the run;
#  - a second stop signal quits at once, saying which update last.mha is from, and leaves no
#    temporary checkpoint; one during the final test report says that --resume gives it.
source "$(dirname "$0")/lib.sh" "$@"
# wait_for FILE PATTERN: up to 60 s (120 s sanitized) for a line matching PATTERN in FILE
wait_for() {
  local end=$((SECONDS + ${MHA_SANITIZED:+120}${MHA_SANITIZED:-60}))
  until grep -q -- "$2" "$1" 2>/dev/null; do [ $SECONDS -lt $end ] || return 1; sleep 0.02; done
}

# SIGHUP
tiny_config "$TMP/h.json" "$TMP/h" 5000
# SIGHUP's default restored for the run: a test started with it ignored (from a nohup'ed shell)
# would otherwise run the "stays ignored" case here
env --default-signal=HUP "$TRAIN" --config "$TMP/h.json" --quiet >/dev/null 2>"$TMP/h.err" &
pid=$!
wait_for "$TMP/h/metrics.jsonl" '"update":3,' || fail "SIGHUP: the run did not start: $(tail -3 "$TMP/h.err")"
kill -HUP $pid
rc=0; wait $pid || rc=$?
[ "$rc" = 130 ] || fail "SIGHUP: exit $rc, expected 130 (saved, as after Ctrl-C): $(tail -3 "$TMP/h.err")"
grep -q "interrupted at update [0-9]*: saved .*last.mha" "$TMP/h.err" || fail "SIGHUP: no save said: $(tail -3 "$TMP/h.err")"
grep -q "^mha-train: stopping: saving last.mha after this step$" "$TMP/h.err" || fail "SIGHUP: not said at once: $(tail -3 "$TMP/h.err")"
"$TRAIN" --resume "$TMP/h" --max-steps 60 --quiet >/dev/null 2>"$TMP/h2.err" || fail "SIGHUP: --resume failed: $(tail -3 "$TMP/h2.err")"
# ... but a run started with SIGHUP ignored (nohup, trap '' HUP) keeps it ignored and trains on
tiny_config "$TMP/nh.json" "$TMP/nh" 5000
(trap '' HUP; exec "$TRAIN" --config "$TMP/nh.json" --max-steps 150 --quiet >/dev/null 2>"$TMP/nh.err") &
pid=$!
wait_for "$TMP/nh/metrics.jsonl" '"update":3,' || fail "nohup: the run did not start: $(tail -3 "$TMP/nh.err")"
kill -HUP $pid
rc=0; wait $pid || rc=$?
[ "$rc" = 0 ] && grep -q '"update":150,' "$TMP/nh/metrics.jsonl" \
  || fail "started under nohup, a SIGHUP stopped the run: exit $rc: $(tail -2 "$TMP/nh.err")"

# SIGPIPE: stderr into a FIFO whose reader has gone
tiny_config "$TMP/p.json" "$TMP/p" 1
mkfifo "$TMP/fifo"
"$TRAIN" --config "$TMP/p.json" >/dev/null 2>"$TMP/fifo" &
pid=$!
exec 3<"$TMP/fifo"
head -c 1 <&3 >/dev/null   # the first byte of the resolved config: the run is writing
exec 3<&-                  # the reader goes; the next write to stderr meets a broken pipe
rc=0; wait $pid || rc=$?
[ "$rc" = 0 ] || fail "stderr a broken pipe: exit $rc, expected 0 (141: killed by SIGPIPE)"
[ -s "$TMP/p/model.mha" ] && [ -s "$TMP/p/last.mha" ] || fail "stderr a broken pipe: the run did not save"

# SIGXFSZ: files limited to 64 KiB, the checkpoints are larger
tiny_config "$TMP/x.json" "$TMP/x" 1
out=$( (ulimit -f 64; "$TRAIN" --config "$TMP/x.json" --quiet 2>&1 >/dev/null) ); rc=$?
[ "$rc" = 1 ] || fail "ulimit -f: mha-train exited $rc, expected 1 (153: killed by SIGXFSZ)"
grep -q "cannot write checkpoint (File too large)" <<<"$out" || fail "ulimit -f: no message: $out"
"$TRAIN" --config "$TMP/x.json" --quiet --overwrite >/dev/null 2>&1 || fail "the run without a file size limit failed"
for _ in $(seq 100); do cat data/sample/dev.tsv; done | cut -f2 >"$TMP/many.txt"   # predictions: 190 KB
out=$( (ulimit -f 64; "$PREDICT" --model "$TMP/x/model.mha" "$TMP/many.txt" 2>&1 >"$TMP/pred.out") ); rc=$?
[ "$rc" = 1 ] || fail "ulimit -f: mha-predict exited $rc, expected 1 (153: killed by SIGXFSZ)"
grep -q "cannot write predictions to standard output (File too large)" <<<"$out" || fail "ulimit -f: mha-predict said: $out"

# An interrupt during the end-of-epoch evaluation. One update an epoch and a dev set of 48000
# lines (an evaluation of seconds): the signal comes once the update's train record is
# written, before or during that evaluation.
head -40 data/sample/train.tsv >"$TMP/e-train.tsv"
for _ in $(seq 400); do cat data/sample/dev.tsv; done >"$TMP/e-dev.tsv"
cat >"$TMP/e.json" <<JSON
{"data": {"train": "$TMP/e-train.tsv", "dev": "$TMP/e-dev.tsv", "max_len": 64},
 "model": {"d_model": 64, "n_heads": 2, "d_ff": 128, "n_layers": 1, "dropout": 0.1},
 "train": {"epochs": 2, "batch_size": 64, "lr": 2e-3, "threads": 1},
 "output": {"dir": "$TMP/e"}}
JSON
# interrupt_eval NAME UPDATE WHAT: runs $TMP/NAME.json to its end (the reference), then again,
# interrupted by SIGINT once update UPDATE's train record is written (its evaluation follows),
# and resumed: exit 130 at that update, no dev record before the resume; a --resume with
# --max-steps UPDATE does the owed evaluation and stops (before, at an epoch's end: "nothing
# to do"); then the same metrics.jsonl and model.mha, byte for byte, as the uninterrupted run.
interrupt_eval() {
  local n=$1 u=$2 what=$3 rc
  "$TRAIN" --config "$TMP/$n.json" --quiet >/dev/null 2>"$TMP/$n-0.err" || fail "$what: $(tail -3 "$TMP/$n-0.err")"
  cp "$TMP/$n/model.mha" "$TMP/$n-model.ref"; cp "$TMP/$n/metrics.jsonl" "$TMP/$n-metrics.ref"
  rm -rf "${TMP:?}/$n"
  "$TRAIN" --config "$TMP/$n.json" --quiet >/dev/null 2>"$TMP/$n-1.err" &
  local pid=$!
  wait_for "$TMP/$n/metrics.jsonl" "\"type\":\"train\",\"update\":$u," || fail "$what: no train record: $(tail -3 "$TMP/$n-1.err")"
  kill -INT $pid
  rc=0; wait $pid || rc=$?
  [ "$rc" = 130 ] || fail "$what, interrupted: exit $rc, expected 130: $(tail -3 "$TMP/$n-1.err")"
  grep -q "^mha-train: stopping: saving last.mha after this step (Ctrl-C again quits at once, without saving)$" "$TMP/$n-1.err" \
    || fail "$what: Ctrl-C not said at once, with what a second one does: $(tail -3 "$TMP/$n-1.err")"
  grep -q "interrupted at update $u:" "$TMP/$n-1.err" \
    || fail "$what: not stopped at update $u (the evaluation and the next update ran first): $(tail -3 "$TMP/$n-1.err")"
  ! grep -q '"type":"dev"' "$TMP/$n/metrics.jsonl" || fail "$what, interrupted: a dev record was written"
  "$TRAIN" --resume "$TMP/$n/last.mha" --max-steps "$u" --quiet >/dev/null 2>"$TMP/$n-s.err" \
    && [ "$(grep -c '"type":"dev"' "$TMP/$n/metrics.jsonl")" = 1 ] && grep -q "^stopped at update $u:" "$TMP/$n-s.err" \
    || fail "$what: --resume --max-steps $u did not do the owed evaluation and stop: $(tail -2 "$TMP/$n-s.err")"
  "$TRAIN" --resume "$TMP/$n/last.mha" --quiet >/dev/null 2>"$TMP/$n-2.err" || fail "$what: --resume failed: $(tail -3 "$TMP/$n-2.err")"
  cmp -s "$TMP/$n/metrics.jsonl" "$TMP/$n-metrics.ref" \
    || fail "$what, interrupted and resumed: metrics.jsonl differs from the uninterrupted run's: $(diff "$TMP/$n/metrics.jsonl" "$TMP/$n-metrics.ref")"
  cmp -s "$TMP/$n/model.mha" "$TMP/$n-model.ref" || fail "$what, interrupted and resumed: model.mha differs from the uninterrupted run's"
}
interrupt_eval e 1 "end-of-epoch evaluation"

# The same for an evaluation of train.eval_every in the middle of an epoch (3 updates an
# epoch, an evaluation every 2): last.mha says it is due, --resume does it first.
head -150 data/sample/train.tsv >"$TMP/v-train.tsv"
sed -e "s#$TMP/e-train.tsv#$TMP/v-train.tsv#" -e "s#$TMP/e\"#$TMP/v\"#" -e 's#"lr": 2e-3#"lr": 2e-3, "eval_every": 2#' \
  "$TMP/e.json" >"$TMP/v.json"
interrupt_eval v 2 "eval_every evaluation"
[ "$(grep -c '"type":"dev"' "$TMP/v/metrics.jsonl")" = 3 ] || fail "eval_every run: expected dev records at updates 2, 4, 6: $(cat "$TMP/v/metrics.jsonl")"

# Ctrl-C after the training, during the test report: the process ends at once, saying that
# --resume gives the report (the training is in last.mha; before, "stopping: saving last.mha"
# was said and the whole report ran, exit 0; later it ended without a word), and it does.
sed -e "s#\"dev\": \"$TMP/e-dev.tsv\"#\"test\": \"$TMP/e-dev.tsv\"#" -e "s#$TMP/e\"#$TMP/r\"#" -e 's#"epochs": 2#"epochs": 1#' \
  "$TMP/e.json" >"$TMP/r.json"
"$TRAIN" --config "$TMP/r.json" >"$TMP/r1.out" 2>"$TMP/r1.err" &
pid=$!
wait_for "$TMP/r1.err" "^training done" || fail "report run: no 'training done': $(tail -3 "$TMP/r1.err")"
kill -INT $pid
rc=0; wait $pid || rc=$?
[ "$rc" = 130 ] && ! grep -q "stopping: saving" "$TMP/r1.err" && ! grep -q '"type":"test"' "$TMP/r/metrics.jsonl" \
  && grep -q "^mha-train: quit: the training is done and $TMP/r/last.mha holds it; mha-train --resume $TMP/r writes what is left (model.mha, the test report)$" "$TMP/r1.err" \
  || fail "Ctrl-C during the test report: exit $rc (expected 130, at once, saying what --resume does): $(tail -2 "$TMP/r1.err")"
"$TRAIN" --resume "$TMP/r/last.mha" >"$TMP/r2.out" 2>"$TMP/r2.err" && grep -q '"type":"test"' "$TMP/r/metrics.jsonl" \
  && grep -q "^accuracy" "$TMP/r2.out" || fail "Ctrl-C during the test report: --resume gave no report: $(tail -3 "$TMP/r2.err")"

# The output folder moved aside (and a new one made at its path) while the run trains.
tiny_config "$TMP/m.json" "$TMP/m" 5000
"$TRAIN" --config "$TMP/m.json" --quiet >/dev/null 2>"$TMP/m.err" &
pid=$!
for _ in $(seq 1200); do [ -s "$TMP/m/last.mha" ] && break; sleep 0.05; done
comm=$(cat /proc/$pid/comm 2>/dev/null)
[ "$comm" = mha-train ] || fail "process name after the re-exec: '$comm', expected mha-train"
mv "$TMP/m" "$TMP/m-moved"
mkdir "$TMP/m"
end=$((SECONDS + 60))   # the next save comes at the end of this epoch: a second or so
while kill -0 $pid 2>/dev/null && [ $SECONDS -lt $end ]; do sleep 0.1; done
kill -KILL $pid 2>/dev/null && fail "folder moved: the run went on training (into the new folder)"
rc=0; wait $pid 2>/dev/null || rc=$?
[ "$rc" = 1 ] || fail "folder moved: exit $rc, expected 1: $(tail -3 "$TMP/m.err")"
grep -q "the output folder was moved or replaced while this run was training" "$TMP/m.err" || fail "folder moved: $(tail -3 "$TMP/m.err")"
[ -z "$(ls -A "$TMP/m")" ] || fail "folder moved: the run wrote into the new folder at its path: $(ls -A "$TMP/m")"
"$PREDICT" --model "$TMP/m-moved/last.mha" - <<<"一行" >/dev/null 2>&1 || fail "folder moved: its last.mha does not load"

# train.threads 0 and OMP_NUM_THREADS: more threads than processors, so that it shows
want=$(( $(nproc) + 3 ))
tiny_config "$TMP/t.json" "$TMP/t" 5000
OMP_NUM_THREADS=$want "$TRAIN" --config "$TMP/t.json" --set train.threads=0 --quiet >/dev/null 2>"$TMP/t.err" &
pid=$!
wait_for "$TMP/t/metrics.jsonl" '"update":2,' || fail "OMP_NUM_THREADS run did not start"
threads=$(sed -n 's/^Threads:[[:space:]]*//p' /proc/$pid/status)
kill -INT $pid; wait $pid 2>/dev/null
[ "${threads:-0}" -ge "$want" ] || fail "train.threads 0 with OMP_NUM_THREADS=$want: $threads threads"

# a second stop signal quits at once: it says where the run stands (the last.mha of an epoch's
# end: 41 updates each) and leaves no temporary checkpoint (before: no word, a .last.mha.tmp.PID).
# Two signals of one kind sent at once merge into one: SIGINT and SIGTERM, while stopped (the
# kernel delivers them in its own order; the second one's number makes the exit code)
"$TRAIN" --config "$TMP/t.json" --set train.threads=1 --set output.dir="$TMP/q" --quiet >/dev/null 2>"$TMP/q.err" &
pid=$!
wait_for "$TMP/q/metrics.jsonl" '"update":45,' || fail "two stop signals: the run did not start: $(tail -3 "$TMP/q.err")"
kill -STOP $pid; kill -INT $pid; kill -TERM $pid; kill -CONT $pid
wait $pid; rc=$?
saved=$(sed -n "s|^mha-train: quit without saving: $TMP/q/last.mha is from update \([0-9]*\) (mha-train --resume $TMP/q/last.mha goes on from there)$|\1|p" "$TMP/q.err")
{ [ "$rc" = 130 ] || [ "$rc" = 143 ]; } && [ -n "$saved" ] && [ $((saved % 41)) = 0 ] && [ -z "$(ls -A "$TMP/q" | grep 'tmp')" ] \
  || fail "a second stop signal: exit $rc, expected 128 + the second signal's number, a note on last.mha's update ($saved) and no temporary file: $(tail -3 "$TMP/q.err"; ls -A "$TMP/q")"
# --set with --resume
out=$("$TRAIN" --resume "$TMP/h/last.mha" --set train.device=cpu --set train.threads=1 --max-steps 65 2>&1 >/dev/null) \
  || fail "--resume --set train.device=cpu --set train.threads=1: $out"
grep -aq '"device":[[:space:]]*"cpu"' "$TMP/h/last.mha" \
  || fail "--resume --set train.device=cpu: not stored in last.mha"
expect_exit 2 "--set train.lr with --resume: train.lr changes the model, the data or the optimisation" \
  "$TRAIN" --resume "$TMP/h/last.mha" --set train.lr=1
expect_exit 2 "--set data.max_len with --resume" "$TRAIN" --resume "$TMP/h/last.mha" --set data.max_len=8
expect_exit 2 "did you mean 'train.device'" "$TRAIN" --resume "$TMP/h/last.mha" --set train.devise=cpu
finish
