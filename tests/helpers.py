"""Shared problems and independent NumPy/SciPy references for the tests."""

import pathlib

import numpy as np
import scipy.linalg as sl


# The paper's matrices ship with the package (jaxident/data, MIT licence).
SENS_FILE = (
    pathlib.Path(__file__).resolve().parents[1]
    / "jaxident"
    / "data"
    / "pearce2022_sensitivity_matrices.npz"
)


def tol(dtype, factor=100.0):
    return factor * float(np.finfo(dtype).eps)


def random_matrix(rng, n, p, cond=1e6, rank=None):
    """Gaussian singular vectors, log-spaced singular values from 1 to 1/cond, and
    optionally exact zeros beyond `rank`."""
    U = np.linalg.qr(rng.standard_normal((n, p)))[0]
    V = np.linalg.qr(rng.standard_normal((p, p)))[0]
    s = np.logspace(0, -np.log10(cond), p)
    if rank is not None:
        s[rank:] = 0.0
    return (U * s) @ V.T


def r_factor(S):
    n, p = S.shape
    if n < p:
        S = np.vstack([S, np.zeros((p - n, p))])
    return sl.qr(S, mode="r")[0][:p]


def srrqr_rho_ref(S, perm, k):
    """max_ij sqrt((R11^-1 R12)_ij^2 + (gamma_j / omega_i)^2), recomputed from scratch."""
    R = r_factor(S[:, perm])
    R11, R12, R22 = R[:k, :k], R[:k, k:], R[k:, k:]
    AB = sl.solve_triangular(R11, R12)
    inv_omega = np.linalg.norm(sl.solve_triangular(R11, np.eye(k)), axis=1)
    gamma = np.linalg.norm(R22, axis=0)
    return float(np.sqrt(np.max(AB**2 + (inv_omega[:, None] * gamma[None, :]) ** 2)))


# --- reference column subset selections (straight from the paper's descriptions) ---


def qrcp_ref(S, k):
    return sl.qr(S, pivoting=True, mode="r")[1]


def rrqr_ref(S, k):
    """Algorithm 4.1: move the largest entry of the smallest right singular vector of
    the leading block to the back of the block, p - k times. Where the block is singular
    to working precision, the column with the largest projection on its null space."""
    R = r_factor(S)
    p = R.shape[0]
    perm = np.arange(p)
    tiny = p * np.finfo(float).eps * 2 * np.linalg.norm(R)
    for size in range(p, k, -1):
        _, s, vt = np.linalg.svd(R[:size, :size])
        null = vt[s <= max(s[-1], tiny)]
        m = int(np.argmax(np.linalg.norm(null, axis=0)))
        sw = np.arange(p)
        sw[[m, size - 1]] = sw[[size - 1, m]]
        R = sl.qr(R[:, sw], mode="r")[0]
        perm = perm[sw]
    return perm


def lrrqr_ref(S, k):
    """Algorithm 4.2: move the largest entry of the dominant right singular vector of
    the trailing block to its front, k times."""
    R = r_factor(S)
    p = R.shape[0]
    perm = np.arange(p)
    for step in range(k):
        v = np.linalg.svd(R[step:, step:])[2][0]
        m = step + int(np.argmax(np.abs(v)))
        sw = np.arange(p)
        sw[[m, step]] = sw[[step, m]]
        R = sl.qr(R[:, sw], mode="r")[0]
        perm = perm[sw]
    return perm


def gks_ref(S, k):
    """Algorithm 4.3: QR with column pivoting on the k dominant right singular vectors."""
    Vt = np.linalg.svd(S, full_matrices=False)[2]
    return sl.qr(Vt[:k], pivoting=True, mode="r")[1]


def srrqr_ref(S, k, f, max_swaps=1000):
    """Algorithm 4.4, the textbook way: recompute everything from a fresh QR after each
    exchange of the pair with the largest rho_ij > f."""
    perm = sl.qr(S, pivoting=True, mode="r")[1]
    for _ in range(max_swaps):
        R = r_factor(S[:, perm])
        R11, R12, R22 = R[:k, :k], R[:k, k:], R[k:, k:]
        AB = sl.solve_triangular(R11, R12)
        inv_omega = np.linalg.norm(sl.solve_triangular(R11, np.eye(k)), axis=1)
        gamma = np.linalg.norm(R22, axis=0)
        rho = np.sqrt(AB**2 + (inv_omega[:, None] * gamma[None, :]) ** 2)
        i, j = np.unravel_index(np.argmax(rho), rho.shape)
        if rho[i, j] <= f:
            return perm
        perm = perm.copy()
        perm[[i, k + j]] = perm[[k + j, i]]
    raise RuntimeError("reference strong RRQR did not converge")


def metrics_ref(S, perm, k):
    """gamma1, gamma2, tau of the CSS paper (eqs. 5.1-5.3), from the authors' definitions."""
    s = np.linalg.svd(S, compute_uv=False)
    S1, S2 = S[:, perm[:k]], S[:, perm[k:]]
    s1 = np.linalg.svd(S1, compute_uv=False)
    gamma1 = s1[k - 1] / s[k - 1]
    resid = S2 - S1 @ np.linalg.lstsq(S1, S2, rcond=None)[0]
    gamma2 = np.linalg.norm(resid, 2) / s[k]
    tau = (s1[0] / s1[k - 1]) / (s[0] / s[-1])
    return gamma1, gamma2, tau


