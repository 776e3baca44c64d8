"""JAX: the real jax.distributed on the env dljob injects (examples/jax,
worker=2).

JAX reads JAX_COORDINATOR_ADDRESS itself; it reads no env var for the process
count or id (JAX_NUM_PROCESSES and JAX_PROCESS_ID are dljob's names): outside
Slurm, Open MPI, Cloud TPU or its Kubernetes auto-detection (which needs the
`kubernetes` package and API access) a program passes them, as the example
does.
"""

from __future__ import annotations

import re

from harness import EXAMPLES, example_command, new_job, PYTHON, program, result, run

JAX = EXAMPLES / "jax" / "job.yaml"


def test_processes_join_through_the_coordinator_and_psum_across_them():
    with new_job(JAX) as job:
        coordinator = job.pod("worker", 0)
        for pod in job.pods:
            env = pod.env()
            assert env["JAX_COORDINATOR_ADDRESS"] == f"{coordinator.svc_host}:6666"
            assert env["JAX_NUM_PROCESSES"] == "2"
            assert env["JAX_PROCESS_ID"] == str(pod.index)
        out = run(job, lambda p: [PYTHON, program("jax_psum.py")], timeout=120)
        for pod in job.pods:
            r = result(out[pod.hostname])
            assert r["process_index"] == pod.index
            assert r["process_count"] == 2
            assert r["local_device_count"] == 1
            assert r["device_count"] == 2
            assert r["psum"] == 2.0


def test_initialize_without_arguments_lacks_the_process_count():
    """Why the example passes num_processes and process_id: JAX takes only
    the coordinator from the env."""
    with new_job(JAX) as job:
        pod = job.pod("worker", 1)
        out = run(job, lambda p: [PYTHON, program("jax_bare_init.py")], timeout=60, pods=[pod])
        r = result(out[pod.hostname])
        assert r == {"ok": False, "error": "ValueError: Number of processes must be defined."}


def test_the_examples_own_program_runs_as_written():
    """The example's `python -c` program (it passes num_processes and
    process_id from JAX_NUM_PROCESSES / JAX_PROCESS_ID), on CPU."""
    command = example_command(JAX, "Job", "jax-psum")
    assert command[:2] == ["python", "-c"], command
    with new_job(JAX) as job:
        out = run(job, lambda p: [PYTHON, "-c", command[2]], timeout=120)
        for pod in job.pods:
            said = re.findall(r"^process (\d+): (\d+) devices, psum=(\S+)$", out[pod.hostname], re.M)
            assert said == [(str(pod.index), "2", "2.0")], out[pod.hostname]
