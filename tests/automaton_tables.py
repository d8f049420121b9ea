"""Test helper: an automaton's tables, and the check that two automata are the same table for
table (array or plain value), for tests that build one grammar two ways."""
from __future__ import annotations

import numpy as np


def automaton_tables(automaton) -> dict:
    """The automaton's public fields by name."""
    return {name: value for name, value in vars(automaton).items() if not name.startswith("_")}


def assert_same_tables(one: dict, other: dict) -> None:
    """Two table dicts (``automaton_tables``, or any dict of arrays and values) are equal."""
    assert one.keys() == other.keys()
    for name, value in one.items():
        if isinstance(value, np.ndarray):
            np.testing.assert_array_equal(value, other[name], err_msg=name)
        else:
            assert value == other[name], name
