"""Builtin grammars.

In:  nothing.
Out: ``builtin_json_grammar()`` — the Grammar of JSON as XGrammar's builtin JSON grammar defines
     it (release 0.2.8), so that gxg's masks can be compared with XGrammar's bit for bit:

     * the root is an object or an array (a bare ``1`` or ``"a"`` is not a document);
     * whitespace ``[ \\n\\r\\t]*`` between tokens, none before or after the root value;
     * strings exclude raw U+0000–U+001F, ``"`` and ``\\``; escapes are ``\\" \\\\ \\/ \\b \\f \\n
       \\r \\t`` and ``\\u`` with four hex digits (lone surrogate escapes are not checked);
     * numbers as RFC 8259 (``-?(0|[1-9][0-9]*)(\\.[0-9]+)?([eE][+-]?[0-9]+)?``).
"""
from __future__ import annotations

from functools import lru_cache

from gxg.grammar.ir import Grammar

BUILTIN_JSON_EBNF = r"""
root ::= object | array
value ::= object | array | string | number | "true" | "false" | "null"
object ::= "{" ws "}" | "{" ws member (ws "," ws member)* ws "}"
member ::= string ws ":" ws value
array ::= "[" ws "]" | "[" ws value (ws "," ws value)* ws "]"
string ::= "\"" character* "\""
character ::= [^"\\\x00-\x1f] | "\\" escape
escape ::= ["\\/bfnrt] | "u" [0-9a-fA-F]{4}
number ::= "-"? ("0" | [1-9] [0-9]*) ("." [0-9]+)? ([eE] [+-]? [0-9]+)?
ws ::= [ \n\r\t]*
"""


@lru_cache(maxsize=1)  # immutable result; cached because the compiler's cache keys on it
def builtin_json_grammar() -> Grammar:
    return Grammar.from_ebnf(BUILTIN_JSON_EBNF)
