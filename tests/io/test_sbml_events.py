"""SBML events that fire at one time, against libroadrunner: priorities, values from the
trigger time, events that another event's jump makes true (cascades), and a cascade
without end (issue 51: each was silently wrong or ran on without a word)."""

import numpy as np
import pytest

import jaxident as ji


roadrunner = pytest.importorskip("roadrunner")
libsbml = pytest.importorskip("libsbml")


def _network(model_id, species, parameters):
    """An SBML Level 3 document with one compartment `cell` of size 1, the `species`
    (`{id: initial concentration}`) and constant `parameters` (`{id: value}`):
    `(document, model)`, for the reactions and events to be added."""
    doc = libsbml.SBMLDocument(3, 1)
    m = doc.createModel()
    m.setId(model_id)
    c = m.createCompartment()
    c.setId("cell"), c.setSize(1.0), c.setConstant(True)
    for sid, x0 in species.items():
        s = m.createSpecies()
        s.setId(sid), s.setCompartment("cell"), s.setInitialConcentration(x0)
        s.setHasOnlySubstanceUnits(False), s.setBoundaryCondition(False), s.setConstant(False)
    for pid, v in parameters.items():
        p = m.createParameter()
        p.setId(pid), p.setValue(v), p.setConstant(True)
    return doc, m


def _events_sbml(path, events):
    """`X' = -k X` (`X(0) = 1`, `k = 0.1`) and a state `Y = 0` that only events change,
    with `events`: `(id, trigger, [(variable, formula)], priority or None,
    initialValue, useValuesFromTriggerTime)` each, in this order in the file."""
    doc, m = _network("events", {"X": 1.0, "Y": 0.0}, {"k": 0.1})
    r = m.createReaction()
    r.setId("decay"), r.setReversible(False), r.setFast(False)
    ref = r.createReactant()
    ref.setSpecies("X"), ref.setStoichiometry(1.0), ref.setConstant(True)
    r.createKineticLaw().setMath(libsbml.parseL3Formula("cell * k * X"))
    for eid, trigger, assignments, priority, initial, at_trigger in events:
        ev = m.createEvent()
        ev.setId(eid), ev.setUseValuesFromTriggerTime(at_trigger)
        t = ev.createTrigger()
        t.setMath(libsbml.parseL3Formula(trigger))
        t.setInitialValue(initial), t.setPersistent(True)
        if priority is not None:
            ev.createPriority().setMath(libsbml.parseL3Formula(str(priority)))
        for var, formula in assignments:
            ea = ev.createEventAssignment()
            ea.setVariable(var), ea.setMath(libsbml.parseL3Formula(formula))
    libsbml.writeSBMLToFile(doc, str(path))
    return path


def _roadrunner(path, times, k=0.1):
    rr = roadrunner.RoadRunner(str(path))
    rr.integrator.relative_tolerance = 1e-12
    rr.integrator.absolute_tolerance = 1e-14
    rr["k"] = k
    grid = np.unique(np.concatenate([[0.0], times]))
    out = np.asarray(rr.simulate(times=list(grid), selections=["time", "X", "Y"]))
    return out[np.searchsorted(grid, times), 1:]


TIMES = np.array([0.5, 1.0, 1.5, 2.0, 3.0])
_CASES = {
    # two doses at t = 1: the higher priority runs first, so the other's value stays
    "constant": [
        ("a", "time >= 1", [("X", "5")], 1, True, True),
        ("b", "time >= 1", [("X", "7")], 10, True, True),
    ],
    # both evaluated in the state before either ran (values from the trigger time):
    # X = X + 1 wins; evaluated one after the other, b's doubling then a's
    "trigger time": [
        ("a", "time >= 1", [("X", "X + 1")], 1, True, True),
        ("b", "time >= 1", [("X", "2 * X")], 10, True, True),
    ],
    "execution time": [
        ("a", "time >= 1", [("X", "X + 1")], 1, True, False),
        ("b", "time >= 1", [("X", "2 * X")], 10, True, False),
    ],
    # a timed event makes two triggers true: both fire at once, by priority
    "triggered": [
        ("a", "Y > 0.5", [("X", "5")], 1, True, True),
        ("b", "Y > 0.5", [("X", "7")], 10, True, True),
        ("c", "time >= 1", [("Y", "1")], None, True, True),
    ],
}


