#!/usr/bin/python3
"""Compare FITS images: mpi_compare.py BOUND REFERENCE OTHER...

Each OTHER (an MPI run) may differ from REFERENCE (one process) by at most BOUND times the
reference's peak in every pixel. Prints every difference (also the rms difference relative to the
reference's rms); exits 1 on a mismatch."""
import pathlib
import sys

import numpy as np

try:
    from astropy.io import fits
except ImportError:  # the GPU machine has numpy alone: bench's reader of uvflow's own images
    fits = None
    sys.path.insert(0, str(pathlib.Path(__file__).resolve().parent.parent / "bench"))
    from fits_numpy import read_fits


def load(path):
    return fits.getdata(path).astype(np.float64) if fits else read_fits(path)[1]


bound = float(sys.argv[1])
ref = load(sys.argv[2])
peak = np.max(np.abs(ref))
if not peak > 0:
    sys.exit(f"{sys.argv[2]}: the reference image is all zero")
bad = 0
for path in sys.argv[3:]:
    img = load(path)
    if img.shape != ref.shape:
        print(f"{path}: shape {img.shape}, the reference's is {ref.shape}")
        bad += 1
        continue
    d = img - ref
    rel_max, rel_rms = np.max(np.abs(d)) / peak, np.sqrt(np.mean(d**2)) / np.sqrt(np.mean(ref**2))
    ok = rel_max <= bound
    print(f"{path}: max |diff| / max |ref| = {rel_max:.3g} (bound {bound:.3g}: {'ok' if ok else 'above'}), "
          f"rms(diff) / rms(ref) = {rel_rms:.3g}")
    bad += not ok
sys.exit(1 if bad else 0)
