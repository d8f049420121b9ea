"""Grammar IR: the plain data that every front-end produces and the compiler consumes.

In:  nothing — this module is the data model.
Out: immutable, hashable dataclasses:

    Grammar(rules=(Rule, ...), root_rule_name="root")
    Rule(name, body: Expr, lookahead: Expr | None, max_tokens: int | None)
    Expr = Literal | CharClass | TokenSet | RuleRef | Sequence | Choice | Repeat

Conventions
-----------
* ``Literal.data`` is a byte string holding UTF-8 text (``b""`` is the empty string). Raw bytes
  that are not UTF-8 cannot be written in the EBNF dialect, so the IR refuses them too; that keeps
  ``Grammar.from_ebnf(str(g)) == g`` true for every grammar.
* ``CharClass`` ranges are inclusive ranges of Unicode code points, kept sorted and merged.
  ``negated=True`` means "any code point not in the ranges". A class matches exactly one code
  point, i.e. one well-formed UTF-8 sequence; surrogates (U+D800–U+DFFF) never match because they
  have no UTF-8 encoding.
* ``TokenSet(ids, negated)`` matches one whole *token* of the tokenizer, not bytes: a token
  whose id is in ``ids`` (XGrammar's ``Token(...)``), or, when ``negated``, any token whose id is
  not (``ExcludeToken(...)``). It can only start at a token boundary, so a token whose bytes
  reach it part-way is rejected; strings (``accept_string``) never match it.
* ``Repeat(expr, min, max)`` with ``max=None`` is unbounded: ``*`` is ``{0,}``, ``+`` is ``{1,}``,
  ``?`` is ``{0,1}``.
* ``Rule.lookahead`` is an optional lookahead assertion (``rule ::= body (= lookahead)``): a hint
  that whatever follows a completed instance of the rule starts with a string of the lookahead's
  language. As in XGrammar, it never changes which strings the grammar accepts; the compiler may
  use it to prune token masks.
* ``Rule.max_tokens`` is a token budget kept while decoding (XGrammar's rule attribute
  ``name[max_tokens=N]``): each occurrence of the rule counts the tokens that start inside it;
  once N of them have been accepted, at the first token boundary where the occurrence can end
  it must end (XGrammar's best effort: until it can end, it goes on). It never changes the
  strings the grammar accepts from ``accept_string`` (which counts no tokens), only which token
  sequences it accepts. Its body must be regular (``gxg.grammar.rule_attributes`` writes it so:
  recursion only through tail calls, no token items); ``gxg.compiler.automaton`` says how the
  budget is kept.

Every ``Rule`` stores its body and lookahead in a normal form (see ``normalize``), so two grammars
that print the same are equal, and printing then parsing gives back an equal grammar.
"""
from __future__ import annotations

import contextlib
import threading
from dataclasses import dataclass, field
from typing import Dict, Iterator, Optional, Tuple, Union

MAX_CODE_POINT = 0x10FFFF
SURROGATES = (0xD800, 0xDFFF)


class GrammarError(RuntimeError, ValueError):
    """A grammar (or regex, or schema) that cannot be accepted.

    ``line`` and ``column`` (1-based) locate the problem in the source text when there is one.
    Subclasses RuntimeError because XGrammar raises RuntimeError for the same errors.
    """

    def __init__(self, message: str, line: Optional[int] = None, column: Optional[int] = None):
        self.message = message
        self.line = line
        self.column = column
        if line is not None:
            text = f"line {line}, column {column}: {message}"
        else:
            text = message
        super().__init__(text)


# ----------------------------------------------------------------------------- expressions


@dataclass(frozen=True, slots=True)
class Literal:
    """A byte string (UTF-8 text); ``Literal(b"")`` is the empty string (epsilon)."""

    data: bytes

    def __post_init__(self) -> None:
        if not isinstance(self.data, bytes):
            raise TypeError(f"Literal.data must be bytes, got {type(self.data).__name__}")
        try:
            self.data.decode("utf-8")
        except UnicodeDecodeError as exc:
            raise GrammarError(f"literal {self.data!r} is not valid UTF-8") from exc

    @staticmethod
    def of(text: str) -> "Literal":
        return Literal(text.encode("utf-8"))


