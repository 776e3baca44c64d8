//! Reading and editing Kubernetes objects as JSON values.
//!
//! The core works on `serde_json::Value` rather than typed structs on purpose:
//! an object from a newer API server may carry fields the typed structs do not
//! know, and a round-trip through them would drop those fields and produce a
//! patch that deletes them. Editing the value in place keeps everything else
//! byte-for-byte and lets the patch be a plain diff.

use serde_json::{Map, Value};

/// One object under review, as admission and the offline commands hand it
/// to the core: its kind, the object, the object before an UPDATE, and the
/// request's namespace (used when the object has none).
#[derive(Clone, Copy, Debug)]
pub struct Subject<'a> {
    pub kind: Kind,
    pub object: &'a Value,
    pub old: Option<&'a Value>,
    pub namespace: Option<&'a str>,
}

impl<'a> Subject<'a> {
    /// `object` of `kind` under review in `namespace`, with no older version.
    pub fn new(kind: Kind, object: &'a Value, namespace: Option<&'a str>) -> Self {
        Self {
            kind,
            object,
            old: None,
            namespace,
        }
    }

    /// The same, knowing the object before an UPDATE.
    pub fn with_old(self, old: Option<&'a Value>) -> Self {
        Self { old, ..self }
    }
}

/// The member kinds dljob handles.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Kind {
    Pod,
    StatefulSet,
    Job,
}

impl Kind {
    /// From `apiVersion` + `kind` (as in a manifest).
    pub(crate) fn from_type(api_version: &str, kind: &str) -> Option<Self> {
        match (api_version, kind) {
            ("v1", "Pod") => Some(Self::Pod),
            ("apps/v1", "StatefulSet") => Some(Self::StatefulSet),
            ("batch/v1", "Job") => Some(Self::Job),
            _ => None,
        }
    }

    /// From an AdmissionReview `request.kind` (group, version, kind).
    pub fn from_gvk(group: &str, version: &str, kind: &str) -> Option<Self> {
        match (group, version, kind) {
            ("", "v1", "Pod") => Some(Self::Pod),
            ("apps", "v1", "StatefulSet") => Some(Self::StatefulSet),
            ("batch", "v1", "Job") => Some(Self::Job),
            _ => None,
        }
    }

    /// Kind of a manifest document.
    pub fn of(object: &Value) -> Option<Self> {
        Self::from_type(str_at(object, &["apiVersion"])?, str_at(object, &["kind"])?)
    }

    pub fn as_str(self) -> &'static str {
        match self {
            Self::Pod => "Pod",
            Self::StatefulSet => "StatefulSet",
            Self::Job => "Job",
        }
    }

    /// Path from the object to its pod spec's parent (`spec` or `spec.template`).
    pub(crate) fn pod_path(self) -> &'static [&'static str] {
        match self {
            Self::Pod => &[],
            Self::StatefulSet | Self::Job => &["spec", "template"],
        }
    }
}

/// The value at `path`, if every step exists.
pub fn at<'v>(value: &'v Value, path: &[&str]) -> Option<&'v Value> {
    path.iter().try_fold(value, |v, k| v.get(*k))
}

/// The string at `path`.
pub(crate) fn str_at<'v>(value: &'v Value, path: &[&str]) -> Option<&'v str> {
    at(value, path)?.as_str()
}

/// The object at `path`, created (with every missing parent) when absent.
/// A non-object in the way is replaced only if it is `null`.
pub fn object_at_mut<'v>(
    value: &'v mut Value,
    path: &[&str],
) -> Option<&'v mut Map<String, Value>> {
    let mut cur = value;
    for key in path {
        let map = cur.as_object_mut()?;
        let entry = map.entry((*key).to_owned()).or_insert(Value::Null);
        if entry.is_null() {
            *entry = Value::Object(Map::new());
        }
        cur = entry;
    }
    cur.as_object_mut()
}

/// A metadata string map (`labels`/`annotations`) at `meta_path`.
pub(crate) fn string_map<'v>(
    value: &'v Value,
    meta_path: &[&str],
    which: &str,
) -> Option<&'v Map<String, Value>> {
    at(value, meta_path)?
        .get("metadata")?
        .get(which)?
        .as_object()
}

/// One label or annotation.
pub(crate) fn meta_str<'v>(
    value: &'v Value,
    meta_path: &[&str],
    which: &str,
    key: &str,
) -> Option<&'v str> {
    string_map(value, meta_path, which)?.get(key)?.as_str()
}

/// True when `existing` holds everything `wanted` holds: every key of an
/// object equal recursively, arrays element-wise. Fields the API server
/// defaults later (e.g. `defaultMode`, `protocol`) are thus not conflicts.
pub(crate) fn contains(existing: &Value, wanted: &Value) -> bool {
    match (existing, wanted) {
        (Value::Object(e), Value::Object(w)) => w
            .iter()
            .all(|(k, wv)| e.get(k).is_some_and(|ev| contains(ev, wv))),
        (Value::Array(e), Value::Array(w)) => {
            e.len() == w.len() && e.iter().zip(w).all(|(ev, wv)| contains(ev, wv))
        }
        // Quantities and ports may arrive as numbers or strings.
        (Value::Number(n), Value::String(s)) | (Value::String(s), Value::Number(n)) => {
            n.to_string() == *s
        }
        _ => existing == wanted,
    }
}

