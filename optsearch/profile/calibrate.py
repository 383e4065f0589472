"""Calibrate a profile against measured Megatron-LM iteration times: `optsearch calibrate`.

A Megatron-LM training log prints its arguments at start (`  tensor_model_parallel_size ...... 2`) and, every
log interval, a line with `elapsed time per iteration (ms): 1423.8`. The first lines (warm-up: compilation,
allocator growth, NCCL set-up) are set aside; the steady-state time of a log is the median of the rest.

The gap between those times and the cost model's estimate is explained with the fewest correction factors:

    c_g   compute factor of GPU type g: multiplies forward_s and backward_s of every row of that GPU
    rho   inter-node slowdown (only with several logs): divides every node type's inter_node_gbit_per_s

fitted by least squares on relative errors, re-running the cost model itself for every trial value (no term is
re-implemented here):

    minimize  sum_logs ( estimate_log(c, rho) / measured_log - 1 )^2

Gauss-Newton with a forward-difference Jacobian, factors kept in [0.05, 20]. Candidate factor sets are tried
from the smallest: one compute factor shared by all GPU types; one per GPU type; each of those with rho. A set
is usable when it has no more factors than logs and its Jacobian has full column rank (a factor the logs cannot
see is not fitted); the first usable set whose RMS relative error is within the tolerance is kept, else the
usable set with the smallest error.
"""

from __future__ import annotations

import math
import re
import statistics
from dataclasses import dataclass, field, replace
from pathlib import Path

import numpy as np

from optsearch.costmodel import Estimate, estimate
from optsearch.errors import SpecError
from optsearch.plan import Plan
from optsearch.problem import Problem
from optsearch.profile.measure import layer_kinds
from optsearch.profile.table import ProfileEntry, ProfileTable
from optsearch.spec import ClusterSpec

DEFAULT_WARMUP_FRACTION = 0.1
DEFAULT_TOLERANCE = 0.02
FACTOR_BOUNDS = (0.05, 20.0)
MAX_ITERATIONS = 60
FINITE_DIFFERENCE_STEP = 1e-6

_ITERATION_LINE = re.compile(
    r"iteration\s+(\d+)\s*/\s*(\d+)\s*\|.*?elapsed time per iteration \(ms\):\s*([0-9]+(?:\.[0-9]*)?(?:[eE][-+]?\d+)?)"
)
_BATCH_IN_LINE = re.compile(r"global batch size:\s*(\d+)")
_ARGUMENTS_START = "- arguments -"  # Megatron: '------------------------ arguments ------------------------'
_ARGUMENTS_END = "end of arguments"
_ARGUMENT_LINE = re.compile(r"^(?:.*?\s)?([a-z_][a-z0-9_]*) \.{2,} (\S.*?)\s*$")


# ---- reading logs -------------------------------------------------------------------------------------------------


@dataclass(frozen=True, slots=True, kw_only=True)
class MegatronLog:
    source: str
    arguments: dict[str, str]
    iterations: tuple[int, ...]
    iteration_times_s: tuple[float, ...]
    global_batch_sizes: tuple[int, ...]


def parse_megatron_log(text: str, source: str) -> MegatronLog:
    """The arguments block (first value of each name) and the iteration lines of a Megatron-LM training log."""
    arguments: dict[str, str] = {}
    iterations: list[int] = []
    times: list[float] = []
    batches: list[int] = []
    has_block = _ARGUMENTS_START in text
    in_block = False
    for line in text.splitlines():
        if _ARGUMENTS_START in line or _ARGUMENTS_END in line:
            in_block = _ARGUMENTS_START in line
            continue
        it = _ITERATION_LINE.search(line)
        if it:
            iterations.append(int(it.group(1)))
            times.append(float(it.group(3)) / 1e3)
            batch = _BATCH_IN_LINE.search(line)
            if batch:
                batches.append(int(batch.group(1)))
            continue
        arg = _ARGUMENT_LINE.match(line) if in_block or not has_block else None
        if arg:
            arguments.setdefault(arg.group(1), arg.group(2))
    if not times:
        raise SpecError(
            f"{source}: no 'elapsed time per iteration (ms)' lines; is this a Megatron-LM training log "
            "(it needs at least one logged iteration)?"
        )
    return MegatronLog(source=source, arguments=arguments, iterations=tuple(iterations),
                       iteration_times_s=tuple(times), global_batch_sizes=tuple(batches))


