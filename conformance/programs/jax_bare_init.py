"""What `jax.distributed.initialize()` without arguments makes of a pod's env."""


import report

import jax

try:
    jax.distributed.initialize(initialization_timeout=10)
    outcome = {"ok": True}
except Exception as e:  # noqa: BLE001 - the point is which error
    outcome = {"ok": False, "error": f"{type(e).__name__}: {e}"}
report.result(outcome)