/// The containers of a pod spec (empty when absent).
pub(crate) fn containers(pod_spec: &Value) -> &[Value] {
    pod_spec
        .get("containers")
        .and_then(Value::as_array)
        .map(Vec::as_slice)
        .unwrap_or(&[])
}

/// Name of a container value.
pub(crate) fn name_of(v: &Value) -> &str {
    v.get("name").and_then(Value::as_str).unwrap_or("")
}

/// The value of a Kubernetes quantity (`4`, `500m`, `0.0`, `1k`, `1Ki`,
/// `1e3`), given as a JSON string or number; None when it is not one.
/// Compared as the API server compares them: `0m`, `0.0` and `0k` are zero.
pub(crate) fn quantity_value(v: &Value) -> Option<f64> {
    match v {
        Value::Number(n) => n.as_f64(),
        Value::String(s) => {
            let s = s.trim();
            // The usual case, a plain count, without the full parser.
            if let Ok(n) = s.parse::<u64>() {
                return Some(n as f64);
            }
            kube_quantity::ParsedQuantity::try_from(s)
                .ok()?
                .to_bytes_f64()
                .filter(|x| x.is_finite())
        }
        _ => None,
    }
}

/// A quantity as a whole count (`4`, `4000m`), if it is one.
pub(crate) fn whole_quantity(v: &Value) -> Option<u32> {
    let x = quantity_value(v)?;
    (x >= 0.0 && x.fract() == 0.0 && x <= f64::from(u32::MAX)).then_some(x as u32)
}

/// Whether a quantity is zero. One that does not parse is not (the API
/// server refuses it anyway).
pub(crate) fn is_zero_quantity(v: &Value) -> bool {
    quantity_value(v) == Some(0.0)
}

/// The container's count of `resource` (limits, else requests), if named.
pub(crate) fn resource_count<'v>(container: &'v Value, resource: &str) -> Option<&'v Value> {
    let res = container.get("resources")?;
    res.get("limits")
        .and_then(|l| l.get(resource))
        .or_else(|| res.get("requests").and_then(|r| r.get(resource)))
}

/// Whether the container requests `resource` in limits or requests (a zero
/// quantity does not count).
pub fn requests_resource(container: &Value, resource: &str) -> bool {
    resource_count(container, resource).is_some_and(|q| !is_zero_quantity(q))
}

/// Whether the container requests an extended resource — a device such as
/// `nvidia.com/gpu`, `amd.com/gpu` or `google.com/tpu`: a domain-prefixed
/// resource outside Kubernetes' own `kubernetes.io` domains.
pub(crate) fn requests_extended_resource(container: &Value) -> bool {
    let Some(res) = container.get("resources") else {
        return false;
    };
    ["limits", "requests"].iter().any(|section| {
        res.get(*section)
            .and_then(Value::as_object)
            .is_some_and(|m| m.iter().any(|(k, v)| is_device_request(k, v)))
    })
}

/// The accelerator rule, one for the JSON pod and the typed one: a nonzero
/// quantity of an extended resource ([`is_extended_resource`]).
pub(crate) fn is_device_request(resource: &str, quantity: &Value) -> bool {
    is_extended_resource(resource) && !is_zero_quantity(quantity)
}

/// Whether the container uses a Dynamic Resource Allocation claim: its
/// `resources.claims` names one of the pod's `spec.resourceClaims` (a GPU
/// from a `ResourceClaimTemplate`, which no resource limit shows).
pub(crate) fn uses_pod_claim(pod_spec: &Value, container: &Value) -> bool {
    let Some(claims) = at(container, &["resources", "claims"]).and_then(Value::as_array) else {
        return false;
    };
    let pod_claims = pod_spec
        .get("resourceClaims")
        .and_then(Value::as_array)
        .map(Vec::as_slice)
        .unwrap_or(&[]);
    claims.iter().any(|claim| {
        let name = claim.get("name").and_then(Value::as_str);
        name.is_some()
            && pod_claims
                .iter()
                .any(|p| p.get("name").and_then(Value::as_str) == name)
    })
}

/// The GPU resource as clusters named it before device plugins (the first
/// operators' examples and controller configs); no current node
/// advertises it.
pub(crate) const ALPHA_GPU: &str = "alpha.kubernetes.io/nvidia-gpu";
/// What the NVIDIA device plugin advertises, and [`ALPHA_GPU`] becomes.
pub(crate) const NVIDIA_GPU: &str = "nvidia.com/gpu";

/// `vendor.example/device`, not `cpu`, `hugepages-2Mi` or `*kubernetes.io/*`.
pub(crate) fn is_extended_resource(name: &str) -> bool {
    name.split_once('/')
        .is_some_and(|(domain, _)| domain != "kubernetes.io" && !domain.ends_with(".kubernetes.io"))
}

