"""Reference recognizer: the tests' oracle for "which byte strings does this grammar accept".

In:  a ``Grammar`` (``gxg.grammar.ir``) and input data — ``bytes``, or ``str`` which is encoded
     as UTF-8.
Out: booleans:

    Recognizer(grammar).accepts(data)         data is a sentence of the root rule
    Recognizer(grammar).accepts_prefix(data)  data is a prefix of some sentence (the empty
                                              input is one, unless the language is empty)
    grammar_accepts(grammar, data), grammar_accepts_prefix(grammar, data)   one-shot forms

and an incremental interface for tests that walk inputs byte by byte::

    state = Recognizer(grammar).start()
    state.feed(byte)       -> bool (still alive); a dead state stays dead
    state.feed_bytes(data) -> bool (still alive)
    state.alive            the bytes fed so far are a prefix of some sentence
    state.accepting        the bytes fed so far are a sentence
    state.position         how many bytes were fed
    state.copy()           an independent state (cheap: finished Earley sets are shared)

How: an Earley recognizer whose input symbols are BYTES, written to be obviously correct rather
than fast, and independently of the compiler (no automaton is built). The IR is lowered to plain
context-free productions; a literal becomes one terminal per byte, a character class one
terminal that consumes a whole UTF-8 sequence, one byte at a time (an Earley item remembers the
bytes of the code point read so far, so a code point may be split across the end of the input).

Semantics (the IR's, which follow XGrammar's; see DESIGN.md and
reference/xgrammar_semantics.md §2.2):

* A ``CharClass`` matches exactly one code point written as well-formed UTF-8
  (``CharClass.effective_ranges()``): invalid bytes, overlong encodings, surrogates
  (ED A0 80 ...) and values above U+10FFFF never match. For ``accepts_prefix``, a trailing
  incomplete UTF-8 sequence counts iff some completion of it is a code point of the class.
  (XGrammar 0.2.8 differs on surrogates: its classes match ED A0 80 .. ED BF BF as code points
  U+D800..U+DFFF. The tests pin that difference.)
* A ``TokenSet`` (``Token(...)`` / ``ExcludeToken(...)``) matches one whole token, and a byte
  string is no token: it matches no input here (a terminal that never matches, so the
  productions that need it are dropped like those of an empty class). ``sample_sentence``
  never derives through one.
* ``Repeat(e, m, None)`` is unbounded.
* Rule lookaheads are IGNORED: XGrammar treats them as trusted hints for token masks only, and
  they never change which strings are accepted.

Correctness notes:

* Nullable rules: items are advanced over a nullable nonterminal at prediction time
  (Aycock & Horspool, "Practical Earley Parsing", 2002), which fixes the classic bug where a
  completion of an empty rule misses items that are added to the same set later.
* Left recursion, direct or indirect, and cycles (``a ::= a | "x"``, ``(""*)*``) need no special
  care in Earley: items are deduplicated per set.
* Prefix answers are exact because productions that contain a non-productive symbol (one that
  derives no string: ``a ::= "x" a``, a class with no code points) are dropped before parsing, so
  every item left in a set can still be completed.
* Worst case is cubic in the input length (highly ambiguous grammars), never exponential.
"""
from __future__ import annotations

from typing import Dict, List, Optional, Tuple, Union

from gxg.grammar.ir import (
    CharClass,
    Choice,
    Expr,
    Grammar,
    Literal,
    Repeat,
    RuleRef,
    Sequence,
    TokenSet,
)

__all__ = [
    "sample_sentence",
    "Recognizer",
    "RecognizerState",
    "grammar_accepts",
    "grammar_accepts_prefix",
    "code_points_with_utf8_prefix",
]

Data = Union[bytes, bytearray, memoryview, str]


# ----------------------------------------------------------------------------- UTF-8

# For a sequence of n bytes: the payload bits of its lead byte, and the code points it may
# encode (shorter ones would be overlong encodings).
_LEAD_PAYLOAD_MASK = {1: 0x7F, 2: 0x1F, 3: 0x0F, 4: 0x07}
_CODE_POINTS_OF_LENGTH = {1: (0x0, 0x7F), 2: (0x80, 0x7FF), 3: (0x800, 0xFFFF),
                          4: (0x10000, 0x10FFFF)}


