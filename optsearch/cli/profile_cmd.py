"""`optsearch profile` (measure a profile table on this machine) and `optsearch calibrate` (fit it to logs)."""

from __future__ import annotations

import statistics
from pathlib import Path
from typing import Annotated, Optional

import typer
from rich.table import Table

from optsearch.catalog import gpu_catalog, load_model
from optsearch.cli import app
from optsearch.cli.options import (
    GlobalBatchOpt, JsonOpt, ModelOpt, PlanClusterOpt, PlanModelOpt, PlanProfileOpt, problem_from_options,
)
from optsearch.errors import ProfileError, SpecError
from optsearch.profile.measure import CPU_GPU_NAME, DTYPES, CellResult, ProfileRequest
from optsearch.report import check_output_file, dumps, stderr, stdout, write_atomic


def parse_int_list(text: str, option: str, max_value: int = 65_536) -> tuple[int, ...]:
    """'1,2,4,8' -> (1, 2, 4, 8); positive integers up to max_value, no repeats."""
    try:
        values = tuple(int(p) for p in text.split(","))
    except ValueError:
        raise SpecError(f"{option} = {text!r}: expected comma-separated positive integers, e.g. 1,2,4,8") from None
    if any(v <= 0 for v in values):
        raise SpecError(f"{option} = {text!r}: every value must be a positive integer")
    if any(v > max_value for v in values):
        raise SpecError(f"{option} = {text!r}: every value must be at most {max_value:,}")
    if len(set(values)) != len(values):
        raise SpecError(f"{option} = {text!r}: a value is repeated")
    return values


def _check_out(out: Path) -> None:
    check_output_file(out, "--out")


# ---- profile -----------------------------------------------------------------------------------------------------


@app.command("profile")
def profile_command(
    model: ModelOpt,
    out: Annotated[Path, typer.Option("--out", "-o", help="Where to write the profile CSV (e.g. profiles/NAME.csv).")],
    tp: Annotated[str, typer.Option("--tp", help="Tensor-parallel degrees to measure, comma-separated.")] = "1,2,4,8",
    micro_batch_sizes: Annotated[
        str, typer.Option("--micro-batch-sizes", help="Micro-batch sizes to measure, comma-separated.")
    ] = "1,2,4,8",
    dtype: Annotated[str, typer.Option("--dtype", help=f"Compute dtype: {', '.join(DTYPES)}.")] = "bf16",
    repeats: Annotated[int, typer.Option("--repeats", min=1, max=100_000, help="Timed repeats per cell (the median is kept).")] = 20,
    warmup: Annotated[int, typer.Option("--warmup", min=0, max=100_000, help="Untimed warm-up repeats per cell.")] = 5,
    gpu: Annotated[
        Optional[str],
        typer.Option("--gpu", help="GPU name for the gpu column (a catalog name, or the name a cluster's `gpus:` entry "
                                   "uses). Default: matched from the device name; 'cpu' on a machine without CUDA."),
    ] = None,
) -> None:
    """Measure per-layer forward/backward times on this machine's accelerator into a profile table (needs PyTorch)."""
    from optsearch.profile import measure

    if dtype not in DTYPES:
        raise SpecError(f"--dtype = {dtype!r}: must be one of {', '.join(DTYPES)}")
    model_spec = load_model(model)
    tps = parse_int_list(tp, "--tp")
    mbss = parse_int_list(micro_batch_sizes, "--micro-batch-sizes")
    measure.check_tp_degrees(model_spec, tps)
    _check_out(out)
    torch = measure.import_torch()
    env = measure.detect_environment(torch)
    catalog = gpu_catalog()
    if env.device.type == "cuda":
        if gpu is None:
            memory = torch.cuda.get_device_properties(0).total_memory
            gpu = measure.match_gpu_name(env.device_name, memory, catalog)
            if gpu is None:
                raise ProfileError(f"GPU {env.device_name!r} matches no single catalog GPU "
                                   f"({', '.join(catalog)}); give --gpu NAME")
            stderr.print(f"profiling on {env.device_name} as catalog GPU {gpu}")
    else:
        stderr.print("[yellow]warning:[/yellow] no CUDA device: profiling on the CPU; these times describe this CPU, "
                     "not a GPU, and activation memory is not measured")
        if gpu is None:
            gpu = CPU_GPU_NAME
            stderr.print(f"[yellow]warning:[/yellow] rows use gpu name {gpu!r}: the table only matches a cluster whose "
                         f"node types say `gpu: {gpu}` (give --gpu to choose the name)")
    request = ProfileRequest(model=model_spec, gpu=gpu, tps=tps, micro_batch_sizes=mbss,
                             dtype=dtype, repeats=repeats, warmup=warmup)  # type: ignore[arg-type]
    total = sum(1 for _ in measure.cells(request))
    from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn, TimeElapsedColumn

    with Progress(TextColumn("{task.description}"), BarColumn(), MofNCompleteColumn(), TimeElapsedColumn(),
                  console=stderr, transient=False) as progress:
        task = progress.add_task("profiling", total=total)
        done = {"n": 0}

        def on_cell(kind: str, tp_: int, b: int) -> None:
            if done["n"]:
                progress.advance(task)
            done["n"] += 1
            progress.update(task, description=f"{kind} tp={tp_} mbs={b}")

        results, metadata = measure.run_profile(request, torch, env, on_cell=on_cell)
        progress.update(task, completed=total, description="profiled")
    table = measure.to_table(request, results, metadata, name=str(out))
    table.save(out)
    peak = catalog[gpu].peak_fp16_tflop_per_s if gpu in catalog else None
    stdout.print(_profile_report(request, results, peak, env.device_name))
    oom = sum(r.status == "oom" for r in results)
    stderr.print(f"wrote {out}: {len(results) - oom} cells measured, {oom} out of memory; "
                 f"tp_comm_included={metadata['tp_comm_included']} ({metadata['tp_comm_note']})")


