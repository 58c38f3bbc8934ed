"""uvflow from Python: load, check and run pipelines, hand arrays in and take results out.

    import uvflow
    p = uvflow.Pipeline("pipelines/dirty_image.yaml", overrides={"vis.preset": "small"})
    result = p.run()
    result.report["stages"][0]["wall_s"]

A pipeline reads NumPy (or CuPy) arrays through io.vis_arrays and io.image_arrays stages, handed
in by name with run(inputs={name: ...}), and returns what its io.collect stages keep: result[name].
Errors are uvflow.Error subclasses whose text is what the `uvflow` command prints. docs/python.md
has the whole story.
"""

import json
import threading

import numpy as np

from . import _uvflow
from ._uvflow import (  # noqa: F401  (the package's names)
    ConfigError,
    DeviceArray,
    Error,
    Image,
    InputError,
    InternalError,
    Interrupted,
    MemoryError,
    OutputError,
    StageError,
    UsageError,
    cuda_compiled,
    device_count,
    set_log_level,
    to_host,
)

__all__ = [
    "Pipeline", "Result", "Image", "DeviceArray", "register_stage", "stages", "describe", "to_host",
    "device_count", "cuda_compiled", "set_log_level", "Error", "ConfigError", "InputError", "StageError",
    "OutputError", "Interrupted", "MemoryError", "InternalError", "UsageError",
]


# ---------------------------------------------------------------- images


def _image_data(self):
    """The pixels, ny x nx float32, row 0 the bottom (FITS order): a read-only NumPy view for a
    host image, the image itself (with __cuda_array_interface__, for cupy.asarray) on the device."""
    return self._host_array() if self.location == "host" else self


def _image_header(self):
    """The FITS header io.write_fits writes for this image (an astropy.io.fits.Header when astropy
    is installed, else a dict): astropy.wcs.WCS(image.header) gives its sky coordinates."""
    ny, nx = self.shape
    cards = [("NAXIS", 4 if self.has_wcs else 2, ""), ("NAXIS1", nx, ""), ("NAXIS2", ny, "")]
    if self.has_wcs:
        cards += [("NAXIS3", 1, ""), ("NAXIS4", 1, "")]
    cards += [tuple(c) for c in self._cards()]
    try:
        from astropy.io import fits
    except ImportError:
        return {k: v for k, v, _ in cards}
    return fits.Header(cards)


def _image_array(self, dtype=None, copy=None):
    a = self._host_array()
    return a if dtype is None else a.astype(dtype)


Image.data = property(_image_data)
Image.header = property(_image_header)
Image.__array__ = _image_array
Image.__repr__ = lambda self: (
    f"uvflow.Image(index={self.index}, shape={self.shape}, {self.location}, {'sky' if self.has_wcs else 'no WCS'})")


def _wcs_from_header(header, shape):
    """The sky coordinates of an image from FITS keywords (as io.write_fits and WSClean write them)."""
    h = dict(header.items()) if hasattr(header, "items") else dict(header)
    ny, nx = shape[-2], shape[-1]
    for key, n in (("CRPIX1", nx), ("CRPIX2", ny)):
        if key in h and float(h[key]) != n // 2 + 1:
            raise ValueError(f"{key} is {h[key]}: uvflow images have the phase centre at pixel N/2+1 ({n // 2 + 1})")
    if "CDELT2" not in h and "CDELT1" not in h:
        raise ValueError("the header has no CDELT1 or CDELT2: the pixel size is unknown")
    cell_deg = abs(float(h.get("CDELT2", h.get("CDELT1"))))
    is_freq = str(h.get("CTYPE3", "FREQ")).strip() == "FREQ"
    return {
        "ra_rad": np.deg2rad(float(h.get("CRVAL1", 0.0))),
        "dec_rad": np.deg2rad(float(h.get("CRVAL2", 0.0))),
        "cell_rad": np.deg2rad(cell_deg),
        "freq_hz": float(h.get("CRVAL3", 0.0)) if is_freq else 0.0,
        "bandwidth_hz": float(h.get("CDELT3", 0.0)) if is_freq else 0.0,
        "bunit": str(h.get("BUNIT", "JY/BEAM")),
        "telescope": str(h.get("TELESCOP", "")),
        "date_obs": str(h.get("DATE-OBS", "")),
    }


def _feed(name, value):
    """Hands `value` to the io.vis_arrays or io.image_arrays stage whose `name` is `name`."""
    if isinstance(value, dict):
        missing = {"uvw", "vis", "freq"} - value.keys()
        if missing:
            raise ValueError(f"inputs['{name}']: visibilities need uvw, vis and freq (missing {', '.join(sorted(missing))})")
        ra = value.get("ra_rad", np.deg2rad(value.get("ra_deg", 0.0)))
        dec = value.get("dec_rad", np.deg2rad(value.get("dec_deg", 0.0)))
        _uvflow.feed_vis(name, value["uvw"], value["vis"], value["freq"], value.get("weight"), value.get("flag"),
                         float(ra), float(dec), str(value.get("telescope", "")))
        return
    if isinstance(value, tuple):
        array, header = value
        shape = getattr(array, "shape", None) or np.shape(array)
        _uvflow.feed_images(name, array, _wcs_from_header(header, shape))
        return
    if isinstance(value, Image) and value.has_wcs:
        _uvflow.feed_images(name, value, _wcs_from_header(value.header, value.shape))
        return
    _uvflow.feed_images(name, value, None)


# ---------------------------------------------------------------- pipelines


def _override(key, value):
    """KEY=VALUE as `uvflow run --set` takes it (VALUE is YAML; JSON is YAML)."""
    if isinstance(value, str):
        text = value
    elif isinstance(value, (bool, int, float, list, dict)):
        text = json.dumps(value)
    else:
        raise TypeError(f"override {key}: a str, number, bool, list or dict, not {type(value).__name__}")
    return f"{key}={text}"


