"""What-if analysis: sweeps and the Pareto frontier against brute-force enumeration, monotonicity, `--set` edits,
marginal value. Instances are hand-built and tiny (a few hundred plans) so that brute force takes well under a second.
"""

from __future__ import annotations

import pytest

from optsearch import whatif
from optsearch.candidates import SpaceOptions
from optsearch.edits import apply_edits, edited_problem, parse_edit
from optsearch.errors import SpecError
from optsearch.problem import build_problem
from optsearch.spec import ClusterSpec, JobSpec, ModelSpec, NodeTypeSpec
from optsearch.spec.budget import Budget
from priced import solve_exhaustive

REL = 1e-9


def node(name: str, gpu: str, count: int, price: float, gpus_per_node: int = 1) -> NodeTypeSpec:
    return NodeTypeSpec(name=name, gpu=gpu, gpus_per_node=gpus_per_node, num_nodes_available=count,
                        price_usd_per_node_hour=price, intra_node_link="pcie", intra_node_gbyte_per_s=31.5,
                        inter_node_gbit_per_s=100)


MODEL = ModelSpec(name="tiny", num_layers=4, hidden_size=2048, num_attention_heads=16, ffn_hidden_size=8192,
                  seq_length=1024, vocab_size=8000, default_job=JobSpec(global_batch_size=4, train_iterations=100_000))
# Three GPU types, one GPU per node: a frontier of 6 points (checked by brute force below).
CLUSTER = ClusterSpec(name="tiny-3", node_types=[node("a100", "A100-SXM-40GB", 2, 4.1), node("a10", "A10G", 3, 1.0),
                                                 node("t4", "T4", 2, 0.30)])
OPTIONS = SpaceOptions(micro_batch_sizes=(1,), max_stages=3)
SOLVER = "cpsat"  # the faster backend on these tiny models; test_pareto_cbc covers the other


@pytest.fixture(scope="module")
def problem():
    return build_problem(MODEL, CLUSTER, profile="analytic")


@pytest.fixture(scope="module")
def all_plans(problem):
    return [(p, e) for p, e in whatif.enumerate_plans(problem, Budget(), OPTIONS)]


@pytest.fixture(scope="module")
def frontier(problem):
    return whatif.pareto(problem, Budget(), solver=SOLVER, options=OPTIONS)


def pairs(points):
    return [(p.estimate.training_time_s, p.estimate.cost_usd) for p in points]


def assert_same_pairs(got, want):
    assert len(got) == len(want), f"{len(got)} points, brute force has {len(want)}: {got} vs {want}"
    for (t, c), (t2, c2) in zip(got, want):
        assert t == pytest.approx(t2, rel=REL) and c == pytest.approx(c2, rel=REL), f"{(t, c)} != {(t2, c2)}"


# ---- Pareto frontier ----------------------------------------------------------------------------------------

def test_pareto_equals_brute_force(problem, frontier, all_plans):
    want = whatif.non_dominated([(e.training_time_s, e.cost_usd) for _, e in all_plans])
    assert len(want) >= 4, "the instance should have a non-trivial frontier"
    assert_same_pairs(pairs(frontier), want)
    assert all(p.result.status == "optimal" for p in frontier)


def test_pareto_is_monotone_and_non_dominated(frontier, all_plans):
    got = pairs(frontier)
    for (t1, c1), (t2, c2) in zip(got, got[1:]):
        assert t2 > t1 and c2 < c1, f"not a frontier: {(t1, c1)} then {(t2, c2)}"
    for t, c in got:  # no enumerated plan dominates a frontier point
        assert not any(e.training_time_s <= t and e.cost_usd <= c and (e.training_time_s < t or e.cost_usd < c)
                       for _, e in all_plans)


def test_pareto_plans_price_to_their_point(problem, frontier):
    from optsearch.costmodel import estimate

    for p in frontier:
        est = estimate(problem, p.plan)
        assert (est.training_time_s, est.cost_usd) == (p.estimate.training_time_s, p.estimate.cost_usd)


def test_pareto_respects_other_limits(problem, all_plans):
    budget = Budget(max_gpus=1)
    got = whatif.pareto(problem, budget, solver=SOLVER, options=OPTIONS)
    want = whatif.non_dominated([(e.training_time_s, e.cost_usd) for p, e in all_plans if p.num_gpus <= 1])
    assert len(want) >= 2
    assert_same_pairs(pairs(got), want)


