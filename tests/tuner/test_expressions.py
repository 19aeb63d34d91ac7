"""The restricted evaluator: what T1 files write evaluates; anything else is refused by name."""

from __future__ import annotations

import numpy as np
import pytest

from tuner.expressions import MAX_ITEMS, ExpressionError, evaluate, names_in


@pytest.mark.parametrize(("text", "value"), [
    ("[32 * i for i in range(1, 32)]", [32 * i for i in range(1, 32)]),
    ("[1] + [2 * i for i in range(1, 11)]", [1, 2, 4, 6, 8, 10, 12, 14, 16, 18, 20]),
    ("[2**i for i in range(3) if i != 1]", [1, 4]),
    ("[a * b for a in [1, 2] for b in (3, 4)]", [3, 4, 6, 8]),
    ("min(3, 5) + max([1, 7]) - len([0, 0])", 8),
    ("'x' if 1 < 2 <= 2 else 'y'", "x"),
    ("not (1 and 0) or False", True),
    ("-(7 // 2) % 5", 2),
])
def test_what_t1_files_write_evaluates_like_python(text, value):
    assert evaluate(text) == value


def test_names_are_bound_and_conditions_run_on_arrays():
    assert evaluate("block_size_x*block_size_y<=1024", {"block_size_x": 64, "block_size_y": 16}) is True
    x, y = np.array([16, 32, 64, 256]), np.array([1, 32, 2, 8])
    both = evaluate("32 <= x * y <= 1024 and (x % 32 != 0 or y > 1)", {"x": x, "y": y})
    assert both.tolist() == [False, True, True, False]
    assert evaluate("not x > 20", {"x": x}).tolist() == [True, False, False, False]
    assert names_in("[i * tile for i in range(3)] and a < b") == {"tile", "a", "b"}


@pytest.mark.parametrize(("text", "fragment"), [
    ("__import__('os').system('x')", "__import__"),
    ("(1).__class__", "Attribute"),
    ("open('f')", "call of 'open'"),
    ("[].append(1)", "call of 'Attribute'"),
    ("lambda: 1", "Lambda"),
    ("x[0]", "Subscript"),
    ("(y := 3)", "NamedExpr"),
    ("import os", "not valid"),
    ("{1: 2}", "Dict"),
    ("unknown_knob > 1", "unknown name 'unknown_knob'"),
    ("range(10**9)", "range of"),
    ("[0] * 10**9", "too large"),
    ("2 ** 1000", "exponent too large"),
    ("1 / 0", "fails"),
    ("x" * 3000, "longer than"),
])
def test_anything_else_is_refused_with_the_expression_named(text, fragment):
    with pytest.raises(ExpressionError) as caught:
        evaluate(text, {"x": [1]})
    assert fragment in str(caught.value) and "expression " in str(caught.value)


def test_comprehensions_are_bounded():
    with pytest.raises(ExpressionError, match=f"more than {MAX_ITEMS}"):
        evaluate("[i * j for i in range(1000) for j in range(1000)]")
