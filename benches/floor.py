#!/usr/bin/env python3
"""The webhook against the HTTP + TLS floor, side by side, in one command.

    python3 benches/floor.py [--rounds 3] [--duration 8] [--connections 16]

Starts, on 127.0.0.1 only:
- nginx (Debian's nginx-light, installed with apt-get when missing) answering
  every POST with a fixed AdmissionReview response: the HTTP + TLS floor;
- `target/release/dljob serve --no-reconciler` (built with `cargo build
  --release` first), default logging;
and drives both with the same client, wrk (Debian's, installed when missing):
`wrk -t1 -c<connections> -d<duration>s`, TLS 1.3, keep-alive, POSTing the
captured 3 KB Pod CREATE review (`mutate-create-pod-ddp-worker.json`,
compacted, as the API server sends it).

Each round runs, back to back: nginx, dljob `GET /healthz`, dljob `POST
/mutate`, dljob `POST /validate` (the matching captured validating review),
and dljob's POST floor: `POST /mutate` of a body of the same size that dljob
answers without reading its object (the review made a DELETE, its object
moved under `options`, a field the webhook skips unread): what HTTP, TLS and
the JSON scan of a 3 KB body cost before the core does anything.
Rounds alternate, so that the machine's drift falls on every server alike.
For each run it reports requests/s (wrk), server CPU per request (utime +
stime of the server's processes from /proc over the run, divided by the
requests wrk counted) and, per round, the mutate/nginx throughput ratio
and the mutate/healthz and mutate/POST-floor CPU ratios; then the medians
and the spread. Every response must be 2xx (wrk's non-2xx count is checked) and a
mutate answer is checked to be an allowed review with a patch before the
runs.

Everything lives in a temporary directory under target/, removed at the end
with both servers stopped, also when interrupted.
"""

import argparse
import json
import os
import shutil
import signal
import ssl
import statistics
import subprocess
import sys
import tempfile
import time
import urllib.request
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent
FIXTURES = REPO / "tests" / "fixtures" / "admission"
MUTATE_REVIEW = "mutate-create-pod-ddp-worker.json"
VALIDATE_REVIEW = "validate-create-pod-ddp-worker-rkzbv.json"
CLK_TCK = os.sysconf("SC_CLK_TCK")

WRK_SCRIPT = """
wrk.method = os.getenv("FLOOR_METHOD")
if wrk.method == "POST" then
  local f = assert(io.open(os.getenv("FLOOR_BODY"), "rb"))
  wrk.body = f:read("*a")
  f:close()
  wrk.headers["Content-Type"] = "application/json"
end
"""

NGINX_CONF = """
daemon off;
master_process on;
worker_processes auto;
pid {dir}/nginx.pid;
error_log {dir}/nginx-error.log warn;
events {{ worker_connections 1024; }}
http {{
    access_log off;
    client_body_temp_path {dir}/body;
    proxy_temp_path {dir}/proxy;
    fastcgi_temp_path {dir}/fastcgi;
    uwsgi_temp_path {dir}/uwsgi;
    scgi_temp_path {dir}/scgi;
    client_body_buffer_size 64k;
    keepalive_requests 100000000;
    server {{
        listen 127.0.0.1:{port} ssl;
        ssl_protocols TLSv1.3;
        ssl_certificate {dir}/tls.crt;
        ssl_certificate_key {dir}/tls.key;
        location / {{
            default_type application/json;
            return 200 '{body}';
        }}
    }}
}}
"""


def main():
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--rounds", type=int, default=3, help="alternating rounds (default 3)")
    p.add_argument("--duration", type=int, default=8, help="seconds per run (default 8, at most 60)")
    p.add_argument("--connections", type=int, default=16, help="keep-alive connections (default 16)")
    p.add_argument("--no-build", action="store_true", help="use target/release/dljob as it is")
    args = p.parse_args()
    if not 1 <= args.duration <= 60 or not 1 <= args.rounds <= 20 or not 1 <= args.connections <= 256:
        p.error("--duration 1..60, --rounds 1..20, --connections 1..256")

    install_missing({"nginx": "nginx-light", "wrk": "wrk"})
    if not args.no_build:
        subprocess.run(["cargo", "build", "--release", "--quiet"], cwd=REPO, check=True)
    (REPO / "target").mkdir(exist_ok=True)
    work = Path(tempfile.mkdtemp(prefix="floor-bench-", dir=REPO / "target"))
    servers = []
    try:
        run(args, work, servers)
    finally:
        for s in servers:
            stop(s)
        shutil.rmtree(work, ignore_errors=True)


