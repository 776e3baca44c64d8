//! The I/O around [`status::next`]: read the job's members from the
//! reflector stores, ensure the owned objects, write the status, publish
//! the Event and execute the actions. Nothing here decides anything.

use std::sync::Arc;
use std::time::{Duration, Instant};

use k8s_openapi::api::apps::v1::StatefulSet;
use k8s_openapi::api::batch::v1::Job;
use k8s_openapi::api::core::v1::{Pod, Service};
use k8s_openapi::jiff::Timestamp;
use kube::api::{Api, DeleteParams, DynamicObject, Patch, PatchParams, PostParams, Preconditions};
use kube::runtime::controller::Action as Requeue;
use kube::runtime::events::{Event, EventType, Recorder};
use kube::runtime::reflector::{ObjectRef, Store};
use kube::{Client, Resource, ResourceExt};
use serde_json::json;

use super::metrics::Metrics;
use super::observe::{self, MemberIndex};
use super::resources::{self, Keep, Owned};
use super::status::{self, Action, JobPlan, Observed};
use crate::config::Config;
use crate::contract as c;
use crate::crd::DLJob;
use crate::object::Kind;

/// The field manager of every write.
pub const MANAGER: &str = "dljob";

/// Reconcile again at the latest after this long: a safety net for a
/// member event the debounced trigger saw before the member stores did.
pub const RESYNC: Duration = Duration::from_secs(300);

