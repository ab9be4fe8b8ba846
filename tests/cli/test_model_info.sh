#!/usr/bin/env bash
# tests/cli/test_model_info.sh: mha-predict --info. On a model.mha: its classes, vocabulary,
# shape and parameter count, and the update and dev scores of its parameters, which must be
# those of the last "best" dev record in metrics.jsonl; on a last.mha: the run's update (its
# last train record's), finished or paused where --max-steps stopped it; without a dev set:
# "the final parameters" and no dev score; --json carries the same; a run folder reads its
# model.mha; a checkpoint without the ORIGIN section (as written before it existed) is still
# described and still predicts; the options --info does not go with.
source "$(dirname "$0")/lib.sh" "$@"
tiny_config "$TMP/c.json" "$TMP/m" 2
"$TRAIN" --config "$TMP/c.json" --quiet >/dev/null 2>"$TMP/e" || { cat "$TMP/e"; fail "train failed"; finish; }
M="$TMP/m/model.mha"
"$PREDICT" --model "$M" --info >"$TMP/i" 2>"$TMP/i.err" || fail "--info failed: $(cat "$TMP/i.err")"
[ -s "$TMP/i.err" ] && fail "--info wrote to stderr: $(cat "$TMP/i.err")"
grep -q "^$M: model, $(stat -c %s "$M") bytes, written by mha [0-9]" "$TMP/i" || fail "--info first line: $(head -1 "$TMP/i")"
grep -q "^classes      4: 体育 旅游 科技 美食$" "$TMP/i" || fail "--info classes: $(grep classes "$TMP/i")"
grep -qE "^model        [0-9]+ parameters: d_model 32, 2 heads, d_ff 64, 1 layer \(post-LN, relu\), mean pooling" "$TMP/i" \
  || fail "--info model line: $(grep '^model' "$TMP/i")"
grep -q "^settings     fp32, 2 epochs of batches of 16, lr 0.002, seed 42, on $PWD/data/sample/train.tsv (dev $PWD/data/sample/dev.tsv)$" "$TMP/i" \
  || fail "--info settings line: $(grep '^settings' "$TMP/i")"
