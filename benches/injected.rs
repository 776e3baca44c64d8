//! Bytes dljob injects into one pod of a 1000-member job, per framework
//! (issue: framework fidelity). Run with `cargo bench --bench injected`;
//! prints a Markdown table for BENCHMARKS.md. Not a timing: the sizes are
//! exact and the same on every machine.
//!
//! Each member is a plain pod of job `resnet50-imagenet-hparam-sweep-trial7`
//! in namespace `ml-research-team-a` (long names: hosts of 95 bytes), with
//! the highest index of its role. "env" counts `NAME=value` of every var
//! dljob adds to the framework container; "annotations" the keys and values
//! it adds to the pod (the hostfile).

use dljob::config::Config;
use dljob::mutate::{mutate, Operation};
use dljob::object::Kind;
use dljob::object::Subject;
use serde_json::{json, Value};

const JOB: &str = "resnet50-imagenet-hparam-sweep-trial7";
const NS: &str = "ml-research-team-a";

/// The pods measured in a job: (role, index).
type Pods = &'static [(&'static str, u32)];

/// (framework, topology of 1000 members, the pods to measure).
const JOBS: &[(&str, &str, Pods)] = &[
    (
        "tensorflow",
        "chief=1,worker=995,ps=4",
        &[("worker", 994), ("ps", 3)],
    ),
    (
        "pytorch",
        "master=1,worker=999",
        &[("master", 0), ("worker", 998)],
    ),
    (
        "pytorch (elastic)",
        "worker=1000",
        &[("worker", 0), ("worker", 999)],
    ),
    (
        "mxnet",
        "scheduler=1,server=99,worker=900",
        &[("server", 98), ("worker", 899)],
    ),
    (
        "mpi",
        "launcher=1,worker=999",
        &[("launcher", 0), ("worker", 998)],
    ),
    (
        "chainer",
        "master=1,worker=999",
        &[("master", 0), ("worker", 998)],
    ),
    ("jax", "worker=1000", &[("worker", 999)]),
    (
        "xgboost",
        "master=1,worker=999",
        &[("master", 0), ("worker", 998)],
    ),
    (
        "paddle",
        "master=1,worker=999",
        &[("master", 0), ("worker", 998)],
    ),
    ("generic", "head=1,worker=999", &[("worker", 998)]),
];

fn pod(framework: &str, topology: &str, role: &str, index: u32) -> Value {
    let (name, elastic) = match framework.split_once(' ') {
        Some((name, _)) => (name, true),
        None => (framework, false),
    };
    let mut annotations = json!({
        "dljob.dev/framework": name,
        "dljob.dev/replicas": topology,
        "dljob.dev/index": index.to_string(),
    });
    if elastic {
        annotations["dljob.dev/elastic"] = json!("2:1000");
    }
    json!({
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {
            "name": format!("{JOB}-{role}-{index}"),
            "namespace": NS,
            "labels": {"dljob.dev/job": JOB, "dljob.dev/role": role},
            "annotations": annotations,
        },
        "spec": {"containers": [{"name": name, "image": "img"}]}
    })
}

fn main() {
    println!("| framework | job (1000 members) | pod | env bytes | largest var | annotation bytes | total |");
    println!("|---|---|---|---|---|---|---|");
    for (framework, topology, pods) in JOBS {
        for (role, index) in *pods {
            let original = pod(framework, topology, role, *index);
            let m = mutate(
                Subject::new(Kind::Pod, &original, Some(NS)),
                Operation::Create,
                &Config::default(),
            )
            .unwrap_or_else(|v| panic!("{framework} {role}-{index}: {v}"))
            .expect("a member");
            let env = m.object["spec"]["containers"][0]["env"]
                .as_array()
                .cloned()
                .unwrap_or_default();
            let sizes: Vec<(String, usize)> = env
                .iter()
                .map(|e| {
                    let name = e["name"].as_str().unwrap_or("").to_owned();
                    let value = e["value"]
                        .as_str()
                        .map_or_else(|| e["valueFrom"].to_string(), str::to_owned);
                    let len = name.len() + 1 + value.len();
                    (name, len)
                })
                .collect();
            let env_bytes: usize = sizes.iter().map(|(_, n)| n).sum();
            let largest = sizes
                .iter()
                .max_by_key(|(_, n)| *n)
                .cloned()
                .unwrap_or_default();
            let annotation_bytes: usize = m.object["metadata"]["annotations"]
                .as_object()
                .map(|a| {
                    a.iter()
                        .filter(|(k, _)| {
                            original["metadata"]["annotations"]
                                .get(k.as_str())
                                .is_none()
                        })
                        .map(|(k, v)| k.len() + v.as_str().map_or(0, str::len))
                        .sum()
                })
                .unwrap_or(0);
            println!(
                "| {framework} | {topology} | {role}-{index} | {env_bytes} | {} ({}) | {annotation_bytes} | {} |",
                largest.0,
                largest.1,
                env_bytes + annotation_bytes
            );
        }
    }
}
