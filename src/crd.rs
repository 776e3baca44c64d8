//! The `DLJob` custom resource (group `dljob.dev`, `v1alpha1`): the status
//! object the reconciler creates for every job it sees. Its spec is copied
//! from the members' annotations; its status is computed by
//! [`crate::reconciler::status`].

use std::collections::{BTreeMap, BTreeSet};
use std::process::ExitCode;

use k8s_openapi::apiextensions_apiserver::pkg::apis::apiextensions::v1::CustomResourceDefinition;
use k8s_openapi::apimachinery::pkg::apis::meta::v1::{Condition, ObjectMeta, Time};
use kube::CustomResource;
use kube::CustomResourceExt;
use schemars::JsonSchema;
use serde::{Deserialize, Serialize};
use serde_json::Value;

use crate::contract::{
    Elastic, MpiImplementation, Placement, Policies, Slots, TensorBoard, Topology,
};
use crate::frameworks::{self, Framework};
use crate::gang;

// Two members agree when their `JobSpec`s are equal, and the DLJob's spec
// is the `JobSpec` itself, so a job-wide key is added in one place: a field
// here and its parse step in `member::job_spec`. Field names are the
// annotation keys in camelCase (`dljob.dev/clean-pod-policy` is
// `cleanPodPolicy`); `JobSpec::differences` relies on that.
/// Everything the members of one job must agree on, from their annotations,
/// as the reconciler first saw it.
#[derive(CustomResource, Deserialize, Serialize, Clone, Debug, PartialEq, Eq, JsonSchema)]
#[kube(
    group = "dljob.dev",
    version = "v1alpha1",
    kind = "DLJob",
    namespaced,
    shortname = "dlj",
    status = "DLJobStatus",
    // `kubectl scale dljob/J --replicas=N` and autoscalers' scaleTargetRef:
    // the elastic role's replicas (pytorch's workers), applied by the
    // reconciler to the role's StatefulSet or Indexed Job.
    scale(
        spec_replicas_path = ".spec.elasticReplicas",
        status_replicas_path = ".status.replicas.worker.replicas",
        label_selector_path = ".status.selector"
    ),
    doc = "A distributed deep-learning job made of labelled Pods, StatefulSets and Indexed Jobs; created and updated by the dljob reconciler",
    printcolumn = r#"{"name":"Framework","type":"string","jsonPath":".spec.framework"}"#,
    printcolumn = r#"{"name":"Replicas","type":"string","jsonPath":".spec.replicas"}"#,
    printcolumn = r#"{"name":"Phase","type":"string","jsonPath":".status.phase"}"#,
    printcolumn = r#"{"name":"Active","type":"string","jsonPath":".status.active","description":"framework containers running / replicas in the topology"}"#,
    printcolumn = r#"{"name":"Restarts","type":"integer","jsonPath":".status.restarts"}"#,
    printcolumn = r#"{"name":"Age","type":"date","jsonPath":".metadata.creationTimestamp"}"#
)]
#[serde(rename_all = "camelCase")]
// The API server refuses `kubectl scale` of a job that is not elastic.
#[schemars(extend("x-kubernetes-validations" = [{
    "rule": "!has(self.elasticReplicas) || has(self.elastic)",
    "message": "only an elastic job (dljob.dev/elastic) can be scaled: the size of any other job is its members' (dljob.dev/replicas)"
}]))]
pub struct JobSpec {
    /// `dljob.dev/framework`.
    pub framework: String,
    /// `dljob.dev/replicas`: the whole job's topology, e.g. `ps=2,worker=4`,
    /// in declared order (the order ranks follow where roles are free).
    pub replicas: Topology,
    /// The framework port (`dljob.dev/port`, else the config's, else the
    /// framework's default); the headless Service exposes it.
    pub port: u16,
    /// mpi/chainer: hostfile slots per host (`dljob.dev/slots`).
    #[serde(default)]
    pub slots: Slots,
    /// mpi/chainer: the MPI implementation the launcher runs
    /// (`dljob.dev/mpi-implementation`); absent: OpenMPI.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub mpi_implementation: Option<MpiImplementation>,
    /// pytorch: the elastic range (`dljob.dev/elastic`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub elastic: Option<Elastic>,
    /// An elastic job's workers wanted (the scale subresource:
    /// `kubectl scale dljob/J --replicas=N`, an autoscaler): the reconciler
    /// resizes the role's StatefulSet or Indexed Job to it, within the
    /// range. Never set from the members' annotations; unset, the
    /// workloads keep the size they are given.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub elastic_replicas: Option<u32>,
    /// Restart, backoff, clean-up and deadline policies.
    #[serde(flatten)]
    pub policies: Policies,
    /// mpi/chainer: where the SSH Secret is mounted (`dljob.dev/ssh-path`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub ssh_path: Option<String>,
    /// The gang scheduler (`dljob.dev/gang`, else the config's `gang`).
    #[serde(default = "default_gang")]
    pub gang: String,
    /// The gang scheduler's queue (`dljob.dev/queue`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub queue: Option<String>,
    /// The node label one domain of which holds the job
    /// (`dljob.dev/topology`), declared in the gang scheduler's terms.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub topology: Option<Placement>,
    /// The job's TensorBoard (`dljob.dev/tensorboard: VOLUME:PATH`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub tensorboard: Option<TensorBoard>,
    /// The operator whose images the pods run (`dljob.dev/compat`:
    /// kubeflow, mpi-operator): admission also gives them what those
    /// images read.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub compat: Option<String>,
}

