"""Stand-in for a PyTorch training script: joins the process group the way
DDP scripts do (env:// — MASTER_ADDR, MASTER_PORT, WORLD_SIZE, RANK, whether
set by dljob or by torchrun), all-reduces rank+1 and gathers every rank's
pod hostname."""

import os
import socket

import report

import torch
import torch.distributed as dist

dist.init_process_group("gloo")
rank, world = dist.get_rank(), dist.get_world_size()
t = torch.tensor([float(rank + 1)])
dist.all_reduce(t)
hosts = [None] * world
dist.all_gather_object(hosts, socket.gethostname())
report.result({
    "rank": rank,
    "world": world,
    "sum": t.item(),
    "hosts": hosts,
    "local_rank": os.environ.get("LOCAL_RANK"),
    "group_rank": os.environ.get("GROUP_RANK"),
    "group_world_size": os.environ.get("GROUP_WORLD_SIZE"),
    "hostname": socket.gethostname(),
})
dist.destroy_process_group()
