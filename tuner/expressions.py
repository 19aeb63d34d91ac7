"""A restricted evaluator for the expressions of tuning-problem files (untrusted text).

T1 files write value lists as ``"[32 * i for i in range(1, 32)]"`` and restrictions as
``"block_size_x*block_size_y<=1024"``. This module parses such text with :mod:`ast` and
interprets the tree itself: literals, arithmetic, comparisons, boolean operators, conditional
expressions, ``range``/``list``/``min``/``max``/``len``, list comprehensions and names bound by the caller.
Everything else (attributes, subscripts, other calls, dunder names, lambdas, imports, walrus...)
is refused with :class:`ExpressionError` naming the expression. Python's ``eval`` is never used.

Names may be bound to numpy arrays: a condition is then evaluated for many configurations at once
(``and``/``or``/``not``, ``in``, conditional expressions and chained comparisons become element-wise). Each evaluates
an operand only where Python would (for the configurations its short-circuit reaches), so a guard such as
``t == 0 or n % t == 0`` or ``0 < t <= n // t`` holds. A string knob's ``len`` and substring tests use numpy's
string functions. What numpy would compute otherwise than Python for some configuration raises :class:`RowWise`
instead (``len`` of a number knob, a list beside an array, an integer past 64 bits, a string formatted with ``%``,
a string in some configurations and a number in others), and the caller evaluates that condition one configuration
at a time.
"""

from __future__ import annotations

import ast
import keyword
import operator
from collections.abc import Callable, Mapping
from functools import lru_cache
from typing import Any

import numpy as np

MAX_LENGTH = 2000               # characters of one expression
MAX_ITEMS = 100_000             # elements of the lists, tuples, strings and ranges one evaluation builds, and loop steps, in all
MAX_BITS = 4096                 # size of an integer an evaluation may reach
MAX_EXPONENT = 64               # of a power

_BINARY: dict[type[ast.operator], Callable[[Any, Any], Any]] = {
    ast.Add: operator.add, ast.Sub: operator.sub, ast.Mult: operator.mul, ast.Div: operator.truediv,
    ast.FloorDiv: operator.floordiv, ast.Mod: operator.mod, ast.Pow: operator.pow,
}


class ExpressionError(ValueError):
    """An expression that is malformed, not allowed, or fails to evaluate (the message quotes it)."""


class ArithmeticFault(ExpressionError):
    """An allowed expression that fails on its values as Python arithmetic would (a division by zero)."""


class RowWise(ExpressionError):
    """An allowed expression whose value on arrays numpy would compute otherwise than Python does for each
    configuration: to be evaluated one configuration at a time."""


def _sequence(value: Any) -> bool:
    return isinstance(value, list | tuple | range)


def _quote(text: str) -> str:
    return repr(text if len(text) <= 80 else text[:77] + "...")


def _range(*args: Any) -> range:
    if not 1 <= len(args) <= 3 or not all(isinstance(a, int) for a in args):
        raise ValueError("range takes one to three integers")
    out = range(*args)
    if len(out) > MAX_ITEMS:
        raise ValueError(f"range of {len(out)} items (at most {MAX_ITEMS})")
    return out


def _texts(value: Any) -> bool:
    """Whether ``value`` is a string or an array of strings (a string knob's values)."""
    return isinstance(value, str) or (isinstance(value, np.ndarray) and value.dtype.kind == "U")


def _len(value: Any) -> Any:
    if not isinstance(value, np.ndarray):
        return len(value)
    if _texts(value):
        return np.strings.str_len(value)                     # each configuration's string
    raise RowWise("len of a knob's values")                 # numpy's len is the number of configurations


def _list(*args: Any) -> list[Any]:
    """``list(x)`` of a list, tuple or range (Kernel Tuner's T1 files write ``[1, 2] + list(range(32, 1025, 32))``)."""
    if len(args) != 1 or not _sequence(args[0]):
        raise ValueError("list takes one list, tuple or range")
    return list(args[0])


