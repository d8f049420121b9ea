"""gxg: a grammar engine for LLM constrained decoding whose per-step runtime lives on the GPU.

Pipeline (one module per stage): front-ends -> Grammar IR (``gxg.grammar``) -> byte-level
automaton (``gxg.compiler.automaton``) -> token-mask cache (``gxg.compiler.mask_cache``) ->
runtime state (``gxg.runtime``) -> ops (``gxg.ops``). See DESIGN.md.

The host API keeps XGrammar's names. Names that need torch are imported on first use, so
``import gxg`` does not import torch (~1.2 s on a 2-core VM). The ``torch.ops.xg`` ops
(``gxg.ops.xg_ops``) are registered as soon as torch is there: at ``import gxg`` if torch is
already imported, else right after torch's own import finishes (a one-shot import hook), so
``import gxg`` alone makes ``torch.ops.xg.*`` resolve whichever of gxg and torch comes first.
"""
import importlib
import importlib.util
import sys
import warnings

from gxg.grammar import Grammar, GrammarError
from gxg.tokenizer import TokenizerInfo, VocabType

__version__ = "0.1.0"

_LAZY = {
    "GrammarCompiler": "gxg.grammar_compiler",
    "CompiledGrammar": "gxg.grammar_compiler",
    "DeserializeFormatError": "gxg.grammar_compiler",
    "GrammarMatcher": "gxg.matcher",
    "BatchGrammarMatcher": "gxg.matcher",
    "GrammarRuntimeError": "gxg.matcher",
    "CompileTimeoutError": "gxg.compile_budget",
    "allocate_token_bitmask": "gxg.matcher",
    "apply_token_bitmask_inplace": "gxg.matcher",
    "get_bitmask_shape": "gxg.matcher",
    "reset_token_bitmask": "gxg.matcher",
    "bitmask_dtype": "gxg.matcher",
    "GrammarBatch": "gxg.batch",
    "DraftMasks": "gxg.draft_masks",
    "DeviceArena": "gxg.arena",
    "ArenaCapacity": "gxg.arena",
    "ArenaFullError": "gxg.arena",
    "RuntimeLimits": "gxg.runtime",
    "ErrorCode": "gxg.runtime",
    "StructuralTag": "gxg.grammar.structural_tag",
    "StructuralTagItem": "gxg.grammar.structural_tag",
    "get_builtin_structural_tag": "gxg.grammar.builtin_structural_tag",
    "get_model_structural_tag": "gxg.grammar.builtin_structural_tag",
    "normalize_tool_choice": "gxg.grammar.builtin_structural_tag",
    "register_model_structural_tag": "gxg.grammar.builtin_structural_tag",
}

__all__ = ["Grammar", "GrammarError", "TokenizerInfo", "VocabType", "__version__", *_LAZY]


def __getattr__(name):
    """A name of ``_LAZY``: the object of its module, imported on first use."""
    module = _LAZY.get(name)
    if module is None:
        raise AttributeError(f"module 'gxg' has no attribute {name!r}")
    return getattr(importlib.import_module(module), name)


def _register_ops() -> None:
    """Define the ``torch.ops.xg`` ops (importing ``gxg.ops.xg_ops`` does; torch must be
    fully imported). A failure is a warning, not an error: it must not break ``import torch``
    or the CPU-only API; ``gxg.GrammarBatch`` imports the ops itself and raises it again."""
    try:
        importlib.import_module("gxg.ops.xg_ops")
    except Exception as error:  # noqa: BLE001 - reported, and raised again on use
        warnings.warn(f"gxg: torch.ops.xg not registered: {error!r}", RuntimeWarning)


class _LoaderThenOps:
    """torch's own loader, plus ``_register_ops`` once torch's module has executed; then it
    puts the original loader back on the module, so torch's spec is as if no hook ran."""

    def __init__(self, loader):
        self._loader = loader

    def create_module(self, spec):
        return self._loader.create_module(spec)

    def exec_module(self, module):
        self._loader.exec_module(module)
        module.__loader__ = module.__spec__.loader = self._loader
        _register_ops()

    def __getattr__(self, name):  # everything else (get_resource_reader, is_package, ...)
        return getattr(self._loader, name)


class _OpsAfterTorch:
    """A meta-path finder that answers only for the top-level ``torch`` import: it removes
    itself, finds torch's spec with the remaining finders and wraps its loader. In: the module
    name being imported. Out: torch's spec with ``_LoaderThenOps``, or None (not torch, or no
    torch installed: the import proceeds, or fails, as it would without gxg)."""

    def find_spec(self, fullname, path=None, target=None):
        if fullname != "torch":
            return None
        if self in sys.meta_path:
            sys.meta_path.remove(self)
        spec = importlib.util.find_spec("torch")
        if spec is not None and spec.loader is not None:
            spec.loader = _LoaderThenOps(spec.loader)
        return spec


def _register_ops_when_torch_is_imported() -> None:
    """Now if torch is imported already; else after its import, without importing it here.
    (``sys.modules["torch"] = None`` is how a process blocks torch: nothing is registered.)"""
    if sys.modules.get("torch") is not None:
        _register_ops()
    elif not any(isinstance(finder, _OpsAfterTorch) for finder in sys.meta_path):
        sys.meta_path.insert(0, _OpsAfterTorch())


_register_ops_when_torch_is_imported()