# --- independent ODE references -------------------------------------------------------


def complex_step_sensitivity(rhs, x0, theta, ts, output, t0=0.0, rtol=1e-13, atol=1e-13):
    """d output / d theta by the complex step (Squire & Trapp 1998) through SciPy's
    DOP853, which supports complex states. `rhs(t, x, theta)`, `output(x) -> (n_out,)`
    applied to the state at each time; rows in time-major order."""
    from scipy.integrate import solve_ivp

    theta = np.asarray(theta, float)
    h = 1e-30
    cols = []
    for j in range(theta.size):
        th = theta.astype(complex)
        th[j] += 1j * h
        x0j = np.asarray(x0(th), complex)
        sol = solve_ivp(
            rhs, (t0, ts[-1]), x0j, args=(th,), t_eval=ts, rtol=rtol, atol=atol, method="DOP853"
        )
        assert sol.success
        y = np.stack([np.atleast_1d(output(sol.y[:, i])) for i in range(len(ts))])
        cols.append(y.imag.reshape(-1) / h)
    return np.stack(cols, axis=1)


N_POP = 332.6


def svir_rhs(t, x, p):
    S, V, I, R = x
    b, a, nu, g = p
    return [
        -b * S * I / N_POP - nu * S,
        -a * b * I * V / N_POP + nu * S,
        b * S * I / N_POP + a * b * I * V / N_POP - g * I,
        g * I,
    ]


def sevir_rhs(t, x, p):
    S, E, V, I, R = x
    b, a, nu, eta, g = p
    inf_s, inf_v = b * I * S / N_POP, a * b * I * V / N_POP
    return [-inf_s - nu * S, inf_s + inf_v - eta * E, -inf_v + nu * S, eta * E - g * I, g * I]


def covid_rhs(t, x, p):
    S, E, V, A, I, H, R = x
    b, a, nu, eta, g, sig, d, om = p
    inf_s, inf_v = b * I * S / N_POP, a * b * I * V / N_POP
    return [
        -inf_s - nu * S,
        inf_s + inf_v - eta * E,
        -inf_v + nu * S,
        sig * eta * E - g * A,
        (1 - sig) * eta * E - g * I,
        d * g * I - om * H,
        g * A + (1 - d) * g * I + om * H,
    ]


EPIDEMIC_REFS = {
    "svir": (svir_rhs, lambda th: [295.1, 0, 1, 0], lambda x: x[2]),
    "sevir": (sevir_rhs, lambda th: [285.1, 10, 0, 1, 0], lambda x: x[3]),
    "covid": (covid_rhs, lambda th: [285.1, 10, 0, 0.3, 1, 0.05, 0], lambda x: x[3] + x[4] + x[5]),
}


# --- ordering of LAPACK calls in compiled XLA ---------------------------------------


def _ancestors(n, deps):
    acc, stack = set(), list(deps[n])
    while stack:
        a = stack.pop()
        if a not in acc:
            acc.add(a)
            stack.extend(deps.get(a, ()))
    return acc


def unordered_lapack_pairs(compiled_text):
    """Pairs of LAPACK custom calls (or loops / calls containing one) that the compiled
    HLO could run at the same time: no data or control path between them inside the
    same computation. jaxlib's batched CPU LAPACK kernels can deadlock a small thread
    pool when run concurrently (see `jaxident._linalg._misc.after`)."""
    import re

    comps, order, current = {}, [], None
    header = re.compile(r"^(?:ENTRY\s+)?%?([\w.\-]+)\s*(?:\(.*\))?.*\{\s*$")
    inst = re.compile(r"^\s*(?:ROOT\s+)?%([\w.\-]+)\s*=\s*(.*)$")
    for line in compiled_text.splitlines():
        if current is None:
            m = header.match(line)
            if m and "=" not in line.split("{")[0]:
                current = m.group(1)
                comps[current] = []
                order.append(current)
            continue
        if line.strip() == "}":
            current = None
            continue
        m = inst.match(line)
        if m:
            comps[current].append((m.group(1), m.group(2)))
    called = re.compile(
        r"(?:calls|body|condition|to_apply|branch_computations)=\{?([^,}]*(?:,\s*%[\w.\-]+)*)"
    )

    def callees(rest):
        out = []
        for m in called.finditer(rest):
            out += re.findall(r"%([\w.\-]+)", m.group(1))
        return out

    has_lapack = {}

    def comp_has(c, seen=()):
        if c in has_lapack:
            return has_lapack[c]
        res = False
        for _, rest in comps.get(c, []):
            if 'custom_call_target="lapack' in rest or any(
                comp_has(k, seen + (c,)) for k in callees(rest) if k not in seen
            ):
                res = True
                break
        has_lapack[c] = res
        return res

    bad = []
    for c, insts in comps.items():
        names = {n for n, _ in insts}
        deps = {}
        lap = []
        for n, rest in insts:
            body = rest.split("metadata=")[0]
            toks = set(re.findall(r"%([\w.\-]+)", body)) & names
            toks.discard(n)
            deps[n] = toks
            if 'custom_call_target="lapack' in rest or any(comp_has(k) for k in callees(rest)):
                lap.append(n)
        reach = {n: _ancestors(n, deps) for n in lap}
        for i, a in enumerate(lap):
            for b in lap[i + 1 :]:
                if a not in reach[b] and b not in reach[a]:
                    bad.append((c, a, b))
    return bad


