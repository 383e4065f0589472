"""Error hints for hand-written specs (new-user review): Megatron's key names say `did you mean`, a few errors are all
named, a model given as the cluster (or the reverse) says so, a YAML syntax error names its line, an unknown GPU says
where to define one."""

from __future__ import annotations

import sys
from pathlib import Path

import pytest

from optsearch.catalog import CLUSTERS_DIR, MODELS_DIR, load_cluster, load_model
from optsearch.errors import SpecError

sys.path.insert(0, str(Path(__file__).resolve().parent))
from test_calibrate import run_cli  # noqa: E402

GPT2 = (MODELS_DIR / "gpt2-xl.yaml").read_text()
A10 = (CLUSTERS_DIR / "fasop-a10.yaml").read_text()


def write(tmp_path: Path, name: str, text: str) -> str:
    (tmp_path / name).write_text(text)
    return str(tmp_path / name)


def test_megatron_key_name_says_did_you_mean(tmp_path):
    path = write(tmp_path, "m.yaml", GPT2.replace("num_attention_heads: 16", "num_attention_heads: 16\nnum_query_groups: 4"))
    with pytest.raises(SpecError, match=r"num_query_groups = 4: unknown key \(did you mean num_kv_heads\?\)"):
        load_model(path)


def test_few_errors_are_all_named(tmp_path):
    text = GPT2.replace("norm: layernorm", "norm: layer_norm").replace("bias: true", "bias: 3")
    with pytest.raises(SpecError) as err:
        load_model(write(tmp_path, "m.yaml", text))
    line = str(err.value)
    assert "'layernorm' or 'rmsnorm'" in line and "bias = 3" in line and "more)" not in line and "\n" not in line


@pytest.mark.parametrize("model, cluster, message", [
    (str(CLUSTERS_DIR / "fasop-a10.yaml"), "fasop-a10", "looks like a cluster spec (it has node_types), not a model"),
    ("gpt2-xl", str(MODELS_DIR / "gpt2-xl.yaml"), "looks like a model spec"),
    ("fasop-a10", "gpt2-xl", "fasop-a10 is a cluster in the catalog, not a model (swapped --model and --cluster?)"),
])
def test_swapped_model_and_cluster_say_so(model, cluster, message, capsys, monkeypatch):
    code, out, err = run_cli(["estimate", "-m", model, "-c", cluster, "--stages", "a10:48", "--tp", "1", "--dp", "1",
                              "--micro-batch-size", "1"], capsys, monkeypatch)
    assert code == 2 and message in " ".join(err.split())


def test_yaml_syntax_error_names_the_line(tmp_path):
    path = write(tmp_path, "m.yaml", "name: x\nnum_layers: 2\n  hidden_size: 3\n")
    with pytest.raises(SpecError, match=r"not valid YAML: line 3, column \d+: mapping values are not allowed here$"):
        load_model(path)


def test_unknown_gpu_says_define_it_in_gpus(tmp_path):
    path = write(tmp_path, "c.yaml", A10.replace("gpu: A10G", "gpu: A10X"))
    with pytest.raises(SpecError, match=r"gpu = 'A10X': unknown GPU; known: .*or define it in the cluster's gpus: list"):
        load_cluster(path)


def test_docs_specs_examples_load(tmp_path):
    import re

    docs = (Path(__file__).resolve().parents[1] / "docs" / "specs.md").read_text()
    model_text, cluster_text = re.findall(r"```yaml\n(.*?)```", docs, flags=re.S)
    model = load_model(write(tmp_path, "my-1b.yaml", model_text))
    cluster = load_cluster(write(tmp_path, "my-cluster.yaml", cluster_text))
    assert model.kv_heads == 4 and [g.name for g in cluster.gpus] == ["MyGPU-48GB"]
    assert cluster.node_type("mine").gpu == "MyGPU-48GB"
