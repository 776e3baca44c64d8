//! The reconciler (ARCHITECTURE.md §5, whose module map says which module
//! may import which).
//!
//! - What is watched: [`scope`] (every namespace, or the config's),
//!   [`trim`] (what of each member is cached), [`index`] (the members by
//!   job: the webhook's peers, from memory), [`listed`] (DLJobs decoded one
//!   by one, one that does not parse set aside), and [`Changed`] here (the
//!   jobs the watches changed, drained by the controller).
//! - One reconcile: [`controller`], as named steps — [`observe`] (members
//!   as the status function takes them), `ownership` and `resources`
//!   (the owned objects declared as data, kept under one rule), the pure
//!   [`status`] function ((observed, previous status, now) → status,
//!   actions, Events), `actions` (their execution), `writes` (the one
//!   status write), [`events`]; `failure` says why a pass failed.
//! - Around it: [`first_sight`] (a job's DLJob made when its first member
//!   is seen), [`tell`] (a DLJob that does not parse is told why), `lease`
//!   (leader election; the Lease given up on shutdown, [`Running::stop`]),
//!   [`metrics`], [`context`] (what every reconcile shares).
//!
//! Both replicas watch the members (the webhook reads the index); only the
//! holder of the `dljob-reconciler` Lease runs the controller. Each kind is
//! watched once: the same watches fill the stores and the index and tell
//! the controller which jobs changed.

mod actions;
pub mod context;
pub mod controller;
pub mod events;
mod failure;
pub mod first_sight;
pub mod index;
mod lease;
pub mod listed;
pub mod metrics;
pub mod observe;
mod ownership;
pub(crate) mod resources;
pub mod scope;
pub mod status;
pub mod tell;
pub mod trim;
mod writes;

use std::collections::HashSet;
use std::fmt::Debug;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use events::Recorder;
use futures::{future, StreamExt};
use k8s_openapi::api::apps::v1::StatefulSet;
use k8s_openapi::api::batch::v1::Job;
use k8s_openapi::api::core::v1::{Pod, Service};
use kube::runtime::controller::Controller;
use kube::runtime::reflector::{self, ObjectRef, Store};
use kube::runtime::{watcher, WatchStreamExt};
use kube::{Client, Resource};
use serde::de::DeserializeOwned;
use tokio::sync::{watch, Notify};

use self::context::{Context, Stores};
use self::index::{MemberIndex, MemberObject};
use self::metrics::Metrics;
use self::scope::Scope;
use crate::config::Config;
use crate::contract as c;
use crate::crd::DLJob;
use crate::telemetry::Chain;
use crate::validate::PeerSource;

/// The Lease the replicas compete for.
pub const LEASE_NAME: &str = "dljob-reconciler";

/// The first wait after a watch error.
pub(crate) const WATCH_BACKOFF_MIN: Duration = Duration::from_millis(500);
/// The longest wait after watch errors: after the API server is back, every
/// watch (the controller's included) retries within this long.
pub const WATCH_BACKOFF_MAX: Duration = Duration::from_secs(3);

/// The backoff of every watch: [`WATCH_BACKOFF_MIN`] doubling up to
/// [`WATCH_BACKOFF_MAX`], back to the minimum once the watch has gone
/// [`WATCH_BACKOFF_RESET`] without an error.
///
/// [`kube::runtime::utils::StreamBackoff`] calls `reset` on every `Ok`
/// item, and the watcher yields `Ok(Event::Init)` before each list, so a
/// list that keeps failing (a 403, a CRD missing, the API server down)
/// would reset it every time: it retried every 0.5 s for as long as the
/// failure lasted. A reset is therefore taken only that long after the
/// last error.
///
/// Not kube's `default_backoff()` (client-go's 0.8 s doubling to 30 s, plus
/// up to as much again of jitter, reset only after 120 s without an error):
/// the Controller applies one such backoff to the merged stream of all its
/// watches, so an API server outage left every watch — and every
/// reconcile — paused for up to a minute after the server was back.
#[derive(Clone, Debug)]
pub(crate) struct WatchBackoff {
    next: Duration,
    /// When the last error's wait was handed out.
    failed: Option<tokio::time::Instant>,
}

/// How long a watch must go without an error for its backoff to start
/// again from [`WATCH_BACKOFF_MIN`]: longer than the longest wait, so that
/// the `Init` the watcher yields after each wait does not reset it.
pub(crate) const WATCH_BACKOFF_RESET: Duration = Duration::from_secs(10);

