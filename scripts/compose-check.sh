#!/usr/bin/env bash
# The compose deployment, exercised: docker-compose.yml started on images built here, a witnessed smoke
# run submitted to it from the host, verified by its worker and ranked, the ranking still there after
# the stack is restarted; then everything it made is removed.
#
#   scripts/compose-check.sh            (`make test` runs it: tests/service/test_compose_deploy.py)
#
# 1. dockerd and the local Debian base image (scripts/docker-base.sh start: no registry pulls here);
#    PostgreSQL and Redis images from docker/postgres and docker/redis, the service image from the
#    Dockerfile (BASE_IMAGE = that base), built side by side; the host's CA bundle goes into the
#    service's build (docker/ca/) so that pip trusts a TLS-inspecting proxy.
#    The audit worker's image (torch) is built beside them with torch's CPU build from this machine's pip
#    (AUDIT_TORCH pins; docker/audit-wheels, docker/wheels/README).
# 2. `up -d web worker beat` (postgres, redis and migrate with them), the web port published on 127.0.0.1
#    only; waits for the health checks.
# 3. A site made in the web container (manage.py aiperf_site create); on the host, with a scratch
#    AIPERF_CONFIG_DIR: keygen, register, system add, a witnessed 30-s smoke run (run token and
#    heartbeats from the stack), submit --no-wait; the worker container verifies it; the API shows it
#    verified and on the ranked list. Then `up -d audit`: the challenge answered from the host
#    (aiperf-runner evidence uploads the committed states asked for), the audit container re-executes
#    them, and the result's audit passes. Then a witnessed 30-s AIPerf-LLM run (llm-smoke), submitted and
#    audited the same way (its trials trained again in the audit container), ranked on the ?workload=llm list.
# 4. `down` (volumes kept) and `up` again: the submission and its place on the list are still there.
# 5. `down -v`, the images built here removed (not the base), dockerd stopped if this script started
#    it and no other container runs on it.
#
# Environment: AIPERF_RUNNER (default .venv/bin/aiperf-runner: the host's runner, with torch),
# BASE_IMAGE (aiperf-base:bookworm), AUDIT_TORCH (the audit image's torch pins, from the host's pip: default
# torch's CPU build), COMPOSE_CHECK_KEEP=1 (leave the stack and images for a look).
set -euo pipefail
cd "$(dirname "$0")/.."
repo=$PWD
started=$SECONDS
phase_start=$SECONDS
say() { printf '==> [%3ds] %s\n' "$((SECONDS - started))" "$*"; }
phase() { say "$1 (previous phase $((SECONDS - phase_start)) s)"; phase_start=$SECONDS; }

runner=${AIPERF_RUNNER:-$repo/.venv/bin/aiperf-runner}
[ -x "$runner" ] || { echo "compose-check: no aiperf-runner at $runner (make install, or set AIPERF_RUNNER)" >&2; exit 2; }
py=$(dirname "$runner")/python

if docker compose version >/dev/null 2>&1; then compose=(docker compose); else compose=(docker-compose); fi
export COMPOSE_PROJECT_NAME=aiperf-compose-check
export BASE_IMAGE=${BASE_IMAGE:-aiperf-base:bookworm}
export POSTGRES_IMAGE=aiperf-postgres:compose-check REDIS_IMAGE=aiperf-redis:compose-check
export AIPERF_IMAGE=aiperf-service:compose-check AIPERF_AUDIT_IMAGE=aiperf-audit:compose-check
export AIPERF_BIND=127.0.0.1 AIPERF_HEARTBEAT_INTERVAL_S=20
# The audit image's torch: the CPU build (PyPI's Linux torch is a CUDA build of about 2.7 GB); its torchvision is
# PyPI's, a CUDA build that does not load beside it, which the smoke audit never imports (docker/wheels/README).
read -r -a audit_torch <<< "${AUDIT_TORCH:-torch==2.13.0+cpu torchvision==0.28.0}"
export AIPERF_AUDIT_WHEELS=docker/audit-wheels
SECRET_KEY=$("$py" -c 'import secrets; print(secrets.token_urlsafe(48))')
AIPERF_PORT=$("$py" -c 'import socket; s = socket.socket(); s.bind(("127.0.0.1", 0)); print(s.getsockname()[1])')
export SECRET_KEY AIPERF_PORT
url=http://127.0.0.1:$AIPERF_PORT

