#!/usr/bin/env bash
# tests/cli/test_kill.sh: mha-train killed with SIGKILL at random moments, every other time
# the moment a temporary checkpoint file appears (a checkpoint is being written). After
# every kill: last.mha and model.mha, where present, load in mha-predict; the next run
# resumes (the dead run's lock never blocks it); a stray ".NAME.tmp.PID" is never read as a
# checkpoint and the next run removes it (one of a running process is left alone). At the
# end --resume finishes the run, and metrics.jsonl holds each record once. MHA_KILL_TRIALS (default 24), MHA_KILL_SEED (random).
source "$(dirname "$0")/lib.sh" "$@"
trials=${MHA_KILL_TRIALS:-24}
seed=${MHA_KILL_SEED:-$$}
RANDOM=$seed
echo "seed $seed (MHA_KILL_SEED=$seed reproduces the kill times), $trials trials"
# A tiny model, one update per epoch: most of the run is evaluating and writing checkpoints.
head -40 data/sample/train.tsv >"$TMP/train.tsv"
OUT=$TMP/out
cat >"$TMP/c.json" <<JSON
{"data": {"train": "$TMP/train.tsv", "dev": "$TMP/train.tsv", "max_len": 16},
 "model": {"d_model": 64, "n_heads": 2, "d_ff": 128, "n_layers": 1, "dropout": 0.1},
 "train": {"epochs": 60, "batch_size": 64, "lr": 2e-3, "threads": 1},
 "output": {"dir": "$OUT"}}
JSON
stray_files() { compgen -G "$OUT/.*.tmp.*" || true; }
mid_write=0 finished=0 killed=0 resumed=0
for i in $(seq "$trials"); do
  if [ -f "$OUT/last.mha" ]; then args=(--resume "$OUT/last.mha"); resumed=$((resumed + 1))
  else args=(--config "$TMP/c.json" --overwrite); fi
  "$TRAIN" "${args[@]}" --quiet >/dev/null 2>"$TMP/run.err" &
  pid=$!
  if [ $((i % 2)) = 1 ]; then
    sleep "0.$(printf '%03d' $((RANDOM % 800)))"
  else
    # the moment this run's temporary checkpoint exists (at most 4 s)
    end=$((SECONDS + 4))
    while [ $SECONDS -lt $end ] && ! compgen -G "$OUT/.*.tmp.$pid" >/dev/null && kill -0 $pid 2>/dev/null; do :; done
  fi
  kill -KILL $pid 2>/dev/null
  rc=0; { wait $pid; } 2>/dev/null || rc=$?
  if compgen -G "$OUT/.*.tmp.$pid" >/dev/null; then mid_write=$((mid_write + 1)); fi
  if [ "$rc" = 0 ]; then   # the run ended before the kill: start over
    finished=$((finished + 1)); rm -rf "$OUT"; continue
  fi
  [ "$rc" = 137 ] || { fail "trial $i: mha-train ${args[*]} exited $rc, expected 137 (killed): $(tail -3 "$TMP/run.err")"; continue; }
  killed=$((killed + 1))
  for f in last.mha model.mha; do
    [ -e "$OUT/$f" ] || continue
    "$PREDICT" --model "$OUT/$f" - <<<"这家酒店很好" >/dev/null 2>"$TMP/p.err" \
      || fail "trial $i: $f does not load after SIGKILL: $(cat "$TMP/p.err")"
  done
done
echo "$killed runs killed ($mid_write while writing a checkpoint, $resumed resumed), $finished finished first"
[ "$killed" -ge $((trials / 2)) ] || fail "only $killed of $trials runs were killed"
[ "$mid_write" -ge 1 ] || echo "note: no kill landed while a checkpoint was being written this time"
# Stray temporary files: one of a dead process (garbage inside) and one of a live one.
mkdir -p "$OUT"
sleep 30 & live=$!
head -c 1000 /dev/urandom >"$OUT/.last.mha.tmp.$live"
dead=$(bash -c 'echo $$')   # a PID that has exited
head -c 1000 /dev/urandom >"$OUT/.last.mha.tmp.$dead"
# Finish the run: --resume when there is a last.mha, else from the start.
if [ -f "$OUT/last.mha" ]; then args=(--resume "$OUT/last.mha"); else args=(--config "$TMP/c.json" --overwrite); fi
"$TRAIN" "${args[@]}" --quiet >/dev/null 2>"$TMP/final.err" || fail "final mha-train ${args[*]} failed: $(tail -5 "$TMP/final.err")"
grep -q "training done" "$TMP/final.err" || fail "final run did not finish: $(tail -3 "$TMP/final.err")"
"$PREDICT" --model "$OUT/model.mha" - <<<"这家酒店很好" >/dev/null || fail "model.mha of the finished run does not load"
# metrics.jsonl after all the kills: every update's train and dev record once, in order (a
# resume drops the records written after the last save, which it writes again)
for type in train dev; do
  ups=$(grep "\"type\":\"$type\"" "$OUT/metrics.jsonl" | sed 's/.*"update":\([0-9]*\),.*/\1/' | tr '\n' ' ')
  [ "$ups" = "$(seq -s ' ' 1 60) " ] || fail "metrics.jsonl $type records: not updates 1..60 once each: $ups"
done
left=$(stray_files)
[ "$left" = "$OUT/.last.mha.tmp.$live" ] || fail "temporary files after the final run: '${left:-none}' (expected only the live process's one)"
grep -q "removed .* temporary checkpoint file" "$TMP/final.err" || fail "the final run did not report removing stale temporary files"
kill $live 2>/dev/null; wait $live 2>/dev/null
finish
