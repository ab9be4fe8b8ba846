#!/usr/bin/env bash
# tests/cli/test_predict_ties.sh: mha-predict's tie rule. Classes with exactly equal
# probabilities rank by class index, lowest first: the printed label (tsv and jsonl), the
# --top-k order, and the prediction --eval scores (model/evaluate.c's argmax) all take the
# lowest tied class. The models come from make_tie_model (head weights zero, so every text's
# logits are the head's biases; classes a, b, c, d).
#   test_predict_ties.sh MHA_TRAIN MHA_PREDICT MAKE_TIE_MODEL
source "$(dirname "$0")/lib.sh" "$@"
MAKE=$(realpath "$3")
field() { sed "s/.*\"$1\":\([^,}]*\).*/\1/"; }
texts=$'酒店很好\n不好\n差的1!\na\n好'
# check BIASES TOP1 ORDER: top-1 label and the full ranking (labels, top-k 4) on every line
check() {
  local biases=$1 top1=$2 order=$3 m="$TMP/m-${1// /_}.mha"
  # shellcheck disable=SC2086
  "$MAKE" "$m" $biases || { fail "make_tie_model $biases failed"; return; }
  local got
  got=$("$PREDICT" --model "$m" <<<"$texts" | cut -f1 | sort -u | tr '\n' ' ')
  [ "$got" = "$top1 " ] || fail "biases ($biases): mha-predict labels '$got', expected '$top1' (the lowest tied class) on every line"
  got=$("$PREDICT" --model "$m" --top-k 4 <<<"$texts" | awk -F'\t' '{print $1, $3, $5, $7}' | sort -u | tr '\n' '|')
  [ "$got" = "$order|" ] || fail "biases ($biases): --top-k 4 ranks '$got', expected '$order' (ties by class index) on every line"
  got=$("$PREDICT" --model "$m" --format jsonl --top-k 4 <<<"$texts" \
        | sed 's/"prob":[^,}]*//g; s/[{}]//g; s/"top":\[//; s/\]//; s/"label"://g; s/[",]/ /g' | tr -s ' ' | sort -u | tr '\n' '|')
  [ "$got" = " $top1 $order |" ] || fail "biases ($biases): --format jsonl gives '$got', expected label $top1 and ranking '$order'"
  # --eval: every line labelled with the lowest tied class is right, with any other tied class wrong
  local t acc
  for t in ${order// / }; do
    acc=$(sed "s/^/$t\t/" <<<"$texts" | "$PREDICT" --model "$m" --eval - --json | field accuracy)
    if [ "$t" = "$top1" ]; then
      [ "$acc" = 1 ] || fail "biases ($biases): --eval of lines labelled $t (the lowest tied class): accuracy $acc, expected 1"
    else
      [ "$acc" = 0 ] || fail "biases ($biases): --eval of lines labelled $t: accuracy $acc, expected 0 (the prediction is $top1)"
    fi
  done
}
check "0 0 0 0" a "a b c d"
check "0 1 0 1" b "b d a c"
check "2 0 0 2" a "a d b c"
check "0 0 1 1" c "c d a b"
check "1 0 2 0" c "c a b d"   # no tie at the top: the plain maximum, ties below by index
finish
