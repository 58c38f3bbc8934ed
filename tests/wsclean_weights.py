#!/usr/bin/python3
"""Dump the Stokes I imaging weights WSClean stored in a Measurement Set (wsclean
-store-imaging-weights writes IMAGING_WEIGHT_SPECTRUM), for tests/wsclean_test.cpp.

usage: wsclean_weights.py MS OUT

Writes OUT as little-endian float64: one value per visibility io.read_ms streams for stokes I, in
its order (row by row, channel by channel) and with its selection (XX and YY unflagged, FLAG_ROW
unset, both values finite, both weights positive), taken from the XX correlation (WSClean writes
the same Stokes I imaging weight to every correlation it images). Needs python3-casacore and numpy
(Debian's, for /usr/bin/python3).
"""
import sys

import numpy as np
from casacore import tables


def main(ms, out):
    with tables.table(ms, ack=False) as t:
        corr = tables.table(ms + "/POLARIZATION", ack=False).getcol("CORR_TYPE")[0]
        xx, yy = list(corr).index(9), list(corr).index(12)  # casacore Stokes codes for XX, YY
        flag = t.getcol("FLAG")
        keep = ~(flag[:, :, xx] | flag[:, :, yy] | t.getcol("FLAG_ROW")[:, None])
        data = t.getcol("DATA")
        keep &= np.isfinite(data[:, :, xx]) & np.isfinite(data[:, :, yy])
        if "WEIGHT_SPECTRUM" in t.colnames():
            weight = t.getcol("WEIGHT_SPECTRUM")
        else:
            weight = t.getcol("WEIGHT")[:, None, :]
        keep &= (weight[:, :, xx] > 0) & (weight[:, :, yy] > 0)
        imaging = t.getcol("IMAGING_WEIGHT_SPECTRUM")[:, :, xx]
    imaging[keep].astype("<f8").tofile(out)  # C order: row-major, then channel


if __name__ == "__main__":
    if len(sys.argv) != 3:
        sys.exit(__doc__)
    main(sys.argv[1], sys.argv[2])
