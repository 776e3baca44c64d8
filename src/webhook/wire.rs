//! The AdmissionReview as it crosses the wire: a borrowed view of what
//! arrives and the response bytes that go back.
//!
//! A review body is mostly `request.object` (and `oldObject` on UPDATE), and
//! a third of a typical Pod's object is `metadata.managedFields`, which
//! nothing in dljob reads. The view reads the envelope's fields as raw JSON
//! slices of the body (no copy; each is parsed only when used), skips what
//! the core never reads (`userInfo`, `resource`, `options`, …) without
//! building anything, and builds the object's JSON tree without what no
//! part of admission reads (`managedFields`, the status, a pod's
//! tolerations and scheduling settings, a container's probes: see
//! [`SKIPPED_SPEC`] and its neighbours). A JSON Patch made on that tree
//! applies to the object as sent: no operation can touch a field the tree
//! does not have.

use std::fmt;

/// The only AdmissionReview version dljob speaks.
pub const API_VERSION: &str = "admission.k8s.io/v1";

use serde::de::{self, DeserializeSeed, IgnoredAny, MapAccess, SeqAccess, Visitor};
use serde::{Deserialize, Deserializer, Serialize};
use serde_json::value::RawValue;
use serde_json::{Map, Value};

/// The top level of a POSTed body. Every field is raw, so that a
/// malformed one is reported with the uid it is answered to. Like a JSON
/// tree, it takes the last of repeated fields and accepts only objects.
#[derive(Debug, Default)]
pub struct ReviewView<'a> {
    pub api_version: Option<&'a RawValue>,
    pub kind: Option<&'a RawValue>,
    pub request: Option<RequestView<'a>>,
}

/// `request`: the small fields raw, the objects as trees without
/// `metadata.managedFields` (`null` is absent, as for `Option<Value>`).
#[derive(Debug, Default)]
pub struct RequestView<'a> {
    pub uid: Option<&'a RawValue>,
    pub kind: Option<&'a RawValue>,
    pub sub_resource: Option<&'a RawValue>,
    pub name: Option<&'a RawValue>,
    pub namespace: Option<&'a RawValue>,
    pub operation: Option<&'a RawValue>,
    pub dry_run: Option<&'a RawValue>,
    pub object: Option<Value>,
    pub old_object: Option<Value>,
}

impl<'a> ReviewView<'a> {
    /// Reads a body. An error is a body that is not JSON (UTF-8 included:
    /// the fields the view skips are not decoded, so the whole body is
    /// checked here, once), or whose top level or `request` is not an
    /// object.
    pub fn parse(body: &'a [u8]) -> Result<Self, ParseError> {
        let text = std::str::from_utf8(body).map_err(ParseError::NotUtf8)?;
        serde_json::from_str(text).map_err(ParseError::Json)
    }
}

/// Why a body is not a review.
#[derive(Debug, thiserror::Error)]
pub enum ParseError {
    #[error("not UTF-8 ({0})")]
    NotUtf8(std::str::Utf8Error),
    #[error("{0}")]
    Json(serde_json::Error),
}

impl ParseError {
    /// JSON, but not shaped as a review (a top level or `request` that is
    /// not an object).
    pub(crate) fn is_data(&self) -> bool {
        matches!(self, Self::Json(e) if e.is_data())
    }
}

/// The field names the views read; the others are skipped unread.
#[derive(Deserialize)]
#[serde(field_identifier, rename_all = "camelCase")]
enum Field {
    ApiVersion,
    Kind,
    Request,
    Uid,
    SubResource,
    Name,
    Namespace,
    Operation,
    DryRun,
    Object,
    OldObject,
    #[serde(other)]
    Other,
}

