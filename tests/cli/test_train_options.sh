#!/usr/bin/env bash
# tests/cli/test_train_options.sh: training options that no other test runs end to end:
# train.eval_every (dev evaluations every N updates instead of once per epoch), train.patience
# (early stopping, with either kind of evaluation, and a resume of a run that stopped early),
# config keys whose effect only a whole run shows (vocabulary, bucketing, truncation, the
# learning-rate schedule, weight decay's reach, max_bad_steps), --profile (its table, and
# updates identical to an unprofiled run's), the notes on dev sets that repeat the training
# data (whole or in part) and on a training file that repeats itself, and the progress lines
# of a --max-steps run.
source "$(dirname "$0")/lib.sh" "$@"
field() { sed "s/.*\"$1\":\([^,}]*\).*/\1/"; }   # field NAME: that field of each record on stdin
records() { grep "\"type\":\"$2\"" "$1/metrics.jsonl"; }   # records DIR TYPE

# ---- 1. train.eval_every=7 over 3 epochs (41 batches each): dev records at updates 7, 14, ...,
# 119, and after the last update (123), none at the first two epochs' ends
tiny_config "$TMP/cfg.json" "$TMP/every" 3
"$TRAIN" --config "$TMP/cfg.json" --set train.eval_every=7 >"$TMP/every.out" 2>"$TMP/every.err" \
  || { cat "$TMP/every.err"; fail "training with train.eval_every=7 failed"; finish; }
total=$(records "$TMP/every" train | wc -l)
[ "$total" = 123 ] || fail "eval_every run: $total train records, expected 123 (3 epochs of 41 updates)"
got=$(records "$TMP/every" dev | field update | tr '\n' ' ')
want="$(seq 7 7 "$total" | tr '\n' ' ')123 "
[ "$got" = "$want" ] || fail "dev evaluations at updates '$got', expected '$want'"
# each dev record names the epoch its update belongs to, as the train record of that update does
while read -r rec; do
  u=$(field update <<<"$rec") e=$(field epoch <<<"$rec")
  te=$(records "$TMP/every" train | grep "\"update\":$u," | field epoch)
  [ "$e" = "$te" ] || fail "dev record at update $u says epoch $e, its train record epoch $te"
done < <(records "$TMP/every" dev)
# ... and so does the test record, of the best model's update
u=$(records "$TMP/every" test | field update) e=$(records "$TMP/every" test | field epoch)
te=$(records "$TMP/every" train | grep "\"update\":$u," | field epoch)
[ -n "$e" ] && [ "$e" = "$te" ] || fail "test record (update $u) says epoch '$e', its train record epoch $te"
# the progress output shows every evaluation
shown=$(grep -E '^dev +update' "$TMP/every.err" | awk '{print $3}' | tr '\n' ' ')
[ "$shown" = "$want" ] || fail "stderr shows dev evaluations at '$shown', expected '$want'"
# model.mha is the best evaluation's parameters: mha-predict reproduces that record's accuracy
best=$(sed -n 's/.*best model from update \([0-9]*\) .*/\1/p' "$TMP/every.err")
best_rec=$(records "$TMP/every" dev | grep "\"update\":$best,")
[ -n "$best" ] && grep -q '"best":true' <<<"$best_rec" || fail "best model from update '$best': no dev record marked best there"
max_acc=$(records "$TMP/every" dev | field accuracy | sort -g | tail -1)
best_acc=$(field accuracy <<<"$best_rec")
awk -v a="$best_acc" -v m="$max_acc" 'BEGIN{exit !(a == m)}' || fail "best update's accuracy $best_acc is not the highest, $max_acc"
acc=$("$PREDICT" --model "$TMP/every/model.mha" --eval data/sample/dev.tsv --json | field accuracy)
awk -v a="$acc" -v b="$best_acc" 'BEGIN{d=a-b; exit !(d < 1e-9 && d > -1e-9)}' \
  || fail "model.mha's dev accuracy $acc is not the best evaluation's $best_acc"
