"""Shared by the framework conformance tests: run a stand-in program in every
pod of a job (see podsim) and collect what it reports.

A stand-in prints one line `RESULT <json>` per process it wants checked; the
test compares those with what the pods' topology says they must be.
"""

from __future__ import annotations

import json
import random
import subprocess
import time
from pathlib import Path
from typing import Callable

import podsim

HERE = Path(__file__).resolve().parent
REPO = HERE.parent
EXAMPLES = REPO / "examples"
PROGRAMS = HERE / "programs"
PYTHON = str(podsim.VENV_BIN / "python")
MXNET_PYTHON = str(REPO / ".venv-conformance" / "mxnet" / "bin" / "python")


# Jobs take addresses from 127.0.0.20-99, a fresh block each (see new_job),
# starting anywhere so that a rerun within the minute does not meet the last
# run's TIME_WAIT sockets either.
_IP_FIRST, _IP_END = 20, 100
_next_ip = random.randrange(_IP_FIRST, _IP_END)


def new_job(manifest: str | Path) -> podsim.Job:
    """The pods of `manifest`, at addresses the job before did not use: a
    server's port on an address stays taken for a minute after it closes
    (TIME_WAIT) where the server does not set SO_REUSEADDR (xgboost's
    tracker), and in a cluster a new pod gets a new address anyway.

    Never an address that starts with "127.0.0.1" (127.0.0.1x, 127.0.0.1xx):
    Paddle's launcher replaces "127.0.0.1" wherever it occurs in its master
    endpoint, so 127.0.0.107:36543 would become 127.0.0.10707:36543. No pod
    address in a cluster looks like that."""
    return job_of_pods(podsim.mutate_pods(manifest), podsim.owned_config_maps(manifest))


def job_of_pods(pods: list[dict], config_maps: dict[str, dict] | None = None) -> podsim.Job:
    """A job of these pods (as `dljob mutate --pods` prints them, perhaps
    changed by the test), at fresh addresses as in new_job; `config_maps`,
    what the reconciler keeps for it that its pods mount."""
    global _next_ip
    assert len(pods) <= _IP_END - _IP_FIRST
    if _next_ip + len(pods) > _IP_END:
        _next_ip = _IP_FIRST
    j = podsim.Job(pods, first_ip=_next_ip, config_maps=config_maps)
    _next_ip += len(pods)
    return j


def program(name: str) -> str:
    return str(PROGRAMS / name)


def run(job: podsim.Job, argv_of: Callable[[podsim.Pod], list[str]], timeout: float,
        env_of: Callable[[podsim.Pod], dict[str, str]] | None = None,
        pods: list[podsim.Pod] | None = None,
        cwd_of: Callable[[podsim.Pod], Path] | None = None) -> dict[str, str]:
    """Starts `argv_of(pod)` in every pod (or `pods`) at once, waits up to
    `timeout` seconds for all of them, and returns {hostname: output}. Fails
    with every pod's output when one exits non-zero or time runs out."""
    started = []
    for pod in pods if pods is not None else job.pods:
        cwd = cwd_of(pod) if cwd_of else None
        if cwd is not None:
            cwd.mkdir(parents=True, exist_ok=True)
        proc = job.start(pod, argv_of(pod), env_of(pod) if env_of else None, cwd=cwd)
        started.append((pod, proc))
    deadline = time.monotonic() + timeout
    outputs: dict[str, str] = {}
    failed: list[str] = []
    try:
        for pod, proc in started:
            try:
                out, _ = proc.communicate(timeout=max(0.1, deadline - time.monotonic()))
            except subprocess.TimeoutExpired:
                job.stop()
                for p, pr in started:
                    if p.hostname not in outputs:
                        outputs[p.hostname] = pr.communicate()[0] or ""
                raise AssertionError(
                    f"pods did not finish within {timeout}s\n{_dump(outputs)}") from None
            outputs[pod.hostname] = out
            if proc.returncode != 0:
                failed.append(f"{pod.hostname} exited {proc.returncode}")
                # The others may wait for it forever: stop now.
                job.stop()
    finally:
        # A pod's other processes end with its first (podsim's pid
        # namespaces); stop whatever still runs.
        if any(pr.poll() is None for _, pr in started):
            job.stop()
    if failed:
        for p, pr in started:
            outputs.setdefault(p.hostname, pr.communicate()[0] or "")
        raise AssertionError(f"{', '.join(failed)}\n{_dump(outputs)}")
    return outputs


def _dump(outputs: dict[str, str]) -> str:
    return "\n".join(f"----- {h}\n{o[-6000:]}" for h, o in outputs.items())


def results(out: str) -> list[dict]:
    """Every `RESULT <json>` line of an output."""
    return [json.loads(line.split(" ", 1)[1]) for line in out.splitlines()
            if line.startswith("RESULT ")]


def result(out: str) -> dict:
    """The one `RESULT <json>` line of an output."""
    found = results(out)
    assert len(found) == 1, f"expected one RESULT line, got {len(found)}:\n{out[-6000:]}"
    return found[0]


def manifest(tmp_path: Path, text: str, name: str = "job.yaml") -> Path:
    path = tmp_path / name
    path.write_text(text)
    return path


def example_program(manifest_path: Path, configmap: str, key: str, dest: Path) -> Path:
    """Writes the program an example ships in a ConfigMap to `dest` and
    returns it: the conformance tier runs examples' programs as written."""
    import yaml

    for doc in yaml.safe_load_all(Path(manifest_path).read_text()):
        if doc and doc.get("kind") == "ConfigMap" and doc["metadata"]["name"] == configmap:
            dest.write_text(doc["data"][key])
            return dest
    raise LookupError(f"{manifest_path}: no ConfigMap {configmap} with {key}")


def example_command(manifest_path: Path, kind: str, name: str) -> list[str]:
    """The framework container's command of an example's member, as written."""
    import yaml

    for doc in yaml.safe_load_all(Path(manifest_path).read_text()):
        if doc and doc.get("kind") == kind and doc["metadata"]["name"] == name:
            spec = doc["spec"] if kind == "Pod" else doc["spec"]["template"]["spec"]
            return list(spec["containers"][0]["command"])
    raise LookupError(f"{manifest_path}: no {kind} {name}")
