//! The one rule every owned object is kept under (the headless Service,
//! a gang's PodGroup, the TensorBoard, the SSH Secret): create it when
//! absent, change it only while this DLJob controls it, report whose it is
//! otherwise — and what the API server did not keep of a write.

use std::collections::BTreeMap;

use kube::api::{Api, DynamicObject, Patch, PatchParams};
use kube::Client;
use serde_json::Value;

use super::resources::{self, Keep, Owned};
use super::writes::{create_params, replaced, CONFLICT, MANAGER, NOT_FOUND};
use crate::contract as c;
use crate::crd::DLJob;

/// What the reflectors hold of an owned object.
pub(crate) enum Current {
    /// Not in the cache of labelled objects: absent, or someone else's
    /// without the label — a create tells.
    Absent,
    Present(serde_json::Value),
    /// A kind no reflector watches: it is read.
    Unwatched,
}

/// Whose an object is, by its controller owner reference: this DLJob's
/// (`job_uid`) or not — then said in words (for the condition), or None.
pub(crate) fn foreign_controller(
    meta: &kube::api::ObjectMeta,
    job_name: &str,
    job_uid: &str,
) -> Option<String> {
    let controller = meta
        .owner_references
        .iter()
        .flatten()
        .find(|r| r.controller == Some(true));
    match controller {
        Some(r) if r.uid == job_uid && r.kind == "DLJob" => None,
        Some(r) if r.kind == "DLJob" && r.name == job_name => Some(format!(
            "an earlier DLJob \"{}\" (uid {}), deleted: the garbage collector removes it shortly",
            r.name, r.uid
        )),
        Some(r) => Some(format!("{} \"{}\"", r.kind, r.name)),
        None => Some("no controller".to_owned()),
    }
}

/// What keeping one owned object did.
#[derive(Debug, PartialEq, Eq)]
pub(super) enum Kept {
    Unchanged,
    Written,
    /// The cluster does not serve its kind (a scheduler not installed).
    NotServed,
    /// The API server (or a webhook or policy of the cluster's) refused
    /// the write, e.g. a PodGroup naming a queue that does not exist, a
    /// Service over the namespace's quota: why, and the way out.
    Refused(String),
    /// The API server did not keep all that dljob wrote (why, whole).
    Dropped(String),
    /// An object of that name that this DLJob does not control: left
    /// alone, and why (for the condition).
    Foreign(String),
    /// The object changed under the write: the next reconcile reads again.
    Retry,
}

/// Keeps one owned object, under one rule for every kind: create it when
/// absent; change it only while its controller owner reference is this
/// DLJob (`job_uid`), and only when it lacks what dljob declares (then with
/// the uid read, so that a replaced object is not written); otherwise write
/// nothing and report whose it is. A create-once object (the SSH Secret,
/// never read: dljob does not read Secrets) is created, and one already
/// there is reported. A kind the cluster does not serve is reported, not
/// retried as an error.
pub(super) async fn keep(
    client: &Client,
    namespace: &str,
    owned: &Owned,
    current: Current,
    job: (&str, &str),
    dropped: &Dropped,
) -> Result<Kept, kube::Error> {
    let (job_name, job_uid) = job;
    let desired = serde_json::to_value(&owned.object).map_err(kube::Error::SerdeError)?;
    let key = format!("{namespace}/{}", owned.describe());
    let api: Api<DynamicObject> = Api::namespaced_with(client.clone(), namespace, &owned.resource);
    let existing = match current {
        Current::Present(value) => Some(value),
        Current::Absent => None,
        Current::Unwatched if owned.keep == Keep::CreateOnce => None,
        Current::Unwatched => match api.get_opt(owned.name()).await {
            Ok(found) => found.map(|o| serde_json::to_value(o).unwrap_or_default()),
            // A 404 here is not a Status (`get_opt` takes those for
            // absent): "404 page not found", a kind not served.
            Err(e) => return optional_failure(owned, e),
        },
    };
    let existing = match existing {
        Some(e) => e,
        None => match api.create(&create_params(), &owned.object).await {
            Ok(stored) => return Ok(dropped.check(key, owned, &desired, &stored)),
            Err(kube::Error::Api(s)) if s.code == CONFLICT => {
                if owned.keep == Keep::CreateOnce {
                    return Ok(Kept::Foreign(format!(
                            "{} exists and was not created by dljob for this DLJob (dljob never reads Secrets, so it cannot tell whose it is); the job's pods would mount it: delete it (dljob then creates the job's own) or rename the job",
                            owned.describe()
                        )));
                }
                match api.get_opt(owned.name()).await? {
                    Some(o) => serde_json::to_value(o).unwrap_or_default(),
                    None => return Ok(Kept::Retry),
                }
            }
            Err(e) => return optional_failure(owned, e),
        },
    };
    let meta: kube::api::ObjectMeta =
        serde_json::from_value(existing["metadata"].clone()).unwrap_or_default();
    if let Some(who) = foreign_controller(&meta, job_name, job_uid) {
        return Ok(Kept::Foreign(format!(
            "{} exists and is controlled by {who}; dljob leaves it alone: rename the job ({}) or that {}",
            owned.describe(),
            c::JOB,
            owned.resource.kind
        )));
    }
    if resources::satisfies(&existing, &desired) {
        return Ok(Kept::Unchanged);
    }
    // What the API server dropped the last time is not written again
    // while dljob declares the same: every reconcile would write.
    if dropped.again(&key, &desired) {
        return Ok(Kept::Dropped(Dropped::message(owned, &desired, &existing)));
    }
    tracing::info!(object = %owned.describe(), %namespace, "repairing drift");
    // dljob controls it: its fields are dljob's to take back.
    let mut body = owned.object.clone();
    body.metadata.uid = meta.uid;
    let applied = api
        .patch(
            owned.name(),
            &PatchParams::apply(MANAGER).force(),
            &Patch::Apply(&body),
        )
        .await;
    match applied {
        Ok(stored) => Ok(dropped.check(key, owned, &desired, &stored)),
        Err(e) if replaced(&e) => Ok(Kept::Retry),
        // A 404 here: the kind stopped being served since it was read.
        Err(e) => optional_failure(owned, e),
    }
}