def _min_max(fold: Callable[[Any, Any], Any], builtin: Callable[..., Any]) -> Callable[..., Any]:
    def call(*args: Any) -> Any:
        if any(isinstance(a, np.ndarray) for a in args):
            if len(args) < 2 or any(_sequence(a) for a in args):
                raise RowWise(f"{builtin.__name__} of a list or of a knob's values alone")
            out = args[0]
            for a in args[1:]:
                out = fold(out, a)
            return out
        return builtin(*args)
    return call


_FUNCTIONS: dict[str, Callable[..., Any]] = {
    "range": _range, "list": _list, "len": _len, "min": _min_max(np.minimum, min), "max": _min_max(np.maximum, max),
}


FUNCTION_NAMES = tuple(_FUNCTIONS)


def reserved(name: str) -> bool:
    """Whether an expression could not name a knob called ``name``: a Python keyword (``True``, ``lambda``...),
    or a function expressions call."""
    return keyword.iskeyword(name) or name in _FUNCTIONS


def _arithmetic(value: Any) -> Any:
    """``value``, with an array of booleans made integers: in arithmetic Python counts True as 1 (numpy's
    ``True + True`` is True)."""
    return value.astype(np.int64) if isinstance(value, np.ndarray) and value.dtype == bool else value


def _member(item: Any, collection: Any) -> Any:
    """``item in collection``; with arrays, element-wise where ``collection`` is a list, tuple or range of single
    values (``x in [32, 64]``, ``x in [y, z]``), as Python's ``in`` compares with ``==``, or where both are strings
    (``'b' in s``: a substring); otherwise :class:`RowWise` (numpy's ``in`` asks whether any configuration matches)."""
    listed = collection if _sequence(collection) else ()
    if not any(isinstance(v, np.ndarray) for v in (item, collection, *listed)):
        return item in collection
    if _texts(item) and _texts(collection):
        return np.strings.find(collection, item) >= 0        # a substring, in each configuration
    if not _sequence(collection) or any(_sequence(c) for c in collection):
        raise RowWise("'in' on a knob's values")
    found = np.zeros(np.shape(item), dtype=bool)
    for candidate in collection:
        found = found | (item == candidate)
    return found


def _not(value: Any) -> Any:
    return np.logical_not(value) if isinstance(value, np.ndarray) else not value


_COMPARE: dict[type[ast.cmpop], Callable[[Any, Any], Any]] = {
    ast.Eq: operator.eq, ast.NotEq: operator.ne, ast.Lt: operator.lt, ast.LtE: operator.le, ast.Gt: operator.gt,
    ast.GtE: operator.ge, ast.In: _member, ast.NotIn: lambda a, b: _not(_member(a, b)),
}


def _beside_array(left: Any, right: Any) -> bool:
    """Whether a list, tuple or range meets an array in an operation (numpy would broadcast the sequence
    over the configurations; Python fails or compares it whole)."""
    return (isinstance(left, np.ndarray) and _sequence(right)) or (isinstance(right, np.ndarray) and _sequence(left))


def _fits_64_bits(op: ast.operator, left: Any, right: Any) -> bool:
    """Whether ``left op right`` on integer arrays surely stays within 64 bits, where numpy would wrap it around
    silently (Python's integers grow): bounded by the operands' largest magnitudes."""
    if not isinstance(op, ast.Add | ast.Sub | ast.Mult | ast.Pow) or not (isinstance(left, np.ndarray) or isinstance(right, np.ndarray)):
        return True
    if not all(v.dtype.kind == "i" if isinstance(v, np.ndarray) else isinstance(v, int) for v in (left, right)):
        return True
    a, b = _magnitude(left), _magnitude(right)
    if isinstance(op, ast.Pow):
        return a <= 1 or b * a.bit_length() < 63
    return (a + b if isinstance(op, ast.Add | ast.Sub) else a * b) < 2 ** 63


def _magnitude(value: Any) -> int:
    """The largest absolute value of an integer or an integer array."""
    if not isinstance(value, np.ndarray):
        return abs(value)
    return max(-int(value.min()), int(value.max())) if value.size else 0


