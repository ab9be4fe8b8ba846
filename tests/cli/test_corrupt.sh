#!/usr/bin/env bash
# tests/cli/test_corrupt.sh: damaged and crafted checkpoints. Each of zero-length,
# truncated, appended-to, bit-flipped (header, body, checksum), wrong-version, wrong-magic,
# random bytes, not-a-file (folder, FIFO, /dev/null) is one clear error and exit 1 from both
# mha-predict --model and mha-train --resume, never a crash or a hang. Crafted files with a
# valid checksum (the CRC-32 recomputed) whose stored config or training state is wrong are
# refused the same way, before any model is allocated.
source "$(dirname "$0")/lib.sh" "$@"
tiny_config "$TMP/c.json" "$TMP/run" 1
"$TRAIN" --config "$TMP/c.json" --quiet >/dev/null 2>"$TMP/train.err" || { cat "$TMP/train.err"; fail "training failed"; finish; }
M=$TMP/run/model.mha L=$TMP/run/last.mha

# check FILE PATTERN: both tools refuse FILE with exit 1 and a message matching PATTERN.
check() {
  expect_exit 1 "$2" "$PREDICT" --model "$1" - </dev/null
  expect_exit 1 "$2" "$TRAIN" --resume "$1" --quiet
}
put_bytes() { printf "$3" | dd of="$1" bs=1 seek="$2" conv=notrunc status=none; }   # FILE OFFSET PRINTF-BYTES
flip_bit() {   # FILE OFFSET [BIT]
  local b; b=$(od -An -tu1 -j "$2" -N1 "$1" | tr -d ' ')
  put_bytes "$1" "$2" "$(printf '\\%03o' $((b ^ (1 << ${3:-0}))))"
}
fix_crc() {    # FILE: recompute the CRC-32 at the end (gzip's trailer holds the CRC-32 of its input)
  local n=$(($(stat -c %s "$1") - 4))
  head -c $n "$1" | gzip -c | tail -c 8 | head -c 4 | dd of="$1" bs=1 seek=$n conv=notrunc status=none
}
replace() {    # FILE OLD NEW: same-length replacement of the first occurrence
  local off; off=$(grep -obUaF -m1 -- "$2" "$1" | head -1 | cut -d: -f1)
  [ -n "$off" ] || { fail "'$2' not found in $1"; return 1; }
  printf '%s' "$3" | dd of="$1" bs=1 seek="$off" conv=notrunc status=none
}

for src in "$M" "$L"; do
  name=$(basename "$src")
  size=$(stat -c %s "$src")
  d=$TMP/$name.d
  mkdir -p "$d"
  : >"$d/empty.mha";                                 check "$d/empty.mha" "too short"
  head -c 20 "$src" >"$d/t20.mha";                   check "$d/t20.mha" "too short"
  head -c $((size / 2)) "$src" >"$d/half.mha";       check "$d/half.mha" "truncated"
  head -c $((size - 1)) "$src" >"$d/minus1.mha";     check "$d/minus1.mha" "truncated"
  { cat "$src"; printf 'x'; } >"$d/plus1.mha";       check "$d/plus1.mha" "appended"
  cp "$src" "$d/magic.mha"; put_bytes "$d/magic.mha" 0 'GARBAGE!';     check "$d/magic.mha" "not an mha checkpoint"
  cp "$src" "$d/ver.mha"; put_bytes "$d/ver.mha" 8 '\002\000\000\000'; check "$d/ver.mha" "version 2, this mha reads version 1"
  cp "$src" "$d/ver0.mha"; put_bytes "$d/ver0.mha" 8 '\000\000\000\000'; check "$d/ver0.mha" "version 0"
  cp "$src" "$d/size.mha"; flip_bit "$d/size.mha" 17;                 check "$d/size.mha" "truncated or appended"
  cp "$src" "$d/sizehuge.mha"; put_bytes "$d/sizehuge.mha" 16 '\377\377\377\377\377\377\377\177'; check "$d/sizehuge.mha" "truncated or appended"
  cp "$src" "$d/crc.mha"; flip_bit "$d/crc.mha" $((size - 2)) 5;      check "$d/crc.mha" "checksum mismatch"
  head -c "$size" /dev/urandom >"$d/random.mha";     check "$d/random.mha" "not an mha checkpoint"
  # bit flips anywhere after the header: the checksum catches every one
  RANDOM=$size
  for k in $(seq 12); do
    off=$((24 + (RANDOM * 32768 + RANDOM) % (size - 28)))
    cp "$src" "$d/flip$k.mha"; flip_bit "$d/flip$k.mha" $off $((RANDOM % 8))
    check "$d/flip$k.mha" "checksum mismatch"
  done