/// GPUs the container requests: the sum over resources named `…/gpu`.
pub(crate) fn gpu_count(container: &Value) -> Option<u32> {
    let res = container.get("resources")?;
    let pick = |section: &str| -> Option<u32> {
        let map = res.get(section)?.as_object()?;
        let mut total = None;
        for (k, v) in map {
            if k.ends_with("/gpu") {
                *total.get_or_insert(0) += whole_quantity(v).unwrap_or(0);
            }
        }
        total
    };
    pick("limits").or_else(|| pick("requests"))
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn contains_ignores_defaulted_fields() {
        let existing = json!({"name": "v", "downwardAPI": {"defaultMode": 420, "items": [{"path": "h", "fieldRef": {"apiVersion": "v1", "fieldPath": "x"}}]}});
        let wanted = json!({"name": "v", "downwardAPI": {"items": [{"path": "h", "fieldRef": {"fieldPath": "x"}}]}});
        assert!(contains(&existing, &wanted));
        assert!(!contains(&wanted, &existing));
        assert!(contains(
            &json!({"containerPort": 22}),
            &json!({"containerPort": 22})
        ));
        assert!(contains(&json!("1"), &json!(1)));
        assert!(!contains(&json!({"a": [1, 2]}), &json!({"a": [1]})));
    }

    #[test]
    fn object_at_mut_creates_missing_parents_only() {
        let mut v = json!({"metadata": {"labels": {"a": "b"}}});
        object_at_mut(&mut v, &["metadata", "labels"])
            .unwrap()
            .insert("c".into(), json!("d"));
        object_at_mut(&mut v, &["metadata", "annotations"])
            .unwrap()
            .insert("e".into(), json!("f"));
        assert_eq!(
            v,
            json!({"metadata": {"labels": {"a": "b", "c": "d"}, "annotations": {"e": "f"}}})
        );
    }

    #[test]
    fn gpu_count_prefers_limits_and_sums_gpu_resources() {
        let c = json!({"resources": {"limits": {"nvidia.com/gpu": "2", "cpu": "4"}, "requests": {"nvidia.com/gpu": 1}}});
        assert_eq!(gpu_count(&c), Some(2));
        let c = json!({"resources": {"requests": {"nvidia.com/gpu": 1}}});
        assert_eq!(gpu_count(&c), Some(1));
        assert_eq!(gpu_count(&json!({"resources": {}})), None);
        assert!(requests_resource(
            &json!({"resources": {"requests": {"nvidia.com/gpu": "1"}}}),
            "nvidia.com/gpu"
        ));
        assert!(!requests_resource(
            &json!({"resources": {"limits": {"nvidia.com/gpu": 0}}}),
            "nvidia.com/gpu"
        ));
    }

    #[test]
    fn quantities_compare_as_kubernetes_quantities() {
        // Every spelling of zero the API server admits for a device.
        for zero in [
            json!("0"),
            json!("0m"),
            json!("0.0"),
            json!("0k"),
            json!(" 0 "),
            json!(0),
            json!(0.0),
        ] {
            assert!(is_zero_quantity(&zero), "{zero}");
            let c = json!({"resources": {"limits": {"nvidia.com/gpu": zero}}});
            assert!(!requests_resource(&c, "nvidia.com/gpu"), "{c}");
            assert!(!requests_extended_resource(&c), "{c}");
        }
        assert_eq!(whole_quantity(&json!("4000m")), Some(4));
        assert_eq!(whole_quantity(&json!("2")), Some(2));
        assert_eq!(whole_quantity(&json!("1k")), Some(1000));
        assert_eq!(whole_quantity(&json!("1Ki")), Some(1024));
        assert_eq!(whole_quantity(&json!("500m")), None, "not whole");
        assert_eq!(whole_quantity(&json!("-1")), None);
        assert_eq!(whole_quantity(&json!("8E")), None, "beyond a count");
        assert_eq!(quantity_value(&json!("two")), None);
        // Not a quantity: not zero (the API server refuses it anyway).
        assert!(!is_zero_quantity(&json!("two")));
        assert!(requests_resource(
            &json!({"resources": {"limits": {"nvidia.com/gpu": "500m"}}}),
            "nvidia.com/gpu"
        ));
        assert_eq!(
            gpu_count(&json!({"resources": {"limits": {"nvidia.com/gpu": "2000m"}}})),
            Some(2)
        );
    }

    #[test]
    fn kinds_from_manifest_and_review() {
        assert_eq!(
            Kind::of(&json!({"apiVersion": "apps/v1", "kind": "StatefulSet"})),
            Some(Kind::StatefulSet)
        );
        assert_eq!(
            Kind::of(&json!({"apiVersion": "apps/v1", "kind": "Deployment"})),
            None
        );
        assert_eq!(Kind::from_gvk("batch", "v1", "Job"), Some(Kind::Job));
        assert_eq!(Kind::from_gvk("", "v1", "Pod"), Some(Kind::Pod));
    }
}
