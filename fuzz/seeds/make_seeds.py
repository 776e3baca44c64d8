#!/usr/bin/env python3
"""Writes the seed corpora fuzz/corpus/<target>/ from the repo's fixtures and
examples (tests/fixtures: the captured admission/ reviews and the derived
review-*.json). Re-run after
adding fixtures: python3 fuzz/seeds/make_seeds.py (from the repo root)."""
import glob, json, os, sys
import yaml

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
CORPUS = os.path.join(ROOT, "fuzz", "corpus")
JOBS = 22  # len(JOBS) in fuzz_targets/mutate_pod.rs


def compact(v):
    return json.dumps(v, separators=(",", ":"), sort_keys=False).encode()


def write(target, name, data):
    d = os.path.join(CORPUS, target)
    os.makedirs(d, exist_ok=True)
    with open(os.path.join(d, name), "wb") as f:
        f.write(data if isinstance(data, bytes) else data.encode())


reviews = sorted(glob.glob(os.path.join(ROOT, "tests", "fixtures", "admission", "*.json")))
reviews += sorted(glob.glob(os.path.join(ROOT, "tests", "fixtures", "review-*.json")))
docs = []
for f in sorted(glob.glob(os.path.join(ROOT, "examples", "*", "*.yaml"))):
    for d in yaml.safe_load_all(open(f)):
        if isinstance(d, dict):
            docs.append((os.path.basename(os.path.dirname(f)), d))

# admission_review: every captured review, compacted.
seen = set()
objects = []
for f in reviews:
    r = json.load(open(f))
    data = compact(r)
    if data not in seen:
        seen.add(data)
        write("admission_review", os.path.basename(f), data)
    req = r.get("request", {})
    if isinstance(req.get("object"), dict):
        objects.append((os.path.basename(f)[:-5], req["kind"]["kind"], req["object"]))
write("admission_review", "empty-object", b"{}")
write("admission_review", "no-uid", b'{"apiVersion":"admission.k8s.io/v1","kind":"AdmissionReview","request":{}}')

# mutate_pod: selector byte + pod JSON. Pods as sent; workload templates
# made into pods; a bare pod made a member of every job of the table.
def template_pod(obj):
    tpl = obj.get("spec", {}).get("template", {})
    meta = dict(tpl.get("metadata") or {})
    meta.setdefault("labels", {}).update(obj.get("metadata", {}).get("labels", {}))
    meta.setdefault("annotations", {}).update(obj.get("metadata", {}).get("annotations", {}))
    return {"apiVersion": "v1", "kind": "Pod", "metadata": meta, "spec": tpl.get("spec", {})}

pods = {}
for name, kind, obj in objects:
    pods[name] = obj if kind == "Pod" else template_pod(obj)
for ex, d in docs:
    kind = d.get("kind")
    name = f"example-{ex}-{d.get('metadata', {}).get('name', '')}"
    if kind == "Pod":
        pods[name] = d
    elif kind in ("StatefulSet", "Job"):
        pods[name] = template_pod(d)
seen = set()
for i, (name, pod) in enumerate(sorted(pods.items())):
    data = compact(pod)
    if data in seen:
        continue
    seen.add(data)
    write("mutate_pod", name, bytes([(i % 2) << 1]) + data)
bare = {"metadata": {"name": "p"}, "spec": {"containers": [
    {"name": "main", "image": "img", "resources": {"limits": {"nvidia.com/gpu": "2"}},
     "env": [{"name": "A", "value": "1"}], "ports": [{"containerPort": 80}]},
    {"name": "side", "image": "img"}]}}
for k in range(JOBS):
    write("mutate_pod", f"job-{k:02}", bytes([(k << 2) | 1 | ((k % 2) << 1)]) + compact(bare))

# topology: every dljob.dev/replicas value seen, and edge cases.
tops = set()
def walk(v):
    if isinstance(v, dict):
        for k, x in v.items():
            if k == "dljob.dev/replicas" and isinstance(x, str):
                tops.add(x)
            walk(x)
    elif isinstance(v, list):
        for x in v:
            walk(x)
for _, _, obj in objects:
    walk(obj)
for _, d in docs:
    walk(d)
tops |= {"worker=1", " chief = 1 , worker=3,ps=2 ", "a=4294967295", "worker=0", "worker", "=1",
         "w=1,w=2", "Worker=1", "w=+1", "w=01"}
for i, t in enumerate(sorted(tops)):
    write("topology", f"t{i:02}", t)

# config: the shipped configs and variants.
for f in [os.path.join(ROOT, "deploy", "base", "config.yaml")] + sorted(
        glob.glob(os.path.join(ROOT, "examples", "*", "config.yaml"))):
    write("config", os.path.relpath(f, ROOT).replace("/", "-"), open(f, "rb").read())
write("config", "ports-domain", "clusterDomain: cluster.local\nports:\n  tensorflow: 2223\n  mpi: 2022\n")
write("config", "empty-map", "{}\n")
write("config", "flow", '{"accelerators": {"amd.com/gpu": {"env": [{"name": "HSA", "value": "1"}]}}}')
write("config", "anchors", "ports: &p\n  jax: 1\naccelerators:\n  x: {volumes: [], env: []}\n")
print({t: len(os.listdir(os.path.join(CORPUS, t))) for t in os.listdir(CORPUS)})