# The arrays handed in and the collected results go through one table in the library
# (stages/shared/array_feed): one run at a time in a process.
_run_lock = threading.Lock()


class Result:
    """What a run gave: `report` (the run report, as `run.report` writes it), `warnings`, and what
    each io.collect stage kept: result[name]."""

    def __init__(self, report, outputs, warnings):
        self.report = report
        self.outputs = outputs
        self.warnings = warnings

    def __getitem__(self, name):
        """The io.collect stage `name`'s items: one Image, a list of Images (a stream of several),
        or the visibility blocks concatenated into one dict of arrays."""
        if name not in self.outputs:
            raise KeyError(f"no io.collect stage named '{name}' (the pipeline's: {', '.join(self.outputs) or 'none'})")
        items = self.outputs[name]
        if items and isinstance(items[0], dict):
            keys = [k for k in items[0] if k != "index" and all(k in i for i in items)]
            if len(items) == 1:  # the block's own arrays (views), not copies
                return {k: items[0][k] for k in keys}
            return {k: np.concatenate([i[k] for i in items]) for k in keys}
        return items[0] if len(items) == 1 else items

    def stage(self, id):
        """One stage's entry of the report."""
        for s in self.report["stages"]:
            if s["id"] == id:
                return s
        raise KeyError(f"no stage '{id}' in the run")


class Pipeline:
    """A pipeline from a YAML file, or from YAML text (Pipeline.from_string), with overrides."""

    def __init__(self, path=None, *, text=None, name="<string>", overrides=None):
        if (path is None) == (text is None):
            raise ValueError("a pipeline is a file (path) or YAML text (text=), one of the two")
        self._file = str(path) if path is not None else name
        self._text = text or ""
        self._is_text = text is not None
        self._sets = []
        for k, v in (overrides or {}).items():
            self.set(k, v)

    @classmethod
    def from_file(cls, path, overrides=None):
        return cls(path, overrides=overrides)

    @classmethod
    def from_string(cls, text, name="<string>", overrides=None):
        return cls(text=text, name=name, overrides=overrides)

    def set(self, key, value):
        """An override, as `--set KEY=VALUE`: STAGE.PARAM, STAGE.backend, vars.NAME, run.KEY."""
        self._sets.append(_override(key, value))
        return self

    def _source(self):
        return _uvflow.Source(self._file, self._text, self._is_text, self._sets)

    def check(self):
        """What `uvflow check` does: raises ConfigError with every problem, or returns
        {stages, transfers, warnings}."""
        return _uvflow.check(self._source())

    def plan(self, dot=False):
        """What `uvflow plan` prints (Graphviz with dot=True)."""
        return _uvflow.plan(self._source(), dot)

    def run(self, inputs=None, report=None):
        """Runs the pipeline as `uvflow run` does, with `inputs` {name: arrays} for its
        io.vis_arrays and io.image_arrays stages; `report` writes the run report there too.
        Returns a Result. The interpreter's lock is released while the pipeline runs; runs from
        several threads take turns."""
        with _run_lock:
            try:
                for name, value in (inputs or {}).items():
                    _feed(name, value)
                text, outputs, warnings = _uvflow.run(self._source(), report or "")
            finally:
                _uvflow.clear_feed()
        return Result(json.loads(text), outputs, warnings)


def run(path, inputs=None, overrides=None, report=None):
    """Pipeline(path, overrides=overrides).run(inputs, report)."""
    return Pipeline(path, overrides=overrides).run(inputs, report)


# ---------------------------------------------------------------- stages


def stages():
    """Every registered stage: {type, summary, backends, inputs, outputs, params}."""
    return _uvflow.stages()


def describe(type):
    """What `uvflow describe TYPE` prints; UsageError for an unknown type."""
    return _uvflow.describe(type)


_PARAM_KINDS = {bool: "boolean", int: "integer", float: "number", str: "string"}


def _param(name, default):
    if isinstance(default, tuple) and len(default) == 2 and isinstance(default[0], type):
        kind, default = default  # (type, default or None): None makes it required
    else:
        kind = type(default)
    if kind in (list, tuple):
        return (name, "numbers", None if default is None else [float(x) for x in default])
    if kind not in _PARAM_KINDS:
        raise TypeError(f"parameter '{name}': bool, int, float, str or a list of numbers, not {kind.__name__}")
    return (name, _PARAM_KINDS[kind], default)


def _ports(ports):
    out = []
    for name, spec in (ports or {}).items():
        type_name, arity = (spec, "stream") if isinstance(spec, str) else spec
        out.append((name, type_name, arity))
    return out


def register_stage(type, cls=None, *, inputs=None, outputs=None, params=None, summary="", doc=""):
    """Registers a stage written in Python, usable in YAML as `type: TYPE` (a cpu stage, serial).

    cls(**params) is made when the pipeline loads; cls.process(inputs) is called per item with
    {port: uvflow.Image or dict of visibility arrays} and returns {port: 2-D array or uvflow.Image}
    (or None); an optional cls.finish() returns the same after the stream. Ports: {name: "Image"}
    or {name: ("Image", "once")}; params: {name: default} (bool, int, float, str, list of floats),
    or {name: (type, None)} for a required one. The interpreter's lock is held only while
    process() and finish() run. Usable as a decorator: @uvflow.register_stage("py.x", inputs=...).
    """

    def add(c):
        _uvflow.register_stage(type, c, _ports(inputs), _ports(outputs),
                               [_param(k, v) for k, v in (params or {}).items()],
                               summary or (c.__doc__ or "").strip().split("\n")[0], doc or (c.__doc__ or "").strip())
        return c

    return add if cls is None else add(cls)
