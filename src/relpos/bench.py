"""Side-by-side attention benchmark: every scheme and implementation, one process.

``relpos bench`` (see :mod:`relpos.commands.bench`) runs :func:`run_bench`. For
each sequence length ``N`` the configurations of that ``N`` -- position-free
``scaled_dot_product_attention`` (the baseline), every ``(scheme, impl)`` and,
with ``--peers``, the public implementations a user would otherwise pick --
are timed *interleaved* (round robin, ``repeats`` rounds after one warm-up), so
drifts in machine load hit all of them alike; each record keeps the median.

Peak memory is measured in a **fresh process per configuration**: in-process
numbers are not trustworthy for torch on CPU, because glibc keeps freed blocks
and later allocations reuse pages that are already resident. On Linux one
"zygote" process (``python -m relpos.bench --memory-zygote``) imports torch and
relpos, runs nothing, and forks one child per configuration, so no child pays
for the imports again yet none inherits a used heap; elsewhere each
configuration gets its own interpreter. The child builds the inputs, runs a
tiny warm-up (to load code), reads its resident set size, runs one forward and
then one forward+backward step, and reports the growth of the peak resident set
size (``VmHWM``) over that starting point, in MiB.

Process settings, applied before any parallel work (documented in
``benchmarks/README.md``): one intra-op thread by default (``threads``; ratios
on a shared machine are far steadier single-threaded), and
``torch.set_flush_denormal(True)``: biases that reach -90 and below (ALiBi,
KERPLE, T5 far buckets) produce subnormal probabilities, which x86 CPUs process
about a hundred times slower. Both apply to the baseline and the peers alike.

Output: a JSON document (:func:`run_bench` returns it; schema version 1) with
one record per ``(scheme, impl, N, mode)`` and a markdown report
(:func:`markdown`).
"""

from __future__ import annotations

import dataclasses
import json
import math
import os
import platform
import statistics
import subprocess
import sys
import time
from collections.abc import Callable

import torch
import torch.nn.functional as F
from torch import Tensor, nn

__all__ = [
    "BenchSpec",
    "Case",
    "default_cases",
    "grid_cases",
    "run_bench",
    "markdown",
    "TARGETS",
    "PEERS",
    "attention_schemes",
    "machine_info",
]

MODES = ("fwd", "fwd+bwd")

#: A case whose warm-up run takes longer than this many seconds is timed by that run alone.
SLOW_S = 2.0

#: Targets of issue 7 (CPU, N = 2048, fwd+bwd, ratio to position-free SDPA).
TARGETS: dict[str, float] = {
    "nope": 1.2, "rope": 1.2, "alibi": 1.2, "sandwich": 1.2,
    "t5": 1.5, "kerple-log": 1.5, "kerple-power": 1.5, "fire": 1.5, "transformer-xl": 1.5, "shaw": 1.5,
    "shaw-kv": 2.0,
}

#: Peer implementations (``--peers``): name -> (relpos scheme it is compared with, description).
PEERS: dict[str, tuple[str, str]] = {
    "hf-t5": ("t5", "Hugging Face transformers T5LayerSelfAttention (relative bias, causal mask)"),
    "xt-t5": ("t5", "x-transformers Decoder layer, rel_pos_bias=True (T5-style)"),
    "xt-alibi": ("alibi", "x-transformers Decoder layer, alibi_pos_bias=True"),
    "xt-rope": ("rope", "x-transformers Decoder layer, rotary_pos_emb=True"),
    "shaw-nnd": ("shaw-kv", "Shaw key+value attention with the N x N x d relation tensor (tensor2tensor form)"),
}


# ------------------------------------------------------------------------- spec & cases


@dataclasses.dataclass
class BenchSpec:
    """Shapes and process settings shared by every case of a run."""

    batch: int = 1
    heads: int = 8
    head_dim: int = 64
    causal: bool = True
    dtype: str = "float32"
    repeats: int = 3
    threads: int = 1
    flush_denormal: bool = True
    memory: bool = True
    memory_jobs: int = 3
    device: str = "cpu"
    #: "cpu" (process CPU time: steady on a shared machine, single-threaded) or "wall"
    clock: str = "cpu"

    def torch_dtype(self) -> torch.dtype:
        try:
            return {"float32": torch.float32, "float64": torch.float64, "bfloat16": torch.bfloat16,
                    "float16": torch.float16}[self.dtype]
        except KeyError:
            raise ValueError(f"dtype must be float32, float64, bfloat16 or float16, got {self.dtype!r}") from None


@dataclasses.dataclass(frozen=True)
class Case:
    """One configuration: ``impl`` is ``"sdpa"`` for the baseline, an attention
    implementation name, ``"peer:<name>"`` or ``"layer:<name>"`` (the relpos
    attention layer matching peer ``<name>``)."""

    scheme: str
    impl: str
    N: int
    mode: str

    @property
    def key(self) -> tuple:
        return (self.scheme, self.impl, self.N, self.mode)


def attention_schemes() -> list[str]:
    """Registered schemes that act inside attention, plus ``"nope"``; RoPE's
    scaled variants (same kernels as ``"rope"``) are left out."""
    import relpos
    from relpos.encodings import scheme_names

    out = []
    for n in scheme_names():
        if n.startswith("rope-"):
            continue
        enc = relpos.make_encoding(n, n_heads=2, head_dim=8)
        if enc.acts_on - {"embedding"} or not enc.acts_on:
            out.append(n)
    return out


