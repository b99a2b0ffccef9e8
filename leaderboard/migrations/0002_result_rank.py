"""Ranks are stored (leaderboard/ranking.py): the column, and the ranks of the results already there."""

from django.db import migrations, models


def store_ranks(apps, schema_editor):
    # Ranks have one definition, leaderboard.ranking.rerank, which works on the current model: run it
    # only where there is something to rank (a fresh database skips it, whatever later migrations add).
    if not apps.get_model("leaderboard", "Result").objects.exists():
        return
    from leaderboard import ranking

    ranking.rerank()


class Migration(migrations.Migration):

    dependencies = [
        ("leaderboard", "0001_initial"),
    ]

    operations = [
        migrations.AddField(
            model_name="result",
            name="rank",
            field=models.PositiveIntegerField(blank=True, db_index=True, editable=False,
                                              help_text="place by score within the division on the live list",
                                              null=True),
        ),
        migrations.RunPython(store_ranks, migrations.RunPython.noop),
    ]
