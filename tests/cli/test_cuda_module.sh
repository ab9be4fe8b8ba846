#!/usr/bin/env bash
# tests/cli/test_cuda_module.sh (suite cli, builds with CUDA only): how the programs of a CUDA
# build open their CUDA backend, libmha-cuda.so (kernels/cuda_loader.c). Checks:
#  - a run on the cpu (mha-predict's default, mha-train --help, train.device = "cpu") loads
#    neither the module nor the CUDA runtime or cuBLAS (LD_DEBUG=libs lists what is loaded);
#    nor does "auto" on a machine without an NVIDIA driver;
#  - with a driver that reports a device (a stand-in, fake_cuda_driver.c, put first on
#    LD_LIBRARY_PATH), --device cuda opens the module beside the program, and the CUDA
#    runtime's own error reaches the user (exit 1);
#  - a program whose module is missing, is not a loadable library, or was built against another
#    Backend table (fake_cuda_module.c) says so and where it looked (exit 1; "auto" falls back
#    to the cpu with a note).
# Usage: test_cuda_module.sh MHA_TRAIN MHA_PREDICT LIBFAKECUDA_SO MODULE_INSTALL_DIR FAKE_MODULE_SO
source "$(dirname "$0")/lib.sh" "$@"
FAKE_DIR=$TMP/driver   # the stand-in, under the name the loader opens
mkdir -p "$FAKE_DIR" && cp "$3" "$FAKE_DIR/libcuda.so.1"
WITH_FAKE="$FAKE_DIR${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}"   # before the caller's path, not instead
BIN_DIR=$(dirname "$PREDICT")
[ -f "$BIN_DIR/libmha-cuda.so" ] || { echo "FAIL: no libmha-cuda.so beside $PREDICT"; exit 1; }
tiny_config "$TMP/c.json" "$TMP/run" 1
"$TRAIN" --config "$TMP/c.json" --set train.device=cpu --max-steps 2 --quiet 2>"$TMP/train.err" \
  || fail "the cpu run failed: $(cat "$TMP/train.err")"
M=$TMP/run/last.mha
printf '酒店很好\n' > "$TMP/in.txt"

# loaded LIB CMD...: whether LD_DEBUG=libs shows LIB being opened while CMD runs
loaded() {
  local lib=$1; shift
  LD_DEBUG=libs "$@" 2>&1 >/dev/null | grep -q "calling init: .*$lib"
}
for lib in libmha-cuda.so libcublas libcudart; do
  loaded "$lib" "$PREDICT" --model "$M" "$TMP/in.txt" && fail "mha-predict on the cpu loaded $lib"
  loaded "$lib" "$TRAIN" --help && fail "mha-train --help loaded $lib"
  loaded "$lib" "$TRAIN" --config "$TMP/c.json" --set train.device=cpu --set output.dir="$TMP/r2" \
    --max-steps 1 --quiet && fail "mha-train with train.device=cpu loaded $lib"
done
# the check itself can fail: the stand-in driver makes --device cuda load the module
loaded libmha-cuda.so env LD_LIBRARY_PATH="$WITH_FAKE" "$PREDICT" --model "$M" --device cuda "$TMP/in.txt" \
  || fail "--device cuda with a driver that reports a device did not load libmha-cuda.so"
# without a driver (found the way the loader looks for one): "auto" opens nothing more
if ! loaded 'libcuda\.so\.1' "$PREDICT" --model "$M" --device auto "$TMP/in.txt"; then
  loaded libmha-cuda.so "$PREDICT" --model "$M" --device auto "$TMP/in.txt" \
    && fail "--device auto without an NVIDIA driver loaded libmha-cuda.so"
  expect_exit 1 "^mha-predict: error: --device cuda: no CUDA device visible \(no NVIDIA driver: libcuda\.so\.1 not found\); use --device cpu or auto\$" \
    "$PREDICT" --model "$M" --device cuda "$TMP/in.txt"
fi

# the module's own answer (the CUDA runtime finds the stand-in driver wanting)
expect_exit 1 "^mha-predict: error: --device cuda: .*; use --device cpu or auto\$" \
  env LD_LIBRARY_PATH="$WITH_FAKE" "$PREDICT" --model "$M" --device cuda "$TMP/in.txt"
out=$(LD_LIBRARY_PATH="$WITH_FAKE" "$PREDICT" --model "$M" --device cuda "$TMP/in.txt" 2>&1 >/dev/null)
grep -q "libmha-cuda.so\|no NVIDIA driver" <<<"$out" && fail "the module did not answer: $out"

# a program without its module beside it (and none installed where the build would put it)
mkdir -p "$TMP/alone"
cp "$PREDICT" "$TRAIN" "$TMP/alone/"
if [ ! -e "$4/libmha-cuda.so" ]; then   # (a module installed there would be found instead)
  expect_exit 1 "^mha-predict: error: --device cuda: the CUDA backend of this build, libmha-cuda\.so, is neither beside the program \($TMP/alone/\) nor in $4: rebuild \(ninja -C BUILD builds it beside mha-train\) or reinstall; use --device cpu or auto\$" \
    env LD_LIBRARY_PATH="$WITH_FAKE" "$TMP/alone/mha-predict" --model "$M" --device cuda "$TMP/in.txt"
  expect_exit 1 "^mha-train: error: train.device = \"cuda\" but the CUDA backend of this build, libmha-cuda\.so, is neither beside" \
    env LD_LIBRARY_PATH="$WITH_FAKE" "$TMP/alone/mha-train" --config "$TMP/c.json" --set train.device=cuda \
    --set output.dir="$TMP/r3" --quiet
  # "auto": the cpu, with a note (the driver reports a GPU this program cannot use)
  LD_LIBRARY_PATH="$WITH_FAKE" "$TMP/alone/mha-predict" --model "$M" --device auto "$TMP/in.txt" \
    >"$TMP/auto.out" 2>"$TMP/auto.err" || fail "--device auto without the module failed: $(cat "$TMP/auto.err")"
  [ "$(wc -l < "$TMP/auto.out")" = 1 ] || fail "--device auto without the module printed: $(cat "$TMP/auto.out")"
  grep -q "^mha-predict: note: not using the GPU: the CUDA backend of this build" "$TMP/auto.err" \
    || fail "--device auto without the module gave no note: $(cat "$TMP/auto.err")"
  # a module that is not a library: dlopen's reason
  echo "not a library" > "$TMP/alone/libmha-cuda.so"
  expect_exit 1 "^mha-predict: error: --device cuda: the CUDA backend $TMP/alone/libmha-cuda\.so could not be loaded \(.*\); use --device cpu or auto\$" \
    env LD_LIBRARY_PATH="$WITH_FAKE" "$TMP/alone/mha-predict" --model "$M" --device cuda "$TMP/in.txt"
  # a module built against another Backend table: refused before anything in it is called
  cp "$5" "$TMP/alone/libmha-cuda.so"
  expect_exit 1 "^mha-predict: error: --device cuda: the CUDA backend $TMP/alone/libmha-cuda\.so was built from other sources than this program \(interface 0, the program's 0x[0-9a-f]+\): rebuild both \(ninja -C BUILD\) or reinstall; use --device cpu or auto\$" \
    env LD_LIBRARY_PATH="$WITH_FAKE" "$TMP/alone/mha-predict" --model "$M" --device cuda "$TMP/in.txt"
fi
finish
