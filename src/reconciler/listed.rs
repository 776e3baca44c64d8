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
/// seconds).
#[derive(Default, Debug)]
pub struct Unreadable(Mutex<Marks>);

/// Each unreadable DLJob with why and the list it was last seen in: a
/// relist keeps what it sees again and, when it is done, forgets the rest
/// (deleted while the watch was down), as the store swaps at its end.
#[derive(Default, Debug)]
struct Marks {
    jobs: HashMap<ObjectRef<DLJob>, (String, u64)>,
    list: u64,
}

impl Unreadable {
    pub(crate) fn contains(&self, job: &ObjectRef<DLJob>) -> bool {
        self.lock().jobs.contains_key(job)
    }

    /// Records `job` as unreadable; true when that is news (new, or
    /// another reason).
    pub fn insert(&self, job: ObjectRef<DLJob>, error: &str) -> bool {
        let mut marks = self.lock();
        let list = marks.list;
        marks
            .jobs
            .insert(job, (error.to_owned(), list))
            .is_none_or(|(was, _)| was != error)
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
        marks.jobs.retain(|_, (_, seen)| *seen == list);
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, Marks> {
        self.0
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner)
    }
}

/// The event for the DLJob store: readable DLJobs as they are; an
/// unreadable one recorded in `unreadable` and dropped, with a warning
/// logged and passed to `news` (the DLJob as far as it was read, and why)
/// when that is news (the store keeps what it last read of it, so the job
/// goes on under the spec it had — until a relist, after which it is not
/// reconciled until its DLJob is put right or deleted); a deletion of
/// either deletes.
pub(crate) fn readable(
    event: watcher::Event<Listed>,
    unreadable: &Unreadable,
    news: &mut impl FnMut(&DLJob, &str),
) -> Option<watcher::Event<DLJob>> {
    use watcher::Event;
    let mut apply = |listed: Listed| match listed {
        Listed::Readable(job) => {
            unreadable.remove(&ObjectRef::from_obj(&*job));
            Some(*job)
        }
        Listed::Unreadable { metadata, error } => {
            let job = placeholder(*metadata);
            let namespace = job.metadata.namespace.clone().unwrap_or_default();
            let name = job.metadata.name.clone().unwrap_or_default();
            if unreadable.insert(ObjectRef::from_obj(&job), &error) {
                tracing::warn!(%namespace, job = %name, %error, "DLJob does not parse: set aside (delete it, and dljob makes it again from the job's members); the other jobs go on");
                news(&job, &error);
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
        // What would be told on each DLJob (an Event): its name and why.
        let mut said: Vec<(String, String)> = Vec::new();
        let mut tell = |job: &DLJob, why: &str| {
            said.push((job.metadata.name.clone().unwrap(), why.to_owned()));
        };
        let events: Vec<_> = items
            .into_iter()
            .filter_map(|l| readable(watcher::Event::InitApply(l), &unreadable, &mut tell))
            .map(|e| match e {
                watcher::Event::InitApply(j) => j.metadata.name.unwrap(),
                other => panic!("{other:?}"),
            })
            .collect();
        assert_eq!(events, ["a", "c"]);
        let bad = ObjectRef::new("bad").within("ml");
        assert!(unreadable.contains(&bad));
        let why = unreadable.lock().jobs[&bad].0.clone();
        assert!(why.contains("role \"worker\" appears twice"), "{why}");
        // Said once, not at every event.
        assert!(!unreadable.insert(bad.clone(), &why));
        // Its deletion deletes it from the store, and it is no longer set aside.
        let deleted: Listed = serde_json::from_value(dljob("bad", "worker=0")).unwrap();
        assert!(matches!(deleted, Listed::Unreadable { .. }));
        match readable(watcher::Event::Delete(deleted), &unreadable, &mut tell) {
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
            &mut tell,
        );
        readable(
            watcher::Event::Apply(listed("gone", "worker=0")),
            &unreadable,
            &mut tell,
        );
        readable(watcher::Event::Init, &unreadable, &mut tell);
        assert!(unreadable.contains(&bad));
        readable(
            watcher::Event::InitApply(listed("bad", "worker=0")),
            &unreadable,
            &mut tell,
        );
        readable(watcher::Event::InitDone, &unreadable, &mut tell);
        assert!(unreadable.contains(&bad));
        assert!(!unreadable.contains(&ObjectRef::new("gone").within("ml")));
        // Told once per DLJob and reason: "bad" with the role twice, then
        // (deleted and made again) with a count of 0, "gone" with it; the
        // relist's "bad" again with the same reason is not news.
        let names: Vec<&str> = said.iter().map(|(n, _)| n.as_str()).collect();
        assert_eq!(names, ["bad", "bad", "gone"]);
        assert_eq!(said[0].1, why);
        assert_ne!(said[1].1, why);
        assert_eq!(said[1].1, said[2].1);
        // An object without readable metadata is not one: the decoding fails.
        assert!(serde_json::from_value::<Listed>(json!({"metadata": 3})).is_err());
    }
}