def install_missing(tools):
    missing = [pkg for tool, pkg in tools.items() if shutil.which(tool) is None]
    if not missing:
        return
    print(f"installing {' '.join(missing)} from Debian", flush=True)
    env = dict(os.environ, DEBIAN_FRONTEND="noninteractive")
    apt = ["apt-get"] if os.geteuid() == 0 else ["sudo", "apt-get"]
    subprocess.run(apt + ["update", "-q"], check=True, env=env, stdout=subprocess.DEVNULL)
    subprocess.run(apt + ["install", "-y", "-q"] + missing, check=True, env=env, stdout=subprocess.DEVNULL)


def compact(name):
    return json.dumps(json.loads((FIXTURES / name).read_text()), separators=(",", ":")).encode()


def free_port():
    import socket

    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def wait_https(url, proc, what):
    ctx = ssl._create_unverified_context()
    deadline = time.monotonic() + 30
    while time.monotonic() < deadline:
        if proc.poll() is not None:
            sys.exit(f"{what} exited with {proc.returncode} before answering")
        try:
            urllib.request.urlopen(url, context=ctx, timeout=1).read()
            return
        except Exception:
            time.sleep(0.1)
    sys.exit(f"{what} did not answer {url} within 30 s")


def post(url, body):
    ctx = ssl._create_unverified_context()
    req = urllib.request.Request(url, data=body, headers={"Content-Type": "application/json"})
    return json.loads(urllib.request.urlopen(req, context=ctx, timeout=5).read())


def stop(proc):
    if proc.poll() is None:
        proc.send_signal(signal.SIGTERM)
        try:
            proc.wait(timeout=15)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait()


def cpu_seconds(pids):
    total = 0
    for pid in pids:
        try:
            fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
        except FileNotFoundError:
            continue
        total += int(fields[11]) + int(fields[12])  # utime, stime
    return total / CLK_TCK


def tree(pid):
    """The process and its children (nginx's workers)."""
    pids = [pid]
    for child in Path(f"/proc/{pid}/task/{pid}/children").read_text().split():
        pids.append(int(child))
    return pids


def wrk(args, work, url, method, body_file):
    env = dict(os.environ, FLOOR_METHOD=method, FLOOR_BODY=str(body_file or ""))
    out = subprocess.run(
        ["wrk", "-t1", f"-c{args.connections}", f"-d{args.duration}s", "--timeout", "5s",
         "-s", str(work / "floor.lua"), url],
        env=env, capture_output=True, text=True, timeout=args.duration + 30, check=True,
    ).stdout
    requests = rate = None
    for line in out.splitlines():
        words = line.split()
        if "requests in" in line:
            requests = int(words[0])
        elif line.startswith("Requests/sec:"):
            rate = float(words[1])
        elif "Non-2xx" in line or "Socket errors" in line:
            sys.exit(f"wrk against {url} saw failures:\n{out}")
    if requests is None or rate is None:
        sys.exit(f"cannot read wrk's output:\n{out}")
    return requests, rate