# evaluations do not disturb training: the same updates as a run evaluating once per epoch
"$TRAIN" --config "$TMP/cfg.json" --set output.dir="$TMP/epochs" --quiet >/dev/null 2>"$TMP/epochs.err" \
  || { cat "$TMP/epochs.err"; fail "training with per-epoch evaluation failed"; }
[ "$(records "$TMP/every" train | field loss)" = "$(records "$TMP/epochs" train | field loss)" ] \
  || fail "train losses with train.eval_every=7 differ from those with per-epoch evaluation"
[ "$(records "$TMP/epochs" dev | field update | tr '\n' ' ')" = "41 82 123 " ] \
  || fail "per-epoch evaluation not at updates 41 82 123"
[ "$(records "$TMP/epochs" dev | field epoch | tr '\n' ' ')" = "1 2 3 " ] || fail "per-epoch dev records not of epochs 1 2 3"

# an eval_every that divides the run evaluates its last update once
"$TRAIN" --config "$TMP/cfg.json" --set output.dir="$TMP/every41" --set train.eval_every=41 --quiet >/dev/null 2>&1 \
  || fail "training with train.eval_every=41 failed"
[ "$(records "$TMP/every41" dev | field update | tr '\n' ' ')" = "41 82 123 " ] || fail "eval_every=41: not evaluated at 41 82 123 once each"

# ---- 2. early stopping every N updates: lr 1e-12 leaves the dev accuracy where it is, so the
# first evaluation (update 5) stays the best and the third after it (update 20) stops the run
tiny_config "$TMP/stop.json" "$TMP/stop" 5
"$TRAIN" --config "$TMP/stop.json" --set train.lr=1e-12 --set train.eval_every=5 --set train.patience=3 \
  --quiet >/dev/null 2>"$TMP/stop.err" || { cat "$TMP/stop.err"; fail "early-stopping run failed"; }
grep -q 'early stopping: no better dev accuracy in 3 evaluations (train.patience); best at update 5' "$TMP/stop.err" \
  || fail "no early-stopping message: $(tail -3 "$TMP/stop.err")"
[ "$(records "$TMP/stop" train | wc -l)" = 20 ] || fail "early stop: $(records "$TMP/stop" train | wc -l) updates, expected 20"
[ "$(records "$TMP/stop" dev | field update | tr '\n' ' ')" = "5 10 15 20 " ] || fail "early stop: dev records not at 5 10 15 20"
grep -q 'best model from update 5 ' "$TMP/stop.err" || fail "early stop: best model not from update 5"
# resumed, the run is complete: nothing to do, nothing appended
before=$(wc -l <"$TMP/stop/metrics.jsonl")
expect_exit 0 'already complete \(20 updates, stopped early\)' "$TRAIN" --resume "$TMP/stop/last.mha"
[ "$(wc -l <"$TMP/stop/metrics.jsonl")" = "$before" ] || fail "resuming a run that stopped early wrote records"

# without a dev set, patience and eval_every do nothing: said once, and the model is the
# final parameters (before: silently, and "best model from update N")
"$TRAIN" --config "$TMP/cfg.json" --set data.dev= --set train.patience=2 --set train.eval_every=5 \
  --set output.dir="$TMP/nodev" --set train.epochs=1 >/dev/null 2>"$TMP/nodev.err" || fail "run without dev failed"
grep -q "note: train.patience and train.eval_every evaluate on the dev set, and there is none (data.dev): they do nothing; the final parameters become the model" "$TMP/nodev.err" \
  && grep -q "the final parameters (no dev set) in $TMP/nodev/model.mha" "$TMP/nodev.err" \
  || fail "patience without a dev set: $(grep -E 'note|done' "$TMP/nodev.err")"