impl Default for WatchBackoff {
    fn default() -> Self {
        Self {
            next: WATCH_BACKOFF_MIN,
            failed: None,
        }
    }
}

impl Iterator for WatchBackoff {
    type Item = Duration;

    fn next(&mut self) -> Option<Duration> {
        let wait = self.next;
        self.next = (wait * 2).min(WATCH_BACKOFF_MAX);
        self.failed = Some(tokio::time::Instant::now() + wait);
        Some(wait)
    }
}

impl kube::runtime::utils::Backoff for WatchBackoff {
    fn reset(&mut self) {
        let quiet = self.failed.is_none_or(|t| {
            tokio::time::Instant::now().saturating_duration_since(t) >= WATCH_BACKOFF_RESET
        });
        if quiet {
            self.next = WATCH_BACKOFF_MIN;
            self.failed = None;
        }
    }
}

/// What a watch's errors have been, so that each is logged once per
/// change (with what to do about it) rather than once per retry, and its
/// recovery once.
pub(crate) struct WatchErrors {
    kind: String,
    last: Option<String>,
    repeats: u64,
}

impl WatchErrors {
    pub(crate) fn new(kind: &str, plural: &str) -> Self {
        Self {
            kind: format!("{kind} ({plural})"),
            last: None,
            repeats: 0,
        }
    }

    /// A watch error: logged with its hint when it differs from the last.
    pub(crate) fn failed(&mut self, e: &kube::runtime::watcher::Error) {
        let message = Chain(e).to_string();
        if self.last.as_deref() == Some(message.as_str()) {
            self.repeats += 1;
            return;
        }
        tracing::warn!(
            watch = %self.kind,
            error = %message,
            hint = watch_hint(e),
            "watch failed; retrying with backoff (0.5 s doubling to 3 s), logged again when the error changes"
        );
        self.last = Some(message);
        self.repeats = 0;
    }

    /// An event came: a failure that was going on is over.
    pub(crate) fn ok(&mut self) {
        if self.last.take().is_some() {
            tracing::info!(
                watch = %self.kind,
                retries = self.repeats + 1,
                "watch recovered"
            );
            self.repeats = 0;
        }
    }
}

/// What to do about a watch error, where the API server's answer says.
fn watch_hint(e: &kube::runtime::watcher::Error) -> &'static str {
    use kube::runtime::watcher::Error as W;
    let status = match e {
        W::InitialListFailed(kube::Error::Api(s))
        | W::WatchStartFailed(kube::Error::Api(s))
        | W::WatchFailed(kube::Error::Api(s)) => Some(s.code),
        W::WatchError(s) => Some(s.code),
        _ => None,
    };
    match status {
        Some(403) => "dljob's ServiceAccount may not list or watch these: grant it in its ClusterRole (or, with `namespaces:` in the config, the Role of each namespace): deploy/base/rbac.yaml",
        Some(404) => "the API server does not serve these: is their CRD installed (dljob crd | kubectl apply -f -)?",
        Some(401) => "the API server does not accept dljob's credentials: is its ServiceAccount token mounted and valid?",
        Some(code) if code >= 500 => "the API server failed: retried until it answers",
        _ => "retried until the API server answers",
    }
}

