"""The one way a conformance program reports: a `RESULT <json>` line,
written with a single write(2).

Several processes of one pod (torchrun's local workers, an mpirun's ranks)
share its stdout. podsim runs them with PYTHONUNBUFFERED=1, under which
`print` writes the text and its newline in two calls, so another process's
line can land between them. One write of a line shorter than PIPE_BUF
(4096 bytes) to a pipe is atomic."""

import json
import os


def result(value) -> None:
    line = ("RESULT " + json.dumps(value) + "\n").encode()
    if len(line) > 4096:
        raise ValueError(f"RESULT line of {len(line)} bytes would not be written atomically")
    os.write(1, line)
