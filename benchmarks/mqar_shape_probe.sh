#!/bin/bash
# MQAR's model shape, probed before the algorithmic rerun: one seed of every base scheme trains the compare
# presets' MQAR model and recipe (3 layers, d_model 64, batch 256, constant 1e-3 after warm-up, value-key order,
# random queries, 4 pairs) for STEPS steps with HEADS attention heads, and writes each validation curve
# (loss, per-token accuracy, exact match every 250 steps, on 512 held-out examples at L) to
# OUT/h<HEADS>/<scheme>.json. Resumable: a scheme whose JSON says done is skipped; rerun the same command.
#
#   HEADS="1 4" STEPS=6000 benchmarks/mqar_shape_probe.sh OUT      # then: python benchmarks/mqar_shape_table.py OUT
#
# Two runs at a time at nice 19 with one thread each (the project's 2-core machine).
set -u
OUT=${1:?usage: benchmarks/mqar_shape_probe.sh OUT}
PY=${PYTHON:-.venv/bin/python}
HEADS=${HEADS:-1}
STEPS=${STEPS:-6000}
SCHEMES=${SCHEMES:-"t5 shaw transformer-xl fire rope sandwich nope sinusoidal alibi kerple-log learned"}
export OMP_NUM_THREADS=1
jobs=()
for h in $HEADS; do
  mkdir -p "$OUT/h$h"
  for s in $SCHEMES; do
    f="$OUT/h$h/$s.json"
    if [ -f "$f" ] && grep -q '"done": true' "$f"; then continue; fi
    rm -f "$f" "$f.tmp"
    jobs+=("$h $s")
  done
done
printf '%s\n' "${jobs[@]}" | xargs -P 2 -L 1 sh -c 'nice -n 19 "$0" benchmarks/mqar_probe.py --model relpos \
  --scheme "$2" --heads "$1" --layers 3 --init fan_in --pairs 4 --min-len 4 --order value-key --queries random \
  --lr 1e-3 --batch-size 256 --steps '"$STEPS"' --seed 0 --eval-lengths 4,6,8,12,16 --n-eval 256 --n-val 512 \
  --json "'"$OUT"'/h$1/$2.json" > "'"$OUT"'/h$1/$2.log" 2>&1' "$PY"