/// Starts the reconciler in the background (leader election, controller)
/// and returns the member cache the validating webhook reads peers from.
/// Registers its metrics in `registry`; follows config reloads on `config`.
pub async fn start(
    client: kube::Client,
    registry: &mut prometheus_client::registry::Registry,
    config: tokio::sync::watch::Receiver<Config>,
) -> anyhow::Result<(Arc<dyn PeerSource>, Running)> {
    let metrics = Arc::new(Metrics::register(registry));
    let index = Arc::new(MemberIndex::default());
    let members = watcher::Config::default().labels(c::JOB);
    let changed = Arc::new(Changed::default());
    let scope = Scope::of(&config.borrow());
    tracing::info!(scope = %scope.describe(), "reconciler watching");
    let watch = Watch {
        client: &client,
        cfg: &members,
        index: &index,
        config: &config,
        changed: &changed,
        scope: &scope,
    };

    // Pods are only indexed: the index entry holds what the reconciler
    // reads of a pod. The few workloads are kept whole (trimmed) too.
    let pod_task = watch.members::<Pod>(trim::trim_pod, None);
    let (statefulsets, writer) = reflector::store();
    let sts_task = watch.members::<StatefulSet>(trim::trim_statefulset, Some(writer));
    let (jobs, writer) = reflector::store();
    let job_task = watch.members::<Job>(trim::trim_job, Some(writer));
    let (services, svc_task) = watch.owned::<Service>(trim::trim_service);
    // The webhook is ready once the member watches its peer checks read
    // have listed (`/readyz` answers 503 until then).
    let synced = {
        let index = index.clone();
        async move {
            index.wait_listed().await;
            index.mark_synced();
            tracing::info!("member caches synced: the webhook's peer checks see the cluster");
        }
    };
    let stores = Stores {
        statefulsets,
        jobs,
        services,
        changed,
        unreadable: Default::default(),
    };

    let scope_kept = scope_kept(config.clone(), scope.clone());
    let (stop, stop_rx) = watch::channel(false);
    let (released_tx, released) = tokio::sync::oneshot::channel();
    let peers: Arc<dyn PeerSource> = index.clone();
    let lead = async move {
        lease::lead(client, index, stores, metrics, config, scope, stop_rx).await;
        let _ = released_tx.send(());
    };
    let task = tokio::spawn(async move {
        future::join4(
            future::join4(pod_task, sts_task, job_task, svc_task),
            lead,
            synced,
            scope_kept,
        )
        .await;
    });
    Ok((
        peers,
        Running {
            task,
            stop,
            released,
        },
    ))
}

/// The reconciler of this process, running.
pub struct Running {
    /// Its watches and its leader election: ends only if they do.
    pub task: tokio::task::JoinHandle<()>,
    stop: watch::Sender<bool>,
    released: tokio::sync::oneshot::Receiver<()>,
}

impl Running {
    /// Stops leading: the controller stops and the leader Lease is given
    /// up, so that another replica takes over at once rather than when the
    /// Lease expires. Waits at most `within` for the API server to take
    /// the release; the watches go with the process.
    pub async fn stop(self, within: Duration) {
        let _ = self.stop.send(true);
        if tokio::time::timeout(within, self.released).await.is_err() {
            tracing::warn!(
                waited = ?within,
                "the leader Lease was not given up in time: another replica takes over when it expires"
            );
        }
    }
}

/// The namespaces are read at start: a reloaded config that changes them
/// is said to need a restart (the rest of it applies at once).
async fn scope_kept(mut config: watch::Receiver<Config>, scope: Scope) {
    while config.changed().await.is_ok() {
        let now = Scope::of(&config.borrow_and_update());
        if now != scope {
            tracing::warn!(
                watching = %scope.describe(),
                configured = %now.describe(),
                "the config's namespaces changed: restart dljob to watch them"
            );
        }
    }
}

/// What every watch of [`start`] shares.
struct Watch<'a> {
    client: &'a Client,
    cfg: &'a watcher::Config,
    index: &'a Arc<MemberIndex>,
    config: &'a watch::Receiver<Config>,
    changed: &'a Arc<Changed>,
    scope: &'a Scope,
}

