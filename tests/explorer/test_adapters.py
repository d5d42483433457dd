"""Per-scheme explorer metadata comes from capabilities, so a scheme registered from
outside the package is shown by the bias view with zero edits to relpos (issue 11)."""

from __future__ import annotations

import math

import pytest
import torch

from relpos import distance
from relpos.encodings import SCHEMES, SchemeSpec, get_scheme
from relpos.encodings.t5 import T5Bias
from relpos.explorer import Explorer
from relpos.explorer.adapters import Hints, Scalar, bias_entries, hints_for, set_head_scalar, view_kind


class BucketCopy(T5Bias):
    """T5's bucketed bias under a new name (a scheme written outside relpos)."""

    name = "bucket-copy"


@pytest.fixture
def registered(monkeypatch):
    monkeypatch.setitem(SCHEMES, "bucket-copy", SchemeSpec(__name__, "BucketCopy", summary="a copy of T5's buckets"))
    yield "bucket-copy"


def test_kinds_come_from_capabilities():
    kinds = {e.key: e.kind for e in bias_entries()}
    assert kinds["t5"] == "bucketed" and kinds["alibi"] == "bias" and kinds["shaw"] == "table"
    assert {kinds[k] for k in ("deberta", "cope", "fox")} == {"content"}
    assert "rope" not in kinds and "sinusoidal" not in kinds  # no bias or score term to draw
    assert "shaw-kv" not in kinds  # only a hidden option differs from shaw: the same picture
    assert view_kind(get_scheme("t5")[0]) == "bucketed"


def test_a_scheme_registered_outside_relpos_is_in_the_bias_view(registered):
    ex = Explorer()
    info = ex.get("info", {})
    entry = next(b for b in info["bias_schemes"] if b["key"] == registered)
    assert entry["kind"] == "bucketed" and entry["summary"] == "a copy of T5's buckets"
    assert {o["name"] for o in entry["options"]} >= {"num_buckets", "max_distance"}
    out = ex.get("bias", {"scheme": registered, "n": "10", "show": "bucket"})
    want = distance.t5_bucket(torch.arange(10)[None, :] - torch.arange(10)[:, None], bidirectional=True)
    assert out["matrix"] == want.tolist() and out["buckets"]
    from relpos import make_encoding

    torch.manual_seed(0)
    enc = make_encoding(registered, n_heads=4, head_dim=64, causal=False, max_len=6)
    b = ex.get("bias", {"scheme": registered, "n": "6", "head": "1"})
    with torch.no_grad():
        want = enc.bias(torch.arange(6)[None], torch.arange(6)[None])[0, 1].double()
    torch.testing.assert_close(torch.tensor(b["matrix"], dtype=torch.float64), want, rtol=1e-6, atol=1e-7)


def test_a_scheme_may_declare_its_own_hints(registered, monkeypatch):
    monkeypatch.setattr(BucketCopy, "explorer_hints", {"hidden": ["init_std"]}, raising=False)
    assert hints_for(registered) == Hints(hidden=("init_std",))
    entry = next(b for b in Explorer().get("info", {})["bias_schemes"] if b["key"] == registered)
    assert "init_std" not in {o["name"] for o in entry["options"]}


def test_set_head_scalar_solves_through_a_parametrisation():
    from relpos import make_encoding

    enc = make_encoding("kerple-power", n_heads=3)
    set_head_scalar(enc, Scalar("r2", "r2", 1e-4, 1.999), 1, 1.25)  # r2 = 2 sigmoid(raw): found by bisection
    set_head_scalar(enc, Scalar("r1", "r1", 1e-4, 100.0), 2, 7.0)  # r1 = softplus(raw)
    assert enc.r2[1].item() == pytest.approx(1.25, rel=1e-5) and enc.r1[2].item() == pytest.approx(7.0, rel=1e-5)
    alibi = make_encoding("alibi", n_heads=4)
    set_head_scalar(alibi, Scalar("slope", "slopes", 1e-6, 100.0), 3, 0.75)  # the buffer itself
    assert alibi.slopes[3].item() == 0.75 and not math.isclose(alibi.slopes[2].item(), 0.75)


def test_no_scheme_names_in_explorer_code():
    """The issue's grep: no comparison with a scheme name in the explorer's Python or JavaScript."""
    import re
    from pathlib import Path

    root = Path(__file__).resolve().parents[2] / "src" / "relpos" / "explorer"
    names = "t5|shaw|fire|rope|alibi|kerple|cope|fox|deberta|transformer-xl|sinusoidal|learned|dpb|sandwich"
    pat = re.compile(rf"""(==|!==|===|!=)\s*["']({names})["']|["']({names})["']\s*(==|===)|startswith\(["']({names})""")
    hits = [f"{p.name}:{n}" for p in root.rglob("*") if p.suffix in (".py", ".js")
            for n, line in enumerate(p.read_text(encoding="utf-8").splitlines(), 1) if pat.search(line)]
    assert not hits, hits


