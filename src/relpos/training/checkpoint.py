"""Checkpoints: safetensors weights plus a JSON config, written atomically; nothing is unpickled.

A checkpoint is a directory::

    run/
      config.json          format tag, model class, ModelConfig, sha256 of every file, extra JSON
      model.safetensors    the model's state dict
      optimizer.safetensors  (training checkpoints) AdamW state, flattened to named tensors

Atomicity: :func:`save` writes every file into a fresh sibling folder, flushes it
to disk, then swaps it in with two ``rename`` calls (old -> ``.<name>.old-*``,
new -> ``<name>``) and only then deletes the old one. A crash while writing leaves
the previous checkpoint untouched; a crash between the two renames leaves it
under the ``.old`` name, where :func:`load` finds it.

Safety: :func:`save` writes only to a new path, an empty folder, or a folder that
holds a relpos checkpoint and nothing else (:func:`is_checkpoint_dir`); anything
else raises :class:`relpos.outdir.OutputDirError` and is left untouched. Deleting
an old checkpoint removes exactly the files its manifest lists, then the empty
folder -- never a whole tree.

Loading checks, in this order and before any model is built: the format tag and
version (version 1, which had no config hash, is refused); the SHA-256 of ``config.json``'s own content (``config_sha256``, so a
hand-edited config -- say a scheme changed from alibi to rope -- is refused); for
every listed file, that it is a regular file of exactly the recorded size (every
read is bounded by that size) with the recorded SHA-256; then every tensor's
name, shape and dtype against the model the config describes (worked out on the
``meta`` device, which allocates nothing), and that every floating-point weight is
finite. Each failure raises :class:`CheckpointError` (a ``ValueError``) that
names the file and the problem. Weights are read with ``safetensors`` only
(never ``torch.load``/pickle).
"""

from __future__ import annotations

import hashlib
import json
import os
import re
import shutil
import stat
import uuid
from pathlib import Path
from typing import Any

import torch
from safetensors.torch import load as st_load
from safetensors.torch import save as st_save
from torch import Tensor, nn

from relpos.model import ModelConfig, TransformerEncoder, TransformerLM
from relpos.outdir import OutputDirError, check_output_dir, check_writable

__all__ = ["CheckpointError", "save", "load", "read", "remove", "load_state_dict_into", "check_state_dict", "is_checkpoint_dir",
           "check_checkpoint_target", "FORMAT", "VERSION"]

FORMAT = "relpos-checkpoint"
VERSION = 2  # 2: config.json carries config_sha256
#: Version 1 (no config_sha256) is refused: without the hash an edited config (say alibi -> rope) cannot be
#: told from the one relpos wrote, so loading it would trust the file blindly.
READABLE_VERSIONS = (2,)
CONFIG_FILE = "config.json"
MODEL_FILE = "model.safetensors"
MODEL_CLASSES = {"TransformerLM": TransformerLM, "TransformerEncoder": TransformerEncoder}
_NAME_RE = re.compile(r"^[a-z][a-z0-9_-]{0,63}$")


class CheckpointError(ValueError):
    """A checkpoint is missing, corrupt, truncated, foreign or from another config."""


# ------------------------------------------------------------------- ownership

_MAX_CONFIG_BYTES = 64 << 20  # a config.json larger than this is not ours


def _read_manifest(path: Path) -> dict | None:
    """The parsed config.json of a relpos checkpoint folder, or None (never raises)."""
    try:
        cfg = path / CONFIG_FILE
        st = os.stat(cfg)
        if not stat.S_ISREG(st.st_mode) or st.st_size > _MAX_CONFIG_BYTES:
            return None
        with open(cfg, "rb") as f:
            meta = json.loads(f.read(_MAX_CONFIG_BYTES + 1).decode("utf-8"))
    except (OSError, ValueError):
        return None
    if not isinstance(meta, dict) or meta.get("format") != FORMAT:
        return None
    return meta


def _own_names(meta: dict) -> set[str]:
    files = meta.get("files")
    names = {CONFIG_FILE}
    if isinstance(files, dict):
        names |= {fn for fn in files if isinstance(fn, str) and _is_tensor_file_name(fn)}
    return names


def _is_tensor_file_name(fn: str) -> bool:
    return fn.endswith(".safetensors") and bool(_NAME_RE.match(fn[: -len(".safetensors")]))


