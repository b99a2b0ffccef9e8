"""SLURM hostlists ('n[1-3],gpu[07-08]') expanded to node names and compressed back, in pure Python.

The runner's one parser of node lists: the slurm backend reads squeue's, the trial program reads
`SLURM_STEP_NODELIST` under srun, and the batch script writes the job's nodes with
`python -m aiperf_runner.util.hostlist "$SLURM_JOB_NODELIST"` (one name per line), so that nothing
depends on `scontrol show hostnames` (containers often lack the SLURM client).

Syntax, as `scontrol show hostnames` reads it: items separated by commas or whitespace; in an item,
bracket groups of comma-separated numbers and ranges (`[1-3,5]`), zero-padded to the width of a
range's lower bound (`n[08-10]` -> n08 n09 n10; `n[9-10]` -> n9 n10); several groups make every
combination, the first group varying slowest (`r[1-2]n[1-2]` -> r1n1 r1n2 r2n1 r2n2). Order and
duplicates are kept. Unlike SLURM 22.05, text after the last group (`n[1-2]-ib`) is accepted.
Anything else (an unclosed or nested bracket, a descending range, a letter in a range) is a
`HostlistError`. The python-hostlist package does the same but is GPL-licensed, the runner Apache-2.0.
"""

from __future__ import annotations

import argparse
import itertools
import re
import sys
from collections.abc import Iterable, Iterator

from aiperf_runner.spec.errors import AiperfError

MAX_HOSTS = 1 << 20  # a typo like n[1-99999999] must not build a list of 10^8 names
_RANGE = re.compile(r"([0-9]+)(?:-([0-9]+))?")
_NUMBERED = re.compile(r"(.*?)([0-9]+)")


class HostlistError(AiperfError, ValueError):
    """A node list that is not valid SLURM hostlist syntax."""


def _items(hostlist: str) -> Iterator[str]:
    """The top-level items of a hostlist: split at commas and whitespace outside brackets."""
    item: list[str] = []
    depth = 0
    for ch in hostlist:
        if ch == "[":
            if depth:
                raise HostlistError(f"nested '[' in hostlist {hostlist!r}")
            depth = 1
        elif ch == "]":
            if not depth:
                raise HostlistError(f"']' without '[' in hostlist {hostlist!r}")
            depth = 0
        elif depth and ch.isspace():
            raise HostlistError(f"whitespace inside brackets in hostlist {hostlist!r}")
        elif not depth and (ch == "," or ch.isspace()):
            if item:
                yield "".join(item)
            item = []
            continue
        item.append(ch)
    if depth:
        raise HostlistError(f"unclosed '[' in hostlist {hostlist!r}")
    if item:
        yield "".join(item)


def _numbers(group: str, hostlist: str) -> list[str]:
    """'1-3,5' -> ['1', '2', '3', '5']; '08-10' -> ['08', '09', '10']."""
    out: list[str] = []
    for part in group.split(","):
        m = _RANGE.fullmatch(part)
        if m is None:
            raise HostlistError(f"bad range {part!r} in hostlist {hostlist!r}")
        lo, hi = m.group(1), m.group(2) or m.group(1)
        if int(hi) < int(lo):
            raise HostlistError(f"descending range {part!r} in hostlist {hostlist!r}")
        if len(out) + int(hi) - int(lo) >= MAX_HOSTS:
            raise HostlistError(f"hostlist {hostlist!r} names more than {MAX_HOSTS} hosts")
        width = len(lo)
        out.extend(str(n).zfill(width) for n in range(int(lo), int(hi) + 1))
    return out


def _expand_item(item: str, hostlist: str) -> list[str]:
    # After _items, the brackets of an item are balanced and not nested: odd pieces are groups.
    pieces = re.split(r"\[([^\]]*)\]", item)
    choices = [[piece] if i % 2 == 0 else _numbers(piece, hostlist) for i, piece in enumerate(pieces)]
    total = 1
    for options in choices:
        total *= len(options)
    if total > MAX_HOSTS:
        raise HostlistError(f"hostlist {hostlist!r} names more than {MAX_HOSTS} hosts")
    return ["".join(parts) for parts in itertools.product(*choices)]


def expand_hostlist(hostlist: str) -> list[str]:
    """'n[1-3],gpu7' -> ['n1', 'n2', 'n3', 'gpu7']. An empty list (or SLURM's '(null)') gives []."""
    if hostlist.strip() in ("", "(null)", "None"):
        return []
    names: list[str] = []
    for item in _items(hostlist):
        names.extend(_expand_item(item, hostlist))
        if len(names) > MAX_HOSTS:
            raise HostlistError(f"hostlist {hostlist!r} names more than {MAX_HOSTS} hosts")
    return names


def compress_hostlist(names: Iterable[str]) -> str:
    """The inverse of expand_hostlist, as `scontrol show hostlist` writes it: neighbours that differ
    only in their trailing number share a bracket, consecutive numbers of one width make a range
    ('n1,n2,n3,n5' -> 'n[1-3,5]'). Order is kept; names ending in no number are left as they are."""
    out: list[str] = []
    prefix: str | None = None
    ranges: list[list[str]] = []  # [first, last] number strings of the current prefix

    def flush() -> None:
        if prefix is None:
            return
        if len(ranges) == 1 and ranges[0][0] == ranges[0][1]:
            out.append(prefix + ranges[0][0])
        else:
            body = ",".join(lo if lo == hi else f"{lo}-{hi}" for lo, hi in ranges)
            out.append(f"{prefix}[{body}]")

    for name in names:
        if not name or re.search(r"[\[\],\s]", name):
            raise HostlistError(f"not a host name: {name!r}")
        m = _NUMBERED.fullmatch(name)
        if m is None:
            flush()
            prefix, ranges = None, []
            out.append(name)
            continue
        head, number = m.group(1), m.group(2)
        if head != prefix:
            flush()
            prefix, ranges = head, []
        last = ranges[-1] if ranges else None
        # A range continues when the number follows its end and prints at the range's width.
        if last is not None and int(number) == int(last[1]) + 1 and number == str(int(number)).zfill(len(last[0])):
            last[1] = number
        else:
            ranges.append([number, number])
    flush()
    return ",".join(out)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(
        prog="python -m aiperf_runner.util.hostlist",
        description="Expand a SLURM hostlist to one node name per line (as `scontrol show hostnames`), "
                    "or with --compress join names into a hostlist (as `scontrol show hostlist`).")
    parser.add_argument("hostlist", nargs="+", help="e.g. 'n[01-04],gpu7' (several arguments are one list)")
    parser.add_argument("--compress", action="store_true", help="print the names given as one hostlist")
    args = parser.parse_args(argv)
    text = ",".join(args.hostlist)
    try:
        if args.compress:
            print(compress_hostlist(expand_hostlist(text)))
        else:
            for name in expand_hostlist(text):
                print(name)
    except HostlistError as exc:
        print(f"hostlist: {exc}", file=sys.stderr)
        return 2
    return 0


if __name__ == "__main__":
    sys.exit(main())
