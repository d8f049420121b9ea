"""EBNF macros -> Grammar IR: XGrammar 0.2.8's ``Regex``, ``Substring``, ``TagDispatch`` and the
token-id macros ``Token``, ``ExcludeToken`` and ``TokenTagDispatch``.

In:  one macro call as ``gxg.grammar.ebnf`` parsed it (``MacroCall``: the macro's name, its
     positional arguments and its keyword arguments, each a ``MacroValue`` that knows where it
     starts in the grammar text), and ``new_rule_name(hint)``, which returns a rule name that
     no other rule uses.
Out: ``expand_macro(call, new_rule_name) -> Expansion``: an expression to put where the call
     stands, the helper rules it refers to, and the user rules that the call names (the parser
     checks that they are defined). Bad arguments raise ``MacroError(message, offset)``; the
     parser turns it into a ``GrammarError`` with line and column. Nothing here looks at the
     grammar text, and the expansion is deterministic. ``token_tag_dispatch_expr`` is the
     TokenTagDispatch lowering on its own, for the structural-tag writer.

The call syntax (what ``gxg.grammar.ebnf`` reads) is XGrammar's: ``Name(arg, ..., key=value,
...)`` where a value is a string ``"..."`` (EBNF escapes), an integer, ``true`` / ``false``, a
rule name, or a tuple ``(value, ...)`` (a trailing comma is allowed in a tuple; ``("a")`` is a
tuple of one string).

The macros (semantics taken from XGrammar 0.2.8: its parser ``cpp/grammar_parser.cc``, its FSM
builder ``cpp/fsm_builder.cc`` / ``grammar_functor.cc``, its tests
``tests/python/test_grammar_substring_macro.py`` and ``test_grammar_matcher_tag_dispatch.py``,
and the installed package run as an oracle):

``Regex("pattern", json_string=false, flags="...")``
    The strings the pattern matches in full, read by ``gxg.grammar.regex`` (so with that
    module's documented differences from XGrammar's regex reader, e.g. ``\\s``). Without
    ``flags``, ``.`` is any code point, ``\\n`` included. With ``flags``, ``.`` is any code
    point but ``\\n`` unless the flags contain ``s`` (XGrammar rewrites each ``.`` outside a
    class to ``[^\\n]``; so does gxg). ``u`` changes nothing; ``i`` (case-insensitive) is not
    supported by gxg; any other letter is an error. ``json_string=true`` removes the code
    points a JSON string cannot hold raw (U+0000-U+001F, ``"``, ``\\``) from every character the
    pattern matches.
``Substring("chunk", ...)``
    Any run of consecutive chunks, concatenated, the empty run included: ``Substring("ab",
    "cd", "e")`` accepts ``""``, ``ab``, ``cd``, ``e``, ``abcd``, ``cde``, ``abcde`` and nothing
    else (not ``b``: chunks are atomic). ``Substring()`` is the empty string. (It is not "any
    substring of a text": pass one chunk per character for that.) Built as the factor
    automaton (suffix automaton, every state final) over chunk symbols, minimised.
``TagDispatch(("tag", rule), ..., loop_after_dispatch=true, excludes=("text", ...))``
    Free text, in which a tag (a trigger string) starts its rule: once a tag is read, the
    tag's rule must match next; then free text resumes (``loop_after_dispatch``, the default)
    or the macro ends. The macro may end anywhere in free text (XGrammar 0.2.8 has no
    ``stop_eos`` / ``stop_str``; they are rejected as unknown keywords, as it does; to end at
    a stop string write ``TagDispatch(..., excludes=("STOP",)) "STOP"``). Free text never
    contains an exclude. Precisely, as XGrammar's automaton decides it:

    * A trie holds the tags and the excludes; the Aho-Corasick goto function (trie edge if
      there is one, else the failure state's move) is followed through free text, starting
      at the root and again after each dispatched rule. The state is always the longest
      suffix of the free text so far that is a prefix of some tag or exclude.
    * A state whose text ends with an exclude (the state or any state on its failure chain
      is the end of an exclude) is dead: the character leading there is rejected.
    * A state that ends a tag (and is not dead) must either dispatch — match the rule of
      every tag ending there, as alternatives — or continue along a trie edge of a longer
      tag; nothing else. A tag is seen only when the current state IS its end: with tags
      ``"b"`` and ``"abc"``, the text ``ab`` is in state ``ab`` and ``b`` does not trigger.
    * Other states are free text; the macro may end in any of them.
    * Excludes apply to free text only (not to tags, rules, or text spanning them), and an
      exclude may not be a prefix of a tag (error). Tags and excludes must be non-empty.

    XGrammar's automaton runs on bytes and lets free text hold any byte; gxg's free text is
    any string of code points (well-formed UTF-8). That is the only difference: on code
    points the two automata agree state for state (UTF-8 matches are code-point aligned).
``Token(id, ...)`` / ``ExcludeToken(id, ...)``
    One whole token whose id is one of the ids / none of them: an IR ``TokenSet`` (ids sorted
    and deduplicated, as XGrammar prints them). The arguments are decimal integers from 0 to
    ``MAX_TOKEN_ID``; ``Token()`` is an error ("Token() requires at least one integer
    argument"), and so is anything but a non-negative integer ("Token() arguments must be
    non-negative integers"), keywords and a trailing comma included, as in XGrammar. Unlike
    the other macros, these two may stand in a lookahead assertion (XGrammar allows that).
    Deliberate differences: ``ExcludeToken()`` (any one token) is accepted — XGrammar refuses
    it, but it is how gxg prints the IR of ``TokenTagDispatch()`` or of a structural tag's
    ``any_tokens`` without excludes, and every IR must parse back — and ids above
    ``MAX_TOKEN_ID`` are errors (XGrammar wraps them to 32 bits: ``Token(2147483648)`` prints
    as ``Token(-2147483648)``). Whether an id is in the vocabulary is the compiler's check.
``TokenTagDispatch((token_id, rule), ..., loop_after_dispatch=true, excludes=(id, ...))``
    TagDispatch over tokens: free tokens, in which a trigger token starts its rule. With T the
    trigger ids, E the excludes and ``r_t`` the rules of trigger t (the rules of a trigger
    given twice are alternatives), it is plain IR::

        loop_after_dispatch=true:   (ExcludeToken(T + E) | Token(t1) r_t1 | Token(t2) r_t2 ...)*
        loop_after_dispatch=false:  ExcludeToken(T + E)* (Token(t1) r_t1 | ...)?

    A free token is one token that is neither a trigger nor an exclude; a trigger always
    dispatches. The macro may end anywhere in the free part; with ``loop_after_dispatch=false``
    it ends right after the dispatched rule. ``TokenTagDispatch()`` is ``ExcludeToken()*``.
    Errors as XGrammar's: a trigger or exclude that is not a non-negative integer, an argument
    that is not a pair, and an exclude that is also a trigger ("must not overlap").

    The evidence (XGrammar 0.2.8's matcher over the vocabulary ``a b <call> </call> x y </s>
    <sp> ab ""``, ids 0-9, ``</s>`` the stop token, ``""`` special; ``a ::= "x" Token(3)``;
    "mask" is the set of allowed ids):

    * ``root ::= TokenTagDispatch((2, a))``: the mask at the start is every id but the special
      9, the stop token 6 included (the macro may end in free text); after 0 1 it is the same;
      after 2 only 4 (``x``), then only 3; after 3 everything again; 2 4 3 0 2 4 3 6 is
      accepted and terminates.
    * ``loop_after_dispatch=false``: after 0 2 4 3 the mask is only the stop token 6 and 0 is
      rejected: nothing follows the dispatched rule. With ``... "y"`` after the macro: after 2
      4 3 the mask is only 5 (``y``); after 0 5 the stop token is allowed (``y`` was a free
      token or the final ``"y"``).
    * ``excludes=(5,)``: 5 leaves the mask of the free part (the stop token stays).
      ``TokenTagDispatch((2, a), excludes=(5,)) Token(5)``: 5 is allowed only as the following
      ``Token(5)``, after which only the stop token is.
    * ``TokenTagDispatch((2, a), (2, b))`` with ``b ::= "y"``: after 2 the mask is 4 and 5.
    * In a structural tag XGrammar does let an exclude be a trigger (a tag's end token is
      added to the excludes of the token-level free formats inside it): the token then still
      dispatches and is not a free token. A tag begun by token 7 and ended by token 2 around
      a token_triggered_tags with trigger 2 (tag content ``"x"``): after 7 0 the mask lacks
      the stop token; after 7 0 2 it is 4 (2 dispatched) and 6 (2 ended the tag), which is
      what the lowering above gives.

    tests/test_token_items_frontend.py replays these grammars and compares gxg's masks with
    XGrammar's along random token walks.
    * XGrammar's ``ExcludeToken`` never allows a stop token or a special token, and
      ``Token(stop)`` allows nothing (masks of ``ExcludeToken(1, 2)``: 0 3 4 5 7 8); that is
      the compiler's business, not the IR's.

Size: TagDispatch makes one DFA state per trie node (sum of the tags' and excludes' lengths in
code points, plus one), and ``code_point_dfa.dfa_to_expr`` writes it as a few right-linear rules
(the root and the states that every state can fall back to, such as the first character of a
tag) with the trie's chains inlined; the dispatch is a rule reference at the tag's end.
"""
from __future__ import annotations