def utf8_sequence_length(lead: int) -> Optional[int]:
    """How many bytes a UTF-8 sequence starting with ``lead`` has; None if it cannot start one."""
    if lead < 0x80:
        return 1
    if 0xC0 <= lead < 0xE0:
        return 2
    if 0xE0 <= lead < 0xF0:
        return 3
    if 0xF0 <= lead < 0xF8:
        return 4
    return None  # a continuation byte (80-BF) or F8-FF


def _is_continuation(byte: int) -> bool:
    return 0x80 <= byte <= 0xBF


def code_points_with_utf8_prefix(prefix: bytes) -> Optional[Tuple[int, int, bool]]:
    """The code points whose well-formed UTF-8 encoding starts with ``prefix`` (non-empty).

    Returns ``(lo, hi, complete)``: those code points are exactly ``lo..hi`` (one contiguous
    range, because UTF-8 preserves order within one sequence length), except that the range may
    contain surrogates — callers intersect it with surrogate-free ranges. ``complete`` is True
    when ``prefix`` is a whole sequence (then ``lo == hi``). None when no code point fits.
    """
    length = utf8_sequence_length(prefix[0])
    if length is None or len(prefix) > length:
        return None
    if not all(_is_continuation(byte) for byte in prefix[1:]):
        return None
    value = prefix[0] & _LEAD_PAYLOAD_MASK[length]
    for byte in prefix[1:]:
        value = (value << 6) | (byte & 0x3F)
    missing_bits = 6 * (length - len(prefix))
    lo = value << missing_bits
    hi = lo | ((1 << missing_bits) - 1)
    # Clipping to the code points of this length rules out overlong encodings (C0 80, E0 80 80)
    # and values above U+10FFFF (F4 90 .., F5 ..).
    smallest, largest = _CODE_POINTS_OF_LENGTH[length]
    lo, hi = max(lo, smallest), min(hi, largest)
    if lo > hi:
        return None
    return lo, hi, len(prefix) == length


def _ranges_intersect(ranges: Tuple[Tuple[int, int], ...], lo: int, hi: int) -> bool:
    return any(range_lo <= hi and lo <= range_hi for range_lo, range_hi in ranges)


# ----------------------------------------------------------------------------- terminals

# What a terminal says about one more byte: it is rejected (None), it completes the terminal
# (COMPLETE), or the terminal is still incomplete (the bytes read so far, a non-empty bytes).
COMPLETE = object()


class ByteTerminal:
    """Exactly one byte (literals are lowered to one of these per byte)."""

    __slots__ = ("value", "first_step")

    def __init__(self, value: int):
        self.value = value
        # first_step[byte] is step(b"", byte): a table, because scanning is the inner loop.
        self.first_step = [COMPLETE if byte == value else None for byte in range(256)]

    def can_match(self) -> bool:
        return True

    def step(self, partial: bytes, byte: int):
        return COMPLETE if byte == self.value and not partial else None

    def __repr__(self) -> str:
        return f"ByteTerminal({bytes([self.value])!r})"


class CodePointTerminal:
    """One code point in ``ranges`` (sorted, surrogate-free), read as its UTF-8 bytes."""

    __slots__ = ("ranges", "_steps", "first_step")

    def __init__(self, ranges: Tuple[Tuple[int, int], ...]):
        self.ranges = ranges
        self._steps: Dict[bytes, object] = {}  # memo: bytes read so far + new byte -> result
        self.first_step = [self.step(b"", byte) for byte in range(256)]

    def can_match(self) -> bool:
        return bool(self.ranges)

    def step(self, partial: bytes, byte: int):
        candidate = partial + bytes((byte,))
        try:
            return self._steps[candidate]
        except KeyError:
            pass
        result = None
        span = code_points_with_utf8_prefix(candidate)
        if span is not None:
            lo, hi, complete = span
            if _ranges_intersect(self.ranges, lo, hi):
                result = COMPLETE if complete else candidate
        self._steps[candidate] = result
        return result

    def __repr__(self) -> str:
        return f"CodePointTerminal({self.ranges!r})"


class TokenTerminal:
    """One whole token (a ``TokenSet``): no byte string matches it."""

    __slots__ = ()
    first_step = [None] * 256

    def can_match(self) -> bool:
        return False

    def step(self, partial: bytes, byte: int):
        return None

    def __repr__(self) -> str:
        return "TokenTerminal()"