/// A read or write of `owned` the API server answered with `e`. A refusal
/// must not stop the job's status, restarts and gate: for an optional
/// object (a gang's PodGroup) a 404 says the cluster does not serve its
/// kind, anything else is reported as refused (RBAC without that kind, a
/// scheduler's webhook); for every other object a refusal of the request
/// itself (400, 403, 422: a quota, a policy, an admission webhook) is
/// reported as refused. Both are tried again at the next reconcile. What
/// is not the request's fault (a 404 of a built-in kind, 409, 429, 5xx, no
/// answer, a namespace being deleted) is the reconcile's error, retried
/// with backoff (the last one quietly).
fn optional_failure(owned: &Owned, e: kube::Error) -> Result<Kept, kube::Error> {
    const REFUSALS: [u16; 3] = [400, 403, 422];
    // A namespace being deleted refuses every create (403): the reconcile
    // is told so and says nothing, as for any write there.
    if super::failure::namespace_terminating(&e) {
        return Err(e);
    }
    match e {
        kube::Error::Api(s) if owned.install_hint.is_some() && s.code == NOT_FOUND => {
            tracing::warn!(object = %owned.describe(), kind = %owned.kind(), "the cluster does not serve this kind");
            Ok(Kept::NotServed)
        }
        kube::Error::Api(s) if owned.install_hint.is_some() || REFUSALS.contains(&s.code) => {
            tracing::warn!(object = %owned.describe(), error = %s.message, "an owned object was refused");
            Ok(Kept::Refused(refused(owned, &s)))
        }
        e => Err(e),
    }
}

/// What the cluster must serve for `owned`, in words: the CRD to install,
/// or the built-in API (`*.k8s.io`) to enable.
fn what_to_serve(owned: &Owned) -> String {
    let r = &owned.resource;
    if r.group.ends_with(".k8s.io") && !r.group.ends_with(".x-k8s.io") {
        format!("the built-in API {} {}", r.api_version, r.kind)
    } else {
        format!(
            "{} {} (the CRD {}.{})",
            r.api_version, r.kind, r.plural, r.group
        )
    }
}

/// The GangUnavailable message for an optional object of a kind the
/// cluster does not serve: which CRD or API, and how to get it.
pub(super) fn not_served(owned: &Owned) -> String {
    format!(
        "the cluster does not serve {} for {}: {}",
        what_to_serve(owned),
        owned.describe(),
        owned.install_hint.unwrap_or_default()
    )
}

/// The GangUnavailable message for an optional object the API server
/// refused: its words, and for an RBAC refusal the permission dljob lacks
/// (other 403s — a quota, a namespace being deleted, a policy webhook —
/// say their own way out).
fn refused(owned: &Owned, status: &kube::core::Status) -> String {
    let r = &owned.resource;
    let rbac = status.code == 403
        && status.message.contains("is forbidden: User ")
        && status.message.contains(" cannot ");
    let way_out = if rbac {
        format!(
            "; grant dljob's service account get, create and patch on {}.{} (deploy/ does)",
            r.plural, r.group
        )
    } else {
        String::new()
    };
    format!(
        "{} was refused: {}{way_out}",
        owned.describe(),
        status.message
    )
}

/// Optional objects (a gang's PodGroup) whose write the API server
/// answered without some of what dljob declared — a field of a feature it
/// has disabled, such as a PodGroup's `schedulingConstraints` without the
/// `TopologyAwareWorkloadScheduling` gate — by object, with the body
/// declared then. Reported, and not written again until dljob declares
/// something else (or restarts): otherwise every reconcile would write.
#[derive(Default, Debug)]
pub struct Dropped(std::sync::Mutex<BTreeMap<String, Value>>);

