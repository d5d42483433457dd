"""Optional compiled CPU kernels, built once with the machine's C++ compiler.

PyTorch has no operation for "gather a per-row state through a distance table"
without an ``N x N`` index, so :mod:`relpos.kernels.rows` ships one as a small C++
extension (``rows.cpp``); :mod:`relpos.kernels.cope` ships CoPE's gated counts and their
interpolation as one pass per query row (``cope.cpp``), where PyTorch needs a dozen ``N x N``
temporaries; :mod:`relpos.kernels.relkey` ships the elementwise passes of the relative-key
(Transformer-XL) backward, the skewed add of the position logits and the skewed write of ``dS``, as one
pass each, and :mod:`relpos.attention.dense_relkey`'s row-block loops run from C++ (``relkey.cpp``); :mod:`relpos.kernels.fire` ships FIRE's piecewise-linear bias walked by runs
of keys, its add into the backward's logits and its gradients summed in the pass that forms ``dS``
(``fire.cpp``), and FIRE's MLP on a Toeplitz bias's offsets with its backward, one call each way
(``fire_mlp.cpp``); :mod:`relpos.kernels.toeplitz` ships the gradient of a Toeplitz expansion, its sums
along diagonals, as one pass (``toeplitz.cpp``). It is compiled by ``make install`` (``python -m
relpos.kernels build``) with :mod:`torch.utils.cpp_extension` into a folder of its
own under the user's cache (``$RELPOS_KERNEL_DIR``, else
``$XDG_CACHE_HOME/relpos/kernels``, else ``~/.cache/relpos/kernels``), named by a
hash of the source, the compiler flags and the torch version, so a stale build is
never loaded. Builds for other sources or torch versions are left in place (under 1 MB
each; other environments may use them); the folder can be deleted at any time.

Nothing is compiled at run time: :func:`load` imports a finished build or returns
None, and callers then take their PyTorch path, which computes the same numbers
(the kernels are tested against it and against the float64 references). Where no
compiler or ``ninja`` is found, ``build`` says so in one line and the library works
as before. :func:`status` says which case holds; ``relpos bench`` records it.
Set ``RELPOS_KERNELS=0`` (or :data:`ENABLED` ``= False``) to switch them off, e.g.
to time both paths side by side.
"""

from __future__ import annotations

import hashlib
import importlib.machinery
import importlib.util
import logging
import os
import shutil
import sys
import tempfile
from pathlib import Path

import torch

__all__ = ["ENABLED", "build", "cache_root", "load", "status"]

log = logging.getLogger("relpos.kernels")

#: Master switch, read at call time (``RELPOS_KERNELS=0`` turns it off at import).
ENABLED: bool = os.environ.get("RELPOS_KERNELS", "1").strip().lower() not in ("0", "off", "false", "no")

_SOURCES = [Path(__file__).with_name(n) for n in ("rows.cpp", "cope.cpp", "relkey.cpp", "fire.cpp", "fire_mlp.cpp",
                                                      "toeplitz.cpp")]
_FUNCTIONS = ["gather_rows", "scatter_rows", "cope_forward", "cope_backward", "relkey_logits", "relkey_ds",
              "relkey_blocks_forward", "relkey_blocks_backward",
              "fire_bias", "fire_logits", "fire_ds", "fire_mlp_forward", "fire_mlp_backward", "toeplitz_grad"]
_CFLAGS = ["-O3"]
_loaded: dict = {}  # "module" -> module or None, "why" -> reason when None


def cache_root() -> Path:
    """Folder under which builds live (``$RELPOS_KERNEL_DIR`` or the user's cache)."""
    env = os.environ.get("RELPOS_KERNEL_DIR")
    if env:
        return Path(env)
    base = os.environ.get("XDG_CACHE_HOME") or str(Path.home() / ".cache")
    return Path(base) / "relpos" / "kernels"


def _tag() -> str:
    h = hashlib.sha256()
    for src in _SOURCES:
        h.update(src.read_bytes())
    h.update(" ".join(_CFLAGS + _FUNCTIONS).encode())
    h.update(torch.__version__.encode())
    return h.hexdigest()[:16]


def _name() -> str:
    return f"relpos_rows_{_tag()}"


def _build_dir() -> Path:
    return cache_root() / _name()


def _library(folder: Path) -> Path | None:
    for suffix in importlib.machinery.EXTENSION_SUFFIXES + [".so"]:
        p = folder / f"{_name()}{suffix}"
        if p.is_file():
            return p
    return None


def load():
    """The compiled module, or None (not built, switched off, or failed to load; see :func:`status`)."""
    if not ENABLED:
        return None
    if "module" in _loaded:
        return _loaded["module"]
    mod, why = None, ""
    lib = _library(_build_dir())
    if lib is None:
        why = f"not built (run `python -m relpos.kernels build` or `make install`; looked in {_build_dir()})"
    else:
        try:
            spec = importlib.util.spec_from_file_location(_name(), lib)
            mod = importlib.util.module_from_spec(spec)
            spec.loader.exec_module(mod)
        except (ImportError, OSError) as e:  # a build for another ABI, a truncated file
            mod, why = None, f"failed to load {lib}: {e}"
    if mod is None:
        log.info("relpos kernels: %s; the PyTorch paths serve every call", why)
    _loaded.update(module=mod, why=why)
    return mod


def status() -> str:
    """One line: ``"loaded (PATH)"``, ``"off (RELPOS_KERNELS=0)"`` or why they are not there."""
    if not ENABLED:
        return "off (RELPOS_KERNELS=0 or relpos.kernels.ENABLED = False)"
    if load() is not None:
        return f"loaded ({_library(_build_dir())})"
    return _loaded["why"]


def build(verbose: bool = False) -> tuple[bool, str]:
    """Compile the kernels into :func:`cache_root` unless that build exists; never raises.

    Returns:
        ``(ok, message)``: ``ok`` is False, with the reason, where no compiler or
        ``ninja`` is found or compilation fails.
    """
    final = _build_dir()
    if _library(final) is not None:
        return True, f"relpos kernels: already built in {final}"
    # a ninja installed with pip (relpos[kernels]) lies beside the interpreter, maybe not on PATH
    bindir = os.path.dirname(sys.executable)
    if bindir and bindir not in os.environ.get("PATH", "").split(os.pathsep):
        os.environ["PATH"] = bindir + os.pathsep + os.environ.get("PATH", "")
    try:
        from torch.utils.cpp_extension import load_inline, verify_ninja_availability

        verify_ninja_availability()
        cache_root().mkdir(parents=True, exist_ok=True)
        work = Path(tempfile.mkdtemp(prefix=".build-", dir=cache_root()))  # ours: removed below
        try:
            load_inline(_name(), cpp_sources=[src.read_text() for src in _SOURCES], functions=_FUNCTIONS,
                        extra_cflags=_CFLAGS, build_directory=str(work), verbose=verbose)
            try:
                work.rename(final)  # atomic: a reader never sees half a build
            except OSError:
                if _library(final) is None:  # not a concurrent builder's finished folder
                    raise
        finally:
            if work.exists():
                shutil.rmtree(work, ignore_errors=True)
    except Exception as e:  # noqa: BLE001 - any failure leaves the PyTorch paths; say why in one line
        first = (str(e).strip().splitlines() or [type(e).__name__])[0].split(": [")[0][:200]
        return False, f"relpos kernels: not built ({type(e).__name__}: {first}); the PyTorch paths serve every call"
    _loaded.clear()
    return True, f"relpos kernels: built in {final}"
