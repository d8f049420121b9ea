r"""JSON numbers under numeric constraints: the grammar of the spellings whose value is in range.

In:  ``json_number_language(*, integer, minimum=None, maximum=None, exclusive_minimum=None,
     exclusive_maximum=None, multiple_of=None, new_rule)``. Bounds and ``multiple_of`` are
     ``int``, ``float`` or ``Decimal`` (floats are read as the decimal they print as,
     ``Decimal(repr(x))``: schemas come from ``json.loads``, so ``0.1`` means one tenth).
     Both an inclusive and an exclusive bound may be given on one side; both apply.
     ``new_rule(hint, body)`` registers a helper rule and returns a ``RuleRef`` to it (the caller
     makes the name unique). Automata with cycles (``multipleOf`` over unbounded ranges) need
     rules that refer to one another, so for those the callback is used in two steps:
     ``ref = new_rule(hint, None)`` reserves a rule and ``new_rule(ref, body)`` later gives its
     body. ``RuleCollector`` implements this protocol over a dict.
Out: an IR expression (``gxg.grammar.ir``) for RFC 8259 number spellings
     ``-?(0|[1-9][0-9]*)(\.[0-9]+)?([eE][+-]?[0-9]+)?`` — or, with ``integer=True``, only
     ``-?(0|[1-9][0-9]*)`` — whose value satisfies every constraint; ``None`` when no value does.
     ``json_integer()`` and ``json_number()`` are the unconstrained languages.
Errors: ``GrammarError("'minimum' must be a number")`` (bools, strings, NaN; the other bounds
     likewise, named as JSON Schema spells them: ``'exclusiveMinimum'``...),
     ``GrammarError("'multipleOf' must be a positive number")``, and
     ``GrammarError("unsupported keyword '<kw>': <reason>")`` when an exact grammar would be too
     large (more than ``MAX_BOUND_DIGITS`` digits in a bound, more than ``MAX_STATES`` automaton
     states). The caller appends the schema location.

Exactness contract: every accepted string is a JSON number whose exact decimal value (the value
of the spelling, not of a binary float parsed from it) satisfies every constraint.
``"-0"``, ``"-0.0"``, ``"-0e5"`` have value 0 and are accepted when 0 is in range.
Infinite bounds (``json.loads("1e400")`` is ``inf``) are read mathematically: ``maximum: inf``
constrains nothing, ``minimum: inf`` admits nothing.

Valid spellings that are rejected (the narrowings):

* ``integer=True``: only ``-?(0|[1-9][0-9]*)``. JSON Schema counts ``1.0`` and ``1e2`` as
  integers; they are rejected.
* ``integer=False``, spellings without an exponent: none rejected (any number of fraction
  digits: ``maximum 1.5`` accepts ``1.4999999999`` and ``1.5000``, rejects ``1.5001``).
* ``integer=False``, spellings with an exponent ``M e X``: accepted when the mantissa ``M`` (the
  spelling without exponent) itself satisfies every constraint and the exponent cannot move the
  value out of range, which is decided without looking at ``X``'s digits beyond its sign:
    - ``X`` is zero (``1e0``, ``1E+00``, ``2.5e-0``), or ``M`` is zero (``0e7``, ``-0.0E-3``);
    - ``X < 0`` when ``M``'s side of zero reaches 0, i.e. for ``M > 0`` there is no lower bound
      above 0 (for ``M < 0``: no upper bound below 0), and there is no ``multipleOf``;
    - ``X > 0`` when ``M``'s side is unbounded outward: for ``M > 0`` no upper bound, for
      ``M < 0`` no lower bound (scaling a multiple of k by 10^X keeps it a multiple).
  So sign-only bounds (``minimum 0``, ``exclusiveMinimum 0``, ``maximum 0``, ...) accept every
  exponent form exactly. Everything else with an exponent is rejected, e.g. ``15e-1`` for
  ``maximum 1.5`` (mantissa 15 is out of range), ``1e2`` for ``maximum 1000``, ``1e-3`` for
  ``minimum 0.0001``, ``7e-1`` for ``multipleOf 0.1``. Python's ``json.dumps`` writes floats
  below 1e-4 as ``1e-05`` and from 1e16 up as ``1e+16``: the first is accepted when 0 is in
  range or on its edge (and no ``multipleOf``), the second when the range is unbounded above.

``multipleOf`` is exact in decimal arithmetic: ``multipleOf 0.01`` accepts ``1.500`` and
``19.99``. Note that the ``jsonschema`` package divides binary floats for a float
``multipleOf`` and so rejects some exact multiples (``0.3`` for ``0.1``, ``19.99`` for
``0.01``); likewise a validator that parses ``1.49999999999999999999`` into a float sees 1.5.
Spellings with more digits than a double holds can therefore be valid here and invalid there.

How: the language is ``-M⁻ | -?0... | M⁺`` where M⁺ and M⁻ are the spellings of the positive
magnitudes allowed on each side of zero (written once, as ``-?(0 | M)``, when both sides are
equal). Each M is the intersection of small automata over the characters ``0-9.`` — the spelling
syntax, a comparison with each bound (integer part by length, then digit by digit; the fraction
digit by digit against the bound's, padded with zeros), the length class of the integer part,
and the residue for ``multipleOf`` — built as a product (at most ``MAX_STATES`` states) and
handed to ``gxg.grammar.code_point_dfa`` as a ``Dfa`` over those code points, which minimizes it
and writes it back as IR (``dfa_to_expr``: shared states that are not tiny and chains nested too
deep become rules, states on cycles — residues over unbounded lengths — right-linear rules
``s ::= [0-9] t | ...``). The integer part is split by its digit count (lengths strictly between
the bounds' lengths are unconstrained, and so is a bound's own length when the bound excludes no
number of that length, as 1 or 99 for integers), which gives the familiar range decomposition:
``[0, 2**63-1]`` is ``"-"? "0" | [1-9] [0-9]{0,17} | [1-8] [0-9]{18} | "9" (...)``.
``multipleOf`` k = m / 10**d: a value is a multiple iff its digits, scaled by 10**d, form a
multiple of m and the fraction digits past the d-th are zeros (for integers: a multiple of
m / gcd(m, 10**d)); m = 10**t * q with q coprime to 10 is tracked as (residue mod q, trailing
zeros up to t). A power of ten needs no automaton: its multiples are ``D 0{t}`` for D in the
scaled range.
"""
from __future__ import annotations