def read_megatron_log(path: Path) -> MegatronLog:
    try:
        text = path.read_text(errors="replace")
    except OSError as err:
        raise SpecError(f"{path}: cannot read: {err.strerror or err}") from None
    return parse_megatron_log(text, str(path))


def check_log_matches(log: MegatronLog, problem: Problem, plan: Plan, plan_source: str) -> None:
    """Raise SpecError when the log's arguments (or its iteration lines' batch size) contradict the plan."""
    model = problem.model
    expected: list[tuple[str, int, str]] = [
        ("tensor_model_parallel_size", plan.tp, f"tp = {plan.tp}"),
        ("pipeline_model_parallel_size", plan.pp, f"pp = {plan.pp}"),
        ("data_parallel_size", plan.dp, f"dp = {plan.dp}"),
        ("micro_batch_size", plan.micro_batch_size, f"micro_batch_size = {plan.micro_batch_size}"),
        ("world_size", plan.num_gpus, f"{plan.num_gpus} GPUs"),
        ("global_batch_size", problem.job.global_batch_size, f"global batch size {problem.job.global_batch_size}"),
        ("hidden_size", model.hidden_size, f"hidden size {model.hidden_size}"),
        ("num_attention_heads", model.num_attention_heads, f"{model.num_attention_heads} attention heads"),
        ("seq_length", model.seq_length, f"sequence length {model.seq_length}"),
        ("ffn_hidden_size", model.ffn_hidden_size, f"ffn hidden size {model.ffn_hidden_size}"),
    ]
    if len(model.kinds) == 1:  # T5 runs give --num-layers per encoder/decoder; check single-kind models only
        expected.append(("num_layers", model.num_layers, f"{model.num_layers} layers"))
    for name, want, what in expected:
        raw = log.arguments.get(name)
        if raw is None or raw == "None":
            continue
        try:
            got = int(raw)
        except ValueError:
            continue
        if got != want:
            owner = "the job" if name == "global_batch_size" else (
                f"model {model.name}" if name in ("hidden_size", "num_attention_heads", "seq_length",
                                                  "ffn_hidden_size", "num_layers") else plan_source)
            raise SpecError(f"{log.source}: {name} = {got} but {owner} has {what}; this log is from a different "
                            "configuration")
    for batch in set(log.global_batch_sizes):
        if batch != problem.job.global_batch_size:
            raise SpecError(f"{log.source}: iteration lines report global batch size {batch} but the job has "
                            f"{problem.job.global_batch_size}; this log is from a different configuration")


def default_warmup(num_lines: int) -> int:
    """First 10% of the iteration lines (at least one when there are two or more)."""
    return 0 if num_lines < 2 else min(num_lines - 1, math.ceil(DEFAULT_WARMUP_FRACTION * num_lines))


@dataclass(frozen=True, slots=True, kw_only=True)
class Observation:
    """One log against one plan: the steady-state time and the warm-up lines set aside."""

    source: str
    plan: Plan
    measured_s: float  # median of the steady-state lines
    steady_lines: int
    warmup_times_s: tuple[float, ...]


def observe(log: MegatronLog, plan: Plan, warmup: int | None) -> Observation:
    n = len(log.iteration_times_s)
    skip = default_warmup(n) if warmup is None else warmup
    if skip >= n:
        raise SpecError(f"{log.source}: --warmup {skip} leaves no iteration line (the log has {n})")
    steady = log.iteration_times_s[skip:]
    return Observation(source=log.source, plan=plan, measured_s=statistics.median(steady), steady_lines=len(steady),
                       warmup_times_s=log.iteration_times_s[:skip])


