//! The `DLJob` custom resource (group `dljob.dev`, `v1alpha1`): the status
//! object the reconciler creates for every job it sees. Its spec is copied
//! from the members' annotations; its status is computed by
//! [`crate::reconciler::status`].

use std::collections::BTreeMap;
use std::process::ExitCode;

use k8s_openapi::apimachinery::pkg::apis::meta::v1::{Condition, Time};
use kube::CustomResource;
use kube::CustomResourceExt;
use schemars::JsonSchema;
use serde::{Deserialize, Serialize};
use serde_json::Value;

use crate::contract::{CleanPodPolicy, Policies, RestartPolicy};

/// What the members of one job agree on, as the reconciler first saw it.
#[derive(CustomResource, Deserialize, Serialize, Clone, Debug, PartialEq, JsonSchema)]
#[kube(
    group = "dljob.dev",
    version = "v1alpha1",
    kind = "DLJob",
    namespaced,
    shortname = "dlj",
    status = "DLJobStatus",
    doc = "A distributed deep-learning job made of labelled Pods, StatefulSets and Indexed Jobs; created and updated by the dljob reconciler",
    printcolumn = r#"{"name":"Framework","type":"string","jsonPath":".spec.framework"}"#,
    printcolumn = r#"{"name":"Replicas","type":"string","jsonPath":".spec.replicas"}"#,
    printcolumn = r#"{"name":"Phase","type":"string","jsonPath":".status.phase"}"#,
    printcolumn = r#"{"name":"Active","type":"string","jsonPath":".status.active","description":"framework containers running / replicas in the topology"}"#,
    printcolumn = r#"{"name":"Restarts","type":"integer","jsonPath":".status.restarts"}"#,
    printcolumn = r#"{"name":"Age","type":"date","jsonPath":".metadata.creationTimestamp"}"#
)]
#[serde(rename_all = "camelCase")]
pub struct DLJobSpec {
    /// `dljob.dev/framework`.
    pub framework: String,
    /// `dljob.dev/replicas`: the whole job's topology, e.g. `ps=2,worker=4`.
    pub replicas: String,
    /// The framework port the headless Service exposes.
    pub port: u16,
    /// `dljob.dev/restart-policy`.
    pub restart_policy: JobRestartPolicy,
    /// `dljob.dev/backoff-limit`: retries before the job fails.
    pub backoff_limit: u32,
    /// `dljob.dev/clean-pod-policy`.
    pub clean_pod_policy: JobCleanPodPolicy,
    /// `dljob.dev/ttl-seconds-after-finished`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub ttl_seconds_after_finished: Option<u32>,
    /// `dljob.dev/active-deadline-seconds`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub active_deadline_seconds: Option<u32>,
    /// mpi/chainer: where the SSH Secret is mounted (`dljob.dev/ssh-path`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub ssh_path: Option<String>,
}

/// `dljob.dev/restart-policy`.
#[derive(Deserialize, Serialize, Clone, Copy, Debug, PartialEq, Eq, JsonSchema)]
pub enum JobRestartPolicy {
    ExitCode,
    Never,
}

/// `dljob.dev/clean-pod-policy`.
#[derive(Deserialize, Serialize, Clone, Copy, Debug, PartialEq, Eq, JsonSchema)]
pub enum JobCleanPodPolicy {
    Running,
    All,
    None,
}

impl DLJobSpec {
    /// The policies in the core's types.
    pub fn policies(&self) -> Policies {
        Policies {
            restart: match self.restart_policy {
                JobRestartPolicy::ExitCode => RestartPolicy::ExitCode,
                JobRestartPolicy::Never => RestartPolicy::Never,
            },
            backoff_limit: self.backoff_limit,
            clean_pod: match self.clean_pod_policy {
                JobCleanPodPolicy::Running => CleanPodPolicy::Running,
                JobCleanPodPolicy::All => CleanPodPolicy::All,
                JobCleanPodPolicy::None => CleanPodPolicy::None,
            },
            ttl_seconds_after_finished: self.ttl_seconds_after_finished,
            active_deadline_seconds: self.active_deadline_seconds,
        }
    }

    /// The spec fields that come from policies.
    pub fn set_policies(&mut self, p: &Policies) {
        self.restart_policy = match p.restart {
            RestartPolicy::ExitCode => JobRestartPolicy::ExitCode,
            RestartPolicy::Never => JobRestartPolicy::Never,
        };
        self.backoff_limit = p.backoff_limit;
        self.clean_pod_policy = match p.clean_pod {
            CleanPodPolicy::Running => JobCleanPodPolicy::Running,
            CleanPodPolicy::All => JobCleanPodPolicy::All,
            CleanPodPolicy::None => JobCleanPodPolicy::None,
        };
        self.ttl_seconds_after_finished = p.ttl_seconds_after_finished;
        self.active_deadline_seconds = p.active_deadline_seconds;
    }
}

/// The job's lifecycle phase.
#[derive(Deserialize, Serialize, Clone, Copy, Debug, Default, PartialEq, Eq, Hash, JsonSchema)]
pub enum Phase {
    /// Not every replica runs yet.
    #[default]
    Pending,
    /// Every replica's framework container runs.
    Running,
    /// A retryable failure is being retried.
    Restarting,
    /// The coordinator exited 0.
    Succeeded,
    /// A permanent exit, the backoff limit or the deadline.
    Failed,
}

impl Phase {
    pub const ALL: [Phase; 5] = [
        Phase::Pending,
        Phase::Running,
        Phase::Restarting,
        Phase::Succeeded,
        Phase::Failed,
    ];

