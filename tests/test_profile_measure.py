"""`optsearch profile`: the shard shapes, GPU-name matching, the table it writes, and that estimate can use it.

Tests that need PyTorch skip without it (CI installs '.[test]', not the 'profile' extra).
"""

from __future__ import annotations

import json
import sys
from pathlib import Path

import pytest
import yaml

from optsearch.catalog import gpu_catalog
from optsearch.cli import main
from optsearch.errors import ProfileError, SpecError
from optsearch.profile import load_table
from optsearch.profile import measure
from optsearch.spec import ModelSpec

TINY = {
    "name": "tiny-gpt",
    "num_layers": 2,
    "hidden_size": 64,
    "num_attention_heads": 4,
    "ffn_hidden_size": 256,
    "seq_length": 32,
    "vocab_size": 500,
    "default_job": {"global_batch_size": 8, "train_iterations": 10},
}
TINY_LLAMA = {**TINY, "name": "tiny-llama", "num_kv_heads": 2, "gated_mlp": True, "bias": False, "norm": "rmsnorm",
              "position_embedding": "rotary", "tied_embeddings": False, "ffn_hidden_size": 176}
TINY_T5 = {**TINY, "name": "tiny-t5", "num_layers": 4, "head_dim": 32,
           "layer_kinds": [{"name": "encoder", "num_layers": 2},
                           {"name": "decoder", "num_layers": 2, "cross_attention": True}]}
CPU_CLUSTER = {
    "name": "cpu-box",
    "node_types": [{
        "name": "box", "gpu": "cpu", "gpus_per_node": 2, "num_nodes_available": 2, "price_usd_per_node_hour": 1.0,
        "intra_node_link": "pcie", "intra_node_gbyte_per_s": 10, "inter_node_gbit_per_s": 10,
    }],
    "gpus": [{"name": "cpu", "memory_gib": 16, "peak_fp16_tflop_per_s": 1, "hbm_gbyte_per_s": 50}],
}


def run_cli(args: list[str], capsys, monkeypatch) -> tuple[int, str, str]:
    monkeypatch.setattr(sys, "argv", ["optsearch", *args])
    code = 0
    try:
        main()
    except SystemExit as ex:
        code = ex.code or 0
    captured = capsys.readouterr()
    return code, captured.out, captured.err


def write_yaml(path: Path, data: dict) -> Path:
    path.write_text(yaml.safe_dump(data))
    return path


# ---- without torch ---------------------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("device", "memory_gib", "expected"),
    [
        ("NVIDIA A100-SXM4-80GB", 79.2, "A100-SXM-80GB"),
        ("NVIDIA A100-SXM4-40GB", 39.4, "A100-SXM-40GB"),
        ("NVIDIA H100 80GB HBM3", 79.1, "H100-SXM-80GB"),
        ("NVIDIA A10G", 22.1, "A10G"),
        ("NVIDIA A10", 22.1, "A10"),
        ("Tesla V100-SXM2-32GB", 31.7, "V100-SXM2-32GB"),
        ("Tesla T4", 14.7, "T4"),
        ("NVIDIA GeForce RTX 3090", 23.7, "RTX-3090"),
        ("NVIDIA GeForce RTX 4090", 23.6, None),
        ("NVIDIA B200", 179.0, None),
        ("NVIDIA H100 PCIe", 79.1, None),
        ("Tesla V100-PCIE-32GB", 31.7, None),
        ("Tesla V100-SXM2-16GB", 15.8, "V100-16GB"),
    ],
)
def test_match_gpu_name(device, memory_gib, expected):
    assert measure.match_gpu_name(device, memory_gib * 2**30, gpu_catalog()) == expected


def test_tp_must_divide_heads_and_ffn():
    model = ModelSpec.model_validate(TINY)
    measure.check_tp_degrees(model, (1, 2, 4))
    with pytest.raises(SpecError, match=r"--tp = 8: does not divide num_attention_heads 4 of model tiny-gpt"):
        measure.check_tp_degrees(model, (1, 8))
    gqa = ModelSpec.model_validate(TINY_LLAMA)
    with pytest.raises(SpecError, match=r"--tp = 4: does not divide key/value heads 2"):
        measure.check_tp_degrees(gqa, (4,))


def test_megatron_pads_the_vocabulary_per_tp():
    model = ModelSpec.model_validate(TINY)
    assert measure.padded_vocab_size(model, 1) == 512
    assert measure.padded_vocab_size(model, 4) == 512
    assert measure.padded_vocab_size(model, 8) == 1024


