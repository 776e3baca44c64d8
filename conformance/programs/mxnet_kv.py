"""Stand-in for an MXNet parameter-server program (the mxnet-linear example
trains with a dist kvstore): every pod runs it. Importing mxnet with
DMLC_ROLE=scheduler or server runs that node's loop inside the import and
exits when the job ends; workers create a dist_sync kvstore (ps-lite, from
DMLC_PS_ROOT_URI, DMLC_PS_ROOT_PORT, DMLC_NUM_SERVER, DMLC_NUM_WORKER), push
rank+1 to a few keys and pull the aggregate."""

import os
import socket

import report

import mxnet as mx

kv = mx.kv.create("dist_sync")
shape = (2, 3)
keys = [3, 5, 7, 9]
for k in keys:
    kv.init(k, mx.nd.zeros(shape))
for k in keys:
    kv.push(k, mx.nd.ones(shape) * (kv.rank + 1) * k)
pulled = {}
for k in keys:
    out = mx.nd.zeros(shape)
    kv.pull(k, out=out)
    values = set(out.asnumpy().ravel().tolist())
    assert len(values) == 1, values
    pulled[k] = values.pop()
report.result({
    "rank": kv.rank,
    "num_workers": kv.num_workers,
    "type": kv.type,
    "pulled": pulled,
    "hostname": socket.gethostname(),
    "dmlc_rank": os.environ.get("DMLC_RANK"),
})