done
mkdir -p "$TMP/folder.mha"
expect_exit 1 "not a regular file" "$PREDICT" --model "$TMP/folder.mha" - </dev/null
expect_exit 1 "$TMP/folder.mha: a folder without a last.mha \(--resume takes a run's last.mha, or the folder that holds it\)" \
  "$TRAIN" --resume "$TMP/folder.mha" --quiet
mkfifo "$TMP/fifo.mha";         check "$TMP/fifo.mha" "not a regular file"   # must not wait for a writer
check /dev/null "not a regular file"
check "$TMP/missing.mha" "cannot open checkpoint"
expect_exit 2 "model-only checkpoint" "$TRAIN" --resume "$M" --quiet

# Crafted: valid checksum, wrong contents.
cp "$M" "$TMP/dims.mha"; replace "$TMP/dims.mha" $'"d_model":\t32' $'"d_model":\t64' && fix_crc "$TMP/dims.mha"
expect_exit 1 "parameters but its config describes" "$PREDICT" --model "$TMP/dims.mha" - </dev/null
cp "$L" "$TMP/dims_last.mha"; replace "$TMP/dims_last.mha" $'"d_model":\t32' $'"d_model":\t64' && fix_crc "$TMP/dims_last.mha"
expect_exit 1 "parameters but its config describes" "$TRAIN" --resume "$TMP/dims_last.mha" --quiet
cp "$M" "$TMP/cfg.mha"; replace "$TMP/cfg.mha" $'"n_heads":\t2' $'"n_heads":\t3' && fix_crc "$TMP/cfg.mha"
expect_exit 1 "stored config is not valid.*n_heads" "$PREDICT" --model "$TMP/cfg.mha" - </dev/null
cp "$L" "$TMP/cfg_last.mha"; replace "$TMP/cfg_last.mha" $'"n_heads":\t2' $'"n_heads":\t3' && fix_crc "$TMP/cfg_last.mha"
expect_exit 1 "stored config is not valid.*n_heads" "$TRAIN" --resume "$TMP/cfg_last.mha" --quiet
cp "$M" "$TMP/json.mha"; replace "$TMP/json.mha" '"model":' '"model" ' && fix_crc "$TMP/json.mha"
expect_exit 1 "stored config is not valid.*invalid JSON" "$PREDICT" --model "$TMP/json.mha" - </dev/null
# a setting of a newer mha (a key or a value this one does not know): named as such, with the
# mha that wrote the file (before: only "the stored config is not valid", as for corruption)
cp "$M" "$TMP/newer.mha"; replace "$TMP/newer.mha" $'"causal":\tfalse' $'"rotary":\tfalse' && fix_crc "$TMP/newer.mha"
expect_exit 1 "stored config is not valid \(checkpoint config: unknown key 'model.rotary'.*\); the file was written by mha [0-9].*: a setting this mha does not know is likely one of a newer mha" \
  "$PREDICT" --model "$TMP/newer.mha" - </dev/null
cp "$L" "$TMP/newer_last.mha"; replace "$TMP/newer_last.mha" $'"position":\t"learned"' $'"position":\t"rotary7"' && fix_crc "$TMP/newer_last.mha"
expect_exit 1 "\"rotary7\" is not allowed .*written by mha [0-9]" "$TRAIN" --resume "$TMP/newer_last.mha" --quiet
# training state out of range (a whole-number update count of -1, an epoch past the end)
cp "$L" "$TMP/st1.mha"; replace "$TMP/st1.mha" $'"update":\t41' $'"update":\t-1' && fix_crc "$TMP/st1.mha"
expect_exit 1 "corrupt training state \(update = -1" "$TRAIN" --resume "$TMP/st1.mha" --quiet
cp "$L" "$TMP/st2.mha"; replace "$TMP/st2.mha" $'"epoch":\t1' $'"epoch":\t9' && fix_crc "$TMP/st2.mha"
expect_exit 1 "corrupt training state \(epoch = 9" "$TRAIN" --resume "$TMP/st2.mha" --quiet
cp "$L" "$TMP/st3.mha"; replace "$TMP/st3.mha" '"batch_pos":' '"batch_pos"!' && fix_crc "$TMP/st3.mha"
expect_exit 1 "corrupt training state \(expected a JSON object\)" "$TRAIN" --resume "$TMP/st3.mha" --quiet
# the crafted files are still refused by the checksum once a byte changes without fix_crc
cp "$TMP/st1.mha" "$TMP/st1b.mha"; flip_bit "$TMP/st1b.mha" 30
check "$TMP/st1b.mha" "checksum mismatch"
# and the untouched originals still work
"$PREDICT" --model "$M" - <<<"测试一下" >/dev/null || fail "the original model.mha stopped loading"
finish