import math
from dataclasses import dataclass
from decimal import ROUND_CEILING, ROUND_FLOOR, Decimal, localcontext
from typing import Callable, Dict, Iterable, List, Optional, Tuple, Union

from gxg.grammar.code_point_dfa import Dfa, dfa_to_expr, minimize
from gxg.grammar.ir import (CharClass, Choice, Expr, GrammarError, Literal, Repeat, Rule, RuleRef,
                            Sequence, normalize)

__all__ = ["json_number_language", "json_integer", "json_number", "RuleCollector",
           "NewRule", "MAX_STATES", "MAX_BOUND_DIGITS"]

# ``new_rule(hint, body) -> RuleRef``; ``new_rule(hint, None)`` reserves, ``new_rule(ref, body)``
# defines a reserved rule.
NewRule = Callable[[Union[str, RuleRef], Optional[Expr]], RuleRef]

MAX_STATES = 20000        # product automaton states before minimisation
MAX_BOUND_DIGITS = 1100   # digits of a bound written out (a double needs at most 767)

# ----------------------------------------------------------------------------- pieces

DIGIT = CharClass(((ord("0"), ord("9")),))
NONZERO_DIGIT = CharClass(((ord("1"), ord("9")),))
MINUS = Literal(b"-")
_DIGITS = Repeat(DIGIT, 1, None)
_E = CharClass(((ord("E"), ord("E")), (ord("e"), ord("e"))))
_PLUS = Literal(b"+")
_SIGN = CharClass(((ord("+"), ord("+")), (ord("-"), ord("-"))))
_ZEROS = Repeat(Literal(b"0"), 1, None)

