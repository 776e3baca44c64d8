//! What a real API server would accept of dljob's writes, for the mocked
//! client's verifier: every object dljob writes is checked as the API
//! server would check it, so that a write the real server refuses (or
//! silently prunes) fails the test instead of being answered 200.
//!
//! - A DLJob is checked **as it is after the write**: the stored object the
//!   test says the server holds, with the create, merge patch or
//!   server-side apply applied as the server applies it to the `status`
//!   subresource, against the CRD's own OpenAPI schema read from
//!   `crds/dljob.yaml` (required fields, enums, patterns, formats, types).
//!   A field the schema does not declare is refused too: the real server
//!   would drop it without a word, which loses what dljob meant to keep.
//! - A built-in kind that dljob creates or applies whole (Service, Secret,
//!   PodTemplate, Event, Deployment, …) is checked against k8s-openapi's
//!   schema of that kind (its required fields and types).

#![allow(dead_code)] // each test crate uses its own part of it

use std::sync::OnceLock;

use serde_json::{json, Map, Value};

/// The DLJob CRD's `openAPIV3Schema`, as JSON Schema a validator reads.
fn dljob_schema() -> &'static jsonschema::Validator {
    static SCHEMA: OnceLock<jsonschema::Validator> = OnceLock::new();
    SCHEMA.get_or_init(|| {
        let path = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("crds/dljob.yaml");
        let text = std::fs::read_to_string(&path).expect("crds/dljob.yaml is readable");
        let crd: Value = serde_saphyr::from_str(&text).expect("crds/dljob.yaml is YAML");
        let versions = crd["spec"]["versions"]
            .as_array()
            .expect("the CRD has versions");
        let served = versions
            .iter()
            .find(|v| v["storage"] == json!(true))
            .expect("the CRD has a storage version");
        // The API server itself answers for the root's type and metadata.
        let mut root = served["schema"]["openAPIV3Schema"].clone();
        root["properties"]["apiVersion"] = json!({"type": "string"});
        root["properties"]["kind"] = json!({"type": "string"});
        root["properties"]["metadata"] = json!({"type": "object"});
        let schema = structural(&root);
        jsonschema::options()
            .should_validate_formats(true)
            .build(&schema)
            .expect("the CRD's schema compiles")
    })
}

/// An OpenAPI v3 structural schema as the API server applies it, spelled
/// as JSON Schema: `nullable: true` admits null; an object with declared
/// properties and neither `additionalProperties` nor
/// `x-kubernetes-preserve-unknown-fields` admits no other field (the
/// server prunes it); `x-kubernetes-int-or-string` admits both; integer
/// formats the validator does not know are bounded as the server bounds
/// them.
pub(crate) fn structural(schema: &Value) -> Value {
    let Some(map) = schema.as_object() else {
        return schema.clone();
    };
    let mut out = Map::new();
    for (key, value) in map {
        let value = match key.as_str() {
            "properties" => Value::Object(
                value
                    .as_object()
                    .into_iter()
                    .flatten()
                    .map(|(k, v)| (k.clone(), structural(v)))
                    .collect(),
            ),
            "items" | "additionalProperties" if value.is_object() => structural(value),
            "allOf" | "anyOf" | "oneOf" => Value::Array(
                value
                    .as_array()
                    .into_iter()
                    .flatten()
                    .map(structural)
                    .collect(),
            ),
            "not" => structural(value),
            // Kubernetes' formats that JSON Schema does not know: bounds.
            "format" => match value.as_str() {
                Some("uint32") => {
                    out.insert("minimum".into(), json!(0));
                    out.insert("maximum".into(), json!(u32::MAX));
                    continue;
                }
                Some("uint16") => {
                    out.insert("minimum".into(), json!(0));
                    out.insert("maximum".into(), json!(u16::MAX));
                    continue;
                }
                Some("int32") => {
                    out.insert("minimum".into(), json!(i32::MIN));
                    out.insert("maximum".into(), json!(i32::MAX));
                    continue;
                }
                Some("int64") | Some("double") | Some("float") | Some("byte") => continue,
                _ => value.clone(),
            },
            _ => value.clone(),
        };
        out.insert(key.clone(), value);
    }
    let preserve = map.get("x-kubernetes-preserve-unknown-fields") == Some(&json!(true));
    if map.contains_key("properties") && !map.contains_key("additionalProperties") && !preserve {
        out.insert("additionalProperties".into(), json!(false));
    }
    if map.get("x-kubernetes-int-or-string") == Some(&json!(true)) {
        out.remove("type");
        out.insert("type".into(), json!(["integer", "string"]));
    }
    if map.get("nullable") == Some(&json!(true)) {
        if let Some(t) = out.get("type").cloned() {
            let mut types = match t {
                Value::Array(a) => a,
                other => vec![other],
            };
            types.push(json!("null"));
            out.insert("type".into(), Value::Array(types));
        }
        // An enum of a nullable field admits null too.
        if let Some(Value::Array(values)) = out.get_mut("enum") {
            values.push(Value::Null);
        }
    }
    Value::Object(out)
}

/// What the schema refuses of `object`, one line per error ("" when none).
fn errors(validator: &jsonschema::Validator, object: &Value) -> Vec<String> {
    validator
        .iter_errors(object)
        .map(|e| format!("{}: {}", e.instance_path(), e))
        .collect()
}

/// Panics, naming every error, when the CRD's schema refuses `dljob`.
pub(crate) fn assert_valid_dljob(dljob: &Value, what: &str) {
    let problems = errors(dljob_schema(), dljob);
    assert!(
        problems.is_empty(),
        "the API server would refuse {what}: DLJob is invalid:\n  {}\nobject: {dljob:#}",
        problems.join("\n  ")
    );
}

