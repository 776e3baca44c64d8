"""Stand-in for the jax example: joins the job through JAX's own reading of
JAX_COORDINATOR_ADDRESS; the process count and id, which JAX reads from no
env var, are passed from dljob's JAX_NUM_PROCESSES and JAX_PROCESS_ID, as
the example does. Then a cross-process psum over every CPU device."""

import os
import socket

import report

import jax

jax.config.update("jax_platforms", "cpu")
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
