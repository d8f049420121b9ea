"""EBNF/Lark rule attributes ``lazy``, ``max_chars=N`` and ``max_tokens=N``.

In:  rule bodies (IR expressions by rule name) and the attributes of some rules (parsed by a
     front end: ``gxg.grammar.ebnf`` for ``name[lazy, max_chars=N, max_tokens=N] ::=``,
     ``gxg.grammar.lark`` for ``name[...]:``, ``gxg.grammar.structural_tag_emission`` for
     ``any_text`` with ``max_tokens``).
Out: ``apply_rule_attributes``: new bodies for the attributed rules, plain IR (their automata
     over code points, written as right-linear helper rules: recursion only through tail
     calls). ``lazy`` and ``max_chars`` are compiled into that language; ``max_tokens`` is kept
     by the front end as ``Rule.max_tokens`` (a budget the runtime keeps while decoding, which
     needs exactly this right-linear form: ``gxg.compiler.automaton``).

Semantics (XGrammar 0.2.8 enforces both while decoding; gxg gives the same strings, checked
verdict for verdict in tests/test_rule_attributes.py):
* ``lazy``: the rule ends as soon as it can: its strings are those of its language none of whose
  proper prefixes is in it;
* ``max_chars=N``: XGrammar's best-effort budget: within N code points the rule is as it is;
  once it has N it ends as soon as it can (a string of the rule none of whose proper prefixes of
  N or more code points is in the rule); ``max_chars=0`` is ``lazy``;
* ``max_tokens=N``: once N tokens that started inside the rule have been accepted, the rule
  ends at the first token boundary where it can (``gxg.grammar.ir``, ``Rule.max_tokens``).
The rule's body must be regular (recursion only through tail calls; no token items): its
automaton is built (``gxg.grammar.code_point_dfa``), cut, minimised and written back.
"""
from __future__ import annotations

from dataclasses import dataclass
from typing import Callable, Dict, List, Mapping, Optional

from gxg.grammar import code_point_dfa as dfa_ops
from gxg.graphs import reachable
from gxg.grammar.ir import MAX_CODE_POINT, CharClass, Expr, GrammarError, RuleRef, iter_rule_refs

__all__ = ["RuleAttributes", "apply_rule_attributes"]


@dataclass(frozen=True)
class RuleAttributes:
    """The attributes of one rule (see the module docstring)."""
    lazy: bool = False
    max_chars: Optional[int] = None
    max_tokens: Optional[int] = None


def apply_rule_attributes(bodies: Mapping[str, Expr], attributed: Mapping[str, RuleAttributes],
                          new_rule: Callable[[str, str], RuleRef],
                          define_rule: Callable[[RuleRef, Expr], None],
                          error: Callable[[str, str], GrammarError]) -> Dict[str, Expr]:
    """The new bodies of the ``attributed`` rules. ``bodies``: every rule's body by name;
    ``new_rule(rule, hint)`` reserves a helper rule for ``rule`` and ``define_rule`` gives it its
    body; ``error(rule, message)`` makes the GrammarError that names the rule's place. An
    attributed rule that another reaches is rewritten first, and the others see its new body."""
    bodies = dict(bodies)
    out: Dict[str, Expr] = {}
    for name in _callees_first(attributed, bodies):
        attributes = attributed[name]
        reached = reachable([name], lambda rule: [callee for callee in iter_rule_refs(
            bodies[rule]) if callee in bodies])
        budgeted = next((callee for callee in reached
                         if callee != name and callee in attributed
                         and attributed[callee].max_tokens is not None), None)
        if budgeted is not None:
            raise error(name, f"the attributes of rule {name!r} make its body one automaton, "
                              f"where the token budget of rule {budgeted!r} (max_tokens) "
                              f"cannot be kept")
        try:
            dfa = dfa_ops.dfa_from_expr(RuleRef(name), bodies)
        except (GrammarError, TypeError) as refused:
            raise error(name, f"the attributes of rule {name!r} need a regular body (no "
                              f"recursion but tail calls, no token items): {refused}") from None
        try:
            if attributes.max_chars is not None:
                dfa = _lazy_after(dfa, attributes.max_chars)
            if attributes.lazy:
                dfa = _lazy_after(dfa, 0)
        except dfa_ops.DfaTooLarge as too_large:
            raise error(name, f"the attributes of rule {name!r}: {too_large}") from None
        body = dfa_ops.dfa_to_expr(dfa, lambda ranges: CharClass(tuple(ranges)),
                                   lambda hint, rule=name: new_rule(rule, hint), "attr",
                                   define_rule=define_rule)
        out[name] = bodies[name] = (CharClass(((0, MAX_CODE_POINT),), negated=True)
                                    if body is None else body)  # matches nothing
    return out


def _lazy_after(dfa: dfa_ops.Dfa, budget: int) -> dfa_ops.Dfa:
    """``dfa``'s strings none of whose proper prefixes of ``budget`` or more code points is
    accepted: the product with a counter saturating at ``budget``, whose accepting states at
    the budget have no moves (``budget`` 0: plain laziness)."""
    width = budget + 1
    if dfa.num_states * width > dfa_ops.DEFAULT_MAX_STATES:
        raise dfa_ops.DfaTooLarge(f"max_chars={budget} on this rule's automaton of "
                                  f"{dfa.num_states} states", dfa_ops.DEFAULT_MAX_STATES)
    rows = []
    for q, row in enumerate(dfa.transitions):
        for k in range(width):
            if k == budget and q in dfa.accepting:
                rows.append(())  # at the budget the rule ends where it can
            else:
                step = min(k + 1, budget)
                rows.append(tuple((lo, hi, target * width + step) for lo, hi, target in row))
    accepting = {q * width + k for q in dfa.accepting for k in range(width)}
    return dfa_ops.minimize(dfa_ops.Dfa(tuple(rows), accepting))


def _callees_first(attributed, bodies: Mapping[str, Expr]) -> List[str]:
    """The attributed rules, each after the attributed rules it reaches through references."""
    order: List[str] = []
    seen = set()

    def visit(root: str) -> None:
        stack = [(root, iter(iter_rule_refs(bodies[root])))]
        seen.add(root)
        while stack:
            name, refs = stack[-1]
            callee = next(refs, None)
            if callee is None:
                stack.pop()
                if name in attributed:
                    order.append(name)
            elif callee not in seen and callee in bodies:
                seen.add(callee)
                stack.append((callee, iter(iter_rule_refs(bodies[callee]))))
    for name in attributed:
        if name not in seen:
            visit(name)
    return order
