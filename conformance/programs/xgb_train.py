"""Stand-in for a distributed XGBoost program (the Kubeflow XGBoostJob
pattern): the master runs the tracker on MASTER_ADDR:MASTER_PORT for
WORLD_SIZE workers and trains too. XGBoost 2+/3 reads no DMLC_* env var, so
every member passes the injected ones to the collective, the port as an int;
the tracker sorts workers by task id (DMLC_TASK_ID), not by host.
Each member all-reduces rank+1 and trains 3 rounds on its own shard; the
trees (the model) must come out the same everywhere."""

import hashlib
import json
import os
import socket

import report

import numpy as np
import xgboost as xgb
from xgboost import collective
from xgboost.tracker import RabitTracker

env = os.environ
tracker = None
if env["DLJOB_ROLE"] == "master":
    tracker = RabitTracker(
        n_workers=int(env["WORLD_SIZE"]),
        host_ip=env["MASTER_ADDR"],
        port=int(env["MASTER_PORT"]),
        sortby="task",
        timeout=120,
    )
    tracker.start()

args = {
    "dmlc_tracker_uri": env["DMLC_TRACKER_URI"],
    "dmlc_tracker_port": int(env["DMLC_TRACKER_PORT"]),
    "dmlc_task_id": env["DMLC_TASK_ID"],
}
with collective.CommunicatorContext(**args):
    rank, world = collective.get_rank(), collective.get_world_size()
    total = collective.allreduce(np.array([rank + 1.0]), collective.Op.SUM)
    rng = np.random.default_rng(rank)
    x = rng.normal(size=(200, 4))
    y = (x[:, 0] + 0.5 * x[:, 1] > 0).astype(float)
    booster = xgb.train(
        {"objective": "binary:logistic", "tree_method": "hist", "nthread": 1, "max_depth": 3},
        xgb.DMatrix(x, y),
        num_boost_round=3,
    )
    trees = json.dumps(json.loads(booster.save_raw("json"))["learner"]["gradient_booster"]["model"]["trees"], sort_keys=True)
    report.result({
        "rank": rank,
        "world": world,
        "sum": float(total[0]),
        "model": hashlib.sha256(trees.encode()).hexdigest(),
        "hostname": socket.gethostname(),
    })

if tracker is not None:
    tracker.wait_for(60)
