//! The webhook's Prometheus metrics (prometheus-client), registered in the
//! registry `/metrics` serves — shared with the reconciler.

use std::time::Duration;

use prometheus_client::encoding::EncodeLabelSet;
use prometheus_client::metrics::counter::Counter;
use prometheus_client::metrics::family::Family;
use prometheus_client::metrics::gauge::Gauge;
use prometheus_client::metrics::histogram::{exponential_buckets, Histogram};
use prometheus_client::registry::Registry;

use super::admission::{Endpoint, Summary};

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
struct ReviewLabels {
    endpoint: &'static str,
    kind: String,
    operation: String,
    allowed: &'static str,
}

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
struct DenialLabels {
    endpoint: &'static str,
    rule: &'static str,
}

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
struct EndpointLabels {
    endpoint: &'static str,
}

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
struct RejectedLabels {
    endpoint: &'static str,
    reason: &'static str,
}

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
struct ReloadLabels {
    outcome: &'static str,
}

/// Why a request got no AdmissionReview response.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Rejection {
    BadRequest,
    TooLarge,
    Timeout,
    ReadError,
    Busy,
    /// A review panicked: answered 500.
    Panic,
}

impl Rejection {
    fn as_str(self) -> &'static str {
        match self {
            Self::BadRequest => "bad_request",
            Self::TooLarge => "too_large",
            Self::Timeout => "timeout",
            Self::ReadError => "read_error",
            Self::Busy => "busy",
            Self::Panic => "panic",
        }
    }
}

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
struct ClosedLabels {
    reason: &'static str,
}

/// Why the server closed a client connection (see [`super::conn`]).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum Closed {
    /// Accepted past `--max-connections` while every connection was busy.
    Limit,
    /// No request within `--first-request-timeout-secs` of accept.
    FirstRequest,
    /// No request within `--idle-timeout-secs` of the last answer.
    Idle,
    /// Made room for a new connection, or for a newer request's share of
    /// a budget, having waited longest on its client.
    Evicted,
    /// Its writes made no progress within the read timeout (a client
    /// that does not read).
    WriteStalled,
    /// An answer not taken whole within the read timeout (a client that
    /// does not read, or opens no HTTP/2 window).
    AnswerUnread,
    /// An HTTP/2 header block not finished within the read timeout, or
    /// past the budget of unfinished header blocks.
    HeaderBlock,
}

impl Closed {
    pub(crate) fn as_str(self) -> &'static str {
        match self {
            Self::Limit => "limit",
            Self::FirstRequest => "first_request_timeout",
            Self::Idle => "idle_timeout",
            Self::Evicted => "evicted",
            Self::WriteStalled => "write_stalled",
            Self::AnswerUnread => "answer_unread",
            Self::HeaderBlock => "header_block",
        }
    }

    /// The I/O error a closed connection's reads and writes fail with.
    pub(crate) fn describe(self) -> &'static str {
        match self {
            Self::Limit => "connection limit reached",
            Self::FirstRequest => "no request within the first-request timeout",
            Self::Idle => "idle past the idle timeout",
            Self::Evicted => "evicted: waited longest on its client when room was needed",
            Self::WriteStalled => "the client took no bytes within the read timeout",
            Self::AnswerUnread => "an answer was not taken within the read timeout",
            Self::HeaderBlock => "an HTTP/2 header block was not finished in time or in budget",
        }
    }
}

type HistogramFamily = Family<EndpointLabels, Histogram, fn() -> Histogram>;

/// Handles to the webhook's metrics.
#[derive(Clone)]
pub struct Metrics {
    reviews: Family<ReviewLabels, Counter>,
    denials: Family<DenialLabels, Counter>,
    latency: HistogramFamily,
    rejected: Family<RejectedLabels, Counter>,
    tls_reloads: Family<ReloadLabels, Counter>,
    connections: Gauge,
    closed: Family<ClosedLabels, Counter>,
}

fn latency_histogram() -> Histogram {
    // 0.5 ms … ~8 s
    Histogram::new(exponential_buckets(0.0005, 2.0, 15))
}

/// The kinds the webhook configurations send, and those dljob handles.
const KINDS: &[&str] = &["Pod", "StatefulSet", "Job", ""];
/// The operations of admission.k8s.io/v1.
const OPERATIONS: &[&str] = &["CREATE", "UPDATE", "DELETE", "CONNECT", ""];

/// `value` when it is one of `known`, else `other`.
fn known<'a>(value: &'a str, known: &[&str]) -> &'a str {
    if known.contains(&value) {
        value
    } else {
        "other"
    }
}

