"""Stand-in for a Paddle collective training script, run by
`python -m paddle.distributed.launch` (which reads PADDLE_MASTER,
PADDLE_NNODES, PADDLE_JOB_ID, and POD_IP / PADDLE_RANK where set): joins the
parallel env the launcher set up and all-reduces rank+1 over CPU (gloo)."""

import os
import socket

import report

import paddle
import paddle.distributed as dist

paddle.set_device("cpu")
dist.init_parallel_env()
rank, world = dist.get_rank(), dist.get_world_size()
t = paddle.to_tensor([float(rank + 1)])
dist.all_reduce(t)
report.result({
    "rank": rank,
    "world": world,
    "sum": float(t.numpy()[0]),
    "hostname": socket.gethostname(),
    "endpoint": os.environ.get("PADDLE_CURRENT_ENDPOINT"),
    "master": os.environ.get("PADDLE_MASTER"),
})
