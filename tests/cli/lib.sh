# tests/cli/lib.sh: shared helpers for the CLI tests (sourced). Usage in a test:
#   source "$(dirname "$0")/lib.sh" "$@"   -> $TRAIN, $PREDICT, $TMP (removed at exit), fail, expect_exit
TRAIN=$(realpath "$1")
PREDICT=$(realpath "$2")
TMP=$(mktemp -d)
trap 'rm -rf "$TMP"' EXIT
FAILS=0
fail() { echo "FAIL: $*" >&2; FAILS=$((FAILS + 1)); }
# expect_exit CODE PATTERN CMD...: runs CMD, checks its exit code and that stderr matches PATTERN.
expect_exit() {
  local want=$1 pattern=$2; shift 2
  local out rc=0
  out=$("$@" 2>&1 >/dev/null) || rc=$?
  [ "$rc" = "$want" ] || fail "'$*' exited $rc, expected $want; stderr: $out"
  if [ -n "$pattern" ] && ! grep -qE -- "$pattern" <<<"$out"; then fail "'$*': stderr lacks /$pattern/: $out"; fi
}
finish() {
  if [ "$FAILS" -gt 0 ]; then echo "$FAILS failure(s)" >&2; exit 1; fi
  echo "all checks passed"
}
# A tiny, fast config over the sample data.
tiny_config() {  # tiny_config OUT_JSON OUT_DIR [EPOCHS]
  cat >"$1" <<JSON
{"data": {"train": "$PWD/data/sample/train.tsv", "dev": "$PWD/data/sample/dev.tsv",
          "test": "$PWD/data/sample/test.tsv", "max_len": 32},
 "model": {"d_model": 32, "n_heads": 2, "d_ff": 64, "n_layers": 1, "dropout": 0.1},
 "train": {"epochs": ${3:-3}, "batch_size": 16, "lr": 2e-3, "threads": 1},
 "output": {"dir": "$2"}}
JSON
}
