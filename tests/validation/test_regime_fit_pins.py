"""Hidden-regime fits on committed CPU captures, pinned: the values below were computed by the
E-step before the pairwise product tree (the Hillis-Steele doubling scan of commit c24ca55,
``fit_regimes`` unchanged otherwise) on the rounds of two captures pooled per pair as
``pool_from_captures`` pools them (:func:`validation.analysis.pool.pair_rounds`). The fit
today gives them to 1e-10 relative (and 1e-14 absolute for probabilities at the fit's floor
of 1e-9, whose relative digits BFGS does not settle)."""

import numpy as np
import pytest

from polyspec_theory.core.regimes import fit_regimes
from validation.analysis.pool import pair_rounds
from validation.paths import traces_dir
from validation.traces.records import read_trace

CAPTURES = ["target-draft-t-ngram3_th4-4_T0.jsonl", "target-draft-t_th5_T0.jsonl"]

PINNED = {
    ("draft-t", "ngram3", 2): {
        "loglik": -1418.19724827222,
        "init": [0.6397533111606589, 0.3602466888393412],
        "trans": [[0.9947173753791124, 0.005282624620887602],
                  [0.006720153473787214, 0.9932798465262128]],
        "accept": [0.6612777932994174, 0.9851973322529399],
    },
    ("draft-t", "ngram3", 3): {
        "loglik": -1333.2297410594733,
        "init": [0.041647741378745516, 0.8436846478145982, 0.11466761080665637],
        "trans": [[0.9999999397905298, 6.989131757453197e-09, 5.322033853124514e-08],
                  [9.999999992279186e-10, 0.996139903612818, 0.0038600953871819194],
                  [6.269212726318239e-08, 1.9459091164427007e-08, 0.9999999178487816]],
        "accept": [0.2882124285953442, 0.7374381230081802, 0.999999999],
    },
    ("target", "draft-t", 2): {
        "loglik": -1569.2281724556353,
        "init": [0.6862559832840509, 0.3137440167159491],
        "trans": [[0.9887837926074651, 0.011216207392534882],
                  [0.0007495388406510305, 0.999250461159349]],
        "accept": [0.7780765620809694, 0.976542965689566],
    },
    ("target", "draft-t", 3): {
        "loglik": -1515.378240692774,
        "init": [0.24634026702316056, 0.7136667361406177, 0.03999299683622175],
        "trans": [[0.994211915396262, 9.999999990000115e-10, 0.005788083603738],
                  [1.6167754982340789e-09, 0.9923881248578018, 0.0076118735254226974],
                  [9.999999990000026e-10, 0.0009782366425959243, 0.999021762357404]],
        "accept": [0.6990113658437219, 0.8979692883248709, 0.999999999],
    },
}


@pytest.fixture(scope="module")
def rounds():
    caps = [read_trace(traces_dir("cpu") / name) for name in CAPTURES]
    return pair_rounds(caps)


def test_pairs_and_sizes(rounds):
    assert sorted(rounds) == [("draft-t", "ngram3"), ("target", "draft-t")]
    a, g, grp = rounds[("target", "draft-t")]
    assert a.size == g.size == grp.size == 1348 and np.unique(grp).size == 48
    assert np.all((0 <= a) & (a <= g))
    a, _, grp = rounds[("draft-t", "ngram3")]
    assert a.size == 1162 and np.unique(grp).size == 24


@pytest.mark.parametrize("key", sorted(PINNED))
def test_fit_equals_the_pinned_one(rounds, key):
    verifier, drafter, k = key
    a, g, grp = rounds[(verifier, drafter)]
    fit = fit_regimes(a, g, grp, k=k)
    pin = PINNED[key]
    assert fit.converged
    assert fit.loglik == pytest.approx(pin["loglik"], rel=1e-10, abs=0)
    for name in ("init", "trans", "accept"):
        np.testing.assert_allclose(getattr(fit.model, name), pin[name], rtol=1e-10,
                                   atol=1e-14, err_msg=name)
