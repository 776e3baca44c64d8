//! The Grafana dashboard (`deploy/grafana/dljob.json`) queries only series
//! `dljob serve` exports, with label names those series carry: the metrics
//! are registered and observed as the server does, encoded as `/metrics`
//! serves them, and every PromQL selector and `by (…)` label of the
//! dashboard is checked against that exposition.

use std::collections::{BTreeMap, BTreeSet};
use std::time::Duration;

use dljob::reconciler::metrics::{ErrorLabel, Metrics as ReconcilerMetrics, PhaseLabel};
use dljob::webhook::admission::{Endpoint, Summary};
use dljob::webhook::metrics::{Metrics as WebhookMetrics, Rejection};
use prometheus_client::registry::Registry;
use serde_json::Value;

/// Sample name → label names, from an OpenMetrics text.
fn exposition() -> BTreeMap<String, BTreeSet<String>> {
    let mut registry = Registry::default();
    let webhook = WebhookMetrics::register(&mut registry);
    let reconciler = ReconcilerMetrics::register(&mut registry);
    let summary = |allowed: bool| Summary {
        uid: "u".into(),
        kind: "Pod".into(),
        namespace: "ml".into(),
        name: "p".into(),
        operation: "CREATE".into(),
        dry_run: false,
        allowed,
        patch_ops: 1,
        warnings: 0,
        message: None,
        rule: (!allowed).then_some("SizeMismatch"),
    };
    webhook.observe_review(Endpoint::Mutate, &summary(true), Duration::from_millis(1));
    webhook.observe_review(
        Endpoint::Validate,
        &summary(false),
        Duration::from_millis(1),
    );
    webhook.observe_rejection(
        Endpoint::Mutate,
        Rejection::TooLarge,
        Duration::from_millis(1),
    );
    webhook.tls_reload(true);
    reconciler
        .jobs
        .get_or_create(&PhaseLabel { phase: "Running" })
        .set(1);
    reconciler.reconciles.inc();
    reconciler
        .errors
        .get_or_create(&ErrorLabel { error: "api" })
        .inc();
    reconciler.duration.observe(0.01);
    reconciler.restarts.inc();

    let mut text = String::new();
    prometheus_client::encoding::text::encode(&mut text, &registry).unwrap();
    let mut series: BTreeMap<String, BTreeSet<String>> = BTreeMap::new();
    for line in text
        .lines()
        .filter(|l| !l.starts_with('#') && !l.is_empty())
    {
        let (name, rest) = line.split_at(line.find(['{', ' ']).unwrap());
        let labels = series.entry(name.to_owned()).or_default();
        if let Some(inner) = rest.strip_prefix('{').and_then(|r| r.split_once('}')) {
            for pair in inner.0.split(',') {
                labels.insert(pair.split_once('=').unwrap().0.to_owned());
            }
        }
    }
    series
}

fn dashboard() -> Value {
    let path = concat!(env!("CARGO_MANIFEST_DIR"), "/deploy/grafana/dljob.json");
    serde_json::from_str(&std::fs::read_to_string(path).unwrap()).unwrap()
}

/// Every `expr` of every panel, with its panel's title.
fn queries(dashboard: &Value) -> Vec<(String, String)> {
    let mut out = Vec::new();
    for panel in dashboard["panels"].as_array().unwrap() {
        let title = panel["title"].as_str().unwrap().to_owned();
        for target in panel["targets"].as_array().unwrap() {
            out.push((title.clone(), target["expr"].as_str().unwrap().to_owned()));
        }
    }
    out
}

/// `(metric, [label names in its {…} matchers])` of each selector in `expr`,
/// and the label names of its `by (…)` clauses.
fn selectors(expr: &str) -> (Vec<(String, Vec<String>)>, Vec<String>) {
    let mut metrics = Vec::new();
    let mut rest = expr;
    while let Some(at) = rest.find("dljob_") {
        let tail = &rest[at..];
        let end = tail
            .find(|c: char| !(c.is_ascii_alphanumeric() || c == '_'))
            .unwrap_or(tail.len());
        let name = tail[..end].to_owned();
        let mut labels = Vec::new();
        if let Some(inner) = tail[end..].strip_prefix('{') {
            let inner = &inner[..inner.find('}').unwrap()];
            for matcher in inner.split(',') {
                let label = matcher.split(['=', '!']).next().unwrap().trim();
                labels.push(label.to_owned());
            }
        }
        metrics.push((name, labels));
        rest = &tail[end..];
    }
    let mut by = Vec::new();
    let mut rest = expr;
    while let Some(at) = rest.find("by (") {
        let inner = &rest[at + 4..];
        let close = inner.find(')').unwrap();
        by.extend(inner[..close].split(',').map(|l| l.trim().to_owned()));
        rest = &inner[close..];
    }
    (metrics, by)
}

#[test]
fn every_dashboard_query_names_exported_series_and_labels() {
    let series = exposition();
    let queries = queries(&dashboard());
    assert!(queries.len() >= 9, "{queries:?}");
    for (title, expr) in &queries {
        let (metrics, by) = selectors(expr);
        assert!(!metrics.is_empty(), "{title}: no dljob metric in {expr}");
        let mut known: BTreeSet<String> = BTreeSet::new();
        for (name, labels) in &metrics {
            let have = series.get(name).unwrap_or_else(|| {
                panic!(
                    "{title}: {name} is not exported; exported: {:?}",
                    series.keys()
                )
            });
            for label in labels {
                assert!(
                    have.contains(label),
                    "{title}: {name} has no label {label} (has {have:?})"
                );
            }
            known.extend(have.iter().cloned());
        }
        for label in &by {
            assert!(
                known.contains(label),
                "{title}: `by ({label})` but {metrics:?} carry only {known:?}"
            );
        }
    }
}

#[test]
fn the_dashboard_covers_what_operators_watch() {
    let titles: Vec<String> = queries(&dashboard()).into_iter().map(|(t, _)| t).collect();
    for wanted in [
        "Reviews per second by endpoint and outcome",
        "Review latency (p50, p99)",
        "Denials per second by kind and operation",
        "Jobs by phase",
        "Restarts per hour",
        "Reconciles and reconcile errors per second",
    ] {
        assert!(
            titles.iter().any(|t| t == wanted),
            "no panel {wanted:?} in {titles:?}"
        );
    }
}

#[test]
fn the_checker_catches_a_misspelt_metric_or_label() {
    let series = exposition();
    let (metrics, _) = selectors(r#"sum(rate(dljob_webhook_review_total{allowed="false"}[5m]))"#);
    assert!(
        !series.contains_key(&metrics[0].0),
        "a misspelt name is not exported"
    );
    let (metrics, by) =
        selectors(r#"sum by (verdict) (rate(dljob_webhook_reviews_total{result="no"}[5m]))"#);
    assert_eq!(
        metrics,
        vec![(
            "dljob_webhook_reviews_total".to_owned(),
            vec!["result".to_owned()]
        )]
    );
    assert_eq!(by, vec!["verdict".to_owned()]);
    let have = &series["dljob_webhook_reviews_total"];
    assert!(
        !have.contains("result") && !have.contains("verdict"),
        "{have:?}"
    );
}
