"""bench: what the scripts that image against WSClean share: running a command in the repository,
WSClean's wgridder dirty image (the reference) and the provenance of a result."""
import os
import subprocess
import sys
import time

import numpy as np
from astropy.io import fits

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))


def run(cmd):
    """Runs cmd in the repository root and returns its stdout and stderr together and the seconds it
    took; stops the script with the tail of its output if it fails."""
    t0 = time.monotonic()
    r = subprocess.run(cmd, cwd=ROOT, capture_output=True, text=True)
    if r.returncode != 0:
        sys.exit(f"failed ({r.returncode}): {' '.join(cmd)}\n{r.stdout[-3000:]}{r.stderr[-3000:]}")
    return r.stdout + r.stderr, time.monotonic() - t0


def wgridder(ms, npix, cell, weight, prefix, extra=()):
    """WSClean's dirty image of ms with the wgridder (-use-wgridder -no-small-inversion, 2 threads):
    npix^2 pixels of cell arcsec, weight the arguments of -weight (["briggs", "0"]), extra more
    options, files named prefix. Returns the image (float64) and the seconds wsclean took."""
    _, t = run(["wsclean", "-j", "2", "-niter", "0", "-size", str(npix), str(npix), "-scale", f"{cell}asec",
                "-weight", *weight, "-use-wgridder", "-no-small-inversion", *extra, "-name", prefix, ms])
    return fits.getdata(prefix + "-dirty.fits").squeeze().astype(np.float64), t


def provenance():
    """The commit (noting uncommitted changes to tracked files) and the CPU model, for a result's header."""
    def git(*args):
        return subprocess.run(["git", *args], cwd=ROOT, capture_output=True, text=True).stdout.strip()

    dirty = git("status", "--porcelain", "--untracked-files=no")
    cpu = next((l.split(":", 1)[1].strip() for l in open("/proc/cpuinfo") if l.startswith("model name")), "?")
    return f"{git('rev-parse', '--short', 'HEAD')}{' (with uncommitted changes)' if dirty else ''}", cpu