fn default_gang() -> String {
    crate::gang::NONE.to_owned()
}

impl DLJob {
    /// The metadata of an object this DLJob owns: named `name`, in its
    /// namespace, labelled with its job and controlled by it. None until the
    /// DLJob has a uid (an owner reference needs it).
    pub(crate) fn owned_meta(&self, name: String) -> Option<ObjectMeta> {
        use kube::Resource;
        let owner = self.controller_owner_ref(&())?;
        let job_name = self.metadata.name.clone()?;
        Some(ObjectMeta {
            name: Some(name),
            namespace: self.metadata.namespace.clone(),
            labels: Some(BTreeMap::from([(
                crate::contract::JOB.to_owned(),
                job_name,
            )])),
            owner_references: Some(vec![owner]),
            ..ObjectMeta::default()
        })
    }
}

impl JobSpec {
    /// A job that sets only its framework, topology and port: every other
    /// key at its default.
    pub fn new(framework: &str, replicas: Topology, port: u16) -> Self {
        Self {
            framework: framework.to_owned(),
            replicas,
            port,
            slots: Slots::default(),
            mpi_implementation: None,
            elastic: None,
            elastic_replicas: None,
            policies: Policies::default(),
            ssh_path: None,
            gang: default_gang(),
            queue: None,
            topology: None,
            tensorboard: None,
            compat: None,
        }
    }

    /// The job as a gang of `name`: every pod (the elastic minimum where
    /// elastic), less the framework's gated role (mpi's launcher starts only
    /// after the others run, so it cannot be in the gang).
    pub(crate) fn gang_group<'a>(
        &'a self,
        name: &'a str,
        framework: &dyn Framework,
    ) -> gang::Group<'a> {
        let gated = framework
            .gated_role()
            .map_or(0, |r| self.replicas.count_or_zero(r));
        gang::Group::new(
            name,
            self.replicas.total(),
            self.elastic.map(|e| e.min),
            gated,
            self.queue.as_deref(),
        )
        .within(self.topology.as_ref().map(|t| (t.key.as_str(), t.required)))
    }

    /// The gang scheduler, when the name is one dljob knows.
    pub(crate) fn scheduler(&self) -> Option<&'static dyn crate::gang::Scheduler> {
        crate::gang::by_name(&self.gang)
    }

    /// The framework, when the name is one dljob knows.
    pub(crate) fn framework(&self) -> Option<&'static dyn Framework> {
        frameworks::by_name(&self.framework)
    }

    /// Where `self` and `other` differ: (annotation key, this value, the
    /// other's value), by key; empty when they agree. Values are
    /// shown as written in annotations, `unset` when absent.
    pub(crate) fn differences(&self, other: &JobSpec) -> Vec<(String, String, String)> {
        let (Ok(Value::Object(mine)), Ok(Value::Object(theirs))) =
            (serde_json::to_value(self), serde_json::to_value(other))
        else {
            unreachable!("a JobSpec serializes to an object");
        };
        let show = |v: Option<&Value>| match v {
            None | Some(Value::Null) => "unset".to_owned(),
            Some(Value::String(s)) => s.clone(),
            Some(other) => other.to_string(),
        };
        let keys: BTreeSet<&String> = mine.keys().chain(theirs.keys()).collect();
        keys.into_iter()
            .filter(|k| mine.get(*k) != theirs.get(*k))
            .map(|k| (annotation_key(k), show(mine.get(k)), show(theirs.get(k))))
            .collect()
    }
}