impl Watch<'_> {
    /// A watch of one member kind, trimmed, that feeds the index (and
    /// `store`, when given) and marks the member's job changed.
    fn members<K>(
        &self,
        trim: fn(&mut K),
        mut store: Option<reflector::store::Writer<K>>,
    ) -> impl std::future::Future<Output = ()>
    where
        K: MemberObject
            + Resource<DynamicType = (), Scope = kube::core::NamespaceResourceScope>
            + Default
            + Clone
            + DeserializeOwned
            + Debug
            + Send
            + Sync
            + 'static,
    {
        let (index, config, changed) = (
            self.index.clone(),
            self.config.clone(),
            self.changed.clone(),
        );
        let mut errors = WatchErrors::new(&K::kind(&()), &K::plural(&()));
        self.scope
            .watch::<K>(self.client, self.cfg, scope::gone::<K>)
            .modify(trim)
            .for_each(move |event| {
                match event {
                    Ok(ev) => {
                        if !matches!(ev, watcher::Event::Init) {
                            errors.ok();
                        }
                        if let Some(store) = store.as_mut() {
                            store.apply_watcher_event(&ev);
                        }
                        index.apply_event(&ev, &config.borrow());
                        if let watcher::Event::Apply(o)
                        | watcher::Event::InitApply(o)
                        | watcher::Event::Delete(o) = &ev
                        {
                            changed.mark_owner_of(o);
                        }
                    }
                    Err(e) => errors.failed(&e),
                }
                future::ready(())
            })
    }

    /// A reflector over the objects the reconciler owns (labelled with
    /// their job), trimmed to what their drift check compares. Every change
    /// marks the owning job changed, for the controller to repair it: a
    /// deleted Service comes back within a second, not at the next resync.
    fn owned<K>(&self, trim: fn(&mut K)) -> (Store<K>, impl std::future::Future<Output = ()>)
    where
        K: Resource<DynamicType = (), Scope = kube::core::NamespaceResourceScope>
            + Default
            + Clone
            + DeserializeOwned
            + Debug
            + Send
            + Sync
            + 'static,
    {
        let (store, writer) = reflector::store();
        let changed = self.changed.clone();
        let stream = self
            .scope
            .watch::<K>(self.client, self.cfg, scope::gone::<K>)
            .modify(trim)
            .reflect(writer)
            .touched_objects()
            .for_each(move |o| {
                if let Ok(o) = o {
                    changed.mark_owner_of(&o);
                }
                future::ready(())
            });
        (store, stream)
    }
}

/// The jobs whose members or owned objects changed since the controller
/// last looked: a set, so that a burst of events for one job is one entry
/// and nothing is dropped however far behind the controller is. While this
/// replica is not the leader nobody drains it; it then holds at most one
/// entry per job, reconciled when leadership comes.
#[derive(Default)]
pub struct Changed {
    jobs: Mutex<HashSet<ObjectRef<DLJob>>>,
    notify: Notify,
    /// The jobs the first-sight creator looks at next: every job a watch
    /// changed, and every job whose DLJob was deleted.
    sighted: Mutex<HashSet<(String, String)>>,
}

impl Changed {
    /// Marks the job of a labelled object changed.
    pub(crate) fn mark_owner_of<K: Resource>(&self, object: &K) {
        if let Some(job) = job_of(object) {
            self.mark(job);
        }
    }

    pub(crate) fn mark(&self, job: ObjectRef<DLJob>) {
        self.sight(&job);
        let new = self
            .jobs
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .insert(job);
        if new {
            self.notify.notify_one();
        }
    }

    /// Marks a job for the first-sight creator only (its DLJob deleted).
    pub(crate) fn sight(&self, job: &ObjectRef<DLJob>) {
        self.sighted
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .insert((job.namespace.clone().unwrap_or_default(), job.name.clone()));
    }

    /// The jobs marked for the first-sight creator since it last looked.
    pub(crate) fn take_sighted(&self) -> Vec<(String, String)> {
        let mut jobs: Vec<(String, String)> = self
            .sighted
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .drain()
            .collect();
        jobs.sort();
        jobs
    }

    /// The changed jobs as a controller trigger, each once per change.
    pub(crate) fn stream(self: Arc<Self>) -> impl futures::Stream<Item = ObjectRef<DLJob>> + Send {
        futures::stream::unfold((self, Vec::new()), |(this, mut pending)| async move {
            loop {
                if let Some(job) = pending.pop() {
                    return Some((job, (this, pending)));
                }
                // Registered before the set is read: a mark in between
                // leaves a permit, so no change is missed.
                let notified = this.notify.notified();
                pending.extend(this.jobs.lock().unwrap_or_else(|e| e.into_inner()).drain());
                if pending.is_empty() {
                    notified.await;
                }
            }
        })
    }
}

/// This replica's name in the Lease and in Events.
pub(crate) fn identity() -> String {
    std::env::var("POD_NAME")
        .or_else(|_| std::env::var("HOSTNAME"))
        .unwrap_or_else(|_| format!("dljob-{}", std::process::id()))
}

