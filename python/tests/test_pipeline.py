# Loading, overrides, checking and running pipelines from Python, against the `uvflow` command.
import pathlib

import numpy as np
import pytest
from astropy.io import fits

import uvflow
from conftest import ROOT, run_cli

DIRTY = ROOT / "pipelines" / "dirty_image.yaml"


def test_load_from_file_and_from_string_check_alike():
    a = uvflow.Pipeline(DIRTY).check()
    b = uvflow.Pipeline.from_string(DIRTY.read_text(), name="dirty.yaml").check()
    assert a["stages"] == b["stages"] == 11
    code, out, _ = run_cli("check", DIRTY)
    assert code == 0 and f"ok ({a['stages']} stages" in out


def test_overrides_reach_the_plan():
    p = uvflow.Pipeline(DIRTY, overrides={"vars.npix": 256, "grid.backend": "cuda"})
    plan = p.plan()
    assert "grid  grid.tiled [cuda]" in plan
    assert "256 x 256" in plan
    assert "grid  grid.tiled [cpu]" in uvflow.Pipeline(DIRTY).plan()
    dot = p.plan(dot=True)
    assert dot.startswith('digraph "dirty_image"')


def test_the_same_image_as_the_command_line(tmp_path):
    """pipelines/dirty_image.yaml (the small preset) run by the command and from Python, on one
    thread and on all: the FITS files are the same bytes (the gridders' sums do not depend on the
    thread count), and the report is a dict with every stage."""
    def sets(tag, threads):
        return {"fits.path": str(tmp_path / f"{tag}.fits"), "png.path": str(tmp_path / f"{tag}.png"),
                "run.report": str(tmp_path / f"{tag}.json"), "vis.preset": "small", "run.threads": threads}

    def cli(tag, threads):
        args = [a for k, v in sets(tag, threads).items() for a in ("--set", f"{k}={v}")]
        code, _, err = run_cli("run", "-q", DIRTY, *args)
        assert code == 0, err
        return (tmp_path / f"{tag}.fits").read_bytes()

    cli_bytes = cli("cli", 1)
    result = uvflow.Pipeline(DIRTY, overrides=sets("py", 1)).run()
    py_bytes = (tmp_path / "py.fits").read_bytes()
    assert len(cli_bytes) > 512 * 512 * 4
    assert py_bytes == cli_bytes
    r = result.report
    assert isinstance(r, dict) and r["pipeline"] == "dirty_image"
    assert [s["id"] for s in r["stages"]][0] == "vis"
    assert result.stage("grid")["items_in"] > 0
    assert str(tmp_path / "py.fits") in r["outputs"]

    assert cli("cli_all", 0) == cli_bytes
    uvflow.Pipeline(DIRTY, overrides=sets("py_all", 0)).run()
    assert (tmp_path / "py_all.fits").read_bytes() == cli_bytes


@pytest.mark.filterwarnings("ignore::astropy.wcs.FITSFixedWarning")  # MJD-OBS from DATE-OBS
def test_collected_image_is_the_fits_image_with_its_header(tmp_path):
    """io.collect added to the same pipeline: the array is the written FITS data and the header
    io.write_fits writes (astropy reads its WCS)."""
    text = DIRTY.read_text() + "  - {id: keep, type: io.collect, params: {name: dirty}, in: {data: corr}}\n"
    p = uvflow.Pipeline.from_string(text, name=str(DIRTY))
    p.set("fits.path", str(tmp_path / "d.fits")).set("png.path", str(tmp_path / "d.png"))
    result = p.set("run.report", str(tmp_path / "r.json")).run()
    img = result["dirty"]
    assert isinstance(img, uvflow.Image) and img.location == "host" and img.shape == (512, 512)
    with fits.open(tmp_path / "d.fits") as f:
        data, header = f[0].data, f[0].header
    assert np.array_equal(np.asarray(img), data[0, 0])
    h = img.header
    for key in ("CTYPE1", "CRVAL1", "CDELT1", "CRPIX1", "CTYPE2", "CRVAL2", "CDELT2", "CRVAL3", "BUNIT", "TELESCOP"):
        assert h[key] == (pytest.approx(header[key], rel=1e-14) if isinstance(h[key], float) else header[key]), key
    from astropy.wcs import WCS
    w = WCS(h).celestial
    ra, dec = w.wcs_pix2world([[256, 256]], 0)[0]
    assert ra == pytest.approx(header["CRVAL1"]) and dec == pytest.approx(header["CRVAL2"])
    assert not img.data.flags.writeable


def test_report_argument_writes_the_report(tmp_path):
    yaml = f"""schema: uvflow/1
name: frames
stages:
  - {{id: frames, type: io.simulate_frames, params: {{width: 32, height: 16, count: 3}}}}
  - {{id: keep, type: io.collect, params: {{name: frames}}, in: {{data: frames}}}}
"""
    result = uvflow.Pipeline.from_string(yaml).run(report=str(tmp_path / "r.json"))
    assert (tmp_path / "r.json").exists()
    assert result.stage("frames")["items_out"] == 3
    frames = result["frames"]
    assert [f.index for f in frames] == [0, 1, 2] and frames[0].shape == (16, 32) and not frames[0].has_wcs


def test_gil_is_released_while_a_pipeline_runs():
    """Another Python thread runs while the pipeline computes."""
    import threading
    import time

    ticks = []
    done = threading.Event()

    def tick():
        while not done.is_set():
            ticks.append(1)
            time.sleep(0.001)

    t = threading.Thread(target=tick)
    yaml = """schema: uvflow/1
name: busy
stages:
  - {id: frames, type: io.simulate_frames, params: {width: 813, height: 2000, count: 12}}
  - {id: keep, type: io.collect, params: {name: f}, in: {data: frames}}
"""
    p = uvflow.Pipeline.from_string(yaml)
    t.start()
    time.sleep(0.05)
    before = len(ticks)
    start = time.monotonic()
    p.run()
    elapsed = time.monotonic() - start
    after = len(ticks)
    done.set()
    t.join()
    # A thread sleeping 1 ms per tick gets many ticks in while the run holds no GIL.
    assert elapsed > 0.05 and after - before > 10
