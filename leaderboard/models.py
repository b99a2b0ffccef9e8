"""The service's data (docs/design.md section 6).

Every figure of a Result comes from `aiperf_runner.spec.verify` run by the service on the stored
bundle (leaderboard/pipeline.py); nothing here recomputes a score.
"""

from __future__ import annotations

import hashlib
import secrets
from typing import Any

from django.db import models
from django.db.models.functions import Coalesce
from django.urls import reverse
from django.utils import timezone


def hash_token(token: str) -> str:
    return hashlib.sha256(token.encode()).hexdigest()


class Division(models.TextChoices):
    OFFICIAL = "official", "Official"
    OPEN = "open", "Open"


class Site(models.Model):
    """An organisation that runs the benchmark and submits results with its API token."""

    name = models.CharField(max_length=200, unique=True)
    country = models.CharField(max_length=2, help_text="ISO 3166-1 alpha-2 code, e.g. CN, US, DE")
    url = models.URLField(blank=True)
    # Only the SHA-256 of the API token is stored; the token is shown once, when it is made.
    token_hash = models.CharField(max_length=64, unique=True, editable=False)
    token_prefix = models.CharField(max_length=8, editable=False, help_text="first characters, to tell tokens apart")
    created_at = models.DateTimeField(default=timezone.now)

    class Meta:
        ordering = ["name"]

    def __str__(self) -> str:
        return self.name

    def new_token(self) -> str:
        """Replace the site's API token with a new one and return it (save() is the caller's)."""
        token = secrets.token_urlsafe(32)
        self.token_hash = hash_token(token)
        self.token_prefix = token[:8]
        return token

    def save(self, *args, **kwargs):
        if not self.token_hash:
            self.new_token()  # a site made in the admin gets a token nobody knows until rotated
        self.country = self.country.upper()
        super().save(*args, **kwargs)


class SiteKey(models.Model):
    """An Ed25519 public key a site signs its bundles with (`aiperf-runner keygen` / `register`)."""

    site = models.ForeignKey(Site, on_delete=models.CASCADE, related_name="keys")
    public_key = models.CharField(max_length=64, unique=True, help_text="base64 of the 32 raw public-key bytes")
    fingerprint = models.CharField(max_length=48, unique=True)
    label = models.CharField(max_length=200, blank=True)
    created_at = models.DateTimeField(default=timezone.now)
    revoked_at = models.DateTimeField(null=True, blank=True)

    class Meta:
        ordering = ["site", "created_at"]

    def __str__(self) -> str:
        return f"{self.fingerprint} ({self.site})"

    @property
    def revoked(self) -> bool:
        return self.revoked_at is not None


class System(models.Model):
    """A machine of a site: registered by the site (what its results are judged by), or, for a result
    of an unregistered run, described by its run.json (`registered` False; open division only)."""

    class Status(models.TextChoices):
        APPROVED = "approved", "Approved"
        PENDING = "pending", "Pending: waiting for a list maintainer"
        REJECTED = "rejected", "Rejected by a list maintainer"
        UNREGISTERED = "unregistered", "Unregistered: described by its runs only"

    site = models.ForeignKey(Site, on_delete=models.CASCADE, related_name="systems")
    name = models.CharField(max_length=200, blank=True)
    vendor = models.CharField(max_length=100, blank=True, db_index=True)
    accelerator_model = models.CharField(max_length=200, db_index=True)
    accelerator_count = models.PositiveIntegerField(default=0, help_text="accelerators in the whole system")
    nodes = models.PositiveIntegerField(default=1)
    interconnect = models.CharField(max_length=200, blank=True)
    cpu_model = models.CharField(max_length=200, blank=True)
    cpu_cores = models.PositiveIntegerField(default=0)
    peak_flops = models.JSONField(default=dict, blank=True, help_text="declared peak FLOP/s per precision")
    accelerators_per_node = models.PositiveIntegerField(default=0)
    memory_per_node = models.BigIntegerField(default=0, help_text="bytes")
    registered = models.BooleanField(default=False, db_index=True)
    status = models.CharField(max_length=16, choices=Status.choices, default=Status.UNREGISTERED, db_index=True)
    status_reason = models.CharField(max_length=300, blank=True)
    # The hardware facts that identify an unregistered system among the site's runs (registered: unique).
    identity = models.CharField(max_length=64, editable=False)
    created_at = models.DateTimeField(default=timezone.now)

    class Meta:
        ordering = ["site", "accelerator_model", "nodes"]
        constraints = [models.UniqueConstraint(fields=["site", "identity"], name="system_identity_per_site")]

    def __str__(self) -> str:
        return self.name or self.describe()

    def describe(self) -> str:
        if self.accelerator_count:
            return f"{self.nodes} node(s), {self.accelerator_count} x {self.accelerator_model}"
        return f"{self.nodes} node(s), {self.cpu_model or 'CPU'}"