work=$(mktemp -d /tmp/aiperf-compose-check.XXXXXX)
dockerd_ours=0
declare -A builds=()
cleanup() {
    local rc=$?
    trap - EXIT INT TERM
    if [ "$rc" -ne 0 ] && docker info >/dev/null 2>&1; then
        echo "compose-check: FAILED (exit status $rc); the stack's last log lines:" >&2
        "${compose[@]}" logs --no-color --tail 40 >&2 2>/dev/null || true
    fi
    # Builds still running (another one failed, or a signal): each in its own process group, so that
    # docker-compose's `docker build` goes too. An interrupted build may leave untagged layers (cache).
    local pid
    for pid in "${builds[@]}"; do kill -- "-$pid" 2>/dev/null || true; done
    rm -f docker/ca/ca-bundle.crt
    rm -rf "$AIPERF_AUDIT_WHEELS"
    if [ "${COMPOSE_CHECK_KEEP:-0}" = 1 ]; then
        say "COMPOSE_CHECK_KEEP=1: the stack ($COMPOSE_PROJECT_NAME, $url) and the images are left; scratch in $work"
        exit "$rc"
    fi
    if docker info >/dev/null 2>&1; then
        "${compose[@]}" down -v --remove-orphans >/dev/null 2>&1 || true
        docker image rm "$AIPERF_IMAGE" "$AIPERF_AUDIT_IMAGE" "$POSTGRES_IMAGE" "$REDIS_IMAGE" >/dev/null 2>&1 || true
    fi
    rm -rf "$work"
    # dockerd only when this script started it and nothing else runs on it (other users' containers).
    if [ "$dockerd_ours" = 1 ] && [ -z "$(docker ps -q 2>/dev/null)" ]; then
        scripts/docker-base.sh stop
    fi
    say "compose-check: $([ "$rc" -eq 0 ] && echo passed || echo FAILED) in $((SECONDS - started)) s"
    exit "$rc"
}
trap cleanup EXIT
trap 'exit 143' INT TERM

# ---- 1. images --------------------------------------------------------------------------------
say "docker: dockerd and the base image $BASE_IMAGE"
had_pid=0; [ -f var/docker/dockerd.pid ] && had_pid=1
scripts/docker-base.sh start
[ "$had_pid" = 0 ] && [ -f var/docker/dockerd.pid ] && dockerd_ours=1
"${compose[@]}" down -v --remove-orphans >/dev/null 2>&1 || true  # what an interrupted check left

phase "building $POSTGRES_IMAGE, $REDIS_IMAGE, $AIPERF_IMAGE and $AIPERF_AUDIT_IMAGE side by side (logs in $work)"
ca=${PIP_CERT:-${SSL_CERT_FILE:-/etc/ssl/certs/ca-certificates.crt}}
[ -f "$ca" ] && cp "$ca" docker/ca/ca-bundle.crt
rm -rf "$AIPERF_AUDIT_WHEELS"
"$py" -m pip download -q --no-deps -d "$AIPERF_AUDIT_WHEELS" "${audit_torch[@]}" >"$work/audit-wheels.log" 2>&1 \
    || { cat "$work/audit-wheels.log" >&2; exit 1; }
printf '%s\n' "${audit_torch[@]}" > "$AIPERF_AUDIT_WHEELS/constraints.txt"
# timed NAME COMMAND...: COMMAND in the background in a process group of its own (its id is the
# job's pid), its output in $work/NAME.log, its time printed.
timed() {
    local name=$1
    shift
    setsid bash -c 't0=$SECONDS; "${@:2}" >"$1" 2>&1 || exit; printf "==> %s image built in %d s\n" "$0" $((SECONDS - t0))' \
        "$name" "$work/$name.log" "$@" &
    builds[$name]=$!
}
timed postgres docker build --build-arg BASE_IMAGE="$BASE_IMAGE" -t "$POSTGRES_IMAGE" docker/postgres
timed redis docker build --build-arg BASE_IMAGE="$BASE_IMAGE" -t "$REDIS_IMAGE" docker/redis
timed service "${compose[@]}" build migrate  # the service image, as the compose file builds it
timed audit "${compose[@]}" build audit
for name in postgres redis service audit; do
    if ! wait "${builds[$name]}"; then
        echo "compose-check: the $name image did not build:" >&2
        tail -30 "$work/$name.log" >&2
        exit 1
    fi
