#!/bin/bash
# The extend benchmark's first published run (docs: README "Extending a model's context"), resumable across
# sessions: a default-preset language-modelling compare folder (RoPE, ALiBi, KERPLE, NoPE; seeds 0-2), then
# `relpos extend --from` on it (every recipe, K grid, rate grid; one row per run in OUT/ext/extend.sqlite).
#
#   benchmarks/extend_run.sh OUT                       # e.g. OUT=runs/extend; about 1 CPU-hour in all
#   SNAPSHOT=docs/results/extend benchmarks/extend_run.sh OUT
#
# With SNAPSHOT the script first restores OUT from the snapshot (when OUT has no compare store yet): the compare
# folder whole (store, config, the trained models) and the extend store; at the end it copies both back (a
# consistent SQLite backup), so a run spread over sessions travels in the repository. Rerunning trains and
# fine-tunes only what is missing.
set -u
OUT=${1:?usage: benchmarks/extend_run.sh OUT}
R=${RELPOS:-.venv/bin/relpos}
PY=${PYTHON:-.venv/bin/python}
SNAPSHOT=${SNAPSHOT:-}
export OMP_NUM_THREADS=1
mkdir -p "$OUT"
backup() {  # backup SRC_DB DEST_DB: a consistent copy of a live SQLite store, in one self-contained file
  "$PY" - "$1" "$2" <<'PY'
import sqlite3, sys, os
src, dest = sys.argv[1:3]
tmp = dest + ".tmp"
if os.path.lexists(tmp):
    os.unlink(tmp)
s, d = sqlite3.connect(f"file:{src}?mode=ro", uri=True), sqlite3.connect(tmp)
s.backup(d); d.execute("PRAGMA journal_mode=DELETE"); d.close(); s.close()
os.replace(tmp, dest)
PY
}
if [ -n "$SNAPSHOT" ] && [ ! -f "$OUT/cmp/results.sqlite" ] && [ -f "$SNAPSHOT/cmp/results.sqlite" ]; then
  mkdir -p "$OUT/ext" && cp -R "$SNAPSHOT/cmp" "$OUT/cmp"
  [ ! -f "$SNAPSHOT/ext/extend.sqlite" ] || cp "$SNAPSHOT/ext/extend.sqlite" "$OUT/ext/extend.sqlite"
fi
nice -n 5 "$R" compare --preset default --tasks lm --schemes rope,alibi,kerple-log,nope --seeds 0,1,2 --workers 2 \
  --no-progress --no-plots --out "$OUT/cmp" >> "$OUT/cmp.out" 2>> "$OUT/cmp.err" || exit 1
nice -n 5 "$R" extend --from "$OUT/cmp" --out "$OUT/ext" --no-progress >> "$OUT/ext.out" 2>> "$OUT/ext.err"
rc=$?
if [ -n "$SNAPSHOT" ]; then
  mkdir -p "$SNAPSHOT/cmp" "$SNAPSHOT/ext"
  cp "$OUT/cmp/config.json" "$SNAPSHOT/cmp/" && cp -R "$OUT/cmp/models" "$SNAPSHOT/cmp/"
  backup "$OUT/cmp/results.sqlite" "$SNAPSHOT/cmp/results.sqlite"
  [ ! -f "$OUT/ext/extend.sqlite" ] || backup "$OUT/ext/extend.sqlite" "$SNAPSHOT/ext/extend.sqlite"
fi
exit $rc
