"""Token-level grammar items, front end: ``Token(...)``, ``ExcludeToken(...)`` and
``TokenTagDispatch(...)`` in EBNF (gxg/grammar/ebnf.py, macros.py), their printing
(printer.py), the token-level structural-tag formats (structural_tag_emission.py), and how the
passes and analyses treat a ``TokenSet`` leaf (compiler/passes.py, rule_analysis.py,
combine.py, testing.py).

Tables: EBNF texts and their printouts (printing then parsing gives the grammar back), EBNF
errors with line and column, the TokenTagDispatch lowering, structural tags and their gxg
printouts next to XGrammar 0.2.8's (same rule names, same token items), token strings resolved
through a vocabulary, structural-tag errors. When XGrammar is installed, its verdicts are
checked on the same inputs, and gxg's token masks are compared with XGrammar's along random
token walks over a small handmade vocabulary (the lowering's semantics, end to end).
"""
from __future__ import annotations

import json
import random
import re
import zlib

import pytest

from gxg.compiler.passes import MATCHES_NOTHING, left_corners, prepare
from gxg.grammar.ir import (
    Grammar, GrammarError, Literal, Rule, RuleRef, Sequence, TokenSet, iter_subexprs,
)
from gxg.grammar.printer import rule_to_ebnf
from gxg.grammar.rule_analysis import is_nullable, is_productive
from gxg.grammar_compiler import GrammarCompiler
from gxg.matcher import GrammarMatcher
from gxg.testing import Recognizer, sample_sentence
from gxg.tokenizer import TokenizerInfo, VocabType

from xgrammar_oracle import mask_pair, needs_xgrammar, xgrammar

# A handmade vocabulary: "</s>" (6) stops, "" (9) is special; a few texts the grammars spell.
VOCAB = ["a", "b", "<call>", "</call>", "x", "y", "</s>", "<sp>", "ab", "", "<a>", "E",
         "</a>", "<b>", "</b>", ",", "<call>"]
STOP = 6
INFO = TokenizerInfo(VOCAB, VocabType.RAW, stop_token_ids=[STOP])


def _tag(fmt) -> str:
    return json.dumps({"type": "structural_tag", "format": fmt})


def _token_leaves(grammar: Grammar) -> set:
    return {node for rule in grammar.rules for node in iter_subexprs(rule.body)
            if isinstance(node, TokenSet)}


# ----------------------------------------------------------------------------- EBNF: print, parse

# (EBNF text, gxg's printout)
ROUND_TRIP = [
    ("root ::= Token(1, 2)", "root ::= Token(1, 2)\n"),
    ("root ::= ExcludeToken(2,1,2)", "root ::= ExcludeToken(1, 2)\n"),
    ("root ::= ExcludeToken()", "root ::= ExcludeToken()\n"),
    ("root ::= Token(01) Token( 3 , 2 )", "root ::= Token(1) Token(2, 3)\n"),
    ("root ::= Token(1 # a comment\n, 2)", "root ::= Token(1, 2)\n"),
    ("root ::= Token(2147483647) Token(0)", "root ::= Token(2147483647) Token(0)\n"),
    ('root ::= Token(1)+ ExcludeToken(2)? Token(3){2,3} | "a" Token(0)',
     'root ::= Token(1)+ ExcludeToken(2)? Token(3){2,3} | "a" Token(0)\n'),
    ('root ::= (Token(1) | "x")*', 'root ::= (Token(1) | "x")*\n'),
    ('root ::= "a" (= Token(1))', 'root ::= "a" (= Token(1))\n'),
    ('root ::= Token(1) (= "a" ExcludeToken(4))', 'root ::= Token(1) (= "a" ExcludeToken(4))\n'),
    ('root ::= x Token(7)\nx ::= "a" | Token(8, 9)',
     'root ::= x Token(7)\nx ::= "a" | Token(8, 9)\n'),
]


@pytest.mark.parametrize("ebnf, printed", ROUND_TRIP, ids=[case[0] for case in ROUND_TRIP])
def test_print_parse_round_trip(ebnf, printed):
    grammar = Grammar.from_ebnf(ebnf)
    assert str(grammar) == printed
    assert Grammar.from_ebnf(str(grammar)) == grammar


def test_hand_built_token_sets_print_and_parse_back():
    grammar = Grammar((Rule("root", Sequence((TokenSet((3, 1, 3)), RuleRef("x"))),
                            TokenSet((), negated=True)),
                       Rule("x", TokenSet((5,), negated=True))))
    assert str(grammar) == "root ::= Token(1, 3) x (= ExcludeToken())\nx ::= ExcludeToken(5)\n"
    assert Grammar.from_ebnf(str(grammar)) == grammar


# EBNF texts without repetition, whose XGrammar printout reads back as the same gxg grammar
# (XGrammar rewrites repetitions into rules of its own).
SAME_AS_XGRAMMAR = [
    "root ::= Token(1, 2)",
    "root ::= ExcludeToken(2,1,2)",
    "root ::= Token(2, 1, 2) | ExcludeToken(1, 1)",
    'root ::= Token(1) "a" | ExcludeToken(3)',
    'root ::= "a" (= Token(1))',
    'root ::= Token(1)(= "a")',
    "root ::= Token(01)",
    "root ::= Token(1,\n 2)",
    'root ::= "" | Token(0)',
]


@needs_xgrammar
@pytest.mark.parametrize("ebnf", SAME_AS_XGRAMMAR)
def test_xgrammar_prints_the_same_token_items(ebnf):
    assert Grammar.from_ebnf(str(xgrammar.Grammar.from_ebnf(ebnf))) == Grammar.from_ebnf(ebnf)


