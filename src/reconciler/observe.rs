//! From watched members to what the status function takes: the
//! [`ObservedPod`]s and [`Workload`]s, what a finished run left, and the
//! manifest a bare pod is recreated from. Pure: no client.

use k8s_openapi::api::apps::v1::StatefulSet;
use k8s_openapi::api::batch::v1::Job;
use k8s_openapi::api::core::v1::{ContainerState as K8sState, ContainerStatus, Pod, PodTemplate};
use kube::api::ObjectMeta;
use kube::ResourceExt;
use serde_json::{json, Value};
use sha2::Digest as _;

use super::status::{ContainerState, Exit, FrameworkContainer, ObservedPod, PodRestart, Workload};
use crate::contract as c;
use crate::member::MemberSpec;

fn exit_of(state: Option<&K8sState>) -> Option<Exit> {
    let t = state?.terminated.as_ref()?;
    Some(Exit {
        code: Some(t.exit_code),
        reason: t.reason.clone(),
        run: t
            .container_id
            .clone()
            .or_else(|| t.finished_at.as_ref().map(|f| f.0.to_string()))
            .unwrap_or_default(),
    })
}

fn framework_container_status(s: &ContainerStatus) -> FrameworkContainer {
    let state = match s.state.as_ref() {
        Some(st) if st.terminated.is_some() => {
            ContainerState::Terminated(exit_of(Some(st)).unwrap_or(Exit {
                code: None,
                reason: None,
                run: String::new(),
            }))
        }
        Some(st) if st.running.is_some() => ContainerState::Running,
        _ => ContainerState::Waiting,
    };
    FrameworkContainer {
        state,
        last: exit_of(s.last_state.as_ref()),
        restart_count: u32::try_from(s.restart_count).unwrap_or(0),
    }
}

/// The manifest a bare pod is recreated from: its metadata (name, labels,
/// annotations) and spec, without what the cluster filled in for the old pod,
/// what a new pod may not be created with (debug containers), and dljob's
/// own volumes and mounts (`reserved` names): the webhook adds them again,
/// as this dljob makes them, to the new pod (a pod an older dljob wired
/// would otherwise carry volumes this one refuses).
pub(crate) fn recreate_manifest(pod: &Pod, reserved: &[&str]) -> Value {
    let mut spec = serde_json::to_value(&pod.spec).unwrap_or(Value::Null);
    if let Some(s) = spec.as_object_mut() {
        s.remove("nodeName");
        s.remove("ephemeralContainers");
        let ours = |v: &Value| reserved.contains(&crate::object::name_of(v));
        if let Some(Value::Array(volumes)) = s.get_mut("volumes") {
            volumes.retain(|v| !ours(v));
        }
        for key in ["containers", "initContainers"] {
            for c in s
                .get_mut(key)
                .and_then(Value::as_array_mut)
                .into_iter()
                .flatten()
            {
                if let Some(Value::Array(mounts)) = c.get_mut("volumeMounts") {
                    mounts.retain(|m| !ours(m));
                }
            }
        }
    }
    let mut metadata = json!({
        "name": pod.name_any(),
        "namespace": pod.namespace(),
    });
    if let Some(l) = &pod.metadata.labels {
        metadata["labels"] = json!(l);
    }
    if let Some(a) = &pod.metadata.annotations {
        metadata["annotations"] = json!(a);
    }
    json!({"apiVersion": "v1", "kind": "Pod", "metadata": metadata, "spec": spec})
}

/// A member pod as the status function sees it. Only the framework
/// container's state counts: a sidecar's exit changes nothing.
pub fn observe_pod(
    member: &MemberSpec,
    framework_container: Option<&str>,
    pod: &Pod,
) -> Option<ObservedPod> {
    let index = member.index?;
    let status = pod.status.as_ref();
    let container = framework_container.and_then(|name| {
        status?
            .container_statuses
            .as_ref()?
            .iter()
            .find(|s| s.name == name)
            .map(framework_container_status)
    });
    let restart_policy = match pod.spec.as_ref().and_then(|s| s.restart_policy.as_deref()) {
        Some("Never") => PodRestart::Never,
        Some("OnFailure") => PodRestart::OnFailure,
        _ => PodRestart::Always,
    };
    Some(ObservedPod {
        name: pod.name_any(),
        uid: pod.uid().unwrap_or_default(),
        role: member.role.clone(),
        index,
        owner: member.owner,
        restart_policy,
        phase: status
            .and_then(|s| s.phase.clone())
            .unwrap_or_else(|| "Pending".to_owned()),
        reason: status.and_then(|s| s.reason.clone()),
        deleting: pod.metadata.deletion_timestamp.is_some(),
        container,
        marked: member.finished_run.is_some(),
        gated: pod
            .spec
            .as_ref()
            .and_then(|s| s.scheduling_gates.as_ref())
            .is_some_and(|gates| gates.iter().any(|g| g.name == c::WORKERS_READY_GATE)),
        name_wait: status
            .and_then(|s| s.init_container_statuses.as_ref())
            .into_iter()
            .flatten()
            .find(|s| s.name == c::WAIT_FOR_NAMES_CONTAINER)
            .and_then(crate::wait_names::problem),
    })
}

