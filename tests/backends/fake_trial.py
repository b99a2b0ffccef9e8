"""A stand-in trial command for the backend conformance suite.

    python -m tests.backends.fake_trial MODE OUT_DIR

MODE: `ok` writes OUT_DIR/done and exits 0; `fail` exits 3; `sleep` records its pid (and the pid of
a child it starts, to check that cancel takes the whole tree) and sleeps until killed or cancelled;
`env` writes the value of $FAKE_TRIAL_VAR to OUT_DIR/env; `facts` writes OUT_DIR/facts.json (pid,
session, cwd, argv, stdin...: how it was started); `exit N` exits with status N by SystemExit. Under the inprocess backend `main` gets
a `cancel` event and returns when it is set.
"""

from __future__ import annotations

import os
import subprocess
import sys
import threading
import time
from pathlib import Path


def main(argv: list[str] | None = None, cancel: threading.Event | None = None) -> int:
    mode, out = (argv if argv is not None else sys.argv[1:])[:2]
    out_dir = Path(out)
    out_dir.mkdir(parents=True, exist_ok=True)
    print(f"fake trial {mode} starting", flush=True)
    if mode == "ok":
        (out_dir / "done").write_text("done\n")
        return 0
    if mode == "fail":
        print("fake trial failing on purpose", file=sys.stderr, flush=True)
        return 3
    if mode == "env":
        (out_dir / "env").write_text(os.environ.get("FAKE_TRIAL_VAR", ""))
        return 0
    if mode == "facts":  # what a started program can see of how it was started
        import json

        facts = {"pid": os.getpid(), "ppid": os.getppid(), "sid": os.getsid(0), "pgid": os.getpgid(0),
                 "cwd": os.getcwd(), "argv": sys.argv[1:], "name": __name__, "stdin": os.readlink("/proc/self/fd/0"),
                 "var": os.environ.get("FAKE_TRIAL_VAR"), "torch_loaded": "torch" in sys.modules,
                 "threads": len(os.listdir("/proc/self/task")), "cpu_set": os.environ.get("AIPERF_CPU_SET"),
                 "inherited": os.environ.get("FAKE_INHERITED"),
                 "slurm_step": os.environ.get("SLURM_STEP_ID"),
                 "affinity": sorted(os.sched_getaffinity(0))}
        (out_dir / "facts.json").write_text(json.dumps(facts))
        return 0
    if mode == "exit":
        sys.exit(int(argv[2]) if argv is not None else int(sys.argv[3]))
    if mode == "sleep":
        if cancel is None:  # a real process: leave a child to prove the whole tree is killed
            child = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(600)"])
            (out_dir / "child.pid").write_text(str(child.pid))
            (out_dir / "pid").write_text(str(os.getpid()))
        (out_dir / "started").write_text("1")
        deadline = time.monotonic() + 600
        while time.monotonic() < deadline:
            if cancel is not None and cancel.wait(0.05):
                return 1
            if cancel is None:
                time.sleep(0.1)
        return 0
    raise SystemExit(f"unknown mode {mode!r}")


if __name__ == "__main__":
    sys.exit(main())
