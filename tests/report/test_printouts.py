"""One story in every printout: what `jaxident analyze` prints for each shipped PEtab
problem is what its report holds (the JSON report, `ji.analyze`'s numbers): each
parameter's value on its scale and its linear value, its marginal standard deviation
in decades and as a relative standard error, and its flags; at a fit, the fit's
estimates are the report's and the standard errors are printed once."""

import json
import math
import re

import numpy as np
import pytest

import jaxident as ji
from jaxident import cli


_ROW = re.compile(
    r"^    (?P<name>\S+)\s+(?P<scale>lin|log10|log)\s+(?P<theta>\S+)(?: \(= (?P<lin>\S+)\))?"
    r"\s+std (?P<std>\S+) \((?P<size>[^)]*)\)(?P<flag>.*)$"
)


def _rows(text: str) -> dict:
    return {m["name"]: m for m in map(_ROW.match, text.splitlines()) if m}


def _same(printed: str, value, digits: int = 4) -> bool:
    """A number printed with `digits` significant digits is `value` (JSON: a number,
    "inf" or None)."""
    if value in ("inf", None) or printed in ("inf", "nan"):
        return printed == ("inf" if value == "inf" else "nan") or value is None
    return math.isclose(float(printed), value, rel_tol=10.0 ** (1 - digits), abs_tol=1e-300)


@pytest.mark.parametrize("name", sorted(ji.data.PETAB_PROBLEMS))
def test_the_printout_is_the_report(name, tmp_path, capsys):
    short = name.split("_")[0].lower()
    js = tmp_path / "r.json"
    assert cli.main(["analyze", short, "--json", str(js), "--quiet"]) == 0
    text = capsys.readouterr().out
    rep = json.loads(js.read_text())
    rows = _rows(text)
    assert list(rows) == rep["parameters"]
    practical = set(rep["practically_non_identifiable"])
    for i, n in enumerate(rep["parameters"]):
        row = rows[n]
        assert row["scale"] == rep["scales"][i]
        assert _same(row["theta"], rep["theta"][i])
        if row["scale"] != "lin":
            assert _same(row["lin"], rep["linear"][n])
            np.testing.assert_allclose(rep["linear"][n],
                                       (10.0 if row["scale"] == "log10" else math.e)
                                       ** rep["theta"][i], rtol=1e-12)  # fmt: skip
        assert _same(row["std"], rep["std"][n], 3)
        decades = rep["std_decades"][n]
        if decades not in (None, "inf"):
            size, rse = re.match(r"(\S+) decades, RSE (\S+)%", row["size"]).groups()
            assert _same(size, decades, 3) and _same(rse, rep["rse_percent"][n], 3)
            np.testing.assert_allclose(rep["rse_percent"][n], 100 * math.log(10) * decades)
        flag = row["flag"].strip()
        assert (flag == "PRACTICALLY NON-IDENTIFIABLE") == (n in practical)
        assert (flag == "non-identifiable") == (
            n in rep["non_identifiable"] and n not in rep["no_effect"]
        )
        assert (flag == "weak") == (n in rep["weakly_identifiable"])
    # structural or weak (issue 84): the structural lists of the exact cases as before
    # (Elowitz's symmetry, null at every point of the box); the effects that a finer
    # solve shows real are weak, with finite standard deviations
    structural, weak = _STRUCTURE[short]
    assert set(rep["non_identifiable"]) == set(structural)
    assert set(rep["weakly_identifiable"]) == set(weak)
    assert all(rep["std"][n] != "inf" for n in weak)
    assert all(rep["evidence"][n] for n in structural)


_ELOWITZ = ("KM", "eff", "eff_GFP", "init_GFP", "init_GFP_mRNA", "init_X_mRNA",
            "init_X_protein", "init_Y_mRNA", "init_Z_mRNA", "init_Z_protein", "scale",
            "tau_mRNA_GFP", "tps_active", "tps_repr")  # fmt: skip
_FUJITA = ("init_AKT", "init_S6", "reaction_2_k1", "reaction_2_k2", "reaction_5_k1",
           "reaction_5_k2", "reaction_6_k1", "scaling_pAkt_tot", "scaling_pS6_tot")  # fmt: skip
_STRUCTURE = {  # (structurally non-identifiable, weakly identifiable) at the nominal values
    "boehm": ((), ()),
    "crauste": ((), ("rho_P",)),
    "elowitz": (_ELOWITZ, ("init_Y_protein",)),
    "fujita": ((), _FUJITA),
    "perelson": ((), ()),
    "schwen": ((), ("km_nExpID2", "km_nExpID3")),
    "zheng": ((), ()),
}


def test_the_printout_at_a_fit_is_the_report(tmp_path, capsys):
    """`--fit`: the estimates printed with the fit are the report's, and no second set of
    standard errors (the fit's Wald errors became inf everywhere once the Fisher matrix
    was singular, beside the report's finite ones)."""
    js = tmp_path / "r.json"
    argv = ["analyze", "perelson", "--fit", "2", "--profile", "none", "--json", str(js),
            "--quiet"]  # fmt: skip
    assert cli.main(argv) == 0
    text = capsys.readouterr().out
    rep = json.loads(js.read_text())
    assert "+- " not in text and "standard errors are the report's" in text
    fitted = dict(re.findall(r"^  (\S+)\s+= (\S+) \(", text, flags=re.M))
    assert list(fitted) == rep["parameters"]
    for i, n in enumerate(rep["parameters"]):
        assert _same(fitted[n], rep["theta"][i], 6)
        np.testing.assert_allclose(rep["fit"]["theta"][i], rep["theta"][i], rtol=1e-12)
    assert set(_rows(text)) == set(rep["parameters"])
