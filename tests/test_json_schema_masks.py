"""What the JSON Schema emission leaves to the runtime: string units spelled inside the rules
that loop over them, so that the mask cache decides a node's multi-character tokens at
compile time instead of leaving them to the fill's walk from the real stacks.

A unit written as a rule of its own (one JSON string unit, or ``json_char``) and called from
a loop puts a top inside that rule at every character; from there every token longer than
one character pops out of the rule and is uncertain: ~128k of the Qwen vocabulary's 151k
tokens walked at every fill from such a top (MaskBench's Github schemas; profiling/RESULTS.md,
"Keys outside the declared names"). Specified on the real vocabulary: no node of these shapes
leaves more than a few percent of it uncertain. And the language those key tries spell, against
an oracle (``json.loads``): every other string, in every spelling, and none of the names.
"""
from __future__ import annotations

import warnings

import pytest

from gxg.grammar_compiler import GrammarCompiler
from gxg.testing import grammar_accepts
from gxg.vocabularies import missing_packages, tokenizer_info_for

if missing_packages("qwen"):
    pytest.skip(f"needs {', '.join(missing_packages('qwen'))}", allow_module_level=True)

NAMED = {"name": {"type": "string"}, "note": {"type": "string"}}
SHAPES = {
    # keys outside the declared names (a trie of the names, then any other key; a declared
    # name spelled with escapes is no other key)
    "additionalProperties": ({"type": "object", "properties": NAMED,
                              "additionalProperties": {"type": "integer"}},
                             ['{"name": "a", "nom": 1}', '{"namex": 2}', '{"n\\u00e9": 3}',
                              '{"\\u006eom": 1}', '{"n\\u0041me": 1}'],
                             ['{"name": 1}', '{"nom": "x"}', '{"n\\u0061me": 1}',
                              '{"\\u006Eote": 2}']),
    # a regex whose classes include escapes ([^,] and .): units with alternatives
    "pattern": ({"type": "string", "pattern": "^[^,]+,.*$"},
                ['"ab,cd"', '"\\u00e9,"', '"x,"'], ['"abc"', '",x"']),
    "patternProperties": ({"type": "object", "patternProperties": {"^x-.+$": {"type": "integer"}},
                           "additionalProperties": False},
                          ['{"x-a": 1}', '{"x-\\"q": 2}'], ['{"y-a": 1}', '{"x-": 1}']),
}


@pytest.fixture(scope="module")
def compiler():
    return GrammarCompiler(tokenizer_info_for("qwen"))


@pytest.mark.parametrize("shape", sorted(SHAPES))
def test_no_node_leaves_most_tokens_to_the_runtime(compiler, shape):
    schema, accepted, refused = SHAPES[shape]
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        compiled = compiler.compile_json_schema(schema, any_whitespace=True, strict_mode=False)
    for text in accepted:
        assert grammar_accepts(compiled.grammar, text), text
    for text in refused:
        assert not grammar_accepts(compiled.grammar, text), text
    vocab = compiled.tokenizer_info.vocab_size
    worst = max(len(entry.uncertain) for entry in compiled.mask_cache.precompute().entries)
    assert worst < vocab // 20, f"a node leaves {worst} of {vocab} tokens uncertain"



# One more unit after each prefix of the declared names, in every way a key can spell it.
NAMES = ("name", "note")
UNITS = ([chr(c) for c in range(0x20, 0x7F) if chr(c) not in '"\\'] + ["\x01", "\x7f", "é", "😀"]
         + ["\\" + c for c in '"\\/bfnrtx'] + [f"\\u00{x}{y}" for x in "0467" for y in "0aAeE1fF"]
         + ["\\u00e9", "\\u00E9", "\\u0100", "\\ud83d\\ude00", "\\ud83d", "\\u00g1", "\\u006"])
PREFIXES = sorted({name[:k] for name in NAMES for k in range(len(name) + 1)})


def test_keys_outside_the_names_are_exactly_the_other_strings():
    """With properties and additionalProperties, ``{"<key>": 1}`` (an integer: only an extra
    key takes it) is accepted exactly when the key is a well-formed JSON string whose value
    is none of the declared names; checked for every prefix of a name followed by one unit
    spelled raw, escaped or malformed, and that unit followed by a name's next letter."""
    import json
    from gxg.grammar.ir import Grammar
    from gxg.testing import Recognizer
    recognizer = Recognizer(Grammar.from_json_schema(
        {"type": "object", "properties": {name: {"type": "string"} for name in NAMES},
         "additionalProperties": {"type": "integer"}}, strict_mode=False))
    for prefix in PREFIXES:
        for unit in UNITS:
            for key in (prefix + unit, prefix + unit + "e"):
                try:
                    value = json.loads(f'"{key}"')
                except ValueError:
                    value = None
                if value is not None and any(0xD800 <= ord(c) <= 0xDFFF for c in value):
                    value = None  # a lone surrogate is no character (gxg, as XGrammar)
                expected = value is not None and value not in NAMES
                text = '{"' + key + '": 1}'
                assert recognizer.accepts(text.encode()) == expected, text
