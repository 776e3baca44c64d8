"""The generic vars every framework's pods get, used as a program would:
DLJOB_REPLICAS and DLJOB_HOST_PATTERN (filled with Python's str.format) name
every host of the job, DLJOB_COORDINATOR the coordinator's, and each name
resolves, inside each pod, to the pod it means (examples/generic-ray: a head
Pod and a 2-replica worker StatefulSet)."""

from __future__ import annotations

import json

import podsim
from harness import EXAMPLES, PYTHON, new_job, result, run

RAY = EXAMPLES / "generic-ray" / "job.yaml"

# Inside a pod: every host the generic vars name, and what it resolves to.
PROGRAM = """
import json, os, socket
env = os.environ
hosts = {}
for entry in env["DLJOB_REPLICAS"].split(","):
    role, count = entry.split("=")
    for index in range(int(count)):
        host = env["DLJOB_HOST_PATTERN"].format(role=role, index=index)
        hosts[f"{role}-{index}"] = [host, socket.gethostbyname(host)]
coordinator = env["DLJOB_COORDINATOR"]
print("RESULT " + json.dumps({
    "hosts": hosts,
    "coordinator": [coordinator, socket.gethostbyname(coordinator)],
    "rank": int(env["DLJOB_RANK"]),
    "world": int(env["DLJOB_WORLD_SIZE"]),
}), flush=True)
"""


def test_generic_vars_name_every_pod_and_resolve_to_it():
    with new_job(RAY) as job:
        by_replica = {f"{p.role}-{p.index}": p for p in job.pods}
        head = job.pod("head", 0)
        out = run(job, lambda p: [PYTHON, "-c", PROGRAM], timeout=60)
        ranks = []
        for pod in job.pods:
            r = result(out[pod.hostname])
            assert r["world"] == 3
            ranks.append(r["rank"])
            assert r["hosts"] == {
                name: [p.svc_host, p.ip] for name, p in by_replica.items()
            }, json.dumps(r)
            assert r["coordinator"] == [head.svc_host, head.ip]
        assert sorted(ranks) == [0, 1, 2]


def test_the_worker_command_reaches_the_head_through_dljob_coordinator():
    """The example's worker runs `ray start --address=$(DLJOB_COORDINATOR):29500`:
    the kubelet expands it from the container's env."""
    with new_job(RAY) as job:
        worker = job.pod("worker", 1)
        head = job.pod("head", 0)
        command = worker.framework_container["command"]
        expanded = [podsim.expand(arg, worker.env()) for arg in command]
        assert f"--address={head.svc_host}:29500" in expanded, expanded
