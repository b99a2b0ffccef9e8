"""Result.failed_checks: the report's failed checks kept beside it (a list reads these, not whole reports);
Result.audit_attempts: the deliveries of its audit that started work (bounded by AIPERF_AUDIT_MAX_ATTEMPTS)."""

from django.db import migrations, models


def fill(apps, schema_editor):
    Result = apps.get_model("leaderboard", "Result")
    changed = []
    for result in Result.objects.only("pk", "report").iterator(chunk_size=2000):
        result.failed_checks = [c for c in (result.report or {}).get("checks", []) if not c.get("passed")]
        if result.failed_checks:
            changed.append(result)
        if len(changed) >= 2000:
            Result.objects.bulk_update(changed, ["failed_checks"])
            changed = []
    Result.objects.bulk_update(changed, ["failed_checks"])


class Migration(migrations.Migration):

    dependencies = [
        ("leaderboard", "0015_edition_calendar"),
    ]

    operations = [
        migrations.AddField(
            model_name="result",
            name="failed_checks",
            field=models.JSONField(blank=True, default=list, editable=False,
                                   help_text="the report's checks that did not pass"),
        ),
        migrations.RunPython(fill, migrations.RunPython.noop),
        migrations.AddField(
            model_name="result",
            name="audit_attempts",
            field=models.PositiveSmallIntegerField(default=0, editable=False,
                                                   help_text="deliveries of its audit task that started work"),
        ),
    ]
