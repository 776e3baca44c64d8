//! One reconcile of one DLJob, as named steps around the pure
//! [`status::next`]: read the saved manifests, ensure the owned objects
//! (under [`ownership`]'s rule), observe the members, decide, save the bare
//! pods to recreate, write the status once, publish the Events, execute
//! the actions ([`actions`]). Nothing here decides anything.
//!
//! [`ownership`]: super::ownership
//! [`actions`]: super::actions

use std::collections::BTreeMap;
use std::sync::Arc;
use std::time::{Duration, Instant};

use k8s_openapi::api::core::v1::PodTemplate;
use k8s_openapi::jiff::Timestamp;
use kube::api::Api;
use kube::runtime::controller::Action as Requeue;
use kube::ResourceExt;

use super::actions::{saved_manifests, Target};
use super::context::Context;
pub use super::failure::Error;
use super::observe;
use super::ownership::{keep, not_served, recorded, Kept};
use super::resources::{self, Keep};
use super::status::{self, JobPlan, Observed, OwnedOutcome};
use super::writes::write_status;
use crate::config::Config;
use crate::contract as c;
use crate::crd::{DLJob, DLJobStatus, SavedPod};
use crate::object::Kind;
use crate::telemetry::Chain;

/// Reconcile again at the latest after this long: a safety net for a
/// member event the debounced trigger saw before the member stores did.
pub(crate) const RESYNC: Duration = Duration::from_secs(300);

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
        elastic: job.spec.elastic,
        name: job.name_any(),
        scale_to: job.spec.elastic_replicas,
        fixed_total: job.spec.scheduler().is_some_and(|s| s.fixed_total()),
    })
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
    if error.namespace_terminating() {
        // Not a failure: the job goes with its namespace.
        tracing::debug!(job = %job.name_any(), namespace = ?job.namespace(), "the job's namespace is being deleted: not reconciled");
        return Requeue::await_change();
    }
    tracing::warn!(job = %job.name_any(), error = %Chain(error), "reconcile failed");
    match error {
        Error::BadSpec { .. } => Requeue::await_change(),
        _ => Requeue::requeue(Duration::from_secs(15)),
    }
}

async fn reconcile_job(job: &DLJob, ctx: &Context) -> Result<Requeue, Error> {
    let now = (ctx.now)();
    let plan = plan_of(job)?;
    let (name, namespace, uid) = (
        job.name_any(),
        job.namespace().unwrap_or_default(),
        job.uid().unwrap_or_default(),
    );
    let config = ctx.config.borrow().clone();
    if let Err(why) = crate::tensorboard::recorded_volume(job) {
        tracing::warn!(job = %name, %namespace, %why, "no TensorBoard for this job");
    }
    // Every read comes before the owned objects, and the SSH Secret is the
    // last of them: once it is created, what runs before the status write
    // that records it is pure, or (bare pods pending a recreate) saves
    // whose failures are collected; should that write fail, the Secret is
    // recorded alone (see `write_once`).
    let saved = read_saved(ctx, &namespace, job).await?;
    let Some(owned) = ensure_owned(ctx, job, &config, now).await? else {
        return Ok(Requeue::requeue(Duration::from_secs(1)));
    };
    let mut observed = observe_members(ctx, &namespace, &name, &uid);
    observed.saved = saved
        .iter()
        .map(|(uid, t)| SavedPod {
            name: t.name_any(),
            uid: uid.clone(),
            digest: Some(observe::saved_digest(t)),
        })
        .collect();
    observed.owned = owned;
    observed.owned.lost_secret = lost_ssh_secret(ctx, job, &observed, &config).await;
    let mut out = status::next(
        &plan,
        &observed,
        job.status.as_ref(),
        job.metadata.generation,
        now,
    );
    let target = Target {
        client: &ctx.client,
        recorder: &ctx.recorder,
        namespace: &namespace,
        job,
        saved: &saved,
        reserved: crate::mutate::reserved_volume_names(&config),
    };
    let saving = target.save_pods(&out.actions, &mut out.status).await;
    write_once(
        ctx,
        job,
        &out.status,
        observed.owned.created_secret.as_deref(),
    )
    .await?;
    for event in out.events.drain(..) {
        target.tell(event).await;
    }
    ctx.metrics.restarts.inc_by(u64::from(out.new_restarts));
    target.execute_all(&out.actions, saving).await?;
    Ok(Requeue::requeue(look_again(job, &config, &out, now)))
}

