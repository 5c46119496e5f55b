"""The noise band of the reward EMA, against a worked example."""

from __future__ import annotations

import math

import pytest

from swerl.report.trend import Z95, ema_band


def test_ema_band_propagates_binomial_variance_through_the_ema():
    # span 3: alpha = 1/2; pooled p = 1/2, n = 4: step variance 1/16.
    band = ema_band([0.0, 1.0], [4, 4], span=3)
    assert band.ema == [0.0, 0.5] and band.pooled == 0.5
    assert band.step_half == [pytest.approx(Z95 * 0.25)] * 2
    # v1 = 1/16; v2 = (1/4)(1/16) + (1/4)(1/16) = 1/32.
    assert band.ema_half == [pytest.approx(Z95 * 0.25), pytest.approx(Z95 * math.sqrt(1 / 32))]


def test_more_samples_narrow_the_band_and_bad_input_is_refused():
    wide, narrow = ema_band([0.2] * 5, [4] * 5, 5), ema_band([0.2] * 5, [64] * 5, 5)
    assert narrow.ema_half[-1] == pytest.approx(wide.ema_half[-1] / 4)
    with pytest.raises(ValueError, match="equal, non-empty"):
        ema_band([0.1], [], 5)


def test_ema_change_is_the_last_ema_minus_the_first_step_with_its_band():
    from swerl.report.trend import ema_change

    # span 3 (a = 1/2), values 0, 1, 1: ema = 0, 0.5, 0.75; weights of ema_3: 1/4, 1/4, 1/2.
    change = ema_change([0.0, 1.0, 1.0], [4, 4, 4], span=3)
    assert change.diff == 0.75 and change.first == 0.0 and change.last_ema == 0.75
    pooled_var = (2 / 3) * (1 / 3) / 4
    assert change.half == pytest.approx(Z95 * math.sqrt(((0.25 - 1) ** 2 + 0.25 ** 2 + 0.5 ** 2) * pooled_var))
    assert change.resolved()
    assert not ema_change([0.1, 0.2], [16, 16], span=5).resolved()
    assert ema_change([0.5], [16], span=5).diff == 0.0 and ema_change([0.5], [16], span=5).half == 0.0