@dataclass(frozen=True, slots=True)
class CharClass:
    """One code point from ``ranges`` (or, when ``negated``, one code point not in them)."""

    ranges: Tuple[Tuple[int, int], ...]
    negated: bool = False

    def __post_init__(self) -> None:
        merged = _merge_ranges(self.ranges)
        if not merged and not self.negated:
            raise GrammarError("empty character class matches nothing")
        object.__setattr__(self, "ranges", merged)

    def effective_ranges(self) -> Tuple[Tuple[int, int], ...]:
        """The code points this class matches, as sorted disjoint ranges, surrogates removed."""
        ranges = complement_ranges(self.ranges) if self.negated else self.ranges
        return subtract_range(ranges, SURROGATES)

    def matches_nothing(self) -> bool:
        """``not self.effective_ranges()``; without building them for a plain class (its
        first range decides, unless it lies among the surrogates)."""
        if self.negated:
            return not self.effective_ranges()
        low, high = SURROGATES
        return all(low <= lo and hi <= high for lo, hi in self.ranges)

    def matches(self, code_point: int) -> bool:
        return any(lo <= code_point <= hi for lo, hi in self.effective_ranges())


@dataclass(frozen=True, slots=True)
class TokenSet:
    """One whole token: an id in ``ids`` (``Token(...)``), or with ``negated`` an id not in them
    (``ExcludeToken(...)``). ``ids`` are kept sorted and distinct."""

    ids: Tuple[int, ...]
    negated: bool = False

    def __post_init__(self) -> None:
        ids = tuple(self.ids)
        for token in ids:
            if isinstance(token, bool) or not isinstance(token, int) or token < 0:
                raise GrammarError(f"a token id must be a non-negative integer, got {token!r}")
        ids = tuple(sorted(set(ids)))
        if not ids and not self.negated:
            raise GrammarError("Token() needs at least one token id")
        object.__setattr__(self, "ids", ids)

    def matches(self, token_id: int) -> bool:
        return (token_id in self.ids) != self.negated


@dataclass(frozen=True, slots=True)
class RuleRef:
    name: str


@dataclass(frozen=True, slots=True)
class Sequence:
    items: Tuple["Expr", ...]


@dataclass(frozen=True, slots=True)
class Choice:
    alternatives: Tuple["Expr", ...]

    def __post_init__(self) -> None:
        if not self.alternatives:
            raise GrammarError("a choice needs at least one alternative")


@dataclass(frozen=True, slots=True)
class Repeat:
    """``expr`` repeated between ``min`` and ``max`` times (``max=None``: no upper bound)."""

    expr: "Expr"
    min: int = 0
    max: Optional[int] = None

    def __post_init__(self) -> None:
        if self.min < 0:
            raise GrammarError(f"repetition lower bound {self.min} is negative")
        if self.max is not None and self.max < self.min:
            raise GrammarError(
                f"repetition upper bound {self.max} is smaller than lower bound {self.min}")


Expr = Union[Literal, CharClass, TokenSet, RuleRef, Sequence, Choice, Repeat]
_COMPOUND = frozenset((Sequence, Choice, Repeat))
_LEAF_KINDS = frozenset((Literal, CharClass, TokenSet, RuleRef))
EMPTY = Literal(b"")


# ----------------------------------------------------------------------------- rules, grammar