/// `cleanPodPolicy` → `dljob.dev/clean-pod-policy`.
fn annotation_key(field: &str) -> String {
    let mut key = String::from("dljob.dev/");
    for ch in field.chars() {
        if ch.is_ascii_uppercase() {
            key.push('-');
            key.push(ch.to_ascii_lowercase());
        } else {
            key.push(ch);
        }
    }
    key
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
    pub(crate) const ALL: [Phase; 5] = [
        Phase::Pending,
        Phase::Running,
        Phase::Restarting,
        Phase::Succeeded,
        Phase::Failed,
    ];

    pub(crate) fn as_str(self) -> &'static str {
        match self {
            Phase::Pending => "Pending",
            Phase::Running => "Running",
            Phase::Restarting => "Restarting",
            Phase::Succeeded => "Succeeded",
            Phase::Failed => "Failed",
        }
    }

    /// Succeeded or Failed.
    pub(crate) fn is_finished(self) -> bool {
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
    /// Per role: pending, active, succeeded, failed, restarts (and an
    /// elastic role's replicas now).
    #[serde(default)]
    pub replicas: BTreeMap<String, RoleStatus>,
    /// "active/total" for `kubectl get`.
    #[serde(default)]
    pub active: String,
    /// An elastic job's workers as a label selector
    /// (`dljob.dev/job=J,dljob.dev/role=worker`): the scale subresource's,
    /// which an autoscaler reads its pods' metrics by.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub selector: Option<String>,
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
    /// Bare pods deleted for a retry and not yet recreated.
    #[serde(default)]
    pub pending_recreates: Vec<PendingRecreate>,
    /// mpi/chainer: the SSH Secret the reconciler created, recorded as soon
    /// as it was. It is created once; one of that name it did not create is
    /// reported, not taken (the reconciler never reads Secrets).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub ssh_secret: Option<String>,
    /// restart-scope Job: the whole-job restart under way — what caused it
    /// and the members' pods being deleted for it (their exits do not
    /// count).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub job_restart: Option<JobRestart>,
}

/// A whole-job restart under way.
#[derive(Deserialize, Serialize, Clone, Debug, Default, PartialEq, Eq, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct JobRestart {
    /// The failure that caused it, e.g. `worker-1 (pod w-1) exited 137 (OOMKilled)`.
    pub cause: String,
    /// uids of the pods deleted for it that may still exist.
    pub uids: Vec<String>,
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
    /// The elastic role's replicas now (its StatefulSets' and Jobs'
    /// sizes), which may differ from the topology's count within
    /// `dljob.dev/elastic`; absent for every other role (its count).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub replicas: Option<u32>,
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

/// A bare pod to recreate once the deleted one is gone, from the manifest
/// saved of it: a PodTemplate the DLJob owns (the status holds no manifest:
/// a pod's env may hold what readers of DLJobs must not see).
#[derive(Deserialize, Serialize, Clone, Debug, PartialEq, Eq, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct PendingRecreate {
    pub name: String,
    /// uid of the pod that was deleted.
    pub uid: String,
    /// The PodTemplate its manifest was saved in, once it was: only that
    /// object (by uid) is recreated from, whatever else has the labels.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub saved: Option<SavedPod>,
}

/// A PodTemplate a bare pod's manifest is saved in.
#[derive(Deserialize, Serialize, Clone, Debug, PartialEq, Eq, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct SavedPod {
    pub name: String,
    pub uid: String,
    /// The digest of its content (`sha256:` and hex) when it was saved:
    /// whoever may edit PodTemplates in the namespace cannot have dljob
    /// create a pod from an edited one. Absent in a status recorded before
    /// dljob kept it; such a PodTemplate is trusted by its uid.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub digest: Option<String>,
}

impl SavedPod {
    /// Whether `found` (a PodTemplate as listed now) is the one this
    /// record names, unchanged since it was saved.
    pub fn is(&self, found: &SavedPod) -> bool {
        self.uid == found.uid
            && self
                .digest
                .as_ref()
                .is_none_or(|d| Some(d) == found.digest.as_ref())
    }
}

