# Arrays in (io.vis_arrays, io.image_arrays) and results out (io.collect), against independent
# NumPy references: a direct DFT for imaging and for prediction, a column product for frames.
import os

import numpy as np
import pytest

import uvflow

C = 299792458.0
ARCSEC = np.pi / 180 / 3600
# A fixed seed, and a fresh one each run (printed, to reproduce a failure).
SEEDS = [1, int.from_bytes(os.urandom(4), "little")]

IMAGING = """schema: uvflow/1
name: arrays_dirty
stages:
  - {id: vis, type: io.vis_arrays, params: {name: obs, rows_per_block: 700}}
  - {id: kernels, type: kernels.wproj, params: {image_size: 128, cell_arcsec: 60, oversample: 8}, in: {info: vis}}
  - {id: sort, type: uvw.w_sort, in: {vis: vis, kernels: kernels}}
  - {id: box, type: uvw.bounding_box, in: {vis: sort}}
  - {id: count, type: tiles.count, params: {tile_u: 32, tile_v: 32}, in: {vis: sort, box: box}}
  - {id: buckets, type: tiles.bucket_sort, in: {vis: sort, counts: count}}
  - {id: grid, type: grid.tiled, in: {buckets: buckets, kernels: kernels}}
  - {id: image, type: fft.grid_to_image, in: {grid: grid}}
  - {id: corr, type: image.grid_correct, in: {image: image, kernels: kernels}}
  - {id: keep, type: io.collect, params: {name: dirty}, in: {data: corr}}
"""


def observation(seed, rows=2000, freq=(150e6, 151e6)):
    rng = np.random.default_rng(seed)
    uvw = np.column_stack([rng.uniform(-800, 800, rows), rng.uniform(-800, 800, rows), rng.uniform(-40, 40, rows)])
    return uvw, np.asarray(freq), rng


def lmn(dx, dy, cell):
    l, m = -dx * cell, dy * cell
    return l, m, np.sqrt(1 - l * l - m * m) - 1


def point_source_vis(uvw, freq, dx, dy, cell, flux=1.0):
    """V = S exp(+2 pi i (u l + v m + w (n - 1))) per row and channel (uvw in wavelengths)."""
    l, m, n1 = lmn(dx, dy, cell)
    s = freq[None, :] / C
    u, v, w = (uvw[:, k, None] * s for k in range(3))
    return (flux * np.exp(2j * np.pi * (u * l + v * m + w * n1))).astype(np.complex64)


def dft_pixel(uvw, freq, vis, weight, x, y, npix, cell):
    """The dirty image at pixel (x, y), as tests/support/dft.cpp defines it."""
    half = npix // 2
    l, m = (half - x) * cell, (y - half) * cell
    n1 = np.sqrt(1 - l * l - m * m) - 1
    s = freq[None, :] / C
    u, v, w = (uvw[:, k, None] * s for k in range(3))
    phase = 2 * np.pi * (u * l + v * m + w * n1)
    return float(np.sum(weight * (vis * np.exp(-1j * phase)).real) / np.sum(weight))


