//! The I/O around [`status::next`]: read the job's members from the
//! reflector stores, ensure the owned objects, write the status, publish
//! the Event and execute the actions. Nothing here decides anything.

use std::sync::Arc;
use std::time::{Duration, Instant};

use k8s_openapi::api::apps::v1::StatefulSet;
use k8s_openapi::api::batch::v1::Job;
use std::collections::BTreeMap;

use k8s_openapi::api::core::v1::{Pod, PodTemplate, PodTemplateSpec, Service};
use k8s_openapi::jiff::Timestamp;
use kube::api::{
    Api, DeleteParams, DynamicObject, ListParams, Patch, PatchParams, PostParams, Preconditions,
};
use kube::runtime::controller::Action as Requeue;
use kube::runtime::reflector::{ObjectRef, Store};
use kube::{Client, Resource, ResourceExt};
use serde_json::{json, Value};

use super::events::Recorder;
use super::index::MemberIndex;
use super::listed::Unreadable;
use super::metrics::Metrics;
use super::observe;
use super::resources::{self, Keep, Owned};
use super::status::{self, Action, JobPlan, MemberKind, Observed};
use crate::config::Config;
use crate::contract as c;
use crate::crd::DLJob;
use crate::crd::SavedPod;
use crate::object::Kind;

/// The field manager of every write.
pub(crate) const MANAGER: &str = "dljob";

/// Reconcile again at the latest after this long: a safety net for a
/// member event the debounced trigger saw before the member stores did.
pub(crate) const RESYNC: Duration = Duration::from_secs(300);

