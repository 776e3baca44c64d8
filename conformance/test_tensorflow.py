"""TensorFlow: the real TFConfigClusterResolver (what
tf.distribute.ParameterServerStrategy and MultiWorkerMirroredStrategy build
their cluster from) on the TF_CONFIG dljob injects, in every pod of
examples/tensorflow-ps (chief=1, worker=2, ps=2).

Only the resolver runs: every TF server listens on 0.0.0.0:2222, which the
pods of one simulated job cannot all do in one network namespace.
"""

from __future__ import annotations

from harness import EXAMPLES, PYTHON, new_job, program, result, run

TF_PS = EXAMPLES / "tensorflow-ps" / "job.yaml"


def test_every_member_resolves_the_cluster_and_its_own_task():
    with new_job(TF_PS) as job:
        roles = ("chief", "worker", "ps")
        want = {
            role: [f"{p.svc_host}:2222" for p in sorted(job.pods, key=lambda p: p.index) if p.role == role]
            for role in roles
        }
        assert [len(want[r]) for r in roles] == [1, 2, 2]
        out = run(job, lambda p: [PYTHON, program("tf_resolver.py")], timeout=180)
        for pod in job.pods:
            r = result(out[pod.hostname])
            assert r["cluster"] == want
            assert (r["task_type"], r["task_id"]) == (pod.role, pod.index)
            # TF_CONFIG's "environment" is for TF 1's distribute coordinator
            # (only "google" changes anything); the resolver leaves it.
            assert r["rpc_layer"] is None
            assert r["master"] == f"{pod.svc_host}:2222"
            assert r["num_workers"] == 2
            # Every address leads to its pod, this one's to itself.
            assert r["resolved"] == {
                f"{p.svc_host}:2222": p.ip for p in job.pods
            }