done
rm -f docker/ca/ca-bundle.crt
rm -rf "$AIPERF_AUDIT_WHEELS"

# ---- 2. the stack -------------------------------------------------------------------------------
# state SERVICE: the health of its container (or its state when it has no health check).
state() {
    local cid
    cid=$("${compose[@]}" ps -q "$1")
    [ -n "$cid" ] || { echo missing; return; }
    docker inspect -f '{{if .State.Health}}{{.State.Health.Status}}{{else}}{{.State.Status}}{{end}}' "$cid"
}
wait_healthy() {
    local deadline=$((SECONDS + $2)) s
    while :; do
        s=$(state "$1")
        case $s in
            healthy) return ;;
            unhealthy|exited|dead|missing) echo "compose-check: $1 is $s" >&2; exit 1 ;;
        esac
        [ "$SECONDS" -lt "$deadline" ] || { echo "compose-check: $1 not healthy within $2 s ($s)" >&2; exit 1; }
        sleep 2
    done
}
up() {
    # compose starts postgres and redis, waits for their health checks, runs migrate to completion,
    # then starts the rest; /readyz through the published port answers before the next health check.
    "${compose[@]}" up -d --no-build web worker beat >"$work/up.log" 2>&1 || { cat "$work/up.log" >&2; exit 1; }
    "$py" - "$url/readyz" <<'PY'
import sys, time, urllib.request
deadline = time.monotonic() + 180
while True:
    try:
        with urllib.request.urlopen(sys.argv[1], timeout=5):
            break
    except OSError as exc:
        if time.monotonic() > deadline:
            sys.exit(f"compose-check: {sys.argv[1]} did not answer within 180 s ({exc})")
        time.sleep(1)
PY
}
phase "docker-compose up -d web worker beat ($url)"
up

# ---- 3. a witnessed smoke run from the host --------------------------------------------------------
phase "a site, its key and system, a witnessed 30-s smoke run on the host, submitted to $url"
export AIPERF_CONFIG_DIR=$work/config
token=$("${compose[@]}" exec -T web python manage.py aiperf_site create "Compose check" --country DE 2>>"$work/site.log" \
    | tail -1)
"$runner" keygen >/dev/null
"$runner" register --server "$url" --token "$token" >/dev/null
system=$("$runner" system add --name "Compose check" --accelerator-model cpu --accelerators-per-node 0 --nodes 1 --json \
    | "$py" -c 'import json, sys; print(json.load(sys.stdin)["id"])')
# The service approves every system by hand (AIPERF_SYSTEM_APPROVAL=manual, compose's default): as a maintainer.
"${compose[@]}" exec -T web python manage.py aiperf_system approve "$system" --reason "compose check: this host" \
    --by compose-check >/dev/null
timeout 300 "$runner" run --preset smoke --slots 2 --duration 30s --out "$work/run" --system "Compose check" \
    --progress plain >"$work/run.log" 2>&1 || { tail -30 "$work/run.log" >&2; exit 1; }
"$runner" submit "$work/run" --server "$url" --token "$token" --json --no-wait >"$work/submit.json" \
    || { cat "$work/submit.json" >&2; exit 1; }
submission=$("$py" -c 'import json, sys; print(json.load(open(sys.argv[1]))["submission"])' "$work/submit.json")

# api CHECK: the API's view of the submission, checked by the Python below; prints what it saw.
api() {
    "$py" - "$1" "$url" "$token" "$submission" <<'PY'
import json, sys, time, urllib.request

check, url, token, submission = sys.argv[1:]

def get(path, auth=True):
    req = urllib.request.Request(url + path, headers={"Authorization": f"Token {token}"} if auth else {})
    with urllib.request.urlopen(req, timeout=10) as resp:
        return json.load(resp)

deadline = time.monotonic() + 240
while True:  # the worker container verifies the bundle: wait for it
    sub = get(f"/api/v1/submissions/{submission}/")
    if sub["status"] not in ("received", "verifying"):
        break
    if time.monotonic() > deadline:
        sys.exit(f"submission {submission} still {sub['status']} after 240 s: is the worker consuming?")
    time.sleep(2)
if sub["status"] not in ("verified", "published"):
    sys.exit(f"submission {submission}: {sub['status']} {json.dumps(sub.get('reasons'))}")
if not sub.get("result") or not sub.get("rank"):
    sys.exit(f"submission {submission} verified but without a result or rank: {json.dumps(sub)}")
board = get("/api/v1/leaderboard/", auth=False)
entries = board["results"] if isinstance(board, dict) else board
mine = [e for e in entries if e["id"] == sub["result"]]
if not mine:
    sys.exit(f"result {sub['result']} is not on the ranked list ({len(entries)} entries)")
result = get(f"/api/v1/results/{sub['result']}/", auth=False)
print(f"{check}: submission {submission} {sub['status']}, result {result['id']} rank {mine[0]['rank']} "
      f"in {mine[0]['division']}, score {sub['score_ops']:.4g} OPS")
PY
}
api "after the submission" | tee "$work/before.txt"