impl Metrics {
    /// Creates the metrics and registers them in `registry`.
    pub fn register(registry: &mut Registry) -> Self {
        let m = Self {
            reviews: Family::default(),
            denials: Family::default(),
            latency: Family::new_with_constructor(latency_histogram as fn() -> Histogram),
            rejected: Family::default(),
            tls_reloads: Family::default(),
            connections: Gauge::default(),
            closed: Family::default(),
        };
        registry.register(
            "dljob_webhook_reviews",
            "AdmissionReviews answered, by endpoint, kind, operation and decision",
            m.reviews.clone(),
        );
        registry.register(
            "dljob_webhook_denials",
            "Reviews denied, by endpoint and the rule the first problem broke (violation::Rule)",
            m.denials.clone(),
        );
        registry.register(
            "dljob_webhook_review_duration_seconds",
            "Time from request to AdmissionReview response",
            m.latency.clone(),
        );
        registry.register(
            "dljob_webhook_rejected_requests",
            "Requests answered without an AdmissionReview (malformed, too large, too slow)",
            m.rejected.clone(),
        );
        registry.register(
            "dljob_webhook_tls_reloads",
            "Certificate reloads, by outcome",
            m.tls_reloads.clone(),
        );
        registry.register(
            "dljob_webhook_connections",
            "Client connections open",
            m.connections.clone(),
        );
        registry.register(
            "dljob_webhook_connections_closed",
            "Client connections the server closed, by reason: limit (over --max-connections, every connection busy), first_request_timeout, idle_timeout, evicted (waited longest on its client when room was needed), write_stalled, answer_unread, header_block",
            m.closed.clone(),
        );
        m
    }

    pub(crate) fn connection_opened(&self) {
        self.connections.inc();
    }

    pub(crate) fn connection_dropped(&self) {
        self.connections.dec();
    }

    pub(crate) fn connection_closed(&self, why: Closed) {
        self.closed
            .get_or_create(&ClosedLabels {
                reason: why.as_str(),
            })
            .inc();
    }

    /// Counts one answered review. Its kind and operation are labels only
    /// when they are ones the API server sends (else `other`): a client
    /// that sends reviews itself must not grow the family without bound.
    pub fn observe_review(&self, endpoint: Endpoint, s: &Summary, latency: Duration) {
        self.reviews
            .get_or_create(&ReviewLabels {
                endpoint: endpoint.as_str(),
                kind: known(&s.kind, KINDS).to_owned(),
                operation: known(&s.operation, OPERATIONS).to_owned(),
                allowed: if s.allowed { "true" } else { "false" },
            })
            .inc();
        if let (false, Some(rule)) = (s.allowed, s.rule) {
            self.denials
                .get_or_create(&DenialLabels {
                    endpoint: endpoint.as_str(),
                    rule,
                })
                .inc();
        }
        self.observe_latency(endpoint, latency);
    }

    pub fn observe_rejection(&self, endpoint: Endpoint, why: Rejection, latency: Duration) {
        self.rejected
            .get_or_create(&RejectedLabels {
                endpoint: endpoint.as_str(),
                reason: why.as_str(),
            })
            .inc();
        self.observe_latency(endpoint, latency);
    }

    fn observe_latency(&self, endpoint: Endpoint, latency: Duration) {
        self.latency
            .get_or_create(&EndpointLabels {
                endpoint: endpoint.as_str(),
            })
            .observe(latency.as_secs_f64());
    }

    pub fn tls_reload(&self, ok: bool) {
        self.tls_reloads
            .get_or_create(&ReloadLabels {
                outcome: if ok { "success" } else { "failure" },
            })
            .inc();
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A review's kind and operation are labels only when the API server
    /// could send them: 150 reviews of distinct made-up kinds are one
    /// series, `other`, not 150.
    #[test]
    fn review_labels_are_bounded_to_known_kinds_and_operations() {
        let mut registry = Registry::default();
        let metrics = Metrics::register(&mut registry);
        for i in 0..150 {
            let s = Summary {
                kind: format!("Kind{i}"),
                operation: format!("OP{i}"),
                allowed: true,
                ..Summary::default()
            };
            metrics.observe_review(Endpoint::Mutate, &s, Duration::from_millis(1));
        }
        let pod = Summary {
            kind: "Pod".into(),
            operation: "CREATE".into(),
            allowed: true,
            ..Summary::default()
        };
        metrics.observe_review(Endpoint::Mutate, &pod, Duration::from_millis(1));
        let mut text = String::new();
        prometheus_client::encoding::text::encode(&mut text, &registry).unwrap();
        let series: Vec<&str> = text
            .lines()
            .filter(|l| l.starts_with("dljob_webhook_reviews_total{"))
            .collect();
        assert_eq!(series.len(), 2, "{series:#?}");
        assert!(
            series.iter().any(|l| l.contains("kind=\"other\"")
                && l.contains("operation=\"other\"")
                && l.ends_with(" 150")),
            "{series:#?}"
        );
        assert!(
            series
                .iter()
                .any(|l| l.contains("kind=\"Pod\"") && l.contains("operation=\"CREATE\"")),
            "{series:#?}"
        );
    }
}
