"""A Problem bundles what the user has: model, cluster, job, GPU specs and a profile. Every method takes one."""

from __future__ import annotations

from dataclasses import dataclass

from optsearch.profile import Profile, resolve_profile
from optsearch.spec import ClusterSpec, GpuSpec, JobSpec, ModelSpec, NodeTypeSpec

# Share of each GPU's usable memory that a plan must leave free: PyTorch's caching allocator fragments memory and
# transient buffers (NCCL, cuBLAS, the optimizer's temporaries) come and go. See docs/cost-model.md, section 9f.
DEFAULT_MEMORY_HEADROOM = 0.10


@dataclass(frozen=True, slots=True, kw_only=True)
class Problem:
    model: ModelSpec
    cluster: ClusterSpec
    job: JobSpec
    gpus: dict[str, GpuSpec]
    profile: Profile
    memory_headroom: float = DEFAULT_MEMORY_HEADROOM  # share of each GPU's usable memory a plan leaves free
    # The engine runs flash attention wherever Transformer Engine can (profile.analytic.flash_attention_error): no
    # s x s scores stored (costmodel.layer_activation_bytes) and, with the analytic profile, none moved. The library
    # default is off; the CLI sets it from the target (targets.engine_problem: on for upstream Megatron-LM).
    flash_attention: bool = False
    # Megatron's --overlap-grad-reduce where it is valid (costmodel.overlap_grad_reduce_on). The library default is
    # off; the CLI sets it from the target (targets.engine_problem: on for upstream Megatron-LM unless
    # --no-overlap-grad-reduce).
    overlap_grad_reduce: bool = False
    # Megatron's --overlap-param-gather where the search sets it (costmodel.overlap_param_gather_settings: plans with
    # the distributed optimizer and --overlap-grad-reduce; on at pp = 1, where it never loses, both at pp > 1). The
    # library default is off; the CLI sets it with overlap_grad_reduce (targets.engine_problem).
    overlap_param_gather: bool = False
    # Megatron's --ddp-average-in-collective (costmodel.grad_buffer_passes_s, docs/cost-model.md 8c): the dense
    # gradient buffer is averaged by the collective, not scaled by 1 / (dp x cp) before it. The library default is
    # off; the CLI sets it for upstream Megatron-LM (targets.engine_problem), whose launch emits the flag.
    ddp_average_in_collective: bool = False
    # --overlap-param-gather tried at pp > 1 too (costmodel.overlap_param_gather_settings; docs/cost-model.md 7f, "At
    # pp > 1"). Off by default: no catalog optimum takes it there, and its candidate copies (38-45 % more candidates
    # on the large pools) slowed the large rows' proofs (docs/benchmarks.md "Round 11 after the merge"). The CLI sets it
    # from `solve --pipelined-param-gather`; off, the space (and every optimality claim) holds pp > 1 plans without it.
    param_gather_pipelined: bool = False

    @property
    def iterations(self) -> int:
        return self.job.iterations(self.model.seq_length)

    def node(self, name: str) -> NodeTypeSpec:
        return self.cluster.node_type(name)

    def gpu_of(self, node_type: str) -> GpuSpec:
        return self.gpus[self.node(node_type).gpu]


def with_flash_attention(problem: Problem, on: bool) -> Problem:
    """The problem with the engine's flash attention on or off: the memory term (Problem.flash_attention) and, for
    the analytic profile, its time term (AnalyticProfile.flash_attention); a table keeps the times it holds."""
    from dataclasses import replace

    from optsearch.profile import AnalyticProfile

    profile = problem.profile
    if isinstance(profile, AnalyticProfile) and profile.flash_attention != on:
        profile = replace(profile, flash_attention=on)
    return replace(problem, flash_attention=on, profile=profile)


def build_problem(
    model: str | ModelSpec,
    cluster: str | ClusterSpec,
    *,
    profile: str | Profile | None = None,
    job: JobSpec | None = None,
    global_batch_size: int | None = None,
    iterations: int | None = None,
    tokens: int | None = None,
    check_dtype: bool = True,
) -> Problem:
    """Resolve names/paths from the catalogs and apply job overrides (the CLI's --global-batch-size etc.).
    check_dtype=False: the caller compares the profile's dtype with the job it prices (check_profile_dtype), e.g.
    validate, after a row's precision column."""
    from optsearch.catalog import gpus_for, load_cluster, load_model
    from optsearch.errors import SpecError
    from optsearch.spec.base import validate

    model_spec = load_model(model) if isinstance(model, str) else model
    cluster_spec = load_cluster(cluster) if isinstance(cluster, str) else cluster
    gpus = gpus_for(cluster_spec)
    job_spec = job or model_spec.default_job
    if iterations is not None and tokens is not None:
        raise SpecError("--iterations and --tokens: give at most one")
    overrides: dict[str, object] = {}
    if global_batch_size is not None:
        overrides["global_batch_size"] = global_batch_size
    if iterations is not None:
        overrides.update(train_iterations=iterations, train_tokens=None)
    if tokens is not None:
        overrides.update(train_tokens=tokens, train_iterations=None)
    if overrides:
        job_spec = validate(JobSpec, {**job_spec.model_dump(), **overrides}, "job (command-line overrides)")
    prof = profile if profile is not None and not isinstance(profile, str) else resolve_profile(profile, model_spec, gpus)
    if check_dtype:
        check_profile_dtype(prof, job_spec.precision)
    return Problem(model=model_spec, cluster=cluster_spec, job=job_spec, gpus=gpus, profile=prof)


# Profile dtypes (a table's `# dtype:` metadata, as `optsearch profile --dtype` writes it) that run a 16-bit job's
# matrix products: a table measured in another dtype (fp32: no 16-bit tensor-core rate, 4-byte activations) prices
# a different workload and is refused; fp16 against bf16 runs on the same tensor cores of Ampere and later GPUs and is
# only warned about (GPUs before Ampere have no bf16 rate).
SIXTEEN_BIT = ("fp16", "bf16")
_warned: set[tuple[str, str, str]] = set()


def check_profile_dtype(profile: Profile, precision: str) -> None:
    """ProfileError (exit 2) when a table's `# dtype:` is not 16-bit (but for a table of the CPU pseudo-GPU, which
    `optsearch profile` measures without CUDA); a warning on stderr (once per table and precision) when it differs
    otherwise; nothing when the table records no dtype."""
    from optsearch.errors import ProfileError
    from optsearch.profile.table import ProfileTable

    if not isinstance(profile, ProfileTable):
        return
    dtype = profile.metadata.get("dtype", "").strip().lower()
    if not dtype or dtype == precision:
        return
    on_cpu = bool(profile.entries) and all(key[0] == "cpu" for key in profile.entries)  # `profile` on a CPU: a demo
    if dtype not in SIXTEEN_BIT and not on_cpu:
        raise ProfileError(f"{profile.name}: dtype = {dtype!r} (the table's '# dtype:' line) but the job's precision is "
                           f"{precision}: a table measured in {dtype} does not price a {precision} job; measure one "
                           f"with `optsearch profile --dtype {precision}`")
    if (profile.name, dtype, precision) not in _warned:
        _warned.add((profile.name, dtype, precision))
        from optsearch.report import stderr

        stderr.print(f"[yellow]warning:[/yellow] {profile.name}: measured in {dtype} (its '# dtype:' line), the job "
                     f"runs {precision}" + ("" if on_cpu else ": the same tensor-core rate on Ampere and later GPUs, not on "
                                               "older ones"),
                     highlight=False)