# ----------------------------------------------------------------------------- EBNF: errors

REJECTS, ACCEPTS = "rejects", "accepts"

# (EBNF text, line, column, fragment of gxg's message, XGrammar 0.2.8's verdict)
ERRORS = [
    ("root ::= Token()", 1, 15, "Token() requires at least one integer argument", REJECTS),
    ("root ::= Token(-1)", 1, 16, "Token() arguments must be non-negative integers, not -1",
     REJECTS),
    ("root ::= ExcludeToken(-3)", 1, 23, "ExcludeToken() arguments must be non-negative",
     REJECTS),
    ('root ::= Token("<x>")', 1, 16, "must be non-negative integers, not a string", REJECTS),
    ("root ::= Token(1, a)\na ::= \"a\"", 1, 19, "not a rule name", REJECTS),
    ("root ::= Token((1, 2))", 1, 16, "not a tuple", REJECTS),
    ("root ::= Token(true)", 1, 16, "not a boolean", REJECTS),
    ("root ::= Token(x=1)", 1, 16, "Token() does not accept keyword arguments", REJECTS),
    ("root ::= Token(1, 2, )", 1, 22, "expected a macro argument", REJECTS),
    ("root ::= Token(1,,2)", 1, 18, "expected a macro argument", REJECTS),
    ("root ::= Token(+1)", 1, 16, "expected a macro argument", REJECTS),
    ("root ::= Token(1.5)", 1, 16, "expected a macro argument", REJECTS),
    ("root ::= Token(1", 1, 15, "the macro call Token( is never closed", REJECTS),
    # XGrammar wraps ids to 32 bits (Token(2147483648) prints as Token(-2147483648))
    ("root ::= Token(2147483648)", 1, 16, "must be at most 2147483647", ACCEPTS),
    ('root ::= TokenTagDispatch(("x", a))\na ::= "x"', 1, 28,
     "token trigger ids must be non-negative integers, not a string", REJECTS),
    ('root ::= TokenTagDispatch((-1, a))\na ::= "x"', 1, 28,
     "token trigger ids must be non-negative integers, not -1", REJECTS),
    ('root ::= TokenTagDispatch((1, "a"))\na ::= "x"', 1, 31, "must be a rule name", REJECTS),
    ('root ::= TokenTagDispatch((1, a, b))\na ::= "x"\nb ::= "y"', 1, 27,
     "each argument of TokenTagDispatch() must be a pair (token_id, rule), not a tuple of 3",
     REJECTS),
    ("root ::= TokenTagDispatch(1)", 1, 27, "must be a tuple such as (token_id, rule)",
     REJECTS),
    ('root ::= TokenTagDispatch((1, c))\na ::= "x"', 1, 31,
     "the rule 'c' is referenced but never defined", REJECTS),
    ('root ::= TokenTagDispatch((1, a), excludes=(1,))\na ::= "x"', 1, 45,
     "the exclude token id 1 must not overlap with a token trigger id", REJECTS),
    ('root ::= TokenTagDispatch((1, a), excludes=("x",))\na ::= "x"', 1, 45,
     "exclude token ids must be non-negative integers", REJECTS),
    ('root ::= TokenTagDispatch((1, a), excludes=(-2,))\na ::= "x"', 1, 45,
     "exclude token ids must be non-negative integers, not -2", REJECTS),
    ('root ::= TokenTagDispatch((1, a), excludes=5)\na ::= "x"', 1, 44,
     "excludes must be a tuple", REJECTS),
    ('root ::= TokenTagDispatch((1, a), loop_after_dispatch=1)\na ::= "x"', 1, 55,
     "loop_after_dispatch must be true or false", REJECTS),
    ('root ::= TokenTagDispatch((1, a), stop_eos=true)\na ::= "x"', 1, 35,
     "unknown keyword argument 'stop_eos' for TokenTagDispatch()", REJECTS),
    # XGrammar keeps the last of a repeated keyword, and allows TokenTagDispatch in a lookahead
    ('root ::= TokenTagDispatch((1, a), loop_after_dispatch=true, loop_after_dispatch=false)\n'
     'a ::= "x"', 1, 61, "given more than once", ACCEPTS),
    ('root ::= "a" (= TokenTagDispatch())', 1, 17, "cannot be used in a lookahead assertion",
     ACCEPTS),
]

ERROR_IDS = [f"{case[1]}:{case[2]} {case[3]}" for case in ERRORS]


@pytest.mark.parametrize("ebnf, line, column, fragment, verdict", ERRORS, ids=ERROR_IDS)
def test_errors(ebnf, line, column, fragment, verdict):
    with pytest.raises(GrammarError) as caught:
        Grammar.from_ebnf(ebnf)
    assert fragment in caught.value.message
    assert (caught.value.line, caught.value.column) == (line, column), caught.value.message


@needs_xgrammar
@pytest.mark.parametrize("ebnf, line, column, fragment, verdict", ERRORS, ids=ERROR_IDS)
def test_xgrammar_verdicts_on_the_errors(ebnf, line, column, fragment, verdict):
    if verdict == ACCEPTS:
        xgrammar.Grammar.from_ebnf(ebnf)
        return
    with pytest.raises(RuntimeError):
        xgrammar.Grammar.from_ebnf(ebnf)


# ----------------------------------------------------------------------------- TokenTagDispatch

RULES_AB = '\na ::= "x" Token(3)\nb ::= "y"'

