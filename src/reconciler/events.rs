//! The Events dljob posts about a DLJob (`events.k8s.io/v1`): the first of
//! its kind is created; the same Event again within [`SERIES_WINDOW`] of
//! its last occurrence is counted in the first one's series instead, which
//! `kubectl describe` shows as "(x3 over 2m)".
//!
//! kube-runtime's `Recorder` does the same, but it keeps every Event it sent
//! for six minutes and walks all of them, under one write lock, on every
//! publish: with 25 000 jobs that is 25 000 Events held and a 25 000-step
//! scan per Event, a cost that grows with what tenants create. Here at most
//! [`REMEMBERED`] Events are remembered, the least recently sent forgotten
//! first (client-go's event correlator keeps 4 096 the same way), each as
//! its key and name only; a publish is one map lookup. Forgetting costs
//! nothing but a new Event where a series count would have gone up.
//!
//! An Event's note is part of its key (kube-runtime's key leaves it out):
//! a different note is news, not a repeat — "restart 2 of 3" is not
//! folded into the series of "restart 1 of 3".

use std::num::NonZeroUsize;
use std::sync::Mutex;
use std::time::{Duration, Instant};

use k8s_openapi::api::core::v1::ObjectReference;
use k8s_openapi::api::events::v1::{Event, EventSeries};
use k8s_openapi::apimachinery::pkg::apis::meta::v1::{MicroTime, ObjectMeta};
use k8s_openapi::jiff::Timestamp;
use kube::api::{Api, Patch, PatchParams, PostParams};
use kube::Client;
use lru::LruCache;

use super::status::JobEvent;

/// How long after its last occurrence an Event takes repeats into its
/// series (client-go's and kube-runtime's six minutes).
pub const SERIES_WINDOW: Duration = Duration::from_secs(6 * 60);

/// The API server refuses an Event whose note is longer (bytes).
pub const NOTE_LIMIT: usize = 1024;

/// The API server refuses an Event whose reporting instance is longer.
const INSTANCE_LIMIT: usize = 128;

/// How many sent Events are remembered for their repeats.
pub const REMEMBERED: usize = 4096;

/// What makes two Events the same: the object, and what is said of it.
#[derive(Clone, Debug, PartialEq, Eq, Hash)]
struct Key {
    namespace: String,
    name: String,
    uid: String,
    event: JobEvent,
}

/// A sent Event, remembered for its repeats.
#[derive(Clone, Debug, PartialEq, Eq)]
struct Sent {
    /// The Event's name.
    name: String,
    /// When it last happened: a repeat within the window joins its series.
    last: Instant,
    /// How often it happened (1 when only created).
    count: i32,
}

/// What to do for one Event.
#[derive(Debug, PartialEq, Eq)]
enum Send {
    Create,
    /// Count one more in the series of the Event of this name.
    Repeat {
        name: String,
        count: i32,
    },
}

/// The sent Events remembered, bounded. Pure: the time is given.
struct Remembered(LruCache<Key, Sent>);

impl Remembered {
    fn new(capacity: usize) -> Self {
        Self(LruCache::new(
            NonZeroUsize::new(capacity).unwrap_or(NonZeroUsize::MIN),
        ))
    }

    /// What to send for `key` at `now`.
    fn decide(&mut self, key: &Key, now: Instant) -> Send {
        match self.0.get_mut(key) {
            Some(sent) if now.saturating_duration_since(sent.last) < SERIES_WINDOW => {
                sent.count = sent.count.saturating_add(1);
                sent.last = now;
                Send::Repeat {
                    name: sent.name.clone(),
                    count: sent.count,
                }
            }
            _ => Send::Create,
        }
    }

    /// Remembers a created Event (replacing an older one of the key).
    fn created(&mut self, key: Key, name: String, now: Instant) {
        self.0.put(
            key,
            Sent {
                name,
                last: now,
                count: 1,
            },
        );
    }