from collections import deque
from dataclasses import dataclass
from typing import Callable, Dict, List, Optional, Sequence as Seq, Set, Tuple

from gxg.grammar.code_point_dfa import ALPHABET, Dfa, dfa_to_expr, minimize
from gxg.grammar.combine import rename_refs
from gxg.grammar.ir import (
    EMPTY,
    MAX_CODE_POINT,
    CharClass,
    Choice,
    Expr,
    GrammarError,
    Literal,
    Repeat,
    Rule,
    RuleRef,
    Sequence,
    TokenSet,
    children,
    complement_ranges,
    subtract_range,
)

__all__ = [
    "MacroValue", "MacroKeyword", "MacroCall", "MacroError", "Expansion", "expand_macro",
    "token_tag_dispatch_expr", "SUPPORTED_MACROS", "LOOKAHEAD_MACROS", "MAX_INLINE_DEPTH",
    "MAX_TOKEN_ID",
]

SUPPORTED_MACROS = frozenset(
    {"Regex", "Substring", "TagDispatch", "Token", "ExcludeToken", "TokenTagDispatch"})
# The macros that may stand in a lookahead assertion: one IR leaf each, as XGrammar allows.
LOOKAHEAD_MACROS = frozenset({"Token", "ExcludeToken"})

# XGrammar stores token ids as 32-bit integers.
MAX_TOKEN_ID = 2**31 - 1