def test_pareto_cbc():
    """The same check with CBC, on a smaller two-type cluster."""
    cluster = ClusterSpec(name="tiny-2", node_types=[node("a100", "A100-SXM-40GB", 1, 4.1), node("t4", "T4", 2, 0.53)])
    problem = build_problem(MODEL, cluster, profile="analytic")
    options = SpaceOptions(micro_batch_sizes=(1,), max_stages=2)
    got = whatif.pareto(problem, Budget(), solver="cbc", options=options)
    assert_same_pairs(pairs(got), whatif.brute_force_frontier(problem, Budget(), options))


def test_pareto_point_with_an_unproven_cost_solve_has_no_time_gap(problem, monkeypatch):
    """When a step's cost solve stops unproven (time limit), the point may not be on the frontier: it is "feasible",
    reports no gap on time (it had said 0.0 from the optimal time solve) and names the cost solve's gap."""
    from dataclasses import replace

    real = whatif._Solver.__call__

    def unproven_cost(self, budget, warm_start=None, slower_than_s=0.0):
        result = real(self, budget, warm_start, slower_than_s)
        if budget.objective == "cost" and result.plan is not None:
            return replace(result, status="feasible", bound=result.objective_value * 0.8)
        return result

    monkeypatch.setattr(whatif._Solver, "__call__", unproven_cost)
    points = whatif.pareto(problem, Budget(), solver=SOLVER, options=OPTIONS, max_points=2)
    assert points and all(p.result.status == "feasible" and p.result.gap is None for p in points)
    assert all(p.result.message == "the cost solve stopped unproven (gap 20.0% on cost)" for p in points)


def test_next_time_limit_excludes_the_point():
    assert whatif.next_time_limit(1000.0, 10) == pytest.approx(1000.0 - 1e-3)  # relative step dominates
    assert whatif.next_time_limit(1000.0, 100_000) == pytest.approx(1000.0 - 0.1)  # per-iteration step dominates


# ---- sweeps -------------------------------------------------------------------------------------------------

def best_by_brute_force(problem, budget):
    r = solve_exhaustive(problem, budget, options=OPTIONS)
    return r.objective_value


def test_time_sweep_equals_brute_force_and_is_monotone(problem, frontier):
    times = [t for t, _ in pairs(frontier)]
    # below the fastest plan, on a frontier point, between points, beyond the slowest: every rule is exercised
    values = (times[0] * 0.9, times[0], (times[1] + times[2]) / 2, times[2], times[-1] * 2, times[-1] * 3)
    spec = whatif.Sweep(limit="max_time_s", values=values)
    ticks = []
    points = whatif.sweep(problem, Budget(objective="cost"), spec, solver=SOLVER, options=OPTIONS,
                          tick=lambda done, total, what: ticks.append((done, total)))
    assert [p.budget.max_time_s for p in points] == list(values)
    assert ticks[-1] == (len(values), len(values))
    assert points[0].result.status == "infeasible" and "the fastest feasible plan takes" in points[0].reason
    for p in points[1:]:
        want = best_by_brute_force(problem, p.budget)
        assert p.result.status == "optimal"
        assert p.estimate.cost_usd == pytest.approx(want, rel=REL), f"max_time {p.budget.max_time_s}"
        assert p.estimate.training_time_s <= p.budget.max_time_s
    costs = [p.estimate.cost_usd for p in points[1:]]
    assert all(b <= a for a, b in zip(costs, costs[1:])), f"cost rose as the time budget loosened: {costs}"
    assert points[-2].how == "reused", "the loosest optimum also answers the next-loosest point"


def test_cost_sweep_equals_brute_force(problem, frontier):
    costs = sorted(c for _, c in pairs(frontier))
    values = (costs[0] * 0.5, (costs[0] + costs[1]) / 2, costs[-1] * 1.5)
    points = whatif.sweep(problem, Budget(objective="time"), whatif.Sweep(limit="max_cost_usd", values=values),
                          solver=SOLVER, options=OPTIONS)
    assert points[0].result.status == "infeasible" and "the cheapest feasible plan costs" in points[0].reason
    for p in points[1:]:
        assert p.estimate.training_time_s == pytest.approx(best_by_brute_force(problem, p.budget), rel=REL)
    assert points[1].estimate.training_time_s >= points[2].estimate.training_time_s


def test_sweep_all_infeasible_names_the_reason(problem):
    spec = whatif.Sweep(limit="max_time_s", values=(1e3, 1e6))
    points = whatif.sweep(problem, Budget(max_gpus=1, max_usd_per_hour=0.1), spec, solver=SOLVER, options=OPTIONS)
    assert [p.result.status for p in points] == ["infeasible", "infeasible"]
    assert "--max-usd-per-hour" in points[0].reason