    /// Forgets `key` (its Event is gone, or could not be created).
    fn forget(&mut self, key: &Key) {
        self.0.pop(key);
    }
}

/// Posts Events about DLJobs as one controller instance.
pub struct Recorder {
    client: Client,
    controller: String,
    instance: String,
    remembered: Mutex<Remembered>,
}

impl Recorder {
    /// Events reported by `controller` from `instance` (the pod's name,
    /// cut to the API server's 128 bytes).
    pub fn new(client: Client, controller: &str, instance: &str) -> Self {
        Self {
            client,
            controller: controller.to_owned(),
            instance: cut(instance, INSTANCE_LIMIT).into_owned(),
            remembered: Mutex::new(Remembered::new(REMEMBERED)),
        }
    }

    /// Posts `note` about `regarding` (created in the object's namespace):
    /// a new Event, or a repeat counted in the series of the one sent
    /// before. A series whose Event is gone starts again as a new Event.
    /// A note longer than the API server takes ([`NOTE_LIMIT`]) is cut,
    /// ending in "…", rather than the Event refused.
    pub async fn publish(
        &self,
        regarding: &ObjectReference,
        event: &JobEvent,
    ) -> Result<(), kube::Error> {
        let namespace = regarding.namespace.clone().unwrap_or_default();
        let key = Key {
            namespace: namespace.clone(),
            name: regarding.name.clone().unwrap_or_default(),
            uid: regarding.uid.clone().unwrap_or_default(),
            event: JobEvent {
                note: cut(&event.note, NOTE_LIMIT).into_owned(),
                ..event.clone()
            },
        };
        let api: Api<Event> = Api::namespaced(self.client.clone(), &namespace);
        let now = Instant::now();
        let decided = self.remembered().decide(&key, now);
        if let Send::Repeat { name, count } = decided {
            let series = serde_json::json!({"series": EventSeries {
                count,
                last_observed_time: MicroTime(Timestamp::now()),
            }});
            match api
                .patch(&name, &PatchParams::default(), &Patch::Merge(&series))
                .await
            {
                Ok(_) => return Ok(()),
                Err(kube::Error::Api(e)) if e.code == 404 => {}
                Err(e) => return Err(e),
            }
        }
        let event = self.event(regarding, &key.event);
        let name = event.metadata.name.clone().unwrap_or_default();
        match api.create(&PostParams::default(), &event).await {
            Ok(_) => {
                self.remembered().created(key, name, now);
                Ok(())
            }
            Err(e) => {
                self.remembered().forget(&key);
                Err(e)
            }
        }
    }

    fn remembered(&self) -> std::sync::MutexGuard<'_, Remembered> {
        // Nothing panics while holding the lock; a poisoned one is still
        // a consistent cache.
        self.remembered
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner)
    }

    /// A new Event: named `<object>.<nanoseconds in hex>` as client-go
    /// names them, dated now.
    fn event(&self, regarding: &ObjectReference, said: &JobEvent) -> Event {
        let now = Timestamp::now();
        let object = regarding.name.as_deref().unwrap_or(&self.controller);
        Event {
            metadata: ObjectMeta {
                name: Some(format!("{object}.{:x}", now.as_nanosecond())),
                namespace: regarding.namespace.clone(),
                ..ObjectMeta::default()
            },
            event_time: Some(MicroTime(now)),
            action: Some("Reconcile".to_owned()),
            reason: Some(said.reason.clone()),
            note: Some(said.note.clone()),
            type_: Some(if said.warning { "Warning" } else { "Normal" }.to_owned()),
            regarding: Some(regarding.clone()),
            reporting_controller: Some(self.controller.clone()),
            reporting_instance: Some(self.instance.clone()),
            ..Event::default()
        }
    }
}

pub use crate::contract::cut;

#[cfg(test)]
mod tests {
    use super::*;

    fn key(job: &str, reason: &str, note: &str) -> Key {
        Key {
            namespace: "team".into(),
            name: job.into(),
            uid: format!("{job}-uid"),
            event: JobEvent {
                warning: false,
                reason: reason.into(),
                note: note.into(),
            },
        }
    }

