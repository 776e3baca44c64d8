//! Where the reconciler watches: every namespace (one watch per kind, the
//! default), or the namespaces the config lists (`namespaces:`), for an
//! install with a Role in each and no ClusterRole.
//!
//! A list of namespaces is watched as one stream per kind ([`Merge`]): the
//! reflector stores and the member index take one list and then changes,
//! as from a cluster-wide watch. Their first lists make one list; a later
//! relist of one namespace (after its watch broke) becomes changes — what
//! it lists is applied, and what it no longer lists is deleted. Pure: the
//! merge is a state machine fed events, tested on its own.

use std::collections::{BTreeMap, HashMap, HashSet};
use std::fmt::Debug;

use futures::{stream, Stream, StreamExt};
use kube::api::Api;

use kube::runtime::watcher::{self, Event};
use kube::runtime::WatchStreamExt;
use kube::{Client, Resource, ResourceExt};
use serde::de::DeserializeOwned;

use super::WatchBackoff;
use crate::config::Config;

/// The namespaces the reconciler watches.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Scope {
    Cluster,
    Namespaces(Vec<String>),
}

/// A watch's events, boxed.
pub(crate) type Events<K> = futures::stream::BoxStream<'static, Result<Event<K>, watcher::Error>>;

impl Scope {
    pub(crate) fn of(config: &Config) -> Self {
        if config.namespaces.is_empty() {
            Scope::Cluster
        } else {
            Scope::Namespaces(config.namespaces.clone())
        }
    }

    /// For logs: `every namespace`, or the list.
    pub(crate) fn describe(&self) -> String {
        match self {
            Scope::Cluster => "every namespace".to_owned(),
            Scope::Namespaces(list) => format!("namespaces {}", list.join(", ")),
        }
    }

    /// The watch of `K` over this scope, each namespace's with its own
    /// [`WatchBackoff`]. `gone` makes the object a relist found deleted is
    /// reported with (see [`Merge`]).
    pub(crate) fn watch<K>(
        &self,
        client: &Client,
        config: &watcher::Config,
        gone: Gone<K>,
    ) -> Events<K>
    where
        K: Resource<DynamicType = (), Scope = kube::core::NamespaceResourceScope>
            + Clone
            + DeserializeOwned
            + Debug
            + Send
            + 'static,
    {
        match self {
            Scope::Cluster => watcher(Api::<K>::all(client.clone()), config.clone())
                .backoff(WatchBackoff::default())
                .boxed(),
            Scope::Namespaces(list) => {
                let streams = list.iter().map(|ns| {
                    let ns = ns.clone();
                    watcher(Api::<K>::namespaced(client.clone(), &ns), config.clone())
                        .backoff(WatchBackoff::default())
                        .map(move |e| (ns.clone(), e))
                        .boxed()
                });
                let mut merge = Merge::new(list, gone);
                stream::select_all(streams)
                    .flat_map(move |(ns, e)| stream::iter(merge.step(&ns, e)))
                    .boxed()
            }
        }
    }
}

fn watcher<K>(
    api: Api<K>,
    config: watcher::Config,
) -> impl Stream<Item = Result<Event<K>, watcher::Error>>
where
    K: Resource<DynamicType = ()> + Clone + DeserializeOwned + Debug + Send + 'static,
{
    kube::runtime::watcher(api, config)
}

/// Makes the object a relist found deleted from its namespace, name and
/// job label (what a store or the index keys it by, and what tells the
/// controller whose job changed).
pub(crate) type Gone<K> = fn(&str, &str, Option<&str>) -> K;

/// An object reported deleted: `K`'s default with that metadata.
pub(crate) fn gone<K: Resource + Default>(namespace: &str, name: &str, job: Option<&str>) -> K {
    let mut k = K::default();
    k.meta_mut().name = Some(name.to_owned());
    k.meta_mut().namespace = Some(namespace.to_owned());
    if let Some(job) = job {
        k.meta_mut().labels = Some([(crate::contract::JOB.to_owned(), job.to_owned())].into());
    }
    k
}