TOKEN_TERMINAL = TokenTerminal()
Terminal = Union[ByteTerminal, CodePointTerminal, TokenTerminal]
Symbol = Union[int, Terminal]  # an int is a nonterminal


# ----------------------------------------------------------------------------- lowering


class _ContextFreeGrammar:
    """The IR as plain productions ``lhs -> rhs``: lhs a nonterminal id, rhs a tuple of symbols.

    Nonterminal 0 is the start symbol and production 0 is ``start -> root``, so "the input is a
    sentence" is "the item (production 0, dot 1, origin 0) is in the last Earley set".
    """

    START = 0

    def __init__(self, grammar: Grammar):
        self.nonterminal_names: List[str] = []
        self.lhs: List[int] = []
        self.rhs: List[Tuple[Symbol, ...]] = []
        self._byte_terminals = [ByteTerminal(value) for value in range(256)]
        self._class_terminals: Dict[Tuple[Tuple[int, int], ...], CodePointTerminal] = {}

        self._new_nonterminal("<start>")
        self.rule_ids = {rule.name: self._new_nonterminal(rule.name) for rule in grammar.rules}
        self._add_production(self.START, (self.rule_ids[grammar.root_rule_name],))
        for rule in grammar.rules:  # lookaheads are hints only: ignored
            body = rule.body
            alternatives = body.alternatives if isinstance(body, Choice) else (body,)
            for alternative in alternatives:
                self._add_production(self.rule_ids[rule.name], self._symbols(alternative))

    def _new_nonterminal(self, name: str) -> int:
        self.nonterminal_names.append(name)
        return len(self.nonterminal_names) - 1

    def _add_production(self, lhs: int, rhs: Tuple[Symbol, ...]) -> None:
        self.lhs.append(lhs)
        self.rhs.append(tuple(rhs))

    def _symbols(self, expr: Expr) -> Tuple[Symbol, ...]:
        """The symbols that ``expr`` stands for inside a production's right-hand side."""
        if isinstance(expr, Literal):
            return tuple(self._byte_terminals[byte] for byte in expr.data)
        if isinstance(expr, CharClass):
            ranges = expr.effective_ranges()
            if ranges not in self._class_terminals:
                self._class_terminals[ranges] = CodePointTerminal(ranges)
            return (self._class_terminals[ranges],)
        if isinstance(expr, TokenSet):
            return (TOKEN_TERMINAL,)
        if isinstance(expr, RuleRef):
            return (self.rule_ids[expr.name],)
        if isinstance(expr, Sequence):
            return tuple(symbol for item in expr.items for symbol in self._symbols(item))
        if isinstance(expr, Choice):
            choice = self._new_nonterminal("<choice>")
            for alternative in expr.alternatives:
                self._add_production(choice, self._symbols(alternative))
            return (choice,)
        if isinstance(expr, Repeat):
            return (self._repeat(expr),)
        raise TypeError(f"not a grammar expression: {expr!r}")

    def _single_symbol(self, expr: Expr) -> Symbol:
        symbols = self._symbols(expr)
        if len(symbols) == 1:
            return symbols[0]
        wrapper = self._new_nonterminal("<group>")
        self._add_production(wrapper, symbols)
        return wrapper

    def _repeat(self, expr: Repeat) -> int:
        """A nonterminal for ``expr.expr`` repeated min..max times.

        ``e{m,}``  -> N ::= e^m S,  S ::= "" | S e
        ``e{m,n}`` -> N ::= e^m O_(n-m),  O_0 ::= "",  O_k ::= "" | O_(k-1) e
        The optional tails are left-recursive, which keeps Earley sets small on long runs; when
        m is 0 the tail itself is N.
        """
        item = self._single_symbol(expr.expr)
        tail = self._new_nonterminal("<repeat-tail>")
        self._add_production(tail, ())
        if expr.max is None:
            self._add_production(tail, (tail, item))
        else:
            for _ in range(expr.max - expr.min):
                longer_tail = self._new_nonterminal("<repeat-tail>")
                self._add_production(longer_tail, ())
                self._add_production(longer_tail, (tail, item))
                tail = longer_tail
        if expr.min == 0:
            return tail
        repeat = self._new_nonterminal("<repeat>")
        self._add_production(repeat, (item,) * expr.min + (tail,))
        return repeat

    # -- analyses over the productions

    def productive_nonterminals(self) -> set:
        """Nonterminals that derive at least one byte string (least fixed point)."""
        productive: set = set()
        changed = True
        while changed:
            changed = False
            for lhs, rhs in zip(self.lhs, self.rhs):
                if lhs not in productive and all(
                        symbol in productive if isinstance(symbol, int) else symbol.can_match()
                        for symbol in rhs):
                    productive.add(lhs)
                    changed = True
        return productive

    def nullable_nonterminals(self, productions: List[int]) -> set:
        """Nonterminals that derive the empty string using only ``productions``."""
        nullable: set = set()
        changed = True
        while changed:
            changed = False
            for production in productions:
                lhs = self.lhs[production]
                if lhs not in nullable and all(
                        isinstance(symbol, int) and symbol in nullable
                        for symbol in self.rhs[production]):
                    nullable.add(lhs)
                    changed = True
        return nullable