class AcceleratorPeak(models.Model):
    """A list maintainer's peak FLOP/s for an accelerator model spec/peaks.py's table lacks, with its source."""

    accelerator_model = models.CharField(max_length=200, unique=True, help_text="as systems register it")
    vendor = models.CharField(max_length=100, blank=True)
    fp32 = models.FloatField(help_text="dense peak FLOP/s per accelerator")
    tf32 = models.FloatField()
    bf16 = models.FloatField()
    fp16 = models.FloatField()
    source = models.CharField(max_length=500, help_text="datasheet URL or where the figures come from")
    added_by = models.CharField(max_length=150, blank=True)
    created_at = models.DateTimeField(default=timezone.now)

    def __str__(self) -> str:
        return self.accelerator_model

    def per_precision(self) -> dict[str, float]:
        return {"fp32": self.fp32, "tf32": self.tf32, "bf16": self.bf16, "fp16": self.fp16}


class WitnessKey(models.Model):
    """A public key of the service's witness (the private key is the file AIPERF_WITNESS_KEY_FILE).
    Retired keys stay: receipts they signed remain valid."""

    fingerprint = models.CharField(max_length=48, unique=True)
    public_key = models.CharField(max_length=64, unique=True, help_text="base64 of the 32 raw bytes")
    created_at = models.DateTimeField(default=timezone.now)
    retired_at = models.DateTimeField(null=True, blank=True)

    class Meta:
        ordering = ["-created_at"]

    def __str__(self) -> str:
        return self.fingerprint


class RunAttempt(models.Model):
    """A run the service issued a token for: every started run is on the record, submitted or not."""

    run_id = models.CharField(max_length=32, unique=True)
    site = models.ForeignKey(Site, on_delete=models.CASCADE, related_name="run_attempts")
    system = models.ForeignKey(System, on_delete=models.PROTECT, related_name="run_attempts")
    statement = models.JSONField(help_text="the token's signed statement")
    signature = models.CharField(max_length=100)
    issued_at = models.DateTimeField(db_index=True)
    heartbeat_interval_s = models.FloatField()
    log_id = models.CharField(max_length=64, blank=True, help_text="hash of the first line of the log whose "
                              "heartbeats the token carried first: a token starts one run")
    reused = models.BooleanField(default=False, help_text="heartbeats came from a second log")
    chain_breaks = models.PositiveIntegerField(default=0, help_text="heartbeats refused for not naming the last "
                                               "receipt issued: a beacon thrown away or a second log")
    rehearsal = models.BooleanField(default=False, help_text="a rehearsal token (run --rehearsal): its run is "
                                    "verified for its site only, never ranked, and counted apart")
    heartbeats = models.PositiveIntegerField(default=0)
    last_heartbeat_at = models.DateTimeField(null=True, blank=True)
    submission = models.OneToOneField("Submission", on_delete=models.SET_NULL, null=True, blank=True,
                                      related_name="run_attempt")

    class Meta:
        ordering = ["-issued_at"]

    def __str__(self) -> str:
        return f"run {self.run_id}"


