"""What torch's c10d rendezvous backend decides about hosting its store when
PET_RDZV_CONF does not say: whether this machine "is" the endpoint host."""

import os
import socket

import report

from torch.distributed.elastic.rendezvous.utils import (
    _matches_machine_hostname,
    _parse_rendezvous_config,
    parse_rendezvous_endpoint,
)

host, port = parse_rendezvous_endpoint(os.environ["PET_RDZV_ENDPOINT"], default_port=29400)
conf = _parse_rendezvous_config(os.environ.get("PET_RDZV_CONF", ""))
report.result({
    "endpoint_host": host,
    "hostname": socket.gethostname(),
    "fqdn": socket.getfqdn(),
    "heuristic_is_host": _matches_machine_hostname(host),
    "conf": conf,
})
