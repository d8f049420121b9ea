"""A compile leaves no reference cycles behind.

The compiler allocates its intermediate grammars, automata and walk states by the ten thousand
with the cyclic collector paused (``gxg.compiler.automaton.gc_paused``). What a compile drops
must be freed by reference counting there and then: an object in a reference cycle (a nested
function that calls itself holds itself through its closure, and with it everything it
captured — a front end's emitter and all its rules) waits for the next collection instead,
which then has to walk it. The oracle: with ``gc.DEBUG_SAVEALL`` the collector keeps whatever
it had to free in ``gc.garbage``; after a compile nothing of gxg's may be there.
"""
from __future__ import annotations

import gc
import types

import pytest

import gxg

VOCABULARY = [b"{", b"}", b'"', b":", b",", b" ", b"a", b"b", b"ab", b'":', b"1", b"x", b"\\"]

SCHEMA_WITH_EXTRA_KEYS = {  # key tries with the keys outside them, a value per property
    "type": "object",
    "properties": {"alpha": {"type": "integer"}, "beta": {"type": "string"}},
    "additionalProperties": {"type": "number"},
}
SCHEMA_WITH_PATTERNS = {
    "type": "object",
    "properties": {"id": {"type": "string", "pattern": "^[a-z]+-[0-9]{2,4}$"}},
    "patternProperties": {"^x-": {"type": "boolean"}},
    "unevaluatedProperties": False,
    "anyOf": [{"required": ["id"]}, {"properties": {"n": {"enum": [1, 2.0, "three"]}}}],
}
LARK = """
start: pair ("," pair)*
pair: KEY ":" NUMBER
KEY: LETTER+
LETTER: "a".."z"
NUMBER: DIGIT+
DIGIT: "0".."9"
"""
EBNF = """
root ::= item ("," item)*
item ::= small | "[" root "]"
small ::= "a" | "b" | digits
digits ::= [0-9]+
"""

COMPILES = {
    "JSON Schema, extra keys": lambda c: c.compile_json_schema(SCHEMA_WITH_EXTRA_KEYS),
    "JSON Schema, patterns and unevaluatedProperties":
        lambda c: c.compile_json_schema(SCHEMA_WITH_PATTERNS),
    "Lark with terminals": lambda c: c.compile_lark(LARK),
    "EBNF with small rules to inline": lambda c: c.compile_grammar(EBNF),
    "builtin JSON": lambda c: c.compile_builtin_json_grammar(),
}


def gxg_garbage(objects) -> list:
    """The objects of gxg's own (its classes' instances, its functions) among ``objects``."""
    def module(obj) -> str:
        return obj.__module__ if isinstance(obj, types.FunctionType) else type(obj).__module__
    return [obj for obj in objects if str(module(obj)).split(".")[0] == "gxg"]


@pytest.mark.parametrize("name", sorted(COMPILES))
def test_a_compile_leaves_no_reference_cycles(name):
    compiler = gxg.GrammarCompiler(gxg.TokenizerInfo(VOCABULARY), cache_enabled=False)
    COMPILES[name](compiler)  # caches that live across compiles (rule DFAs, units) warm up
    gc.collect()
    flags = gc.get_debug()
    gc.set_debug(gc.DEBUG_SAVEALL)
    try:
        compiled = COMPILES[name](compiler)
        compiled.mask_cache.precompute()  # the vocabulary walk too
        del compiled
        gc.collect()
        leaked = gxg_garbage(gc.garbage)
    finally:
        gc.set_debug(flags)
        gc.garbage.clear()
    described = sorted({getattr(obj, "__qualname__", type(obj).__qualname__) for obj in leaked})
    assert not leaked, f"objects freed only by the cyclic collector: {described}"