@dataclass(frozen=True, slots=True)
class Rule:
    name: str
    body: Expr
    lookahead: Optional[Expr] = None
    max_tokens: Optional[int] = None
    #: the rules the body references, each once, in order of first reference (computed here:
    #: the passes and the checks ask for it many times per grammar)
    refs: Tuple[str, ...] = field(default=(), init=False, compare=False, repr=False)
    #: some character class of the body or lookahead matches no code point (only then can a
    #: part of them derive nothing while every rule they reference derives something; from
    #: the same walk as ``refs``)
    has_empty_class: bool = field(default=False, init=False, compare=False, repr=False)

    def __post_init__(self) -> None:
        if not isinstance(self.name, str) or not self.name:
            raise GrammarError(f"invalid rule name {self.name!r}")
        if self.max_tokens is not None and (isinstance(self.max_tokens, bool)
                                            or not isinstance(self.max_tokens, int)
                                            or self.max_tokens < 0):
            raise GrammarError(f"rule {self.name!r}: max_tokens must be an integer >= 0, got "
                               f"{self.max_tokens!r}")
        body, refs, empty_class = _normalized(self.body)
        object.__setattr__(self, "body", body)
        if self.lookahead is not None:
            lookahead, _, lookahead_empty_class = _normalized(self.lookahead)
            object.__setattr__(self, "lookahead", lookahead)
            empty_class = empty_class or lookahead_empty_class
        object.__setattr__(self, "refs", refs)
        object.__setattr__(self, "has_empty_class", empty_class)

    def replaced(self, body: Expr, lookahead: Optional[Expr]) -> "Rule":
        """This rule (name and token budget) with another body and lookahead: what a pass
        that rewrites expressions builds."""
        return Rule(self.name, body, lookahead, self.max_tokens)


@dataclass(frozen=True, slots=True)
class Grammar:
    """A set of rules and the name of the root rule. Every referenced rule is defined.

    ``pruned`` (not part of equality): every rule derives some finite string and no part of a
    body or lookahead derives none, as ``gxg.compiler.passes.remove_dead_rules`` leaves a
    grammar; the passes that keep that true pass it on, and the automaton builder then skips
    its own check. False only means "not known"."""

    rules: Tuple[Rule, ...]
    root_rule_name: str = "root"
    pruned: bool = field(default=False, compare=False, repr=False)

    def __post_init__(self) -> None:
        rules = tuple(self.rules)
        object.__setattr__(self, "rules", rules)
        names = set()
        for rule in rules:
            if rule.name in names:
                raise GrammarError(f"rule {rule.name!r} is defined more than once")
            names.add(rule.name)
        if self.root_rule_name not in names:
            raise GrammarError(f"the root rule {self.root_rule_name!r} is not defined")
        for rule in rules:
            for name in (*rule.refs, *iter_rule_refs(rule.lookahead)):
                if name not in names:
                    raise GrammarError(
                        f"rule {rule.name!r} references undefined rule {name!r}")

    # -- access
    @property
    def root(self) -> Rule:
        return self.rule(self.root_rule_name)

    def rule(self, name: str) -> Rule:
        for rule in self.rules:
            if rule.name == name:
                return rule
        raise KeyError(name)

    @property
    def rule_names(self) -> Tuple[str, ...]:
        return tuple(rule.name for rule in self.rules)

    def __str__(self) -> str:
        from gxg.grammar.printer import grammar_to_ebnf
        return grammar_to_ebnf(self)

    # -- front-ends (each lives in its own module; imported lazily so the IR stays a leaf)
    @staticmethod
    def from_ebnf(ebnf_string: str, *, root_rule_name: str = "root") -> "Grammar":
        from gxg.grammar.ebnf import parse_ebnf
        return parse_ebnf(ebnf_string, root_rule_name=root_rule_name)

    @staticmethod
    def from_regex(regex_string: str) -> "Grammar":
        from gxg.grammar.regex import regex_to_grammar
        return regex_to_grammar(regex_string)

    @staticmethod
    def from_json_schema(schema, *, any_whitespace: bool = True, indent=None, separators=None,
                         strict_mode: bool = True, max_whitespace_cnt=None,
                         any_order: bool = False, coerce_one_of=None,
                         any_string_spelling: bool = False) -> "Grammar":
        from gxg.grammar.json_schema import json_schema_to_grammar
        return json_schema_to_grammar(schema, any_whitespace=any_whitespace, indent=indent,
                                      separators=separators, strict_mode=strict_mode,
                                      max_whitespace_cnt=max_whitespace_cnt, any_order=any_order,
                                      coerce_one_of=coerce_one_of,
                                      any_string_spelling=any_string_spelling)

    @staticmethod
    def builtin_json_grammar() -> "Grammar":
        from gxg.grammar.builtin import builtin_json_grammar
        return builtin_json_grammar()

    @staticmethod
    def concat(*grammars: "Grammar") -> "Grammar":
        from gxg.grammar.combine import concat
        return concat(*grammars)

    @staticmethod
    def union(*grammars: "Grammar") -> "Grammar":
        from gxg.grammar.combine import union
        return union(*grammars)


