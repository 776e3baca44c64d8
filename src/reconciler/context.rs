//! What every reconcile shares: the client, the reflector stores, the
//! member index, the metrics, the config and the clock.

use std::sync::Arc;

use k8s_openapi::api::apps::v1::StatefulSet;
use k8s_openapi::api::batch::v1::Job;
use k8s_openapi::api::core::v1::Service;
use k8s_openapi::jiff::Timestamp;
use kube::runtime::reflector::{ObjectRef, Store};
use kube::Client;

use super::events::Recorder;
use super::index::MemberIndex;
use super::listed::Unreadable;
use super::metrics::Metrics;
use super::ownership::{Current, Dropped};
use super::resources::Owned;
use crate::config::Config;
use crate::crd::DLJob;

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
    pub unreadable: Arc<Unreadable>,
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