/// The formats of OpenAPI the API server knows for integers, and the
/// bounds of those schemars writes for Rust's unsigned integers: the API
/// server warns on every apply of a CRD with a format it does not know
/// (`unrecognized format "uint32"`), and validates none of them.
const UNSIGNED_FORMATS: &[(&str, &str, f64)] = &[
    ("uint8", "int32", 255.0),
    ("uint16", "int32", 65_535.0),
    ("uint32", "int64", 4_294_967_295.0),
    ("uint64", "int64", 9_223_372_036_854_775_807.0),
    ("uint", "int64", 9_223_372_036_854_775_807.0),
];

/// The DLJob CRD, its unsigned integers in the formats the API server
/// knows (their range as `minimum` and `maximum`).
pub(crate) fn definition() -> CustomResourceDefinition {
    let mut value = serde_json::to_value(DLJob::crd()).expect("a CRD serializes");
    known_formats(&mut value);
    serde_json::from_value(value).expect("the same CRD")
}

/// Rewrites every unsigned `format` under `node` ([`UNSIGNED_FORMATS`]).
fn known_formats(node: &mut Value) {
    match node {
        Value::Object(map) => {
            let found = map
                .get("format")
                .and_then(Value::as_str)
                .and_then(|f| UNSIGNED_FORMATS.iter().find(|(u, _, _)| *u == f));
            if let Some((_, known, max)) = found {
                map.insert("format".into(), Value::from(*known));
                map.entry("maximum").or_insert(Value::from(*max));
            }
            for v in map.values_mut() {
                known_formats(v);
            }
        }
        Value::Array(items) => items.iter_mut().for_each(known_formats),
        _ => {}
    }
}

