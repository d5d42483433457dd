"""``relpos extend --hf-model``: a Hugging Face checkpoint evaluated, extended, fine-tuned and evaluated again.

Three rows, each measured by ``relpos compare --hf-model``'s evaluation (:func:`relpos.pretrained.evaluate.run_hf_job`
on the test split of the corpus, the checkpoint as its config says):

* ``shipped`` -- the checkpoint as it is;
* ``zero-shot`` -- with the RoPE scaling at the fixed ``factor`` written into its config (or the scheme swapped in
  by :func:`relpos.hf.use_scheme`), before any training. (``compare --hf-model`` scales each length by
  ``L / L0``; here the factor is the one the model is fine-tuned with, at every length, as the fine-tuned
  model is used);
* ``fine-tuned`` -- after ``steps`` steps of full fine-tuning on windows of ``factor x L0`` tokens of the corpus's
  training split (AdamW, linear warm-up then a constant rate, gradient clipping at 1, the loss computed in
  chunks so the full ``(N, vocab)`` logits never exist at once).

Resumable: each row is stored in ``OUT/extend-hf.json`` the moment it is measured, and training writes a
checkpoint (weights, optimizer, step) every ``ckpt_every`` steps into ``OUT/train-state-<step>/``, named by
``OUT/train-state.json`` only once complete; a rerun continues from it with the same batches. The fine-tuned
model is saved to ``OUT/model/``: for a RoPE scaling a transformers folder whose config carries the scaling
(``from_pretrained`` gives the logits relpos evaluated); for a swapped scheme the same folder plus
``relpos-scheme.json``, restored by :func:`load_extended` (its README says so).
"""

from __future__ import annotations

import json
import math
import os
import shutil
import sys
import time
from pathlib import Path
from typing import Callable

import torch
import torch.nn.functional as F

from relpos.extend.hf_spec import HFExtendSpec
from relpos.outdir import write_text_atomic
from relpos.training.denormals import flushed

__all__ = ["run_hf_extend", "load_extended", "hf_dry_run_lines", "MANIFEST", "ROWS"]

MANIFEST = "extend-hf.json"
ROWS = ("shipped", "zero-shot", "fine-tuned")
_FILES = (MANIFEST, "train-state.json", "report.md")
#: Rough CPU throughput assumed by the ``--dry-run`` time estimate (FLOP/s per thread, float32 matrix products).
ASSUMED_FLOPS = 2e10


def _owns(folder: Path) -> bool:
    return (folder / MANIFEST).is_file()


def _apply(hf, spec: HFExtendSpec, L0: int) -> None:
    """The scaling (in the config, so ``save_pretrained`` keeps it) or the swapped scheme, in place."""
    from relpos.pretrained.scalings import hf_rope_parameters

    if spec.scheme is not None:
        from relpos.hf import use_scheme

        use_scheme(hf, spec.scheme, **spec.scheme_options)
        return
    cfg = hf.config
    cfg.rope_parameters = hf_rope_parameters(cfg, spec.scaling, spec.factor, L0)
    cfg.max_position_embeddings = int(L0)  # dynamic NTK reads its original context there
    old = hf.model.rotary_emb
    dev = next((b.device for b in old.buffers()), torch.device("cpu"))
    hf.model.rotary_emb = type(old)(config=cfg).to(dev)


def _wrap(hf, name: str, L0: int):
    """An :class:`~relpos.pretrained.evaluate.HFCausalLM` of ``hf`` as it is now (a swapped model has no rotary
    embedding to rebuild: its ``native`` is itself)."""
    from relpos.pretrained.evaluate import HFCausalLM

    if getattr(hf.config, "_attn_implementation", None) != "relpos":
        return HFCausalLM(hf, name=name, original=L0)

    class _Swapped(HFCausalLM):
        def set_scaling(self, scaling: str, factor: float = 1.0):
            if scaling != "native":
                raise ValueError(f"a model with a swapped scheme has no RoPE scaling {scaling!r}")
            self.scaling, self.factor = "native", float(factor)
            return self

    return _Swapped(hf, name=name, original=L0)


def _row(job: dict, L0: int) -> dict:
    """Window loss, far-position loss (last quarter) and bits per byte by length, from a job of ``run_hf_job``."""
    from relpos.tasks.lm import far_loss

    lm = next(r for r in job["runs"] if r["task"] == "lm")
    ms = lm["measurements"]
    out = {}
    for m in ms:
        if m["protocol"] == "window":
            n = m["eval_len"]
            out[str(n)] = {"loss": m["loss"], "bpb": m.get("bpb"), "far_loss": far_loss(ms, n),
                           "factor": n / L0}
    pk = next((r for r in job["runs"] if r["task"] == "passkey"), None)
    res = {"lengths": out, "eval_seconds": job["eval_seconds"]}
    if pk is not None:
        res["passkey"] = pk["measurements"]
    return res