    pub fn as_str(self) -> &'static str {
        match self {
            Phase::Pending => "Pending",
            Phase::Running => "Running",
            Phase::Restarting => "Restarting",
            Phase::Succeeded => "Succeeded",
            Phase::Failed => "Failed",
        }
    }

    /// Succeeded or Failed.
    pub fn is_finished(self) -> bool {
        matches!(self, Phase::Succeeded | Phase::Failed)
    }
}

/// What the reconciler observed and decided.
#[derive(Deserialize, Serialize, Clone, Debug, Default, PartialEq, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct DLJobStatus {
    pub phase: Phase,
    /// `Created`, `Running`, `Restarting`, `Succeeded`, `Failed`.
    #[serde(default)]
    pub conditions: Vec<Condition>,
    /// Per role: pending, active, succeeded, failed, restarts.
    #[serde(default)]
    pub replicas: BTreeMap<String, RoleStatus>,
    /// "active/total" for `kubectl get`.
    #[serde(default)]
    pub active: String,
    /// Restarts over all roles.
    #[serde(default)]
    pub restarts: u32,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub coordinator: Option<CoordinatorStatus>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub start_time: Option<Time>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub completion_time: Option<Time>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub observed_generation: Option<i64>,
    /// Pod name → the last exit already counted (`uid/container id`), so
    /// that a restart is counted once even across reconciler restarts.
    #[serde(default)]
    pub counted_exits: BTreeMap<String, String>,
    /// Bare pods deleted for a retry and not yet recreated, with the
    /// manifest to recreate them from.
    #[serde(default)]
    pub pending_recreates: Vec<PendingRecreate>,
    /// mpi/chainer: the SSH Secret the reconciler created (or found already
    /// there). It is created once: the reconciler never reads Secrets.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub ssh_secret: Option<String>,
}

/// Counts for one role.
#[derive(Deserialize, Serialize, Clone, Debug, Default, PartialEq, Eq, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct RoleStatus {
    pub pending: u32,
    pub active: u32,
    pub succeeded: u32,
    pub failed: u32,
    pub restarts: u32,
}

/// The replica whose exit decides the job.
#[derive(Deserialize, Serialize, Clone, Debug, Default, PartialEq, Eq, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct CoordinatorStatus {
    /// `role-index`, e.g. `master-0`.
    pub replica: String,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub pod: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub exit_code: Option<i32>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub reason: Option<String>,
}

/// A bare pod to recreate once the deleted one is gone.
#[derive(Deserialize, Serialize, Clone, Debug, PartialEq, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct PendingRecreate {
    pub name: String,
    /// uid of the pod that was deleted.
    pub uid: String,
    /// The pod to create (metadata and spec of the deleted one).
    #[schemars(schema_with = "preserved_object")]
    pub manifest: Value,
}

fn preserved_object(_: &mut schemars::SchemaGenerator) -> schemars::Schema {
    schemars::json_schema!({
        "type": "object",
        "x-kubernetes-preserve-unknown-fields": true
    })
}

/// The CRD as YAML, exactly what `crds/dljob.yaml` holds.
pub fn yaml() -> Result<String, serde_saphyr::SerializeError> {
    serde_saphyr::to_string(&DLJob::crd())
}

/// `dljob crd`.
pub fn print() -> anyhow::Result<ExitCode> {
    print!("{}", yaml()?);
    Ok(ExitCode::SUCCESS)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn committed_crd_is_what_dljob_crd_prints() {
        assert_eq!(
            yaml().unwrap(),
            include_str!("../crds/dljob.yaml"),
            "crds/dljob.yaml is stale: run `cargo run -- crd > crds/dljob.yaml`"
        );
    }

    /// Every schema node says its type (or preserves unknown fields under
    /// an object type): a kube-apiserver rejects a non-structural schema.
    fn structural(path: &str, node: &Value, problems: &mut Vec<String>) {
        let Some(obj) = node.as_object() else {
            return;
        };
        if !obj.contains_key("type") {
            problems.push(format!("{path} has no type"));
        }
        for forbidden in ["anyOf", "oneOf", "allOf", "$ref", "definitions"] {
            if obj.contains_key(forbidden) {
                problems.push(format!("{path} uses {forbidden}"));
            }
        }
        if let Some(props) = obj.get("properties").and_then(Value::as_object) {
            for (k, v) in props {
                structural(&format!("{path}.{k}"), v, problems);
            }
        }
        for key in ["items", "additionalProperties"] {
            if let Some(v) = obj.get(key) {
                if v.is_object() {
                    structural(&format!("{path}[{key}]"), v, problems);
                }
            }
        }
    }

    #[test]
    fn schema_is_structural() {
        let crd = serde_json::to_value(DLJob::crd()).unwrap();
        let versions = crd["spec"]["versions"].as_array().unwrap();
        assert_eq!(versions.len(), 1);
        let v = &versions[0];
        assert_eq!(v["name"], "v1alpha1");
        assert_eq!(v["subresources"]["status"], serde_json::json!({}));
        let mut problems = Vec::new();
        structural(
            "openAPIV3Schema",
            &v["schema"]["openAPIV3Schema"],
            &mut problems,
        );
        assert_eq!(problems, Vec::<String>::new());
        assert_eq!(
            crd["spec"]["names"]["shortNames"],
            serde_json::json!(["dlj"])
        );
        assert_eq!(crd["spec"]["scope"], "Namespaced");
        let columns: Vec<&str> = v["additionalPrinterColumns"]
            .as_array()
            .unwrap()
            .iter()
            .map(|c| c["name"].as_str().unwrap())
            .collect();
        assert_eq!(
            columns,
            [
                "Framework",
                "Replicas",
                "Phase",
                "Active",
                "Restarts",
                "Age"
            ]
        );
    }
}