# early stopping on the very update --max-steps stops at still ends the run (test report, done)
"$TRAIN" --config "$TMP/stop.json" --set output.dir="$TMP/stopmax" --set train.lr=1e-12 --set train.eval_every=5 \
  --set train.patience=3 --max-steps 20 --quiet >"$TMP/stopmax.out" 2>"$TMP/stopmax.err" || fail "early stop at --max-steps failed"
grep -q 'early stopping' "$TMP/stopmax.err" && grep -q '^training done: 20 updates' "$TMP/stopmax.err" \
  && ! grep -q '^stopped at update' "$TMP/stopmax.err" && grep -q '^accuracy ' "$TMP/stopmax.out" \
  || fail "early stop on the --max-steps update: not reported as the end of the run: $(tail -3 "$TMP/stopmax.err")"

# patience running out on the last update is no early stop (the run ends there anyway):
# evaluations at 41 (best), 82 and 123 with patience 2
"$TRAIN" --config "$TMP/cfg.json" --set output.dir="$TMP/stoplast" --set train.lr=1e-12 --set train.eval_every=41 \
  --set train.patience=2 --quiet >/dev/null 2>"$TMP/stoplast.err" || fail "patience at the last update: run failed"
! grep -q 'early stopping' "$TMP/stoplast.err" && grep -q '^training done: 123 updates' "$TMP/stoplast.err" \
  || fail "patience running out on the last update announced an early stop: $(tail -2 "$TMP/stoplast.err")"

# ---- 3. early stopping per epoch: patience 1 stops after the second epoch's evaluation
"$TRAIN" --config "$TMP/stop.json" --set output.dir="$TMP/stop1" --set train.lr=1e-12 --set train.patience=1 \
  --quiet >/dev/null 2>"$TMP/stop1.err" || { cat "$TMP/stop1.err"; fail "per-epoch early-stopping run failed"; }
grep -q 'early stopping: no better dev accuracy in 1 evaluation (train.patience); best at update 41' "$TMP/stop1.err" \
  || fail "per-epoch early stop: no message: $(tail -3 "$TMP/stop1.err")"
[ "$(records "$TMP/stop1" train | wc -l)" = 82 ] || fail "per-epoch early stop: not 82 updates (2 epochs)"

# ---- 4. config keys reach the run (each with an effect a wrong wiring would not have)
tiny_config "$TMP/k.json" "$TMP/k" 1
run_k() {  # run_k NAME --set ... : one epoch (41 updates) in $TMP/k-NAME, stderr in $TMP/k-NAME.err
  local name=$1; shift
  "$TRAIN" --config "$TMP/k.json" --set output.dir="$TMP/k-$name" "$@" >/dev/null 2>"$TMP/k-$name.err" \
    || fail "run '$name' ($*) failed: $(tail -2 "$TMP/k-$name.err")"
}
vocab_of() { sed -n 's/^vocab \([0-9]*\) tokens.*/\1/p' "$TMP/k-$1.err"; }
losses_of() { records "$TMP/k-$1" train | field loss; }
run_k base
run_k mincount --set data.min_count=2
run_k maxvocab --set data.max_vocab=50
[ "$(vocab_of mincount)" -lt "$(vocab_of base)" ] || fail "data.min_count=2: vocabulary $(vocab_of mincount), not below $(vocab_of base)"
[ "$(vocab_of maxvocab)" = 50 ] || fail "data.max_vocab=50: vocabulary $(vocab_of maxvocab)"
# a min_count above every token's count: refused (before: a model of [UNK]s, exit 0)
expect_exit 1 "train.tsv: data.min_count = 1000 leaves no token in the vocabulary \(the most frequent of the 1749 distinct tokens occurs 439 times; expected data.min_count <= 439\)" \
  "$TRAIN" --config "$TMP/k.json" --set output.dir="$TMP/k-none" --set data.min_count=1000