class Heartbeat(models.Model):
    """One heartbeat of a witnessed run and the receipt the service gave for it."""

    attempt = models.ForeignKey(RunAttempt, on_delete=models.CASCADE, related_name="receipts")
    heartbeat_seq = models.PositiveIntegerField()
    head = models.CharField(max_length=64)
    received_at = models.FloatField(help_text="the service's clock, UTC seconds")
    beacon = models.CharField(max_length=64)
    key = models.CharField(max_length=48, help_text="witness key fingerprint")
    signature = models.CharField(max_length=100)
    work = models.FloatField(default=0.0)
    epochs = models.PositiveIntegerField(default=0)
    best_accuracy = models.FloatField(null=True, blank=True)
    sent_at = models.FloatField(null=True, blank=True)
    chained = models.BooleanField(default=False, help_text="the receipt names the one before it (previous_receipt); "
                                  "receipts issued before receipts were chained were signed without it")
    previous_receipt = models.CharField(max_length=64, null=True, blank=True)
    digest = models.CharField(max_length=64, blank=True, help_text="SHA-256 of the signed receipt statement")

    class Meta:
        ordering = ["attempt", "heartbeat_seq"]
        constraints = [models.UniqueConstraint(fields=["attempt", "heartbeat_seq"], name="one_receipt_per_heartbeat")]

    def receipt(self) -> dict[str, object]:
        receipt = {"run_id": self.attempt.run_id, "heartbeat_seq": self.heartbeat_seq, "head": self.head,
                   "received_at": self.received_at, "beacon": self.beacon, "key": self.key,
                   "signature": self.signature}
        if self.chained:
            receipt["previous_receipt"] = self.previous_receipt
        return receipt


class Submission(models.Model):
    """An uploaded bundle and where it is in the verification pipeline."""

    class Status(models.TextChoices):
        RECEIVED = "received", "Received"
        VERIFYING = "verifying", "Verifying"
        VERIFIED = "verified", "Verified"
        REJECTED = "rejected", "Rejected"
        PUBLISHED = "published", "Published"
        WITHDRAWN = "withdrawn", "Withdrawn"

    DONE = (Status.VERIFIED, Status.REJECTED, Status.PUBLISHED, Status.WITHDRAWN)

    site = models.ForeignKey(Site, on_delete=models.PROTECT, related_name="submissions")
    key = models.ForeignKey(SiteKey, on_delete=models.PROTECT, null=True, blank=True, related_name="submissions")
    bundle = models.FileField(upload_to="bundles/", max_length=300, blank=True)
    sha256 = models.CharField(max_length=64, unique=True)
    size = models.BigIntegerField()
    run_id = models.CharField(max_length=64, unique=True)
    rehearsal = models.BooleanField(default=False, help_text="a rehearsal's run, submitted as one (submit "
                                    "--rehearsal): shown to its site only, never on any list")
    status = models.CharField(max_length=16, choices=Status.choices, default=Status.RECEIVED, db_index=True)
    reasons = models.JSONField(default=list, blank=True, help_text="[{check, message}] of a rejection")
    created_at = models.DateTimeField(default=timezone.now)
    updated_at = models.DateTimeField(auto_now=True)
    verified_at = models.DateTimeField(null=True, blank=True)
    rules_version = models.CharField(max_length=32, blank=True, default="",
                                     help_text="the rules version it was verified under (a re-verification and "
                                               "aiperf_rebuild verify it under the same)")
    # The service's challenge (proof of training): the trials whose kept weights it asked for.
    challenge = models.JSONField(default=list, blank=True, help_text="trial ids whose weights the audit re-evaluates")
    # The work re-executed (spec/proof.py): {"segments": [...], "best": {...}}, drawn with the challenge.
    proof = models.JSONField(default=dict, blank=True,
                             help_text="the committed segments the audit re-executes and the best checkpoint it "
                                       "re-evaluates")
    challenged_at = models.DateTimeField(null=True, blank=True)
    # The conditional claim that makes verification safe to re-run (leaderboard/pipeline.py).
    claim_token = models.CharField(max_length=32, blank=True, default="")
    claimed_at = models.DateTimeField(null=True, blank=True)
    attempts = models.PositiveIntegerField(default=0)
    # Why the last attempt stopped on a fault of the service (database, disk), not of the bundle; cleared
    # when an attempt ends. beat's resume_stuck retries the submission (leaderboard/tasks.py).
    error = models.TextField(blank=True, default="", help_text="the service-side error that stopped the last "
                                                               "verification attempt; the service retries it")

    class Meta:
        ordering = ["-created_at"]

    def __str__(self) -> str:
        return f"submission {self.pk} ({self.status})"

    def states_wanted(self) -> dict[str, str]:
        """The committed states the audit asks for: digest -> the trial whose states/ holds it."""
        return wanted_states(self.proof)


LLM_RULES = "llm-v1"  # AIPerf-LLM's FLOP rules (spec/llmflops.py): its results are ranked apart by them


