"""Shared helpers of the ``gxg generate`` tests (test_generate.py, test_cli.py, test_readme.py).

* ``model_cache_dir``: a session fixture, one model cache directory for every test of the
  session (in-process loads and subprocesses alike), set as ``GXG_CACHE_DIR``: the GGUF file
  is converted once per session, and nothing is written to the user's own cache. Import it
  into a test module together with ``use_session_model_cache`` (autouse) to apply it there.
* ``run_cli``: ``gxg.__main__.main(["generate", ...])`` in-process, with its status and output.
* ``run_gxg`` / ``gxg_process``: ``python -m gxg`` in a subprocess with the session's cache.
* ``assert_json_dumps_layout``: generated JSON is laid out as ``json.dumps`` writes it.
"""
from __future__ import annotations

import json
import os
import shutil
import signal
import subprocess
import sys
import tempfile
from pathlib import Path

import pytest

from gxg.__main__ import main
from gxg.vocabularies import missing_packages

REPO = Path(__file__).resolve().parents[1]
#: The .venv's interpreter where the README's install command made one, else this one.
VENV_PYTHON = REPO / ".venv" / "bin" / "python"
PYTHON = str(VENV_PYTHON) if VENV_PYTHON.exists() else sys.executable

needs_smollm2 = pytest.mark.skipif(bool(missing_packages("smollm2")),
                                   reason=f"needs {', '.join(missing_packages('smollm2'))}")

_session_cache = {}  # the directory, shared by every module that imports the fixture


@pytest.fixture(scope="session")
def model_cache_dir():
    """One model cache directory for the session, removed at its end."""
    if "dir" not in _session_cache:
        _session_cache["dir"] = Path(tempfile.mkdtemp(prefix="gxg-test-model-cache-"))
    os.environ["GXG_CACHE_DIR"] = str(_session_cache["dir"])
    yield _session_cache["dir"]
    shutil.rmtree(_session_cache["dir"], ignore_errors=True)


@pytest.fixture(autouse=True)
def use_session_model_cache(model_cache_dir):
    """Every test of a module importing this runs with ``GXG_CACHE_DIR`` set to the session's
    cache (before any in-process ``load_model``)."""
    os.environ["GXG_CACHE_DIR"] = str(model_cache_dir)


def run_cli(capsys, *args):
    """(status, stdout, stderr) of ``gxg generate ARGS`` run in-process."""
    status = main(["generate", *args])
    out, err = capsys.readouterr()
    return status, out, err


def gxg_env() -> dict:
    return dict(os.environ, HF_HUB_OFFLINE="1")  # GXG_CACHE_DIR: set by the fixture


def run_gxg(*args, timeout=300, cwd=REPO) -> subprocess.CompletedProcess:
    """``python -m gxg ARGS`` in a subprocess, text output captured."""
    return subprocess.run([PYTHON, "-m", "gxg", *args], capture_output=True, text=True,
                          timeout=timeout, cwd=cwd, env=gxg_env())


def gxg_process(*args) -> subprocess.Popen:
    """``python -m gxg ARGS`` started in a subprocess, stdout and stderr as byte pipes, with
    SIGINT at its default (a test run started in the background of a non-interactive shell
    inherits SIGINT ignored, and Python then never raises KeyboardInterrupt: the Ctrl-C tests
    would see the run go on to its end)."""
    return subprocess.Popen([PYTHON, "-m", "gxg", *args], stdout=subprocess.PIPE,
                            stderr=subprocess.PIPE, cwd=REPO, env=gxg_env(),
                            preexec_fn=_default_sigint)


def _default_sigint() -> None:
    signal.signal(signal.SIGINT, signal.SIG_DFL)


class _Members(list):
    """An object's (key, value) pairs in document order, duplicate keys kept (a grammar cannot
    forbid them, and ``json.loads`` would keep only the last)."""


def _dumps(value, indent, ensure_ascii: bool, level: int = 0) -> str:
    """``json.dumps(value, indent=indent, ensure_ascii=...)`` of a value whose objects are
    ``_Members``."""
    if not isinstance(value, (list, _Members)):
        return json.dumps(value, ensure_ascii=ensure_ascii)
    is_object = isinstance(value, _Members)
    open_, close = "{}" if is_object else "[]"
    if not value:
        return open_ + close
    items = [(json.dumps(k, ensure_ascii=ensure_ascii) + ": " if is_object else "")
             + _dumps(v, indent, ensure_ascii, level + 1)
             for k, v in (value if is_object else ((None, v) for v in value))]
    if indent is None:
        return open_ + ", ".join(items) + close
    inner, outer = "\n" + " " * indent * (level + 1), "\n" + " " * indent * level
    return open_ + inner + ("," + inner).join(items) + outer + close


def assert_json_dumps_layout(text: str, indent) -> None:
    """``text`` is laid out as ``json.dumps(..., indent=indent)`` writes its value (non-ASCII
    characters raw or escaped; duplicate keys kept where they are)."""
    value = json.loads(text, object_pairs_hook=_Members)
    assert text in (_dumps(value, indent, True), _dumps(value, indent, False)), text