def default_impls(device: str = "cpu") -> list[str]:
    from relpos.attention import available_impls

    impls = [i for i in ("dense", "chunked", "flex", "auto") if i in available_impls()]
    if device == "cpu":  # FlexAttention is neither fused nor differentiable on CPU
        impls = [i for i in impls if i != "flex"]
    return impls


#: Default length sweep (forward+backward) and the schemes it covers; N = 2048 covers every scheme.
SWEEP_LENGTHS = (256, 1024, 4096, 8192)
SWEEP_SCHEMES = ("nope", "alibi", "t5", "shaw")
SWEEP_SCHEMES_8192 = SWEEP_SCHEMES
LONG_LENGTHS = (16384,)
LONG_SCHEMES = ("alibi", "t5")
DENSE_MAX_N = 1024  # in the sweep; dense's N x N terms make longer runs slow (its cost is shown at N = 2048)


def default_cases(device: str = "cpu", *, peers: bool = False) -> list[Case]:
    """The default plan (under 10 minutes on a 2-core CPU machine).

    * ``N = 2048``: every attention scheme x every implementation, forward and
      forward+backward;
    * ``N`` in :data:`SWEEP_LENGTHS`, forward+backward: :data:`SWEEP_SCHEMES`
      (:data:`SWEEP_SCHEMES_8192` at 8192) with ``chunked``, and ``dense`` up to
      :data:`DENSE_MAX_N`;
    * ``N = 16384``: :data:`LONG_SCHEMES` with ``chunked``, forward+backward;
    * ``--peers``: every peer and its matching relpos layer at ``N = 2048``.
    """
    cases: list[Case] = []
    impls = default_impls(device)
    for s in attention_schemes():
        for i in impls:
            for m in MODES:
                cases.append(Case(s, i, 2048, m))
    for N in SWEEP_LENGTHS:
        for s in (SWEEP_SCHEMES_8192 if N >= 8192 else SWEEP_SCHEMES):
            for i in ("dense", "chunked"):
                if i == "dense" and N > DENSE_MAX_N:
                    continue
                cases.append(Case(s, i, N, "fwd+bwd"))
    for N in LONG_LENGTHS:
        for s in LONG_SCHEMES:
            cases.append(Case(s, "chunked", N, "fwd+bwd"))
    if peers:
        cases += peer_cases([2048])
    return cases


def grid_cases(schemes: list[str], impls: list[str], lengths: list[int], modes: list[str]) -> list[Case]:
    """Every combination (``impls`` may include ``"peers"`` for the peer set)."""
    cases = []
    for N in lengths:
        for s in schemes:
            for i in impls:
                if i == "peers":
                    continue
                for m in modes:
                    cases.append(Case(s, i, N, m))
    if "peers" in impls:
        cases += peer_cases(lengths)
    return cases


def peer_cases(lengths: list[int]) -> list[Case]:
    out = []
    for N in lengths:
        for name, (scheme, _) in PEERS.items():
            for m in MODES:
                out.append(Case(scheme, f"peer:{name}", N, m))
                out.append(Case(scheme, f"layer:{name}", N, m))
    return out


# ---------------------------------------------------------------------------- builders


def _inputs(spec: BenchSpec, N: int, grad: bool, seed: int = 0):
    g = torch.Generator().manual_seed(seed)
    dt = spec.torch_dtype()
    shape = (spec.batch, spec.heads, N, spec.head_dim)
    q, k, v = (torch.randn(shape, generator=g).to(device=spec.device, dtype=dt).requires_grad_(grad)
               for _ in range(3))
    go = torch.randn(shape, generator=g).to(device=spec.device, dtype=dt)
    return q, k, v, go


def _clear_grads(tensors) -> None:
    for t in tensors:
        t.grad = None


class _RelposLayer(nn.Module):
    """Pre-norm self-attention layer around ``relpos.attention`` (same shapes as the peers)."""

    def __init__(self, dim: int, heads: int, dim_head: int, encoding, impl: str, causal: bool) -> None:
        super().__init__()
        inner = heads * dim_head
        self.heads, self.dim_head = heads, dim_head
        self.norm = nn.LayerNorm(dim, elementwise_affine=False)
        self.to_qkv = nn.Linear(dim, 3 * inner, bias=False)
        self.to_out = nn.Linear(inner, dim, bias=False)
        self.final_norm = nn.LayerNorm(dim, elementwise_affine=False)
        self.encoding = encoding
        self.impl = impl
        self.causal = causal

    def forward(self, x: Tensor) -> Tensor:
        import relpos

        B, N, _ = x.shape
        qkv = self.to_qkv(self.norm(x)).view(B, N, 3, self.heads, self.dim_head).permute(2, 0, 3, 1, 4)
        out = relpos.attention(qkv[0], qkv[1], qkv[2], self.encoding, causal=self.causal, impl=self.impl)
        out = out.transpose(1, 2).reshape(B, N, self.heads * self.dim_head)
        return self.final_norm(x + self.to_out(out))