def default_rules(workload: str | None) -> str:
    """The FLOP rules of a workload's default list: v2 for images (v1-compat is asked for), llm-v1 for AIPerf-LLM."""
    return LLM_RULES if workload == "llm" else "v2"


def failed_of(report: dict[str, Any] | None) -> list[dict[str, Any]]:
    """The checks of a verification report that did not pass, in its order."""
    return [c for c in (report or {}).get("checks", []) if not c.get("passed")]


def wanted_states(proof: dict[str, Any] | None) -> dict[str, str]:
    """The committed states a submission's `proof` asks for: digest -> the trial whose files hold it."""
    return {sha: trial for sha, (trial, _) in _wanted(proof).items()}


def wanted_state_list(proof: dict[str, Any] | None) -> list[dict[str, str]]:
    """The states a submission's `proof` asks for, as the API lists them: [{trial, sha256, path}], `path` the
    file in the run directory that holds it (an image trial's committed state, an AIPerf-LLM trial's weights or
    AdamW moments)."""
    return [{"trial": trial, "sha256": sha, "path": path} for sha, (trial, path) in sorted(_wanted(proof).items())]


def _wanted(proof: dict[str, Any] | None) -> dict[str, tuple[str, str]]:
    """digest -> (trial, its file in the run directory) of every state `proof` asks for: the image workload's
    segment ends and best checkpoint (spec/proof.py), AIPerf-LLM's re-executed trials' weights and their parents'
    weights and moments (leaderboard/llmaudit.py `draw`)."""
    proof = proof or {}
    wanted: dict[str, tuple[str, str]] = {}

    def state(sha: str, trial: str) -> None:
        wanted[sha] = (trial, f"trials/{trial}/states/{sha}.safetensors")

    for seg in proof.get("segments") or []:
        state(seg["start"], seg["trial"])
        state(seg["end"], seg["trial"])
    best = proof.get("best")
    if best:
        state(best["sha256"], best["trial"])
    for drawn in proof.get("reexecute") or []:
        wanted[drawn["weights"]] = (drawn["trial"], f"trials/{drawn['trial']}/weights.safetensors")
        if drawn.get("parent"):
            parent = drawn["parent"]
            wanted[drawn["parent_weights"]] = (parent, f"trials/{parent}/weights.safetensors")
            wanted[drawn["parent_optimizer"]] = (parent, f"trials/{parent}/optimizer.safetensors")
    return wanted


class ResultQuerySet(models.QuerySet["Result"]):
    def live(self) -> ResultQuerySet:
        """The results on the live list: published (at once, or after approval), not withdrawn, not
        waiting for (or refused by) a maintainer's review, in the official division audited, and never a
        rehearsal."""
        return self.filter(published=True, submission__rehearsal=False, submission__status__in=[
            Submission.Status.VERIFIED, Submission.Status.PUBLISHED]).exclude(
            review__in=[Result.Review.PENDING, Result.Review.REJECTED]).exclude(
            division=Division.OFFICIAL, audit=Result.Audit.PENDING)

    def listed(self) -> ResultQuerySet:
        """The live list as stored: `rank_all` is set on every live result and NULL on every other one
        (leaderboard/ranking.py, in the transaction that changes the list), so this is `live()` read
        from one indexed column of this table, with no join (the list's pages and the API read it)."""
        return self.filter(rank_all__isnull=False)

    def entries(self) -> ResultQuerySet:
        """What the list shows by default: each system's best live result (ranked)."""
        return self.live().filter(rank__isnull=False)


