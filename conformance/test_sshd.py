"""SSH conformance: Debian's real sshd and ssh (OpenSSH 9), with their
default StrictModes, on the job's SSH Secret laid out exactly as the kubelet
mounts it, under OpenMPI 4's real mpirun.

test_mpi.py reaches workers through an ssh stand-in; here nothing stands in.
For every pod that `dljob mutate --pods` prints, its sandbox (podsim) gets:

* the Secret volume as the kubelet makes it (pkg/volume/secret and the
  atomic writer): a tmpfs whose own directory stays mode 1777, the files
  of the volume's `items` (all keys without items) written 0600
  (`defaultMode`) into a `..<timestamp>` directory (0755), a `..data`
  symlink to it and one symlink per file; with a pod `fsGroup`, everything
  in that group, files g+r (0640) and directories setgid, as
  SetVolumeOwnership leaves a read-only volume;
* the pod's `dljob-ssh` volumeMounts applied as written: a mount with a
  `subPath` binds that file (its symlinks resolved inside the volume, as the
  kubelet does) over a file the runtime creates, its missing parent
  directories made root-owned 0755 as runc makes them; a mount without one
  binds the whole volume directory;
* the container's user: root, or `mpiuser` (uid 1000, home /home/mpiuser
  0755) with the fsGroup as its group, as `runAsUser` and `fsGroup` say.

The workers run `sshd -De` as that user on their pod IP and the job's port
(`dljob.dev/port`); the launcher runs its own mpirun command line with the
real ssh (`/usr/bin/ssh`, which reads the Secret's `config` and key). The
job's pods share one network namespace made for the test, so nothing
listens on the machine's own addresses.

What comes from the test, not from dljob: the host keys sshd needs (an
image's), `UsePAM no` for a non-root sshd (PAM refuses a non-root sshd's
logins; images that run sshd as a user configure it so), and
OMPI_MCA_btl_tcp_if_include=lo as in test_mpi.py.

The negative cases show the checks can fail, each as dljob's warning says:
the Secret mounted as the directory (StrictModes refuses it), a non-root
user without fsGroup (cannot read the files), root's ssh with an fsGroup
(refuses a key its group can read).
"""

from __future__ import annotations

import os
import re
import shutil
import signal
import subprocess
import sys
import tempfile
import time
from dataclasses import dataclass
from pathlib import Path

import pytest
import yaml

sys.path.insert(0, str(Path(__file__).resolve().parent))
import podsim  # noqa: E402
from test_mpi import INSTALLS, RANK_PROGRAM, Run, libmpi, mpirun_command, reap  # noqa: E402

HERE = Path(__file__).resolve().parent
REPO = HERE.parent
HOROVOD = REPO / "examples" / "horovod" / "job.yaml"
SSHD = Path("/usr/sbin/sshd")
SSH = Path("/usr/bin/ssh")
RUN_TIMEOUT = 60
# The kubelet's atomic writer names its data directory by the time.
DATA_DIR = "..2026_11_26_00_00_00.000000001"

