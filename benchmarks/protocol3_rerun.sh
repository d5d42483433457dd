#!/bin/bash
# The full preset rerun at its current fingerprint, resumable across working sessions: copy, copy-distinct,
# reverse and MQAR are trained again (6,000 steps for copy, copy-distinct and MQAR; the fit gate keeps the best
# validation checkpoint), the finished language-modelling and parity runs are copied from the protocol-3 store
# that ships in docs/results/protocol3/full (they differ only in their validation, which their rows say).
#
#   benchmarks/protocol3_rerun.sh OUT      # e.g. OUT=runs/p3rerun; about 20 CPU-hours on two workers
#
# OUT/old_full: the shipped protocol-3 store, restored once (the --reuse source); OUT/run/full: the rerun, restored
# from SNAPSHOT (default docs/results/protocol3-rerun/full) when it is not there yet and copied back into it every
# 30 minutes and after each task (benchmarks/protocol3_runs.sh). Commit the snapshot before a session ends; the
# next session runs the same command and trains only what is missing.
set -u
OUT=${1:?usage: benchmarks/protocol3_rerun.sh OUT}
PY=${PYTHON:-.venv/bin/python}
mkdir -p "$OUT"
if [ ! -f "$OUT/old_full/results.sqlite" ]; then
  "$PY" benchmarks/store_snapshot.py --restore docs/results/protocol3/full "$OUT/old_full" || exit 1
fi
SKIP_SCALE=1 REUSE="$OUT/old_full" REUSE_VALIDATED_BEFORE=lm,parity \
  SNAPSHOT="${SNAPSHOT:-docs/results/protocol3-rerun/full}" benchmarks/protocol3_runs.sh "$OUT/run" || exit 1
# then the schemes that fit fewer than 2 of 3 seeds of a task, trained again on twice its budget (not ranked; the
# page shows their curves): OUT/run/longer/<task>, restored from and copied back to docs/results/protocol3-rerun/longer
if [ -f "$OUT/run/full/results.sqlite" ]; then
  "$PY" benchmarks/protocol3_longer.py "$OUT/run/full" "$OUT/run/longer" copy copy-distinct reverse mqar \
    --snapshot "${LONGER_SNAPSHOT:-docs/results/protocol3-rerun/longer}"
else
  echo "no store in $OUT/run/full: the longer runs wait for it" >&2
fi
