//! Criterion bench of the webhook's whole review path, body bytes in →
//! response bytes out (`webhook::admission::review` plus the response
//! serialisation the server does), on the captured reviews in
//! `tests/fixtures/admission/`. No HTTP, no TLS: see `benches/load.rs`.
//! Run with `cargo bench --bench review`; figures go in BENCHMARKS.md.
//!
//! `review at N members/*`: the captured PyTorch worker's reviews as the
//! last member of a job of N pods (`worker=N`, index N-1) whose other N-1
//! members are in the reconciler's index (`MemberIndex`, fed as its pod
//! watch would), N = 10, 100, 1 000: `/validate` reads its peers there,
//! `/mutate` does not (the reference).
//!
//! With `DLJOB_REVIEW_LOOP=N` set it skips criterion and answers every
//! review of the table below N times, for an instruction count that does not
//! depend on the machine's noise:
//! `DLJOB_REVIEW_LOOP=1000 valgrind --tool=callgrind target/release/deps/review-*`
//! (`DLJOB_REVIEW_ONLY=ddp` keeps the reviews whose file name has `ddp`).

#[global_allocator]
static GLOBAL: mimalloc::MiMalloc = mimalloc::MiMalloc;

use std::hint::black_box;

use criterion::{criterion_group, Criterion};
use dljob::config::Config;
use dljob::validate::NoPeers;
use dljob::webhook::admission::{review, Answer, Endpoint};

const FIXTURES: &str = concat!(env!("CARGO_MANIFEST_DIR"), "/tests/fixtures/admission");

/// The fixture, compact as the API server sends it.
fn body(name: &str) -> Vec<u8> {
    let text = std::fs::read(format!("{FIXTURES}/{name}")).expect("fixture");
    let v: serde_json::Value = serde_json::from_slice(&text).unwrap();
    serde_json::to_vec(&v).unwrap()
}

fn bytes_to_bytes(endpoint: Endpoint, body: &[u8], config: &Config) -> Vec<u8> {
    match review(endpoint, body, config, &NoPeers) {
        Answer::Review { body, .. } => body,
        Answer::BadRequest(m) => panic!("{m}"),
    }
}

const REVIEWS: [(Endpoint, &str); 6] = [
    (Endpoint::Mutate, "mutate-create-pod-resnet-chief.json"),
    (Endpoint::Mutate, "mutate-create-pod-resnet-worker-0.json"),
    (Endpoint::Mutate, "mutate-create-pod-ddp-worker.json"),
    (Endpoint::Mutate, "mutate-create-pod-gpt-worker-0.json"),
    (Endpoint::Mutate, "mutate-update-pod-resnet-chief.json"),
    (Endpoint::Validate, "validate-create-pod-resnet-chief.json"),
];

fn bench_review(c: &mut Criterion) {
    let config = Config::default();
    let mut group = c.benchmark_group("review bytes->bytes");
    for (endpoint, name) in REVIEWS {
        let b = body(name);
        assert!(!bytes_to_bytes(endpoint, &b, &config).is_empty());
        group.bench_function(
            format!("{} {name} ({} B)", endpoint.as_str(), b.len()),
            |bn| bn.iter(|| bytes_to_bytes(endpoint, black_box(&b), &config)),
        );
    }
    group.finish();
}

/// The captured review `name`, its pod made member `index` of a job of
/// `size` workers, compact.
fn member_review(name: &str, size: u32, index: u32) -> Vec<u8> {
    let text = std::fs::read(format!("{FIXTURES}/{name}")).expect("fixture");
    let mut v: serde_json::Value = serde_json::from_slice(&text).unwrap();
    let object = &mut v["request"]["object"];
    member_at(object, size, index);
    serde_json::to_vec(&v).unwrap()
}

fn member_at(pod: &mut serde_json::Value, size: u32, index: u32) {
    let meta = &mut pod["metadata"];
    meta["name"] = format!("ddp-worker-{index}").into();
    meta["annotations"]["dljob.dev/replicas"] = format!("worker={size}").into();
    meta["annotations"]["dljob.dev/index"] = index.to_string().into();
}

/// An index holding members 0..size-1 of the job, as the pod watch feeds
/// it.
fn index_of_job(size: u32) -> dljob::reconciler::index::MemberIndex {
    let text = std::fs::read(format!(
        "{FIXTURES}/validate-create-pod-ddp-worker-rkzbv.json"
    ))
    .expect("fixture");
    let review: serde_json::Value = serde_json::from_slice(&text).unwrap();
    let config = Config::default();
    let index = dljob::reconciler::index::MemberIndex::default();
    for i in 0..size - 1 {
        let mut pod = review["request"]["object"].clone();
        member_at(&mut pod, size, i);
        let pod: k8s_openapi::api::core::v1::Pod = serde_json::from_value(pod).unwrap();
        index.apply_event(&kube::runtime::watcher::Event::Apply(pod), &config);
    }
    index
}

fn bench_members(c: &mut Criterion) {
    let config = Config::default();
    let mut group = c.benchmark_group("review at N members");
    for size in [10, 100, 1000] {
        let index = index_of_job(size);
        for (endpoint, name) in [
            (
                Endpoint::Validate,
                "validate-create-pod-ddp-worker-rkzbv.json",
            ),
            (Endpoint::Mutate, "mutate-create-pod-ddp-worker.json"),
        ] {
            let b = member_review(name, size, size - 1);
            match review(endpoint, &b, &config, &index) {
                Answer::Review { summary, .. } => {
                    assert!(summary.allowed, "{summary:?}");
                }
                Answer::BadRequest(m) => panic!("{m}"),
            }
            group.bench_function(format!("{} {size}", endpoint.as_str()), |bn| {
                bn.iter(|| match review(endpoint, black_box(&b), &config, &index) {
                    Answer::Review { body, .. } => body,
                    Answer::BadRequest(m) => panic!("{m}"),
                })
            });
        }
    }
    group.finish();
}

criterion_group!(benches, bench_review, bench_members);

fn main() {
    let Some(n) = std::env::var("DLJOB_REVIEW_LOOP")
        .ok()
        .map(|n| n.parse::<usize>().expect("DLJOB_REVIEW_LOOP is a count"))
    else {
        benches();
        Criterion::default().configure_from_args().final_summary();
        return;
    };
    let config = Config::default();
    // DLJOB_REVIEW_ONLY=ddp: only the reviews whose file name has it.
    let only = std::env::var("DLJOB_REVIEW_ONLY").unwrap_or_default();
    let bodies: Vec<_> = REVIEWS
        .iter()
        .filter(|(_, name)| name.contains(&only))
        .map(|(e, name)| (*e, body(name)))
        .collect();
    let mut bytes = 0;
    for _ in 0..n {
        for (endpoint, b) in &bodies {
            bytes += bytes_to_bytes(*endpoint, black_box(b), &config).len();
        }
    }
    println!(
        "{} reviews answered, {bytes} response bytes",
        n * bodies.len()
    );
}
