//! The member index: every member the watches have seen, grouped by job —
//! the validating webhook's peers, answered from memory, and the members
//! of the job the reconciler reconciles. Pure: fed watch events, no client.

use std::collections::{BTreeMap, BTreeSet, HashMap};
use std::sync::{Arc, RwLock};

use k8s_openapi::api::apps::v1::StatefulSet;
use k8s_openapi::api::batch::v1::Job;
use k8s_openapi::api::core::v1::Pod;
use kube::runtime::watcher;
use serde_json::Value;

use super::observe::observe_pod;
use super::status::ObservedPod;
use crate::config::Config;
use crate::crd::JobSpec;
use crate::member::{self, MemberSpec};
use crate::mutate;
use crate::object::Kind;
use crate::validate::{self, PeerSource};

/// A job: (namespace, name).
pub(crate) type JobKey = (String, String);

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

/// Objects listed since a watch (re)started, with the job their label
/// names (workloads) and their entries.
type Relist = Vec<(ObjectKey, Option<JobKey>, Option<(JobKey, Entry)>)>;

#[derive(Default)]
struct Inner {
    jobs: HashMap<JobKey, JobMembers>,
    objects: HashMap<ObjectKey, JobKey>,
    /// Per job, every StatefulSet and Job labelled with it, whether it
    /// parses as a member or not (one scaled beyond its role's count does
    /// not, yet it is the job's, to report and to stop): a reconcile reads
    /// its own job's workloads from the stores by these keys, never a
    /// cluster-wide scan.
    labelled: HashMap<JobKey, BTreeSet<ObjectKey>>,
    label_of: HashMap<ObjectKey, JobKey>,
    /// Per kind: the objects listed since the watch (re)started.
    relist: [Option<Relist>; 3],
}

/// One job's members, and what the webhook's peer checks look up in them.
#[derive(Default)]
struct JobMembers {
    /// Boxed: a job's map is small (a leaf of 11 slots holds a few
    /// members), and an `Entry` is over a kilobyte inline.
    members: BTreeMap<ObjectKey, Box<Entry>>,
    tally: Tally,
}

/// A job's live members, tallied for the validating webhook's peer checks
/// ([`validate::relevant`]), so that a review of a 1 000-member job's pod
/// looks up a few entries instead of going through the thousand: the
/// job-wide specs held (usually one), the pods by (role, index), the
/// workloads. Kept as members come and go.
#[derive(Default)]
struct Tally {
    /// The job-wide specs live members of a running run (no finished-run
    /// mark) hold, each with how many hold it. Every member of the job
    /// holding an equal spec shares this one ([`JobMembers::share_spec`]):
    /// a job keeps one spec, not one per member.
    specs: Vec<(Arc<JobSpec>, usize)>,
    /// The roles `pods` names, by position.
    roles: Vec<String>,
    /// Live pods with an index: (role position, index, name).
    pods: BTreeSet<(u32, u32, Box<str>)>,
    /// Live workloads.
    workloads: BTreeSet<ObjectKey>,
}

impl Tally {
    fn role(&mut self, role: &str) -> u32 {
        match self.roles.iter().position(|r| r == role) {
            Some(i) => i as u32,
            None => {
                self.roles.push(role.to_owned());
                (self.roles.len() - 1) as u32
            }
        }
    }

    /// The pods at `index` of `role`, and up to `end` (exclusive).
    fn pods(&self, role: &str, index: u32, end: u32) -> impl Iterator<Item = &str> {
        let role = self.roles.iter().position(|r| r == role).map(|r| r as u32);
        role.into_iter().flat_map(move |r| {
            self.pods
                .range((r, index, Box::<str>::default())..(r, end, Box::<str>::default()))
                .map(|(_, _, name)| &**name)
        })
    }

