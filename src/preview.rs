//! The pods a workload member will create, built from its pod template the
//! way their controllers build them (what a real kube-controller-manager
//! sends to admission; see the captured fixtures): StatefulSet pods named
//! `<sts>-<ordinal>` with the pod-index and pod-name labels, hostname and
//! subdomain; Indexed Job pods with only a `generateName`, the completion
//! index label and annotation, and the hostname `<job>-<index>`. Pure: the
//! offline `dljob mutate --pods` preview mutates them as admission would.

use serde_json::{json, Map, Value};

use crate::contract as c;
use crate::object::{self, Kind};

/// The pods `workload` (of `kind`) creates, in index order; a Pod is its own
/// only pod. `namespace` is used when the object names none.
pub fn pods_of(kind: Kind, workload: &Value, namespace: &str) -> Vec<Value> {
    let size_at = |path: &[&str]| {
        object::at(workload, path)
            .and_then(Value::as_u64)
            .and_then(|n| u32::try_from(n).ok())
    };
    match kind {
        Kind::Pod => vec![workload.clone()],
        Kind::StatefulSet => {
            let replicas = size_at(&["spec", "replicas"]).unwrap_or(1);
            (0..replicas)
                .map(|i| controller_pod(kind, workload, namespace, i))
                .collect()
        }
        Kind::Job => {
            let completions = size_at(&["spec", "completions"]).unwrap_or(1);
            (0..completions)
                .map(|i| controller_pod(kind, workload, namespace, i))
                .collect()
        }
    }
}

fn controller_pod(kind: Kind, workload: &Value, namespace: &str, index: u32) -> Value {
    let name = object::str_at(workload, &["metadata", "name"]).unwrap_or("");
    let ns = object::str_at(workload, &["metadata", "namespace"]).unwrap_or(namespace);
    let template = object::at(workload, &["spec", "template"]);
    let mut labels = template_map(template, "labels");
    let mut annotations = template_map(template, "annotations");
    let mut spec = template
        .and_then(|t| t.get("spec"))
        .cloned()
        .unwrap_or_else(|| json!({}));
    let index_s = index.to_string();
    let mut metadata = Map::new();
    let (api_version, owner_kind) = match kind {
        Kind::StatefulSet => {
            let pod_name = format!("{name}-{index}");
            labels.insert(c::K8S_POD_INDEX.into(), index_s.into());
            labels.insert(
                "statefulset.kubernetes.io/pod-name".into(),
                pod_name.clone().into(),
            );
            metadata.insert("name".into(), pod_name.clone().into());
            metadata.insert("generateName".into(), format!("{name}-").into());
            let service = object::str_at(workload, &["spec", "serviceName"]).unwrap_or("");
            if let Some(spec) = spec.as_object_mut() {
                spec.insert("hostname".into(), pod_name.into());
                if !service.is_empty() {
                    spec.insert("subdomain".into(), service.into());
                }
            }
            ("apps/v1", "StatefulSet")
        }
        _ => {
            labels.insert(c::K8S_JOB_COMPLETION_INDEX.into(), index_s.clone().into());
            labels.insert("batch.kubernetes.io/job-name".into(), name.into());
            labels.insert("job-name".into(), name.into());
            annotations.insert(c::K8S_JOB_COMPLETION_INDEX.into(), index_s.into());
            metadata.insert("generateName".into(), format!("{name}-{index}-").into());
            if let Some(spec) = spec.as_object_mut() {
                spec.insert("hostname".into(), format!("{name}-{index}").into());
                // The Job controller gives every container its index.
                let index_env = json!({"name": "JOB_COMPLETION_INDEX", "valueFrom": {"fieldRef": {
                    "fieldPath": format!("metadata.annotations['{}']", c::K8S_JOB_COMPLETION_INDEX)
                }}});
                let containers = spec.get_mut("containers").and_then(Value::as_array_mut);
                for container in containers.into_iter().flatten() {
                    let Some(container) = container.as_object_mut() else {
                        continue;
                    };
                    let env = container.entry("env").or_insert_with(|| json!([]));
                    if let Some(env) = env.as_array_mut() {
                        if !env.iter().any(|e| e["name"] == "JOB_COMPLETION_INDEX") {
                            env.push(index_env.clone());
                        }
                    }
                }
            }
            ("batch/v1", "Job")
        }
    };
    metadata.insert("namespace".into(), ns.into());
    metadata.insert("labels".into(), Value::Object(labels));
    metadata.insert("annotations".into(), Value::Object(annotations));
    metadata.insert(
        "ownerReferences".into(),
        json!([{
            "apiVersion": api_version,
            "kind": owner_kind,
            "name": name,
            "controller": true,
            "blockOwnerDeletion": true
        }]),
    );
    json!({"apiVersion": "v1", "kind": "Pod", "metadata": metadata, "spec": spec})
}

