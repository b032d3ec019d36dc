"""polyspec_theory.core.kept: the bounded store and the content key of arrays."""

from __future__ import annotations

import numpy as np
from hypothesis import given, settings
from hypothesis import strategies as st

from polyspec_theory.core.kept import Kept, content_key

ARRAYS = st.one_of(
    st.none(),
    st.lists(st.integers(-3, 3), max_size=6).map(lambda v: np.array(v, dtype=np.int64)),
    st.lists(st.integers(-3, 3), max_size=6).map(lambda v: np.array(v, dtype=np.int32)),
    st.lists(st.integers(-3, 3), min_size=4, max_size=4).map(
        lambda v: np.array(v, dtype=np.int64).reshape(2, 2)),
    st.lists(st.floats(-2, 2, allow_nan=False), max_size=4).map(np.array))


def _plain(xs):
    """The arrays as plain values: None, or (dtype, shape, nested list)."""
    return tuple(None if x is None else (x.dtype.str, x.shape, x.tolist()) for x in xs)


@settings(max_examples=300, deadline=None)
@given(st.lists(ARRAYS, min_size=1, max_size=3), st.lists(ARRAYS, min_size=1, max_size=3))
def test_equal_keys_exactly_for_equal_arrays(xs, ys):
    """Keys are equal iff the arrays have the same dtypes, shapes and values, in order
    (None counted as such); a copy has the key of its original."""
    assert (content_key(*xs) == content_key(*ys)) == (_plain(xs) == _plain(ys))
    assert content_key(*[None if x is None else x.copy() for x in xs]) == content_key(*xs)


def test_shape_dtype_and_none_are_part_of_the_key():
    x = np.arange(4, dtype=np.int64)
    keys = {content_key(x), content_key(x.reshape(2, 2)), content_key(x.astype(np.uint64)),
            content_key(x, None), content_key(None, x)}
    assert len(keys) == 5 and content_key(x.reshape(2, 2).copy()) == content_key(x.reshape(2, 2))


def test_object_arrays_have_no_key():
    assert content_key(np.arange(3), np.array([1, "a"], dtype=object)) is None
    assert content_key(np.arange(3)) is not None and content_key() is not None


def test_kept_holds_at_most_its_size():
    kept = Kept(3)
    kept.keep({1: "a", 2: "b"})
    kept.keep({3: "c"})
    assert kept == {1: "a", 2: "b", 3: "c"}
    kept.keep({4: "d"})  # would pass 3: emptied first
    assert kept == {4: "d"}
    kept.keep({5: "e", 6: "f"})
    assert kept == {4: "d", 5: "e", 6: "f"} and len(kept) <= kept.size