# (EBNF text, gxg's printout): the lowering (gxg/grammar/macros.py)
LOWERING = [
    ("root ::= TokenTagDispatch((2, a), (4, b))" + RULES_AB,
     "root ::= (ExcludeToken(2, 4) | Token(2) a | Token(4) b)*" + RULES_AB + "\n"),
    ("root ::= TokenTagDispatch((2, a), loop_after_dispatch=false)" + RULES_AB,
     "root ::= ExcludeToken(2)* (Token(2) a)?" + RULES_AB + "\n"),
    ("root ::= TokenTagDispatch((2, a), (2, b), loop_after_dispatch=false, excludes=(5, 7,))"
     + RULES_AB,
     "root ::= ExcludeToken(2, 5, 7)* (Token(2) (a | b))?" + RULES_AB + "\n"),
    ("root ::= TokenTagDispatch((2, a), excludes=(5,)) Token(5)" + RULES_AB,
     "root ::= (ExcludeToken(2, 5) | Token(2) a)* Token(5)" + RULES_AB + "\n"),
    ('root ::= TokenTagDispatch((2, a), loop_after_dispatch=false) "y"' + RULES_AB,
     'root ::= ExcludeToken(2)* (Token(2) a)? "y"' + RULES_AB + "\n"),
    ("root ::= TokenTagDispatch()", "root ::= ExcludeToken()*\n"),
    ("root ::= TokenTagDispatch(loop_after_dispatch=false, excludes=(3, 3))",
     "root ::= ExcludeToken(3)*\n"),
    ('root ::= "<" TokenTagDispatch((7, root)) ">"',
     'root ::= "<" (ExcludeToken(7) | Token(7) root)* ">"\n'),
]


@pytest.mark.parametrize("ebnf, printed", LOWERING, ids=[case[0] for case in LOWERING])
def test_token_tag_dispatch_lowering(ebnf, printed):
    grammar = Grammar.from_ebnf(ebnf)
    assert str(grammar) == printed
    assert Grammar.from_ebnf(str(grammar)) == grammar
    prepare(grammar)


def _walk_masks(ours_compiled, theirs_compiled, vocab_size: int, seed: int, *,
                walks: int = 12, steps: int = 10) -> None:
    """Random token walks: at each step gxg's mask must equal XGrammar's; the next token is
    drawn from the allowed ones, the stop token only now and then."""
    rng = random.Random(seed)
    for _ in range(walks):
        ours = GrammarMatcher(ours_compiled)
        theirs = xgrammar.GrammarMatcher(theirs_compiled)
        done = []
        for _ in range(steps):
            mine, reference = mask_pair(ours, theirs, vocab_size)
            assert (mine == reference).all(), (done, mine.nonzero(), reference.nonzero())
            allowed = [int(i) for i in reference.nonzero()[0]]
            if not allowed:
                break
            others = [i for i in allowed if i != STOP]
            token = rng.choice(others) if others and rng.random() < 0.9 else rng.choice(allowed)
            assert ours.accept_token(token) and theirs.accept_token(token)
            done.append(token)
            assert ours.is_terminated() == theirs.is_terminated()
            if token == STOP:
                break


def _compilers():
    xinfo = xgrammar.TokenizerInfo(VOCAB, xgrammar.VocabType.RAW, stop_token_ids=[STOP])
    return (INFO, GrammarCompiler(INFO, cache_enabled=False),
            xgrammar.GrammarCompiler(xinfo, cache_enabled=False))


MASK_GRAMMARS = [ebnf for ebnf, _ in LOWERING] + [
    'root ::= "a" Token(2) "x" ExcludeToken(3, 4)',
    'root ::= Token(2, 3)+ "ab"',
    'root ::= "<call>" TokenTagDispatch((3, a), excludes=(8,)) "y"\na ::= "x"',
]


@needs_xgrammar
@pytest.mark.parametrize("ebnf", MASK_GRAMMARS)
def test_masks_match_xgrammar_along_token_walks(ebnf):
    info, ours, theirs = _compilers()
    _walk_masks(ours.compile_grammar(ebnf), theirs.compile_grammar(ebnf), info.vocab_size,
                zlib.crc32(ebnf.encode()))


# ----------------------------------------------------------------------------- structural tags

X = {"type": "const_string", "value": "x"}
Y = {"type": "const_string", "value": "y"}


def tok(token):
    return {"type": "token", "token": token}


def tag(begin, content, end):
    return {"type": "tag", "begin": begin, "content": content, "end": end}


def triggered(triggers, tags, **options):
    return {"type": "token_triggered_tags", "trigger_tokens": triggers, "tags": tags, **options}


TWO_TAGS = [tag(tok(2), X, "</a>"), tag(tok(4), Y, tok(3))]
ONE_TAG = [tag(tok(2), X, tok(3))]