# Runs inside a pod's sandbox (after podsim's /etc overlay and hostname):
# lays the Secret volume out as the kubelet does, applies the pod's mounts of
# it, makes the container's user, then execs the command.
# $1 volume dir, $2 dir holding the volume's files, $3 fsGroup or "",
# $4 file of "mountPath|subPath" lines, $5 uid ("0" or "1000"), $6 the
# sshd host key to install ("" for none), $7 the pod's directory, $8 the
# volume's defaultMode, $9 a script that sets up what the pod's image has
# ("" for none).
KUBELET = r"""
set -e
vol=$1 files=$2 fsgroup=$3 mounts=$4 uid=$5 hostkey=$6 poddir=$7 mode=$8 image=$9; shift 9
mount -t tmpfs -o mode=1777 tmpfs /tmp
mount -t tmpfs tmpfs /run
mkdir -m 0755 /run/sshd
mkdir -p "$vol"
mount -t tmpfs tmpfs "$vol"
mkdir "$vol/DATA_DIR"
chmod 0755 "$vol/DATA_DIR"
for f in "$files"/*; do
    n=$(basename "$f")
    install -m "$mode" "$f" "$vol/DATA_DIR/$n"
    ln -s "..data/$n" "$vol/$n"
done
ln -s DATA_DIR "$vol/..data"
if [ -n "$fsgroup" ]; then
    chgrp -h -R "$fsgroup" "$vol"
    find "$vol/DATA_DIR" -type f -exec chmod g+r {} +
    find "$vol" -type d -exec chmod g+sx {} +
fi
# Homes: root's (an overlay: what the pod writes there stays in the pod's
# directory, and the machine's /root stays as it is), and mpiuser's as an
# image makes it.
ovl=$(mktemp -d "$poddir/root.XXXXXX")
mkdir "$ovl/upper" "$ovl/work"
mount -t overlay overlay -o "lowerdir=/root,upperdir=$ovl/upper,workdir=$ovl/work" /root
chmod 0700 /root
mount -t tmpfs tmpfs /home
chmod 0755 /home
if [ "$uid" != 0 ]; then
    # The venv's python lives under /root (pyenv) on these machines: the
    # user runs it as any user runs the image's python.
    chmod 0755 /root
    sed -i -e "/^[^:]*:[^:]*:$uid:/d" /etc/passwd
    sed -i -e "/^[^:]*:[^:]*:$uid:/d" /etc/group
    echo "mpiuser:x:$uid:$uid::/home/mpiuser:/bin/sh" >> /etc/passwd
    echo "mpiuser:x:$uid:" >> /etc/group
    mkdir -m 0755 /home/mpiuser
    chown "$uid:$uid" /home/mpiuser
fi
while IFS='|' read -r path sub; do
    [ -n "$path" ] || continue
    if [ -n "$sub" ]; then
        mkdir -p "$(dirname "$path")"
        [ -e "$path" ] || touch "$path"
        mount --bind "$vol/$sub" "$path"
    else
        mkdir -p "$path"
        mount --bind "$vol" "$path"
    fi
done < "$mounts"
if [ -n "$hostkey" ]; then
    install -m 0600 -o "$uid" "$hostkey" /run/sshd/host_key
fi
if [ -n "$image" ]; then
    sh "$image"
fi
exec "$@"
""".replace("DATA_DIR", DATA_DIR)


def require(path: Path, what: str) -> None:
    if not (path.exists() and os.access(path, os.X_OK)):
        msg = f"{what}: {path} is missing (conformance/run installs it)"
        if os.environ.get("CI"):
            pytest.fail(msg)
        pytest.skip(msg)


def owned(manifest: Path) -> list[dict]:
    """The objects `dljob mutate --owned` says the reconciler creates."""
    out = subprocess.run([str(podsim.DLJOB), "mutate", "--owned", "-f", str(manifest)],
                         check=True, capture_output=True, text=True, timeout=60)
    return [d for d in yaml.safe_load_all(out.stdout) if d]


def variant(tmp: Path, uid: int, fs_group: int | None, port: int, ssh_path: str | None) -> Path:
    """examples/horovod with its pods run as `uid` (and `fs_group`), the job's
    port and SSH path set on every member."""
    docs = [d for d in yaml.safe_load_all(HOROVOD.read_text()) if d]
    for d in docs:
        ann = d["metadata"].setdefault("annotations", {})
        ann["dljob.dev/port"] = str(port)
        if ssh_path:
            ann["dljob.dev/ssh-path"] = ssh_path
        spec = d["spec"]["template"]["spec"]
        ctx: dict = {}
        if uid:
            ctx["runAsUser"] = uid
        if fs_group is not None:
            ctx["fsGroup"] = fs_group
        if ctx:
            spec["securityContext"] = ctx
    path = tmp / "job.yaml"
    path.write_text(yaml.safe_dump_all(docs))
    return path