impl<'de> Deserialize<'de> for ReviewView<'de> {
    fn deserialize<D: Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        struct V;
        impl<'de> Visitor<'de> for V {
            type Value = ReviewView<'de>;
            fn expecting(&self, f: &mut fmt::Formatter) -> fmt::Result {
                f.write_str("an AdmissionReview object")
            }
            fn visit_map<A: MapAccess<'de>>(self, mut map: A) -> Result<Self::Value, A::Error> {
                let mut r = ReviewView::default();
                while let Some(field) = map.next_key()? {
                    match field {
                        Field::ApiVersion => r.api_version = map.next_value()?,
                        Field::Kind => r.kind = map.next_value()?,
                        Field::Request => r.request = map.next_value()?,
                        _ => {
                            map.next_value::<IgnoredAny>()?;
                        }
                    }
                }
                Ok(r)
            }
        }
        d.deserialize_map(V)
    }
}

impl<'de> Deserialize<'de> for RequestView<'de> {
    fn deserialize<D: Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        struct V;
        impl<'de> Visitor<'de> for V {
            type Value = RequestView<'de>;
            fn expecting(&self, f: &mut fmt::Formatter) -> fmt::Result {
                f.write_str("an AdmissionReview request object")
            }
            fn visit_map<A: MapAccess<'de>>(self, mut map: A) -> Result<Self::Value, A::Error> {
                let mut r = RequestView::default();
                let tree = || Pruned {
                    depth: Depth::Object,
                };
                while let Some(field) = map.next_key()? {
                    match field {
                        Field::Uid => r.uid = map.next_value()?,
                        Field::Kind => r.kind = map.next_value()?,
                        Field::SubResource => r.sub_resource = map.next_value()?,
                        Field::Name => r.name = map.next_value()?,
                        Field::Namespace => r.namespace = map.next_value()?,
                        Field::Operation => r.operation = map.next_value()?,
                        Field::DryRun => r.dry_run = map.next_value()?,
                        Field::Object => r.object = present(map.next_value_seed(tree())?),
                        Field::OldObject => {
                            r.old_object = present(map.next_value_seed(tree())?);
                        }
                        _ => {
                            map.next_value::<IgnoredAny>()?;
                        }
                    }
                }
                Ok(r)
            }
        }
        d.deserialize_map(V)
    }
}

/// `null` is absent.
fn present(v: Value) -> Option<Value> {
    Some(v).filter(|v| !v.is_null())
}

/// Where in the object the value being read sits.
#[derive(Clone, Copy)]
enum Depth {
    /// The object itself: its `status` is skipped, its `metadata` and
    /// `spec` pruned.
    Object,
    /// The object's `metadata`.
    Metadata,
    /// The object's `spec` (a Pod's pod spec, a workload's own spec).
    Spec,
    /// A list of containers of the object's `spec`.
    Containers,
    /// One of those containers.
    Container,
    /// Anywhere else: kept whole.
    Whole,
}

/// What no part of dljob's admission reads, skipped unread where it sits
/// (`tests::skipped_fields_are_read_nowhere` holds the core's sources to
/// it): the server's bookkeeping, a pod's scheduling (but its affinity,
/// which may say it runs on Windows), identity and lifecycle settings (but
/// its DNS and host network, which Volcano's host names depend on), a container's probes and terminal settings (but its image
/// pull policy, which dljob's init container copies), and the status.
/// Most of what the API server's defaulting adds to a Pod is here. A patch
/// made on the rest applies to the object as sent: no operation dljob
/// makes names a skipped field.
const SKIPPED_METADATA: &[&str] = &[
    "managedFields",
    "creationTimestamp",
    "resourceVersion",
    "generation",
];
const SKIPPED_SPEC: &[&str] = &[
    "tolerations",
    "terminationGracePeriodSeconds",
    "priority",
    "priorityClassName",
    "preemptionPolicy",
    "serviceAccount",
    "serviceAccountName",
    "topologySpreadConstraints",
    "imagePullSecrets",
    "hostAliases",
    "readinessGates",
    "runtimeClassName",
    "overhead",
    "hostPID",
    "hostIPC",
    "shareProcessNamespace",
    "setHostnameAsFQDN",
];
const SKIPPED_CONTAINER: &[&str] = &[
    "terminationMessagePath",
    "terminationMessagePolicy",
    "livenessProbe",
    "startupProbe",
    "lifecycle",
    "stdin",
    "stdinOnce",
    "tty",
    "workingDir",
    "resizePolicy",
];
const CONTAINER_LISTS: &[&str] = &["containers", "initContainers", "ephemeralContainers"];

