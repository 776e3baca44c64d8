//! What reading a review costs, three ways, on the captured DDP worker's
//! mutating review (3 KB, compact as the API server sends it):
//!
//! - `scan`: the body checked as UTF-8 and scanned as JSON, nothing kept —
//!   what `floor.py`'s POST floor pays before any admission work;
//! - `view`: dljob's [`ReviewView`] (the envelope as raw slices, the object
//!   as a pruned `serde_json::Value` tree), built and dropped;
//! - `typed`: a typed, borrowed read of the fields of a Pod that the core
//!   reads (strings borrowed from the body unless escaped, whole sub-objects
//!   the core compares as raw JSON, everything else skipped), built and
//!   dropped.
//!
//! `typed` is a sizing prototype for moving the core off the JSON tree
//! (issue 23's "read side"), not something dljob uses: it tells what that
//! rewrite could save on the read before it is undertaken. It is checked to
//! read the same labels, annotations, containers, env vars and volumes as
//! the view before anything is measured.
//!
//! `cargo bench --bench read` (criterion), or for instruction counts that do
//! not depend on the machine's noise, per mode:
//! `DLJOB_READ_LOOP=200 DLJOB_READ=typed valgrind --tool=callgrind target/release/deps/read-*`
//! (and the same with `DLJOB_READ_LOOP=0`, to subtract the start-up).

// The typed read's fields are there to be read (that is what is measured),
// not used afterwards.
#![allow(dead_code)]

#[global_allocator]
static GLOBAL: mimalloc::MiMalloc = mimalloc::MiMalloc;

use std::borrow::Cow;
use std::collections::BTreeMap;
use std::hint::black_box;

use criterion::{criterion_group, Criterion};
use dljob::webhook::wire::ReviewView;
use serde::Deserialize;
use serde_json::value::RawValue;
use serde_json::Value;

const REVIEW: &str = concat!(
    env!("CARGO_MANIFEST_DIR"),
    "/tests/fixtures/admission/mutate-create-pod-ddp-worker.json"
);

/// A string borrowed from the body, or owned when it had escapes.
#[derive(Debug, PartialEq, Eq, PartialOrd, Ord)]
struct Str<'a>(Cow<'a, str>);

impl<'de: 'a, 'a> Deserialize<'de> for Str<'a> {
    fn deserialize<D: serde::Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        struct V;
        impl<'de> serde::de::Visitor<'de> for V {
            type Value = Str<'de>;
            fn expecting(&self, f: &mut std::fmt::Formatter) -> std::fmt::Result {
                f.write_str("a string")
            }
            fn visit_borrowed_str<E>(self, v: &'de str) -> Result<Str<'de>, E> {
                Ok(Str(Cow::Borrowed(v)))
            }
            fn visit_str<E>(self, v: &str) -> Result<Str<'de>, E> {
                Ok(Str(Cow::Owned(v.to_owned())))
            }
        }
        d.deserialize_str(V)
    }
}

#[derive(Deserialize)]
struct Review<'a> {
    #[serde(borrow)]
    request: Request<'a>,
}

#[derive(Deserialize)]
#[serde(rename_all = "camelCase")]
struct Request<'a> {
    #[serde(borrow)]
    uid: Str<'a>,
    #[serde(borrow)]
    kind: &'a RawValue,
    #[serde(borrow)]
    operation: Str<'a>,
    #[serde(borrow, default)]
    namespace: Option<Str<'a>>,
    #[serde(borrow, default)]
    dry_run: Option<&'a RawValue>,
    #[serde(borrow)]
    object: Option<Object<'a>>,
}

#[derive(Deserialize)]
struct Object<'a> {
    #[serde(borrow)]
    metadata: Meta<'a>,
    #[serde(borrow)]
    spec: PodSpec<'a>,
}

/// What `member` (identity, keys), `gang` and the owner checks read.
#[derive(Deserialize)]
#[serde(rename_all = "camelCase")]
struct Meta<'a> {
    #[serde(borrow, default)]
    name: Option<Str<'a>>,
    #[serde(borrow, default)]
    generate_name: Option<Str<'a>>,
    #[serde(borrow, default)]
    namespace: Option<Str<'a>>,
    #[serde(borrow, default)]
    labels: BTreeMap<Str<'a>, Str<'a>>,
    #[serde(borrow, default)]
    annotations: BTreeMap<Str<'a>, Str<'a>>,
    #[serde(borrow, default)]
    owner_references: Option<&'a RawValue>,
}

/// What `mutate`, `validate` and `member::container` read of a pod spec.
#[derive(Deserialize)]
#[serde(rename_all = "camelCase")]
struct PodSpec<'a> {
    #[serde(borrow, default)]
    containers: Vec<Container<'a>>,
    #[serde(borrow, default)]
    init_containers: Vec<Container<'a>>,
    #[serde(borrow, default)]
    ephemeral_containers: Vec<Container<'a>>,
    #[serde(borrow, default)]
    volumes: Vec<Volume<'a>>,
    #[serde(borrow, default)]
    hostname: Option<Str<'a>>,
    #[serde(borrow, default)]
    subdomain: Option<Str<'a>>,
    #[serde(borrow, default)]
    scheduler_name: Option<Str<'a>>,
    #[serde(borrow, default)]
    scheduling_gates: Option<&'a RawValue>,
    #[serde(borrow, default)]
    resource_claims: Option<&'a RawValue>,
    #[serde(borrow, default)]
    restart_policy: Option<Str<'a>>,
    #[serde(borrow, default)]
    security_context: Option<&'a RawValue>,
}

