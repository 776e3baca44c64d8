"""Hydra conformance: the `mpiexec` of MPICH (Debian's `mpich`) and of Intel
MPI (PyPI's `impi-rt`) started with nothing but what dljob injects under
`dljob.dev/mpi-implementation`, over Debian's real sshd and ssh.

The pods, their Secret volumes and their sshd are test_sshd.py's (see
there). Ranks are the rank stand-in of test_mpi.py, loading the
implementation's own libmpi: MPI_Init, an Allreduce over every rank, and
where it ran and the rank Hydra gave it (PMI_RANK).

What comes from the test environment, not from dljob:
* the launcher pod's interface `eth0` holding its pod IP, as a container
  runtime names a pod's interface (the pods here share one namespace and
  talk over loopback);
* the ranks' transport on loopback: MPICH's UCX over TCP on `lo`, Intel
  MPI's libfabric `tcp` provider on `lo`, and Intel's pinning off (every
  "host" is this machine's cores, in a sandbox hwloc cannot bind in).
The hostfile, the ssh launcher and its arguments, the interface Hydra's
proxies call back on and the ranks per host come only from the injected
env.

MPICH: /usr/bin/mpiexec.mpich (or DLJOB_MPICH_MPIEXEC). Intel MPI:
.venv-conformance/impi (conformance/setup). A missing one skips, or fails
when CI is set.
"""

from __future__ import annotations

import os
import subprocess
import sys
import threading
from pathlib import Path

import pytest
import yaml

sys.path.insert(0, str(Path(__file__).resolve().parent))
import podsim  # noqa: E402
from test_sshd import (  # noqa: E402,F401  (cluster_of and tools are fixtures)
    Mpi, assert_two_ranks, cluster_of, images, tools, validate_warnings,
)

HERE = Path(__file__).resolve().parent
REPO = HERE.parent
HOROVOD = REPO / "examples" / "horovod" / "job.yaml"
CHAINERMN_SETS = REPO / "examples" / "chainermn-heterogeneous" / "job.yaml"
OPERATORS = REPO / "tests" / "fixtures" / "operators"
IMPI = REPO / ".venv-conformance" / "impi"

MPICH5 = REPO / ".venv-conformance" / "mpich"
HYDRAS = {
    "MPICH": Mpi(MPICH5 / "bin" / "mpiexec.hydra", MPICH5 / "lib" / "libmpi.so.12", "mpich",
                 {"MPIR_CVAR_CH4_NETMOD": "ofi", "FI_PROVIDER": "tcp", "FI_TCP_IFACE": "lo"}),
    "MPICH4": Mpi(Path(os.environ.get("DLJOB_MPICH4_MPIEXEC", "/usr/bin/mpiexec.mpich")),
                  Path("/usr/lib/x86_64-linux-gnu/libmpich.so.12"), "mpich",
                  {"UCX_TLS": "tcp,self", "UCX_NET_DEVICES": "lo"}),
    "Intel": Mpi(IMPI / "bin" / "mpiexec.hydra", IMPI / "lib" / "libmpi.so.12", "mpich",
                 {"I_MPI_PIN": "off", "FI_PROVIDER": "tcp", "FI_TCP_IFACE": "lo"}),
}
# The `dljob.dev/mpi-implementation` of each.
IMPLEMENTATION = {"MPICH": "MPICH", "MPICH4": "MPICH", "Intel": "Intel"}
# What the MPI operator's controller sets for each (pkg/controller), where
# it differs from dljob's.
OPERATOR_SSH_ARGS_VAR = {"MPICH": "HYDRA_LAUNCH_EXTRA_ARGS", "Intel": "I_MPI_HYDRA_BOOTSTRAP_EXEC_EXTRA_ARGS"}
SSH_ARGS_VAR = {"MPICH": "HYDRA_LAUNCHER_EXTRA_ARGS", "Intel": "I_MPI_HYDRA_BOOTSTRAP_EXEC_EXTRA_ARGS"}
HOSTFILE_VAR = {"MPICH": "HYDRA_HOST_FILE", "Intel": "I_MPI_HYDRA_HOST_FILE"}