FRACTION = Sequence((Literal(b"."), _DIGITS))
EXPONENT = Sequence((_E, Repeat(_SIGN, 0, 1), _DIGITS))
# Exponent spellings by the sign of their value.
_EXPONENT_ZERO = Sequence((_E, Repeat(_SIGN, 0, 1), _ZEROS))
_EXPONENT_NONPOSITIVE = Sequence((_E, Choice((Sequence((MINUS, _DIGITS)),
                                              Sequence((Repeat(_PLUS, 0, 1), _ZEROS))))))
_EXPONENT_NONNEGATIVE = Sequence((_E, Choice((Sequence((Repeat(_PLUS, 0, 1), _DIGITS)),
                                              Sequence((MINUS, _ZEROS))))))
_UNSIGNED_INTEGER = Choice((Literal(b"0"), Sequence((NONZERO_DIGIT, Repeat(DIGIT, 0, None)))))


def json_integer() -> Expr:
    """``-?(0|[1-9][0-9]*)``: every integer in its canonical JSON spelling."""
    return normalize(Sequence((Repeat(MINUS, 0, 1), _UNSIGNED_INTEGER)))


def json_number() -> Expr:
    """``-?(0|[1-9][0-9]*)(\\.[0-9]+)?([eE][+-]?[0-9]+)?``: every JSON number (RFC 8259)."""
    return normalize(Sequence((json_integer(), Repeat(FRACTION, 0, 1), Repeat(EXPONENT, 0, 1))))


class RuleCollector:
    """A ``new_rule`` callback that keeps the rules in a dict (name -> body).

    Names are the hint with ``[^A-Za-z0-9_]`` replaced, made unique with a suffix; names in
    ``taken`` are never used. ``rules()`` gives the ``Rule`` objects once every reserved rule
    has a body.
    """

    def __init__(self, taken: Iterable[str] = ("root",)):
        self.bodies: Dict[str, Optional[Expr]] = {}
        self._taken = set(taken)
        self._suffixes: Dict[str, int] = {}  # base name -> last suffix used

    def __call__(self, hint: Union[str, RuleRef], body: Optional[Expr]) -> RuleRef:
        if isinstance(hint, RuleRef):  # the body of a reserved rule
            if hint.name not in self.bodies or self.bodies[hint.name] is not None:
                raise GrammarError(f"rule {hint.name!r} was not reserved")
            self.bodies[hint.name] = body
            return hint
        base = "".join(c if c.isalnum() or c == "_" else "_" for c in hint) or "r"
        name, n = base, self._suffixes.get(base, 1)
        while name in self.bodies or name in self._taken:
            n += 1
            name = f"{base}_{n}"
        self._suffixes[base] = n
        self.bodies[name] = body
        return RuleRef(name)

    def rules(self) -> Tuple[Rule, ...]:
        missing = [name for name, body in self.bodies.items() if body is None]
        if missing:
            raise GrammarError(f"reserved rules without a body: {missing}")
        return tuple(Rule(name, body) for name, body in self.bodies.items())


# ----------------------------------------------------------------------------- the entry point


