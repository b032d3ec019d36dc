"""The mutation check's list stays in step with the code: every mutant's snippet is found
exactly once in its file and its test selection exists (``make mutation`` runs them; this
only checks the list, in milliseconds). When a refactor moves a snippet, update
``mutation/mutants.toml``."""

from __future__ import annotations

import re
from pathlib import Path

from mutation.run import load_mutants

ROOT = Path(__file__).resolve().parents[1]


def test_mutant_list_is_current():
    mutants = load_mutants()
    assert len(mutants) >= 40
    assert len({m.id for m in mutants}) == len(mutants)
    for m in mutants:
        text = (ROOT / m.file).read_text(encoding="utf-8")
        assert text.count(m.original) == 1, (m.id, m.file, "snippet must occur exactly once")
        assert m.description.strip() and "\n" not in m.description
        for sel in m.tests:
            path, _, node = sel.partition("::")
            assert (ROOT / path).is_file(), (m.id, sel)
            if node:
                name = node.split("::")[-1].split("[")[0]
                assert re.search(rf"^def {re.escape(name)}\(", (ROOT / path).read_text(),
                                 re.MULTILINE), (m.id, sel)
