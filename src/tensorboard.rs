//! TensorBoard per job (`dljob.dev/tensorboard: VOLUME:PATH`, ARCHITECTURE.md §7):
//! the volume a member names, whether TensorBoard — in a pod of its own,
//! which the reconciler runs ([`crate::reconciler::resources`]) — can read
//! what the training writes there, and how long it runs. Pure.
//!
//! The syntax is [`crate::contract::TensorBoard`]'s, checked where every
//! job-wide key is ([`crate::member`]). What is checked here needs the
//! whole pod spec, which the reconciler's trimmed copies of members do not
//! keep, so the validating webhook and `dljob validate` check it
//! ([`crate::validate::validate`]), never the member index.

use std::collections::BTreeMap;
use std::time::Duration;

use k8s_openapi::api::apps::v1::Deployment;
use k8s_openapi::api::core::v1::Service;
use k8s_openapi::jiff::{SignedDuration, Timestamp};
use kube::api::ObjectMeta;
use serde_json::{json, Value};

use crate::config::TensorBoardConfig;
use crate::contract::{self as c, CleanPodPolicy};
use crate::crd::DLJob;
use crate::member::{self, MemberSpec};
use crate::object::{self, at, Kind};

/// Volume sources that are never storage a TensorBoard pod shares with the
/// members, each with why: what one pod writes there no other pod sees,
/// or nobody writes there at all.
const NOT_SHARED: &[(&str, &str)] = &[
    ("emptyDir", "an emptyDir, which each pod has for itself"),
    (
        "hostPath",
        "a hostPath, a directory of whichever node each pod runs on",
    ),
    (
        "ephemeral",
        "an ephemeral volume, a claim made for each pod and deleted with it",
    ),
    (
        "configMap",
        "a configMap volume, read-only and filled from the ConfigMap",
    ),
    (
        "secret",
        "a secret volume, read-only and filled from the Secret",
    ),
    (
        "downwardAPI",
        "a downwardAPI volume, which holds the pod's own fields",
    ),
    (
        "projected",
        "a projected volume, read-only and filled by the kubelet",
    ),
    ("gitRepo", "a gitRepo volume, a clone made for each pod"),
    (
        "image",
        "an image volume, the read-only content of an image",
    ),
];

/// The fix every refusal of a volume names.
const USE_SHARED: &str = "use storage every member and TensorBoard can mount: a ReadWriteMany persistentVolumeClaim, nfs, cephfs or a CSI driver's shared volume";

/// The volume named `name` in a member's pod (or pod template) spec.
pub(crate) fn volume<'v>(kind: Kind, object: &'v Value, name: &str) -> Option<&'v Value> {
    at(object, kind.pod_path())?
        .get("spec")?
        .get("volumes")?
        .as_array()?
        .iter()
        .find(|v| object::name_of(v) == name)
}

/// The kind of a volume's source: its one key besides `name` (the API
/// server makes a volume without a source an emptyDir).
fn source_kind(volume: &Value) -> &str {
    volume
        .as_object()
        .and_then(|v| v.keys().find(|k| *k != "name"))
        .map_or("emptyDir", String::as_str)
}

/// Why `volume` (a pod spec's volume) is not storage pods share, e.g. "an
/// emptyDir, which each pod has for itself"; None when it may be.
pub(crate) fn not_shared(volume: &Value) -> Option<&'static str> {
    let kind = source_kind(volume);
    NOT_SHARED
        .iter()
        .find(|(k, _)| *k == kind)
        .map(|(_, why)| *why)
}

/// The name of job `job`'s TensorBoard Deployment and Service.
pub(crate) fn name(job: &str) -> String {
    format!("{job}-tensorboard")
}

/// Whether the job's TensorBoard runs, and when to look again. It runs
/// while the job does. Once the job finished (`finished`: when), it runs
/// on for the config's `ttl` seconds when one is set; without one it stops
/// with the job's other running pods — unless the clean-pod policy is
/// `None`, which leaves everything running.
pub(crate) fn runs(
    finished: Option<Timestamp>,
    clean_pod: CleanPodPolicy,
    ttl: Option<u32>,
    now: Timestamp,
) -> (bool, Option<Duration>) {
    let Some(finished) = finished else {
        return (true, None);
    };
    match ttl {
        Some(seconds) => {
            let left = finished
                .checked_add(SignedDuration::from_secs(i64::from(seconds)))
                .map_or(SignedDuration::ZERO, |end| now.duration_until(end));
            match Duration::try_from(left) {
                Ok(left) if !left.is_zero() => (true, Some(left)),
                _ => (false, None),
            }
        }
        None => (clean_pod == CleanPodPolicy::None, None),
    }
}

