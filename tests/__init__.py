import pytest

# Fixture modules that test modules also import from (``pytest_plugins``): their
# asserts are rewritten like the tests' own only if registered before that import.
pytest.register_assert_rewrite(
    "tests.api_helpers", "tests.client_helpers", "tests.identity_provider"
)
