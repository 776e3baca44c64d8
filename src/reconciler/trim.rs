//! Trimming watched members before they are cached: of each object only
//! what the member index, the status function and the PodGroup's
//! `minResources` read. Pure.

use k8s_openapi::api::apps::v1::StatefulSet;
use k8s_openapi::api::batch::v1::Job;
use k8s_openapi::api::core::v1::{Container, ContainerStatus, Pod, PodSpec, PodStatus};
use kube::api::ObjectMeta;
use serde_json::Value;

use crate::contract as c;
use crate::member;

/// Annotations never read back: big, and re-added by the webhook.
const DROPPED_ANNOTATIONS: &[&str] = &[
    "kubectl.kubernetes.io/last-applied-configuration",
    c::HOSTFILE,
];

fn trim_meta(meta: &mut ObjectMeta) {
    meta.managed_fields = None;
    if let Some(a) = meta.annotations.as_mut() {
        for k in DROPPED_ANNOTATIONS {
            a.remove(*k);
        }
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
            .filter(|v| v.name == name)
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
/// annotation, only the container statuses' states, and of the metadata
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
    member_keys_only(&mut pod.metadata);
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

/// Whether a label or annotation of a pod is read by [`member::parse`] or
/// [`member::framework_container`].
fn member_key(key: &str) -> bool {
    key.starts_with("dljob.dev/")
        || key == c::K8S_POD_INDEX
        || key == c::K8S_JOB_COMPLETION_INDEX
        || key == c::K8S_DEFAULT_CONTAINER
}

fn member_keys_only(meta: &mut ObjectMeta) {
    for map in [meta.labels.as_mut(), meta.annotations.as_mut()]
        .into_iter()
        .flatten()
    {
        map.retain(|k, _| member_key(k));
    }
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
                    .any(|(k, q)| {
                        crate::object::is_extended_resource(k)
                            && !crate::object::is_zero_quantity(&Value::String(q.0.clone()))
                    });
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
}
