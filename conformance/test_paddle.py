"""PaddlePaddle: the real `python -m paddle.distributed.launch` on the env
dljob injects.

The launcher reads PADDLE_MASTER, PADDLE_NNODES, PADDLE_JOB_ID, PADDLE_RANK
and POD_IP (among others, see paddle/distributed/launch/context/args_envs.py).
Its HTTP master (the coordination store) is started only by the launcher
whose PADDLE_MASTER host is 127.0.0.1 or its node IP (POD_IP if set, else
its hostname's FQDN resolved); with a DNS name everywhere nobody starts it and
every pod logs "master not ready" forever. So the coordinator's PADDLE_MASTER
names its own pod IP (downward API), the others' its DNS name.

Node ranks: with PADDLE_RANK unset the coordinator is rank 0 and the others
are ordered by random pod names the launchers draw; PADDLE_RANK makes them
dljob's ranks.
"""

from __future__ import annotations

import re

import yaml

from harness import EXAMPLES, PYTHON, manifest, new_job, program, result, run

PADDLE = EXAMPLES / "paddle" / "job.yaml"
LAUNCH = [PYTHON, "-m", "paddle.distributed.launch"]


def three_nodes() -> str:
    """The example's pods, three of them."""
    base = next(d for d in yaml.safe_load_all(PADDLE.read_text()) if d)
    docs = []
    for i in range(3):
        d = yaml.safe_load(yaml.safe_dump(base))
        d["metadata"]["name"] = f"paddle3-{i}"
        d["metadata"]["labels"]["dljob.dev/job"] = "paddle3"
        d["metadata"]["annotations"]["dljob.dev/replicas"] = "worker=3"
        d["metadata"]["annotations"]["dljob.dev/index"] = str(i)
        docs.append(d)
    return yaml.safe_dump_all(docs)


def check_master_env(job) -> None:
    coordinator = job.pod("worker", 0)
    for pod in job.pods:
        env = pod.env()
        assert env["PADDLE_NNODES"] == str(len(job.pods))
        assert env["PADDLE_JOB_ID"] == coordinator.obj["metadata"]["labels"]["dljob.dev/job"]
        want = coordinator.ip if pod is coordinator else coordinator.svc_host
        assert env["PADDLE_MASTER"] == f"{want}:36543"


def test_example_run_check_trains_on_both_nodes():
    """The example's own command: Paddle's built-in distributed check (a
    small ResNet, data parallel over the 2 nodes; CPU here)."""
    with new_job(PADDLE) as job:
        check_master_env(job)
        out = run(job, lambda p: LAUNCH + ["run_check"], timeout=240,
                  cwd_of=lambda p: job.tmp / f"cwd-{p.hostname}")
        for pod in job.pods:
            o = out[pod.hostname]
            assert "Distributed training completed" in o, o[-4000:]
            info = re.search(r"HybridParallelInfo: rank_id: (\d+),.* dp_degree: (\d+),", o)
            assert info, o[-4000:]
            assert (int(info.group(1)), int(info.group(2))) == (pod.index, 2)


def test_three_nodes_all_reduce_with_dljob_ranks(tmp_path):
    with new_job(manifest(tmp_path, three_nodes())) as job:
        check_master_env(job)
        for pod in job.pods:
            env = pod.env()
            # Without it, ranks 1 and 2 follow random pod names.
            assert env.get("PADDLE_RANK") == env["DLJOB_RANK"], "PADDLE_RANK is not injected"
        out = run(job, lambda p: LAUNCH + [program("paddle_allreduce.py")], timeout=150,
                  cwd_of=lambda p: job.tmp / f"cwd-{p.hostname}")
        coordinator = job.pod("worker", 0)
        for pod in job.pods:
            r = result(out[pod.hostname])
            assert r["world"] == 3
            assert r["rank"] == int(pod.env()["DLJOB_RANK"])
            assert r["sum"] == 6.0
            # Each trainer serves at its own pod's address; the collective's
            # store is on the coordinator's.
            assert r["endpoint"].split(":")[0] == pod.ip
            assert r["master"].split(":")[0] == coordinator.ip
