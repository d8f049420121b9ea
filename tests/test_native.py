"""gxg.native: the host C kernels are built once per source and compiler into the cache folder,
loaded from there later, and are None (the callers then walk in numpy) where they are turned
off or cannot be built; never an exception."""
from __future__ import annotations

import pytest

from gxg import native


@pytest.fixture
def fresh(monkeypatch, tmp_path):
    """An empty cache folder and no library loaded in this process."""
    monkeypatch.setenv("GXG_CACHE_DIR", str(tmp_path))
    monkeypatch.setattr(native, "_loaded", {})
    return tmp_path


def test_a_library_is_built_once_into_the_cache_and_loaded_from_it(fresh):
    if native._compiler() is None:
        pytest.skip("no C compiler here")
    first = native.library("vocab_walk.c")
    assert first is not None and first.gxg_walk_pairs is not None
    built = list((fresh / "native").glob("vocab_walk-*.so"))
    assert len(built) == 1
    stamp = built[0].stat().st_mtime_ns
    native._loaded.clear()  # another process: loads the file, does not build again
    assert native.library("vocab_walk.c") is not None
    assert built[0].stat().st_mtime_ns == stamp
    assert list((fresh / "native").glob("vocab_walk-*.so")) == built


@pytest.mark.parametrize("setting", ["0", "off", "false"])
def test_turned_off_it_is_none(fresh, monkeypatch, setting):
    monkeypatch.setenv("GXG_NATIVE", setting)
    assert native.library("vocab_walk.c") is None
    assert native.function("vocab_walk.c", "gxg_walk_pairs", ()) is None


def test_a_compiler_that_fails_gives_none(fresh, monkeypatch):
    monkeypatch.setenv("CC", "false")  # found on PATH, exits with 1
    assert native.library("vocab_walk.c") is None
    assert not list(fresh.glob("native/*.so"))


def test_no_compiler_gives_none(fresh, monkeypatch):
    monkeypatch.setattr(native, "_compiler", lambda: None)
    assert native.library("vocab_walk.c") is None


def test_a_missing_source_gives_none(fresh):
    assert native.library("no_such_kernel.c") is None
