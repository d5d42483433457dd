"""Effective attention span: batched accumulation, median and maximum over heads."""

from __future__ import annotations

import torch

from relpos.tasks.span import effective_span, span_of_maps


class FixedMaps(torch.nn.Module):
    """``attention_maps(x)``: head h of layer l looks exactly ``1 + 3 * (h + 2 * l)`` back (or at the sink)."""

    def __init__(self, layers: int = 2, heads: int = 4):
        super().__init__()
        self.layers, self.heads = layers, heads
        self.calls = []

    def attention_maps(self, x):
        B, N = x.shape
        self.calls.append(B)
        out = []
        for layer in range(self.layers):
            p = torch.zeros(B, self.heads, N, N)
            for h in range(self.heads):
                back = 3 * (h + 2 * layer)
                for i in range(N):
                    p[:, h, i, max(0, i - back)] = 1.0
            out.append(p)
        return out


def test_span_reports_median_and_max_over_every_head_in_batches():
    m = FixedMaps()
    x = torch.zeros(32, 40, dtype=torch.long)
    s = effective_span(m, x, batch=5)
    assert m.calls == [5] * 6 + [2]  # 32 windows, never more than 5 at a time
    assert s["windows"] == 32 and s["eval_len"] == 40
    want = [[1 + 3 * (h + 2 * layer) for h in range(4)] for layer in range(2)]
    assert s["per_head"] == want
    assert s["max"] == 16 and s["median"] == 8.5  # heads 1, 4, 7, 7, 10, 10, 13, 16
    # one pass over all windows gives the same spans as the batched accumulation
    full = span_of_maps(FixedMaps().attention_maps(x))
    assert full == s["per_head"]
    assert effective_span(FixedMaps(), x, batch=64)["per_head"] == s["per_head"]