def _profile_report(request: ProfileRequest, results: list[CellResult], peak: float | None, device: str) -> Table:
    peak_text = f"peak {peak:g} TFLOP/s" if peak is not None else "no catalog peak for this gpu name"
    t = Table(title=f"Profile of {request.model.name} on {device} as {request.gpu} ({request.dtype}, {peak_text})")
    for col in ("kind", "tp", "mbs", "fwd ms", "bwd ms", "act MiB", "fwd TFLOP/s", "bwd TFLOP/s", "% peak"):
        t.add_column(col, justify="left" if col == "kind" else "right")
    for r in results:
        if r.status == "oom" or r.forward_s is None or r.backward_s is None:
            t.add_row(r.layer_kind, str(r.tp), str(r.micro_batch_size), "[red]oom[/red]", *["-"] * 5)
            continue
        fwd_tflops = bwd_tflops = pct = "-"
        if r.forward_flop_per_rank is not None:
            from optsearch.profile.measure import BACKWARD_FLOPS_OVER_FORWARD

            f = r.forward_flop_per_rank
            fwd_tflops = f"{f / r.forward_s / 1e12:.3g}"
            bwd_tflops = f"{BACKWARD_FLOPS_OVER_FORWARD * f / r.backward_s / 1e12:.3g}"
            if peak is not None:
                achieved = (1 + BACKWARD_FLOPS_OVER_FORWARD) * f / (r.forward_s + r.backward_s) / 1e12
                pct = f"{100 * achieved / peak:.1f}"
        act = "-" if r.activation_bytes is None else f"{r.activation_bytes / 2**20:.1f}"
        t.add_row(r.layer_kind, str(r.tp), str(r.micro_batch_size), f"{r.forward_s * 1e3:.3f}",
                  f"{r.backward_s * 1e3:.3f}", act, fwd_tflops, bwd_tflops, pct)
    return t


# ---- calibrate ---------------------------------------------------------------------------------------------------

MAX_LOG_BYTES = 2 * 2**30  # read_megatron_log reads a whole log into memory


def _check_log(path: Path) -> None:
    """A log is a regular file of at most MAX_LOG_BYTES: /dev/zero or a FIFO would never end."""
    import os
    import stat

    try:
        info = os.stat(path)
    except OSError as err:
        raise SpecError(f"--log {path}: cannot read: {err.strerror or err}") from None
    if not stat.S_ISREG(info.st_mode):
        raise SpecError(f"--log {path}: not a regular file (a folder, device, FIFO or socket)")
    if info.st_size > MAX_LOG_BYTES:
        raise SpecError(f"--log {path}: {info.st_size:,} bytes: larger than the {MAX_LOG_BYTES // 2**30} GiB limit")