#[derive(Deserialize)]
#[serde(rename_all = "camelCase")]
struct Container<'a> {
    #[serde(borrow)]
    name: Str<'a>,
    #[serde(borrow, default)]
    env: Vec<EnvVar<'a>>,
    #[serde(borrow, default)]
    ports: Option<&'a RawValue>,
    #[serde(borrow, default)]
    resources: Option<&'a RawValue>,
    #[serde(borrow, default)]
    volume_mounts: Vec<Mount<'a>>,
    #[serde(borrow, default)]
    security_context: Option<&'a RawValue>,
}

#[derive(Deserialize)]
#[serde(rename_all = "camelCase")]
struct EnvVar<'a> {
    #[serde(borrow)]
    name: Str<'a>,
    #[serde(borrow, default)]
    value: Option<Str<'a>>,
    #[serde(borrow, default)]
    value_from: Option<&'a RawValue>,
}

#[derive(Deserialize)]
#[serde(rename_all = "camelCase")]
struct Mount<'a> {
    #[serde(borrow)]
    name: Str<'a>,
    #[serde(borrow, default)]
    mount_path: Option<Str<'a>>,
    #[serde(default)]
    read_only: Option<bool>,
}

/// A volume's name; the rest kept raw for the reserved-name comparison.
#[derive(Deserialize)]
struct Volume<'a> {
    #[serde(borrow)]
    name: Str<'a>,
}

/// The DDP review, compact as the API server sends it.
fn body() -> Vec<u8> {
    let v: Value = serde_json::from_slice(&std::fs::read(REVIEW).expect("fixture")).unwrap();
    serde_json::to_vec(&v).unwrap()
}

fn scan(body: &[u8]) {
    let text = std::str::from_utf8(body).unwrap();
    black_box(serde_json::from_str::<serde::de::IgnoredAny>(text).unwrap());
}

fn view(body: &[u8]) {
    black_box(ReviewView::parse(body).unwrap());
}

fn typed(body: &[u8]) {
    let text = std::str::from_utf8(body).unwrap();
    black_box(serde_json::from_str::<Review>(text).unwrap());
}

/// The typed read sees what the view's tree holds, for what it reads.
fn check(body: &[u8]) {
    let text = std::str::from_utf8(body).unwrap();
    let typed: Review = serde_json::from_str(text).unwrap();
    let view = ReviewView::parse(body).unwrap();
    let tree = view.request.unwrap().object.unwrap();
    let object = typed.request.object.unwrap();
    let strings = |m: &BTreeMap<Str, Str>| -> Vec<(String, String)> {
        m.iter()
            .map(|(k, v)| (k.0.to_string(), v.0.to_string()))
            .collect()
    };
    let tree_map = |which: &str| -> Vec<(String, String)> {
        tree["metadata"][which]
            .as_object()
            .unwrap()
            .iter()
            .map(|(k, v)| (k.clone(), v.as_str().unwrap().to_owned()))
            .collect()
    };
    assert_eq!(strings(&object.metadata.labels), tree_map("labels"));
    assert_eq!(
        strings(&object.metadata.annotations),
        tree_map("annotations")
    );
    let names = |v: &Value| -> Vec<String> {
        v.as_array()
            .unwrap()
            .iter()
            .map(|x| x["name"].as_str().unwrap().to_owned())
            .collect()
    };
    let spec = &tree["spec"];
    let containers: Vec<String> = object
        .spec
        .containers
        .iter()
        .map(|c| c.name.0.to_string())
        .collect();
    assert_eq!(containers, names(&spec["containers"]));
    let volumes: Vec<String> = object
        .spec
        .volumes
        .iter()
        .map(|v| v.name.0.to_string())
        .collect();
    assert_eq!(volumes, names(&spec["volumes"]));
    let mounts: Vec<String> = object.spec.containers[0]
        .volume_mounts
        .iter()
        .map(|m| m.name.0.to_string())
        .collect();
    assert_eq!(mounts, names(&spec["containers"][0]["volumeMounts"]));
    let env: Vec<String> = object.spec.containers[0]
        .env
        .iter()
        .map(|e| e.name.0.to_string())
        .collect();
    let tree_env = spec["containers"][0]
        .get("env")
        .map_or_else(Vec::new, names);
    assert_eq!(env, tree_env);
    assert!(!containers.is_empty() && !volumes.is_empty() && !mounts.is_empty());
}

fn bench_read(c: &mut Criterion) {
    let b = body();
    check(&b);
    let mut group = c.benchmark_group(format!("read the DDP review ({} B)", b.len()));
    group.bench_function("scan", |bn| bn.iter(|| scan(black_box(&b))));
    group.bench_function("view", |bn| bn.iter(|| view(black_box(&b))));
    group.bench_function("typed", |bn| bn.iter(|| typed(black_box(&b))));
    group.finish();
}

criterion_group!(benches, bench_read);

fn main() {
    let Some(n) = std::env::var("DLJOB_READ_LOOP")
        .ok()
        .map(|n| n.parse::<usize>().expect("DLJOB_READ_LOOP is a count"))
    else {
        benches();
        Criterion::default().configure_from_args().final_summary();
        return;
    };
    let b = body();
    check(&b);
    let read: fn(&[u8]) = match std::env::var("DLJOB_READ").as_deref() {
        Ok("scan") => scan,
        Ok("view") => view,
        Ok("typed") => typed,
        other => panic!("DLJOB_READ is scan, view or typed, not {other:?}"),
    };
    for _ in 0..n {
        read(black_box(&b));
    }
}