impl Depth {
    /// Whether `key` of an object at this depth is skipped.
    fn skips(self, key: &str) -> bool {
        match self {
            Depth::Object => key == "status",
            Depth::Metadata => SKIPPED_METADATA.contains(&key),
            Depth::Spec => SKIPPED_SPEC.contains(&key),
            Depth::Container => SKIPPED_CONTAINER.contains(&key),
            Depth::Containers | Depth::Whole => false,
        }
    }

    /// The depth of the value of `key` of an object at this depth.
    fn child(self, key: &str) -> Depth {
        match (self, key) {
            (Depth::Object, "metadata") => Depth::Metadata,
            (Depth::Object, "spec") => Depth::Spec,
            (Depth::Spec, k) if CONTAINER_LISTS.contains(&k) => Depth::Containers,
            _ => Depth::Whole,
        }
    }
}

/// A `serde_json::Value`, built as `Value`'s own `Deserialize` does, less
/// what admission never reads ([`Depth::skips`]).
struct Pruned {
    depth: Depth,
}

impl<'de> DeserializeSeed<'de> for Pruned {
    type Value = Value;

    fn deserialize<D: Deserializer<'de>>(self, d: D) -> Result<Value, D::Error> {
        d.deserialize_any(self)
    }
}

impl<'de> Visitor<'de> for Pruned {
    type Value = Value;

    fn expecting(&self, f: &mut fmt::Formatter) -> fmt::Result {
        f.write_str("any JSON value")
    }

    fn visit_map<A: MapAccess<'de>>(self, mut map: A) -> Result<Value, A::Error> {
        let mut out = Map::new();
        while let Some(key) = map.next_key::<String>()? {
            if self.depth.skips(&key) {
                map.next_value::<IgnoredAny>()?;
                continue;
            }
            let value = match self.depth.child(&key) {
                Depth::Whole => map.next_value()?,
                depth => map.next_value_seed(Pruned { depth })?,
            };
            out.insert(key, value);
        }
        Ok(Value::Object(out))
    }

    fn visit_seq<A: SeqAccess<'de>>(self, mut seq: A) -> Result<Value, A::Error> {
        let mut out = Vec::with_capacity(seq.size_hint().unwrap_or(0));
        match self.depth {
            Depth::Containers => {
                while let Some(v) = seq.next_element_seed(Pruned {
                    depth: Depth::Container,
                })? {
                    out.push(v);
                }
            }
            _ => {
                while let Some(v) = seq.next_element()? {
                    out.push(v);
                }
            }
        }
        Ok(Value::Array(out))
    }

    fn visit_bool<E: de::Error>(self, v: bool) -> Result<Value, E> {
        Ok(Value::Bool(v))
    }

    fn visit_i64<E: de::Error>(self, v: i64) -> Result<Value, E> {
        Ok(Value::from(v))
    }

    fn visit_u64<E: de::Error>(self, v: u64) -> Result<Value, E> {
        Ok(Value::from(v))
    }

    fn visit_f64<E: de::Error>(self, v: f64) -> Result<Value, E> {
        Ok(Value::from(v))
    }

    fn visit_str<E: de::Error>(self, v: &str) -> Result<Value, E> {
        Ok(Value::String(v.to_owned()))
    }

    fn visit_string<E: de::Error>(self, v: String) -> Result<Value, E> {
        Ok(Value::String(v))
    }

    fn visit_unit<E: de::Error>(self) -> Result<Value, E> {
        Ok(Value::Null)
    }

    fn visit_none<E: de::Error>(self) -> Result<Value, E> {
        Ok(Value::Null)
    }

    fn visit_some<D: Deserializer<'de>>(self, d: D) -> Result<Value, D::Error> {
        self.deserialize(d)
    }
}

