"""inflight._multipliers keeps at most MULTIPLIERS_KEPT price vectors (a sweep over many clusters must not grow it
without end), and a value recomputed after the cache is emptied is the same."""

import numpy as np

from optsearch import inflight


def test_the_multiplier_cache_is_bounded_and_recomputes_the_same(monkeypatch):
    monkeypatch.setattr(inflight, "_MULTIPLIERS", {})
    monkeypatch.setattr(inflight, "MULTIPLIERS_KEPT", 3)
    first = inflight._multipliers(np.array([1.0, 2.5]), 4).copy()
    assert first.tolist() == [0.0, 1.5 / 4, 0.5, 0.75, 1.5]  # (2.5 - 1) / d, d = 1..4, and 0
    for k in range(10):
        inflight._multipliers(np.array([1.0, 3.0 + k]), 2)
        assert len(inflight._MULTIPLIERS) <= 3
    assert np.array_equal(inflight._multipliers(np.array([1.0, 2.5]), 4), first)
