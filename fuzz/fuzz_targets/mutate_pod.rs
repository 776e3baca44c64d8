//! Arbitrary JSON → the whole pod mutation path (`mutate::mutate_patch`, as
//! the mutating webhook calls it on CREATE).
//!
//! Input: one selector byte, then JSON. A JSON object is made a Pod
//! (`apiVersion: v1`, `kind: Pod`); when the selector's low bit is set it is
//! also made a member of a valid job from [`JOBS`] (labels and annotations
//! forced), so that the fuzzer reaches the framework code instead of
//! stopping at the first violation. Properties, for every accepted pod:
//! the patch applies to the pod it was made from, and mutating the patched
//! pod again yields an empty patch (ARCHITECTURE.md §2, idempotent).
#![no_main]

use std::sync::OnceLock;

use dljob::config::Config;
use dljob::mutate::{mutate_patch, Operation};
use dljob::object::{Kind, Subject};
use libfuzzer_sys::fuzz_target;
use serde_json::{Map, Value};

/// framework, role, topology, index (None: left out, the role has 1 replica),
/// extra annotations.
type Job = (
    &'static str,
    &'static str,
    &'static str,
    Option<&'static str>,
    &'static [(&'static str, &'static str)],
);

const JOBS: &[Job] = &[
    ("tensorflow", "chief", "chief=1,worker=2,ps=1", None, &[]),
    (
        "tensorflow",
        "worker",
        "chief=1,worker=2,ps=1",
        Some("1"),
        &[],
    ),
    ("tensorflow", "ps", "chief=1,worker=2,ps=1", None, &[]),
    (
        "tensorflow",
        "evaluator",
        "chief=1,worker=2,evaluator=1",
        None,
        &[],
    ),
    ("tensorflow", "worker", "worker=1", None, &[]),
    ("pytorch", "master", "master=1,worker=3", None, &[]),
    ("pytorch", "worker", "master=1,worker=3", Some("2"), &[]),
    (
        "pytorch",
        "worker",
        "worker=4",
        Some("0"),
        &[("dljob.dev/elastic", "2:4")],
    ),
    (
        "mxnet",
        "scheduler",
        "scheduler=1,server=2,worker=2",
        None,
        &[],
    ),
    (
        "mxnet",
        "server",
        "scheduler=1,server=2,worker=2",
        Some("1"),
        &[],
    ),
    (
        "mxnet",
        "worker",
        "scheduler=1,server=2,worker=2",
        Some("0"),
        &[],
    ),
    ("mpi", "launcher", "launcher=1,worker=2", None, &[]),
    (
        "mpi",
        "worker",
        "launcher=1,worker=2",
        Some("1"),
        &[("dljob.dev/slots", "2")],
    ),
    ("chainer", "master", "master=1,worker=2", None, &[]),
    (
        "chainer",
        "worker",
        "master=1,worker=2",
        Some("0"),
        &[("dljob.dev/ssh-path", "/home/u/.ssh")],
    ),
    ("jax", "worker", "worker=2", Some("1"), &[]),
    ("xgboost", "master", "master=1,worker=2", None, &[]),
    (
        "xgboost",
        "worker",
        "master=1,worker=2",
        Some("1"),
        &[("dljob.dev/port", "9000")],
    ),
    ("paddle", "master", "master=1,worker=2", None, &[]),
    ("paddle", "worker", "master=1,worker=2", Some("0"), &[]),
    ("generic", "head", "head=1,worker=3", None, &[]),
    (
        "generic",
        "worker",
        "head=1,worker=3",
        Some("2"),
        &[("dljob.dev/container", "main")],
    ),
];

const GPU_CONFIG: &str = "
clusterDomain: cluster.local
ports:
  jax: 7777
accelerators:
  nvidia.com/gpu:
    volumes:
    - name: nvidia-libraries
      hostPath: /home/kubernetes/bin/nvidia/lib64
      mountPath: /usr/local/nvidia/lib64
    env:
    - name: LD_LIBRARY_PATH
      value: /usr/local/nvidia/lib64
";

fn configs() -> &'static [Config; 2] {
    static C: OnceLock<[Config; 2]> = OnceLock::new();
    C.get_or_init(|| {
        [
            Config::default(),
            Config::from_yaml(GPU_CONFIG).expect("the fuzz config is valid"),
        ]
    })
}

/// `map[key]` as an object, replacing whatever else is there.
fn object_entry<'m>(map: &'m mut Map<String, Value>, key: &str) -> &'m mut Map<String, Value> {
    let v = map
        .entry(key.to_owned())
        .or_insert_with(|| Value::Object(Map::new()));
    if !v.is_object() {
        *v = Value::Object(Map::new());
    }
    v.as_object_mut().expect("just made an object")
}

fn make_member(pod: &mut Map<String, Value>, job: &Job) {
    let (framework, role, replicas, index, extra) = *job;
    let meta = object_entry(pod, "metadata");
    let labels = object_entry(meta, "labels");
    labels.insert("dljob.dev/job".into(), "fz".into());
    labels.insert("dljob.dev/role".into(), role.into());
    let annotations = object_entry(meta, "annotations");
    annotations.insert("dljob.dev/framework".into(), framework.into());
    annotations.insert("dljob.dev/replicas".into(), replicas.into());
    match index {
        Some(i) => annotations.insert("dljob.dev/index".into(), i.into()),
        None => annotations.remove("dljob.dev/index"),
    };
    for (k, v) in extra {
        annotations.insert((*k).into(), (*v).into());
    }
}

fuzz_target!(|data: &[u8]| {
    let Some((&selector, json)) = data.split_first() else {
        return;
    };
    let Ok(mut pod) = serde_json::from_slice::<Value>(json) else {
        return;
    };
    let config = &configs()[usize::from(selector >> 1 & 1)];
    if let Value::Object(map) = &mut pod {
        map.insert("apiVersion".into(), "v1".into());
        map.insert("kind".into(), "Pod".into());
        if selector & 1 == 1 {
            make_member(map, &JOBS[usize::from(selector >> 2) % JOBS.len()]);
        }
    }
    let namespace = Some("fuzz");
    let Ok(Some(admission)) = mutate_patch(
        Subject::new(Kind::Pod, &pod, namespace),
        Operation::Create,
        config,
    ) else {
        return;
    };
    let mut patched = pod.clone();
    if let Err(e) = json_patch::patch(&mut patched, &admission.patch.to_json_patch()) {
        panic!(
            "dljob's patch does not apply: {e}\npod: {pod}\npatch: {}",
            serde_json::to_string(&admission.patch).unwrap_or_default()
        );
    }
    match mutate_patch(
        Subject::new(Kind::Pod, &patched, namespace),
        Operation::Create,
        config,
    ) {
        Ok(Some(again)) => assert!(
            again.patch.0.is_empty(),
            "mutating the mutated pod patches again: {}\nmutated: {patched}",
            serde_json::to_string(&again.patch).unwrap_or_default()
        ),
        Ok(None) => panic!("the mutated pod is no longer a member: {patched}"),
        Err(v) => panic!("the mutated pod is refused: {v}\nmutated: {patched}"),
    }
});
