"""LangGraph's external conformance suite against OversightSaver, on the test database.

The suite calls only the async methods (tests/test_langgraph_saver.py covers the sync
ones). Its checks are bare asserts caught by its runners: under ``python -O`` every check
would pass, so the test refuses to run there.
"""

import pytest
from asgiref.sync import async_to_sync
from langgraph.checkpoint.conformance import checkpointer_test, validate

from graphs.saver import OversightSaver

EXTENDED = ("delete_for_runs", "copy_thread", "prune")


@pytest.mark.django_db(transaction=True)  # the saver has a connection of its own
def test_the_saver_passes_every_check_of_the_conformance_suite(project):
    if not __debug__:
        pytest.fail("the conformance suite's checks are asserts: never run it under -O")

    @checkpointer_test(name="OversightSaver")
    async def factory():
        saver = OversightSaver(project=project)
        yield saver
        await saver.aclose()

    report = async_to_sync(validate)(factory)

    failures = {cap: result.failures for cap, result in report.results.items() if result.failures}
    assert report.passed_all_base(), failures
    # An optional capability that was not detected has passed=None, which passed_all()
    # ignores: each is asserted by name.
    for capability in EXTENDED:
        assert report.results[capability].passed is True, (capability, failures)
    assert sum(r.tests_passed for r in report.results.values()) == 81