@app.command("calibrate")
def calibrate_command(
    out: Annotated[Path, typer.Option("--out", "-o", help="Where to write the calibrated profile CSV.")],
    plan_files: Annotated[
        Optional[list[Path]],
        typer.Option("--plan", help="Plan JSON the logs ran (as written by `solve --out`): one for all logs, or one "
                                    "per --log in the same order."),
    ] = None,
    logs: Annotated[
        Optional[list[Path]], typer.Option("--log", help="Megatron-LM training log; repeat for several runs.")
    ] = None,
    runs_csv: Annotated[
        Optional[Path],
        typer.Option("--runs", help="Instead of --plan/--log: a CSV of recorded runs (the `optsearch validate` "
                                    "format, docs/validation.md); its timed rows are the measurements. Needs "
                                    "--model and --cluster."),
    ] = None,
    model: PlanModelOpt = None,
    cluster: PlanClusterOpt = None,
    profile: PlanProfileOpt = None,
    warmup: Annotated[
        Optional[int],
        typer.Option("--warmup", min=0, max=10**9,
                     help="Iteration lines to skip at the start of each log (default: first 10%)."),
    ] = None,
    tolerance: Annotated[
        float, typer.Option("--tolerance", min=0.0, max=1.0, help="Stop adding factors once the RMS relative error is this low.")
    ] = 0.02,
    cluster_out: Annotated[
        Optional[Path],
        typer.Option("--cluster-out", help="When an inter-node bandwidth factor is fitted, write the cluster with "
                                           "inter_node_gbit_per_s scaled by it to this YAML file."),
    ] = None,
    global_batch_size: GlobalBatchOpt = None,
    as_json: JsonOpt = False,
) -> None:
    """Fit compute (and inter-node bandwidth) factors to measured iteration times; write the profile.

    The measurements are Megatron-LM logs (--log, with the --plan each ran) or a CSV of recorded runs (--runs).
    """
    from optsearch.profile import calibrate as cal

    plan_files, logs = plan_files or [], logs or []
    if runs_csv is not None and (plan_files or logs):
        raise SpecError("--runs: give either --runs or --plan with --log, not both")
    if runs_csv is None and not logs:
        raise SpecError("give the measurements: --log (with --plan) for Megatron-LM logs, or --runs for a CSV of runs")
    if runs_csv is None and len(plan_files) not in (1, len(logs)):
        raise SpecError(f"--plan given {len(plan_files)} times for {len(logs)} --log files: give one plan for all "
                        "logs or one per log")
    from optsearch.cli.estimate_cmd import plan_and_problem

    _check_out(out)
    check_output_file(cluster_out, "--cluster-out")
    for log_path in logs:
        _check_log(log_path)
    pairs = list(zip(plan_files * len(logs) if len(plan_files) == 1 else plan_files, logs))
    observations = []
    problem = None
    if runs_csv is not None:
        if model is None or cluster is None:
            raise SpecError("--runs: give --model and --cluster (the runs' model and cluster)")
        problem = problem_from_options(model, cluster, profile or "analytic", global_batch_size, None, None)
        observations, problem = cal.observations_from_runs(runs_csv, problem)
    for plan_path, log_path in pairs:
        # each plan file gives its problem (what it records, or --model/--cluster/--profile); the first one is fitted
        plan, plan_problem = plan_and_problem(plan_path, model, cluster, profile, global_batch_size)
        if problem is None:
            problem = plan_problem
        elif (plan_problem.model, plan_problem.cluster) != (problem.model, problem.cluster):
            raise SpecError(f"{plan_path}: solved for {plan_problem.model.name} on {plan_problem.cluster.name}, but "
                            f"{pairs[0][0]} for {problem.model.name} on {problem.cluster.name}: calibrate one model "
                            "and cluster at a time")
        log = cal.read_megatron_log(log_path)
        cal.check_log_matches(log, problem, plan, str(plan_path))
        if not any(k in log.arguments for k in ("tensor_model_parallel_size", "pipeline_model_parallel_size")):
            stderr.print(f"[yellow]warning:[/yellow] {log_path}: no Megatron arguments block; the configuration "
                         "could not be checked against the plan")
        observations.append(cal.observe(log, plan, warmup))
    result = cal.fit(problem, observations, tolerance)
    table = cal.calibrated_table(problem, [o.plan for o in observations], result, name=str(out))
    base = profile or ("analytic" if runs_csv is not None else "as the plan file records")
    table.metadata.update(_calibration_metadata(problem, base,
                                                observations, result))
    table.save(out)
    if result.bandwidth_factor is not None and cluster_out is not None:
        import yaml

        scaled = cal.scale_inter_node(problem.cluster, result.bandwidth_factor)
        data = scaled.model_dump(mode="json")
        data["name"] = f"{problem.cluster.name}-calibrated"
        data["description"] = (f"{problem.cluster.description} Inter-node bandwidth x "
                               f"{result.bandwidth_factor:.3f} (optsearch calibrate).").strip()
        write_atomic(cluster_out, yaml.safe_dump(data, sort_keys=False))
    if as_json:
        stdout.out(dumps(_calibration_json(observations, result, out, cluster_out)), end="", highlight=False)
    else:
        stdout.print(_calibration_report(observations, result))
    for note in result.notes:
        stderr.print(note)
    stderr.print(f"wrote {out}")
    if result.bandwidth_factor is not None:
        if cluster_out is not None:
            stderr.print(f"wrote {cluster_out} (inter-node bandwidth x {result.bandwidth_factor:.3f}): pass it as "
                         "--cluster together with --profile " + str(out))
        else:
            stderr.print(f"[yellow]note:[/yellow] inter-node bandwidth factor {result.bandwidth_factor:.3f} is only "
                         "recorded in the table's metadata; give --cluster-out to write a cluster that applies it")