run_k random --set data.bucket=false
pad() { sed -n 's/.*padding \([0-9.]*\)% of positions.*/\1/p' "$TMP/k-$1.err"; }
awk -v r="$(pad random)" -v b="$(pad base)" 'BEGIN{exit !(r > 3 * b && r > 10)}' \
  || fail "data.bucket=false: padding $(pad random)% against $(pad base)% bucketed"
run_k head --set data.max_len=8
run_k headtail --set data.max_len=8 --set data.truncate=head_tail
run_k cls --set model.pooling=cls
[ "$(losses_of head)" != "$(losses_of headtail)" ] || fail "data.truncate=head_tail: the same losses as head"
# mha-predict --eval truncates as training did (head_tail) and puts [CLS] first where the model
# pools it: the trainer's test record again
for t in head headtail cls; do
  want="$(records "$TMP/k-$t" test | field accuracy) $(records "$TMP/k-$t" test | field loss)"
  "$PREDICT" --model "$TMP/k-$t/model.mha" --eval data/sample/test.tsv --json >"$TMP/k-$t.eval"
  got="$(field accuracy <"$TMP/k-$t.eval") $(field loss <"$TMP/k-$t.eval")"
  [ "$want" != " " ] && [ "$got" = "$want" ] || fail "data.truncate ($t): mha-predict --eval gives accuracy, loss '$got', the run's test record '$want'"
done
# grad_accum through the trainer: 654 examples in batches of 8 are 82 batches, 28 updates of 3
run_k accum --set train.batch_size=8 --set train.grad_accum=3
[ "$(records "$TMP/k-accum" train | wc -l)" = 28 ] && grep -q '^training done: 28 updates' "$TMP/k-accum.err" \
  || fail "train.grad_accum=3 with 82 batches: $(records "$TMP/k-accum" train | wc -l) updates, expected 28"
# train.metric=loss: a dev evaluation is the best when its loss is the lowest so far (and only then)
run_k lossmetric --set train.metric=loss --set train.eval_every=5
records "$TMP/k-lossmetric" dev | awk -F'"loss":' '{ split($2, a, ","); l = a[1] + 0; best = $0 ~ /"best":true/
    if (best != (NR == 1 || l < low)) { printf "dev record %d: loss %s, lowest before %s, best %d\n", NR, a[1], low, best; bad = 1 }
    if (NR == 1 || l < low) low = l } END { exit bad || NR < 8 }' \
  || fail "train.metric=loss: the best dev record is not the one with the lowest loss"
# a short last batch is averaged over its own examples: 17 examples in batches of 16 leave one
# alone, whose gradient norm (dropout 0, lr 1e-12: the weights stay put) must be that of the
# same example in a run of batches of 1 (before a fix it could have been 1/16 of it)
head -17 data/sample/train.tsv >"$TMP/seventeen.tsv"
for bs in 16 1; do
  run_k "bs$bs" --set data.train="$TMP/seventeen.tsv" --set train.batch_size=$bs --set data.bucket=false \
    --set model.dropout=0 --set train.lr=1e-12
done
last=$(records "$TMP/k-bs16" train | tail -1 | field grad_norm)
records "$TMP/k-bs1" train | field grad_norm | awk -v g="$last" '{ d = ($1 - g) / $1; if (d < 0) d = -d; if (d < 1e-6) hit = 1 }
    END { exit !(hit && NR == 17) }' || fail "the last batch of 1 has grad_norm $last, no single example's: $(records "$TMP/k-bs1" train | field grad_norm | tr '\n' ' ')"
# the share of training examples that max_len cuts is said (none at the config's max_len)
grep -Eq "^truncated: [1-9][0-9]* of [0-9]+ training examples \([0-9.]+%\) have more than 8 tokens \(data.max_len; data.truncate head_tail keeps their first and last tokens\)$" "$TMP/k-headtail.err" \
  || fail "data.max_len=8: no 'truncated:' line: $(grep -i trunc "$TMP/k-headtail.err")"
