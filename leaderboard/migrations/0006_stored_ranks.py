"""Indexes of the list's reads at 100,000 results: the stored ranks (partial: live rows only) and the sort
columns (leaderboard/models.py Result.Meta.indexes; bench/site_latency.py --results 100000)."""

import django.db.models.functions.comparison
from django.db import migrations, models


class Migration(migrations.Migration):

    dependencies = [
        ('leaderboard', '0005_submission_error'),
    ]

    operations = [
        migrations.AddIndex(
            model_name='result',
            index=models.Index(condition=models.Q(('rank__isnull', False)), fields=['rules', 'division', 'rank', 'id'], name='result_list_rank'),
        ),
        migrations.AddIndex(
            model_name='result',
            index=models.Index(condition=models.Q(('rank_all__isnull', False)), fields=['rules', 'division', 'rank_all', 'id'], name='result_list_rank_all'),
        ),
        migrations.AddIndex(
            model_name='result',
            index=models.Index(fields=['regulated_score_ops'], name='result_regulated_idx'),
        ),
        migrations.AddIndex(
            model_name='result',
            index=models.Index(fields=['max_accuracy'], name='result_accuracy_idx'),
        ),
        migrations.AddIndex(
            model_name='result',
            index=models.Index(fields=['efficiency'], name='result_efficiency_idx'),
        ),
        migrations.AddIndex(
            model_name='result',
            index=models.Index(fields=['duration_s'], name='result_duration_idx'),
        ),
        migrations.AddIndex(
            model_name='result',
            index=models.Index(fields=['verified_at'], name='result_verified_idx'),
        ),
        migrations.AddIndex(
            model_name='result',
            index=models.Index(fields=['verification_level'], name='result_level_idx'),
        ),
        migrations.AddIndex(
            model_name='result',
            index=models.Index(django.db.models.functions.comparison.Coalesce('published_at', 'verified_at'), name='result_date_idx'),
        ),
    ]
