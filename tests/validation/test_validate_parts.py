"""``polyspec validate``'s report put together from its analyses' parts
(validation.analysis.traces): one part alone prints its own object (notes and report
included); several put the others under their keys in the main part's object."""

from __future__ import annotations

from validation.analysis.traces import Part, combined_json, combined_text


def _parts():
    main = Part(None, {"configs": [1], "notes": ["n"]}, {"configs": [1], "notes": ["n"]},
                "main text", ("n",), order=0)
    batch = Part("batch", {"b": 1, "report": "r"}, {"b": 1, "report": "r"}, "batch alone",
                 ("bn",), order=1, joined="\nbatch joined")
    pipe = Part("async", [{"a": 2}], {"async": [{"a": 2}], "notes": ["an"]}, "async text",
                ("an",), order=2, joined="\nasync joined")
    return main, batch, pipe


def test_one_part_alone_prints_its_own_object_and_notes():
    _, batch, pipe = _parts()
    assert combined_json([pipe]) == {"async": [{"a": 2}], "notes": ["an"]}
    assert combined_json([batch]) == {"b": 1, "report": "r"}
    assert combined_text([pipe]) == ("async text", ["an"])


def test_several_parts_sit_under_their_keys_in_the_main_object():
    main, batch, pipe = _parts()
    assert combined_json([main, batch, pipe]) == {"configs": [1], "notes": ["n"],
                                                  "batch": {"b": 1, "report": "r"},
                                                  "async": [{"a": 2}]}
    assert combined_text([main, batch, pipe]) == (
        "main text\n\nbatch joined\n\nasync joined", ["n"])
