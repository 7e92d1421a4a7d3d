"""The claims of the provider's ID tokens and userinfo answers, as an enterprise identity
provider's: the standard ones of the ``email`` and ``profile`` scopes, and ``groups`` (the
claim Oversight maps to project roles) under a scope of its own."""

from oauth2_provider.oauth2_validators import OAuth2Validator


class Claims(OAuth2Validator):
    # DOT gives a claim only if the scope named here was granted: ``groups`` is given
    # only to a relying party that asked for the ``groups`` scope.
    oidc_claim_scope = {**OAuth2Validator.oidc_claim_scope, "groups": "groups"}

    def get_additional_claims(self) -> dict:
        """Functions of the request (DOT's request-agnostic form), so that discovery lists
        every claim in ``claims_supported``; each reads the user as they are at the time
        of the token or userinfo request, so a change of groups shows at the next sign-in."""
        return {
            "email": lambda request: request.user.email,
            "email_verified": lambda request: request.user.profile.email_verified,
            "preferred_username": lambda request: request.user.username,
            "name": lambda request: request.user.profile.name,
            "groups": lambda request: sorted(request.user.groups.values_list("name", flat=True)),
        }
