"""PyTorch: the real torch.distributed and torchrun on the env dljob injects.

examples/pytorch-ddp (master=1, worker=2): a DDP script started directly
(env:// reads MASTER_ADDR, MASTER_PORT, WORLD_SIZE, RANK) and the same script
under torchrun (static rendezvous from PET_NNODES, PET_NODE_RANK,
PET_MASTER_ADDR, PET_MASTER_PORT, PET_NPROC_PER_NODE).

examples/pytorch-elastic (3 workers, elastic 2:4, 2 GPUs each): torchrun
with c10d rendezvous from PET_NNODES=2:4, PET_RDZV_BACKEND, PET_RDZV_ENDPOINT,
PET_RDZV_ID, PET_RDZV_CONF and PET_NPROC_PER_NODE=2; a worker process
killed and restarted in place (PET_MAX_RESTARTS,
TORCH_DISABLE_SHARE_RDZV_TCP_STORE).
"""

from __future__ import annotations

import os
import signal
import threading
import time

import podsim
from harness import EXAMPLES, job_of_pods, manifest, new_job, PYTHON, program, result, results, run

DDP = EXAMPLES / "pytorch-ddp" / "job.yaml"
ELASTIC = EXAMPLES / "pytorch-elastic" / "job.yaml"
TORCHRUN = str(podsim.VENV_BIN / "torchrun")


def test_ddp_env_init_gives_every_pod_its_rank():
    with new_job(DDP) as job:
        out = run(job, lambda p: [PYTHON, program("torch_allreduce.py")], timeout=120)
        by_rank = {}
        for pod in job.pods:
            r = result(out[pod.hostname])
            assert r["world"] == 3
            assert r["rank"] == int(pod.env()["DLJOB_RANK"])
            assert r["sum"] == 1 + 2 + 3
            by_rank[r["rank"]] = pod.hostname
        assert by_rank[0] == job.pod("master").hostname
        # Every process agrees on who is who.
        want = [by_rank[i] for i in range(3)]
        assert all(result(o)["hosts"] == want for o in out.values())


def test_ddp_under_torchrun_uses_the_pet_env():
    with new_job(DDP) as job:
        out = run(job, lambda p: [TORCHRUN, program("torch_allreduce.py")], timeout=150)
        for pod in job.pods:
            env = pod.env()
            assert env["PET_NPROC_PER_NODE"] == "1"
            r = result(out[pod.hostname])
            # One process per node: the node rank is the global rank.
            assert r["world"] == 3
            assert r["rank"] == int(env["PET_NODE_RANK"]) == int(env["DLJOB_RANK"])
            assert r["group_rank"] == env["PET_NODE_RANK"]
            assert r["local_rank"] == "0"
            assert r["sum"] == 6


def test_elastic_coordinator_alone_hosts_the_rendezvous_store():
    """torchrun's c10d rendezvous hosts its TCP store on the agent whose
    machine "is" the PET_RDZV_ENDPOINT host, unless PET_RDZV_CONF says
    `is_host`. torch <= 1.13 only compares the endpoint host with the
    hostname (`j-worker-0`) and canonical FQDN
    (`j-worker-0.j.ns.svc.cluster.local`); dljob's endpoint
    (`j-worker-0.j.ns.svc`) is neither, so nobody hosts and every agent
    fails with RendezvousConnectionError. torch >= 2.0 also compares the
    endpoint's resolved addresses, which works once the pod's DNS record
    exists, a race at pod start. dljob therefore says it: is_host=true on
    the coordinator, false elsewhere (`is_host` is read since torch 1.9)."""
    with new_job(ELASTIC) as job:
        out = run(job, lambda p: [PYTHON, program("torch_is_host.py")], timeout=60)
        coordinator = job.pod("worker", 0)
        for pod in job.pods:
            r = result(out[pod.hostname])
            assert r["endpoint_host"] == coordinator.svc_host
            assert r["hostname"] == pod.hostname
            assert r["fqdn"] == pod.fqdn
            # Neither name equals the endpoint host...
            assert coordinator.svc_host not in (r["hostname"], r["fqdn"])
            # ...and where DNS answers, torch 2's address comparison agrees.
            assert r["heuristic_is_host"] is (pod is coordinator)
            assert r["conf"] == {"is_host": "true" if pod is coordinator else "false"}


def test_elastic_torchrun_forms_one_world_of_every_node():
    with new_job(ELASTIC) as job:
        for pod in job.pods:
            env = pod.env()
            assert env["PET_NNODES"] == "2:4"
            assert env["PET_NPROC_PER_NODE"] == "2"
            assert "RANK" not in env and "PET_NODE_RANK" not in env
        # The rendezvous closes 30 s (torch's last-call default) after the
        # minimum of 2 nodes joined, since the maximum (4) never comes.
        out = run(job, lambda p: [TORCHRUN, program("torch_allreduce.py")], timeout=240)
        world = 3 * 2
        seen = {}
        for pod in job.pods:
            rs = results(out[pod.hostname])
            assert len(rs) == 2, out[pod.hostname][-4000:]
            assert {r["local_rank"] for r in rs} == {"0", "1"}
            assert len({r["group_rank"] for r in rs}) == 1
            for r in rs:
                assert r["world"] == world
                assert r["group_world_size"] == "3"
                assert r["sum"] == world * (world + 1) / 2
                seen[r["rank"]] = pod.hostname
        assert sorted(seen) == list(range(world))
        hosts = [seen[i] for i in range(world)]
        assert all(r["hosts"] == hosts for o in out.values() for r in results(o))


