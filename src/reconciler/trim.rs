//! Trimming watched members before they are cached: of each object only
//! what the member index, the status function and the PodGroup's
//! `minResources` read. Pure.

use k8s_openapi::api::apps::v1::StatefulSet;
use k8s_openapi::api::batch::v1::Job;
use k8s_openapi::api::core::v1::{
    Container, ContainerStatus, Pod, PodSpec, PodStatus, Service, ServiceSpec,
};
use kube::api::ObjectMeta;
use serde_json::Value;

use crate::contract as c;
use crate::crd::DLJob;
use crate::member;

/// Whether a TensorBoard volume is one dljob records and caches (see
/// [`c::MAX_TENSORBOARD_VOLUME`]).
fn within_record(volume: &k8s_openapi::api::core::v1::Volume) -> bool {
    serde_json::to_vec(volume).is_ok_and(|v| v.len() <= c::MAX_TENSORBOARD_VOLUME)
}

/// Of an object's metadata only what dljob reads: no managedFields and
/// finalizers, only the controller owner reference, and of the labels and
/// annotations only those [`member_key`] names, none longer than
/// [`c::MAX_VALUE`] (admission refuses longer ones; one that got past it,
/// on an object made before dljob ran, is dropped). Whatever its owner
/// wrote, a cached object's metadata is then its name, uid and a few dozen
/// short values.
fn trim_meta(meta: &mut ObjectMeta) {
    meta.managed_fields = None;
    meta.finalizers = None;
    for map in [meta.labels.as_mut(), meta.annotations.as_mut()]
        .into_iter()
        .flatten()
    {
        map.retain(|k, v| member_key(k) && v.len() <= c::MAX_VALUE);
    }
    if let Some(refs) = meta.owner_references.as_mut() {
        refs.retain(|r| r.controller == Some(true));
    }
}

/// Only the container names (to find the framework container), and the
/// volume named `tensorboard` (see [`Entry::tensorboard_volume`]).
fn names_only(spec: &mut PodSpec, tensorboard: Option<&str>) {
    names_and(spec, false, tensorboard);
}

/// A workload's pod template: the container names and, where a gang
/// scheduler's PodGroup wants `minResources`, their resources; and the
/// volume named `tensorboard`.
fn template_trim(spec: &mut PodSpec, tensorboard: Option<&str>) {
    names_and(spec, true, tensorboard);
}

fn names_and(spec: &mut PodSpec, resources: bool, tensorboard: Option<&str>) {
    for container in &mut spec.containers {
        *container = Container {
            name: std::mem::take(&mut container.name),
            resources: if resources {
                container.resources.take()
            } else {
                None
            },
            ..Container::default()
        };
    }
    let restart_policy = spec.restart_policy.take();
    let gates = spec.scheduling_gates.take().map(|gates| {
        gates
            .into_iter()
            .filter(|g| g.name == c::WORKERS_READY_GATE)
            .collect::<Vec<_>>()
    });
    let volumes = tensorboard.and_then(|name| {
        let kept: Vec<_> = spec
            .volumes
            .take()?
            .into_iter()
            .filter(|v| v.name == name && within_record(v))
            .collect();
        (!kept.is_empty()).then_some(kept)
    });
    // The claims' names: a container using one is the framework container
    // when the rule runs again on the trimmed pod.
    let resource_claims = spec.resource_claims.take().map(|claims| {
        claims
            .into_iter()
            .map(|c| k8s_openapi::api::core::v1::PodResourceClaim {
                name: c.name,
                ..Default::default()
            })
            .collect::<Vec<_>>()
    });
    *spec = PodSpec {
        containers: std::mem::take(&mut spec.containers),
        resource_claims: resource_claims.filter(|c| !c.is_empty()),
        restart_policy,
        scheduling_gates: gates.filter(|g| !g.is_empty()),
        volumes,
        ..PodSpec::default()
    };
}

