//! The reconciler's Prometheus metrics.

use std::collections::HashMap;
use std::sync::Mutex;
use std::time::Duration;

use kube::runtime::watcher;
use kube::ResourceExt;

use prometheus_client::encoding::EncodeLabelSet;
use prometheus_client::metrics::counter::Counter;
use prometheus_client::metrics::family::Family;
use prometheus_client::metrics::gauge::Gauge;
use prometheus_client::metrics::histogram::{exponential_buckets, Histogram};
use prometheus_client::registry::Registry;

use crate::crd::{DLJob, Phase};

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
pub struct PhaseLabel {
    pub phase: &'static str,
}

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
pub struct ErrorLabel {
    pub error: &'static str,
}

/// `dljob_jobs{phase}`, `dljob_reconciles_total`,
/// `dljob_reconcile_errors_total{error}`, `dljob_reconcile_duration_seconds`,
/// `dljob_restarts_total`.
#[derive(Debug)]
pub struct Metrics {
    pub jobs: Family<PhaseLabel, Gauge>,
    pub reconciles: Counter,
    pub errors: Family<ErrorLabel, Counter>,
    pub duration: Histogram,
    pub restarts: Counter,
    /// Each DLJob's phase as the watch last saw it (and the relist under
    /// way), from which `jobs` is kept: a watch event changes one count,
    /// so no reconcile walks every DLJob.
    phases: Mutex<Phases>,
}

#[derive(Debug, Default)]
struct Phases {
    of: HashMap<String, Phase>,
    relisted: Option<HashMap<String, Phase>>,
    /// DLJobs per phase, in [`Phase::ALL`]'s order.
    counts: [i64; 5],
}

impl Default for Metrics {
    fn default() -> Self {
        Self {
            jobs: Family::default(),
            reconciles: Counter::default(),
            errors: Family::default(),
            duration: Histogram::new(exponential_buckets(0.001, 2.0, 14)),
            restarts: Counter::default(),
            phases: Mutex::default(),
        }
    }
}

impl Metrics {
    /// New metrics, registered in `registry`.
    pub fn register(registry: &mut Registry) -> Self {
        let m = Self::default();
        registry.register("dljob_jobs", "DLJobs by phase", m.jobs.clone());
        registry.register(
            "dljob_reconciles",
            "Reconciles of a DLJob",
            m.reconciles.clone(),
        );
        registry.register(
            "dljob_reconcile_errors",
            "Reconciles that failed, by error",
            m.errors.clone(),
        );
        registry.register(
            "dljob_reconcile_duration_seconds",
            "How long one reconcile took",
            m.duration.clone(),
        );
        registry.register(
            "dljob_restarts",
            "Retryable failures the reconciler restarted",
            m.restarts.clone(),
        );
        m
    }

    pub(crate) fn reconciled(&self, took: Duration) {
        self.reconciles.inc();
        self.duration.observe(took.as_secs_f64());
    }

    pub(crate) fn failed(&self, error: &'static str) {
        self.errors.get_or_create(&ErrorLabel { error }).inc();
    }

    /// Follows one event of the DLJob watch into `dljob_jobs`: constant
    /// work per event, and one pass over the DLJobs when a relist ends.
    pub(crate) fn observe_dljob(&self, event: &watcher::Event<DLJob>) {
        let key = |j: &DLJob| format!("{}/{}", j.namespace().unwrap_or_default(), j.name_any());
        let phase = |j: &DLJob| j.status.as_ref().map(|s| s.phase).unwrap_or_default();
        let mut guard = self.phases.lock().unwrap_or_else(|e| e.into_inner());
        let p = &mut *guard;
        match event {
            watcher::Event::Apply(j) => {
                let now = phase(j);
                if let Some(was) = p.of.insert(key(j), now) {
                    p.counts[slot(was)] -= 1;
                }
                p.counts[slot(now)] += 1;
            }
            watcher::Event::Delete(j) => {
                if let Some(was) = p.of.remove(&key(j)) {
                    p.counts[slot(was)] -= 1;
                }
            }
            watcher::Event::Init => p.relisted = Some(HashMap::new()),
            watcher::Event::InitApply(j) => {
                p.relisted
                    .get_or_insert_with(HashMap::new)
                    .insert(key(j), phase(j));
            }
            watcher::Event::InitDone => {
                if let Some(all) = p.relisted.take() {
                    p.of = all;
                }
                p.counts = [0; 5];
                for phase in p.of.values() {
                    p.counts[slot(*phase)] += 1;
                }
            }
        }
        for (q, n) in Phase::ALL.iter().zip(p.counts) {
            self.jobs
                .get_or_create(&PhaseLabel { phase: q.as_str() })
                .set(n);
        }
    }
}

/// A phase's place in [`Phase::ALL`].
fn slot(phase: Phase) -> usize {
    Phase::ALL.iter().position(|q| *q == phase).unwrap_or(0)
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn job(name: &str, phase: Option<&str>) -> DLJob {
        let mut j = json!({"apiVersion": "dljob.dev/v1alpha1", "kind": "DLJob",
            "metadata": {"name": name, "namespace": "ml"},
            "spec": {"framework": "pytorch", "port": 23456, "replicas": "master=1",
                "backoffLimit": 3, "cleanPodPolicy": "Running", "restartPolicy": "ExitCode"}});
        if let Some(p) = phase {
            j["status"] = json!({"phase": p});
        }
        serde_json::from_value(j).unwrap()
    }

    fn counts(m: &Metrics) -> Vec<(&'static str, i64)> {
        Phase::ALL
            .iter()
            .map(|p| {
                (
                    p.as_str(),
                    m.jobs
                        .get_or_create(&PhaseLabel { phase: p.as_str() })
                        .get(),
                )
            })
            .filter(|(_, n)| *n != 0)
            .collect()
    }

    /// `dljob_jobs` follows the watch: a relist sets it, an applied job
    /// moves one count, a deleted one leaves, a relist replaces what a
    /// missed deletion left.
    #[test]
    fn the_phase_gauge_follows_the_watch() {
        let m = Metrics::default();
        m.observe_dljob(&watcher::Event::Init);
        m.observe_dljob(&watcher::Event::InitApply(job("a", Some("Running"))));
        m.observe_dljob(&watcher::Event::InitApply(job("b", None)));
        assert_eq!(counts(&m), vec![], "nothing until the relist is done");
        m.observe_dljob(&watcher::Event::InitDone);
        let pending = Phase::default().as_str();
        let mut want = vec![(pending, 1), ("Running", 1)];
        want.sort_by_key(|(p, _)| Phase::ALL.iter().position(|q| q.as_str() == *p));
        assert_eq!(counts(&m), want);
        m.observe_dljob(&watcher::Event::Apply(job("a", Some("Succeeded"))));
        m.observe_dljob(&watcher::Event::Apply(job("a", Some("Succeeded"))));
        m.observe_dljob(&watcher::Event::Delete(job("b", None)));
        assert_eq!(counts(&m), vec![("Succeeded", 1)]);
        // A relist without "a" (its deletion missed): gone.
        m.observe_dljob(&watcher::Event::Init);
        m.observe_dljob(&watcher::Event::InitApply(job("c", Some("Failed"))));
        m.observe_dljob(&watcher::Event::InitDone);
        assert_eq!(counts(&m), vec![("Failed", 1)]);
    }
}
