"""MQAR probe: does a small model learn multi-query associative recall, and is relpos the reason if not?

Trains one model on :class:`relpos.tasks.MQAR` with a plain AdamW loop and prints the
held-out validation loss and per-token accuracy every 250 steps, then the final accuracy by the
distance from each query back to its key (``--save`` keeps the model). Two models:

* ``--model relpos``: the compare model (:class:`relpos.model.TransformerLM`, any scheme);
* ``--model plain``: an independent pre-LayerNorm Transformer written here in a few
  lines of PyTorch (RoPE, learned absolute positions or none; MLPs optional), so that
  a plateau can be told apart from a relpos defect.

The numbers quoted in docs/results.md come from runs like::

    python benchmarks/mqar_probe.py --model relpos --scheme rope --layers 3 --init fan_in --pairs 4 --min-len 4 \
        --order value-key --queries random --lr 1e-3 --batch-size 256 --steps 6000 --seed 0 \
        --eval-lengths 4,6,8,12,16 --n-eval 256
    python benchmarks/mqar_probe.py --model plain --pos none --no-mlp --layers 3 --order value-key --queries random

(the first is the compare presets' MQAR model, recipe and data stream, without the cooldown). Each
takes 1-15 minutes on one CPU core. The probe's learning rate is constant after a 100-step warm-up, as
the presets' MQAR recipe before its cooldown.
"""

from __future__ import annotations

import argparse
import json
import time

import torch
import torch.nn as nn
import torch.nn.functional as F

from relpos.tasks import IGNORE
from relpos.tasks.mqar import MQAR, PAIR_ORDERS, QUERY_MODES