/// Trims a member pod before it is indexed: no managedFields, no hostfile
/// annotation, only the container statuses' states (and the status of
/// dljob's name wait where it went wrong), and of the metadata
/// only what makes it a member — the `dljob.dev/*` labels and annotations
/// and the ones Kubernetes gives its index and default container in.
///
/// Of the spec it keeps the container names, restart policy, dljob's
/// scheduling gate and the TensorBoard volume. A pod owned by a workload
/// keeps only its framework container and that container's status (its
/// requests are read from the workload); a bare pod keeps every
/// container's resources (a PodGroup's `minResources` sums them). Nothing
/// else is read back: a bare pod to recreate is read from the API server
/// then ([`recreate_manifest`]).
pub fn trim_pod(pod: &mut Pod) {
    trim_meta(&mut pod.metadata);
    let bare = !pod
        .metadata
        .owner_references
        .as_ref()
        .is_some_and(|refs| refs.iter().any(|r| r.controller == Some(true)));
    let tensorboard = crate::tensorboard::annotated_volume([Some(&pod.metadata), None]);
    let mut framework = None;
    if let Some(spec) = pod.spec.as_mut() {
        let chosen = framework_container_of(&pod.metadata, spec);
        if bare {
            framework = chosen.map(|i| spec.containers[i].name.clone());
            names_and(spec, true, tensorboard.as_deref());
        } else {
            if let Some(i) = chosen {
                let kept = spec.containers.swap_remove(i);
                framework = Some(kept.name.clone());
                spec.containers = vec![kept];
            }
            names_only(spec, tensorboard.as_deref());
        }
    }
    if let Some(status) = pod.status.take() {
        pod.status = Some(PodStatus {
            phase: status.phase,
            reason: status.reason,
            // dljob's name wait, only where it went wrong
            // (`wait_names::problem`), its message cut.
            init_container_statuses: status
                .init_container_statuses
                .into_iter()
                .flatten()
                .find(|s| s.name == c::WAIT_FOR_NAMES_CONTAINER)
                .and_then(trimmed_name_wait)
                .map(|s| vec![s]),
            container_statuses: status.container_statuses.map(|list| {
                list.into_iter()
                    .filter(|s| framework.as_ref().is_none_or(|f| &s.name == f))
                    .map(|s| ContainerStatus {
                        name: s.name,
                        state: s.state,
                        last_state: s.last_state,
                        restart_count: s.restart_count,
                        ready: s.ready,
                        ..ContainerStatus::default()
                    })
                    .collect()
            }),
            ..PodStatus::default()
        });
    }
}

/// Longest part of a container's message dljob keeps and repeats (a
/// termination message may be 4 KiB).
pub(crate) const MAX_NAME_WAIT_MESSAGE: usize = 300;

/// The status of dljob's name wait ([`c::WAIT_FOR_NAMES_CONTAINER`]) as
/// the cache keeps it: only when it went wrong (it gave up, cannot start,
/// or exited other than 0), its image, state and failed last run alone,
/// the termination messages and image cut to [`MAX_NAME_WAIT_MESSAGE`] and
/// the kubelet's waiting messages dropped.
fn trimmed_name_wait(status: ContainerStatus) -> Option<ContainerStatus> {
    let cut = |m: &mut String| {
        if m.len() > MAX_NAME_WAIT_MESSAGE {
            let mut end = MAX_NAME_WAIT_MESSAGE;
            while !m.is_char_boundary(end) {
                end -= 1;
            }
            m.truncate(end);
            m.push('…');
        }
    };
    let trim_state = |state: &mut k8s_openapi::api::core::v1::ContainerState| {
        if let Some(t) = state.terminated.as_mut() {
            t.message.as_mut().map(cut);
            t.container_id = None;
            t.started_at = None;
            t.finished_at = None;
        }
        if let Some(w) = state.waiting.as_mut() {
            w.message = None; // the kubelet's, which changes as it retries
        }
        state.running = None;
    };
    let mut state = status.state?;
    trim_state(&mut state);
    // Its last run, where it failed: a restarted wait's reason while it
    // runs or backs off again.
    let last_state = status
        .last_state
        .filter(|s| s.terminated.as_ref().is_some_and(|t| t.exit_code != 0))
        .map(|mut s| {
            trim_state(&mut s);
            s
        });
    let mut image = status.image;
    cut(&mut image);
    let kept = ContainerStatus {
        name: status.name,
        image,
        state: Some(state),
        last_state,
        ..ContainerStatus::default()
    };
    crate::wait_names::problem(&kept).is_some().then_some(kept)
}

/// Whether a label or annotation of a member is read by [`member::parse`]
/// or [`member::framework_container`]: dljob's own (but the hostfile,
/// which is big and which the webhook writes again) and the ones
/// Kubernetes gives a pod's index and default container in.
fn member_key(key: &str) -> bool {
    (c::known_key(key) && key != c::HOSTFILE)
        || key == c::K8S_POD_INDEX
        || key == c::K8S_JOB_COMPLETION_INDEX
        || key == c::K8S_DEFAULT_CONTAINER
}

/// The framework container, chosen by [`member::pick_container`] from the
/// pod's own annotations, container names and resources; None when the
/// chosen container does not exist.
fn framework_container_of(meta: &ObjectMeta, spec: &PodSpec) -> Option<usize> {
    let annotation = |k: &str| meta.annotations.as_ref()?.get(k).map(String::as_str);
    let pod_claims: Vec<&str> = spec
        .resource_claims
        .iter()
        .flatten()
        .map(|c| c.name.as_str())
        .collect();
    let facts: Vec<member::ContainerFacts<'_>> = spec
        .containers
        .iter()
        .map(|c| member::ContainerFacts {
            name: &c.name,
            accelerator: c.resources.as_ref().is_some_and(|r| {
                let device = [r.limits.as_ref(), r.requests.as_ref()]
                    .into_iter()
                    .flatten()
                    .flat_map(|m| m.iter())
                    .any(|(k, q)| crate::object::is_device_request(k, &Value::String(q.0.clone())));
                // A DRA claim of the pod (a GPU from a ResourceClaimTemplate).
                let claim = r
                    .claims
                    .iter()
                    .flatten()
                    .any(|c| pod_claims.contains(&c.name.as_str()));
                device || claim
            }),
        })
        .collect();
    member::pick_container(
        annotation(c::CONTAINER),
        annotation(c::K8S_DEFAULT_CONTAINER),
        annotation(c::FRAMEWORK).unwrap_or(""),
        &facts,
    )
    .map(|(i, _)| i)
}

