"""Session set-up shared by every test module."""

import os

import pytest

# rich lays tables and panels out to the terminal's width, and under pytest that width depends on how the tests run
# (in one process or in xdist workers: 80 columns there, which cut the solve panel's plan line). Tests read those
# outputs, so they run at one generous width; a test of the width itself clears COLUMNS for its subprocess.
os.environ.setdefault("COLUMNS", "200")


@pytest.fixture
def toy(tmp_path):
    """Paths of the valid toy model and cluster of test_cli_errors (shared by the CLI tests)."""
    from test_cli_errors import TOY_CLUSTER, TOY_MODEL, write_yaml

    return write_yaml(tmp_path / "toy-model.yaml", TOY_MODEL), write_yaml(tmp_path / "toy-cluster.yaml", TOY_CLUSTER)