# (id, format, gxg's printout, XGrammar 0.2.8's printout)
STRUCTURAL = [
    ("token", tok(5),
     "token ::= Token(5)\nroot ::= token\n",
     "token ::= ((Token(5)))\nroot ::= ((token))\n"),
    ("exclude_token", {"type": "exclude_token", "exclude_tokens": [5, 3]},
     "exclude_token ::= ExcludeToken(3, 5)\nroot ::= exclude_token\n",
     "exclude_token ::= ((ExcludeToken(5, 3)))\nroot ::= ((exclude_token))\n"),
    ("exclude_token-empty", {"type": "exclude_token"},
     "exclude_token ::= ExcludeToken()\nroot ::= exclude_token\n",
     "exclude_token ::= ((ExcludeToken()))\nroot ::= ((exclude_token))\n"),
    ("any_tokens", {"type": "any_tokens", "exclude_tokens": [5, 3]},
     "any_tokens ::= ExcludeToken(3, 5)*\nroot ::= any_tokens\n",
     'any_tokens_inner ::= ((ExcludeToken(5, 3)))\n'
     'any_tokens ::= ("" | (any_tokens_inner any_tokens))\nroot ::= ((any_tokens))\n'),
    ("any_tokens-max_tokens-0", {"type": "any_tokens", "max_tokens": 0},
     'any_tokens ::= ""\nroot ::= any_tokens\n',
     'any_tokens_inner ::= ((ExcludeToken()))\nany_tokens[max_tokens=0] ::= ("")\n'
     'root ::= ((any_tokens))\n'),
    ("token_dispatch", {"type": "token_dispatch", "rules": [[2, X], [3, Y]]},
     'const_string ::= "x"\nconst_string_1 ::= "y"\n'
     "token_tag_dispatch ::= (ExcludeToken(2, 3) | Token(2) const_string"
     " | Token(3) const_string_1)*\nroot ::= token_tag_dispatch\n",
     'const_string ::= (("x"))\nconst_string_1 ::= (("y"))\n'
     "token_tag_dispatch ::= ((token_tag_dispatch_1))\nroot ::= ((token_tag_dispatch))\n"
     "token_tag_dispatch_1 ::= TokenTagDispatch(\n  (2, const_string),\n"
     "  (3, const_string_1),\n  loop_after_dispatch=true,\n  excludes=()\n)\n"),
    ("token_dispatch-no-loop",
     {"type": "token_dispatch", "rules": [[2, X]], "loop": False, "exclude_tokens": [7, 8]},
     'const_string ::= "x"\n'
     "token_tag_dispatch ::= ExcludeToken(2, 7, 8)* (Token(2) const_string)?\n"
     "root ::= token_tag_dispatch\n",
     'const_string ::= (("x"))\n'
     "token_tag_dispatch ::= ((token_tag_dispatch_1))\nroot ::= ((token_tag_dispatch))\n"
     "token_tag_dispatch_1 ::= TokenTagDispatch(\n  (2, const_string),\n"
     "  loop_after_dispatch=false,\n  excludes=(7, 8)\n)\n"),
    ("token_triggered_tags", triggered([2, 4], TWO_TAGS, exclude_tokens=[9]),
     'const_string ::= "x"\nconst_string_1 ::= "y"\n'
     'token_triggered_tags_group ::= const_string "</a>"\n'
     "token_triggered_tags_group_1 ::= const_string_1 Token(3)\n"
     "token_triggered_tags ::= (ExcludeToken(2, 4, 9) | Token(2) token_triggered_tags_group"
     " | Token(4) token_triggered_tags_group_1)*\nroot ::= token_triggered_tags\n",
     'const_string ::= (("x"))\nconst_string_1 ::= (("y"))\n'
     'token_triggered_tags_group ::= ((const_string "</a>"))\n'
     "token_triggered_tags_group_1 ::= ((const_string_1 Token(3)))\n"
     "token_triggered_tags ::= ((token_triggered_tags_1))\n"
     "root ::= ((token_triggered_tags))\n"
     "token_triggered_tags_1 ::= TokenTagDispatch(\n  (2, token_triggered_tags_group),\n"
     "  (4, token_triggered_tags_group_1),\n  loop_after_dispatch=true,\n  excludes=(9)\n)\n"),
    ("token_triggered_tags-at_least_one",
     triggered([2, 4], TWO_TAGS, exclude_tokens=[9], at_least_one=True),
     'const_string ::= "x"\nconst_string_1 ::= "y"\n'
     'token_triggered_tags_group ::= const_string "</a>"\n'
     "token_triggered_tags_group_1 ::= const_string_1 Token(3)\n"
     'token_triggered_tags_first ::= Token(2) const_string "</a>"'
     " | Token(4) const_string_1 Token(3)\n"
     "token_triggered_tags_sub ::= (ExcludeToken(2, 4, 9) | Token(2) token_triggered_tags_group"
     " | Token(4) token_triggered_tags_group_1)*\n"
     "token_triggered_tags ::= token_triggered_tags_first token_triggered_tags_sub\n"
     "root ::= token_triggered_tags\n",
     'const_string ::= (("x"))\nconst_string_1 ::= (("y"))\n'
     'token_triggered_tags_group ::= ((const_string "</a>"))\n'
     "token_triggered_tags_group_1 ::= ((const_string_1 Token(3)))\n"
     'token_triggered_tags_first ::= ((Token(2) const_string "</a>")'
     " | (Token(4) const_string_1 Token(3)))\n"
     "token_triggered_tags_sub ::= ((token_triggered_tags_sub_1))\n"
     "token_triggered_tags ::= ((token_triggered_tags_first token_triggered_tags_sub))\n"
     "root ::= ((token_triggered_tags))\n"
     "token_triggered_tags_sub_1 ::= TokenTagDispatch(\n"
     "  (2, token_triggered_tags_group),\n  (4, token_triggered_tags_group_1),\n"
     "  loop_after_dispatch=true,\n  excludes=(9)\n)\n"),
    ("token_triggered_tags-stop_after_first", triggered([2], ONE_TAG, stop_after_first=True),
     'const_string ::= "x"\ntoken_triggered_tags_group ::= const_string Token(3)\n'
     "token_triggered_tags ::= ExcludeToken(2)* (Token(2) token_triggered_tags_group)?\n"
     "root ::= token_triggered_tags\n",
     'const_string ::= (("x"))\ntoken_triggered_tags_group ::= ((const_string Token(3)))\n'
     "token_triggered_tags ::= ((token_triggered_tags_1))\n"
     "root ::= ((token_triggered_tags))\n"
     "token_triggered_tags_1 ::= TokenTagDispatch(\n  (2, token_triggered_tags_group),\n"
     "  loop_after_dispatch=false,\n  excludes=()\n)\n"),
    ("token_triggered_tags-exactly-one",
     triggered([2], ONE_TAG, stop_after_first=True, at_least_one=True),
     'const_string ::= "x"\ntoken_triggered_tags ::= Token(2) const_string Token(3)\n'
     "root ::= token_triggered_tags\n",
     'const_string ::= (("x"))\n'
     "token_triggered_tags ::= ((Token(2) const_string Token(3)))\n"
     "root ::= ((token_triggered_tags))\n"),
    ("tag-token-begin-end", tag(tok(2), {"type": "any_text"}, tok(3)),
     "any_text ::= [\\x00-\\U0010FFFF]*\ntag ::= Token(2) any_text Token(3)\nroot ::= tag\n",
     "any_text ::= (([\\0-\\U0010ffff]*))\ntag ::= ((Token(2) any_text Token(3)))\n"
     "root ::= ((tag))\n"),
    # the enclosing tag's end token is excluded from the token-level free formats inside it
    ("tag-token-end-excludes",
     tag("<a>", triggered([2], [tag(tok(2), X, "E")], exclude_tokens=[7]), tok(5)),
     'const_string ::= "x"\ntoken_triggered_tags_group ::= const_string "E"\n'
     "token_triggered_tags ::= (ExcludeToken(2, 5, 7) | Token(2) token_triggered_tags_group)*\n"
     'tag ::= "<a>" token_triggered_tags Token(5)\nroot ::= tag\n',
     'const_string ::= (("x"))\ntoken_triggered_tags_group ::= ((const_string "E"))\n'
     "token_triggered_tags ::= ((token_triggered_tags_1))\n"
     'tag ::= (("<a>" token_triggered_tags Token(5)))\nroot ::= ((tag))\n'
     "token_triggered_tags_1 ::= TokenTagDispatch(\n  (2, token_triggered_tags_group),\n"
     "  loop_after_dispatch=true,\n  excludes=(7, 5)\n)\n"),
    # ... even when it is a trigger: the trigger still dispatches
    ("tag-token-end-is-trigger", tag("<a>", triggered([2], [tag(tok(2), X, "E")]), tok(2)),
     'const_string ::= "x"\ntoken_triggered_tags_group ::= const_string "E"\n'
     "token_triggered_tags ::= (ExcludeToken(2) | Token(2) token_triggered_tags_group)*\n"
     'tag ::= "<a>" token_triggered_tags Token(2)\nroot ::= tag\n',
     'const_string ::= (("x"))\ntoken_triggered_tags_group ::= ((const_string "E"))\n'
     "token_triggered_tags ::= ((token_triggered_tags_1))\n"
     'tag ::= (("<a>" token_triggered_tags Token(2)))\nroot ::= ((tag))\n'
     "token_triggered_tags_1 ::= TokenTagDispatch(\n  (2, token_triggered_tags_group),\n"
     "  loop_after_dispatch=true,\n  excludes=(2)\n)\n"),
    ("tag-token-end-star-any_tokens",
     tag(tok(1), {"type": "star", "content": {"type": "any_tokens"}}, tok(5)),
     "any_tokens ::= ExcludeToken(5)*\nstar ::= any_tokens*\ntag ::= Token(1) star Token(5)\n"
     "root ::= tag\n",
     "any_tokens_inner ::= ((ExcludeToken(5)))\n"
     'any_tokens ::= ("" | (any_tokens_inner any_tokens))\n'
     'star ::= ("" | (any_tokens star))\nstar_1 ::= ((star))\n'
     "tag ::= ((Token(1) star_1 Token(5)))\nroot ::= ((tag))\n"),
    ("tag-token-end-exclude_token",
     tag("<a>", {"type": "exclude_token", "exclude_tokens": [7]}, tok(5)),
     'exclude_token ::= ExcludeToken(5, 7)\ntag ::= "<a>" exclude_token Token(5)\n'
     "root ::= tag\n",
     'exclude_token ::= ((ExcludeToken(7, 5)))\ntag ::= (("<a>" exclude_token Token(5)))\n'
     "root ::= ((tag))\n"),
    # a nearer tag with end strings hides the outer end token
    ("nested-string-end", tag("<a>", tag("<b>", {"type": "any_tokens"}, "</b>"), tok(5)),
     'any_tokens ::= ExcludeToken()*\ntag ::= "<b>" any_tokens "</b>"\n'
     'tag_1 ::= "<a>" tag Token(5)\nroot ::= tag_1\n',
     "any_tokens_inner ::= ((ExcludeToken()))\n"
     'any_tokens ::= ("" | (any_tokens_inner any_tokens))\n'
     'tag ::= (("<b>" any_tokens "</b>"))\ntag_1 ::= (("<a>" tag Token(5)))\n'
     "root ::= ((tag_1))\n"),
    # token_dispatch adds no end token to its excludes (its contents do)
    ("token_dispatch-in-tag",
     tag("<a>", {"type": "token_dispatch", "rules": [[2, {"type": "any_tokens"}]]}, tok(5)),
     "any_tokens ::= ExcludeToken(5)*\n"
     "token_tag_dispatch ::= (ExcludeToken(2) | Token(2) any_tokens)*\n"
     'tag ::= "<a>" token_tag_dispatch Token(5)\nroot ::= tag\n',
     "any_tokens_inner ::= ((ExcludeToken(5)))\n"
     'any_tokens ::= ("" | (any_tokens_inner any_tokens))\n'
     "token_tag_dispatch ::= ((token_tag_dispatch_1))\n"
     'tag ::= (("<a>" token_tag_dispatch Token(5)))\nroot ::= ((tag))\n'
     "token_tag_dispatch_1 ::= TokenTagDispatch(\n  (2, any_tokens),\n"
     "  loop_after_dispatch=true,\n  excludes=()\n)\n"),
    # unlimited content with excludes needs no end string
    ("any_tokens-excluded-empty-end",
     tag("<a>", {"type": "any_tokens", "exclude_tokens": [5]}, ""),
     'any_tokens ::= ExcludeToken(5)*\ntag ::= "<a>" any_tokens\nroot ::= tag\n',
     "any_tokens_inner ::= ((ExcludeToken(5)))\n"
     'any_tokens ::= ("" | (any_tokens_inner any_tokens))\n'
     'tag ::= (("<a>" any_tokens))\nroot ::= ((tag))\n'),
    ("tags_with_separator",
     {"type": "tags_with_separator", "separator": ",", "tags": [tag(tok(2), X, tok(3))]},
     'const_string ::= "x"\ntag ::= Token(2) const_string Token(3)\n'
     "tags_with_separator_tags ::= tag\n"
     'tags_with_separator_sub ::= "" | "," tags_with_separator_tags tags_with_separator_sub\n'
     'tags_with_separator ::= "" | tags_with_separator_tags tags_with_separator_sub\n'
     "root ::= tags_with_separator\n",
     'const_string ::= (("x"))\ntag ::= ((Token(2) const_string Token(3)))\n'
     "tags_with_separator_tags ::= ((tag))\n"
     'tags_with_separator_sub ::= ("" | ("," tags_with_separator_tags'
     " tags_with_separator_sub))\n"
     'tags_with_separator ::= ("" | (tags_with_separator_tags tags_with_separator_sub))\n'
     "root ::= ((tags_with_separator))\n"),
]

