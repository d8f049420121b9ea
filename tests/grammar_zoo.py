"""The grammar zoo and its synthetic vocabularies, shared by the matcher, batch, context-pair,
token-budget and XGrammar-parity tests.

* ``GRAMMAR_ZOO``: (name, EBNF or None for the builtin JSON grammar, sentences of the language)
  — grammars chosen for the hard cases: left and right recursion, ambiguity, nullable rules,
  Unicode classes, lookahead;
* ``zoo_grammar(ebnf)``: the ``Grammar`` of a zoo entry;
* ``synthetic_vocab(sentences, seed)``: a vocabulary (bytes tokens) that can spell every
  sentence, with multi-byte and random tokens, then an empty token and the stop token last;
* ``make_info(vocab, extra_padding)``: its ``TokenizerInfo`` (raw bytes, the last token stops);
* ``text_vocab_info`` / ``compile_each`` / ``text_world_fixtures``: a raw-bytes vocabulary of
  given texts, named EBNF grammars compiled for it, and the two as module fixtures;
* ``info_or_skip(name)``: a real vocabulary's ``TokenizerInfo`` (``gxg.vocabularies``), or the
  test is skipped naming the package it lacks;
* ``zoo(name)``: a zoo entry by name; ``zoo_world(names, seed)``: a synthetic vocabulary for the
  named entries' sentences and those grammars compiled for it.
"""
from __future__ import annotations

import random

import pytest

import gxg
from gxg import vocabularies
from gxg.tokenizer import TokenizerInfo, VocabType

# (name, EBNF, sentences of the language used to build vocabularies and real walks)
GRAMMAR_ZOO = [
    ("nested_arrays",
     'root ::= array\narray ::= "[" (value ("," value)*)? "]"\nvalue ::= array | [0-9]+',
     ["[[1,2],[3,[4]]]", "[]", "[[[]],12]"]),
    ("arithmetic",
     'root ::= expr\nexpr ::= expr ("+" | "-") term | term\n'
     'term ::= term ("*" | "/") factor | factor\nfactor ::= [0-9]+ | "(" expr ")"',
     ["1+2*3", "(4-5)/6*(7+8)", "((9))"]),
    ("left_recursive_list",
     'root ::= "[" list "]"\nlist ::= list "," item | item\nitem ::= [a-z]+',
     ["[a,bc,def]", "[x]"]),
    ("ambiguous",
     'root ::= b* b*\nb ::= "x" | "xx"',
     ["xxxxx", "", "x"]),
    ("nullable_heavy",
     'root ::= a b c "!"\na ::= "a"?\nb ::= a a | ""\nc ::= b? "c"*',
     ["aaacc!", "!", "a!", "cc!"]),
    ("unicode",
     'root ::= [α-ω]+ " " [^\\x00-\\x7f]* "."',
     ["αβγ ü€😀.", "ω ."]),
    ("lookahead",
     'root ::= "{" pair ("," pair)* "}"\npair ::= key ":" [0-9]+\n'
     'key ::= "\\"" [a-z]+ "\\"" (= ":")',
     ['{"a":1,"bc":23}', '{"x":0}']),
    ("right_recursive",
     'root ::= item\nitem ::= "a" item | "b"',
     ["aaab", "b"]),
    ("json", None,
     ['{"a": [1, 2.5e3, true, null], "b": {"c": "d\\n\\u00e9"}}', '[]', '[{"x":"y"}, -0.1]']),
]

# Grammars whose distinct parse stacks grow exponentially with the input (profiling/fuzz.py's
# random-grammars family, seed 0: cases that hit the CPU matcher's 4,096-stack ceiling before
# it moved to Earley sets): (name, EBNF, the characters of random inputs)
EXPONENTIAL_GRAMMARS = [
    ("nested_repeats", 'root ::= ((([a-c] root)){0,2}){1,3}', "abc"),
    ("repeated_root", 'root ::= (((root){0,2} [^abc中] [^]))*', "xyz"),
    ("mutual", 'root ::= ((r1)+ "中")\nr1 ::= ((r2)* | root)\n'
               'r2 ::= (r2 | (("c😀" | [abc] | r1) | (root)?))', "abc中"),
    ("any_or_root", 'root ::= (("中b")* | [^] | (("a" | r1 | root) | root))\n'
                    'r1 ::= ((r1 ([a-c] | "ac" | r2))){0,2}\nr2 ::= root', "abc"),
]


