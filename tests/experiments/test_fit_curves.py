"""Issue 49, item 4: where a scheme cannot fit a task, the page shows every seed's validation curve to at least
twice the step at which the others fit, and says "does not fit this task at this size" in words."""

from __future__ import annotations

from relpos.report.fit_curves import DOES_NOT_FIT, FIT_CURVES_PLOT, NOT_RECORDED, fit_curves_figure, \
    fit_curves_markdown, gate_step, never_fit
from relpos.report.results_doc import results_dict
from relpos.report.results_page import PageInputs, page_markdown
from tests.experiments.results_support import algo_run, results


def _curve(end: int, top: float, every: int = 100) -> list[list[float]]:
    return [[s, round(min(top, 0.04 + top * s / end), 4)] for s in range(every, end + 1, every)]


def _res(unfit_end: int | None = 3000, passes=(1000, 1200, 1400)):
    """copy: nope, t5, alibi fit (first passing the gate at ``passes``); rope fits no seed; its curves run to
    ``unfit_end`` (None: no curve recorded, as in results made before curves were written)."""
    runs = []
    for scheme, acc in (("nope", 0.8), ("t5", 0.6), ("alibi", 0.3), ("rope", 0.1)):
        for seed in range(3):
            r = algo_run("copy", scheme, seed, acc, fitted=scheme != "rope")
            fit = r["train"]["fit"]
            fit.update(budget=4000, target=0.95)
            r["train"]["params"] = 100800
            if scheme != "rope":
                fit["first_pass_step"] = passes[seed]
            elif unfit_end is not None:
                fit["val_curve"] = _curve(unfit_end - 500 * (seed == 2 and unfit_end < 2400), 0.3 + 0.1 * seed)
            runs.append(r)
    return results(runs)


def test_the_section_says_does_not_fit_and_compares_the_curves_with_twice_the_gate_step():
    res = _res()
    assert never_fit(res) == {"copy": ["rope"]} and gate_step(res, "copy") == (1200, 9)
    md = "\n".join(fit_curves_markdown(res, "results/full-fit_curves.png"))
    line = next(x for x in md.splitlines() if x.startswith("- **copy, rope**"))
    assert f"(0 of 3 seeds fitted): {DOES_NOT_FIT} (100,800 parameters, a budget of 4,000 steps)" in line
    assert "first passed the gate at step 1,200 (median of 9 runs)" in line
    assert "Every seed's curve runs to at least twice that step (2,400)" in line
    assert "seed 0 0.300 (to step 3,000); seed 1 0.400 (to step 3,000); seed 2 0.500" in line
    assert "![validation curves of the schemes that do not fit](results/full-fit_curves.png)" in md
    assert "reached the target" not in line
    # a seed whose curve passed the target at some check, yet the gate (of the last check) did not fit it
    late = _res()
    late["runs"][-1]["train"]["fit"]["val_curve"][5][1] = 0.97
    line = next(x for x in fit_curves_markdown(late) if x.startswith("- **copy, rope**"))
    assert "Seed(s) 2 reached the target (0.95) at some check without being fitted" in line
    # curves that stop short of twice the gate step: the page says so, naming the seeds
    line = next(x for x in fit_curves_markdown(_res(2000)) if x.startswith("- **copy, rope**"))
    assert "No seed's curve reaches twice that step (2,400): seeds 0, 1, 2 stop at step 2,000, 2,000, 1,500" in line
    # every scheme fits: no section
    fitted = _res()
    for r in fitted["runs"]:
        r["train"]["fit"]["fitted"] = True
    assert fit_curves_markdown(fitted) == [] and never_fit(fitted) == {}


def test_old_results_without_curves_say_so_and_get_no_figure(tmp_path):
    res = _res(None)
    md = fit_curves_markdown(res, "x.png")
    line = next(x for x in md if x.startswith("- **copy, rope**"))
    assert DOES_NOT_FIT in line and f"Validation {NOT_RECORDED}." in line
    assert not any("![" in x for x in md)
    assert not fit_curves_figure(res, tmp_path / FIT_CURVES_PLOT) and not (tmp_path / FIT_CURVES_PLOT).exists()


def test_the_figure_is_a_png_with_one_panel_per_task(tmp_path):
    res = _res()
    more = _res()["runs"]
    for r in more:
        r["task"], r["job"] = "reverse", r["job"].replace("copy", "reverse")
    res["runs"] += more
    assert never_fit(res) == {"copy": ["rope"], "reverse": ["rope"]}
    assert fit_curves_figure(res, tmp_path / FIT_CURVES_PLOT)
    assert (tmp_path / FIT_CURVES_PLOT).read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"


