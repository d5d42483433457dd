#!/bin/bash
# The protocol-3 long runs behind docs/results.md, resumable: rerun the same command after an interruption
# and every finished run is kept (each folder's results.sqlite), only what is missing is trained.
#
#   benchmarks/protocol3_runs.sh OUT          # e.g. OUT=runs/protocol3; about 9.5 + 33-38 CPU-hours
#
# 1. the scale check (OUT/scale/d<width>-L<len>/, OUT/scale/scale.md); SKIP_SCALE=1 skips it;
# 2. the full preset in ONE folder (OUT/full), one task at a time, language modelling first: `--tasks T` keeps
#    the full preset's fingerprint, so each task becomes complete (three seeds) before the next starts;
# 3. the full preset once more with every task: trains nothing new and writes the complete report.
# Everything runs at nice 19 with two workers of one thread each (the project's 2-core machine).
# REUSE=FOLDER passes `--reuse FOLDER` to every full-preset call: after a deliberate change of the preset (a new
# fingerprint), the runs of FOLDER that would be trained exactly the same are copied, not trained again.
#
# Across working sessions on machines that keep nothing outside the repository, the finished runs travel in
# it: with SNAPSHOT=docs/results/protocol3/full the script first restores OUT/full from that snapshot (when
# OUT/full has no store yet), then copies the store back into it every 30 minutes and after each task
# (benchmarks/store_snapshot.py: a consistent copy while the run trains). Commit the snapshot folder before
# the session ends; the next session reruns the same command.
set -u
OUT=${1:?usage: benchmarks/protocol3_runs.sh OUT}
R=${RELPOS:-.venv/bin/relpos}
PY=${PYTHON:-.venv/bin/python}
SNAPSHOT=${SNAPSHOT:-}
REUSE_ARGS=(); [ -z "${REUSE:-}" ] || REUSE_ARGS=(--reuse "$REUSE")
# REUSE_VALIDATED_BEFORE=lm,parity (with REUSE): also copy those tasks' runs that differ only in their validation
[ -z "${REUSE_VALIDATED_BEFORE:-}" ] || REUSE_ARGS+=(--reuse-validated-before "$REUSE_VALIDATED_BEFORE")
export OMP_NUM_THREADS=1
mkdir -p "$OUT"
log() { echo "$* $(date -u +%FT%TZ)" >> "$OUT/runs.log"; }
snap() { [ -z "$SNAPSHOT" ] || [ ! -f "$OUT/full/results.sqlite" ] || "$PY" benchmarks/store_snapshot.py "$OUT/full" "$SNAPSHOT" >> "$OUT/runs.log" 2>&1; }
if [ -n "$SNAPSHOT" ] && [ ! -f "$OUT/full/results.sqlite" ] && [ -f "$SNAPSHOT/results.sqlite" ]; then
  "$PY" benchmarks/store_snapshot.py --restore "$SNAPSHOT" "$OUT/full" >> "$OUT/runs.log" 2>&1 || exit 1
fi
if [ "${SKIP_SCALE:-0}" != 1 ]; then
  log "scale start"
  nice -n 19 "$R" compare --preset scale --workers 2 --no-progress --out "$OUT/scale" >> "$OUT/scale.out" 2>> "$OUT/scale.err"
  log "scale end rc=$?"
fi
if [ -n "$SNAPSHOT" ]; then (while sleep 1800; do snap; done) & LOOP=$!; fi
for t in lm copy copy-distinct reverse parity mqar; do  # the full preset's tasks (presets.FULL_ALGORITHMIC)
  log "full --tasks $t start"
  nice -n 19 "$R" compare --preset full --tasks "$t" "${REUSE_ARGS[@]}" --workers 2 --no-progress --out "$OUT/full" >> "$OUT/full.out" 2>> "$OUT/full.err"
  log "full --tasks $t end rc=$?"
  snap
done
nice -n 19 "$R" compare --preset full "${REUSE_ARGS[@]}" --workers 2 --no-progress --out "$OUT/full" >> "$OUT/full.out" 2>> "$OUT/full.err"
log "full end rc=$?"
snap
[ -z "${LOOP:-}" ] || kill "$LOOP" 2>/dev/null
