//! DLJobs as the reconciler lists and watches them. The API server checks a
//! DLJob against the CRD's schema, which cannot say everything the parsers
//! do (a topology with a role twice, an elastic range whose minimum is over
//! its maximum); a DLJob written by hand past it would fail the decoding of
//! the whole list, and with it the reconcile of every job. Here each DLJob
//! is decoded on its own: one that does not parse is set aside, named in a
//! warning (logged, and told on the DLJob as an Event) and left as it is,
//! and the others go on.

use std::borrow::Cow;
use std::collections::HashMap;
use std::sync::Mutex;

use k8s_openapi::api::core::v1::ObjectReference;
use k8s_openapi::apimachinery::pkg::apis::meta::v1::ObjectMeta;
use kube::runtime::reflector::ObjectRef;
use kube::runtime::watcher;
use kube::Resource;
use serde::{Deserialize, Deserializer};
use serde_json::Value;

use crate::crd::DLJob;

/// One DLJob as read: whole, or only its metadata and why the rest did not
/// parse.
#[derive(Clone, Debug)]
pub(crate) enum Listed {
    Readable(Box<DLJob>),
    Unreadable {
        metadata: Box<ObjectMeta>,
        error: String,
    },
}

impl<'de> Deserialize<'de> for Listed {
    fn deserialize<D: Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        let value = Value::deserialize(d)?;
        match DLJob::deserialize(&value) {
            Ok(job) => Ok(Listed::Readable(Box::new(job))),
            Err(error) => {
                // Without readable metadata it is not an object at all.
                let metadata = value
                    .get("metadata")
                    .map(ObjectMeta::deserialize)
                    .transpose()
                    .map_err(serde::de::Error::custom)?
                    .unwrap_or_default();
                Ok(Listed::Unreadable {
                    metadata: Box::new(metadata),
                    error: error.to_string(),
                })
            }
        }
    }
}

impl Resource for Listed {
    type DynamicType = ();
    type Scope = kube::core::NamespaceResourceScope;

    fn kind(dt: &()) -> Cow<'_, str> {
        DLJob::kind(dt)
    }
    fn group(dt: &()) -> Cow<'_, str> {
        DLJob::group(dt)
    }
    fn version(dt: &()) -> Cow<'_, str> {
        DLJob::version(dt)
    }
    fn plural(dt: &()) -> Cow<'_, str> {
        DLJob::plural(dt)
    }
    fn meta(&self) -> &ObjectMeta {
        match self {
            Listed::Readable(job) => job.meta(),
            Listed::Unreadable { metadata, .. } => metadata,
        }
    }
    fn meta_mut(&mut self) -> &mut ObjectMeta {
        match self {
            Listed::Readable(job) => job.meta_mut(),
            Listed::Unreadable { metadata, .. } => metadata,
        }
    }
}

/// The DLJobs that exist but do not parse, with why: the creator must not
/// try to create them again (the API server would answer 409 every two
/// seconds), and each is told why on itself once (an Event,
/// `tell::tell_unreadable`).
#[derive(Default, Debug)]
pub struct Unreadable {
    marks: Mutex<Marks>,
    /// Woken when a DLJob is to be told.
    news: tokio::sync::Notify,
}

/// Most bytes of a parser's reason kept (and told): the rest of the
/// DLJob is the tenant's to make as long as the API server takes.
pub const REASON_LIMIT: usize = 512;

/// Each unreadable DLJob with why and the list it was last seen in: a
/// relist keeps what it sees again and, when it is done, forgets the rest
/// (deleted while the watch was down), as the store swaps at its end.
#[derive(Default, Debug)]
struct Marks {
    jobs: HashMap<ObjectRef<DLJob>, Mark>,
    list: u64,
}

#[derive(Debug)]
struct Mark {
    why: String,
    list: u64,
    /// The DLJob as far as it was read, to be told about.
    regarding: ObjectReference,
    /// Told on the DLJob (its Event published) for this `why`.
    told: bool,
}

impl Unreadable {
    pub(crate) fn contains(&self, job: &ObjectRef<DLJob>) -> bool {
        self.lock().jobs.contains_key(job)
    }

    /// Records `job` as unreadable because of `error` (cut to
    /// [`REASON_LIMIT`]); true when that is news (new, or another reason),
    /// which is then to be told on `regarding`.
    pub fn insert(&self, job: ObjectRef<DLJob>, regarding: ObjectReference, error: &str) -> bool {
        let why = crate::contract::cut(error, REASON_LIMIT);
        let mut marks = self.lock();
        let list = marks.list;
        let news = marks.jobs.get(&job).is_none_or(|m| m.why != why);
        let told = !news && marks.jobs.get(&job).is_some_and(|m| m.told);
        marks.jobs.insert(
            job,
            Mark {
                why: why.into_owned(),
                list,
                regarding,
                told,
            },
        );
        drop(marks);
        if news {
            self.news.notify_one();
        }
        news
    }