/// The controller and the creator, until `stop` resolves.
pub async fn run_controller(
    client: &Client,
    index: &Arc<MemberIndex>,
    stores: &Stores,
    metrics: &Arc<Metrics>,
    config: &watch::Receiver<Config>,
    scope: &Scope,
    stop: impl std::future::Future<Output = ()> + Send + Sync + 'static,
) {
    let (stop_tx, stop_rx) = tokio::sync::watch::channel(false);
    let stopped = |mut rx: watch::Receiver<bool>| async move {
        let _ = rx.wait_for(|s| *s).await;
    };
    // Every watch backs off on its own and its errors stop here: the
    // Controller applies one backoff to the merged stream of its triggers,
    // so one failing watch would pause all the others, and after an outage
    // each watch's queued error would add a full backoff in turn.
    let (dljob_store, writer) = reflector::store();
    let unreadable = stores.unreadable.clone();
    let dljobs = scope
        .watch::<listed::Listed>(client, &watcher::Config::default(), listed::gone)
        .filter_map(move |event| {
            future::ready(match event {
                Ok(e) => listed::readable(e, &unreadable).map(Ok),
                Err(e) => Some(Err(e)),
            })
        })
        .modify(trim::trim_dljob)
        // dljob_jobs{phase}: one count moved per event, not every DLJob
        // walked per reconcile.
        .inspect({
            let metrics = metrics.clone();
            let changed = stores.changed.clone();
            move |event| {
                if let Ok(event) = event {
                    metrics.observe_dljob(event);
                    // A DLJob deleted while its job runs is made again by
                    // first sight (for the same run).
                    if let watcher::Event::Delete(dljob) = event {
                        changed.sight(&ObjectRef::from_obj(dljob));
                    }
                }
            }
        })
        .reflect(writer)
        .applied_objects();
    let controller = Controller::for_stream(without_errors::<DLJob, _>(dljobs), dljob_store)
        .with_config(kube::runtime::controller::Config::default().debounce(Duration::from_secs(1)))
        .trigger_backoff(WatchBackoff::default())
        .reconcile_on(stores.changed.clone().stream())
        .graceful_shutdown_on(stopped(stop_rx.clone()));
    let ctx = Arc::new(Context {
        client: client.clone(),
        recorder: Recorder::new(client.clone(), "dljob", &identity()),
        index: index.clone(),
        stores: stores.clone(),
        dljobs: controller.store(),
        metrics: metrics.clone(),
        config: config.clone(),
        now: context::now,
        dropped: Default::default(),
    });
    let run = controller
        .run(controller::reconcile, controller::error_policy, ctx.clone())
        .for_each(|_| future::ready(()));
    // A DLJob that does not parse is told why on itself, not only in the
    // log (what is still to be told outlives a leader's term).
    let tell = {
        let ctx = ctx.clone();
        let stop = stopped(stop_rx.clone());
        async move {
            let tell = tell::tell_unreadable(&ctx.recorder, &ctx.stores.unreadable);
            futures::pin_mut!(tell, stop);
            future::select(tell, stop).await;
        }
    };
    let create = creator(ctx, stopped(stop_rx));
    let watch_stop = async move {
        stop.await;
        let _ = stop_tx.send(true);
    };
    future::join4(run, create, watch_stop, tell).await;
}

/// Logs and drops a watch's errors (the watch itself retries after its
/// own [`WatchBackoff`]), once per change.
fn without_errors<K, S>(stream: S) -> impl futures::Stream<Item = Result<K, watcher::Error>> + Send
where
    K: Resource<DynamicType = ()> + Send,
    S: futures::Stream<Item = Result<K, watcher::Error>> + Send,
{
    let mut errors = WatchErrors::new(&K::kind(&()), &K::plural(&()));
    stream.filter_map(move |item| {
        future::ready(match item {
            Ok(object) => {
                errors.ok();
                Some(Ok(object))
            }
            Err(e) => {
                errors.failed(&e);
                None
            }
        })
    })
}

/// The DLJob of a labelled object (a member or an owned object).
fn job_of<K: Resource>(member: &K) -> Option<ObjectRef<DLJob>> {
    let job = member.meta().labels.as_ref()?.get(c::JOB)?;
    Some(ObjectRef::new(job).within(member.meta().namespace.as_deref()?))
}