@pytest.mark.parametrize("text,limit,values", [
    ("max-time=2d..4d:3", "max_time_s", (172800.0, 259200.0, 345600.0)),
    ("max-cost=50000..500000:10", "max_cost_usd", tuple(50000.0 + 50000 * i for i in range(10))),
    ("max-time=36h,2d", "max_time_s", (129600.0, 172800.0)),
    ("max_cost=$1000,2500", "max_cost_usd", (1000.0, 2500.0)),
])
def test_parse_sweep(text, limit, values):
    spec = whatif.parse_sweep(text)
    assert spec.limit == limit and spec.values == pytest.approx(values)


@pytest.mark.parametrize("text,match", [
    ("max-gpus=1..4:4", "expected max-time=FROM..TO:POINTS"),
    ("max-time=2d..30d", "a range needs a point count"),
    ("max-time=2d..30d:1", "must be at least 2"),
    ("max-time=3d..2d:4", "must be above"),
    ("max-time=2x..3d:4", "not a duration"),
])
def test_parse_sweep_errors(text, match):
    with pytest.raises(SpecError, match=match):
        whatif.parse_sweep(text)


# ---- --set edits --------------------------------------------------------------------------------------------

def test_edits_apply_and_revalidate():
    model, cluster, job = apply_edits(MODEL, CLUSTER, MODEL.default_job, [
        "node_types.a100.count=5", "node_types.t4.price_usd_per_node_hour=0.25", "job.global_batch_size=512",
        "node_types.a10.num_nodes_available=0", "model.seq_length=2048", "job.train_tokens=1e9",
    ])
    assert cluster.node_type("a100").num_nodes_available == 5
    assert cluster.node_type("a10").num_nodes_available == 0
    assert cluster.node_type("t4").price_usd_per_node_hour == 0.25
    assert job.global_batch_size == 512 and job.train_tokens == 10**9 and job.train_iterations is None
    assert model.seq_length == 2048
    assert CLUSTER.node_type("a100").num_nodes_available == 2, "the original spec is untouched"


def test_edit_node_type_with_dots_in_its_name():
    cluster = ClusterSpec(name="aws", node_types=[node("p4d.24xlarge", "A100-SXM-40GB", 1, 32.77, 8)])
    _, out, _ = apply_edits(MODEL, cluster, MODEL.default_job, ["node_types.p4d.24xlarge.count=16"])
    assert out.node_types[0].num_nodes_available == 16


@pytest.mark.parametrize("edit,match", [
    ("node_types.h100.count=4", r"--set node_types.h100.count=4: cluster tiny-3 has no node type 'h100'; known: a100"),
    ("node_types.a100.cnt=4", r"node type a100 has no field 'cnt'; known: name, gpu"),
    ("node_types.a100.count=-1", r"--set node_types.a100.count=-1: node_types\[0\].num_nodes_available = -1: "
                                 r"Input should be greater than or equal to 0"),
    ("node_types.a100.price_usd_per_node_hour=cheap", r"price_usd_per_node_hour = 'cheap'"),
    ("node_types.a100.gpu=B300", r"node_types\[0\].gpu = 'B300': unknown GPU"),
    ("job.global_batch_size=0", r"--set job.global_batch_size=0: global_batch_size = 0"),
    ("job.batch=8", r"the job has no field 'batch'"),
    ("gpus.a100=1", r"'gpus.a100': unknown key"),
    ("job.global_batch_size", r"expected KEY=VALUE"),
])
def test_edit_errors_name_the_key(edit, match):
    with pytest.raises(SpecError, match=match):
        apply_edits(MODEL, CLUSTER, MODEL.default_job, [edit])


def test_parse_edit_alias():
    e = parse_edit("cluster.node_types.a10.count=3")
    assert (e.section, e.node_type, e.field, e.value) == ("cluster", "a10", "num_nodes_available", 3)


def test_edited_problem_from_catalog_names():
    problem = edited_problem("gpt2-xl", "fasop-a100-a10", ["node_types.a100.count=2", "job.global_batch_size=128"],
                             profile="analytic")
    assert problem.cluster.node_type("a100").num_nodes_available == 2
    assert problem.job.global_batch_size == 128


# ---- compare clusters and marginal value --------------------------------------------------------------------