def is_checkpoint_dir(path: str | os.PathLike) -> bool:
    """True if ``path`` is a folder holding a relpos checkpoint and nothing else.

    "Nothing else" means: every entry is ``config.json`` or a file its manifest
    lists. Such a folder may be replaced by :func:`save` without losing anything
    that relpos did not write.
    """
    p = Path(path)
    meta = _read_manifest(p)
    if meta is None:
        return False
    own = _own_names(meta)
    try:
        return all(e.name in own and e.is_file(follow_symlinks=False) for e in os.scandir(p))
    except OSError:
        return False


def check_checkpoint_target(path: str | os.PathLike, *, writable: bool = False) -> Path:
    """Check that :func:`save` may write a checkpoint at ``path``; change nothing.

    Call it before training starts so that a bad ``--out`` costs nothing.

    Args:
        path: the checkpoint folder.
        writable: also check that :func:`save` can write there: ``path`` is not a
            mount point (it is replaced by renaming), and a temporary file can be
            created and removed in the nearest existing folder above it (a
            read-only file system or a full disk is found now, not after training).

    Returns:
        The path (symbolic links resolved).

    Raises:
        relpos.outdir.OutputDirError: ``path`` is a file, a folder with other
            content, the current folder, a mount point, not writable, ... (see
            :mod:`relpos.outdir`).
    """
    real = check_output_dir(path, owns=is_checkpoint_dir, what="checkpoint")
    if writable:
        if real.is_dir() and os.path.ismount(real):
            raise OutputDirError(
                f"--out {path} is a mount point; relpos replaces a checkpoint folder by renaming it, which a "
                f"mount point does not allow. Nothing was trained; name a folder inside it (e.g. --out {path}/run)"
            )
        above = real.parent
        while not above.exists() and above != above.parent:
            above = above.parent
        check_writable(above)
    return real


def _remove_own_files(folder: Path) -> None:
    """Delete relpos's own checkpoint files in ``folder``, then the folder if it is empty.

    Only regular files named ``config.json`` or ``<name>.safetensors`` are removed;
    anything else stays (and so does the folder). Never recursive.
    """
    try:
        entries = list(os.scandir(folder))
    except OSError:
        return
    for e in entries:
        if (e.name == CONFIG_FILE or _is_tensor_file_name(e.name)) and e.is_file(follow_symlinks=False):
            try:
                os.unlink(e.path)
            except OSError:
                pass
    try:
        os.rmdir(folder)
    except OSError:
        pass


def remove(path_dir: str | os.PathLike) -> None:
    """Remove a checkpoint that :func:`save` wrote: its own files (and those of an interrupted save's
    ``.<name>.old-*`` / ``.tmp-*`` sibling), then each folder left empty. Anything else stays; links stay."""
    p = Path(path_dir)
    for d in [*p.parent.glob(f".{p.name}.old-*"), *p.parent.glob(f".{p.name}.tmp-*"), p]:
        if d.is_dir() and not d.is_symlink():
            _remove_own_files(d)


# ------------------------------------------------------------------- writing


def _config_hash(meta: dict) -> str:
    """SHA-256 of the canonical JSON of ``meta`` without its own ``config_sha256``."""
    body = {k: v for k, v in meta.items() if k != "config_sha256"}
    return hashlib.sha256(json.dumps(body, sort_keys=True, separators=(",", ":")).encode("utf-8")).hexdigest()


def _fsync_file(path: Path, data: bytes) -> None:
    with open(path, "wb") as f:
        f.write(data)
        f.flush()
        os.fsync(f.fileno())


def _fsync_dir(path: Path) -> None:
    try:
        fd = os.open(path, os.O_RDONLY)
    except OSError:  # pragma: no cover - platforms without directory fds
        return
    try:
        os.fsync(fd)
    except OSError:  # pragma: no cover
        pass
    finally:
        os.close(fd)


def _unwrap(model: nn.Module) -> nn.Module:
    return getattr(model, "module", model) if not isinstance(model, (TransformerLM, TransformerEncoder)) else model


def _tensor_dict(d: dict[str, Tensor]) -> dict[str, Tensor]:
    return {k: v.detach().to("cpu").contiguous().clone() for k, v in d.items()}


