//! AdmissionReview `admission.k8s.io/v1` ⇄ the core. Pure: the body bytes,
//! the config and the known peers in, an answer out — no I/O, no clock.
//!
//! The body is read through [`wire::ReviewView`] (a borrowed view that
//! leaves out what the core never reads) and the answer is serialised once,
//! straight to the bytes sent ([`wire::response_body`]). kube-core's
//! `AdmissionResponse` is not used: it serialises `patch` as a JSON array
//! of numbers, and the v1 schema (and the API server) wants base64.

use serde::Deserialize;
use serde_json::value::RawValue;
use serde_json::Value;

use super::wire::API_VERSION;
use super::wire::{self, RequestView, ReviewView};
use crate::config::Config;
use crate::mutate::{self, Operation};
use crate::object::Subject;
use crate::object::{self, Kind};
use crate::validate::{self, PeerSource};
use crate::violation::Violations;

/// Which webhook a review was sent to.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum Endpoint {
    Mutate,
    Validate,
}

impl Endpoint {
    pub fn as_str(self) -> &'static str {
        match self {
            Self::Mutate => "mutate",
            Self::Validate => "validate",
        }
    }
}

/// What to send back for one POSTed body.
#[derive(Debug, Clone, PartialEq)]
pub enum Answer {
    /// An AdmissionReview response (HTTP 200), allowed or denied: the
    /// bytes to send.
    Review {
        body: Vec<u8>,
        summary: Box<Summary>,
    },
    /// Not a review that can be answered (no uid to answer to): HTTP 400
    /// with this explanation.
    BadRequest(String),
}

/// What one review was and what was decided: the log line and the metrics.
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct Summary {
    pub uid: String,
    /// `request.kind.kind`, or empty when the request could not be read.
    pub kind: String,
    pub namespace: String,
    /// `request.name`, else the object's name, else its `generateName`.
    pub name: String,
    /// CREATE, UPDATE, DELETE, CONNECT (as sent).
    pub operation: String,
    pub dry_run: bool,
    pub allowed: bool,
    pub patch_ops: usize,
    pub warnings: usize,
    /// The denial's `status.message`.
    pub message: Option<String>,
    /// The rule a denial enforced (`violation::Rule::reason`), or `BadRequest`
    /// for a review that could not be read as one.
    pub rule: Option<&'static str>,
}

/// The small parts of `request` dljob reads, typed. Read from the raw
/// fields of [`RequestView`] after the uid, so that a malformed one is
/// answered to that uid.
#[derive(Debug)]
struct Request {
    kind: GroupVersionKind,
    sub_resource: Option<String>,
    name: Option<String>,
    namespace: Option<String>,
    operation: String,
    dry_run: Option<bool>,
}

impl Request {
    fn read(r: &RequestView) -> Result<Self, String> {
        fn opt<'a, T: Deserialize<'a>>(
            raw: Option<&'a RawValue>,
            what: &str,
        ) -> Result<Option<T>, String> {
            raw.map(|r| wire::field(r, what)).transpose()
        }
        Ok(Self {
            kind: opt(r.kind, "kind")?.ok_or("missing field `kind`")?,
            sub_resource: opt(r.sub_resource, "subResource")?,
            name: opt(r.name, "name")?,
            namespace: opt(r.namespace, "namespace")?,
            operation: opt(r.operation, "operation")?.ok_or("missing field `operation`")?,
            dry_run: opt(r.dry_run, "dryRun")?,
        })
    }
}

#[derive(Debug, Deserialize)]
struct GroupVersionKind {
    #[serde(default)]
    group: String,
    version: String,
    kind: String,
}

/// A denial: HTTP-style code, Kubernetes `StatusReason`, and a message that
/// names the fix.
struct Denial {
    code: u16,
    reason: &'static str,
    message: String,
    /// The first broken rule's stable reason.
    rule: &'static str,
}

impl Denial {
    fn bad_request(message: String) -> Self {
        Self {
            code: 400,
            reason: "BadRequest",
            message,
            rule: "BadRequest",
        }
    }

    /// The object breaks the contract (ARCHITECTURE.md §4): 422 Invalid, as the API
    /// server answers for its own validation errors.
    fn invalid(kind: &str, name: &str, v: Violations) -> Self {
        let what = if name.is_empty() {
            kind.to_owned()
        } else {
            format!("{kind} \"{name}\"")
        };
        Self {
            code: 422,
            reason: "Invalid",
            rule: v.0.first().map_or("Invalid", |first| first.rule.reason()),
            message: format!("dljob refused {what}: {v}"),
        }
    }
}

