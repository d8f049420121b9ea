"""XGrammar's own accept/reject cases for structural tags and the EBNF macros ``Regex``,
``Substring`` and ``TagDispatch``, replayed through gxg (issue 16; Lark's are in test_lark.py).

Where the cases come from: ``tests/data/xgrammar_cases.json`` holds every case of the form
(grammar or structural tag, input string, expected accept/reject) of these files of
mlc-ai/xgrammar's ``tests/python/`` (the revisions the search index holds; the commit each file
was read at is below), copied as plain data: parametrized tables, lists of (input, expected),
``assert [not] _is_grammar_accept_string(...)`` lines, and strings the tests build with small
helpers (``_kimi_k3_argument``, ``str.replace`` mutations, the brute-force Substring language),
expanded. Each group's ``source`` is ``file::test function``. Structural tags are the JSON text
``{"type": "structural_tag", "format": ...}``; where XGrammar's test builds pydantic objects
(``StructuralTag``, ``JSONSchemaFormat``, the legacy ``StructuralTagItem`` + triggers list via
``StructuralTag.from_legacy_structural_tag``, schemas from pydantic models) the data holds their
``model_dump_json()``.

* test_structural_tag_converter.py (00ad8e2c741c5379aaa6102938153f482a4418b3)
* test_grammar_matcher_structural_tag.py (03abb4925eb452c4a58bdcfbbd1643e490cab3b7; legacy form)
* test_grammar_matcher_macro.py (30c1c43d7d58831b05e351bbe0af9dd686d0a14f; TagDispatch)
* test_grammar_matcher_tag_dispatch.py (01a98005e0c766079c41d5f18e682a044930242f; TagDispatch)
* test_grammar_substring_macro.py (19c5cb49bc79dda62416c8f8d56aa1ae5508dc2e)
* test_grammar_regex_macro.py (191b40aaf44a9bcf02b58e63f9466a22aa72cf59)

Not replayed (no accept/reject string, or not a (grammar text, string) case): expected-grammar
printouts, parser/reader error tests, the token-level formats (``token``, ``exclude_token``,
``any_tokens``, ``token_triggered_tags``, ``token_dispatch``: 19 grammar-printout tests and 10
error tests in test_structural_tag_converter.py, none of them with an input string, so no
accept/reject case is skipped for being token-level), masks along token walks (only their input
strings are kept, as accepted cases), ``Grammar.union`` / ``concat`` and serialization
round trips, ``from_json_schema`` checks in test_grammar_regex_macro.py, and
test_grammar_parser_macro.py (printouts and errors only).

Each case runs through gxg (compiled over an empty vocabulary; accepted == ``accept_string`` and
``is_terminated``) and, when xgrammar is installed, through XGrammar 0.2.8, so that a case copied
wrongly shows up. The differences:

* ``DOCUMENTED``: gxg refuses the grammar (``GrammarError``) as its docstrings say; strict xfail,
  so a case that starts to agree fails loudly.
* ``XGRAMMAR_0_2_8``: the upstream test is newer than XGrammar 0.2.8 and expects another verdict
  than 0.2.8 gives; the case is checked against 0.2.8's verdict (gxg follows 0.2.8).
"""
from __future__ import annotations

import json
import warnings
from pathlib import Path

import pytest

from gxg.grammar.ir import GrammarError
from xgrammar_oracle import gxg_accepts, needs_xgrammar, xgr_accepts

GROUPS = json.loads((Path(__file__).parent / "data" / "xgrammar_cases.json").read_text("utf-8"))

_CONVERTER = "test_structural_tag_converter.py::"

# gxg's documented deliberate differences: (predicate on a group, reason).
DOCUMENTED = [
]

# (source, input) -> XGrammar 0.2.8's verdict, where the upstream test (newer than 0.2.8)
# expects the other one. deepseek_xml: 0.2.8 pins the string="true|false" attribute to the
# parameter's schema type (string="true" for a string, "false" otherwise); later XGrammar lets
# either spelling through, and the test was updated with it.
XGRAMMAR_0_2_8 = {
    (_CONVERTER + "test_json_schema_style_deepseek_xml_format",
     '<｜DSML｜parameter name="name" string="true">Bob</｜DSML｜parameter>\t\n'
     '<｜DSML｜parameter name="age" string="true">\t100\n</｜DSML｜parameter>'): False,
    (_CONVERTER + "test_json_schema_style_deepseek_xml_format",
     '<｜DSML｜parameter name="name" string="false">Bob</｜DSML｜parameter>'
     '<｜DSML｜parameter name="age" string="true">100</｜DSML｜parameter>'): False,
}


def _documented(group):
    reasons = [reason for matches, reason in DOCUMENTED if matches(group)]
    assert len(reasons) <= 1, group["source"]
    return reasons[0] if reasons else None


def _cases(with_marks: bool):
    seen = set()
    for gi, group in enumerate(GROUPS):
        reason = _documented(group) if with_marks else None
        marks = [pytest.mark.xfail(strict=True, raises=GrammarError, reason=reason)] if reason else []
        test = group["source"].split("::")[1]
        for ci, (string, accepted) in enumerate(group["cases"]):
            key = (group["source"], string)
            expected = XGRAMMAR_0_2_8.get(key, accepted)
            if key in XGRAMMAR_0_2_8:
                seen.add(key)
            yield pytest.param(group["kind"], group["grammar"], string, expected, marks=marks,
                               id=f"{test}-{gi}-{ci}")
    assert seen == set(XGRAMMAR_0_2_8), "an XGRAMMAR_0_2_8 entry matches no case"


def _accepts(fn, kind, grammar, string):
    with warnings.catch_warnings():
        # gxg warns where it relaxes a schema as XGrammar does (any_order in XML styles).
        warnings.simplefilter("ignore")
        return fn(kind, grammar, string)


@pytest.mark.parametrize("kind,grammar,string,expected", list(_cases(with_marks=True)))
def test_gxg_agrees_with_xgrammar_case(kind, grammar, string, expected):
    assert _accepts(gxg_accepts, kind, grammar, string) == expected


@needs_xgrammar
@pytest.mark.parametrize("kind,grammar,string,expected", list(_cases(with_marks=False)))
def test_case_agrees_with_installed_xgrammar(kind, grammar, string, expected):
    assert _accepts(xgr_accepts, kind, grammar, string) == expected


def test_case_counts():
    """The replayed cases per source file (guards against a truncated data file)."""
    counts = {}
    for group in GROUPS:
        name = group["source"].split("::")[0]
        counts[name] = counts.get(name, 0) + len(group["cases"])
    assert counts == {
        "test_grammar_substring_macro.py": 613,
        "test_grammar_regex_macro.py": 62,
        "test_grammar_matcher_tag_dispatch.py": 10,
        "test_grammar_matcher_macro.py": 36,
        "test_grammar_matcher_structural_tag.py": 9,
        "test_structural_tag_converter.py": 1066,
    }