def save(
    path_dir: str | os.PathLike,
    model: nn.Module,
    model_cfg: ModelConfig | None = None,
    *,
    extra: dict | None = None,
    tensors: dict[str, dict[str, Tensor]] | None = None,
) -> Path:
    """Write a checkpoint directory atomically.

    Args:
        path_dir: the checkpoint directory (created or replaced as a whole).
        model: a :class:`~relpos.model.TransformerLM` or
            :class:`~relpos.model.TransformerEncoder` (DDP-wrapped is fine).
        model_cfg: its config (default ``model.cfg``).
        extra: JSON-able dict stored in ``config.json`` under ``"extra"``.
        tensors: further named tensor files, ``{"optimizer": {name: tensor}}``
            -> ``optimizer.safetensors``.

    Returns:
        The checkpoint directory.

    Raises:
        TypeError / ValueError: unsupported model, bad names, non-JSON extra.
        relpos.outdir.OutputDirError: ``path_dir`` holds something other than a
            relpos checkpoint (see :func:`check_checkpoint_target`); nothing is
            written.
    """
    path = check_checkpoint_target(path_dir)
    model = _unwrap(model)
    cls_name = type(model).__name__
    if cls_name not in MODEL_CLASSES:
        raise TypeError(f"model must be a TransformerLM or TransformerEncoder, got {cls_name}")
    cfg = model_cfg if model_cfg is not None else model.cfg
    if not isinstance(cfg, ModelConfig):
        raise TypeError(f"model_cfg must be a ModelConfig, got {type(cfg).__name__}")
    if cfg.to_dict() != model.cfg.to_dict():
        raise ValueError("model_cfg does not match the config the model was built with")
    files: dict[str, bytes] = {MODEL_FILE: st_save(_tensor_dict(model.state_dict()))}
    for name, tdict in (tensors or {}).items():
        if not isinstance(name, str) or not _NAME_RE.match(name) or name == "model":
            raise ValueError(f"tensor file name must match {_NAME_RE.pattern} and not be 'model', got {name!r}")
        files[f"{name}.safetensors"] = st_save(_tensor_dict(tdict))
    meta: dict[str, Any] = {
        "format": FORMAT,
        "version": VERSION,
        "model_class": cls_name,
        "model_config": cfg.to_dict(),
        "files": {fn: {"sha256": hashlib.sha256(b).hexdigest(), "bytes": len(b)} for fn, b in files.items()},
        "extra": extra or {},
    }
    try:
        meta["config_sha256"] = _config_hash(meta)
        cfg_bytes = json.dumps(meta, indent=2, sort_keys=True).encode("utf-8")
    except TypeError as e:
        raise TypeError(f"extra must be JSON-able: {e}") from e

    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.parent / f".{path.name}.tmp-{os.getpid()}-{uuid.uuid4().hex[:8]}"
    tmp.mkdir()
    try:
        for fn, b in files.items():
            _fsync_file(tmp / fn, b)
        _fsync_file(tmp / CONFIG_FILE, cfg_bytes)
        _fsync_dir(tmp)
        old = None
        if path.exists() or path.is_symlink():
            check_checkpoint_target(path)  # again, just before the swap: still ours (or empty)?
            old = path.parent / f".{path.name}.old-{os.getpid()}-{uuid.uuid4().hex[:8]}"
            os.rename(path, old)
        os.rename(tmp, path)
        _fsync_dir(path.parent)
    except BaseException:
        shutil.rmtree(tmp, ignore_errors=True)  # our own fresh folder
        raise
    if old is not None:
        _remove_own_files(old)
    for pattern in (f".{path.name}.old-*", f".{path.name}.tmp-*"):  # leftovers of an earlier crash
        for stale in path.parent.glob(pattern):
            if stale.is_dir() and not stale.is_symlink():
                _remove_own_files(stale)
    return path


# ------------------------------------------------------------------- reading


def _resolve(path_dir: str | os.PathLike) -> Path:
    path = Path(path_dir)
    if path.is_file() and path.name in (CONFIG_FILE, MODEL_FILE):
        path = path.parent
    if path.is_dir():
        return path
    if path.exists():
        raise CheckpointError(f"{path} is a file, not a relpos checkpoint directory (config.json + model.safetensors)")
    olds = sorted(path.parent.glob(f".{path.name}.old-*"), key=lambda p: p.stat().st_mtime)
    if olds and (olds[-1] / CONFIG_FILE).exists():
        return olds[-1]  # a save was interrupted between its two renames
    raise CheckpointError(f"no checkpoint at {path} (directory does not exist)")


