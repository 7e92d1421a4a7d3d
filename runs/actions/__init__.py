"""Actions: the plugins Oversight's workers execute. See ``runs.actions.base.Action``."""