class Result(models.Model):
    """What the service's own verification of a submission gave."""

    class Level(models.TextChoices):
        FULL = "full", "Full: every check passed"
        PARTIAL = "partial", "Partial: integrity and plausibility passed, some checks did not"

    class Audit(models.TextChoices):
        NONE = "", "Not audited (unwitnessed: open division)"
        PENDING = "pending", "Waiting for the challenged trials' weights, the service's data or the re-evaluation"
        PASSED = "passed", "Passed: the weights are the graphs' and reach the logged accuracies"
        FAILED = "failed", "Failed"
        # Generated figures (devdata/demo.py): no weights or committed states exist, so nothing can be re-executed,
        # and a demo result must not say it was.
        DEMO = "demo", "Demo data: generated figures with no work behind them, so nothing to audit"

    class Review(models.TextChoices):
        NONE = "", "Not needed"
        PENDING = "pending", "Waiting for a list maintainer"
        APPROVED = "approved", "Approved by a list maintainer"
        REJECTED = "rejected", "Rejected by a list maintainer"

    class Workload(models.TextChoices):
        IMAGE = "image", "AIPerf (AutoML on images)"
        LLM = "llm", "AIPerf-LLM (AutoML on language models)"

    submission = models.OneToOneField(Submission, on_delete=models.CASCADE, related_name="result")
    workload = models.CharField(max_length=8, choices=Workload.choices, default=Workload.IMAGE, db_index=True,
                                help_text="which benchmark: each has its own list (its FLOP rules rank it apart)")
    best_loss = models.FloatField(null=True, blank=True,
                                  help_text="AIPerf-LLM: the best validation loss, nats per byte (accuracy is e^-loss)")
    site = models.ForeignKey(Site, on_delete=models.CASCADE, related_name="results")
    system = models.ForeignKey(System, on_delete=models.PROTECT, related_name="results")
    run_id = models.CharField(max_length=64, unique=True)
    division = models.CharField(max_length=16, choices=Division.choices, db_index=True)
    rules = models.CharField(max_length=16, default="v2", db_index=True, help_text="FLOP rules: v2 or v1-compat")
    preset = models.CharField(max_length=32, blank=True)
    precision = models.CharField(max_length=8, blank=True)
    score_ops = models.FloatField(db_index=True)
    regulated_score_ops = models.FloatField()
    max_accuracy = models.FloatField()
    duration_s = models.FloatField()
    peak_flops = models.FloatField(null=True, blank=True, help_text="declared peak FLOP/s at the run's precision")
    efficiency = models.FloatField(null=True, blank=True, help_text="score / peak")
    trials_finished = models.PositiveIntegerField(default=0)
    epochs = models.PositiveIntegerField(default=0)
    rules_version = models.CharField(max_length=32)
    spec_version = models.CharField(max_length=16, blank=True)
    runner_version = models.CharField(max_length=32, blank=True)
    verifier_version = models.CharField(max_length=64, db_index=True)
    verification_level = models.CharField(max_length=16, choices=Level.choices)
    report = models.JSONField(help_text="the verification report (spec.verify) without its series")
    # The report's failed checks, kept beside it by save(): a list of 10,000 results reads these, not 10,000
    # reports of 7 kB (picking them out of the reports took a third of the submissions export).
    failed_checks = models.JSONField(default=list, blank=True, editable=False,
                                     help_text="the report's checks that did not pass")
    published = models.BooleanField(default=False, db_index=True)
    # Stored by leaderboard/ranking.py, the one place that ranks; NULL off the live list.
    rank = models.PositiveIntegerField(null=True, blank=True, db_index=True, editable=False,
                                       help_text="place on the live list (each system's best result, by score, "
                                                 "within its FLOP rules and division); NULL if not its system's best")
    rank_all = models.PositiveIntegerField(null=True, blank=True, db_index=True, editable=False,
                                           help_text="place among every live result of its rules and division")
    review = models.CharField(max_length=16, choices=Review.choices, default=Review.NONE, blank=True, db_index=True)
    audit = models.CharField(max_length=16, choices=Audit.choices, default=Audit.NONE, blank=True, db_index=True)
    witnessed = models.BooleanField(default=False, help_text="the service witnessed the run: its run token and "
                                                            "receipts passed (witness.token, witness.receipts)")
    audit_report = models.JSONField(default=dict, blank=True, help_text="{trials: {trial: [checks]}, message}")
    audit_attempts = models.PositiveSmallIntegerField(default=0, editable=False,
                                                      help_text="deliveries of its audit task that started work")
    audited_at = models.DateTimeField(null=True, blank=True)
    review_reason = models.TextField(blank=True)
    reviewed_at = models.DateTimeField(null=True, blank=True)
    reviewed_by = models.CharField(max_length=150, blank=True)
    published_at = models.DateTimeField(null=True, blank=True)
    verified_at = models.DateTimeField(default=timezone.now)
    started_at = models.DateTimeField(null=True, blank=True)

    objects = ResultQuerySet.as_manager()

    class Meta:
        ordering = ["-score_ops"]
        # The list's reads at 100,000 results (docs/service.md "Ranks and editions"): a page of a list in
        # rank order walks these partial indexes (live rows only) and a count reads them alone; the
        # other sorts walk their column's index. Filters on the system or site use theirs.
        indexes = [
            models.Index(fields=["rules", "division", "rank", "id"], name="result_list_rank",
                         condition=models.Q(rank__isnull=False)),
            models.Index(fields=["rules", "division", "rank_all", "id"], name="result_list_rank_all",
                         condition=models.Q(rank_all__isnull=False)),
            models.Index(fields=["regulated_score_ops"], name="result_regulated_idx"),
            models.Index(fields=["max_accuracy"], name="result_accuracy_idx"),
            models.Index(fields=["efficiency"], name="result_efficiency_idx"),
            models.Index(fields=["duration_s"], name="result_duration_idx"),
            models.Index(fields=["verified_at"], name="result_verified_idx"),
            models.Index(fields=["verification_level"], name="result_level_idx"),
            models.Index(Coalesce("published_at", "verified_at"), name="result_date_idx"),
        ]

    def __str__(self) -> str:
        return f"result {self.pk}: {self.score_ops:.4g} OPS ({self.site})"

    def save(self, *args: Any, **kwargs: Any) -> None:
        self.failed_checks = failed_of(self.report)
        fields = kwargs.get("update_fields")
        if fields is not None and "report" in fields:
            kwargs["update_fields"] = {*fields, "failed_checks"}
        super().save(*args, **kwargs)

    def trust(self) -> dict[str, Any]:
        """The trust line of the result (list, result page, downloads, API): its system registered and approved
        by a maintainer, the run witnessed by the service, the audit of its work, a maintainer's review."""
        system = self.system
        return trust_line(system.registered, system.status, self.witnessed, self.audit, self.review)

    def get_absolute_url(self) -> str:
        return reverse("result", args=[self.pk])


