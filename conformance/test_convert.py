"""Jobs of the training operators, converted by `dljob convert` from the
fixtures written in each operator's documented form
(tests/fixtures/operators/), run with the real frameworks on the env
admission then gives their pods: the operators' images read the
operators' names, which `dljob.dev/compat: kubeflow` adds."""

from __future__ import annotations

import subprocess

import yaml

import podsim
from harness import REPO, PYTHON, manifest, new_job, program, result, results, run

TORCHRUN = str(podsim.VENV_BIN / "torchrun")

OPERATORS = REPO / "tests" / "fixtures" / "operators"


def converted(tmp_path, fixture: str):
    """The fixture as `dljob convert` prints it, in a file."""
    out = subprocess.run(
        [str(podsim.DLJOB), "convert", "-f", str(OPERATORS / fixture)],
        check=True, capture_output=True, text=True, timeout=60,
    )
    return manifest(tmp_path, out.stdout, name=f"converted-{fixture}")


def test_a_jaxjobs_program_reads_the_operators_names(tmp_path):
    with new_job(converted(tmp_path, "jaxjob-cpu.yaml")) as job:
        coordinator = job.pod("worker", 0)
        for pod in job.pods:
            env = pod.env()
            assert env["COORDINATOR_ADDRESS"] == coordinator.svc_host
            assert env["COORDINATOR_PORT"] == "6666"
            assert env["NUM_PROCESSES"] == "2"
            assert env["PROCESS_ID"] == str(pod.index)
            assert env["PYTHONUNBUFFERED"] == "1"
        out = run(job, lambda p: [PYTHON, program("jax_psum.py"), "operator"], timeout=120)
        for pod in job.pods:
            r = result(out[pod.hostname])
            assert r["process_index"] == pod.index
            assert r["process_count"] == 2
            assert r["psum"] == 2.0


def test_an_alias_of_dljobs_var_in_the_users_env_is_expanded(tmp_path):
    """Without compat, a user's `PROCESS_ID: $(JAX_PROCESS_ID)` works: dljob's
    vars come first, and the kubelet expands references to earlier ones."""
    docs = list(yaml.safe_load_all(converted(tmp_path, "jaxjob-cpu.yaml").read_text()))
    (job,) = docs
    del job["metadata"]["annotations"]["dljob.dev/compat"]
    job["spec"]["template"]["spec"]["containers"][0]["env"] = [
        {"name": "PROCESS_ID", "value": "$(JAX_PROCESS_ID)"},
        {"name": "NUM_PROCESSES", "value": "$(JAX_NUM_PROCESSES)"},
        {"name": "COORDINATOR_ADDRESS", "value": "$(DLJOB_COORDINATOR)"},
        {"name": "COORDINATOR_PORT", "value": "6666"},
    ]
    out = yaml.safe_dump(job)
    with new_job(manifest(tmp_path, out)) as job:
        for pod in job.pods:
            assert "JAX_PROCESS_ID" in pod.env()
            assert pod.env()["PROCESS_ID"] == str(pod.index)
        out = run(job, lambda p: [PYTHON, program("jax_psum.py"), "operator"], timeout=120)
        for pod in job.pods:
            assert result(out[pod.hostname])["psum"] == 2.0


def test_a_pytorchjob_trains_with_ddp_env_init(tmp_path):
    with new_job(converted(tmp_path, "pytorchjob-simple.yaml")) as job:
        out = run(job, lambda p: [PYTHON, program("torch_allreduce.py")], timeout=120)
        for pod in job.pods:
            assert pod.env()["PYTHONUNBUFFERED"] == "1"
            r = result(out[pod.hostname])
            assert r["world"] == 2
            assert r["sum"] == 1 + 2
        assert result(out[job.pod("master").hostname])["rank"] == 0


def test_a_tfjobs_cluster_is_what_tensorflow_resolves(tmp_path):
    with new_job(converted(tmp_path, "tfjob-dist-mnist.yaml")) as job:
        out = run(job, lambda p: [PYTHON, program("tf_resolver.py")], timeout=180)
        for pod in job.pods:
            r = result(out[pod.hostname])
            assert r["task_type"] == pod.role
            assert r["task_id"] == pod.index
            assert sorted(r["cluster"]) == ["ps", "worker"]
            assert len(r["cluster"]["worker"]) == 4
            assert len(r["cluster"]["ps"]) == 2
            assert all(a.endswith(":2222") for a in r["cluster"]["ps"])


def test_volcanos_tensorflow_script_builds_its_cluster_from_the_host_files(tmp_path):
    """Volcano's TensorFlow example converted (dljob.dev/compat: volcano):
    each pod's own `sh -c` script reads /etc/volcano/ps.host and
    worker.host and VK_TASK_INDEX to build TF_CONFIG; its last line, the
    training program, is replaced by the resolver stand-in, which says
    what TensorFlow makes of that TF_CONFIG."""
    with new_job(converted(tmp_path, "volcano-tensorflow.yaml")) as job:
        def script(pod):
            command = pod.framework_container["command"]
            assert command[:2] == ["sh", "-c"], command
            body = command[2].replace("python /var/tf_dist_mnist/dist_mnist.py",
                                      f"exec {PYTHON} {program('tf_resolver.py')}")
            assert body != command[2]
            return ["sh", "-c", body]

        out = run(job, script, timeout=180)
        hosts = {role: [f"{p.short_host}:2222" for p in sorted(job.pods, key=lambda p: p.index)
                        if p.role == role] for role in ("ps", "worker")}
        assert [len(hosts["ps"]), len(hosts["worker"])] == [1, 2]
        for pod in job.pods:
            r = result(out[pod.hostname])
            assert r["cluster"] == hosts
            assert (r["task_type"], r["task_id"]) == (pod.role, pod.index)


