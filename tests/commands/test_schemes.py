"""``relpos schemes``: the listing, its counts, and its JSON form."""

from __future__ import annotations

import json

import torch

from relpos.cli import main
from relpos.commands.schemes import rows
from relpos.encodings import make_encoding, scheme_names


def test_schemes_json(capsys):
    assert main(["schemes", "--json"]) == 0
    data = json.loads(capsys.readouterr().out)
    names = {r["name"] for r in data}
    assert set(scheme_names()) | {"randomized"} == names
    for r in data:
        assert {"name", "acts_on", "params"} <= set(r)


def test_schemes_default_counts(capsys):
    assert main(["schemes", "--json"]) == 0
    data = {r["name"]: r for r in json.loads(capsys.readouterr().out)}
    assert data["learned"]["params"] == 262_144
    assert data["shaw"]["params"] == 1_088
    assert data["t5"]["params"] == 32 * 8


def test_counts_on_the_meta_device_match_real_modules():
    meta = {r["name"]: r["params"] for r in rows(64, 4, 5, 100)}
    for name in scheme_names():
        opts = {"k": 5} if name.startswith("shaw") else {}
        enc = make_encoding(name, n_heads=4, head_dim=16, d_model=64, max_len=100, causal=True, **opts)
        assert meta[name] == sum(p.numel() for p in enc.parameters()), name
    assert torch.empty(0).device.type == "cpu"  # the meta default does not leak


def test_schemes_table(capsys):
    assert main(["schemes", "--bidirectional", "--d-model", "64", "--heads", "4"]) == 0
    out = capsys.readouterr().out
    assert "t5" in out and "bias" in out and "bidirectional" in out and "d_model=64" in out
