# Shared by the Python tests: the source root (pipelines are named from it), the `uvflow` command
# they compare with, and the `gpu` marker (ctest runs `-m gpu` as python_gpu, the rest as python_cpu).
import os
import pathlib
import subprocess

import pytest

ROOT = pathlib.Path(__file__).resolve().parents[2]
CLI = os.environ.get("UVFLOW_CLI", str(ROOT / "build" / "uvflow"))


def pytest_configure(config):
    config.addinivalue_line("markers", "gpu: needs a CUDA device (skips without one)")


@pytest.fixture
def root():
    return ROOT


def run_cli(*args, cwd=ROOT):
    """The `uvflow` command: (exit code, stdout, stderr)."""
    p = subprocess.run([CLI, *map(str, args)], cwd=cwd, capture_output=True, text=True)
    return p.returncode, p.stdout, p.stderr