class Evidence(models.Model):
    """A challenged trial's weights, uploaded by the site (`aiperf-runner submit` / `evidence`)."""

    submission = models.ForeignKey(Submission, on_delete=models.CASCADE, related_name="evidence")
    trial = models.CharField(max_length=16)
    sha256 = models.CharField(max_length=64)
    size = models.BigIntegerField()
    file = models.FileField(upload_to="evidence/", max_length=300)
    uploaded_at = models.DateTimeField(default=timezone.now)

    class Meta:
        constraints = [models.UniqueConstraint(fields=["submission", "trial"], name="one_evidence_per_trial")]


class StateEvidence(models.Model):
    """A committed training state the audit asked for (a segment's start or end, the best checkpoint)."""

    submission = models.ForeignKey(Submission, on_delete=models.CASCADE, related_name="states")
    sha256 = models.CharField(max_length=64)
    size = models.BigIntegerField()
    file = models.FileField(upload_to="evidence/", max_length=300)
    uploaded_at = models.DateTimeField(default=timezone.now)

    class Meta:
        constraints = [models.UniqueConstraint(fields=["submission", "sha256"], name="one_state_per_digest")]


class EpochFingerprint(models.Model):
    """One digest of a verified submission's epoch sample (spec/fingerprint.py); unique: a log whose
    epochs repeat another submission's cannot be stored twice."""

    digest = models.CharField(max_length=32, unique=True)
    submission = models.ForeignKey(Submission, on_delete=models.CASCADE, related_name="epoch_fingerprints")


class ResultSeries(models.Model):
    """The score, regulated score and best accuracy over time (the report's series)."""

    result = models.OneToOneField(Result, on_delete=models.CASCADE, related_name="series")
    points = models.JSONField(default=list, help_text="[{t, work, score, regulated, max_accuracy}], t from run start")