# ----------------------------------------------------------------------------- Earley

# An item (production, dot, origin): the production's rhs is matched up to ``dot`` from input
# position ``origin``. A partial item (production, dot, origin, partial) is one whose terminal at
# ``dot`` is a code point begun but not finished: ``partial`` holds its bytes so far. Partial
# items need no prediction or completion, so they live apart, in ``partials``.
Item = Tuple[int, int, int]
PartialItem = Tuple[int, int, int, bytes]


class _EarleySet:
    __slots__ = ("items", "seen", "waiting", "scanners", "partials", "predicted")

    def __init__(self) -> None:
        self.items: List[Item] = []
        self.seen: set = set()
        self.waiting: Dict[int, List[Item]] = {}  # nonterminal -> items whose next symbol it is
        self.scanners: List[Item] = []  # items whose next symbol is a terminal
        self.partials: Dict[PartialItem, None] = {}  # an ordered set
        self.predicted: set = set()  # nonterminals whose productions were added here

    def add(self, item: Item) -> None:
        if item not in self.seen:
            self.seen.add(item)
            self.items.append(item)

    def is_empty(self) -> bool:
        return not self.items and not self.partials


class Recognizer:
    """Earley recognizer over bytes for a ``Grammar``; see the module docstring."""

    def __init__(self, grammar: Grammar):
        self.grammar = grammar
        cfg = _ContextFreeGrammar(grammar)
        productive = cfg.productive_nonterminals()
        # Only productions whose every symbol can derive something: then every item in an
        # Earley set can be completed, so "set not empty" means "viable prefix".
        useful = [
            production for production, rhs in enumerate(cfg.rhs)
            if all(symbol in productive if isinstance(symbol, int) else symbol.can_match()
                   for symbol in rhs)]
        self._lhs = cfg.lhs
        # The symbol after each dot position, then None (the item is complete).
        self._next_symbol = [rhs + (None,) for rhs in cfg.rhs]
        self._productions_of: Dict[int, Tuple[int, ...]] = {}
        for production in useful:
            lhs = cfg.lhs[production]
            self._productions_of[lhs] = self._productions_of.get(lhs, ()) + (production,)
        self._nullable = cfg.nullable_nonterminals(useful)
        self._language_is_empty = cfg.START not in productive
        self._initial_set = self._closure([], self._seed_set())

    # -- public API

    def start(self) -> "RecognizerState":
        """A state that has read no input."""
        return RecognizerState(self, [self._initial_set])

    def accepts(self, data: Data) -> bool:
        state = self.start()
        return state.feed_bytes(_as_bytes(data)) and state.accepting

    def accepts_prefix(self, data: Data) -> bool:
        return self.start().feed_bytes(_as_bytes(data))

    @property
    def language_is_empty(self) -> bool:
        return self._language_is_empty

    # -- the algorithm

    def _seed_set(self) -> _EarleySet:
        seed = _EarleySet()
        seed.predicted.add(_ContextFreeGrammar.START)
        for production in self._productions_of.get(_ContextFreeGrammar.START, ()):
            seed.add((production, 0, 0))
        return seed

    def _closure(self, earlier_sets: List[_EarleySet], current: _EarleySet) -> _EarleySet:
        """Predict and complete until ``current`` (at position len(earlier_sets)) is closed.

        The body is the textbook loop with the set operations inlined: it is the inner loop.
        """
        position = len(earlier_sets)
        next_symbol, lhs_of = self._next_symbol, self._lhs
        productions_of, nullable = self._productions_of, self._nullable
        items, seen, waiting = current.items, current.seen, current.waiting
        scanners, predicted = current.scanners, current.predicted
        index = 0
        while index < len(items):
            item = items[index]
            index += 1
            production, dot, origin = item
            symbol = next_symbol[production][dot]
            if symbol is None:
                # Complete: advance every item of the origin set that waited for this lhs. When
                # origin == position the lhs is nullable, and items that start waiting for it
                # later are advanced at prediction time instead (Aycock-Horspool).
                origin_set = current if origin == position else earlier_sets[origin]
                for waiting_production, waiting_dot, waiting_origin in origin_set.waiting.get(
                        lhs_of[production], ()):
                    advanced = (waiting_production, waiting_dot + 1, waiting_origin)
                    if advanced not in seen:
                        seen.add(advanced)
                        items.append(advanced)
            elif symbol.__class__ is int:
                if symbol in waiting:
                    waiting[symbol].append(item)
                else:
                    waiting[symbol] = [item]
                if symbol not in predicted:
                    predicted.add(symbol)
                    for predicted_production in productions_of.get(symbol, ()):
                        new = (predicted_production, 0, position)
                        if new not in seen:
                            seen.add(new)
                            items.append(new)
                if symbol in nullable:
                    advanced = (production, dot + 1, origin)
                    if advanced not in seen:
                        seen.add(advanced)
                        items.append(advanced)
            else:
                scanners.append(item)
        return current

    def _scan(self, sets: List[_EarleySet], byte: int) -> _EarleySet:
        """The next Earley set after reading ``byte`` (closed; empty when the byte is rejected)."""
        following = _EarleySet()
        next_symbol = self._next_symbol
        current = sets[-1]
        for production, dot, origin in current.scanners:
            result = next_symbol[production][dot].first_step[byte]
            if result is None:
                continue
            if result is COMPLETE:
                following.add((production, dot + 1, origin))
            else:
                following.partials[(production, dot, origin, result)] = None
        for production, dot, origin, partial in current.partials:
            result = next_symbol[production][dot].step(partial, byte)
            if result is None:
                continue
            if result is COMPLETE:
                following.add((production, dot + 1, origin))
            else:
                following.partials[(production, dot, origin, result)] = None
        if not following.items:
            return following
        return self._closure(sets, following)


