"""Builders of small corpora, tokenizers and Hugging Face checkpoints for the data tests (nothing downloaded)."""

from __future__ import annotations

import json
import random
from pathlib import Path

WORDS = ("alpha beta gamma delta river stone cloud lamp window garden orange violet quiet rapid north south "
         "seven eleven table paper engine signal").split()


def _line(rng: random.Random) -> str:
    return " ".join(rng.choice(WORDS) for _ in range(rng.randint(4, 12))) + ".\n"


def prose(n_bytes: int, seed: int = 0, pool: int | None = None) -> str:
    """Deterministic English-like lines of about ``n_bytes`` ASCII bytes.

    With ``pool``, every line is one of ``pool`` random lines drawn first: a line
    recurs every ``pool`` lines or so, so a model that looks back far enough can
    finish a line once it has seen its start (text with long-range structure).
    """
    rng = random.Random(seed)
    lines = [_line(rng) for _ in range(pool)] if pool else None
    out, size = [], 0
    while size < n_bytes:
        line = rng.choice(lines) if lines else _line(rng)
        out.append(line)
        size += len(line)
    return "".join(out)


def write_folder(root: Path, n_files: int = 60, size: int = 2000, pool: int | None = None) -> Path:
    root.mkdir(parents=True, exist_ok=True)
    for i in range(n_files):
        sub = root / ("sub" if i % 3 == 0 else "")
        sub.mkdir(exist_ok=True)
        (sub / f"doc{i:03d}.txt").write_text(prose(size, seed=i, pool=pool))
    return root


def write_jsonl(path: Path, n: int = 200, size: int = 500, field: str = "text") -> Path:
    with open(path, "w") as f:
        for i in range(n):
            f.write(json.dumps({"id": i, field: prose(size, seed=1000 + i)}) + "\n")
    return path


def train_tokenizer(path: Path, vocab_size: int = 512) -> Path:
    """A byte-level BPE tokenizer trained on :func:`prose`, saved as ``tokenizer.json``."""
    from tokenizers import Tokenizer, decoders, models, pre_tokenizers, trainers

    tok = Tokenizer(models.BPE())
    tok.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
    tok.decoder = decoders.ByteLevel()
    trainer = trainers.BpeTrainer(vocab_size=vocab_size, initial_alphabet=pre_tokenizers.ByteLevel.alphabet(),
                                  special_tokens=["<s>", "</s>"], show_progress=False)
    tok.train_from_iterator([prose(20000, seed=s) for s in range(5)] + ["0123456789 " * 50], trainer=trainer)
    tok.save(str(path))
    return path


def tiny_llama(folder: Path, *, max_pos: int = 32, vocab_size: int = 512, seed: int = 0, tokenizer: bool = True,
               rope_parameters: dict | None = None) -> Path:
    """A randomly initialised 2-layer ``LlamaForCausalLM`` (and its tokenizer) saved to ``folder``."""
    import torch
    from transformers import LlamaConfig, LlamaForCausalLM

    torch.manual_seed(seed)
    cfg = LlamaConfig(vocab_size=vocab_size, hidden_size=32, intermediate_size=64, num_hidden_layers=2,
                      num_attention_heads=4, num_key_value_heads=2, head_dim=8, max_position_embeddings=max_pos,
                      rope_parameters=rope_parameters or {"rope_type": "default", "rope_theta": 10000.0},
                      bos_token_id=0, eos_token_id=1, attn_implementation="eager")
    model = LlamaForCausalLM(cfg)
    folder.mkdir(parents=True, exist_ok=True)
    model.save_pretrained(str(folder))
    if tokenizer:
        train_tokenizer(folder / "tokenizer.json", vocab_size=vocab_size)
    return folder