class _Manifest:
    def __init__(self, out: Path, fingerprint: str, protocol: dict, force: bool, log) -> None:
        self.path = out / MANIFEST
        self.data = {"fingerprint": fingerprint, "protocol": protocol, "rows": {}, "train": {}}
        if self.path.is_file():
            from relpos.outdir import move_aside, read_regular_text

            old = json.loads(read_regular_text(self.path))
            if old.get("fingerprint") != fingerprint:
                if not force:
                    raise ValueError(f"--out {out} holds an extend run of other settings (fingerprint "
                                     f"{old.get('fingerprint')}, this one {fingerprint}); nothing was changed: use "
                                     f"another --out, or pass --force to move it aside")
                dest = move_aside(out, old.get("fingerprint"), [
                    p for p in out.iterdir() if p.name in (*_FILES, "model") or p.name.startswith("train-state-")])
                log(f"moved the earlier run to {dest}")
            else:
                self.data = old

    def save(self) -> None:
        from relpos.outdir import write_json_atomic

        write_json_atomic(self.path, self.data)


def _chunked_loss(hf, x: torch.Tensor, y: torch.Tensor, chunk: int) -> torch.Tensor:
    """Mean next-token cross-entropy, the output layer and loss run ``chunk`` positions at a time under
    activation checkpointing (the ``(N, vocab)`` logits never exist at once)."""
    from torch.utils.checkpoint import checkpoint

    h = hf.model(input_ids=x, use_cache=False).last_hidden_state  # (B, N, hidden)
    head = hf.get_output_embeddings()
    total = h.new_zeros((), dtype=torch.float32)

    def part(hs, ys):
        return F.cross_entropy(head(hs).float().reshape(-1, head.out_features), ys.reshape(-1), reduction="sum",
                               ignore_index=-100)

    for s in range(0, x.shape[1], chunk):
        total = total + checkpoint(part, h[:, s: s + chunk], y[:, s: s + chunk], use_reentrant=False)
    return total / max(1, int((y != -100).sum()))


def _save_state(out: Path, hf, opt, step: int, losses: list) -> None:
    from safetensors.torch import save_model

    from relpos.outdir import write_json_atomic

    d = out / f"train-state-{step}"
    if d.exists():
        shutil.rmtree(d)
    d.mkdir()
    save_model(hf, str(d / "model.safetensors"))
    torch.save(opt.state_dict(), d / "optimizer.pt")
    prev = _state(out)
    write_json_atomic(out / "train-state.json", {"dir": d.name, "step": step, "losses": losses})
    if prev is not None and prev["dir"] != d.name and (out / prev["dir"]).is_dir():
        shutil.rmtree(out / prev["dir"])  # our own earlier checkpoint, no longer named


def _state(out: Path) -> dict | None:
    """The last training checkpoint of this run (``train-state.json``), or None. Its folder must be one of ours,
    ``train-state-<step>`` directly in ``out``: a state naming anything else (``../x``) is refused, never loaded
    from nor removed."""
    from relpos.outdir import read_regular_text

    p = out / "train-state.json"
    if not p.exists() and not p.is_symlink():
        return None
    try:
        st = json.loads(read_regular_text(p))
    except ValueError:  # not JSON (or not a regular file): refused below, by name
        st = None
    name = st.get("dir") if isinstance(st, dict) else None
    ok = (isinstance(name, str) and name.startswith("train-state-") and name[len("train-state-"):].isdigit()
          and isinstance(st.get("step"), int) and st["step"] >= 0 and isinstance(st.get("losses"), list))
    if not ok:
        raise ValueError(f"{p}: not a training state of relpos extend (it must name a train-state-<step> folder of "
                         f"this run, its step and losses); remove it to fine-tune from the start")
    d = out / name
    return st if d.is_dir() and not d.is_symlink() else None


def _drop_state(out: Path) -> None:
    """Remove the training checkpoints once the fine-tuned model is saved (ours: named ``train-state-<step>``)."""
    st = out / "train-state.json"
    for d in out.glob("train-state-*"):
        if d.is_dir() and not d.is_symlink() and d.name[len("train-state-"):].isdigit():
            shutil.rmtree(d)
    if st.is_file():
        st.unlink()