/// The CRD as YAML, exactly what `crds/dljob.yaml` holds.
pub(crate) fn yaml() -> Result<String, serde_saphyr::SerializeError> {
    serde_saphyr::to_string(&definition())
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
    fn the_gang_is_every_pod_the_elastic_minimum_and_never_the_gated_launcher() {
        use crate::contract::Elastic;
        let f = |n| crate::frameworks::by_name(n).unwrap();
        let spec = |framework: &str, replicas: &str| {
            JobSpec::new(framework, Topology::parse(replicas).unwrap(), 1)
        };
        let tf = spec("tensorflow", "chief=1,worker=4,ps=2");
        assert_eq!(tf.gang_group("j", f("tensorflow")).min_member, 7);
        let mpi = spec("mpi", "launcher=1,worker=8");
        let g = mpi.gang_group("j", f("mpi"));
        assert_eq!((g.total, g.min_member), (9, 8));
        let mut elastic = spec("pytorch", "worker=6");
        elastic.elastic = Some(Elastic { min: 2, max: 8 });
        assert_eq!(elastic.gang_group("j", f("pytorch")).min_member, 2);
    }

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

    fn spec() -> JobSpec {
        JobSpec::new(
            "tensorflow",
            Topology::parse("chief=1,worker=2").unwrap(),
            2222,
        )
    }

    #[test]
    fn job_spec_is_serialized_as_the_annotations_write_it() {
        let mut s = spec();
        s.elastic = Some(Elastic { min: 2, max: 4 });
        s.policies.ttl_seconds_after_finished = Some(60);
        let v = serde_json::to_value(&s).unwrap();
        assert_eq!(
            v,
            serde_json::json!({
                "framework": "tensorflow", "replicas": "chief=1,worker=2", "port": 2222,
                "slots": "1", "elastic": "2:4", "restartPolicy": "ExitCode", "restartScope": "Pod", "backoffLimit": 3,
                "cleanPodPolicy": "Running", "ttlSecondsAfterFinished": 60, "gang": "none"
            })
        );
        assert_eq!(serde_json::from_value::<JobSpec>(v).unwrap(), s);
    }

    #[test]
    fn a_spec_written_before_slots_existed_still_reads() {
        let old = serde_json::json!({
            "framework": "mpi", "replicas": "launcher=1,worker=2", "port": 22,
            "restartPolicy": "Never", "backoffLimit": 0, "cleanPodPolicy": "All",
            "sshPath": "/home/mpi/.ssh"
        });
        let s: JobSpec = serde_json::from_value(old).unwrap();
        assert_eq!(s.slots, Slots::uniform(1));
        assert_eq!(s.elastic, None);
        assert_eq!(s.policies.restart, crate::contract::RestartPolicy::Never);
        assert_eq!(s.ssh_path.as_deref(), Some("/home/mpi/.ssh"));
    }

    #[test]
    fn a_spec_the_annotation_parser_refuses_does_not_read() {
        let bad = serde_json::json!({
            "framework": "mpi", "replicas": "launcher=0", "port": 22,
            "restartPolicy": "ExitCode", "backoffLimit": 0, "cleanPodPolicy": "All"
        });
        let e = serde_json::from_value::<JobSpec>(bad)
            .unwrap_err()
            .to_string();
        assert!(e.contains("count must be at least 1"), "{e}");
    }

    /// `differences` names fields by their annotation keys: every field of
    /// the spec is a job-wide annotation, and every job-wide annotation a
    /// field.
    #[test]
    fn every_spec_field_is_a_job_wide_annotation() {
        let mut s = spec();
        s.elastic = Some(Elastic { min: 1, max: 3 });
        s.policies.ttl_seconds_after_finished = Some(1);
        s.policies.active_deadline_seconds = Some(1);
        s.ssh_path = Some("/x".into());
        s.queue = Some("q".into());
        s.tensorboard = Some(TensorBoard::parse("logs:runs").unwrap());
        s.topology = Some(Placement::parse("example.com/rack").unwrap());
        s.compat = Some("kubeflow".into());
        s.mpi_implementation = Some(MpiImplementation::Intel);
        let Value::Object(fields) = serde_json::to_value(&s).unwrap() else {
            unreachable!()
        };
        let mut keys: Vec<String> = fields.keys().map(|f| annotation_key(f)).collect();
        keys.sort();
        let mut wide: Vec<&str> = crate::contract::JOB_WIDE_ANNOTATIONS.to_vec();
        wide.sort();
        assert_eq!(keys, wide);
    }

    #[test]
    fn differences_name_each_key_with_both_values() {
        let a = spec();
        assert_eq!(a.differences(&a.clone()), vec![]);
        let mut b = spec();
        b.port = 2300;
        b.policies.active_deadline_seconds = Some(600);
        assert_eq!(
            a.differences(&b),
            vec![
                (
                    "dljob.dev/active-deadline-seconds".to_owned(),
                    "unset".to_owned(),
                    "600".to_owned()
                ),
                (
                    "dljob.dev/port".to_owned(),
                    "2222".to_owned(),
                    "2300".to_owned()
                ),
            ]
        );
    }

    /// Every `format` in the CRD is one the API server knows (its
    /// OpenAPI formats): an unknown one draws a warning on every apply.
    #[test]
    fn every_format_is_one_the_api_server_knows() {
        fn formats(node: &Value, out: &mut Vec<String>) {
            match node {
                Value::Object(map) => {
                    if let Some(f) = map.get("format").and_then(Value::as_str) {
                        out.push(f.to_owned());
                    }
                    map.values().for_each(|v| formats(v, out));
                }
                Value::Array(items) => items.iter().for_each(|v| formats(v, out)),
                _ => {}
            }
        }
        let mut found = Vec::new();
        formats(&serde_json::to_value(definition()).unwrap(), &mut found);
        // k8s.io/apiextensions-apiserver's supported formats for integers
        // and strings that dljob's types use.
        let known = ["int32", "int64", "date-time"];
        let unknown: Vec<&String> = found
            .iter()
            .filter(|f| !known.contains(&f.as_str()))
            .collect();
        assert!(unknown.is_empty(), "{unknown:?}");
        assert!(found.iter().any(|f| f == "int64"), "{found:?}");
    }

    #[test]
    fn schema_is_structural() {
        let crd = serde_json::to_value(definition()).unwrap();
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

    /// A saved manifest is the recorded one by uid and digest; a record
    /// from before digests were kept goes by uid.
    #[test]
    fn a_saved_manifest_is_the_recorded_one_by_uid_and_content() {
        let saved = |uid: &str, digest: Option<&str>| SavedPod {
            name: "dljob-recreate-x".into(),
            uid: uid.into(),
            digest: digest.map(Into::into),
        };
        let recorded = saved("t", Some("sha256:a"));
        assert!(recorded.is(&saved("t", Some("sha256:a"))));
        assert!(!recorded.is(&saved("t", Some("sha256:b"))));
        assert!(!recorded.is(&saved("u", Some("sha256:a"))));
        assert!(saved("t", None).is(&saved("t", Some("sha256:b"))));
        assert!(!saved("t", None).is(&saved("u", Some("sha256:b"))));
    }
}