/// Trims a member StatefulSet: metadata, replicas, template metadata,
/// container names and the TensorBoard volume.
pub fn trim_statefulset(sts: &mut StatefulSet) {
    trim_meta(&mut sts.metadata);
    sts.status = None;
    let spec = &mut sts.spec;
    if let Some(m) = spec.template.metadata.as_mut() {
        trim_meta(m);
    }
    let tensorboard = crate::tensorboard::annotated_volume([
        Some(&sts.metadata),
        spec.template.metadata.as_ref(),
    ]);
    if let Some(s) = spec.template.spec.as_mut() {
        template_trim(s, tensorboard.as_deref());
    }
    spec.volume_claim_templates = None;
}

/// Trims a member Job: metadata, completions, suspend, template metadata,
/// container names, the TensorBoard volume and whether it finished.
pub fn trim_job(job: &mut Job) {
    trim_meta(&mut job.metadata);
    if let Some(spec) = job.spec.as_mut() {
        if let Some(m) = spec.template.metadata.as_mut() {
            trim_meta(m);
        }
        let tensorboard = crate::tensorboard::annotated_volume([
            Some(&job.metadata),
            spec.template.metadata.as_ref(),
        ]);
        if let Some(s) = spec.template.spec.as_mut() {
            template_trim(s, tensorboard.as_deref());
        }
    }
    if let Some(status) = job.status.take() {
        job.status = Some(k8s_openapi::api::batch::v1::JobStatus {
            completion_time: status.completion_time,
            conditions: status.conditions.map(|cs| {
                cs.into_iter()
                    .filter(|c| {
                        c.status == "True" && (c.type_ == "Complete" || c.type_ == "Failed")
                    })
                    .map(|c| k8s_openapi::api::batch::v1::JobCondition {
                        type_: c.type_,
                        status: c.status,
                        ..Default::default()
                    })
                    .collect()
            }),
            ..Default::default()
        });
    }
}

/// The port names dljob gives its Services: the job's headless one and
/// its TensorBoard's.
const SERVICE_PORTS: [&str; 2] = [crate::mutate::PORT_NAME, "tensorboard"];

/// Trims a Service labelled with a job before it is cached: of its
/// metadata what [`trim_meta`] keeps (and the TensorBoard's
/// `dljob.dev/tensorboard-of`), of its spec only what dljob's Services
/// declare (`resources::service`, `tensorboard::objects`), which is all
/// the drift check compares — the type, the headless address,
/// `publishNotReadyAddresses`, the selector's dljob keys and the ports
/// dljob names. Whoever labels a Service, dljob holds at most that of it
/// (well under 1 KiB past its name).
pub fn trim_service(svc: &mut Service) {
    let tensorboard_of = svc
        .metadata
        .labels
        .as_mut()
        .and_then(|l| l.remove_entry(c::TENSORBOARD_OF))
        .filter(|(_, v)| v.len() <= c::MAX_VALUE);
    trim_meta(&mut svc.metadata);
    if let Some((k, v)) = tensorboard_of {
        svc.metadata
            .labels
            .get_or_insert_with(Default::default)
            .insert(k, v);
    }
    svc.status = None;
    if let Some(spec) = svc.spec.take() {
        svc.spec = Some(ServiceSpec {
            type_: spec.type_,
            cluster_ip: spec.cluster_ip,
            publish_not_ready_addresses: spec.publish_not_ready_addresses,
            selector: spec.selector.map(|s| {
                s.into_iter()
                    .filter(|(k, _)| k == c::JOB || k == c::TENSORBOARD_OF)
                    .collect()
            }),
            ports: spec.ports.map(|ports| {
                ports
                    .into_iter()
                    .filter(|p| {
                        p.name
                            .as_deref()
                            .is_some_and(|n| SERVICE_PORTS.contains(&n))
                    })
                    .collect()
            }),
            ..ServiceSpec::default()
        });
    }
}

/// Trims a DLJob before it is cached: no managedFields, and of its labels
/// and annotations only `dljob.dev/job` and the recorded TensorBoard
/// volume (at most [`c::MAX_TENSORBOARD_VOLUME`]). Its spec and status are
/// held to the CRD's schema by the API server.
pub fn trim_dljob(job: &mut DLJob) {
    let meta = &mut job.metadata;
    meta.managed_fields = None;
    meta.finalizers = None;
    if let Some(labels) = meta.labels.as_mut() {
        labels.retain(|k, _| k == c::JOB);
    }
    if let Some(annotations) = meta.annotations.as_mut() {
        annotations
            .retain(|k, v| k == c::TENSORBOARD_VOLUME && v.len() <= c::MAX_TENSORBOARD_VOLUME);
    }
}

