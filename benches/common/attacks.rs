//! Reviews built to cost the webhook the most that its caps allow (body at
//! most 3 MiB, 10 000 replicas, 32 roles, 4 KiB per dljob annotation),
//! shared by `benches/review.rs` (the CPU of each, measured alone) and
//! `benches/load.rs --attack` (sent while ordinary reviews are timed).
//!
//! Each is what any tenant who may create a pod can make the API server
//! send, or what a client that reaches the webhook port can send itself.

use serde_json::{json, Value};

/// The body cap (`--max-body-bytes`, 3 MiB): each review stays under it.
pub(crate) const MAX_BODY: usize = 3 * 1024 * 1024;

/// One crafted review.
pub(crate) struct Crafted {
    pub name: &'static str,
    /// `/mutate` or `/validate`.
    pub path: &'static str,
    /// Compact JSON, as the API server sends it.
    pub body: Vec<u8>,
}

/// The captured TensorFlow worker pod's CREATE review (a StatefulSet's
/// worker 0), the base every crafted review changes.
fn base(fixtures: &str) -> Value {
    let path = format!("{fixtures}/mutate-create-pod-resnet-worker-0.json");
    serde_json::from_slice(&std::fs::read(&path).unwrap_or_else(|e| panic!("{path}: {e}")))
        .expect("a review")
}

fn set_annotations(review: &mut Value, pairs: &[(&str, String)]) {
    let a = &mut review["request"]["object"]["metadata"]["annotations"];
    for (k, v) in pairs {
        a[*k] = json!(v);
    }
}

/// `n` containers of `env` variables each, beside the framework container.
fn containers(review: &mut Value, n: usize, env: usize) {
    let spec = &mut review["request"]["object"]["spec"];
    let first = spec["containers"][0].clone();
    let mut all = vec![first];
    for i in 0..n {
        let vars: Vec<Value> = (0..env)
            .map(|j| json!({"name": format!("V{j}"), "value": "x".repeat(40)}))
            .collect();
        all.push(
            json!({"name": format!("side-{i}"), "image": "busybox", "env": vars,
            "volumeMounts": [{"name": "data", "mountPath": format!("/d{i}")}]}),
        );
    }
    spec["containers"] = json!(all);
    spec["volumes"] = json!([{"name": "data", "emptyDir": {}}]);
}

/// An UPDATE of the same pod with `old` as it was.
fn update_of(mut review: Value) -> Value {
    let object = review["request"]["object"].clone();
    review["request"]["operation"] = json!("UPDATE");
    review["request"]["oldObject"] = object;
    review["request"]["object"]["metadata"]["annotations"]["note"] = json!("changed");
    review
}

/// Grows the review with `filler`-named annotations until it is just under
/// the body cap.
fn fill_to_cap(review: &mut Value) {
    let now = serde_json::to_vec(review).unwrap().len();
    let room = MAX_BODY.saturating_sub(now + 4096);
    let each = 1024;
    let a = &mut review["request"]["object"]["metadata"]["annotations"];
    for i in 0..room / (each + 32) {
        a[format!("example.com/filler-{i}")] = json!("f".repeat(each));
    }
}