    fn count(&mut self, key: &ObjectKey, e: &Entry, add: bool) {
        if !e.live {
            return;
        }
        let m = &e.member;
        if m.finished_run.is_none() {
            let at = self.specs.iter().position(|(s, _)| *s == m.spec);
            match (at, add) {
                (Some(i), true) => self.specs[i].1 += 1,
                (None, true) => self.specs.push((m.spec.clone(), 1)),
                (Some(i), false) => {
                    self.specs[i].1 -= 1;
                    if self.specs[i].1 == 0 {
                        self.specs.swap_remove(i);
                    }
                }
                (None, false) => {}
            }
        }
        match (m.kind, m.index) {
            (Kind::Pod, Some(index)) => {
                let at = (self.role(&m.role), index, Box::from(key.name.as_str()));
                if add {
                    self.pods.insert(at);
                } else {
                    self.pods.remove(&at);
                }
            }
            (Kind::Pod, None) => {}
            _ => {
                if add {
                    self.workloads.insert(key.clone());
                } else {
                    self.workloads.remove(key);
                }
            }
        }
    }
}

impl JobMembers {
    /// Makes `entry` share the job's spec equal to its own, if one is held.
    fn share_spec(&self, entry: &mut Entry) {
        if let Some((spec, _)) = self
            .tally
            .specs
            .iter()
            .find(|(s, _)| *s == entry.member.spec)
        {
            entry.member.spec = spec.clone();
        }
    }
}

impl Inner {
    fn remove(&mut self, key: &ObjectKey) {
        if let Some(job) = self.label_of.remove(key) {
            if let Some(set) = self.labelled.get_mut(&job) {
                set.remove(key);
                if set.is_empty() {
                    self.labelled.remove(&job);
                }
            }
        }
        if let Some(job) = self.objects.remove(key) {
            if let Some(j) = self.jobs.get_mut(&job) {
                if let Some(entry) = j.members.remove(key) {
                    j.tally.count(key, &entry, false);
                }
                if j.members.is_empty() {
                    self.jobs.remove(&job);
                }
            }
        }
    }

    fn insert(&mut self, key: ObjectKey, label: Option<JobKey>, value: Option<(JobKey, Entry)>) {
        self.remove(&key);
        if let Some(job) = label {
            self.label_of.insert(key.clone(), job.clone());
            self.labelled.entry(job).or_default().insert(key.clone());
        }
        if let Some((job, mut entry)) = value {
            self.objects.insert(key.clone(), job.clone());
            let j = self.jobs.entry(job).or_default();
            j.share_spec(&mut entry);
            j.tally.count(&key, &entry, true);
            j.members.insert(key, Box::new(entry));
        }
    }