# A macro's expression deeper than this goes into a helper rule of its own, so that the rule
# that calls the macro stays well within the EBNF front-end's depth limit.
MAX_INLINE_DEPTH = 40

# Code points a JSON string cannot hold unescaped: what Regex(..., json_string=true) removes.
JSON_STRING_FORBIDDEN = ((0x00, 0x1F), (0x22, 0x22), (0x5C, 0x5C))

SURROGATES = (0xD800, 0xDFFF)


# ----------------------------------------------------------------------------- call data


@dataclass(frozen=True)
class MacroValue:
    """One argument value. ``kind`` is "string" (value: str), "integer" (int), "boolean"
    (bool), "name" (str: a rule name) or "tuple" (value: tuple of MacroValue); ``offset`` is
    where it starts in the grammar text. ``verbatim``: a string written without escapes, so
    its k-th code point stands at ``offset + 1 + k``."""

    kind: str
    value: object
    offset: int
    verbatim: bool = False


@dataclass(frozen=True)
class MacroKeyword:
    """``name=value``; ``offset`` is where the name starts."""

    name: str
    value: MacroValue
    offset: int


@dataclass(frozen=True)
class MacroCall:
    """``name(arguments..., keywords...)``; ``offset`` is where the name starts, ``paren`` where
    its '(' is."""

    name: str
    arguments: Tuple[MacroValue, ...]
    keywords: Tuple[MacroKeyword, ...]
    offset: int
    paren: int


class MacroError(Exception):
    """A macro call that cannot be expanded; ``offset`` locates the culprit in the text."""

    def __init__(self, message: str, offset: int):
        super().__init__(message)
        self.message = message
        self.offset = offset


@dataclass(frozen=True)
class Expansion:
    """What a macro call stands for: ``expr`` (nested at most ``depth`` levels), the helper
    ``rules`` it refers to, and the user rules it names as ``(name, offset)`` pairs."""

    expr: Expr
    depth: int
    rules: Tuple[Rule, ...]
    references: Tuple[Tuple[str, int], ...]


_KIND_NAMES = {"string": "a string", "integer": "an integer", "boolean": "a boolean",
               "name": "a rule name", "tuple": "a tuple"}


def _describe(value: MacroValue) -> str:
    return _KIND_NAMES[value.kind]


# ----------------------------------------------------------------------------- entry point