fn count(n: Option<i32>) -> Option<u32> {
    n.map(|n| u32::try_from(n).unwrap_or(0))
}

/// A member StatefulSet of `role` for the clean-pod policy and the size
/// check.
pub fn observe_statefulset(role: &str, sts: &StatefulSet) -> Workload {
    Workload::StatefulSet {
        name: sts.name_any(),
        uid: sts.uid().unwrap_or_default(),
        marked: finished_run(&sts.metadata).is_some(),
        role: role.to_owned(),
        replicas: count(sts.spec.replicas).unwrap_or(1),
        offset: index_offset(&sts.metadata, sts.spec.template.metadata.as_ref()),
    }
}

/// A member Job of `role` for the clean-pod policy and the size check.
pub(crate) fn observe_job(role: &str, job: &Job) -> Workload {
    let spec = job.spec.as_ref();
    Workload::Job {
        name: job.name_any(),
        uid: job.uid().unwrap_or_default(),
        marked: finished_run(&job.metadata).is_some(),
        role: role.to_owned(),
        suspended: spec.and_then(|s| s.suspend).unwrap_or(false),
        finished: job
            .status
            .as_ref()
            .and_then(|s| s.conditions.as_ref())
            .is_some_and(|cs| {
                cs.iter()
                    .any(|c| c.status == "True" && (c.type_ == "Complete" || c.type_ == "Failed"))
            }),
        completions: count(spec.and_then(|s| s.completions)),
        parallelism: count(spec.and_then(|s| s.parallelism)).unwrap_or(1),
        offset: index_offset(
            &job.metadata,
            spec.and_then(|s| s.template.metadata.as_ref()),
        ),
    }
}

/// [`c::FINISHED_RUN`] on an object: the uid of the DLJob whose finished
/// run left it.
pub(crate) fn finished_run(meta: &ObjectMeta) -> Option<&str> {
    meta.annotations
        .as_ref()?
        .get(c::FINISHED_RUN)
        .map(String::as_str)
}

/// `dljob.dev/index-offset` of a member workload: its own, else its pod
/// template's (admission reads both).
fn index_offset(meta: &ObjectMeta, template: Option<&ObjectMeta>) -> Option<u32> {
    [Some(meta), template]
        .into_iter()
        .flatten()
        .find_map(|m| m.annotations.as_ref()?.get(c::INDEX_OFFSET))?
        .trim()
        .parse()
        .ok()
}