def test_timed_allreduces_follow_the_cost_model_count():
    t5 = ModelSpec.model_validate(TINY_T5)
    cell = measure.CellResult(layer_kind="decoder", tp=2, micro_batch_size=1, status="ok", forward_s=1.0,
                              backward_s=2.0)
    with_comm = measure.add_tp_comm(cell, t5, 0.1)
    assert with_comm.tp_comm_included
    assert with_comm.forward_s == pytest.approx(1.3)  # self-attention, cross-attention, MLP
    assert with_comm.backward_s == pytest.approx(2.3)
    enc = measure.add_tp_comm(measure.CellResult(layer_kind="encoder", tp=2, micro_batch_size=1, status="ok",
                                                 forward_s=1.0, backward_s=2.0), t5, 0.1)
    assert (enc.forward_s, enc.backward_s) == pytest.approx((1.2, 2.2))
    emb = measure.add_tp_comm(measure.CellResult(layer_kind="embedding", tp=2, micro_batch_size=1, status="ok",
                                                 forward_s=1.0, backward_s=2.0), t5, 0.1)
    head = measure.add_tp_comm(measure.CellResult(layer_kind="head", tp=2, micro_batch_size=1, status="ok",
                                                  forward_s=1.0, backward_s=2.0), t5, 0.1)
    assert (emb.forward_s, emb.backward_s) == pytest.approx((1.1, 2.0))
    assert (head.forward_s, head.backward_s) == pytest.approx((1.0, 2.1))


def test_without_torch_the_command_says_how_to_install(tmp_path, capsys, monkeypatch):
    monkeypatch.setitem(sys.modules, "torch", None)  # `import torch` raises ImportError
    model = write_yaml(tmp_path / "tiny.yaml", TINY)
    code, out, err = run_cli(["profile", "--model", str(model), "--tp", "1", "--micro-batch-sizes", "1",
                              "--out", str(tmp_path / "t.csv")], capsys, monkeypatch)
    assert code == 2
    assert err.strip().splitlines() == [
        "error: optsearch profile needs PyTorch, which is not installed; install it with: "
        "pip install -e '.[profile]' (pins torch==2.13.0)"
    ]
    assert not (tmp_path / "t.csv").exists()


def test_bad_grid_options_exit_2(tmp_path, capsys, monkeypatch):
    model = write_yaml(tmp_path / "tiny.yaml", TINY)
    code, _, err = run_cli(["profile", "--model", str(model), "--tp", "1,x", "--out", str(tmp_path / "t.csv")],
                           capsys, monkeypatch)
    assert code == 2 and "--tp = '1,x': expected comma-separated positive integers" in err
    code, _, err = run_cli(["profile", "--model", str(model), "--tp", "3", "--out", str(tmp_path / "t.csv")],
                           capsys, monkeypatch)
    assert code == 2 and "--tp = 3: does not divide num_attention_heads 4" in err


def test_importing_the_cli_does_not_import_torch():
    import subprocess

    code = ("import sys, optsearch.cli, optsearch.profile.measure, optsearch.profile.calibrate; "
            "print('torch' in sys.modules)")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True).stdout
    assert out.strip() == "False"


# ---- with torch (on the CPU) -----------------------------------------------------------------------------------


@pytest.mark.parametrize("spec", [TINY, TINY_LLAMA, TINY_T5], ids=lambda s: s["name"])
def test_shard_holds_megatrons_parameters(spec):
    torch = pytest.importorskip("torch")
    model = ModelSpec.model_validate(spec)
    cpu = torch.device("cpu")
    for kind in model.kinds:
        full = measure._build_shard(torch, model, kind.name, 1, 1, cpu, torch.float32)
        assert sum(p.numel() for p in full.parameters) == model.layer_parameters(kind), kind.name
        half = measure._build_shard(torch, model, kind.name, 2, 1, cpu, torch.float32)
        matrices = lambda shard: sum(p.numel() for p in shard.parameters if p.dim() == 2)  # noqa: E731
        assert matrices(half) * 2 == matrices(full), f"{kind.name}: tp=2 holds half of every weight matrix"
    embedding = measure._build_shard(torch, model, "embedding", 1, 1, cpu, torch.float32)
    positions = model.seq_length * model.hidden_size if model.position_embedding == "learned" else 0
    assert sum(p.numel() for p in embedding.parameters) == 512 * model.hidden_size + positions


def test_every_layer_kind_runs_forward_and_backward():
    torch = pytest.importorskip("torch")
    for spec in (TINY_LLAMA, TINY_T5):
        model = ModelSpec.model_validate(spec)
        request = measure.ProfileRequest(model=model, gpu="cpu", tps=(1, 2), micro_batch_sizes=(2,), dtype="fp32",
                                         repeats=1, warmup=0)
        env = measure.detect_environment(torch)
        results, meta = measure.run_profile(request, torch, env)
        kinds = {r.layer_kind for r in results}
        assert kinds == {"embedding", "head", *(k.name for k in model.kinds)}
        assert all(r.status == "ok" and r.forward_s > 0 and r.backward_s > 0 for r in results)
        assert meta["tp_comm_included"] == "false"


