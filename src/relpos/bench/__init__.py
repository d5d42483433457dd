"""Side-by-side attention benchmark: every scheme and implementation, one process.

``relpos bench`` (see :mod:`relpos.commands.bench`) runs :func:`run_bench`. The package:

* :mod:`~relpos.bench.spec` -- :class:`BenchSpec`, :class:`Case` and the modes (imported by the rest);
* :mod:`~relpos.bench.cases` -- the default and grid plans, the targets;
* :mod:`~relpos.bench.peers` -- the peer registry (every documented configuration of each peer);
* :mod:`~relpos.bench.layers` -- the attention layers the peers are compared in;
* :mod:`~relpos.bench.steps` -- one runnable step per case, and the clock;
* :mod:`~relpos.bench.memory` -- peak memory in a fresh process per configuration;
* :mod:`~relpos.bench.runner` -- interleaved timing, :class:`Record`, the JSON document;
* :mod:`~relpos.bench.report` -- the markdown report.

Process settings, applied before any parallel work (documented in
``benchmarks/README.md``): one intra-op thread by default (``threads``; ratios on
a shared machine are far steadier single-threaded), and
``torch.set_flush_denormal(True)``: biases that reach -90 and below (ALiBi,
KERPLE, T5 far buckets) produce subnormal probabilities, which x86 CPUs process
about a hundred times slower. Both apply to the baseline and the peers alike.
"""

from __future__ import annotations

from relpos.bench.cases import (
    DENSE_MAX_N,
    GRID_LENGTHS,
    LONG_LENGTHS,
    LONG_SCHEMES,
    MAIN_N,
    MODES,
    SAMPLE_LENGTHS,
    SAMPLE_SCHEMES,
    SWEEP_LENGTHS,
    SWEEP_SCHEMES,
    TARGETS,
    BenchSpec,
    Case,
    attention_schemes,
    default_cases,
    default_impls,
    grid_cases,
)
from relpos.bench.memory import apply_process_settings, measure_memory
from relpos.bench.peers import PEERS, Peer, peer_available, peer_cases
from relpos.bench.report import markdown
from relpos.bench.runner import SLOW_S, Record, machine_info, merge_docs, run_bench
from relpos.bench.steps import build_step

__all__ = [
    "BenchSpec", "Case", "Record", "Peer", "PEERS", "TARGETS", "MODES", "MAIN_N", "SLOW_S",
    "SWEEP_LENGTHS", "SWEEP_SCHEMES", "GRID_LENGTHS", "SAMPLE_LENGTHS", "SAMPLE_SCHEMES", "LONG_LENGTHS", "LONG_SCHEMES", "DENSE_MAX_N",
    "attention_schemes", "default_cases", "default_impls", "grid_cases", "peer_cases", "peer_available",
    "run_bench", "merge_docs", "markdown", "machine_info", "measure_memory", "apply_process_settings", "build_step",
]