/// Why `m`'s pod cannot give its TensorBoard the logs: the named volume
/// is missing, comes from a StatefulSet's `volumeClaimTemplates` (a claim
/// per pod), is a kind each pod has for itself, or is not mounted in the
/// framework container. Empty when the job has no TensorBoard or the
/// volume may be shared — a persistentVolumeClaim's access mode, which
/// decides whether pods on several nodes can mount it, is not in the pod
/// spec.
pub(crate) fn check(m: &MemberSpec, object: &Value) -> Vec<String> {
    let Some(tb) = &m.spec.tensorboard else {
        return Vec::new();
    };
    let name = tb.volume.as_str();
    let head = format!("{} \"{tb}\"", c::TENSORBOARD);
    let claim_templates = at(object, &["spec", "volumeClaimTemplates"])
        .and_then(Value::as_array)
        .map(Vec::as_slice)
        .unwrap_or_default();
    if m.kind == Kind::StatefulSet
        && claim_templates
            .iter()
            .any(|t| object::str_at(t, &["metadata", "name"]) == Some(name))
    {
        return vec![format!(
            "{head}: volume \"{name}\" comes from the StatefulSet's volumeClaimTemplates, which give each pod a claim of its own: TensorBoard, in a pod of its own, would see none of them; {USE_SHARED}"
        )];
    }
    let pod = at(object, m.kind.pod_path());
    let Some(volume) = volume(m.kind, object, name) else {
        let names: Vec<&str> = pod
            .and_then(|p| p.get("spec")?.get("volumes")?.as_array())
            .map(|vs| vs.iter().map(object::name_of).collect())
            .unwrap_or_default();
        let have = if names.is_empty() {
            "it has none".to_owned()
        } else {
            format!("its volumes are {}", names.join(", "))
        };
        let pod = if m.kind == Kind::Pod {
            "the pod"
        } else {
            "the pod template"
        };
        return vec![format!(
            "{head}: {pod} has no volume \"{name}\" ({have}): add the shared volume the training writes its logs to, or name it"
        )];
    };
    let size = volume.to_string().len();
    if size > c::MAX_TENSORBOARD_VOLUME {
        return vec![format!(
            "{head}: volume \"{name}\" is {size} bytes as JSON; dljob records at most {} of it on the DLJob for TensorBoard to mount: give the shared volume a shorter source (a persistentVolumeClaim names it in a line)",
            c::MAX_TENSORBOARD_VOLUME
        )];
    }
    if let Some(why) = not_shared(volume) {
        return vec![format!(
            "{head}: volume \"{name}\" is {why}: TensorBoard, in a pod of its own, would not see what the training writes there; {USE_SHARED}"
        )];
    }
    let Some(pod) = pod else {
        return Vec::new();
    };
    let Some(i) = member::framework_container(m, pod) else {
        return Vec::new(); // an unknown dljob.dev/container is refused already
    };
    let container = &object::containers(&pod["spec"])[i];
    let mounted = container
        .get("volumeMounts")
        .and_then(Value::as_array)
        .is_some_and(|ms| ms.iter().any(|mount| object::name_of(mount) == name));
    if mounted {
        Vec::new()
    } else {
        vec![format!(
            "{head}: the framework container \"{}\" does not mount volume \"{name}\": mount it where the training writes its logs",
            object::name_of(container)
        )]
    }
}

/// The volume a member's `dljob.dev/tensorboard` names, from the first of
/// `metas` that has the annotation (a workload's own, then its template's).
pub(crate) fn annotated_volume(metas: [Option<&ObjectMeta>; 2]) -> Option<String> {
    metas.into_iter().flatten().find_map(|m| {
        let value = m.annotations.as_ref()?.get(c::TENSORBOARD)?;
        Some(value.split_once(':')?.0.to_owned())
    })
}