    /// The DLJobs not yet told why, with why.
    pub fn untold(&self) -> Vec<(ObjectReference, String)> {
        self.lock()
            .jobs
            .values()
            .filter(|m| !m.told)
            .map(|m| (m.regarding.clone(), m.why.clone()))
            .collect()
    }

    /// `regarding` was told `why` (unless it has since changed or gone).
    pub fn told(&self, regarding: &ObjectReference, why: &str) {
        let job = ObjectRef::new(regarding.name.as_deref().unwrap_or_default())
            .within(regarding.namespace.as_deref().unwrap_or_default());
        if let Some(m) = self.lock().jobs.get_mut(&job) {
            if m.regarding == *regarding && m.why == why {
                m.told = true;
            }
        }
    }

    /// Until there may be a DLJob to tell (at once when one came since the
    /// last call).
    pub async fn news(&self) {
        self.news.notified().await;
    }

    fn remove(&self, job: &ObjectRef<DLJob>) {
        self.lock().jobs.remove(job);
    }

    /// A relist starts.
    fn relisting(&self) {
        self.lock().list += 1;
    }

    /// A relist is done: what it did not see again is gone.
    fn relisted(&self) {
        let mut marks = self.lock();
        let list = marks.list;
        marks.jobs.retain(|_, m| m.list == list);
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, Marks> {
        self.marks
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner)
    }
}

/// The event for the DLJob store: readable DLJobs as they are; an
/// unreadable one recorded in `unreadable` (to be told on the DLJob) and
/// dropped, with a warning logged when that is news (the store keeps what
/// it last read of it, so the job goes on under the spec it had — until a
/// relist, after which it is not reconciled until its DLJob is put right
/// or deleted); a deletion of either deletes.
pub(crate) fn readable(
    event: watcher::Event<Listed>,
    unreadable: &Unreadable,
) -> Option<watcher::Event<DLJob>> {
    use watcher::Event;
    let apply = |listed: Listed| match listed {
        Listed::Readable(job) => {
            unreadable.remove(&ObjectRef::from_obj(&*job));
            Some(*job)
        }
        Listed::Unreadable { metadata, error } => {
            let job = placeholder(*metadata);
            let namespace = job.metadata.namespace.clone().unwrap_or_default();
            let name = job.metadata.name.clone().unwrap_or_default();
            if unreadable.insert(ObjectRef::from_obj(&job), job.object_ref(&()), &error) {
                tracing::warn!(%namespace, job = %name, %error, "DLJob does not parse: set aside (delete it, and dljob makes it again from the job's members); the other jobs go on");
            }
            None
        }
    };
    match event {
        Event::Init => {
            unreadable.relisting();
            Some(Event::Init)
        }
        Event::InitDone => {
            unreadable.relisted();
            Some(Event::InitDone)
        }
        Event::InitApply(listed) => apply(listed).map(Event::InitApply),
        Event::Apply(listed) => apply(listed).map(Event::Apply),
        Event::Delete(listed) => {
            let job = match listed {
                Listed::Readable(job) => *job,
                Listed::Unreadable { metadata, .. } => placeholder(*metadata),
            };
            unreadable.remove(&ObjectRef::from_obj(&job));
            Some(Event::Delete(job))
        }
    }
}

/// A DLJob with `metadata` and an empty spec, for the store to delete by
/// name (and to name one that does not parse).
pub(crate) fn placeholder(metadata: ObjectMeta) -> DLJob {
    let spec = crate::crd::JobSpec::new("", crate::contract::Topology::single("gone", 1), 0);
    let mut job = DLJob::new("", spec);
    job.metadata = metadata;
    job
}