@pytest.mark.parametrize(
    "case",
    [pytest.param(c, marks=pytest.mark.slow) if c == "execution time" else c for c in _CASES],
)
@pytest.mark.parametrize(
    "reverse",
    [False, pytest.param(True, marks=pytest.mark.slow)],  # (reversed: each a new compile)
    ids=["file order", "reversed"],
)
def test_events_at_one_time_run_as_sbml_says(case, reverse, tmp_path):
    """Events at one time against libroadrunner, whatever their order in the file:
    before, they ran in file order, each in the state the one before left, and a
    trigger made true by another event's jump never fired."""
    events = _CASES[case][::-1] if reverse else _CASES[case]
    path = _events_sbml(tmp_path / "m.xml", events)
    want = _roadrunner(path, TIMES)
    got = ji.simulate(ji.sbml_model(path, times=TIMES)).ys
    np.testing.assert_allclose(np.asarray(got), want, rtol=1e-6, atol=1e-9)
    assert not np.allclose(want[1:], np.exp(-0.1 * TIMES[1:, None]) * [1, 0])  # they fired


def test_a_trigger_made_true_by_a_triggered_event_fires_at_once_with_its_derivatives(
    tmp_path,
):
    """`a` sets `Y = 1` whenever `X < 0.5`, which makes `b` (`Y > 0.5`) dose
    `X = X + 2` at the same time: the states against libroadrunner, and their
    derivative in `k` (both event times move with it; `b`'s jump takes `a`'s time's
    tangent) against libroadrunner's central differences."""
    events = [
        ("a", "X < 0.5", [("Y", "1")], None, True, True),
        ("b", "Y > 0.5", [("X", "X + 2"), ("Y", "0")], None, True, True),
    ]
    path = _events_sbml(tmp_path / "m.xml", events)
    times = np.linspace(0.5, 30.0, 12)
    model = ji.sbml_model(path, times=times)
    np.testing.assert_allclose(np.asarray(ji.simulate(model).ys), _roadrunner(path, times),
                               rtol=1e-6, atol=1e-9)  # fmt: skip
    h = 1e-5
    fd = (_roadrunner(path, times, 0.1 + h) - _roadrunner(path, times, 0.1 - h)) / (2 * h)
    S = ji.sensitivity(model)
    k = model.parameters.names.index("k")
    np.testing.assert_allclose(np.asarray(S.matrix)[:, k], fd.ravel(), rtol=1e-5, atol=1e-5)
    assert np.abs(fd).max() > 40  # three doses: the derivative grows with each


def test_an_endless_event_cascade_is_refused(tmp_path):
    """`a` (`X > 0.5`) sets `Y = 1, X = 0`, which makes `b` (`Y > 0.5`) set `X = 1,
    Y = 0`, which makes `a` true again: libroadrunner refuses it; it used to be
    simulated as one firing of `a`."""
    events = [
        ("a", "X > 0.5", [("Y", "1"), ("X", "0")], None, False, True),
        ("b", "Y > 0.5", [("X", "1"), ("Y", "0")], None, False, True),
    ]
    path = _events_sbml(tmp_path / "m.xml", events)
    with pytest.raises(RuntimeError, match="cascaded events"):
        _roadrunner(path, TIMES)
    with pytest.raises(Exception, match="events trigger each other without end at one time"):
        ji.simulate(ji.sbml_model(path, times=TIMES))
    assert not bool(ji.simulate(ji.sbml_model(path, times=TIMES), throw=False).ok)


def test_a_priority_that_is_no_number_is_refused(tmp_path):
    events = [("a", "time >= 1", [("X", "5")], "X", True, True)]
    path = _events_sbml(tmp_path / "m.xml", events)
    with pytest.raises(ValueError, match="event 'a' has the priority X, which is not a number"):
        ji.sbml_model(path)