/// Records on the DLJob the volume its TensorBoard mounts (`volume`, from
/// the pod spec of the member the DLJob is made from), in the annotation
/// [`c::TENSORBOARD_VOLUME`]: the DLJob then holds all its TensorBoard
/// needs for its whole life, even once the clean-pod policy removed the
/// members, and the volume is fixed at first sight, as the spec is.
/// Nothing is recorded for a job without a TensorBoard.
///
/// A volume over [`c::MAX_TENSORBOARD_VOLUME`] is not recorded (admission
/// refuses such a member; the caches drop its volume): the DLJob is then
/// created without it, and its TensorBoard reports the volume missing,
/// rather than a create the API server refuses for its size, retried
/// forever.
pub(crate) fn record_volume(job: &mut DLJob, volume: &Value) {
    let text = volume.to_string();
    if job.spec.tensorboard.is_some() && text.len() <= c::MAX_TENSORBOARD_VOLUME {
        job.metadata
            .annotations
            .get_or_insert_with(BTreeMap::new)
            .insert(c::TENSORBOARD_VOLUME.to_owned(), text);
    }
}

/// The volume the job's TensorBoard mounts, as [`record_volume`] recorded it.
/// `Ok(None)`: the job has no TensorBoard. `Err`: it has one but no usable
/// volume, and why — the annotation is missing (a DLJob created before
/// dljob recorded it, or from a member without the volume: refused by the
/// webhook, so only where it did not run), unreadable, or edited into a
/// volume each pod has for itself (the reconciler mounts only what the
/// webhook would have let the members share).
pub(crate) fn recorded_volume(job: &DLJob) -> Result<Option<Value>, String> {
    let Some(tb) = &job.spec.tensorboard else {
        return Ok(None);
    };
    let recorded = job
        .metadata
        .annotations
        .as_ref()
        .and_then(|a| a.get(c::TENSORBOARD_VOLUME));
    let Some(text) = recorded else {
        return Err(format!(
            "the DLJob has no {} annotation: the reconciler records volume \"{}\" there when it creates the DLJob, if its JSON is at most {} bytes; delete the DLJob to have it created again",
            c::TENSORBOARD_VOLUME,
            tb.volume,
            c::MAX_TENSORBOARD_VOLUME
        ));
    };
    let volume: Value = serde_json::from_str(text)
        .ok()
        .filter(Value::is_object)
        .ok_or_else(|| format!("annotation {} is not a volume", c::TENSORBOARD_VOLUME))?;
    if let Some(why) = not_shared(&volume) {
        return Err(format!(
            "annotation {}: the volume is {why}",
            c::TENSORBOARD_VOLUME
        ));
    }
    Ok(Some(volume))
}

/// TensorBoard's port, in its container and on its Service.
pub(crate) const PORT: u16 = 6006;
/// Where TensorBoard's container mounts the log volume (read-only).
pub(crate) const LOGS: &str = "/logs";
/// The user TensorBoard runs as: `nobody`, which the logs must be readable
/// by.
pub(crate) const USER: i64 = 65534;

