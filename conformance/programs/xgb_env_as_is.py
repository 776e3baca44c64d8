"""What XGBoost makes of the injected DMLC_* env passed as it is, and of
none at all."""

import os

import report

from xgboost import collective

out = {}
try:
    collective.init(**{k: v for k, v in os.environ.items() if k.startswith("DMLC_")})
    out["as_is"] = "ok"
except Exception as e:  # noqa: BLE001 - the point is which error
    out["as_is"] = str(e).splitlines()[0]
collective.init()
out["bare"] = {"rank": collective.get_rank(), "world": collective.get_world_size(),
               "distributed": collective.is_distributed()}
collective.finalize()
report.result(out)