def zoo_grammar(ebnf):
    """The ``Grammar`` of a zoo entry's EBNF (None: the builtin JSON grammar)."""
    return gxg.Grammar.builtin_json_grammar() if ebnf is None else gxg.Grammar.from_ebnf(ebnf)


def synthetic_vocab(sentences, seed=0):
    """Single bytes for ASCII, all 1–4 byte substrings of the sentences, UTF-8 fragments,
    an empty (special) token and a stop token."""
    rng = random.Random(seed)
    tokens = {bytes([b]) for b in range(32, 127)} | {b"\n", b"\t", b"\x00"}
    for sentence in sentences:
        data = sentence.encode()
        for i in range(len(data)):
            for j in range(i + 1, min(len(data), i + 4) + 1):
                tokens.add(data[i:j])
        tokens.update(bytes([c]) for c in data)
    for _ in range(40):
        tokens.add(bytes(rng.randrange(256) for _ in range(rng.randint(1, 3))))
    vocab = sorted(tokens) + [b"", b"</s>"]
    return vocab


def make_info(vocab, extra_padding=3):
    """Raw-bytes ``TokenizerInfo`` of ``vocab``, ``extra_padding`` ids past it, the last token
    of ``vocab`` as the stop token."""
    return TokenizerInfo(vocab, VocabType.RAW, vocab_size=len(vocab) + extra_padding,
                         stop_token_ids=[len(vocab) - 1])


def text_vocab_info(texts, vocab_size: int, stop_id: int):
    """Raw-bytes ``TokenizerInfo`` whose tokens are ``texts`` (UTF-8), ``vocab_size`` ids,
    ``stop_id`` the stop token."""
    return TokenizerInfo([t.encode() for t in texts], VocabType.RAW, vocab_size=vocab_size,
                         stop_token_ids=[stop_id])


def compile_each(info, grammars):
    """``{name: EBNF text}`` -> ``{name: CompiledGrammar}`` over ``info`` (no cache)."""
    from gxg.grammar_compiler import GrammarCompiler
    compiler = GrammarCompiler(info, cache_enabled=False)
    return {name: compiler.compile_grammar(ebnf) for name, ebnf in grammars.items()}


def text_world_fixtures(texts, vocab_size: int, stop_id: int, grammars):
    """Module-scoped fixtures ``info`` (``text_vocab_info``) and ``compiled``
    (``compile_each`` of ``grammars`` over it), to assign at module level under those names:
    ``info, compiled = text_world_fixtures(...)``."""
    @pytest.fixture(scope="module")
    def info():
        return text_vocab_info(texts, vocab_size, stop_id)

    @pytest.fixture(scope="module")
    def compiled(info):
        return compile_each(info, grammars)
    return info, compiled


def info_or_skip(name):
    missing = vocabularies.missing_packages(name)
    if missing:
        pytest.skip(f"{name} needs {missing}")
    return vocabularies.tokenizer_info_for(name)


def zoo(name):
    for entry in GRAMMAR_ZOO:
        if entry[0] == name:
            return entry
    raise KeyError(name)


def zoo_world(names, seed):
    """A synthetic vocabulary built from the sentences of the named zoo grammars (5 ids past
    it, the last token as the stop token) and those grammars compiled for it, by name."""
    sentences = [s for name in names for s in zoo(name)[2]]
    vocab = synthetic_vocab(sentences, seed=seed)
    info = TokenizerInfo(vocab, VocabType.RAW, vocab_size=len(vocab) + 5,
                         stop_token_ids=[len(vocab) - 1])
    compiler = gxg.GrammarCompiler(info)
    return info, {name: compiler.compile_grammar(zoo_grammar(zoo(name)[1])) for name in names}
