"""Shared test settings: one thread per worker, deterministic seeds, helpers."""

from __future__ import annotations

import os

import pytest
import torch
from hypothesis import HealthCheck, settings

torch.set_num_threads(1)
os.environ.setdefault("OMP_NUM_THREADS", "1")

settings.register_profile(
    "relpos", max_examples=40, deadline=None, suppress_health_check=[HealthCheck.too_slow]
)
settings.load_profile("relpos")


@pytest.fixture(autouse=True)
def _seed():
    torch.manual_seed(0)
    yield