class Cluster:
    """The job's pods in one network namespace of their own, each with the
    Secret mounted as the kubelet mounts it."""

    def __init__(self, manifest: Path, tmp: Path):
        self.job = podsim.Job.from_manifest(manifest)
        # The launcher's gate lifts once the workers run: names resolve.
        self.job.publish_names()
        self.tmp = tmp
        secret = next(o for o in owned(manifest) if o["kind"] == "Secret")
        self.secret = secret["stringData"]
        self.holder = subprocess.Popen(["unshare", "--net", "sleep", "infinity"])
        self.netns = f"/proc/{self.holder.pid}/ns/net"
        for _ in range(50):  # until unshare has made the namespace
            if os.readlink(self.netns) != os.readlink("/proc/self/ns/net"):
                break
            time.sleep(0.05)
        subprocess.run(["nsenter", f"--net={self.netns}", "ip", "link", "set", "lo", "up"], check=True)
        self.sshd: list[tuple[podsim.Pod, subprocess.Popen, Path]] = []

    def close(self) -> None:
        for _, proc, _ in self.sshd:
            if proc.poll() is None:
                os.killpg(proc.pid, signal.SIGKILL)
                proc.wait(timeout=10)
        self.job.stop()
        reap(self.job)
        self.holder.kill()
        self.holder.wait(timeout=10)

    def volume(self, pod: podsim.Pod) -> dict:
        return next(v for v in pod.obj["spec"]["volumes"] if v["name"] == "dljob-ssh")

    def mounts(self, pod: podsim.Pod) -> list[dict]:
        return [m for m in pod.framework_container.get("volumeMounts", []) if m["name"] == "dljob-ssh"]

    def security(self, pod: podsim.Pod) -> tuple[int, int | None]:
        ctx = pod.obj["spec"].get("securityContext", {})
        own = pod.framework_container.get("securityContext", {})
        return own.get("runAsUser", ctx.get("runAsUser", 0)), ctx.get("fsGroup")

    def enter(self, pod: podsim.Pod, mounts: list[dict] | None = None, hostkey: str = "",
              image: str = "") -> list[str]:
        """argv prefix: into the job's network, the pod's sandbox, then the
        kubelet's layout of the Secret and the pod's mounts of it, then
        `image` (a setup script standing for the pod's image)."""
        d = self.tmp / pod.hostname
        files = d / "secret-files"
        files.mkdir(parents=True, exist_ok=True)
        secret = self.volume(pod)["secret"]
        items = secret.get("items")
        paths = [(i["key"], i["path"]) for i in items] if items else [(k, k) for k in self.secret]
        for k, path in paths:
            (files / path).write_text(self.secret[k])
        # The kubelet's default mode for a Secret volume's files is 0644.
        mode = format(secret.get("defaultMode", 0o644), "04o")
        listing = d / "mounts"
        listing.write_text("".join(f"{m['mountPath']}|{m.get('subPath', '')}\n"
                                   for m in (self.mounts(pod) if mounts is None else mounts)))
        uid, fs_group = self.security(pod)
        return (["nsenter", f"--net={self.netns}"] + self.job.enter_argv(pod)
                + ["sh", "-c", KUBELET, "kubelet", f"/run/dljob-secret-volume", str(files),
                   "" if fs_group is None else str(fs_group), str(listing), str(uid), hostkey,
                   str(d), mode, image])

    def as_user(self, pod: podsim.Pod) -> list[str]:
        uid, fs_group = self.security(pod)
        if not uid:
            return []
        groups = str(fs_group) if fs_group is not None else str(uid)
        return ["setpriv", f"--reuid={uid}", f"--regid={uid}", f"--groups={groups}"]

    def start_sshd(self, pod: podsim.Pod, mounts: list[dict] | None = None) -> None:
        d = self.tmp / pod.hostname
        d.mkdir(parents=True, exist_ok=True)
        key = d / "host_key"
        if not key.exists():
            subprocess.run(["ssh-keygen", "-q", "-t", "ed25519", "-N", "", "-f", str(key)], check=True)
        uid, _ = self.security(pod)
        port = pod.obj["metadata"]["annotations"]["dljob.dev/port"]
        argv = [str(SSHD), "-D", "-e", "-p", port, "-o", f"ListenAddress={pod.ip}",
                "-h", "/run/sshd/host_key", "-o", "PidFile=none"]
        if uid:
            argv += ["-o", "UsePAM=no"]
        proc, log = self.launch(pod, self.enter(pod, mounts, str(key)) + self.as_user(pod) + argv)
        if proc.poll() is not None or "Server listening" not in log.read_text():
            pytest.fail(f"sshd of {pod.name} did not start:\n{log.read_text()}")

    def launch(self, pod: podsim.Pod, argv: list[str]) -> tuple[subprocess.Popen, Path]:
        """Starts an sshd (argv) for `pod` and waits until it listens, it
        exits, or 10 s pass."""
        log = self.tmp / pod.hostname / "sshd.log"
        proc = subprocess.Popen(argv, env=self.job.base_env(), cwd="/", stdout=log.open("w"),
                                stderr=subprocess.STDOUT, start_new_session=True)
        self.sshd.append((pod, proc, log))
        deadline = time.monotonic() + 10
        while "Server listening" not in log.read_text():
            if proc.poll() is not None or time.monotonic() > deadline:
                break
            time.sleep(0.05)
        return proc, log

    def start_image_sshd(self, pod: podsim.Pod, image: str) -> subprocess.Popen:
        """The pod's own command (an image's sshd and its config), as the
        pod's user, after `image` set the image up."""
        d = self.tmp / pod.hostname
        d.mkdir(parents=True, exist_ok=True)
        container = pod.framework_container
        argv = list(container.get("command") or []) + list(container.get("args") or [])
        proc, _ = self.launch(pod, self.enter(pod, image=image) + self.as_user(pod) + argv)
        return proc

    def pod_interface(self, pod: podsim.Pod) -> None:
        """The pod's network interface as a container runtime names it,
        eth0, holding the pod's address (which loopback holds too: the
        pods share one namespace)."""
        ns = ["nsenter", f"--net={self.netns}", "ip"]
        subprocess.run(ns + ["link", "add", "eth0", "type", "veth", "peer", "name", "eth0-peer"], check=True)
        subprocess.run(ns + ["addr", "add", f"{pod.ip}/32", "dev", "eth0"], check=True)
        for dev in ("eth0", "eth0-peer"):
            subprocess.run(ns + ["link", "set", dev, "up"], check=True)

    def sshd_logs(self) -> str:
        return "\n".join(f"--- sshd of {p.name}\n{log.read_text()}" for p, _, log in self.sshd)

    def mpirun(self, launcher: podsim.Pod, mounts: list[dict] | None = None, image: str = "",
               shell_vars: dict[str, str] | None = None, mpi: Mpi | None = None,
               extra: dict[str, str | None] | None = None, timeout: float = RUN_TIMEOUT) -> Run:
        """The launcher's own mpirun command line (its program replaced by
        the rank stand-in) with the real ssh, as the launcher's user, run
        by `mpi` (OpenMPI 4 unless given). `shell_vars`: what the command's
        own script set before it, over the pod's env; `extra`: env over
        everything (None: unset). A run that outlives `timeout` is killed and returned
        with exit code None."""
        mpi = mpi or OPENMPI4
        # The shell the command ran in would expand the launcher's env
        # (Volcano's `--host ${MPI_HOST}`).
        launcher_env = launcher.env() | (shell_vars or {})
        words = [re.sub(r"\$\{(\w+)\}|\$(\w+)",
                        lambda m: launcher_env.get(m.group(1) or m.group(2), m.group(0)), w)
                 for w in mpirun_command(launcher)]
        # The program: a python's, else the last word (a binary's).
        prog = next((i for i, w in enumerate(words) if i > 0 and Path(w).name.startswith("python")),
                    len(words) - 1)
        argv = [str(mpi.mpirun), *words[1:prog], sys.executable, "-c", RANK_PROGRAM,
                str(mpi.lib or libmpi("openmpi4")), mpi.abi]
        uid, _ = self.security(launcher)
        home = "/home/mpiuser" if uid else "/root"
        path = ":".join(p for p in self.job.base_env()["PATH"].split(":") if "conformance" not in p)
        env = self.job.base_env() | launcher.env() | {
            "PATH": path, "HOME": home, "TMPDIR": "/tmp",
        } | mpi.env
        for k, v in (extra or {}).items():
            if v is None:
                env.pop(k, None)
            else:
                env[k] = v
        start = time.monotonic()
        proc = subprocess.Popen(self.enter(launcher, mounts, image=image) + self.as_user(launcher) + argv,
                                env=env, cwd="/", stdout=subprocess.PIPE, stderr=subprocess.STDOUT,
                                text=True, start_new_session=True)
        try:
            out, _ = proc.communicate(timeout=timeout)
        except subprocess.TimeoutExpired:
            os.killpg(proc.pid, signal.SIGKILL)
            out, _ = proc.communicate()
            if timeout == RUN_TIMEOUT:
                pytest.fail(f"mpirun did not finish within {timeout}s\n{out}\n{self.sshd_logs()}")
            return Run(None, out + "\n" + self.sshd_logs(), [], time.monotonic() - start)
        return Run(proc.returncode, out + "\n" + self.sshd_logs(), [], time.monotonic() - start)


