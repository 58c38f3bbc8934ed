#!/usr/bin/python3
"""Compare FITS images: mpi_compare.py REFERENCE REORDERED OTHER...

REORDERED is REFERENCE's pipeline run again in one process with the same sums in another order
(other block sizes): float summation order alone moves its pixels by some amount. Each OTHER (the
MPI runs) must differ from REFERENCE by no more than 3 times that, in the largest pixel difference
relative to the peak and in the rms difference relative to the rms (each bound at least 1e-6).
Prints every difference; exits 1 on a mismatch."""
import sys

import numpy as np
from astropy.io import fits


def load(path):
    return fits.getdata(path).astype(np.float64)


def diff(a, b):
    d = b - a
    return np.max(np.abs(d)) / np.max(np.abs(a)), np.sqrt(np.mean(d**2)) / np.sqrt(np.mean(a**2))


ref = load(sys.argv[1])
if not np.max(np.abs(ref)) > 0:
    sys.exit(f"{sys.argv[1]}: the reference image is all zero")
order_max, order_rms = diff(ref, load(sys.argv[2]))
tol_max, tol_rms = max(3 * order_max, 1e-6), max(3 * order_rms, 1e-6)
print(f"{sys.argv[2]} (summation order): max |diff| / max |ref| = {order_max:.3g}, rms(diff) / rms(ref) = "
      f"{order_rms:.3g}; bounds {tol_max:.3g}, {tol_rms:.3g}")
bad = 0
for path in sys.argv[3:]:
    img = load(path)
    if img.shape != ref.shape:
        print(f"{path}: shape {img.shape}, the reference's is {ref.shape}")
        bad += 1
        continue
    rel_max, rel_rms = diff(ref, img)
    ok = rel_max <= tol_max and rel_rms <= tol_rms
    print(f"{path}: max |diff| / max |ref| = {rel_max:.3g}, rms(diff) / rms(ref) = {rel_rms:.3g} "
          f"({'ok' if ok else 'above the bounds'})")
    bad += not ok
sys.exit(1 if bad else 0)
