# Stages written in Python, registered in the same registry as the built-in ones and used from YAML.
import threading

import numpy as np
import pytest

import uvflow
from conftest import run_cli


class Scale:
    """multiply each frame by a factor (a Python stage)"""

    def __init__(self, factor, offset=0.0):
        self.factor, self.offset = factor, offset
        self.threads = set()

    def process(self, inputs):
        frame = inputs["frame"]
        return {"frame": np.asarray(frame) * self.factor + self.offset}


class Total:
    """sum of every frame, emitted once at the end of the stream"""

    def __init__(self):
        self.total = None

    def process(self, inputs):
        a = np.asarray(inputs["frame"], dtype=np.float64)
        self.total = a if self.total is None else self.total + a
        return None

    def finish(self):
        return {"total": self.total.astype(np.float32)}


class Fails:
    def process(self, inputs):
        if inputs["frame"].index == 1:
            raise ValueError("frame 1 is not welcome")
        return {"frame": inputs["frame"]}


@pytest.fixture(scope="module", autouse=True)
def registered():
    uvflow.register_stage("py.scale", Scale, inputs={"frame": "Image"}, outputs={"frame": "Image"},
                          params={"factor": (float, None), "offset": 0.0})
    uvflow.register_stage("py.total", Total, inputs={"frame": "Image"}, outputs={"total": ("Image", "once")})
    uvflow.register_stage("py.fails", Fails, inputs={"frame": "Image"}, outputs={"frame": "Image"})


YAML = """schema: uvflow/1
name: python_stages
stages:
  - {id: frames, type: io.simulate_frames, params: {width: 48, height: 20, count: 4}}
  - {id: raw, type: io.collect, params: {name: raw}, in: {data: frames}}
  - {id: scale, type: py.scale, params: {factor: 2.5, offset: 1}, in: {frame: frames}}
  - {id: scaled, type: io.collect, params: {name: scaled}, in: {data: scale}}
  - {id: total, type: py.total, in: {frame: scale}}
  - {id: sum, type: io.collect, params: {name: total}, in: {data: total}}
"""


def test_a_python_stage_in_yaml():
    result = uvflow.Pipeline.from_string(YAML).run()
    raw, scaled = result["raw"], result["scaled"]
    assert [f.index for f in scaled] == [0, 1, 2, 3]
    for r, s in zip(raw, scaled):
        assert np.array_equal(np.asarray(s), (np.asarray(r) * np.float32(2.5) + 1).astype(np.float32))
    expect = sum(np.asarray(s, dtype=np.float64) for s in scaled).astype(np.float32)
    assert np.array_equal(np.asarray(result["total"]), expect)
    assert result.stage("scale")["items_in"] == 4 and result.stage("scale")["backend"] == "cpu"


def test_python_stages_are_listed_and_described():
    spec = next(s for s in uvflow.stages() if s["type"] == "py.scale")
    assert spec["summary"] == "multiply each frame by a factor (a Python stage)"
    assert ("factor", "number", None) in spec["params"] and ("offset", "number", 0.0) in spec["params"]
    assert "py.total" in uvflow.describe("py.total")
    with pytest.raises(ValueError, match="registered already"):
        uvflow.register_stage("py.scale", Scale, inputs={"frame": "Image"}, outputs={"frame": "Image"})


def test_parameters_are_checked_like_any_stage():
    with pytest.raises(uvflow.ConfigError) as e:
        uvflow.Pipeline.from_string(YAML.replace("factor: 2.5, offset: 1", "offset: x, fator: 2")).check()
    text = str(e.value)
    assert "unknown parameter 'fator'" in text and "missing required parameter 'factor'" in text
    assert "parameter 'offset' must be a number, got 'x'" in text


def test_an_exception_in_process_is_a_stage_error():
    yaml = YAML.replace("type: py.scale, params: {factor: 2.5, offset: 1}", "type: py.fails")
    with pytest.raises(uvflow.StageError) as e:
        uvflow.Pipeline.from_string(yaml).run()
    assert "'scale'" in str(e.value) and "ValueError: frame 1 is not welcome" in str(e.value)
    assert e.value.exit_code == 5


def test_the_command_does_not_know_python_stages(tmp_path):
    f = tmp_path / "p.yaml"
    f.write_text(YAML)
    rc, _, err = run_cli("check", f)
    assert rc == 3 and "unknown stage type 'py.scale'" in err


class Power:
    """weighted power of the visibilities, once at the end"""

    def __init__(self):
        self.power, self.blocks = 0.0, []

    def process(self, inputs):
        v = inputs["vis"]
        self.blocks.append(v["index"])
        self.power += float(np.sum(v["weight"] * np.abs(v["vis"]) ** 2))

    def finish(self):
        return {"power": np.array([[self.power]], np.float32)}


def test_a_python_stage_reads_visibility_blocks():
    uvflow.register_stage("py.power", Power, inputs={"vis": "VisBlock"}, outputs={"power": ("Image", "once")})
    rng = np.random.default_rng(8)
    vis = (rng.normal(size=(30, 2)) + 1j * rng.normal(size=(30, 2))).astype(np.complex64)
    weight = rng.uniform(0.5, 2, (30, 2)).astype(np.float32)
    yaml = """schema: uvflow/1
name: power
stages:
  - {id: vis, type: io.vis_arrays, params: {name: obs, rows_per_block: 7}}
  - {id: power, type: py.power, in: {vis: vis.vis}}
  - {id: keep, type: io.collect, params: {name: power}, in: {data: power}}
"""
    result = uvflow.Pipeline.from_string(yaml).run(inputs={"obs": {
        "uvw": rng.uniform(-100, 100, (30, 3)), "vis": vis, "weight": weight, "freq": [1e8, 2e8]}})
    expect = np.float32(np.sum(weight.astype(np.float64) * np.abs(vis.astype(np.complex128)) ** 2))
    assert np.asarray(result["power"])[0, 0] == pytest.approx(expect, rel=1e-6)
    assert result.stage("power")["items_in"] == 5  # ceil(30 / 7) blocks