/// The decision for a review that could be read.
#[derive(Default)]
struct Decision {
    patch: Option<mutate::Patch>,
    warnings: Vec<String>,
    denial: Option<Denial>,
}

impl Decision {
    fn allow() -> Self {
        Self::default()
    }
    fn deny(d: Denial) -> Self {
        Self {
            denial: Some(d),
            ..Self::default()
        }
    }
}

/// Longest `request.uid` answered (it is echoed): the API server's is a
/// UUID of 36 characters.
pub const MAX_UID: usize = 128;
/// Longest denial message sent (and logged): a refusal quotes the user's
/// values, which a client sending reviews itself can make megabytes long.
pub const MAX_MESSAGE: usize = 4096;
/// Most warnings sent, and the longest each may be; the API server itself
/// keeps at most 4 KiB of a webhook's warnings.
pub const MAX_WARNINGS: usize = 16;
pub const MAX_WARNING: usize = 1024;

/// Answers one POSTed body for `endpoint`.
pub fn review(endpoint: Endpoint, body: &[u8], config: &Config, peers: &dyn PeerSource) -> Answer {
    if body.iter().all(u8::is_ascii_whitespace) {
        return Answer::BadRequest(
            "empty body: POST an AdmissionReview (apiVersion admission.k8s.io/v1) as JSON".into(),
        );
    }
    let review = match ReviewView::parse(body) {
        Ok(v) => v,
        Err(e) if e.is_data() => {
            return Answer::BadRequest(format!(
                "the AdmissionReview has no request object ({e}): POST what the API server sends"
            ))
        }
        Err(e) => {
            return Answer::BadRequest(format!(
                "body is not JSON ({e}): POST an AdmissionReview (apiVersion admission.k8s.io/v1)"
            ))
        }
    };
    let Some(request) = &review.request else {
        return Answer::BadRequest(
            "the AdmissionReview has no request object: POST what the API server sends".into(),
        );
    };
    let uid = match wire::string(request.uid) {
        Some(uid) if uid.len() > MAX_UID => {
            return Answer::BadRequest(format!(
                "request.uid is {} bytes: the API server sends a UUID (36), and dljob echoes at most {MAX_UID}",
                uid.len()
            ))
        }
        Some(uid) if !uid.is_empty() => uid,
        _ => {
            return Answer::BadRequest(
                "request.uid is missing: an AdmissionReview response must echo it".into(),
            )
        }
    };
    let mut summary = Summary {
        uid: uid.clone().into_owned(),
        ..Summary::default()
    };
    let mut decision = decide(endpoint, &review, request, config, peers, &mut summary);
    bound(&mut decision, &mut summary);
    Answer::Review {
        body: response(&uid, &decision),
        summary: Box::new(Summary {
            allowed: decision.denial.is_none(),
            patch_ops: decision.patch.as_ref().map_or(0, |p| p.0.len()),
            warnings: decision.warnings.len(),
            rule: decision.denial.as_ref().map(|d| d.rule),
            message: decision.denial.map(|d| d.message),
            ..summary
        }),
    }
}

/// What a review says back, bounded: the denial message, the warnings,
/// and the names and kinds the log line and the metrics quote.
fn bound(decision: &mut Decision, summary: &mut Summary) {
    if let Some(d) = &mut decision.denial {
        d.message = crate::contract::cut(&d.message, MAX_MESSAGE).into_owned();
    }
    decision.warnings.truncate(MAX_WARNINGS);
    for w in &mut decision.warnings {
        *w = crate::contract::cut(w, MAX_WARNING).into_owned();
    }
    for field in [
        &mut summary.kind,
        &mut summary.operation,
        &mut summary.name,
        &mut summary.namespace,
    ] {
        if field.len() > MAX_NAME {
            *field = crate::contract::quoted(field).into_owned();
        }
    }
}

/// Longest name a log line quotes whole (Kubernetes' longest, a DNS
/// subdomain).
const MAX_NAME: usize = 253;

