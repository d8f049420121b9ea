"""gxg: a grammar engine for LLM constrained decoding whose per-step runtime lives on the GPU.

Pipeline (one module per stage): front-ends -> Grammar IR (``gxg.grammar``) -> byte-level
automaton (``gxg.compiler.automaton``) -> token-mask cache (``gxg.compiler.mask_cache``) ->
runtime state (``gxg.runtime``) -> ops (``gxg.ops``). See DESIGN.md.

The host API keeps XGrammar's names. Names that need torch are imported on first use.
"""
from gxg.grammar import Grammar, GrammarError
from gxg.tokenizer import TokenizerInfo, VocabType

__version__ = "0.1.0"

_LAZY = {
    "GrammarCompiler": "gxg.grammar_compiler",
    "CompiledGrammar": "gxg.grammar_compiler",
    "DeserializeFormatError": "gxg.grammar_compiler",
    "GrammarMatcher": "gxg.matcher",
    "GrammarRuntimeError": "gxg.matcher",
    "allocate_token_bitmask": "gxg.matcher",
    "apply_token_bitmask_inplace": "gxg.matcher",
    "get_bitmask_shape": "gxg.matcher",
    "reset_token_bitmask": "gxg.matcher",
    "bitmask_dtype": "gxg.matcher",
    "RuntimeLimits": "gxg.runtime",
}

__all__ = ["Grammar", "GrammarError", "TokenizerInfo", "VocabType", "__version__", *_LAZY]


def __getattr__(name):
    module = _LAZY.get(name)
    if module is None:
        raise AttributeError(f"module 'gxg' has no attribute {name!r}")
    import importlib
    return getattr(importlib.import_module(module), name)
