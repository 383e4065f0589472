"""The plan: what optsearch decides. Frozen, solver-independent records, and their JSON form.

A plan is tp, dp, micro-batch size and the ordered pipeline stages; pp = number of stages. Megatron-LM
requires the same tp and dp on every stage, so they are plan-wide fields and a stage cannot differ.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import Any, Literal, get_args

from optsearch.errors import SpecError

Recompute = Literal["none", "selective", "full"]
RECOMPUTE_MODES: tuple[Recompute, ...] = get_args(Recompute)


@dataclass(frozen=True, slots=True, kw_only=True)
class Stage:
    """One pipeline stage: tp x dp GPUs of one node type running `num_layers` consecutive layers."""

    node_type: str
    num_layers: int
    recompute: Recompute = "none"


@dataclass(frozen=True, slots=True, kw_only=True)
class Plan:
    tp: int
    dp: int
    micro_batch_size: int
    stages: tuple[Stage, ...]
    # Upstream block recomputation (--recompute-granularity full --recompute-method block --recompute-num-layers N):
    # every stage with layers says "full" and recomputes only its first N layers of each transformer block (encoder,
    # decoder); the rest keep all activations. None: "full" stages recompute every layer (--recompute-method uniform).
    recompute_num_layers: int | None = None
    # Expert parallelism (mixture-of-experts models): each expert layer's experts are split over ep ranks of a stage's
    # dp replicas (Megatron's --expert-model-parallel-size; ep divides dp). 1: every rank holds every expert.
    ep: int = 1
    # Context parallelism (issue 16): each stage's sequence is split over cp ranks (Megatron's
    # --context-parallel-size); a stage then uses tp x cp x dp GPUs.
    cp: int = 1
    # Megatron's --use-distributed-optimizer: optimizer states sharded over the dp x cp ranks, gradients
    # reduce-scattered and parameters all-gathered (costmodel.gradient_sync_s).
    distributed_optimizer: bool = False
    # Interleaved (virtual) pipeline: model chunks per pipeline rank (Megatron's virtual pipeline size). Each stage
    # (pipeline rank) splits its num_layers into this many equal chunks; chunk k of rank r is virtual stage k pp + r.
    virtual_stages: int = 1
    # Megatron's --overlap-grad-reduce (issue 15): the stage's gradient reduce-scatter / all-reduce runs in buckets
    # during the last micro-batch's backward (costmodel.overlapped_grad_reduce_s). solve sets it where the target runs
    # it (costmodel.overlap_grad_reduce_on: upstream Megatron-LM, dp x cp > 1, v = 1, one layer kind) and launch emits
    # it; a validation row sets it where the run used it.
    overlap_grad_reduce: bool = False
    # Megatron's --overlap-param-gather (issue 15; needs the distributed optimizer and overlap_grad_reduce): the
    # parameter all-gather runs during the next iteration's first forward instead of after the optimizer step
    # (costmodel.param_gather_delay_of). Set by a validation row, or by the search: on one-stage plans, where it never
    # loses, and where it wins at pp > 1 (costmodel.overlap_param_gather_settings, docs/cost-model.md 7f).
    overlap_param_gather: bool = False
    # Megatron's --tp-comm-overlap (issue 15; Transformer Engine's userbuffers, needs sequence parallelism): each
    # transformer layer's tensor-parallel all-gathers / reduce-scatters run alongside its GEMMs
    # (costmodel.tp_overlap_layer_comm_s). Off unless a validation row says the run used it; never set by the search.
    tp_comm_overlap: bool = False
    # Megatron's --ddp-average-in-collective (issue 15, paramgather): the data-parallel collective averages the dense
    # gradients (ReduceOp.AVG), so Megatron skips its 1 / (dp x cp) scale pass over the gradient buffer
    # (costmodel.grad_buffer_passes_s, docs/cost-model.md 8c). The search sets it for upstream Megatron-LM where
    # dp x cp > 1 (costmodel.ddp_average_on); launch emits the flag.
    ddp_average_in_collective: bool = False
    # Which Megatron-Core dispatches --overlap-param-gather's all-gathers (issue 15, ppgather; docs/cost-model.md 7d,
    # 7f): "main", upstream main (d98e8a64, what launch emits for and the search prices: a later stage gathers when its
    # first micro-batch arrives), or "core_r0.8.0" (every stage's first bucket at zero_grad: the H100 validation
    # rows). The two differ only where overlap_param_gather and pp > 1 (costmodel.param_gather_delay_of).
    param_gather_dispatch: str = "main"

    @property
    def pp(self) -> int:
        return len(self.stages)

    @property
    def gpus_per_stage(self) -> int:
        return self.tp * self.cp * self.dp

    @property
    def num_gpus(self) -> int:
        return self.gpus_per_stage * self.pp

    @property
    def balance(self) -> str:
        """FASOP-fork partition string: layers per stage, e.g. '0-11-8-8-8-8-5-0'."""
        return "-".join(str(s.num_layers) for s in self.stages)

    def gpus_by_type(self) -> dict[str, int]:
        out: dict[str, int] = {}
        for s in self.stages:
            out[s.node_type] = out.get(s.node_type, 0) + self.gpus_per_stage
        return out

    def to_dict(self) -> dict[str, Any]:
        out: dict[str, Any] = {
            "tp": self.tp,
            "dp": self.dp,
            "pp": self.pp,
            "micro_batch_size": self.micro_batch_size,
            "stages": [
                {"node_type": s.node_type, "num_layers": s.num_layers, "recompute": s.recompute} for s in self.stages
            ],
        }
        if self.recompute_num_layers is not None:  # absent otherwise: plans without it keep their JSON
            out["recompute_num_layers"] = self.recompute_num_layers
        if self.ep != 1:  # written only when set: plans without expert parallelism keep their JSON form
            out["ep"] = self.ep
        # Written only when not the default, so that a plan without them reads and writes as before.
        if self.cp != 1:
            out["cp"] = self.cp
        if self.distributed_optimizer:
            out["distributed_optimizer"] = True
        if self.virtual_stages != 1:  # written only when interleaved: plans without it keep today's JSON
            out["virtual_stages"] = self.virtual_stages
        for key in OVERLAP_FIELDS:  # Megatron's communication overlaps: written only when on
            if getattr(self, key):
                out[key] = True
        if self.ddp_average_in_collective:  # written only when on: plans without it keep their JSON
            out["ddp_average_in_collective"] = True
        if self.param_gather_dispatch != "main":  # written only when not upstream main's
            out["param_gather_dispatch"] = self.param_gather_dispatch
        return out

    def recomputed_layers(self, stage_index: int, kind_counts: dict[str, int]) -> dict[str, int]:
        """Layers of each kind that stage `stage_index` fully recomputes: all of a "full" stage's, and under block
        recomputation min(N, layers of that kind on the stage) (each kind is one transformer block in Megatron-LM:
        megatron/core/recompute.py checkpoints layer_idx < recompute_num_layers of each block on each pipeline
        rank)."""
        if self.stages[stage_index].recompute != "full":
            return {k: 0 for k in kind_counts}
        if self.recompute_num_layers is None:
            return dict(kind_counts)
        return {k: min(self.recompute_num_layers, n) for k, n in kind_counts.items()}


def _positive_int(data: dict[str, Any], key: str, source: str) -> int:
    value = data.get(key)
    if isinstance(value, bool) or not isinstance(value, int) or value <= 0:
        raise SpecError(f"{source}: {key} = {value!r}: must be a positive integer")
    return value


def plan_from_dict(data: Any, source: str = "plan") -> Plan:
    """Parse the JSON form (as written by `solve --out` / `to_dict`). Extra derived keys are ignored."""
    if isinstance(data, dict) and "plan" in data and isinstance(data["plan"], dict):
        data = data["plan"]  # a whole `solve --json` output
    if not isinstance(data, dict):
        raise SpecError(f"{source}: expected an object with tp, dp, micro_batch_size and stages")
    tp = _positive_int(data, "tp", source)
    dp = _positive_int(data, "dp", source)
    mbs = _positive_int(data, "micro_batch_size", source)
    raw_stages = data.get("stages")
    if not isinstance(raw_stages, list) or not raw_stages:
        raise SpecError(f"{source}: stages = {raw_stages!r}: must be a non-empty list")
    stages = []
    for i, raw in enumerate(raw_stages):
        where = f"{source}: stages[{i}]"
        if not isinstance(raw, dict):
            raise SpecError(f"{where} = {raw!r}: must be an object with node_type, num_layers, recompute")
        node_type = raw.get("node_type")
        if not isinstance(node_type, str) or not node_type:
            raise SpecError(f"{where}.node_type = {node_type!r}: must be a node type name")
        layers = raw.get("num_layers")
        if isinstance(layers, bool) or not isinstance(layers, int) or layers < 0:
            raise SpecError(f"{where}.num_layers = {layers!r}: must be an integer >= 0")
        recompute = raw.get("recompute", "none")
        if recompute not in RECOMPUTE_MODES:
            raise SpecError(f"{where}.recompute = {recompute!r}: must be one of {', '.join(RECOMPUTE_MODES)}")
        stages.append(Stage(node_type=node_type, num_layers=layers, recompute=recompute))
    if "pp" in data and data["pp"] != len(stages):
        raise SpecError(f"{source}: pp = {data['pp']!r}: must equal the number of stages ({len(stages)})")
    block = None
    if "recompute_num_layers" in data:
        block = _positive_int(data, "recompute_num_layers", source)
        check_block_recompute(tuple(stages), block, source)
    ep = _positive_int(data, "ep", source) if "ep" in data else 1
    cp = _positive_int(data, "cp", source) if "cp" in data else 1
    dist = data.get("distributed_optimizer", False)
    if not isinstance(dist, bool):
        raise SpecError(f"{source}: distributed_optimizer = {dist!r}: must be true or false")
    virtual = _positive_int(data, "virtual_stages", source) if "virtual_stages" in data else 1
    overlaps = _overlap_fields(data, source, dist)
    average = data.get("ddp_average_in_collective", False)
    if not isinstance(average, bool):
        raise SpecError(f"{source}: ddp_average_in_collective = {average!r}: must be true or false")
    dispatch = data.get("param_gather_dispatch", "main")
    if dispatch not in PARAM_GATHER_DISPATCHES:
        raise SpecError(f"{source}: param_gather_dispatch = {dispatch!r}: must be one of "
                        f"{', '.join(PARAM_GATHER_DISPATCHES)} (the Megatron-Core whose --overlap-param-gather "
                        "dispatch prices the plan)")
    return Plan(tp=tp, dp=dp, micro_batch_size=mbs, stages=tuple(stages), recompute_num_layers=block, ep=ep, cp=cp,
                distributed_optimizer=dist, virtual_stages=virtual, **overlaps, ddp_average_in_collective=average,
                param_gather_dispatch=dispatch)


# --overlap-param-gather's dispatch by Megatron-Core version (Plan.param_gather_dispatch; docs/cost-model.md 7d, 7f)
PARAM_GATHER_DISPATCHES: tuple[str, ...] = ("main", "core_r0.8.0")


# Megatron-LM's communication overlaps (issue 15; docs/targets.md "Communication overlaps"), as plan-file keys.
OVERLAP_FIELDS: tuple[str, ...] = ("overlap_grad_reduce", "overlap_param_gather", "tp_comm_overlap")


def _overlap_fields(data: dict[str, Any], source: str, distributed_optimizer: bool) -> dict[str, bool]:
    """The overlap keys of a plan file (absent: off), with upstream's own rule between them: --overlap-param-gather
    needs --use-distributed-optimizer and --overlap-grad-reduce (megatron/training/arguments.py, validate_args, l.
    1024-1029 at d98e8a64)."""
    out: dict[str, bool] = {}
    for key in OVERLAP_FIELDS:
        value = data.get(key, False)
        if not isinstance(value, bool):
            raise SpecError(f"{source}: {key} = {value!r}: must be true or false")
        out[key] = value
    if out["overlap_param_gather"] and not (distributed_optimizer and out["overlap_grad_reduce"]):
        raise SpecError(f"{source}: overlap_param_gather = true: needs distributed_optimizer = true and "
                        "overlap_grad_reduce = true (Megatron-LM's validate_args: '--overlap-param-gather only "
                        "supported with distributed optimizer', 'Must use --overlap-param-gather with "
                        "--overlap-grad-reduce')")
    return out


def check_block_recompute(stages: tuple[Stage, ...], recompute_num_layers: int, source: str) -> None:
    """Block recomputation is Megatron's full granularity: every stage with layers says "full", empty ones "none"."""
    for i, stage in enumerate(stages):
        wanted = "full" if stage.num_layers > 0 else "none"
        if stage.recompute != wanted:
            raise SpecError(
                f"{source}: stages[{i}].recompute = {stage.recompute!r}: with recompute_num_layers = "
                f"{recompute_num_layers} (block recomputation) a stage with layers must say 'full', an empty one 'none'"
            )


