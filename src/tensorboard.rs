//! TensorBoard per job (`dljob.dev/tensorboard: VOLUME:PATH`, DESIGN §7):
//! the volume a member names, whether TensorBoard — in a pod of its own,
//! which the reconciler runs ([`crate::reconciler::resources`]) — can read
//! what the training writes there, and how long it runs. Pure.
//!
//! The syntax is [`crate::contract::TensorBoard`]'s, checked where every
//! job-wide key is ([`crate::member`]). What is checked here needs the
//! whole pod spec, which the reconciler's trimmed copies of members do not
//! keep, so the validating webhook and `dljob validate` check it
//! ([`crate::validate::validate`]), never the member index.

use std::time::Duration;

use k8s_openapi::jiff::{SignedDuration, Timestamp};
use serde_json::Value;

use crate::contract::{self as c, CleanPodPolicy};
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
pub fn volume<'v>(kind: Kind, object: &'v Value, name: &str) -> Option<&'v Value> {
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
pub fn not_shared(volume: &Value) -> Option<&'static str> {
    let kind = source_kind(volume);
    NOT_SHARED
        .iter()
        .find(|(k, _)| *k == kind)
        .map(|(_, why)| *why)
}

/// The name of job `job`'s TensorBoard Deployment and Service.
pub fn name(job: &str) -> String {
    format!("{job}-tensorboard")
}

/// Whether the job's TensorBoard runs, and when to look again. It runs
/// while the job does. Once the job finished (`finished`: when), it runs
/// on for the config's `ttl` seconds when one is set; without one it stops
/// with the job's other running pods — unless the clean-pod policy is
/// `None`, which leaves everything running.
pub fn runs(
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
pub fn check(m: &MemberSpec, object: &Value) -> Vec<String> {
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

#[cfg(test)]
mod tests {
    use super::*;

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
}