def observations_from_runs(path: Path, problem: Problem) -> tuple[list[Observation], Problem]:
    """The timed rows (not out of memory) of a validation CSV (optsearch.validate) as observations, and the problem
    with the job settings those rows record (precision, sequence parallelism, gradient dtype, attention kernels:
    validate.as_run), which the fit prices them with.

    Every such row must be a run of the problem's model on its cluster at its global batch size, and all must record
    the same job settings (the fit prices every row with one problem); a row that is not names itself.
    """
    from optsearch.problem import build_problem
    from optsearch.validate import as_run, load_runs

    observations = []
    fitted = first = None
    flash: dict = {}  # the first timed row's flash_attention (run id, value): every row must say the same
    for run in load_runs(path):
        if run.measured_s is None or run.oom:
            continue
        where = f"{path}: run {run.run_id}"
        try:
            other = build_problem(run.model, run.cluster, global_batch_size=run.global_batch_size)
        except SpecError as err:
            raise SpecError(f"{run.where or where}: {err}") from None
        if other.model.name != problem.model.name or other.cluster.name != problem.cluster.name:
            raise SpecError(f"{where}: model {other.model.name} on {other.cluster.name}, but calibrating "
                            f"{problem.model.name} on {problem.cluster.name}: give a CSV of runs of that model on "
                            "that cluster")
        if run.global_batch_size != problem.job.global_batch_size:
            raise SpecError(f"{where}: global_batch_size {run.global_batch_size} but the job's is "
                            f"{problem.job.global_batch_size}: pass --global-batch-size {run.global_batch_size} or "
                            "split the CSV")
        settings = (run.precision, run.sequence_parallel, run.grad_reduce_in_fp32, run.unfused_kernels,
                    run.eager_engine)
        if fitted is None:
            fitted, first = as_run(problem, run), (run.run_id, settings)
        elif settings != first[1]:
            raise SpecError(f"{where}: precision, sequence_parallel, grad_reduce_in_fp32, unfused_kernels, "
                            f"eager_engine = "
                            f"{settings}, but run {first[0]} has {first[1]}: the fit prices every run with one job; "
                            "split the CSV")
        if run.flash_attention != flash.setdefault("first", (run.run_id, run.flash_attention))[1]:
            raise SpecError(f"{where}: flash_attention = {run.flash_attention}, but run {flash['first'][0]} has "
                            f"{flash['first'][1]}: the fit prices every run with one profile; split the CSV")
        observations.append(Observation(source=f"{path.name}:{run.run_id}", plan=run.plan, measured_s=run.measured_s,
                                        steady_lines=1, warmup_times_s=()))
    if not observations:
        raise SpecError(f"{path}: no timed run that did not run out of memory")
    return observations, fitted


# ---- the correction ------------------------------------------------------------------------------------------


@dataclass(frozen=True, slots=True)
class ScaledProfile:
    """A profile whose forward/backward times are multiplied by a factor per GPU (others unchanged)."""

    base: object  # a Profile
    compute_factors: dict[str, float]
    name: str = "calibrated"

    def has(self, gpu: str, layer_kind: str, tp: int, micro_batch_size: int) -> bool:
        return self.base.has(gpu, layer_kind, tp, micro_batch_size)  # type: ignore[attr-defined]

    def get(self, gpu: str, layer_kind: str, tp: int, micro_batch_size: int) -> ProfileEntry:
        entry = self.base.get(gpu, layer_kind, tp, micro_batch_size)  # type: ignore[attr-defined]
        c = self.compute_factors.get(gpu, 1.0)
        return replace(entry, forward_s=entry.forward_s * c, backward_s=entry.backward_s * c)


def scale_inter_node(cluster: ClusterSpec, bandwidth_factor: float) -> ClusterSpec:
    """The cluster with every node type's inter_node_gbit_per_s multiplied by bandwidth_factor."""
    nodes = [n.model_copy(update={"inter_node_gbit_per_s": n.inter_node_gbit_per_s * bandwidth_factor})
             for n in cluster.node_types]
    return cluster.model_copy(update={"node_types": nodes})


def corrected(problem: Problem, compute_factors: dict[str, float], bandwidth_factor: float = 1.0) -> Problem:
    cluster = problem.cluster if bandwidth_factor == 1.0 else scale_inter_node(problem.cluster, bandwidth_factor)
    return replace(problem, profile=ScaledProfile(problem.profile, dict(compute_factors)), cluster=cluster)


