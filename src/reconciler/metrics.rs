//! The reconciler's Prometheus metrics.

use std::time::Duration;

use prometheus_client::encoding::EncodeLabelSet;
use prometheus_client::metrics::counter::Counter;
use prometheus_client::metrics::family::Family;
use prometheus_client::metrics::gauge::Gauge;
use prometheus_client::metrics::histogram::{exponential_buckets, Histogram};
use prometheus_client::registry::Registry;

use crate::crd::Phase;

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
}

impl Default for Metrics {
    fn default() -> Self {
        Self {
            jobs: Family::default(),
            reconciles: Counter::default(),
            errors: Family::default(),
            duration: Histogram::new(exponential_buckets(0.001, 2.0, 14)),
            restarts: Counter::default(),
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

    /// Sets `dljob_jobs` from the phases of every DLJob.
    pub(crate) fn set_phases(&self, phases: impl IntoIterator<Item = Phase>) {
        let mut counts = [0i64; 5];
        for p in phases {
            counts[Phase::ALL.iter().position(|q| *q == p).unwrap_or(0)] += 1;
        }
        for (p, n) in Phase::ALL.iter().zip(counts) {
            self.jobs
                .get_or_create(&PhaseLabel { phase: p.as_str() })
                .set(n);
        }
    }
}
