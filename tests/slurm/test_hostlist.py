"""The runner's SLURM hostlist parser: by itself, and against `scontrol` on the test cluster."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest
from aiperf_runner.util.hostlist import MAX_HOSTS, HostlistError, compress_hostlist, expand_hostlist

from tests.slurm.cluster import env_for

EXPANSIONS = {
    "n[1-3],gpu7": ["n1", "n2", "n3", "gpu7"],
    "n[001-010]": [f"n{i:03d}" for i in range(1, 11)],
    "n[1-3,5]": ["n1", "n2", "n3", "n5"],
    "n[1-2,5-6,10]": ["n1", "n2", "n5", "n6", "n10"],
    "r[1-2]n[1-2]": ["r1n1", "r1n2", "r2n1", "r2n2"],
    "r[1-2]-n[1-2]": ["r1-n1", "r1-n2", "r2-n1", "r2-n2"],
    "x[1-2]y[3]z[4-5]": ["x1y3z4", "x1y3z5", "x2y3z4", "x2y3z5"],
    "n[1-2],m[5-6]x[01-02]": ["n1", "n2", "m5x01", "m5x02", "m6x01", "m6x02"],
    "n[9-11]": ["n9", "n10", "n11"],
    "n[09-11]": ["n09", "n10", "n11"],
    "n[098-100]": ["n098", "n099", "n100"],
    "n[01-3]": ["n01", "n02", "n03"],     # the width is the lower bound's
    "n[1-03]": ["n1", "n2", "n3"],
    "n[0-0]": ["n0"],
    "n[01]": ["n01"],
    "[1-3]": ["1", "2", "3"],
    "a-b.c": ["a-b.c"],
    "node-1-[2-3]": ["node-1-2", "node-1-3"],
    "x-[1-2]": ["x-1", "x-2"],
    "a.b[1-2]": ["a.b1", "a.b2"],
    "a_b[1-2]": ["a_b1", "a_b2"],
    "n1-2": ["n1-2"],
    "n1,n1": ["n1", "n1"],                # duplicates and order are kept
    "n[1-3,2]": ["n1", "n2", "n3", "n2"],
    "n[1-3],n[2-4]": ["n1", "n2", "n3", "n2", "n3", "n4"],
    "n1 n2": ["n1", "n2"],
    "n[1-2] n3": ["n1", "n2", "n3"],
    ",n1,": ["n1"],
    "n1,,n2": ["n1", "n2"],
    " n1": ["n1"],
    "n[4294967295-4294967296]": ["n4294967295", "n4294967296"],
}
INVALID = ["n[3-1]", "n[a-b]", "n[]", "n[1--3]", "n[1-2-3]", "n[-2]", "n[1,,2]", "n[1-2]]", "n[1-2 ]",
           "n[[1-2]]"]
LENIENT_IN_SLURM = ["n[1-3", "n]", "n[1, 2]"]  # scontrol reads these as 'n]', 'n]' and 'n1 n02'
COMPRESSIONS = ["n1,n2,n3", "n01,n02,n10", "n9,n10", "n1,n3,n2", "a,b,n1", "r1n1,r1n2,r2n1", "n1,n1",
                "n001,n1", "gpu7,n1,n2", "n09,n10", "n9,n010", "n1,n2,x,n3", "1,2,3", "n1", "n1,n3",
                "n10,n9", "n8,n9,n10,n11", "n098,n099,n100", "n98,n099", "a1b2,a1b3", "n-1,n-2",
                "n1.x,n2.x", "n,n1", "n1x,n2x"]


@pytest.mark.parametrize("hostlist", sorted(EXPANSIONS))
def test_expand(hostlist: str) -> None:
    assert expand_hostlist(hostlist) == EXPANSIONS[hostlist]


@pytest.mark.parametrize("hostlist", INVALID + LENIENT_IN_SLURM)
def test_invalid_lists_are_refused(hostlist: str) -> None:
    with pytest.raises(HostlistError, match="hostlist"):
        expand_hostlist(hostlist)


def test_empty_and_null() -> None:
    assert expand_hostlist("") == [] and expand_hostlist("(null)") == [] and expand_hostlist(" , ") == []


def test_a_suffix_after_the_last_group() -> None:
    # SLURM 22.05 refuses these; newer releases and sites' InfiniBand names use them.
    assert expand_hostlist("n[1-2]-ib,x") == ["n1-ib", "n2-ib", "x"]
    assert expand_hostlist("n[1-2].d") == ["n1.d", "n2.d"]


def test_too_many_hosts() -> None:
    with pytest.raises(HostlistError, match="more than"):
        expand_hostlist(f"n[1-{MAX_HOSTS + 1}]")
    with pytest.raises(HostlistError, match="more than"):
        expand_hostlist("a[1-2000]b[1-2000]")
    with pytest.raises(HostlistError, match="more than"):
        expand_hostlist(",".join([f"n[1-{MAX_HOSTS // 2 + 1}]"] * 2))


def test_compress() -> None:
    assert compress_hostlist(["n1", "n2", "n3", "n5"]) == "n[1-3,5]"
    assert compress_hostlist(["n08", "n09", "n10", "gpu7"]) == "n[08-10],gpu7"
    assert compress_hostlist([]) == ""
    with pytest.raises(HostlistError):
        compress_hostlist(["n[1]"])


@pytest.mark.parametrize("hostlist", sorted(EXPANSIONS))
def test_compress_round_trips(hostlist: str) -> None:
    names = expand_hostlist(hostlist)
    assert expand_hostlist(compress_hostlist(names)) == names


def test_command_line() -> None:
    env = {**os.environ, "PYTHONPATH": os.pathsep.join(sys.path)}
    run = [sys.executable, "-m", "aiperf_runner.util.hostlist"]
    proc = subprocess.run([*run, "n[08-10],gpu7"], capture_output=True, text=True, env=env, timeout=60)
    assert proc.returncode == 0 and proc.stdout == "n08\nn09\nn10\ngpu7\n"
    proc = subprocess.run([*run, "--compress", "n1,n2", "n3"], capture_output=True, text=True, env=env, timeout=60)
    assert proc.returncode == 0 and proc.stdout == "n[1-3]\n"
    proc = subprocess.run([*run, "n[3-1]"], capture_output=True, text=True, env=env, timeout=60)
    assert proc.returncode == 2 and "descending range" in proc.stderr and proc.stdout == ""


# ---- against scontrol ------------------------------------------------------------------------------

def scontrol(conf: Path, *args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(["scontrol", "show", *args], capture_output=True, text=True, env=env_for(conf), timeout=60)


def test_expand_like_scontrol(one_node: Path) -> None:
    for hostlist, names in EXPANSIONS.items():
        proc = scontrol(one_node, "hostnames", hostlist)
        assert proc.returncode == 0, proc.stderr
        assert proc.stdout.split() == names, hostlist


def test_refuse_like_scontrol(one_node: Path) -> None:
    for hostlist in INVALID:  # scontrol exits 0, but says so
        proc = scontrol(one_node, "hostnames", hostlist)
        assert "Invalid hostlist" in proc.stdout + proc.stderr, hostlist


def test_compress_like_scontrol(one_node: Path) -> None:
    for names in COMPRESSIONS:
        proc = scontrol(one_node, "hostlist", names)
        assert proc.returncode == 0, proc.stderr
        assert compress_hostlist(names.split(",")) == proc.stdout.strip(), names
