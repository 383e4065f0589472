"""Spec files as a new user writes them (new-user review): a key given twice is refused with both lines, a misspelt
key is named (not hidden behind a missing one), and 2e10 is a number."""

from __future__ import annotations

from pathlib import Path

import pytest

from optsearch.catalog import load_cluster, load_model
from optsearch.errors import ProfileError, SpecError
from optsearch.profile.table import parse_yaml
from optsearch.spec.base import load_yaml, read_mapping

ROOT = Path(__file__).resolve().parent.parent


def _edited(src: Path, dst: Path, old: str, new: str) -> Path:
    text = src.read_text()
    assert old in text
    dst.write_text(text.replace(old, new, 1))
    return dst


def test_duplicate_key_in_cluster_names_key_and_both_lines(tmp_path):
    path = _edited(ROOT / "clusters" / "fasop-a10.yaml", tmp_path / "dup.yaml",
                   "num_nodes_available: 8", "num_nodes_available: 8\n    num_nodes_available: 2")
    lines = path.read_text().splitlines()
    first = lines.index("    num_nodes_available: 8") + 1
    with pytest.raises(SpecError, match=rf"dup\.yaml: duplicate key 'num_nodes_available' \(lines {first} and "
                                        rf"{first + 1}\)"):
        load_cluster(str(path))


def test_duplicate_key_in_model_and_job_section(tmp_path):
    path = _edited(ROOT / "models" / "gpt2-xl.yaml", tmp_path / "m.yaml",
                   "  train_tokens:", "  global_batch_size: 32\n  train_tokens:")
    with pytest.raises(SpecError, match=r"m\.yaml: duplicate key 'global_batch_size' \(lines \d+ and \d+\)"):
        load_model(str(path))


def test_duplicate_top_level_key_and_json(tmp_path):
    with pytest.raises(SpecError, match=r"x\.yaml: duplicate key 'name' \(lines 1 and 3\)"):
        load_yaml("name: a\ndescription: b\nname: c\n", "x.yaml")
    plan = tmp_path / "p.json"
    plan.write_text('{"plan": {"tp": 1, "tp": 2}}')
    with pytest.raises(SpecError, match=r"p\.json: duplicate key 'tp'"):
        read_mapping(plan, kind="JSON")


def test_duplicate_key_in_yaml_profile_table():
    text = ("entries:\n  - {gpu: A10G, layer_kind: layer, tp: 1, micro_batch_size: 1, forward_s: 0.1, forward_s: 0.2,"
            " backward_s: 0.2}\n")
    with pytest.raises(ProfileError, match=r"t\.yaml: duplicate key 'forward_s' \(lines 2 and 2\)"):
        parse_yaml(text, "t.yaml")


def test_same_key_in_different_mappings_and_merge_keys_are_fine():
    data = load_yaml("a: {x: 1}\nb: {x: 2}\nbase: &b {y: 1}\nc:\n  <<: *b\n  y: 2\n", "ok.yaml")
    assert data == {"a": {"x": 1}, "b": {"x": 2}, "base": {"y": 1}, "c": {"y": 2}}


def test_misspelt_required_key_is_named_with_a_suggestion(tmp_path):
    path = _edited(ROOT / "clusters" / "fasop-a10.yaml", tmp_path / "typo.yaml",
                   "num_nodes_available: 8", "num_node_available: 8")
    with pytest.raises(SpecError) as err:
        load_cluster(str(path))
    msg = str(err.value)
    assert "\n" not in msg
    assert msg.startswith(f"{path}: node_types[0].num_node_available = 8: unknown key (did you mean "
                          "num_nodes_available?)")


def test_unknown_key_alone_gets_a_suggestion_from_the_valid_keys(tmp_path):
    path = _edited(ROOT / "models" / "gpt2-xl.yaml", tmp_path / "m.yaml", "  train_tokens:", "  global_bach: 8\n  train_tokens:")
    with pytest.raises(SpecError, match=r"global_bach = 8: unknown key \(did you mean global_batch_size\?\)"):
        load_model(str(path))


def test_scientific_notation_for_an_integer_count(tmp_path):
    path = _edited(ROOT / "models" / "gpt2-xl.yaml", tmp_path / "m.yaml", "train_tokens: 157286400000",
                   "train_tokens: 2e10")
    assert load_model(str(path)).default_job.train_tokens == 20_000_000_000
    bad = _edited(ROOT / "models" / "gpt2-xl.yaml", tmp_path / "b.yaml", "train_tokens: 157286400000",
                  "train_tokens: 2.5e-1")
    with pytest.raises(SpecError, match=r"train_tokens = 0\.25: .*integer"):
        load_model(str(bad))
