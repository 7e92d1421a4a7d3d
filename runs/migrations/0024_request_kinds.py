"""Request kinds (#34): a human request says what it asks, a question, a sign-off, a
choice or data, instead of leaving it to be read from its choices and schema (which left
no way to ask a question: a request with neither was a sign-off). Requests already asked
keep their meaning: choices make a choice, a schema data, and neither a sign-off. A data
request's form follows its schema's properties in the agent's order, kept apart because
PostgreSQL's jsonb reorders an object's keys (the order of those already asked is lost
there: their forms follow the stored one)."""

from django.db import migrations, models


def name_kinds(apps, schema_editor) -> None:
    HumanRequest = apps.get_model("runs", "HumanRequest")
    HumanRequest.objects.filter(choices__isnull=False).update(kind="choice")
    HumanRequest.objects.filter(answer_schema__isnull=False).update(kind="data")


class Migration(migrations.Migration):
    dependencies = [("runs", "0023_queue_version_indexes")]

    operations = [
        migrations.AddField(
            model_name="humanrequest",
            name="kind",
            field=models.CharField(
                choices=[
                    ("question", "Question"),
                    ("sign_off", "Sign-off"),
                    ("choice", "Choice"),
                    ("data", "Data"),
                ],
                default="sign_off",
                max_length=8,
            ),
            preserve_default=False,
        ),
        migrations.AddField(
            model_name="humanrequest",
            name="property_order",
            field=models.JSONField(blank=True, null=True),
        ),
        migrations.RunPython(name_kinds, migrations.RunPython.noop),
        migrations.AddConstraint(
            model_name="humanrequest",
            constraint=models.CheckConstraint(
                condition=models.Q(
                    models.Q(
                        ("answer_schema__isnull", True),
                        ("choices__isnull", False),
                        ("kind", "choice"),
                    ),
                    models.Q(
                        ("answer_schema__isnull", False),
                        ("choices__isnull", True),
                        ("kind", "data"),
                    ),
                    models.Q(
                        ("answer_schema__isnull", True),
                        ("choices__isnull", True),
                        ("kind__in", ["question", "sign_off"]),
                    ),
                    _connector="OR",
                ),
                name="request_kind_fits_its_shape",
            ),
        ),
        migrations.AddConstraint(
            model_name="humanrequest",
            constraint=models.CheckConstraint(
                condition=models.Q(
                    ("answer_kind__in", ["", "reject"]),
                    models.Q(("answer_kind", "approve"), ("kind", "sign_off")),
                    models.Q(("answer_kind", "choose"), ("kind", "choice")),
                    models.Q(("answer_kind", "answer"), ("kind__in", ["question", "data"])),
                    _connector="OR",
                ),
                name="request_answer_fits_its_kind",
            ),
        ),
    ]
