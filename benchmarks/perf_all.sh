#!/bin/bash
# Every committed performance result of issue 34 in one run, from one commit, on one machine
#   benchmarks/perf_all.sh OUT      (run from a clean export of the commit; about 45 min of one core with settled timing, on quiet cores;
#   the job-step table takes 21 rounds of samples of at least 150 ms: at 5-9 rounds of single steps its cells moved by up to
#   1.8x between runs on this host)
# writes OUT/attention.{json,md} (every scheme x dense/chunked/auto, N = 256/1024/2048, causal and
# bidirectional, fwd and fwd+bwd), OUT/attention-peers.{json,md} (every peer at N = 2048, both masks),
# OUT/train_step.{json,md}, OUT/slow_schemes.{json,md} (causal), OUT/slow_schemes-bidirectional.{json,md} and
# OUT/slow_schemes-lm-shape.{json,md} (Transformer-XL at the compare presets' LM shape),
# OUT/memory.{json,md} (peak memory at N = 2048, causal, fwd+bwd: README.md's table) and OUT/job_step.{json,md}
# (the compare job step against a bare loop); OUT/perf_all.log has the commit and the times.
set -euo pipefail
OUT=${1:?usage: benchmarks/perf_all.sh OUT}
mkdir -p "$OUT"
export OMP_NUM_THREADS=1
PY=${PYTHON:-python}
log() { echo "$(date -u +%FT%TZ) $*" | tee -a "$OUT/perf_all.log"; }
log "commit $(git rev-parse HEAD 2>/dev/null || cat COMMIT 2>/dev/null || echo unknown); load $(cut -d' ' -f1-3 /proc/loadavg)"
log "attention grid"
$PY -m relpos.cli bench --lengths 256,1024,2048 --masks causal,bidirectional --no-memory --repeats 5 \
  --name attention --out "$OUT" > "$OUT/attention.log" 2>&1
log "peers"
$PY -m relpos.cli bench --impls peers --lengths 2048 --masks causal,bidirectional --no-memory --repeats 3 \
  --name attention-peers --out "$OUT" > "$OUT/attention-peers.log" 2>&1
log "slow schemes"
$PY benchmarks/slow_schemes.py --rounds 9 --out "$OUT" > "$OUT/slow_schemes.log" 2>&1
log "slow schemes, bidirectional"
$PY benchmarks/slow_schemes.py --rounds 9 --bidirectional --name slow_schemes-bidirectional --out "$OUT" \
  > "$OUT/slow_schemes-bidirectional.log" 2>&1
log "slow schemes at the compare presets' LM shape (B = 16, H = 4, N = 64, D = 16): Transformer-XL's floor there"
$PY benchmarks/slow_schemes.py --n 64 --batch 16 --heads 4 --head-dim 16 --rows 64 --rounds 15 \
  --schemes transformer-xl --name slow_schemes-lm-shape --out "$OUT" > "$OUT/slow_schemes-lm-shape.log" 2>&1
log "train step"
$PY benchmarks/train_step.py --no-compile --out "$OUT" > "$OUT/train_step.log" 2>&1
log "memory (README.md's table)"
$PY -m relpos.cli bench --lengths 2048 --masks causal --modes fwd+bwd --impls dense,chunked --repeats 1 \
  --memory-jobs 1 --name memory --out "$OUT" > "$OUT/memory.log" 2>&1
log "job step (issue 52: the compare job step against a bare loop, every preset shape)"
$PY benchmarks/job_step.py --rounds 21 --settle 1 --sample-ms 150 --compile-cells default-lm --compile-schemes nope \
  --predict docs/results/protocol3/full/results.sqlite --out "$OUT" > "$OUT/job_step.log" 2>&1
log "done; load $(cut -d' ' -f1-3 /proc/loadavg)"