def installed(name: str) -> str:
    mpi = HYDRAS[name]
    for path in (mpi.mpirun, mpi.lib):
        if not path.exists():
            msg = f"{name}: {path} is missing (conformance/run and conformance/setup install it)"
            if os.environ.get("CI"):
                pytest.fail(msg)
            pytest.skip(msg)
    return name


@pytest.fixture(params=sorted(HYDRAS))
def hydra(request) -> str:
    """Every install, for the runs whose ranks are all on workers."""
    return installed(request.param)


@pytest.fixture(params=["Intel", "MPICH"])
def hydra_local(request) -> str:
    """The installs for runs with ranks on the launcher's own pod too.
    Debian's MPICH 4.0.2 (UCX 1.13 over TCP) is left out: there, 2 runs in
    12 hang in MPI_Finalize, its rank on the launcher flushing endpoints to
    ranks already waiting in the PMI barrier, after every rank ran."""
    return installed(request.param)


def labelled(tmp: Path, manifest: Path, implementation: str, command: list[str],
             gpu_launcher: bool = False) -> Path:
    """`manifest` under `dljob.dev/mpi-implementation`, the pod that runs
    mpirun running `command` instead (the examples' commands carry
    OpenMPI's own options)."""
    docs = [d for d in yaml.safe_load_all(manifest.read_text()) if d]
    for d in docs:
        d["metadata"].setdefault("annotations", {})["dljob.dev/mpi-implementation"] = implementation
        if d["metadata"].get("labels", {}).get("dljob.dev/role") in ("launcher", "master"):
            spec = d["spec"]["template"]["spec"] if "template" in d["spec"] else d["spec"]
            c = spec["containers"][0]
            c["command"] = command
            c.pop("args", None)
            if gpu_launcher:
                c.setdefault("resources", {}).setdefault("limits", {})["nvidia.com/gpu"] = 1
    path = tmp / "job.yaml"
    path.write_text(yaml.safe_dump_all(docs))
    return path


def horovod(tmp: Path, implementation: str, n: int = 2, gpu_launcher: bool = False) -> Path:
    return labelled(tmp, HOROVOD, implementation, ["mpiexec", "-n", str(n), "python3", "/train.py"],
                    gpu_launcher)


def start(cluster, name: str, extra: dict[str, str | None] | None = None, sshd_after: float = 0.0,
          timeout: float | None = None):
    """Starts the workers' sshd (`sshd_after` seconds after mpiexec, in the
    background) and runs the launcher's mpiexec under Hydra `name` (a run
    given a `timeout` that outlives it is killed, with exit code None)."""
    launcher = cluster.job.pod("launcher")
    workers = [p for p in cluster.job.pods if p.role == "worker"]
    cluster.pod_interface(launcher)
    if sshd_after:
        timer = threading.Timer(sshd_after, lambda: [cluster.start_sshd(w) for w in workers])
        timer.start()
    else:
        for w in workers:
            cluster.start_sshd(w)
    try:
        more = {} if timeout is None else {"timeout": timeout}
        run = cluster.mpirun(launcher, mpi=HYDRAS[name], extra=extra, **more)
    finally:
        if sshd_after:
            timer.join()
    return run, launcher, workers


