#!/usr/bin/env python3
"""Where the bytes of a `dljob serve` heap profile live.

    python3 benches/dhat_summary.py target/replay-dhat/created-run1.json [--top 25]

Reads a dhat-heap.json written by a binary built with `--features dhat-heap`
(see benches/replay.rs) and prints the heap at the global peak (t-gmax) and
at the end of the profile (t-end: with `replay --dhat`, the settled server),
grouped into buckets by the frames of each allocation's backtrace, then the
top allocation sites. Bucketing rules, first match wins:

- which consumer: a frame of `reconciler::run_controller` (the Controller's
  own DLJob reflector and its `.watches_stream` member triggers), else of
  `reconciler::watch_members` / `watch_owned` / `reconciler::start` (the
  member and Service reflectors);
- what: the outermost `<Type as Deserialize>` frame (Pod, StatefulSet, Job,
  Service, DLJob, Lease, Event...) for objects being deserialised (they
  then live in a store or die), else the dljob or kube function that
  allocated (the member index, trim_pod, the event recorder, the
  controller's scheduler, the webhook, hyper/bytes body buffers...).
"""

import json
import re
import sys
from collections import defaultdict

# (pattern over the joined frames, bucket), first match wins. Frames carry
# their generic arguments (`apply_watcher_event<...::pod::Pod>`) and files.
RULES = [
    (r"apply_watcher_event<[^\n]*::pod::Pod>", "Pod reflector store (members: a clone of each pod, whole spec for bare pods)"),
    (r"apply_watcher_event<[^\n]*::service::Service>", "Service store"),
    (r"apply_watcher_event<[^\n]*stateful_set::StatefulSet>", "StatefulSet store"),
    (r"apply_watcher_event<[^\n]*batch::v1::job::Job>", "Job store"),
    (r"apply_watcher_event<dljob::crd::DLJob>", "DLJob store (Controller, whole objects)"),
    (r"apply_event<[^\n]*\(src/reconciler/observe.rs|MemberIndex", "member index"),
    (r"trim_pod", "trim_pod (rebuilt status of each pod)"),
    (r"kube_runtime::events::EventKey|Recorder|events::v1::event::Event", "event recorder (cache of published Events)"),
    (r"run_controller[^\n]*\n(.|\n)*|member_trigger", None),  # decided below
    (r"src/reconciler/controller.rs|src/reconciler/resources.rs|src/reconciler/status.rs", "reconcile (owned objects, status, Events)"),
    (r"src/webhook|axum", "webhook"),
    (r"hyper|bytes_mut|h2::|kube_client|http_body", "kube client: HTTP connections and body buffers"),
    (r"rustls|ring::", "TLS"),
    (r"tracing", "tracing/logging"),
    (r"tokio::runtime|tokio::sync|tokio::time", "tokio runtime"),
]

SKIP_FRAME = re.compile(
    r"^\[root\]|^alloc |^alloc_impl|^allocate |^try_allocate|^with_capacity|^to_vec|^clone<|^reserve|^new<|^insert<|^find_or|^from<|^into|^extend|^push|^grow|^finish_grow|^do_reserve|^collect|^from_iter|^spec_extend|^deserialize|^visit|^next_|^__|^{closure|^call_once|^map"
)


def consumer(stack):
    if "run_controller" in stack or "member_trigger" in stack:
        return "Controller"
    if "Join4<" in stack:
        return "member/Service reflectors"
    if "src/webhook" in stack:
        return "webhook"
    return None


def bucket(frames):
    stack = "\n".join(frames)
    for pat, name in RULES:
        if re.search(pat, stack):
            if name is None:
                return "Controller watch streams (objects being decoded, triggers)"
            return name
    who = consumer(stack)
    return f"other ({who})" if who else "other"


def site(frames):
    """The first frame worth naming (allocator and std plumbing skipped)."""
    for f in frames:
        name = re.sub(r"^0x[0-9a-f]+: ", "", f)
        if not SKIP_FRAME.search(name) and "(alloc/" not in name and "(core/src" not in name:
            return name[:160]
    return (frames[-1] if frames else "?")[:160]


def mib(b):
    return b / 1048576.0


def main():
    args = sys.argv[1:]
    top = 25
    if "--top" in args:
        i = args.index("--top")
        top = int(args[i + 1])
        del args[i : i + 2]
    if len(args) != 1:
        print(__doc__)
        sys.exit(2)
    d = json.load(open(args[0]))
    ftbl = d["ftbl"]
    pps = d["pps"]
    gmax = sum(p.get("gb", 0) for p in pps)
    end = sum(p.get("eb", 0) for p in pps)
    gblocks = sum(p.get("gbk", 0) for p in pps)
    eblocks = sum(p.get("ebk", 0) for p in pps)
    total = sum(p["tb"] for p in pps)
    print(f"{args[0]}: {len(pps)} allocation sites; {mib(total):.0f} MiB allocated in all")
    print(f"  heap at t-gmax ({d.get('tg', 0) / 1e6:.1f} s): {mib(gmax):.1f} MiB in {gblocks} blocks")
    print(f"  heap at t-end  ({d['te'] / 1e6:.1f} s): {mib(end):.1f} MiB in {eblocks} blocks")
    buckets = defaultdict(lambda: [0, 0, 0, 0])
    sites = defaultdict(lambda: [0, 0, ""])
    for p in pps:
        frames = [ftbl[i] for i in p["fs"]]
        b = bucket(frames)
        buckets[b][0] += p.get("gb", 0)
        buckets[b][1] += p.get("eb", 0)
        buckets[b][2] += p.get("gbk", 0)
        buckets[b][3] += p.get("ebk", 0)
        s = site(frames)
        sites[(b, s)][0] += p.get("gb", 0)
        sites[(b, s)][1] += p.get("eb", 0)
    print()
    print(f"  {'bucket':<62} {'t-gmax MiB':>10} {'%':>5} {'t-end MiB':>10} {'%':>5} {'blocks end':>10}")
    for name, (gb, eb, gbk, ebk) in sorted(buckets.items(), key=lambda kv: -max(kv[1][0], kv[1][1])):
        if max(gb, eb) < 65536:
            continue
        print(
            f"  {name:<62} {mib(gb):>10.1f} {100 * gb / max(gmax, 1):>5.1f} {mib(eb):>10.1f} {100 * eb / max(end, 1):>5.1f} {ebk:>10}"
        )
    for col, label in ((0, "t-gmax"), (1, "t-end")):
        print()
        print(f"  top {top} sites at {label} (bucket | first named frame): MiB")
        for (b, s), v in sorted(sites.items(), key=lambda kv: -kv[1][col])[:top]:
            print(f"    {mib(v[col]):8.1f}  {b} | {s}")


if __name__ == "__main__":
    main()
