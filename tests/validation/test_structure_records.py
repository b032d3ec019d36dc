"""The sibling data of a tree capture's rounds (:class:`StructureRecords`), split by depth."""

from __future__ import annotations

import numpy as np

from validation.traces.dataset import StructureRecords


def test_sibling_data_by_depth_by_hand():
    """Row d holds (accepted rank, children) of every node visited at depth d + 1, in the
    order of the rounds; rounds without visits add nothing; the rows pool to sibling_data."""
    recs = [{"visits": [[3, 1], [2, 0], [4, 2]]}, {"visits": []}, {},
            {"visits": [[5, 4]]}, {"visits": [[2, 1], [3, 3]]}]
    st = StructureRecords.from_records(1, recs)
    rows = st.sibling_data_by_depth()
    want = [([1, 4, 1], [3, 5, 2]), ([0, 3], [2, 3]), ([2], [4])]
    assert len(rows) == len(want)
    for (r, c), (wr, wc) in zip(rows, want, strict=True):
        assert r.dtype == np.int64 and c.dtype == np.int64
        assert r.tolist() == wr and c.tolist() == wc
    rk, ch = st.sibling_data()
    assert sorted(zip(rk.tolist(), ch.tolist(), strict=True)) == sorted(
        (a, b) for r, c in rows for a, b in zip(r.tolist(), c.tolist(), strict=True))
    assert StructureRecords.from_records(1, [{}, {"visits": []}]).sibling_data_by_depth() == []