def json_number_language(*, integer: bool, minimum=None, maximum=None, exclusive_minimum=None,
                         exclusive_maximum=None, multiple_of=None,
                         new_rule: NewRule) -> Optional[Expr]:
    """The spellings of the numbers that satisfy the constraints; see the module docstring."""
    bounds = {"minimum": minimum, "maximum": maximum, "exclusiveMinimum": exclusive_minimum,
              "exclusiveMaximum": exclusive_maximum}
    values = {keyword: _bound_value(keyword, value) for keyword, value in bounds.items()
              if value is not None}
    step = _step_value(multiple_of) if multiple_of is not None else None
    lower = _tighter_bound([_Bound(values[k], k == "exclusiveMinimum", k)
                            for k in ("minimum", "exclusiveMinimum") if k in values], lower=True)
    upper = _tighter_bound([_Bound(values[k], k == "exclusiveMaximum", k)
                            for k in ("maximum", "exclusiveMaximum") if k in values], lower=False)
    if lower is _NOTHING or upper is _NOTHING:
        return None
    if integer:
        lower, upper = _integer_bound(lower, lower=True), _integer_bound(upper, lower=False)
    if lower is not None and upper is not None and not _interval_nonempty(lower, upper):
        return None
    residue = None if step is None else _Residue.for_step(*step, integer=integer)
    if integer and residue is not None and residue.q == 1 and residue.t == 0:
        residue = None  # every integer is a multiple of 1 (or of 0.5, 0.25, ...)
    if lower is None and upper is None and residue is None:
        return json_integer() if integer else json_number()  # nothing to check
    for bound in (lower, upper):
        if bound is not None:
            _check_digit_count(bound)
    language = _Language(integer, residue, new_rule, "integer" if integer else "number")

    negative = language.side(_negated(upper), _negated(lower))
    positive = language.side(lower, upper)
    zero = None
    if _contains_zero(lower, upper):  # "-0" too: its value is 0
        zero = Literal(b"0") if integer else Sequence((
            Literal(b"0"), Repeat(Sequence((Literal(b"."), _ZEROS)), 0, 1), Repeat(EXPONENT, 0, 1)))
    optional_minus = Repeat(MINUS, 0, 1)
    if negative is not None and negative == positive:  # symmetric: write the magnitudes once
        magnitudes = [x for x in (zero, positive) if x is not None]
        return normalize(Sequence((optional_minus, Choice(tuple(magnitudes)))))
    parts = []
    if negative is not None:
        parts.append(Sequence((MINUS, negative)))
    if zero is not None:
        parts.append(Sequence((optional_minus, zero)))
    if positive is not None:
        parts.append(positive)
    return normalize(Choice(tuple(parts))) if parts else None


# ----------------------------------------------------------------------------- bound values


@dataclass(frozen=True)
class _Bound:
    """``value`` (exact), ``strict``: the bound itself is excluded; ``keyword`` for messages."""
    value: Decimal
    strict: bool
    keyword: str


_NOTHING = object()  # a bound no number satisfies (minimum +inf, maximum -inf)


def _bound_value(keyword: str, value) -> Decimal:
    number = _exact_decimal(value)
    if number is None or number.is_nan():
        raise GrammarError(f"'{keyword}' must be a number")
    return number


def _exact_decimal(value) -> Optional[Decimal]:
    """The decimal a JSON number means; None for things that are not numbers."""
    if isinstance(value, bool):
        return None
    if isinstance(value, int):
        return Decimal(value)
    if isinstance(value, float):
        # repr is the shortest decimal that reads back as this float: what the schema said.
        return Decimal(repr(value))
    if isinstance(value, Decimal):
        return value
    return None


def _step_value(multiple_of) -> Tuple[int, int]:
    """``multipleOf`` as (m, d) with k = m / 10**d, m and d as small as possible."""
    number = _exact_decimal(multiple_of)
    if number is None or number.is_nan() or number <= 0:
        raise GrammarError("'multipleOf' must be a positive number")
    if number.is_infinite():
        raise GrammarError("unsupported keyword 'multipleOf': infinite")
    _, digits, exponent = number.normalize().as_tuple()
    if exponent > MAX_BOUND_DIGITS or -exponent > MAX_BOUND_DIGITS:
        raise GrammarError(f"unsupported keyword 'multipleOf': {number} has too many digits")
    coefficient = int("".join(map(str, digits)))
    if exponent >= 0:
        return coefficient * 10 ** exponent, 0
    return coefficient, -exponent


def _tighter_bound(bounds: List[_Bound], *, lower: bool):
    """The binding one of a side's bounds (an exclusive bound wins a tie); None for none."""
    best = None
    for bound in bounds:
        if bound.value.is_infinite():
            if (bound.value > 0) == lower:
                return _NOTHING  # minimum +inf / maximum -inf
            continue  # minimum -inf / maximum +inf: no constraint
        if best is None:
            best = bound
            continue
        tighter = bound.value > best.value if lower else bound.value < best.value
        if tighter or (bound.value == best.value and bound.strict):
            best = bound
    return best