def expand_macro(call: MacroCall, new_rule_name: Callable[[str], str]) -> Expansion:
    """The expansion of ``call`` (see the module docstring); helper rules are named by
    ``new_rule_name(hint)``, which must return a fresh name on every call."""
    helpers: List[Rule] = []

    def new_rule(hint: str) -> RuleRef:
        return RuleRef(new_rule_name(hint))

    def define_rule(ref: RuleRef, body: Expr) -> None:
        helpers.append(Rule(ref.name, body))

    references: List[Tuple[str, int]] = []
    if call.name == "Regex":
        expr = _regex(call, new_rule, define_rule)
    elif call.name == "Substring":
        expr = _substring(call, new_rule, define_rule)
    elif call.name == "TagDispatch":
        expr = _tag_dispatch(call, new_rule, define_rule, references)
    elif call.name in ("Token", "ExcludeToken"):
        expr = _token_set(call)
    elif call.name == "TokenTagDispatch":
        expr = _token_tag_dispatch(call, references)
    else:
        raise MacroError(f"the macro {call.name}(...) is not supported by gxg", call.offset)
    depth = _depth(expr)
    if depth > MAX_INLINE_DEPTH:
        ref = new_rule(call.name.lower())
        define_rule(ref, expr)
        expr, depth = ref, 1
    return Expansion(expr, depth, tuple(helpers), tuple(references))


def _depth(expr: Expr) -> int:
    deepest = 0
    stack = [(expr, 1)]
    while stack:
        node, level = stack.pop()
        deepest = max(deepest, level)
        stack.extend((child, level + 1) for child in children(node))
    return deepest


# ----------------------------------------------------------------------------- argument checks


def _keywords(call: MacroCall, allowed: Seq[str]) -> Dict[str, MacroKeyword]:
    out: Dict[str, MacroKeyword] = {}
    for keyword in call.keywords:
        if keyword.name not in allowed:
            if not allowed:
                raise MacroError(f"{call.name}() does not accept keyword arguments",
                                 keyword.offset)
            known = ", ".join(allowed)
            hint = ""
            if call.name == "TagDispatch" and keyword.name in ("stop_eos", "stop_str"):
                hint = ("; XGrammar 0.2.8 dropped it: the free text may end anywhere, and to end "
                        "at a stop string write TagDispatch(..., excludes=(\"STOP\",)) \"STOP\"")
            raise MacroError(f"unknown keyword argument {keyword.name!r} for {call.name}() "
                             f"(it takes {known}){hint}", keyword.offset)
        if keyword.name in out:
            raise MacroError(f"the keyword argument {keyword.name!r} is given more than once",
                             keyword.offset)
        out[keyword.name] = keyword
    return out


def _boolean(keyword: Optional[MacroKeyword], default: bool) -> bool:
    if keyword is None:
        return default
    if keyword.value.kind != "boolean":
        raise MacroError(f"{keyword.name} must be true or false, not "
                         f"{_describe(keyword.value)}", keyword.value.offset)
    return bool(keyword.value.value)


def _string(value: MacroValue, what: str, *, non_empty: bool = False) -> str:
    if value.kind != "string":
        raise MacroError(f"{what} must be a string, not {_describe(value)}", value.offset)
    if non_empty and not value.value:
        raise MacroError(f"{what} must not be empty", value.offset)
    return value.value


def _tuple(value: MacroValue, what: str, example: str) -> Tuple[MacroValue, ...]:
    if value.kind != "tuple":
        raise MacroError(f"{what} must be a tuple such as {example}, not {_describe(value)}",
                         value.offset)
    return value.value


def _token_id(value: MacroValue, what: str) -> int:
    """A token id: a non-negative integer of at most ``MAX_TOKEN_ID``."""
    if value.kind != "integer" or value.value < 0:
        shown = value.value if value.kind == "integer" else _describe(value)
        raise MacroError(f"{what} must be non-negative integers, not {shown}", value.offset)
    if value.value > MAX_TOKEN_ID:
        raise MacroError(f"{what} must be at most {MAX_TOKEN_ID} (token ids are 32-bit)",
                         value.offset)
    return value.value


def _dispatch_pairs(call: MacroCall, example: str, read_trigger: Callable[[MacroValue], object],
                    references: List[Tuple[str, int]]) -> List[Tuple[object, str]]:
    """The ``(trigger, rule)`` arguments of TagDispatch / TokenTagDispatch, each trigger read by
    ``read_trigger``; the rules are added to ``references``."""
    pairs: List[Tuple[object, str]] = []
    for argument in call.arguments:
        pair = _tuple(argument, f"each argument of {call.name}()", example)
        if len(pair) != 2:
            raise MacroError(f"each argument of {call.name}() must be a pair {example}, "
                             f"not a tuple of {len(pair)}", argument.offset)
        trigger = read_trigger(pair[0])
        if pair[1].kind != "name":
            raise MacroError(f"the rule of a tag must be a rule name, not {_describe(pair[1])}",
                             pair[1].offset)
        references.append((pair[1].value, pair[1].offset))
        pairs.append((trigger, pair[1].value))
    return pairs


