"""Stand-in for a training script that loses one worker process: on the
first attempt (TORCHELASTIC_RESTART_COUNT 0) the first local process of the
node torchrun made group rank 1 kills itself with SIGKILL after joining the
process group, as `kill -9` of one worker process does; every other process
is then stuck in an all-reduce that cannot complete. torchrun must restart
the worker group in place, rendezvous again, and the next attempt all-reduces
rank+1 over the whole world and reports."""

import os
import signal
import socket

import report

import torch
import torch.distributed as dist

dist.init_process_group("gloo")
rank, world = dist.get_rank(), dist.get_world_size()
attempt = int(os.environ["TORCHELASTIC_RESTART_COUNT"])
if attempt == 0 and os.environ["GROUP_RANK"] == "1" and os.environ["LOCAL_RANK"] == "0":
    os.kill(os.getpid(), signal.SIGKILL)
t = torch.tensor([float(rank + 1)])
dist.all_reduce(t)
report.result({
    "rank": rank,
    "world": world,
    "sum": t.item(),
    "attempt": attempt,
    "hostname": socket.gethostname(),
})
dist.destroy_process_group()
