# Device arrays in and out without a host copy: uvflow.DeviceArray (no CuPy needed) and CuPy when
# it is installed. On the H100: ctest -L gpu -R python (or pytest -m gpu); they skip without a GPU.
import numpy as np
import pytest

import uvflow

pytestmark = pytest.mark.gpu
needs_gpu = pytest.mark.skipif(uvflow.device_count() == 0, reason="no CUDA device (or uvflow built without CUDA)")

YAML = """schema: uvflow/1
name: frames_on_gpu
stages:
  - {id: frames, type: io.image_arrays, backend: %s, params: {name: frames}}
  - {id: raw, type: io.collect, params: {name: raw}, in: {data: frames.frames}}
  - {id: gain, type: image.column_gain, backend: %s, params: {source: linear, gain: 1.5, slope: 0.01}, in: {frame: frames.frames}}
  - {id: keep, type: io.collect, params: {name: out}, in: {data: gain}}
"""


def frames(seed=11):
    return np.random.default_rng(seed).uniform(0, 100, (3, 96, 160)).astype(np.float32)


def bytes_moved(report):
    return sum(s["bytes_h2d"] + s["bytes_d2h"] for s in report["stages"])


def cpu_reference(f):
    result = uvflow.Pipeline.from_string(YAML % ("cpu", "cpu")).run(inputs={"frames": f})
    return [np.asarray(i) for i in result["out"]]


@needs_gpu
def test_device_arrays_in_and_out_with_no_copy():
    f = frames()
    dev = uvflow.DeviceArray.from_host(f)
    result = uvflow.Pipeline.from_string(YAML % ("cuda", "cuda")).run(inputs={"frames": dev})
    report = result.report
    assert not any(s["inserted"] for s in report["stages"])  # no transfer.to_host / to_device
    assert bytes_moved(report) == 0
    out, raw = result["out"], result["raw"]
    assert all(i.location == "device" for i in out + raw)
    # The frames the source emitted are the device array itself, frame by frame.
    base = dev.__cuda_array_interface__["data"][0]
    assert [r.__cuda_array_interface__["data"][0] - base for r in raw] == [i * 96 * 160 * 4 for i in range(3)]
    for got, want in zip(out, cpu_reference(f)):
        assert np.array_equal(uvflow.to_host(got), want)
    with pytest.raises(ValueError, match="device memory"):
        np.asarray(out[0])


@needs_gpu
def test_host_arrays_into_a_cuda_source_are_uploaded_and_counted():
    f = frames(12)
    result = uvflow.Pipeline.from_string(YAML % ("cuda", "cuda")).run(inputs={"frames": f})
    assert result.stage("frames")["bytes_h2d"] == f.nbytes
    assert not any(s["inserted"] for s in result.report["stages"])
    for got, want in zip(result["out"], cpu_reference(f)):
        assert np.array_equal(uvflow.to_host(got), want)


@needs_gpu
def test_cupy_round_trip():
    cp = pytest.importorskip("cupy")
    f = frames(13)
    result = uvflow.Pipeline.from_string(YAML % ("cuda", "cuda")).run(inputs={"frames": cp.asarray(f)})
    assert bytes_moved(result.report) == 0 and not any(s["inserted"] for s in result.report["stages"])
    out = [cp.asarray(i) for i in result["out"]]
    assert isinstance(out[0], cp.ndarray)
    for got, want in zip(out, cpu_reference(f)):
        assert np.array_equal(cp.asnumpy(got), want)


@pytest.mark.skipif(uvflow.device_count() > 0, reason="a CUDA device is here")
def test_device_arrays_need_a_device():
    with pytest.raises(ValueError, match="(no CUDA device here|built without CUDA)"):
        uvflow.DeviceArray.from_host(frames())
    with pytest.raises(uvflow.ConfigError, match="cuda"):
        uvflow.Pipeline.from_string(YAML % ("cuda", "cuda")).run(inputs={"frames": frames()})
