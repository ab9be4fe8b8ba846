#!/usr/bin/env bash
# tests/cli/test_cuda.sh (suite cuda): both programs end to end on the GPU, on the tiny config
# of lib.sh. Exit 77 (skipped) where train.device = "cuda" cannot run (no device visible, or a
# build without CUDA). Checks:
#  - train.device = "auto" picks cuda; a model too large for the GPU fails with exit 1 and the
#    out-of-memory message (the size asked, batch_size and max_len to lower); a batch of more
#    than 65535 examples and a wrong MHA_CUDA_FP32_ATTENTION fail with exit 2;
#  - training on cuda in fp32: its losses follow the cpu run's over the first 40 updates (the
#    same batches and dropout masks; relative gap < 1e-3, as tests/cuda/test_cuda_model.c),
#    and so do 8 updates of five variants of the model (pooling, activation, norm, positions,
#    causal, the materialising attention, attention dropout, accumulation, depth 0 and 2);
#  - a cuda run stopped mid-epoch and resumed logs the uninterrupted cuda run's losses, bit for
#    bit (the kernels are deterministic), and so does a run with MHA_CUDA_SYNC=1;
#  - mha-predict --device cuda on the model trained there: the labels of --device cpu (at most
#    2 of 120 lines may differ, near-ties) and their probabilities within 1e-4; --eval on cuda
#    reports the cpu's accuracy;
#  - training in bf16 on cuda finishes with no skipped update and a lower loss at the end.
# MHA_CUDA_CLI_EPOCHS (default 3): the tiny config's epochs (41 updates each). The emulated
# build (test cuda_cli_emu, tests/cuda/meson.build) runs 1: its kernels run as host fibers.
source "$(dirname "$0")/lib.sh" "$@"
tiny_config "$TMP/c.json" "$TMP/cuda" "${MHA_CUDA_CLI_EPOCHS:-3}"
probe=$("$TRAIN" --config "$TMP/c.json" --set train.device=cuda --set output.dir="$TMP/probe" \
          --max-steps 1 --quiet 2>&1 >/dev/null)
rc=$?
# skipped where there is no GPU to use (no device, or one older than the kernels); any other
# failure, such as a CUDA module that is missing or does not load, fails the test
if [ $rc != 0 ] && grep -qE 'train.device = "cuda" but (no CUDA device visible|the GPU .* cannot run this build.s kernels)' <<<"$probe"; then
  echo "SKIP: $probe"
  exit 77
fi
[ $rc = 0 ] || { fail "a 1-update run on cuda failed: $probe"; finish; }

# A model too large for any GPU: exit 1, the size asked and what to lower (nothing trained; its
# batch: the 654 training examples, not the 4096 asked)
expect_exit 1 "cuda backend: out of memory allocating [0-9.]+ [A-Za-z]+, one buffer of the [0-9.]+ TiB a model with 1 layer needs at batch 654 x 65536 tokens, .* \(try a smaller train.batch_size or data.max_len\)" \
    "$TRAIN" --config "$TMP/c.json" --set train.device=cuda --set output.dir="$TMP/oom" --set train.batch_size=4096 \
    --set data.max_len=65536 --set model.d_model=2048 --set model.n_heads=8 --set model.d_ff=4096 --quiet

# More examples per batch than the GPU's grid takes: exit 2 before anything is allocated
# (71,940 training lines: a batch_size above the data's size forms batches of the data's size)
for _ in $(seq 110); do cat data/sample/train.tsv; done >"$TMP/big.tsv"
expect_exit 2 "batches of 65536 examples: the cuda backend runs at most 65535 per batch \(a GPU grid limit\); use a smaller train.batch_size \(mha-predict: --batch-size\)" \
    "$TRAIN" --config "$TMP/c.json" --set train.device=cuda --set output.dir="$TMP/bigbatch" --set train.batch_size=65536 \
    --set data.train="$TMP/big.tsv" --quiet
[ ! -e "$TMP/bigbatch/last.mha" ] || fail "a refused batch size wrote a checkpoint"