/// A raw field as `T`, or why not (`what` names it in the message).
pub(crate) fn field<'a, T: Deserialize<'a>>(raw: &'a RawValue, what: &str) -> Result<T, String> {
    serde_json::from_str(raw.get()).map_err(|e| format!("{what}: {e}"))
}

/// A raw field as a string, when it is one.
pub fn string<'a>(raw: Option<&'a RawValue>) -> Option<std::borrow::Cow<'a, str>> {
    raw.and_then(|r| serde_json::from_str(r.get()).ok())
}

/// The `response` of an AdmissionReview, serialised as the v1 schema has
/// it: no `status` when allowed, no `patch`/`patchType` without
/// operations, no `warnings` without warnings.
#[derive(Serialize)]
#[serde(rename_all = "camelCase")]
pub(crate) struct Response<'a> {
    pub uid: &'a str,
    pub allowed: bool,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub status: Option<Status<'a>>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub patch_type: Option<&'static str>,
    /// The JSON Patch, base64 (the API server wants a string, not bytes):
    /// see [`base64_string`].
    #[serde(skip_serializing_if = "Option::is_none")]
    pub patch: Option<Box<RawValue>>,
    #[serde(skip_serializing_if = "<[String]>::is_empty")]
    pub warnings: &'a [String],
}

#[derive(Serialize)]
pub(crate) struct Status<'a> {
    pub status: &'static str,
    pub code: u16,
    pub reason: &'static str,
    pub message: &'a str,
}

#[derive(Serialize)]
#[serde(rename_all = "camelCase")]
struct Review<'a> {
    api_version: &'static str,
    kind: &'static str,
    response: &'a Response<'a>,
}

/// The whole response body.
pub(crate) fn response_body(response: &Response) -> Vec<u8> {
    let patch = response.patch.as_ref().map_or(0, |p| p.get().len());
    let mut out = Vec::with_capacity(256 + patch);
    serde_json::to_writer(
        &mut out,
        &Review {
            api_version: API_VERSION,
            kind: "AdmissionReview",
            response,
        },
    )
    .expect("a response of strings, numbers and booleans serialises");
    out
}