fn decide(
    endpoint: Endpoint,
    review: &ReviewView,
    request: &RequestView,
    config: &Config,
    peers: &dyn PeerSource,
    summary: &mut Summary,
) -> Decision {
    let api_version = wire::string(review.api_version);
    let kind = wire::string(review.kind);
    if api_version.as_deref() != Some(API_VERSION) || kind.as_deref() != Some("AdmissionReview") {
        return Decision::deny(Denial::bad_request(format!(
            "dljob reads AdmissionReview {API_VERSION}, got {} {}: set admissionReviewVersions: [\"v1\"] in the webhook configuration",
            kind.as_deref().unwrap_or("(no kind)"),
            api_version.as_deref().unwrap_or("(no apiVersion)"),
        )));
    }
    let req = match Request::read(request) {
        Ok(r) => r,
        Err(e) => {
            return Decision::deny(Denial::bad_request(format!(
                "malformed AdmissionReview request: {e}"
            )))
        }
    };
    summary.kind = req.kind.kind.clone();
    summary.operation = req.operation.clone();
    summary.dry_run = req.dry_run.unwrap_or(false);
    let req_object = request.object.as_ref();
    let req_old_object = request.old_object.as_ref();
    let main = req_object.or(req_old_object);
    summary.namespace = req
        .namespace
        .clone()
        .filter(|n| !n.is_empty())
        .or_else(|| {
            main.and_then(|o| object::str_at(o, &["metadata", "namespace"]))
                .map(str::to_owned)
        })
        .unwrap_or_default();
    summary.name = req
        .name
        .clone()
        .filter(|n| !n.is_empty())
        .or_else(|| {
            let meta = |k: &str| main.and_then(|o| object::str_at(o, &["metadata", k]));
            meta("name")
                .filter(|n| !n.is_empty())
                .or_else(|| meta("generateName"))
                .map(str::to_owned)
        })
        .unwrap_or_default();

    let operation = match req.operation.as_str() {
        "CREATE" => Operation::Create,
        "UPDATE" => Operation::Update,
        "DELETE" | "CONNECT" => return Decision::allow(),
        other => {
            return Decision::deny(Denial::bad_request(format!(
                "unknown operation \"{other}\": expected CREATE, UPDATE, DELETE or CONNECT"
            )))
        }
    };
    match req.sub_resource.as_deref() {
        None | Some("") => {}
        // `kubectl debug` adds a container to a member pod: judged as the
        // pod's UPDATE (no debug container may mount dljob's volumes).
        Some("ephemeralcontainers") if endpoint == Endpoint::Validate => {}
        Some(_) => return Decision::allow(), // status, scale…: not members
    }
    let Some(kind) = Kind::from_gvk(&req.kind.group, &req.kind.version, &req.kind.kind) else {
        return Decision::allow(); // a kind dljob does not handle
    };
    let object = match req_object {
        Some(o @ Value::Object(_)) => o,
        Some(_) => {
            return Decision::deny(Denial::bad_request(format!(
                "request.object of this {} review is not a JSON object",
                req.operation
            )))
        }
        None => {
            return Decision::deny(Denial::bad_request(format!(
                "request.object is missing from this {} review: the API server always sends it",
                req.operation
            )))
        }
    };
    let namespace = Some(summary.namespace.as_str()).filter(|n| !n.is_empty());
    match endpoint {
        Endpoint::Mutate => {
            let old = req_old_object.filter(|o| o.is_object());
            match mutate::mutate_patch(
                Subject::new(kind, object, namespace).with_old(old),
                operation,
                config,
            ) {
                Ok(None) => Decision::allow(),
                Ok(Some(a)) => Decision {
                    patch: Some(a.patch).filter(|p| !p.0.is_empty()),
                    warnings: a.warnings,
                    denial: None,
                },
                Err(v) => Decision::deny(Denial::invalid(kind.as_str(), &summary.name, v)),
            }
        }
        Endpoint::Validate => {
            let old = match (operation, req_old_object) {
                (Operation::Update, Some(o @ Value::Object(_))) => Some(o),
                _ => None,
            };
            match validate::validate(
                Subject::new(kind, object, namespace).with_old(old),
                config,
                peers,
            ) {
                Ok(warnings) => Decision {
                    warnings,
                    ..Decision::allow()
                },
                Err(v) => Decision::deny(Denial::invalid(kind.as_str(), &summary.name, v)),
            }
        }
    }
}

