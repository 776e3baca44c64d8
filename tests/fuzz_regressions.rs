//! Every crash the cargo-fuzz targets (fuzz/) found, minimised, as a plain
//! test. Each test names the target and the artifact it came from; see the
//! `## Fuzzing` section of BENCHMARKS.md for the runs.

use std::time::{Duration, Instant};

use dljob::config::Config;
use dljob::contract::{Topology, TopologyError, MAX_REPLICAS};
use dljob::mutate::{mutate, mutate_patch, Operation};
use dljob::object::Kind;
use dljob::object::Subject;
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
            Subject::new(Kind::Pod, &jax_pod(replicas), Some("ns")),
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
        Subject::new(Kind::Pod, &pod, Some("ns")),
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
        Subject::new(Kind::StatefulSet, &sts, Some("ns")),
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

/// `admission_review`, artifact `crash-d08bcf5c…` (2026-11-23): the captured
/// DDP review with one byte of `userInfo` replaced by `\xfc`. The webhook's
/// view skips `userInfo` unread, and answered it as a review; the body is
/// not UTF-8, so it is not JSON: 400. A lone surrogate escape (`\ud800`,
/// valid JSON syntax that serde_json will not decode into a tree) in a
/// skipped field is answered as the review it is; in a field the webhook
/// reads, it is refused.
#[test]
fn a_body_that_is_not_utf8_is_refused_even_where_the_webhook_does_not_read() {
    let path = format!(
        "{}/tests/fixtures/admission/mutate-create-pod-ddp-worker.json",
        env!("CARGO_MANIFEST_DIR")
    );
    let review_json: Value = serde_json::from_str(&std::fs::read_to_string(path).unwrap()).unwrap();
    let mut with_group = review_json.clone();
    with_group["request"]["userInfo"]["groups"] = json!(["MARK"]);
    let text = serde_json::to_vec(&with_group).unwrap();
    let at = text.windows(4).position(|w| w == b"MARK").unwrap();
    let mut not_utf8 = text.clone();
    not_utf8[at] = 0xfc;
    let surrogate = String::from_utf8(text.clone())
        .unwrap()
        .replace("MARK", "\\ud800");
    let uid_surrogate =
        serde_json::to_string(&review_json)
            .unwrap()
            .replacen("\"uid\":\"", "\"uid\":\"\\ud800", 1);
    let config = Config::default();
    for endpoint in [Endpoint::Mutate, Endpoint::Validate] {
        match review(endpoint, &not_utf8, &config, &NoPeers) {
            Answer::BadRequest(m) => assert!(m.contains("not UTF-8"), "{m}"),
            Answer::Review { .. } => panic!("a body that is not UTF-8 was answered"),
        }
        assert!(matches!(
            review(endpoint, uid_surrogate.as_bytes(), &config, &NoPeers),
            Answer::BadRequest(_)
        ));
        let Answer::Review { body, summary } =
            review(endpoint, surrogate.as_bytes(), &config, &NoPeers)
        else {
            panic!("a lone surrogate in a skipped field is answered");
        };
        let answered: Value = serde_json::from_slice(&body).unwrap();
        assert_eq!(answered["response"]["uid"], review_json["request"]["uid"]);
        assert!(summary.allowed);
    }
}
