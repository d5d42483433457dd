"""The context-extension recipes and how each is put on a trained model.

A recipe is what a practitioner does to a model trained at ``L`` to use it at ``factor x L``:

* ``direct`` -- plain RoPE, fine-tuned at the longer length as it is ("direct extrapolation" in Chen et al.
  2023, https://arxiv.org/abs/2306.15595);
* ``pi`` -- position interpolation (Chen et al. 2023): RoPE's ``"linear"`` scaling at ``factor``;
* ``ntk`` -- NTK-aware base scaling (bloc97, 2023) at ``factor``;
* ``yarn`` -- YaRN (Peng et al. 2023, https://arxiv.org/abs/2309.00071) at ``factor``, with its attention
  temperature ``0.1 ln(factor) + 1`` (:class:`relpos.encodings.rope.RoPE`);
* ``dynamic`` -- dynamic NTK at ``factor``: its base follows the length of each input, so a model fine-tuned at
  ``factor x L`` would see another base at every other length; it has no fine-tuned form and is measured
  zero-shot only (K = 0);
* ``alibi``, ``kerple-log``, ``nope`` -- references: the folder's models of those schemes, fine-tuned at the
  longer length as they are, measured at K = 0 and at the largest K.

The scaling of a rotary recipe is fixed at ``factor`` with ``original_max_len = L`` for training and for every
evaluation length (as the papers evaluate a model fine-tuned at one factor). Rotary modules are found by their
``scalings`` capability, never by name.
"""

from __future__ import annotations

import dataclasses

__all__ = ["Recipe", "RECIPES", "recipe", "apply_recipe", "DEFAULT_RECIPES"]


@dataclasses.dataclass(frozen=True)
class Recipe:
    """One recipe.

    Attributes:
        name: the recipe's name (``--recipes``).
        scheme: the compare scheme whose models it starts from.
        scaling: the RoPE scaling put on the rotary modules (None: none).
        finetuned: whether it is fine-tuned at all (dynamic NTK: no).
        reference: measured at K = 0 and the largest K only.
        what: one line for the report.
    """

    name: str
    scheme: str
    scaling: str | None
    finetuned: bool = True
    reference: bool = False
    what: str = ""

    def ks(self, grid: list[int]) -> list[int]:
        """The fine-tuning step counts this recipe is measured at, from the grid (sorted, 0 first)."""
        if not self.finetuned:
            return [0]
        if self.reference:
            return sorted({0, max(grid)})
        return sorted(set(grid))


RECIPES: dict[str, Recipe] = {r.name: r for r in (
    Recipe("direct", "rope", None, what="plain RoPE, fine-tuned at the longer length as it is"),
    Recipe("pi", "rope", "linear", what="position interpolation (positions / factor)"),
    Recipe("ntk", "rope", "ntk", what="NTK-aware base scaling"),
    Recipe("yarn", "rope", "yarn", what="YaRN, with its attention temperature 0.1 ln(factor) + 1"),
    Recipe("dynamic", "rope", "dynamic", finetuned=False,
           what="dynamic NTK (zero-shot only: its base follows the input length, so it has no fine-tuned form)"),
    Recipe("alibi", "alibi", None, reference=True, what="ALiBi (reference)"),
    Recipe("kerple-log", "kerple-log", None, reference=True, what="KERPLE, logarithmic (reference)"),
    Recipe("nope", "nope", None, reference=True, what="no position encoding (reference)"),
)}

DEFAULT_RECIPES: tuple[str, ...] = tuple(RECIPES)


def recipe(name: str) -> Recipe:
    """The recipe called ``name``.

    Raises:
        ValueError: an unknown name (the message lists the known ones).
    """
    if name not in RECIPES:
        raise ValueError(f"--recipes: unknown recipe {name!r}; known: {', '.join(RECIPES)}")
    return RECIPES[name]


def _rotary(mod, scaling: str) -> bool:
    offered = tuple(getattr(type(mod), "scalings", None) or ())
    return scaling in offered and callable(getattr(mod, "set_scaling", None))


def apply_recipe(model, r: Recipe, train_len: int, factor: float):
    """Put recipe ``r`` on ``model`` in place (a scaling on every rotary module); returns ``model``.

    Raises:
        ValueError: a scaled recipe on a model without rotary modules offering that scaling.
    """
    if r.scaling is None:
        return model
    n = 0
    for mod in model.modules():
        if _rotary(mod, r.scaling):
            mod.set_scaling(r.scaling, factor=float(factor), original_max_len=int(train_len))
            n += 1
    if n == 0:
        raise ValueError(f"recipe {r.name!r} needs a model whose rotary modules offer the {r.scaling!r} scaling")
    return model