def _check_digit_count(bound: _Bound) -> None:
    _, digits, exponent = bound.value.as_tuple()
    integer_digits = len(digits) + exponent
    if integer_digits > MAX_BOUND_DIGITS or -exponent > MAX_BOUND_DIGITS:
        raise GrammarError(f"unsupported keyword '{bound.keyword}': {bound.value} has more than "
                           f"{MAX_BOUND_DIGITS} digits")


def _integer_bound(bound: Optional[_Bound], *, lower: bool) -> Optional[_Bound]:
    """The inclusive integer bound equivalent for integers: minimum 0.5 -> 1, < 3 -> <= 2."""
    if bound is None:
        return None
    _check_digit_count(bound)  # before rounding: 1E+100000000 would be a huge int
    value = bound.value
    if lower:
        rounded = value.to_integral_value(ROUND_FLOOR if bound.strict else ROUND_CEILING)
        whole = int(rounded) + (1 if bound.strict else 0)
    else:
        rounded = value.to_integral_value(ROUND_CEILING if bound.strict else ROUND_FLOOR)
        whole = int(rounded) - (1 if bound.strict else 0)
    return _Bound(Decimal(whole), False, bound.keyword)


def _interval_nonempty(lower: _Bound, upper: _Bound) -> bool:
    if lower.value != upper.value:
        return lower.value < upper.value
    return not (lower.strict or upper.strict)


def _satisfies(value: Decimal, bound: Optional[_Bound], *, lower: bool) -> bool:
    if bound is None:
        return True
    if value == bound.value:
        return not bound.strict
    return (value > bound.value) == lower


def _contains_zero(lower: Optional[_Bound], upper: Optional[_Bound]) -> bool:
    zero = Decimal(0)
    return _satisfies(zero, lower, lower=True) and _satisfies(zero, upper, lower=False)


def _negated(bound: Optional[_Bound]) -> Optional[_Bound]:
    """The bound on magnitudes of negative numbers: v >= -5 is |v| <= 5."""
    if bound is None:
        return None
    return _Bound(bound.value.copy_negate(), bound.strict, bound.keyword)  # exact, unlike -x


def _scaled(bound: Optional[_Bound], power: int) -> Optional[_Bound]:
    """``bound`` times 10**power, exactly (the default context would round to 28 digits)."""
    if bound is None:
        return None
    with localcontext() as context:
        context.prec = 2 * MAX_BOUND_DIGITS + 10
        return _Bound(bound.value.scaleb(power), bound.strict, bound.keyword)


def _digit_strings(magnitude: Decimal) -> Tuple[str, str]:
    """(integer digits, fraction digits) of a non-negative decimal: 0.250 -> ("0", "25")."""
    text = format(magnitude, "f")
    whole, _, fraction = text.partition(".")
    return whole.lstrip("0") or "0", fraction.rstrip("0")


# ----------------------------------------------------------------------------- one sign