STRUCTURAL_IDS = [case[0] for case in STRUCTURAL]
# XGrammar keeps an unused any_tokens_inner rule where max_tokens=0 emptied any_tokens.
UNUSED_IN_XGRAMMAR = {"any_tokens-max_tokens-0": {("ExcludeToken", ())}}


@pytest.mark.parametrize("name, fmt, printed, xgrammar_printed", STRUCTURAL, ids=STRUCTURAL_IDS)
def test_structural_tag_printout(name, fmt, printed, xgrammar_printed):
    grammar = Grammar.from_structural_tag(_tag(fmt))
    assert str(grammar) == printed
    assert Grammar.from_ebnf(str(grammar)) == grammar
    prepare(grammar)


_RULE_NAME = re.compile(r"^([A-Za-z_.\-][A-Za-z0-9_.\-]*)(?:\[[^\]]*\])? ::=", re.M)
_TOKEN_ITEM = re.compile(r"(Exclude)?Token\(([0-9, ]*)\)")
_DISPATCH = re.compile(r"TokenTagDispatch\(\n(.*?)  loop_after_dispatch=\w+,\n"
                       r"  excludes=\(([0-9, ]*)\)\n\)", re.S)


def _ids(*texts: str) -> tuple:
    return tuple(sorted({int(x) for text in texts for x in text.replace(" ", "").split(",")
                         if x}))