@dataclass(frozen=True, slots=True, kw_only=True)
class FactorSet:
    """Which factors a candidate fits: one shared compute factor or one per GPU type, and maybe the network."""

    per_gpu: bool
    bandwidth: bool
    gpus: tuple[str, ...]

    @property
    def size(self) -> int:
        return (len(self.gpus) if self.per_gpu else 1) + (1 if self.bandwidth else 0)

    def describe(self) -> str:
        compute = "one compute factor per GPU type" if self.per_gpu and len(self.gpus) > 1 else (
            "one compute factor" + (" shared by all GPU types" if len(self.gpus) > 1 else ""))
        return compute + (" + inter-node bandwidth" if self.bandwidth else "")

    def unpack(self, theta: np.ndarray) -> tuple[dict[str, float], float]:
        """theta -> (compute factor per GPU, inter-node bandwidth factor = 1 / rho)."""
        k = len(self.gpus) if self.per_gpu else 1
        compute = {g: float(theta[i if self.per_gpu else 0]) for i, g in enumerate(self.gpus)}
        return compute, (1.0 / float(theta[k]) if self.bandwidth else 1.0)


@dataclass(frozen=True, slots=True, kw_only=True)
class Fit:
    factors: FactorSet
    compute_factors: dict[str, float]
    bandwidth_factor: float | None  # None: not fitted
    estimates_before_s: tuple[float, ...]
    estimates_after_s: tuple[float, ...]
    errors_before: tuple[float, ...]  # relative: estimate / measured - 1
    errors_after: tuple[float, ...]
    notes: tuple[str, ...] = field(default_factory=tuple)

    @property
    def rms_before(self) -> float:
        return _rms(self.errors_before)

    @property
    def rms_after(self) -> float:
        return _rms(self.errors_after)


def _rms(values: tuple[float, ...] | list[float]) -> float:
    return math.sqrt(sum(v * v for v in values) / len(values))


def _estimates(problem: Problem, plans: list[Plan], compute: dict[str, float], bandwidth: float) -> list[Estimate]:
    fixed = corrected(problem, compute, bandwidth)
    return [estimate(fixed, p) for p in plans]


def _residuals(problem: Problem, obs: list[Observation], fs: FactorSet, theta: np.ndarray) -> np.ndarray:
    compute, bandwidth = fs.unpack(theta)
    ests = _estimates(problem, [o.plan for o in obs], compute, bandwidth)
    return np.array([e.iteration_time_s / o.measured_s - 1.0 for e, o in zip(ests, obs)])


def _jacobian(problem: Problem, obs: list[Observation], fs: FactorSet, theta: np.ndarray, r: np.ndarray) -> np.ndarray:
    jac = np.zeros((len(obs), len(theta)))
    for j in range(len(theta)):
        step = FINITE_DIFFERENCE_STEP * max(1.0, abs(theta[j]))
        moved = theta.copy()
        moved[j] += step
        jac[:, j] = (_residuals(problem, obs, fs, moved) - r) / step
    return jac


def _solve(problem: Problem, obs: list[Observation], fs: FactorSet) -> tuple[np.ndarray, np.ndarray] | None:
    """Gauss-Newton from all factors = 1; None when the logs cannot identify every factor of the set."""
    theta = np.ones(fs.size)
    r = _residuals(problem, obs, fs, theta)
    jac = _jacobian(problem, obs, fs, theta, r)
    if fs.size > len(obs) or np.linalg.matrix_rank(jac, tol=1e-9 * max(1.0, float(np.abs(jac).max()))) < fs.size:
        return None
    for _ in range(MAX_ITERATIONS):
        step, *_ = np.linalg.lstsq(jac, -r, rcond=None)
        new_theta = np.clip(theta + step, *FACTOR_BOUNDS)
        new_r = _residuals(problem, obs, fs, new_theta)
        if float(new_r @ new_r) > float(r @ r) - 1e-18:  # no progress: a kink of the max() or the optimum
            halved = np.clip(theta + step / 2, *FACTOR_BOUNDS)
            halved_r = _residuals(problem, obs, fs, halved)
            if float(halved_r @ halved_r) >= float(r @ r):
                break
            new_theta, new_r = halved, halved_r
        done = float(np.abs(new_theta - theta).max()) < 1e-12
        theta, r = new_theta, new_r
        if done:
            break
        jac = _jacobian(problem, obs, fs, theta, r)
    return theta, r


