"""bench: the first image plane and the header keys of a FITS file, with numpy alone (no astropy here)."""
import numpy as np


def read_fits(path):
    raw = open(path, "rb").read()
    header, i = {}, 0
    while True:
        card = raw[i:i + 80].decode("ascii")
        i += 80
        key = card[:8].strip()
        if card[8:10] == "= ":
            value = card[10:]
            if value.lstrip().startswith("'"):  # a string: up to its closing quote
                value = value.split("'")[1].strip()
            else:
                value = value.split("/")[0].strip()
            header[key] = value
        if key == "END":
            break
    i = (i + 2879) // 2880 * 2880
    nx, ny, bitpix = int(header["NAXIS1"]), int(header["NAXIS2"]), int(header["BITPIX"])
    dtype = {-32: ">f4", -64: ">f8"}[bitpix]
    data = np.frombuffer(raw[i:i + nx * ny * abs(bitpix) // 8], dtype=dtype).reshape(ny, nx)
    return header, data.astype(np.float64)