class Trial(models.Model):
    """One trial of a result's run, for the timeline and architecture charts."""

    result = models.ForeignKey(Result, on_delete=models.CASCADE, related_name="trials")
    trial = models.CharField(max_length=16)
    arch_hash = models.CharField(max_length=64, blank=True)
    parent = models.CharField(max_length=16, blank=True)
    morphisms = models.JSONField(default=list, blank=True)
    slot = models.IntegerField(null=True, blank=True)
    round = models.IntegerField(null=True, blank=True)
    started_s = models.FloatField(null=True, blank=True, help_text="seconds from run start")
    ended_s = models.FloatField(null=True, blank=True, help_text="seconds from run start")
    epochs = models.PositiveIntegerField(default=0)
    best_accuracy = models.FloatField(null=True, blank=True)
    best_loss = models.FloatField(null=True, blank=True, help_text="AIPerf-LLM: the trial's validation loss")
    status = models.CharField(max_length=16, blank=True, help_text="finished, failed, cancelled, running")
    train_flops_per_image = models.FloatField(null=True, blank=True, help_text="per token for AIPerf-LLM")
    eval_flops_per_image = models.FloatField(null=True, blank=True)

    class Meta:
        ordering = ["result", "trial"]
        constraints = [models.UniqueConstraint(fields=["result", "trial"], name="trial_once_per_result")]


class EditionQuerySet(models.QuerySet["Edition"]):
    def public(self) -> EditionQuerySet:
        """Frozen editions a reader may see: their embargo (publish_at) over, or none."""
        now = timezone.now()
        return self.filter(frozen_at__isnull=False).filter(models.Q(publish_at__isnull=True)
                                                            | models.Q(publish_at__lte=now))


def public_edition_q(prefix: str = "edition__") -> models.Q:
    """The rows of a public edition (EditionQuerySet.public), for a lookup through `prefix`."""
    now = timezone.now()
    return (models.Q(**{f"{prefix}frozen_at__isnull": False})
            & (models.Q(**{f"{prefix}publish_at__isnull": True}) | models.Q(**{f"{prefix}publish_at__lte": now})))


class Edition(models.Model):
    """A frozen, citable snapshot of the list (like TOP500's June and November lists), and its calendar: when
    submissions for it open and close, and when it is published (an embargo after it is frozen)."""

    name = models.CharField(max_length=32, unique=True, help_text='e.g. "2026-11"')
    title = models.CharField(max_length=200, blank=True)
    notes = models.TextField(blank=True)
    created_at = models.DateTimeField(default=timezone.now)
    frozen_at = models.DateTimeField(null=True, blank=True)
    rules_versions = models.JSONField(default=list, blank=True,
                                      help_text="the rules versions admitted to its official ranking, as frozen")
    submissions_open = models.DateTimeField(null=True, blank=True, help_text="when submissions for it open")
    submissions_close = models.DateTimeField(null=True, blank=True, help_text="when they close (it is frozen then)")
    publish_at = models.DateTimeField(null=True, blank=True, help_text="the embargo: once frozen, it is public from "
                                                                       "then on (empty: at once)")

    objects = EditionQuerySet.as_manager()

    class Meta:
        ordering = ["-name"]

    def __str__(self) -> str:
        return self.name

    @property
    def frozen(self) -> bool:
        return self.frozen_at is not None

    @property
    def published(self) -> bool:
        return self.frozen and (self.publish_at is None or self.publish_at <= timezone.now())

    def state(self) -> str:
        """upcoming, open (for submissions), closed, embargoed (frozen, not yet public) or published."""
        now = timezone.now()
        if self.frozen:
            return "published" if self.published else "embargoed"
        if self.submissions_close is not None and now >= self.submissions_close:
            return "closed"
        if self.submissions_open is not None and now >= self.submissions_open:
            return "open"
        return "upcoming"


class EditionEntry(models.Model):
    """One ranked line of a frozen edition, with the figures as they stood then."""

    edition = models.ForeignKey(Edition, on_delete=models.CASCADE, related_name="entries")
    result = models.ForeignKey(Result, on_delete=models.PROTECT, related_name="edition_entries")
    division = models.CharField(max_length=16, choices=Division.choices)
    rank = models.PositiveIntegerField(null=True, blank=True, help_text="on the list as shown (each system's best)")
    rank_all = models.PositiveIntegerField(null=True, blank=True, help_text="among every result of the edition")
    score_ops = models.FloatField()
    regulated_score_ops = models.FloatField()

    class Meta:
        ordering = ["edition", "division", "rank"]
        constraints = [models.UniqueConstraint(fields=["edition", "result"], name="result_once_per_edition")]