    #[test]
    fn a_repeat_within_the_window_counts_in_the_first_events_series() {
        let mut r = Remembered::new(8);
        let t0 = Instant::now();
        let k = key("mnist", "Running", "all 2 members run");
        assert_eq!(r.decide(&k, t0), Send::Create);
        r.created(k.clone(), "mnist.1".into(), t0);
        // The window is counted from the last occurrence: a repeat every
        // 5 minutes goes on counting past the first Event's 6 minutes.
        for (after, count) in [(1, 2), (60, 3), (359, 4), (659, 5)] {
            assert_eq!(
                r.decide(&k, t0 + Duration::from_secs(after)),
                Send::Repeat {
                    name: "mnist.1".into(),
                    count
                },
                "{after} s after the first"
            );
        }
        let quiet = t0 + Duration::from_secs(659) + SERIES_WINDOW;
        assert_eq!(r.decide(&k, quiet), Send::Create);
        r.created(k.clone(), "mnist.2".into(), quiet);
        assert_eq!(
            r.decide(&k, quiet + Duration::from_secs(1)),
            Send::Repeat {
                name: "mnist.2".into(),
                count: 2
            }
        );
    }

    #[test]
    fn long_notes_are_cut_to_what_the_api_server_takes() {
        assert_eq!(cut("short", NOTE_LIMIT), "short");
        let exact = "a".repeat(NOTE_LIMIT);
        assert_eq!(cut(&exact, NOTE_LIMIT), exact);
        // 1 025 bytes, with a two-byte character across the cut.
        let long = format!("{}é{}", "a".repeat(1020), "b".repeat(3));
        let c = cut(&long, NOTE_LIMIT);
        assert!(c.len() <= NOTE_LIMIT, "{}", c.len());
        assert!(c.ends_with("a…"), "{c}");
        assert_eq!(c.len(), 1020 + "…".len());
    }

    #[test]
    fn another_note_another_object_or_a_new_object_of_the_same_name_is_news() {
        let mut r = Remembered::new(8);
        let t0 = Instant::now();
        let k = key("mnist", "Restarting", "restart 1 of 3");
        r.created(k.clone(), "mnist.1".into(), t0);
        let mut same_name_new_uid = key("mnist", "Restarting", "restart 1 of 3");
        same_name_new_uid.uid = "mnist-uid-2".into();
        let mut warning = k.clone();
        warning.event.warning = true;
        for other in [
            key("mnist", "Restarting", "restart 2 of 3"),
            key("mnist", "Running", "restart 1 of 3"),
            key("cifar", "Restarting", "restart 1 of 3"),
            same_name_new_uid,
            warning,
        ] {
            assert_eq!(r.decide(&other, t0), Send::Create, "{other:?}");
        }
    }

    #[test]
    fn at_most_the_capacity_is_remembered_the_least_recently_sent_forgotten() {
        let mut r = Remembered::new(3);
        let t0 = Instant::now();
        let keys: Vec<Key> = (0..4)
            .map(|i| key(&format!("j{i}"), "Running", ""))
            .collect();
        for (i, k) in keys.iter().take(3).enumerate() {
            r.created(k.clone(), format!("j{i}.1"), t0);
        }
        // j0 repeats: now the most recently used, so j1 goes first.
        assert!(matches!(r.decide(&keys[0], t0), Send::Repeat { .. }));
        r.created(keys[3].clone(), "j3.1".into(), t0);
        assert_eq!(r.0.len(), 3);
        assert_eq!(r.decide(&keys[1], t0), Send::Create);
        for k in [&keys[0], &keys[2], &keys[3]] {
            assert!(matches!(r.decide(k, t0), Send::Repeat { .. }), "{k:?}");
        }
        r.forget(&keys[3]);
        assert_eq!(r.decide(&keys[3], t0), Send::Create);
    }
}