class _Block(nn.Module):
    def __init__(self, d: int, heads: int, mlp: bool) -> None:
        super().__init__()
        self.heads = heads
        self.ln1, self.qkv, self.out = nn.LayerNorm(d), nn.Linear(d, 3 * d), nn.Linear(d, d)
        self.mlp = nn.Sequential(nn.LayerNorm(d), nn.Linear(d, 4 * d), nn.GELU(), nn.Linear(4 * d, d)) if mlp else None

    def forward(self, x, cos, sin):
        B, N, C = x.shape
        q, k, v = self.qkv(self.ln1(x)).view(B, N, 3, self.heads, C // self.heads).permute(2, 0, 3, 1, 4)  # (B, H, N, D)
        if cos is not None:  # RoPE on interleaved pairs
            def rot(u):
                u1, u2 = u[..., ::2], u[..., 1::2]
                return torch.stack([u1 * cos - u2 * sin, u1 * sin + u2 * cos], -1).flatten(-2)
            q, k = rot(q), rot(k)
        y = F.scaled_dot_product_attention(q, k, v, is_causal=True).transpose(1, 2).reshape(B, N, C)
        x = x + self.out(y)
        return x + self.mlp(x) if self.mlp is not None else x


class PlainLM(nn.Module):
    """An independent 2-layer causal Transformer with tied embeddings (PyTorch default init)."""

    def __init__(self, vocab: int, d: int, heads: int, layers: int, pos: str, mlp: bool, max_len: int = 128) -> None:
        super().__init__()
        self.pos, self.hd = pos, d // heads
        self.emb, self.pemb = nn.Embedding(vocab, d), nn.Embedding(max_len, d)
        nn.init.normal_(self.emb.weight, std=0.02)
        nn.init.normal_(self.pemb.weight, std=0.02)
        self.blocks = nn.ModuleList(_Block(d, heads, mlp) for _ in range(layers))
        self.ln = nn.LayerNorm(d)

    def forward(self, idx):
        N = idx.shape[1]
        h, cos, sin = self.emb(idx), None, None
        if self.pos == "absolute":
            h = h + self.pemb(torch.arange(N))
        elif self.pos == "rope":
            ang = torch.arange(N)[:, None] * 10000 ** (-torch.arange(0, self.hd, 2) / self.hd)  # (N, D/2)
            cos, sin = ang.cos(), ang.sin()
        for b in self.blocks:
            h = b(h, cos, sin)
        return self.ln(h) @ self.emb.weight.T


def build(args, task: MQAR) -> nn.Module:
    if args.model == "plain":
        return PlainLM(task.vocab_size, args.d_model, args.heads, args.layers, args.pos, args.mlp)
    from relpos.model import ModelConfig, TransformerLM

    return TransformerLM(ModelConfig(vocab_size=task.vocab_size, d_model=args.d_model, n_layers=args.layers,
                                     n_heads=args.heads, max_len=256, scheme=args.scheme,
                                     d_ff=None if args.mlp else 0, init=args.init,
                                     scheme_options=args.scheme_options,
                                     share_encoding={"yes": True, "no": False}.get(args.share_encoding)))


def run(args) -> list[tuple[int, float, float, float]]:
    """Train and return ``(step, validation loss, per-token accuracy, exact match)`` every 250 steps.

    Exact match is the fraction of validation examples whose every answer is right (the compare gate's
    score); ``--json`` writes the history and the run's settings as it goes, so a killed run leaves its curve.
    """
    torch.set_num_threads(1)
    task = MQAR(train_len=args.pairs, eval_lengths=args.eval_lengths or [args.pairs], n_keys=args.n_keys,
                n_values=args.n_values, n_eval=args.n_eval, n_val=args.n_val,
                queries=args.queries, order=args.order, min_len=args.min_len)
    torch.manual_seed(args.seed)
    model = build(args, task)
    src = task.train_source(args.batch_size, args.seed)
    xv, yv = task.validation_batch()
    pos_params = list(model.pos.parameters()) if isinstance(getattr(model, "pos", None), nn.Module) else []
    pos = {id(p) for p in pos_params}  # the scheme's parameters: never decayed, as in relpos.training.loop
    if args.freeze_position:
        if args.model != "relpos":
            raise SystemExit("--freeze-position applies to --model relpos")
        for p in pos_params:
            p.requires_grad_(False)
    params = [p for p in model.parameters() if p.requires_grad]
    decays = [id(p) not in pos and (p.dim() >= 2 or args.decay == "all") for p in params]
    groups = [{"params": [p for p, d in zip(params, decays) if d], "weight_decay": args.weight_decay},
              {"params": [p for p, d in zip(params, decays) if not d], "weight_decay": 0.0}]
    opt = torch.optim.AdamW(groups, lr=args.lr, betas=(0.9, 0.95))
    history, t0 = [], time.time()
    for step in range(args.steps + 1):
        if step % 250 == 0:
            model.eval()
            with torch.no_grad():
                logits, mask = model(xv), yv != IGNORE
                loss = F.cross_entropy(logits[mask], yv[mask]).item()
                hit = (logits.argmax(-1) == yv) | ~mask
                acc = hit[mask].float().mean().item()
                exact = hit.all(-1).float().mean().item()
            history.append((step, loss, acc, exact))
            print(f"step {step:6d}  val loss {loss:.3f}  per-token acc {acc:.3f}  exact {exact:.3f}  "
                  f"{time.time() - t0:.0f}s", flush=True)
            if args.json:
                _write_json(args, history, time.time() - t0, done=False)
            model.train()
        if step == args.steps:
            break
        x, y = src.batch(step)
        for g in opt.param_groups:
            g["lr"] = args.lr * min(1.0, (step + 1) / 100)
        logits = model(x)
        loss = F.cross_entropy(logits.reshape(-1, logits.shape[-1]), y.reshape(-1), ignore_index=IGNORE)
        opt.zero_grad()
        loss.backward()
        torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)
        opt.step()
    breakdown(model, task, xv, yv)
    if args.json:
        _write_json(args, history, time.time() - t0, done=True)
    if args.save:
        import io

        from relpos.outdir import write_bytes_atomic

        buf = io.BytesIO()
        torch.save(model.state_dict(), buf)
        write_bytes_atomic(args.save, buf.getvalue())  # a regular file, never through a link
    return history


def _write_json(args, history, seconds: float, done: bool) -> None:
    """The run's settings and validation curve, replaced whole (relpos's checked atomic writer)."""
    from relpos.outdir import write_json_atomic

    write_json_atomic(args.json, {"args": {k: v for k, v in vars(args).items() if k not in ("json", "save")},
                                  "history": [dict(zip(("step", "loss", "acc", "exact"), h)) for h in history],
                                  "seconds": round(seconds, 1), "done": done})