#[cfg(test)]
pub(super) mod tests {
    use super::*;
    use crate::config::Config;
    use crate::reconciler::index::entry_of;
    use crate::reconciler::observe::recreate_manifest;
    use serde_json::json;

    /// A container using one of its pod's DRA claims is the framework
    /// container, here as at admission (tests/mutate.rs), before and after
    /// trimming, for a bare pod (which keeps every container, so the rule
    /// runs again on the trimmed pod) and an owned one; a claim the pod
    /// does not declare does not count.
    #[test]
    fn a_container_using_a_pod_claim_is_the_framework_container_here_too() {
        for owned in [false, true] {
            let mut p = pod(owned, &["log", "train"], &[]);
            let spec = p.spec.as_mut().unwrap();
            spec.resource_claims = serde_json::from_value(json!([
                {"name": "gpus", "resourceClaimTemplateName": "four-gpus"}
            ]))
            .unwrap();
            spec.containers[1].resources =
                serde_json::from_value(json!({"claims": [{"name": "gpus"}]})).unwrap();
            let trimmed = trims_to_the_same(&p);
            let (_, entry) = entry_of(&trimmed, &Config::default()).unwrap();
            assert_eq!(
                entry.framework_container.as_deref(),
                Some("train"),
                "owned: {owned}"
            );
            assert_eq!(container_names(&trimmed).1, vec!["train"], "owned: {owned}");
        }
        let mut p = pod(false, &["log", "train"], &[]);
        p.spec.as_mut().unwrap().containers[1].resources =
            serde_json::from_value(json!({"claims": [{"name": "gpus"}]})).unwrap();
        let spec = p.spec.as_ref().unwrap();
        assert_eq!(
            framework_container_of(&p.metadata, spec),
            Some(0),
            "a guess: the first"
        );
    }

    /// A running StatefulSet (or bare) pytorch pod with a sidecar listed
    /// first, extra labels and annotations.
    pub(in crate::reconciler) fn pod(
        owned: bool,
        containers: &[&str],
        annotations: &[(&str, &str)],
    ) -> Pod {
        let mut a = json!({
            "dljob.dev/framework": "pytorch", "dljob.dev/replicas": "worker=2",
            "k8s.v1.cni.cncf.io/network-status": "[]",
        });
        for (k, v) in annotations {
            a[*k] = json!(v);
        }
        let mut labels = json!({"dljob.dev/job": "mnist", "dljob.dev/role": "worker",
            "controller-revision-hash": "worker-5d8f"});
        let mut meta = json!({"name": "worker-1", "namespace": "ml", "uid": "u1",
            "labels": labels.clone(), "annotations": a});
        if owned {
            labels["apps.kubernetes.io/pod-index"] = json!("1");
            meta["labels"] = labels;
            meta["ownerReferences"] = json!([{"apiVersion": "apps/v1", "kind": "StatefulSet",
                "name": "worker", "uid": "o", "controller": true}]);
        } else {
            meta["annotations"]["dljob.dev/index"] = json!("1");
        }
        let statuses: Vec<Value> = containers
            .iter()
            .enumerate()
            .map(|(i, n)| {
                json!({"name": n, "image": "i", "imageID": "", "ready": true, "restartCount": i,
                "state": {"running": {}},
                "lastState": {"terminated": {"exitCode": 137, "containerID": format!("c-{n}")}}})
            })
            .collect();
        serde_json::from_value(json!({
            "apiVersion": "v1", "kind": "Pod", "metadata": meta,
            "spec": {"restartPolicy": "Always", "nodeName": "n",
                "containers": containers.iter().map(|n| json!({"name": n, "image": "i"})).collect::<Vec<_>>()},
            "status": {"phase": "Running", "containerStatuses": statuses}
        }))
        .unwrap()
    }

    /// The index entry and the observation are the same before and after
    /// trimming; returns the trimmed pod.
    fn trims_to_the_same(pod: &Pod) -> Pod {
        let config = Config::default();
        let mut trimmed = pod.clone();
        trim_pod(&mut trimmed);
        let (k1, e1) = entry_of(pod, &config).unwrap();
        let (k2, e2) = entry_of(&trimmed, &config).unwrap();
        assert_eq!(k1, k2);
        assert_eq!(format!("{:?}", e1.member), format!("{:?}", e2.member));
        assert_eq!(e1.framework_container, e2.framework_container);
        assert_eq!(e1.tensorboard_volume, e2.tensorboard_volume);
        assert_eq!(e1.live, e2.live);
        assert!(e1.pod.is_some());
        assert_eq!(e1.pod, e2.pod);
        trimmed
    }