/// First sight of a member: the missing DLJobs are made (a Controller
/// only reconciles what is in its own store). As leadership starts, for
/// every job the index holds; then every two seconds for the jobs the
/// watches changed since ([`Changed::take_sighted`]) and the refusals due
/// again: O(changed jobs), a job that has its DLJob a store lookup. A
/// DLJob the API server refuses is tried again after 10 s, doubling up to
/// 5 min, and said once per change of why.
async fn creator(ctx: Arc<Context>, stop: impl std::future::Future<Output = ()>) {
    const RETRY_FIRST: Duration = Duration::from_secs(10);
    const RETRY_MAX: Duration = Duration::from_secs(300);
    struct Refusal {
        next: tokio::time::Instant,
        wait: Duration,
        said: String,
    }
    let work = async {
        ctx.dljobs.wait_until_ready().await.ok();
        if let Err(e) = first_sight::create_missing(
            &ctx.client,
            &ctx.index,
            &ctx.dljobs,
            &ctx.stores.unreadable,
        )
        .await
        {
            tracing::warn!(error = %Chain(&e), "creating a DLJob failed");
        }
        let mut pending: Vec<(String, String)> = Vec::new();
        let mut refused: std::collections::HashMap<(String, String), Refusal> = Default::default();
        loop {
            tokio::time::sleep(Duration::from_secs(2)).await;
            let now = tokio::time::Instant::now();
            pending.extend(ctx.stores.changed.take_sighted());
            pending.extend(
                refused
                    .iter()
                    .filter(|(_, r)| r.next <= now)
                    .map(|(k, _)| k.clone()),
            );
            pending.sort();
            pending.dedup();
            if pending.is_empty() {
                continue;
            }
            match first_sight::create_for(
                &ctx.client,
                &ctx.index,
                &ctx.dljobs,
                &ctx.stores.unreadable,
                &pending,
            )
            .await
            {
                Ok(sights) => {
                    for (job, sight) in pending.drain(..).zip(sights) {
                        let first_sight::Sight::Refused(message) = sight else {
                            refused.remove(&job);
                            continue;
                        };
                        let r = refused.entry(job.clone()).or_insert(Refusal {
                            next: now,
                            wait: RETRY_FIRST,
                            said: String::new(),
                        });
                        if r.said != message {
                            tracing::warn!(job = %job.1, namespace = %job.0, error = %message, retry_in = ?r.wait, "the API server refused the job's DLJob");
                            r.said = message;
                        }
                        r.next = now + r.wait;
                        r.wait = (r.wait * 2).min(RETRY_MAX);
                    }
                }
                // The jobs stay pending for the next pass.
                Err(e) => tracing::warn!(error = %Chain(&e), "creating a DLJob failed"),
            }
        }
    };
    futures::pin_mut!(work, stop);
    future::select(work, stop).await;
}

#[cfg(test)]
mod tests {
    use super::*;
    use k8s_openapi::apimachinery::pkg::apis::meta::v1::ObjectMeta;

    fn pod(job: Option<&str>) -> Pod {
        Pod {
            metadata: ObjectMeta {
                name: Some("p".into()),
                namespace: Some("ns".into()),
                labels: job.map(|j| [(c::JOB.to_owned(), j.to_owned())].into()),
                ..ObjectMeta::default()
            },
            ..Pod::default()
        }
    }

    /// First sight takes the jobs the watches changed (and those whose
    /// DLJob was deleted), each once, and each pass only what came since.
    #[test]
    fn first_sight_is_given_the_changed_jobs_once_each() {
        let changed = Changed::default();
        assert!(changed.take_sighted().is_empty());
        for _ in 0..100 {
            changed.mark_owner_of(&pod(Some("b")));
        }
        changed.mark_owner_of(&pod(Some("a")));
        changed.mark_owner_of(&pod(None));
        changed.sight(&ObjectRef::new("deleted").within("ns"));
        let job = |n: &str| ("ns".to_owned(), n.to_owned());
        assert_eq!(changed.take_sighted(), [job("a"), job("b"), job("deleted")]);
        assert!(changed.take_sighted().is_empty(), "each once");
        // A job's DLJob deleted is not a change for the controller.
        let c = Arc::new(Changed::default());
        c.sight(&ObjectRef::new("x").within("ns"));
        assert!(c.jobs.lock().unwrap().is_empty());
    }