def _token_items(printout: str) -> set:
    """The token items of a printout, ids sorted and distinct: ``Token(...)`` and
    ``ExcludeToken(...)``, and for XGrammar's ``TokenTagDispatch(...)`` the items its lowering
    has (``Token(t)`` per trigger, ``ExcludeToken(triggers and excludes)``)."""
    items = set()
    for match in _DISPATCH.finditer(printout):
        triggers = re.findall(r"\((\d+), ", match.group(1))
        items.add(("ExcludeToken", _ids(",".join(triggers), match.group(2))))
        items.update(("Token", (int(t),)) for t in triggers)
    for match in _TOKEN_ITEM.finditer(_DISPATCH.sub("", printout)):
        items.add(("ExcludeToken" if match.group(1) else "Token", _ids(match.group(2))))
    return items


@needs_xgrammar
@pytest.mark.parametrize("name, fmt, printed, xgrammar_printed", STRUCTURAL, ids=STRUCTURAL_IDS)
def test_structural_tag_shape_matches_xgrammar(name, fmt, printed, xgrammar_printed):
    """XGrammar's printout is the one in the table; gxg's rules are named as XGrammar's
    (XGrammar has a few more: any_tokens_inner, and a rule per TokenTagDispatch) and hold the
    same token items."""
    theirs = str(xgrammar.Grammar.from_structural_tag(_tag(fmt)))
    assert theirs == xgrammar_printed
    assert set(_RULE_NAME.findall(printed)) <= set(_RULE_NAME.findall(theirs))
    assert _token_items(printed) == _token_items(theirs) - UNUSED_IN_XGRAMMAR.get(name, set())


@needs_xgrammar
@pytest.mark.parametrize("name, fmt, printed, xgrammar_printed", STRUCTURAL, ids=STRUCTURAL_IDS)
def test_structural_tag_masks_match_xgrammar(name, fmt, printed, xgrammar_printed):
    info, ours, theirs = _compilers()
    source = _tag(fmt)
    _walk_masks(ours.compile_grammar(Grammar.from_structural_tag(source, tokenizer_info=info)),
                theirs.compile_structural_tag(source), info.vocab_size, zlib.crc32(name.encode()))


# ----------------------------------------------------------------------------- token strings

