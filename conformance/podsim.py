"""Run the pods of a dljob job as local processes, each seeing what a pod sees.

`dljob mutate --pods` prints every pod a manifest creates, as admission
leaves it. For each of those pods this module gives a process sandbox that
reproduces what the kubelet and the cluster's DNS give a pod, on one machine
and without touching it:

* its own UTS namespace, with the hostname the pod gets (`spec.hostname`);
* its own mount namespace with an overlay over /etc, holding
  - /etc/hosts as the kubelet writes it for a pod with hostname and subdomain
    (`IP  host.sub.ns.svc.cluster.local  host`); once the job's names are
    published, also one line for every pod of the job, as the job's
    headless Service gives them through DNS (canonical name first, then the
    `host.sub.ns.svc` name dljob injects, and `host.sub`, Volcano's form,
    which the pod's DNS search path resolves). They are published
    `NAMES_AFTER` seconds after the job's first pod starts, as they are in
    a cluster: the reconciler makes the Service when it sees the pods, and
    a pod's name resolves once it has an address. Until then a name dljob
    injects does not resolve (the sandbox's resolver is a closed port on
    127.0.0.1, so nothing leaves the machine);
  - /etc/dljob/hostfile, the downward-API projection of the pod's
    `dljob.dev/hostfile` annotation, every other file a downwardAPI
    volume of the framework container's projects from the pod's
    annotations into /etc, and every key of a ConfigMap the job owns that
    a configMap volume mounts there (Volcano's /etc/volcano);
* dljob's init container (`dljob-wait-for-names`), run as the kubelet runs
  it, before the pod's program, in the pod's sandbox;
* its own loopback address 127.0.0.N (the network namespace is shared, so
  every pod reaches every other pod's address), which the downward API's
  `status.podIP` resolves to;
* the framework container's env, resolved as the kubelet does (fieldRefs,
  `$(VAR)` expansion of earlier vars).

Processes are started with `unshare --mount --uts --pid --fork --kill-child`,
so the namespaces, the overlay and every process a pod started disappear with
them; the temporary directory is removed on stop().
"""

from __future__ import annotations

import json
import os
import re
import shlex
import shutil
import signal
import subprocess
import tempfile
import threading
from dataclasses import dataclass, field
from pathlib import Path

import yaml

REPO = Path(__file__).resolve().parent.parent
DLJOB = Path(os.environ.get("DLJOB_BIN", REPO / "target" / "debug" / "dljob"))
VENV_BIN = REPO / ".venv-conformance" / "bin"
CLUSTER_DOMAIN = "cluster.local"
# Seconds from a job's first pod start to its names resolving (seen on a
# real cluster: pods created at :54, started at :55, the Service at :56).
NAMES_AFTER = 2.0
# The init container dljob adds to wait for the job's names, and the image
# it runs from (dljob's own; its tag is the release's).
WAIT_FOR_NAMES = "dljob-wait-for-names"
DLJOB_IMAGE_REPO = "ghcr.io/dljob/dljob:"
# The in-sandbox setup: private /etc overlay, hosts file, hostfile, hostname.
# Arguments: hostname pod-dir hostsfile projections-dir-or-empty (a tree of
# files to put under /, all in /etc), then argv. Every
# entry gets its own overlay dirs: processes of one pod may run at once.
_ENTER = r"""
set -e
hn=$1 dir=$2 hosts=$3 projected=$4; shift 4
ovl=$(mktemp -d "$dir/overlay.XXXXXX")
mkdir "$ovl/upper" "$ovl/work"
mount -t overlay overlay -o "lowerdir=/etc,upperdir=$ovl/upper,workdir=$ovl/work" /etc
touch /etc/hosts
mount --bind "$hosts" /etc/hosts
rm -f /etc/resolv.conf
printf 'nameserver 127.0.0.1\noptions timeout:1 attempts:1\n' > /etc/resolv.conf
if [ -n "$projected" ]; then cp -r "$projected/etc/." /etc/; fi
hostname "$hn"
exec "$@"
"""


def mutate_pods(manifest: str | Path, namespace: str | None = None) -> list[dict]:
    """The pods `dljob mutate --pods` prints for a manifest."""
    return mutate_pods_with(manifest, ["-n", namespace] if namespace else [])


def mutate_pods_with(manifest: str | Path, extra: list[str]) -> list[dict]:
    """The pods `dljob mutate --pods` prints for a manifest, with more
    arguments (`--config FILE`)."""
    argv = [str(DLJOB), "mutate", "--pods", "-f", str(manifest), *extra]
    out = subprocess.run(argv, check=True, capture_output=True, text=True, timeout=60)
    return [d for d in yaml.safe_load_all(out.stdout) if d]


