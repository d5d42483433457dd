"""One runnable step per case: the baseline, a relpos implementation, a peer layer or the relpos layer."""

from __future__ import annotations

import time
from collections.abc import Callable

import torch
import torch.nn.functional as F
from torch import Tensor

from relpos.bench.spec import HALF, BenchSpec, Case, base_scheme

__all__ = ["build_step", "make_encoding", "timed", "auto_choice"]


def _inputs(spec: BenchSpec, N: int, grad: bool, seed: int = 0) -> tuple[Tensor, Tensor, Tensor, Tensor]:
    """q, k, v and an output gradient, each ``(B, H, N, D)``."""
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


def make_encoding(scheme: str, spec: BenchSpec, N: int):
    """The scheme at the spec's shape, long enough for ``N`` positions (``"<name>@half"``: see
    :data:`relpos.bench.spec.HALF`)."""
    import relpos

    name, options = base_scheme(scheme), {}
    if name != scheme:
        from relpos.encodings import get_scheme

        hook = getattr(get_scheme(name)[0], "options_for_length", None)
        if hook is None:
            raise ValueError(f"scheme {scheme!r}: {name!r} takes no options from a training length, so it has "
                             f"no {HALF!r} form (schemes with options_for_length: fire, shaw, t5)")
        options = hook(max(N // 2, 1))
    return relpos.make_encoding(name, n_heads=spec.heads, head_dim=spec.head_dim, causal=spec.causal,
                                max_len=max(N, 512), **options).to(spec.device)


def auto_choice() -> str | None:
    """The implementation ``impl="auto"`` picked last."""
    import importlib

    return importlib.import_module("relpos.attention.auto").last_choice


def _none() -> None:
    return None


def _layer_step(case: Case, spec: BenchSpec, train: bool) -> tuple[Callable[[], None], Callable[[], str | None]]:
    from relpos.bench.layers import RelposLayer
    from relpos.bench.peers import PEERS, build_peer

    kind, name = case.impl.split(":", 1)
    if kind == "peer":
        if case.mode not in PEERS[name].modes:
            from relpos.attention import UnsupportedError

            raise UnsupportedError(f"peer {name!r} runs only {', '.join(PEERS[name].modes)} here")
        mod = build_peer(name, spec)
    else:
        mod = RelposLayer(spec.heads * spec.head_dim, spec.heads, spec.head_dim, make_encoding(name, spec, case.N),
                          "auto", spec.causal)
    mod = mod.to(device=spec.device, dtype=spec.torch_dtype())
    g = torch.Generator().manual_seed(1)
    x = torch.randn(spec.batch, case.N, spec.heads * spec.head_dim, generator=g).to(spec.device, spec.torch_dtype())
    x.requires_grad_(train)
    params = [p for p in mod.parameters() if p.requires_grad]

    def step() -> None:
        if train:
            _clear_grads([x, *params])
            mod(x).sum().backward()
        else:
            with torch.no_grad():
                mod(x)

    return step, (auto_choice if kind == "layer" else _none)


def build_step(case: Case, spec: BenchSpec) -> tuple[Callable[[], None], Callable[[], str | None]]:
    """``(step, info)``: ``step()`` runs the case once; ``info()`` says which
    implementation ``auto`` picked (None for other implementations).

    Raises:
        relpos.attention.UnsupportedError: the implementation cannot serve the case.
    """
    import relpos

    train = case.mode == "fwd+bwd"
    if case.impl.startswith(("peer:", "layer:")):
        return _layer_step(case, spec, train)
    q, k, v, go = _inputs(spec, case.N, train)
    if case.impl == "sdpa":
        def step_base() -> None:
            if train:
                _clear_grads([q, k, v])
                F.scaled_dot_product_attention(q, k, v, is_causal=spec.causal).backward(go)
            else:
                with torch.no_grad():
                    F.scaled_dot_product_attention(q, k, v, is_causal=spec.causal)

        return step_base, _none

    enc = make_encoding(case.scheme, spec, case.N)
    params = [p for p in enc.parameters() if p.requires_grad]

    def step() -> None:
        if train:
            _clear_grads([q, k, v, *params])
            relpos.attention(q, k, v, enc, causal=spec.causal, impl=case.impl).backward(go)
        else:
            with torch.no_grad():
                relpos.attention(q, k, v, enc, causal=spec.causal, impl=case.impl)

    return step, (auto_choice if case.impl == "auto" else _none)


def timed(step: Callable[[], None], spec: BenchSpec) -> tuple[float, float]:
    """Run ``step`` once: (wall ms, process CPU ms), synchronising CUDA around it."""
    if spec.device == "cuda":
        torch.cuda.synchronize()
    w0, c0 = time.perf_counter(), time.process_time()
    step()
    if spec.device == "cuda":
        torch.cuda.synchronize()
    return (time.perf_counter() - w0) * 1000, (time.process_time() - c0) * 1000