    fn container_names(pod: &Pod) -> (Vec<&str>, Vec<&str>) {
        let spec = pod.spec.as_ref().unwrap();
        let statuses = pod.status.as_ref().unwrap().container_statuses.as_ref();
        (
            spec.containers.iter().map(|c| c.name.as_str()).collect(),
            statuses.unwrap().iter().map(|c| c.name.as_str()).collect(),
        )
    }

    #[test]
    fn an_owned_pod_keeps_only_its_framework_container_and_member_keys() {
        type Case<'a> = (&'a [&'a str], &'a [(&'a str, &'a str)], &'a str);
        let cases: [Case; 4] = [
            (&["log", "pytorch"], &[], "pytorch"),
            (&["log", "train"], &[(c::CONTAINER, "train")], "train"),
            (
                &["log", "train"],
                &[(c::K8S_DEFAULT_CONTAINER, "train")],
                "train",
            ),
            (&["log", "train"], &[], "log"),
        ];
        for (containers, annotations, framework) in cases {
            let trimmed = trims_to_the_same(&pod(true, containers, annotations));
            assert_eq!(
                container_names(&trimmed),
                (vec![framework], vec![framework])
            );
            let meta = &trimmed.metadata;
            assert!(meta.labels.as_ref().unwrap().keys().all(|k| member_key(k)));
            assert!(meta
                .annotations
                .as_ref()
                .unwrap()
                .keys()
                .all(|k| member_key(k)));
        }
    }

    #[test]
    fn the_only_container_requesting_an_accelerator_is_the_framework_container() {
        let mut p = pod(true, &["log", "train"], &[]);
        let gpus = serde_json::from_value(json!({"limits": {"nvidia.com/gpu": "1"}})).unwrap();
        p.spec.as_mut().unwrap().containers[1].resources = Some(gpus);
        // The webhook's rule and the reconciler's agree (trims_to_the_same).
        let trimmed = trims_to_the_same(&p);
        assert_eq!(container_names(&trimmed), (vec!["train"], vec!["train"]));
    }

    #[test]
    fn an_unknown_named_container_keeps_every_container() {
        let p = pod(true, &["log", "train"], &[(c::CONTAINER, "nope")]);
        let mut trimmed = p.clone();
        trim_pod(&mut trimmed);
        assert_eq!(
            container_names(&trimmed),
            (vec!["log", "train"], vec!["log", "train"])
        );
        // Not a member either way.
        assert!(entry_of(&p, &Config::default()).is_none());
        assert!(entry_of(&trimmed, &Config::default()).is_none());
    }

    /// A bare pod is trimmed like an owned one, but keeps every container's
    /// name and resources (a PodGroup's `minResources` sums them); its spec
    /// to recreate it from is read from the API server when needed.
    #[test]
    fn a_bare_pod_keeps_its_member_keys_and_its_containers_resources_only() {
        let mut p = pod(false, &["log", "pytorch"], &[]);
        let spec = p.spec.as_mut().unwrap();
        spec.containers[1] = serde_json::from_value(json!({
            "name": "pytorch", "image": "train",
            "env": [{"name": "MASTER_ADDR", "value": "mnist-master-0.mnist.ml.svc"}],
            "resources": {"requests": {"cpu": "4", "nvidia.com/gpu": "1"}},
            "volumeMounts": [{"name": "data", "mountPath": "/data"}],
        }))
        .unwrap();
        spec.volumes = serde_json::from_value(json!([{"name": "data", "emptyDir": {}}])).unwrap();
        let trimmed = trims_to_the_same(&p);
        assert_eq!(
            container_names(&trimmed),
            (vec!["log", "pytorch"], vec!["pytorch"])
        );
        assert_eq!(
            serde_json::to_value(&trimmed.spec.as_ref().unwrap().containers).unwrap(),
            json!([{"name": "log"}, {"name": "pytorch",
                "resources": {"requests": {"cpu": "4", "nvidia.com/gpu": "1"}}}])
        );
        assert_eq!(trimmed.spec.as_ref().unwrap().volumes, None);
        let meta = &trimmed.metadata;
        assert!(!meta
            .labels
            .as_ref()
            .unwrap()
            .contains_key("controller-revision-hash"));
        assert!(!meta
            .annotations
            .as_ref()
            .unwrap()
            .contains_key("k8s.v1.cni.cncf.io/network-status"));
        // Nothing to recreate it from in the cache: read from the pod, when
        // it is to be saved, without its node and debug containers.
        let mut debugged = p.clone();
        debugged.spec.as_mut().unwrap().ephemeral_containers = Some(vec![Default::default()]);
        let spec = debugged.spec.as_mut().unwrap();
        spec.volumes = Some(vec![
            serde_json::from_value(json!({"name": "dljob-ssh", "secret": {"secretName": "j-ssh"}}))
                .unwrap(),
            serde_json::from_value(json!({"name": "data", "emptyDir": {}})).unwrap(),
        ]);
        spec.containers[1].volume_mounts = Some(vec![
            serde_json::from_value(json!({"name": "dljob-ssh", "mountPath": "/root/.ssh"}))
                .unwrap(),
            serde_json::from_value(json!({"name": "data", "mountPath": "/data"})).unwrap(),
        ]);
        let manifest = recreate_manifest(&debugged, &["dljob-hostfile", "dljob-ssh"]);
        assert_eq!(
            manifest["spec"]["containers"][1]["env"][0]["name"],
            "MASTER_ADDR"
        );
        assert_eq!(manifest["spec"].get("nodeName"), None);
        assert_eq!(manifest["spec"].get("ephemeralContainers"), None);
        // dljob's own volumes go (the webhook adds them again); the user's stay.
        assert_eq!(
            manifest["spec"]["volumes"],
            json!([{"name": "data", "emptyDir": {}}])
        );
        assert_eq!(
            manifest["spec"]["containers"][1]["volumeMounts"],
            json!([{"name": "data", "mountPath": "/data"}])
        );
    }

    /// What `dljob.dev/tensorboard` names survives trimming, alone among
    /// the volumes, for the DLJob made from the member to record it.
    #[test]
    fn trimming_keeps_only_the_tensorboard_volume() {
        let volumes = json!([
            {"name": "cache", "emptyDir": {}},
            {"name": "logs", "nfs": {"server": "nfs", "path": "/logs"}}
        ]);
        let logs = json!({"name": "logs", "nfs": {"server": "nfs", "path": "/logs"}});
        let config = Config::default();

        let mut p = pod(true, &["pytorch"], &[(c::TENSORBOARD, "logs:runs")]);
        p.spec.as_mut().unwrap().volumes = serde_json::from_value(volumes.clone()).unwrap();
        let trimmed = trims_to_the_same(&p);
        let kept = serde_json::to_value(&trimmed.spec.as_ref().unwrap().volumes).unwrap();
        assert_eq!(kept, json!([logs]));
        assert_eq!(
            entry_of(&trimmed, &config).unwrap().1.tensorboard_volume,
            Some(logs.clone())
        );

        // Without the annotation, no volume is kept.
        let mut plain = pod(true, &["pytorch"], &[]);
        plain.spec.as_mut().unwrap().volumes = serde_json::from_value(volumes.clone()).unwrap();
        trim_pod(&mut plain);
        assert_eq!(plain.spec.unwrap().volumes, None);

        // A StatefulSet's and a Job's template, the annotation on the
        // workload itself.
        let template = json!({"metadata": {"labels": {"dljob.dev/job": "mnist", "dljob.dev/role": "worker"}},
            "spec": {"restartPolicy": "Never", "containers": [{"name": "pytorch"}], "volumes": volumes}});
        let meta = json!({"name": "worker", "namespace": "ml",
            "labels": {"dljob.dev/job": "mnist", "dljob.dev/role": "worker"},
            "annotations": {"dljob.dev/framework": "pytorch", "dljob.dev/tensorboard": "logs:runs"}});
        let mut sts: StatefulSet = serde_json::from_value(json!({"metadata": meta,
            "spec": {"replicas": 2, "selector": {}, "serviceName": "mnist", "template": template}}))
        .unwrap();
        trim_statefulset(&mut sts);
        assert_eq!(
            entry_of(&sts, &config).unwrap().1.tensorboard_volume,
            Some(logs.clone())
        );
        let mut job: Job = serde_json::from_value(json!({"metadata": meta,
            "spec": {"completions": 2, "parallelism": 2, "completionMode": "Indexed", "template": template}}))
        .unwrap();
        trim_job(&mut job);
        let kept = &job
            .spec
            .as_ref()
            .unwrap()
            .template
            .spec
            .as_ref()
            .unwrap()
            .volumes;
        assert_eq!(serde_json::to_value(kept).unwrap(), json!([logs]));
        assert_eq!(
            entry_of(&job, &config).unwrap().1.tensorboard_volume,
            Some(logs)
        );
    }

    /// What a tenant writes on a labelled object beyond dljob's keys is not
    /// cached (issue 30, finding 5): 256 KiB of someone's annotation and
    /// label on a member StatefulSet, Job and pod, and on a Service, and a
    /// TensorBoard volume of 300 KB, leave each cached object under 2 KiB;
    /// what the index and the drift check read is the same.
    #[test]
    fn a_tenants_bulk_is_not_cached() {
        let config = Config::default();
        let bulk = "x".repeat(256 * 1024);
        let json_len = |v: &Value| v.to_string().len();

        // A member StatefulSet and Job: entry unchanged, bulk gone.
        let template = json!({"metadata": {"labels": {"dljob.dev/job": "mnist", "dljob.dev/role": "worker", "team": "x"},
                "annotations": {"notes": bulk}},
            "spec": {"restartPolicy": "Never", "containers": [{"name": "pytorch", "image": "i"}]}});
        let meta = json!({"name": "worker", "namespace": "ml", "uid": "s",
            "labels": {"dljob.dev/job": "mnist", "dljob.dev/role": "worker", "team": "x"},
            "annotations": {"dljob.dev/framework": "pytorch", "dljob.dev/replicas": "worker=2",
                "notes": bulk, "dljob.dev/not-a-key": bulk},
            "ownerReferences": [{"apiVersion": "v1", "kind": "ConfigMap", "name": "n", "uid": "n"}],
            "finalizers": ["example.com/keep"]});
        let sts: StatefulSet = serde_json::from_value(json!({"metadata": meta,
            "spec": {"replicas": 2, "selector": {}, "serviceName": "mnist", "template": template}}))
        .unwrap();
        let mut trimmed = sts.clone();
        trim_statefulset(&mut trimmed);
        let (k1, e1) = entry_of(&sts, &config).unwrap();
        let (k2, e2) = entry_of(&trimmed, &config).unwrap();
        assert_eq!(
            (k1, format!("{:?}", e1.member)),
            (k2, format!("{:?}", e2.member))
        );
        let kept = serde_json::to_value(&trimmed).unwrap();
        assert!(json_len(&kept) < 2048, "{kept}");
        assert_eq!(
            kept["metadata"],
            json!({"name": "worker", "namespace": "ml", "uid": "s",
                "labels": {"dljob.dev/job": "mnist", "dljob.dev/role": "worker"},
                "annotations": {"dljob.dev/framework": "pytorch", "dljob.dev/replicas": "worker=2"},
                "ownerReferences": []})
        );
        let job: Job = serde_json::from_value(json!({"metadata": meta,
            "spec": {"completions": 2, "parallelism": 2, "completionMode": "Indexed", "template": template}}))
        .unwrap();
        let mut trimmed = job.clone();
        trim_job(&mut trimmed);
        let (k1, e1) = entry_of(&job, &config).unwrap();
        let (k2, e2) = entry_of(&trimmed, &config).unwrap();
        assert_eq!(
            (k1, format!("{:?}", e1.member)),
            (k2, format!("{:?}", e2.member))
        );
        assert!(json_len(&serde_json::to_value(&trimmed).unwrap()) < 2048);

        // A member pod with the bulk and a 300 KB TensorBoard volume (an
        // nfs path, say): the volume is not kept, nor recorded.
        let mut p = pod(
            true,
            &["pytorch"],
            &[("notes", &bulk), (c::TENSORBOARD, "logs:runs")],
        );
        let big = json!({"name": "logs", "nfs": {"server": "nfs", "path": format!("/{}", "l".repeat(300_000))}});
        p.spec.as_mut().unwrap().volumes = Some(vec![serde_json::from_value(big).unwrap()]);
        trim_pod(&mut p);
        let kept = serde_json::to_value(&p).unwrap();
        assert!(json_len(&kept) < 2048, "{kept}");
        assert_eq!(entry_of(&p, &config).unwrap().1.tensorboard_volume, None);
        // At the bound it is kept.
        let mut p = pod(true, &["pytorch"], &[(c::TENSORBOARD, "logs:runs")]);
        let mut fits = json!({"name": "logs", "nfs": {"server": "nfs", "path": "/"}});
        let room = c::MAX_TENSORBOARD_VOLUME - fits.to_string().len();
        fits["nfs"]["path"] = json!(format!("/{}", "l".repeat(room)));
        assert_eq!(fits.to_string().len(), c::MAX_TENSORBOARD_VOLUME);
        p.spec.as_mut().unwrap().volumes =
            Some(vec![serde_json::from_value(fits.clone()).unwrap()]);
        trim_pod(&mut p);
        assert_eq!(
            entry_of(&p, &config).unwrap().1.tensorboard_volume,
            Some(fits)
        );

        // A dljob value over the bound is dropped (admission refuses it).
        let mut p = pod(true, &["pytorch"], &[(c::PORT, &bulk)]);
        trim_pod(&mut p);
        assert!(!p.metadata.annotations.unwrap().contains_key(c::PORT));
    }

    /// A labelled Service is cached as what the drift check compares: the
    /// check answers the same of the trimmed Service as of the whole one,
    /// for the job's own Service, one that drifted, and someone else's.
    #[test]
    fn a_service_is_cached_as_its_drift_check_reads_it() {
        use crate::reconciler::resources::{satisfies, service};
        let job: DLJob = serde_json::from_value(json!({
            "apiVersion": "dljob.dev/v1alpha1", "kind": "DLJob",
            "metadata": {"name": "mnist", "namespace": "ml", "uid": "j"},
            "spec": {"framework": "pytorch", "port": 23456, "replicas": "master=1,worker=2",
                "backoffLimit": 3, "cleanPodPolicy": "Running", "restartPolicy": "ExitCode"}
        }))
        .unwrap();
        let desired = serde_json::to_value(service(&job).unwrap()).unwrap();
        let json_len = |v: &Value| v.to_string().len();
        let bulk = "x".repeat(256 * 1024);
        let mut whole = desired.clone();
        whole["metadata"]["annotations"] = json!({"notes": bulk});
        whole["metadata"]["labels"]["team"] = json!(bulk[..63]);
        whole["metadata"]["uid"] = json!("s");
        whole["metadata"]["resourceVersion"] = json!("7");
        whole["spec"]["clusterIPs"] = json!(["None"]);
        whole["spec"]["selector"]["team"] = json!("x");
        let extra: Vec<Value> = (0..2000)
            .map(|i| json!({"name": format!("p{i}"), "port": 1000 + i, "protocol": "TCP"}))
            .collect();
        whole["spec"]["ports"].as_array_mut().unwrap().extend(extra);
        whole["status"] = json!({"loadBalancer": {}});
        let mut drifted = whole.clone();
        drifted["spec"]["ports"][0]["port"] = json!(1);
        let mut foreign = whole.clone();
        foreign["metadata"]["ownerReferences"][0]["uid"] = json!("other");
        // The job's TensorBoard Service, as the API server returns it.
        let mut tb_job = job.clone();
        tb_job.spec.tensorboard = Some(crate::contract::TensorBoard::parse("logs:runs").unwrap());
        tb_job.metadata.annotations = Some(
            [(
                c::TENSORBOARD_VOLUME.to_owned(),
                "{\"name\":\"logs\",\"nfs\":{\"server\":\"nfs\",\"path\":\"/l\"}}".to_owned(),
            )]
            .into_iter()
            .collect(),
        );
        let now = k8s_openapi::jiff::Timestamp::now();
        let (_, tb) = crate::tensorboard::objects(&tb_job, &Default::default(), now).unwrap();
        let tb_desired = serde_json::to_value(&tb).unwrap();
        let mut tb_whole = tb_desired.clone();
        tb_whole["metadata"]["uid"] = json!("s");
        tb_whole["metadata"]["annotations"] = json!({"notes": bulk});
        tb_whole["spec"]["clusterIP"] = json!("10.0.0.7");
        let svc: Service = serde_json::from_value(tb_whole.clone()).unwrap();
        let mut trimmed = svc.clone();
        trim_service(&mut trimmed);
        let kept = serde_json::to_value(&trimmed).unwrap();
        assert!(json_len(&kept) < 1024, "{kept}");
        assert!(satisfies(&tb_whole, &tb_desired));
        assert!(satisfies(&kept, &tb_desired), "{kept}");
        for (case, object, satisfied) in [
            ("own", whole, true),
            ("drifted", drifted, false),
            ("foreign", foreign, false),
        ] {
            let svc: Service = serde_json::from_value(object.clone()).unwrap();
            let mut trimmed = svc.clone();
            trim_service(&mut trimmed);
            let kept = serde_json::to_value(&trimmed).unwrap();
            assert!(json_len(&kept) < 1024, "{case}: {kept}");
            assert_eq!(
                satisfies(&object, &desired),
                satisfies(&kept, &desired),
                "{case}"
            );
            assert_eq!(satisfies(&kept, &desired), satisfied, "{case}");
            assert_eq!(
                kept["metadata"]["ownerReferences"], object["metadata"]["ownerReferences"],
                "{case}"
            );
            assert_eq!(kept["metadata"]["uid"], "s");
        }
    }

    /// A DLJob is cached with its recorded TensorBoard volume and nothing
    /// else of anyone's metadata.
    #[test]
    fn a_dljob_is_cached_without_anyones_bulk() {
        let bulk = "x".repeat(256 * 1024);
        let mut job: DLJob = serde_json::from_value(json!({
            "apiVersion": "dljob.dev/v1alpha1", "kind": "DLJob",
            "metadata": {"name": "mnist", "namespace": "ml", "uid": "j",
                "labels": {"dljob.dev/job": "mnist", "team": "x"},
                "annotations": {"notes": bulk, c::TENSORBOARD_VOLUME: "{\"name\":\"logs\",\"emptyDir\":{}}"},
                "finalizers": ["example.com/keep"]},
            "spec": {"framework": "pytorch", "port": 23456, "replicas": "master=1,worker=2",
                "backoffLimit": 3, "cleanPodPolicy": "Running", "restartPolicy": "ExitCode"}
        }))
        .unwrap();
        trim_dljob(&mut job);
        let kept = serde_json::to_value(&job).unwrap();
        assert_eq!(
            kept["metadata"]["labels"],
            json!({"dljob.dev/job": "mnist"})
        );
        assert_eq!(
            kept["metadata"]["annotations"],
            json!({c::TENSORBOARD_VOLUME: "{\"name\":\"logs\",\"emptyDir\":{}}"})
        );
        assert_eq!(kept["metadata"].get("finalizers"), None);
        job.metadata.annotations = Some(
            [(c::TENSORBOARD_VOLUME.to_owned(), bulk.clone())]
                .into_iter()
                .collect(),
        );
        trim_dljob(&mut job);
        assert_eq!(job.metadata.annotations, Some(Default::default()));
    }
}