# ----------------------------------------------------------------------------- Regex


def _regex(call: MacroCall, new_rule, define_rule) -> Expr:
    from gxg.grammar.regex import regex_to_grammar

    keywords = _keywords(call, ("json_string", "flags"))
    if len(call.arguments) != 1:
        where = call.arguments[1].offset if len(call.arguments) > 1 else call.paren
        raise MacroError(f"Regex() takes exactly one pattern string, got "
                         f"{len(call.arguments)} arguments", where)
    argument = call.arguments[0]
    pattern = _string(argument, "the pattern of Regex()")
    json_string = _boolean(keywords.get("json_string"), False)
    moved: List[int] = []          # indices (in the rewritten pattern) where a '.' was widened
    if "flags" in keywords:
        flags = _string(keywords["flags"].value, "flags")
        for flag in flags:
            if flag == "i":
                raise MacroError("the regular-expression flag 'i' (case-insensitive) is not "
                                 "supported by gxg", keywords["flags"].value.offset)
            if flag not in "su":
                raise MacroError(f"the regular-expression flag {flag!r} is not supported (use "
                                 "s or u)", keywords["flags"].value.offset)
        if "s" not in flags:
            pattern, moved = _dots_exclude_newline(pattern)
    try:
        grammar = regex_to_grammar(pattern)
    except GrammarError as error:
        index = None if error.column is None else error.column - 1
        if index is not None:
            index -= 4 * sum(1 for at in moved if at < index)     # "[^\n]" is 4 longer than "."
        where = argument.offset
        if index is not None and argument.verbatim and 0 <= index < len(argument.value):
            where = argument.offset + 1 + index
        raise MacroError(f"invalid regular expression in Regex(): {error.message}"
                         + (f" (at index {index} of the pattern)" if index is not None else ""),
                         where) from None
    # Inline the root's body; the helper rules (only for very deep patterns) get fresh names.
    names = {rule.name: new_rule("regex").name for rule in grammar.rules
             if rule.name != grammar.root_rule_name}
    every = {**{rule.name: rule.name for rule in grammar.rules}, **names}
    bodies = {rule.name: rename_refs(rule.body, every) for rule in grammar.rules}
    if json_string:
        bodies = _without_code_points(bodies, grammar.rules, names, JSON_STRING_FORBIDDEN)
        if bodies.get(grammar.root_rule_name) is None:
            raise MacroError("Regex(..., json_string=true) matches nothing: every string of "
                             "the pattern holds a character a JSON string must escape",
                             argument.offset)
    for rule in grammar.rules:
        if rule.name != grammar.root_rule_name and bodies.get(rule.name) is not None:
            define_rule(RuleRef(names[rule.name]), bodies[rule.name])
    return bodies[grammar.root_rule_name]


def _dots_exclude_newline(pattern: str) -> Tuple[str, List[int]]:
    """``pattern`` with each ``.`` outside a class written ``[^\\n]``, and the indices (in the
    result) where that happened."""
    out: List[str] = []
    moved: List[int] = []
    length = 0
    i, n = 0, len(pattern)
    in_class = False
    while i < n:
        char = pattern[i]
        if char == "\\":
            piece = pattern[i:i + 2]
            i += 2
        elif in_class:
            piece = char
            in_class = char != "]"
            i += 1
        elif char == "[":
            # '[' then an optional '^'; a ']' right after them closes an empty class in
            # ECMAScript ('[]', '[^]').
            piece = char
            i += 1
            if i < n and pattern[i] == "^":
                piece += "^"
                i += 1
            in_class = True
        elif char == ".":
            moved.append(length)
            piece = "[^\\n]"
            i += 1
        else:
            piece = char
            i += 1
        out.append(piece)
        length += len(piece)
    return "".join(out), moved