@dataclass(frozen=True)
class Mpi:
    """An MPI install: its launcher, the libmpi its ranks load and that
    library's ABI (RANK_PROGRAM's argv[2]), and what the test environment
    adds to the launcher's env (never what dljob injects)."""
    mpirun: Path
    lib: Path | None  # None: OpenMPI 4's, found at run time
    abi: str
    env: dict[str, str]


# The TCP BTL excludes 127.0.0.0/8 by default, and every simulated pod
# talks over loopback.
OPENMPI4 = Mpi(INSTALLS["openmpi4"], None, "ompi", {"OMPI_MCA_btl_tcp_if_include": "lo"})


@pytest.fixture
def tools():
    require(SSHD, "Debian's openssh-server")
    require(SSH, "Debian's openssh-client")
    require(INSTALLS["openmpi4"], "OpenMPI 4")
    for tool in ("nsenter", "setpriv", "ssh-keygen"):
        if shutil.which(tool) is None:
            pytest.fail(f"{tool} is missing")


@pytest.fixture
def cluster_of(tools):
    made: list[Cluster] = []

    def make(manifest: Path) -> Cluster:
        c = Cluster(manifest, Path(tempfile.mkdtemp(prefix="dljob-sshd-", dir=os.environ.get("TMPDIR"))))
        made.append(c)
        return c

    yield make
    for c in made:
        c.close()
        shutil.rmtree(c.tmp, ignore_errors=True)