def test_elastic_worker_killed_is_restarted_in_place():
    """kill -9 of one worker process: torchrun restarts the worker group in
    place (PET_MAX_RESTARTS, from dljob.dev/backoff-limit) and every node
    rendezvous again. With torch's default of sharing the first round's TCP
    store across rounds the next round never forms (Gloo connectFullMesh:
    Connection refused, pytorch issue 135712), so dljob injects
    TORCH_DISABLE_SHARE_RDZV_TCP_STORE=1. Nothing completes the first round
    (its all-reduce lost a rank); the second round's world holds every node,
    the failed node's processes restarted."""
    with new_job(ELASTIC) as job:
        for pod in job.pods:
            env = pod.env()
            assert env["PET_MAX_RESTARTS"] == "3"
            assert env["TORCH_DISABLE_SHARE_RDZV_TCP_STORE"] == "1"
        # Two rendezvous rounds, each closing 30 s after the minimum joined.
        out = run(job, lambda p: [TORCHRUN, program("torch_restart.py")], timeout=300)
        world = 3 * 2
        reported = [r for o in out.values() for r in results(o)]
        assert len(reported) == world, out
        # The failed node's agent restarted its workers once (restart count
        # 1), and so did any whose workers failed on the broken all-reduce
        # before it saw the new round; the others restarted theirs for the
        # round without counting it (a membership change is not a failure).
        by_node: dict[str, set[int]] = {}
        for r in reported:
            by_node.setdefault(r["hostname"], set()).add(r["attempt"])
        assert all(len(a) == 1 for a in by_node.values()), reported
        assert {0, 1} >= {a for attempts in by_node.values() for a in attempts}, reported
        assert any(attempts == {1} for attempts in by_node.values()), reported
        assert sorted(r["rank"] for r in reported) == list(range(world)), reported
        assert all(r["world"] == world and r["sum"] == world * (world + 1) / 2 for r in reported)


def test_elastic_without_restarts_fails_the_node_at_once():
    """The same kill with torchrun's own default of no restarts
    (PET_MAX_RESTARTS=0): the node's agent gives up, so the check above
    is not passed by a restart that would have happened anyway."""
    with new_job(ELASTIC) as job:
        try:
            run(job, lambda p: [TORCHRUN, program("torch_restart.py")], timeout=300,
                env_of=lambda p: {"PET_MAX_RESTARTS": "0"})
        except AssertionError as e:
            assert "exited 1" in str(e), e
        else:
            raise AssertionError("torchrun without restarts finished a job one of whose processes was killed")


def test_elastic_restart_with_a_shared_store_never_forms_the_next_round():
    """Why dljob sets TORCH_DISABLE_SHARE_RDZV_TCP_STORE=1: the same kill
    with torch's default (the first round's store shared across rounds)
    leaves every agent failing to connect to the previous attempt's ports.
    Here torchrun gave up after about three minutes; on a slower machine
    the agents were still retrying at seven. Either way no second round
    forms: the check waits 240 s (the working restart above takes about
    80) and requires the refused connections and no result. When a torch
    release fixes this, this test fails and the variable can go."""
    with new_job(ELASTIC) as job:
        try:
            run(job, lambda p: [TORCHRUN, program("torch_restart.py")], timeout=240,
                env_of=lambda p: {"TORCH_DISABLE_SHARE_RDZV_TCP_STORE": "0"})
        except AssertionError as e:
            text = str(e)
            assert "exited 1" in text or "did not finish" in text, e
            assert "Connection refused" in text, e
            assert "RESULT " not in text, e
        else:
            raise AssertionError("the restart re-rendezvoused with a shared store: torch fixed it")


# The elastic example resized: its Job patched from 3 to 4 completions (and
# parallelism), as `kubectl patch job` does; the template keeps the
# topology the webhook wrote at creation (worker=3).
RESIZED = """\
apiVersion: batch/v1
kind: Job
metadata:
  name: resize
  labels: {dljob.dev/job: resize, dljob.dev/role: worker}
  annotations: {dljob.dev/framework: pytorch, dljob.dev/elastic: "2:4", dljob.dev/replicas: worker=3}
spec:
  completionMode: Indexed
  completions: 4
  parallelism: 4
  template:
    metadata:
      labels: {dljob.dev/job: resize, dljob.dev/role: worker}
      annotations: {dljob.dev/framework: pytorch, dljob.dev/elastic: "2:4", dljob.dev/replicas: worker=3}
    spec:
      restartPolicy: Never
      containers:
      - name: pytorch
        image: pytorch
        resources: {limits: {nvidia.com/gpu: 2}}
"""