def _without_code_points(bodies: Dict[str, Expr], rules, names: Dict[str, str],
                         forbidden) -> Dict[str, Optional[Expr]]:
    """Each body with the ``forbidden`` code points removed from every character it matches
    (None: nothing is left). ``bodies`` is keyed by the regex grammar's rule names and refers
    to the helpers by their new ``names``. ``regex_to_grammar``'s helper rules refer only to
    helpers made before them, so one pass in rule order (helpers first, root last) is enough."""
    gone: Set[str] = set()          # new names of the helpers that match nothing now
    out: Dict[str, Optional[Expr]] = {}
    order = [rule.name for rule in rules[1:]] + [rules[0].name]
    for name in order:
        out[name] = _strip(bodies[name], forbidden, gone)
        if out[name] is None and name in names:
            gone.add(names[name])
    return out


def _strip(expr: Expr, forbidden, gone: Set[str]) -> Optional[Expr]:
    if isinstance(expr, Literal):
        text = expr.data.decode("utf-8")
        if any(lo <= ord(char) <= hi for char in text for lo, hi in forbidden):
            return None
        return expr
    if isinstance(expr, CharClass):
        ranges = expr.effective_ranges()
        for hole in forbidden:
            ranges = subtract_range(ranges, hole)
        return CharClass(ranges) if ranges else None
    if isinstance(expr, TokenSet):
        return expr        # a token is no text (and regexes make none)
    if isinstance(expr, RuleRef):
        return None if expr.name in gone else expr
    if isinstance(expr, Sequence):
        items = [_strip(item, forbidden, gone) for item in expr.items]
        return None if any(item is None for item in items) else Sequence(tuple(items))
    if isinstance(expr, Choice):
        kept = [alt for alt in (_strip(a, forbidden, gone) for a in expr.alternatives)
                if alt is not None]
        return Choice(tuple(kept)) if kept else None
    inner = _strip(expr.expr, forbidden, gone)
    if inner is None:
        return EMPTY if expr.min == 0 else None
    return Repeat(inner, expr.min, expr.max)


# ----------------------------------------------------------------------------- Substring


def _substring(call: MacroCall, new_rule, define_rule) -> Expr:
    _keywords(call, ())
    chunks = [_string(argument, "each argument of Substring()") for argument in call.arguments]
    # Empty chunks never change the language: a run that holds them spells what the same run
    # without them spells.
    chunks = [chunk for chunk in chunks if chunk]
    if not chunks:
        return EMPTY
    symbols: Dict[str, int] = {}
    word = [symbols.setdefault(chunk, len(symbols)) for chunk in chunks]
    spelled = {_symbol_letter(symbol): chunk for chunk, symbol in symbols.items()}
    dfa = minimize(_factor_automaton(word))

    def spell(ranges) -> Expr:
        pieces = [Literal(spelled[letter].encode("utf-8"))
                  for lo, hi in ranges for letter in range(lo, hi + 1)]
        return pieces[0] if len(pieces) == 1 else Choice(tuple(pieces))

    expr = dfa_to_expr(dfa, spell, new_rule, "substring", define_rule=define_rule)
    assert expr is not None          # the empty run is always there
    return expr


def _symbol_letter(symbol: int) -> int:
    """A code point that stands for chunk number ``symbol`` (surrogates skipped)."""
    return symbol if symbol < SURROGATES[0] else symbol + (SURROGATES[1] - SURROGATES[0] + 1)


def _factor_automaton(word: List[int]) -> Dfa:
    """The suffix automaton of ``word`` (a list of symbols) with every state final: it accepts
    exactly the factors (contiguous runs) of ``word``, the empty one included."""
    length = [0]
    link = [-1]
    moves: List[Dict[int, int]] = [{}]
    last = 0
    for symbol in word:
        current = len(length)
        length.append(length[last] + 1)
        link.append(0)
        moves.append({})
        state = last
        while state != -1 and symbol not in moves[state]:
            moves[state][symbol] = current
            state = link[state]
        if state != -1:
            target = moves[state][symbol]
            if length[state] + 1 == length[target]:
                link[current] = target
            else:
                clone = len(length)
                length.append(length[state] + 1)
                link.append(link[target])
                moves.append(dict(moves[target]))
                while state != -1 and moves[state].get(symbol) == target:
                    moves[state][symbol] = clone
                    state = link[state]
                link[target] = clone
                link[current] = clone
        last = current
    rows = tuple(tuple((_symbol_letter(s), _symbol_letter(s), t) for s, t in sorted(row.items()))
                 for row in moves)
    return Dfa(rows, frozenset(range(len(rows))))


# ----------------------------------------------------------------------------- TagDispatch