class _ShawNND(nn.Module):
    """Shaw et al. key+value attention written with the ``N x N x d`` relation tensors
    (the tensor2tensor formulation), with the same projections as the relpos layer."""

    def __init__(self, dim: int, heads: int, dim_head: int, k: int, causal: bool) -> None:
        super().__init__()
        inner = heads * dim_head
        self.heads, self.dim_head, self.k, self.causal = heads, dim_head, k, causal
        self.norm = nn.LayerNorm(dim, elementwise_affine=False)
        self.to_qkv = nn.Linear(dim, 3 * inner, bias=False)
        self.to_out = nn.Linear(inner, dim, bias=False)
        self.final_norm = nn.LayerNorm(dim, elementwise_affine=False)
        self.rel_k = nn.Parameter(torch.randn(2 * k + 1, dim_head) * 0.02)
        self.rel_v = nn.Parameter(torch.randn(2 * k + 1, dim_head) * 0.02)

    def forward(self, x: Tensor) -> Tensor:
        B, N, _ = x.shape
        qkv = self.to_qkv(self.norm(x)).view(B, N, 3, self.heads, self.dim_head).permute(2, 0, 3, 1, 4)
        q, k, v = qkv[0], qkv[1], qkv[2]
        pos = torch.arange(N, device=x.device)
        idx = (pos[None, :] - pos[:, None]).clamp(-self.k, self.k) + self.k  # (N, N)
        ak, av = self.rel_k[idx], self.rel_v[idx]  # (N, N, d) each
        logits = q @ k.transpose(-1, -2) + torch.einsum("bhid,ijd->bhij", q, ak)
        logits = logits / math.sqrt(self.dim_head)
        if self.causal:
            logits = logits.masked_fill(pos[None, :] > pos[:, None], float("-inf"))
        p = logits.softmax(-1)
        out = p @ v + torch.einsum("bhij,ijd->bhid", p, av)
        out = out.transpose(1, 2).reshape(B, N, self.heads * self.dim_head)
        return self.final_norm(x + self.to_out(out))


class _HFT5(nn.Module):
    """transformers' T5 self-attention layer, with its causal mask (as T5Stack builds it)."""

    def __init__(self, dim: int, heads: int, dim_head: int, causal: bool) -> None:
        super().__init__()
        import logging

        logging.getLogger("transformers").setLevel(logging.ERROR)
        from transformers import T5Config
        from transformers.models.t5.modeling_t5 import T5LayerSelfAttention

        cfg = T5Config(d_model=dim, d_kv=dim_head, num_heads=heads, relative_attention_num_buckets=32,
                       relative_attention_max_distance=128, is_decoder=causal, dropout_rate=0.0)
        cfg._attn_implementation = "eager"
        self.layer = T5LayerSelfAttention(cfg, has_relative_attention_bias=True, layer_idx=0)
        self.causal = causal

    def forward(self, x: Tensor) -> Tensor:
        N = x.shape[1]
        mask = None
        if self.causal:
            mask = torch.full((N, N), torch.finfo(x.dtype).min, device=x.device, dtype=x.dtype).triu(1)[None, None]
        return self.layer(x, attention_mask=mask)[0]


def _peer_module(name: str, spec: BenchSpec) -> nn.Module:
    dim = spec.heads * spec.head_dim
    if name == "hf-t5":
        return _HFT5(dim, spec.heads, spec.head_dim, spec.causal)
    if name.startswith("xt-"):
        import x_transformers

        kw = {"xt-t5": {"rel_pos_bias": True}, "xt-alibi": {"alibi_pos_bias": True},
              "xt-rope": {"rotary_pos_emb": True}}[name]
        cls = x_transformers.Decoder if spec.causal else x_transformers.Encoder
        return cls(dim=dim, depth=1, heads=spec.heads, attn_dim_head=spec.head_dim, custom_layers=("a",), **kw)
    if name == "shaw-nnd":
        return _ShawNND(dim, spec.heads, spec.head_dim, 16, spec.causal)
    raise ValueError(f"unknown peer {name!r}; known: {', '.join(PEERS)}")


def _make_encoding(scheme: str, spec: BenchSpec, N: int):
    import relpos

    return relpos.make_encoding(scheme, n_heads=spec.heads, head_dim=spec.head_dim, causal=spec.causal,
                                max_len=max(N, 512)).to(spec.device)


def build_step(case: Case, spec: BenchSpec) -> tuple[Callable[[], None], Callable[[], str | None]]:
    """``(step, info)``: ``step()`` runs the case once; ``info()`` says which
    implementation ``auto`` picked (None otherwise).

    Raises:
        relpos.attention.UnsupportedError: the implementation cannot serve the case.
    """
    import relpos

    train = case.mode == "fwd+bwd"
    N = case.N
    if case.impl.startswith(("peer:", "layer:")):
        kind, name = case.impl.split(":", 1)
        if kind == "peer":
            mod = _peer_module(name, spec)
        else:
            scheme = PEERS[name][0]
            mod = _RelposLayer(spec.heads * spec.head_dim, spec.heads, spec.head_dim,
                               _make_encoding(scheme, spec, N), "auto", spec.causal)
        mod = mod.to(device=spec.device, dtype=spec.torch_dtype())
        g = torch.Generator().manual_seed(1)
        x = torch.randn(spec.batch, N, spec.heads * spec.head_dim, generator=g).to(spec.device, spec.torch_dtype())
        x.requires_grad_(train)
        params = [p for p in mod.parameters() if p.requires_grad]

        def step_layer() -> None:
            if train:
                _clear_grads([x, *params])
                mod(x).sum().backward()
            else:
                with torch.no_grad():
                    mod(x)

        return step_layer, (lambda: _auto_choice()) if kind == "layer" else (lambda: None)

    q, k, v, go = _inputs(spec, N, train)
    if case.impl == "sdpa":
        def step_base() -> None:
            if train:
                _clear_grads([q, k, v])
                F.scaled_dot_product_attention(q, k, v, is_causal=spec.causal).backward(go)
            else:
                with torch.no_grad():
                    F.scaled_dot_product_attention(q, k, v, is_causal=spec.causal)

        return step_base, lambda: None

    enc = _make_encoding(case.scheme, spec, N)
    params = [p for p in enc.parameters() if p.requires_grad]

    def step() -> None:
        if train:
            _clear_grads([q, k, v, *params])
            relpos.attention(q, k, v, enc, causal=spec.causal, impl=case.impl).backward(go)
        else:
            with torch.no_grad():
                relpos.attention(q, k, v, enc, causal=spec.causal, impl=case.impl)

    return step, (_auto_choice if case.impl == "auto" else (lambda: None))


