"""Submissions keep the rules version they were verified under; editions the rules versions they admitted to
their official ranking (for editions frozen before: the versions of their official entries)."""

from typing import Any

from django.db import migrations, models


def fill(apps: Any, schema_editor: Any) -> None:
    Submission, Result, Edition = (apps.get_model("leaderboard", n) for n in ("Submission", "Result", "Edition"))
    for version in Result.objects.values_list("rules_version", flat=True).distinct():
        Submission.objects.filter(result__rules_version=version).update(rules_version=version)
    for edition in Edition.objects.exclude(frozen_at=None):
        versions = (edition.entries.filter(division="official").values_list("result__rules_version", flat=True)
                    .distinct())
        edition.rules_versions = sorted(set(versions))
        edition.save(update_fields=["rules_versions"])


class Migration(migrations.Migration):

    dependencies = [
        ("leaderboard", "0011_proof_of_work"),
    ]

    operations = [
        migrations.AddField(
            model_name="edition",
            name="rules_versions",
            field=models.JSONField(blank=True, default=list,
                                   help_text="the rules versions admitted to its official ranking, as frozen"),
        ),
        migrations.AddField(
            model_name="submission",
            name="rules_version",
            field=models.CharField(blank=True, default="", max_length=32,
                                   help_text="the rules version it was verified under (a re-verification and "
                                             "aiperf_rebuild verify it under the same)"),
        ),
        migrations.RunPython(fill, migrations.RunPython.noop),
    ]