/// The built-in kinds dljob writes whole, by `apiVersion/kind`, with
/// k8s-openapi's schema of each.
fn builtin_schema(api_version: &str, kind: &str) -> Option<&'static jsonschema::Validator> {
    use k8s_openapi::api::{apps, core, events};
    macro_rules! schemas {
        ($($ty:ty),* $(,)?) => {{
            static ALL: OnceLock<Vec<(String, String, jsonschema::Validator)>> = OnceLock::new();
            ALL.get_or_init(|| {
                vec![$({
                    let schema = serde_json::to_value(schemars::schema_for!($ty)).unwrap();
                    let validator = jsonschema::validator_for(&schema).expect("k8s-openapi's schema compiles");
                    (
                        <$ty as k8s_openapi::Resource>::API_VERSION.to_owned(),
                        <$ty as k8s_openapi::Resource>::KIND.to_owned(),
                        validator,
                    )
                }),*]
            })
        }};
    }
    let all = schemas!(
        core::v1::Service,
        core::v1::Secret,
        core::v1::PodTemplate,
        core::v1::Pod,
        apps::v1::Deployment,
        events::v1::Event,
    );
    all.iter()
        .find(|(v, k, _)| v == api_version && k == kind)
        .map(|(_, _, validator)| validator)
}

/// Panics when a built-in object dljob writes whole lacks what its kind
/// requires (a kind without a schema here is not checked).
pub(crate) fn assert_valid_builtin(object: &Value, what: &str) {
    let (Some(api_version), Some(kind)) = (object["apiVersion"].as_str(), object["kind"].as_str())
    else {
        panic!("{what}: an object without apiVersion and kind: {object:#}");
    };
    if let Some(validator) = builtin_schema(api_version, kind) {
        let problems = errors(validator, object);
        assert!(
            problems.is_empty(),
            "the API server would refuse {what}: {kind} is invalid:\n  {}\nobject: {object:#}",
            problems.join("\n  ")
        );
    }
}

/// The DLJobs as the API server holds them, changed by each write as the
/// server changes them, and checked after each.
#[derive(Default, Clone, Debug)]
pub(crate) struct Server {
    /// DLJobs by name.
    pub dljobs: std::collections::BTreeMap<String, Value>,
}

impl Server {
    /// A server that holds `dljobs`.
    pub(crate) fn holding<'a>(dljobs: impl IntoIterator<Item = &'a Value>) -> Self {
        Self {
            dljobs: dljobs
                .into_iter()
                .map(|j| {
                    (
                        j["metadata"]["name"]
                            .as_str()
                            .unwrap_or_default()
                            .to_owned(),
                        j.clone(),
                    )
                })
                .collect(),
        }
    }

    /// Applies one write (`method` on `path`, with `content_type` and the
    /// JSON `body`) as the API server would, and checks the object that
    /// results. Reads and writes of other kinds' parts are not modelled.
    pub(crate) fn write(&mut self, method: &str, path: &str, content_type: &str, body: &Value) {
        let path = path.split('?').next().unwrap_or_default();
        let what = format!("{method} {path}");
        if let Some(rest) = path
            .split("/dljobs")
            .nth(1)
            .filter(|_| path.starts_with("/apis/dljob.dev/"))
        {
            self.write_dljob(method, rest, content_type, body, &what);
            return;
        }
        let whole = method == "POST"
            || method == "PUT"
            || content_type.starts_with("application/apply-patch");
        if whole && body.get("kind").is_some() {
            assert_valid_builtin(body, &what);
        }
    }

    fn write_dljob(
        &mut self,
        method: &str,
        rest: &str,
        content_type: &str,
        body: &Value,
        what: &str,
    ) {
        let mut parts = rest.trim_start_matches('/').split('/');
        let name = parts.next().unwrap_or_default().to_owned();
        let status = parts.next() == Some("status");
        match method {
            "POST" => {
                // The status subresource: a create keeps no status.
                let mut created = body.clone();
                if let Some(m) = created.as_object_mut() {
                    m.remove("status");
                }
                assert_valid_dljob(&created, what);
                let name = created["metadata"]["name"]
                    .as_str()
                    .unwrap_or_default()
                    .to_owned();
                self.dljobs.insert(name, created);
            }
            "PATCH" => {
                let stored = self.dljobs.get(&name).cloned().unwrap_or_else(|| {
                    panic!("{what}: the test did not say what the API server holds of DLJob {name}")
                });
                let mut after = stored.clone();
                if content_type.starts_with("application/apply-patch") {
                    // dljob is the status's only manager and applies it
                    // whole: what it applies is what the status becomes.
                    if status {
                        after["status"] = body.get("status").cloned().unwrap_or(Value::Null);
                    } else {
                        json_patch::merge(&mut after, body);
                    }
                } else if content_type.starts_with("application/merge-patch") {
                    json_patch::merge(&mut after, body);
                } else if content_type.starts_with("application/json-patch") {
                    let patch: json_patch::Patch =
                        serde_json::from_value(body.clone()).expect("a JSON patch");
                    json_patch::patch(&mut after, &patch).expect("the JSON patch applies");
                } else {
                    panic!("{what}: a patch of content type {content_type:?} is not modelled");
                }
                // The status subresource changes nothing but the status; the
                // main resource nothing but the rest.
                if status {
                    let mut kept = stored.clone();
                    kept["status"] = after["status"].clone();
                    after = kept;
                } else {
                    after["status"] = stored.get("status").cloned().unwrap_or(Value::Null);
                }
                if after.get("status") == Some(&Value::Null) {
                    after.as_object_mut().unwrap().remove("status");
                }
                assert_valid_dljob(&after, what);
                self.dljobs.insert(name, after);
            }
            "DELETE" => {
                self.dljobs.remove(&name);
            }
            _ => {}
        }
    }
}
