"""Stand-in for the jax example: joins the job, then a cross-process psum
over every CPU device.

By default, as the example does: JAX reads JAX_COORDINATOR_ADDRESS itself,
and the process count and id, which JAX reads from no env var, are passed
from dljob's JAX_NUM_PROCESSES and JAX_PROCESS_ID.

With the argument `operator`, as the training-operator's JAXJob image does:
it reads the operator's names, PROCESS_ID, NUM_PROCESSES and the
coordinator's address and port apart (COORDINATOR_ADDRESS,
COORDINATOR_PORT), and passes all three (under `dljob.dev/compat: kubeflow`
these names are admission's)."""

import os
import socket
import sys

import report

import jax

jax.config.update("jax_platforms", "cpu")
if sys.argv[1:] == ["operator"]:
    jax.distributed.initialize(
        coordinator_address=f"{os.environ['COORDINATOR_ADDRESS']}:{int(os.environ['COORDINATOR_PORT'])}",
        num_processes=int(os.environ["NUM_PROCESSES"]),
        process_id=int(os.environ["PROCESS_ID"]),
        initialization_timeout=60,
    )
else:
    jax.distributed.initialize(
        num_processes=int(os.environ["JAX_NUM_PROCESSES"]),
        process_id=int(os.environ["JAX_PROCESS_ID"]),
        initialization_timeout=60,
    )
import jax.numpy as jnp  # noqa: E402

xs = jnp.ones(jax.local_device_count())
total = jax.pmap(lambda x: jax.lax.psum(x, "i"), axis_name="i")(xs)
report.result({
    "process_index": jax.process_index(),
    "process_count": jax.process_count(),
    "device_count": jax.device_count(),
    "local_device_count": jax.local_device_count(),
    "psum": float(total[0]),
    "hostname": socket.gethostname(),
})
jax.distributed.shutdown()