def _auto_choice() -> str | None:
    import importlib

    return importlib.import_module("relpos.attention.auto").last_choice


# ----------------------------------------------------------------------------- process


def apply_process_settings(spec: BenchSpec) -> None:
    """Denormal flushing and thread count; call before any parallel torch work."""
    if spec.flush_denormal:
        torch.set_flush_denormal(True)
    if spec.threads and spec.threads > 0:
        torch.set_num_threads(spec.threads)


def machine_info(spec: BenchSpec | None = None) -> dict:
    """A JSON-able description of this machine and software."""
    cpu = platform.processor() or platform.machine()
    try:
        with open("/proc/cpuinfo") as f:
            for line in f:
                if line.startswith("model name"):
                    cpu = line.split(":", 1)[1].strip()
                    break
    except OSError:
        pass
    info = {
        "cpu": cpu,
        "cpu_count": os.cpu_count(),
        "torch_threads": torch.get_num_threads(),
        "cpu_capability": getattr(torch.backends.cpu, "get_cpu_capability", lambda: "?")(),
        "platform": platform.platform(),
        "python": platform.python_version(),
        "torch": torch.__version__,
    }
    if torch.cuda.is_available():
        info["gpu"] = torch.cuda.get_device_name(0)
    if spec is not None:
        info["flush_denormal"] = spec.flush_denormal
    try:
        info["loadavg_start"] = os.getloadavg()
    except OSError:
        pass
    return info


def _rss_kib() -> tuple[int, int]:
    """(current RSS, peak RSS) in KiB, from /proc/self/status (Linux) or getrusage."""
    try:
        cur = peak = None
        with open("/proc/self/status") as f:
            for line in f:
                if line.startswith("VmRSS:"):
                    cur = int(line.split()[1])
                elif line.startswith("VmHWM:"):
                    peak = int(line.split()[1])
        if cur is not None and peak is not None:
            return cur, peak
    except OSError:
        pass
    import resource

    r = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
    r = r // 1024 if sys.platform == "darwin" else r
    return r, r


def _measure_one(case: Case, spec: BenchSpec, train: bool) -> dict:
    """Peak-RSS growth of one forward and one forward+backward step, in this (fresh) process."""
    out = {"fwd_mib": None, "train_mib": None, "error": None}
    try:
        # tiny warm-up of the same code path: loads modules, kernels and caches
        small = dataclasses.replace(case, N=32)
        for mode in (MODES if train else ("fwd",)):
            build_step(dataclasses.replace(small, mode=mode), spec)[0]()
        step_fwd, _ = build_step(dataclasses.replace(case, mode="fwd"), spec)
        step_train = build_step(dataclasses.replace(case, mode="fwd+bwd"), spec)[0] if train else None
        rss0, _ = _rss_kib()
        step_fwd()
        _, peak1 = _rss_kib()
        out["fwd_mib"] = max(0.0, (peak1 - rss0) / 1024)
        if step_train is not None:
            step_train()
            _, peak2 = _rss_kib()
            out["train_mib"] = max(0.0, (peak2 - rss0) / 1024)
    except Exception as e:  # reported, not raised: the parent records it
        out["error"] = f"{type(e).__name__}: {e}"[:300]
    return out


def _child_main(argv: list[str]) -> int:
    """One configuration: ``python -m relpos.bench --memory-child '<json>'``; prints one JSON line."""
    payload = json.loads(argv[0])
    spec = BenchSpec(**payload["spec"])
    apply_process_settings(spec)
    c = payload["case"]
    out = _measure_one(Case(c["scheme"], c["impl"], int(c["N"]), "fwd"), spec, bool(payload.get("train", True)))
    print("RELPOS_MEM " + json.dumps(out), flush=True)
    return 0


