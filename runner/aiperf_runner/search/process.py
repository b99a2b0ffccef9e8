"""The architecture search in a process of its own: `python -m aiperf_runner.search.process FD`.

Started by the proposal buffer (search/buffer.py) when the controller runs many slots. FD is this end
of a socket pair; over it come the pickled search and the run's rules, then turns: (results,
wanted) -> ("ok", candidates, CPU seconds so far) or ("error", message and traceback, ...), after
which the process ends. None, or the controller going away, ends it too.
"""

from __future__ import annotations

import pickle
import sys
import time
import traceback
from multiprocessing.connection import Connection
from typing import Any

from aiperf_runner.search.buffer import _turn


def serve(conn: Connection) -> None:
    blob, rules = conn.recv()
    search = pickle.loads(blob)
    while True:
        try:
            message = conn.recv()
        except (EOFError, OSError):
            return  # the controller is gone
        if message is None:
            return
        results, wanted = message
        try:
            reply: tuple[str, Any, float] = ("ok", _turn(search, results, wanted, rules), time.process_time())
        except BaseException as exc:  # noqa: BLE001 - handed to the controller
            reply = ("error", f"{type(exc).__name__}: {exc}\n{traceback.format_exc()}", time.process_time())
        conn.send(reply)
        if reply[0] == "error":
            return


def main(argv: list[str] | None = None) -> int:
    args = sys.argv[1:] if argv is None else argv
    conn = Connection(int(args[0]))
    try:
        serve(conn)
    finally:
        conn.close()
    return 0


if __name__ == "__main__":
    sys.exit(main())