def candidate_sets(gpus: tuple[str, ...], num_logs: int) -> list[FactorSet]:
    """From the fewest factors up: shared compute, per-GPU compute, then each with the network (several logs)."""
    sets = [FactorSet(per_gpu=False, bandwidth=False, gpus=gpus)]
    if len(gpus) > 1:
        sets.append(FactorSet(per_gpu=True, bandwidth=False, gpus=gpus))
    if num_logs > 1:
        sets += [FactorSet(per_gpu=s.per_gpu, bandwidth=True, gpus=gpus) for s in list(sets)]
    return sorted(sets, key=lambda s: s.size)


def fit(problem: Problem, observations: list[Observation], tolerance: float = DEFAULT_TOLERANCE) -> Fit:
    """Fit the fewest correction factors that bring every estimate within `tolerance` (RMS relative error)."""
    from optsearch.targets import check_context_parallel_profile

    for o in observations:  # a measured table cannot price the run's s / cp tokens: nothing to fit it to
        check_context_parallel_profile(problem, o.plan, o.source)
    gpus = tuple(sorted({problem.node(s.node_type).gpu for o in observations for s in o.plan.stages}))
    before = [e.iteration_time_s for e in _estimates(problem, [o.plan for o in observations], {}, 1.0)]
    errors_before = tuple(b / o.measured_s - 1.0 for b, o in zip(before, observations))
    notes: list[str] = []
    best: tuple[FactorSet, np.ndarray, np.ndarray] | None = None
    for fs in candidate_sets(gpus, len(observations)):
        solved = _solve(problem, observations, fs)
        if solved is None:
            why = "more factors than logs" if fs.size > len(observations) else "the logs cannot tell them apart"
            notes.append(f"not fitted: {fs.describe()} ({why})")
            continue
        theta, r = solved
        if best is None or _rms(list(r)) < _rms(list(best[2])) - 1e-12:
            best = (fs, theta, r)
        if _rms(list(r)) <= tolerance:
            best = (fs, theta, r)
            break
    assert best is not None, "one shared compute factor is always identifiable from one log"
    fs, theta, r = best
    compute, bandwidth = fs.unpack(theta)
    if any(math.isclose(float(t), bound) for t in theta for bound in FACTOR_BOUNDS):
        notes.append(f"a factor hit its bound {FACTOR_BOUNDS}: the cost model cannot explain these logs")
    after = [e.iteration_time_s for e in _estimates(problem, [o.plan for o in observations], compute, bandwidth)]
    return Fit(
        factors=fs,
        compute_factors=compute,
        bandwidth_factor=bandwidth if fs.bandwidth else None,
        estimates_before_s=tuple(before),
        estimates_after_s=tuple(after),
        errors_before=errors_before,
        errors_after=tuple(a / o.measured_s - 1.0 for a, o in zip(after, observations)),
        notes=tuple(notes),
    )


def calibrated_table(problem: Problem, plans: list[Plan], result: Fit, name: str) -> ProfileTable:
    """The base profile materialized for the plans' (tp, micro-batch) and GPUs, with the compute factors applied.

    On the analytic profile (or a table derived from it) every row is the analytic profile times a factor per GPU:
    the table says so (`derived_from: analytic`), and prices a rank's s / cp tokens as the analytic profile does
    (targets.prices_context_parallel), so that solve searches context parallelism with it as with the analytic
    profile, and a cp 2 run calibrates a table that prices cp 2 plans."""
    from optsearch.profile.table import DERIVED_FROM_KEY
    from optsearch.targets import prices_context_parallel

    scaled = ScaledProfile(problem.profile, result.compute_factors)
    table = ProfileTable(name=name)
    if prices_context_parallel(problem.profile):
        table.metadata[DERIVED_FROM_KEY] = ("analytic profile x compute_factor of each GPU (times follow the token "
                                            "count: cp > 1 is priced as with --profile analytic)")
    gpus = sorted(result.compute_factors)
    shapes = sorted({(p.tp, p.micro_batch_size) for p in plans})
    for gpu in gpus:
        for kind in layer_kinds(problem.model):
            for tp, mbs in shapes:
                table.entries[(gpu, kind, tp, mbs)] = scaled.get(gpu, kind, tp, mbs)
    return table