! grep -q "^truncated:" "$TMP/k-base.err" || fail "a 'truncated:' line at the config's max_len: $(grep "^truncated" "$TMP/k-base.err")"
# the schedule: cosine decay to 0.2 of train.lr after a warmup of lround(0.1 x 41) = 4 updates
run_k cosine --set train.decay=cosine --set train.min_lr_ratio=0.2 --set train.lr=0.002
records "$TMP/k-cosine" train | awk -F'"lr":' '{ split($2, a, ","); u = NR - 1; W = 4; T = 41; lr = 0.002
    if (u < W) want = lr * (u + 1) / W
    else { p = (u - W) / (T - W); want = lr * (0.2 + 0.8 * 0.5 * (1 + cos(3.141592653589793 * p))) }
    d = a[1] - want; if (d < 0) d = -d
    if (d > 1e-6 * want) { printf "update %d: lr %s, expected %.9g\n", NR, a[1], want; bad = 1 } }
    END { exit bad || NR != 41 }' || fail "train.decay=cosine with min_lr_ratio 0.2: learning rates off"
# weight decay reaches the embeddings only when asked, and only matters when it is not 0
run_k wd --set train.weight_decay=0.5
run_k wdemb --set train.weight_decay=0.5 --set train.decay_embeddings=true
run_k wdnorm --set train.weight_decay=0.5 --set train.decay_norms=true
run_k emb0 --set train.weight_decay=0 --set train.decay_embeddings=true --set train.decay_norms=true
run_k wd0 --set train.weight_decay=0
[ "$(losses_of wd)" != "$(losses_of wdemb)" ] || fail "train.decay_embeddings=true changed nothing"
[ "$(losses_of wd)" != "$(losses_of wdnorm)" ] || fail "train.decay_norms=true changed nothing"
[ "$(losses_of wd0)" = "$(losses_of emb0)" ] || fail "decay_embeddings/decay_norms changed the run at weight_decay 0"
[ "$(losses_of wd)" != "$(losses_of wd0)" ] || fail "train.weight_decay=0.5 changed nothing"
# train.max_bad_steps: 2 non-finite updates in a row end the run
out=$("$TRAIN" --config "$TMP/k.json" --set output.dir="$TMP/k-div" --set train.lr=1e6 --set train.clip_norm=0 \
      --set train.max_bad_steps=2 2>&1 >/dev/null); rc=$?
[ "$rc" = 1 ] && [ "$(grep -c 'update skipped' <<<"$out")" = 2 ] && grep -q 'training diverged' <<<"$out" \
  || fail "train.max_bad_steps=2: exit $rc, $(grep -c 'update skipped' <<<"$out") skipped updates before the error"

# ---- 5. --profile: the table, and the same updates as without it
"$TRAIN" --config "$TMP/cfg.json" --set output.dir="$TMP/prof" --max-steps 6 --profile --quiet >/dev/null \
  2>"$TMP/prof.err" || { cat "$TMP/prof.err"; fail "--profile run failed"; }
"$TRAIN" --config "$TMP/cfg.json" --set output.dir="$TMP/plain" --max-steps 6 --quiet >/dev/null 2>&1 \
  || fail "unprofiled run failed"
for row in '^profile: [0-9.]+ s of training, [1-9][0-9]* real tokens' '^\| op family \| seconds \| share \| calls \| GFLOP/s \|$' \
           '^\| GEMM \(linear layers\) \| [0-9.]+ \| [0-9.]+% \| [1-9][0-9]* \| [0-9.]+ \|$' \
           '^\| attention \| [0-9.]+ \| [0-9.]+% \| [1-9][0-9]* \| [0-9.]+ \|$' \
           '^\| optimizer \(AdamW, norm, clip\) \| [0-9.]+ \| [0-9.]+% \| [1-9]' \
           '^whole step: [0-9.]+ GFLOP/s .* of the sgemm ceiling [0-9.]+ GFLOP/s'; do
  grep -qE "$row" "$TMP/prof.err" || fail "--profile output lacks /$row/"