def validate_warnings(manifest: Path) -> str:
    """What `dljob validate` says of a manifest on standard error."""
    return subprocess.run([str(podsim.DLJOB), "validate", "-f", str(manifest)],
                          capture_output=True, text=True, timeout=60).stderr


def run_job(cluster: Cluster, mounts=None) -> tuple[Run, podsim.Pod, list[podsim.Pod]]:
    launcher = cluster.job.pod("launcher")
    workers = [cluster.job.pod("worker", i) for i in range(2)]
    for w in workers:
        cluster.start_sshd(w, mounts and mounts(w))
    return cluster.mpirun(launcher, mounts and mounts(launcher)), launcher, workers


def assert_two_ranks(run: Run, workers: list[podsim.Pod]) -> None:
    assert run.rc == 0, run
    assert run.placement() == {0: workers[0].hostname, 1: workers[1].hostname}, run
    assert all((r["size"], r["sum"]) == (2, 1) for r in run.ranks), run


def test_root_sshd_accepts_the_mounted_keys(cluster_of, tmp_path):
    """examples/horovod as written: root, port 22, /root/.ssh. The workers'
    sshd (StrictModes yes) accepts the launcher's key and mpirun puts one
    rank on each worker."""
    cluster = cluster_of(HOROVOD)
    run, launcher, workers = run_job(cluster)
    assert_two_ranks(run, workers)
    assert "Accepted publickey for root" in run.output, run


def test_non_root_sshd_with_fs_group_accepts_the_mounted_keys(cluster_of, tmp_path):
    """The MPI operator's way: uid 1000, sshd on 2222, the keys in
    /home/mpiuser/.ssh, the pod's fsGroup 1000 (files 0640 in that group)."""
    cluster = cluster_of(variant(tmp_path, 1000, 1000, 2222, "/home/mpiuser/.ssh"))
    run, launcher, workers = run_job(cluster)
    assert_two_ranks(run, workers)
    assert "Accepted publickey for mpiuser" in run.output, run


def test_the_secret_mounted_as_the_directory_is_refused_by_sshd(cluster_of, tmp_path):
    """Why dljob mounts file by file: the volume itself as /root/.ssh is a
    world-writable directory, which sshd's StrictModes refuses."""
    cluster = cluster_of(HOROVOD)
    whole = lambda pod: [{"mountPath": "/root/.ssh"}]  # noqa: E731
    run, _, _ = run_job(cluster, mounts=whole)
    assert run.rc != 0, run
    assert "bad ownership or modes for directory /root/.ssh" in run.output, run