phase "the audit worker: the challenge answered from the host, the work re-executed in its container"
"${compose[@]}" up -d --no-build audit >"$work/up-audit.log" 2>&1 || { cat "$work/up-audit.log" >&2; exit 1; }
"$runner" evidence "$work/run" --server "$url" --token "$token" --timeout 480 --json >"$work/evidence.json" \
    || { cat "$work/evidence.json" >&2; exit 1; }
"$py" - "$work/evidence.json" <<'PY'
import json, sys
sub = json.load(open(sys.argv[1]))
if sub.get("audit") != "passed":
    sys.exit(f"compose-check: the audit container did not pass the witnessed run: {json.dumps(sub)[:2000]}")
print(f"audited in the audit container: {len(sub.get('states_received') or [])} committed state(s) re-executed, "
      f"audit {sub['audit']}")
PY

phase "an AIPerf-LLM run (llm-smoke, witnessed, 30 s) submitted, its challenge answered, audited in the container"
timeout 300 "$runner" run --workload llm --preset llm-smoke --slots 2 --duration 30s --out "$work/llm" \
    --system "Compose check" --progress plain >"$work/llm-run.log" 2>&1 || { tail -30 "$work/llm-run.log" >&2; exit 1; }
"$runner" submit "$work/llm" --server "$url" --token "$token" --json --timeout 480 >"$work/llm-submit.json" \
    || { cat "$work/llm-submit.json" >&2; exit 1; }
"$py" - "$work/llm-submit.json" "$url" <<'PY'
import json, sys, urllib.request
sub, url = json.load(open(sys.argv[1])), sys.argv[2]
if sub.get("status") not in ("verified", "published") or sub.get("audit") != "passed":
    sys.exit(f"compose-check: the AIPerf-LLM run was not verified and audited: {json.dumps(sub)[:2000]}")
with urllib.request.urlopen(f"{url}/api/v1/leaderboard/?workload=llm", timeout=10) as resp:
    board = json.load(resp)
entries = board["results"] if isinstance(board, dict) else board
if not any(e["id"] == sub["result"] for e in entries):
    sys.exit(f"compose-check: AIPerf-LLM result {sub['result']} is not on the ?workload=llm list")
print(f"AIPerf-LLM: result {sub['result']} {sub['status']}, audit {sub['audit']} in the audit container, "
      f"rank {sub['rank']} on the AIPerf-LLM list")
PY
# Every container's own health check too (worker's first one runs 30 s after its start, beat's 60 s).
for service in postgres redis web worker beat audit; do wait_healthy "$service" 120; done

# ---- 4. restart: the volumes keep the result -------------------------------------------------------
phase "docker-compose down (volumes kept), then up again"
"${compose[@]}" down >/dev/null 2>&1
up
api "after the restart" | tee "$work/after.txt"
[ "$(cut -d: -f2- "$work/before.txt")" = "$(cut -d: -f2- "$work/after.txt")" ] \
    || { echo "compose-check: the result changed across the restart" >&2; exit 1; }
# The bundles in the media volume re-verified into a scratch database: the same results as the stored ones.
"${compose[@]}" exec -T web python manage.py aiperf_rebuild --check --json >"$work/rebuild.json" \
    || { cat "$work/rebuild.json" >&2; exit 1; }
"$py" - "$work/rebuild.json" <<'PY'
import json, sys
report = json.load(open(sys.argv[1]))
if report["reverified"] < 1 or report["differ"] or report["skipped_without_bundle"]:
    sys.exit(f"compose-check: aiperf_rebuild after the restart: {json.dumps(report)}")
print(f"after the restart: aiperf_rebuild --check re-verified {report['reverified']} bundle(s), no difference")
PY

phase "removing the stack, its volumes and the images built here"
