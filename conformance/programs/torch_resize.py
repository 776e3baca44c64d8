"""Stand-in for an elastic training script whose job is resized while it
runs: each worker process joins the round torchrun formed, says so
(`ROUND` result: its rank, the world, the node), then all-reduces once a
second until every process of the round agrees to stop. A process stops
when the file named by RESIZE_STOP_AT holds this round's world size: the
test writes it once the rounds it waits for have formed. A node added to
the job makes torchrun end the round and form the next one with it (a
membership change, not a failure); a node removed breaks the round's
collectives, and the others' agents restart their workers and form the
next round without it."""

import os
import socket
import time

import report

import torch
import torch.distributed as dist

dist.init_process_group("gloo")
rank, world = dist.get_rank(), dist.get_world_size()
report.result({
    "event": "round",
    "rank": rank,
    "world": world,
    "restart": int(os.environ["TORCHELASTIC_RESTART_COUNT"]),
    "hostname": socket.gethostname(),
})
stop_at = os.environ["RESIZE_STOP_AT"]
while True:
    t = torch.tensor([1.0])
    dist.all_reduce(t)
    try:
        with open(stop_at) as f:
            wanted = int(f.read().strip() or -1)
    except (FileNotFoundError, ValueError):
        wanted = -1
    # Stop together: every process of the round must see it.
    agreed = torch.tensor([1.0 if wanted == world else 0.0])
    dist.all_reduce(agreed, op=dist.ReduceOp.MIN)
    if agreed.item() == 1.0:
        report.result({"event": "done", "rank": rank, "world": world, "sum": t.item()})
        break
    time.sleep(1)
dist.destroy_process_group()