/// The recorded SSH Secret, when a member waits to start and the API
/// server no longer has it: such a pod cannot mount it (`FailedMount`) and
/// would wait for ever while the job shows Running. dljob never reads
/// Secrets: a dry-run create answers instead (409: it is there; created:
/// it is gone). Asked only while an unfinished job has a pod pending, and
/// gated pods aside (they wait for their workers, not for a volume).
async fn lost_ssh_secret(
    ctx: &Context,
    job: &DLJob,
    observed: &Observed,
    config: &Config,
) -> Option<String> {
    let status = job.status.as_ref()?;
    let recorded = status.ssh_secret.clone()?;
    let waiting = observed
        .pods
        .iter()
        .any(|p| p.phase == "Pending" && !p.gated && !p.deleting);
    if status.phase.is_finished() || !waiting {
        return None;
    }
    let key = resources::generate_key().ok()?;
    let secret = resources::ssh_secret(job, &key, &config.cluster_domain)?;
    if secret.metadata.name.as_deref() != Some(recorded.as_str()) {
        return None;
    }
    let api: Api<k8s_openapi::api::core::v1::Secret> =
        Api::namespaced(ctx.client.clone(), &job.namespace().unwrap_or_default());
    let params = kube::api::PostParams {
        dry_run: true,
        ..super::writes::create_params()
    };
    match api.create(&params, &secret).await {
        Ok(_) => {
            tracing::warn!(job = %job.name_any(), secret = %recorded, "the job's SSH Secret was deleted: a new key is made and every member restarts with it");
            Some(recorded)
        }
        Err(kube::Error::Api(s)) if s.code == 409 => None,
        Err(e) => {
            tracing::debug!(job = %job.name_any(), error = %Chain(&e), "could not tell whether the SSH Secret is there");
            None
        }
    }
}

/// The pass's one status write, when the status changed. A Secret this
/// pass created that the write fails to record would be taken for someone
/// else's on the next pass (dljob never reads Secrets): it is then
/// recorded alone, on the status as it was, before the failure is returned.
async fn write_once(
    ctx: &Context,
    job: &DLJob,
    status: &DLJobStatus,
    created_secret: Option<&str>,
) -> Result<(), Error> {
    if job.status.as_ref() == Some(status) {
        return Ok(());
    }
    let jobs = Api::namespaced(ctx.client.clone(), &job.namespace().unwrap_or_default());
    let name = job.name_any();
    let Err(e) = write_status(&jobs, &name, status).await else {
        return Ok(());
    };
    let unrecorded = created_secret
        .filter(|s| job.status.as_ref().and_then(|st| st.ssh_secret.as_deref()) != Some(*s));
    if let Some(secret) = unrecorded {
        let mut record = job.status.clone().unwrap_or_default();
        record.ssh_secret = Some(secret.to_owned());
        if let Err(again) = write_status(&jobs, &name, &record).await {
            tracing::warn!(job = %name, secret, error = %Chain(&again), "the job's SSH Secret could not be recorded either");
        }
    }
    Err(e.into())
}

/// The manifests saved to recreate bare pods, read while any is pending.
async fn read_saved(
    ctx: &Context,
    namespace: &str,
    job: &DLJob,
) -> Result<BTreeMap<String, PodTemplate>, kube::Error> {
    let pending = job
        .status
        .as_ref()
        .is_some_and(|s| !s.pending_recreates.is_empty());
    if pending {
        saved_manifests(&ctx.client, namespace, job).await
    } else {
        Ok(BTreeMap::new())
    }
}

