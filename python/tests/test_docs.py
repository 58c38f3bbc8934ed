# Every ```python example of docs/python.md runs as written (from the repository root).
import os
import re

import pytest

from conftest import ROOT

EXAMPLES = re.findall(r"```python\n(.*?)```", (ROOT / "docs" / "python.md").read_text(), re.S)


def test_the_three_examples_are_there():
    assert len(EXAMPLES) == 3


@pytest.mark.parametrize("code", EXAMPLES, ids=["dirty_image", "predict", "straylight"])
def test_example_runs(code, monkeypatch):
    monkeypatch.chdir(ROOT)
    exec(compile(code, "docs/python.md", "exec"), {"__name__": "docs_example"})