/// Every crafted review, each for `/mutate` and for `/validate`.
pub(crate) fn worst_reviews(fixtures: &str) -> Vec<Crafted> {
    let mut out = Vec::new();
    let mut add = |name: &'static str, review: Value| {
        let body = serde_json::to_vec(&review).unwrap();
        assert!(body.len() <= MAX_BODY, "{name}: {} bytes", body.len());
        for path in ["/mutate", "/validate"] {
            out.push(Crafted {
                name,
                path,
                body: body.clone(),
            });
        }
    };

    // An answer as large as an allowed review gets: a TensorFlow worker
    // whose TF_CONFIG lists 2 000 hosts (near the env cap).
    let mut r = base(fixtures);
    set_annotations(
        &mut r,
        &[("dljob.dev/replicas", "chief=1,ps=99,worker=1900".into())],
    );
    add("tensorflow, 2 000 replicas (a large answer)", r);

    // The most hosts a TensorFlow member's TF_CONFIG lists: 10 000.
    let mut r = base(fixtures);
    set_annotations(
        &mut r,
        &[("dljob.dev/replicas", "chief=1,ps=999,worker=9000".into())],
    );
    add("tensorflow, 10 000 replicas", r);

    // A generic job of 32 roles (the cap) and 10 000 replicas: per-role
    // host lists and env.
    let mut r = base(fixtures);
    let roles: Vec<String> = (0..32)
        .map(|i| format!("r{i}={}", if i == 0 { 10_000 - 31 * 312 } else { 312 }))
        .collect();
    r["request"]["object"]["metadata"]["labels"]["dljob.dev/role"] = json!("r0");
    set_annotations(
        &mut r,
        &[
            ("dljob.dev/framework", "generic".into()),
            ("dljob.dev/replicas", roles.join(",")),
        ],
    );
    add("generic, 32 roles, 10 000 replicas", r);

    // The same under `dljob.dev/compat: volcano`, every role's task named
    // otherwise (58 characters, the most): each role's hosts in
    // VC_<TASK>_HOSTS, and twice in the job's ConfigMap of /etc/volcano.
    let mut r = base(fixtures);
    let tasks: Vec<String> = (0..32).map(|i| format!("r{i}={:0>58}", i)).collect();
    r["request"]["object"]["metadata"]["labels"]["dljob.dev/role"] = json!("r0");
    set_annotations(
        &mut r,
        &[
            ("dljob.dev/framework", "generic".into()),
            ("dljob.dev/replicas", roles.join(",")),
            ("dljob.dev/compat", format!("volcano:{}", tasks.join(","))),
        ],
    );
    add("generic, 32 roles, 10 000 replicas, volcano compat", r);

    // The largest such job admitted, with the longest job name: every
    // host in the pod's env (about 0.5 MiB), just under what the job's
    // ConfigMap of /etc/volcano holds (each list twice, 1 MiB).
    let mut r = base(fixtures);
    let small: Vec<String> = (0..32).map(|i| format!("r{i}=183")).collect();
    let labels = &mut r["request"]["object"]["metadata"]["labels"];
    labels["dljob.dev/role"] = json!("r0");
    labels["dljob.dev/job"] = json!(format!("r{}", "x".repeat(39)));
    set_annotations(
        &mut r,
        &[
            ("dljob.dev/framework", "generic".into()),
            ("dljob.dev/replicas", small.join(",")),
            ("dljob.dev/compat", "volcano".into()),
        ],
    );
    add(
        "generic, 32 roles, 5 856 replicas, volcano compat (allowed)",
        r,
    );

    // An MXNet worker under `dljob.dev/compat: kubeflow`: MX_CONFIG lists
    // every host of 10 000.
    let mut r = base(fixtures);
    set_annotations(
        &mut r,
        &[
            ("dljob.dev/framework", "mxnet".into()),
            (
                "dljob.dev/replicas",
                "scheduler=1,server=999,worker=9000".into(),
            ),
            ("dljob.dev/compat", "kubeflow".into()),
        ],
    );
    add("mxnet, 10 000 replicas, kubeflow compat (MX_CONFIG)", r);

    // An MPI launcher of 9 999 workers: the hostfile.
    let mut r = base(fixtures);
    r["request"]["object"]["metadata"]["labels"]["dljob.dev/role"] = json!("launcher");
    set_annotations(
        &mut r,
        &[
            ("dljob.dev/framework", "mpi".into()),
            ("dljob.dev/replicas", "launcher=1,worker=9999".into()),
        ],
    );
    add("mpi launcher, 9 999 workers", r.clone());

    // The same with as many slot ranges as the 4 KiB annotation cap holds
    // (one per worker from 5 000 on): each host's count is looked up.
    let mut slots = String::from("1");
    for i in 5_000.. {
        let next = format!(",{i}={}", i % 8 + 1);
        if slots.len() + next.len() > 4096 {
            break;
        }
        slots.push_str(&next);
    }
    set_annotations(&mut r, &[("dljob.dev/slots", slots)]);
    add("mpi launcher, 9 999 workers, 4 KiB of slot ranges", r);

    // A 3 MiB pod: 1 500 containers, each with env and a mount.
    let mut r = base(fixtures);
    containers(&mut r, 1500, 24);
    add("3 MiB pod, 1 500 containers", r);

    // 3 MiB of annotations, and every dljob annotation at its 4 KiB cap.
    let mut r = base(fixtures);
    set_annotations(
        &mut r,
        &[
            ("dljob.dev/container", "c".repeat(4096)),
            ("dljob.dev/queue", "q".repeat(4096)),
            ("dljob.dev/topology", "t".repeat(4096)),
            ("dljob.dev/slots", "1".repeat(4096)),
        ],
    );
    fill_to_cap(&mut r);
    add("3 MiB of annotations", r);

    // A small body (under 256 KiB, computed on the async workers) of
    // 10 000 unknown dljob.dev/ keys: each was a warning, found by a look
    // through the ones before it.
    let mut r = base(fixtures);
    let keys: Vec<(String, String)> = (0..10_000)
        .map(|i| (format!("dljob.dev/k{i:05}"), String::new()))
        .collect();
    let pairs: Vec<(&str, String)> = keys.iter().map(|(k, v)| (k.as_str(), v.clone())).collect();
    set_annotations(&mut r, &pairs);
    add("10 000 unknown dljob.dev/ keys", r);

    // An UPDATE carries two objects: two 1.4 MiB pods.
    let mut r = base(fixtures);
    containers(&mut r, 700, 24);
    add("UPDATE of two 1.4 MiB pods", update_of(r));

    out
}