def _tag_dispatch(call: MacroCall, new_rule, define_rule,
                  references: List[Tuple[str, int]]) -> Expr:
    keywords = _keywords(call, ("loop_after_dispatch", "excludes"))
    tags = _dispatch_pairs(call, '("tag", rule)',
                           lambda value: _string(value, "a tag", non_empty=True), references)
    loop = _boolean(keywords.get("loop_after_dispatch"), True)
    excludes: List[str] = []
    if "excludes" in keywords:
        for value in _tuple(keywords["excludes"].value, "excludes", '("a", "b")'):
            exclude = _string(value, "an exclude", non_empty=True)
            for tag, _ in tags:
                if tag.startswith(exclude):
                    raise MacroError(f"the exclude {exclude!r} is a prefix of the tag {tag!r}, "
                                     "which could then never be written", value.offset)
            excludes.append(exclude)
    dfa, dispatch = _tag_dispatch_dfa([tag for tag, _ in tags], [rule for _, rule in tags],
                                      excludes, loop)

    def spell(ranges) -> Expr:
        if len(ranges) == 1 and ranges[0][0] == ranges[0][1] and ranges[0][0] in dispatch:
            rules = dispatch[ranges[0][0]]
            refs = tuple(RuleRef(rule) for rule in rules)
            return refs[0] if len(refs) == 1 else Choice(refs)
        return _char(ranges)

    expr = dfa_to_expr(dfa, spell, new_rule, "tag_dispatch", define_rule=define_rule)
    assert expr is not None          # the empty free text is always there
    return expr


def _tag_dispatch_dfa(tags: List[str], rules: List[str], excludes: List[str],
                      loop: bool) -> Tuple[Dfa, Dict[int, Tuple[str, ...]]]:
    """The TagDispatch automaton as a Dfa over code points plus one made-up letter per
    distinct set of rules dispatched at a tag's end, and the rules of each made-up letter.

    State = trie node (0 is the root); with ``loop`` false one more state, the accepting
    sink reached after a dispatch. A made-up letter is a code point that no tag or exclude
    uses and that is not next to one, read only at tag ends, where nothing else is read but
    trie letters; so it never shares a transition's ranges with a real character."""
    kids: List[Dict[int, int]] = [{}]

    def insert(text: str) -> int:
        node = 0
        for char in text:
            code_point = ord(char)
            child = kids[node].get(code_point)
            if child is None:
                child = len(kids)
                kids.append({})
                kids[node][code_point] = child
            node = child
        return node

    tag_ends = [insert(tag) for tag in tags]
    dead: Set[int] = {insert(exclude) for exclude in excludes}
    ends = set(tag_ends) | dead
    letters = sorted({ord(char) for text in (*tags, *excludes) for char in text})

    # Aho-Corasick: goto[u] holds the moves that do not lead to the root; a state is dead when
    # its failure state is (its text then ends with an exclude).
    count = len(kids)
    fail = [0] * count
    goto: List[Dict[int, int]] = [{} for _ in range(count)]
    order = deque([0])
    while order:
        node = order.popleft()
        if fail[node] in dead:
            dead.add(node)
        for code_point in letters:
            child = kids[node].get(code_point)
            fallback = 0 if node == 0 else goto[fail[node]].get(code_point, 0)
            if child is None:
                if fallback:
                    goto[node][code_point] = fallback
            else:
                goto[node][code_point] = child
                fail[child] = fallback
                order.append(child)

    dispatch_sets: Dict[int, Tuple[str, ...]] = {}
    for node, rule in zip(tag_ends, rules):
        dispatch_sets[node] = tuple(dict.fromkeys(dispatch_sets.get(node, ()) + (rule,)))
    letter_of: Dict[Tuple[str, ...], int] = {}
    used = set(letters)
    candidate = MAX_CODE_POINT
    for rule_set in dispatch_sets.values():
        if rule_set in letter_of:
            continue
        while {candidate - 1, candidate, candidate + 1} & used or \
                SURROGATES[0] - 1 <= candidate <= SURROGATES[1] + 1:
            candidate -= 1
        letter_of[rule_set] = candidate
        used.add(candidate)
        candidate -= 2

    sink = count
    rows: List[Tuple[Tuple[int, int, int], ...]] = []
    for node in range(count):
        if node in dead:
            rows.append(())
        elif node in ends:                       # a tag's end: a longer tag, or dispatch
            row = [(cp, cp, child) for cp, child in kids[node].items() if child not in dead]
            letter = letter_of[dispatch_sets[node]]
            row.append((letter, letter, 0 if loop else sink))
            rows.append(tuple(sorted(row)))
        else:                                    # free text
            rows.append(_free_text_row(goto[node], letters, dead))
    accepting = {node for node in range(count) if node not in ends and node not in dead}
    if not loop:
        rows.append(())
        accepting.add(sink)
    dispatch = {letter: rule_set for rule_set, letter in letter_of.items()}
    return Dfa(tuple(rows), frozenset(accepting)), dispatch