/// A DLJob a relist found deleted, as the store deletes it (by name).
pub(crate) fn gone(namespace: &str, name: &str, _job: Option<&str>) -> Listed {
    Listed::Readable(Box::new(placeholder(ObjectMeta {
        name: Some(name.to_owned()),
        namespace: Some(namespace.to_owned()),
        ..ObjectMeta::default()
    })))
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn dljob(name: &str, replicas: &str) -> Value {
        // A whole spec as the reconciler writes it, with `replicas` as given.
        let mut spec = serde_json::to_value(crate::crd::JobSpec::new(
            "pytorch",
            crate::contract::Topology::single("master", 1),
            23456,
        ))
        .unwrap();
        spec["replicas"] = json!(replicas);
        json!({
            "apiVersion": "dljob.dev/v1alpha1", "kind": "DLJob",
            "metadata": {"name": name, "namespace": "ml", "uid": format!("uid-{name}")},
            "spec": spec
        })
    }

    #[test]
    fn one_dljob_that_does_not_parse_leaves_the_list_readable() {
        // What the API server's schema lets through and the parser does not.
        let list = json!({
            "apiVersion": "dljob.dev/v1alpha1", "kind": "DLJobList", "metadata": {},
            "items": [dljob("a", "master=1,worker=2"), dljob("bad", "worker=1,worker=2"), dljob("c", "master=1")]
        });
        // As typed DLJobs the whole list fails…
        assert!(serde_json::from_value::<kube::core::ObjectList<DLJob>>(list.clone()).is_err());
        // …one by one, two are read and the third is named with why.
        let items = serde_json::from_value::<kube::core::ObjectList<Listed>>(list)
            .unwrap()
            .items;
        let unreadable = Unreadable::default();
        let events: Vec<_> = items
            .into_iter()
            .filter_map(|l| readable(watcher::Event::InitApply(l), &unreadable))
            .map(|e| match e {
                watcher::Event::InitApply(j) => j.metadata.name.unwrap(),
                other => panic!("{other:?}"),
            })
            .collect();
        assert_eq!(events, ["a", "c"]);
        let bad = ObjectRef::new("bad").within("ml");
        assert!(unreadable.contains(&bad));
        let why = unreadable.lock().jobs[&bad].why.clone();
        assert!(why.contains("role \"worker\" appears twice"), "{why}");
        // To be told on the DLJob as far as it was read: kind, name,
        // namespace and uid.
        let regarding = ObjectReference {
            api_version: Some("dljob.dev/v1alpha1".into()),
            kind: Some("DLJob".into()),
            name: Some("bad".into()),
            namespace: Some("ml".into()),
            uid: Some("uid-bad".into()),
            ..ObjectReference::default()
        };
        assert_eq!(unreadable.untold(), [(regarding.clone(), why.clone())]);
        // News once, not at every event; once told, not to be told again
        // for the same reason.
        assert!(!unreadable.insert(bad.clone(), regarding.clone(), &why));
        assert_eq!(unreadable.untold().len(), 1);
        unreadable.told(&regarding, &why);
        assert!(unreadable.untold().is_empty());
        assert!(!unreadable.insert(bad.clone(), regarding.clone(), &why));
        assert!(unreadable.untold().is_empty());
        // A reason as long as the tenant makes it is kept (and told) cut.
        let long = "x".repeat(10 * REASON_LIMIT);
        assert!(unreadable.insert(bad.clone(), regarding.clone(), &long));
        let kept = &unreadable.untold()[0].1;
        assert!(kept.len() <= REASON_LIMIT && kept.ends_with('…'), "{kept}");
        assert!(unreadable.insert(bad.clone(), regarding.clone(), &why));
        unreadable.told(&regarding, &why);
        // Its deletion deletes it from the store, and it is no longer set aside.
        let deleted: Listed = serde_json::from_value(dljob("bad", "worker=0")).unwrap();
        assert!(matches!(deleted, Listed::Unreadable { .. }));
        match readable(watcher::Event::Delete(deleted), &unreadable) {
            Some(watcher::Event::Delete(j)) => {
                assert_eq!(ObjectRef::from_obj(&j), bad);
            }
            other => panic!("{other:?}"),
        }
        assert!(!unreadable.contains(&bad));
        // A relist: kept while it runs (the creator must not try it), and
        // forgotten at its end only if it was not seen again.
        let listed = |name: &str, replicas: &str| -> Listed {
            serde_json::from_value(dljob(name, replicas)).unwrap()
        };
        readable(
            watcher::Event::Apply(listed("bad", "worker=0")),
            &unreadable,
        );
        readable(
            watcher::Event::Apply(listed("gone", "worker=0")),
            &unreadable,
        );
        // Made again after its deletion, "bad" is to be told again.
        let mut untold: Vec<String> = unreadable
            .untold()
            .into_iter()
            .map(|(r, _)| r.name.unwrap())
            .collect();
        untold.sort();
        assert_eq!(untold, ["bad", "gone"]);
        let zero = unreadable.lock().jobs[&bad].why.clone();
        assert_ne!(zero, why);
        unreadable.told(&regarding, &zero);
        readable(watcher::Event::Init, &unreadable);
        assert!(unreadable.contains(&bad));
        readable(
            watcher::Event::InitApply(listed("bad", "worker=0")),
            &unreadable,
        );
        readable(watcher::Event::InitDone, &unreadable);
        assert!(unreadable.contains(&bad));
        assert!(!unreadable.contains(&ObjectRef::new("gone").within("ml")));
        // The relist's "bad", told with the same reason, is not told again;
        // "gone" is gone, untold.
        assert!(unreadable.untold().is_empty());
        // An object without readable metadata is not one: the decoding fails.
        assert!(serde_json::from_value::<Listed>(json!({"metadata": 3})).is_err());
    }
}
