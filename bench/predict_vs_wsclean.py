#!/usr/bin/python3
"""uvflow's pipelines/predict.yaml against `wsclean -predict` (its default w-stacking gridder and
-use-wgridder -no-small-inversion), all three against the same direct DFT of the model's pixels.

Makes a Measurement Set with pipelines/simulate_to_ms.yaml, a model image of point sources on
pixel centres within the inner 80 % of the field (the header io.write_fits and WSClean write:
RA---SIN/DEC--SIN, phase centre at pixel N/2+1, CDELT1 < 0), predicts MODEL_DATA into three copies
of the set, and compares each with V = sum S exp(+2 pi i (u l + v m + w (n - 1))) evaluated in
double precision from the set's UVW (metres, antenna2 - antenna1) and CHAN_FREQ, l = (N/2 - x)
cell, m = (y - N/2) cell. Error: relative RMS over every row and channel of XX (YY is checked to be
the same, the cross hands 0).

  /usr/bin/python3 bench/predict_vs_wsclean.py [--uvflow build/uvflow] [--preset tiny] [--seed 1]

Debian's python3-casacore, numpy and astropy (/usr/bin/python3); wsclean on the PATH.
"""
import argparse
import os
import shutil
import subprocess
import sys
import tempfile
import time

import numpy as np
from astropy.io import fits
from casacore.tables import table

C = 299792458.0


def run(cmd, log):
    t0 = time.time()
    with open(log, "w") as f:
        r = subprocess.run(cmd, stdout=f, stderr=subprocess.STDOUT)
    if r.returncode != 0:
        sys.exit(f"failed ({r.returncode}): {' '.join(cmd)}; see {log}")
    return time.time() - t0


