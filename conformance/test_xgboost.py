"""XGBoost: the real tracker and collective (xgboost 3) on the env dljob
injects.

XGBoost >= 2 reads none of DMLC_* from the environment: `collective.init()`
without arguments is silently rank 0 of 1. A program passes them as
arguments (`dmlc_tracker_uri`, `dmlc_tracker_port` as an int, `dmlc_task_id`;
upper-case keys work too), and the tracker that the master runs must sort by
task (`sortby="task"`) for ranks to follow dljob's: by default it sorts by the
workers' addresses. Task ids compare as strings, so dljob pads DMLC_TASK_ID to
one width: with "10" before "2", the ranks of a job of more than 10 would not
be its RANKs.

The tracker resolves MASTER_ADDR once, at start, and the workers resolve it
once to connect: neither retries. The pod simulator publishes the job's
names only after its pods start, as a cluster does, so the job trains only
because dljob's init container waits for them.
"""

from __future__ import annotations

import podsim
import re
import shutil
import time

from harness import EXAMPLES, example_program, job_of_pods, new_job, PYTHON, manifest, program, result, run

XGB = EXAMPLES / "xgboost" / "job.yaml"

# The example's shape (a master Pod, an Indexed Job of workers) at 12 members.
TWELVE = """\
apiVersion: v1
kind: Pod
metadata:
  name: xgb12-master
  labels: {dljob.dev/job: xgb12, dljob.dev/role: master}
  annotations: {dljob.dev/framework: xgboost, dljob.dev/replicas: "master=1,worker=11"}
spec:
  restartPolicy: Never
  containers:
  - {name: xgboost, image: xgboost}
---
apiVersion: batch/v1
kind: Job
metadata:
  name: xgb12-worker
  labels: {dljob.dev/job: xgb12, dljob.dev/role: worker}
  annotations: {dljob.dev/framework: xgboost, dljob.dev/replicas: "master=1,worker=11"}
spec:
  completionMode: Indexed
  completions: 11
  parallelism: 11
  template:
    spec:
      restartPolicy: Never
      containers:
      - {name: xgboost, image: xgboost}
"""


def check_training(job: podsim.Job, timeout: float, argv=None) -> None:
    world = len(job.pods)
    master = job.pod("master")
    for pod in job.pods:
        env = pod.env()
        assert env["MASTER_ADDR"] == env["DMLC_TRACKER_URI"] == master.svc_host
        assert env["MASTER_PORT"] == env["DMLC_TRACKER_PORT"] == "9999"
        assert env["WORLD_SIZE"] == env["DMLC_NUM_WORKER"] == str(world)
        assert int(env["DMLC_TASK_ID"]) == int(env["RANK"]) == int(env["DLJOB_RANK"])
    out = run(job, lambda p: (argv or [PYTHON]) + [program("xgb_train.py")], timeout=timeout)
    models = set()
    for pod in job.pods:
        # dljob's init container waited until the master's name resolved.
        assert f"dljob: {master.svc_host} resolves (waited " in out[pod.hostname], out[pod.hostname]
        r = result(out[pod.hostname])
        assert r["world"] == world
        assert r["rank"] == int(pod.env()["RANK"]), f"{pod.hostname}: {r}"
        assert r["sum"] == world * (world + 1) / 2
        models.add(r["model"])
    assert len(models) == 1, "members trained different models"


def test_example_tracker_and_workers_train_one_model():
    with new_job(XGB) as job:
        check_training(job, timeout=120)