class _Language:
    """Builds the magnitudes (> 0) of one sign; ``side`` takes the bounds on magnitudes."""

    def __init__(self, integer: bool, residue: Optional["_Residue"], new_rule: NewRule,
                 hint: str):
        self.integer = integer
        self.residue = residue
        self.new_rule = new_rule
        self.hint = hint
        self._mantissas: Dict[tuple, Optional[Expr]] = {}  # both signs often share one

    def side(self, lower: Optional[_Bound], upper: Optional[_Bound]) -> Optional[Expr]:
        """Magnitudes m > 0 with lower <= m <= upper (strictness as given), with exponents.

        Bounds at or below 0 are replaced by "m > 0": zero has its own alternative."""
        zero = _Bound(Decimal(0), True, "")
        if lower is None or lower.value <= 0:
            lower = zero
        if upper is not None and not _interval_nonempty(lower, upper):
            return None
        key = (lower.value, lower.strict) + ((upper.value, upper.strict) if upper else ())
        if key not in self._mantissas:
            self._mantissas[key] = self._mantissa(lower, upper)
        mantissa = self._mantissas[key]
        if mantissa is None or self.integer:
            return mantissa
        # Which exponents keep M * 10**X in range, given that M is (module docstring):
        shrink = lower.value == 0 and self.residue is None   # (0, M] is in range
        grow = upper is None                                 # [M, inf) is in range
        exponent = {(True, True): EXPONENT, (True, False): _EXPONENT_NONPOSITIVE,
                    (False, True): _EXPONENT_NONNEGATIVE,
                    (False, False): _EXPONENT_ZERO}[(shrink, grow)]
        return Sequence((mantissa, Repeat(exponent, 0, 1)))

    def _mantissa(self, lower: _Bound, upper: Optional[_Bound]) -> Optional[Expr]:
        """Exponent-free spellings of magnitudes in range."""
        residue = self.residue
        if residue is not None and residue.q == 1 and residue.d == 0 and residue.t > 0:
            return self._multiples_of_power_of_ten(lower, upper, residue.t)
        return self._digits(lower, upper, integer=self.integer, residue=residue)

    def _reserve_rule(self, _hint: str) -> RuleRef:
        # One hint for all (the callback numbers them): integer_digits, integer_digits_2, ...
        return self.new_rule(f"{self.hint}_digits", None)

    def _multiples_of_power_of_ten(self, lower: _Bound, upper: Optional[_Bound],
                                   t: int) -> Optional[Expr]:
        """A multiple of 10**t is spelled D 0{t} (.0+)? with D a positive integer in the
        scaled range: no residue automaton (its trailing-zero cycle would need t+1 rules)."""
        low = _integer_bound(_scaled(lower, -t), lower=True)
        high = _integer_bound(_scaled(upper, -t), lower=False)
        if low.value < 1:
            low = _Bound(Decimal(1), False, low.keyword)
        if high is not None and not _interval_nonempty(low, high):
            return None
        prefix = self._digits(low, high, integer=True, residue=None)
        if prefix is None:
            return None
        zeros = Literal(b"0" * t)
        if self.integer:
            return Sequence((prefix, zeros))
        return Sequence((prefix, zeros, Repeat(Sequence((Literal(b"."), _ZEROS)), 0, 1)))

    def _digits(self, lower: _Bound, upper: Optional[_Bound], *, integer: bool,
                residue: Optional["_Residue"]) -> Optional[Expr]:
        """The product automaton's language, one integer-part length class at a time."""
        # With no lower bound but "above 0", the shortest lengths need no class of their own;
        # nor does a bound's length where every magnitude of that length is in range (1 and
        # 99 for integers), else it would be an alternative of its own: [1-9] | [1-9] [0-9].
        low_length = 0 if lower.value == 0 else len(_digit_strings(lower.value)[0])
        high_length = None if upper is None else len(_digit_strings(upper.value)[0])
        low_free = (low_length > 0 and not lower.strict and (integer or low_length > 1)
                    and lower.value == 10 ** (low_length - 1))
        high_free = (integer and upper is not None and not upper.strict
                     and upper.value == 10 ** high_length - 1)
        pieces = []
        for min_length, max_length in _length_classes(low_length, high_length,
                                                      low_free, high_free):
            components = [_Spelling(fraction=not integer),
                          _IntegerLength(min_length, max_length),
                          _Comparison(lower, above=True)]
            if upper is not None:
                components.append(_Comparison(upper, above=False))
            if residue is not None:
                components.append(residue)
            dfa = _product(components, _ALPHABET_INTEGER if integer else _ALPHABET_NUMBER,
                           "multipleOf" if residue is not None else lower.keyword
                           or (upper.keyword if upper else "minimum"))
            piece = dfa_to_expr(dfa, _spelling, self._reserve_rule, self.hint,
                                define_rule=self.new_rule)
            if piece is not None:
                pieces.append(piece)
        return Choice(tuple(pieces)) if pieces else None