def test_the_page_shows_the_section_after_the_per_task_tables():
    page = page_markdown(PageInputs(full=_res(), fit_curves_plot="full-fit_curves.png"), "results/protocol3/")
    at = page.index("### Schemes that do not fit")
    assert page.index("## Tables by task") < at < page.index("## Scale check")
    assert "(results/protocol3/full-fit_curves.png)" in page and DOES_NOT_FIT in page[at:]
    assert "### Schemes that do not fit" not in page_markdown(PageInputs(full=results(
        [algo_run("copy", s, k, 0.5) for s in ("nope", "t5") for k in range(3)])))


def test_results_json_carries_the_kept_tries_validation_curve_not_its_history():
    hist = [{"step": 100, "train_loss": 2.0, "val_exact": 0.01, "val_exact_at_L": 0.03125,
             "val_token_accuracy_at_L": 0.3},
            {"step": 200, "train_loss": 1.5, "val_exact": 0.5, "val_exact_at_L": 0.9609375,
             "val_token_accuracy_at_L": 0.99}]
    run = {"scheme": "rope", "variant": None, "task": "copy", "seed": 0, "train_len": 8, "job": "copy/rope/seed0",
           "measurements": [], "info": {}}
    job = {"job": "copy/rope/seed0", "info": {"train": {"fit": {"target": 0.95, "fitted": True, "history": hist}}}}
    fit = results_dict({}, "f", [run], [job])["runs"][0]["train"]["fit"]
    assert "history" not in fit and fit["val_curve"] == [[100, 0.0312], [200, 0.9609]]
    assert fit["first_pass_step"] == 200
    job["info"]["train"]["fit"]["history"] = [{"step": 50, "train_loss": 2.0, "val_loss": 1.23456}]
    assert results_dict({}, "f", [run], [job])["runs"][0]["train"]["fit"]["val_curve"] == [[50, 1.2346]]
    view = {**run, "variant": "yarn"}  # a RoPE scaling of the same model: the curve is not repeated on it
    assert "val_curve" not in results_dict({}, "f", [view], [job])["runs"][0]["train"]["fit"]


def _longer(fit_seeds=(), end=12000):
    """The same ``rope`` rows trained again on twice the budget: ``fit_seeds`` fit there."""
    runs = []
    for seed in range(3):
        r = algo_run("copy", "rope", seed, 0.9 if seed in fit_seeds else 0.2, fitted=seed in fit_seeds)
        fit = r["train"]["fit"]
        fit.update(budget=8000, target=0.95, lr=0.003, val_curve=_curve(end, 0.5 + 0.2 * (seed in fit_seeds)))
        if seed in fit_seeds:
            fit["first_pass_step"] = 5000 + 100 * seed
        runs.append(r)
    return results(runs)


def test_longer_runs_say_whether_the_scheme_fits_on_twice_the_budget():
    res = _res(2000)  # the ranked curves stop short of twice the gate step (2,400)
    two = next(x for x in fit_curves_markdown(res, None, {"copy": _longer((0, 2))}) if x.startswith("- **copy, rope"))
    assert "**On twice the budget** (8,000 steps, the same recipe at learning rate 0.003; not ranked): it fits 2 " \
           "of 3 seeds there (seed 0 at step 5,000; seed 2 at step 5,200): the ranked budget was too short" in two
    assert "stop short" not in two.split("On twice")[1]
    # the line's head says so too: late, not "does not fit"
    assert two.startswith("- **copy, rope** (0 of 3 seeds fitted): does not fit within the ranked budget; it fits on "
                          "twice the budget (") and "does not fit this task at this size" not in two
    none = next(x for x in fit_curves_markdown(res, None, {"copy": _longer(())}) if x.startswith("- **copy, rope"))
    assert "it fits 0 of 3 seeds there: it does not fit this task at this size on twice the budget either" in none
    assert none.startswith("- **copy, rope** (0 of 3 seeds fitted): does not fit this task at this size (")
    assert "Every unfitted seed's curve there runs to at least twice the fitted schemes' gate step (2,400)" in none
    short = next(x for x in fit_curves_markdown(res, None, {"copy": _longer((), end=2000)})
                 if x.startswith("- **copy, rope"))
    assert "Seed(s) 0, 1, 2 stop short of twice the fitted schemes' gate step (2,400)" in short
    # longer runs of another task or scheme change nothing on this line
    line = lambda md: [x for x in md if x.startswith("- **copy, rope")]  # noqa: E731
    assert line(fit_curves_markdown(res, None, {"reverse": _longer((0, 1))})) == line(fit_curves_markdown(res))