def load_plan(path: Path) -> Plan:
    """The plan in a plan file (a regular UTF-8 JSON file of bounded size: optsearch.planfile.read_plan_file)."""
    from optsearch.planfile import read_plan_file

    return plan_from_dict(read_plan_file(path), str(path))


def parse_stages(text: str) -> tuple[Stage, ...]:
    """'a10:11,a10:8:full,a100:5' -> stages (node_type:num_layers[:recompute])."""
    stages = []
    for i, part in enumerate(p.strip() for p in text.split(",")):
        fields = part.split(":")
        if len(fields) not in (2, 3) or not fields[0]:
            raise SpecError(f"--stages item {i} = {part!r}: expected NODE_TYPE:LAYERS[:RECOMPUTE]")
        try:
            layers = int(fields[1])
        except ValueError:
            raise SpecError(f"--stages item {i} = {part!r}: layers {fields[1]!r} is not an integer") from None
        if layers < 0:
            raise SpecError(f"--stages item {i} = {part!r}: layers must be >= 0")
        recompute = fields[2] if len(fields) == 3 else "none"
        if recompute not in RECOMPUTE_MODES:
            raise SpecError(f"--stages item {i} = {part!r}: recompute must be one of {', '.join(RECOMPUTE_MODES)}")
        stages.append(Stage(node_type=fields[0], num_layers=layers, recompute=recompute))
    return tuple(stages)


