#!/usr/bin/env bash
# tests/cli/test_output_dir.sh: what a new run does not write over in its output.dir.
#  - a metrics.jsonl mha-train did not write (the user's own file of that name) is refused
#    without --overwrite, and kept; the log of a run that saved nothing is replaced;
#  - a data file that is one of the run's own files (metrics.jsonl, model.mha, last.mha in
#    output.dir) is refused, --overwrite or not, and left as it was;
#  - a folder the run cannot write in is an error before any training, not at the first save.
source "$(dirname "$0")/lib.sh" "$@"
tiny_config "$TMP/c.json" "$TMP/run" 1

mkdir -p "$TMP/run"
echo '{"my": "own log"}' >"$TMP/run/metrics.jsonl"
expect_exit 2 "$TMP/run/metrics.jsonl: a file mha-train did not write is in the way of the run's log .*--overwrite" \
  "$TRAIN" --config "$TMP/c.json" --quiet
[ "$(cat "$TMP/run/metrics.jsonl")" = '{"my": "own log"}' ] || fail "a refused run changed the user's metrics.jsonl"
"$TRAIN" --config "$TMP/c.json" --quiet --overwrite >/dev/null 2>&1 || fail "--overwrite over a foreign metrics.jsonl failed"
grep -q '"type":"train"' "$TMP/run/metrics.jsonl" || fail "--overwrite did not replace the foreign metrics.jsonl"
# a run stopped before its first checkpoint left only its log: the same command starts again
rm "$TMP/run/model.mha" "$TMP/run/last.mha"
"$TRAIN" --config "$TMP/c.json" --quiet >/dev/null 2>&1 || fail "a folder holding only an earlier log was refused"

# data files that are the run's own files, with and without --overwrite
rm -rf "$TMP/run2" && mkdir -p "$TMP/run2"
cp data/sample/train.tsv "$TMP/run2/metrics.jsonl"
sum=$(cksum <"$TMP/run2/metrics.jsonl")
for ow in "" --overwrite; do
  expect_exit 2 "data.train $TMP/run2/metrics.jsonl is where the run writes its metrics.jsonl" \
    "$TRAIN" --config "$TMP/c.json" --quiet --set "data.train=$TMP/run2/metrics.jsonl" --set "output.dir=$TMP/run2" $ow
  [ "$(cksum <"$TMP/run2/metrics.jsonl")" = "$sum" ] || fail "training data named metrics.jsonl in output.dir was changed ($ow)"
done
"$TRAIN" --config "$TMP/c.json" --quiet --set "output.dir=$TMP/run3" >/dev/null 2>&1 || fail "run3 failed"
cp data/sample/test.tsv "$TMP/test-copy.tsv"
ln -sf "$TMP/run3/model.mha" "$TMP/test-link.tsv"   # a link to the file counts as the file
expect_exit 2 "data.test $TMP/test-link.tsv is where the run writes its model.mha" \
  "$TRAIN" --config "$TMP/c.json" --quiet --set "data.test=$TMP/test-link.tsv" --set "output.dir=$TMP/run3" --overwrite
[ -f "$TMP/run3/model.mha" ] || fail "--overwrite removed a model.mha that was the run's data.test"

# a folder it cannot write in (as root, through an unprivileged user: root writes anywhere)
as_user=()
ro="$TMP/ro"
mkdir -p "$ro/run" && : >"$ro/run/.lock" && chmod 666 "$ro/run/.lock"   # an earlier run's lock: openable; the folder is not writable
chmod 755 "$TMP" "$ro" && chmod 644 "$TMP/c.json"
if [ "$(id -u)" = 0 ] && command -v setpriv >/dev/null && id nobody >/dev/null 2>&1; then
  as_user=(setpriv --reuid=nobody --regid="$(id -g nobody)" --clear-groups)
  # the build and the sample data must be reachable for that user (not so in a clone under /root)
  "${as_user[@]}" "$TRAIN" --version >/dev/null 2>&1 && "${as_user[@]}" cat "$TMP/c.json" data/sample/train.tsv >/dev/null 2>&1 \
    || as_user=()
fi
if [ "$(id -u)" != 0 ] || [ ${#as_user[@]} -gt 0 ]; then
  chmod 555 "$ro/run"
  out=$("${as_user[@]}" "$TRAIN" --config "$TMP/c.json" --set "output.dir=$ro/run" 2>&1 >/dev/null); rc=$?
  chmod 755 "$ro/run"
  [ "$rc" = 1 ] && grep -q "$ro/run: cannot write in the output folder (Permission denied)" <<<"$out" \
    || fail "unwritable output folder: exit $rc, expected 1 and a message: $out"
  grep -q "^step\|^dev" <<<"$out" && fail "unwritable output folder: it trained before saying so: $out"
else
  echo "skipped the unwritable-folder check: root, and no user nobody (with setpriv) who can run the build here"
fi
finish