def owned_config_maps(manifest: str | Path, namespace: str | None = None) -> dict[str, dict]:
    """The ConfigMaps `dljob mutate --owned` says the reconciler keeps for
    the manifest's jobs, by name."""
    argv = [str(DLJOB), "mutate", "--owned", "-f", str(manifest)] + (["-n", namespace] if namespace else [])
    out = subprocess.run(argv, check=True, capture_output=True, text=True, timeout=60)
    return {d["metadata"]["name"]: d for d in yaml.safe_load_all(out.stdout)
            if d and d.get("kind") == "ConfigMap"}


def expand(value: str, env: dict[str, str]) -> str:
    """Kubernetes' `$(VAR)` expansion: `$$` is a literal `$`, unknown
    references stay as written."""

    def sub(m: re.Match) -> str:
        if m.group(0) == "$$":
            return "$"
        return env.get(m.group(1), m.group(0))

    return re.sub(r"\$\$|\$\(([A-Za-z_][A-Za-z0-9_.-]*)\)", sub, value)


@dataclass
class Pod:
    obj: dict
    ip: str
    name: str = field(init=False)
    namespace: str = field(init=False)
    role: str = field(init=False)
    index: int = field(init=False)
    hostname: str = field(init=False)
    subdomain: str = field(init=False)

    def __post_init__(self) -> None:
        meta, spec = self.obj["metadata"], self.obj["spec"]
        self.namespace = meta.get("namespace", "default")
        self.hostname = spec["hostname"]
        self.subdomain = spec["subdomain"]
        self.name = meta.get("name") or self.hostname
        self.role = meta["labels"]["dljob.dev/role"]
        self.index = int(self.framework_env_raw()["DLJOB_INDEX"])

    @property
    def short_host(self) -> str:
        """Volcano's name of the pod: `host.sub`, which the pod's DNS search
        path resolves."""
        return f"{self.hostname}.{self.subdomain}"

    @property
    def svc_host(self) -> str:
        """The name dljob injects: `host.sub.ns.svc`."""
        return f"{self.hostname}.{self.subdomain}.{self.namespace}.svc"

    @property
    def fqdn(self) -> str:
        return f"{self.svc_host}.{CLUSTER_DOMAIN}"

    @property
    def hostfile(self) -> str | None:
        return self.obj["metadata"].get("annotations", {}).get("dljob.dev/hostfile")

    def projections(self, config_maps: dict[str, dict] | None = None) -> dict[str, str]:
        """What the framework container's downwardAPI volumes project from
        the pod's annotations, and its configMap volumes from `config_maps`
        (name → ConfigMap, as `dljob mutate --owned` prints them; every key,
        as a volume without items projects them): path → content, every
        path under /etc (the sandbox's private overlay)."""
        annotations = self.obj["metadata"].get("annotations", {})
        # The job's own ConfigMaps (others are the user's, not simulated).
        ours = config_maps or {}
        volumes = {v["name"]: v for v in self.obj["spec"].get("volumes", [])
                   if "downwardAPI" in v or v.get("configMap", {}).get("name") in ours}
        out: dict[str, str] = {}
        for mount in self.framework_container.get("volumeMounts", []):
            volume = volumes.get(mount["name"])
            if volume is None:
                continue
            base = mount["mountPath"].rstrip("/")
            if not base.startswith("/etc/"):
                raise ValueError(f"pod {self.name}: a projected mount at {base} is not simulated")
            if "configMap" in volume:
                for key, content in ours[volume["configMap"]["name"]].get("data", {}).items():
                    out[f"{base}/{key}"] = content
                continue
            source = volume["downwardAPI"]
            for item in source.get("items", []):
                m = re.fullmatch(r"metadata\.annotations\['(.+)'\]", item["fieldRef"]["fieldPath"])
                if not m:
                    raise ValueError(f"pod {self.name}: {item} is not simulated")
                out[f"{base}/{item['path']}"] = annotations.get(m.group(1), "")
        return out

    @property
    def framework_container(self) -> dict:
        """The container dljob wired (the one holding DLJOB_JOB)."""
        for c in self.obj["spec"]["containers"]:
            if any(e.get("name") == "DLJOB_JOB" for e in c.get("env", [])):
                return c
        raise LookupError(f"pod {self.name}: no container carries dljob's env")

    def framework_env_raw(self) -> dict[str, str]:
        return {e["name"]: e.get("value", "") for e in self.framework_container.get("env", [])}

    def env(self) -> dict[str, str]:
        """The framework container's env as the kubelet resolves it."""
        out: dict[str, str] = {}
        for e in self.framework_container.get("env", []):
            if "valueFrom" in e:
                out[e["name"]] = self._field(e["valueFrom"])
            else:
                out[e["name"]] = expand(e.get("value", ""), out)
        return out

    def _field(self, source: dict) -> str:
        ref = source.get("fieldRef", {}).get("fieldPath")
        meta = self.obj["metadata"]
        values = {
            "status.podIP": self.ip,
            "status.podIPs": self.ip,
            "status.hostIP": "127.0.0.1",
            "metadata.name": self.name,
            "metadata.namespace": self.namespace,
            "spec.nodeName": "node-1",
        }
        if ref in values:
            return values[ref]
        m = re.fullmatch(r"metadata\.(annotations|labels)\['(.+)'\]", ref or "")
        if m:
            return meta.get(m.group(1), {}).get(m.group(2), "")
        raise ValueError(f"pod {self.name}: env source {source} is not simulated")


