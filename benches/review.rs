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
//!
//! `worst review within caps/*`: the reviews of `benches/common/attacks.rs`,
//! built to cost the most that the webhook's caps allow. With
//! `DLJOB_REVIEW_WORST=N` set it skips criterion, answers each of them N
//! times and prints the thread CPU time of each (median, max) with the
//! answer: `cargo bench --bench review` with `DLJOB_REVIEW_WORST=20`;
//! `DLJOB_REVIEW_ONLY=mpi` keeps those whose name has `mpi` (for callgrind).

#[global_allocator]
static GLOBAL: mimalloc::MiMalloc = mimalloc::MiMalloc;

use std::hint::black_box;

use criterion::{criterion_group, Criterion};
use dljob::config::Config;
use dljob::validate::NoPeers;
use dljob::webhook::admission::{review, Answer, Endpoint};

#[path = "common/attacks.rs"]
mod attacks;

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

fn endpoint_of(path: &str) -> Endpoint {
    match path {
        "/mutate" => Endpoint::Mutate,
        _ => Endpoint::Validate,
    }
}

fn bench_worst(c: &mut Criterion) {
    let config = Config::default();
    let mut group = c.benchmark_group("worst review within caps");
    group.sample_size(10);
    for r in attacks::worst_reviews(FIXTURES) {
        let endpoint = endpoint_of(r.path);
        group.bench_function(format!("{} {}", r.path, r.name), |bn| {
            bn.iter(|| bytes_to_bytes(endpoint, black_box(&r.body), &config))
        });
    }
    group.finish();
}

/// This thread's CPU time.
#[allow(unsafe_code, reason = "clock_gettime is a C function")]
fn thread_cpu() -> std::time::Duration {
    let mut t = libc::timespec {
        tv_sec: 0,
        tv_nsec: 0,
    };
    // SAFETY: clock_gettime writes one timespec, which `t` is.
    let rc = unsafe { libc::clock_gettime(libc::CLOCK_THREAD_CPUTIME_ID, &mut t) };
    assert_eq!(rc, 0, "clock_gettime");
    std::time::Duration::new(t.tv_sec as u64, t.tv_nsec as u32)
}

/// `DLJOB_REVIEW_WORST=N`: each crafted review answered N times, its CPU.
fn worst_table(n: usize, only: &str) {
    let config = Config::default();
    println!("| review | endpoint | body | CPU median | CPU max | answer |");
    println!("|---|---|---|---|---|---|");
    for r in attacks::worst_reviews(FIXTURES) {
        if !r.name.contains(only) {
            continue;
        }
        let endpoint = endpoint_of(r.path);
        let mut times = Vec::with_capacity(n);
        let mut answer = String::new();
        for _ in 0..n.max(1) {
            let start = thread_cpu();
            let out = review(endpoint, black_box(&r.body), &config, &NoPeers);
            times.push(thread_cpu() - start);
            answer = match out {
                Answer::Review { summary, body } => {
                    let v: serde_json::Value = serde_json::from_slice(&body).unwrap();
                    let message = v["response"]["status"]["message"].as_str().unwrap_or("");
                    let cut: String = message.chars().take(70).collect();
                    format!(
                        "{} {} B{}",
                        if summary.allowed { "allowed" } else { "denied" },
                        body.len(),
                        if cut.is_empty() {
                            String::new()
                        } else {
                            format!(": {cut}…")
                        }
                    )
                }
                Answer::BadRequest(m) => format!("400: {m}"),
            };
        }
        times.sort();
        let ms = |d: std::time::Duration| format!("{:.1} ms", d.as_secs_f64() * 1000.0);
        println!(
            "| {} | {} | {:.2} MiB | {} | {} | {} |",
            r.name,
            r.path,
            r.body.len() as f64 / 1048576.0,
            ms(times[times.len() / 2]),
            ms(*times.last().unwrap()),
            answer.replace('|', "\\|")
        );
    }
}

criterion_group!(benches, bench_review, bench_members, bench_worst);

fn main() {
    if let Some(n) = std::env::var("DLJOB_REVIEW_WORST")
        .ok()
        .map(|n| n.parse::<usize>().expect("DLJOB_REVIEW_WORST is a count"))
    {
        worst_table(n, &std::env::var("DLJOB_REVIEW_ONLY").unwrap_or_default());
        return;
    }
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