/// Why a reconcile failed; the controller retries it with a backoff.
#[derive(Debug, thiserror::Error)]
pub enum Error {
    #[error("DLJob {job} cannot be reconciled: {reason}")]
    BadSpec { job: String, reason: String },
    #[error("Kubernetes API: {0}")]
    Kube(#[from] kube::Error),
    #[error("generating the SSH key: {0}")]
    Ssh(#[from] ssh_key::Error),
    /// A bare pod's name is held by a pod not of the job.
    #[error("{0}")]
    NameTaken(String),
}

impl Error {
    /// The `error` label of `dljob_reconcile_errors_total`.
    pub(crate) fn metric_label(&self) -> &'static str {
        match self {
            Error::BadSpec { .. } => "bad_spec",
            Error::Kube(_) => "kube",
            Error::Ssh(_) => "ssh",
            Error::NameTaken(_) => "name_taken",
        }
    }
}

/// The workloads the reflectors keep, trimmed (see [`observe`]), and the
/// owned Services. Pods are not kept: the member index holds what is read
/// of each ([`crate::reconciler::index::Entry::pod`]).
#[derive(Clone)]
pub struct Stores {
    pub statefulsets: Store<StatefulSet>,
    pub jobs: Store<Job>,
    /// The owned Services, trimmed to what their drift check compares.
    pub services: Store<Service>,
    /// The jobs whose members or owned objects changed: the controller
    /// reconciles them (only the leader drains it).
    pub changed: Arc<super::Changed>,
    /// The DLJobs that exist but do not parse (set aside, not recreated).
    pub unreadable: Arc<super::listed::Unreadable>,
}

/// What every reconcile shares.
pub struct Context {
    pub client: Client,
    pub recorder: Recorder,
    pub index: Arc<MemberIndex>,
    pub stores: Stores,
    pub dljobs: Store<DLJob>,
    pub metrics: Arc<Metrics>,
    pub config: tokio::sync::watch::Receiver<Config>,
    /// The clock (a fixed one in tests).
    pub now: fn() -> Timestamp,
    /// What the API server did not keep of dljob's writes.
    pub dropped: Dropped,
}

/// The current second: status times have one-second precision.
pub(crate) fn now() -> Timestamp {
    Timestamp::from_second(Timestamp::now().as_second()).unwrap_or(Timestamp::UNIX_EPOCH)
}

/// The job's plan from its spec.
pub fn plan_of(job: &DLJob) -> Result<JobPlan, Error> {
    let bad = |reason: String| Error::BadSpec {
        job: job.name_any(),
        reason,
    };
    let framework = job
        .spec
        .framework()
        .ok_or_else(|| bad(format!("unknown framework {:?}", job.spec.framework)))?;
    Ok(JobPlan {
        framework,
        topology: job.spec.replicas.clone(),
        policies: job.spec.policies.clone(),
    })
}

/// `result`, with the API errors of `codes` counted as success.
fn tolerate(result: Result<(), kube::Error>, codes: &[u16]) -> Result<(), kube::Error> {
    match result {
        Err(kube::Error::Api(s)) if codes.contains(&s.code) => Ok(()),
        other => other,
    }
}

const NOT_FOUND: u16 = 404;
const CONFLICT: u16 = 409;

/// A write made only to the object with the uid it names (`metadata.uid`
/// in the body) found another object of that name: the API server answers
/// 422 (uid is immutable) for a patch, 409 for a create-by-apply or the
/// scale subresource. The object observed is gone: nothing to do.
fn replaced(e: &kube::Error) -> bool {
    matches!(e, kube::Error::Api(s)
        if (s.code == 422 && s.message.contains("metadata.uid")) || s.code == CONFLICT)
}

/// `result` with "gone" (404) and "replaced" ([`replaced`]) as success.
fn tolerate_gone_or_replaced(result: Result<(), kube::Error>) -> Result<(), kube::Error> {
    match result {
        Err(kube::Error::Api(s)) if s.code == NOT_FOUND => Ok(()),
        Err(e) if replaced(&e) => Ok(()),
        other => other,
    }
}

/// `metadata` for a merge patch: `uid` (a precondition: a replaced object
/// of the same name refuses the patch) beside `rest`. An object observed
/// without a uid (never one from the API server) is patched unguarded.
fn guarded(uid: &str, rest: serde_json::Value) -> serde_json::Value {
    let mut meta = rest;
    if !uid.is_empty() {
        meta["uid"] = json!(uid);
    }
    meta
}

/// What the reflectors hold of an owned object.
pub(crate) enum Current {
    /// Not in the cache of labelled objects: absent, or someone else's
    /// without the label — a create tells.
    Absent,
    Present(serde_json::Value),
    /// A kind no reflector watches: it is read.
    Unwatched,
}

impl Stores {
    /// The cluster's copy of `owned`, as far as the reflectors know it.
    pub(crate) fn current(&self, owned: &Owned) -> Current {
        let namespace = owned
            .object
            .metadata
            .namespace
            .as_deref()
            .unwrap_or_default();
        let key = ObjectRef::new(owned.name()).within(namespace);
        match owned.resource.kind.as_str() {
            "Service" => self.services.get(&key).map_or(Current::Absent, |svc| {
                Current::Present(serde_json::to_value(&*svc).unwrap_or_default())
            }),
            _ => Current::Unwatched,
        }
    }
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
enum Kept {
    Unchanged,
    Written,
    /// The cluster does not serve its kind (a scheduler not installed).
    NotServed,
    /// The API server (or the scheduler's webhook) refused an optional
    /// object, e.g. a PodGroup naming a queue that does not exist.
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
async fn keep(
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
            // An optional object dljob may not read (RBAC without that
            // kind): reported like a refusal, so the job's status, restarts
            // and gate go on.
            Err(kube::Error::Api(s)) if owned.install_hint.is_some() => {
                tracing::warn!(object = %owned.describe(), error = %s.message, "an owned object could not be read");
                return Ok(Kept::Refused(s.message));
            }
            Err(e) => return Err(e),
        },
    };
    let existing = match existing {
        Some(e) => e,
        None => {
            let pp = PostParams {
                field_manager: Some(MANAGER.to_owned()),
                ..PostParams::default()
            };
            match api.create(&pp, &owned.object).await {
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
                Err(kube::Error::Api(s)) if s.code == NOT_FOUND && owned.install_hint.is_some() => {
                    tracing::warn!(object = %owned.describe(), kind = %owned.kind(), "the cluster does not serve this kind");
                    return Ok(Kept::NotServed);
                }
                // An optional object refused must not stop the job's status,
                // restarts and gate: it is reported, and retried next time.
                Err(kube::Error::Api(s)) if owned.install_hint.is_some() => {
                    tracing::warn!(object = %owned.describe(), error = %s.message, "an owned object was refused");
                    return Ok(Kept::Refused(s.message));
                }
                Err(e) => return Err(e),
            }
        }
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
        Err(kube::Error::Api(s)) if owned.install_hint.is_some() => {
            tracing::warn!(object = %owned.describe(), error = %s.message, "an owned object was refused");
            Ok(Kept::Refused(s.message))
        }
        Err(e) => Err(e),
    }
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

/// Creates `object` unless it exists (AlreadyExists is success).
async fn create_if_absent<K>(api: Api<K>, object: &K) -> Result<(), kube::Error>
where
    K: Resource + Clone + serde::de::DeserializeOwned + serde::Serialize + std::fmt::Debug,
{
    let pp = PostParams {
        field_manager: Some(MANAGER.to_owned()),
        ..PostParams::default()
    };
    tolerate(api.create(&pp, object).await.map(drop), &[CONFLICT])
}

/// The names dljob gives the PodTemplates it saves bare pods' manifests
/// in start so (the API server completes each, `generateName`).
pub(crate) const SAVED_PREFIX: &str = "dljob-recreate-";

/// The job's saved manifests this DLJob controls, by the PodTemplate's
/// uid. Which of them a recreate uses is the status's to say (by uid): a
/// PodTemplate anyone else made, whatever its name, labels or owner, is
/// never recreated from.
async fn saved_manifests(
    client: &Client,
    namespace: &str,
    job: &DLJob,
) -> Result<BTreeMap<String, PodTemplate>, kube::Error> {
    let api: Api<PodTemplate> = Api::namespaced(client.clone(), namespace);
    let name = job.name_any();
    let uid = job.uid().unwrap_or_default();
    let list = api
        .list(&ListParams::default().labels(&format!("{}={name}", c::JOB)))
        .await?;
    Ok(list
        .items
        .into_iter()
        .filter(|t| foreign_controller(&t.metadata, &name, &uid).is_none())
        .filter(|t| t.name_any().starts_with(SAVED_PREFIX))
        .filter_map(|t| Some((t.uid()?, t)))
        .collect())
}

/// One reconcile of one DLJob, timed and counted.
pub async fn reconcile(job: Arc<DLJob>, ctx: Arc<Context>) -> Result<Requeue, Error> {
    let started = Instant::now();
    let result = reconcile_job(&job, &ctx).await;
    ctx.metrics.reconciled(started.elapsed());
    if let Err(e) = &result {
        ctx.metrics.failed(e.metric_label());
    }
    result
}

/// After a failed reconcile: retry soon.
pub(crate) fn error_policy(job: Arc<DLJob>, error: &Error, _ctx: Arc<Context>) -> Requeue {
    tracing::warn!(job = %job.name_any(), %error, "reconcile failed");
    match error {
        Error::BadSpec { .. } => Requeue::await_change(),
        _ => Requeue::requeue(Duration::from_secs(15)),
    }
}

async fn reconcile_job(job: &DLJob, ctx: &Context) -> Result<Requeue, Error> {
    let name = job.name_any();
    let namespace = job.namespace().unwrap_or_default();
    let uid = job.uid().unwrap_or_default();
    let plan = plan_of(job)?;
    let client = &ctx.client;

    let config = ctx.config.borrow().clone();
    let mut created_secret = None;
    let mut not_served = Vec::new();
    let mut foreign = Vec::new();
    if let Err(why) = crate::tensorboard::recorded_volume(job) {
        tracing::warn!(job = %name, %namespace, %why, "no TensorBoard for this job");
    }
    // Only a PodGroup wants the members' requests.
    let min_resources = job
        .spec
        .scheduler()
        .filter(|s| s.wants_min_resources())
        .and_then(|_| {
            let members = ctx.index.members(&namespace, &name, Some(&uid));
            resources::min_resources(&job.spec, members.iter().map(|e| &e.member))
        });
    let now = (ctx.now)();
    for owned in resources::owned(job, &config, now, min_resources, resources::generate_key)? {
        let current = ctx.stores.current(&owned);
        match keep(
            client,
            &namespace,
            &owned,
            current,
            (&name, &uid),
            &ctx.dropped,
        )
        .await?
        {
            Kept::Written if owned.keep == Keep::CreateOnce => {
                // Recorded at once: a Secret of that name found later is the
                // job's only if the status says so (dljob never reads it).
                // The status is written whole, as every status write is: a
                // new DLJob has none yet, and a status without its phase is
                // refused (status.phase: Required value).
                let mut record = job.status.clone().unwrap_or_default();
                record.ssh_secret = Some(owned.name().to_owned());
                write_status(&Api::namespaced(client.clone(), &namespace), &name, &record).await?;
                created_secret = Some(owned.name().to_owned());
            }
            Kept::NotServed => not_served.push(format!(
                "the cluster does not serve {} ({}): {}",
                owned.kind(),
                owned.describe(),
                owned.install_hint.unwrap_or_default()
            )),
            Kept::Refused(message) => {
                not_served.push(format!("{} was refused: {message}", owned.describe()))
            }
            Kept::Dropped(message) => not_served.push(message),
            // The job's own Secret, recorded by an earlier reconcile whose
            // status write this one's cached DLJob does not show yet: read
            // the DLJob itself before calling the Secret foreign (and before
            // writing a status without the record).
            Kept::Foreign(_)
                if owned.keep == Keep::CreateOnce
                    && recorded(client, &namespace, &name, owned.name()).await? =>
            {
                created_secret = Some(owned.name().to_owned());
            }
            Kept::Foreign(why) => {
                tracing::warn!(job = %name, %namespace, "{why}");
                foreign.push(why);
            }
            Kept::Retry => return Ok(Requeue::requeue(Duration::from_secs(1))),
            Kept::Unchanged | Kept::Written => {}
        }
    }

    let mut observed = observe_members(ctx, &namespace, &name, &uid);
    // The manifests saved to recreate bare pods: read while any is pending.
    let pending = job
        .status
        .as_ref()
        .is_some_and(|s| !s.pending_recreates.is_empty());
    let saved = if pending {
        saved_manifests(client, &namespace, job).await?
    } else {
        BTreeMap::new()
    };
    observed.saved = saved
        .iter()
        .map(|(uid, t)| SavedPod {
            name: t.name_any(),
            uid: uid.clone(),
            digest: Some(observe::saved_digest(t)),
        })
        .collect();
    let mut out = status::next(
        &plan,
        &observed,
        job.status.as_ref(),
        job.metadata.generation,
        (ctx.now)(),
    );
    if created_secret.is_some() {
        out.status.ssh_secret = created_secret;
    }
    out.events.extend(status::set_owned_condition(
        &mut out.status.conditions,
        &not_served,
        (ctx.now)(),
    ));
    out.events.extend(status::set_ownership_condition(
        &mut out.status.conditions,
        &foreign,
        (ctx.now)(),
    ));

    let jobs: Api<DLJob> = Api::namespaced(client.clone(), &namespace);
    if job.status.as_ref() != Some(&out.status) {
        write_status(&jobs, &name, &out.status).await?;
    }
    for event in &out.events {
        if let Err(e) = ctx.recorder.publish(&job.object_ref(&()), event).await {
            tracing::warn!(job = %name, error = %e, "publishing an Event failed");
        }
    }
    ctx.metrics.restarts.inc_by(u64::from(out.new_restarts));
    let target = Target {
        client,
        namespace: &namespace,
        job,
        saved: &saved,
        reserved: crate::mutate::reserved_volume_names(&config),
    };
    // Every action is tried, one failing or another: one refused (say by
    // a webhook) must not keep the job from the rest (its TTL). A bare
    // pod is deleted only once its manifest is saved, and recorded.
    let mut failed: Option<Error> = None;
    let mut unsaved: Vec<&str> = Vec::new();
    for action in &out.actions {
        if let Action::DeletePod { uid, .. } = action {
            if unsaved.contains(&uid.as_str()) {
                continue;
            }
        }
        let result = match action {
            Action::SavePod {
                name: pod,
                uid: pod_uid,
            } => match target.save_pod(pod, pod_uid).await {
                Ok(Some(saved)) => {
                    record_saved(&jobs, &name, &mut out.status, pod_uid, saved).await
                }
                Ok(None) => Ok(()),
                Err(e) => Err(e),
            },
            Action::CreatePod { name: pod, .. } => match target.execute(action).await {
                Err(Error::NameTaken(who)) => {
                    let event = status::JobEvent {
                        warning: true,
                        reason: "RecreateBlocked".to_owned(),
                        note: format!(
                            "bare pod {pod} cannot be recreated: {who}; delete it (dljob then recreates the job's)"
                        ),
                    };
                    if let Err(e) = ctx.recorder.publish(&job.object_ref(&()), &event).await {
                        tracing::warn!(job = %name, error = %e, "publishing an Event failed");
                    }
                    Ok(())
                }
                other => other,
            },
            _ => target.execute(action).await,
        };
        if let Err(e) = result {
            tracing::warn!(job = %name, %namespace, ?action, error = %e, "an action failed; the others go on");
            if let Action::SavePod { uid, .. } = action {
                unsaved.push(uid);
            }
            failed.get_or_insert(e);
        }
    }
    if let Some(e) = failed {
        return Err(e);
    }
    let tensorboard_stops = job
        .spec
        .tensorboard
        .as_ref()
        .and_then(|_| crate::tensorboard::job_runs(job, &config.tensorboard, (ctx.now)()).1);
    let requeue = [out.requeue_after, tensorboard_stops]
        .into_iter()
        .flatten()
        .fold(RESYNC, Duration::min);
    Ok(Requeue::requeue(requeue))
}

/// The members of the run of DLJob `uid`, as the status function takes
/// them: what another DLJob's finished run left ([`c::FINISHED_RUN`]) is
/// not the run's.
///
/// Pods come from the member index; workloads from the stores, every
/// StatefulSet and Job labelled with the job: one `kubectl scale`d beyond
/// its role's count no longer parses as a member (the webhook refuses that
/// size), yet it is the job's, to report and to stop.
pub fn observe_members(ctx: &Context, namespace: &str, job: &str, uid: &str) -> Observed {
    let mut observed = Observed::default();
    for entry in ctx.index.members(namespace, job, Some(uid)) {
        let m = &entry.member;
        if m.kind == Kind::Pod {
            observed.pods.extend(entry.pod);
        }
    }
    let labels = |meta: &kube::api::ObjectMeta| -> Option<String> {
        let l = meta.labels.as_ref()?;
        let left = observe::finished_run(meta).is_some_and(|run| run != uid);
        (meta.namespace.as_deref() == Some(namespace) && l.get(c::JOB)? == job && !left)
            .then(|| l.get(c::ROLE).cloned().unwrap_or_default())
    };
    let mut workloads: Vec<(String, status::Workload)> = Vec::new();
    for sts in ctx.stores.statefulsets.state() {
        if let Some(role) = labels(&sts.metadata) {
            workloads.push((sts.name_any(), observe::observe_statefulset(&role, &sts)));
        }
    }
    for j in ctx.stores.jobs.state() {
        if let Some(role) = labels(&j.metadata) {
            workloads.push((j.name_any(), observe::observe_job(&role, &j)));
        }
    }
    // StatefulSets, then Jobs, each by name.
    workloads.sort_by(|a, b| {
        let kind = |w: &status::Workload| matches!(w, status::Workload::Job { .. });
        (kind(&a.1), &a.0).cmp(&(kind(&b.1), &b.0))
    });
    observed.workloads = workloads.into_iter().map(|(_, w)| w).collect();
    observed
}

/// Whether the DLJob `name`, as the API server holds it now, records
/// `secret` as its SSH Secret.
async fn recorded(
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

/// Records in the status the PodTemplate bare pod `pod_uid` was saved in,
/// before the pod is deleted: a recreate uses only what the status names.
async fn record_saved(
    jobs: &Api<DLJob>,
    name: &str,
    status: &mut crate::crd::DLJobStatus,
    pod_uid: &str,
    saved: SavedPod,
) -> Result<(), Error> {
    if let Some(r) = status
        .pending_recreates
        .iter_mut()
        .find(|r| r.uid == pod_uid)
    {
        r.saved = Some(saved);
    }
    write_status(jobs, name, status).await?;
    Ok(())
}

/// Writes a DLJob's status whole: server-side applied by dljob, its only
/// manager, so that what is applied is what the status becomes (a field
/// left out is removed) and what the API server checks is a whole status.
async fn write_status(
    jobs: &Api<DLJob>,
    name: &str,
    status: &crate::crd::DLJobStatus,
) -> Result<(), kube::Error> {
    let body = json!({"apiVersion": "dljob.dev/v1alpha1", "kind": "DLJob", "status": status});
    jobs.patch_status(
        name,
        &PatchParams::apply(MANAGER).force(),
        &Patch::Apply(&body),
    )
    .await?;
    Ok(())
}

/// Where one reconcile's actions go.
struct Target<'a> {
    client: &'a Client,
    namespace: &'a str,
    job: &'a DLJob,
    /// The saved manifests this DLJob controls, by PodTemplate uid.
    saved: &'a BTreeMap<String, PodTemplate>,
    /// dljob's volume names (a saved manifest leaves them out: the webhook
    /// adds its own again when the pod is recreated).
    reserved: Vec<&'a str>,
}

impl Target<'_> {
    fn merge() -> PatchParams {
        PatchParams {
            field_manager: Some(MANAGER.to_owned()),
            ..PatchParams::default()
        }
    }

