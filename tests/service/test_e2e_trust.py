"""Trust end to end (docs/design.md section 7) on PostgreSQL, Redis, gunicorn and a real Celery worker.

Real witnessed smoke runs (`aiperf-runner run --system ...`, torch on this CPU) against the service:
a run token, heartbeats, the service's receipts; one run killed with SIGKILL and resumed; one run
whose service stops for two minutes. Then the forgeries a site holding its own key could make of a
real witnessed log (tests/forgeries.py, and the witness's own), re-signed with the site key and
uploaded: each ends rejected or outside the official ranking with its named check, while the honest
log stays official.

The service runs a rules version of its own for CI (`AIPERF_RULES_FILE`: a short smoke run can be
official), heartbeats every 5 s. Skipped locally without PostgreSQL or Redis, required under CI.
"""

from __future__ import annotations

import base64
import json
import secrets
import shutil
import signal
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

import httpx
import pytest
from aiperf_runner.run.heartbeats import first_line_hash
from aiperf_runner.spec import bundle, keys, witness

from devdata.runfactory import rewrite_events
from tests.forgeries import FORGERIES, Forgery
from tests.helpers import stop_runs_when
from tests.service.stack import BIN, REPO, Stack, require_services
from tests.service.test_e2e_rebuild import rebuilt_without_differences
from tests.verify.test_witness import append, lines

pytestmark = [pytest.mark.services, pytest.mark.slow]

H100 = "NVIDIA H100 80GB HBM3"
AUDIT_DELAY_S = 2.0  # each audit here re-evaluates 2-4 trials: 4-8 s of delay, past the 5-s visibility timeout
# The audit re-executes 4 of the kept segments here (17 on the list): every audit of this module pays for them.
SEGMENT_TRIES = 3  # runs of an attack whose audit may find no kept segment (test_skipped_work_...)
LLM_WITNESSED_MAX_S = 300  # the llm_witnessed runs' duration: each is stopped once a trial has finished
CI_RULES = {"3.1-ci": {"base": "3.1", "official_preset": "smoke", "min_duration_s": 30.0, "max_score_cv": 0.5,
                       "audit_segments": 4, "llm_official_presets": ["llm-smoke"]}}


@pytest.fixture(scope="module")
def stack(tmp_path_factory):
    require_services()
    work = tmp_path_factory.mktemp("trust")
    (work / "rules.json").write_text(json.dumps(CI_RULES))
    s = Stack(work)
    s.env.update({"AIPERF_WITNESS_KEY_FILE": str(work / "witness_key.pem"), "AIPERF_HEARTBEAT_INTERVAL_S": "5",
                  "AIPERF_RULES_FILE": str(work / "rules.json"), "AIPERF_RULES_VERSION": "3.1-ci",
                  # As on a public list: a maintainer approves every registered system (Site below).
                  "AIPERF_SYSTEM_APPROVAL": "manual"})
    try:
        s.start()
        s.manage("aiperf_witness_key", "create")
        s.start_worker("worker")
        # Proof of training on its own queue. Each re-evaluation waits AUDIT_DELAY_S first, so that every audit
        # outlasts the broker's visibility timeout (5 s here) and Redis delivers its message again mid-audit,
        # as it would in production for an audit longer than CELERY_VISIBILITY_TIMEOUT.
        s.start_worker("audit", queue=s.env["AIPERF_AUDIT_QUEUE"], audit_delay_s=AUDIT_DELAY_S)
        yield s
    finally:
        s.stop()


class Site:
    """A site with its token, its key (config dir) and one registered system: this machine, as it is (its
    CPU and cores read by `system add --facts-from here`), since system.facts holds a run to what it ran on.
    The system waits for a maintainer, who approves it with `manage.py aiperf_system approve`."""

    def __init__(self, stack: Stack, name: str, model: str = "cpu", per_node: int = 0, *facts: str) -> None:
        self.stack = stack
        self.token, self.config = stack.new_site(name, "DE")
        out = stack.runner("system", "add", "--name", f"{name} box", "--accelerator-model", model,
                           "--accelerators-per-node", str(per_node), "--nodes", "1", "--facts-from", "here", *facts,
                           "--json", config=self.config)
        self.system = json.loads(out.stdout)
        assert self.system["status"] == "pending", self.system
        approved = stack.manage("aiperf_system", "approve", str(self.system["id"]), "--reason",
                                f"{name}: the registration a maintainer checked", "--by", "ci-maintainer")
        assert approved.stdout.startswith("1 system(s) approved"), approved.stdout
        self.system["status"] = "approved"

    def env(self) -> dict[str, str]:
        return {**self.stack.env, "AIPERF_CONFIG_DIR": str(self.config)}

    def start_run(self, run: Path, duration: str, slots: int = 2, seed: int = 0,
                  trial_module: str = "aiperf_runner.train.trial", *extra: str,
                  program: tuple[str, ...] = (str(BIN / "aiperf-runner"),)) -> subprocess.Popen:
        return subprocess.Popen([*program, "run", "--preset", "smoke", "--slots", str(slots),
                                 "--duration", duration, "--seed", str(seed), "--out", str(run), "--system",
                                 str(self.system["id"]), "--progress", "plain", "--trial-module", trial_module,
                                 # Two runs may share this machine's two cores: one thread per trial, or
                                 # their OpenMP threads spin against each other (epochs took 25x longer).
                                 "--backend-opt", "threads_per_process=1", *extra],
                                env=self.env(), cwd=REPO,
                                stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True, start_new_session=True)

    def submit(self, path: Path) -> dict[str, Any]:
        return self.stack.submit(path, self.token, self.config)

    def key(self) -> Any:
        return keys.load_private_key(self.config / "site_key.pem")


def finish(proc: subprocess.Popen, timeout: float = 900) -> str:
    out, _ = proc.communicate(timeout=timeout)
    assert proc.returncode == 0, out
    return out


def own_checks(run: Path) -> dict[str, bool]:
    """`aiperf-runner verify RUN --json` on the site's machine, with no option: {check: passed}."""
    out = subprocess.run([str(BIN / "aiperf-runner"), "verify", str(run), "--json"], capture_output=True, text=True,
                         timeout=300)
    assert out.returncode == 0, out.stderr
    return {c["name"]: c["passed"] for c in json.loads(out.stdout)["checks"]}