# ----------------------------------------------------------------------------- normal form


# Caches that say so, of normal forms by identity: id(expression) -> (the expression, its
# normal form, the rules it references, whether a class in it matches nothing); the entries
# keep the expressions alive, so an id is never reused while it is in one. Front ends and
# passes build many rules around the same subtrees (a property's value in every member
# alternative of an object; a rule rebuilt around an unchanged body), and a subtree met
# before is not walked again, neither for its normal form nor for its references.
# * Inside ``normal_forms_kept()`` (a compile: the JSON Schema front end, ``prepare``,
#   ``GrammarCompiler``), a table of the thread's own, dropped when the outermost scope ends:
#   every compound expression met (a shared subtree that was not normal is normalised once).
# * Elsewhere, one process-wide table of the expressions found already normal, bounded:
#   cleared when full. Scopes read it too: ``normal_constant`` puts long-lived expressions
#   there (the JSON Schema front end's cached string units, in every grammar of a compile).
_SCOPE = threading.local()
_KNOWN_NORMAL: Dict[int, Tuple["Expr", "Expr", Tuple[str, ...], bool]] = {}
_KNOWN_NORMAL_LIMIT = 1 << 14


@contextlib.contextmanager
def normal_forms_kept():
    """Within it (on this thread), ``normalize`` remembers every compound expression it met
    and its normal form until the outermost scope ends (nested scopes share the table)."""
    outermost = getattr(_SCOPE, "table", None) is None
    if outermost:
        _SCOPE.table = {}
    try:
        yield
    finally:
        if outermost:
            _SCOPE.table = None


def normal_constant(expr: Expr) -> Expr:
    """``normalize(expr)``, for an expression that lives long and recurs in many grammars: it
    is remembered in the process-wide table, which every compile reads (not in the scope of
    the compile that happens to build it first)."""
    scope, _SCOPE.table = getattr(_SCOPE, "table", None), None
    try:
        return normalize(expr)
    finally:
        _SCOPE.table = scope


def normalize(expr: Expr) -> Expr:
    """The normal form of ``expr``; same language, and what printing then parsing yields.

    Sequences are flattened, adjacent literals merged and empty literals dropped (an empty
    sequence is ``Literal(b"")``); choices are flattened (order and duplicates kept); single-item
    sequences and choices are their item; ``e{1,1}`` is ``e``; ``e{0,0}`` and repeats of the
    empty string are the empty string. Iterative (post-order with an explicit stack), so deeply
    nested expressions do not exhaust Python's recursion limit. A subtree already in normal
    form comes back as the same object.
    """
    return _normalized(expr)[0]


