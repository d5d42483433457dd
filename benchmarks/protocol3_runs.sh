#!/bin/bash
# The protocol-3 long runs behind docs/results.md, resumable: rerun the same command after an interruption
# and every finished run is kept (each folder's results.sqlite), only what is missing is trained.
#
#   benchmarks/protocol3_runs.sh OUT          # e.g. OUT=runs/protocol3; about 6-8 + 25-40 CPU-hours
#
# 1. the scale check (OUT/scale/d<width>-L<len>/, OUT/scale/scale.md);
# 2. the full preset in ONE folder (OUT/full), one task at a time, language modelling first: `--tasks T` keeps
#    the full preset's fingerprint, so each task becomes complete (three seeds) before the next starts;
# 3. the full preset once more with every task: trains nothing new and writes the complete report.
# Everything runs at nice 19 with two workers of one thread each (the project's 2-core machine).
#
# Across working sessions on machines that keep nothing outside the repository, the finished runs travel in
# it: `python benchmarks/store_snapshot.py OUT/full docs/results/protocol3/full` (a consistent copy while the
# run trains) and commit; the next session restores with
# `python benchmarks/store_snapshot.py --restore docs/results/protocol3/full OUT/full` and reruns this script.
set -u
OUT=${1:?usage: benchmarks/protocol3_runs.sh OUT}
R=${RELPOS:-.venv/bin/relpos}
export OMP_NUM_THREADS=1
mkdir -p "$OUT"
log() { echo "$* $(date -u +%FT%TZ)" >> "$OUT/runs.log"; }
log "scale start"
nice -n 19 "$R" compare --preset scale --workers 2 --no-progress --out "$OUT/scale" >> "$OUT/scale.out" 2>> "$OUT/scale.err"
log "scale end rc=$?"
for t in lm copy reverse parity copy-hints copy-distinct mqar; do
  log "full --tasks $t start"
  nice -n 19 "$R" compare --preset full --tasks "$t" --workers 2 --no-progress --out "$OUT/full" >> "$OUT/full.out" 2>> "$OUT/full.err"
  log "full --tasks $t end rc=$?"
done
nice -n 19 "$R" compare --preset full --workers 2 --no-progress --out "$OUT/full" >> "$OUT/full.out" 2>> "$OUT/full.err"
log "full end rc=$?"
