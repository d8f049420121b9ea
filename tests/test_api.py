"""The API where users look: ``import gxg`` is all a user needs.

Specification:
* every name of ``gxg.__all__`` resolves; the lazy names (``gxg.GrammarBatch``, ``gxg.DeviceArena``,
  ``gxg.ErrorCode``, ...) are the objects of the modules that define them; an unknown name
  raises AttributeError naming it;
* ``import gxg`` does not import torch (it stays cheap for the CLI and the CPU compiler), yet
  ``torch.ops.xg.*`` resolve with no second import, whether torch is imported before gxg,
  after it, or first by a gxg module (partly initialised while the ops register); the hook
  that registers them after torch's import leaves torch's module spec as it was and is gone
  once it ran;
* a process without torch still compiles grammars with gxg, and a failure to register the ops
  is a warning, not a failed import.
Each import-order case runs in a fresh interpreter (this process imported torch and gxg long
ago).
"""
from __future__ import annotations

import importlib
import subprocess
import sys

import pytest

import gxg

OP_NAMES = ["reset", "accept_token", "rollback", "fill_next_token_bitmask",
            "apply_token_bitmask_inplace", "fill_and_apply", "fill_and_sample"]
RESOLVE_OPS = f"print([str(getattr(torch.ops.xg, name)) for name in {OP_NAMES!r}])"


def run_python(code: str, tmp_path) -> str:
    """stdout of ``python -c code`` in a fresh interpreter (cwd: an empty directory, so gxg is
    the installed one); fails the test with stderr if the code raises."""
    done = subprocess.run([sys.executable, "-c", code], cwd=tmp_path, capture_output=True,
                          text=True, timeout=120)
    assert done.returncode == 0, done.stderr
    return done.stdout


def test_every_public_name_resolves():
    for name in gxg.__all__:
        assert getattr(gxg, name) is not None, name


@pytest.mark.parametrize("name,module", [("GrammarBatch", "gxg.batch"),
                                         ("DeviceArena", "gxg.arena"),
                                         ("ArenaCapacity", "gxg.arena"),
                                         ("ArenaFullError", "gxg.arena"),
                                         ("RuntimeLimits", "gxg.runtime"),
                                         ("ErrorCode", "gxg.runtime"),
                                         ("GrammarMatcher", "gxg.matcher"),
                                         ("GrammarCompiler", "gxg.grammar_compiler")])
def test_lazy_names_are_the_defining_modules_objects(name, module):
    assert getattr(gxg, name) is getattr(importlib.import_module(module), name)


def test_unknown_attribute_raises_attribute_error_naming_it():
    with pytest.raises(AttributeError, match="no attribute 'GrammarBatcher'"):
        gxg.GrammarBatcher  # noqa: B018
    assert not hasattr(gxg, "fill_and_apply")


def test_ops_resolve_when_torch_is_imported_first(tmp_path):
    out = run_python(f"import torch, gxg\n{RESOLVE_OPS}", tmp_path)
    assert "xg.fill_and_apply" in out and "xg.reset" in out


def test_import_gxg_does_not_import_torch_yet_ops_resolve_after_it(tmp_path):
    out = run_python(
        "import sys, gxg\n"
        "print('torch imported by gxg:', 'torch' in sys.modules)\n"
        "import torch\n"
        f"{RESOLVE_OPS}\n"
        "print('loader:', type(torch.__spec__.loader).__name__, "
        "torch.__loader__ is torch.__spec__.loader)\n"
        "print('hooks left:', [type(f).__name__ for f in sys.meta_path if 'gxg' in "
        "type(f).__module__])\n", tmp_path)
    assert "torch imported by gxg: False" in out
    assert all(f"xg.{name}" in out for name in OP_NAMES)
    assert "loader: SourceFileLoader True" in out
    assert "hooks left: []" in out


def test_ops_resolve_after_a_name_that_needs_torch(tmp_path):
    out = run_python(f"import gxg\ngxg.GrammarMatcher\nimport torch\n{RESOLVE_OPS}", tmp_path)
    assert "xg.fill_and_sample" in out


@pytest.mark.parametrize("module", ["gxg.arena", "gxg.runtime", "gxg.batch"])
def test_ops_resolve_when_a_gxg_module_imports_torch_first(tmp_path, module):
    out = run_python(f"import warnings\nwarnings.simplefilter('error')\nimport {module}\n"
                     f"import torch\n{RESOLVE_OPS}", tmp_path)
    assert all(f"xg.{name}" in out for name in OP_NAMES)


def test_without_torch_gxg_compiles_grammars(tmp_path):
    out = run_python(
        "import sys, warnings\n"
        "warnings.simplefilter('error')\n"
        "sys.modules['torch'] = None  # torch cannot be imported\n"
        "import gxg\n"
        "info = gxg.TokenizerInfo([b'a', b'b', b'</s>'], gxg.VocabType.RAW, stop_token_ids=[2])\n"
        "print(type(gxg.GrammarCompiler(info).compile_grammar('root ::= \"a\"+')).__name__)\n",
        tmp_path)
    assert out.strip() == "CompiledGrammar"


def test_a_failed_registration_is_a_warning(tmp_path):
    out = run_python(
        "import sys, warnings\n"
        "sys.modules['gxg.ops.xg_ops'] = None  # importing the ops fails\n"
        "import torch\n"
        "with warnings.catch_warnings(record=True) as caught:\n"
        "    warnings.simplefilter('always')\n"
        "    import gxg\n"
        "print([str(w.message) for w in caught])\n"
        "print(gxg.Grammar.from_ebnf('root ::= \"a\"') is not None)\n", tmp_path)
    assert "gxg: torch.ops.xg not registered" in out
    assert out.strip().endswith("True")
