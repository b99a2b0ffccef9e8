"""Results say whether the service witnessed their run (the list's trust line), filled from their reports."""

from typing import Any

from django.db import migrations, models


def fill(apps: Any, schema_editor: Any) -> None:
    Result = apps.get_model("leaderboard", "Result")
    witnessed = []
    for pk, report in Result.objects.values_list("pk", "report").iterator(chunk_size=2000):
        passed = {c.get("name") for c in (report or {}).get("checks", []) if c.get("passed")}
        if {"witness.token", "witness.receipts"} <= passed:
            witnessed.append(pk)
    for start in range(0, len(witnessed), 5000):
        Result.objects.filter(pk__in=witnessed[start:start + 5000]).update(witnessed=True)


class Migration(migrations.Migration):

    dependencies = [
        ("leaderboard", "0012_versions_of_rules"),
    ]

    operations = [
        migrations.AddField(
            model_name="result",
            name="witnessed",
            field=models.BooleanField(default=False, help_text="the service witnessed the run: its run token and "
                                                               "receipts passed (witness.token, witness.receipts)"),
        ),
        migrations.RunPython(fill, migrations.RunPython.noop),
    ]
