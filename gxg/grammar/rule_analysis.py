"""Fixpoint analyses of grammar rules: which derive the empty string, which derive some finite
string.

In:  rule bodies (``gxg.grammar.ir`` expressions) by name.
Out: ``is_nullable`` / ``is_productive`` (one expression, given the rule names known to have
     the property) and ``least_fixpoint`` (the set of rule names with a property, solved over
     the reference graph). The front ends (the JSON Schema converter's productivity check) and
     the compiler's passes (``gxg.compiler.passes``) both use them, so they live on the IR
     side of the pipeline.

A "string" here is what the grammar matches: bytes and, for ``TokenSet`` leaves, whole tokens.
A ``TokenSet`` consumes exactly one token: never empty, always productive (the front end does
not know the vocabulary; ids outside it are the compiler's business).
"""
from __future__ import annotations

from typing import Callable, Dict, List, Mapping, Optional, Sequence as Seq, Set

from gxg.graphs import strongly_connected_components
from gxg.grammar.ir import (
    CharClass, Choice, Expr, Literal, Repeat, RuleRef, Sequence, TokenSet, iter_rule_refs,
)

__all__ = ["is_nullable", "is_productive", "least_fixpoint"]


def _matches_no_code_point(expr: Expr) -> bool:
    return isinstance(expr, CharClass) and expr.matches_nothing()


def is_nullable(expr: Expr, nullable: Set[str]) -> bool:
    """Whether ``expr`` derives the empty string, given the set of nullable rule names."""
    return _derives(expr, nullable, empty_only=True)


def is_productive(expr: Expr, productive: Set[str]) -> bool:
    """Whether ``expr`` derives some finite string, given the set of productive rule names."""
    return _derives(expr, productive, empty_only=False)


def _derives(expr: Expr, rules: Set[str], empty_only: bool) -> bool:
    """Whether ``expr`` derives the empty string (``empty_only``) or any finite string, given
    the rule names known to. (Loops, not ``all``/``any`` over generators: the fixpoints call it
    once per rule and it recurses through every rule body, thousands of them in large
    grammars.)"""
    kind = expr.__class__
    if kind is RuleRef:
        return expr.name in rules
    if kind is Sequence:
        for item in expr.items:
            if not _derives(item, rules, empty_only):
                return False
        return True
    if kind is Choice:
        for alternative in expr.alternatives:
            if _derives(alternative, rules, empty_only):
                return True
        return False
    if kind is Repeat:
        return expr.min == 0 or _derives(expr.expr, rules, empty_only)
    if kind is Literal:
        return not (empty_only and expr.data)
    if kind is CharClass:
        return not empty_only and not expr.matches_nothing()
    if kind is TokenSet:
        return not empty_only
    raise TypeError(f"not a grammar expression: {expr!r}")


def least_fixpoint(bodies: Mapping[str, Expr],
                   holds: Callable[[Expr, Set[str]], bool],
                   refs: Optional[Mapping[str, Seq[str]]] = None) -> Set[str]:
    """The least set S of rule names with ``name in S <=> holds(bodies[name], S)`` (monotone
    ``holds``). A name that ``bodies`` references but does not define is never in S.
    ``refs``: the rules each body references, when the caller has them (``Rule.refs``).

    Components of the reference graph are solved sinks first; inside a component a rule is
    looked at again only when a rule it references was just added, so a long chain of rules
    costs one look per rule, not one sweep of the chain per rule (that was quadratic).
    """
    graph = {name: [ref for ref in (refs[name] if refs is not None
                                    else dict.fromkeys(iter_rule_refs(body)))
                    if ref in bodies]
             for name, body in bodies.items()}
    result: Set[str] = set()
    for component in strongly_connected_components(bodies, graph):
        if len(component) == 1:  # most rules: one look (a self-reference cannot make it hold)
            name = component[0]
            if holds(bodies[name], result):
                result.add(name)
            continue
        members = set(component)
        referrers: Dict[str, List[str]] = {name: [] for name in component}
        for name in component:
            for ref in graph[name]:
                if ref in members:
                    referrers[ref].append(name)
        pending = list(reversed(component))  # popped in rule order
        while pending:
            name = pending.pop()
            if name not in result and holds(bodies[name], result):
                result.add(name)
                pending.extend(referrer for referrer in referrers[name]
                               if referrer not in result)
    return result