def _zygote_main(argv: list[str]) -> int:
    """``python -m relpos.bench --memory-zygote '<spec json>'``: forks one fresh child per configuration.

    The zygote imports torch and relpos and runs nothing else, so every forked
    child starts as a fresh process would (no benchmark has run, no freed heap to
    reuse), without paying for the imports again. Configurations arrive as JSON
    lines on stdin; results leave as ``RELPOS_MEM {"id": ..., ...}`` lines.
    """
    import signal

    spec = BenchSpec(**json.loads(argv[0]))
    timeout = int(float(argv[1])) if len(argv) > 1 else 600
    apply_process_settings(spec)
    import relpos  # noqa: F401  (imports only; nothing runs before fork)
    import relpos.attention  # noqa: F401
    for mod in ("dense", "chunked", "auto", "reference"):
        __import__(f"relpos.attention.{mod}")
    items = [json.loads(line) for line in sys.stdin if line.strip()]
    running: dict[int, tuple[int, int]] = {}  # pid -> (read fd, item id)

    def reap(block: bool) -> None:
        pid, _ = os.waitpid(-1, 0 if block else os.WNOHANG)
        if pid == 0:
            return
        fd, ident = running.pop(pid)
        data = b""
        while chunk := os.read(fd, 65536):
            data += chunk
        os.close(fd)
        try:
            res = json.loads(data.decode())
        except ValueError:
            res = {"fwd_mib": None, "train_mib": None, "error": f"child exited without a result (timeout {timeout} s?)"}
        res["id"] = ident
        print("RELPOS_MEM " + json.dumps(res), flush=True)

    for item in items:
        while len(running) >= max(1, spec.memory_jobs):
            reap(True)
        r, w = os.pipe()
        pid = os.fork()
        if pid == 0:  # child
            os.close(r)
            signal.alarm(timeout)
            c = item["case"]
            res = _measure_one(Case(c["scheme"], c["impl"], int(c["N"]), "fwd"), spec, bool(item["train"]))
            os.write(w, json.dumps(res).encode())
            os.close(w)
            os._exit(0)
        os.close(w)
        running[pid] = (r, item["id"])
    while running:
        reap(True)
    return 0


def _memory_cmd(case: Case, spec: BenchSpec, train: bool) -> list[str]:
    payload = {"spec": dataclasses.asdict(spec), "case": dataclasses.asdict(case), "train": train}
    return [sys.executable, "-m", "relpos.bench", "--memory-child", json.dumps(payload)]


def _child_env(spec: BenchSpec) -> dict:
    env = dict(os.environ)
    env.setdefault("OMP_NUM_THREADS", str(max(1, spec.threads)))
    src = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
    env["PYTHONPATH"] = src + (os.pathsep + env["PYTHONPATH"] if env.get("PYTHONPATH") else "")
    return env


def measure_memory(items: list[tuple[Case, bool]], spec: BenchSpec, *, log=None, timeout: float = 600) -> dict:
    """Peak memory of each ``(case, train)``, each in a fresh process, ``spec.memory_jobs`` at a time.

    On systems with ``fork`` one zygote process (imports only) forks a child per
    configuration; elsewhere each configuration gets its own interpreter.

    Returns ``{(scheme, impl, N): {"fwd_mib":..., "train_mib":..., "error":...}}``.
    """
    results: dict = {}

    def record(case: Case, res: dict) -> None:
        results[(case.scheme, case.impl, case.N)] = res
        if log:
            log(f"  memory {case.scheme}/{case.impl} N={case.N}: "
                f"{_fmt_mib(res['fwd_mib'])} fwd, {_fmt_mib(res['train_mib'])} fwd+bwd"
                + (f" ({res['error']})" if res["error"] else ""))

    if hasattr(os, "fork") and sys.platform.startswith("linux"):
        cmd = [sys.executable, "-m", "relpos.bench", "--memory-zygote", json.dumps(dataclasses.asdict(spec)),
               str(int(timeout))]
        lines = "".join(json.dumps({"id": i, "case": dataclasses.asdict(c), "train": t}) + "\n"
                        for i, (c, t) in enumerate(items))
        p = subprocess.Popen(cmd, stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
                             env=_child_env(spec))
        p.stdin.write(lines)
        p.stdin.close()
        for line in p.stdout:
            if line.startswith("RELPOS_MEM "):
                res = json.loads(line[len("RELPOS_MEM "):])
                record(items[res.pop("id")][0], res)
        p.wait()
        err = p.stderr.read().strip()
        for case, _ in items:
            if (case.scheme, case.impl, case.N) not in results:
                record(case, {"fwd_mib": None, "train_mib": None,
                              "error": (err.splitlines() or ["memory zygote failed"])[-1][:300]})
        return results

    pending = list(items)
    running: list = []
    while pending or running:
        while pending and len(running) < max(1, spec.memory_jobs):
            case, train = pending.pop(0)
            p = subprocess.Popen(_memory_cmd(case, spec, train), stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                                 text=True, env=_child_env(spec))
            running.append((case, p, time.monotonic()))
        time.sleep(0.05)
        still = []
        for case, p, t0 in running:
            if p.poll() is None and time.monotonic() - t0 < timeout:
                still.append((case, p, t0))
                continue
            if p.poll() is None:
                p.kill()
            stdout, stderr = p.communicate()
            res = {"fwd_mib": None, "train_mib": None, "error": None}
            for line in stdout.splitlines():
                if line.startswith("RELPOS_MEM "):
                    res = json.loads(line[len("RELPOS_MEM "):])
            if res["fwd_mib"] is None and res["error"] is None:
                res["error"] = (stderr.strip().splitlines() or ["child failed"])[-1][:300]
            record(case, res)
        running = still
    return results


def _fmt_mib(x) -> str:
    return "-" if x is None else f"{x:.0f} MiB"