def test_compare_clusters_labels_and_answers(problem):
    cheap_only = build_problem(MODEL, ClusterSpec(name="t4-only", node_types=[node("t4", "T4", 2, 0.53)]),
                               profile="analytic")
    points = whatif.compare_clusters([problem, cheap_only], Budget(objective="time"), solver=SOLVER, options=OPTIONS)
    assert [p.label for p in points] == ["tiny-3", "t4-only"]
    for p in points:
        assert p.estimate.training_time_s == pytest.approx(best_by_brute_force(p.problem, p.budget), rel=REL)


def test_marginal_matches_brute_force_and_reuses(problem):
    budget = Budget(objective="time")
    base, changes = whatif.marginal(problem, budget, solver=SOLVER, options=OPTIONS)
    assert base.result.status == "optimal"
    labels = [c.label for c in changes]
    assert labels == ["one more a100 node (3 available)", "one fewer a100 node (1 available)",
                      "one more a10 node (4 available)", "one fewer a10 node (2 available)",
                      "one more t4 node (3 available)", "one fewer t4 node (1 available)"]
    for c in changes:
        want = best_by_brute_force(c.problem, budget)
        assert c.estimate.training_time_s == pytest.approx(want, rel=REL), c.label
        assert c.extra["delta_time_s"] == pytest.approx(c.estimate.training_time_s - base.estimate.training_time_s)
    fewer_t4 = changes[-1]
    assert fewer_t4.how == "reused", "the fastest plan uses no t4 node: one fewer cannot change it"
    assert whatif.describe_change(fewer_t4) == "one fewer t4 node (1 available): no change"
    fewer_a100 = changes[1]
    assert fewer_a100.extra["delta_time_s"] > 0
    assert whatif.describe_change(fewer_a100).startswith("one fewer a100 node (1 available): +")


# ---- CLI ----------------------------------------------------------------------------------------------------

def run_cli(*args: str) -> tuple[int, str, str]:
    import contextlib
    import io
    import sys

    from optsearch.cli import main

    out, err = io.StringIO(), io.StringIO()
    argv = sys.argv
    sys.argv = ["optsearch", *args]
    code = 0
    try:
        with contextlib.redirect_stdout(out), contextlib.redirect_stderr(err):
            main()
    except SystemExit as ex:
        code = ex.code or 0
    finally:
        sys.argv = argv
    return code, out.getvalue(), err.getvalue()


@pytest.fixture(scope="module")
def spec_files(tmp_path_factory):
    import yaml

    folder = tmp_path_factory.mktemp("whatif")
    cluster = ClusterSpec(name="tiny-2", node_types=[node("a100", "A100-SXM-40GB", 1, 4.1), node("t4", "T4", 2, 0.53)])
    model = MODEL.model_copy(update={"default_job": JobSpec(global_batch_size=2, train_iterations=100_000)})
    (folder / "c.yaml").write_text(yaml.safe_dump(cluster.model_dump()))
    (folder / "m.yaml").write_text(yaml.safe_dump(model.model_dump()))
    return folder / "m.yaml", folder / "c.yaml", folder


def test_cli_pareto_json_csv_plot(spec_files):
    import json

    m, c, folder = spec_files
    # --no-flash-attention: with the A100's flash attention (the upstream default) its plan, 33m 25s for $2.28, is
    # cheaper than the T4's ($2.45) and the frontier is one point; with the scores priced it has two
    code, out, err = run_cli("pareto", "-m", str(m), "-c", str(c), "--solver", "cpsat", "--json", "--no-flash-attention",
                             "--csv", str(folder / "f.csv"), "--plot", str(folder / "f.png"))
    assert code == 0, err
    points = json.loads(out)
    assert len(points) >= 2 and all(p["status"] == "optimal" for p in points)
    for key in ("budget", "status", "objective", "solver", "solve_time_s", "gap", "plan", "estimate", "megatron"):
        assert key in points[0], key
    times = [p["estimate"]["training_time_s"] for p in points]
    costs = [p["estimate"]["cost_usd"] for p in points]
    assert times == sorted(times) and costs == sorted(costs, reverse=True)
    assert (folder / "f.png").read_bytes()[:4] == b"\x89PNG"
    assert (folder / "f.csv").read_text().count("\n") == len(points) + 1


def test_cli_whatif_sweep_shows_infeasible_points(spec_files):
    m, c, _ = spec_files
    code, out, err = run_cli("whatif", "-m", str(m), "-c", str(c), "--solver", "cpsat", "--quiet",
                             "--sweep", "max-time=1m,8h", "--json")
    assert code == 0, err
    import json

    first, second = json.loads(out)
    assert first["status"] == "infeasible" and first["reason"].startswith("no plan finishes within 1m 0s")
    assert second["status"] == "optimal" and second["budget"]["max_time_s"] == 8 * 3600


