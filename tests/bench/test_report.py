"""The markdown report: targets and the peer tables."""

from __future__ import annotations

from relpos import bench


def _rec(scheme, impl, ms, **kw):
    r = {"scheme": scheme, "impl": impl, "N": 2048, "mode": "fwd+bwd", "status": "ok", "median_ms": ms,
         "baseline_ms": 10.0, "ratio": ms / 10, "peak_mib": 5.0, "baseline_peak_mib": 4.0, "chosen": None,
         "note": None, "runs": 3}
    r.update(kw)
    return r


def test_markdown_marks_targets():
    recs = [_rec("alibi", "dense", 30.0), _rec("alibi", "auto", 11.0, chosen="chunked"),
            _rec("cope", "auto", 40.0, chosen="chunked")]
    md = bench.markdown({"shape": "B=1", "baseline": "sdpa", "records": recs, "peers": []})
    assert "| alibi | x3.00 · 5 MiB | x1.10 · 5 MiB | chunked | <= 1.2 | yes |" in md
    assert "| cope |  | x4.00 · 5 MiB | chunked | <= 3.0 | no |" in md


def test_peer_summary_marks_each_familys_fastest_configuration():
    from relpos.bench.runner import Record, peer_summary

    recs = {}
    for impl, ms, mib in (("peer:xt-alibi-flash", 20.0, 50.0), ("peer:xt-alibi-eager", 40.0, 80.0),
                          ("layer:alibi", 10.0, 10.0)):
        r = Record("alibi", impl, 2048, "fwd+bwd", median_ms=ms, peak_mib=mib)
        recs[r.key] = r
    rows = {p["peer"]: p for p in peer_summary(recs)}
    assert rows["xt-alibi-flash"]["best"] and not rows["xt-alibi-eager"]["best"]
    assert rows["xt-alibi-flash"]["speedup"] == 2.0 and rows["xt-alibi-flash"]["memory_fraction"] == 0.2
    assert rows["xt-alibi-eager"]["speedup"] == 4.0
    md = "\n".join(bench.report.peer_table(list(rows.values())))
    assert "| x-transformers alibi | flash | alibi | causal | 2048 | fwd+bwd | 2.0x | 0.2 |" in md
    assert "flash **(best)**" in md


def test_record_json_rounds_and_keeps_every_field():
    from relpos.bench.runner import Record

    j = Record("t5", "dense", 64, "fwd", median_ms=1.23456789, ratio=1 / 3).to_json()
    assert j["median_ms"] == 1.235 and j["ratio"] == 0.333 and j["peak_mib"] is None
    assert set(j) >= {"scheme", "impl", "N", "mode", "status", "note", "chosen", "runs", "baseline_ms"}


def test_auto_against_the_fastest_per_mask():
    recs = [_rec("deberta", "dense", 33.0, causal=False), _rec("deberta", "chunked", 60.0, causal=False),
            _rec("deberta", "auto", 60.2, chosen="chunked", causal=False),
            _rec("deberta", "dense", 96.0), _rec("deberta", "chunked", 62.0), _rec("deberta", "auto", 63.0,
                                                                                   chosen="chunked")]
    rows = {r["causal"]: r for r in bench.report.auto_rows(recs)}
    assert rows[False]["fastest"] == "dense" and rows[False]["ratio"] == round(60.2 / 33, 3)
    assert not rows[False]["within"]
    assert rows[True]["fastest"] == "chunked" and rows[True]["within"]
    # the pick itself: chunked (60.0) against dense (33.0) is a wrong pick; causal picks the fastest
    assert rows[False]["pick_ratio"] == round(60 / 33, 3) and rows[False]["pick_within"] is False
    assert rows[True]["pick_ratio"] == 1.0 and rows[True]["pick_within"] is True
    md = bench.markdown({"shape": "B=1", "baseline": "sdpa", "records": recs, "peers": []})
    assert "## Causal" in md and "## Bidirectional" in md
    assert "| deberta | **1.82** (chunked) |" in md and "| deberta | 1.02 (chunked) |" in md
    assert "is within 1.05 of the fastest in 1 of 1 cells" in md and "fastest in 0 of 1 cells" in md  # per mask
