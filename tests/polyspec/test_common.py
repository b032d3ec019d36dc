"""The command line's one parser of comma-separated integer lists
(:func:`polyspec_theory.errors.parse_ints`): both sides of each bound, repeats refused or
allowed, non-integers and empty items refused on one line naming the field, and the callers
(batch sizes, thresholds, capture's lists, forecast's tree) through it."""

from __future__ import annotations

import pytest
from hypothesis import given
from hypothesis import strategies as st

from polyspec.cli import main
from polyspec.commands.common import parse_batches
from polyspec_theory.core.costs import MAX_BATCH_SIZE
from polyspec_theory.errors import PolyspecInputError, parse_ints


def _refused(text, field="--x", **kw) -> str:
    with pytest.raises(PolyspecInputError) as e:
        parse_ints(text, field, **kw)
    assert e.value.field == field and "\n" not in str(e.value)
    return e.value.reason


@pytest.mark.parametrize("kw, inside, outside, words", [
    (dict(), ("1", "7,1"), ("0", "-1"), ">= 1"),
    (dict(low=0), ("0", "0,5"), ("-1",), ">= 0"),
    (dict(low=2, high=5), ("2", "5", "3,4"), ("1", "6", "2,6"), "in 2..5"),
    (dict(low=None, high=8), ("-7", "8"), ("9",), "<= 8"),
    (dict(low=-1, high=None), ("-1,0,3",), ("-2",), ">= -1"),
])
def test_both_sides_of_each_bound(kw, inside, outside, words):
    for text in inside:
        assert parse_ints(text, "--x", **kw) == [int(p) for p in text.split(",")]
    for text in outside:
        assert _refused(text, **kw) == (f"must be comma-separated integers {words} (e.g. "
                                        f"1,2,4), got {text!r}")


def test_no_bound_takes_any_integer_and_says_no_range():
    assert parse_ints("-5,0,12345678901234567890", "f", low=None) == [
        -5, 0, 12345678901234567890]
    assert _refused("x", low=None, example="0,1") == ("must be comma-separated integers "
                                                       "(e.g. 0,1), got 'x'")


def test_repeats_refused_or_allowed():
    assert _refused("4,2,4") == "lists a value twice: '4,2,4'"
    assert parse_ints("4,2,4", "--x", distinct=False) == [4, 2, 4]
    assert parse_ints("-1,0,0,1,1", "--tree", low=None, distinct=False) == [-1, 0, 0, 1, 1]
    # the range is checked before the repeats, on every item
    assert "must be" in _refused("4,4,0")


@pytest.mark.parametrize("text", ["1.5", "x", "+3", "1_0", "0x10", "1e3", "²", "٣", "--1",
                                  "1 2", "9" * 5000, "None", "[1]"])
def test_non_integers_are_refused(text):
    assert _refused(f"1,{text}", low=None, distinct=False).startswith(
        "must be comma-separated integers")


@pytest.mark.parametrize("text", ["", " ", "1,,2", "1,2,", ",1"])
def test_empty_items_are_refused(text):
    assert _refused(text, low=None, distinct=False).endswith(f"got {text!r}")


def test_spaces_around_an_item_are_ignored():
    assert parse_ints(" 1 , 2 ,4", "--x") == [1, 2, 4]
    assert parse_ints(8, "--x") == [8]  # argparse's int of a single value


@given(st.lists(st.integers(-50, 50), max_size=8), st.integers(-20, 20), st.integers(0, 40),
       st.booleans())
def test_a_list_is_read_back_or_refused_by_its_own_rule(xs, low, width, distinct):
    """Independent of the parser: the list is read back exactly when it is non-empty, every
    value lies in low..low + width, and (distinct) no value repeats."""
    text = ",".join(map(str, xs))
    high = low + width
    ok = (bool(xs) and all(low <= x <= high for x in xs)
          and (not distinct or len(set(xs)) == len(xs)))
    if ok:
        assert parse_ints(text, "--x", low=low, high=high, distinct=distinct) == xs
    else:
        _refused(text, low=low, high=high, distinct=distinct)


def test_batch_sizes_say_batch_sizes():
    assert parse_batches("1,2,4,8,16") == [1, 2, 4, 8, 16]
    assert parse_batches(str(MAX_BATCH_SIZE)) == [MAX_BATCH_SIZE]
    for text in ("0", str(MAX_BATCH_SIZE + 1), "2,x", ""):
        with pytest.raises(PolyspecInputError) as e:
            parse_batches(text, "--batches")
        assert str(e.value) == (f"--batches: must be comma-separated batch sizes in "
                                f"1..{MAX_BATCH_SIZE} (e.g. 1,2,4,8,16), got {text!r}")
    with pytest.raises(PolyspecInputError) as e:
        parse_batches("2,4,2")
    assert str(e.value) == "--batch: lists a batch size twice: '2,4,2'"


def test_thresholds_may_repeat_inside_their_range():
    from argparse import Namespace

    from polyspec.commands.common import thresholds_of
    from polyspec_theory.core.config import MAX_THRESHOLD

    assert thresholds_of(Namespace(thresholds="8,4,4")) == [8, 4, 4]
    assert thresholds_of(Namespace(thresholds="0"), low=0) == [0]
    assert thresholds_of(Namespace(thresholds=None)) is None
    for text, low in (("0", 1), ("-1", 0), (str(MAX_THRESHOLD + 1), 1), ("4,,2", 1)):
        with pytest.raises(PolyspecInputError) as e:
            thresholds_of(Namespace(thresholds=text), low=low)
        assert str(e.value) == (f"--thresholds: must be comma-separated integers in "
                                f"{low}..{MAX_THRESHOLD} (e.g. 4,2), got {text!r}")


def _one_line_error(capsys, argv) -> str:
    rc = main([str(a) for a in argv])
    err = capsys.readouterr().err
    assert rc == 2 and err.count("\n") == 1 and "Traceback" not in err, err
    return err


@pytest.mark.parametrize("option, value, field", [
    ("--thresholds", "2,", "thresholds"), ("--cost-contexts", "32,x", "cost_contexts"),
    ("--cores", "0,1.5", "cores")])
def test_capture_lists_go_through_the_one_parser(tmp_path, capsys, option, value, field):
    argv = ["capture", "--models", "target,ngram", "--out", tmp_path / "o", "--no-progress",
            option, value]
    if option != "--thresholds":
        argv += ["--thresholds", "2"]
    if option == "--cores":
        argv += ["--mode", "async"]
    err = _one_line_error(capsys, argv)
    assert f"error: {field}: must be comma-separated integers (e.g." in err, err
    assert not (tmp_path / "o").exists()


def test_forecast_tree_goes_through_the_one_parser(tmp_path, capsys):
    err = _one_line_error(capsys, ["forecast", "--traces", tmp_path, "--models",
                                   "target,ngram", "--thresholds", "2", "--tree=-1,0,x"])
    assert "error: --tree: must be comma-separated integers (e.g. -1,0,0,1,1), got " in err