# ------------------------------------------------------------------------------ timing


def run_bench(cases: list[Case], spec: BenchSpec, *, log: Callable[[str], None] | None = None,
              time_budget: float | None = None) -> dict:
    """Time every case (interleaved per N) and measure its memory; return the JSON document.

    Args:
        cases: configurations (see :func:`default_cases`, :func:`grid_cases`).
        spec: shapes and process settings (apply them with
            :func:`apply_process_settings` first; the CLI does).
        log: progress callback (one line per event).
        time_budget: seconds after which remaining timing rounds are cut short
            (each case keeps at least one timed run).
    """
    from relpos.attention import UnsupportedError

    log = log or (lambda s: None)
    t_start = time.monotonic()
    by_n: dict[int, list[Case]] = {}
    for c in cases:
        by_n.setdefault(c.N, []).append(c)
    records: dict[tuple, dict] = {}
    baseline: dict[tuple[int, str], float] = {}
    baseline_wall: dict[tuple[int, str], float] = {}
    for N in sorted(by_n):
        group = by_n[N]
        modes = sorted({c.mode for c in group})
        runnable: list[tuple[Case, Callable, Callable]] = []
        for m in modes:
            base = Case("none", "sdpa", N, m)
            runnable.append((base, *build_step(base, spec)))
        slow: set = set()  # cases timed once: their warm-up run took longer than SLOW_S
        first: dict[tuple, tuple[float, float]] = {}
        for c in group:
            rec = {"scheme": c.scheme, "impl": c.impl, "N": N, "mode": c.mode, "status": "ok", "note": None,
                   "chosen": None, "median_ms": None, "wall_ms": None, "cpu_ms": None, "runs": 0}
            records[c.key] = rec
            try:
                step, info = build_step(c, spec)
                w, cpu = _timed(step, spec)  # warm-up; raises UnsupportedError for unsupported cases
                rec["warmup_ms"] = w
                rec["chosen"] = info()
                runnable.append((c, step, info))
                if w > SLOW_S * 1000:
                    slow.add(c.key)
                    first[c.key] = (w, cpu)
            except UnsupportedError as e:
                rec["status"], rec["note"] = "unsupported", str(e)
            except Exception as e:  # a broken case must not sink the run
                rec["status"], rec["note"] = "error", f"{type(e).__name__}: {e}"[:300]
                log(f"  error {c.scheme}/{c.impl} N={N} {c.mode}: {rec['note']}")
        # baseline warm-up
        for c, step, _ in runnable[: len(modes)]:
            w, cpu = _timed(step, spec)
            if w > SLOW_S * 1000:
                slow.add(c.key)
                first[c.key] = (w, cpu)
        walls: dict[tuple, list[float]] = {c.key: [] for c, _, _ in runnable}
        cpus: dict[tuple, list[float]] = {c.key: [] for c, _, _ in runnable}
        log(f"N={N}: {len(runnable)} cases, {len(slow)} timed once (over {SLOW_S:g} s), "
            f"{spec.repeats} rounds for the rest")
        for key, (w, cpu) in first.items():
            walls[key].append(w)
            cpus[key].append(cpu)
        for r in range(spec.repeats):
            if r > 0 and time_budget is not None and time.monotonic() - t_start > time_budget:
                log(f"  time budget reached: N={N} keeps {r} round(s)")
                break
            for c, step, _ in runnable:
                if c.key in slow:
                    continue
                w, cpu = _timed(step, spec)
                walls[c.key].append(w)
                cpus[c.key].append(cpu)
        clock = cpus if spec.clock == "cpu" else walls
        for m in modes:
            baseline[(N, m)] = statistics.median(clock[("none", "sdpa", N, m)])
            baseline_wall[(N, m)] = statistics.median(walls[("none", "sdpa", N, m)])
        for c, _, _ in runnable:
            if c.impl == "sdpa":
                continue
            rec = records[c.key]
            rec["median_ms"] = statistics.median(clock[c.key])
            rec["wall_ms"] = statistics.median(walls[c.key])
            rec["cpu_ms"] = statistics.median(cpus[c.key])
            rec["runs"] = len(clock[c.key])
        for c in group:
            rec = records[c.key]
            rec["baseline_ms"] = baseline[(N, c.mode)]
            rec["baseline_wall_ms"] = baseline_wall[(N, c.mode)]
            if rec["median_ms"] is not None:
                rec["ratio"] = rec["median_ms"] / rec["baseline_ms"]
                rec["wall_ratio"] = rec["wall_ms"] / rec["baseline_wall_ms"]
            log(f"N={N:<6} {c.mode:<8} {c.scheme:<15} {c.impl:<16} "
                + (f"{rec['median_ms']:9.1f} ms  x{rec['ratio']:.2f} (wall x{rec['wall_ratio']:.2f})"
                   if rec["median_ms"] is not None else rec["status"])
                + (f"  -> {rec['chosen']}" if rec["chosen"] else ""))
    timing_s = time.monotonic() - t_start

    # ------------------------------------------------------------------ memory
    base_mem: dict[int, dict] = {}
    if spec.memory:
        items: dict[tuple, tuple[Case, bool]] = {}
        for rec in records.values():
            if rec["status"] != "ok":
                continue
            impl = rec["impl"]
            if impl == "auto" and rec["chosen"]:
                continue  # auto runs the code of the implementation it picked: measured there
            key = (rec["scheme"], impl, rec["N"])
            train = any(r["mode"] == "fwd+bwd" and r["status"] == "ok"
                        for r in records.values() if (r["scheme"], r["impl"], r["N"]) == key)
            items.setdefault(key, (Case(rec["scheme"], impl, rec["N"], "fwd"), train))
        for N in by_n:
            items[("none", "sdpa", N)] = (Case("none", "sdpa", N, "fwd"), True)
        log(f"memory: {len(items)} fresh subprocesses, {spec.memory_jobs} at a time")
        mem = measure_memory(list(items.values()), spec, log=log)
        for N in by_n:
            base_mem[N] = mem.get(("none", "sdpa", N), {})
        for rec in records.values():
            impl = rec["impl"]
            if impl == "auto" and rec["chosen"]:
                impl = rec["chosen"]
            m = mem.get((rec["scheme"], impl, rec["N"]))
            if m is None:
                continue
            rec["peak_mib"] = m["train_mib"] if rec["mode"] == "fwd+bwd" else m["fwd_mib"]
            b = base_mem.get(rec["N"], {})
            rec["baseline_peak_mib"] = b.get("train_mib") if rec["mode"] == "fwd+bwd" else b.get("fwd_mib")
            if m.get("error"):
                rec["memory_note"] = m["error"]
    doc = {
        "version": 1,
        "kind": "relpos-attention-bench",
        "machine": machine_info(spec),
        "spec": dataclasses.asdict(spec),
        "shape": f"B={spec.batch}, H={spec.heads}, D={spec.head_dim}, {spec.dtype}, "
                 f"{'causal' if spec.causal else 'bidirectional'}",
        "baseline": "torch.nn.functional.scaled_dot_product_attention without position terms"
                    + (" (is_causal=True)" if spec.causal else ""),
        "clock": ("process CPU time" if spec.clock == "cpu" else "wall-clock time") + " (median_ms, ratio); "
                 "both clocks are in every record (cpu_ms, wall_ms, wall_ratio)",
        "timing_seconds": round(timing_s, 1),
        "total_seconds": round(time.monotonic() - t_start, 1),
        "records": [_clean(r) for r in records.values()],
        "peers": _peer_summary(records),
    }
    return doc


