"""Stand-in for the program of the training-operator's JAXJob image: it
reads the operator's own names, PROCESS_ID, NUM_PROCESSES and the
coordinator's address and port apart (COORDINATOR_ADDRESS,
COORDINATOR_PORT), joins them, and initialises jax.distributed with all
three; then a cross-process psum over every CPU device. Under
`dljob.dev/compat: kubeflow` these names are admission's."""

import os
import socket

import report

import jax

jax.config.update("jax_platforms", "cpu")
address = f"{os.environ['COORDINATOR_ADDRESS']}:{int(os.environ['COORDINATOR_PORT'])}"
jax.distributed.initialize(
    coordinator_address=address,
    num_processes=int(os.environ["NUM_PROCESSES"]),
    process_id=int(os.environ["PROCESS_ID"]),
    initialization_timeout=60,
)
import jax.numpy as jnp  # noqa: E402

xs = jnp.ones(jax.local_device_count())
total = jax.pmap(lambda x: jax.lax.psum(x, "i"), axis_name="i")(xs)
report.result({
    "process_index": jax.process_index(),
    "process_count": jax.process_count(),
    "psum": float(total[0]),
    "hostname": socket.gethostname(),
})
jax.distributed.shutdown()