/// The job label of an object.
fn job_of<K: Resource>(o: &K) -> Option<String> {
    o.meta().labels.as_ref()?.get(crate::contract::JOB).cloned()
}

/// Several namespaces' watch events as one watch's. See the module doc.
pub(crate) struct Merge<K> {
    /// Namespaces whose first list is not done yet.
    pending: HashSet<String>,
    /// Until every first list is done: the objects listed so far, kept
    /// current by the changes seen meanwhile.
    initial: Option<BTreeMap<(String, String), K>>,
    /// Afterwards: each namespace's objects, by name, with their job label.
    known: HashMap<String, HashMap<String, Option<String>>>,
    /// A later relist under way: what it listed so far, per namespace.
    relists: HashMap<String, HashSet<String>>,
    gone: Gone<K>,
}

impl<K: Resource + Clone> Merge<K> {
    pub(crate) fn new(namespaces: &[String], gone: Gone<K>) -> Self {
        Self {
            pending: namespaces.iter().cloned().collect(),
            initial: Some(BTreeMap::new()),
            known: HashMap::new(),
            relists: HashMap::new(),
            gone,
        }
    }

    fn key(ns: &str, o: &K) -> (String, String) {
        (ns.to_owned(), o.name_any())
    }

    /// The events of the merged watch for one event of namespace `ns`'s.
    pub(crate) fn step(
        &mut self,
        ns: &str,
        event: Result<Event<K>, watcher::Error>,
    ) -> Vec<Result<Event<K>, watcher::Error>> {
        let event = match event {
            Ok(e) => e,
            Err(e) => return vec![Err(e)],
        };
        if let Some(initial) = self.initial.as_mut() {
            match event {
                // A namespace that lists again before every first list is
                // done is waited for again.
                Event::Init => {
                    initial.retain(|(n, _), _| n != ns);
                    self.pending.insert(ns.to_owned());
                }
                Event::InitApply(o) | Event::Apply(o) => {
                    initial.insert(Self::key(ns, &o), o);
                }
                Event::Delete(o) => {
                    initial.remove(&Self::key(ns, &o));
                }
                Event::InitDone => {
                    self.pending.remove(ns);
                }
            }
            if !self.pending.is_empty() {
                return Vec::new();
            }
            let listed = self.initial.take().unwrap_or_default();
            let mut out = Vec::with_capacity(listed.len() + 2);
            out.push(Ok(Event::Init));
            for ((n, name), o) in listed {
                self.known.entry(n).or_default().insert(name, job_of(&o));
                out.push(Ok(Event::InitApply(o)));
            }
            out.push(Ok(Event::InitDone));
            return out;
        }
        match event {
            Event::Apply(o) => {
                self.known
                    .entry(ns.to_owned())
                    .or_default()
                    .insert(o.name_any(), job_of(&o));
                vec![Ok(Event::Apply(o))]
            }
            Event::Delete(o) => {
                if let Some(names) = self.known.get_mut(ns) {
                    names.remove(&o.name_any());
                }
                vec![Ok(Event::Delete(o))]
            }
            Event::Init => {
                self.relists.insert(ns.to_owned(), HashSet::new());
                Vec::new()
            }
            Event::InitApply(o) => {
                let name = o.name_any();
                self.relists
                    .entry(ns.to_owned())
                    .or_default()
                    .insert(name.clone());
                self.known
                    .entry(ns.to_owned())
                    .or_default()
                    .insert(name, job_of(&o));
                vec![Ok(Event::Apply(o))]
            }
            Event::InitDone => {
                let listed = self.relists.remove(ns).unwrap_or_default();
                let names = self.known.entry(ns.to_owned()).or_default();
                let stale: Vec<String> = names
                    .keys()
                    .filter(|n| !listed.contains(*n))
                    .cloned()
                    .collect();
                stale
                    .iter()
                    .map(|name| {
                        let job = names.remove(name).flatten();
                        Ok(Event::Delete((self.gone)(ns, name, job.as_deref())))
                    })
                    .collect()
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use k8s_openapi::api::core::v1::Pod;

    fn pod(ns: &str, name: &str) -> Pod {
        gone(ns, name, Some("mnist"))
    }

    /// The merged events, as (kind of event, namespace/name).
    fn show(events: &[Result<Event<Pod>, watcher::Error>]) -> Vec<String> {
        let id = |p: &Pod| format!("{}/{}", p.namespace().unwrap(), p.name_any());
        events
            .iter()
            .map(|e| match e.as_ref().unwrap() {
                Event::Init => "Init".to_owned(),
                Event::InitApply(p) => format!("InitApply {}", id(p)),
                Event::InitDone => "InitDone".to_owned(),
                Event::Apply(p) => format!("Apply {}", id(p)),
                Event::Delete(p) => format!("Delete {}", id(p)),
            })
            .collect()
    }

    #[test]
    fn the_first_lists_of_every_namespace_are_one_list() {
        let mut m = Merge::new(&["a".to_owned(), "b".to_owned()], gone::<Pod>);
        let mut out = Vec::new();
        for (ns, e) in [
            ("a", Event::Init),
            ("b", Event::Init),
            ("a", Event::InitApply(pod("a", "p1"))),
            ("b", Event::InitApply(pod("b", "q1"))),
            ("a", Event::InitDone),
            // Changes in a before b has listed are folded into the list.
            ("a", Event::Apply(pod("a", "p2"))),
            ("a", Event::Delete(pod("a", "p1"))),
            ("b", Event::InitApply(pod("b", "q2"))),
        ] {
            out.extend(m.step(ns, Ok(e)));
        }
        assert!(out.is_empty(), "nothing before every namespace listed");
        // a lists again before b is done: waited for again.
        for e in [Event::Init, Event::InitApply(pod("a", "p2"))] {
            out.extend(m.step("a", Ok(e)));
        }
        out.extend(m.step("b", Ok(Event::InitDone)));
        assert!(out.is_empty(), "a's second list is not done");
        out.extend(m.step("a", Ok(Event::InitDone)));
        assert_eq!(
            show(&out),
            [
                "Init",
                "InitApply a/p2",
                "InitApply b/q1",
                "InitApply b/q2",
                "InitDone"
            ]
        );
        // Then changes pass as they come.
        assert_eq!(
            show(&m.step("b", Ok(Event::Apply(pod("b", "q3"))))),
            ["Apply b/q3"]
        );
    }

    #[test]
    fn a_later_relist_of_one_namespace_is_changes_and_deletes_what_it_lost() {
        let mut m = Merge::new(&["a".to_owned(), "b".to_owned()], gone::<Pod>);
        for (ns, e) in [
            ("a", Event::Init),
            ("a", Event::InitApply(pod("a", "p1"))),
            ("a", Event::InitApply(pod("a", "p2"))),
            ("a", Event::InitDone),
            ("b", Event::Init),
            ("b", Event::InitApply(pod("b", "p1"))),
            ("b", Event::InitDone),
        ] {
            m.step(ns, Ok(e));
        }
        // a's watch broke and relisted: p1 is gone, p3 is new; b's p1 of the
        // same name is untouched.
        let mut out = Vec::new();
        for e in [
            Event::Init,
            Event::InitApply(pod("a", "p2")),
            Event::InitApply(pod("a", "p3")),
            Event::InitDone,
        ] {
            out.extend(m.step("a", Ok(e)));
        }
        assert_eq!(show(&out), ["Apply a/p2", "Apply a/p3", "Delete a/p1"]);
        // The deleted one still names its job (the controller reconciles it).
        match out[2].as_ref().unwrap() {
            Event::Delete(p) => assert_eq!(job_of(p).as_deref(), Some("mnist")),
            other => panic!("{other:?}"),
        }
        // A relist of b that lists nothing deletes its one pod.
        let mut out = m.step("b", Ok(Event::Init));
        out.extend(m.step("b", Ok(Event::InitDone)));
        assert_eq!(show(&out), ["Delete b/p1"]);
    }
}
