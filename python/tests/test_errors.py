# Errors from Python carry the text the `uvflow` command prints on stderr for the same pipeline,
# and its exit code.
import os
import subprocess
import sys

import pytest

import uvflow
from conftest import ROOT, run_cli

DIRTY = ROOT / "pipelines" / "dirty_image.yaml"


def same_as_cli(error, cli_args, code):
    rc, _, err = run_cli(*cli_args)
    assert rc == code == error.exit_code
    assert str(error) + "\n" == err


def test_invalid_pipeline(tmp_path):
    bad = tmp_path / "bad.yaml"
    bad.write_text(DIRTY.read_text().replace("type: uvw.w_sort", "type: uvw.w_srt").replace("oversample: 4", "oversample: 99"))
    with pytest.raises(uvflow.ConfigError) as e:
        uvflow.Pipeline(bad).check()
    assert "unknown stage type 'uvw.w_srt'" in str(e.value) and "2 errors; nothing was run" in str(e.value)
    same_as_cli(e.value, ["check", bad], 3)
    with pytest.raises(uvflow.ConfigError) as e:
        uvflow.Pipeline.from_string(bad.read_text(), name=str(bad)).run()
    same_as_cli(e.value, ["run", bad], 3)


def test_bad_override():
    with pytest.raises(uvflow.ConfigError) as e:
        uvflow.Pipeline(DIRTY, overrides={"vars.npx": 256}).run()
    assert "--set vars.npx=256" in str(e.value) and "did you mean 'npix'" in str(e.value)
    same_as_cli(e.value, ["run", DIRTY, "--set", "vars.npx=256"], 3)


def test_arrays_missing_when_run(tmp_path):
    """A pipeline for a program run without its arrays: the same input error from both."""
    yaml = tmp_path / "arrays.yaml"
    yaml.write_text("""schema: uvflow/1
name: arrays
stages:
  - {id: frames, type: io.image_arrays, params: {name: frames}}
  - {id: fits, type: io.write_fits, params: {path: "%s/f_{index}.fits"}, in: {image: frames.frames}}
""" % tmp_path)
    assert uvflow.Pipeline(yaml).check()["stages"] == 2  # nothing handed in yet: not an error to check
    with pytest.raises(uvflow.Error) as e:
        uvflow.Pipeline(yaml).run()
    assert "no images were handed in under the name 'frames'" in str(e.value)
    same_as_cli(e.value, ["run", "-q", yaml], 4)


def test_unknown_stage_type_to_describe():
    with pytest.raises(uvflow.UsageError) as e:
        uvflow.describe("grid.tild")
    assert str(e.value) == "error: unknown stage type 'grid.tild' (did you mean 'grid.tiled'?)"
    same_as_cli(e.value, ["describe", "grid.tild"], 2)


def test_stages_and_describe_are_the_commands():
    rc, out, _ = run_cli("describe", "grid.tiled")
    assert rc == 0 and uvflow.describe("grid.tiled") == out
    types = [s["type"] for s in uvflow.stages()]
    assert "grid.tiled" in types and "io.vis_arrays" in types and "io.collect" in types
    tiled = next(s for s in uvflow.stages() if s["type"] == "grid.tiled")
    assert tiled["backends"] == ["cpu", "cuda"] and ("buckets", "TileBuckets", "stream") in tiled["inputs"]


def test_ctrl_c_cancels_a_run_as_in_the_command(tmp_path):
    """SIGINT during a run: uvflow.Interrupted (a KeyboardInterrupt too), the command's text and
    exit code, nothing written; Python's own handler is back afterwards."""
    import os
    import signal
    import subprocess
    import threading
    import time

    yaml = tmp_path / "busy.yaml"
    yaml.write_text("""schema: uvflow/1
name: busy
stages:
  - {id: frames, type: io.simulate_frames, params: {width: 813, height: 5271, count: 400}}
  - {id: fits, type: io.write_fits, params: {path: "%s/f_{index}.fits"}, in: {image: frames}}
""" % tmp_path)
    handler = signal.getsignal(signal.SIGINT)
    timer = threading.Timer(0.5, lambda: os.kill(os.getpid(), signal.SIGINT))
    timer.start()
    with pytest.raises(uvflow.Interrupted) as e:
        uvflow.Pipeline(yaml).run()
    timer.join()
    assert isinstance(e.value, KeyboardInterrupt) and e.value.exit_code == 130
    assert signal.getsignal(signal.SIGINT) is handler
    assert not list(tmp_path.glob("*.fits"))
    from conftest import CLI
    p = subprocess.Popen([CLI, "run", "-q", str(yaml)], cwd=ROOT, stderr=subprocess.PIPE, text=True)
    time.sleep(0.5)
    p.send_signal(signal.SIGINT)
    err = p.communicate()[1]
    assert p.returncode == 130 and err == str(e.value) + "\n"


def test_importing_asks_cuda_for_eager_module_loading_unless_set():
    # The process environment, not os.environ (a copy made at start): read through the C library.
    # A fresh interpreter each time, since the variable is set when the module is first imported.
    code = "import ctypes, uvflow; v = ctypes.CDLL(None).getenv; v.restype = ctypes.c_char_p; print(v(b'CUDA_MODULE_LOADING'))"
    env = {k: v for k, v in os.environ.items() if k != "CUDA_MODULE_LOADING"}
    out = subprocess.run([sys.executable, "-c", code], env=env, capture_output=True, text=True, check=True).stdout
    assert out.strip() == ("b'EAGER'" if uvflow.cuda_compiled() else "None")
    env["CUDA_MODULE_LOADING"] = "LAZY"
    out = subprocess.run([sys.executable, "-c", code], env=env, capture_output=True, text=True, check=True).stdout
    assert out.strip() == "b'LAZY'"
