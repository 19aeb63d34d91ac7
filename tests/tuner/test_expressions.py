"""The restricted evaluator: what T1 files write evaluates; anything else is refused by name."""

from __future__ import annotations

import itertools
import operator
from collections.abc import Callable
from typing import Any, NamedTuple

import numpy as np
import pytest
from hypothesis import example, given, settings
from hypothesis import strategies as st

from tuner.expressions import MAX_ITEMS, MAX_LENGTH, ArithmeticFault, ExpressionError, RowWise, evaluate, names_in
from tuner.space import space_from_t1


@pytest.mark.parametrize(("text", "value"), [
    ("[32 * i for i in range(1, 32)]", [32 * i for i in range(1, 32)]),
    ("[1] + [2 * i for i in range(1, 11)]", [1, 2, 4, 6, 8, 10, 12, 14, 16, 18, 20]),
    ("[1, 2, 4, 8, 16] + list(range(32, 1024+1, 32))", [1, 2, 4, 8, 16, *range(32, 1025, 32)]),     # the hub's hotspot file
    ("list((3, 4)) + list([5])", [3, 4, 5]),
    ("[2**i for i in range(3) if i != 1]", [1, 4]),
    ("[a * b for a in [1, 2] for b in (3, 4)]", [3, 4, 6, 8]),
    ("min(3, 5) + max([1, 7]) - len([0, 0])", 8),
    ("'x' if 1 < 2 <= 2 else 'y'", "x"),
    ("not (1 and 0) or False", True),
    ("-(7 // 2) % 5", 2),
    ("+3 - -2", 5),
    ("[True, False, None] == [1 > 0, 1 < 0, None]", True),
    ("list(range(True, 3))", [1, 2]),                   # Python's range takes booleans as integers
    ("2 ** -100 * 2 ** 50 * 2 ** 50", 1.0),             # only a large positive exponent is bounded
    ("3 ** 64", 3 ** 64),                               # the largest
    ("  1 + 1\n", 2),                                   # surrounding blanks, as a file may write them
    ("1" + " " * (MAX_LENGTH - 1), 1),
    (f"len(range({MAX_ITEMS}))", MAX_ITEMS),
    ("[x * 2 for x in range(3)] + [x]", [0, 2, 4, 7]),  # a comprehension's variable hides the knob of its name
])
def test_what_t1_files_write_evaluates_like_python(text, value):
    assert evaluate(text, {"x": 7}) == value


def test_unary_plus_and_minus_make_booleans_integers_as_python_does():
    assert [type(v) for v in evaluate("[+True, -(1 > 0)]")] == [int, int]
    assert evaluate("+(x > 1) - -(x > 2)", {"x": np.array([1, 2, 3])}).tolist() == [0, 1, 2]
    assert evaluate("+(x > 1)", {"x": np.array([1, 2])}).dtype.kind == "i"


def test_names_are_bound_and_conditions_run_on_arrays():
    assert evaluate("block_size_x*block_size_y<=1024", {"block_size_x": 64, "block_size_y": 16}) is True
    x, y = np.array([16, 32, 64, 256]), np.array([1, 32, 2, 8])
    both = evaluate("32 <= x * y <= 1024 and (x % 32 != 0 or y > 1)", {"x": x, "y": y})
    assert both.tolist() == [False, True, True, False]
    assert evaluate("not x > 20", {"x": x}).tolist() == [True, False, False, False]
    assert evaluate("min(x, y * 8) >= 16", {"x": x, "y": y}).tolist() == [False, True, True, True]
    assert evaluate("max(x, y, 40)", {"x": x, "y": y}).tolist() == [40, 40, 64, 256]
    assert names_in("[i * tile for i in range(3)] and a < b") == {"tile", "a", "b"}


@pytest.mark.parametrize(("text", "names"), [
    ("len([x for x in range(3)]) == 3 and x > 1", {"x"}),       # the comprehension's x hides the knob only inside it
    ("[x for x in range(x)]", {"x"}),                            # its first `in` reads the enclosing x
    ("[y for y in range(3) if y < z]", {"z"}),
    ("[a * b for a in range(2) for b in range(a, c)]", {"c"}),
    ("1+" * 990 + "k", {"k"}),                                   # deeper than Python's recursion limit
])
def test_names_are_the_free_names_scoped_as_python_scopes_them(text, names):
    assert names_in(text) == names


def test_a_knob_named_like_a_comprehensions_variable_is_read_outside_it():
    space = space_from_t1({"ConfigurationSpace": {"TuningParameters": [{"Name": "x", "Values": [1, 2, 3]}],
                                                  "Conditions": [{"Expression": "len([x for x in range(x)]) < 3 and x > 1"}]}})
    assert space.allowed(np.arange(3)[:, None]).tolist() == [False, True, False]


