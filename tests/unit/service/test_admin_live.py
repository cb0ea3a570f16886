"""The admin live view's arithmetic (its SQL runs in tests/integration/)."""

from __future__ import annotations

import numpy as np
import pytest

from service.admin.live import SloTally, percentile


@pytest.mark.parametrize("q", [0.0, 0.5, 0.9, 0.99, 1.0])
def test_percentile_interpolates_like_percentile_cont(q):
    values = [0.3, 0.1, 2.5, 0.7, 0.7, 9.0]
    assert percentile(values, q) == pytest.approx(float(np.percentile(values, q * 100)))
    assert percentile([], q) is None


def test_tally_reports_each_kind_and_the_combined_figure_under_the_old_names():
    tally = SloTally()
    tally.add({"ttft": True, "tpot": False, "both": False}, 0.2, 0.3, True)
    tally.add({"ttft": True, "tpot": True, "both": True}, 0.1, 0.01, True)
    tally.add({"ttft": False, "tpot": False, "both": False}, None, None, False)
    view = tally.view()
    assert view["requests"] == 3
    assert (view["met"], view["attainment"]) == (1, 1 / 3)  # "both", as the page reads it
    assert view["ttft_attainment"] == 2 / 3 and view["tpot_attainment"] == 1 / 3
    assert view["by_kind"]["tpot"] == {"met": 1, "attainment": 1 / 3}
    assert tally.ttft_s == [0.2, 0.1]  # latency quantiles: successful requests only
