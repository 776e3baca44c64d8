//! From watched objects to what the core reads: trimming before caching,
//! the member index (the validating webhook's peers, answered from memory)
//! and the [`ObservedPod`]s the status function takes. Pure: no client.

use std::collections::{BTreeMap, HashMap};
use std::sync::RwLock;

use k8s_openapi::api::apps::v1::StatefulSet;
use k8s_openapi::api::batch::v1::Job;
use k8s_openapi::api::core::v1::{
    Container, ContainerState as K8sState, ContainerStatus, Pod, PodSpec, PodStatus,
};
use kube::api::ObjectMeta;
use kube::runtime::watcher;
use kube::ResourceExt;
use serde_json::{json, Value};

use super::status::{ContainerState, Exit, FrameworkContainer, ObservedPod, PodRestart, Workload};
use crate::config::Config;
use crate::contract as c;
use crate::member::{self, MemberSpec};
use crate::mutate;
use crate::object::Kind;
use crate::validate::PeerSource;

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
    *spec = PodSpec {
        containers: std::mem::take(&mut spec.containers),
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
        let chosen = framework_container_of(&pod.metadata, &spec.containers);
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
fn framework_container_of(meta: &ObjectMeta, containers: &[Container]) -> Option<usize> {
    let annotation = |k: &str| meta.annotations.as_ref()?.get(k).map(String::as_str);
    let facts: Vec<member::ContainerFacts<'_>> = containers
        .iter()
        .map(|c| member::ContainerFacts {
            name: &c.name,
            accelerator: c.resources.as_ref().is_some_and(|r| {
                [r.limits.as_ref(), r.requests.as_ref()]
                    .into_iter()
                    .flatten()
                    .flat_map(|m| m.iter())
                    .any(|(k, q)| {
                        crate::object::is_extended_resource(k)
                            && !crate::object::is_zero_quantity(&Value::String(q.0.clone()))
                    })
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

/// A job: (namespace, name).
pub type JobKey = (String, String);

/// One member in the index.
#[derive(Clone, Debug)]
pub struct Entry {
    pub member: MemberSpec,
    /// Still part of a running job: a pod not finished nor being deleted,
    /// a StatefulSet with replicas, a Job neither suspended nor finished.
    pub live: bool,
    /// Pods: the framework container's name.
    pub framework_container: Option<String>,
    /// The volume `dljob.dev/tensorboard` names, as the member's pod (or
    /// pod template) spec declares it: the reconciler records it on the
    /// DLJob it creates from this member ([`super::resources::dljob_for`]),
    /// for the TensorBoard pod to mount.
    pub tensorboard_volume: Option<Value>,
    /// Pods: what the status function reads of it, taken when the watch
    /// event came. The pods themselves are not kept: a `Pod` value weighs
    /// kilobytes even trimmed, this a few hundred bytes.
    pub pod: Option<ObservedPod>,
    /// Pods: the name of the workload that controls it, if any.
    pub owner_name: Option<String>,
}

impl Entry {
    /// Left of a finished run ([`c::FINISHED_RUN`]), as `job_uid` sees it:
    /// marked by another DLJob, or (a pod) created by a workload so marked.
    /// With no `job_uid` (no DLJob yet), any mark counts.
    fn left_of_another_run(&self, job_uid: Option<&str>, members: &[&Entry]) -> bool {
        let foreign = |mark: &Option<String>| {
            mark.as_deref()
                .is_some_and(|m| job_uid.is_none_or(|uid| uid != m))
        };
        if foreign(&self.member.finished_run) {
            return true;
        }
        let Some(owner) = &self.owner_name else {
            return false;
        };
        members.iter().any(|w| {
            w.member.kind != Kind::Pod && &w.member.name == owner && foreign(&w.member.finished_run)
        })
    }
}

#[derive(Clone, Debug, PartialEq, Eq, Hash, PartialOrd, Ord)]
struct ObjectKey {
    kind: u8,
    namespace: String,
    name: String,
}

fn kind_tag(kind: Kind) -> u8 {
    match kind {
        Kind::Pod => 0,
        Kind::StatefulSet => 1,
        Kind::Job => 2,
    }
}

/// Objects listed since a watch (re)started, with their entries.
type Relist = Vec<(ObjectKey, Option<(JobKey, Entry)>)>;

#[derive(Default)]
struct Inner {
    /// Boxed: a job's map is small (a leaf of 11 slots holds a few
    /// members), and an `Entry` is over a kilobyte inline.
    jobs: HashMap<JobKey, BTreeMap<ObjectKey, Box<Entry>>>,
    objects: HashMap<ObjectKey, JobKey>,
    /// Per kind: the objects listed since the watch (re)started.
    relist: [Option<Relist>; 3],
}

impl Inner {
    fn remove(&mut self, key: &ObjectKey) {
        if let Some(job) = self.objects.remove(key) {
            if let Some(members) = self.jobs.get_mut(&job) {
                members.remove(key);
                if members.is_empty() {
                    self.jobs.remove(&job);
                }
            }
        }
    }

    fn insert(&mut self, key: ObjectKey, value: Option<(JobKey, Entry)>) {
        self.remove(&key);
        if let Some((job, entry)) = value {
            self.objects.insert(key.clone(), job.clone());
            self.jobs
                .entry(job)
                .or_default()
                .insert(key, Box::new(entry));
        }
    }
}

/// Every member the watches have seen, grouped by job. The validating
/// webhook reads its peers here ([`PeerSource`]); the reconciler reads the
/// members of the job it reconciles.
#[derive(Default)]
pub struct MemberIndex {
    inner: RwLock<Inner>,
    /// Every member watch has listed once.
    synced: std::sync::atomic::AtomicBool,
    /// The member kinds that have listed once, a bit per kind tag.
    listed: std::sync::atomic::AtomicU8,
    listed_changed: tokio::sync::Notify,
}

impl std::fmt::Debug for MemberIndex {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("MemberIndex")
            .field("jobs", &self.read().jobs.len())
            .finish()
    }
}

/// A watched member kind.
pub trait MemberObject: kube::Resource + serde::Serialize {
    const KIND: Kind;
    /// See [`Entry::live`].
    fn live(&self) -> bool;
    /// See [`Entry::pod`].
    fn observe(&self, _entry: &Entry) -> Option<ObservedPod> {
        None
    }
}

impl MemberObject for Pod {
    const KIND: Kind = Kind::Pod;
    fn observe(&self, entry: &Entry) -> Option<ObservedPod> {
        observe_pod(entry, self)
    }
    fn live(&self) -> bool {
        let phase = self.status.as_ref().and_then(|s| s.phase.as_deref());
        self.metadata.deletion_timestamp.is_none()
            && phase != Some("Succeeded")
            && phase != Some("Failed")
    }
}

impl MemberObject for StatefulSet {
    const KIND: Kind = Kind::StatefulSet;
    fn live(&self) -> bool {
        self.metadata.deletion_timestamp.is_none() && self.spec.replicas.unwrap_or(1) > 0
    }
}

impl MemberObject for Job {
    const KIND: Kind = Kind::Job;
    fn live(&self) -> bool {
        let finished = self.status.as_ref().is_some_and(|s| {
            s.completion_time.is_some()
                || s.conditions.as_ref().is_some_and(|cs| {
                    cs.iter().any(|c| {
                        c.status == "True" && (c.type_ == "Complete" || c.type_ == "Failed")
                    })
                })
        });
        self.metadata.deletion_timestamp.is_none()
            && !self.spec.as_ref().and_then(|s| s.suspend).unwrap_or(false)
            && !finished
    }
}

/// The index entry of a watched object; None when it is not a member (or
/// does not parse: the webhook reports that on its own).
pub fn entry_of<K: MemberObject>(object: &K, config: &Config) -> Option<(JobKey, Entry)> {
    let value = serde_json::to_value(object).ok()?;
    let namespace = object.meta().namespace.as_deref();
    let member = member::parse(K::KIND, &value, namespace, config)
        .ok()
        .flatten()?
        .member;
    let framework_container = (K::KIND == Kind::Pod)
        .then(|| mutate::framework_container(&member, &value))
        .flatten()
        .and_then(|i| {
            value["spec"]["containers"][i]["name"]
                .as_str()
                .map(str::to_owned)
        });
    let tensorboard_volume = member
        .spec
        .tensorboard
        .as_ref()
        .and_then(|tb| crate::tensorboard::volume(K::KIND, &value, &tb.volume))
        .cloned();
    let owner_name = (K::KIND == Kind::Pod)
        .then(|| {
            object
                .meta()
                .owner_references
                .as_ref()?
                .iter()
                .find(|r| r.controller == Some(true))
                .map(|r| r.name.clone())
        })
        .flatten();
    let mut entry = Entry {
        member,
        live: object.live(),
        framework_container,
        tensorboard_volume,
        pod: None,
        owner_name,
    };
    entry.pod = object.observe(&entry);
    Some((
        (entry.member.namespace.clone(), entry.member.job.clone()),
        entry,
    ))
}

fn object_key<K: MemberObject>(object: &K) -> ObjectKey {
    ObjectKey {
        kind: kind_tag(K::KIND),
        namespace: object.meta().namespace.clone().unwrap_or_default(),
        name: object.meta().name.clone().unwrap_or_default(),
    }
}

impl MemberIndex {
    fn read(&self) -> std::sync::RwLockReadGuard<'_, Inner> {
        self.inner.read().unwrap_or_else(|e| e.into_inner())
    }

    fn write(&self) -> std::sync::RwLockWriteGuard<'_, Inner> {
        self.inner.write().unwrap_or_else(|e| e.into_inner())
    }

    /// Follows one watch event of kind `K`.
    pub fn apply_event<K: MemberObject>(&self, event: &watcher::Event<K>, config: &Config) {
        let tag = usize::from(kind_tag(K::KIND));
        match event {
            watcher::Event::Apply(o) => {
                let value = entry_of(o, config);
                self.write().insert(object_key(o), value);
            }
            watcher::Event::Delete(o) => self.write().remove(&object_key(o)),
            watcher::Event::Init => self.write().relist[tag] = Some(Vec::new()),
            watcher::Event::InitApply(o) => {
                let value = entry_of(o, config);
                if let Some(buf) = self.write().relist[tag].as_mut() {
                    buf.push((object_key(o), value));
                }
            }
            watcher::Event::InitDone => {
                let mut inner = self.write();
                let Some(listed) = inner.relist[tag].take() else {
                    return;
                };
                let stale: Vec<ObjectKey> = inner
                    .objects
                    .keys()
                    .filter(|k| usize::from(k.kind) == tag)
                    .cloned()
                    .collect();
                for k in &stale {
                    inner.remove(k);
                }
                for (k, v) in listed {
                    inner.insert(k, v);
                }
                drop(inner);
                self.listed
                    .fetch_or(1 << tag, std::sync::atomic::Ordering::SeqCst);
                self.listed_changed.notify_waiters();
            }
        }
    }

    /// Waits until the pod, StatefulSet and Job watches have each listed
    /// once (the first `InitDone` of each).
    pub async fn wait_listed(&self) {
        const ALL: u8 = 0b111;
        loop {
            let changed = self.listed_changed.notified();
            futures::pin_mut!(changed);
            changed.as_mut().enable();
            if self.listed.load(std::sync::atomic::Ordering::SeqCst) == ALL {
                return;
            }
            changed.await;
        }
    }

    /// The members of one job's run (live or not), pods by name: those of
    /// the DLJob `job_uid`, leaving out what another DLJob's finished run
    /// left ([`c::FINISHED_RUN`]).
    pub fn members(&self, namespace: &str, job: &str, job_uid: Option<&str>) -> Vec<Entry> {
        let inner = self.read();
        let Some(m) = inner.jobs.get(&(namespace.to_owned(), job.to_owned())) else {
            return Vec::new();
        };
        let all: Vec<&Entry> = m.values().map(|e| &**e).collect();
        all.iter()
            .filter(|e| !e.left_of_another_run(job_uid, &all))
            .map(|e| Entry::clone(e))
            .collect()
    }

    /// Jobs with at least one live member that no finished run left, and
    /// one of those members: the first that holds the TensorBoard volume,
    /// if any does. What a finished run left running makes no new DLJob.
    pub fn live_jobs(&self) -> Vec<(JobKey, Entry)> {
        self.read()
            .jobs
            .iter()
            .filter_map(|(k, m)| {
                let all: Vec<&Entry> = m.values().map(|e| &**e).collect();
                let mut live = all
                    .iter()
                    .filter(|e| e.live && !e.left_of_another_run(None, &all));
                let first = live.clone().next()?;
                let entry = live
                    .find(|e| e.tensorboard_volume.is_some())
                    .unwrap_or(first);
                Some((k.clone(), Entry::clone(entry)))
            })
            .collect()
    }
}

impl MemberIndex {
    /// Marks that every member watch has listed once.
    pub fn mark_synced(&self) {
        self.synced.store(true, std::sync::atomic::Ordering::SeqCst);
    }
}

impl PeerSource for MemberIndex {
    fn synced(&self) -> bool {
        self.synced.load(std::sync::atomic::Ordering::SeqCst)
    }

    /// The live members only: a finished pod or a stopped workload of an
    /// earlier run does not block its replacement.
    fn peers(&self, namespace: &str, job: &str) -> Vec<MemberSpec> {
        self.read()
            .jobs
            .get(&(namespace.to_owned(), job.to_owned()))
            .map(|m| {
                m.values()
                    .filter(|e| e.live)
                    .map(|e| e.member.clone())
                    .collect()
            })
            .unwrap_or_default()
    }
}

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
pub fn recreate_manifest(pod: &Pod, reserved: &[&str]) -> Value {
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
pub fn observe_pod(entry: &Entry, pod: &Pod) -> Option<ObservedPod> {
    let index = entry.member.index?;
    let status = pod.status.as_ref();
    let container = entry.framework_container.as_ref().and_then(|name| {
        status?
            .container_statuses
            .as_ref()?
            .iter()
            .find(|s| &s.name == name)
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
        role: entry.member.role.clone(),
        index,
        owner: entry.member.owner,
        restart_policy,
        phase: status
            .and_then(|s| s.phase.clone())
            .unwrap_or_else(|| "Pending".to_owned()),
        reason: status.and_then(|s| s.reason.clone()),
        deleting: pod.metadata.deletion_timestamp.is_some(),
        container,
        marked: entry.member.finished_run.is_some(),
        gated: pod
            .spec
            .as_ref()
            .and_then(|s| s.scheduling_gates.as_ref())
            .is_some_and(|gates| gates.iter().any(|g| g.name == c::WORKERS_READY_GATE)),
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
pub fn observe_job(role: &str, job: &Job) -> Workload {
    let spec = job.spec.as_ref();
    Workload::Job {
        name: job.name_any(),
        uid: job.uid().unwrap_or_default(),
        marked: finished_run(&job.metadata).is_some(),
        role: role.to_owned(),
        suspended: spec.and_then(|s| s.suspend).unwrap_or(false),
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
pub fn finished_run(meta: &ObjectMeta) -> Option<&str> {
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

#[cfg(test)]
mod tests {
    use super::*;

    /// A running StatefulSet (or bare) pytorch pod with a sidecar listed
    /// first, extra labels and annotations.
    fn pod(owned: bool, containers: &[&str], annotations: &[(&str, &str)]) -> Pod {
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
        assert_eq!(observe_pod(&e1, pod), observe_pod(&e2, &trimmed));
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

    #[test]
    fn a_new_dljob_is_made_from_a_member_holding_the_tensorboard_volume() {
        let config = Config::default();
        let index = MemberIndex::default();
        let tb = [(c::TENSORBOARD, "logs:runs")];
        // A pod whose volume is unknown (not in its spec) sorts first...
        let mut first = pod(false, &["pytorch"], &tb);
        first.metadata.name = Some("a-0".into());
        first
            .metadata
            .annotations
            .as_mut()
            .unwrap()
            .insert(c::INDEX.into(), "0".into());
        let mut second = pod(false, &["pytorch"], &tb);
        second.spec.as_mut().unwrap().volumes = serde_json::from_value(
            json!([{"name": "logs", "nfs": {"server": "nfs", "path": "/"}}]),
        )
        .unwrap();
        for p in [first, second] {
            index.apply_event(&watcher::Event::Apply(p), &config);
        }
        // ... yet the one with the volume is chosen.
        let jobs = index.live_jobs();
        assert_eq!(jobs.len(), 1);
        assert_eq!(jobs[0].1.member.name, "worker-1");
        assert!(jobs[0].1.tensorboard_volume.is_some());
    }
}