def _where(mask: np.ndarray, chosen: Any, other: Any) -> np.ndarray:
    """``chosen`` where ``mask`` holds, else ``other``; :class:`RowWise` where one is strings and the other not (numpy
    would write the numbers as strings: ``True`` would become ``'True'``)."""
    chosen, other = np.asarray(chosen), np.asarray(other)
    if _texts(chosen) != _texts(other):
        raise RowWise("a string in some configurations, a number in others")
    return np.where(mask, chosen, other)


def _elementwise(vector: Callable[[Any, Any], Any], out: Any, value: Any) -> Any:
    """``vector(out, value)`` where either is an array; otherwise ``value`` (the scalar operand that decides)."""
    return vector(out, value) if isinstance(out, np.ndarray) or isinstance(value, np.ndarray) else value


class _Interpreter:
    def __init__(self, text: str, names: Mapping[str, Any]) -> None:
        self.text, self.scopes, self.built = text, [dict(names)], 0

    def count(self, node: ast.AST, items: int) -> None:
        """Count ``items`` more built by this evaluation; refused past ``MAX_ITEMS`` in all."""
        self.built += items
        if self.built > MAX_ITEMS:
            raise self.refuse(node, f"builds or steps through more than {MAX_ITEMS} items")

    def made(self, node: ast.AST, value: Any) -> Any:
        """``value``, counted when it is a sequence (with the rows of the arrays it holds), refused when it is an
        integer past ``MAX_BITS``."""
        if isinstance(value, list | tuple | str | range):
            self.count(node, len(value))
            if isinstance(value, list | tuple):
                self.count(node, sum(item.size for item in value if isinstance(item, np.ndarray)))
        elif isinstance(value, int) and value.bit_length() > MAX_BITS:
            raise self.refuse(node, f"an integer of more than {MAX_BITS} bits")
        return value

    def refuse(self, node: ast.AST, what: str | None = None) -> ExpressionError:
        return ExpressionError(f"expression {_quote(self.text)}: {what or type(node).__name__ + ' is not allowed'}")

    def run(self, node: ast.AST) -> Any:
        method = getattr(self, f"_{type(node).__name__}", None)
        if method is None:
            raise self.refuse(node)
        return method(node)

    def _Expression(self, node: ast.Expression) -> Any:
        return self.run(node.body)

    def _Constant(self, node: ast.Constant) -> Any:
        if not isinstance(node.value, int | float | str | bool | None):
            raise self.refuse(node, f"constant {node.value!r} is not allowed")
        return node.value

    def _List(self, node: ast.List) -> list[Any]:
        return self.made(node, [self.run(e) for e in node.elts])

    def _Tuple(self, node: ast.Tuple) -> tuple[Any, ...]:
        return self.made(node, tuple(self.run(e) for e in node.elts))

    def _Name(self, node: ast.Name) -> Any:
        if node.id.startswith("__"):
            raise self.refuse(node, f"name {node.id!r} is not allowed")
        for scope in reversed(self.scopes):
            if node.id in scope:
                return scope[node.id]
        raise self.refuse(node, f"unknown name {node.id!r}")

    def _BinOp(self, node: ast.BinOp) -> Any:
        op = _BINARY.get(type(node.op))
        if op is None:
            raise self.refuse(node, f"operator {type(node.op).__name__} is not allowed")
        left, right = _arithmetic(self.run(node.left)), _arithmetic(self.run(node.right))
        formats = isinstance(node.op, ast.Mod) and isinstance(left, str) and isinstance(right, np.ndarray)   # str % array: a mapping
        if formats or _beside_array(left, right) or not _fits_64_bits(node.op, left, right):
            raise RowWise(f"{type(node.op).__name__} of a list, past 64 bits or formatting a string")
        if isinstance(node.op, ast.Pow) and isinstance(right, int | float) and right > MAX_EXPONENT:
            raise self.refuse(node, f"exponent {right!r} is larger than {MAX_EXPONENT}")
        if isinstance(node.op, ast.Mult) and (isinstance(left, list | tuple | str) or isinstance(right, list | tuple | str)):
            sequence, count = (left, right) if isinstance(left, list | tuple | str) else (right, left)
            if isinstance(count, int) and len(sequence) * count > MAX_ITEMS:
                raise self.refuse(node, "repetition too large")
        return self.made(node, op(left, right))

    def _UnaryOp(self, node: ast.UnaryOp) -> Any:
        value = self.run(node.operand)
        if isinstance(node.op, ast.Not):
            return _not(value)
        if isinstance(node.op, ast.USub):
            return -_arithmetic(value)
        if isinstance(node.op, ast.UAdd):
            return +_arithmetic(value)
        raise self.refuse(node, f"operator {type(node.op).__name__} is not allowed")

    def on(self, rows: np.ndarray, node: ast.AST) -> Any:
        """``node``'s value for the configurations where ``rows`` (a mask over them, true somewhere) holds, as an array
        over all of them (zeros elsewhere), or its one value where it holds everywhere. ``node`` is evaluated for those
        configurations alone, as Python would evaluate it for each, so that a guarded operand (``n % t`` in
        ``t == 0 or n % t == 0``) does not fault where its guard decides."""
        rows = np.asarray(rows, dtype=bool)
        if rows.all():
            return self.run(node)
        outer, total = self.scopes, len(rows)
        self.scopes = [{name: v[rows] if isinstance(v, np.ndarray) and v.shape[:1] == (total,) else v for name, v in scope.items()}
                       for scope in outer]
        try:
            value = self.run(node)
        finally:
            self.scopes = outer
        if _sequence(value):
            raise RowWise("a list as the value for some configurations")
        value = np.asarray(value)
        full = np.zeros(total, dtype=value.dtype)
        full[rows] = value
        return full

    def _BoolOp(self, node: ast.BoolOp) -> Any:
        is_and = isinstance(node.op, ast.And)
        out = self.run(node.values[0])
        for item in node.values[1:]:
            if isinstance(out, np.ndarray):                         # the rest, where Python's short-circuit reaches it
                truth = np.asarray(out, dtype=bool)
                rest = truth if is_and else ~truth
                if rest.any():
                    out = _where(rest, self.on(rest, item), out)
            elif not out if is_and else out:
                return out                                          # Python's short-circuit: the rest is not evaluated
            else:
                out = self.run(item)
        return out

    def _Compare(self, node: ast.Compare) -> Any:
        left, out = self.run(node.left), True
        for op, comparator in zip(node.ops, node.comparators, strict=True):
            if isinstance(out, np.ndarray) and not out.any():
                return out
            right = self.on(out, comparator) if isinstance(out, np.ndarray) else self.run(comparator)    # where the chain goes on
            if _beside_array(left, right) and not isinstance(op, ast.In | ast.NotIn):
                raise RowWise("a comparison of a list with a knob's values")
            out = _elementwise(np.logical_and, out, _COMPARE[type(op)](left, right))
            if not isinstance(out, np.ndarray) and not out:
                return out                                          # a chain short-circuits too
            left = right
        return out

    def _IfExp(self, node: ast.IfExp) -> Any:
        test = self.run(node.test)
        if isinstance(test, np.ndarray):
            truth = np.asarray(test, dtype=bool)
            if not truth.any() or truth.all():
                return self.run(node.body if truth.all() else node.orelse)
            return _where(truth, self.on(truth, node.body), self.on(~truth, node.orelse))
        return self.run(node.body) if test else self.run(node.orelse)

    def _Call(self, node: ast.Call) -> Any:
        if (why := _refused_call(node)) is not None:
            raise self.refuse(node, why)
        args = [self.run(a) for a in node.args]
        try:
            value = _FUNCTIONS[node.func.id](*args)
        except RowWise:
            raise
        except (TypeError, ValueError) as exc:
            raise self.refuse(node, f"{node.func.id}: {exc}") from None
        return self.made(node, value)

    def _ListComp(self, node: ast.ListComp) -> list[Any]:
        out: list[Any] = []
        self._generate(node, 0, out)
        return out

    def _generate(self, node: ast.ListComp, level: int, out: list[Any]) -> None:
        if level == len(node.generators):
            out.append(item := self.run(node.elt))
            if isinstance(item, np.ndarray):
                self.count(node, item.size)
            return
        gen = node.generators[level]
        if gen.is_async:
            raise self.refuse(node, "an async comprehension is not allowed")
        if not isinstance(gen.target, ast.Name):
            raise self.refuse(node, "a comprehension variable must be a plain name")
        if gen.target.id.startswith("__"):
            raise self.refuse(node, f"name {gen.target.id!r} is not allowed")
        iterable = self.run(gen.iter)
        if not _sequence(iterable):
            raise self.refuse(node, "a comprehension must iterate over a list or a range")
        for value in iterable:
            self.count(node, 1)                     # every step of every loop, so that nested loops are bounded too
            self.scopes.append({gen.target.id: value})
            try:
                if all(self.run(test) for test in gen.ifs):
                    self._generate(node, level + 1, out)
            finally:
                self.scopes.pop()