def _normalized(expr: Expr) -> Tuple[Expr, Tuple[str, ...], bool]:
    """``normalize(expr)``, the names of the rules it references, each once, in order of
    first reference (what ``Rule.refs`` holds), and whether one of its character classes
    matches no code point (``Rule.has_empty_class``), from the same walk."""
    kind = expr.__class__
    if kind not in _COMPOUND:
        if kind is RuleRef:
            return expr, (expr.name,), False
        if kind in _LEAF_KINDS:
            return expr, (), kind is CharClass and expr.matches_nothing()
        raise TypeError(f"not a grammar expression: {expr!r}")
    table = getattr(_SCOPE, "table", None)
    scoped = table is not None
    if not scoped:
        table = _KNOWN_NORMAL
    # id(node) -> (node, its normal form, the rules it references, a class in it matches
    # nothing): the compound nodes of this walk, and those found in the tables
    done: dict = {}
    known = table.get(id(expr))
    if known is None and scoped:
        known = _KNOWN_NORMAL.get(id(expr))  # a long-lived expression (normal_constant)
    if known is not None:
        return known[1], known[2], known[3]
    # Post-order: a node stays on the stack until every compound child is done (a child
    # already in a table is done on sight; a node of leaves alone is done on its first visit)
    stack = [expr]
    steps = 0
    while stack:
        node = stack[-1]
        steps += 1
        if steps & 4095 == 0:  # a deeply nested schema normalises big trees many times
            from gxg import compile_budget  # here: compile_budget imports this module
            compile_budget.check("the grammar's normalisation")
        if id(node) in done:
            stack.pop()
            continue
        kind = node.__class__
        kids = (node.items if kind is Sequence else node.alternatives if kind is Choice
                else (node.expr,))
        waiting = False
        for child in kids:
            if child.__class__ in _COMPOUND and id(child) not in done:
                known = table.get(id(child))
                if known is None and scoped:
                    known = _KNOWN_NORMAL.get(id(child))
                if known is not None:
                    done[id(child)] = known
                else:
                    stack.append(child)
                    waiting = True
        if waiting:
            continue
        stack.pop()
        normal = []
        parts = []  # the children's references, in order
        empty = False
        changed = False
        for child in kids:
            child_kind = child.__class__
            if child_kind in _COMPOUND:
                entry = done[id(child)]
                if entry[1] is not child:
                    changed = True
                normal.append(entry[1])
                if entry[2]:
                    parts.append(entry[2])
                if entry[3]:
                    empty = True
                continue
            if child_kind is RuleRef:
                parts.append((child.name,))
            elif child_kind is CharClass:
                if child.matches_nothing():
                    empty = True
            elif child_kind not in _LEAF_KINDS:
                raise TypeError(f"not a grammar expression: {child!r}")
            normal.append(child)
        refs = _merged_refs(parts)
        # a node already in normal form is kept as it is (normalising a normal tree allocates
        # nothing); otherwise the compound of the normal children, built in normal form
        if kind is Sequence:
            result = (node if not changed and _normal_items(normal)
                      else normal_sequence(normal))
        elif kind is Choice:
            result = (node if not changed and len(normal) >= 2
                      and Choice not in map(type, normal) else normal_choice(normal))
        elif kind is Repeat:
            result = normal_repeat(normal[0], node.min, node.max)
            if result is EMPTY:
                refs, empty = (), False  # the body is gone
            elif not changed and result is not normal[0]:
                result = node  # a repeat of a normal body: normal as it is
        else:
            raise TypeError(f"not a grammar expression: {node!r}")
        entry = (node, result, refs, empty)
        done[id(node)] = entry
        if scoped or result is node:
            table[id(node)] = entry
    _, result, refs, empty = done[id(expr)]
    if not scoped and len(table) >= _KNOWN_NORMAL_LIMIT:
        table.clear()
    if result.__class__ in _COMPOUND:
        table[id(result)] = (result, result, refs, empty)
    return result, refs, empty


def _merged_refs(parts) -> Tuple[str, ...]:
    """The names of ``parts`` (non-empty tuples of rule names, in order), each once, in order
    of first appearance; a single part comes back as it is."""
    if len(parts) <= 1:
        return parts[0] if parts else ()
    return tuple(dict.fromkeys(name for refs in parts for name in refs))


def _normal_items(items: list) -> bool:
    """Whether a sequence of these items (each in normal form) is in normal form: two or more,
    none a sequence or the empty literal, no two literals side by side."""
    if len(items) < 2:
        return False
    previous_literal = False
    for item in items:
        kind = item.__class__
        if kind is Literal:
            if previous_literal or not item.data:
                return False
            previous_literal = True
        elif kind is Sequence:
            return False
        else:
            previous_literal = False
    return True


def children(node: Expr) -> Tuple[Expr, ...]:
    """The direct subexpressions of ``node`` (``()`` for a leaf)."""
    if isinstance(node, Sequence):
        return node.items
    if isinstance(node, Choice):
        return node.alternatives
    if isinstance(node, Repeat):
        return (node.expr,)
    return ()


# Normal forms built directly, for callers whose parts are in normal form already (the JSON
# Schema emitter's string units, built for every key trie): what ``normalize`` would make of
# the compound, without a walk and without the intermediate nodes.