def assert_ranks(run, placement: dict[int, str]) -> None:
    assert run.rc == 0, run
    assert run.placement() == placement, run
    size = len(placement)
    for r in run.ranks:
        assert (r["size"], r["sum"], r["env_rank"]) == (size, size * (size - 1) // 2, str(r["rank"])), run


def test_hydra_reaches_each_worker_over_ssh(cluster_of, tmp_path, hydra):
    """examples/horovod under MPICH or Intel MPI, its launcher running
    `mpiexec -n 2`: Hydra reads the injected `host:1` hostfile, reaches both
    workers' sshd with the job's key, its proxies there call back on the
    launcher's interface, and one rank runs on each worker."""
    cluster = cluster_of(horovod(tmp_path, IMPLEMENTATION[hydra]))
    launcher = cluster.job.pod("launcher")
    workers = [cluster.job.pod("worker", i) for i in range(2)]
    assert launcher.hostfile == "".join(f"{w.svc_host}:1\n" for w in workers)
    assert launcher.env()[HOSTFILE_VAR[IMPLEMENTATION[hydra]]] == "/etc/dljob/hostfile"
    run, _, _ = start(cluster, hydra)
    assert_ranks(run, {0: workers[0].hostname, 1: workers[1].hostname})
    assert "Accepted publickey for root" in run.output, run


def test_without_the_interface_the_workers_cannot_call_back(cluster_of, tmp_path, hydra):
    """Why dljob names the interface: without it Hydra's proxies call back
    on the launcher's host name, which the cluster's DNS does not resolve
    (only `<host>.<job>…` is published)."""
    cluster = cluster_of(horovod(tmp_path, IMPLEMENTATION[hydra]))
    iface = "I_MPI_HYDRA_IFACE" if IMPLEMENTATION[hydra] == "Intel" else "HYDRA_IFACE"
    assert cluster.job.pod("launcher").env()[iface] == "eth0"
    run, launcher, _ = start(cluster, hydra, extra={iface: None}, timeout=15)
    assert run.rc != 0, run
    assert f"{launcher.hostname}" in run.output and "(check for firewalls!)" in run.output, run


def test_the_ssh_arguments_let_the_launcher_wait_for_sshd(cluster_of, tmp_path, hydra):
    """The injected ssh arguments (ConnectionAttempts=10) reach Hydra's ssh:
    workers whose sshd starts 2 s after mpiexec are still reached. Under
    the MPI operator's variable for MPICH (HYDRA_LAUNCH_EXTRA_ARGS), which
    MPICH does not read, ssh tries once and mpiexec fails."""
    cluster = cluster_of(horovod(tmp_path, IMPLEMENTATION[hydra]))
    launcher = cluster.job.pod("launcher")
    workers = [cluster.job.pod("worker", i) for i in range(2)]
    assert launcher.env()[SSH_ARGS_VAR[IMPLEMENTATION[hydra]]] == "-o ConnectionAttempts=10"
    run, _, _ = start(cluster, hydra, sshd_after=2.0)
    assert_ranks(run, {0: workers[0].hostname, 1: workers[1].hostname})
    if IMPLEMENTATION[hydra] == "MPICH":
        moved = {SSH_ARGS_VAR["MPICH"]: None, OPERATOR_SSH_ARGS_VAR["MPICH"]: "-o ConnectionAttempts=10"}
        (tmp_path / "operator").mkdir()
        cluster = cluster_of(horovod(tmp_path / "operator", IMPLEMENTATION[hydra]))
        run, _, _ = start(cluster, hydra, extra=moved, sshd_after=2.0, timeout=15)
        assert run.rc != 0, run
        assert "Connection refused" in run.output, run


def test_an_openmpi_hostfile_is_not_what_hydra_reads(cluster_of, tmp_path, hydra):
    """The hostfile's form matters (shown once): the same hosts in OpenMPI's
    `host slots=1` form do not place one rank on each worker."""
    cluster = cluster_of(horovod(tmp_path, IMPLEMENTATION[hydra]))
    workers = [cluster.job.pod("worker", i) for i in range(2)]
    openmpi = tmp_path / "hostfile.openmpi"
    openmpi.write_text("".join(f"{w.svc_host} slots=1\n" for w in workers))
    openmpi.chmod(0o644)
    run, _, _ = start(cluster, hydra, extra={HOSTFILE_VAR[IMPLEMENTATION[hydra]]: str(openmpi)}, timeout=15)
    assert run.rc != 0 or run.placement() != {0: workers[0].hostname, 1: workers[1].hostname}, run


def test_a_gpu_launcher_runs_its_own_ranks(cluster_of, tmp_path, hydra_local):
    """A launcher that requests a GPU is first in its own hostfile, by its
    own host name: Hydra recognises it as the local host and runs rank 0
    there without ssh; the workers get the others."""
    hydra = hydra_local
    cluster = cluster_of(horovod(tmp_path, IMPLEMENTATION[hydra], n=3, gpu_launcher=True))
    launcher = cluster.job.pod("launcher")
    workers = [cluster.job.pod("worker", i) for i in range(2)]
    assert launcher.hostfile.splitlines()[0] == f"{launcher.hostname}:1", launcher.hostfile
    run, _, _ = start(cluster, hydra)
    assert_ranks(run, {0: launcher.hostname, 1: workers[0].hostname, 2: workers[1].hostname})


def test_hosts_with_different_slots(cluster_of, tmp_path, hydra_local):
    """examples/chainermn-heterogeneous: worker 0 has 4 slots, workers 1-2
    have 2, the master 2 (listed last, by its own host name). MPICH reads
    the counts from the hostfile; Intel MPI only from a machine file, so
    its master runs `mpiexec -machinefile /etc/dljob/hostfile`, and
    admission says so to one that does not."""
    hydra = hydra_local
    command = ["mpiexec", "-n", "$DLJOB_MPI_NP", "python3", "/train.py"]
    if hydra == "Intel":
        assert "Intel MPI's mpiexec reads only from a machine file" in validate_warnings(
            labelled(tmp_path, CHAINERMN_SETS, IMPLEMENTATION[hydra], command))
        command[1:1] = ["-machinefile", "/etc/dljob/hostfile"]
    manifest = labelled(tmp_path, CHAINERMN_SETS, IMPLEMENTATION[hydra], command)
    assert "machine file" not in validate_warnings(manifest)
    cluster = cluster_of(manifest)
    master = cluster.job.pod("master")
    w0, w1, w2 = (cluster.job.pod("worker", i) for i in range(3))
    assert master.env()["DLJOB_MPI_NP"] == "10"
    cluster.pod_interface(master)
    for w in (w0, w1, w2):
        cluster.start_sshd(w)
    run = cluster.mpirun(master, mpi=HYDRAS[hydra])
    # Hydra fills the hosts in hostfile order: the master, listed last,
    # gets the last ranks.
    want = [w0.hostname] * 4 + [w1.hostname] * 2 + [w2.hostname] * 2 + [master.hostname] * 2
    assert_ranks(run, dict(enumerate(want)))


def converted_pi(tmp: Path, hydra: str) -> Path:
    fixture = OPERATORS / f"mpijob-pi-{IMPLEMENTATION[hydra].lower()}.yaml"
    out = subprocess.run([str(podsim.DLJOB), "convert", "-f", str(fixture)],
                         check=True, capture_output=True, text=True, timeout=60)
    path = tmp / "converted.yaml"
    path.write_text(out.stdout)
    return path


def test_the_mpi_operators_examples_run_converted(cluster_of, tmp_path, hydra):
    """The MPI operator's pi example for MPICH and for Intel MPI, converted
    (dljob.dev/compat: mpi-operator): the workers' own sshd command as uid
    1000 on port 2222 with the operator's key layout, the launcher's own
    `mpirun -n 2` as uid 1000, reading the hostfile the operator's images
    read (/etc/mpi/hostfile, the same file)."""
    cluster = cluster_of(converted_pi(tmp_path, hydra))
    launcher = cluster.job.pod("launcher")
    workers = [cluster.job.pod("worker", i) for i in range(2)]
    assert launcher.obj["metadata"]["annotations"]["dljob.dev/mpi-implementation"] == IMPLEMENTATION[hydra]
    image = images(cluster, tmp_path)
    for w in workers:
        proc = cluster.start_image_sshd(w, image[w.hostname])
        assert proc.poll() is None, cluster.sshd_logs()
    cluster.pod_interface(launcher)
    run = cluster.mpirun(launcher, image=image[launcher.hostname], mpi=HYDRAS[hydra])
    assert_two_ranks(run, workers)
    assert "Accepted publickey for mpiuser" in run.output, run
