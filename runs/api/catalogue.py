"""The action catalogue: what Oversight's workers can execute, with each action's
argument schema (also in the OpenAPI document's components, ``Arguments.<name>``),
the rollback kinds it allows and what its precondition checks."""

import inspect

from ninja import Router

from runs.actions.base import Action
from runs.actions.registry import registered
from runs.api import schemas as s
from runs.api.endpoints import PROBLEMS

router = Router()
REF_PREFIX = "#/components/schemas/"


@router.get("/actions", response={200: list[s.ActionOut], **PROBLEMS}, tags=["operations"])
def actions(request):
    """The registered actions, by name. A proposal of one of them is executed by
    Oversight's workers; any other action name is executed by the agent itself."""
    return [entry(action) for action in sorted(registered().values(), key=lambda a: a.name)]


def entry(action: Action) -> s.ActionOut:
    return s.ActionOut(
        name=action.name,
        description=action.description or inspect.getdoc(type(action)) or "",
        executor="server",
        rollback_kinds=list(action.rollback_kinds or (action.rollback_kind,)),
        arguments_schema=arguments_schema(action),
        precondition=action.checks,
    )


def arguments_schema(action: Action, ref_template: str = "#/$defs/{model}") -> dict:
    """The JSON Schema an action's arguments must fit, as a proposal sends them (by
    alias: ledger.transfer's ``from`` and ``to``)."""
    return action.Arguments.model_json_schema(by_alias=True, ref_template=ref_template)


def component_name(action: Action) -> str:
    return f"Arguments.{action.name}"


def arguments_choice() -> dict:
    """``ProposalIn.arguments`` in the OpenAPI document: one of the registered actions'
    arguments (by ``$ref``), or any object for an action the agent executes."""
    actions = sorted(registered().values(), key=lambda a: a.name)
    return {
        "description": "A registered action's arguments follow its schema (GET /actions; "
        "components Arguments.<action>); any other action takes any object.",
        "anyOf": [
            *({"$ref": REF_PREFIX + component_name(action)} for action in actions),
            {"type": "object"},
        ],
    }


def openapi_components() -> dict[str, dict]:
    """Each action's arguments schema for the OpenAPI document's components, with the
    models it nests (``$defs``) beside it, named after the action."""
    components = {}
    for action in registered().values():
        template = REF_PREFIX + component_name(action) + ".{model}"
        schema = arguments_schema(action, template)
        for nested, definition in schema.pop("$defs", {}).items():
            components[f"{component_name(action)}.{nested}"] = definition
        components[component_name(action)] = schema
    return components