def _free_text_row(moves: Dict[int, int], letters: List[int],
                   dead: Set[int]) -> Tuple[Tuple[int, int, int], ...]:
    """Transitions of a free-text state: each letter to its goto target (none when that is
    dead), every other code point to the root; adjacent ranges to one target merged."""
    row: List[Tuple[int, int, int]] = []

    def add(lo: int, hi: int, target: int) -> None:
        for a, b in ALPHABET:                     # skip the surrogates
            lo2, hi2 = max(lo, a), min(hi, b)
            if lo2 > hi2:
                continue
            if row and row[-1][2] == target and row[-1][1] + 1 == lo2:
                row[-1] = (row[-1][0], hi2, target)
            else:
                row.append((lo2, hi2, target))

    previous = 0
    for code_point in letters:
        if code_point > previous:
            add(previous, code_point - 1, 0)
        target = moves.get(code_point, 0)
        if target not in dead:
            add(code_point, code_point, target)
        previous = code_point + 1
    if previous <= MAX_CODE_POINT:
        add(previous, MAX_CODE_POINT, 0)
    return tuple(row)


def _char(ranges) -> Expr:
    """One code point of ``ranges`` (sorted, disjoint, surrogate-free): a literal when there is
    one, else a class, negated when that is shorter (``[^<]`` rather than two ranges)."""
    if len(ranges) == 1 and ranges[0][0] == ranges[0][1]:
        return Literal(chr(ranges[0][0]).encode("utf-8"))
    # The complement, with the surrogates counted in (a class never matches them anyway).
    complement = complement_ranges(tuple(ranges) + (SURROGATES,))
    if len(complement) < len(ranges):
        return CharClass(complement, negated=True)
    return CharClass(tuple(ranges))


# ----------------------------------------------------------------------------- token ids


def _token_set(call: MacroCall) -> Expr:
    """``Token(id, ...)`` or ``ExcludeToken(id, ...)``."""
    _keywords(call, ())
    negated = call.name == "ExcludeToken"
    if not call.arguments and not negated:
        raise MacroError(f"{call.name}() requires at least one integer argument", call.paren)
    what = f"{call.name}() arguments"
    return TokenSet(tuple(_token_id(argument, what) for argument in call.arguments), negated)


def _token_tag_dispatch(call: MacroCall, references: List[Tuple[str, int]]) -> Expr:
    keywords = _keywords(call, ("loop_after_dispatch", "excludes"))
    pairs = _dispatch_pairs(call, "(token_id, rule)",
                            lambda value: _token_id(value, "token trigger ids"), references)
    loop = _boolean(keywords.get("loop_after_dispatch"), True)
    excludes: List[int] = []
    if "excludes" in keywords:
        for value in _tuple(keywords["excludes"].value, "excludes", "(1, 2)"):
            exclude = _token_id(value, "exclude token ids")
            if any(exclude == trigger for trigger, _ in pairs):
                raise MacroError(f"the exclude token id {exclude} must not overlap with a "
                                 "token trigger id", value.offset)
            excludes.append(exclude)
    return token_tag_dispatch_expr([(trigger, RuleRef(rule)) for trigger, rule in pairs], loop,
                                   excludes)


def token_tag_dispatch_expr(pairs: Seq[Tuple[int, Expr]], loop: bool,
                            excludes: Seq[int]) -> Expr:
    """XGrammar's TokenTagDispatch as plain IR (see the module docstring): ``pairs`` are
    ``(trigger token id, what follows it)``; the expressions of one trigger are alternatives.
    An exclude may also be a trigger (structural tags do that): it then only dispatches."""
    following: Dict[int, List[Expr]] = {}
    for trigger, expr in pairs:
        following.setdefault(trigger, []).append(expr)
    free = TokenSet(tuple({*following, *excludes}), negated=True)
    dispatch = [Sequence((TokenSet((trigger,)), Choice(tuple(exprs))))
                for trigger, exprs in following.items()]
    if loop:
        return Repeat(Choice((free, *dispatch)), 0, None)
    if not dispatch:
        return Repeat(free, 0, None)
    return Sequence((Repeat(free, 0, None), Repeat(Choice(tuple(dispatch)), 0, 1)))