    #[tokio::test(start_paused = true)]
    async fn changed_jobs_come_once_per_burst_and_none_is_missed() {
        let changed = Arc::new(Changed::default());
        let mut jobs = Box::pin(changed.clone().stream());
        async fn next(
            jobs: &mut (impl futures::Stream<Item = ObjectRef<DLJob>> + Unpin),
        ) -> Option<ObjectRef<DLJob>> {
            tokio::time::timeout(Duration::from_secs(1), jobs.next())
                .await
                .ok()
                .flatten()
        }
        // A burst for one job (and an unlabelled pod) is one entry.
        for _ in 0..1000 {
            changed.mark_owner_of(&pod(Some("a")));
        }
        changed.mark_owner_of(&pod(None));
        assert_eq!(
            next(&mut jobs).await,
            Some(ObjectRef::new("a").within("ns"))
        );
        assert_eq!(next(&mut jobs).await, None, "nothing else was marked");
        // A mark while the stream waits wakes it.
        let waiting = tokio::spawn({
            let changed = changed.clone();
            async move {
                tokio::time::sleep(Duration::from_millis(10)).await;
                changed.mark_owner_of(&pod(Some("b")));
            }
        });
        assert_eq!(
            next(&mut jobs).await,
            Some(ObjectRef::new("b").within("ns"))
        );
        waiting.await.unwrap();
        // Marks beyond any channel's capacity are all kept, once each.
        for i in 0..5000 {
            changed.mark(ObjectRef::new(&format!("j{i}")).within("ns"));
        }
        let mut seen = HashSet::new();
        while let Some(job) = next(&mut jobs).await {
            assert!(seen.insert(job.name), "each once");
        }
        assert_eq!(seen.len(), 5000);
    }
}

#[cfg(test)]
mod backoff_tests {
    use super::*;
    use k8s_openapi::api::core::v1::Pod;
    use kube::runtime::watcher::{Error as WatchError, Event};

    fn forbidden() -> WatchError {
        let status: kube::core::Status = serde_json::from_value(serde_json::json!({
            "status": "Failure", "code": 403, "reason": "Forbidden",
            "message": "pods is forbidden: User \"system:serviceaccount:dljob:dljob\" cannot list resource \"pods\""
        }))
        .unwrap();
        WatchError::InitialListFailed(kube::Error::Api(Box::new(status)))
    }

    /// When each item of a watch with [`WatchBackoff`] comes, from the
    /// start, for a watcher that yields `items` as soon as it is polled.
    async fn arrivals(items: Vec<Result<Event<Pod>, WatchError>>) -> Vec<Duration> {
        let start = tokio::time::Instant::now();
        let stream = futures::stream::iter(items).backoff(WatchBackoff::default());
        stream.map(|_| start.elapsed()).collect::<Vec<_>>().await
    }

    /// A list that keeps failing: the watcher yields `Init` before each
    /// list, and that `Ok` no longer resets the backoff, so the waits grow
    /// 0.5, 1, 2, 3, 3 s (before: 0.5 s each, for as long as it failed).
    #[tokio::test(start_paused = true)]
    async fn a_list_that_keeps_failing_is_retried_ever_more_slowly() {
        let mut items = Vec::new();
        for _ in 0..5 {
            items.push(Ok(Event::Init));
            items.push(Err(forbidden()));
        }
        items.push(Ok(Event::Init));
        let at = arrivals(items).await;
        // Each Init comes after the wait that followed the error before it.
        let inits: Vec<f64> = at.iter().step_by(2).map(Duration::as_secs_f64).collect();
        assert_eq!(inits, [0.0, 0.5, 1.5, 3.5, 6.5, 9.5]);
    }

    /// After 10 s without an error the backoff starts again from 0.5 s.
    #[tokio::test(start_paused = true)]
    async fn a_watch_quiet_for_ten_seconds_starts_from_the_shortest_wait_again() {
        let mut b = WatchBackoff::default();
        assert_eq!(b.next(), Some(WATCH_BACKOFF_MIN));
        assert_eq!(b.next(), Some(WATCH_BACKOFF_MIN * 2));
        kube::runtime::utils::Backoff::reset(&mut b);
        assert_eq!(b.next(), Some(WATCH_BACKOFF_MIN * 4), "too soon to reset");
        tokio::time::advance(Duration::from_secs(2) + WATCH_BACKOFF_RESET).await;
        kube::runtime::utils::Backoff::reset(&mut b);
        assert_eq!(b.next(), Some(WATCH_BACKOFF_MIN));
    }

    #[test]
    fn a_forbidden_watch_says_which_permission_to_grant() {
        let hint = watch_hint(&forbidden());
        assert!(hint.contains("ClusterRole"), "{hint}");
        assert!(hint.contains("deploy/base/rbac.yaml"), "{hint}");
    }
}