def checks(stack: Stack, sub: dict[str, Any]) -> dict[str, dict[str, Any]]:
    result = stack.get(f"/api/v1/results/{sub['url'].rstrip('/').rsplit('/', 1)[1]}/")
    return {c["name"]: c for c in result["report"]["checks"]}


@pytest.fixture(scope="module")
def runs(stack, tmp_path_factory):
    """The honest run and a run killed with SIGKILL and resumed, side by side; one site each."""
    work = tmp_path_factory.mktemp("runs")
    honest_site, resumed_site = Site(stack, "Honest Lab"), Site(stack, "Resumed Lab")
    honest = honest_site.start_run(work / "honest", "50s", slots=2, seed=1)
    resumed = resumed_site.start_run(work / "resumed", "50s", slots=1, seed=2)
    time.sleep(22)
    resumed.send_signal(signal.SIGKILL)  # the controller only: its trials are reaped by the resume
    resumed.wait(timeout=30)
    again = subprocess.Popen([str(BIN / "aiperf-runner"), "run", "--resume", str(work / "resumed"),
                              "--progress", "plain"], env=resumed_site.env(),
                             stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
    finish(honest)
    finish(again)
    return {"honest": (honest_site, work / "honest"), "resumed": (resumed_site, work / "resumed")}


WITNESS_CHECKS = ("witness.token", "witness.receipts", "witness.coverage", "witness.timeline")


def test_a_witnessed_run_is_official_and_on_the_record(stack, runs):
    site, run = runs["honest"]
    sub = site.submit(run)
    assert sub["status"] == "verified" and sub["division"] == "official", sub
    got = checks(stack, sub)
    assert all(got[name]["passed"] for name in WITNESS_CHECKS), {n: got[n]["message"] for n in WITNESS_CHECKS}
    assert got["system.registered"]["passed"] and got["system.devices"]["passed"]
    system = stack.get(f"/api/v1/systems/{site.system['id']}/")
    assert (system["runs_attempted"], system["runs_submitted"], system["runs_verified"]) == (1, 1, 1)
    receipts = [e for e in lines(run) if e["type"] == "witness"]
    assert len(receipts) >= 8  # a receipt every 5 s over ~50 s, and the final one after run_finished
    site_view = own_checks(run)  # the site's own verify, by what the run kept of the service's answers
    assert all(site_view[name] for name in (*WITNESS_CHECKS, "system.registered")), site_view
    assert lines(run)[0]["token"]["statement"]["run_id"] == lines(run)[0]["run_id"]


def test_submit_answers_the_challenge_and_the_audit_passes(stack, runs):
    site, run = runs["honest"]
    sub = site.submit(run)  # the same bundle: the same submission, its audit done
    result = stack.get(f"/api/v1/results/{sub['result']}/")
    kept = result["report"]["kept_weights"]
    best = result["report"]["best_trial"]
    assert best in sub["challenge"] and set(sub["challenge"]) <= set(kept) and len(sub["challenge"]) <= 3, sub
    assert sub["evidence"] == sub["challenge"] and sub["audit"] == "passed", sub
    audited = result["audit_report"]["trials"]
    assert set(audited) == set(sub["challenge"])
    assert all(c["passed"] for checks in audited.values() for c in checks), audited
    assert {c["name"] for c in audited[best]} == {"audit.weights", "audit.architecture", "audit.accuracy"}
    # The committed work: the kept segments drawn and re-executed, the best checkpoint re-evaluated.
    segments = result["audit_report"]["segments"]
    assert len(segments) == min(4, result["audit_report"]["drawn_from"]) > 0, result["audit_report"]
    assert all(c["name"] == "audit.replay" and c["passed"] for checks in segments.values() for c in checks)
    assert [c["name"] for c in result["audit_report"]["best"]] == ["audit.best"]
    assert result["audit_report"]["best"][0]["passed"]
    assert sorted(sub["states_received"]) == sorted(w["sha256"] for w in sub["states"])
    # Only the states a beacon kept (and the best epoch's end) stayed on disk.
    on_disk_states = list((run / "trials").glob("*/states/*.safetensors"))
    committed = sum(len(e["commits"]) + 1 for e in lines(run) if e["type"] == "epoch_states")
    assert 0 < len(on_disk_states) < committed / 2, (len(on_disk_states), committed)
    on_disk = {p.parent.name for p in (run / "trials").glob("*/weights.safetensors")}
    assert on_disk == set(kept)  # the others were deleted as they were decided
    finished = [e for e in lines(run) if e["type"] == "trial_finished"]
    assert len(kept) < len(finished), (kept, len(finished))
    page = httpx.get(sub["url"], timeout=30).text
    assert "Audit of the weights" in page and "Passed" in page and best in page
    assert result["audit"] == "passed"
    # The audit outlasted the visibility timeout (AUDIT_DELAY_S): its message came again, found the audit
    # decided and re-evaluated nothing (each delivery used to audit again, ahead of every later audit).
    repeated = f"submission {sub['submission']}: audit already passed"
    deadline = time.monotonic() + 30
    while repeated not in stack.log("audit") and time.monotonic() < deadline:
        time.sleep(0.5)
    assert repeated in stack.log("audit"), stack.log("audit")
    evaluations = [line for line in stack.logs["audit"].read_text().splitlines()
                   if "INFO/ForkPoolWorker" in line and f"submission {sub['submission']}: audit of trial" in line]
    assert len(evaluations) == len(sub["challenge"]), stack.log("audit")


def test_evidence_must_be_challenged_and_what_the_log_recorded(stack, runs):
    site, run = runs["honest"]
    assert not bundle.check_manifest(run, site.key().public_key())  # kept weights are beside the signed run
    sub = site.submit(run)
    url = f"{stack.url}/api/v1/submissions/{sub['submission']}/evidence/"
    auth = {"Authorization": f"Token {site.token}"}
    trial = sub["challenge"][0]
    r = httpx.post(url, headers=auth, data={"trial": trial}, timeout=30,
                   files={"weights": ("weights.safetensors", b"not these weights", "application/octet-stream")})
    assert r.status_code == 400 and r.json()["check"] == "audit.weights", r.text
    assert "is not the one trial" in r.json()["detail"]
    finished = {e["trial"] for e in lines(run) if e["type"] == "trial_finished"}
    unchallenged = sorted(finished - set(sub["challenge"]))[0]
    r = httpx.post(url, headers=auth, data={"trial": unchallenged}, timeout=30,
                   files={"weights": ("weights.safetensors", b"x", "application/octet-stream")})
    assert r.status_code == 404 and r.json()["check"] == "evidence", r.text
    other = Site(stack, "Other Lab")
    r = httpx.post(url, headers={"Authorization": f"Token {other.token}"}, data={"trial": trial}, timeout=30,
                   files={"weights": ("weights.safetensors", b"x", "application/octet-stream")})
    assert r.status_code == 403
    assert stack.get(f"/api/v1/submissions/{sub['submission']}/")["audit"] == "passed"  # nothing lost


# Runs the tests below submit one at a time, made side by side to keep this module's time (each on one slot of one
# thread: two cores share five runs, and a trial is slower, not different): name -> (site, duration, seed,
# trial program, options).
SIDE_RUNS = {
    "inflated": ("Inflated Lab", "40s", 4, "tests.service.inflated_trial", ()),
    "lucky": ("Lucky Lab", "30s", 7, "tests.service.lucky_epoch_trial", ()),
    "idle": ("Idle Lab", "35s", 6, "tests.runner.fake_trial", ()),
    "twice": ("Twice Lab", "30s", 9, "aiperf_runner.train.trial", ()),
    "rehearsal": ("Rehearsal Lab", "40s", 5, "aiperf_runner.train.trial", ("--rehearsal",)),
}


@pytest.fixture(scope="module")
def side_runs(stack, tmp_path_factory):
    work = tmp_path_factory.mktemp("side")
    sites = {name: Site(stack, site) for name, (site, *_) in SIDE_RUNS.items()}
    procs = [sites[name].start_run(work / name, duration, 1, seed, module, *options)
             for name, (_, duration, seed, module, options) in SIDE_RUNS.items()]
    for proc in procs:
        finish(proc)
    return {name: (sites[name], work / name) for name in SIDE_RUNS}


def test_accuracies_raised_at_the_source_fail_the_audit(stack, side_runs):
    """A trial program that logs every accuracy 0.05 higher: the log is chained, signed and witnessed,
    its weights and digests honest; only the re-evaluation can tell."""
    site, run = side_runs["inflated"]
    sub = site.submit(run)
    assert sub["status"] == "rejected", sub
    reasons = {r["check"]: r["message"] for r in sub["reasons"]}
    assert "audit.accuracy" in reasons, sub["reasons"]
    assert "re-evaluated accuracy" in reasons["audit.accuracy"] and "logged" in reasons["audit.accuracy"]
    assert stack.get(f"/api/v1/submissions/{sub['submission']}/")["result"] is None  # off the list


def test_skipped_work_and_smaller_images_fail_the_re_execution(stack, tmp_path):
    """The red team's second and third attacks, run side by side: a quarter of the batches trained with whole
    epochs claimed, and images of 8 pixels trained where the preset's are 16 (a quarter of the FLOPs charged),
    each with every commitment where the rules want it. Official and audited before rules 3.0 (the audit read
    the image size from the site's trial.json); the re-executed segments catch both.

    A run this short may keep no segment for the audit to draw (each is kept with the rules' 5 %, by a beacon):
    one the audit had nothing to draw from is run again with another seed (at most SEGMENT_TRIES runs), never
    one that had segments."""
    attacks = {"skipping": (Site(stack, "Skipping Lab"), 5, "tests.service.skipping_trial"),
               "small": (Site(stack, "Small Lab"), 8, "tests.service.small_images_trial")}
    pending = dict(attacks)
    for attempt in range(SEGMENT_TRIES):
        started = {name: site.start_run(tmp_path / f"{name}-{attempt}", "40s", slots=1, seed=seed + 100 * attempt,
                                        trial_module=module)
                   for name, (site, seed, module) in pending.items()}
        for name, proc in started.items():
            finish(proc)
            site = attacks[name][0]
            sub = site.submit(tmp_path / f"{name}-{attempt}")
            # The kept segments the audit drew from (its `drawn_from`), as the service stored them: read from the
            # submission, since a rejection (by the re-evaluated accuracy alone, say) leaves no result to ask.
            ((drawn,),) = stack.sql("SELECT proof->>'of' FROM leaderboard_submission WHERE id = %s", sub["submission"])
            if not int(drawn or 0) and attempt + 1 < SEGMENT_TRIES:
                continue  # nothing kept to re-execute: another run, another beacon
            assert sub["status"] == "rejected", (name, attempt, sub)
            reasons = {r["check"]: r["message"] for r in sub["reasons"]}
            assert "audit.replay" in reasons, (name, sub["reasons"])
            assert "the committed work is not what the segment does" in reasons["audit.replay"]
            assert stack.get(f"/api/v1/submissions/{sub['submission']}/")["result"] is None  # off the list
            del pending[name]
        if not pending:
            return


def test_a_lucky_non_final_epoch_fails_the_best_checkpoints_re_evaluation(stack, side_runs):
    """The red team's fourth attack: 0.99 logged for a trial's first epoch, everything after it honest, so the
    kept final weights re-evaluate to what their epoch says. The run's best accuracy is the lucky epoch's,
    and its checkpoint is re-evaluated (`audit.best`)."""
    site, run = side_runs["lucky"]
    assert max(e["val_accuracy"] for e in lines(run) if e["type"] == "epoch_end") == 0.99
    sub = site.submit(run)
    assert sub["status"] == "rejected", sub
    reasons = {r["check"]: r["message"] for r in sub["reasons"]}
    assert "audit.best" in reasons and "logged 0.9900" in reasons["audit.best"], sub["reasons"]
    assert "epoch 1 (the run's best accuracy)" in reasons["audit.best"]


def test_a_run_that_computed_nothing_cannot_answer_its_challenge(stack, side_runs):
    """The red team's first attack: trials that sleep and claim epochs, commitments and weights that stand for
    nothing. The log holds together; the states the audit asks for do not exist, so the audit never passes
    and the result stays out of the official division until its challenge expires."""
    site, run = side_runs["idle"]
    sub = site.submit(run)
    assert sub["status"] == "refused", sub
    [reason] = sub["reasons"]
    assert reason["check"] == "audit.state" and "committed state" in reason["message"], reason
    r = httpx.get(f"{stack.url}/api/v1/submissions/", params={"run_id": lines(run)[0]["run_id"]},
                  headers={"Authorization": f"Token {site.token}"}, timeout=30)
    stored = r.json()["results"][0]
    assert stored["audit"] == "pending" and stored["states"] and not stored["states_received"], stored
    listed = stack.get("/api/v1/leaderboard/?division=official")["results"]
    assert stored["result"] not in [r["id"] for r in listed]


def test_kill_9_and_resume_continue_the_same_token(stack, runs):
    site, run = runs["resumed"]
    events = lines(run)
    assert sum(e["type"] == "run_resumed" for e in events) == 1
    resumed_at = next(i for i, e in enumerate(events) if e["type"] == "run_resumed")
    assert any(e["type"] == "witness" for e in events[resumed_at:])  # receipts continue after the resume
    sub = stack.submit(run, site.token, site.config, "--no-wait")
    assert sub["status"] in ("received", "verifying", "verified") and sub["audit"] != "passed", sub
    # The challenge answered later: `evidence` waits for the verification, uploads, waits for the audit.
    out = stack.runner("evidence", str(run), "--json", config=site.config)
    sub = json.loads(out.stdout)
    assert sub["status"] == "verified" and sub["challenge"] and sub["audit"] == "passed", sub
    assert sub["evidence"] == sub["challenge"]
    got = checks(stack, sub)
    assert all(got[name]["passed"] for name in WITNESS_CHECKS), {n: got[n]["message"] for n in WITNESS_CHECKS}


def test_a_service_outage_is_reported_in_the_coverage(stack, tmp_path):
    site = Site(stack, "Outage Lab")
    run = tmp_path / "outage"
    proc = site.start_run(run, "60s", slots=1, seed=3)
    time.sleep(12)  # training and witnessed (a heartbeat every 5 s) before the outage
    stack.kill("web", signal.SIGTERM)  # the service is gone for 35 s: 7 heartbeat intervals
    down = time.time()
    time.sleep(35)
    stack.spawn("web", [str(BIN / "gunicorn"), "server.wsgi:application", "--bind", f"127.0.0.1:{stack.port}",
                        "--workers", "2", "--timeout", "120"])
    stack.wait_ready()
    up = time.time()
    finish(proc)
    events = lines(run)
    assert any(e["type"] == "epoch_end" and down + 5 < e["ended_at"] < up - 5 for e in events)  # training went on
    assert any(e["type"] == "witness" and e["received_at"] > up for e in events)  # heartbeats resumed
    sub = site.submit(run)
    assert sub["status"] == "verified", sub  # an outage is not a forgery
    coverage = checks(stack, sub)["witness.coverage"]
    assert coverage["measured"] >= 30 and not coverage["passed"], coverage  # 35 s > 5 intervals of 5 s
    assert sub["division"] == "open"


# ---- forgeries of a real witnessed log -----------------------------------------------------------------
def resign(site: Site, path: Path) -> Path:
    for name in ("MANIFEST.json", "MANIFEST.sig"):
        (path / name).unlink(missing_ok=True)
    return bundle.pack(path, path.with_suffix(".tar.gz"), site.key())


def upload_forgery(stack: Stack, site: Site, path: Path) -> dict[str, Any]:
    r = httpx.post(f"{stack.url}/api/v1/submissions/", headers={"Authorization": f"Token {site.token}"},
                   files={"bundle": ("b.tar.gz", resign(site, path).read_bytes(), "application/gzip")}, timeout=60)
    if r.status_code not in (200, 201):
        return {"status": "refused", "reasons": [{"check": r.json().get("check"), "message": r.json().get("detail")}]}
    sub = r.json()
    deadline = time.monotonic() + 120
    while sub["status"] not in ("verified", "rejected") and time.monotonic() < deadline:
        time.sleep(0.3)
        sub = stack.get(f"/api/v1/submissions/{sub['id']}/")
    return sub


def outcome(stack: Stack, sub: dict[str, Any]) -> tuple[str, set[str]]:
    """('rejected' | 'open' | 'official', the failed checks)."""
    if sub["status"] in ("rejected", "refused"):
        return "rejected", {r["check"] for r in sub["reasons"]}
    result = stack.get(f"/api/v1/results/{sub['result']}/")
    return result["division"], {c["name"] for c in result["report"]["checks"] if not c["passed"]}


def other_system(stack: Stack, site: Site, **fields: Any) -> int:
    out = stack.runner("system", "add", "--name", "second box", "--accelerator-model", H100, "--nodes", "1",
                       "--accelerators-per-node", "1", *[a for k, v in fields.items() for a in (f"--{k}", str(v))],
                       "--json", config=site.config)
    return int(json.loads(out.stdout)["id"])


@pytest.fixture(scope="module")
def honest_submitted(stack, runs):
    site, run = runs["honest"]
    sub = site.submit(run)  # the same bundle again: the same submission
    assert sub["status"] == "verified" and sub["division"] == "official", sub
    return site, run


def unwitnessed_copy(honest: Path, dest: Path, distinct: bool = True) -> Path:
    """The honest log as a forger must start from: a run id is accepted once, so a new one, and without
    the token and receipts (bound to the honest run id): an unwitnessed log, open division at best.
    `distinct`: the epoch times moved by a few microseconds, so that it is not a copy of the honest log's
    epochs (a forger would; integrity.duplicate catches the copy otherwise), never past the line's own time
    (an AIPerf-LLM train_end is written milliseconds after its training ended, and a training that ended after
    its line fails integrity.lifecycle: a local CI run drew a shift past that gap)."""
    path = Path(shutil.copytree(honest, dest))
    new_id = secrets.token_hex(16)
    run = json.loads((path / "run.json").read_text())
    run["run_id"] = new_id
    (path / "run.json").write_text(json.dumps(run))

    shift = (secrets.randbelow(10_000) + 1) * 1e-6  # each copy its own

    def strip(events: list[dict[str, Any]]) -> list[dict[str, Any]]:
        events = [e for e in events if e["type"] not in ("heartbeat", "witness")]
        events[0].pop("token", None)
        events[0]["run_id"] = new_id
        for e in events:
            if distinct and e["type"] in ("epoch_end", "train_end"):  # train_end: an AIPerf-LLM run's
                slack = e.get("t", e["ended_at"]) - e["ended_at"]
                moved = min(shift, slack / 2) if slack > 0 else shift
                e["started_at"] += moved
                e["ended_at"] += moved
        return events
    rewrite_events(path, strip)
    return path


@pytest.mark.parametrize("forgery", [f for f in FORGERIES if not f.fresh], ids=lambda f: f.name)
def test_trust1_forgery_of_a_witnessed_log(stack, honest_submitted, forgery: Forgery, tmp_path):
    site, honest = honest_submitted
    path = unwitnessed_copy(honest, tmp_path / "forged")
    forgery.forge(path)
    if forgery.check == "integrity.duplicate":  # the copy itself is the forgery: its epochs unchanged
        shutil.rmtree(path)
        path = unwitnessed_copy(honest, tmp_path / "forged", distinct=False)
    expected = {forgery.check}
    if forgery.registration:  # the forger names another registered system of its own
        model = forgery.registration.get("accelerator_model", H100)
        # The honest run here uses 2 accelerators at once: a registration of fewer for the concurrency case.
        per_node = 1 if "accelerators_per_node" in forgery.registration else 2
        system_id = other_system(stack, site, **{"accelerator-model": model, "accelerators-per-node": per_node})
        run = json.loads((path / "run.json").read_text())
        run["system"]["id"] = system_id
        (path / "run.json").write_text(json.dumps(run))
    got, failed = outcome(stack, upload_forgery(stack, site, path))
    assert got in ("rejected", "open"), (got, failed)
    assert expected & failed, (forgery.name, failed)


def test_an_unwitnessed_copy_is_open_and_a_duplicate(stack, honest_submitted, tmp_path):
    """Without any forgery but the stripped witness, the copy is still the honest run's epochs."""
    site, honest = honest_submitted
    got, failed = outcome(stack, upload_forgery(stack, site, unwitnessed_copy(honest, tmp_path / "copy",
                                                                              distinct=False)))
    assert got == "rejected" and "integrity.duplicate" in failed, failed


def forge_witness(path: Path, how: str, other_run: Path) -> None:
    start = lines(path)[0]["t"]
    if how == "timestamps-scaled":
        def scale(events: list[dict[str, Any]]) -> list[dict[str, Any]]:
            for e in events:
                e["t"] = start + (e["t"] - start) / 2
                for k in ("started_at", "ended_at"):
                    if k in e:
                        e[k] = start + (e[k] - start) / 2
            return events
        rewrite_events(path, scale)
    elif how == "epochs-after-the-last-receipt":
        # A run slowed down by a busy machine may have logged no epoch of its own: one of the other run's
        # epochs is then appended under this run's first trial.
        own = [e for e in lines(path) if e["type"] == "epoch_end"]
        first_trial = next(e["trial"] for e in lines(path) if e["type"] == "trial_started")
        last = own[-1] if own else {**[e for e in lines(other_run) if e["type"] == "epoch_end"][-1],
                                    "trial": first_trial, "epoch": 0}
        t = lines(path)[-1]["t"]
        append(path, [{**{k: v for k, v in last.items() if k not in ("seq", "prev")}, "t": t + 1,
                       "epoch": last["epoch"] + 1, "started_at": t - 5, "ended_at": t}])
    elif how == "receipts-of-another-key":
        impostor = keys.generate_key()
        fp = keys.fingerprint(impostor)

        def resigned(events: list[dict[str, Any]]) -> list[dict[str, Any]]:
            for e in events:
                if e["type"] == "witness":
                    e["key"] = fp
                    e["signature"] = witness.sign(impostor, witness.receipt_statement(e))
            return events
        rewrite_events(path, resigned)
    elif how == "receipt-of-another-run":
        moved = [e for e in lines(other_run) if e["type"] == "witness"][2]
        append(path, [{k: v for k, v in moved.items() if k not in ("seq", "prev")}])
    elif how == "receipts-removed":
        rewrite_events(path, lambda events: [e for i, e in enumerate(events) if e["type"] != "witness" or i % 2])
    else:
        raise AssertionError(how)


WITNESS_FORGERIES = ["timestamps-scaled", "epochs-after-the-last-receipt", "receipts-of-another-key",
                     "receipt-of-another-run", "receipts-removed"]


@pytest.fixture(scope="module")
def unsubmitted(stack, runs, tmp_path_factory):
    """One short witnessed run per witness forgery, not yet submitted (a witnessed run id is accepted
    once: a site forges its own log before it submits it), run side by side."""
    site = runs["honest"][0]
    work = tmp_path_factory.mktemp("bases")
    # Registered (and approved) before any run starts: a site's registration takes seconds on a loaded machine,
    # and the second log below must take its turn while the run it joins still runs.
    phantom = Site(stack, "Phantom Lab", "NVIDIA H200", 8)  # registered as what this machine is not
    imaginary = Site(stack, "Imaginary Lab", "cpu", 0, "--cpu-model", IMAGINARY_CPU, "--cpu-cores", "100000")
    procs = {how: site.start_run(work / how, "20s", slots=1, seed=10 + i) for i, how in enumerate(WITNESS_FORGERIES)}
    for i, mode in enumerate(GRINDS):  # the patched runners, side by side with the rest
        procs[mode] = site.start_run(work / mode, "25s", 1, 20 + i, "aiperf_runner.train.trial",
                                     program=(sys.executable, "-m", "tests.service.grinding_runner", mode))
    procs["turns"] = site.start_run(work / "turns", "25s", slots=1, seed=25)
    procs["phantom"] = phantom.start_run(work / "phantom", "25s", slots=1, seed=26)
    procs["imaginary"] = imaginary.start_run(work / "imaginary", "25s", slots=1, seed=27)
    PHANTOM.extend([phantom, imaginary])
    second_log_takes_a_turn(site, work / "turns")
    for proc in procs.values():
        finish(proc)
    return site, {how: work / how for how in procs}


GRINDS = ("hide", "rechain")
PHANTOM: list[Site] = []  # the sites whose systems were registered as 8 x H200 and as 100,000 imaginary cores
IMAGINARY_CPU = "Imaginary CPU @ 350GHz"


def second_log_takes_a_turn(site: Site, run: Path) -> None:
    """A second log under the run's token (the same first line, so the same log id) sends one heartbeat,
    naming the last receipt issued as the chain requires; the first log's next heartbeat then cannot."""
    deadline = time.monotonic() + 60
    while not (run / "events.jsonl").exists() or not any(e["type"] == "witness" for e in lines(run)):
        assert time.monotonic() < deadline, "the run logged no receipt within a minute"
        time.sleep(0.5)
    run_id = lines(run)[0]["run_id"]
    auth = {"Authorization": f"Token {site.token}"}
    for _ in range(5):  # the run's own heartbeat may take the next receipt between the read and the post
        issued = httpx.get(f"{site.stack.url}/api/v1/runs/{run_id}/receipts/", headers=auth, timeout=30).json()
        statement = {"kind": witness.HEARTBEAT_KIND, "run_id": run_id, "heartbeat_seq": 100_000, "head": "ab" * 32,
                     "log_id": first_line_hash(run / "events.jsonl"), "work": 0.0, "epochs": 0, "best_accuracy": None,
                     "sent_at": time.time(), "previous_receipt": witness.receipt_digest(issued[-1])}
        r = httpx.post(f"{site.stack.url}/api/v1/runs/{run_id}/heartbeats/", headers=auth,
                       json={"statement": statement, "signature": witness.sign(site.key(), statement)}, timeout=30)
        if "does not name the last receipt issued" not in r.text:
            break
    assert r.status_code == 201, r.text


@pytest.mark.parametrize("how", WITNESS_FORGERIES)
def test_trust2_forgery_fails_a_witness_check(stack, unsubmitted, runs, how: str):
    site, bases = unsubmitted
    path = bases[how]
    assert sum(e["type"] == "witness" for e in lines(path)) >= 3
    forge_witness(path, how, runs["resumed"][1])
    got, failed = outcome(stack, upload_forgery(stack, site, path))
    assert got in ("rejected", "open") and {f for f in failed if f.startswith("witness.")}, (how, got, failed)


@pytest.mark.parametrize("how", [*GRINDS, "turns"])
def test_receipts_kept_from_the_log_leave_the_official_division(stack, unsubmitted, how: str):
    """The beacon ground (receipts read and thrown away, the chain named or not) and a second log taking turns
    under the token: the service's records hold a receipt the log lacks, or a refused heartbeat."""
    site, bases = unsubmitted
    path = bases[how]
    if how in GRINDS:  # submitted by the patched runner too
        out = subprocess.run([sys.executable, "-m", "tests.service.grinding_runner", how, "submit", str(path),
                              "--server", stack.url, "--token", site.token, "--json"], env=site.env(), cwd=REPO,
                             capture_output=True, text=True, timeout=600)
        sub = json.loads(out.stdout)
    else:
        sub = site.submit(path)
    got, failed = outcome(stack, sub)
    assert got in ("rejected", "open") and failed & {"witness.receipts", "witness.token"}, (how, got, failed)
    if sub["status"] == "rejected":
        said = " ".join(r["message"] for r in sub["reasons"])
    else:
        result = checks(stack, sub)
        said = " ".join(result[name]["message"] for name in ("witness.receipts", "witness.token"))
    assert any(words in said for words in ("removed from the log", "this log does not hold",
                                           "missing from the log", "not following the last receipt")), said
    if how != "hide":  # a heartbeat named a receipt other than the last one issued: refused, and on the record
        run_id = lines(path)[0]["run_id"]
        assert stack.sql("SELECT chain_breaks FROM leaderboard_runattempt WHERE run_id = %s", run_id)[0][0] >= 1


def test_hardware_registered_that_the_run_did_not_have_is_not_official(stack, unsubmitted):
    """A CPU machine registered as 8 x H200, approved by a maintainer who did not look: the trials reported
    cpu."""
    _, bases = unsubmitted
    sub = PHANTOM[0].submit(bases["phantom"])
    got, failed = outcome(stack, sub)
    assert got == "open" and "system.facts" in failed, (got, failed)
    message = checks(stack, sub)["system.facts"]["message"]
    assert message.startswith("the trials ran on ") and " x cpu; the registration is " in message, message


def test_a_cpu_registered_larger_and_faster_than_it_is_is_not_official(stack, unsubmitted):
    """This 2-core machine registered as 100,000 cores of an "Imaginary CPU @ 350GHz" (rules 3.1): the peak is
    counted at the rules' clock, not the name's, and the run's own facts contradict the registration."""
    _, bases = unsubmitted
    sub = PHANTOM[1].submit(bases["imaginary"])
    got, failed = outcome(stack, sub)
    assert got == "open" and "system.facts" in failed, (got, failed)
    found = checks(stack, sub)
    message = found["system.facts"]["message"]
    assert "the registration has 100000 (1 x 100000)" in message and IMAGINARY_CPU in message, message
    assert "x 3.5 GHz (the rules' clock" in found["system.peak"]["message"], found["system.peak"]


def test_a_token_used_for_a_second_run(stack, side_runs):
    """A second log under the same token: its heartbeats are refused, and the token fails the check."""
    site, run = side_runs["twice"]
    token = lines(run)[0]["token"]
    statement = {"kind": witness.HEARTBEAT_KIND, "run_id": token["statement"]["run_id"], "heartbeat_seq": 1,
                 "head": "ab" * 32, "log_id": "cd" * 32, "work": 0.0, "epochs": 0, "best_accuracy": None,
                 "sent_at": time.time(), "previous_receipt": None}
    r = httpx.post(f"{stack.url}/api/v1/runs/{statement['run_id']}/heartbeats/",
                   headers={"Authorization": f"Token {site.token}"},
                   json={"statement": statement, "signature": witness.sign(site.key(), statement)}, timeout=30)
    assert r.status_code == 409 and r.json()["check"] == "token", r.text
    sub = site.submit(run)
    got = checks(stack, sub) if sub["status"] == "verified" else {}
    assert sub["status"] == "rejected" or not got["witness.token"]["passed"], sub
    assert "second run" in json.dumps(sub) + json.dumps(got)


def test_a_rehearsal_is_verified_for_its_site_only_and_never_ranked(stack, side_runs):
    """`run --rehearsal`: witnessed on a rehearsal token; refused when submitted for the list; verified and
    audited as a rehearsal, shown to its site, on no list, counted apart on the system's record."""
    site, run = side_runs["rehearsal"]
    assert lines(run)[0]["token"]["statement"]["rehearsal"] is True  # signed by the witness
    assert "rehearsal" in stack.runner("report", str(run), config=site.config).stdout
    refused = site.submit(run)  # for the list: refused, nothing kept
    assert refused["status"] == "refused" and refused["reasons"][0]["check"].endswith("rehearsal"), refused
    assert "cannot be submitted for the list" in refused["reasons"][0]["message"]
    sub = stack.submit(run, site.token, site.config, "--rehearsal")
    assert sub["status"] == "verified" and sub["rehearsal"] and sub["url"] is None and sub["rank"] is None, \
        sub["reasons"]
    assert sub["challenge"] and sub["audit"] == "passed", sub  # the audit rehearsed too
    auth = {"Authorization": f"Token {site.token}"}
    mine = httpx.get(f"{stack.url}/api/v1/results/{sub['result']}/", headers=auth, timeout=30).json()
    got = {c["name"]: c for c in mine["report"]["checks"]}
    assert all(got[name]["passed"] for name in WITNESS_CHECKS), {n: got[n]["message"] for n in WITNESS_CHECKS}
    for path in (f"/api/v1/results/{sub['result']}/", f"/api/v1/submissions/{sub['submission']}/",
                 f"/results/{sub['result']}/"):
        assert httpx.get(f"{stack.url}{path}", timeout=30).status_code == 404, path  # nobody else sees it
    every = stack.get("/api/v1/leaderboard/?all=1&page_size=500")["results"]
    assert sub["result"] not in {row["id"] for row in every}
    system = stack.get(f"/api/v1/systems/{site.system['id']}/")
    assert (system["runs_attempted"], system["rehearsals"], system["rehearsals_verified"]) == (0, 1, 1), system


def test_heartbeats_need_the_site_key(stack, runs):
    site, run = runs["honest"]
    run_id = lines(run)[0]["run_id"]
    statement = {"kind": witness.HEARTBEAT_KIND, "run_id": run_id, "heartbeat_seq": 10_000, "head": "ab" * 32,
                 "log_id": "cd" * 32, "work": 0.0, "epochs": 0, "best_accuracy": None, "sent_at": time.time(),
                 "previous_receipt": None}
    forged = base64.b64encode(keys.generate_key().sign(witness.canonical(statement))).decode()
    r = httpx.post(f"{stack.url}/api/v1/runs/{run_id}/heartbeats/", headers={"Authorization": f"Token {site.token}"},
                   json={"statement": statement, "signature": forged}, timeout=30)
    assert r.status_code == 403 and r.json()["check"] == "signature"



def test_every_stored_bundle_rebuilds_the_same(stack, honest_submitted):
    """Last in the file (so after the others): `aiperf_rebuild --check` over what this file stored, the
    witnessed runs, the killed and resumed one, the outage's and the forgeries' (accepted or refused), with
    the service's receipts and rules: zero differences."""
    assert rebuilt_without_differences(stack)["compared"] >= 2


# ---- AIPerf-LLM: the same witness and registration ----------------------------------------------------------
@pytest.fixture(scope="module")
def llm_witnessed(stack, tmp_path_factory):
    """Four witnessed AIPerf-LLM runs side by side (llm-smoke, one slot of one process each), each on its site's
    registered system: the honest one, one whose log a forger edits before submitting it (a run is submitted once),
    one whose trial program logs losses lower than its weights reach, and one whose trial program trains a tenth of
    its steps and claims them all. Each test needs a finished trial: each run is stopped (SIGTERM) once it has one.
    A fixed 80 s was not enough under load (four runs and the other test stream on two cores finished none, and
    each ran again alone: 466 s in all); LLM_WITNESSED_MAX_S bounds a run."""
    work = tmp_path_factory.mktemp("llm")
    sites = {"honest": Site(stack, "Language Lab"), "forger": Site(stack, "Forging Language Lab"),
             "inflated": Site(stack, "Understating Language Lab"), "skipping": Site(stack, "Idling Language Lab")}
    # The understating site rehearses: its run is on a rehearsal token, audited all the same.
    trial_module = {"inflated": ["--trial-module", "tests.service.llm_inflated_trial", "--rehearsal"],
                    "skipping": ["--trial-module", "tests.service.llm_skipping_trial"]}
    runs = {name: work / name for name in sites}

    def start(name: str, seed: int) -> subprocess.Popen:
        return subprocess.Popen([str(BIN / "aiperf-runner"), "run", "--workload", "llm", "--preset", "llm-smoke",
                                 "--slots", "1", "--devices-per-slot", "1", "--duration", f"{LLM_WITNESSED_MAX_S}s",
                                 "--seed", str(seed), "--out", str(runs[name]),
                                 "--system", str(sites[name].system["id"]), *trial_module.get(name, [])],
                                env=sites[name].env(), cwd=REPO, stdout=subprocess.PIPE, stderr=subprocess.STDOUT,
                                text=True)

    def a_trial_finished(events: list[dict[str, Any]]) -> bool:
        return any(e["type"] == "trial_finished" for e in events)

    procs = {name: start(name, i) for i, name in enumerate(sites)}
    stop_runs_when([(procs[name], runs[name]) for name in sites], a_trial_finished, LLM_WITNESSED_MAX_S + 120)
    for name, proc in procs.items():
        assert "witnessed by" in finish(proc)
        assert a_trial_finished(lines(runs[name])), f"{name}: no trial finished in {LLM_WITNESSED_MAX_S} s"
    return {name: (site, runs[name]) for name, site in sites.items()}


def test_a_witnessed_llm_run_passes_the_witness_on_its_own_list(stack, llm_witnessed):
    site, run = llm_witnessed["honest"]
    events = lines(run)
    assert events[0]["token"] and sum(e["type"] == "witness" for e in events) >= 3
    assert events[-1]["type"] == "witness"  # the end of the run is witnessed
    sub = site.submit(run)  # answers the challenge: the weights of the trials asked for, re-evaluated
    assert sub["status"] == "verified" and sub["challenge"] and sub["audit"] == "passed", sub
    # ...and the drawn trials' weights and their parents' weights and moments, the trials trained again
    assert sub["states"] and set(sub["states_received"]) == {s["sha256"] for s in sub["states"]}, sub
    reexecuted = stack.get(f"/api/v1/results/{sub['result']}/")["audit_report"]["reexecuted"]
    assert reexecuted and all(c["passed"] for cs in reexecuted.values() for c in cs), reexecuted
    got = checks(stack, sub)
    for name in (*WITNESS_CHECKS, "system.registered", "system.facts", "system.peak"):
        assert got[name]["passed"], (name, got[name]["message"])
    site_view = own_checks(run)
    assert all(site_view[name] for name in (*WITNESS_CHECKS, "system.registered")), site_view
    board = stack.get("/api/v1/leaderboard/?workload=llm&all=1&format=json")  # both divisions
    [entry] = [e for e in board if e["site"]["name"] == "Language Lab"]
    assert entry["trust"]["registered"] and entry["trust"]["witnessed"], entry
    assert entry["id"] not in [e["id"] for e in stack.get("/api/v1/leaderboard/?all=1&format=json")]
    # Official takes every validity and stability check too (its loss under the gate, its score steady over its
    # last half: a run stopped after its first trial, on a shared CPU, may get to neither).
    valid = all(c["passed"] for n, c in got.items() if n.startswith(("validity", "stability")))
    assert all(c["passed"] for n, c in got.items() if n.startswith("plausibility")), got
    assert entry["division"] == ("official" if valid else "open"), got


def test_llm_times_compressed_fail_the_witness(stack, llm_witnessed):
    """The LLM log's clock run at half speed (every time since the start halved, the log re-chained and re-signed):
    twice the score on paper; the service's receipts say how long it really took."""
    site, run = llm_witnessed["forger"]
    forge_witness(run, "timestamps-scaled", run)
    status, failed = outcome(stack, upload_forgery(stack, site, run))
    assert status == "rejected" and failed & {"witness.timeline", "witness.receipts"}, (status, failed)


def test_llm_devices_claimed_beyond_the_registration_are_not_believed(stack, llm_witnessed, tmp_path):
    """run.json claiming eight H100s on the registered CPU box (a copy of the honest run, a run id of its own):
    system.facts fails and the result is judged by the registered CPU's peak, never the claim."""
    site, honest = llm_witnessed["honest"]
    forged = unwitnessed_copy(honest, tmp_path / "forged")
    run_json = json.loads((forged / "run.json").read_text())
    run_json["system"].update(accelerator_model=H100, accelerator_count=8,
                              accelerators=[{"model": H100, "memory_bytes": 85899345920}] * 8)
    (forged / "run.json").write_text(json.dumps(run_json))
    sub = upload_forgery(stack, site, forged)
    status, failed = outcome(stack, sub)
    assert status == "open" and "system.facts" in failed, (status, failed)
    result = stack.get(f"/api/v1/results/{sub['result']}/")
    assert result["peak_flops"] < 1e13, result["peak_flops"]  # two CPU cores, not 8 x 989 TFLOP/s


def test_an_llm_loss_understated_at_the_source_fails_the_audit(stack, llm_witnessed):
    """A trial program that logs every loss 0.3 nats lower than its weights reach: the log is chained, signed and
    witnessed, its weights honest; the re-evaluation of the challenged weights (audit.loss) rejects it. The run is
    a rehearsal (`run --workload llm --rehearsal`): refused for the list, audited as a rehearsal."""
    site, run = llm_witnessed["inflated"]
    assert lines(run)[0]["token"]["statement"]["rehearsal"] is True  # an LLM rehearsal, signed by the witness
    refused = site.submit(run)  # for the list: refused, nothing kept
    assert refused["status"] == "refused" and refused["reasons"][0]["check"].endswith("rehearsal"), refused
    sub = stack.submit(run, site.token, site.config, "--rehearsal")  # the rehearsal's audit is the real one
    assert sub["status"] == "rejected" and sub["rehearsal"], sub
    reasons = {r["check"]: r["message"] for r in sub["reasons"]}
    assert "audit.loss" in reasons, sub["reasons"]


def test_an_llm_trial_that_trained_a_tenth_of_its_steps_fails_the_re_execution(stack, llm_witnessed):
    """A trial program that trains 4 of its 40 steps, waits out half the time the rest would take and logs all 40 (tokens
    and FLOPs to match): chained, signed, witnessed, its weights and loss honest for what it did, its rate one the
    CPU can reach. The audit trains drawn trials again from the start their log binds (audit.reexecute)."""
    site, run = llm_witnessed["skipping"]
    sub = site.submit(run)  # uploads the drawn trials' weights and their parents' weights and moments
    assert sub["status"] == "rejected", sub
    reasons = {r["check"]: r["message"] for r in sub["reasons"]}
    assert "audit.reexecute" in reasons and "audit.loss" not in reasons, sub["reasons"]
    assert "not what the trial's logged steps make" in reasons["audit.reexecute"], reasons
    assert stack.get(f"/api/v1/submissions/{sub['submission']}/")["result"] is None  # off the list