class UploadSession(models.Model):
    """A chunked (resumable) upload in progress: the bytes so far are MEDIA_ROOT/partial/<id>.part, and the
    offset the client resumes from is that file's size (leaderboard/resumable.py, docs/service.md)."""

    id = models.UUIDField(primary_key=True)
    site = models.ForeignKey(Site, on_delete=models.CASCADE, related_name="upload_sessions")
    length = models.BigIntegerField(help_text="the bundle's size in bytes, announced at creation")
    sha256 = models.CharField(max_length=64, help_text="the bundle's digest, announced; checked once complete")
    rehearsal = models.BooleanField(default=False, help_text="announced as a rehearsal (Upload-Metadata)")
    created_at = models.DateTimeField(default=timezone.now)
    updated_at = models.DateTimeField(default=timezone.now, help_text="the last bytes received")
    submission = models.ForeignKey(Submission, null=True, blank=True, on_delete=models.SET_NULL,
                                   related_name="+", help_text="the submission made once complete")

    class Meta:
        constraints = [models.UniqueConstraint(fields=["site", "sha256"], name="one_upload_session_per_bundle")]

    def __str__(self) -> str:
        return f"upload {self.id} ({self.length} bytes) of {self.site}"


class LogEntry(models.Model):
    """One entry of the list's transparency log (leaderboard/translog.py): a change to the public list."""

    index = models.PositiveBigIntegerField(unique=True, help_text="the leaf's place in the log, from 0")
    data = models.TextField(help_text="the entry as canonical JSON (the bytes its leaf hash covers)")
    leaf_hash = models.CharField(max_length=64)
    result_id = models.IntegerField(null=True, blank=True, db_index=True,
                                    help_text="the result it is about (not a key: the log outlives rows)")
    created_at = models.DateTimeField(default=timezone.now)

    class Meta:
        ordering = ["index"]


class LogNode(models.Model):
    """The hash of a complete subtree of the log: 2**level leaves from leaf index * 2**level. Never changes."""

    level = models.PositiveSmallIntegerField()
    index = models.PositiveBigIntegerField()
    hash = models.CharField(max_length=64)

    class Meta:
        constraints = [models.UniqueConstraint(fields=["level", "index"], name="one_hash_per_subtree")]


class TreeHead(models.Model):
    """A signed head of the log, one per size: every head the service ever signed stays."""

    size = models.PositiveBigIntegerField(unique=True)
    root = models.CharField(max_length=64)
    timestamp = models.FloatField(help_text="UTC seconds")
    key = models.CharField(max_length=48, help_text="log key fingerprint")
    signature = models.CharField(max_length=100)

    class Meta:
        ordering = ["-size"]

    def statement(self) -> dict[str, object]:
        return {"kind": "aiperf-tree-head/1", "size": self.size, "root": self.root, "timestamp": self.timestamp,
                "key": self.key}


class Application(models.Model):
    """A centre's application to join the list (`/apply`): a maintainer approves it in the admin, which makes the
    site and shows its API token once."""

    class Status(models.TextChoices):
        PENDING = "pending", "Waiting for a list maintainer"
        APPROVED = "approved", "Approved: the site exists"
        DECLINED = "declined", "Declined"

    centre = models.CharField(max_length=200, help_text="the organisation, as the list should name it")
    country = models.CharField(max_length=2, help_text="ISO 3166-1 alpha-2 code")
    url = models.URLField(blank=True)
    contact_name = models.CharField(max_length=200)
    contact_email = models.EmailField()
    systems = models.TextField(help_text="the systems the centre means to run on: nodes, accelerators, interconnect")
    message = models.TextField(blank=True)
    status = models.CharField(max_length=16, choices=Status.choices, default=Status.PENDING, db_index=True)
    created_at = models.DateTimeField(default=timezone.now)
    decided_at = models.DateTimeField(null=True, blank=True)
    decided_by = models.CharField(max_length=150, blank=True)
    decision_reason = models.CharField(max_length=300, blank=True)
    site = models.OneToOneField(Site, on_delete=models.SET_NULL, null=True, blank=True, related_name="application")

    class Meta:
        ordering = ["-created_at"]

    def __str__(self) -> str:
        return f"{self.centre} ({self.get_status_display().lower()})"


def trust_line(registered: bool, system_status: str, witnessed: bool, audit: str, review: str) -> dict[str, Any]:
    """Result.trust() of a result's and its system's columns (an export reads them from values())."""
    return {"registered": bool(registered and system_status == System.Status.APPROVED), "witnessed": witnessed,
            "audit": audit or "none", "review": review or "not needed"}