class RecognizerState:
    """The Earley sets for the bytes read so far. Finished sets are never mutated, so copies
    share them."""

    __slots__ = ("_recognizer", "_sets")

    def __init__(self, recognizer: Recognizer, sets: List[_EarleySet]):
        self._recognizer = recognizer
        self._sets = sets

    @property
    def alive(self) -> bool:
        """The bytes read so far are a prefix of some sentence."""
        return not self._sets[-1].is_empty()

    @property
    def accepting(self) -> bool:
        """The bytes read so far are a sentence."""
        return (0, 1, 0) in self._sets[-1].seen

    @property
    def position(self) -> int:
        """How many bytes have been read."""
        return len(self._sets) - 1

    def feed(self, byte: int) -> bool:
        """Read one byte; returns ``alive``. A dead state stays dead."""
        if not 0 <= byte <= 0xFF:
            raise ValueError(f"not a byte: {byte!r}")
        if not self.alive:
            self._sets.append(self._sets[-1])  # still empty; keeps position counting bytes
            return False
        self._sets.append(self._recognizer._scan(self._sets, byte))
        return self.alive

    def feed_bytes(self, data: Data) -> bool:
        """Read every byte of ``data``; returns ``alive``. Stops early once dead."""
        for byte in _as_bytes(data):
            if not self.feed(byte):
                return False
        return self.alive

    def copy(self) -> "RecognizerState":
        return RecognizerState(self._recognizer, list(self._sets))


# ----------------------------------------------------------------------------- one-shot forms