def write_model(path, n, cell_deg, ra_deg, dec_deg, freq_hz, sources):
    img = np.zeros((1, 1, n, n), dtype=np.float32)
    for x, y, s in sources:
        img[0, 0, y, x] += s
    h = fits.Header()
    h["BUNIT"] = "JY/PIXEL"
    for k, (ctype, crpix, crval, cdelt) in enumerate(
        [("RA---SIN", n // 2 + 1, ra_deg % 360, -cell_deg), ("DEC--SIN", n // 2 + 1, dec_deg, cell_deg),
         ("FREQ", 1, freq_hz, 1.0), ("STOKES", 1, 1, 1)], start=1):
        h[f"CTYPE{k}"], h[f"CRPIX{k}"], h[f"CRVAL{k}"], h[f"CDELT{k}"] = ctype, crpix, crval, cdelt
    h["CUNIT1"] = h["CUNIT2"] = "deg"
    h["EQUINOX"], h["RADESYS"] = 2000.0, "FK5"
    fits.PrimaryHDU(img, header=h).writeto(path, overwrite=True)


def dft(ms, n, cell_rad, sources):
    t = table(ms, ack=False)
    uvw = t.getcol("UVW")
    t.close()
    freq = table(ms + "/SPECTRAL_WINDOW", ack=False).getcol("CHAN_FREQ")[0]
    u, v, w = (uvw[:, k, None] * freq[None, :] / C for k in range(3))
    out = np.zeros(u.shape, dtype=np.complex128)
    for x, y, s in sources:
        l, m = (n // 2 - x) * cell_rad, (y - n // 2) * cell_rad
        out += s * np.exp(2j * np.pi * (u * l + v * m + w * (np.sqrt(1 - l * l - m * m) - 1)))
    return out  # [row, channel]


def error(ms, ref):
    t = table(ms, ack=False)
    model = t.getcol("MODEL_DATA")  # [row, channel, correlation]
    t.close()
    xx, yy = model[:, :, 0], model[:, :, -1]
    cross = np.abs(model[:, :, 1:-1]).max() if model.shape[2] > 2 else 0.0
    rel = lambda a: float(np.sqrt(np.sum(np.abs(a - ref) ** 2) / np.sum(np.abs(ref) ** 2)))
    return rel(xx), rel(yy), float(cross)


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    root = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
    ap.add_argument("--uvflow", default=os.path.join(root, "build", "uvflow"))
    ap.add_argument("--pipeline", default=os.path.join(root, "pipelines", "predict.yaml"))
    ap.add_argument("--preset", default="tiny")
    ap.add_argument("--npix", type=int, default=512)
    ap.add_argument("--cell-arcsec", type=float, default=100.0)
    ap.add_argument("--sources", type=int, default=8)
    ap.add_argument("--seed", type=int, default=1)
    ap.add_argument("--keep", help="work in this folder and keep it")
    a = ap.parse_args()

    work = a.keep or tempfile.mkdtemp(prefix="predict-vs-wsclean-")
    os.makedirs(work, exist_ok=True)
    ms = os.path.join(work, "sim.ms")
    shutil.rmtree(ms, ignore_errors=True)
    run([a.uvflow, "run", os.path.join(root, "pipelines", "simulate_to_ms.yaml"), "-q", "--set", f"ms.path={ms}",
         "--set", f"vis.preset={a.preset}"], os.path.join(work, "simulate.log"))
    field = table(ms + "/FIELD", ack=False).getcol("PHASE_DIR")[0, 0]
    freq = table(ms + "/SPECTRAL_WINDOW", ack=False).getcol("CHAN_FREQ")[0]

    n, cell_rad = a.npix, np.deg2rad(a.cell_arcsec / 3600)
    rng = np.random.default_rng(a.seed)
    lo, hi = int(0.1 * n), int(0.9 * n)
    sources = [(int(rng.integers(lo, hi)), int(rng.integers(lo, hi)), float(rng.uniform(0.1, 2))) for _ in range(a.sources)]
    model = os.path.join(work, "model-model.fits")
    write_model(model, n, a.cell_arcsec / 3600, np.rad2deg(field[0]), np.rad2deg(field[1]), float(freq.mean()), sources)
    ref = dft(ms, n, cell_rad, sources)

    results = []
    for name, cmd in [
        ("uvflow (predict.yaml)", lambda m: [a.uvflow, "run", a.pipeline, "-q",
                                             "--set", f"vars.ms={m}", "--set", f"vars.model={model}",
                                             "--set", f"vars.npix={n}", "--set", f"vars.cell_arcsec={a.cell_arcsec}",
                                             "--set", f"run.report={m}.report.json"]),
        ("wsclean -predict (default: w-stacking)",
         lambda m: ["wsclean", "-quiet", "-predict", "-name", os.path.join(work, "model"), "-size", str(n), str(n),
                    "-scale", f"{a.cell_arcsec}asec", m]),
        ("wsclean -predict -use-wgridder -no-small-inversion",
         lambda m: ["wsclean", "-quiet", "-predict", "-use-wgridder", "-no-small-inversion", "-name",
                    os.path.join(work, "model"), "-size", str(n), str(n), "-scale", f"{a.cell_arcsec}asec", m]),
    ]:
        copy = os.path.join(work, f"copy{len(results)}.ms")
        shutil.rmtree(copy, ignore_errors=True)
        shutil.copytree(ms, copy)
        secs = run(cmd(copy), copy + ".log")
        results.append((name, *error(copy, ref), secs))

    rows = table(ms, ack=False).nrows()
    print(f"{a.preset} preset: {rows} rows x {len(freq)} channels, model {n}^2 pixels of {a.cell_arcsec} arcsec, "
          f"{a.sources} point sources on pixel centres in the inner 80 % (seed {a.seed})")
    print("| predictor | relative RMS error (XX) | YY | max abs cross hands | wall s |")
    print("|---|---|---|---|---|")
    for name, xx, yy, cross, secs in results:
        print(f"| {name} | {xx:.3g} | {yy:.3g} | {cross:.2g} | {secs:.1f} |")
    if not a.keep:
        shutil.rmtree(work)


if __name__ == "__main__":
    main()