@lru_cache(maxsize=1024)
def parse(text: str) -> ast.Expression:
    """The syntax tree of ``text``; :class:`ExpressionError` if it is not one expression."""
    if not isinstance(text, str):
        raise ExpressionError(f"an expression must be a string, got {type(text).__name__}")
    if len(text) > MAX_LENGTH:
        raise ExpressionError(f"expression {_quote(text)} is longer than {MAX_LENGTH} characters")
    try:
        return ast.parse(text.strip(), mode="eval")
    except SyntaxError as exc:
        raise ExpressionError(f"expression {_quote(text)} is not valid: {exc.msg}") from None
    except RecursionError:
        raise ExpressionError(f"expression {_quote(text)} is nested too deeply") from None


def evaluate(text: str, names: Mapping[str, Any] | None = None) -> Any:
    """The value of ``text`` with ``names`` bound (scalars, or numpy arrays for element-wise use)."""
    try:
        return _Interpreter(text, names or {}).run(parse(text))
    except ExpressionError:
        raise
    except RecursionError:
        raise ExpressionError(f"expression {_quote(text)} is nested too deeply") from None
    except ArithmeticError as exc:
        raise ArithmeticFault(f"expression {_quote(text)} fails: {exc}") from None
    except (TypeError, ValueError) as exc:
        raise ExpressionError(f"expression {_quote(text)} fails: {exc}") from None


