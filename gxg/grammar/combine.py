"""Combining grammars: ``concat`` and ``union``.

In:  one or more Grammars.
Out: a new Grammar whose root rule ``root`` is the sequence (concat) or the choice (union) of the
     inputs' root rules. Rule names are made unique: a name already taken (or ``root``) gets the
     suffix ``_<k>`` where k is the 1-based position of its grammar, then a counter if needed.
     XGrammar defines both the same way; e.g. ``union(root ::= "a" b, root ::= "b" | "c")``
     accepts ``ax`` and ``b`` but not ``axb``.
"""
from __future__ import annotations

from typing import Dict, List

from gxg.grammar.ir import (
    CharClass, Choice, Expr, Grammar, GrammarError, Literal, Repeat, Rule, RuleRef, Sequence,
    TokenSet,
)

ROOT = "root"


def concat(*grammars: Grammar) -> Grammar:
    return _combine(grammars, Sequence, "concat")


def union(*grammars: Grammar) -> Grammar:
    return _combine(grammars, Choice, "union")


def _combine(grammars, node_type, what: str) -> Grammar:
    if not grammars:
        raise GrammarError(f"{what} needs at least one grammar")
    for grammar in grammars:
        if not isinstance(grammar, Grammar):
            raise TypeError(f"{what} takes Grammar objects, got {type(grammar).__name__}")
    used = {ROOT}
    rules: List[Rule] = []
    root_refs: List[Expr] = []
    for position, grammar in enumerate(grammars, start=1):
        mapping = _unique_names(grammar, used, position)
        for rule in grammar.rules:
            rules.append(Rule(mapping[rule.name], rename_refs(rule.body, mapping),
                              rename_refs(rule.lookahead, mapping), rule.max_tokens))
        root_refs.append(RuleRef(mapping[grammar.root_rule_name]))
    root = Rule(ROOT, node_type(tuple(root_refs)))
    return Grammar((root, *rules), ROOT)


def _unique_names(grammar: Grammar, used: set, position: int) -> Dict[str, str]:
    mapping = {}
    for rule in grammar.rules:
        name = rule.name if rule.name not in used else f"{rule.name}_{position}"
        counter = 1
        while name in used:
            counter += 1
            name = f"{rule.name}_{position}_{counter}"
        used.add(name)
        mapping[rule.name] = name
    return mapping


def rename_refs(expr, mapping: Dict[str, str]):
    """``expr`` with every RuleRef's name passed through ``mapping`` (None stays None)."""
    if expr is None or isinstance(expr, (Literal, CharClass, TokenSet)):
        return expr
    if isinstance(expr, RuleRef):
        return RuleRef(mapping[expr.name])
    if isinstance(expr, Sequence):
        return Sequence(tuple(rename_refs(item, mapping) for item in expr.items))
    if isinstance(expr, Choice):
        return Choice(tuple(rename_refs(item, mapping) for item in expr.alternatives))
    if isinstance(expr, Repeat):
        return Repeat(rename_refs(expr.expr, mapping), expr.min, expr.max)
    raise TypeError(f"not a grammar expression: {expr!r}")