BYTE_LEVEL = ["Ġhello", "hello", "<|im_start|>", "Ċ", "a"]
BYTE_FALLBACK = ["<unk>", "<s>", "</s>", "▁hello", "<0x0A>", "hello"]

# (vocabulary, its type, token string, the id it resolves to; None: not in the vocabulary)
TOKEN_STRINGS = [
    (VOCAB, "RAW", "<call>", 2),        # ids 2 and 16 spell it: the first one
    (VOCAB, "RAW", "</call>", 3),
    (VOCAB, "RAW", "</s>", 6),          # the stop token resolves like any other
    (VOCAB, "RAW", "nope", None),
    (BYTE_LEVEL, "BYTE_LEVEL", " hello", 0),
    (BYTE_LEVEL, "BYTE_LEVEL", "\n", 3),
    (BYTE_LEVEL, "BYTE_LEVEL", "<|im_start|>", 2),
    (BYTE_LEVEL, "BYTE_LEVEL", "Ġhello", None),   # the decoded text counts, not the spelling
    (BYTE_FALLBACK, "BYTE_FALLBACK", " hello", 3),
    (BYTE_FALLBACK, "BYTE_FALLBACK", "\n", 4),
    (BYTE_FALLBACK, "BYTE_FALLBACK", "<0x0A>", None),
    (BYTE_FALLBACK, "BYTE_FALLBACK", "<s>", 1),
]
TOKEN_STRING_IDS = [f"{kind}-{text!r}" for _, kind, text, _ in TOKEN_STRINGS]


@pytest.mark.parametrize("vocab, kind, text, token_id", TOKEN_STRINGS, ids=TOKEN_STRING_IDS)
def test_token_strings_resolve_through_the_vocabulary(vocab, kind, text, token_id):
    info = TokenizerInfo(vocab, VocabType[kind])
    source = _tag({"type": "exclude_token", "exclude_tokens": [9, text]})
    if token_id is None:
        with pytest.raises(GrammarError, match=r"^\$\.format\.exclude_tokens\[1\]: the token "
                                               r"string .* is not in the vocabulary"):
            Grammar.from_structural_tag(source, tokenizer_info=info)
        return
    grammar = Grammar.from_structural_tag(source, tokenizer_info=info)
    assert grammar.rule("exclude_token").body == TokenSet((9, token_id), negated=True)


def test_token_strings_resolve_wherever_they_stand():
    # XGrammar 0.2.8 leaves the one inside "repeat" unresolved (Token id -1: a compile error)
    inner = tag(tok("<a>"), {"type": "any_tokens", "exclude_tokens": ["E"]}, tok("</a>"))
    fmt = {"type": "sequence", "elements": [
        {"type": "repeat", "min": 1, "max": 2, "content": tok("<call>")},
        {"type": "token_dispatch", "rules": [["x", inner]], "exclude_tokens": ["y"]},
        triggered(["<b>"], [tag(tok("<b>"), X, tok("</b>"))])]}
    grammar = Grammar.from_structural_tag(_tag(fmt), tokenizer_info=INFO)
    assert _token_leaves(grammar) == {
        TokenSet((2,)), TokenSet((4,)), TokenSet((4, 5), negated=True), TokenSet((10,)),
        TokenSet((11, 12), negated=True), TokenSet((12,)), TokenSet((13,)), TokenSet((14,)),
        TokenSet((13,), negated=True)}


@needs_xgrammar
@pytest.mark.parametrize("vocab, kind, text, token_id", TOKEN_STRINGS, ids=TOKEN_STRING_IDS)
def test_xgrammar_resolves_token_strings_alike(vocab, kind, text, token_id):
    xinfo = xgrammar.TokenizerInfo(vocab, getattr(xgrammar.VocabType, kind))
    compiler = xgrammar.GrammarCompiler(xinfo, cache_enabled=False)
    source = _tag(tok(text))
    if token_id is None:
        with pytest.raises(RuntimeError, match="not found in vocabulary"):
            compiler.compile_structural_tag(source)
        return
    assert f"Token({token_id})" in str(compiler.compile_structural_tag(source).grammar)


# ----------------------------------------------------------------------------- structural errors

# (format, whether a tokenizer is given, the path gxg's message starts with, a fragment of it,
#  XGrammar 0.2.8's verdict)
STRUCTURAL_ERRORS = [
    (tok("<call>"), False, "$.format.token", "needs a tokenizer", REJECTS),
    ({"type": "exclude_token", "exclude_tokens": [1, "<call>"]}, False,
     "$.format.exclude_tokens[1]", "Token string resolution requires tokenizer_info", REJECTS),
    ({"type": "token_dispatch", "rules": [["<call>", X]]}, False, "$.format.rules[0][0]",
     "needs a tokenizer", REJECTS),
    (tag("<a>", X, tok("</a>")), False, "$.format.end.token", "needs a tokenizer", REJECTS),
    (tok("nope"), True, "$.format.token", "is not in the vocabulary", REJECTS),
    (triggered([2], [tag("<a>", X, "E")]), False, "$.format.tags[0].begin",
     "must have a token format begin, not a string", REJECTS),
    (triggered([2], [tag(tok(3), X, "E")]), False, "$.format.tags[0].begin",
     "the tag begin 3 matches none of the triggers [2]", REJECTS),
    (triggered([2, 2], [tag(tok(2), X, "E")]), False, "$.format.tags[0].begin",
     "matches several triggers", REJECTS),
    (triggered([2, 3], [tag(tok(3), X, "E")]), False, "$.format.trigger_tokens[0]",
     "the trigger 2 begins none of the tags", REJECTS),
    (triggered([], [tag(tok(2), X, "E")]), False, "$.format.trigger_tokens", "must not be empty",
     REJECTS),
    ({"type": "triggered_tags", "triggers": ["<b"], "tags": [tag(tok(2), X, "E")]}, False,
     "$.format.tags[0].begin", "must have a string begin, not a token format", REJECTS),
    (tag("<a>", triggered([2], [tag(tok(2), X, "E")]), ""), False, "$.format.end",
     "at least one end string must be non-empty", REJECTS),
    (tag("<a>", {"type": "any_tokens"}, ""), False, "$.format.end",
     "at least one end string must be non-empty", REJECTS),
    ({"type": "token_dispatch", "rules": []}, False, "$.format.rules", "non-empty", REJECTS),
]
STRUCTURAL_ERROR_IDS = [f"{path} {fragment}" for _, _, path, fragment, _ in STRUCTURAL_ERRORS]


