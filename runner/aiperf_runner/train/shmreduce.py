"""The gradient allreduce of a CPU trial whose ranks share one machine, through shared memory.

gloo, the CPU backend of torch.distributed, moves every collective over TCP through a background
thread per peer: on a two-core machine an allreduce of the smoke seed's 78,000 gradients took
2.5 ms and one float 0.6 ms (thread wake-ups, not bytes), and DDP over two ranks trained each
image at about half the speed of two independent processes (one slot at 0.69x of two slots).
Where every rank of the group runs on this machine, the gradients meet in a shared-memory file
instead: each rank copies its bucket into its row, waits for the others and sums all the rows
into its bucket (0.2 ms for the same 78,000 floats). Rows alternate between two halves of the
file, so one rendezvous per allreduce suffices: a rank writes a half again only two calls later,
after every rank has arrived at the call between, so after all have read it. NCCL plays this
part on GPUs; gloo has no intra-node path in torch 2.14.

`install(ddp_model, denv, device)` registers it as the DDP communication hook when it applies
(CPU, every rank on this node, x86-64) and returns whether it did; elsewhere DDP keeps gloo.
`AIPERF_SHM_ALLREDUCE=0` turns it off. The ranks wait on each other by polling per-rank sequence
numbers in the file: x86-64 keeps a core's stores in order, so a rank that sees a peer's number
also sees the data the peer wrote before it (on weaker memory models this would need fences
Python cannot issue, hence the architecture check). A rank that waits long yields its core, then
sleeps between polls, and gives up with an error after `timeout_s` (a peer died).
"""

from __future__ import annotations

import mmap
import os
import platform
import tempfile
import time

import numpy as np
import torch
import torch.distributed as dist

from .distenv import DistEnv

ENV = "AIPERF_SHM_ALLREDUCE"
FLAG_STRIDE = 8  # int64 words between two ranks' sequence numbers: one 64-byte cache line each
HEADER_BYTES = 64 * 64  # room for the sequence numbers of up to 64 local ranks
SPIN_POLLS = 2000  # polls before yielding the core (a step's compute is milliseconds)
YIELD_S = 0.002  # then yield until this long has passed, then sleep between polls
SLEEP_S = 0.0002
TIMEOUT_S = 600.0
ONE_BUCKET_MB = 1024  # DDP's bucket size with this hook: every gradient in one bucket (trial.py)
SHM_DIR = "/dev/shm"


def applies(denv: DistEnv, device: torch.device) -> bool:
    """Whether the trial's gradient allreduce can go through shared memory here."""
    if os.environ.get(ENV, "1").strip().lower() in ("0", "false", "no", "off"):
        return False
    return (device.type == "cpu" and denv.world_size > 1 and denv.world_size == denv.local_world_size
            and platform.machine().lower() in ("x86_64", "amd64") and os.path.isdir(SHM_DIR))


