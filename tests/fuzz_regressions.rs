//! Every crash the cargo-fuzz targets (fuzz/) found, minimised, as a plain
//! test. Each test names the target and the artifact it came from; see the
//! `## Fuzzing` section of BENCHMARKS.md for the runs.

use std::time::{Duration, Instant};

use dljob::config::Config;
use dljob::contract::{Topology, TopologyError, MAX_REPLICAS};
use dljob::mutate::{mutate, mutate_patch, Operation};
use dljob::object::Kind;
use dljob::validate::NoPeers;
use dljob::webhook::admission::{review, Answer, Endpoint};
use serde_json::{json, Value};

/// A plain jax worker pod declaring `replicas`.
fn jax_pod(replicas: &str) -> Value {
    json!({
        "apiVersion": "v1", "kind": "Pod",
        "metadata": {
            "name": "p",
            "labels": {"dljob.dev/job": "j", "dljob.dev/role": "worker"},
            "annotations": {
                "dljob.dev/framework": "jax",
                "dljob.dev/replicas": replicas,
                "dljob.dev/index": "0"
            }
        },
        "spec": {"containers": [{"name": "c"}]}
    })
}

/// fuzz target `topology`, artifact crash-d776c5507ec78fa0a827e7b46bfdb4b006d1229f:
/// `Topology::total` summed the counts in a u32 and overflowed (a panic
/// with overflow checks, a wrapped WORLD_SIZE without).
#[test]
fn topology_total_past_u32_is_refused_not_overflowed() {
    let text = " hia=4294967295,ps=2 ";
    assert_eq!(
        Topology::parse(text),
        Err(TopologyError::TooMany {
            total: 4_294_967_297
        })
    );
    let e = Topology::parse(text).unwrap_err().to_string();
    assert!(e.contains("at most 10000"), "{e}");
}

/// The bound is inclusive and counts every role.
#[test]
fn topology_accepts_up_to_max_replicas_in_all() {
    let t = Topology::parse("master=1,worker=9999").unwrap();
    assert_eq!(t.total(), MAX_REPLICAS);
    assert!(matches!(
        Topology::parse("master=1,worker=10000"),
        Err(TopologyError::TooMany { total: 10_001 })
    ));
}

/// fuzz target `mutate_pod`, libFuzzer timeout (> 10 s; 4294967295 runs
/// out of memory): a pod declaring `worker=30000000` made admission build a
/// host list of every replica (then injected as DLJOB_HOSTS_WORKER). It is now refused at
/// once.
#[test]
fn huge_topology_is_refused_quickly() {
    let start = Instant::now();
    for replicas in ["worker=30000000", "worker=4294967295"] {
        let v = mutate_patch(
            Kind::Pod,
            &jax_pod(replicas),
            Some("ns"),
            Operation::Create,
            &Config::default(),
        )
        .expect_err("refused");
        assert!(v.to_string().contains("at most 10000"), "{v}");
    }
    assert!(start.elapsed() < Duration::from_secs(1));
}

/// At the bound the mutation still works and its patch applies.
#[test]
fn max_replicas_pod_is_mutated() {
    let pod = jax_pod("worker=10000");
    let m = mutate(
        Kind::Pod,
        &pod,
        Some("ns"),
        Operation::Create,
        &Config::default(),
    )
    .unwrap()
    .unwrap();
    let env = m.object["spec"]["containers"][0]["env"].as_array().unwrap();
    assert!(env
        .iter()
        .any(|e| e["name"] == "JAX_NUM_PROCESSES" && e["value"] == "10000"));
}

/// The same input through the webhook: a 422 denial, not a hung request.
#[test]
fn huge_topology_review_is_denied() {
    let body = json!({
        "apiVersion": "admission.k8s.io/v1",
        "kind": "AdmissionReview",
        "request": {
            "uid": "u-1",
            "kind": {"group": "", "version": "v1", "kind": "Pod"},
            "namespace": "ns",
            "operation": "CREATE",
            "object": jax_pod("worker=4294967295"),
        }
    })
    .to_string();
    for endpoint in [Endpoint::Mutate, Endpoint::Validate] {
        let Answer::Review { body, .. } =
            review(endpoint, body.as_bytes(), &Config::default(), &NoPeers)
        else {
            panic!("a review")
        };
        let body: serde_json::Value = serde_json::from_slice(&body).unwrap();
        let r = &body["response"];
        assert_eq!(r["uid"], "u-1");
        assert_eq!(r["allowed"], false);
        assert_eq!(r["status"]["code"], 422);
    }
}

/// An inferred topology (single-role StatefulSet without
/// `dljob.dev/replicas`) is bounded too: its size is written into the pod
/// template and every pod would build the same host list.
#[test]
fn huge_inferred_topology_is_refused() {
    let sts = json!({
        "apiVersion": "apps/v1", "kind": "StatefulSet",
        "metadata": {
            "name": "w",
            "labels": {"dljob.dev/job": "j", "dljob.dev/role": "worker"},
            "annotations": {"dljob.dev/framework": "jax"}
        },
        "spec": {
            "replicas": 4_000_000_000u64,
            "template": {"spec": {"containers": [{"name": "c"}]}}
        }
    });
    let v = mutate_patch(
        Kind::StatefulSet,
        &sts,
        Some("ns"),
        Operation::Create,
        &Config::default(),
    )
    .expect_err("refused");
    assert!(
        v.to_string()
            .contains("StatefulSet replicas is 4000000000: a job has at most 10000"),
        "{v}"
    );
}
