//! Criterion benches of the pure core (issue: evidence). Run with
//! `cargo bench --bench core`; figures go in BENCHMARKS.md.

use std::hint::black_box;

use criterion::{criterion_group, criterion_main, Criterion};
use dljob::config::Config;
use dljob::mutate::{mutate_patch, Operation};
use dljob::object::Kind;
use dljob::object::Subject;
use dljob::validate::{peers_of, validate};
use serde_json::{json, Value};

/// A ~9 KB pod as a kube-apiserver sends it (defaults applied, service
/// account volume, a kubectl last-applied annotation, 34 user env vars).
fn base_pod() -> Value {
    serde_json::from_str(include_str!("pod.json")).expect("benches/pod.json parses")
}

fn member(framework: &str, role: &str, replicas: &str, index: u32) -> Value {
    let mut pod = base_pod();
    let meta = &mut pod["metadata"];
    meta["labels"]["dljob.dev/role"] = json!(role);
    meta["annotations"]["dljob.dev/framework"] = json!(framework);
    meta["annotations"]["dljob.dev/replicas"] = json!(replicas);
    meta["annotations"]["dljob.dev/index"] = json!(index.to_string());
    pod["spec"]["containers"][0]["name"] = json!(framework);
    pod
}

const FRAMEWORKS: &[(&str, &str, &str)] = &[
    ("tensorflow", "worker", "chief=1,worker=4,ps=2"),
    ("pytorch", "worker", "master=1,worker=7"),
    ("mxnet", "worker", "scheduler=1,server=2,worker=4"),
    ("mpi", "worker", "launcher=1,worker=8"),
    ("chainer", "worker", "master=1,worker=3"),
    ("jax", "worker", "worker=8"),
    ("xgboost", "worker", "master=1,worker=4"),
    ("paddle", "worker", "master=1,worker=4"),
    ("generic", "trainer", "trainer=4,reader=2"),
];

fn mutate_and_patch(pod: &Value, config: &Config) -> usize {
    let a = mutate_patch(
        Subject::new(Kind::Pod, pod, Some("team-a")),
        Operation::Create,
        config,
    )
    .expect("valid member")
    .expect("a member");
    a.patch.0.len()
}

fn bench_pod_per_framework(c: &mut Criterion) {
    let config = Config::default();
    let mut group = c.benchmark_group("mutate+patch 9KB pod");
    for (framework, role, replicas) in FRAMEWORKS {
        let pod = member(framework, role, replicas, 1);
        assert!(mutate_and_patch(&pod, &config) > 0);
        group.bench_function(*framework, |b| {
            b.iter(|| mutate_and_patch(black_box(&pod), &config))
        });
    }
    group.finish();
}

fn bench_1000_host_mpi(c: &mut Criterion) {
    let config = Config::default();
    let launcher = member("mpi", "launcher", "launcher=1,worker=1000", 0);
    let worker = member("mpi", "worker", "launcher=1,worker=1000", 999);
    let mut group = c.benchmark_group("mpi 1000 hosts");
    group.bench_function("launcher mutate+patch", |b| {
        b.iter(|| mutate_and_patch(black_box(&launcher), &config))
    });
    group.bench_function("worker mutate+patch", |b| {
        b.iter(|| mutate_and_patch(black_box(&worker), &config))
    });
    group.finish();
}

fn bench_validate(c: &mut Criterion) {
    let config = Config::default();
    let members: Vec<Value> = (0..8)
        .map(|i| member("pytorch", "worker", "master=1,worker=8", i))
        .collect();
    let peers = peers_of(
        members.iter().map(|m| (Kind::Pod, m)),
        Some("team-a"),
        &config,
    );
    let mut new = member("pytorch", "worker", "master=1,worker=8", 3);
    new["metadata"]["name"] = json!("resnet-worker-3-new");
    // It claims index 3 like a peer: the full check runs and denies.
    assert!(validate(
        Subject::new(Kind::Pod, &new, Some("team-a")),
        &config,
        &peers
    )
    .is_err());
    let lone = member("pytorch", "worker", "master=1,worker=8", 3);
    c.bench_function("validate pod, no peers", |b| {
        b.iter(|| {
            validate(
                Subject::new(Kind::Pod, black_box(&lone), Some("team-a")),
                &config,
                &[],
            )
        })
    });
    c.bench_function("validate pod against 8 peers", |b| {
        b.iter(|| {
            validate(
                Subject::new(Kind::Pod, black_box(&new), Some("team-a")),
                &config,
                &peers,
            )
        })
    });
}

criterion_group!(
    benches,
    bench_pod_per_framework,
    bench_1000_host_mpi,
    bench_validate
);
criterion_main!(benches);