# A wrong MHA_CUDA_FP32_ATTENTION (the fp32 attention kernel): exit 2 with the values it takes,
# also when the config leaves train.device at "auto" (no silent fall-back to the cpu)
expect_exit 2 "MHA_CUDA_FP32_ATTENTION=fast: expected simt or tf32x3" \
    env MHA_CUDA_FP32_ATTENTION=fast "$TRAIN" --config "$TMP/c.json" --set output.dir="$TMP/badenv" --quiet

losses() { grep '"type":"train"' "$1/metrics.jsonl" | sed 's/.*"loss":\([^,]*\),.*/\1/'; }

# loss_gap DIR_A DIR_B N: the worst relative gap of their first N losses ("missing" when short)
loss_gap() {
  paste <(losses "$1" | head -"$3") <(losses "$2" | head -"$3") |
    awk -v want="$3" 'NF == 2 { n++; d = ($1 - $2) / $2; if (d < 0) d = -d; if (d > w) w = d }
                      END { if (n == want) printf "%.3g", w; else print "missing" }'
}

# fp32 on cuda against the cpu; the config leaves train.device at "auto", which picks the GPU
"$TRAIN" --config "$TMP/c.json" >/dev/null 2>"$TMP/cuda.err" \
  || fail "training on cuda failed: $(tail -3 "$TMP/cuda.err")"
grep -q '^model: .* backend cuda' "$TMP/cuda.err" \
  || fail "train.device = auto did not pick cuda: $(grep '^model:' "$TMP/cuda.err")"
# the start-up line names the fused attention's kernel: FFMA when MHA_CUDA_FP32_ATTENTION=simt
# (as cuda_cli_emu runs), else tf32x3 on sm_80 and newer (heads of 16 here fit every such GPU)
# and FFMA before
want_kernel="(tf32x3 tensor cores|FFMA)"
[ "${MHA_CUDA_FP32_ATTENTION:-}" = simt ] && want_kernel=FFMA
grep -qE "^model: .* attention fused \($want_kernel\)\$" "$TMP/cuda.err" \
  || fail "the start-up line does not name the kernel ($want_kernel): $(grep '^model:' "$TMP/cuda.err")"
"$TRAIN" --config "$TMP/c.json" --set train.device=cpu --set output.dir="$TMP/cpu" --quiet >/dev/null \
  2>"$TMP/cpu.err" || fail "training on the cpu failed: $(tail -3 "$TMP/cpu.err")"
gap=$(loss_gap "$TMP/cuda" "$TMP/cpu" 40)
[ "$gap" != missing ] && awk -v g="$gap" 'BEGIN { exit !(g < 1e-3) }' \
  || fail "cuda losses leave the cpu run's over 40 updates: worst relative gap $gap"
echo "fp32 cuda vs cpu, 40 updates: worst relative loss gap $gap"

# MHA_CUDA_SYNC=1 (a wait after every launch, to name a failing kernel at its launch): the same
# updates, bit for bit, as the run without it
env MHA_CUDA_SYNC=1 "$TRAIN" --config "$TMP/c.json" --set output.dir="$TMP/sync" --max-steps 5 --quiet >/dev/null \
  2>"$TMP/sync.err" || fail "training with MHA_CUDA_SYNC=1 failed: $(tail -3 "$TMP/sync.err")"
[ "$(losses "$TMP/sync")" = "$(losses "$TMP/cuda" | head -5)" ] || fail "MHA_CUDA_SYNC=1 changed the losses"

# the model's other variants (pooling, activation, norm, positions, causal, attention path and
# dropout, accumulation, smoothing, depth): 8 updates each on cuda and on the cpu, same losses
v=0
while read -r -a opts; do
  v=$((v + 1))
  for dev in cuda cpu; do
    "$TRAIN" --config "$TMP/c.json" --set train.device=$dev --set output.dir="$TMP/v$v-$dev" \
      --max-steps 8 --quiet "${opts[@]}" >/dev/null 2>"$TMP/v$v-$dev.err" \
      || fail "${opts[*]} on $dev failed: $(tail -3 "$TMP/v$v-$dev.err")"
  done
  gap=$(loss_gap "$TMP/v$v-cuda" "$TMP/v$v-cpu" 8)
  [ "$gap" != missing ] && awk -v g="$gap" 'BEGIN { exit !(g < 1e-3) }' \
    || fail "${opts[*]}: cuda losses leave the cpu run's over 8 updates: worst relative gap $gap"
  echo "variant ${opts[*]}: worst relative loss gap $gap over 8 updates"
