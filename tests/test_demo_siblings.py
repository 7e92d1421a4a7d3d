"""The demo shows the siblings card (#34 item 8): ``seed_demo`` leaves two transfers
waiting on the marketing account, each within what it holds, together more, proposed
for someone other than the demo's reviewers, who may decide on them."""

import re
from io import StringIO

import pytest
from django.contrib.auth import get_user_model
from django.core.management import call_command

from runs.models import Operation
from runs.permissions import own_interest
from tests.helpers import page_of
from tests.test_siblings import listed, together

pytestmark = pytest.mark.django_db


@pytest.fixture
def demo(settings, tmp_path, monkeypatch):
    settings.OVERSIGHT_ARTIFACT_ROOT = tmp_path
    monkeypatch.setenv("OVERSIGHT_DEMO_PASSWORD", "demo-password-for-tests")
    call_command("seed_demo", stdout=StringIO())


def test_two_demo_transfers_each_show_the_other_and_that_together_they_overdraw(client, demo):
    reviewer = get_user_model().objects.get(username="reviewer")
    stand, ads = (Operation.objects.get(call_id=c) for c in ("book-stand", "pay-launch-ads"))
    assert own_interest(stand, reviewer) is own_interest(ads, reviewer) is None
    client.force_login(reviewer)

    page = client.get(page_of(stand)).text

    card = re.search(r'<section class="card siblings".*?</section>', page, re.S)[0]
    assert "Also waiting on account marketing" in card
    assert listed(card) == [ads.pk]
    assert "marketing → brightline-ads: 9,800.00" in card
    assert together(card) == (
        "Together they would overdraw marketing, though each fits on its own: these 2 "
        "transfers, this one included, draw 22,300.00 from it, 2,300.00 more than the "
        "20,000.00 it holds now. Those carried out first go through; the others will be "
        "refused."
    )
    assert f'action="/operations/{stand.pk}/decide/"' in page  # The reviewer may decide.
