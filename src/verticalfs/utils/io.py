"""Atomic writes: a temporary file in the same folder, then a rename; never a half-written result."""

from __future__ import annotations

import json
import math
import os
import stat
import tempfile
from pathlib import Path
from typing import Any

import numpy as np


def _default(o: Any):
    if isinstance(o, np.integer):
        return int(o)
    if isinstance(o, np.floating):
        return float(o)
    if isinstance(o, np.ndarray):
        return o.tolist()
    if isinstance(o, (set, tuple)):
        return list(o)
    if isinstance(o, Path):
        return str(o)
    raise TypeError(f"not JSON serialisable: {type(o).__name__}")


def _clean(o: Any):
    """NaN/inf -> None so the file is strict JSON."""
    if isinstance(o, float) and not math.isfinite(o):
        return None
    if isinstance(o, dict):
        return {str(k): _clean(v) for k, v in o.items()}
    if isinstance(o, (list, tuple)):
        return [_clean(v) for v in o]
    if isinstance(o, np.floating):
        return _clean(float(o))
    if isinstance(o, np.integer):
        return int(o)
    if isinstance(o, np.ndarray):
        return _clean(o.tolist())
    return o


def _umask() -> int:
    mask = os.umask(0)
    os.umask(mask)
    return mask


def write_bytes_atomic(path: str | Path, data: bytes, *, mode: int | None = None) -> Path:
    """Write ``data`` to a temporary file beside ``path``, then rename it over ``path``.

    The file gets normal permissions (``0o666`` minus the umask, like ``open``), not the temporary
    file's private ``0o600``; ``mode`` overrides them (e.g. ``0o600`` for a key).
    """
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    fd, tmp = tempfile.mkstemp(dir=path.parent, prefix=f".{path.name}.", suffix=".tmp")
    try:
        with os.fdopen(fd, "wb") as f:
            f.write(data)
            f.flush()
            os.fsync(f.fileno())
        os.chmod(tmp, (0o666 & ~_umask()) if mode is None else mode)
        os.replace(tmp, path)
    except BaseException:
        if os.path.exists(tmp):
            os.unlink(tmp)
        raise
    return path


def write_json_atomic(path: str | Path, obj: Any) -> Path:
    text = json.dumps(_clean(obj), indent=2, default=_default, allow_nan=False)
    return write_bytes_atomic(path, (text + "\n").encode())


def save_figure_atomic(fig, path: str | Path, **kwargs) -> Path:
    import io

    buf = io.BytesIO()
    fig.savefig(buf, format=Path(path).suffix.lstrip(".") or "png", **kwargs)
    return write_bytes_atomic(path, buf.getvalue())


def check_private_file(path: str | Path, what: str = "private key", *, missing_ok: bool = False) -> Path:
    """``path`` when only its owner may read or write it (POSIX mode bits), else a ConfigError naming
    the file, its mode and the ``chmod 600`` fix. For files holding secrets (TLS and Paillier keys).
    A missing file is an error too, unless ``missing_ok`` (the caller's read then reports it)."""
    from verticalfs.exceptions import ConfigError

    p = Path(path)
    try:
        mode = stat.S_IMODE(p.stat().st_mode)
    except OSError:
        if missing_ok:
            return p
        raise ConfigError(f"the {what} {str(p)!r} does not exist") from None
    if os.name == "posix" and mode & 0o077:
        raise ConfigError(f"the {what} {str(p)!r} is accessible to other users (mode {mode:04o}); restrict it to "
                          f"its owner: chmod 600 {p}")
    return p
