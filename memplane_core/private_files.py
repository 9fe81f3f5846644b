"""Files that hold turns, memories, tokens or cursors: 0600 in 0700 directories, and no writer
ever follows a symlink it did not make.

Appends open with O_NOFOLLOW; replacements are written to a fresh temporary file created with
O_CREAT|O_EXCL|O_NOFOLLOW (a planted file or symlink at a predictable name cannot be reused),
then renamed over the target (rename replaces a symlink, it never writes through it).
"""

from __future__ import annotations

import errno
import os
import secrets
import tempfile
from pathlib import Path

DIR_MODE = 0o700
FILE_MODE = 0o600


def private_dir(path: Path) -> Path:
    """Create `path` (and missing parents) 0700; an existing directory we own is tightened."""
    path = Path(path)
    if path.is_symlink():
        # errno and filename apart: a caller's error message (a 503 to an agent) names no path
        raise OSError(errno.ELOOP, "refusing to use a symlink", str(path))
    missing = [p for p in (path, *path.parents) if not p.exists()]
    for p in reversed(missing):  # mkdir(parents=True) would leave the parents it makes to the umask (0755)
        p.mkdir(exist_ok=True, mode=DIR_MODE)
    try:
        if path.stat().st_uid == os.getuid() and path.stat().st_mode & 0o077:
            os.chmod(path, DIR_MODE)
    except OSError:
        pass
    return path


def fresh_private_dir(parent: Path, prefix: str) -> Path:
    """A new, empty 0700 directory in `parent` under a name no one can guess or plant beforehand
    (`mkdtemp`: a random name, made with mkdir, which fails on anything already there, a symlink
    included). Missing parents are made 0700; an existing `parent` is left as it is (it may be the
    operator's own directory)."""
    parent = Path(parent)
    if not parent.exists():
        private_dir(parent)
    return Path(tempfile.mkdtemp(prefix=prefix, dir=parent))


def open_append(path: Path, *, buffering: int = 0):
    """An append handle to a 0600 file that is not a symlink."""
    path = Path(path)
    private_dir(path.parent)
    fd = os.open(path, os.O_WRONLY | os.O_APPEND | os.O_CREAT | os.O_NOFOLLOW, FILE_MODE)
    return os.fdopen(fd, "ab", buffering=buffering)


def append_private(path: Path, data: bytes) -> None:
    with open_append(path) as fh:
        fh.write(data)


def write_private(path: Path, data: bytes, mode: int = FILE_MODE) -> None:
    """Replace `path` atomically with `data` (mode `mode`), never writing through a symlink."""
    path = Path(path)
    private_dir(path.parent)
    tmp = path.with_name(f".{path.name}.{secrets.token_hex(6)}.tmp")
    fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW, mode)
    try:
        with os.fdopen(fd, "wb") as fh:
            fh.write(data)
        os.chmod(tmp, mode)
        os.replace(tmp, path)
    except BaseException:
        try:
            os.unlink(tmp)
        except OSError:
            pass
        raise