def run(args, work, servers):
    mutate_body, validate_body = work / "mutate.json", work / "validate.json"
    mutate_body.write_bytes(compact(MUTATE_REVIEW))
    validate_body.write_bytes(compact(VALIDATE_REVIEW))
    floor_body = work / "post-floor.json"
    review = json.loads((FIXTURES / MUTATE_REVIEW).read_text())
    request = review["request"]
    request["operation"] = "DELETE"
    request["options"] = request.pop("object")
    floor_body.write_bytes(json.dumps(review, separators=(",", ":")).encode())
    (work / "floor.lua").write_text(WRK_SCRIPT)

    dljob_port = free_port()
    dljob = subprocess.Popen(
        [str(REPO / "target/release/dljob"), "serve", "--no-reconciler", "--drain-seconds", "0",
         "--listen", f"127.0.0.1:{dljob_port}", "--self-signed-ca-out", str(work / "ca.pem")],
        stdout=open(work / "dljob.log", "wb"), stderr=subprocess.STDOUT,
        env={k: v for k, v in os.environ.items() if k not in ("RUST_LOG", "KUBECONFIG")},
    )
    servers.append(dljob)
    dljob_url = f"https://127.0.0.1:{dljob_port}"
    wait_https(f"{dljob_url}/healthz", dljob, "dljob serve")

    # nginx answers what dljob answers to the same review, byte for byte.
    unread = post(f"{dljob_url}/mutate", floor_body.read_bytes())["response"]
    assert unread["allowed"] and "patch" not in unread, f"the POST floor's review is allowed unread: {unread}"
    answer = post(f"{dljob_url}/mutate", mutate_body.read_bytes())
    response = answer["response"]
    assert response["allowed"] and response.get("patch"), f"the review is not patched: {answer}"
    fixed = json.dumps(answer, separators=(",", ":"))
    assert not set("'$\\") & set(fixed), "the fixed response fits in nginx's single quotes as it is"
    subprocess.run(
        ["openssl", "req", "-x509", "-newkey", "ec", "-pkeyopt", "ec_paramgen_curve:P-256", "-nodes",
         "-days", "1", "-subj", "/CN=localhost", "-addext", "subjectAltName=IP:127.0.0.1",
         "-keyout", str(work / "tls.key"), "-out", str(work / "tls.crt")],
        check=True, capture_output=True,
    )
    nginx_port = free_port()
    (work / "nginx.conf").write_text(NGINX_CONF.format(dir=work, port=nginx_port, body=fixed))
    nginx = subprocess.Popen(["nginx", "-p", str(work), "-c", str(work / "nginx.conf")],
                             stdout=subprocess.DEVNULL, stderr=open(work / "nginx.out", "wb"))
    servers.append(nginx)
    nginx_url = f"https://127.0.0.1:{nginx_port}"
    wait_https(f"{nginx_url}/", nginx, "nginx")

    print(f"machine: {os.cpu_count()} CPUs, {cpu_model()}, load {os.getloadavg()[0]:.2f} at start")
    print(f"wrk -t1 -c{args.connections} -d{args.duration}s, body {len(mutate_body.read_bytes())} B, "
          f"response {len(fixed)} B")
    phases = [
        ("nginx fixed response", nginx, f"{nginx_url}/mutate", "POST", mutate_body),
        ("dljob GET /healthz", dljob, f"{dljob_url}/healthz", "GET", None),
        ("dljob POST /mutate", dljob, f"{dljob_url}/mutate", "POST", mutate_body),
        ("dljob POST /validate", dljob, f"{dljob_url}/validate", "POST", validate_body),
        ("dljob POST floor (object unread)", dljob, f"{dljob_url}/mutate", "POST", floor_body),
    ]
    results = {name: [] for name, *_ in phases}
    ratios, over_healthz, over_floor = [], [], []
    for r in range(args.rounds):
        for name, proc, url, method, body in phases:
            pids = tree(proc.pid)
            before = cpu_seconds(pids)
            requests, rate = wrk(args, work, url, method, body)
            used = cpu_seconds(pids) - before
            results[name].append((rate, used / requests * 1e6))
            print(f"round {r + 1}: {name:24} {rate:10.0f}/s  {used / requests * 1e6:6.1f} µs CPU/request",
                  flush=True)
        ratios.append(results["dljob POST /mutate"][-1][0] / results["nginx fixed response"][-1][0])
        mutate_cpu = results["dljob POST /mutate"][-1][1]
        over_healthz.append(mutate_cpu / results["dljob GET /healthz"][-1][1])
        over_floor.append(mutate_cpu / results["dljob POST floor (object unread)"][-1][1])
        print(f"round {r + 1}: mutate / nginx {ratios[-1]:.3f}; mutate CPU / healthz CPU {over_healthz[-1]:.2f}, "
              f"/ POST floor CPU {over_floor[-1]:.2f}", flush=True)

    print(f"\nmedians of {args.rounds} rounds:\n")
    print("| server | requests/s | server CPU per request (spread) |")
    print("|---|---:|---:|")
    for name, runs in results.items():
        rate = statistics.median(r for r, _ in runs)
        cpus = [c for _, c in runs]
        print(f"| {name} | {rate:,.0f} | {statistics.median(cpus):.1f} µs ({min(cpus):.1f}–{max(cpus):.1f}) |")
    for what, xs, fmt in [("mutate / nginx (requests/s)", ratios, ".3f"),
                          ("mutate CPU / healthz CPU", over_healthz, ".2f"),
                          ("mutate CPU / POST floor CPU", over_floor, ".2f")]:
        print(f"{what}: {statistics.median(xs):{fmt}} (rounds: {', '.join(f'{x:{fmt}}' for x in xs)})")


def cpu_model():
    for line in Path("/proc/cpuinfo").read_text().splitlines():
        if line.startswith("model name"):
            return line.split(":", 1)[1].strip()
    return "unknown CPU"


if __name__ == "__main__":
    main()