def test_the_name_wait_needs_nothing_of_the_image(tmp_path):
    """An image with no shell tools (distroless; busybox and Alpine have no
    getent): dljob's init container runs dljob's own binary from dljob's
    image, with an empty environment, and the framework container's PATH
    holds nothing at all; XGBoost's tracker, which resolves its names once
    at start, trains as written once they are published."""
    # The image's PATH: nothing on it (its python is named by its path).
    image_bin = tmp_path / "image-bin"
    image_bin.mkdir()
    for tool in ["sh", "getent"]:
        assert shutil.which(tool, path=str(image_bin)) is None
    with new_job(XGB) as job:
        for pod in job.pods:
            [init] = pod.obj["spec"]["initContainers"]
            assert init["image"].startswith(podsim.DLJOB_IMAGE_REPO), init
            assert init["command"][:2] == ["/dljob", "wait-for-names"], init
            assert init["name"] == podsim.WAIT_FOR_NAMES
        check_training(job, timeout=120, argv=["env", f"PATH={image_bin}", PYTHON])


def test_a_wait_that_gives_up_says_why_and_the_framework_starts(tmp_path):
    """No Service ever publishes the names (no reconciler): the wait gives
    up at the config's bound, says which name and what to check, and exits
    0, so the framework starts as it would without the step."""
    config = tmp_path / "config.yaml"
    config.write_text("waitForNamesSeconds: 3\n")
    pods = podsim.mutate_pods_with(XGB, ["--config", str(config)])
    job = job_of_pods(pods)
    job.names_after = None
    with job:
        worker = job.pod("worker", 0)
        started = time.monotonic()
        out = run(job, lambda p: ["env", "-i", "/bin/echo", "framework started"], timeout=60, pods=[worker])
        took = time.monotonic() - started
        said = out[worker.hostname]
        # The bound is the whole wait's: it gives up on the first name, the
        # pod's own.
        assert f"dljob: gave up after 3s: {worker.svc_host} does not resolve (" in said, said
        assert f"(kubectl get service -n {worker.namespace} {worker.subdomain})" in said, said
        assert said.rstrip().endswith("framework started"), said
        assert 3 <= took < 30, took


def test_the_examples_own_program_trains_as_written(tmp_path):
    train = example_program(XGB, "xgboost-train", "train.py", tmp_path / "train.py")
    with new_job(XGB) as job:
        out = run(job, lambda p: [PYTHON, str(train)], timeout=120)
        for pod in job.pods:
            said = re.findall(r"^rank (\d+) of (\d+): trained (\d+) rounds$", out[pod.hostname], re.M)
            assert said == [(pod.env()["RANK"], "3", "10")], out[pod.hostname]


def test_ranks_follow_rank_beyond_ten_members(tmp_path):
    with new_job(manifest(tmp_path, TWELVE)) as job:
        assert len(job.pods) == 12
        ids = [p.env()["DMLC_TASK_ID"] for p in sorted(job.pods, key=lambda p: int(p.env()["RANK"]))]
        # String order must be rank order: what sortby="task" sorts by.
        assert sorted(ids) == ids, f"DMLC_TASK_ID values sort out of rank order: {ids}"
        check_training(job, timeout=180)


def test_xgboost_reads_no_env_and_wants_an_int_port():
    with new_job(XGB) as job:
        pod = job.pod("worker", 0)
        out = run(job, lambda p: [PYTHON, program("xgb_env_as_is.py")], timeout=60, pods=[pod])
        r = result(out[pod.hostname])
        assert "Invalid type for: `DMLC_TRACKER_PORT`" in r["as_is"]
        assert r["bare"] == {"rank": 0, "world": 1, "distributed": False}


def test_without_the_wait_for_names_the_tracker_fails_at_once():
    """The race dljob's init container closes: the same pods without it
    start before their names resolve, and the tracker's first lookup of
    MASTER_ADDR fails (socket.gaierror), an exit 1 that would fail the job
    permanently."""
    pods = podsim.mutate_pods(XGB)
    for p in pods:
        inits = p["spec"].pop("initContainers")
        assert [c["name"] for c in inits] == [podsim.WAIT_FOR_NAMES]
    with job_of_pods(pods) as job:
        try:
            run(job, lambda p: [PYTHON, program("xgb_train.py")], timeout=60)
        except AssertionError as e:
            assert "exited 1" in str(e) and "gaierror" in str(e), e
        else:
            raise AssertionError("xgboost trained though its names did not resolve at start")