def test_the_figure_draws_longer_runs_even_without_ranked_curves(tmp_path):
    assert not fit_curves_figure(_res(None), tmp_path / "a.png")
    assert fit_curves_figure(_res(None), tmp_path / "b.png", {"copy": _longer((1,))})
    assert (tmp_path / "b.png").read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"


def test_the_page_ships_the_longer_runs_and_reads_them_back(tmp_path):
    import json

    from relpos.report.results_inputs import inputs_from_folders
    from relpos.report.results_page import write_page

    full, longer = tmp_path / "full", tmp_path / "longer"
    full.mkdir()
    (full / "results.json").write_text(json.dumps(_res(2000)))
    (longer / "copy").mkdir(parents=True)
    (longer / "copy" / "results.json").write_text(json.dumps(_longer((0,))))
    inp, ship = inputs_from_folders(full, longer=longer)
    assert set(inp.longer) == {"copy"} and "longer-copy-results.json" in ship
    assert isinstance(ship["full-fit_curves.png"], bytes) and inp.fit_curves_plot == "full-fit_curves.png"
    page = write_page(inp, ship, tmp_path / "results.md", tmp_path / "json").read_text()
    assert "**On twice the budget** (8,000 steps" in page and "it fits 1 of 3 seeds there" in page
    assert (tmp_path / "json" / "full-fit_curves.png").read_bytes()[:4] == b"\x89PNG"
    assert "| copy on twice the budget, not ranked | 3 |" in page  # its store did not ship: no time typed in
    assert "benchmarks/protocol3_longer.py runs/protocol3/full" in page
    # a subfolder named after one task holding another's runs is refused by name
    (longer / "reverse").mkdir()
    (longer / "reverse" / "results.json").write_text(json.dumps(_longer((0,))))
    try:
        inputs_from_folders(full, longer=longer)
    except ValueError as e:
        assert "--longer" in str(e) and "reverse/ holds runs of copy" in str(e)
    else:
        raise AssertionError("a mislabelled longer folder was read")


def test_the_longer_runs_time_comes_from_their_shipped_store(tmp_path):
    """Item 8: like every time on the page, the longer runs' CPU-hours come from their store shipped beside it
    (``<json dir>/longer-<task>/results.sqlite``), never typed in."""
    import json

    from relpos.compare.store import Store
    from relpos.report.results_inputs import inputs_from_json_dir, store_dir

    jd = tmp_path / "json"
    jd.mkdir()
    (jd / "full-results.json").write_text(json.dumps(_res(2000)))
    longer = _longer((0,))
    (jd / "longer-copy-results.json").write_text(json.dumps(longer))
    assert store_dir(jd, "longer/copy") == jd / "longer-copy"
    (jd / "longer-copy").mkdir()
    with Store(jd / "longer-copy" / "results.sqlite") as st:
        st.bind(longer["fingerprint"], {})
        for seed in range(3):
            st.write_job(longer["fingerprint"], {"job": f"copy/rope/seed{seed}", "scheme": "rope", "task": "copy",
                                                 "seed": seed, "train": {"seconds": 10.0}, "eval_seconds": 1.0,
                                                 "cpu_seconds": 1200.0, "runs": []})
    inp = inputs_from_json_dir(jd)
    assert set(inp.longer) == {"copy"} and inp.times["longer/copy"]["cpu_seconds"] == 3600.0
    page = page_markdown(inp)
    assert f"| copy on twice the budget, not ranked | 3 | 1.00 | - | `{longer['fingerprint']}` |" in page
    assert "**On twice the budget**" in page


def test_what_is_missing_names_the_schemes_whose_runs_on_twice_the_budget_are_not_in():
    """A row whose ranked curves stop before twice the gate step is an open question until its runs on twice the
    budget are in: the page's "What is missing" says so, and stops saying it once they are."""
    from relpos.report.fit_curves import awaiting_longer

    short = _res(2000)  # the curves stop at 2,000 < 2 x 1,200
    assert awaiting_longer(short, None) == {"copy": ["rope"]}
    assert awaiting_longer(short, {"copy": _longer(())}) == {}
    assert awaiting_longer(_res(3000), None) == {}  # long enough: the ranked runs already say what they can
    missing = page_markdown(PageInputs(full=short)).split("## What is missing")[1]
    assert "`full`: copy: the curves of rope stop before twice the fitted runs' gate step" in missing
    assert "whether they fit later is open" in missing
    done = page_markdown(PageInputs(full=short, longer={"copy": _longer(())})).split("## What is missing")[1]
    assert "fit later is open" not in done