    /// [`validate::relevant`] of the job's live members, from the tally.
    fn relevant_peers(&self, m: &MemberSpec) -> Vec<MemberSpec> {
        let Some(j) = self.jobs.get(&(m.namespace.clone(), m.job.clone())) else {
            return Vec::new();
        };
        let (members, tally) = (&j.members, &j.tally);
        // A job holding another spec than `m`'s: the denial path, where
        // naming the first member of each spec takes going through them.
        if tally.specs.iter().any(|(s, _)| *s != m.spec) {
            let live = members.values().filter(|e| e.live).map(|e| &e.member);
            return validate::relevant(m, live).into_iter().cloned().collect();
        }
        let pod = |name: &str| ObjectKey {
            kind: kind_tag(Kind::Pod),
            namespace: m.namespace.clone(),
            name: name.to_owned(),
        };
        let mut keys: BTreeSet<ObjectKey> = BTreeSet::new();
        if let (Kind::Pod, Some(index)) = (m.kind, m.index) {
            keys.extend(tally.pods(&m.role, index, index.saturating_add(1)).map(pod));
        }
        if let Some((start, end)) = validate::covers(m) {
            keys.extend(tally.workloads.iter().cloned());
            if m.kind != Kind::Pod {
                keys.extend(tally.pods(&m.role, start, end).map(pod));
            }
        }
        let chosen = keys
            .iter()
            .filter_map(|k| members.get(k))
            .filter(|e| e.live)
            .map(|e| &e.member);
        validate::relevant(m, chosen).into_iter().cloned().collect()
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
        observe_pod(&entry.member, entry.framework_container.as_deref(), self)
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

/// The job a workload's label names (`dljob.dev/job`), for
/// [`MemberIndex::workloads`]; none for a pod (pods are found through
/// their entries).
fn labelled_job<K: MemberObject>(object: &K) -> Option<JobKey> {
    if K::KIND == Kind::Pod {
        return None;
    }
    let meta = object.meta();
    let job = meta.labels.as_ref()?.get(crate::contract::JOB)?;
    Some((meta.namespace.clone().unwrap_or_default(), job.clone()))
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
                self.write().insert(object_key(o), labelled_job(o), value);
            }
            watcher::Event::Delete(o) => self.write().remove(&object_key(o)),
            watcher::Event::Init => self.write().relist[tag] = Some(Vec::new()),
            watcher::Event::InitApply(o) => {
                let value = entry_of(o, config);
                if let Some(buf) = self.write().relist[tag].as_mut() {
                    buf.push((object_key(o), labelled_job(o), value));
                }
            }
            watcher::Event::InitDone => {
                let mut inner = self.write();
                let Some(listed) = inner.relist[tag].take() else {
                    return;
                };
                let stale: BTreeSet<ObjectKey> = inner
                    .objects
                    .keys()
                    .chain(inner.label_of.keys())
                    .filter(|k| usize::from(k.kind) == tag)
                    .cloned()
                    .collect();
                for k in &stale {
                    inner.remove(k);
                }
                for (k, label, v) in listed {
                    inner.insert(k, label, v);
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
    pub(crate) async fn wait_listed(&self) {
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
        let Some(j) = inner.jobs.get(&(namespace.to_owned(), job.to_owned())) else {
            return Vec::new();
        };
        let all: Vec<&Entry> = j.members.values().map(|e| &**e).collect();
        all.iter()
            .filter(|e| !e.left_of_another_run(job_uid, &all))
            .map(|e| Entry::clone(e))
            .collect()
    }

    /// The names of the StatefulSets (`Kind::StatefulSet`) and Jobs
    /// labelled with job `job` in `namespace`, parsing as members or not:
    /// the keys a reconcile reads its job's workloads by.
    pub fn workloads(&self, namespace: &str, job: &str) -> Vec<(Kind, String)> {
        let inner = self.read();
        let Some(keys) = inner.labelled.get(&(namespace.to_owned(), job.to_owned())) else {
            return Vec::new();
        };
        keys.iter()
            .map(|k| {
                let kind = if k.kind == kind_tag(Kind::StatefulSet) {
                    Kind::StatefulSet
                } else {
                    Kind::Job
                };
                (kind, k.name.clone())
            })
            .collect()
    }

    /// Jobs with at least one live member that no finished run left, and
    /// one of those members: the first that holds the TensorBoard volume,
    /// if any does. What a finished run left running makes no new DLJob.
    pub(crate) fn live_jobs(&self) -> Vec<(JobKey, Entry)> {
        self.read()
            .jobs
            .iter()
            .filter_map(|(k, j)| Some((k.clone(), live_member(j)?)))
            .collect()
    }

    /// [`MemberIndex::live_jobs`] of one job: O(that job's members).
    pub(crate) fn live_member(&self, namespace: &str, job: &str) -> Option<Entry> {
        let inner = self.read();
        live_member(inner.jobs.get(&(namespace.to_owned(), job.to_owned()))?)
    }
}

/// A live member of `j` that no finished run left: the first holding the
/// TensorBoard volume, if any does.
fn live_member(j: &JobMembers) -> Option<Entry> {
    let all: Vec<&Entry> = j.members.values().map(|e| &**e).collect();
    let mut live = all
        .iter()
        .filter(|e| e.live && !e.left_of_another_run(None, &all));
    let first = live.clone().next()?;
    let entry = live
        .find(|e| e.tensorboard_volume.is_some())
        .unwrap_or(first);
    Some(Entry::clone(entry))
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
            .map(|j| {
                j.members
                    .values()
                    .filter(|e| e.live)
                    .map(|e| e.member.clone())
                    .collect()
            })
            .unwrap_or_default()
    }

    fn relevant_peers(&self, m: &MemberSpec) -> Vec<MemberSpec> {
        self.read().relevant_peers(m)
    }

    fn relevant_peers_to_each(&self, ms: &[&MemberSpec]) -> Vec<Vec<MemberSpec>> {
        let inner = self.read();
        ms.iter().map(|m| inner.relevant_peers(m)).collect()
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::contract as c;
    use crate::reconciler::trim::tests::pod;
    use serde_json::json;

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