def test_non_root_without_fs_group_cannot_read_the_keys(cluster_of, tmp_path):
    """What dljob's warning says: uid 1000 without an fsGroup cannot read the
    root-owned 0600 files. ssh goes on without the config it cannot read,
    so it dials port 22, where nothing listens (the non-root sshd is on
    2222)."""
    manifest = variant(tmp_path, 1000, None, 2222, "/home/mpiuser/.ssh")
    warnings = validate_warnings(manifest)
    assert "runs as uid 1000 and the pod sets no fsGroup" in warnings, warnings
    cluster = cluster_of(manifest)
    run, _, _ = run_job(cluster)
    assert run.rc != 0, run
    assert "port 22: Connection refused" in run.output, run


def test_root_ssh_refuses_a_key_its_fs_group_can_read(cluster_of, tmp_path):
    """What dljob's warning says: root with an fsGroup gets a 0640 key,
    which root's ssh will not use."""
    manifest = variant(tmp_path, 0, 1000, 22, None)
    warnings = validate_warnings(manifest)
    assert "root's ssh refuses a key its group can read" in warnings, warnings
    cluster = cluster_of(manifest)
    run, _, _ = run_job(cluster)
    assert run.rc != 0, run
    assert "bad permissions" in run.output, run


MPI_OPERATOR_PI = REPO / "tests" / "fixtures" / "operators" / "mpijob-pi.yaml"

# What the MPI operator's base image (build/base) configures, written here:
# mpiuser's sshd config (its pid file in the home, the host key read from
# the mounted ~/.ssh/id_rsa, StrictModes off, port 2222) and the system
# ssh client's (port 2222, no host-key checking, no known_hosts file).
# From the test, not the image: UsePAM no (PAM refuses a non-root sshd's
# logins) and a ListenAddress (the job's pods share one network namespace).
# It runs in the pod's sandbox, whose /etc is a private overlay.
MPI_OPERATOR_IMAGE = """set -e
printf '%s\\n' 'PidFile /home/mpiuser/sshd.pid' 'HostKey /home/mpiuser/.ssh/id_rsa' \\
    'StrictModes no' 'Port 2222' 'UsePAM no' 'ListenAddress {ip}' > /home/mpiuser/.sshd_config
chown 1000:1000 /home/mpiuser/.sshd_config
printf '%s\\n' 'Host *' '    Port 2222' '    StrictHostKeyChecking no' \\
    '    UserKnownHostsFile /dev/null' >> /etc/ssh/ssh_config
"""


def converted_mpijob(tmp: Path, compat: bool = True) -> Path:
    out = subprocess.run([str(podsim.DLJOB), "convert", "-f", str(MPI_OPERATOR_PI)],
                         check=True, capture_output=True, text=True, timeout=60)
    docs = [d for d in yaml.safe_load_all(out.stdout) if d]
    if not compat:
        for d in docs:
            del d["metadata"]["annotations"]["dljob.dev/compat"]
    path = tmp / "converted.yaml"
    path.write_text(yaml.safe_dump_all(docs))
    return path


def images(cluster: Cluster, tmp: Path) -> dict[str, str]:
    """Per pod, the image setup script with its address."""
    out = {}
    for pod in cluster.job.pods:
        script = tmp / f"image-{pod.hostname}.sh"
        script.write_text(MPI_OPERATOR_IMAGE.replace("{ip}", pod.ip))
        out[pod.hostname] = str(script)
    return out