def test_an_event_at_time_inf_never_fires(tmp_path):
    """`time >= INF` never turns true: `X = exp(-k t)` and its derivative in `k`, where
    the event's infinite knot made the time warp NaN ("right-hand side returned NaN or
    inf", issue 51)."""
    path = _events_sbml(tmp_path / "m.xml", [("a", "time >= INF", [("X", "5")], None, True, True)])
    model = ji.sbml_model(path, times=TIMES)
    np.testing.assert_allclose(np.asarray(ji.simulate(model).ys)[:, 0], np.exp(-0.1 * TIMES),
                               rtol=1e-6)  # fmt: skip
    k = model.parameters.names.index("k")
    S = np.asarray(ji.sensitivity(model).matrix)[0::2, k]  # dX/dk, every other row
    np.testing.assert_allclose(S, -TIMES * np.exp(-0.1 * TIMES), rtol=1e-5)


def test_a_species_reference_without_stoichiometry_is_one(tmp_path):
    """A Level 3 species reference without a stoichiometry made every rate NaN (then
    blamed on the equations); libroadrunner takes 1, and so does jaxident now, with a
    warning: `A -> B` at rate `k A` against the closed form."""
    doc, m = _network("unset", {"A": 1.0, "B": 0.0}, {"k": 0.7})
    r = m.createReaction()
    r.setId("conversion"), r.setReversible(False), r.setFast(False)
    reactant, product = r.createReactant(), r.createProduct()
    reactant.setSpecies("A"), reactant.setConstant(True)  # no stoichiometry
    product.setSpecies("B"), product.setConstant(True), product.setStoichiometry(1.0)
    r.createKineticLaw().setMath(libsbml.parseL3Formula("cell * k * A"))
    path = tmp_path / "unset.xml"
    libsbml.writeSBMLToFile(doc, str(path))
    with pytest.warns(UserWarning, match="stoichiometry of species 'A' is not set; taking 1"):
        model = ji.sbml_model(path, times=[0.5, 1.0, 2.0])
    ys = np.asarray(ji.simulate(model).ys)
    t = np.array([0.5, 1.0, 2.0])
    np.testing.assert_allclose(ys[:, 0], np.exp(-0.7 * t), rtol=1e-6)
    np.testing.assert_allclose(ys[:, 1], 1 - np.exp(-0.7 * t), rtol=1e-6)


@pytest.mark.parametrize("unit", [1.0, 1e-9])
def test_a_network_in_nanomolar_is_solved_as_accurately_as_in_molar(tmp_path, unit):
    """A + B -> C (k A B) with every concentration in molar (1) or nanomolar (1e-9) of
    the same amounts, and k in the inverse unit: the default absolute tolerance of 1e-10
    left the nanomolar network 1e-3 off; relative to each species' size now, both match
    libroadrunner (rtol 1e-12) within the claimed accuracy, outputs and sensitivities."""
    doc, m = _network("binding", {"X": 2.0 * unit, "Y": 1.0 * unit, "C": 0.0}, {"k": 0.7 / unit})
    r = m.createReaction()
    r.setId("binding"), r.setReversible(False), r.setFast(False)
    for make, sid in ((r.createReactant, "X"), (r.createReactant, "Y"), (r.createProduct, "C")):
        ref = make()
        ref.setSpecies(sid), ref.setConstant(True), ref.setStoichiometry(1.0)
    r.createKineticLaw().setMath(libsbml.parseL3Formula("cell * k * X * Y"))
    path = tmp_path / "binding.xml"
    libsbml.writeSBMLToFile(doc, str(path))
    model = ji.sbml_model(path, times=TIMES)
    ys = np.asarray(ji.simulate(model).ys)
    sens = ji.sensitivity(model)
    # closed form: X - Y = unit stays; Y' = -k Y (Y + unit)
    kk = 0.7 / unit
    Y = unit * np.exp(-kk * unit * TIMES) / (2 - np.exp(-kk * unit * TIMES))
    want = np.stack([Y + unit, Y, unit - Y], axis=1)
    names = list(model.output_names) if getattr(model, "output_names", None) else ["X", "Y", "C"]
    got = np.stack([ys[:, names.index(n)] for n in ("X", "Y", "C")], axis=1)
    assert np.abs(got - want).max() / unit <= sens.accuracy
    rr = roadrunner.RoadRunner(str(path))
    rr.integrator.relative_tolerance = 1e-12
    rr.integrator.absolute_tolerance = 1e-14 * unit
    grid = np.concatenate([[0.0], TIMES])
    ref = np.asarray(rr.simulate(times=list(grid), selections=["X", "Y", "C"]))[1:]
    assert np.abs(got - ref).max() / unit <= sens.accuracy