/// The job's TensorBoard: a Deployment `<job>-tensorboard` (one pod by
/// default; its `replicas` are not declared while it runs, so a `kubectl
/// scale` of it stands, and declared 0 once it stopped, see [`job_runs`])
/// and a ClusterIP Service
/// of the same name on port 6006, both owned by the DLJob. None when the
/// job has no TensorBoard, no usable volume ([`recorded_volume`]) or no
/// uid yet.
///
/// The pod is not a member: it is labelled [`c::TENSORBOARD_OF`], not
/// `dljob.dev/job`, so neither the webhook, the member watches nor the
/// job's headless Service select it. The Deployment and Service carry
/// `dljob.dev/job` as every owned object does (the owned-object watch
/// finds the Service by it). The pod mounts the volume read-only, runs as
/// `nobody` with every capability dropped, no privilege escalation, the
/// runtime's seccomp profile and a read-only root filesystem (TensorBoard
/// writes only to `/tmp`, an emptyDir), and no service account token.
pub fn objects(
    job: &DLJob,
    config: &TensorBoardConfig,
    now: Timestamp,
) -> Option<(Deployment, Service)> {
    let tb = job.spec.tensorboard.as_ref()?;
    let mut logs = recorded_volume(job).ok()??;
    logs["name"] = json!("logs");
    let job_name = job.metadata.name.clone()?;
    let name = name(&job_name);
    let (running, _) = job_runs(job, config, now);
    let mut meta = job.owned_meta(name.clone())?;
    meta.labels
        .get_or_insert_with(BTreeMap::new)
        .insert(c::TENSORBOARD_OF.to_owned(), job_name.clone());
    let selector = json!({c::TENSORBOARD_OF: job_name});
    let deployment = json!({
        "apiVersion": "apps/v1", "kind": "Deployment",
        "metadata": meta,
        "spec": {
            // Left to the Deployment (1 when created, then whatever
            // `kubectl scale` says) while TensorBoard runs; 0 once it stops.
            "replicas": (!running).then_some(0),
            "strategy": {"type": "Recreate"},
            "selector": {"matchLabels": selector},
            "template": {
                "metadata": {"labels": selector},
                "spec": {
                    "automountServiceAccountToken": false,
                    "enableServiceLinks": false,
                    "securityContext": {
                        "runAsNonRoot": true,
                        "runAsUser": USER,
                        "runAsGroup": USER,
                        "seccompProfile": {"type": "RuntimeDefault"}
                    },
                    "containers": [{
                        "name": "tensorboard",
                        "image": config.image,
                        "command": ["tensorboard"],
                        "args": [
                            format!("--logdir={LOGS}/{}", tb.path),
                            "--bind_all",
                            format!("--port={PORT}")
                        ],
                        "env": [{"name": "HOME", "value": "/tmp"}],
                        "ports": [{"name": "tensorboard", "containerPort": PORT, "protocol": "TCP"}],
                        "readinessProbe": {"httpGet": {"path": "/", "port": "tensorboard"}},
                        "resources": {
                            "requests": {"cpu": "100m", "memory": "256Mi"},
                            "limits": {"cpu": "1", "memory": "2Gi"}
                        },
                        "securityContext": {
                            "allowPrivilegeEscalation": false,
                            "readOnlyRootFilesystem": true,
                            "capabilities": {"drop": ["ALL"]}
                        },
                        "volumeMounts": [
                            {"name": "logs", "mountPath": LOGS, "readOnly": true},
                            {"name": "tmp", "mountPath": "/tmp"}
                        ]
                    }],
                    "volumes": [logs, {"name": "tmp", "emptyDir": {"sizeLimit": "1Gi"}}]
                }
            }
        }
    });
    let service = json!({
        "apiVersion": "v1", "kind": "Service",
        "metadata": meta,
        "spec": {
            "type": "ClusterIP",
            "selector": selector,
            "ports": [{"name": "tensorboard", "port": PORT, "targetPort": "tensorboard", "protocol": "TCP"}]
        }
    });
    Some((
        serde_json::from_value(deployment).ok()?,
        serde_json::from_value(service).ok()?,
    ))
}

