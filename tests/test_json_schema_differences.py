"""The README's table of JSON Schema inputs where gxg and XGrammar 0.2.8 answer differently,
on purpose: each row's verdicts, for both engines (XGrammar's half is skipped without it). A
row that stops differing fails here, so the table cannot go stale."""
from __future__ import annotations

import json
import warnings

import pytest

import gxg
from gxg.testing import grammar_accepts

OBJECT_AB = {"type": "object", "properties": {"a": {"type": "integer"},
                                              "b": {"type": "integer"}}, "required": ["a", "b"]}
# (what, schema, options, text, gxg accepts, XGrammar accepts)
ROWS = [
    ("overlapping oneOf", {"oneOf": [{"type": "integer"}, {"type": "number"}]}, {}, "1",
     False, True),
    ("repeated member with any_order", OBJECT_AB, {"any_order": True},
     '{"a": 1, "a": 1, "b": 2}', False, True),
    ("leap second in time", {"type": "string", "format": "time"}, {}, '"23:59:60Z"',
     False, True),
    ("leap second in date-time", {"type": "string", "format": "date-time"}, {},
     '"2016-12-31T23:59:60Z"', False, True),
    ("zero-padded ipv4", {"type": "string", "format": "ipv4"}, {}, '"01.2.3.4"', False, True),
    ("year 0000", {"type": "string", "format": "date"}, {}, '"0000-01-01"', False, True),
    ("hostname with a trailing dot", {"type": "string", "format": "hostname"}, {},
     '"example.com."', True, False),
    ("multipleOf on a number", {"type": "number", "multipleOf": 0.1}, {}, "0.35", False, True),
    # agreements the README names
    ("escaped const spelling", {"const": "a/b"}, {}, '"a\\/b"', False, False),
    ("canonical const spelling", {"const": "a/b"}, {}, '"a/b"', True, True),
]


@pytest.mark.parametrize("what, schema, options, text, ours, theirs", ROWS,
                         ids=[row[0] for row in ROWS])
def test_gxg_and_xgrammar_verdicts(what, schema, options, text, ours, theirs):
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        assert grammar_accepts(gxg.Grammar.from_json_schema(schema, **options), text) == ours
    xgr = pytest.importorskip("xgrammar")
    from xgrammar.testing import _is_grammar_accept_string
    grammar = xgr.Grammar.from_json_schema(json.dumps(schema), **options)
    assert _is_grammar_accept_string(grammar, text) == theirs