/// Why a reconcile failed; the controller retries it with a backoff.
#[derive(Debug, thiserror::Error)]
pub enum Error {
    #[error("DLJob {job} cannot be reconciled: {reason}")]
    BadSpec { job: String, reason: String },
    #[error("Kubernetes API: {0}")]
    Kube(#[from] kube::Error),
    #[error("generating the SSH key: {0}")]
    Ssh(#[from] ssh_key::Error),
}

impl Error {
    /// The `error` label of `dljob_reconcile_errors_total`.
    pub fn metric_label(&self) -> &'static str {
        match self {
            Error::BadSpec { .. } => "bad_spec",
            Error::Kube(_) => "kube",
            Error::Ssh(_) => "ssh",
        }
    }
}

/// The workloads the reflectors keep, trimmed (see [`observe`]), and the
/// owned Services. Pods are not kept: the member index holds what is read
/// of each ([`observe::Entry::pod`]).
#[derive(Clone)]
pub struct Stores {
    pub statefulsets: Store<StatefulSet>,
    pub jobs: Store<Job>,
    /// The owned Services (full objects: their drift is repaired).
    pub services: Store<Service>,
    /// The jobs whose members or owned objects changed: the controller
    /// reconciles them (only the leader drains it).
    pub changed: Arc<super::Changed>,
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
}

/// The current second: status times have one-second precision.
pub fn now() -> Timestamp {
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

fn tolerate(result: Result<(), kube::Error>, codes: &[u16]) -> Result<(), kube::Error> {
    match result {
        Err(kube::Error::Api(s)) if codes.contains(&s.code) => Ok(()),
        other => other,
    }
}

const NOT_FOUND: u16 = 404;
const CONFLICT: u16 = 409;

/// What the reflectors hold of an owned object.
pub enum Current {
    Absent,
    Present(serde_json::Value),
    /// A kind no reflector watches: assume it drifted.
    Unwatched,
}

impl Stores {
    /// The cluster's copy of `owned`, as far as the reflectors know it.
    pub fn current(&self, owned: &Owned) -> Current {
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
}

/// Keeps one owned object as its [`Keep`] says: applies it when the
/// cluster's copy is missing or lacks what it declares (force: dljob owns
/// those fields), creates a create-once object (AlreadyExists is success).
/// A kind the cluster does not serve is reported, not retried as an error.
async fn keep(
    client: &Client,
    namespace: &str,
    owned: &Owned,
    current: Current,
) -> Result<Kept, kube::Error> {
    let api: Api<DynamicObject> = Api::namespaced_with(client.clone(), namespace, &owned.resource);
    match owned.keep {
        Keep::CreateOnce => {
            create_if_absent(api, &owned.object).await?;
            Ok(Kept::Written)
        }
        Keep::Apply => {
            if let Current::Present(ref value) = current {
                let desired =
                    serde_json::to_value(&owned.object).map_err(kube::Error::SerdeError)?;
                if resources::satisfies(value, &desired) {
                    return Ok(Kept::Unchanged);
                }
                tracing::info!(object = %owned.describe(), %namespace, "repairing drift");
            }
            let applied = api
                .patch(
                    owned.name(),
                    &PatchParams::apply(MANAGER).force(),
                    &Patch::Apply(&owned.object),
                )
                .await;
            match applied {
                Ok(_) => Ok(Kept::Written),
                Err(kube::Error::Api(s)) if s.code == NOT_FOUND && owned.install_hint.is_some() => {
                    tracing::warn!(object = %owned.describe(), kind = %owned.kind(), "the cluster does not serve this kind");
                    Ok(Kept::NotServed)
                }
                // An optional object refused must not stop the job's status,
                // restarts and gate: it is reported, and retried next time.
                Err(kube::Error::Api(s)) if owned.install_hint.is_some() => {
                    tracing::warn!(object = %owned.describe(), error = %s.message, "an owned object was refused");
                    Ok(Kept::Refused(s.message))
                }
                Err(e) => Err(e),
            }
        }
    }
}

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

/// One reconcile of one DLJob, timed and counted.
pub async fn reconcile(job: Arc<DLJob>, ctx: Arc<Context>) -> Result<Requeue, Error> {
    let started = Instant::now();
    let result = reconcile_job(&job, &ctx).await;
    ctx.metrics.reconciled(started.elapsed());
    ctx.metrics.set_phases(
        ctx.dljobs
            .state()
            .iter()
            .map(|j| j.status.as_ref().map(|s| s.phase).unwrap_or_default()),
    );
    if let Err(e) = &result {
        ctx.metrics.failed(e.metric_label());
    }
    result
}

/// After a failed reconcile: retry soon.
pub fn error_policy(job: Arc<DLJob>, error: &Error, _ctx: Arc<Context>) -> Requeue {
    tracing::warn!(job = %job.name_any(), %error, "reconcile failed");
    match error {
        Error::BadSpec { .. } => Requeue::await_change(),
        _ => Requeue::requeue(Duration::from_secs(15)),
    }
}

async fn reconcile_job(job: &DLJob, ctx: &Context) -> Result<Requeue, Error> {
    let name = job.name_any();
    let namespace = job.namespace().unwrap_or_default();
    let plan = plan_of(job)?;
    let client = &ctx.client;

    let config = ctx.config.borrow().clone();
    let mut created_secret = None;
    let mut not_served = Vec::new();
    if let Err(why) = resources::tensorboard_volume(job) {
        tracing::warn!(job = %name, %namespace, %why, "no TensorBoard for this job");
    }
    // Only a PodGroup wants the members' requests.
    let min_resources = job
        .spec
        .scheduler()
        .and_then(|s| s.pod_group_kind())
        .and_then(|_| {
            let members = ctx.index.members(&namespace, &name);
            resources::min_resources(&job.spec, members.iter().map(|e| &e.member))
        });
    let now = (ctx.now)();
    for owned in resources::owned(job, &config, now, min_resources, resources::generate_key)? {
        match keep(client, &namespace, &owned, ctx.stores.current(&owned)).await? {
            Kept::Written if owned.keep == Keep::CreateOnce => {
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
            _ => {}
        }
    }

    let mut observed = observe_members(ctx, &namespace, &name);
    let decide = |observed: &Observed| {
        status::next(
            &plan,
            observed,
            job.status.as_ref(),
            job.metadata.generation,
            (ctx.now)(),
        )
    };
    let mut out = decide(&observed);
    if !out.manifests_wanted.is_empty() {
        // Bare pods to recreate: their spec is read from the API server
        // (the cache keeps none), then the same decision is made with it.
        if !read_manifests(client, &namespace, &mut observed, &out.manifests_wanted).await? {
            return Ok(Requeue::requeue(Duration::from_secs(1))); // the cache is behind
        }
        out = decide(&observed);
        if !out.manifests_wanted.is_empty() {
            // Never delete a bare pod without what brings it back.
            return Ok(Requeue::requeue(Duration::from_secs(1)));
        }
    }
    if created_secret.is_some() {
        out.status.ssh_secret = created_secret;
    }
    out.events.extend(status::set_owned_condition(
        &mut out.status.conditions,
        &not_served,
        (ctx.now)(),
    ));

    let jobs: Api<DLJob> = Api::namespaced(client.clone(), &namespace);
    if job.status.as_ref() != Some(&out.status) {
        let body = json!({
            "apiVersion": "dljob.dev/v1alpha1",
            "kind": "DLJob",
            "status": out.status,
        });
        jobs.patch_status(
            &name,
            &PatchParams::apply(MANAGER).force(),
            &Patch::Apply(&body),
        )
        .await?;
    }
    for ev in &out.events {
        let event = Event {
            type_: if ev.warning {
                EventType::Warning
            } else {
                EventType::Normal
            },
            reason: ev.reason.clone(),
            note: Some(ev.note.clone()),
            action: "Reconcile".to_owned(),
            secondary: None,
        };
        if let Err(e) = ctx.recorder.publish(&event, &job.object_ref(&())).await {
            tracing::warn!(job = %name, error = %e, "publishing an Event failed");
        }
    }
    ctx.metrics.restarts.inc_by(u64::from(out.new_restarts));
    for action in &out.actions {
        execute(client, &namespace, &name, action).await?;
    }
    let tensorboard_stops = job
        .spec
        .tensorboard
        .as_ref()
        .and_then(|_| resources::tensorboard_runs(job, &config.tensorboard, (ctx.now)()).1);
    let requeue = [out.requeue_after, tensorboard_stops]
        .into_iter()
        .flatten()
        .fold(RESYNC, Duration::min);
    Ok(Requeue::requeue(requeue))
}

/// Reads the bare pods `wanted` (name, uid) and gives each its manifest in
/// `observed`. False when one is gone or was replaced: the cache is behind
/// and the decision is to be made again once it has caught up.
async fn read_manifests(
    client: &Client,
    namespace: &str,
    observed: &mut Observed,
    wanted: &[(String, String)],
) -> Result<bool, kube::Error> {
    let pods: Api<Pod> = Api::namespaced(client.clone(), namespace);
    for (name, uid) in wanted {
        let Some(pod) = pods.get_opt(name).await? else {
            return Ok(false);
        };
        if pod.metadata.uid.as_deref() != Some(uid) {
            return Ok(false);
        }
        if let Some(p) = observed.pods.iter_mut().find(|p| &p.uid == uid) {
            p.manifest = Some(observe::recreate_manifest(&pod));
        }
    }
    Ok(true)
}

/// The job's members as the status function takes them.
///
/// Pods come from the member index; workloads from the stores, every
/// StatefulSet and Job labelled with the job: one `kubectl scale`d beyond
/// its role's count no longer parses as a member (the webhook refuses that
/// size), yet it is the job's, to report and to stop.
pub fn observe_members(ctx: &Context, namespace: &str, job: &str) -> Observed {
    let mut observed = Observed::default();
    for entry in ctx.index.members(namespace, job) {
        let m = &entry.member;
        if m.kind == Kind::Pod {
            observed.pods.extend(entry.pod);
        }
    }
    let labels = |meta: &kube::api::ObjectMeta| -> Option<String> {
        let l = meta.labels.as_ref()?;
        (meta.namespace.as_deref() == Some(namespace) && l.get(c::JOB)? == job)
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

/// Executes one action; each is idempotent (gone, already done and
/// precondition conflicts are success).
pub async fn execute(
    client: &Client,
    namespace: &str,
    job: &str,
    action: &Action,
) -> Result<(), kube::Error> {
    let merge = PatchParams {
        field_manager: Some(MANAGER.to_owned()),
        ..PatchParams::default()
    };
    match action {
        Action::DeletePod { name, uid } => {
            let pods: Api<Pod> = Api::namespaced(client.clone(), namespace);
            let dp = DeleteParams {
                preconditions: Some(Preconditions {
                    uid: Some(uid.clone()),
                    resource_version: None,
                }),
                ..DeleteParams::default()
            };
            tolerate(
                pods.delete(name, &dp).await.map(drop),
                &[NOT_FOUND, CONFLICT],
            )
        }
        Action::RemoveSchedulingGate { name, uid } => {
            // Strategic merge: schedulingGates merge by name, so this
            // removes dljob's gate and nothing else; the uid test makes it
            // a no-op on a recreated pod of the same name.
            let pods: Api<Pod> = Api::namespaced(client.clone(), namespace);
            let patch = json!({
                "metadata": {"uid": uid},
                "spec": {"schedulingGates": [{"$patch": "delete", "name": c::WORKERS_READY_GATE}]}
            });
            tolerate(
                pods.patch(name, &merge, &Patch::Strategic(&patch))
                    .await
                    .map(drop),
                &[NOT_FOUND, CONFLICT],
            )
        }
        Action::CreatePod { manifest, .. } => {
            let pod: Pod =
                serde_json::from_value(manifest.clone()).map_err(kube::Error::SerdeError)?;
            create_if_absent(Api::<Pod>::namespaced(client.clone(), namespace), &pod).await
        }
        Action::ScaleStatefulSetToZero { name, from } => {
            let sets: Api<StatefulSet> = Api::namespaced(client.clone(), namespace);
            // The annotation first: with replicas still matching the topology
            // the validating webhook admits the update; the scale subresource
            // never reaches it.
            let annotate = json!({"metadata": {"annotations": {c::SCALED_FROM: from.to_string()}}});
            tolerate(
                sets.patch(name, &merge, &Patch::Merge(&annotate))
                    .await
                    .map(drop),
                &[NOT_FOUND],
            )?;
            let scale = json!({"spec": {"replicas": 0}});
            tolerate(
                sets.patch_scale(name, &merge, &Patch::Merge(&scale))
                    .await
                    .map(drop),
                &[NOT_FOUND],
            )
        }
        Action::SuspendJob { name } => {
            let jobs: Api<Job> = Api::namespaced(client.clone(), namespace);
            let suspend = json!({"spec": {"suspend": true}});
            tolerate(
                jobs.patch(name, &merge, &Patch::Merge(&suspend))
                    .await
                    .map(drop),
                &[NOT_FOUND],
            )
        }
        Action::DeleteDLJob => {
            let jobs: Api<DLJob> = Api::namespaced(client.clone(), namespace);
            tolerate(
                jobs.delete(job, &DeleteParams::background())
                    .await
                    .map(drop),
                &[NOT_FOUND],
            )
        }
    }
}

/// Creates the DLJob of every job that has a live member and no DLJob yet
/// (first sight of a member). Returns how many it created.
pub async fn create_missing(
    client: &Client,
    index: &MemberIndex,
    dljobs: &Store<DLJob>,
) -> Result<usize, kube::Error> {
    let mut created = 0;
    for ((namespace, name), entry) in index.live_jobs() {
        if dljobs
            .get(&ObjectRef::new(&name).within(&namespace))
            .is_some()
        {
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