def test_longer_runs_that_have_not_all_run_leave_an_open_verdict_open():
    """While the runs on twice the budget are still coming in, a line never says "does not fit" where the seeds
    still to run could change it, never speaks of unfitted curves where every seed that ran fitted, and "What is
    missing" counts the seeds still to come."""
    from relpos.report.fit_curves import longer_pending

    res = _res(2000)
    part = _longer((0,))
    part["runs"] = [r for r in part["runs"] if r["seed"] == 0]  # seed 0 ran and fitted; seeds 1 and 2 not yet
    one = next(x for x in fit_curves_markdown(res, None, {"copy": part}) if x.startswith("- **copy, rope"))
    assert ("it fits 1 of 1 seeds there (seed 0 at step 5,000); 2 of its 3 seeds have not run there yet, so whether "
            "it fits on twice the budget is open.") in one
    assert "does not fit this task at this size on twice" not in one and "Every unfitted seed" not in one
    # two seeds ran and neither fitted: the third cannot make two, so the verdict is final
    two = _longer(())
    two["runs"] = [r for r in two["runs"] if r["seed"] < 2]
    final = next(x for x in fit_curves_markdown(res, None, {"copy": two}) if x.startswith("- **copy, rope"))
    assert ("it fits 0 of 2 seeds there (1 of 3 not run yet): it does not fit this task at this size on twice the "
            "budget either.") in final
    # two seeds ran and both fitted: the verdict is final, and the line still says a seed is to come
    fits = _longer((0, 1))
    fits["runs"] = [r for r in fits["runs"] if r["seed"] < 2]
    early = next(x for x in fit_curves_markdown(res, None, {"copy": fits}) if x.startswith("- **copy, rope"))
    assert ("it fits 2 of 2 seeds there (seed 0 at step 5,000; seed 1 at step 5,100; 1 of 3 not run yet): the ranked "
            "budget was too short for it") in early
    assert longer_pending(res, {"copy": part}) == {"copy": [("rope", 1, 3)]}
    assert longer_pending(res, {"copy": _longer(())}) == {}
    missing = page_markdown(PageInputs(full=res, longer={"copy": part})).split("## What is missing")[1]
    assert "`full`: copy on twice the budget: rope 1 of 3 seeds have run; the rest are not in yet." in missing
    done = page_markdown(PageInputs(full=res, longer={"copy": _longer(())})).split("## What is missing")[1]
    assert "on twice the budget:" not in done


def test_the_longer_runs_get_their_own_accuracy_tables_after_the_section_never_ranked():
    """A scheme that fits only on twice the budget still shows how far past L it holds: the page carries the
    longer runs' accuracy-by-length tables, labelled as such, after the schemes that do not fit."""
    from relpos.report.fit_curves import longer_tables_markdown

    longer = _longer((0, 2))
    md = "\n".join(longer_tables_markdown({"copy": longer}))
    assert "**copy on twice the budget (not ranked): exact-match accuracy by length" in md
    row = next(x for x in md.splitlines() if x.startswith("| rope |"))
    assert row.startswith("| rope | 2/3") and "0.90±0.00" in row  # the two fitted seeds' 0.9, not seed 1's 0.2
    assert longer_tables_markdown(None) == [] and longer_tables_markdown({"copy": results([])}) == []
    page = page_markdown(PageInputs(full=_res(2000), longer={"copy": longer}))
    at = page.index("### The schemes that do not fit, on twice the budget")
    assert page.index("### Schemes that do not fit") < at < page.index("## Scale check")
    assert "on twice the budget (not ranked)" not in page[:at]
    assert "on twice the budget (not ranked)" not in page_markdown(PageInputs(full=_res(2000)))


def test_the_verdict_says_which_schemes_fit_on_twice_the_budget():
    """The verdict, read first, says which of the schemes that do not fit the ranked budget fit on twice it and
    which still do not; without runs on twice the budget it says nothing of them."""
    def verdict(longer):
        page = page_markdown(PageInputs(full=_res(2000), longer=longer))
        return page.split("## Verdict")[1].split("\n## ")[0]

    line = "- **On twice the budget** (the schemes that do not fit, trained again with the same recipe; not ranked): "
    assert line + "fit there: copy: rope 2/3." in verdict({"copy": _longer((0, 2))})
    assert line + "still not: copy: rope." in verdict({"copy": _longer((1,))})
    assert "On twice the budget" not in verdict({})
    assert "On twice the budget" not in verdict({"reverse": _longer((0, 1))})  # no row of copy ran there
