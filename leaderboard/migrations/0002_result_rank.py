"""Ranks are stored (leaderboard/ranking.py). The ranks of results already there are stored after every
`migrate` (leaderboard/apps.py), with the ranking's one definition and the current model."""

from django.db import migrations, models


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
    ]