    /// Executes one action; each is idempotent (gone, already done and a
    /// member replaced under the same name are success).
    async fn execute(&self, action: &Action) -> Result<(), Error> {
        let (client, namespace) = (self.client, self.namespace);
        let pods = || Api::<Pod>::namespaced(client.clone(), namespace);
        let merge = Self::merge();
        match action {
            Action::SavePod { name, uid } => {
                self.save_pod(name, uid).await?;
            }
            Action::DeletePod { name, uid } => {
                let dp = DeleteParams {
                    preconditions: Some(Preconditions {
                        uid: Some(uid.clone()),
                        resource_version: None,
                    }),
                    ..DeleteParams::default()
                };
                tolerate(
                    pods().delete(name, &dp).await.map(drop),
                    &[NOT_FOUND, CONFLICT],
                )?
            }
            Action::RemoveSchedulingGate { name, uid } => {
                // Strategic merge: schedulingGates merge by name, so this
                // removes dljob's gate and nothing else; the uid makes it a
                // no-op on a recreated pod of the same name.
                let patch = json!({
                    "metadata": guarded(uid, json!({})),
                    "spec": {"schedulingGates": [{"$patch": "delete", "name": c::WORKERS_READY_GATE}]}
                });
                tolerate_gone_or_replaced(
                    pods()
                        .patch(name, &merge, &Patch::Strategic(&patch))
                        .await
                        .map(drop),
                )?
            }
            Action::CreatePod { name, saved } => {
                let Some(template) = self.saved.get(&saved.uid).filter(|t| {
                    saved
                        .digest
                        .as_deref()
                        .is_none_or(|d| d == observe::saved_digest(t))
                }) else {
                    return Ok(()); // not listed, or changed: status::next gives it up
                };
                let template = template.template.clone().unwrap_or_default();
                let meta = template.metadata.unwrap_or_default();
                let pod = Pod {
                    metadata: kube::api::ObjectMeta {
                        name: Some(name.clone()),
                        namespace: Some(namespace.to_owned()),
                        labels: meta.labels,
                        annotations: meta.annotations,
                        ..Default::default()
                    },
                    spec: template.spec,
                    status: None,
                };
                let pp = PostParams {
                    field_manager: Some(MANAGER.to_owned()),
                    ..PostParams::default()
                };
                match pods().create(&pp, &pod).await {
                    Ok(_) => {}
                    // Not one of the job's (those the decision saw): someone
                    // else's pod took the name meanwhile.
                    Err(kube::Error::Api(s)) if s.code == CONFLICT => {
                        return Err(Error::NameTaken(format!(
                            "a pod named {name} exists that is not this job's"
                        )))
                    }
                    Err(e) => return Err(e.into()),
                }
            }
            Action::DeleteSaved { saved } => {
                let api: Api<PodTemplate> = Api::namespaced(client.clone(), namespace);
                let dp = DeleteParams {
                    preconditions: Some(Preconditions {
                        uid: Some(saved.uid.clone()),
                        resource_version: None,
                    }),
                    ..DeleteParams::default()
                };
                tolerate(
                    api.delete(&saved.name, &dp).await.map(drop),
                    &[NOT_FOUND, CONFLICT],
                )?
            }
            Action::ScaleStatefulSetToZero { name, uid, from } => {
                // One patch of the StatefulSet itself (not its scale
                // subresource, which carries no labels for the admission
                // policy to judge): replicas 0 with the size it had, which
                // the validating webhook reads as its size still.
                let sets: Api<StatefulSet> = Api::namespaced(client.clone(), namespace);
                let stop = json!({
                    "metadata": guarded(uid, json!({"annotations": {c::SCALED_FROM: from.to_string()}})),
                    "spec": {"replicas": 0}
                });
                tolerate_gone_or_replaced(
                    sets.patch(name, &merge, &Patch::Merge(&stop))
                        .await
                        .map(drop),
                )?
            }
            Action::SuspendJob { name, uid } => {
                let jobs: Api<Job> = Api::namespaced(client.clone(), namespace);
                let suspend =
                    json!({"metadata": guarded(uid, json!({})), "spec": {"suspend": true}});
                tolerate_gone_or_replaced(
                    jobs.patch(name, &merge, &Patch::Merge(&suspend))
                        .await
                        .map(drop),
                )?
            }
            Action::MarkFinished { kind, name, uid } => {
                let mark = json!({"metadata": guarded(
                    uid,
                    json!({"annotations": {c::FINISHED_RUN: self.job.uid().unwrap_or_default()}})
                )});
                let patch = Patch::Merge(&mark);
                let result = match kind {
                    MemberKind::Pod => pods().patch(name, &merge, &patch).await.map(drop),
                    MemberKind::StatefulSet => {
                        Api::<StatefulSet>::namespaced(client.clone(), namespace)
                            .patch(name, &merge, &patch)
                            .await
                            .map(drop)
                    }
                    MemberKind::Job => Api::<Job>::namespaced(client.clone(), namespace)
                        .patch(name, &merge, &patch)
                        .await
                        .map(drop),
                };
                tolerate_gone_or_replaced(result)?
            }
            Action::DeleteDLJob => {
                let jobs: Api<DLJob> = Api::namespaced(client.clone(), namespace);
                let dp = DeleteParams {
                    preconditions: Some(Preconditions {
                        uid: self.job.uid(),
                        resource_version: None,
                    }),
                    ..DeleteParams::background()
                };
                tolerate(
                    jobs.delete(&self.job.name_any(), &dp).await.map(drop),
                    &[NOT_FOUND, CONFLICT],
                )?
            }
        }
        Ok(())
    }

