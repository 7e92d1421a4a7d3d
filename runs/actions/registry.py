"""The registered actions, loaded from the ``OVERSIGHT_ACTIONS`` setting."""

import re
from dataclasses import dataclass
from functools import cache

from django.conf import settings
from django.core.exceptions import ImproperlyConfigured
from django.utils.module_loading import import_string
from pydantic import ValidationError

from runs.actions.base import Action, Arguments
from runs.canonical import sha256_hex
from runs.errors import InvalidInput
from runs.models import Operation

# Hex digits of the hash that ends a target too long for its column (``Parsed.target``).
TARGET_HASH = 16


@cache
def registered() -> dict[str, Action]:
    actions: dict[str, Action] = {}
    for path in settings.OVERSIGHT_ACTIONS:
        try:
            action = import_string(path)()
        except ImportError as exc:
            raise ImproperlyConfigured(f"OVERSIGHT_ACTIONS: cannot import {path}: {exc}") from None
        if not isinstance(action, Action) or not getattr(action, "name", ""):
            raise ImproperlyConfigured(f"OVERSIGHT_ACTIONS: {path} is not a named Action")
        if action.name in actions:
            raise ImproperlyConfigured(f"OVERSIGHT_ACTIONS: two actions are named {action.name}")
        actions[action.name] = action
    return actions


def get_action(name: str) -> Action | None:
    return registered().get(name)


def lane_of(action_name: str, arguments: dict, project_id: int) -> str:
    """The lane of an operation (``Action.lane``): for an action not registered here,
    its name."""
    action = get_action(action_name)
    lane = action.lane(arguments, project_id) if action else action_name
    return lane[: Operation._meta.get_field("lane").max_length]


@dataclass(frozen=True)
class Parsed:
    """An action's name and arguments as ``parse`` reads them, once: a proposal's gist,
    target and executor (``gist_of``, ``target_of``, ``check_proposal``) and a page's plan
    all come from the one parse."""

    name: str
    action: Action | None = None  # None: no action of this name is registered here.
    args: Arguments | None = None  # None: not registered, or they do not fit its schema.
    problem: str = ""  # Why they do not fit: each field named (``parse_arguments``).

    def gist(self) -> str:
        """What the operation would do, in one line (``Action.gist``), cut to fit: "" for
        an action not registered here, or arguments that do not fit its schema."""
        gist = self.action.gist(self.args) if self.args is not None else ""
        most = Operation._meta.get_field("gist").max_length
        return gist if len(gist) <= most else f"{gist[: most - 1]}…"

    def target(self) -> str:
        """What the operation acts on that others may too (``Action.target``): "" for an
        action not registered here, or arguments that do not fit its schema. A name too
        long for its column keeps its start, and ends with a hash of the whole: cut
        plainly, two files with a long common prefix would pass for one target."""
        target = self.action.target(self.args) if self.args is not None else ""
        most = Operation._meta.get_field("target").max_length
        if len(target) <= most:
            return target
        whole = sha256_hex(target.encode())[:TARGET_HASH]
        return f"{target[: most - TARGET_HASH - 1]}…{whole}"

    def executor(self, rollback_kind: str) -> str:
        """Who carries out the proposal: for a registered action, Oversight's workers,
        once its arguments fit the schema and ``rollback_kind`` is theirs
        (``InvalidInput`` if not); any other, the agent itself."""
        if self.action is None:
            return Operation.Executor.AGENT
        if self.problem:
            raise InvalidInput(self.problem)
        expected = self.action.rollback_kind_for(self.args)
        if rollback_kind != expected:
            raise InvalidInput(
                f"rollback_kind: {self.name} with these arguments rolls back {expected}"
            )
        return Operation.Executor.SERVER


def parse(action_name: str, arguments: dict) -> Parsed:
    """``action_name``'s registered action and ``arguments`` as it reads them, or why
    they do not fit its schema."""
    action = get_action(action_name)
    if action is None:
        return Parsed(action_name)
    try:
        return Parsed(action_name, action, parse_arguments(action, arguments))
    except InvalidInput as error:
        return Parsed(action_name, action, problem=str(error))


def gist_of(action_name: str, arguments: dict) -> str:
    return parse(action_name, arguments).gist()


def target_of(action_name: str, arguments: dict) -> str:
    return parse(action_name, arguments).target()


def parse_arguments(action: Action, arguments: dict):
    """Validate arguments against the action's schema; ``InvalidInput`` names each field."""
    try:
        return action.Arguments.model_validate(arguments)
    except ValidationError as exc:
        problems = "; ".join(
            f"arguments.{'.'.join(map(str, err['loc'])) or ''}: {err['msg']}"
            for err in exc.errors()
        )
        raise InvalidInput(problems) from None


# An action's name: what a reviewer reads to know what runs. Lowercase ASCII letters,
# digits and . _ - only, so that no look-alike letter from another script, zero-width
# character, trailing space or right-to-left override can pass for a registered name.
ACTION_NAME = re.compile(r"[a-z0-9][a-z0-9._-]{0,99}")
# Within those, what reads alike: 0 and o, 1, i and l, rn and m, vv and w, . _ and -.
LOOK_ALIKE = str.maketrans({"0": "o", "1": "l", "i": "l", "_": ".", "-": "."})


def look_alike(name: str) -> str:
    """``name`` as it reads at a glance: two names that give the same are confusable."""
    return re.sub(r"\.+", ".", name.translate(LOOK_ALIKE).replace("rn", "m").replace("vv", "w"))


def check_name(action_name: str) -> None:
    """Refuse a proposed action's name that could pass for another: outside
    ``ACTION_NAME``, or reading like a registered action's without being it (an action
    the agent carries out itself would be shown as if Oversight did)."""
    if not ACTION_NAME.fullmatch(action_name):
        raise InvalidInput(
            "action: lowercase letters, digits, '.', '_' and '-' only, starting with a "
            "letter or digit, at most 100"
        )
    if action_name in registered():
        return
    reads = look_alike(action_name)
    if twin := next((name for name in registered() if look_alike(name) == reads), None):
        raise InvalidInput(
            f"action: {action_name} reads like the registered action {twin}: an action "
            "the agent carries out itself needs a name of its own"
        )


def check_proposal(action_name: str, arguments: dict, rollback_kind: str) -> str:
    """For a registered action, validate the proposal and return its executor."""
    return parse(action_name, arguments).executor(rollback_kind)