/// Keeps each object the job owns ([`resources::owned`]; the SSH Secret
/// last) under [`keep`]'s rule, and says what the status must tell of
/// them. None: an object changed under a write, reconcile again soon.
async fn ensure_owned(
    ctx: &Context,
    job: &DLJob,
    config: &Config,
    now: Timestamp,
) -> Result<Option<OwnedOutcome>, Error> {
    let (name, namespace, uid) = (
        job.name_any(),
        job.namespace().unwrap_or_default(),
        job.uid().unwrap_or_default(),
    );
    // Only a PodGroup wants the members' requests.
    let min_resources = job
        .spec
        .scheduler()
        .filter(|s| s.wants_min_resources())
        .and_then(|_| {
            let members = ctx.index.members(&namespace, &name, Some(&uid));
            resources::min_resources(&job.spec, members.iter().map(|e| &e.member))
        });
    let mut outcome = OwnedOutcome::default();
    for owned in resources::owned(job, config, now, min_resources, resources::generate_key)? {
        let current = ctx.stores.current(&owned);
        let kept = keep(
            &ctx.client,
            &namespace,
            &owned,
            current,
            (&name, &uid),
            &ctx.dropped,
        )
        .await?;
        match kept {
            // Recorded by this pass's status write: a Secret of that name
            // found later is the job's only if the status says so (dljob
            // never reads it).
            Kept::Written if owned.keep == Keep::CreateOnce => {
                outcome.created_secret = Some(owned.name().to_owned());
            }
            Kept::NotServed => outcome.unavailable.push(not_served(&owned)),
            // A gang's PodGroup is said as the gang's; any other object as
            // itself.
            Kept::Refused(message) | Kept::Dropped(message) if owned.install_hint.is_some() => {
                outcome.unavailable.push(message);
            }
            Kept::Refused(message) | Kept::Dropped(message) => outcome.refused.push(message),
            // The job's own Secret, recorded by an earlier reconcile whose
            // status write this one's cached DLJob does not show yet: read
            // the DLJob itself before calling the Secret foreign (and before
            // writing a status without the record).
            Kept::Foreign(_)
                if owned.keep == Keep::CreateOnce
                    && recorded(&ctx.client, &namespace, &name, owned.name()).await? =>
            {
                outcome.created_secret = Some(owned.name().to_owned());
            }
            Kept::Foreign(why) => {
                tracing::warn!(job = %name, %namespace, "{why}");
                outcome.foreign.push(why);
            }
            Kept::Retry => return Ok(None),
            Kept::Unchanged | Kept::Written => {}
        }
    }
    Ok(Some(outcome))
}

/// When to reconcile again at the latest: the status function's time
/// (a deadline, a ttl), TensorBoard's stop, else [`RESYNC`].
fn look_again(job: &DLJob, config: &Config, out: &status::Outcome, now: Timestamp) -> Duration {
    let tensorboard_stops = job
        .spec
        .tensorboard
        .as_ref()
        .and_then(|_| crate::tensorboard::job_runs(job, &config.tensorboard, now).1);
    [out.requeue_after, tensorboard_stops]
        .into_iter()
        .flatten()
        .fold(RESYNC, Duration::min)
}

/// The members of the run of DLJob `uid`, as the status function takes
/// them: what another DLJob's finished run left ([`c::FINISHED_RUN`]) is
/// not the run's.
///
/// Pods come from the member index; workloads from the stores, every
/// StatefulSet and Job labelled with the job, found by the keys the index
/// keeps per job (O(the job's workloads), not a scan of the cluster's): one
/// `kubectl scale`d beyond its role's count no longer parses as a member
/// (the webhook refuses that size), yet it is the job's, to report and to
/// stop.
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
    // The job's own workloads, by the keys the index keeps per job: no
    // reconcile walks the cluster's StatefulSets and Jobs.
    let mut workloads: Vec<(String, status::Workload)> = Vec::new();
    for (kind, name) in ctx.index.workloads(namespace, job) {
        match kind {
            Kind::StatefulSet => {
                let at = kube::runtime::reflector::ObjectRef::new(&name).within(namespace);
                if let Some(sts) = ctx.stores.statefulsets.get(&at) {
                    if let Some(role) = labels(&sts.metadata) {
                        workloads.push((name, observe::observe_statefulset(&role, &sts)));
                    }
                }
            }
            _ => {
                let at = kube::runtime::reflector::ObjectRef::new(&name).within(namespace);
                if let Some(j) = ctx.stores.jobs.get(&at) {
                    if let Some(role) = labels(&j.metadata) {
                        workloads.push((name, observe::observe_job(&role, &j)));
                    }
                }
            }
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