def _read_bounded(fp: Path, want: int) -> bytes:
    """Read a regular file of exactly ``want`` bytes (never more than ``want + 1`` bytes are read)."""
    try:
        fd = os.open(fp, os.O_RDONLY | getattr(os, "O_NONBLOCK", 0))
    except FileNotFoundError:
        raise CheckpointError(f"checkpoint file {fp} is missing") from None
    except OSError as e:
        raise CheckpointError(f"checkpoint file {fp} cannot be read ({e.strerror or e})") from None
    with os.fdopen(fd, "rb") as f:
        st = os.fstat(f.fileno())
        if not stat.S_ISREG(st.st_mode):
            raise CheckpointError(f"{fp} is not a regular file (a device, pipe or socket); refusing to read it")
        if st.st_size != want:
            raise CheckpointError(f"{fp} is truncated or corrupt: {st.st_size} bytes, expected {want}")
        data = f.read(want + 1)
    if len(data) != want:
        raise CheckpointError(f"{fp} is truncated or corrupt: {len(data)} bytes, expected {want}")
    return data


def _read_meta(path: Path) -> tuple[Path, dict]:
    cfg_path = path / CONFIG_FILE
    if not cfg_path.exists():
        pickles = [p.name for p in path.iterdir() if p.suffix in (".bin", ".pt", ".pth", ".ckpt", ".pkl")]
        hint = f" (found {pickles}; relpos never unpickles files)" if pickles else ""
        raise CheckpointError(f"{path} is not a relpos checkpoint: {CONFIG_FILE} is missing{hint}")
    try:
        size = os.stat(cfg_path).st_size
    except OSError as e:
        raise CheckpointError(f"{cfg_path} cannot be read ({e.strerror or e})") from None
    if size > _MAX_CONFIG_BYTES:
        raise CheckpointError(f"{cfg_path} is {size} bytes; a relpos checkpoint config is at most {_MAX_CONFIG_BYTES}")
    raw = _read_bounded(cfg_path, size)
    try:
        meta = json.loads(raw.decode("utf-8"))
    except (UnicodeDecodeError, json.JSONDecodeError, RecursionError) as e:
        raise CheckpointError(f"{cfg_path} is corrupt or truncated: not valid JSON ({e})") from None
    if not isinstance(meta, dict) or meta.get("format") != FORMAT:
        raise CheckpointError(
            f"{cfg_path} is not a relpos checkpoint config (expected \"format\": \"{FORMAT}\"); "
            f"it may belong to another library"
        )
    version = meta.get("version")
    if isinstance(version, bool) or version not in READABLE_VERSIONS:
        why = (" (version 1 carries no config_sha256, so an edited config cannot be detected; retrain, or "
               "load the weights yourself if you trust this file)" if version == 1 and not isinstance(version, bool)
               else "")
        raise CheckpointError(f"{cfg_path} has checkpoint version {version!r}; this relpos reads version "
                              f"{', '.join(map(str, READABLE_VERSIONS))}{why}")
    got = meta.get("config_sha256")
    if not isinstance(got, str) or got != _config_hash(meta):
        raise CheckpointError(
            f"{cfg_path} was edited or is damaged: its content does not match its config_sha256 "
            f"(a checkpoint's config must stay as relpos wrote it; save the model again instead)"
        )
    return cfg_path, meta


def _file_table(cfg_path: Path, meta: dict) -> dict[str, tuple[int, str]]:
    files = meta.get("files")
    if not isinstance(files, dict) or MODEL_FILE not in files:
        raise CheckpointError(f"{cfg_path} lists no {MODEL_FILE} (\"files\" must map file names to size and hash)")
    out: dict[str, tuple[int, str]] = {}
    for fn, info in files.items():
        if not isinstance(fn, str) or not _is_tensor_file_name(fn):
            raise CheckpointError(f"{cfg_path} lists an unexpected file {fn!r}")
        want = info.get("bytes") if isinstance(info, dict) else None
        digest = info.get("sha256") if isinstance(info, dict) else None
        if isinstance(want, bool) or not isinstance(want, int) or want < 0 or not isinstance(digest, str):
            raise CheckpointError(f"{cfg_path}: entry for {fn!r} must give an int \"bytes\" and a \"sha256\"")
        out[fn] = (want, digest)
    return out