/// Whether the job's TensorBoard runs, and when that changes next (a
/// finished job's TensorBoard running on for its TTL): see
/// [`runs`]. The job's status is the one the previous
/// reconcile wrote; writing a finished phase triggers the next.
pub(crate) fn job_runs(
    job: &DLJob,
    config: &TensorBoardConfig,
    now: Timestamp,
) -> (bool, Option<std::time::Duration>) {
    let finished = job
        .status
        .as_ref()
        .filter(|s| s.phase.is_finished())
        .map(|s| s.completion_time.as_ref().map_or(now, |t| t.0));
    runs(
        finished,
        job.spec.policies.clean_pod,
        config.ttl_seconds_after_finished,
        now,
    )
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::contract::{TensorBoard, Topology};
    use crate::crd::{DLJobStatus, JobSpec, Phase};
    use k8s_openapi::apimachinery::pkg::apis::meta::v1::Time;

    fn t(second: i64) -> Timestamp {
        Timestamp::from_second(1_700_000_000 + second).unwrap()
    }

    #[test]
    fn tensorboard_runs_with_the_job_then_as_its_ttl_or_clean_pod_policy_says() {
        use CleanPodPolicy::{All, None as Leave, Running};
        // While the job runs, whatever the policy.
        for policy in [Running, All, Leave] {
            assert_eq!(runs(None, policy, None, t(0)), (true, None));
            assert_eq!(runs(None, policy, Some(60), t(0)), (true, None));
        }
        // Finished without a TTL: stopped, unless the policy leaves all.
        assert_eq!(runs(Some(t(0)), Running, None, t(0)), (false, None));
        assert_eq!(runs(Some(t(0)), All, None, t(0)), (false, None));
        assert_eq!(runs(Some(t(0)), Leave, None, t(0)), (true, None));
        // A TTL of its own: runs that long after the finish, then stops.
        assert_eq!(
            runs(Some(t(0)), Running, Some(60), t(15)),
            (true, Some(Duration::from_secs(45)))
        );
        assert_eq!(runs(Some(t(0)), Leave, Some(60), t(60)), (false, None));
        assert_eq!(runs(Some(t(0)), Running, Some(60), t(600)), (false, None));
    }

    #[test]
    fn a_volume_is_shared_unless_each_pod_has_its_own() {
        let v = |source: Value| {
            let mut v = source;
            v["name"] = "logs".into();
            not_shared(&v)
        };
        assert_eq!(
            v(serde_json::json!({"emptyDir": {}})),
            Some("an emptyDir, which each pod has for itself")
        );
        assert_eq!(
            v(serde_json::json!({})),
            Some("an emptyDir, which each pod has for itself")
        );
        assert_eq!(
            v(serde_json::json!({"nfs": {"server": "s", "path": "/"}})),
            None
        );
        assert_eq!(
            v(serde_json::json!({"persistentVolumeClaim": {"claimName": "c"}})),
            None
        );
        assert_eq!(name("mnist"), "mnist-tensorboard");
    }

    /// A pytorch job with `dljob.dev/tensorboard: logs:runs/mnist` whose
    /// volume `logs` is an nfs export, as the reconciler creates it.
    fn with_tensorboard() -> DLJob {
        let mut spec = JobSpec::new(
            "pytorch",
            Topology::parse("master=1,worker=2").unwrap(),
            23456,
        );
        spec.tensorboard = Some(TensorBoard::parse("logs:runs/mnist").unwrap());
        let mut j = DLJob::new("mnist", spec);
        j.metadata.namespace = Some("ml".into());
        j.metadata.uid = Some("u1".into());
        record_volume(
            &mut j,
            &json!({"name": "logs", "nfs": {"server": "nfs.example.internal", "path": "/exports/ml"}}),
        );
        j
    }

    #[test]
    fn tensorboard_is_a_restricted_deployment_and_a_service_owned_by_the_job() {
        let j = with_tensorboard();
        let (deployment, service) = objects(&j, &TensorBoardConfig::default(), t(0)).unwrap();
        let meta = json!({
            "name": "mnist-tensorboard", "namespace": "ml",
            "labels": {"dljob.dev/job": "mnist", "dljob.dev/tensorboard-of": "mnist"},
            "ownerReferences": [{"apiVersion": "dljob.dev/v1alpha1", "kind": "DLJob", "name": "mnist", "uid": "u1", "controller": true}]
        });
        assert_eq!(
            serde_json::to_value(&deployment).unwrap(),
            json!({
                "apiVersion": "apps/v1", "kind": "Deployment",
                "metadata": meta,
                "spec": {
                    "strategy": {"type": "Recreate"},
                    "selector": {"matchLabels": {"dljob.dev/tensorboard-of": "mnist"}},
                    "template": {
                        "metadata": {"labels": {"dljob.dev/tensorboard-of": "mnist"}},
                        "spec": {
                            "automountServiceAccountToken": false,
                            "enableServiceLinks": false,
                            "securityContext": {
                                "runAsNonRoot": true, "runAsUser": 65534, "runAsGroup": 65534,
                                "seccompProfile": {"type": "RuntimeDefault"}
                            },
                            "containers": [{
                                "name": "tensorboard",
                                "image": "tensorflow/tensorflow:2.20.0",
                                "command": ["tensorboard"],
                                "args": ["--logdir=/logs/runs/mnist", "--bind_all", "--port=6006"],
                                "env": [{"name": "HOME", "value": "/tmp"}],
                                "ports": [{"name": "tensorboard", "containerPort": 6006, "protocol": "TCP"}],
                                "readinessProbe": {"httpGet": {"path": "/", "port": "tensorboard"}},
                                "resources": {
                                    "requests": {"cpu": "100m", "memory": "256Mi"},
                                    "limits": {"cpu": "1", "memory": "2Gi"}
                                },
                                "securityContext": {
                                    "allowPrivilegeEscalation": false,
                                    "readOnlyRootFilesystem": true,
                                    "capabilities": {"drop": ["ALL"]}
                                },
                                "volumeMounts": [
                                    {"name": "logs", "mountPath": "/logs", "readOnly": true},
                                    {"name": "tmp", "mountPath": "/tmp"}
                                ]
                            }],
                            "volumes": [
                                {"name": "logs", "nfs": {"server": "nfs.example.internal", "path": "/exports/ml"}},
                                {"name": "tmp", "emptyDir": {"sizeLimit": "1Gi"}}
                            ]
                        }
                    }
                }
            })
        );
        assert_eq!(
            serde_json::to_value(&service).unwrap(),
            json!({
                "apiVersion": "v1", "kind": "Service",
                "metadata": meta,
                "spec": {
                    "type": "ClusterIP",
                    "selector": {"dljob.dev/tensorboard-of": "mnist"},
                    "ports": [{"name": "tensorboard", "port": 6006, "targetPort": "tensorboard", "protocol": "TCP"}]
                }
            })
        );
    }

    #[test]
    fn tensorboard_takes_the_configured_image_and_stops_with_the_job() {
        let config = TensorBoardConfig {
            image: "registry.local/tensorboard:2.20".into(),
            ttl_seconds_after_finished: None,
        };
        // Running: the replicas are the Deployment's (its default 1, or a
        // `kubectl scale`), not declared; stopped: declared 0.
        let replicas = |j: &DLJob, config: &TensorBoardConfig, now| {
            let (d, _) = objects(j, config, now).unwrap();
            d.spec.replicas
        };
        let mut j = with_tensorboard();
        let (d, _) = objects(&j, &config, t(0)).unwrap();
        let pod = d.spec.template.spec.unwrap();
        assert_eq!(
            pod.containers[0].image.as_deref(),
            Some("registry.local/tensorboard:2.20")
        );
        // Finished: stopped, but the objects stay (the Service, the
        // Deployment at 0 replicas) until the DLJob goes.
        j.status = Some(DLJobStatus {
            phase: Phase::Succeeded,
            completion_time: Some(Time(t(0))),
            ..DLJobStatus::default()
        });
        assert_eq!(replicas(&j, &config, t(1)), Some(0));
        assert_eq!(job_runs(&j, &config, t(1)), (false, None));
        // Unless the clean-pod policy leaves everything running...
        j.spec.policies.clean_pod = CleanPodPolicy::None;
        assert_eq!(replicas(&j, &config, t(1)), None);
        // ... or its own TTL keeps it: until then, then it stops.
        j.spec.policies.clean_pod = CleanPodPolicy::All;
        let ttl = TensorBoardConfig {
            ttl_seconds_after_finished: Some(600),
            ..config
        };
        assert_eq!(replicas(&j, &ttl, t(100)), None);
        assert_eq!(
            job_runs(&j, &ttl, t(100)),
            (true, Some(std::time::Duration::from_secs(500)))
        );
        assert_eq!(replicas(&j, &ttl, t(600)), Some(0));
    }

    #[test]
    fn no_tensorboard_without_a_usable_recorded_volume() {
        let mut j = with_tensorboard();
        let annotations = j.metadata.annotations.as_mut().unwrap();
        annotations.insert(
            c::TENSORBOARD_VOLUME.into(),
            r#"{"name":"logs","hostPath":{"path":"/"}}"#.into(),
        );
        assert_eq!(
            recorded_volume(&j),
            Err("annotation dljob.dev/tensorboard-volume: the volume is a hostPath, a directory of whichever node each pod runs on".to_owned())
        );
        assert!(objects(&j, &TensorBoardConfig::default(), t(0)).is_none());
        j.metadata
            .annotations
            .as_mut()
            .unwrap()
            .insert(c::TENSORBOARD_VOLUME.into(), "logs".into());
        assert_eq!(
            recorded_volume(&j),
            Err("annotation dljob.dev/tensorboard-volume is not a volume".to_owned())
        );
        j.metadata.annotations = None;
        assert_eq!(
            recorded_volume(&j),
            Err("the DLJob has no dljob.dev/tensorboard-volume annotation: the reconciler records volume \"logs\" there when it creates the DLJob, if its JSON is at most 8192 bytes; delete the DLJob to have it created again".to_owned())
        );
    }

    /// A volume too big to record is not recorded: the DLJob's create is
    /// not refused for its size (annotations may hold 256 KiB in all), and
    /// the job's TensorBoard reports the volume missing.
    #[test]
    fn a_volume_over_8_kib_is_not_recorded() {
        let mut j = with_tensorboard();
        j.metadata.annotations = None;
        let path = format!("/{}", "l".repeat(300_000));
        record_volume(
            &mut j,
            &json!({"name": "logs", "nfs": {"server": "nfs", "path": path}}),
        );
        assert_eq!(j.metadata.annotations, None);
        assert!(recorded_volume(&j)
            .unwrap_err()
            .contains("if its JSON is at most 8192 bytes"));
        let fits = json!({"name": "logs", "nfs": {"server": "nfs", "path": "/exports"}});
        record_volume(&mut j, &fits);
        assert_eq!(recorded_volume(&j), Ok(Some(fits)));
    }
}