def _length_classes(low: int, high: Optional[int], low_free: bool,
                    high_free: bool) -> List[Tuple[int, Optional[int]]]:
    """Digit counts of the integer part, grouped so that the lengths strictly between the
    bounds' lengths form one unconstrained class (``low`` 0: no lower bound's length; ``high``
    None: no upper bound). A bound's own length joins that class when the bound constrains no
    number of that length (``low_free``, ``high_free``)."""
    if low == high:
        return [(low, low)]
    first = 1 if low == 0 else low if low_free else low + 1
    last = None if high is None else high if high_free else high - 1
    classes = [(low, low)] if low > 0 and not low_free else []
    if last is None or first <= last:
        classes.append((first, last))
    if high is not None and not high_free:
        classes.append((high, high))
    return classes


# ----------------------------------------------------------------------------- the automata
#
# Each component reads the characters of an unsigned, exponent-free spelling and keeps a small
# hashable state; ``step`` returns None to reject. The product explores only reachable states.

_ALPHABET_INTEGER = "0123456789"
_ALPHABET_NUMBER = ".0123456789"  # in code-point order


class _Spelling:
    """``(0|[1-9][0-9]*)(\\.[0-9]+)?``; without ``fraction`` no ``.`` part."""

    def __init__(self, fraction: bool):
        self.fraction = fraction
        self.start = "begin"

    def step(self, state, char):
        if char == ".":
            return "dot" if self.fraction and state in ("zero", "int") else None
        if state == "begin":
            return "zero" if char == "0" else "int"
        if state == "zero":
            return None  # no leading zeros
        return "frac" if state in ("dot", "frac") else state

    def accepts(self, state) -> bool:
        return state in ("zero", "int", "frac")


class _IntegerLength:
    """The integer part has between ``low`` and ``high`` (None: any number of) digits."""

    def __init__(self, low: int, high: Optional[int]):
        self.low, self.high = low, high
        self.start = 0

    def step(self, state, char):
        if state == "frac":
            return state
        if char == ".":
            return "frac" if state >= self.low else None
        count = state + 1
        if self.high is not None and count > self.high:
            return None
        return count if self.high is not None else min(count, self.low)  # cap: only >= low matters

    def accepts(self, state) -> bool:
        return state == "frac" or state >= self.low


class _Comparison:
    """The magnitude is above (``above=True``) or below the bound, or equal if not strict.

    Canonical integer parts compare by length, then digit by digit; fractions digit by digit
    against the bound's fraction padded with zeros. State ("int", digits read (capped at the
    bound's length + 1), relation of the digits so far to the bound's prefix) or ("frac",
    fraction digits compared (capped), relation), relation in -1, 0, 1.
    """

    def __init__(self, bound: _Bound, *, above: bool):
        self.whole, self.fraction = _digit_strings(bound.value)
        self.wanted = {1} if above else {-1}
        if not bound.strict:
            self.wanted.add(0)
        self.start = ("int", 0, 0)

    def _integer_relation(self, count: int, relation: int) -> int:
        length = len(self.whole)
        if count != length:
            return -1 if count < length else 1
        return relation

    def step(self, state, char):
        phase, count, relation = state
        if phase == "int":
            if char == ".":
                relation = self._integer_relation(count, relation)
                return ("frac", 0, 0) if relation == 0 else ("frac", None, relation)
            if count >= len(self.whole):
                return ("int", len(self.whole) + 1, 0)  # longer: greater, whatever follows
            if relation == 0:
                relation = _compare(char, self.whole[count])
            return ("int", count + 1, relation)
        if relation != 0:
            return state
        bound_digit = self.fraction[count] if count < len(self.fraction) else "0"
        relation = _compare(char, bound_digit)
        if relation != 0:
            return ("frac", None, relation)
        return ("frac", min(count + 1, len(self.fraction)), 0)

    def accepts(self, state) -> bool:
        phase, count, relation = state
        if phase == "int":
            relation = self._integer_relation(count, relation)
            if relation == 0 and self.fraction:
                relation = -1  # B < B.f
        elif relation == 0 and count < len(self.fraction):
            relation = -1  # a proper prefix of the (zero-trimmed) fraction is smaller
        return relation in self.wanted