def _train(hf, spec: HFExtendSpec, source, out: Path, progress: bool | None, log) -> dict:
    from safetensors.torch import load_model

    hf.train()
    params = [p for p in hf.parameters() if p.requires_grad]
    opt = torch.optim.AdamW(params, lr=spec.lr, betas=(0.9, 0.95), weight_decay=spec.weight_decay)
    start, losses = 0, []
    st = _state(out)
    if st is not None:
        load_model(hf, str(out / st["dir"] / "model.safetensors"))
        opt.load_state_dict(torch.load(out / st["dir"] / "optimizer.pt", weights_only=True))
        start, losses = int(st["step"]), list(st["losses"])
        log(f"resuming fine-tuning at step {start} of {spec.steps}")
    on = sys.stderr.isatty() if progress is None else progress
    bar = None
    if on and start < spec.steps:
        from tqdm.auto import tqdm

        bar = tqdm(total=spec.steps, initial=start, unit="step", desc="fine-tune", file=sys.stderr)
    dev = next(hf.parameters()).device
    chunk = max(1, (64 << 20) // (4 * int(hf.config.vocab_size) * spec.batch_size))
    t0 = time.perf_counter()
    try:
        with flushed():  # subnormal floats flushed to zero, as relpos's own trainer runs its steps
            for step in range(start, spec.steps):
                lr = spec.lr * min(1.0, (step + 1) / spec.warmup_steps) if spec.warmup_steps else spec.lr
                for g in opt.param_groups:
                    g["lr"] = lr
                x, y = source.batch(step, 0)
                loss = _chunked_loss(hf, x.to(dev), y.to(dev), chunk)
                lv = float(loss.detach())
                if not math.isfinite(lv):
                    raise ValueError(f"fine-tuning diverged at step {step + 1} (loss {lv}); try a lower --lr")
                opt.zero_grad(set_to_none=True)
                loss.backward()
                torch.nn.utils.clip_grad_norm_(params, 1.0)
                opt.step()
                losses.append(round(lv, 6))
                if bar is not None:
                    bar.update(1)
                    bar.set_postfix(loss=f"{lv:.4f}")
                if (step + 1) % spec.ckpt_steps == 0 or step + 1 == spec.steps:
                    _save_state(out, hf, opt, step + 1, losses)
    finally:
        if bar is not None:
            bar.close()
    hf.eval()
    return {"steps": spec.steps, "seconds": time.perf_counter() - t0, "losses": losses}


def _prepare(spec: HFExtendSpec):
    """``(config, L0, fingerprint, protocol, corpus)``; raises on bad input before anything is written."""
    from relpos.pretrained.evaluate import hf_fingerprint
    from relpos.pretrained.load import load_config, model_source, require_hf
    from relpos.pretrained.scalings import original_context
    from relpos.extend.store import fingerprint_of

    src = model_source(spec.model)
    require_hf(gguf=bool(src.gguf))
    cfg = load_config(src, dtype=spec.dtype)
    L0 = original_context(cfg, spec.context)
    fp, proto, corpus = hf_fingerprint(spec.eval_spec(), cfg)
    protocol = {"evaluation": proto, "extend": spec.protocol()}
    return cfg, L0, fingerprint_of(protocol), protocol, corpus


def hf_dry_run_lines(spec: HFExtendSpec) -> list[str]:
    """What a run would do: tokens, steps, a rough time, and where it writes (nothing is written)."""
    from relpos.pretrained.evaluate import plan
    from relpos.pretrained.load import estimate_params
    from relpos.outdir import check_output_dir

    check_output_dir(spec.out, owns=_owns, what="extend run", files=_FILES)
    cfg, L0, fp, _, _ = _prepare(spec)
    Lf = int(round(spec.factor * L0))
    P = estimate_params(cfg.to_dict())
    tokens = spec.steps * spec.batch_size * Lf
    layers, hidden = int(cfg.num_hidden_layers), int(cfg.hidden_size)
    train_flops = tokens * (6 * P + 6 * layers * hidden * Lf)
    p = plan(spec.eval_spec(), cfg)
    ev = sum(p["tokens"].values())
    eval_flops = 3 * ev * (2 * P + 2 * layers * hidden * max(p["lengths"]))
    secs = (train_flops + eval_flops) / (ASSUMED_FLOPS * max(1, torch.get_num_threads()))
    what = f"RoPE scaling {spec.scaling} at factor {spec.factor:g}" if spec.scaling else f"scheme {spec.scheme}"
    return [f"model {spec.model}: about {P / 1e6:.1f}M parameters, context L0 = {L0}; {what}",
            f"fine-tuning: {spec.steps} steps of {spec.batch_size} x {Lf} tokens = {tokens:,} tokens (training "
            f"split), lr {spec.lr:g}, warm-up {spec.warmup_steps}, checkpoint every {spec.ckpt_steps} steps",
            f"evaluation: rows {', '.join(ROWS)} at lengths {', '.join(map(str, p['lengths']))} (test split), "
            f"{ev:,} tokens a row" + (f"; left out above --max-eval-tokens: {p['left_out']}" if p["left_out"] else ""),
            f"estimate: about {secs / 3600:.2f} hours on {torch.get_num_threads()} threads (rough: "
            f"{ASSUMED_FLOPS / 1e9:.0f} GFLOP/s a thread assumed)",
            f"--out {spec.out}: a new or empty folder, or this command's own earlier run (fingerprint {fp}); "
            "another run's folder is refused unless --force moves it aside"]


def run_hf_extend(spec: HFExtendSpec, *, log: Callable[[str], None] | None = None,
                  progress: bool | None = None) -> dict:
    """Run (or resume) the three rows; returns the manifest dict (``rows``, ``train``, ...) with ``report``.

    Raises:
        relpos.outdir.OutputDirError, ValueError: bad ``--out``, model, corpus or settings (before any work).
    """
    from relpos.pretrained.evaluate import log_corpus, run_hf_job
    from relpos.pretrained.load import load_hf_causal_lm, model_source
    from relpos.outdir import prepare_output_dir

    if log is None:
        def log(s: str) -> None:
            print(s, file=sys.stderr, flush=True)

    out = prepare_output_dir(spec.out, owns=_owns, what="extend run", files=_FILES)
    cfg, L0, fp, protocol, corpus = _prepare(spec)
    log_corpus(corpus, log)
    man = _Manifest(out, fp, protocol, spec.force, log)
    man.save()
    rows = man.data["rows"]
    src = model_source(spec.model)
    hf = load_hf_causal_lm(src, cfg, dtype=spec.dtype).to(spec.device or "cpu").eval()
    name = src.name
    es = spec.eval_spec()

    def measure(label: str) -> None:
        if label in rows:
            log(f"{label}: already measured, skipped")
            return
        job = run_hf_job(es, "native", model=_wrap(hf, name, L0), progress=progress, corpus=corpus)
        rows[label] = _row(job, L0)
        man.save()
        log(f"{label}: measured in {job['eval_seconds']:.1f} s")

    measure("shipped")
    _apply(hf, spec, L0)
    measure("zero-shot")
    if "fine-tuned" not in rows or not (out / "model" / "config.json").is_file():
        from relpos.corpus.lm import CorpusLanguageModelling

        Lf = int(round(spec.factor * L0))
        ft = CorpusLanguageModelling(corpus, train_len=Lf, eval_lengths=[Lf], eval_tokens=1, n_val=1, blocks=1)
        if spec.steps:
            man.data["train"] = _train(hf, spec, ft.train_source(spec.batch_size, spec.seed), out, progress, log)
            man.save()
        rows.pop("fine-tuned", None)
        measure("fine-tuned")
        _save_model(hf, spec, out)
        _drop_state(out)
    man.data["report"] = report_text(man.data, L0)
    man.save()
    write_text_atomic(out / "report.md", man.data["report"])
    return man.data


def _save_model(hf, spec: HFExtendSpec, out: Path) -> None:
    """The fine-tuned model, loadable (see the module docstring)."""
    from relpos.pretrained.load import tokenizer_file

    dest = out / "model"
    if dest.exists():
        shutil.rmtree(dest)  # our own earlier, unfinished save
    tmp = out / "model.partial"
    if tmp.exists():
        shutil.rmtree(tmp)
    _drop_gguf_marker(hf)
    hf.save_pretrained(str(tmp))
    shutil.copyfile(tokenizer_file(spec.model, spec.tokenizer, spec.cache_dir), tmp / "tokenizer.json")
    if spec.scheme is not None:
        from safetensors.torch import save_model

        save_model(hf, str(tmp / "relpos-state.safetensors"))
        write_text_atomic(tmp / "relpos-scheme.json", json.dumps({"scheme": spec.scheme, "options": spec.scheme_options}))
        how = (f"The rotary embedding is replaced by the relpos scheme `{spec.scheme}`. transformers alone cannot "
               f"run it: load it with `relpos.extend.hf.load_extended(\"{dest.name}\")`, which builds the model, "
               f"puts the scheme in with `relpos.hf.use_scheme` and restores every weight "
               f"(`relpos-state.safetensors`).")
    else:
        how = (f"Its config carries the RoPE scaling `{spec.scaling}` at factor {spec.factor:g} "
               f"(`rope_parameters`): `transformers.AutoModelForCausalLM.from_pretrained` loads it as fine-tuned. "
               f"`max_position_embeddings` keeps the original context (transformers' dynamic NTK reads it there); "
               f"the model was fine-tuned at {spec.factor:g} times it.")
    write_text_atomic(tmp / "README.md", f"# Fine-tuned by relpos extend\n\nFrom `{spec.model}`, {spec.steps} steps "
                      f"at {spec.factor:g}x its context.\n\n{how}\n")
    os.replace(tmp, dest)


def _drop_gguf_marker(hf) -> None:
    """A model read from a GGUF file holds float weights (transformers dequantizes them on loading) but keeps a
    "gguf" quantizer mark that forbids ``save_pretrained``; the saved folder is a plain float checkpoint."""
    q = getattr(hf, "hf_quantizer", None)
    method = getattr(getattr(q, "quantization_config", None), "quant_method", None)
    if q is not None and str(getattr(method, "value", method)) == "gguf":
        hf.hf_quantizer = None
        if hasattr(hf.config, "quantization_config"):
            del hf.config.quantization_config


def load_extended(folder, *, dtype: str = "float32"):
    """Load a model saved by ``relpos extend --hf-model`` (a RoPE scaling or a swapped scheme); eval mode."""
    from transformers import AutoModelForCausalLM

    folder = Path(folder)
    meta = folder / "relpos-scheme.json"
    from relpos.pretrained.load import DTYPES

    hf = AutoModelForCausalLM.from_pretrained(str(folder), dtype=DTYPES[dtype], local_files_only=True)
    if meta.is_file():
        from safetensors.torch import load_model

        from relpos.hf import use_scheme

        m = json.loads(meta.read_text())
        use_scheme(hf, m["scheme"], **(m.get("options") or {}))
        load_model(hf, str(folder / "relpos-state.safetensors"))
    return hf.eval()


def report_text(data: dict, L0: int) -> str:
    """The three rows side by side: window loss and far-position loss (nats per token) at each length."""
    rows = data["rows"]
    lens = sorted({int(n) for r in rows.values() for n in r["lengths"]})
    head = "| row | " + " | ".join(f"loss {n} ({n / L0:g}x) | far {n}" for n in lens) + " |"
    lines = [head, "|" + "---|" * (1 + 2 * len(lens))]
    for lab in ROWS:
        r = rows.get(lab)
        if r is None:
            continue
        cells = []
        for n in lens:
            m = r["lengths"].get(str(n)) or {}
            cells += [f"{m['loss']:.4f}" if m.get("loss") is not None else "-",
                      f"{m['far_loss']:.4f}" if m.get("far_loss") is not None else "-"]
        lines.append(f"| {lab} | " + " | ".join(cells) + " |")
    ext = data["protocol"]["extend"]
    what = (f"RoPE scaling {ext['scaling']} at factor {ext['factor']:g}" if ext["scaling"] else
            f"scheme {ext['scheme']} swapped in")
    out = [f"# relpos extend: {what}, {ext['steps']} fine-tuning steps", "", *lines, ""]
    if {"shipped", "zero-shot", "fine-tuned"} <= set(rows) and str(L0) in rows["shipped"]["lengths"]:
        a, b, c = (rows[k]["lengths"][str(L0)]["loss"] for k in ROWS)
        cost = b - a
        if cost <= 1e-3:
            rec = "had nothing to recover"
        elif c < a:
            rec = ("more than recovered it: the fine-tuned model is below the shipped one, so fine-tuning on this "
                   "corpus also adapted the model to it")
        else:
            rec = f"recovered {(b - c) / cost:.0%} of it"
        out.append(f"At L0 = {L0} the change cost {cost:+.4f} nats a token before fine-tuning; fine-tuning {rec} "
                   f"(fine-tuned row minus shipped: {c - a:+.4f}). Fine-tuned at {ext['factor']:g}x L0; every number "
                   f"reads the test split.")
    return "\n".join(out) + "\n"