def test_an_elastic_pytorchjobs_killed_worker_is_restarted_in_place(tmp_path):
    """The elastic PyTorchJob converted: elasticPolicy.maxRestarts (100)
    reaches torchrun as PET_MAX_RESTARTS; one worker process killed with
    SIGKILL on the first attempt is restarted in place by torchrun, and the
    next round's world holds every node's processes."""
    with new_job(converted(tmp_path, "pytorchjob-elastic.yaml")) as job:
        for pod in job.pods:
            env = pod.env()
            assert env["PET_MAX_RESTARTS"] == "100"
            assert env["PET_NNODES"] == "1:2"
            assert env["PYTHONUNBUFFERED"] == "1"
        out = run(job, lambda p: [TORCHRUN, program("torch_restart.py")], timeout=300)
        reported = [r for o in out.values() for r in results(o)]
        world = reported[0]["world"] if reported else 0
        assert world >= 2 and len(reported) == world, out
        assert sorted(r["rank"] for r in reported) == list(range(world)), reported
        assert all(r["world"] == world and r["sum"] == world * (world + 1) / 2 for r in reported)
        # Both nodes are in the world, and the killed node's agent restarted.
        assert {r["hostname"] for r in reported} == {p.hostname for p in job.pods}, reported
        assert any(r["attempt"] == 1 for r in reported), reported


def test_an_xgboostjob_trains_on_the_operators_port(tmp_path):
    """The XGBoostJob converted: its named port (9991) is the tracker's,
    and the real tracker and collective train one model over every pod."""
    with new_job(converted(tmp_path, "xgboostjob.yaml")) as job:
        master = job.pod("master")
        for pod in job.pods:
            env = pod.env()
            assert env["DMLC_TRACKER_URI"] == master.svc_host
            assert env["DMLC_TRACKER_PORT"] == env["MASTER_PORT"] == "9991"
        out = run(job, lambda p: [PYTHON, program("xgb_train.py")], timeout=180)
        models = set()
        for pod in job.pods:
            r = result(out[pod.hostname])
            assert r["world"] == 3
            assert r["rank"] == int(pod.env()["RANK"])
            models.add(r["model"])
        assert len(models) == 1, "members trained different models"


def test_a_paddlejob_all_reduces_on_the_operators_port(tmp_path):
    """The PaddleJob converted (collective, two workers): Paddle's own
    launcher on the env admission gives (the operator's named port, 37777,
    and PYTHONUNBUFFERED under kubeflow compat)."""
    with new_job(converted(tmp_path, "paddlejob.yaml")) as job:
        coordinator = job.pod("worker", 0)
        for pod in job.pods:
            env = pod.env()
            assert env["PYTHONUNBUFFERED"] == "1"
            want = coordinator.ip if pod is coordinator else coordinator.svc_host
            assert env["PADDLE_MASTER"] == f"{want}:37777"
        launch = [PYTHON, "-m", "paddle.distributed.launch", program("paddle_allreduce.py")]
        out = run(job, lambda p: launch, timeout=150, cwd_of=lambda p: job.tmp / f"cwd-{p.hostname}")
        for pod in job.pods:
            r = result(out[pod.hostname])
            assert r["world"] == 2
            assert r["rank"] == pod.index
            assert r["sum"] == 3.0


def test_a_trainjobs_own_torchrun_command_trains_on_its_runtime(tmp_path):
    """Kubeflow Trainer's multi-node example (a TrainJob on the
    torch-distributed runtime) converted: each node runs the TrainJob's own
    command, `torchrun --no-python python3 -c <script>` (the venv's torchrun
    and python for the image's), which reads only what Trainer's torch
    plugin sets (PET_NNODES, PET_NPROC_PER_NODE, PET_NODE_RANK,
    PET_MASTER_ADDR, PET_MASTER_PORT). The script's own lines say the world
    it joined: 3 nodes of one process each, as under Trainer (torchrun's
    `auto` would start one per CPU here)."""
    with new_job(converted(tmp_path, "trainjob-torch.yaml")) as job:
        assert len(job.pods) == 3

        def command(pod):
            argv = pod.framework_container["command"]
            assert argv[:4] == ["torchrun", "--no-python", "python3", "-c"], argv
            return [TORCHRUN, "--no-python", PYTHON, "-c", argv[4]]

        out = run(job, command, timeout=300)
        ranks = []
        for pod in job.pods:
            lines = out[pod.hostname].splitlines()
            assert "WORLD_SIZE: 3" in lines, out[pod.hostname]
            assert "LOCAL_RANK: 0" in lines, out[pod.hostname]
            rank = [int(l.split(": ")[1]) for l in lines if l.startswith("RANK: ")]
            assert rank == [pod.index], out[pod.hostname]
            ranks += rank
        assert sorted(ranks) == [0, 1, 2]