    /// Keeps bare pod `name` (if it still has `uid`) in a new PodTemplate
    /// the DLJob owns, named by the API server (`generateName`: no name to
    /// squat), to recreate it from once it is deleted. None: the pod is gone
    /// or was replaced (the delete that follows is then a no-op).
    async fn save_pod(&self, name: &str, uid: &str) -> Result<Option<SavedPod>, Error> {
        let (client, namespace) = (self.client, self.namespace);
        let Some(pod) = Api::<Pod>::namespaced(client.clone(), namespace)
            .get_opt(name)
            .await?
        else {
            return Ok(None);
        };
        if pod.uid().as_deref() != Some(uid) {
            return Ok(None);
        }
        let manifest = observe::recreate_manifest(&pod, &self.reserved);
        let template = PodTemplate {
            metadata: kube::api::ObjectMeta {
                generate_name: Some(SAVED_PREFIX.to_owned()),
                namespace: Some(namespace.to_owned()),
                labels: Some(BTreeMap::from([(c::JOB.to_owned(), self.job.name_any())])),
                annotations: Some(BTreeMap::from([(c::RECREATES.to_owned(), name.to_owned())])),
                owner_references: self.job.controller_owner_ref(&()).map(|o| vec![o]),
                ..Default::default()
            },
            template: Some(PodTemplateSpec {
                metadata: serde_json::from_value(json!({
                    "labels": manifest["metadata"]["labels"],
                    "annotations": manifest["metadata"]["annotations"],
                }))
                .ok(),
                spec: serde_json::from_value(manifest["spec"].clone()).ok(),
            }),
        };
        let pp = PostParams {
            field_manager: Some(MANAGER.to_owned()),
            ..PostParams::default()
        };
        let created = Api::<PodTemplate>::namespaced(client.clone(), namespace)
            .create(&pp, &template)
            .await?;
        Ok(Some(SavedPod {
            name: created.name_any(),
            uid: created.uid().unwrap_or_default(),
            digest: Some(observe::saved_digest(&created)),
        }))
    }
}

/// How long a DLJob whose Event could not be published waits before it
/// is tried again (sooner when another DLJob is to be told).
const RETELL: Duration = Duration::from_secs(30);

/// The Warning Event on a DLJob that does not parse: what dljob does about
/// it and the way out, then why (a reason cut by the recorder cuts only
/// the reason).
pub fn unreadable_event(why: &str) -> status::JobEvent {
    status::JobEvent {
        warning: true,
        reason: "Unreadable".to_owned(),
        note: format!(
            "this DLJob does not parse, so dljob sets it aside and goes on with the other jobs: put it right with kubectl edit, or delete it and dljob makes it again from the job's members. Why: {why}"
        ),
    }
}

/// Tells each DLJob that does not parse why, on itself (`kubectl describe
/// dljob` shows it), as `listed::readable` sets them aside: one Warning
/// Event per DLJob and reason. Returns how many could not be published
/// (they stay to be told).
pub async fn tell_untold(recorder: &Recorder, unreadable: &Unreadable) -> usize {
    let mut failed = 0;
    for (job, why) in unreadable.untold() {
        match recorder.publish(&job, &unreadable_event(&why)).await {
            Ok(()) => unreadable.told(&job, &why),
            Err(e) => {
                failed += 1;
                tracing::warn!(
                    job = job.name.as_deref().unwrap_or(""),
                    namespace = job.namespace.as_deref().unwrap_or(""),
                    error = %e,
                    "publishing an Event failed; tried again later"
                );
            }
        }
    }
    failed
}

/// [`tell_untold`] whenever there is news, and again after [`RETELL`]
/// while an Event could not be published. Runs until dropped.
pub async fn tell_unreadable(recorder: &Recorder, unreadable: &Unreadable) {
    loop {
        if tell_untold(recorder, unreadable).await == 0 {
            unreadable.news().await;
        } else {
            let _ = tokio::time::timeout(RETELL, unreadable.news()).await;
        }
    }
}

/// Creates the DLJob of every job that has a live member and no DLJob yet
/// (first sight of a member). Returns how many it created.
pub async fn create_missing(
    client: &Client,
    index: &MemberIndex,
    dljobs: &Store<DLJob>,
    unreadable: &super::listed::Unreadable,
) -> Result<usize, kube::Error> {
    let mut created = 0;
    for ((namespace, name), entry) in index.live_jobs() {
        let job = ObjectRef::new(&name).within(&namespace);
        if dljobs.get(&job).is_some() || unreadable.contains(&job) {
            continue;
        }
        let job = resources::dljob_for(&entry.member, entry.tensorboard_volume.as_ref());
        match create_if_absent(Api::<DLJob>::namespaced(client.clone(), &namespace), &job).await {
            Ok(()) => created += 1,
            // One job the API server refuses (a spec its schema rejects)
            // must not keep the others from getting theirs.
            Err(kube::Error::Api(s)) if s.code == 422 || s.code == 400 => {
                tracing::warn!(job = %name, %namespace, error = %s.message, "the API server refused the job's DLJob");
            }
            Err(e) => return Err(e),
        }
    }
    Ok(created)
}
