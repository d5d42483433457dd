"""The typed sub-configurations (:mod:`relpos.compare.settings`) repeat the defaults of
:class:`~relpos.compare.config.ExperimentConfig`'s flat fields; the two must never drift apart (the presets
are built with ``from_parts``, so a part's default silently becomes a preset's value)."""

import dataclasses

import pytest

from relpos.compare.config import ExperimentConfig
from relpos.compare.fitting import FitConfig
from relpos.compare.settings import PARTS, part_fields


def _default(cls, name):
    f = {f.name: f for f in dataclasses.fields(cls)}[name]
    if f.default is not dataclasses.MISSING:
        return f.default
    assert f.default_factory is not dataclasses.MISSING, f"{cls.__name__}.{name} has no default"
    return f.default_factory()


@pytest.mark.parametrize("part", sorted(PARTS))
def test_every_view_default_is_the_experiment_config_default(part):
    cls = PARTS[part]
    assert part_fields(cls), part
    for name in part_fields(cls):
        mine, theirs = _default(cls, name), _default(ExperimentConfig, name)
        assert mine == theirs and type(mine) is type(theirs), \
            f"{cls.__name__}.{name} defaults to {mine!r}, ExperimentConfig.{name} to {theirs!r}"
    # the same, as the user meets it: a default part changes nothing
    cfg = ExperimentConfig()
    assert getattr(cfg, part) == cls()
    assert ExperimentConfig.from_parts(**{part: cls()}).fingerprint() == cfg.fingerprint()


def test_tuning_is_the_configs_own_fit():
    assert ExperimentConfig().tuning == FitConfig()
    assert ExperimentConfig.from_parts(tuning=FitConfig()).fingerprint() == ExperimentConfig().fingerprint()
