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
//! rewrite could save on the read before it is undertaken. Volumes are kept
//! as raw JSON (the core compares them whole) with their names read from
//! it. Before anything is measured, it is checked on every captured Pod
//! CREATE review to read the same labels, annotations, containers, env vars
//! (names and values), mounts and volumes as the view.
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
    volumes: Vec<&'a RawValue>,
    #[serde(borrow, default)]
    hostname: Option<Str<'a>>,
    #[serde(borrow, default)]
    subdomain: Option<Str<'a>>,
    #[serde(borrow, default)]
    scheduler_name: Option<Str<'a>>,
    #[serde(borrow, default)]
    scheduling_gates: Option<&'a RawValue>,
    #[serde(borrow, default)]
    scheduling_group: Option<&'a RawValue>,
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

/// A volume's name, read from its raw JSON.
#[derive(Deserialize)]
struct Named<'a> {
    #[serde(borrow)]
    name: Str<'a>,
}

/// The typed read: the review, and each volume's name.
fn read_typed(text: &str) -> (Review<'_>, Vec<Str<'_>>) {
    let review: Review = serde_json::from_str(text).unwrap();
    let volumes = review.request.object.as_ref().map_or_else(Vec::new, |o| {
        o.spec
            .volumes
            .iter()
            .map(|v| serde_json::from_str::<Named>(v.get()).unwrap().name)
            .collect()
    });
    (review, volumes)
}

/// A captured review, compact as the API server sends it.
fn compact(path: &str) -> Vec<u8> {
    let v: Value = serde_json::from_slice(&std::fs::read(path).expect("fixture")).unwrap();
    serde_json::to_vec(&v).unwrap()
}

/// The DDP review.
fn body() -> Vec<u8> {
    compact(REVIEW)
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
    black_box(read_typed(text));
}

/// The typed read sees what the view's tree holds, for what it reads, on
/// `body`; returns how many env vars it compared.
fn check(body: &[u8]) -> usize {
    let text = std::str::from_utf8(body).unwrap();
    let (typed, volumes) = read_typed(text);
    let view = ReviewView::parse(body).unwrap();
    let tree = view.request.unwrap().object.unwrap();
    let object = typed.request.object.unwrap();
    let s = |x: &Str| x.0.to_string();
    let strings = |m: &BTreeMap<Str, Str>| -> Vec<(String, String)> {
        m.iter().map(|(k, v)| (s(k), s(v))).collect()
    };
    let tree_map = |which: &str| -> Vec<(String, String)> {
        tree["metadata"]
            .get(which)
            .and_then(Value::as_object)
            .map_or_else(Vec::new, |m| {
                m.iter()
                    .map(|(k, v)| (k.clone(), v.as_str().unwrap().to_owned()))
                    .collect()
            })
    };
    assert_eq!(strings(&object.metadata.labels), tree_map("labels"));
    assert_eq!(
        strings(&object.metadata.annotations),
        tree_map("annotations")
    );
    let items = |v: &Value, key: &str| -> Vec<Value> {
        v.get(key)
            .and_then(Value::as_array)
            .cloned()
            .unwrap_or_default()
    };
    let name = |v: &Value| v["name"].as_str().unwrap().to_owned();
    let spec = &tree["spec"];
    let volume_names: Vec<String> = volumes.iter().map(s).collect();
    assert_eq!(
        volume_names,
        items(spec, "volumes").iter().map(name).collect::<Vec<_>>()
    );
    let tree_containers = items(spec, "containers");
    assert_eq!(object.spec.containers.len(), tree_containers.len());
    let mut env_compared = 0;
    for (c, t) in object.spec.containers.iter().zip(&tree_containers) {
        assert_eq!(s(&c.name), name(t));
        let mounts: Vec<String> = c.volume_mounts.iter().map(|m| s(&m.name)).collect();
        assert_eq!(
            mounts,
            items(t, "volumeMounts")
                .iter()
                .map(name)
                .collect::<Vec<_>>()
        );
        let env: Vec<(String, Option<String>)> = c
            .env
            .iter()
            .map(|e| (s(&e.name), e.value.as_ref().map(s)))
            .collect();
        let tree_env: Vec<(String, Option<String>)> = items(t, "env")
            .iter()
            .map(|e| (name(e), e["value"].as_str().map(str::to_owned)))
            .collect();
        assert_eq!(env, tree_env);
        env_compared += env.len();
    }
    assert!(!tree_containers.is_empty() && !volume_names.is_empty());
    env_compared
}

/// [`check`] on every captured Pod CREATE review, env vars among them.
fn check_all() {
    let dir = concat!(env!("CARGO_MANIFEST_DIR"), "/tests/fixtures/admission");
    let mut reviews = 0;
    let mut env = 0;
    for entry in std::fs::read_dir(dir).unwrap() {
        let path = entry.unwrap().path();
        let file = path.file_name().unwrap().to_str().unwrap().to_owned();
        if file.starts_with("mutate-create-pod-") {
            env += check(&compact(path.to_str().unwrap()));
            reviews += 1;
        }
    }
    assert!(reviews >= 8 && env > 0, "{reviews} reviews, {env} env vars");
}

fn bench_read(c: &mut Criterion) {
    check_all();
    let b = body();
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
    check_all();
    let b = body();
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
