"""A feed entry is written without its number and numbered by a reader once committed
(``runs.models.FeedEvent``): numbering it in the checkpoint's transaction held the
token's counter until that transaction ended, so a writer paused in one run held up
every other run of the same agent. Entries already numbered keep their numbers; the
index of those waiting for one is built without stopping writers (``_online``)."""

from django.db import migrations, models

from runs.migrations._online import add_index, remove_index

UNNUMBERED = models.Index(
    condition=models.Q(("seq__isnull", True)),
    fields=["token", "id"],
    name="feed_unnumbered_idx",
)


def create(apps, schema_editor) -> None:
    add_index(schema_editor, apps.get_model("runs", "FeedEvent"), UNNUMBERED)


def drop(apps, schema_editor) -> None:
    remove_index(schema_editor, apps.get_model("runs", "FeedEvent"), UNNUMBERED)


class Migration(migrations.Migration):
    atomic = False

    dependencies = [
        ("runs", "0019_delivery_retries"),
    ]

    operations = [
        migrations.AlterField(
            model_name="feedevent",
            name="seq",
            field=models.PositiveBigIntegerField(null=True),
        ),
        migrations.SeparateDatabaseAndState(
            state_operations=[migrations.AddIndex(model_name="feedevent", index=UNNUMBERED)],
            database_operations=[migrations.RunPython(create, drop)],
        ),
    ]