# --- a small PEtab problem written from scratch (a switch in time, bad-input cases) ---


def switch_sbml(path, event: bool = False, refill: bool = False):
    """`X' = piecewise(a, time < t_on, 0) - k X`, `X(0) = 0.5`, as SBML level 3; with
    `event`, a dose `X = X + D` at `time >= t_dose` (parameters `D = 1.5`,
    `t_dose = 1.8`); with `refill`, the dose whenever `X < c` (`c = 0.3`)."""
    import libsbml

    doc = libsbml.SBMLDocument(3, 1)
    m = doc.createModel()
    m.setId("switch")
    c = m.createCompartment()
    c.setId("cell"), c.setSize(1.0), c.setConstant(True)
    s = m.createSpecies()
    s.setId("X"), s.setCompartment("cell"), s.setInitialConcentration(0.5)
    s.setHasOnlySubstanceUnits(False), s.setBoundaryCondition(False), s.setConstant(False)
    for pid, v in (("k", 0.7), ("a", 2.0), ("t_on", 1.3), ("D", 1.5), ("t_dose", 1.8), ("c", 0.3)):
        p = m.createParameter()
        p.setId(pid), p.setValue(v), p.setConstant(True)
    for rid, formula, reactant in (
        ("production", "cell * piecewise(a, time < t_on, 0)", None),
        ("decay", "cell * k * X", "X"),
    ):
        r = m.createReaction()
        r.setId(rid), r.setReversible(False), r.setFast(False)
        ref = r.createReactant() if reactant else r.createProduct()
        ref.setSpecies("X"), ref.setStoichiometry(1.0), ref.setConstant(True)
        r.createKineticLaw().setMath(libsbml.parseL3Formula(formula))
    if event or refill:
        ev = m.createEvent()
        ev.setId("dose"), ev.setUseValuesFromTriggerTime(True)
        trig = ev.createTrigger()
        trig.setMath(libsbml.parseL3Formula("X < c" if refill else "time >= t_dose"))
        trig.setInitialValue(False), trig.setPersistent(True)
        ea = ev.createEventAssignment()
        ea.setVariable("X"), ea.setMath(libsbml.parseL3Formula("X + D"))
    libsbml.writeSBMLToFile(doc, str(path))


def write_petab(folder, *, measurements=None, parameters=None, observables=None,
                conditions=None, yaml_extra="", event=False, refill=False, noise="0.1",
                extra_parameters=""):  # fmt: skip
    """A PEtab v1 problem around `switch_sbml` in `folder`; each table may be replaced
    by its text, or the default ones changed by `noise` (every measurement's
    noiseParameters cell) and `extra_parameters` (rows added to the parameter table).
    Returns the path of the YAML file."""
    import pathlib

    folder = pathlib.Path(folder)
    folder.mkdir(parents=True, exist_ok=True)
    switch_sbml(folder / "model.xml", event, refill)
    times = np.linspace(0.5, 4.0, 8)
    y = [0.9, 1.2, 1.5, 1.3, 0.9, 0.65, 0.45, 0.3]
    tables = {
        "measurements.tsv": measurements
        or "observableId\tsimulationConditionId\tmeasurement\ttime\tnoiseParameters\n"
        + "".join(f"obs_X\tc0\t{v}\t{t}\t{noise}\n" for t, v in zip(times, y)),
        "parameters.tsv": parameters
        or "parameterId\tparameterScale\tlowerBound\tupperBound\tnominalValue\testimate\n"
        "k\tlog10\t0.01\t10\t0.7\t1\n"
        "a\tlog10\t0.01\t10\t2.0\t1\n"
        "t_on\tlin\t0.1\t3.5\t1.3\t1\n"
        + extra_parameters,
        "observables.tsv": observables
        or "observableId\tobservableFormula\tnoiseFormula\nobs_X\tX\tnoiseParameter1_obs_X\n",
        "conditions.tsv": conditions or "conditionId\tconditionName\nc0\tc0\n",
    }
    for name, text in tables.items():
        (folder / name).write_text(text)
    (folder / "problem.yaml").write_text(
        "format_version: 1\n"
        "parameter_file: parameters.tsv\n"
        "problems:\n"
        "- condition_files: [conditions.tsv]\n"
        "  measurement_files: [measurements.tsv]\n"
        "  observable_files: [observables.tsv]\n"
        "  sbml_files: [model.xml]\n" + yaml_extra
    )
    return folder / "problem.yaml"