def test_trained_values_are_the_default_when_shipped_and_initial_stays_available(monkeypatch):
    """A trained-values file (explorer/trained.py format) makes the bias view show them by default."""
    from relpos.explorer import trained as trained_mod

    table = [[0.5 * (b - 16) / 16 for _ in range(2)] for b in range(32)]  # (num_buckets, n_heads)
    torch.manual_seed(0)
    ref = T5Bias(n_heads=2)
    key = next(iter(ref.state_dict()))
    shipped = {"made_by": "a test", "path": "x",
               "schemes": {"t5": {"n_heads": 2, "head_dim": 64, "options": {}, "state": {key: table}}}}
    monkeypatch.setattr(trained_mod, "trained_values", lambda: shipped)
    ex = Explorer()
    entry = next(b for b in ex.get("info", {})["bias_schemes"] if b["key"] == "t5")
    assert entry["trained"] is True
    assert entry["trained_causal"] is True  # an LM's values: shown causally
    out = ex.get("bias", {"scheme": "t5", "n": "8", "head": "1", "causal": "false"})
    assert out["values_from"] == "trained" and out["made_by"] == "a test" and out["n_heads"] == 2
    assert out["causal"] is True  # trained in a causal LM: causal buckets, whatever the switch says
    # offsets d = j - i land in (causal) buckets; the trained table gives B = table[bucket][head]
    ids = distance.t5_bucket(torch.arange(8)[None, :] - torch.arange(8)[:, None], bidirectional=False)
    want = [[table[b][1] for b in row] for row in ids.tolist()]
    torch.testing.assert_close(torch.tensor(out["matrix"], dtype=torch.float64), torch.tensor(want, dtype=torch.float64))
    initial = ex.get("bias", {"scheme": "t5", "n": "8", "head": "1", "values": "initial", "causal": "false"})
    assert initial["values_from"] == "initial" and initial["matrix"] != out["matrix"]
    assert initial["causal"] is False  # initial values follow the switch
    with pytest.raises(Exception, match="no trained values"):
        ex.get("bias", {"scheme": "alibi", "values": "trained"})


def test_bundled_results_are_offered_after_the_users_own(monkeypatch, tmp_path):
    import json as _json

    from relpos.explorer import api as api_mod
    from tests.explorer.conftest import make_results

    data = make_results()
    monkeypatch.setattr(api_mod, "bundled_results", lambda: ("documented (bundled)", data))
    ex = Explorer()
    assert ex.get("info", {})["results"] == [{"index": 0, "label": "documented (bundled)", "bundled": True,
                                              "preset": None}]
    assert ex.get("results", {})["series"]
    (tmp_path / "results.json").write_text(_json.dumps(data))
    mine = Explorer(results=[tmp_path])
    assert [r["label"] for r in mine.get("info", {})["results"]] == [tmp_path.name, "documented (bundled)"]


@pytest.mark.shipped_data
def test_the_shipped_trained_values_load_into_their_schemes():
    """relpos/data/trained_positions.json (exported from the documented sweep) fits the schemes it names,
    and the bias view shows it by default."""
    from relpos.encodings import make_encoding
    from relpos.explorer import trained as trained_mod

    trained_mod.trained_values.cache_clear()
    shipped = trained_mod.trained_values()
    assert shipped["path"] and {"t5"} <= set(shipped["schemes"])
    # only fitted values are taught from (issue 33): an unfitted entry of the file is not offered
    assert all(e.get("fitted", True) is not False for e in shipped["schemes"].values())
    for name, entry in shipped["schemes"].items():
        enc = make_encoding(name, n_heads=entry["n_heads"], head_dim=entry["head_dim"], **entry["options"])
        trained_mod.load_into(enc, entry, name)  # raises if a shape does not fit
        assert all(torch.isfinite(v).all() for v in enc.state_dict().values() if v.is_floating_point())
    out = Explorer().get("bias", {"scheme": "t5", "n": "8", "head": "0"})
    assert out["values_from"] == "trained" and out["n_heads"] == shipped["schemes"]["t5"]["n_heads"]


@pytest.mark.shipped_data
def test_the_documented_results_ship_and_are_offered():
    from relpos.explorer import api as api_mod

    label, res = api_mod.bundled_results()
    assert "bundled" in label and len(res["runs"]) > 100
    assert {r["task"] for r in res["runs"]} >= {"lm", "copy", "reverse"}
    out = Explorer().get("results", {})
    assert out["series"]
