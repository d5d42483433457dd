#!/bin/bash
# docs/results.md while the full preset still trains: the finished tasks of a live full folder, beside the
# scale check and default preset as shipped in docs/results/protocol3/ (their stores are not shipped).
#
#   TASKS=lm,copy benchmarks/protocol3_page.sh OUT      # OUT as given to benchmarks/protocol3_runs.sh
#
# Reads OUT/full through a consistent copy (benchmarks/store_snapshot.py) into OUT/page/, never the live
# store; `relpos compare --report-only --tasks` narrows the report to the finished tasks (TASKS; default lm).
# Rewrites docs/results.md and docs/results/protocol3/ (the generator refuses pages it did not write).
# LONGER_TASKS=copy,copy-distinct: the finished tasks of OUT/longer (benchmarks/protocol3_longer.py), read the same
# way into OUT/page/longer/ and passed as --longer; their stores ship in docs/results/protocol3/longer-<task>/.
set -eu
OUT=${1:?usage: TASKS=t1,t2 benchmarks/protocol3_page.sh OUT}
PY=${PYTHON:-.venv/bin/python}
R=${RELPOS:-.venv/bin/relpos}
W="$OUT/page"
if [ -e "$W" ] && [ ! -f "$W/.protocol3_page" ]; then  # never clear a folder this script did not make
  echo "protocol3_page.sh: $W exists and was not made by this script; move it aside" >&2; exit 2
fi
mkdir -p "$W" && touch "$W/.protocol3_page"
rm -rf "$W/scale" "$W/default" "$W/full" "$W/longer"  # this script's own scratch copies
for f in docs/results/protocol3/scale-*-results.json; do
  c=$(basename "$f" | sed 's/^scale-//; s/-results.json$//')
  mkdir -p "$W/scale/$c" && cp "$f" "$W/scale/$c/results.json"
done
mkdir -p "$W/default" && cp docs/results/protocol3/default-results.json "$W/default/results.json"
"$PY" benchmarks/store_snapshot.py --no-inflight "$OUT/full" "$W/full"
OMP_NUM_THREADS=1 "$R" compare --report-only --tasks "${TASKS:-lm}" --out "$W/full" > "$W/report.log"
LONGER_ARGS=()
for t in $(echo "${LONGER_TASKS:-}" | tr ',' ' '); do
  "$PY" benchmarks/store_snapshot.py --no-inflight "$OUT/longer/$t" "$W/longer/$t"
  OMP_NUM_THREADS=1 "$R" compare --report-only --out "$W/longer/$t" >> "$W/report.log"
  "$PY" benchmarks/store_snapshot.py --no-inflight "$OUT/longer/$t" "docs/results/protocol3/longer-$t"
  LONGER_ARGS=(--longer "$W/longer")
done
"$PY" -m relpos.report.results_page --full "$W/full" --scale "$W/scale" --default "$W/default" \
  --previous docs/results/protocol3/protocol2-verdict.json --out docs/results.md --json-dir docs/results/protocol3 --force \
  "${LONGER_ARGS[@]}"
