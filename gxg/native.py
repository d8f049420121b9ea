"""Host C kernels (``csrc/*.c``), compiled at run time by the system C compiler and loaded with
ctypes.

In:  the name of a C file of ``csrc/`` (beside ``gxg/`` in a checkout, or the installed
     ``gxg.csrc`` package).
Out: ``library(name)``: the loaded ``ctypes.CDLL``, or None where there is no C compiler, the
     build failed, or ``GXG_NATIVE=0`` is set. Each caller keeps a numpy walk that gives the
     same answer, so None only makes it slower.

The shared library is built once per source text, compiler and flags, and kept in
``$GXG_CACHE_DIR/native`` (else ``$XDG_CACHE_HOME/gxg/native``, else ``~/.cache/gxg/native``;
a temporary folder when that cannot be written): the first process pays the build (~0.08 s
on the VM), later ones load the file (~0.4 ms). Loaded libraries are cached per process (a
cache that says so). ctypes releases the GIL during a call, so walks on other threads go on
meanwhile.
"""
from __future__ import annotations

import ctypes
import hashlib
import logging
import os
import platform
import shutil
import subprocess
import tempfile
import threading
from pathlib import Path
from typing import Dict, Optional, Tuple

_LOG = logging.getLogger(__name__)
FLAGS = ("-O3", "-shared", "-fPIC", "-std=c99")
Defines = Tuple[Tuple[str, int], ...]
BUILD_TIMEOUT_S = 60

_lock = threading.Lock()
# per (C file, defines): the library, or None (a cache)
_loaded: Dict[Tuple[str, Defines], Optional[ctypes.CDLL]] = {}


def enabled() -> bool:
    """False when ``GXG_NATIVE`` is set to 0 (read at each call: tests switch it)."""
    return os.environ.get("GXG_NATIVE", "1").strip() not in ("0", "false", "no", "off")


def library(name: str, defines: Defines = ()) -> Optional[ctypes.CDLL]:
    """The compiled ``csrc/<name>``, or None (disabled, no compiler, the build failed).
    ``defines``: (macro, integer) pairs passed as ``-Dmacro=integer``, for constants that
    Python declares and the C file reads (one source for both)."""
    if not enabled():
        return None
    key = (name, defines)
    if key in _loaded:  # read without the lock: entries are only ever added
        return _loaded[key]
    with _lock:
        if key not in _loaded:
            _loaded[key] = _build_and_load(name, defines)
        return _loaded[key]


def function(name: str, symbol: str, argtypes: tuple, restype=None,
             defines: Defines = ()) -> Optional[ctypes._CFuncPtr]:
    """``symbol`` of ``library(name, defines)`` with its argument and result types set
    (pointers as ``ctypes.c_void_p``, so 64-bit addresses pass whole), or None where
    ``library`` is."""
    found = library(name, defines)
    if found is None:
        return None
    kernel = getattr(found, symbol)
    if kernel.argtypes is None:
        kernel.restype = restype
        kernel.argtypes = argtypes
    return kernel


def _source(name: str) -> str:
    beside = Path(__file__).resolve().parent.parent / "csrc" / name
    if beside.is_file():
        return beside.read_text()
    from importlib.resources import files
    return (files("gxg.csrc") / name).read_text()


def cache_root() -> Path:
    """``$GXG_CACHE_DIR``, else ``$XDG_CACHE_HOME/gxg``, else ``~/.cache/gxg``."""
    if os.environ.get("GXG_CACHE_DIR"):
        return Path(os.environ["GXG_CACHE_DIR"]).expanduser()
    base = os.environ.get("XDG_CACHE_HOME") or Path.home() / ".cache"
    return Path(base).expanduser() / "gxg"


def _compiler() -> Optional[str]:
    for candidate in (os.environ.get("CC"), "cc", "gcc", "clang"):
        if candidate and shutil.which(candidate):
            return candidate
    return None


def _build_and_load(name: str, defines: Defines) -> Optional[ctypes.CDLL]:
    try:
        source = _source(name)
    except OSError as error:
        _LOG.info("gxg.native: %s not found (%s); using numpy", name, error)
        return None
    compiler = _compiler()
    if compiler is None:
        _LOG.info("gxg.native: no C compiler; using numpy for %s", name)
        return None
    flags = (*FLAGS, *(f"-D{macro}={int(value)}" for macro, value in defines))
    key = hashlib.sha256("\0".join((source, compiler, *flags, platform.machine(),
                                    platform.system())).encode()).hexdigest()[:20]
    stem = Path(name).stem
    for folder in (cache_root() / "native", Path(tempfile.gettempdir()) / "gxg-native"):
        built = folder / f"{stem}-{key}.so"
        try:
            if not built.is_file():
                _build(compiler, flags, source, folder, built)
            return ctypes.CDLL(str(built))
        except (OSError, subprocess.SubprocessError) as error:
            _LOG.info("gxg.native: %s in %s failed (%s)", name, folder, error)
    return None


def _build(compiler: str, flags: tuple, source: str, folder: Path, built: Path) -> None:
    """Compile into a private name, then rename: processes that build at once each write their
    own file, and the last rename wins (the files are equal)."""
    folder.mkdir(parents=True, exist_ok=True)
    with tempfile.TemporaryDirectory(dir=folder) as work:
        c_file = Path(work) / "source.c"
        c_file.write_text(source)
        output = Path(work) / built.name
        done = subprocess.run([compiler, *flags, "-o", str(output), str(c_file)],
                              capture_output=True, text=True, timeout=BUILD_TIMEOUT_S)
        if done.returncode != 0:
            raise OSError(f"{compiler} exited with {done.returncode}: {done.stderr.strip()[:500]}")
        os.replace(output, built)
