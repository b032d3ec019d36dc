"""validation.capture.setup.alternate: the one run order of every capture (the cascade first
on even decodes, the autoregressive baseline first on odd ones), results in a fixed order."""

from validation.capture.setup import alternate


def test_alternate_runs_the_cascade_first_on_even_decodes_only():
    for k, first in [(0, "cascade"), (1, "ar"), (2, "cascade"), (7, "ar")]:
        log = []

        def cascade(log=log):
            log.append("cascade")
            return "C"

        def ar(log=log):
            log.append("ar")
            return "A"

        assert alternate(k, cascade, ar) == ("C", "A")
        assert log[0] == first and sorted(log) == ["ar", "cascade"]