def test_the_mpi_operators_images_run_unchanged(cluster_of, tmp_path):
    """The MPI operator's pi example converted (dljob.dev/compat:
    mpi-operator): its workers' own command, /usr/sbin/sshd -De -f
    /home/mpiuser/.sshd_config, as uid 1000 with the host key read from the
    mounted id_rsa, on port 2222; the launcher's own mpirun as uid 1000,
    with the image's ssh client config. No fsGroup, no dljob ssh config."""
    manifest = converted_mpijob(tmp_path)
    assert "fsGroup" not in validate_warnings(manifest)
    cluster = cluster_of(manifest)
    launcher = cluster.job.pod("launcher")
    workers = [cluster.job.pod("worker", i) for i in range(2)]
    for pod in [launcher, *workers]:
        assert cluster.security(pod) == (1000, None)
        paths = sorted(m["mountPath"] for m in cluster.mounts(pod))
        assert paths == [f"/home/mpiuser/.ssh/{f}" for f in ("authorized_keys", "id_rsa", "id_rsa.pub")]
    image = images(cluster, tmp_path)
    for w in workers:
        proc = cluster.start_image_sshd(w, image[w.hostname])
        assert proc.poll() is None, cluster.sshd_logs()
    run = cluster.mpirun(launcher, image=image[launcher.hostname])
    assert_two_ranks(run, workers)
    assert "Accepted publickey for mpiuser" in run.output, run


def test_without_compat_the_mpi_operators_images_do_not_start(cluster_of, tmp_path):
    """The same job without dljob.dev/compat: dljob's own layout (the key as
    id_ed25519, root-owned 0600) is not what the images read — their sshd
    finds no host key — and dljob's warning says the user cannot read it."""
    manifest = converted_mpijob(tmp_path, compat=False)
    assert "runs as uid 1000 and the pod sets no fsGroup" in validate_warnings(manifest)
    cluster = cluster_of(manifest)
    image = images(cluster, tmp_path)
    worker = cluster.job.pod("worker", 0)
    proc = cluster.start_image_sshd(worker, image[worker.hostname])
    proc.wait(timeout=10)
    assert proc.returncode != 0, cluster.sshd_logs()
    assert "no hostkeys available" in cluster.sshd_logs(), cluster.sshd_logs()


VOLCANO_MPI = REPO / "tests" / "fixtures" / "operators" / "volcano-mpi.yaml"


def converted_mpi_cluster(cluster_of, tmp_path, fixture):
    """`dljob convert` of an operator's MPI job of one launcher and two
    workers, as a cluster: it, the launcher's pod and the workers'."""
    out = subprocess.run([str(podsim.DLJOB), "convert", "-f", str(fixture)],
                         check=True, capture_output=True, text=True, timeout=60)
    manifest = tmp_path / "converted.yaml"
    manifest.write_text(out.stdout)
    cluster = cluster_of(manifest)
    return cluster, cluster.job.pod("launcher"), [cluster.job.pod("worker", i) for i in range(2)]


def test_volcanos_mpi_job_reaches_its_workers_with_the_ssh_plugins_layout(cluster_of, tmp_path):
    """Volcano's MPI example converted (dljob.dev/compat:
    volcano:launcher=mpimaster,worker=mpiworker): the Secret laid out as
    Volcano's ssh plugin does in /root/.ssh (id_rsa, id_rsa.pub,
    authorized_keys, config) with the key also under the name dljob's
    config gives it; the master's own `mpiexec --host ${MPI_HOST}` with the
    real ssh reaches the workers' sshd."""
    cluster, launcher, workers = converted_mpi_cluster(cluster_of, tmp_path, VOLCANO_MPI)
    paths = sorted(m["mountPath"] for m in cluster.mounts(launcher))
    assert paths == [f"/root/.ssh/{f}" for f in
                     ("authorized_keys", "config", "id_ed25519", "id_rsa", "id_rsa.pub")]
    assert launcher.env()["MPI_HOST"] == ",".join(w.short_host for w in workers)
    for w in workers:
        cluster.start_sshd(w)
    run = cluster.mpirun(launcher)
    assert_two_ranks(run, workers)
    assert "Accepted publickey for root" in run.output, run


VOLCANO_MPI_SSH_SVC = REPO / "tests" / "fixtures" / "operators" / "volcano-mpi-ssh-svc.yaml"