/// The AdmissionReview response body, as sent.
fn response(uid: &str, d: &Decision) -> Vec<u8> {
    wire::response_body(&wire::Response {
        uid,
        allowed: d.denial.is_none(),
        status: d.denial.as_ref().map(|denial| wire::Status {
            status: "Failure",
            code: denial.code,
            reason: denial.reason,
            message: &denial.message,
        }),
        patch_type: d.patch.as_ref().map(|_| "JSONPatch"),
        patch: d.patch.as_ref().map(|patch| {
            let mut bytes = Vec::with_capacity(2048);
            serde_json::to_writer(&mut bytes, patch).expect("a JSON Patch serialises");
            wire::base64_string(&bytes)
        }),
        warnings: &d.warnings,
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::validate::NoPeers;
    use base64::Engine as _;
    use serde_json::json;

    fn answer(endpoint: Endpoint, body: &str) -> Answer {
        review(endpoint, body.as_bytes(), &Config::default(), &NoPeers)
    }

    fn reviewed(endpoint: Endpoint, body: Value) -> (Value, Summary) {
        match answer(endpoint, &body.to_string()) {
            Answer::Review { body, summary } => {
                let body: Value = serde_json::from_slice(&body).expect("the answer is JSON");
                (body["response"].clone(), *summary)
            }
            Answer::BadRequest(m) => panic!("bad request: {m}"),
        }
    }

    fn pod_review(op: &str, object: Value) -> Value {
        json!({
            "apiVersion": "admission.k8s.io/v1",
            "kind": "AdmissionReview",
            "request": {
                "uid": "u-1",
                "kind": {"group": "", "version": "v1", "kind": "Pod"},
                "resource": {"group": "", "version": "v1", "resource": "pods"},
                "namespace": "ns",
                "operation": op,
                "object": object,
            }
        })
    }

    fn jax_pod(index: &str) -> Value {
        json!({
            "apiVersion": "v1", "kind": "Pod",
            "metadata": {
                "name": format!("w-{index}"),
                "labels": {"dljob.dev/job": "j", "dljob.dev/role": "worker"},
                "annotations": {"dljob.dev/framework": "jax", "dljob.dev/replicas": "worker=2", "dljob.dev/index": index}
            },
            "spec": {"containers": [{"name": "jax", "image": "jax"}]}
        })
    }

    /// What a client sending reviews itself controls is bounded in what
    /// dljob says back and logs: the uid it echoes, the denial message
    /// that quotes the object, the names and kinds of the log line.
    #[test]
    fn what_a_review_makes_dljob_say_is_bounded() {
        // A uid longer than any API server's is not echoed.
        let mut r = pod_review("CREATE", jax_pod("0"));
        r["request"]["uid"] = json!("u".repeat(MAX_UID + 1));
        match answer(Endpoint::Mutate, &r.to_string()) {
            Answer::BadRequest(m) => assert_eq!(
                m,
                "request.uid is 129 bytes: the API server sends a UUID (36), and dljob echoes at most 128"
            ),
            other => panic!("{other:?}"),
        }
        // A 100 KB framework name is refused in a message of at most 4 KiB.
        let mut pod = jax_pod("0");
        pod["metadata"]["annotations"]["dljob.dev/framework"] = json!("x".repeat(100_000));
        pod["metadata"]["name"] = json!("n".repeat(10_000));
        let (response, summary) = reviewed(Endpoint::Mutate, pod_review("CREATE", pod));
        assert_eq!(response["allowed"], false);
        let message = response["status"]["message"].as_str().unwrap();
        assert!(
            message.len() <= MAX_MESSAGE && message.ends_with('…'),
            "{}",
            message.len()
        );
        assert_eq!(summary.message.as_deref(), Some(message));
        assert!(
            summary.name.len() < 200 && summary.name.ends_with("(10000 bytes)"),
            "{}",
            summary.name
        );
        // A kind and an operation of a megabyte are cut in the summary.
        let mut r = pod_review("X".repeat(1_000_000).as_str(), jax_pod("0"));
        r["request"]["kind"]["kind"] = json!("K".repeat(1_000_000));
        let (response, summary) = reviewed(Endpoint::Mutate, r);
        assert_eq!(
            response["allowed"], false,
            "an unknown operation is refused"
        );
        assert!(response["status"]["message"].as_str().unwrap().len() <= MAX_MESSAGE);
        assert!(summary.kind.len() < 200 && summary.operation.len() < 200);
    }

    #[test]
    fn bodies_that_are_not_reviews_are_bad_requests() {
        for body in [
            "",
            "  \n",
            "{",
            "[]",
            "{}",
            r#"{"request": {}}"#,
            r#"{"request": {"uid": ""}}"#,
        ] {
            assert!(
                matches!(answer(Endpoint::Mutate, body), Answer::BadRequest(_)),
                "{body:?}"
            );
        }
    }

    #[test]
    fn wrong_api_version_with_uid_is_a_denial_naming_the_fix() {
        let mut r = pod_review("CREATE", jax_pod("0"));
        r["apiVersion"] = json!("admission.k8s.io/v1beta1");
        let (resp, s) = reviewed(Endpoint::Mutate, r);
        assert_eq!(resp["uid"], "u-1");
        assert_eq!(resp["allowed"], false);
        assert_eq!(resp["status"]["code"], 400);
        assert_eq!(resp["status"]["reason"], "BadRequest");
        assert!(resp["status"]["message"]
            .as_str()
            .unwrap()
            .contains("admissionReviewVersions"));
        assert!(!s.allowed);
    }

    #[test]
    fn create_member_gets_a_base64_string_patch() {
        let (resp, s) = reviewed(Endpoint::Mutate, pod_review("CREATE", jax_pod("1")));
        assert_eq!(resp["allowed"], true);
        assert_eq!(resp["patchType"], "JSONPatch");
        let b64 = resp["patch"].as_str().expect("patch is a string");
        let bytes = base64::engine::general_purpose::STANDARD
            .decode(b64)
            .unwrap();
        let patch: json_patch::Patch = serde_json::from_slice(&bytes).unwrap();
        assert_eq!(patch.0.len(), s.patch_ops);
        assert!(s.patch_ops > 0);
        assert_eq!((s.kind.as_str(), s.name.as_str()), ("Pod", "w-1"));
    }

    #[test]
    fn non_member_gets_no_patch_field() {
        let pod = json!({"apiVersion": "v1", "kind": "Pod", "metadata": {"name": "p"}, "spec": {"containers": []}});
        let (resp, s) = reviewed(Endpoint::Mutate, pod_review("CREATE", pod));
        assert_eq!(resp, json!({"uid": "u-1", "allowed": true}));
        assert_eq!(s.patch_ops, 0);
    }

    #[test]
    fn violations_deny_with_422_invalid() {
        let mut pod = jax_pod("0");
        pod["metadata"]["annotations"]["dljob.dev/framework"] = json!("caffe");
        for endpoint in [Endpoint::Mutate, Endpoint::Validate] {
            let (resp, _) = reviewed(endpoint, pod_review("CREATE", pod.clone()));
            assert_eq!(resp["allowed"], false);
            assert_eq!(resp["status"]["code"], 422);
            assert_eq!(resp["status"]["reason"], "Invalid");
            let msg = resp["status"]["message"].as_str().unwrap();
            assert!(msg.starts_with("dljob refused Pod \"w-0\": "), "{msg}");
            assert!(
                msg.contains("tensorflow"),
                "lists the valid frameworks: {msg}"
            );
            assert!(resp.get("patch").is_none());
        }
    }

    #[test]
    fn delete_connect_unknown_kinds_and_subresources_are_allowed_untouched() {
        let mut del = pod_review("DELETE", Value::Null);
        del["request"]
            .as_object_mut()
            .unwrap()
            .insert("oldObject".into(), jax_pod("0"));
        let mut cm = pod_review("CREATE", json!({"kind": "ConfigMap"}));
        cm["request"]["kind"] = json!({"group": "", "version": "v1", "kind": "ConfigMap"});
        let mut status = pod_review("UPDATE", jax_pod("0"));
        status["request"]["subResource"] = json!("status");
        for r in [del, pod_review("CONNECT", Value::Null), cm, status] {
            for endpoint in [Endpoint::Mutate, Endpoint::Validate] {
                let (resp, _) = reviewed(endpoint, r.clone());
                assert_eq!(resp, json!({"uid": "u-1", "allowed": true}), "{r}");
            }
        }
    }

    #[test]
    fn create_without_object_is_a_bad_request_denial() {
        let mut r = pod_review("CREATE", Value::Null);
        r["request"].as_object_mut().unwrap().remove("object");
        let (resp, _) = reviewed(Endpoint::Mutate, r);
        assert_eq!(resp["allowed"], false);
        assert_eq!(resp["status"]["code"], 400);
    }

    #[test]
    fn update_changing_role_is_denied_by_validate() {
        let old = jax_pod("0");
        let mut new = old.clone();
        new["metadata"]["labels"]["dljob.dev/role"] = json!("chief");
        let mut r = pod_review("UPDATE", new);
        r["request"]
            .as_object_mut()
            .unwrap()
            .insert("oldObject".into(), old);
        let (resp, _) = reviewed(Endpoint::Validate, r);
        assert_eq!(resp["allowed"], false);
        let msg = resp["status"]["message"].as_str().unwrap();
        assert!(msg.contains("dljob.dev/role cannot change"), "{msg}");
    }
}