def _as_bytes(data: Data) -> bytes:
    if isinstance(data, str):
        return data.encode("utf-8")
    return bytes(data)


def grammar_accepts(grammar: Grammar, data: Data) -> bool:
    """``data`` is a sentence of ``grammar``'s root rule."""
    return Recognizer(grammar).accepts(data)


def grammar_accepts_prefix(grammar: Grammar, data: Data) -> bool:
    """``data`` is a prefix of some sentence of ``grammar``'s root rule."""
    return Recognizer(grammar).accepts_prefix(data)


# ----------------------------------------------------------------------------- sampling


def sample_sentence(grammar: Grammar, rng, *, max_depth: int = 12, max_extra_repeats: int = 3) -> bytes:
    """A random sentence of ``grammar``'s root rule (a random derivation), for property tests
    that check "everything the grammar produces is valid". Beyond ``max_depth`` nested rule
    references each choice takes its alternative of smallest derivation depth, so sampling ends
    whenever the language is non-empty; a repeat takes min..min+``max_extra_repeats`` copies
    (fewer near the depth limit). Code points are drawn from the class's ranges, ASCII first.
    Raises ValueError when the root rule derives no finite sentence."""
    rules = {rule.name: rule.body for rule in grammar.rules}
    depth_of = _derivation_depths(rules)
    if depth_of.get(grammar.root_rule_name) is None:
        raise ValueError("the root rule derives no finite sentence")

    def cost(expr) -> Optional[int]:
        return _expr_depth(expr, depth_of)

    out = bytearray()

    def emit(expr, depth: int) -> None:
        if isinstance(expr, Literal):
            out.extend(expr.data)
        elif isinstance(expr, CharClass):
            ranges = expr.effective_ranges()
            ascii_ranges = [(lo, min(hi, 0x7F)) for lo, hi in ranges if lo <= 0x7F]
            lo, hi = rng.choice(ascii_ranges if ascii_ranges and rng.random() < 0.8 else list(ranges))
            out.extend(chr(rng.randint(lo, hi)).encode("utf-8"))
        elif isinstance(expr, RuleRef):
            emit(rules[expr.name], depth + 1)
        elif isinstance(expr, Sequence):
            for item in expr.items:
                emit(item, depth)
        elif isinstance(expr, Choice):
            options = [(a, cost(a)) for a in expr.alternatives]
            options = [(a, c) for a, c in options if c is not None]
            if depth >= max_depth:
                best = min(c for _, c in options)
                options = [(a, c) for a, c in options if c == best]
            emit(rng.choice(options)[0], depth)
        else:
            extra = 0 if depth >= max_depth or cost(expr.expr) is None else rng.randint(0, max_extra_repeats)
            count = expr.min + extra if expr.max is None else min(expr.max, expr.min + extra)
            for _ in range(count):
                emit(expr.expr, depth)

    emit(rules[grammar.root_rule_name], 0)
    return bytes(out)


def _derivation_depths(rules) -> dict:
    """Per rule, the least nesting of rule references a finite sentence needs (fixpoint);
    rules that derive no finite sentence are absent."""
    depth_of: dict = {}
    changed = True
    while changed:
        changed = False
        for name, body in rules.items():
            found = _expr_depth(body, depth_of)
            if found is not None and (name not in depth_of or found < depth_of[name]):
                depth_of[name] = found
                changed = True
    return depth_of


def _expr_depth(expr, depth_of: dict) -> Optional[int]:
    """Least nesting of rule references a finite string of ``expr`` needs, given the rules'
    depths so far (None: none known yet)."""
    if isinstance(expr, Literal):
        return 0
    if isinstance(expr, CharClass):
        return 0 if expr.effective_ranges() else None
    if isinstance(expr, TokenSet):
        return None  # a token is no byte string
    if isinstance(expr, RuleRef):
        inner = depth_of.get(expr.name)
        return None if inner is None else inner + 1
    if isinstance(expr, Sequence):
        costs = [_expr_depth(item, depth_of) for item in expr.items]
        return None if None in costs else max(costs, default=0)
    if isinstance(expr, Choice):
        costs = [c for c in (_expr_depth(a, depth_of) for a in expr.alternatives) if c is not None]
        return min(costs) if costs else None
    return 0 if expr.min == 0 else _expr_depth(expr.expr, depth_of)
