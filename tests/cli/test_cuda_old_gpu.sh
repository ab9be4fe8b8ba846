#!/usr/bin/env bash
# tests/cli/test_cuda_old_gpu.sh (suite cuda-emu, test cuda_cli_emu_sm_75): both programs on a
# GPU older than anything the build has kernels for, posed by the emulation (MHA_EMU_GPU=sm_75,
# a T4; tests/cuda/emu/cuda_emu.h). Checks:
#  - train.device = "cuda" (and mha-predict --device cuda) fails at once with exit 1, naming
#    the GPU's compute capability, the 8.0 needed and the setting to use instead;
#  - train.device = "auto" trains on the cpu, with a note saying why the GPU is not used.
# Needs the emulated programs: skipped (77) when MHA_EMU_GPU is not set to such a GPU.
source "$(dirname "$0")/lib.sh" "$@"
case "${MHA_EMU_GPU:-}" in
  sm_75|sm_70) ;;
  *) echo "SKIP: needs the emulated programs with MHA_EMU_GPU=sm_75 or sm_70"; exit 77 ;;
esac
cc="7\.${MHA_EMU_GPU#sm_7}"
tiny_config "$TMP/c.json" "$TMP/run" 1
old="\(.*compute capability $cc\) cannot run this build's kernels \(cudaErrorNoKernelImageForDevice\): they need compute capability 8\.0 or newer"

expect_exit 1 "^mha-train: error: train.device = \"cuda\" but the GPU $old .*; use train.device=cpu or auto\$" \
  "$TRAIN" --config "$TMP/c.json" --set train.device=cuda --set output.dir="$TMP/cuda" --quiet
[ -e "$TMP/cuda/last.mha" ] && fail "a refused cuda run wrote a checkpoint"

# auto: the cpu, and the note; the run itself is a normal one
"$TRAIN" --config "$TMP/c.json" --max-steps 3 >/dev/null 2>"$TMP/auto.err" \
  || fail "train.device = auto failed: $(tail -3 "$TMP/auto.err")"
grep -qE "^mha-train: note: not using the GPU: the GPU $old.*; running on the cpu\$" "$TMP/auto.err" \
  || fail "no note on the unusable GPU: $(head -3 "$TMP/auto.err")"
grep -q '^model: .* backend cpu' "$TMP/auto.err" \
  || fail "train.device = auto did not fall back to the cpu: $(grep '^model:' "$TMP/auto.err")"
[ -s "$TMP/run/last.mha" ] || fail "the cpu run wrote no last.mha"

expect_exit 1 "^mha-predict: error: --device cuda: the GPU $old .*; use --device cpu or auto\$" \
  "$PREDICT" --model "$TMP/run/last.mha" --device cuda data/sample/test.tsv
out=$("$PREDICT" --model "$TMP/run/last.mha" --device auto data/sample/test.tsv 2>"$TMP/pred.err") \
  || fail "mha-predict --device auto failed: $(cat "$TMP/pred.err")"
[ "$(wc -l <<<"$out")" = "$(grep -c . data/sample/test.tsv)" ] \
  || fail "mha-predict --device auto printed $(wc -l <<<"$out") labels for $(grep -c . data/sample/test.tsv) lines"
grep -q "not using the GPU" "$TMP/pred.err" || fail "mha-predict --device auto gave no note: $(cat "$TMP/pred.err")"
finish
