//! Criterion bench of the webhook's whole review path, body bytes in →
//! response bytes out (`webhook::admission::review` plus the response
//! serialisation the server does), on the captured reviews in
//! `tests/fixtures/admission/`. No HTTP, no TLS: see `benches/load.rs`.
//! Run with `cargo bench --bench review`; figures go in BENCHMARKS.md.
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

criterion_group!(benches, bench_review);

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
