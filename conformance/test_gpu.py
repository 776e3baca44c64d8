"""GPU members and the image's own environment: the shipped accelerators
config (examples/mxnet-cifar10-gpu/config.yaml) mounts the node's driver
libraries and sets no LD_LIBRARY_PATH, so a GPU container keeps its image's.

The "image" here is a program whose image ENV sets LD_LIBRARY_PATH to a
directory holding a library it loads (built for the test with gcc), as
images set it for CUPTI or their own libraries. The pod's env replaces the
image's value of the same name, as a container runtime does. The driver
mount itself is checked on real GPUs (docs/gpus.md); here only what the env
does to the image.
"""

from __future__ import annotations

import shutil
import subprocess
from pathlib import Path

import pytest

from harness import EXAMPLES, PYTHON, job_of_pods, manifest
import podsim

SHIPPED = EXAMPLES / "mxnet-cifar10-gpu" / "config.yaml"

JOB = """\
apiVersion: v1
kind: Pod
metadata:
  name: gpu-probe
  labels: {dljob.dev/job: gpu-probe, dljob.dev/role: worker}
  annotations: {dljob.dev/framework: generic, dljob.dev/replicas: "worker=1"}
spec:
  restartPolicy: Never
  containers:
  - name: train
    image: cuda-app
    resources: {limits: {nvidia.com/gpu: 1}}
"""

PROGRAM = """
import ctypes
print("RESULT", ctypes.CDLL("libdljobprobe.so").dljob_probe(), flush=True)
"""


@pytest.fixture
def image_lib(tmp_path: Path) -> Path:
    """A directory holding libdljobprobe.so, as an image's own library dir."""
    gcc = shutil.which("gcc")
    if gcc is None:
        pytest.fail("gcc is missing: it builds the image's library")
    lib = tmp_path / "image-lib"
    lib.mkdir()
    src = tmp_path / "probe.c"
    src.write_text("int dljob_probe(void) { return 42; }\n")
    subprocess.run([gcc, "-shared", "-fPIC", "-o", str(lib / "libdljobprobe.so"), str(src)], check=True)
    return lib


def run_probe(tmp_path: Path, config: Path, lib: Path) -> tuple[int, str, dict]:
    pods = podsim.mutate_pods_with(manifest(tmp_path, JOB), ["--config", str(config)])
    assert len(pods) == 1
    with job_of_pods(pods) as job:
        pod = job.pods[0]
        proc = job.start(pod, [PYTHON, "-c", PROGRAM], image_env={"LD_LIBRARY_PATH": str(lib)})
        out, _ = proc.communicate(timeout=60)
        return proc.returncode, out, pod.framework_container


def test_shipped_config_keeps_the_images_ld_library_path(tmp_path, image_lib):
    rc, out, container = run_probe(tmp_path, SHIPPED, image_lib)
    # dljob wired it as a GPU member: the driver directory is mounted.
    assert {"name": "nvidia-libraries", "mountPath": "/usr/local/nvidia/lib64", "readOnly": True} in \
        container["volumeMounts"]
    assert "LD_LIBRARY_PATH" not in {e["name"] for e in container.get("env", [])}
    assert rc == 0, out
    assert "RESULT 42" in out, out


def test_a_config_that_sets_ld_library_path_takes_the_images_away(tmp_path, image_lib):
    """Why the shipped config sets none: with the env the earlier configs
    gave, the image's library is no longer found."""
    config = tmp_path / "config.yaml"
    config.write_text(SHIPPED.read_text() + "    env:\n    - name: LD_LIBRARY_PATH\n      value: /usr/local/nvidia/lib64\n")
    rc, out, _ = run_probe(tmp_path, config, image_lib)
    assert rc != 0, out
    assert "libdljobprobe.so: cannot open shared object file" in out, out