def test_volcanos_own_mpi_example_builds_its_host_list_and_reaches_its_workers(cluster_of, tmp_path):
    """Volcano's MPI example as its repository has it (the ssh and svc
    plugins, no mpi plugin), converted: the master's own first line,
    `MPI_HOST=`cat /etc/volcano/mpiworker.host | tr "\\n" ","``, run in the
    launcher's sandbox, gives the workers' hosts from the projected file;
    its own `mpiexec --host ${MPI_HOST}` with that value and the real ssh
    reaches the workers' sshd."""
    cluster, launcher, workers = converted_mpi_cluster(cluster_of, tmp_path, VOLCANO_MPI_SSH_SVC)
    script = launcher.framework_container["command"][2]
    host_line = script.split("\n")[0]
    assert host_line.startswith("MPI_HOST=`cat /etc/volcano/mpiworker.host"), script
    got = subprocess.run(cluster.enter(launcher) + ["sh", "-c", host_line + ' printf %s "$MPI_HOST"'],
                         env=cluster.job.base_env(), cwd="/", capture_output=True, text=True,
                         timeout=60)
    assert got.returncode == 0, got
    assert got.stdout == ",".join(w.short_host for w in workers), got
    for w in workers:
        cluster.start_sshd(w)
    run = cluster.mpirun(launcher, shell_vars={"MPI_HOST": got.stdout})
    assert_two_ranks(run, workers)
    assert "Accepted publickey for root" in run.output, run


CHAINERJOB = REPO / "tests" / "fixtures" / "operators" / "chainerjob-example.yaml"

# What the chainer-operator's example image (examples/docker/chainermn:
# chainer/chainer on Ubuntu, with its `ssh` package) has that the sandbox
# does not, and lacks: the host keys the package made in /etc/ssh, and no
# /run/sshd (Ubuntu's init makes it at boot; a container boots nothing).
# From the test, not the image: a ListenAddress (the job's pods share one
# network namespace). It runs in the pod's sandbox, whose /etc is a
# private overlay.
CHAINERMN_IMAGE = """set -e
rmdir /run/sshd
ssh-keygen -A >/dev/null
echo 'ListenAddress {ip}' >> /etc/ssh/sshd_config
"""


def test_a_converted_chainerjob_trains_on_the_operators_image_layout(cluster_of, tmp_path):
    """The chainer-operator's own example converted: its workers slept
    (the operator reached them with kubectl exec); converted, they run
    sshd, making its privilege separation directory first, on an image laid
    out as the operator's (sshd and host keys, no /run/sshd). The master's
    own `mpiexec -n 3 -N 1 …` line, run by OpenMPI 4 with the real ssh,
    puts one rank on the master (listed by its own host name: no ssh to
    itself, no lookup of its own name) and one on each worker over ssh."""
    out = subprocess.run([str(podsim.DLJOB), "convert", "-f", str(CHAINERJOB)],
                         check=True, capture_output=True, text=True, timeout=60)
    manifest = tmp_path / "converted.yaml"
    manifest.write_text(out.stdout)
    cluster = cluster_of(manifest)
    master = cluster.job.pod("master")
    workers = [cluster.job.pod("worker", i) for i in range(2)]
    image = {}
    for pod in [master, *workers]:
        script = tmp_path / f"image-{pod.hostname}.sh"
        script.write_text(CHAINERMN_IMAGE.replace("{ip}", pod.ip))
        image[pod.hostname] = str(script)
    # The operator's worker command as dljob would have kept it, sshd
    # alone, does not start on that image: what the conversion adds is
    # needed.
    bare = workers[0]
    proc, log = cluster.launch(bare, cluster.enter(bare, image=image[bare.hostname])
                               + [str(SSHD), "-De"])
    proc.wait(timeout=10)
    assert proc.returncode != 0 and "Missing privilege separation directory" in log.read_text(), \
        log.read_text()
    for w in workers:
        assert w.framework_container["command"][:2] == ["sh", "-c"], w.framework_container
        proc = cluster.start_image_sshd(w, image[w.hostname])
        assert proc.poll() is None, cluster.sshd_logs()
    run = cluster.mpirun(master, image=image[master.hostname])
    assert run.rc == 0, run
    assert run.placement() == {0: master.hostname, 1: workers[0].hostname,
                               2: workers[1].hostname}, run
    assert all(r["size"] == 3 for r in run.ranks), run
    # The workers were reached over ssh; the master, which runs no sshd,
    # only by itself.
    for w in workers:
        assert "Accepted publickey for root" in (cluster.tmp / w.hostname / "sshd.log").read_text(), run
