"""A large reaction network read from SBML: its rates rolled into flux templates equal
the formulas written out one by one, its Jacobian's sparsity is the formulas', and ji.BDF
integrates it with a coloured Jacobian, against ji.Rodas4."""

import jax
import jax.numpy as jnp
import numpy as np
import pytest

import jaxident as ji
from jaxident._io._sbml import _of_state, _rolled


N_SPECIES = 40


def network_sbml(path):
    """A chain of 40 species in two compartments: conversions `A_i -> A_{i+1}` (mass
    action), dimerizations `A_i + A_{i+1} -> A_{i+2}`, saturable degradations `A_i ->`
    (`V A_i / (K + A_i)`), and an inflow: 117 reactions of four forms."""
    import libsbml

    doc = libsbml.SBMLDocument(3, 1)
    m = doc.createModel()
    m.setId("chain")
    for cid, size in (("c1", 1.0), ("c2", 2.5)):
        c = m.createCompartment()
        c.setId(cid), c.setSize(size), c.setConstant(True)
    for i in range(N_SPECIES):
        s = m.createSpecies()
        s.setId(f"A{i}"), s.setCompartment("c1" if i % 2 else "c2")
        s.setInitialConcentration(1.0 / (1 + i)), s.setHasOnlySubstanceUnits(False)
        s.setBoundaryCondition(False), s.setConstant(False)
    rng = np.random.default_rng(1)

    def parameter(pid, value):
        p = m.createParameter()
        p.setId(pid), p.setValue(float(value)), p.setConstant(True)

    def reaction(rid, reactants, products, formula):
        r = m.createReaction()
        r.setId(rid), r.setReversible(False), r.setFast(False)
        for sid in reactants:
            ref = r.createReactant()
            ref.setSpecies(sid), ref.setStoichiometry(1.0), ref.setConstant(True)
        for sid in products:
            ref = r.createProduct()
            ref.setSpecies(sid), ref.setStoichiometry(1.0), ref.setConstant(True)
        r.createKineticLaw().setMath(libsbml.parseL3Formula(formula))

    parameter("k_in", 2.0)
    reaction("inflow", [], ["A0"], "c2 * k_in")
    for i in range(N_SPECIES - 1):
        parameter(f"k{i}", rng.uniform(0.5, 5.0))
        reaction(f"conv{i}", [f"A{i}"], [f"A{i + 1}"], f"k{i} * A{i} * {'c1' if i % 2 else 'c2'}")
    for i in range(N_SPECIES - 2):
        parameter(f"d{i}", rng.uniform(0.1, 1.0))
        reaction(f"dim{i}", [f"A{i}", f"A{i + 1}"], [f"A{i + 2}"],
                 f"d{i} * A{i} * A{i + 1} * c1")  # fmt: skip
    parameter("V", 3.0), parameter("K", 0.5)
    for i in range(N_SPECIES):
        c = "c1" if i % 2 else "c2"
        reaction(f"deg{i}", [f"A{i}"], [], f"{c} * V * A{i} / (K + A{i})")
    libsbml.writeSBMLToFile(doc, str(path))


@pytest.fixture(scope="module")
def network(tmp_path_factory):
    path = tmp_path_factory.mktemp("network") / "chain.xml"
    network_sbml(path)
    return ji.sbml_model(path, times=np.linspace(0.5, 10.0, 6))


def test_rolled_rates_equal_the_formulas_under_jit_and_vmap(network):
    """117 fluxes of four forms: the rolled right-hand side and its Jacobian equal the
    formulas written out one by one (SymPy's CSE) at random states, under jit and vmap,
    and the program is a fraction of the size."""
    m = network
    key = (m.parameters.names, m.state_ids, m.rules, m.rates)
    rolled, written = _rolled(*key), _of_state(*key)
    assert rolled is not None
    th = m.parameters.nominal
    xs = jnp.abs(jax.random.normal(jax.random.key(0), (3, N_SPECIES))) + 0.1
    a = jax.jit(jax.vmap(lambda x: rolled(0.3, x, th)))(xs)
    b = jax.vmap(lambda x: written(0.3, x, th))(xs)
    np.testing.assert_allclose(np.asarray(a), np.asarray(b), rtol=1e-13, atol=1e-13)
    Ja = jax.jit(jax.vmap(jax.jacfwd(lambda x: rolled(0.3, x, th))))(xs)
    Jb = jax.vmap(jax.jacfwd(lambda x: written(0.3, x, th)))(xs)
    np.testing.assert_allclose(np.asarray(Ja), np.asarray(Jb), rtol=1e-13, atol=1e-13)
    size = lambda f: len(jax.make_jaxpr(lambda x: f(0.3, x, th))(xs[0]).jaxpr.eqns)  # noqa: E731
    assert size(rolled) < size(written) / 2
    # a handful of fluxes is written out as before
    assert _rolled(key[0], key[1][:2], key[2], key[3][:2]) is None


def test_grouped_and_plain_stacks_give_the_same_rates(network):
    """The formulas' right-hand side of 40 states, its values stacked in groups (one
    solve at a time) and plainly (batched kernels, `SBMLModel.for_batches`): the same
    values and Jacobians, bit for bit or to rounding, under jit and vmap."""
    m = network
    key = (m.parameters.names, m.state_ids, m.rules, m.rates)
    grouped, plain = _of_state(*key, True), _of_state(*key, False)
    th = m.parameters.nominal
    xs = jnp.abs(jax.random.normal(jax.random.key(1), (2, N_SPECIES))) + 0.1
    for f in (lambda g: jax.jit(jax.vmap(lambda x: g(0.3, x, th))),
              lambda g: jax.vmap(jax.jacfwd(lambda x: g(0.3, x, th)))):  # fmt: skip
        np.testing.assert_allclose(f(grouped)(xs), f(plain)(xs), rtol=1e-14, atol=1e-14)
    assert m.grouped and not m.for_batches().grouped and m.for_batches(False) is m
    assert m.for_batches().for_batches(False).grouped


def test_the_jacobians_sparsity_is_the_formulas(network):
    """`jacobian_sparsity()` is exactly where the Jacobian at a random state is nonzero;
    its colouring needs a few groups for 40 columns."""
    from jaxident._solve._bdf import _coloring

    m = network
    P = m.jacobian_sparsity()
    th = m.parameters.view(m.parameters.nominal)
    x = jnp.abs(jax.random.normal(jax.random.key(1), (N_SPECIES,))) + 0.1
    J = np.asarray(jax.jacfwd(lambda z: m.vector_field(0.3, z, th))(x))
    np.testing.assert_array_equal(P, J != 0)
    assert _coloring(P.tobytes(), N_SPECIES).n_colors <= 6


def test_bdf_with_a_coloured_jacobian_against_rodas4(network):
    """The network's outputs and sensitivities by ji.BDF (its Jacobian in groups of
    columns) at rtol 1e-9 against ji.Rodas4 at 1e-12, within BDF's accuracy."""
    m = network
    th = m.parameters.nominal
    ref = ji.sensitivity(m, th, integrator=ji.Integrator(ji.Rodas4(), rtol=1e-12, atol=1e-14))
    S = ji.sensitivity(m, th, integrator=ji.Integrator(ji.BDF(), rtol=1e-9, atol=1e-12))
    A, B = np.asarray(S.matrix), np.asarray(ref.matrix)
    assert np.abs(A - B).max() <= ji.BDF.global_error * 1e-9 * np.abs(B).max()
    np.testing.assert_allclose(np.asarray(S.outputs), np.asarray(ref.outputs), rtol=1e-6, atol=1e-9)