@pytest.mark.parametrize(("text", "meaning"), [
    ("t == 0 or n % t == 0", lambda t, n: t == 0 or n % t == 0),
    ("t != 0 and n // t > 1", lambda t, n: t != 0 and n // t > 1),
    ("t and n % t", lambda t, n: t and n % t),
    ("n / t < 3 if t else n > 4", lambda t, n: n / t < 3 if t else n > 4),
    ("0 < t <= n // t < 5", lambda t, n: 0 < t <= n // t < 5),
    ("(n % t if t > 1 else 0) or t == 0 or n // t == 2", lambda t, n: (n % t if t > 1 else 0) or t == 0 or n // t == 2),
])
def test_on_arrays_an_operand_is_evaluated_only_where_python_would(text, meaning):
    """A guarded division runs on all configurations at once, without a fault, with Python's value for each: the
    guard decides where the division is evaluated (before, the whole array faulted and each configuration was
    evaluated again alone). The guard after the division guards nothing, as in Python."""
    t, n = np.array([0, 1, 2, 3, 0, 2]), np.array([5, 4, 4, 7, 3, 5])
    with np.errstate(all="raise"):                      # as Space.allowed evaluates: a division by zero faults
        value = evaluate(text, {"t": t, "n": n})
        with pytest.raises(ArithmeticFault):
            evaluate("n % t == 0 or t == 0", {"t": t, "n": n})
    expected = [meaning(int(a), int(b)) for a, b in zip(t, n, strict=True)]
    assert np.asarray(value).tolist() == expected


@pytest.mark.parametrize(("text", "fragment"), [
    ("__import__('os').system('x')", "__import__"),
    ("(1).__class__", "Attribute"),
    ("open('f')", "call of 'open'"),
    ("[].append(1)", "call of '[].append'"),
    ("lambda: 1", "Lambda"),
    ("x[0]", "Subscript"),
    ("(y := 3)", "NamedExpr"),
    ("import os", "not valid"),
    ("{1: 2}", "Dict"),
    ("unknown_knob > 1", "unknown name 'unknown_knob'"),
    ("range(10**9)", "range: range of 1000000000 items (at most 100000)"),
    (f"range({MAX_ITEMS + 1})", f"range of {MAX_ITEMS + 1} items"),
    ("list(range(10**9))", "range of"),
    ("list('abc')", "list takes one list, tuple or range"),
    ("list(range(60000)) + list(range(60000))", "builds or steps through more than"),
    ("[0] * 10**9", "too large"),
    ("2 ** 1000", "exponent 1000 is larger than 64"),
    ("2 ** 64.5", "exponent 64.5 is larger than 64"),
    ("(10 ** 64) ** 64", "an integer of more than 4096 bits"),
    ("[1] * 100000 * 100000", "builds or steps through more than"),
    ("'a' * 100000 * 2", "repetition too large"),
    ("[[0] * 1000 for i in range(1000)]", "builds or steps through more than"),
    ("[1 for a in [[0] * 300] * 300 for b in a for c in a for d in a if 0]", "builds or steps through more than"),   # 8.1e9 steps, no item
    ("-" * 1990 + "1", "nested too deeply"),
    ("1+" * 990 + "1", "nested too deeply"),
    ("1 / 0", "fails"),
    ("x" * 3000, "longer than"),
    ("1" + " " * MAX_LENGTH, "longer than"),
    ("b'x' == b'x'", "constant b'x' is not allowed"),
    ("__builtins__", "name '__builtins__' is not allowed"),
    ("x @ x", "operator MatMult is not allowed"),
    ("1 << 40", "operator LShift is not allowed"),
    ("~0", "operator Invert is not allowed"),
    ("[a for (a, b) in [(1, 2)]]", "a comprehension variable must be a plain name"),
    ("[c for c in 'abc']", "a comprehension must iterate over a list or a range"),
    ("[a async for a in [1]]", "an async comprehension is not allowed"),
    ("[1 for __class__ in [1]]", "name '__class__' is not allowed"),
])
def test_anything_else_is_refused_with_the_expression_named(text, fragment):
    with pytest.raises(ExpressionError) as caught:
        evaluate(text, {"x": [1]})
    assert fragment in str(caught.value) and "expression " in str(caught.value)


def test_comprehensions_are_bounded():
    with pytest.raises(ExpressionError, match=f"more than {MAX_ITEMS}"):
        evaluate("[i * j for i in range(1000) for j in range(1000)]")


@pytest.mark.parametrize("text", ["[x, x]", "(x, 1, x)", "[x for i in range(2)]"])
def test_lists_of_arrays_count_their_rows(text):
    """An array of a knob's values for many configurations counts as as many items (the caller evaluates the
    restriction one configuration at a time instead)."""
    assert len(evaluate(text, {"x": np.zeros(MAX_ITEMS // 3)})) in (2, 3)
    with pytest.raises(ExpressionError, match=f"more than {MAX_ITEMS}"):
        evaluate(text, {"x": np.zeros(MAX_ITEMS // 2)})


@pytest.mark.parametrize("text", ["len(x) == 2", "x * x > 0", "2 ** x > 0", "x * 2 ** 22 + x * 2 ** 22 > 0", "[1, 2] == x",
                                  "(-x) * x < 0", "x * -2 ** 40 < 0", "x + [1]", "x != [1, 2]", "min(x) > 1", "max(x, [1]) == 1",
                                  "x > 1 or [0]", "x in [1, [2]]", "x in s", "1 in s",
                                  "'b' % x", "len(s or x)", "len(True if s else 'b')"])       # formatting; numbers made strings
def test_on_arrays_what_numpy_computes_otherwise_than_python_is_left_to_each_configuration(text):
    with pytest.raises(RowWise):
        evaluate(text, {"s": np.array(["", "b", "ab"]), "x": np.array([1, 2, 2**40])})


def test_on_arrays_in_len_and_arithmetic_within_64_bits_stay_element_wise():
    s, x, y = np.array(["", "b", "ab"]), np.array([1, 2, 3]), np.array([3, 2, 0])
    assert evaluate("x in [1, y]", {"x": x, "y": y}).tolist() == [True, True, False]
    assert evaluate("s not in ('b', 3) and 2 in [x, y, 5]", {"s": s, "x": x, "y": y}).tolist() == [False, False, False]
    assert evaluate("3 in [x, y]", {"x": x, "y": y}).tolist() == [True, False, True]
    assert evaluate("('b' in s) + (s in 'xab') * 2 + len(s) * 4", {"s": s}).tolist() == [2, 7, 11]     # substrings, lengths
    assert evaluate("len(s or 'xyz')", {"s": s}).tolist() == [3, 1, 2]                  # strings chosen among strings
    assert evaluate("x * 2 ** 40 > 0", {"x": x}).tolist() == [True, True, True]          # within 64 bits: stays on arrays
    assert evaluate("1 ** (x * 50) + 0 ** x", {"x": x}).tolist() == [1, 1, 1]              # so does a power of 0 or 1
    assert evaluate("x * 2.0 ** 62 > 0", {"x": x}).tolist() == [True, True, True]        # and floating point


def test_a_restriction_whose_value_is_a_list_is_true_where_the_list_is_not_empty():
    space = space_from_t1({"ConfigurationSpace": {"TuningParameters": [{"Name": "x", "Values": [0, 1, 2]}],
                                                  "Conditions": [{"Expression": "[0] if x > 5 else [0, 0]"}, {"Expression": "[0] * x"}]}})
    assert space.allowed(np.arange(3)[:, None]).tolist() == [False, True, True]


class Condition(NamedTuple):
    """A restriction's text beside the function Python computes from it, built together (the test needs no eval)."""

    text: str
    meaning: Callable[[dict[str, Any]], Any]

    def __repr__(self) -> str:
        return self.text


KNOBS = {"bx": [-2, 0, 3, 8], "tile": [0, 1, 2], "w": [0.5, 2.0], "big": [3, 2**40], "s": ["", "b", "ab"]}
BINARY = {"+": operator.add, "-": operator.sub, "*": operator.mul, "/": operator.truediv, "//": operator.floordiv,
          "%": operator.mod, "<": operator.lt, "<=": operator.le, "==": operator.eq, "!=": operator.ne, ">": operator.gt}
NUMBERS = [Condition(n, lambda c, n=n: c[n]) for n in ("bx", "tile", "w", "big")] + [Condition(str(k), lambda c, k=k: k) for k in (0, 1, 3)]
MEMBERS = [        # numbers read off strings and lists, where numpy's own meaning on arrays differs from Python's
    Condition("('b' in s)", lambda c: "b" in c["s"]), Condition("(s < 'b')", lambda c: c["s"] < "b"),
    Condition("len(s)", lambda c: len(c["s"])), Condition("(s in ['b', 'ab'])", lambda c: c["s"] in ["b", "ab"]),
    Condition("(bx in [1, 3])", lambda c: c["bx"] in [1, 3]), Condition("(tile not in [bx, 2])", lambda c: c["tile"] not in [c["bx"], 2]),
    Condition("(3 in [bx, tile])", lambda c: 3 in [c["bx"], c["tile"]]), Condition("([1, 3] != bx)", lambda c: c["bx"] != [1, 3]),
    Condition("len([bx, s])", lambda c: len([c["bx"], c["s"]])),
]
LEAVES = st.sampled_from(NUMBERS + MEMBERS)


def _binary(a: Condition, op: str, b: Condition) -> Condition:
    return Condition(f"({a.text} {op} {b.text})", lambda c: BINARY[op](a.meaning(c), b.meaning(c)))


def _chain(a: Condition, op: str, b: Condition, op2: str, c: Condition) -> Condition:
    """``a op b op2 c``: ``c`` is evaluated only where ``a op b`` holds, and ``b`` once."""
    def meaning(config: dict[str, Any]) -> Any:
        middle = b.meaning(config)
        return BINARY[op](a.meaning(config), middle) and BINARY[op2](middle, c.meaning(config))
    return Condition(f"({a.text} {op} {b.text} {op2} {c.text})", meaning)


def _extreme(function: Callable[[Any, Any], Any], a: Condition, b: Condition) -> Condition:
    return Condition(f"{function.__name__}({a.text}, {b.text})", lambda c: function(a.meaning(c), b.meaning(c)))


def _combine(inner: st.SearchStrategy[Condition]) -> st.SearchStrategy[Condition]:
    both = st.tuples(inner, inner).map(lambda t: Condition(f"({t[0].text} and {t[1].text})", lambda c: t[0].meaning(c) and t[1].meaning(c)))
    either = st.tuples(inner, inner).map(lambda t: Condition(f"({t[0].text} or {t[1].text})", lambda c: t[0].meaning(c) or t[1].meaning(c)))
    negated = inner.map(lambda t: Condition(f"(not {t.text})", lambda c: not t.meaning(c)))
    minus = inner.map(lambda t: Condition(f"(-{t.text})", lambda c: -t.meaning(c)))
    extreme = st.builds(_extreme, st.sampled_from([min, max]), inner, inner)
    chosen = st.tuples(inner, inner, inner).map(lambda t: Condition(
        f"({t[0].text} if {t[1].text} else {t[2].text})", lambda c: t[0].meaning(c) if t[1].meaning(c) else t[2].meaning(c)))
    comparisons = st.sampled_from(["<", "<=", "==", "!=", ">"])
    chain = st.builds(_chain, inner, comparisons, inner, comparisons, inner)
    return st.builds(_binary, inner, st.sampled_from(sorted(BINARY)), inner) | both | either | negated | minus | extreme | chosen | chain


def _python_allows(condition: Condition, config: dict[str, Any]) -> bool:
    try:
        return bool(condition.meaning(config))
    except ArithmeticError:                      # a division by zero: Python raises, so the configuration cannot run
        return False


@settings(max_examples=1000)                     # about 2 ms each; most conditions divide by nothing that can be 0
@given(condition=st.recursive(LEAVES, _combine, max_leaves=8))
@example(condition=Condition("((bx < 3) + (tile < 3)) > 1", lambda c: ((c["bx"] < 3) + (c["tile"] < 3)) > 1))    # True + True is 2
@example(condition=Condition("(w % bx) or (tile == 0)", lambda c: (c["w"] % c["bx"]) or (c["tile"] == 0)))
@example(condition=Condition("('b' in s) and (len(s) == 2)", lambda c: "b" in c["s"] and len(c["s"]) == 2))      # numpy: any row, row count
@example(condition=Condition("(big * big) > 0", lambda c: c["big"] * c["big"] > 0))                      # 2**80 wraps to 0 in int64
@example(condition=Condition("([1, 3] != bx)", lambda c: c["bx"] != [1, 3]))                             # numpy compares element-wise
def test_a_restriction_rules_out_exactly_what_python_would_for_each_configuration(condition):
    space = space_from_t1({"ConfigurationSpace": {"TuningParameters": [{"Name": n, "Values": v} for n, v in KNOBS.items()],
                                                  "Conditions": [{"Expression": condition.text}]}})
    configs = [dict(zip(KNOBS, values, strict=True)) for values in itertools.product(*KNOBS.values())]
    assert space.allowed(space.encode_many(configs)).tolist() == [_python_allows(condition, c) for c in configs], condition.text


@settings(max_examples=300)
@given(conditions=st.lists(st.recursive(LEAVES, _combine, max_leaves=6), min_size=2, max_size=3))
@example(conditions=[Condition("(bx % tile) == 0", lambda c: (c["bx"] % c["tile"]) == 0), Condition("tile > 0", lambda c: c["tile"] > 0)])
def test_several_restrictions_rule_out_what_python_would_with_each_evaluated_alone(conditions):
    """A restriction that faults on some values (it divides by zero) is evaluated row by row only where the others
    allow; together they rule out exactly what Python would."""
    space = space_from_t1({"ConfigurationSpace": {"TuningParameters": [{"Name": n, "Values": v} for n, v in KNOBS.items()],
                                                  "Conditions": [{"Expression": c.text} for c in conditions]}})
    configs = [dict(zip(KNOBS, values, strict=True)) for values in itertools.product(*KNOBS.values())]
    assert space.allowed(space.encode_many(configs)).tolist() == [all(_python_allows(c, config) for c in conditions) for config in configs]