class Output:
    """A started pod's output, read as it comes."""

    def __init__(self, proc):
        self.proc = proc
        self.text = ""
        self._thread = threading.Thread(target=self._read, daemon=True)
        self._thread.start()

    def _read(self):
        for line in self.proc.stdout:
            self.text += line

    def rounds(self) -> list[dict]:
        return [r for r in results(self.text) if r["event"] == "round"]


def wait_for(what: str, ok, outputs: dict, timeout: float) -> None:
    deadline = time.monotonic() + timeout
    while not ok():
        if time.monotonic() > deadline:
            dump = "\n".join(f"--- {h}\n{o.text[-3000:]}" for h, o in outputs.items())
            raise AssertionError(f"{what}: not within {timeout} s\n{dump}")
        for host, o in outputs.items():
            code = o.proc.poll()
            assert code is None, f"{host} exited {code} while waiting for {what}\n{o.text[-3000:]}"
        time.sleep(0.5)


def test_elastic_job_resized_while_it_trains(tmp_path):
    """An elastic job of 3 nodes grown to 4 and then shrunk to 3 (one node
    removed, as its pod is deleted) while torchrun trains on the env dljob
    injects: the member of index 3 is admitted and wired as the others
    (the same env: PET_NNODES is the range, DLJOB_WORLD_SIZE the declared
    size), the next round holds the new node (world 4 x 2 processes), and
    the round after the removal holds the three left (world 3 x 2)."""
    pods = podsim.mutate_pods(manifest(tmp_path, RESIZED))
    assert sorted(p["metadata"]["annotations"]["batch.kubernetes.io/job-completion-index"] for p in pods) == ["0", "1", "2", "3"]
    stop_at = tmp_path / "stop-at"
    with job_of_pods(pods) as job:
        envs = {p.index: p.env() for p in job.pods}
        for index, env in envs.items():
            assert env["PET_NNODES"] == "2:4", index
            assert env["DLJOB_WORLD_SIZE"] == "3", index
            assert env["PET_RDZV_CONF"] == ("is_host=true" if index == 0 else "is_host=false")
        argv = [TORCHRUN, program("torch_resize.py")]
        extra = {"RESIZE_STOP_AT": str(stop_at)}
        outputs = {}
        for index in (0, 1, 2):
            pod = job.pod("worker", index)
            outputs[pod.hostname] = Output(job.start(pod, argv, extra))

        def formed(world: int, hosts) -> bool:
            return all(any(r["world"] == world for r in outputs[h].rounds()) for h in hosts)

        first = [job.pod("worker", i).hostname for i in (0, 1, 2)]
        # The first round closes 30 s after the minimum joined.
        wait_for("the first round of 3 nodes", lambda: formed(6, first), outputs, 120)
        # Grown: the fourth node (the Job's completion index 3) starts.
        added = job.pod("worker", 3)
        outputs[added.hostname] = Output(job.start(added, argv, extra))
        four = first + [added.hostname]
        wait_for("a round of the 4 nodes", lambda: formed(8, four), outputs, 120)
        # Shrunk: the pod of index 1 goes (its process tree killed, as the
        # kubelet does with a deleted pod).
        removed = job.pod("worker", 1)
        gone = outputs.pop(removed.hostname)
        os.killpg(gone.proc.pid, signal.SIGKILL)
        gone.proc.wait(timeout=30)
        left = [h for h in four if h != removed.hostname]

        def after_the_round_of_four(host: str) -> bool:
            # A round of 3 nodes after one of 4: whether a node's agent
            # restarts its workers for the failure (restart counted) or for
            # the membership change (not counted) depends on timing.
            seen_four = False
            for r in outputs[host].rounds():
                seen_four = seen_four or r["world"] == 8
                if seen_four and r["world"] == 6:
                    return True
            return False

        def reformed() -> bool:
            return all(after_the_round_of_four(h) for h in left)

        wait_for("a round of the 3 nodes left", reformed, outputs, 180)
        stop_at.write_text("6")
        for host in left:
            outputs[host].proc.wait(timeout=60)
            assert outputs[host].proc.returncode == 0, outputs[host].text[-3000:]
        done = [r for h in left for r in results(outputs[h].text) if r["event"] == "done"]
        assert sorted(r["rank"] for r in done) == list(range(6)), done
        assert all(r["world"] == 6 and r["sum"] == 6 for r in done), done
        # The round of 4 had every node, the added one among them.
        ranks8 = {(r["hostname"], r["rank"]) for h in four for r in outputs.get(h, gone).rounds() if r["world"] == 8}
        assert {h for h, _ in ranks8} == set(four), ranks8
        assert sorted(r for _, r in ranks8) == list(range(8)), ranks8
