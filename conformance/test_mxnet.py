"""MXNet 1.9.1: the real ps-lite scheduler, servers and workers on the env
dljob injects (DMLC_ROLE, DMLC_PS_ROOT_URI, DMLC_PS_ROOT_PORT,
DMLC_NUM_SERVER, DMLC_NUM_WORKER, DMLC_USE_KUBERNETES: the scheduler binds
0.0.0.0 since its DMLC_PS_ROOT_URI is a Service name).

MXNet runs from its own venv (.venv-conformance/mxnet: numpy<1.24).

One simulation detail: a server or worker advertises the address of the
pod's first non-loopback interface (its pod IP). A simulated pod has no
interface of its own, so DMLC_NODE_HOST (ps-lite's override of that
address) gives it its pod address; nothing dljob injects is changed.

Worker ranks are ps-lite's, ordered by the workers' address and port: MXNet
reads no DMLC_WORKER_ID, so only the set of ranks is checked.
"""

from __future__ import annotations

import yaml

from harness import EXAMPLES, MXNET_PYTHON, manifest, new_job, program, result, run

LINEAR = EXAMPLES / "mxnet-linear" / "job.yaml"
KEYS = (3, 5, 7, 9)


def wider() -> str:
    """The example's pods with 2 servers and 2 workers."""
    by_role = {d["metadata"]["labels"]["dljob.dev/role"]: d
               for d in yaml.safe_load_all(LINEAR.read_text()) if d}
    docs = []
    for role, count in (("scheduler", 1), ("server", 2), ("worker", 2)):
        for i in range(count):
            d = yaml.safe_load(yaml.safe_dump(by_role[role]))
            d["metadata"]["name"] = f"mxwide-{role}-{i}"
            d["metadata"]["labels"]["dljob.dev/job"] = "mxwide"
            d["metadata"]["annotations"]["dljob.dev/replicas"] = "scheduler=1,server=2,worker=2"
            d["metadata"]["annotations"]["dljob.dev/index"] = str(i)
            docs.append(d)
    return yaml.safe_dump_all(docs)


def check_push_pull(job, servers: int, workers: int) -> None:
    scheduler = job.pod("scheduler")
    for pod in job.pods:
        env = pod.env()
        assert env["DMLC_ROLE"] == pod.role
        assert env["DMLC_PS_ROOT_URI"] == scheduler.svc_host
        assert env["DMLC_PS_ROOT_PORT"] == "9091"
        assert (env["DMLC_NUM_SERVER"], env["DMLC_NUM_WORKER"]) == (str(servers), str(workers))
        assert env["DMLC_USE_KUBERNETES"] == "1"
    out = run(job, lambda p: [MXNET_PYTHON, program("mxnet_kv.py")], timeout=120,
              env_of=lambda p: {"DMLC_NODE_HOST": p.ip})
    ranks = set()
    for pod in job.pods:
        if pod.role != "worker":
            assert "RESULT" not in out[pod.hostname]
            continue
        r = result(out[pod.hostname])
        assert r["type"] == "dist_sync"
        assert r["num_workers"] == workers
        # dist_sync: the servers sum every worker's push of (rank+1)*key.
        assert r["pulled"] == {str(k): float(k * workers * (workers + 1) // 2) for k in KEYS}
        ranks.add(r["rank"])
    assert ranks == set(range(workers))


def test_example_scheduler_server_worker_push_pull():
    with new_job(LINEAR) as job:
        check_push_pull(job, servers=1, workers=1)


def test_two_servers_two_workers_aggregate(tmp_path):
    with new_job(manifest(tmp_path, wider())) as job:
        check_push_pull(job, servers=2, workers=2)
