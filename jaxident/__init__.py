from ._runtime import _config as _config  # (first: float64 and the compilation cache)


# isort: split
from . import (
    data as data,
    linalg as linalg,
    models as models,
    petab as petab,
    plot as plot,
)
from ._design._candidates import Candidate as Candidate
from ._design._criteria import (
    AbstractCriterion as AbstractCriterion,
    AbstractSummary as AbstractSummary,
    AOptimal as AOptimal,
    Average as Average,
    DOptimal as DOptimal,
    EOptimal as EOptimal,
    WorstCase as WorstCase,
)
from ._design._entry import design as design
from ._design._result import Design as Design, Measurement as Measurement
from ._fit._estimate import Estimate as Estimate, estimate as estimate, Optimum as Optimum
from ._fit._intervals import (
    IntervalEnd as IntervalEnd,
    likelihood_intervals as likelihood_intervals,
    LikelihoodInterval as LikelihoodInterval,
)
from ._fit._multistart import (
    AbstractNoiseCurvature as AbstractNoiseCurvature,
    ExpectedCurvature as ExpectedCurvature,
    MultiStart as MultiStart,
    SmallerCurvature as SmallerCurvature,
)
from ._fit._optimizers import (
    AbstractOptimizer as AbstractOptimizer,
    Fides as Fides,
    FisherLM as FisherLM,
)
from ._fit._profile import Profile as Profile, profile as profile
from ._fit._solvers import (
    AbstractBox as AbstractBox,
    AbstractCurvatureScaling as AbstractCurvatureScaling,
    Clip as Clip,
    Face as Face,
    FadingMaximum as FadingMaximum,
    LevenbergMarquardt as LevenbergMarquardt,
    OptaxLD as OptaxLD,
    RunningMaximum as RunningMaximum,
)
from ._identify._css import (
    identifiability_frequency as identifiability_frequency,
    select_parameters as select_parameters,
)
from ._identify._delay import (
    delay_estimability as delay_estimability,
    DelayEstimability as DelayEstimability,
)
from ._identify._delay_jacobian import (
    attractor_states as attractor_states,
    delay_jacobian as delay_jacobian,
)
from ._identify._delay_result import DelayQuantity as DelayQuantity
from ._identify._estimability import (
    Estimability as Estimability,
    estimability as estimability,
)
from ._identify._lserc import (
    LSERC as LSERC,
    lserc as lserc,
    LSERCResult as LSERCResult,
    Probe as Probe,
)
from ._identify._lserc_method import TwinPartners as TwinPartners
from ._identify._perturb import (
    perturbation_analysis as perturbation_analysis,
    PerturbationAnalysis as PerturbationAnalysis,
    Perturbed as Perturbed,
    Response as Response,
    SmallGapWarning as SmallGapWarning,
)
from ._identify._reduction import (
    FixAt as FixAt,
    reduce_parameters as reduce_parameters,
    Reduction as Reduction,
)
from ._identify._rom import (
    POD as POD,
    pod_basis as pod_basis,
    pod_reduce as pod_reduce,
    rom_perturbation_error as rom_perturbation_error,
    rom_similarity as rom_similarity,
    Similarity as Similarity,
)
from ._identify._stepwise import one_by_one as one_by_one, set_by_set as set_by_set
from ._identify._stepwise_method import Stepwise as Stepwise
from ._identify._stepwise_result import (
    Evaluation as Evaluation,
    scaled_sensitivity as scaled_sensitivity,
    StepwiseSelection as StepwiseSelection,
    worst_case_evaluations as worst_case_evaluations,
)
from ._identify._sweep import (
    load_sweep as load_sweep,
    sweep as sweep,
    SweepResult as SweepResult,
)
from ._linalg._css._gks import GKS as GKS
from ._linalg._css._lrrqr import LRRQR as LRRQR
from ._linalg._css._qrcp import QRCP as QRCP
from ._linalg._css._rrqr import RRQR as RRQR
from ._linalg._css._srrqr import StrongRRQR as StrongRRQR
from ._linalg._rank import (
    AbsoluteTolerance as AbsoluteTolerance,
    LargestGap as LargestGap,
    NearThresholdWarning as NearThresholdWarning,
    RelativeTolerance as RelativeTolerance,
)
from ._linalg._ranking import (
    AbstractRankingCriterion as AbstractRankingCriterion,
    CollinearityIndex as CollinearityIndex,
    NSRGA as NSRGA,
    Orthogonalization as Orthogonalization,
    SensitivityNorm as SensitivityNorm,
)
from ._linalg._selection import Selection as Selection
from ._model._base import (
    AbstractModel as AbstractModel,
    AbstractSensitivityMethod as AbstractSensitivityMethod,
    AlgebraicModel as AlgebraicModel,
    DAEModel as DAEModel,
    Integrator as Integrator,
    ODEModel as ODEModel,
    ParameterDependence as ParameterDependence,
)
from ._model._nonsmooth import (
    fsign as fsign,
    ld_jvp as ld_jvp,
    nabs as nabs,
    nmax as nmax,
    nmid as nmid,
    nmin as nmin,
)
from ._model._parameters import Parameters as Parameters, ParameterValues as ParameterValues
from ._model._sampling import latin_hypercube as latin_hypercube
from ._model._transforms import (
    AbstractTransformedModel as AbstractTransformedModel,
    change_units as change_units,
    fix_parameters as fix_parameters,
    ReparameterizedAlgebraicModel as ReparameterizedAlgebraicModel,
    ReparameterizedDAEModel as ReparameterizedDAEModel,
    ReparameterizedODEModel as ReparameterizedODEModel,
)
from ._model._transforms_state import (
    free_initial_state as free_initial_state,
    InitialStateModel as InitialStateModel,
    PODModel as PODModel,
)
from ._problem._base import Experiment as Experiment, Problem as Problem
from ._problem._measurements import MeasurementError as MeasurementError
from ._problem._noise import (
    AbstractNoise as AbstractNoise,
    Laplace as Laplace,
    Normal as Normal,
)
from ._problem._predict import (
    predict as predict,
    Prediction as Prediction,
)
from ._problem._scale import Scale as Scale
from ._problem._sensitivity import (
    ld_sensitivity as ld_sensitivity,
    LSensitivity as LSensitivity,
    Sensitivity as Sensitivity,
    sensitivity as sensitivity,
    sensitivity_matrix as sensitivity_matrix,
    SensitivityScale as SensitivityScale,
)
from ._report._analyze import analyze as analyze
from ._report._result import Group as Group, Report as Report
from ._runtime._host import SolveFailed as SolveFailed
from ._runtime._results import RESULTS as RESULTS
from ._solve._bdf import BDF as BDF
from ._solve._forward import (
    DifferentiateSolver as DifferentiateSolver,
    SensitivityEquations as SensitivityEquations,
)
from ._solve._rosenbrock import Rodas4 as Rodas4
from ._solve._simulate import simulate as simulate, Trajectory as Trajectory


__version__ = _config.version()


def __getattr__(name):
    # the SBML reader pulls in SymPy and libsbml: only when asked for
    if name in ("sbml_model", "SBMLModel"):
        from ._io import _sbml

        return getattr(_sbml, name)
    raise AttributeError(f"module 'jaxident' has no attribute {name!r}")