done <<'VARIANTS'
--set model.pooling=cls --set model.activation=gelu
--set model.pooling=max --set model.norm=pre --set model.attn_dropout=0.1
--set model.causal=true --set model.attention=math --set model.attn_dropout=0.1
--set train.grad_accum=3 --set train.label_smoothing=0.1 --set model.n_layers=2
--set model.position=sinusoidal --set model.n_layers=0
VARIANTS

# stopped after 17 updates (mid-epoch) and resumed on cuda: the same losses, bit for bit
"$TRAIN" --config "$TMP/c.json" --set train.device=cuda --set output.dir="$TMP/part" --max-steps 17 \
  --quiet >/dev/null 2>"$TMP/part.err" || fail "partial cuda run failed: $(tail -3 "$TMP/part.err")"
"$TRAIN" --resume "$TMP/part/last.mha" --quiet >/dev/null 2>"$TMP/resume.err" \
  || fail "resuming on cuda failed: $(tail -3 "$TMP/resume.err")"
[ -n "$(losses "$TMP/cuda")" ] && [ "$(losses "$TMP/cuda")" = "$(losses "$TMP/part")" ] \
  || fail "cuda losses after resuming at 17 differ: $(diff <(losses "$TMP/cuda") <(losses "$TMP/part") | head -4)"

# prediction and evaluation on cuda against the cpu, with the model trained on cuda
M=$TMP/cuda/model.mha
"$PREDICT" --model "$M" --device cuda data/sample/test.tsv >"$TMP/p.cuda" 2>"$TMP/p.err" \
  || fail "mha-predict --device cuda failed: $(tail -3 "$TMP/p.err")"
"$PREDICT" --model "$M" --device cpu data/sample/test.tsv >"$TMP/p.cpu" 2>/dev/null \
  || fail "mha-predict --device cpu failed"
cmp_out=$(paste "$TMP/p.cuda" "$TMP/p.cpu" |
          awk -F'\t' 'NF == 4 { n++; if ($1 != $3) flips++; else { d = $2 - $4; if (d < 0) d = -d; if (d > w) w = d } }
                      END { printf "%d %d %.3g", n, flips, w }')
read -r n flips worst <<<"$cmp_out"
[ "$n" = 120 ] && [ "$flips" -le 2 ] && awk -v w="$worst" 'BEGIN { exit !(w < 1e-4) }' \
  || fail "mha-predict cuda vs cpu: $n lines, $flips labels differ, probabilities differ by up to $worst"
acc() { "$PREDICT" --model "$M" --device "$1" --eval data/sample/test.tsv 2>/dev/null | awk '/^accuracy/ { print $2 }'; }
a_cuda=$(acc cuda)
a_cpu=$(acc cpu)
[ -n "$a_cuda" ] && awk -v a="$a_cuda" -v b="$a_cpu" 'BEGIN { d = a - b; exit !(d < 0.02 && d > -0.02) }' \
  || fail "--eval accuracy on cuda '$a_cuda' vs cpu '$a_cpu'"
echo "mha-predict cuda vs cpu: $flips of $n labels differ, probabilities within $worst; accuracy $a_cuda vs $a_cpu"

# bf16 on cuda: finishes, nothing skipped, learns
"$TRAIN" --config "$TMP/c.json" --set train.device=cuda --set train.precision=bf16 \
  --set output.dir="$TMP/bf16" --quiet >/dev/null 2>"$TMP/bf16.err" \
  || fail "bf16 training on cuda failed: $(tail -3 "$TMP/bf16.err")"
! grep -q '"skipped":true' "$TMP/bf16/metrics.jsonl" || fail "bf16 on cuda skipped updates (non-finite)"
first=$(losses "$TMP/bf16" | head -5 | awk '{ s += $1 } END { print s / NR }')
last=$(losses "$TMP/bf16" | tail -5 | awk '{ s += $1 } END { print s / NR }')
awk -v f="$first" -v l="$last" 'BEGIN { exit !(l < f) }' \
  || fail "bf16 on cuda did not lower the loss: first 5 updates $first, last 5 $last"
finish