@pytest.mark.parametrize("fmt, with_tokenizer, path, fragment, verdict", STRUCTURAL_ERRORS,
                         ids=STRUCTURAL_ERROR_IDS)
def test_structural_tag_errors(fmt, with_tokenizer, path, fragment, verdict):
    with pytest.raises(GrammarError) as caught:
        Grammar.from_structural_tag(_tag(fmt), tokenizer_info=INFO if with_tokenizer else None)
    assert str(caught.value).startswith(path + ":")
    assert fragment in str(caught.value)


@needs_xgrammar
@pytest.mark.parametrize("fmt, with_tokenizer, path, fragment, verdict", STRUCTURAL_ERRORS,
                         ids=STRUCTURAL_ERROR_IDS)
def test_xgrammar_verdicts_on_the_structural_errors(fmt, with_tokenizer, path, fragment,
                                                    verdict):
    def build():
        if not with_tokenizer:
            return xgrammar.Grammar.from_structural_tag(_tag(fmt))
        xinfo = xgrammar.TokenizerInfo(VOCAB, xgrammar.VocabType.RAW, stop_token_ids=[STOP])
        return xgrammar.GrammarCompiler(xinfo).compile_structural_tag(_tag(fmt))

    if verdict == ACCEPTS:
        build()
        return
    with pytest.raises(Exception):
        build()


# ----------------------------------------------------------------------------- passes, analyses

# Grammars whose rules hold token sets; each must keep all of them through the passes.
PASS_GRAMMARS = [
    ("root ::= x\nx ::= Token(1)", "root ::= Token(1)\n"),
    ("root ::= x x\nx ::= Token(1, 2) | ExcludeToken(3)",
     "root ::= (Token(1, 2) | ExcludeToken(3)) (Token(1, 2) | ExcludeToken(3))\n"),
    ("root ::= root Token(1) | Token(2)", "root ::= Token(2) Token(1)*\n"),
    ('root ::= a Token(1)\na ::= a Token(2) | ""', 'root ::= (Token(2) Token(2)* | "") Token(1)\n'),
    ('root ::= Token(1) root | "a"', 'root ::= Token(1) root | "a"\n'),
    ("root ::= TokenTagDispatch((2, a))\na ::= Token(3)",
     "root ::= (ExcludeToken(2) | Token(2) Token(3))*\n"),
]


@pytest.mark.parametrize("ebnf, root", PASS_GRAMMARS, ids=[case[0] for case in PASS_GRAMMARS])
def test_token_sets_survive_the_passes(ebnf, root):
    grammar = Grammar.from_ebnf(ebnf)
    prepared = prepare(grammar)
    rule = prepared.rule("root")
    assert rule.body != MATCHES_NOTHING
    assert rule_to_ebnf(rule.name, rule.body) + "\n" == root
    assert _token_leaves(prepared) == _token_leaves(grammar)


@pytest.mark.parametrize("leaf", [TokenSet((1,)), TokenSet((), negated=True),
                                  TokenSet((1, 2), negated=True)])
def test_a_token_set_is_one_token(leaf):
    assert not is_nullable(leaf, set())
    assert is_productive(leaf, set())
    assert left_corners(leaf, set()) == set()
    assert left_corners(Sequence((leaf, RuleRef("x"))), {"x"}) == set()


def test_strings_never_match_a_token():
    grammar = Grammar.from_ebnf('root ::= Token(1) | "a" ExcludeToken()* | "b"')
    recognizer = Recognizer(grammar)
    assert recognizer.accepts("a") and recognizer.accepts("b")
    assert not recognizer.accepts("") and not recognizer.accepts("ab")
    assert Recognizer(Grammar.from_ebnf("root ::= Token(1)")).language_is_empty
    rng = random.Random(0)
    assert {sample_sentence(grammar, rng) for _ in range(20)} == {b"a", b"b"}


def test_combining_grammars_keeps_token_sets():
    first = Grammar.from_ebnf("root ::= Token(1) x\nx ::= ExcludeToken(2)")
    second = Grammar.from_ebnf("root ::= x\nx ::= Token(3)")
    assert str(Grammar.concat(first, second)) == (
        "root ::= root_1 root_2\nroot_1 ::= Token(1) x\nx ::= ExcludeToken(2)\n"
        "root_2 ::= x_2\nx_2 ::= Token(3)\n")
    assert _token_leaves(Grammar.union(first, second)) == {
        TokenSet((1,)), TokenSet((2,), negated=True), TokenSet((3,))}


def test_literal_stays_text():
    # a token set never merges with the literals around it
    grammar = Grammar.from_ebnf('root ::= "a" Token(1) "b"')
    assert grammar.root.body == Sequence((Literal(b"a"), TokenSet((1,)), Literal(b"b")))
