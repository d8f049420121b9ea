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


def _from_structural_tag(*args, **kwargs) -> Grammar:
    """The grammar of an XGrammar 0.2.8 structural tag: ``from_structural_tag(structural_tag)``
    (a JSON text, a dict, an XGrammar pydantic ``StructuralTag`` or
    ``gxg.grammar.structural_tag.StructuralTag``) or the deprecated
    ``from_structural_tag(tags, triggers)``. See ``gxg.grammar.structural_tag``; invalid input
    and the formats gxg cannot express yet are a GrammarError naming the JSON path."""
    from gxg.grammar.structural_tag import structural_tag_to_grammar
    return structural_tag_to_grammar(*args, **kwargs)


# The front end lives in its own module; Grammar (gxg.grammar.ir) gets it as a static method.
Grammar.from_structural_tag = staticmethod(_from_structural_tag)

__all__ = [
    "CharClass", "Choice", "Expr", "Grammar", "GrammarError", "Literal", "Repeat", "Rule",
    "RuleRef", "Sequence", "normalize",
]