@pytest.mark.parametrize("seed", SEEDS)
def test_dirty_image_from_numpy_matches_a_direct_dft(seed):
    print("seed", seed)
    cell, npix, dx, dy = 60 * ARCSEC, 128, 7, -4
    uvw, freq, rng = observation(seed)
    vis = point_source_vis(uvw, freq, dx, dy, cell)
    weight = rng.uniform(0.5, 1.5, vis.shape).astype(np.float32)
    result = uvflow.Pipeline.from_string(IMAGING).run(
        inputs={"obs": {"uvw": uvw, "vis": vis, "weight": weight, "freq": freq, "ra_deg": 30.0, "dec_deg": -40.0}})
    img = result["dirty"]
    assert img.shape == (npix, npix) and img.has_wcs
    data = np.asarray(img)
    x0, y0 = npix // 2 + dx, npix // 2 + dy
    assert np.unravel_index(np.argmax(data), data.shape) == (y0, x0)
    for x, y in [(x0, y0), (x0 + 1, y0), (x0, y0 - 2), (npix // 2, npix // 2), (20, 100)]:
        assert data[y, x] == pytest.approx(dft_pixel(uvw, freq, vis, weight, x, y, npix, cell), abs=5e-3), (x, y)
    assert img.header["CRVAL1"] == pytest.approx(30.0) and img.header["CRVAL2"] == pytest.approx(-40.0)
    assert result.stage("vis")["items_out"] == 1 + 3  # the info, and 2000 rows in blocks of 700


COLLECT_VIS = """schema: uvflow/1
name: vis_through
stages:
  - {id: vis, type: io.vis_arrays, params: {name: obs}}
  - {id: keep, type: io.collect, params: {name: vis}, in: {data: vis.vis}}
"""


def test_visibilities_are_used_in_place_unless_flagged():
    uvw, freq, rng = observation(3, rows=50)
    vis = (rng.normal(size=(50, 2)) + 1j * rng.normal(size=(50, 2))).astype(np.complex64)
    weight = np.ones((50, 2), np.float32)
    p = uvflow.Pipeline.from_string(COLLECT_VIS)
    out = p.run(inputs={"obs": {"uvw": uvw, "vis": vis, "weight": weight, "freq": freq}})["vis"]
    assert np.shares_memory(out["vis"], vis) and np.shares_memory(out["weight"], weight)
    assert np.array_equal(out["vis"], vis.ravel())
    assert np.allclose(out["uu"], (uvw[:, 0, None] * freq / C).ravel(), rtol=1e-6)
    assert np.array_equal(out["channel"], np.tile([0, 1], 50))
    # complex128 is converted (a copy); flags drop visibilities (a copy).
    out = p.run(inputs={"obs": {"uvw": uvw, "vis": vis.astype(np.complex128), "freq": freq}})["vis"]
    assert not np.shares_memory(out["vis"], vis) and np.array_equal(out["vis"], vis.ravel())
    flag = np.zeros((50, 2), bool)
    flag[::3, 1] = True
    out = p.run(inputs={"obs": {"uvw": uvw, "vis": vis, "freq": freq, "flag": flag}})["vis"]
    assert len(out["vis"]) == 100 - flag.sum() and np.array_equal(out["vis"], vis[~flag])


def test_unflagged_nan_is_an_input_error():
    uvw, freq, _ = observation(4, rows=10)
    vis = np.ones((10, 2), np.complex64)
    vis[3, 1] = np.nan
    with pytest.raises(uvflow.StageError, match="row 3, channel 1: uvw, vis or weight is not finite") as e:
        uvflow.Pipeline.from_string(COLLECT_VIS).run(inputs={"obs": {"uvw": uvw, "vis": vis, "freq": freq}})
    assert e.value.exit_code == 4
    flag = np.zeros((10, 2), bool)
    flag[3, 1] = True
    uvflow.Pipeline.from_string(COLLECT_VIS).run(inputs={"obs": {"uvw": uvw, "vis": vis, "freq": freq, "flag": flag}})


PREDICT = """schema: uvflow/1
name: arrays_predict
stages:
  - {id: vis, type: io.vis_arrays, params: {name: obs}}
  - id: kernels
    type: kernels.wproj
    params: {image_size: 128, cell_arcsec: 60, oversample: 16, padding: 2.0, w_planes: 64}
    in: {info: vis}
  - {id: model, type: io.image_arrays, params: {name: model}}
  - {id: corr, type: image.grid_correct, in: {image: model.image, kernels: kernels}}
  - {id: grid, type: fft.image_to_grid, in: {image: corr, kernels: kernels}}
  - {id: predict, type: degrid.wproj, params: {kernel_lookup: linear}, in: {vis: vis, grid: grid, kernels: kernels}}
  - {id: keep, type: io.collect, params: {name: model_vis}, in: {data: predict}}
"""


@pytest.mark.parametrize("seed", SEEDS)
def test_predicted_visibilities_match_a_direct_dft(seed):
    print("seed", seed)
    cell, npix = 60 * ARCSEC, 128
    uvw, freq, _ = observation(seed, rows=600)
    model = np.zeros((npix, npix), np.float32)
    sources = [(5, 3, 2.0), (-10, 8, 0.5)]
    for dx, dy, flux in sources:
        model[npix // 2 + dy, npix // 2 + dx] = flux
    header = {"CRVAL1": 30.0, "CRVAL2": -40.0, "CDELT1": -60 / 3600, "CDELT2": 60 / 3600, "CRVAL3": 150.5e6,
              "CRPIX1": npix // 2 + 1, "CRPIX2": npix // 2 + 1}
    result = uvflow.Pipeline.from_string(PREDICT).run(inputs={
        "obs": {"uvw": uvw, "vis": np.zeros((600, 2), np.complex64), "freq": freq, "ra_deg": 30.0, "dec_deg": -40.0},
        "model": (model, header)})
    out = result["model_vis"]
    u, v, w = (out[k].astype(np.float64) for k in ("uu", "vv", "ww"))
    expect = np.zeros(len(u), np.complex128)
    for dx, dy, flux in sources:
        l, m, n1 = lmn(dx, dy, cell)
        expect += flux * np.exp(2j * np.pi * (u * l + v * m + w * n1))
    assert len(u) == 1200
    assert np.max(np.abs(out["vis"] - expect)) < 2e-3 * 2.5


def test_frames_in_place_and_through_a_stage():
    rng = np.random.default_rng(5)
    frames = rng.uniform(0, 100, (3, 40, 64)).astype(np.float32)
    yaml = """schema: uvflow/1
name: frames
stages:
  - {id: frames, type: io.image_arrays, params: {name: frames}}
  - {id: raw, type: io.collect, params: {name: raw}, in: {data: frames.frames}}
  - {id: gain, type: image.column_gain, params: {source: linear, gain: 1.5, slope: 0.01}, in: {frame: frames.frames}}
  - {id: keep, type: io.collect, params: {name: out}, in: {data: gain}}
"""
    result = uvflow.Pipeline.from_string(yaml).run(inputs={"frames": frames})
    raw, out = result["raw"], result["out"]
    assert [f.index for f in out] == [0, 1, 2]
    assert all(np.shares_memory(np.asarray(r), frames) for r in raw)
    gain = (1.5 + 0.01 * (np.arange(64) - 31.5)).astype(np.float32)
    for i in range(3):
        assert np.array_equal(np.asarray(out[i]), frames[i] * gain[None, :])
    # float64 frames are converted once.
    result = uvflow.Pipeline.from_string(yaml).run(inputs={"frames": frames.astype(np.float64)})
    assert np.array_equal(np.asarray(result["out"][1]), frames[1] * gain[None, :])


def test_an_image_with_a_header_keeps_its_wcs():
    yaml = """schema: uvflow/1
name: wcs
stages:
  - {id: img, type: io.image_arrays, params: {name: img}}
  - {id: keep, type: io.collect, params: {name: out}, in: {data: img.image}}
"""
    header = {"CRVAL1": 201.365, "CRVAL2": -43.019, "CDELT1": -1 / 3600, "CDELT2": 1 / 3600, "CRVAL3": 1.4e9,
              "BUNIT": "JY/PIXEL", "TELESCOP": "MeerKAT"}
    pixels = np.arange(64 * 64, dtype=np.float32).reshape(64, 64)
    out = uvflow.Pipeline.from_string(yaml).run(inputs={"img": (pixels, header)})["out"]
    h = out.header
    assert h["CTYPE1"] == "RA---SIN" and h["CRPIX1"] == 33 and h["CRVAL1"] == pytest.approx(201.365)
    assert h["CDELT2"] == pytest.approx(1 / 3600) and h["BUNIT"] == "JY/PIXEL" and h["TELESCOP"] == "MeerKAT"
    # Round trip: the image and its header go back in.
    again = uvflow.Pipeline.from_string(yaml).run(inputs={"img": out})["out"]
    assert np.array_equal(np.asarray(again), pixels) and again.header["CRVAL2"] == pytest.approx(-43.019)
    with pytest.raises(ValueError, match="CRPIX1 is 1"):
        uvflow.Pipeline.from_string(yaml).run(inputs={"img": (pixels, {**header, "CRPIX1": 1})})