impl Dropped {
    /// After a write that the API server answered with `stored`.
    fn check<K: serde::Serialize>(
        &self,
        key: String,
        owned: &Owned,
        desired: &Value,
        stored: &K,
    ) -> Kept {
        let stored = serde_json::to_value(stored).unwrap_or_default();
        let mut map = self
            .0
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner);
        if owned.install_hint.is_none() || resources::satisfies(&stored, desired) {
            map.remove(&key);
            return Kept::Written;
        }
        // Entries of deleted jobs are not pruned: a bound instead (past it,
        // each such object is written once more).
        if map.len() >= DROPPED_MAX {
            map.clear();
        }
        map.insert(key, desired.clone());
        let message = Self::message(owned, desired, &stored);
        tracing::warn!(object = %owned.describe(), %message, "the API server did not keep what dljob wrote");
        Kept::Dropped(message)
    }

    /// Whether `desired` is what the API server dropped fields of last time.
    fn again(&self, key: &str, desired: &Value) -> bool {
        let map = self
            .0
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner);
        map.get(key) == Some(desired)
    }

    /// Names the declared `spec` fields that `stored` lacks.
    fn message(owned: &Owned, desired: &Value, stored: &Value) -> String {
        let missing: Vec<String> = desired["spec"]
            .as_object()
            .into_iter()
            .flatten()
            .filter(|(k, v)| {
                !stored["spec"]
                    .get(*k)
                    .is_some_and(|s| resources::satisfies(s, v))
            })
            .map(|(k, _)| format!("spec.{k}"))
            .collect();
        format!(
            "the API server did not keep {} of {}: a feature it has disabled? (a PodGroup's spec.schedulingConstraints needs the feature gate TopologyAwareWorkloadScheduling); dljob does not write it again until the job declares something else",
            if missing.is_empty() { "everything dljob declared".to_owned() } else { missing.join(", ") },
            owned.describe()
        )
    }
}

/// At most this many objects are remembered in [`Dropped`].
const DROPPED_MAX: usize = 10_000;

/// Whether the DLJob `name`, as the API server holds it now, records
/// `secret` as its SSH Secret.
pub(super) async fn recorded(
    client: &Client,
    namespace: &str,
    name: &str,
    secret: &str,
) -> Result<bool, kube::Error> {
    let now = Api::<DLJob>::namespaced(client.clone(), namespace)
        .get_opt(name)
        .await?;
    Ok(now
        .and_then(|j| j.status)
        .and_then(|s| s.ssh_secret)
        .is_some_and(|s| s == secret))
}

#[cfg(test)]
mod tests {
    use kube::api::{ApiResource, DynamicObject};
    use kube::core::Status;

    use super::{not_served, refused};
    use crate::reconciler::resources::{Keep, Owned};

    fn pod_group(group: &str, version: &str) -> Owned {
        let resource = ApiResource {
            group: group.into(),
            version: version.into(),
            api_version: format!("{group}/{version}"),
            kind: "PodGroup".into(),
            plural: "podgroups".into(),
        };
        Owned {
            object: DynamicObject::new("mnist", &resource),
            resource,
            keep: Keep::Apply,
            install_hint: Some("install it"),
        }
    }

    #[test]
    fn a_missing_kind_names_the_crd_or_the_built_in_api() {
        assert_eq!(
            not_served(&pod_group("scheduling.x-k8s.io", "v1alpha1")),
            "the cluster does not serve scheduling.x-k8s.io/v1alpha1 PodGroup (the CRD podgroups.scheduling.x-k8s.io) for PodGroup/mnist: install it"
        );
        assert_eq!(
            not_served(&pod_group("scheduling.k8s.io", "v1alpha2")),
            "the cluster does not serve the built-in API scheduling.k8s.io/v1alpha2 PodGroup for PodGroup/mnist: install it"
        );
    }

    #[test]
    fn only_an_rbac_refusal_is_told_to_grant_a_permission() {
        let owned = pod_group("scheduling.volcano.sh", "v1beta1");
        let rbac = Status::failure(
            "podgroups.scheduling.volcano.sh \"mnist\" is forbidden: User \"system:serviceaccount:dljob-system:dljob\" cannot create resource \"podgroups\" in API group \"scheduling.volcano.sh\" in the namespace \"ml\"",
            "Forbidden",
        )
        .with_code(403);
        assert!(refused(&owned, &rbac)
            .ends_with("; grant dljob's service account get, create and patch on podgroups.scheduling.volcano.sh (deploy/ does)"));
        let quota = Status::failure(
            "podgroups.scheduling.volcano.sh \"mnist\" is forbidden: exceeded quota: objects, requested: count/podgroups.scheduling.volcano.sh=1, used: 10, limited: 10",
            "Forbidden",
        )
        .with_code(403);
        assert_eq!(
            refused(&owned, &quota),
            "PodGroup/mnist was refused: podgroups.scheduling.volcano.sh \"mnist\" is forbidden: exceeded quota: objects, requested: count/podgroups.scheduling.volcano.sh=1, used: 10, limited: 10"
        );
    }
}