def _calibration_metadata(problem, profile: str, observations, result) -> dict[str, str]:
    meta = {
        "source": "optsearch calibrate",
        "base_profile": profile,
        "model": problem.model.name,
        "cluster": problem.cluster.name,
        "logs": ", ".join(o.source for o in observations),
        "fitted": result.factors.describe(),
        "method": "least squares on estimate/measured - 1 over the logs (Gauss-Newton through the cost model)",
    }
    for gpu, c in sorted(result.compute_factors.items()):
        meta[f"compute_factor.{gpu}"] = f"{c:.6g}"
    if result.bandwidth_factor is not None:
        meta["inter_node_bandwidth_factor"] = (
            f"{result.bandwidth_factor:.6g} (not applied by this table: multiply each node type's "
            "inter_node_gbit_per_s, or use calibrate --cluster-out)"
        )
    meta["rms_relative_error_before"] = f"{result.rms_before:.4g}"
    meta["rms_relative_error_after"] = f"{result.rms_after:.4g}"
    return meta


def _calibration_json(observations, result, out: Path, cluster_out: Path | None) -> dict:
    return {
        "fitted": result.factors.describe(),
        "compute_factors": dict(sorted(result.compute_factors.items())),
        "inter_node_bandwidth_factor": result.bandwidth_factor,
        "rms_relative_error_before": result.rms_before,
        "rms_relative_error_after": result.rms_after,
        "notes": list(result.notes),
        "out": str(out),
        "cluster_out": str(cluster_out) if cluster_out is not None and result.bandwidth_factor is not None else None,
        "logs": [
            {
                "log": o.source,
                "plan": o.plan.to_dict(),
                "warmup_lines": len(o.warmup_times_s),
                "warmup_median_s": statistics.median(o.warmup_times_s) if o.warmup_times_s else None,
                "steady_lines": o.steady_lines,
                "measured_s": o.measured_s,
                "estimate_before_s": b,
                "estimate_after_s": a,
                "error_before": eb,
                "error_after": ea,
            }
            for o, b, a, eb, ea in zip(observations, result.estimates_before_s, result.estimates_after_s,
                                       result.errors_before, result.errors_after)
        ],
    }


def _calibration_report(observations, result) -> Table:
    factors = ", ".join(f"{g} x {c:.3f}" for g, c in sorted(result.compute_factors.items()))
    if result.bandwidth_factor is not None:
        factors += f"; inter-node bandwidth x {result.bandwidth_factor:.3f}"
    t = Table(title=f"Calibration ({result.factors.describe()}): {factors}; RMS error {100 * result.rms_before:.1f}% "
                    f"-> {100 * result.rms_after:.1f}%")
    for col in ("log", "tp/dp/pp/mbs", "warm-up", "steady", "measured s", "estimate s", "error", "calibrated s",
                "error"):
        t.add_column(col, justify="left" if col in ("log", "tp/dp/pp/mbs", "warm-up") else "right")
    for o, b, a, eb, ea in zip(observations, result.estimates_before_s, result.estimates_after_s,
                               result.errors_before, result.errors_after):
        warm = f"{len(o.warmup_times_s)} x {statistics.median(o.warmup_times_s):.3g} s" if o.warmup_times_s else "0"
        shape = f"{o.plan.tp}/{o.plan.dp}/{o.plan.pp}/{o.plan.micro_batch_size}"
        for name, value in (("cp", o.plan.cp), ("ep", o.plan.ep), ("v", o.plan.virtual_stages)):
            shape += f" {name} {value}" if value != 1 else ""  # as report.degrees_text: the knobs that are not 1
        if o.plan.distributed_optimizer:
            shape += " dist-opt"
        t.add_row(Path(o.source).name, shape, warm, str(o.steady_lines), f"{o.measured_s:.4f}", f"{b:.4f}",
                  f"{100 * eb:+.1f}%", f"{a:.4f}", f"{100 * ea:+.1f}%")
    return t