def read(path_dir: str | os.PathLike) -> tuple[dict, dict[str, dict[str, Tensor]]]:
    """Read and verify a checkpoint without building a model.

    Returns:
        ``(meta, tensors)``: the parsed ``config.json`` and ``{file stem: {name: tensor}}``
        for every tensor file it lists (``"model"``, ``"optimizer"``, ...).

    Raises:
        CheckpointError: missing, corrupt, truncated, edited or foreign files.
    """
    path = _resolve(path_dir)
    cfg_path, meta = _read_meta(path)
    tensors: dict[str, dict[str, Tensor]] = {}
    for fn, (want, digest) in _file_table(cfg_path, meta).items():
        fp = path / fn
        data = _read_bounded(fp, want)
        if hashlib.sha256(data).hexdigest() != digest:
            raise CheckpointError(f"{fp} is corrupt: its SHA-256 does not match {CONFIG_FILE}")
        try:
            tensors[fn[: -len(".safetensors")]] = st_load(data)
        except Exception as e:  # safetensors raises its own error types
            raise CheckpointError(f"{fp} is not a valid safetensors file: {e}") from e
    return meta, tensors


def check_state_dict(expected: dict[str, Tensor], state: dict[str, Tensor], *, source: str = "checkpoint") -> None:
    """Check names, shapes, dtypes and finiteness of ``state`` against ``expected``.

    ``expected`` may live on the ``meta`` device (only shapes and dtypes are read).
    A floating-point tensor may be stored in another floating-point dtype (it is
    cast on load); an integer or bool tensor where the model has floats (or the
    reverse) is refused, as is any NaN or infinite value.

    Raises:
        CheckpointError: naming the first offending tensor.
    """
    missing = sorted(set(expected) - set(state))
    unexpected = sorted(set(state) - set(expected))
    if missing or unexpected:
        parts = []
        if missing:
            parts.append(f"missing tensors {missing[:5]}{' ...' if len(missing) > 5 else ''}")
        if unexpected:
            parts.append(f"unexpected tensors {unexpected[:5]}{' ...' if len(unexpected) > 5 else ''}")
        raise CheckpointError(f"{source} does not fit this model (another config?): " + "; ".join(parts))
    for k, v in state.items():
        own = expected[k]
        if tuple(v.shape) != tuple(own.shape):
            raise CheckpointError(
                f"{source} does not fit this model (another config?): tensor {k!r} has shape "
                f"{tuple(v.shape)} in the checkpoint, {tuple(own.shape)} in the model"
            )
        if v.dtype.is_floating_point != own.dtype.is_floating_point or (
                not own.dtype.is_floating_point and v.dtype != own.dtype):
            raise CheckpointError(f"{source}: tensor {k!r} has dtype {v.dtype}, the model needs {own.dtype}")
        if v.dtype.is_floating_point and not bool(torch.isfinite(v).all()):
            raise CheckpointError(f"{source}: tensor {k!r} holds NaN or infinite values")


def load_state_dict_into(model: nn.Module, state: dict[str, Tensor], *, source: str = "checkpoint") -> None:
    """Copy ``state`` into ``model`` after :func:`check_state_dict`.

    Raises:
        CheckpointError: missing or unexpected tensors, shape or dtype mismatches
            (a checkpoint from another config), NaN or infinite weights.
    """
    own = model.state_dict()
    check_state_dict(own, state, source=source)
    model.load_state_dict({k: v.to(own[k].dtype) for k, v in state.items()}, strict=True)


def load(path_dir: str | os.PathLike, *, map_location: str | torch.device = "cpu") -> tuple[nn.Module, ModelConfig]:
    """Build the model a checkpoint describes and load its weights.

    Args:
        path_dir: checkpoint directory (or its ``config.json``/``model.safetensors``).
        map_location: device for the model.

    Returns:
        ``(model, config)``; the model is a :class:`~relpos.model.TransformerLM`
        (or :class:`~relpos.model.TransformerEncoder`) in eval mode.

    Raises:
        CheckpointError: see :func:`read`, plus an invalid config or tensors that
            do not fit it.
    """
    meta, tensors = read(path_dir)
    mc = meta.get("model_class", "TransformerLM")
    cls = MODEL_CLASSES.get(mc) if isinstance(mc, str) else None
    if cls is None:
        raise CheckpointError(f"unknown model_class {meta.get('model_class')!r} in {path_dir}")
    try:
        cfg = ModelConfig.from_dict(meta.get("model_config"))
    except (TypeError, ValueError) as e:
        raise CheckpointError(f"invalid model config in {path_dir}: {e}") from e
    source = f"checkpoint {path_dir}"
    with torch.device("meta"):  # shapes and dtypes only: nothing is allocated before they fit
        expected = cls(cfg).state_dict()
    check_state_dict(expected, tensors["model"], source=source)
    model = cls(cfg)
    load_state_dict_into(model, tensors["model"], source=source)
    return model.to(map_location).eval(), cfg