/// The digest of a saved manifest's content, its `template` as the API
/// server returned it (`sha256:` and hex): recorded with the PodTemplate's
/// uid when it is saved, compared before a pod is created from it.
pub(crate) fn saved_digest(template: &PodTemplate) -> String {
    let bytes = serde_json::to_vec(&template.template).unwrap_or_default();
    format!("sha256:{:x}", sha2::Sha256::digest(&bytes))
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    /// A member pod whose init container `dljob-wait-for-names` has
    /// `state`, beside a user's init container that failed.
    fn pod_with_wait(state: Value, last: Value) -> Pod {
        serde_json::from_value(json!({
            "apiVersion": "v1", "kind": "Pod",
            "metadata": {"name": "xg-worker-0", "namespace": "ml", "uid": "u1",
                "labels": {"dljob.dev/job": "xg", "dljob.dev/role": "worker"},
                "annotations": {"dljob.dev/framework": "xgboost", "dljob.dev/replicas": "master=1,worker=1"}},
            "spec": {"containers": [{"name": "xgboost", "image": "x"}],
                "initContainers": [{"name": "fetch", "image": "busybox"}, {"name": "dljob-wait-for-names", "image": "ghcr.io/dljob/dljob:0.1.0"}]},
            "status": {"phase": "Pending", "initContainerStatuses": [
                {"name": "fetch", "image": "busybox", "imageID": "", "ready": false, "restartCount": 0,
                 "state": {"terminated": {"exitCode": 1, "reason": "Error"}}},
                {"name": "dljob-wait-for-names", "image": "ghcr.io/dljob/dljob:0.1.0", "imageID": "", "ready": false, "restartCount": 0,
                 "state": state, "lastState": last}
            ]}
        }))
        .unwrap()
    }

    /// What the status function sees of the pod once the cache trimmed it.
    fn seen(state: Value, last: Value) -> (Option<String>, Option<Vec<ContainerStatus>>) {
        let mut pod = pod_with_wait(state, last);
        crate::reconciler::trim::trim_pod(&mut pod);
        let kept = pod.status.as_ref().unwrap().init_container_statuses.clone();
        let member = crate::member::parse(
            crate::object::Kind::Pod,
            &serde_json::to_value(&pod).unwrap(),
            None,
            &crate::config::Config::default(),
        )
        .unwrap()
        .unwrap()
        .member;
        (
            observe_pod(&member, Some("xgboost"), &pod)
                .unwrap()
                .name_wait,
            kept,
        )
    }

    #[test]
    fn a_name_wait_that_gave_up_is_read_from_its_termination_message() {
        let message = format!(
            "{} after 600s: xg-master-0.xg.ml.svc does not resolve (Name or service not known); the framework starts anyway and may fail to reach it. {}",
            c::NAME_WAIT_GAVE_UP,
            "x".repeat(4000)
        );
        let (problem, kept) = seen(
            json!({"terminated": {"exitCode": 0, "reason": "Completed", "message": message,
            "containerID": "containerd://abc", "startedAt": "2026-12-07T01:00:00Z", "finishedAt": "2026-12-07T01:10:00Z"}}),
            json!({}),
        );
        assert_eq!(
            problem.as_deref(),
            Some("gave up after 600s: xg-master-0.xg.ml.svc does not resolve (Name or service not known)")
        );
        // Only dljob's, its message cut, nothing else of its status.
        let kept = kept.unwrap();
        assert_eq!(kept.len(), 1);
        let t = kept[0].state.as_ref().unwrap().terminated.as_ref().unwrap();
        assert_eq!(
            t.message.as_ref().unwrap().len(),
            crate::reconciler::trim::MAX_NAME_WAIT_MESSAGE + '…'.len_utf8()
        );
        assert_eq!(
            (t.container_id.as_ref(), t.finished_at.as_ref()),
            (None, None)
        );
    }

    #[test]
    fn a_name_wait_that_cannot_run_says_why_in_words_that_stay() {
        // The kubelet alternates these two while it retries, with its own
        // changing words: one sentence for both, so the condition and its
        // Event do not change with every retry.
        for reason in ["ErrImagePull", "ImagePullBackOff"] {
            let (problem, _) = seen(
                json!({"waiting": {"reason": reason, "message": format!("{reason}: try {}", reason.len())}}),
                json!({}),
            );
            assert_eq!(
                problem.as_deref(),
                Some("cannot run: its image ghcr.io/dljob/dljob:0.1.0 cannot be pulled"),
                "{reason}"
            );
        }
        let (problem, _) = seen(
            json!({"terminated": {"exitCode": 139, "reason": "Error"}}),
            json!({}),
        );
        assert_eq!(
            problem.as_deref(),
            Some("cannot run: it exited 139 (Error)")
        );
        let (problem, _) = seen(
            json!({"terminated": {"exitCode": 128, "reason": "StartError", "message": "exec format error"}}),
            json!({}),
        );
        assert_eq!(
            problem.as_deref(),
            Some("cannot run: it exited 128 (StartError: exec format error)")
        );
        // Restarted by the kubelet (a pod that restarts): backing off, then
        // running again, it is still the exit of its last run.
        let failed = json!({"terminated": {"exitCode": 2, "reason": "Error", "containerID": "containerd://a"}});
        for now in [
            json!({"waiting": {"reason": "CrashLoopBackOff", "message": "back-off 40s restarting failed container"}}),
            json!({"running": {"startedAt": "2026-12-07T01:00:00Z"}}),
        ] {
            let (problem, kept) = seen(now.clone(), json!(failed));
            assert_eq!(
                problem.as_deref(),
                Some("cannot run: it exited 2 (Error)"),
                "{now}"
            );
            let kept = &kept.unwrap()[0];
            assert_eq!(kept.state.as_ref().unwrap().running, None);
            assert_eq!(
                kept.state
                    .as_ref()
                    .unwrap()
                    .waiting
                    .as_ref()
                    .and_then(|w| w.message.clone()),
                None
            );
            assert_eq!(
                kept.last_state
                    .as_ref()
                    .unwrap()
                    .terminated
                    .as_ref()
                    .unwrap()
                    .container_id,
                None
            );
        }
    }

    #[test]
    fn a_name_wait_that_waits_or_found_its_names_is_not_kept() {
        for state in [
            json!({"waiting": {"reason": "PodInitializing"}}),
            json!({"running": {"startedAt": "2026-12-07T01:00:00Z"}}),
            json!({"terminated": {"exitCode": 0, "reason": "Completed"}}),
            // A user's own container of that name, which ended well.
            json!({"terminated": {"exitCode": 0, "reason": "Completed", "message": "all good"}}),
        ] {
            let (problem, kept) = seen(state.clone(), json!({}));
            assert_eq!(problem, None, "{state}");
            assert_eq!(kept, None, "{state}");
        }
    }
}