done
[ "$(records "$TMP/prof" train | field loss)" = "$(records "$TMP/plain" train | field loss)" ] \
  || fail "--profile changed the training losses"
cmp -s "$TMP/prof/last.mha" "$TMP/plain/last.mha" || {
  # the checkpoints differ only in the stored elapsed time; compare the parameters through predictions
  a=$("$PREDICT" --model "$TMP/prof/last.mha" --top-k 4 data/sample/test.tsv | md5sum)
  b=$("$PREDICT" --model "$TMP/plain/last.mha" --top-k 4 data/sample/test.tsv | md5sum)
  [ "$a" = "$b" ] || fail "--profile changed the trained parameters (predictions differ)"
}

# ---- the training file given as data.dev too: warned, the run goes on
"$TRAIN" --config "$TMP/cfg.json" --set output.dir="$TMP/samedev" --set data.dev=data/sample/train.tsv --max-steps 2 \
  --quiet >/dev/null 2>"$TMP/samedev.err" || fail "dev = train: the run failed: $(tail -2 "$TMP/samedev.err")"
grep -q "warning: .*train.tsv holds the same examples as the training file" "$TMP/samedev.err" \
  || fail "dev = train: no warning: $(cat "$TMP/samedev.err")"

# ---- a dev set repeating some training texts (10 with their label, 3 with another): a note
# with the counts; the sample's own test set repeats none: no note
{ head -10 data/sample/train.tsv
  sed -n 11,13p data/sample/train.tsv | awk -F'\t' -v OFS='\t' '{ $1 = ($1 == "体育" ? "美食" : "体育"); print }'
  cat data/sample/dev.tsv; } >"$TMP/overlap_dev.tsv"
"$TRAIN" --config "$TMP/cfg.json" --set output.dir="$TMP/overlap" --set data.dev="$TMP/overlap_dev.tsv" --max-steps 1 \
  --quiet >/dev/null 2>"$TMP/overlap.err" || fail "dev repeating train: the run failed: $(tail -2 "$TMP/overlap.err")"
grep -q "^mha-train: note: $TMP/overlap_dev.tsv: 13 of 133 examples (9.8%) repeat a training example token for token (10 with its label): the scores on this file" \
  "$TMP/overlap.err" || fail "dev repeating train: no note with 13 of 133 (10 same label): $(cat "$TMP/overlap.err")"
[ "$(grep -c "repeat a training example" "$TMP/overlap.err")" = 1 ] \
  || fail "a note on the sample's test set, which repeats no training text: $(cat "$TMP/overlap.err")"
grep -q "repeat an earlier one" "$TMP/overlap.err" && fail "a note on repeats in the sample's training file, which has none"
# ---- a training file repeating 13 of its texts, 3 of them under another label: a note
head -10 "$TMP/overlap_dev.tsv" | cat data/sample/train.tsv - >"$TMP/repeats_train.tsv"
sed -n 11,13p "$TMP/overlap_dev.tsv" >>"$TMP/repeats_train.tsv"
"$TRAIN" --config "$TMP/cfg.json" --set output.dir="$TMP/repeats" --set data.train="$TMP/repeats_train.tsv" --max-steps 1 \
  --quiet >/dev/null 2>"$TMP/repeats.err" || fail "training file with repeats: the run failed: $(tail -2 "$TMP/repeats.err")"
grep -q "^mha-train: note: $TMP/repeats_train.tsv: 13 of 667 examples (1.9%) repeat an earlier one token for token, so those texts weigh more in training; 3 texts have copies with different labels$" \
  "$TMP/repeats.err" || fail "training file with repeats: no note with 13 of 667 (3 texts, labels differing): $(cat "$TMP/repeats.err")"

# ---- --max-steps: the progress counts to where the run stops (stderr not a terminal here),
# and says once that the schedule is longer
"$TRAIN" --config "$TMP/cfg.json" --set output.dir="$TMP/short" --max-steps 30 >/dev/null 2>"$TMP/short.err" \
  || fail "--max-steps 30 run failed: $(tail -3 "$TMP/short.err")"
