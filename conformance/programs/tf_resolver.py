"""Stand-in for the tensorflow-ps example's first lines: what
TFConfigClusterResolver makes of the injected TF_CONFIG in this pod, and
where each cluster address leads from here."""

import os
import socket

import report

os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")
import tensorflow as tf  # noqa: E402

resolver = tf.distribute.cluster_resolver.TFConfigClusterResolver()
spec = resolver.cluster_spec().as_dict()
resolved = {
    addr: socket.gethostbyname(addr.rsplit(":", 1)[0])
    for addrs in spec.values() for addr in addrs
}
report.result({
    "cluster": spec,
    "task_type": resolver.task_type,
    "task_id": resolver.task_id,
    "rpc_layer": resolver.rpc_layer,
    "environment": resolver.environment,
    "master": resolver.master(),
    "num_workers": resolver.cluster_spec().num_tasks("worker") if "worker" in spec else 0,
    "resolved": resolved,
    "hostname": socket.gethostname(),
})
