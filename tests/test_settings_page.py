"""The docs' Settings page is the deployer's list of what can be set: every variable the
settings read is on it, nothing else, and each default it states is the one the code
takes (read from ``oversight/settings.py`` itself, so that neither can drift)."""

import ast
import operator
import re

from tests.documentation import ROOT, page

SETTINGS = ROOT / "oversight" / "settings.py"
NAME = re.compile(r'"(OVERSIGHT_[A-Z_]+|DATABASE_URL|DATABASE_REPLICA_URL)"')
ARITHMETIC = {ast.Mult: operator.mul, ast.Pow: operator.pow, ast.Add: operator.add}
UNITS = {"": 1, "KiB": 2**10, "MiB": 2**20}


def rows() -> dict[str, str]:
    """Each variable of the page's table, with its default cell: a row naming several
    variables gives each its part of a cell listing several defaults (``2, 16, 20``)."""
    found = {}
    for line in page("operating/settings").splitlines():
        if not line.startswith("| `"):
            continue
        names_cell, default_cell = line.split(" | ")[:2]
        names = re.findall(r"`([A-Z_]+)`", names_cell)
        defaults = default_cell.split(", ") if len(names) > 1 else [default_cell]
        if len(defaults) != len(names):  # One default in words for them all.
            defaults = [default_cell] * len(names)
        found |= dict(zip(names, defaults, strict=True))
    return found


def constant(node: ast.expr):
    """A default written as a constant or constants' arithmetic (``25 * 2**20``), else
    None: a default computed from other settings is described in words."""
    if isinstance(node, ast.Constant):
        return node.value
    if isinstance(node, ast.BinOp) and type(node.op) in ARITHMETIC:
        left, right = constant(node.left), constant(node.right)
        if isinstance(left, int) and isinstance(right, int):
            return ARITHMETIC[type(node.op)](left, right)
    return None


def code_defaults() -> dict[str, int | bool]:
    """Each ``env_int`` and ``env_bool`` of the settings with a constant default."""
    found = {}
    for call in ast.walk(ast.parse(SETTINGS.read_text())):
        if not (
            isinstance(call, ast.Call)
            and getattr(call.func, "id", "") in ("env_int", "env_bool")
            and call.args
            and isinstance(call.args[0], ast.Constant)
        ):
            continue
        given = call.args[1] if len(call.args) > 1 else None
        given = next((k.value for k in call.keywords if k.arg == "default"), given)
        value = constant(given) if given is not None else None
        if isinstance(value, int):  # bool included
            found[call.args[0].value] = value
    return found


def stated(cell: str) -> int | bool | None:
    """The default a cell states first: ``true``/``false``, or a number with an optional
    unit (``8 MiB``, ``1048576 (1 MiB)``, a backticked ``180``); None for words."""
    cell = cell.strip().replace("`", "")
    if cell.startswith(("true", "false")):
        return cell.startswith("true")
    number = re.match(r"(\d[\d,]*)\s*(KiB|MiB)?", cell)
    return int(number[1].replace(",", "")) * UNITS[number[2] or ""] if number else None


def test_the_page_lists_every_variable_the_settings_read_and_no_other():
    """A variable the settings read and missing there is a setting nobody knows to set;
    a row no code reads any more misleads."""
    read = set(NAME.findall(SETTINGS.read_text()))
    code = (
        p.read_text() for folder in ("oversight", "runs") for p in (ROOT / folder).rglob("*.py")
    )
    anywhere = {found for text in code for found in NAME.findall(text)}
    assert read, "no variable found: the pattern above no longer matches the settings"
    assert sorted(read - set(rows())) == []
    assert sorted(set(rows()) - anywhere) == []


def test_each_default_the_page_states_is_the_codes():
    documented = rows()
    defaults = code_defaults()
    assert len(defaults) > 40, "the settings' env_int/env_bool calls were not found"
    wrong = {
        name: (documented[name], value)
        for name, value in defaults.items()
        if stated(documented[name]) is not None and stated(documented[name]) != value
    }
    assert wrong == {}
    unchecked = [name for name in defaults if stated(documented[name]) is None]
    assert len(unchecked) <= 3, f"defaults stated in words, not checked: {unchecked}"