def parse_balance(balance: str, node_order: str, recompute: Recompute = "none") -> tuple[Stage, ...]:
    """FASOP-fork partition '0-11-8-8-8-8-5-0' plus a node order -> stages.

    node_order is one node type for every stage ('a10'), one per stage ('a100,a10,...'), or runs
    ('a100*2,a10*6').
    """
    try:
        layers = [int(x) for x in balance.strip().split("-")]
    except ValueError:
        raise SpecError(f"--balance = {balance!r}: expected layer counts joined by '-', e.g. 0-11-8-8-8-8-5-0") from None
    if any(n < 0 for n in layers):
        raise SpecError(f"--balance = {balance!r}: layer counts must be >= 0")
    runs: list[tuple[str, int]] = []
    for part in (p.strip() for p in node_order.split(",")):
        name, _, count = part.partition("*")
        try:
            repeat = int(count) if count else 1
        except ValueError:
            raise SpecError(f"--node-order item {part!r}: expected TYPE or TYPE*COUNT") from None
        if repeat < 1:
            raise SpecError(f"--node-order item {part!r}: COUNT must be at least 1")
        runs.append((name, repeat))
    total = sum(repeat for _, repeat in runs)  # counted before the list is made: fast*10**20 would not fit in memory
    if total == 1:
        runs = [(runs[0][0], len(layers))]
    elif total != len(layers):
        raise SpecError(
            f"--node-order gives {total} node types but --balance has {len(layers)} stages; "
            "give one type, one per stage, or TYPE*COUNT runs"
        )
    order = [name for name, repeat in runs for _ in range(repeat)]
    return tuple(Stage(node_type=t, num_layers=n, recompute=recompute) for t, n in zip(order, layers))