def _timed(step: Callable[[], None], spec: BenchSpec) -> tuple[float, float]:
    """Run ``step`` once: (wall ms, process CPU ms)."""
    if spec.device == "cuda":
        torch.cuda.synchronize()
    w0, c0 = time.perf_counter(), time.process_time()
    step()
    if spec.device == "cuda":
        torch.cuda.synchronize()
    return (time.perf_counter() - w0) * 1000, (time.process_time() - c0) * 1000


def _clean(rec: dict) -> dict:
    out = dict(rec)
    for k in ("median_ms", "baseline_ms", "ratio", "peak_mib", "baseline_peak_mib", "warmup_ms", "wall_ms",
              "cpu_ms", "baseline_wall_ms", "wall_ratio"):
        if out.get(k) is not None:
            out[k] = round(float(out[k]), 3)
    out.setdefault("ratio", None)
    out.setdefault("peak_mib", None)
    out.setdefault("baseline_peak_mib", None)
    out.setdefault("baseline_ms", None)
    return out


def _peer_summary(records: dict) -> list[dict]:
    out = []
    for (scheme, impl, N, mode), rec in records.items():
        if not impl.startswith("peer:"):
            continue
        name = impl.split(":", 1)[1]
        mine = records.get((scheme, f"layer:{name}", N, mode))
        row = {"peer": name, "description": PEERS[name][1], "scheme": scheme, "N": N, "mode": mode,
               "peer_ms": rec.get("median_ms"), "peer_peak_mib": rec.get("peak_mib"),
               "relpos_ms": None, "relpos_peak_mib": None, "relpos_impl": None,
               "speedup": None, "memory_fraction": None, "status": rec["status"], "note": rec.get("note")}
        if mine is not None:
            row["relpos_ms"] = mine.get("median_ms")
            row["relpos_peak_mib"] = mine.get("peak_mib")
            row["relpos_impl"] = mine.get("chosen")
            if row["peer_ms"] and row["relpos_ms"]:
                row["speedup"] = round(row["peer_ms"] / row["relpos_ms"], 2)
            if row["peer_peak_mib"] and row["relpos_peak_mib"] is not None:
                row["memory_fraction"] = round(row["relpos_peak_mib"] / max(row["peer_peak_mib"], 1e-9), 3)
        for k in ("peer_ms", "relpos_ms", "peer_peak_mib", "relpos_peak_mib"):
            if row[k] is not None:
                row[k] = round(float(row[k]), 1)
        out.append(row)
    return out


# ---------------------------------------------------------------------------- markdown


def _cell(rec: dict | None) -> str:
    if rec is None:
        return ""
    if rec["status"] != "ok":
        return "n/a" if rec["status"] == "unsupported" else "error"
    s = f"x{rec['ratio']:.2f}"
    if rec.get("peak_mib") is not None:
        s += f" · {rec['peak_mib']:.0f} MiB"
    return s