def normal_choice(alternatives) -> Expr:
    """``normalize(Choice(alternatives))`` for alternatives in normal form (at least one)."""
    flat: list = []
    for alternative in alternatives:
        if alternative.__class__ is Choice:
            flat.extend(alternative.alternatives)
        else:
            flat.append(alternative)
    return flat[0] if len(flat) == 1 else Choice(tuple(flat))


def normal_repeat(expr: Expr, low: int, high: Optional[int]) -> Expr:
    """``normalize(Repeat(expr, low, high))`` for ``expr`` in normal form."""
    if high == 0 or (expr.__class__ is Literal and not expr.data):
        return EMPTY
    if low == 1 and high == 1:
        return expr
    return Repeat(expr, low, high)


def normal_sequence(items) -> Expr:
    """``normalize(Sequence(items))`` for items in normal form."""
    out: list = []
    run: list = []  # adjacent non-empty literals, joined once (a run of one is kept as it is)
    for item in items:
        for part in (item.items if isinstance(item, Sequence) else (item,)):
            if isinstance(part, Literal):
                if part.data:
                    run.append(part)
                continue
            if run:
                out.append(_joined(run))
                run = []
            out.append(part)
    if run:
        out.append(_joined(run))
    if not out:
        return EMPTY
    return out[0] if len(out) == 1 else Sequence(tuple(out))


def _joined(run: list) -> Literal:
    return run[0] if len(run) == 1 else Literal(b"".join([part.data for part in run]))


def iter_subexprs(expr: Optional[Expr]) -> Iterator[Expr]:
    """``expr`` and every expression inside it, pre-order."""
    if expr is None:
        return
    stack = [expr]
    while stack:
        node = stack.pop()
        yield node
        if isinstance(node, Sequence):
            stack.extend(reversed(node.items))
        elif isinstance(node, Choice):
            stack.extend(reversed(node.alternatives))
        elif isinstance(node, Repeat):
            stack.append(node.expr)


def iter_rule_refs(expr: Optional[Expr]) -> Iterator[str]:
    """Names of the rules referenced in ``expr``, in order of appearance (with repeats)."""
    for node in iter_subexprs(expr):
        if isinstance(node, RuleRef):
            yield node.name


# ----------------------------------------------------------------------------- code-point ranges


def _merge_ranges(ranges) -> Tuple[Tuple[int, int], ...]:
    checked = []
    for pair in ranges:
        lo, hi = pair
        lo, hi = int(lo), int(hi)
        if not 0 <= lo <= MAX_CODE_POINT or not 0 <= hi <= MAX_CODE_POINT:
            raise GrammarError(f"code point range {lo:#x}-{hi:#x} is outside U+0000..U+10FFFF")
        if lo > hi:
            raise GrammarError(
                f"character range lower bound U+{lo:04X} is larger than upper bound U+{hi:04X}")
        checked.append((lo, hi))
    checked.sort()
    merged: list = []
    for lo, hi in checked:
        if merged and lo <= merged[-1][1] + 1:
            merged[-1] = (merged[-1][0], max(merged[-1][1], hi))
        else:
            merged.append((lo, hi))
    return tuple(merged)


def complement_ranges(ranges) -> Tuple[Tuple[int, int], ...]:
    """Code points 0..MAX_CODE_POINT not in ``ranges`` (inclusive pairs, any order, may overlap)."""
    out = []
    next_lo = 0
    for lo, hi in sorted(ranges):
        if lo > next_lo:
            out.append((next_lo, lo - 1))
        next_lo = max(next_lo, hi + 1)
    if next_lo <= MAX_CODE_POINT:
        out.append((next_lo, MAX_CODE_POINT))
    return tuple(out)


def subtract_range(ranges, hole: Tuple[int, int]) -> Tuple[Tuple[int, int], ...]:
    """``ranges`` (sorted, disjoint) without the code points of ``hole``."""
    out = []
    for lo, hi in ranges:
        if hi < hole[0] or lo > hole[1]:
            out.append((lo, hi))
            continue
        if lo < hole[0]:
            out.append((lo, hole[0] - 1))
        if hi > hole[1]:
            out.append((hole[1] + 1, hi))
    return tuple(out)