class Job:
    """The pods of one manifest, run as sandboxed local processes."""

    def __init__(self, pods: list[dict], first_ip: int = 2,
                 config_maps: dict[str, dict] | None = None,
                 names_after: float | None = NAMES_AFTER):
        self.pods = [Pod(p, f"127.0.0.{first_ip + i}") for i, p in enumerate(pods)]
        # What the reconciler keeps for the job that its pods mount.
        self.config_maps = config_maps or {}
        self.tmp = Path(tempfile.mkdtemp(prefix="dljob-podsim-"))
        self.procs: list[subprocess.Popen] = []
        self.published = False
        # None: the names are never published (no Service, no reconciler).
        self.names_after = names_after
        self._lock = threading.RLock()
        self._timer: threading.Timer | None = None
        self._write_state()

    @classmethod
    def from_manifest(cls, manifest: str | Path, namespace: str | None = None) -> "Job":
        return cls(mutate_pods(manifest, namespace), config_maps=owned_config_maps(manifest, namespace))

    def __enter__(self) -> "Job":
        return self

    def __exit__(self, *exc) -> None:
        self.stop()

    def pod(self, role: str, index: int = 0) -> Pod:
        return next(p for p in self.pods if p.role == role and p.index == index)

    def by_host(self, host: str) -> Pod:
        """The pod any of its names (or its address) refers to."""
        for p in self.pods:
            if host in (p.hostname, p.svc_host, p.fqdn, p.ip):
                return p
        raise LookupError(f"no pod is called {host}")

    def hosts_file(self, pod: Pod, published: bool) -> str:
        lines = ["127.0.0.1\tlocalhost", "::1\tlocalhost ip6-localhost ip6-loopback"]
        # The kubelet's line for the pod itself comes first; once published,
        # every pod of the job as DNS returns them (canonical name first).
        lines.append(f"{pod.ip}\t{pod.fqdn}\t{pod.hostname}")
        if published:
            # `host.sub` (Volcano's form) is what the pod's DNS search path
            # (`<ns>.svc.cluster.local` first) resolves to the same name.
            for p in self.pods:
                lines.append(f"{p.ip}\t{p.fqdn}\t{p.svc_host}\t{p.short_host}")
        return "\n".join(lines) + "\n"

    def publish_names(self) -> None:
        """The job's names resolve from now on (its headless Service exists
        and every pod has an address). Each pod's /etc/hosts is rewritten in
        place: sandboxes see it through their bind mount."""
        with self._lock:
            self.published = True
            for pod in self.pods:
                (self._pod_dir(pod) / "hosts").write_text(self.hosts_file(pod, True))

    def _publish_later(self) -> None:
        with self._lock:
            if self._timer is not None or self.published or self.names_after is None:
                return
            self._timer = threading.Timer(self.names_after, self.publish_names)
            self._timer.daemon = True
            self._timer.start()

    def _pod_dir(self, pod: Pod) -> Path:
        d = self.tmp / pod.hostname
        if not d.exists():
            d.mkdir(parents=True)
            (d / "hosts").write_text(self.hosts_file(pod, self.published))
            for path, content in pod.projections(self.config_maps).items():
                f = d / "projected" / path.lstrip("/")
                f.parent.mkdir(parents=True, exist_ok=True)
                f.write_text(content)
        return d

    def _write_state(self) -> None:
        state = {
            p.hostname: {
                "names": [p.hostname, p.svc_host, p.fqdn, p.ip],
                "enter": self.enter_argv(p),
                "ssh_enter": self.enter_argv(p, session=True),
            }
            for p in self.pods
        }
        (self.tmp / "state.json").write_text(json.dumps(state))

    @property
    def state_path(self) -> Path:
        return self.tmp / "state.json"

    def enter_argv(self, pod: Pod, session: bool = False) -> list[str]:
        """argv prefix that runs a command inside the pod's sandbox (a fresh
        mount and UTS namespace per process, like `kubectl exec`).

        `session`: for a command sshd runs in the pod, which may daemonize
        and outlive the session (OpenMPI 4's orted does when tree spawn is
        off), as it would in a container: no pid namespace of its own that
        would kill it when the session's shell exits. Such processes carry
        DLJOB_PODSIM_STATE, by which the tests reap them."""
        d = self._pod_dir(pod)
        # A pid namespace too: when the entry process is killed, every
        # process of the pod dies with it (torchrun's and Paddle's workers
        # start sessions of their own, out of reach of killpg).
        isolate = [] if session else ["--pid", "--fork", "--kill-child"]
        return [
            "unshare", "--mount", "--uts", *isolate,
            "--propagation", "private",
            "sh", "-c", _ENTER, "podsim-enter",
            pod.hostname, str(d), str(d / "hosts"),
            str(d / "projected") if (d / "projected").exists() else "",
        ]

    def base_env(self) -> dict[str, str]:
        path = os.pathsep.join([str(REPO / "conformance" / "bin"), str(VENV_BIN), "/usr/local/bin", "/usr/bin", "/bin", "/usr/sbin", "/sbin"])
        return {
            "PATH": path,
            "HOME": str(self.tmp),
            # torchrun, Paddle and friends put their temp files here, which
            # the simulator removes (not the machine's /tmp).
            "TMPDIR": str(self.tmp),
            "LANG": "C.UTF-8",
            "DLJOB_PODSIM_STATE": str(self.state_path),
            "PYTHONUNBUFFERED": "1",
        }

    def start(self, pod: Pod, argv: list[str], env: dict[str, str] | None = None,
              cwd: str | Path | None = None,
              image_env: dict[str, str] | None = None) -> subprocess.Popen:
        """Starts argv inside `pod`: the pod's resolved env over a minimal
        base, then `env`. `image_env` is the image's own ENV, which the
        pod's env replaces name by name, as a container runtime does.
        stdout and stderr are captured together."""
        full = self.base_env() | (image_env or {}) | pod.env() | (env or {})
        self._publish_later()
        proc = subprocess.Popen(
            self.enter_argv(pod) + self.init_argv(pod) + list(argv),
            env=full,
            cwd=str(cwd or self.tmp),
            stdout=subprocess.PIPE,
            stderr=subprocess.STDOUT,
            text=True,
            start_new_session=True,
        )
        self.procs.append(proc)
        return proc

    def init_argv(self, pod: Pod) -> list[str]:
        """argv prefix that runs dljob's init container and then the pod's
        program, as the kubelet starts a pod's containers once its init
        containers exited 0.

        The init container runs from dljob's image, whose one file is
        `/dljob` (the binary under test), with none of the framework
        container's env and no PATH: nothing of the framework's image (no
        `sh`, no `getent`) is there for it to use. A container of that name
        from any other image is not simulated."""
        inits = [c for c in pod.obj["spec"].get("initContainers", []) if c["name"] == WAIT_FOR_NAMES]
        if not inits:
            return []
        init = inits[0]
        argv = list(init.get("command", [])) + list(init.get("args", []))
        if not init["image"].startswith(DLJOB_IMAGE_REPO) or argv[:1] != ["/dljob"]:
            raise ValueError(f"pod {pod.name}: {WAIT_FOR_NAMES} runs {argv[:1]} from {init['image']}, not dljob's /dljob")
        script = self._pod_dir(pod) / "init.sh"
        script.write_text(shlex.join(["env", "-i", f"HOSTNAME={pod.hostname}", str(DLJOB), *argv[1:]]) + "\n")
        return ["sh", "-c", 'sh "$0" || exit $?; exec "$@"', str(script)]

    def stop(self) -> None:
        """Kills every process started here (whole process groups) and
        removes the sandbox directories."""
        with self._lock:
            if self._timer is not None:
                self._timer.cancel()
        for proc in self.procs:
            if proc.poll() is None:
                try:
                    os.killpg(proc.pid, signal.SIGKILL)
                except ProcessLookupError:
                    pass
        for proc in self.procs:
            try:
                proc.wait(timeout=10)
            except subprocess.TimeoutExpired:
                pass
        shutil.rmtree(self.tmp, ignore_errors=True)


def enter_by_host(state_path: str, host: str) -> list[str]:
    """For an ssh stand-in: the argv prefix entering the pod named `host`."""
    state = json.loads(Path(state_path).read_text())
    for entry in state.values():
        if host in entry["names"]:
            return entry["enter"]
    raise LookupError(f"ssh: Could not resolve hostname {host}: Name or service not known")