def breakdown(model: nn.Module, task: MQAR, xv: torch.Tensor, yv: torch.Tensor) -> dict:
    """Print and return held-out per-answer accuracy by the distance from the query back to its key.

    A query whose key was already asked earlier in the answer section can be answered by copying
    that earlier answer ("repeat"); the others need the lookup in the prompt, and are split by the
    distance (query position - key position). A lookup that works only over short distances shows
    as accuracy falling with distance.
    """
    model.eval()
    with torch.no_grad():
        pred = model(xv).argmax(-1)
    sep = int((xv[0] == task.SEP).nonzero()[0])  # every validation example has L pairs
    rows: dict = {}
    for b, t in (yv != IGNORE).nonzero().tolist():
        q = int(xv[b, t])
        earlier = xv[b, sep + 1 : t].tolist()[::2]
        key = "repeat" if q in earlier else t - int((xv[b, :sep] == q).nonzero()[0])
        hit, n = rows.get(key, (0, 0))
        rows[key] = (hit + int(pred[b, t] == yv[b, t]), n + 1)
    for key in sorted(rows, key=lambda k: (isinstance(k, str), k)):
        hit, n = rows[key]
        label = "repeated query" if key == "repeat" else f"lookup, distance {key:2d}"
        print(f"{label:22s} accuracy {hit / n:.3f}  ({n} answers)")
    return rows


def parse(argv=None):
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--model", choices=["relpos", "plain"], default="relpos")
    ap.add_argument("--scheme", default="rope", help="relpos model: the position scheme")
    ap.add_argument("--pos", choices=["rope", "absolute", "none"], default="rope", help="plain model: positions")
    ap.add_argument("--no-mlp", dest="mlp", action="store_false", help="attention-only blocks (either model)")
    ap.add_argument("--scheme-options", type=json.loads, default={},
                    help='relpos model: the scheme\'s options as JSON, e.g. \'{"max_distance": 17}\'')
    ap.add_argument("--share-encoding", choices=["yes", "no", "scheme"], default="scheme",
                    help="relpos model: one position module for all layers, one per layer, or the scheme's default")
    ap.add_argument("--freeze-position", action="store_true",
                    help="relpos model: keep the position scheme's parameters at their initial values")
    ap.add_argument("--init", choices=["gpt2", "fan_in"], default="gpt2", help="relpos model: ModelConfig.init")
    ap.add_argument("--d-model", type=int, default=64)
    ap.add_argument("--heads", type=int, default=4)
    ap.add_argument("--layers", type=int, default=2)
    ap.add_argument("--pairs", type=int, default=8, help="key-value pairs at the training length L")
    ap.add_argument("--min-len", type=int, default=1, help="fewest pairs in a training example")
    ap.add_argument("--n-keys", type=int, default=64)
    ap.add_argument("--n-values", type=int, default=16)
    ap.add_argument("--queries", choices=QUERY_MODES, default=QUERY_MODES[0])
    ap.add_argument("--order", choices=PAIR_ORDERS, default=PAIR_ORDERS[0])
    ap.add_argument("--steps", type=int, default=3000)
    ap.add_argument("--batch-size", type=int, default=64)
    ap.add_argument("--lr", type=float, default=2e-3)
    ap.add_argument("--weight-decay", type=float, default=0.1)
    ap.add_argument("--decay", choices=["all", "matrices"], default="all",
                    help="parameters weight decay applies to (never the position scheme's, as in relpos.training.loop)")
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--eval-lengths", type=lambda s: [int(v) for v in s.split(",")], default=None,
                    help="task eval_lengths (they key the data stream; default: --pairs)")
    ap.add_argument("--n-eval", type=int, default=128, help="task n_eval (it keys the data stream too)")
    ap.add_argument("--n-val", type=int, default=256, help="validation examples (half of them at L)")
    ap.add_argument("--json", default=None, help="write the settings and the validation curve to this new file")
    ap.add_argument("--save", default=None, help="write the trained model's state dict to this path")
    return ap.parse_args(argv)


def main(argv=None) -> None:
    run(parse(argv))


if __name__ == "__main__":
    main()