def test_an_out_of_memory_cell_is_recorded_and_the_run_goes_on(monkeypatch):
    torch = pytest.importorskip("torch")
    model = ModelSpec.model_validate(TINY)
    real = measure._build_shard

    def build(torch_, model_, kind, tp, b, device, dtype):
        if kind == "layer" and b == 2:
            raise torch.OutOfMemoryError("CUDA out of memory. Tried to allocate 2.00 GiB")
        return real(torch_, model_, kind, tp, b, device, dtype)

    monkeypatch.setattr(measure, "_build_shard", build)
    request = measure.ProfileRequest(model=model, gpu="cpu", tps=(1,), micro_batch_sizes=(1, 2), dtype="fp32",
                                     repeats=1, warmup=0)
    results, meta = measure.run_profile(request, torch, measure.detect_environment(torch))
    assert [(r.layer_kind, r.micro_batch_size) for r in results if r.status == "oom"] == [("layer", 2)]
    table = measure.to_table(request, results, meta, "t")
    assert table.has("cpu", "head", 1, 2)
    with pytest.raises(ProfileError, match="gpu=cpu layer_kind=layer tp=1 micro_batch_size=2 was measured out of"):
        table.get("cpu", "layer", 1, 2)


def test_other_errors_are_not_taken_for_out_of_memory(monkeypatch):
    torch = pytest.importorskip("torch")

    def build(*args):
        raise RuntimeError("mat1 and mat2 shapes cannot be multiplied")

    monkeypatch.setattr(measure, "_build_shard", build)
    request = measure.ProfileRequest(model=ModelSpec.model_validate(TINY), gpu="cpu", tps=(1,),
                                     micro_batch_sizes=(1,), repeats=1, warmup=0)
    with pytest.raises(RuntimeError, match="shapes cannot be multiplied"):
        measure.run_profile(request, torch, measure.detect_environment(torch))


def test_cpu_profile_loads_and_prices_a_plan(tmp_path, capsys, monkeypatch):
    pytest.importorskip("torch")
    model = write_yaml(tmp_path / "tiny.yaml", TINY)
    out = tmp_path / "tiny-cpu.csv"
    code, stdout, err = run_cli(["profile", "--model", str(model), "--tp", "1,2", "--micro-batch-sizes", "1,2",
                                 "--dtype", "fp32", "--repeats", "2", "--warmup", "1", "--out", str(out)],
                                capsys, monkeypatch)
    assert code == 0, err
    assert "no CUDA device: profiling on the CPU" in err
    assert "only matches a cluster whose node types say `gpu: cpu`" in err
    assert "Profile of tiny-gpt" in stdout
    table = load_table(out)
    assert set(table.entries) == {("cpu", kind, tp, b) for kind in ("embedding", "layer", "head")
                                  for tp in (1, 2) for b in (1, 2)}
    assert all(e.activation_bytes is None and not e.tp_comm_included for e in table.entries.values())
    assert all(e.forward_s > 0 and e.backward_s > 0 for e in table.entries.values())
    import torch

    meta = table.metadata
    assert meta["torch"] == torch.__version__ and meta["dtype"] == "fp32" and meta["gpu"] == "cpu"
    assert meta["device"].startswith("CPU") and meta["date"].endswith("Z")
    assert meta["tp_comm_included"] == "false" and "cost model adds" in meta["tp_comm_note"]
    assert "not measured on the CPU" in meta["activation_bytes"]

    cluster = write_yaml(tmp_path / "cpu-box.yaml", CPU_CLUSTER)
    code, stdout, err = run_cli(["estimate", "--model", str(model), "--cluster", str(cluster), "--profile", str(out),
                                 "--tp", "2", "--dp", "1", "--micro-batch-size", "2", "--stages", "box:1,box:1",
                                 "--json"], capsys, monkeypatch)
    assert code == 0, err
    result = json.loads(stdout)
    first = table.get("cpu", "embedding", 2, 2)
    layer = table.get("cpu", "layer", 2, 2)
    assert result["stages"][0]["compute_s"] > first.forward_s + first.backward_s + layer.forward_s + layer.backward_s
    assert result["iteration_time_s"] > 0

    # ... and the solver plans on it: only (tp, micro-batch) cells the table has are used, and the plan re-prices.
    code, stdout, err = run_cli(["solve", "--model", str(model), "--cluster", str(cluster), "--profile", str(out),
                                 "--minimize", "time", "--json", "--quiet"], capsys, monkeypatch)
    assert code == 0, err
    solved = json.loads(stdout)
    assert solved["status"] == "optimal"
    assert solved["plan"]["tp"] in (1, 2) and solved["plan"]["micro_batch_size"] in (1, 2)
    assert solved["estimate"]["iteration_time_s"] > 0