@pytest.mark.parametrize("args,match", [
    (("solve", "--set", "node_types.h100.count=2"), "--set node_types.h100.count=2: cluster tiny-2 has no node type"),
    (("whatif", "--marginal", "--set", "job.global_batch_size=-4"), "--set job.global_batch_size=-4: global_batch_size"),
    (("whatif", "--sweep", "max-time=1d..2d:3", "--max-time", "3d"), "drop --max-time"),
    (("whatif",), "give --sweep, --compare-clusters or --marginal"),
])
def test_cli_bad_input_exits_2(spec_files, args, match):
    import re

    m, c, _ = spec_files
    code, out, err = run_cli(args[0], "-m", str(m), "-c", str(c), *args[1:])
    assert code == 2 and re.search(match, err), err
    assert err.count("\n") == 1, "one line"


def test_cli_whatif_table_prints_a_shared_reason_once(spec_files):
    """Rows whose reasons differ only in their own budget point to one footnote under the table; a reason no other
    row shares stays in its row."""
    m, c, _ = spec_files
    code, out, err = run_cli("whatif", "-m", str(m), "-c", str(c), "--solver", "cpsat", "--quiet",
                             "--sweep", "max-time=1m,2m,8h")
    assert code == 0, err
    rows = [line for line in out.splitlines() if line.startswith("│")]
    assert [row.split("│")[1].strip() for row in rows] == ["1m 0s", "2m 0s", "8h 0m"]
    assert "[1]" in rows[0] and "[1]" in rows[1] and "[1]" not in rows[2]
    notes = [line for line in out.splitlines() if line.startswith("[1] ")]
    assert notes == [notes[0]] and notes[0].startswith("[1] no plan finishes within the budget: the fastest")
    code, out, err = run_cli("whatif", "-m", str(m), "-c", str(c), "--solver", "cpsat", "--quiet",
                             "--sweep", "max-time=1m,8h")
    assert code == 0, err
    assert "no plan finishes within 1m 0s" in out and "[1]" not in out


def test_cli_whatif_all_infeasible_with_plot_prints_the_table(spec_files):
    # new-user review: every point infeasible with --plot printed only "error: ... no point has a plan to draw" (exit
    # 1, no table); now the table and reasons print, exit 0 as without --plot, and a warning says nothing was drawn
    m, c, folder = spec_files
    png = folder / "none.png"
    code, out, err = run_cli("whatif", "-m", str(m), "-c", str(c), "--solver", "cpsat", "--quiet",
                             "--sweep", "max-time=1m,2m", "--plot", str(png))
    assert code == 0, err
    assert out.count("infeasible") >= 2 and "no plan finishes within" in out
    assert f"--plot {png}: no point has a plan to draw; nothing written" in " ".join(err.split())
    assert "wrote plot" not in err and not png.exists()


def test_marginal_plot_rings_coincident_points_and_keeps_the_legend_off_them(problem, tmp_path, monkeypatch):
    # new-user review: the legend covered a point and identical points (a change that changes nothing) hid each other
    import matplotlib.pyplot as plt

    from optsearch.cli.whatif_cmd import plot_points

    base, changes = whatif.marginal(problem, Budget(objective="time"), solver=SOLVER, options=OPTIONS)
    points = [base, *changes]
    kept = []
    monkeypatch.setattr(plt, "close", lambda fig: kept.append(fig))
    plot_points([*points, base], tmp_path / "m.png", "marginal")  # base twice: the same label's point is drawn once
    (ax,) = kept[0].axes
    positions = [(round(p.estimate.training_time_s, 3), round(p.estimate.cost_usd, 2)) for p in points if p.estimate]
    coincident = len(positions) - len(set(positions))
    assert coincident >= 1  # one fewer t4 node: no change (test_marginal_matches_brute_force_and_reuses)
    rings = [line for line in ax.get_lines() if line.get_markerfacecolor() == "none"]
    assert len(rings) == coincident
    assert len(ax.texts) == len(set(positions))  # one plan label per position
    kept[0].canvas.draw()
    legend = ax.get_legend().get_window_extent()
    assert legend.x0 >= ax.get_window_extent().x1  # beside the axes, over no point
    assert [t.get_text() for t in ax.get_legend().get_texts()] == [p.label for p in points]