grep -q "^--max-steps 30: this run stops at update 30 of the schedule's 123 " "$TMP/short.err" \
  || fail "--max-steps: no note that the schedule goes on: $(grep -v '^[ {}]' "$TMP/short.err" | head -12)"
! grep -q "same examples" "$TMP/short.err" || fail "the dev = train warning on a run with its own dev set"
grep -q "^step 30/30 " "$TMP/short.err" && ! grep -q "^step [0-9]*/123 " "$TMP/short.err" \
  || fail "--max-steps: progress does not count to 30: $(grep '^step' "$TMP/short.err")"
# ... a stop on an epoch's last update still evaluates that epoch (a dev record, model.mha), and
# --max-steps equal to the whole schedule finishes the run (the test record)
"$TRAIN" --config "$TMP/cfg.json" --set output.dir="$TMP/epoch_end" --max-steps 41 --quiet >/dev/null 2>&1 \
  || fail "--max-steps 41 failed"
[ "$(records "$TMP/epoch_end" dev | field update)" = 41 ] && [ -f "$TMP/epoch_end/model.mha" ] \
  || fail "--max-steps 41 (an epoch's end): no dev record at update 41, or no model.mha: $(records "$TMP/epoch_end" dev)"
"$TRAIN" --config "$TMP/cfg.json" --set output.dir="$TMP/whole" --set train.epochs=1 --max-steps 41 --quiet >/dev/null 2>"$TMP/whole.err" \
  || fail "--max-steps = the whole run failed"
[ "$(records "$TMP/whole" test | wc -l)" = 1 ] && grep -q "^training done: 41 updates" "$TMP/whole.err" \
  || fail "--max-steps equal to the schedule's 41 updates: the run did not finish: $(cat "$TMP/whole.err")"

# ---- a warmup longer than the run: a note with how far the rate gets; none when it fits
"$TRAIN" --config "$TMP/cfg.json" --set output.dir="$TMP/warm" --set train.epochs=1 --set train.warmup=500 \
  --max-steps 1 --quiet >/dev/null 2>"$TMP/warm.err" || fail "run with a long warmup failed: $(tail -2 "$TMP/warm.err")"
grep -q "^mha-train: note: train.warmup is 500 updates and the run has 41: the learning rate rises to 0.082 of train.lr" \
  "$TMP/warm.err" || fail "a warmup longer than the run: no note: $(cat "$TMP/warm.err")"
"$TRAIN" --resume "$TMP/warm" --max-steps 2 >/dev/null 2>"$TMP/warm.err" || fail "resuming the long-warmup run failed"
! grep -q "train.warmup is" "$TMP/warm.err" || fail "the warmup note again on --resume, which cannot change it"
"$TRAIN" --config "$TMP/cfg.json" --set output.dir="$TMP/warm" --set train.epochs=1 --set train.warmup=41 \
  --max-steps 1 --quiet --overwrite >/dev/null 2>"$TMP/warm.err" || fail "run with warmup 41 failed"
! grep -q "train.warmup is" "$TMP/warm.err" || fail "a warmup as long as the run got a note: $(cat "$TMP/warm.err")"

# ---- a path starting with ~/ is in the home folder (a shell leaves --set key=~/x alone); without
# HOME it is refused rather than made a folder called '~'
HOME="$TMP/home" "$TRAIN" --config "$TMP/cfg.json" --set output.dir='~/runs/t' --max-steps 1 --quiet >/dev/null 2>"$TMP/home.err" \
  && [ -f "$TMP/home/runs/t/last.mha" ] || fail "output.dir=~/runs/t: not in HOME: $(cat "$TMP/home.err")"