def markdown(doc: dict) -> str:
    """The report: target-shape tables, the length sweep and the peer comparison."""
    recs = doc["records"]
    idx = {(r["scheme"], r["impl"], r["N"], r["mode"]): r for r in recs}
    impls = [i for i in ("dense", "chunked", "flex", "auto") if any(r["impl"] == i for r in recs)]
    schemes = []
    for r in recs:
        if ":" not in r["impl"] and r["scheme"] not in schemes:
            schemes.append(r["scheme"])
    lines = [f"Shape: {doc['shape']}. Baseline: {doc['baseline']}.", "",
             f"Cells: median {doc.get('clock', 'time').split(' (')[0]} as a multiple of the baseline's (same run, "
             "same N, same mode) · peak memory growth of a fresh process running the step once.", ""]
    Ns = sorted({r["N"] for r in recs})
    main_n = 2048 if 2048 in Ns else (Ns[-1] if Ns else None)
    for mode in MODES:
        rows = [s for s in schemes if any((s, i, main_n, mode) in idx for i in impls)]
        if not rows:
            continue
        b = next((idx[k] for k in idx if k[2] == main_n and k[3] == mode and idx[k].get("baseline_ms")), None)
        bl = ""
        if b is not None:
            bl = f" Baseline {b['baseline_ms']:.0f} ms"
            if b.get("baseline_peak_mib") is not None:
                bl += f", {b['baseline_peak_mib']:.0f} MiB"
            bl += "."
        lines += [f"### N = {main_n}, {mode}", "", bl.strip(), ""]
        head = "| scheme | " + " | ".join(impls) + " | auto picks |" + (" target | met |" if mode == "fwd+bwd" else "")
        lines += [head, "|" + "---|" * (len(impls) + 2 + (2 if mode == "fwd+bwd" else 0))]
        for s in rows:
            cells = [_cell(idx.get((s, i, main_n, mode))) for i in impls]
            a = idx.get((s, "auto", main_n, mode))
            pick = (a or {}).get("chosen") or ""
            row = f"| {s} | " + " | ".join(cells) + f" | {pick} |"
            if mode == "fwd+bwd":
                tgt = TARGETS.get(s)
                best = [idx[(s, i, main_n, mode)]["ratio"] for i in ("auto",) if (s, i, main_n, mode) in idx
                        and idx[(s, i, main_n, mode)].get("ratio") is not None]
                met = "" if tgt is None or not best else ("yes" if best[0] <= tgt else "no")
                row += f" {'' if tgt is None else f'<= {tgt}'} | {met} |"
            lines.append(row)
        lines.append("")
    # sweep
    sweep = sorted({(r["scheme"], r["impl"]) for r in recs if ":" not in r["impl"]
                    and len({x["N"] for x in recs if (x["scheme"], x["impl"]) == (r["scheme"], r["impl"])}) > 1})
    if sweep:
        for mode in MODES:
            Ns_m = sorted({r["N"] for r in recs if r["mode"] == mode and (r["scheme"], r["impl"]) in sweep})
            if len(Ns_m) < 2:
                continue
            lines += [f"### Length sweep, {mode}", "", "| scheme | impl | " + " | ".join(f"N={n}" for n in Ns_m) + " |",
                      "|---|---|" + "---|" * len(Ns_m)]
            for s, i in sweep:
                if not any((s, i, n, mode) in idx for n in Ns_m):
                    continue
                lines.append(f"| {s} | {i} | " + " | ".join(_cell(idx.get((s, i, n, mode))) for n in Ns_m) + " |")
            base_row = []
            for n in Ns_m:
                b = next((r for r in recs if r["N"] == n and r["mode"] == mode and r.get("baseline_ms")), None)
                base_row.append("" if b is None else f"{b['baseline_ms']:.0f} ms"
                                + ("" if b.get("baseline_peak_mib") is None else f" · {b['baseline_peak_mib']:.0f} MiB"))
            lines.append("| *baseline* | sdpa | " + " | ".join(base_row) + " |")
            lines.append("")
    if doc.get("peers"):
        lines += ["### Peers (same layer shape: norm, q/k/v/out projections, residual)", "",
                  "| peer | scheme | N | mode | peer ms | relpos ms (impl) | speedup | peer MiB | relpos MiB | "
                  "memory fraction |", "|---|---|---|---|---|---|---|---|---|---|"]
        for p in doc["peers"]:
            if p["status"] != "ok":
                lines.append(f"| {p['peer']} | {p['scheme']} | {p['N']} | {p['mode']} | {p['status']} | | | | | |")
                continue
            lines.append(
                f"| {p['peer']} | {p['scheme']} | {p['N']} | {p['mode']} | {p['peer_ms']} | {p['relpos_ms']} "
                f"({p['relpos_impl']}) | {p['speedup']}x | {p['peer_peak_mib']} | {p['relpos_peak_mib']} | "
                f"{p['memory_fraction']} |")
        lines.append("")
        lines += [f"- **{k}**: {v[1]}" for k, v in PEERS.items()] + [""]
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> int:  # pragma: no cover - subprocess entry
    argv = sys.argv[1:] if argv is None else argv
    if argv and argv[0] == "--memory-child":
        return _child_main(argv[1:])
    if argv and argv[0] == "--memory-zygote":
        return _zygote_main(argv[1:])
    print("usage: relpos bench (this module's own entry point is for memory subprocesses)", file=sys.stderr)
    return 2


if __name__ == "__main__":  # pragma: no cover
    sys.exit(main())
