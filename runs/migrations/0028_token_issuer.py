"""Each agent token records who issued it, who may then not decide on what its agent
proposes or asks (four eyes), and when its owner accepted it: a token that acts for
another member than its issuer waits for that member's acceptance before it acts (#35).
Tokens issued before keep no issuer (pages say "not recorded") and count as accepted,
so that every agent at work goes on working.
"""

import django.db.models.deletion
from django.conf import settings
from django.db import migrations, models
from django.db.models import F


def accept_existing(apps, schema_editor) -> None:
    apps.get_model("runs", "AgentToken").objects.update(accepted_at=F("created_at"))


class Migration(migrations.Migration):
    dependencies = [
        ("runs", "0027_operation_target"),
        migrations.swappable_dependency(settings.AUTH_USER_MODEL),
    ]

    operations = [
        migrations.AddField(
            model_name="agenttoken",
            name="issued_by",
            field=models.ForeignKey(
                blank=True,
                null=True,
                on_delete=django.db.models.deletion.PROTECT,
                related_name="issued_agent_tokens",
                to=settings.AUTH_USER_MODEL,
            ),
        ),
        migrations.AddField(
            model_name="agenttoken",
            name="accepted_at",
            field=models.DateTimeField(blank=True, null=True),
        ),
        migrations.RunPython(accept_existing, migrations.RunPython.noop),
    ]