class ShmAllreduce:
    """Sum-allreduce of CPU tensors between the ranks of a single-node process group."""

    def __init__(self, rank: int, world_size: int, capacity_bytes: int, buffer: mmap.mmap,
                 timeout_s: float = TIMEOUT_S) -> None:
        """`buffer`: a mapping shared by the ranks, of `size(world_size, capacity_bytes)` bytes."""
        if world_size * FLAG_STRIDE * 8 > HEADER_BYTES:
            raise ValueError(f"at most {HEADER_BYTES // (FLAG_STRIDE * 8)} local ranks, not {world_size}")
        self.rank, self.world_size, self.timeout_s = rank, world_size, timeout_s
        self.capacity = capacity_bytes
        self._map = buffer
        self._flags = np.frombuffer(buffer, dtype=np.int64, count=HEADER_BYTES // 8)
        self._bytes = torch.frombuffer(buffer, dtype=torch.uint8, offset=HEADER_BYTES,
                                       count=2 * world_size * capacity_bytes)
        self._seq = 0

    @staticmethod
    def size(world_size: int, capacity_bytes: int) -> int:
        return HEADER_BYTES + 2 * world_size * capacity_bytes

    @classmethod
    def for_group(cls, rank: int, world_size: int, capacity_bytes: int) -> ShmAllreduce:
        """Collectively, over the default process group: rank 0 makes a file in /dev/shm, every
        rank maps it, then it is unlinked, so that nothing is left behind however the trial ends."""
        size = cls.size(world_size, capacity_bytes)
        path: list[str | None] = [None]
        if rank == 0:
            fd, path[0] = tempfile.mkstemp(prefix="aiperf-ddp-", dir=SHM_DIR)
            os.ftruncate(fd, size)
            os.close(fd)
        dist.broadcast_object_list(path, src=0)
        assert path[0] is not None
        fd = os.open(path[0], os.O_RDWR)
        try:
            buffer = mmap.mmap(fd, size)
        finally:
            os.close(fd)
        dist.barrier()
        if rank == 0:
            os.unlink(path[0])
        return cls(rank, world_size, capacity_bytes, buffer)

    def _wait_all(self, seq: int) -> None:
        """Publish that this rank reached `seq`, and wait until every rank has."""
        flags, stride = self._flags, FLAG_STRIDE
        flags[self.rank * stride] = seq
        polls = 0
        started = 0.0
        while True:
            if min(flags[0:self.world_size * stride:stride]) >= seq:
                return
            polls += 1
            if polls < SPIN_POLLS:
                continue
            now = time.monotonic()
            if not started:
                started = now
            elif now - started > self.timeout_s:
                raise TimeoutError(f"shared-memory allreduce: a peer did not arrive within {self.timeout_s:g} s")
            time.sleep(0 if now - started < YIELD_S else SLEEP_S)

    def _rows(self, half: int, dtype: torch.dtype, numel: int) -> torch.Tensor:
        """One half of the file's data area as `world_size` rows of `numel` elements, one per rank."""
        itemsize = torch.empty((), dtype=dtype).element_size()
        per_row = self.capacity // itemsize
        if numel > per_row:
            raise ValueError(f"a tensor of {numel * itemsize} bytes exceeds the {self.capacity} reserved")
        return self._bytes.view(dtype).view(2, self.world_size, per_row)[half, :, :numel]

    def allreduce_(self, tensor: torch.Tensor) -> torch.Tensor:
        """Sum `tensor` (contiguous, CPU) over the ranks, in place."""
        flat = tensor.view(-1)
        self._seq += 1
        rows = self._rows(self._seq % 2, flat.dtype, flat.numel())
        rows[self.rank].copy_(flat)
        self._wait_all(self._seq)
        torch.sum(rows, dim=0, out=flat)  # every rank in the same order: the same sum everywhere
        return tensor

    def close(self) -> None:
        del self._flags, self._bytes
        self._map.close()


def _hook(state, bucket):
    """DDP's default hook (allreduce, then divide by the world size) through shared memory.
    Unannotated: DDP checks the annotation of `bucket` against dist.GradBucket, which this
    module's postponed annotations would turn into a string."""
    buffer = bucket.buffer()
    state.allreduce_(buffer).div_(state.world_size)
    future: torch.futures.Future[torch.Tensor] = torch.futures.Future()
    future.set_result(buffer)
    return future


def install(ddp_model: torch.nn.parallel.DistributedDataParallel, denv: DistEnv,
            device: torch.device) -> ShmAllreduce | None:
    """Route `ddp_model`'s gradient allreduce through shared memory where it applies (`applies`);
    every rank of the group must call this. Returns the reducer (None: DDP keeps gloo)."""
    if not applies(denv, device):
        return None
    capacity = sum(p.numel() * p.element_size() for p in ddp_model.parameters() if p.requires_grad)
    reducer = ShmAllreduce.for_group(denv.rank, denv.world_size, max(capacity, 64))
    ddp_model.register_comm_hook(reducer, _hook)
    return reducer