def _compare(a: str, b: str) -> int:
    return (a > b) - (a < b)


class _Residue:
    """The value is a multiple of k = m / 10**d: the digit string S of value * 10**d (integer
    digits, then d fraction digits padded with zeros) is a multiple of m, and fraction digits
    beyond the d-th are zeros.

    m = 10**t * q with q coprime to 10 is tracked as (S mod q, trailing zeros of S capped at t)
    — q * (t+1) states instead of m, so 100 or 1e300 stay small; otherwise t = 0, q = m. An S
    that is all zeros (value 0) counts as having t trailing zeros. State (r, z, j): j is -1 in
    the integer part, else the fraction digits read, capped at d.
    """

    def __init__(self, q: int, t: int, d: int):
        self.q, self.t, self.d = q, t, d
        self.start = (0, t, -1)

    @staticmethod
    def for_step(m: int, d: int, *, integer: bool) -> "_Residue":
        if integer:  # n is a multiple of m/10**d  iff  m divides n * 10**d
            m, d = m // math.gcd(m, 10 ** d), 0
        t, q = 0, m
        while q % 10 == 0:
            t, q = t + 1, q // 10
        if math.gcd(q, 10) != 1:  # 10**t and q share a factor: the split is not a CRT split
            t, q = 0, m
        if q > MAX_STATES:
            raise GrammarError(f"unsupported keyword 'multipleOf': a multiple of {m} needs "
                               f"more than {MAX_STATES} automaton states")
        return _Residue(q, t, d)

    def step(self, state, char):
        r, z, j = state
        if char == ".":
            return (r, z, 0)
        digit = ord(char) - 48
        if j >= self.d:  # a fraction digit past the scale (j >= 0 here since d >= 0)
            return state if digit == 0 else None
        r = (10 * r + digit) % self.q
        z = min(z + 1, self.t) if digit == 0 else 0
        return (r, z, j if j < 0 else j + 1)

    def accepts(self, state) -> bool:
        r, z, j = state
        padding = self.d - max(j, 0)  # fraction digits still to pad with zeros
        return (r * pow(10, padding, self.q)) % self.q == 0 and z + padding >= self.t


# ----------------------------------------------------------------------------- to IR
#
# The product of the components is handed to ``code_point_dfa`` as a ``Dfa`` over the code
# points of its alphabet, which minimizes it and writes it back as IR.


def _product(components, alphabet: str, keyword: str) -> Dfa:
    """The reachable product automaton as a minimal ``Dfa`` over the code points of
    ``alphabet`` (given in code-point order)."""
    start = tuple(component.start for component in components)
    index = {start: 0}
    states = [start]
    rows: List[Tuple[Tuple[int, int, int], ...]] = []
    while len(rows) < len(states):
        state = states[len(rows)]
        out = []
        for char in alphabet:
            following = []
            for component, part in zip(components, state):
                part = component.step(part, char)
                if part is None:
                    break
                following.append(part)
            else:
                key = tuple(following)
                if key not in index:
                    if len(states) >= MAX_STATES:
                        raise GrammarError(f"unsupported keyword '{keyword}': the exact grammar "
                                           f"needs more than {MAX_STATES} automaton states")
                    index[key] = len(states)
                    states.append(key)
                out.append((ord(char), ord(char), index[key]))
        rows.append(tuple(out))
    accepting = frozenset(number for number, state in enumerate(states)
                          if all(c.accepts(part) for c, part in zip(components, state)))
    return minimize(Dfa(tuple(rows), accepting))


def _spelling(ranges) -> Expr:
    """One character of ``ranges``: a literal when there is one, else a class."""
    if len(ranges) == 1 and ranges[0][0] == ranges[0][1]:
        return Literal(chr(ranges[0][0]).encode())
    return CharClass(tuple(ranges))