/// `bytes` as a base64 JSON string, ready to be written as it is: the
/// base64 alphabet needs no JSON escaping, so the string is not scanned
/// for escapes again when the response is serialised.
///
/// Encoded with base64's SIMD engine where the CPU has one (AVX2, NEON),
/// chosen once: the same padded standard alphabet in about a quarter of
/// the scalar engine's instructions on a captured review's patch.
pub(crate) fn base64_string(bytes: &[u8]) -> Box<RawValue> {
    use base64::engine::{general_purpose::PAD, Simd};
    use base64::Engine as _;
    static ENGINE: std::sync::LazyLock<Simd> = std::sync::LazyLock::new(|| Simd::standard(PAD));
    let mut s = String::with_capacity(bytes.len().div_ceil(3) * 4 + 2);
    s.push('"');
    ENGINE.encode_string(bytes, &mut s);
    s.push('"');
    RawValue::from_string(s).expect("a base64 string is a JSON string")
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn tree(object: &Value) -> Option<Value> {
        let body = json!({"request": {"object": object}}).to_string();
        ReviewView::parse(body.as_bytes())
            .unwrap()
            .request
            .unwrap()
            .object
    }

    #[test]
    fn the_object_tree_is_the_object_without_its_managed_fields_and_status() {
        let pod = json!({
            "apiVersion": "v1",
            "kind": "Pod",
            "metadata": {
                "name": "p",
                "managedFields": [{"manager": "kubectl", "fieldsV1": {"f:metadata": {}}}],
                "labels": {"managedFields": "kept: not metadata's own"},
            },
            "spec": {"managedFields": [1], "containers": [{"name": "c", "args": [1, -2, 2.5, true, null, "x\"y"]}]},
            "status": {},
        });
        let mut expected = pod.clone();
        expected["metadata"]
            .as_object_mut()
            .unwrap()
            .remove("managedFields");
        expected.as_object_mut().unwrap().remove("status");
        assert_eq!(tree(&pod), Some(expected));
    }

    #[test]
    fn what_admission_never_reads_is_skipped_where_it_sits() {
        let pod = json!({
            "metadata": {"name": "p", "resourceVersion": "7", "labels": {"status": "kept"}},
            "spec": {
                "tolerations": [{"key": "k"}], "priorityClassName": "high", "hostname": "h",
                "containers": [{"name": "c", "stdin": true, "env": [{"name": "tty", "value": "x"}]}],
                "initContainers": [{"name": "i", "terminationMessagePath": "/dev/t"}],
                "volumes": [{"name": "v", "projected": {"sources": [{"serviceAccountToken": {"path": "t"}}]}}],
            },
            "status": {"phase": "Pending"},
        });
        assert_eq!(
            tree(&pod),
            Some(json!({
                "metadata": {"name": "p", "labels": {"status": "kept"}},
                "spec": {
                    "hostname": "h",
                    "containers": [{"name": "c", "env": [{"name": "tty", "value": "x"}]}],
                    "initContainers": [{"name": "i"}],
                    "volumes": [{"name": "v", "projected": {"sources": [{"serviceAccountToken": {"path": "t"}}]}}],
                },
            }))
        );
        // A workload's template is kept whole.
        let set = json!({"spec": {"replicas": 2, "template": {"spec": {"tolerations": [], "containers": [{"name": "c", "tty": true}]}}}});
        assert_eq!(tree(&set), Some(set.clone()));
    }

    /// The fields skipped are named nowhere in the code that reads an
    /// admitted object (outside its tests): not read, and not written by a
    /// patch that would then be made against a tree that lacks them.
    #[test]
    fn skipped_fields_are_read_nowhere() {
        let root = concat!(env!("CARGO_MANIFEST_DIR"), "/src");
        let mut files = Vec::new();
        for dir in ["member", "gang", "frameworks"] {
            for e in std::fs::read_dir(format!("{root}/{dir}")).unwrap() {
                files.push(e.unwrap().path());
            }
        }
        for f in [
            "mutate.rs",
            "validate.rs",
            "tensorboard.rs",
            "edits.rs",
            "object.rs",
            "contract.rs",
            "config.rs",
            "crd.rs",
            "webhook/admission.rs",
        ] {
            files.push(format!("{root}/{f}").into());
        }
        let skipped = SKIPPED_METADATA
            .iter()
            .chain(SKIPPED_SPEC)
            .chain(SKIPPED_CONTAINER);
        // As a JSON key or pointer, or as a typed struct's field
        // (`.termination_message_path`).
        let snake = |field: &str| {
            field.chars().fold(String::new(), |mut out, c| {
                if c.is_ascii_uppercase() {
                    out.push('_');
                }
                out.push(c.to_ascii_lowercase());
                out
            })
        };
        let mut named = Vec::new();
        for file in &files {
            let text = std::fs::read_to_string(file).unwrap();
            let code = text.split("#[cfg(test)]").next().unwrap();
            for field in skipped.clone() {
                let typed = format!(".{}", snake(field));
                let typed_use = code.match_indices(&typed).any(|(at, _)| {
                    !code[at + typed.len()..].starts_with(|c: char| c.is_alphanumeric() || c == '_')
                });
                if code.contains(&format!("\"{field}\""))
                    || code.contains(&format!("/{field}"))
                    || typed_use
                {
                    named.push(format!("{} names {field}", file.display()));
                }
            }
            if code.contains("\"status\"") || code.contains("/status") {
                named.push(format!("{} names status", file.display()));
            }
        }
        assert!(files.len() > 20, "{files:?}");
        assert_eq!(named, Vec::<String>::new());
    }

    #[test]
    fn objects_that_are_not_maps_are_kept_as_sent_and_null_is_absent() {
        for v in [
            json!([1, {"metadata": {"managedFields": 1}}]),
            json!("s"),
            json!(7),
            json!({"metadata": 3}),
        ] {
            assert_eq!(tree(&v), Some(v.clone()));
        }
        assert_eq!(tree(&Value::Null), None);
    }

    #[test]
    fn envelope_fields_are_raw_slices_of_the_body() {
        let body = br#"{"kind":"AdmissionReview","request":{"uid":"u","kind":{"kind":"Pod"},"userInfo":{"groups":["a"]},"dryRun":false}}"#;
        let view = ReviewView::parse(body).unwrap();
        assert_eq!(view.kind.unwrap().get(), r#""AdmissionReview""#);
        assert!(view.api_version.is_none());
        let request = view.request.unwrap();
        assert_eq!(string(request.uid).as_deref(), Some("u"));
        assert_eq!(request.kind.unwrap().get(), r#"{"kind":"Pod"}"#);
        assert_eq!(request.dry_run.unwrap().get(), "false");
        assert!(request.object.is_none() && request.old_object.is_none());
    }

    #[test]
    fn only_objects_are_read_and_a_repeated_field_counts_last_as_in_a_tree() {
        for body in [
            &br#"["admission.k8s.io/v1", "AdmissionReview", {"uid": "u"}]"#[..],
            br#"{"request": ["u"]}"#,
            br#"{"request": "u"}"#,
        ] {
            let e = ReviewView::parse(body).expect_err("not a review");
            assert!(e.is_data(), "{e}");
        }
        let view = ReviewView::parse(
            br#"{"request": {"uid": "a", "uid": "b", "object": {"x": 1}, "object": null}}"#,
        )
        .unwrap();
        let request = view.request.unwrap();
        assert_eq!(string(request.uid).as_deref(), Some("b"));
        assert_eq!(request.object, None);
        let trailing = ReviewView::parse(br#"{"request": {"uid": "u"}} x"#).unwrap_err();
        assert!(
            matches!(&trailing, ParseError::Json(e) if e.is_syntax()),
            "{trailing}"
        );
        // Invalid UTF-8 is refused wherever it is, in a field the view
        // skips too.
        for body in [
            &b"{\"request\": {\"uid\": \"\xff\"}}"[..],
            b"{\"request\": {\"uid\": \"u\", \"userInfo\": {\"groups\": [\"\xfc\"]}}}",
        ] {
            let e = ReviewView::parse(body).unwrap_err();
            assert!(matches!(e, ParseError::NotUtf8(_)), "{e}");
            assert!(!e.is_data());
        }
    }

    #[test]
    fn base64_strings_are_padded_standard_base64() {
        use base64::Engine as _;
        for len in (0..100).chain([1000, 4099]) {
            let bytes: Vec<u8> = (0..len).map(|i| (i * 37 % 256) as u8).collect();
            let expected = base64::engine::general_purpose::STANDARD.encode(&bytes);
            assert_eq!(
                base64_string(&bytes).get(),
                format!("\"{expected}\""),
                "{len} bytes"
            );
        }
    }

    #[test]
    fn response_bytes_follow_the_v1_schema() {
        let warnings = vec!["w".to_owned()];
        let allowed = Response {
            uid: "u",
            allowed: true,
            status: None,
            patch_type: Some("JSONPatch"),
            patch: Some(base64_string(b"[]")),
            warnings: &warnings,
        };
        assert_eq!(
            serde_json::from_slice::<Value>(&response_body(&allowed)).unwrap(),
            json!({"apiVersion": "admission.k8s.io/v1", "kind": "AdmissionReview",
                   "response": {"uid": "u", "allowed": true, "patchType": "JSONPatch", "patch": "W10=", "warnings": ["w"]}})
        );
        let denied = Response {
            uid: "u",
            allowed: false,
            status: Some(Status {
                status: "Failure",
                code: 422,
                reason: "Invalid",
                message: "m",
            }),
            patch_type: None,
            patch: None,
            warnings: &[],
        };
        assert_eq!(
            serde_json::from_slice::<Value>(&response_body(&denied)).unwrap()["response"],
            json!({"uid": "u", "allowed": false, "status": {"status": "Failure", "code": 422, "reason": "Invalid", "message": "m"}})
        );
    }
}
