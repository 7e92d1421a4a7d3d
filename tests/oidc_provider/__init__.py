"""The suite's own OpenID Connect provider: a second, tiny Django site that the tests of
single sign-on (#36) run in a subprocess on loopback (tests/identity_provider.py), with
django-oauth-toolkit's OpenID Connect support. It signs ID tokens with its own RSA key,
keeps its own sign-in sessions and database, and never reads Oversight's settings."""