# the parameters' update and dev scores: the last dev record that was the best
best=$(grep '"type":"dev"' "$TMP/m/metrics.jsonl" | grep '"best":true' | tail -1)
[ -n "$best" ] || fail "metrics.jsonl has no best dev record"
want=$(python3 -c 'import json, sys; r = json.loads(sys.argv[1])
print("parameters   from update %d (epoch %d), on dev (the best by accuracy): accuracy %.4f, macro-F1 %.4f, loss %.4f"
      % (r["update"], r["epoch"], r["accuracy"], r["macro_f1"], r["loss"]))' "$best")
grep -qxF "$want" "$TMP/i" || fail "--info parameters line: expected '$want', got '$(grep '^parameters' "$TMP/i")'"
# --json: the same facts, and the vocabulary size the training reported
"$PREDICT" --model "$M" --info --json >"$TMP/j" || fail "--info --json failed"
python3 - "$TMP/j" "$best" "$(grep -c . "$TMP/m/metrics.jsonl")" <<'PY' || fail "--info --json: $(cat "$TMP/j")"
import json, sys
info, best = json.load(open(sys.argv[1])), json.loads(sys.argv[2])
assert info["kind"] == "model" and info["state"] is None, info["kind"]
assert info["classes"] == ["体育", "旅游", "科技", "美食"], info["classes"]
assert info["config"]["model"]["d_model"] == 32 and info["config"]["train"]["epochs"] == 2
o = info["origin"]
assert o["update"] == best["update"] and o["epoch"] == best["epoch"], (o, best)
for k in ("loss", "accuracy", "macro_f1"):
    assert o["dev"][k] == best[k], (k, o["dev"][k], best[k])
assert o["mha"] == info["written_by"] and info["parameters"] > 0 and info["vocab_size"] > 3
PY
# a run folder stands for its model.mha
cmp -s <("$PREDICT" --model "$TMP/m" --info) "$TMP/i" || fail "--info on the run folder differs from --info on its model.mha"
# last.mha: the training state, at the run's last update, both epochs done
last=$(grep '"type":"train"' "$TMP/m/metrics.jsonl" | tail -1 | sed 's/.*"update":\([0-9]*\).*/\1/')
"$PREDICT" --model "$TMP/m/last.mha" --info >"$TMP/l" || fail "--info on last.mha failed"
grep -q "^$TMP/m/last.mha: training state (last.mha), " "$TMP/l" || fail "--info last.mha first line: $(head -1 "$TMP/l")"
grep -qE "^state        update $last, [0-9.]+ s trained: finished \(all 2 epochs\); best dev accuracy 0\.[0-9]{4} at update [0-9]+$" "$TMP/l" \
  || fail "--info last.mha state line (last update $last): $(grep '^state' "$TMP/l")"
grep -q "^parameters" "$TMP/l" && fail "--info on last.mha shows a chosen-parameters line"
"$PREDICT" --model "$TMP/m/last.mha" --info --json | python3 -c 'import json, sys; i = json.load(sys.stdin)
assert i["kind"] == "training state" and i["state"]["update"] == int(sys.argv[1]), i["state"]' "$last" \
  || fail "--info --json on last.mha"
# paused by --max-steps 5 (41 batches an epoch): where it stands, and how to go on
"$TRAIN" --config "$TMP/c.json" --set output.dir="$TMP/p" --max-steps 5 --quiet >/dev/null 2>&1 || fail "--max-steps 5 run failed"
"$PREDICT" --model "$TMP/p/last.mha" --info | grep -qxE "state        update 5, [0-9.]+ s trained: paused in epoch 1 of 2 after 5 of its batches \(mha-train --resume $TMP/p/last.mha goes on\)" \
  || fail "--info on a paused run: $("$PREDICT" --model "$TMP/p/last.mha" --info | grep '^state')"
# no dev set: the final parameters, no dev score anywhere
"$TRAIN" --config "$TMP/c.json" --set output.dir="$TMP/n" --set data.dev= --quiet >/dev/null 2>&1 || fail "no-dev run failed"
nlast=$(grep '"type":"train"' "$TMP/n/metrics.jsonl" | tail -1 | sed 's/.*"update":\([0-9]*\).*/\1/')
"$PREDICT" --model "$TMP/n" --info | grep -qx "parameters   from update $nlast: the final parameters (no dev set)" \
  || fail "--info without a dev set: $("$PREDICT" --model "$TMP/n" --info | grep '^param')"
"$PREDICT" --model "$TMP/n/last.mha" --info | grep -qE "^state        update $nlast, [0-9.]+ s trained: finished \(all 2 epochs\)$" \
  || fail "--info last.mha without a dev set (no best dev score): $("$PREDICT" --model "$TMP/n/last.mha" --info | grep '^state')"
# a checkpoint without ORIGIN (tag 8), as written before it existed: described without the
# parameters line, and its predictions are the same
python3 - "$M" "$TMP/old.mha" <<'PY' || fail "could not strip the ORIGIN section"
import struct, sys, zlib
b = open(sys.argv[1], "rb").read()
n = struct.unpack_from("<I", b, 12)[0]
off, keep = 24, []
for _ in range(n):
    tag, _, size = struct.unpack_from("<IIQ", b, off)
    if tag != 8: keep.append(b[off:off + 16 + size])
    off += 16 + size
assert len(keep) == n - 1, "no ORIGIN section"
body = b[:8] + struct.pack("<II", 1, n - 1)
rest = b"".join(keep)
total = len(body) + 8 + len(rest) + 4
out = body + struct.pack("<Q", total) + rest
open(sys.argv[2], "wb").write(out + struct.pack("<I", zlib.crc32(out)))
PY
"$PREDICT" --model "$TMP/old.mha" --info >"$TMP/o" 2>"$TMP/o.err" || fail "--info without ORIGIN failed: $(cat "$TMP/o.err")"
grep -q "^$TMP/old.mha: model, [0-9]* bytes$" "$TMP/o" || fail "--info without ORIGIN, first line: $(head -1 "$TMP/o")"
grep -q "^parameters" "$TMP/o" && fail "--info without ORIGIN shows a parameters line"
"$PREDICT" --model "$TMP/old.mha" --info --json | grep -q '"origin":	null' || fail "--info --json without ORIGIN: origin not null"
cut -f2 data/sample/dev.tsv >"$TMP/plain.txt"
cmp -s <("$PREDICT" --model "$TMP/old.mha" "$TMP/plain.txt") <("$PREDICT" --model "$M" "$TMP/plain.txt") \
  || fail "the checkpoint without ORIGIN predicts differently"
# what --info does not go with: usage errors (exit 2)
expect_exit 2 "--info describes the model and runs nothing; drop --eval" "$PREDICT" --model "$M" --info --eval data/sample/dev.tsv
expect_exit 2 "--info .* drop the input '$TMP/plain.txt'" "$PREDICT" --model "$M" --info "$TMP/plain.txt"
expect_exit 2 "--info .* drop --top-k" "$PREDICT" --model "$M" --info --top-k 2
expect_exit 2 "--info describes the model and runs nothing; drop --threads" "$PREDICT" --model "$M" --info --threads 2
expect_exit 2 "--info .* drop --precision" "$PREDICT" --model "$M" --info --precision=bf16
expect_exit 2 "--info .* drop --attention" "$PREDICT" --model "$M" --info --attention
expect_exit 2 "--info takes no value" "$PREDICT" --model "$M" --info=1
expect_exit 1 "cannot open checkpoint" "$PREDICT" --model "$TMP/none.mha" --info
finish