fn template_map(template: Option<&Value>, which: &str) -> Map<String, Value> {
    template
        .and_then(|t| object::at(t, &["metadata", which]))
        .and_then(Value::as_object)
        .cloned()
        .unwrap_or_default()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn statefulset_pods_are_named_by_ordinal_with_index_label_and_identity() {
        let sts = json!({
            "apiVersion": "apps/v1", "kind": "StatefulSet",
            "metadata": {"name": "tf-worker", "namespace": "ml"},
            "spec": {"replicas": 2, "serviceName": "tf", "template": {
                "metadata": {"labels": {"dljob.dev/job": "tf"}, "annotations": {"a": "b"}},
                "spec": {"containers": [{"name": "c"}]}}}
        });
        let pods = pods_of(Kind::StatefulSet, &sts, "default");
        assert_eq!(pods.len(), 2);
        assert_eq!(
            pods[1],
            json!({"apiVersion": "v1", "kind": "Pod",
                "metadata": {
                    "name": "tf-worker-1", "generateName": "tf-worker-", "namespace": "ml",
                    "labels": {"dljob.dev/job": "tf", "apps.kubernetes.io/pod-index": "1",
                               "statefulset.kubernetes.io/pod-name": "tf-worker-1"},
                    "annotations": {"a": "b"},
                    "ownerReferences": [{"apiVersion": "apps/v1", "kind": "StatefulSet",
                        "name": "tf-worker", "controller": true, "blockOwnerDeletion": true}]},
                "spec": {"containers": [{"name": "c"}], "hostname": "tf-worker-1", "subdomain": "tf"}})
        );
    }

    #[test]
    fn indexed_job_pods_have_generate_name_and_completion_index() {
        let job = json!({
            "apiVersion": "batch/v1", "kind": "Job",
            "metadata": {"name": "gpt-worker"},
            "spec": {"completions": 3, "template": {"spec": {"containers": [{"name": "c"}]}}}
        });
        let pods = pods_of(Kind::Job, &job, "team-a");
        assert_eq!(pods.len(), 3);
        assert_eq!(
            pods[2],
            json!({"apiVersion": "v1", "kind": "Pod",
                "metadata": {
                    "generateName": "gpt-worker-2-", "namespace": "team-a",
                    "labels": {"batch.kubernetes.io/job-completion-index": "2",
                               "batch.kubernetes.io/job-name": "gpt-worker", "job-name": "gpt-worker"},
                    "annotations": {"batch.kubernetes.io/job-completion-index": "2"},
                    "ownerReferences": [{"apiVersion": "batch/v1", "kind": "Job",
                        "name": "gpt-worker", "controller": true, "blockOwnerDeletion": true}]},
                "spec": {"containers": [{"name": "c", "env": [{"name": "JOB_COMPLETION_INDEX", "valueFrom": {"fieldRef": {
                    "fieldPath": "metadata.annotations['batch.kubernetes.io/job-completion-index']"}}}]}],
                    "hostname": "gpt-worker-2"}})
        );
    }
}