(cd "$TMP" && env -u HOME "$TRAIN" --config "$TMP/cfg.json" --set output.dir='~/runs/u' --max-steps 1 --quiet >/dev/null 2>"$TMP/home.err"); rc=$?
[ $rc = 2 ] && grep -q "key 'output.dir': '~/runs/u' starts with '~' and HOME is not set" "$TMP/home.err" && [ ! -e "$TMP/~" ] \
  || fail "output.dir=~/runs/u without HOME: expected exit 2 and no folder '~' (rc $rc): $(cat "$TMP/home.err")"
(cd "$TMP" && HOME=rel "$TRAIN" --config "$TMP/cfg.json" --set output.dir='~/runs/u' --max-steps 1 --quiet >/dev/null 2>"$TMP/home.err"); rc=$?
[ $rc = 2 ] && grep -q "starts with '~' and HOME is not an absolute path" "$TMP/home.err" \
  || fail "output.dir=~/runs/u with HOME=rel: expected exit 2 (rc $rc): $(cat "$TMP/home.err")"

# ---- train.tf32 on the cpu: a note that it does nothing there
"$TRAIN" --config "$TMP/cfg.json" --set output.dir="$TMP/tf32" --set train.device=cpu --set train.tf32=true --max-steps 1 \
  --quiet >/dev/null 2>"$TMP/tf32.err" && grep -q "^mha-train: note: train.tf32 is for CUDA's matrix products; the cpu computes as train.precision says (fp32)$" "$TMP/tf32.err" \
  || fail "train.tf32 on the cpu: no note: $(cat "$TMP/tf32.err")"
# ---- a config read from a pipe: its relative paths from the working directory (before:
# from /dev/fd, "cannot open /dev/fd/../data/sample/train.tsv")
tiny_config "$TMP/abs.json" "$TMP/piped" 1
"$TRAIN" --config <(sed "s#\"$PWD/#\"#g" "$TMP/abs.json") --max-steps 1 --quiet >/dev/null 2>"$TMP/pipe.err" \
  && [ -f "$TMP/piped/last.mha" ] || fail "config from a pipe with relative data paths: $(cat "$TMP/pipe.err")"
# ... and /dev/stdin redirected from a file: relative to that file's folder, as --config FILE is
# (before: to /dev, "/dev/data/sample/train.tsv")
mkdir -p "$TMP/cfgdir" && cp data/sample/train.tsv "$TMP/cfgdir/" \
  && printf '{"data": {"train": "train.tsv", "max_len": 16}, "model": {"d_model": 16, "n_heads": 2, "d_ff": 32, "n_layers": 1}, "output": {"dir": "stdin-run"}}' >"$TMP/cfgdir/rel.json"
(cd "$TMP" && "$TRAIN" --config /dev/stdin --max-steps 1 --quiet <"$TMP/cfgdir/rel.json" >/dev/null 2>"$TMP/stdin.err") \
  && [ -f "$TMP/cfgdir/stdin-run/last.mha" ] || fail "config on /dev/stdin from a file: $(cat "$TMP/stdin.err")"
# ---- class names that differ only in case, width or composition: a note (text is read
# NFKC-normalised and case-folded, labels as written; before: silently separate classes)
{ for i in 1 2 3; do printf 'Sport\t体育比赛%s\nsport\t足球%s\ncaf\xc3\xa9\t咖啡%s\ncafe\xcc\x81\t好%s\n' $i $i $i $i; done; } >"$TMP/look.tsv"
"$TRAIN" --config "$TMP/cfg.json" --set data.train="$TMP/look.tsv" --set data.dev= --set data.test= \
  --set output.dir="$TMP/look" --max-steps 1 --quiet >/dev/null 2>"$TMP/look.err"
grep "note: the classes .*'Sport' and 'sport'.* in $TMP/look.tsv differ only in case, width, composition or invisible characters" "$TMP/look.err" \
  | grep -q "'caf[^']*' and 'caf" \
  || fail "look-alike class names: no note: $(cat "$TMP/look.err")"
finish
