"""Grammar front-ends and the Grammar IR (stage 1 of the pipeline: text -> IR)."""
from gxg.grammar.ir import (
    CharClass,
    Choice,
    Expr,
    Grammar,
    GrammarError,
    Literal,
    Repeat,
    Rule,
    RuleRef,
    Sequence,
    normalize,
)

__all__ = [
    "CharClass", "Choice", "Expr", "Grammar", "GrammarError", "Literal", "Repeat", "Rule",
    "RuleRef", "Sequence", "normalize",
]