def _refused_call(node: ast.Call) -> str | None:
    """Why the evaluator refuses a call (``None``: a call of one of its functions, without keywords)."""
    allowed = isinstance(node.func, ast.Name) and node.func.id in _FUNCTIONS
    if allowed and not node.keywords:
        return None
    called = ast.unparse(node.func)[:60]
    if allowed:
        return f"call of {called!r} with a keyword argument is not allowed"
    return f"call of {called!r} is not allowed (allowed: {', '.join(_FUNCTIONS)})"


def names_in(text: str) -> set[str]:
    """Free names ``text`` reads, scoped as Python scopes them (a comprehension's variable hides a knob of its name
    only inside it; its first ``in`` reads the enclosing names); :class:`ExpressionError` for a call the evaluator
    refuses, so that ``abs(x)`` is named as a call, not taken for a knob called ``abs``."""
    tree = parse(text)
    for node in ast.walk(tree):
        if isinstance(node, ast.Call) and (why := _refused_call(node)) is not None:
            raise ExpressionError(f"expression {_quote(text)}: {why}")
    free: set[str] = set()
    stack: list[tuple[ast.AST, frozenset[str]]] = [(tree, frozenset())]       # a loop, not recursion: trees may be deep
    while stack:
        node, bound = stack.pop()
        if isinstance(node, ast.Name):
            free |= {node.id} - bound
        elif isinstance(node, ast.ListComp):
            for gen in node.generators:
                stack.append((gen.iter, bound))
                bound = bound | ({gen.target.id} if isinstance(gen.target, ast.Name) else set())
                stack.extend((test, bound) for test in gen.ifs)
            stack.append((node.elt, bound))
        else:
            stack.extend((child, bound) for child in ast.iter_child_nodes(node))
    return free - set(_FUNCTIONS)
