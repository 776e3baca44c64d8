//! Multi-document YAML manifests for the offline commands: the same code
//! path as the webhook, applied to each document of a file.

use serde_json::Value;

use crate::config::Config;
use crate::mutate::{self, Operation};
use crate::object::Kind;
use crate::object::Subject;
use crate::violation::Violations;
use crate::{preview, validate};

/// One document of a manifest file: its text as written and, when it is
/// not empty, its parsed value.
#[derive(Debug)]
pub struct Document {
    pub text: String,
    pub value: Option<Value>,
}

/// Why a manifest could not be read.
#[derive(Debug, thiserror::Error)]
#[error("document {index}: {message}")]
pub struct ManifestError {
    /// 1-based position in the file.
    pub index: usize,
    pub message: String,
}

/// Splits `text` at YAML document markers (`---` at the start of a line)
/// and parses each document with serde-saphyr. The text of each document
/// is kept so that documents dljob does not touch are printed unchanged.
pub fn parse(text: &str) -> Result<Vec<Document>, ManifestError> {
    let mut docs = Vec::new();
    let mut current = String::new();
    let mut push = |current: &mut String| -> Result<(), ManifestError> {
        let chunk = std::mem::take(current);
        let index = docs.len() + 1;
        let value: Option<Value> = if chunk.lines().all(|l| {
            let l = l.trim();
            l.is_empty() || l.starts_with('#')
        }) {
            None
        } else {
            serde_saphyr::from_str(&chunk).map_err(|e| ManifestError {
                index,
                message: e.to_string(),
            })?
        };
        docs.push(Document { text: chunk, value });
        Ok(())
    };
    for line in text.split_inclusive('\n') {
        let is_marker =
            line == "---\n" || line == "---" || line.starts_with("--- ") || line == "---\r\n";
        if is_marker {
            push(&mut current)?;
            // Content after the marker on the same line belongs to the new document.
            if let Some(rest) = line.strip_prefix("--- ") {
                current.push_str(rest);
            }
        } else if line.trim_end() == "..." {
            continue;
        } else {
            current.push_str(line);
        }
    }
    push(&mut current)?;
    // Drop empty documents (e.g. before a leading `---`) but keep comments
    // that carry text.
    docs.retain(|d| d.value.is_some() || !d.text.trim().is_empty());
    Ok(docs)
}

/// Result of mutating a manifest.
#[derive(Debug, Default)]
pub struct MutatedManifest {
    /// The output YAML (multi-document).
    pub yaml: String,
    /// Warnings, prefixed with the document's kind/name.
    pub warnings: Vec<String>,
}

/// A document's display name: `Kind/name`.
pub fn describe(value: &Value) -> String {
    let kind = value
        .get("kind")
        .and_then(Value::as_str)
        .unwrap_or("object");
    let meta = value.get("metadata");
    let name = meta
        .and_then(|m| m.get("name"))
        .and_then(Value::as_str)
        .filter(|s| !s.is_empty())
        .or_else(|| {
            meta.and_then(|m| m.get("generateName"))
                .and_then(Value::as_str)
        })
        .unwrap_or("(unnamed)");
    format!("{kind}/{name}")
}

/// Whether `value` is a `kind: List` (what `kubectl get -o yaml` prints).
pub(crate) fn is_list(value: &Value) -> bool {
    value.get("kind").and_then(Value::as_str) == Some("List")
        && value.get("items").is_some_and(Value::is_array)
}

/// The objects of a document: the document itself, or a List's items.
pub(crate) fn objects(value: &Value) -> Vec<&Value> {
    if is_list(value) {
        value["items"]
            .as_array()
            .map(|a| a.iter().collect())
            .unwrap_or_default()
    } else {
        vec![value]
    }
}

/// The jobs of other operators (a PyTorchJob, an MPIJob, …) among the
/// documents, Lists' items included: each one's name and what to run
/// instead.
pub(crate) fn operator_jobs(docs: &[Document]) -> Vec<(String, String)> {
    docs.iter()
        .filter_map(|d| d.value.as_ref())
        .flat_map(objects)
        .filter_map(|v| crate::operators::recognise(v).map(|s| (describe(v), s.advice())))
        .collect()
}

/// What only a manifest can get wrong, for an object of a kind dljob
/// handles: label and annotation values that are not strings (YAML reads
/// `y`, `true`, `1` unquoted as boolean or number; Kubernetes refuses them),
/// and `dljob.dev/*` keys on an object without a `dljob.dev/job` label (the
/// webhooks never see it, so nothing would be wired — a typo'd job label).
pub(crate) fn manifest_problems(value: &Value) -> Vec<String> {
    let mut problems = Vec::new();
    let mut dljob_keys: Vec<&str> = Vec::new();
    let metas = [
        value.get("metadata"),
        value.pointer("/spec/template/metadata"),
    ];
    for meta in metas.into_iter().flatten() {
        for which in ["labels", "annotations"] {
            let Some(map) = meta.get(which).and_then(Value::as_object) else {
                continue;
            };
            for (k, v) in map {
                if k.starts_with("dljob.dev/") && !dljob_keys.contains(&k.as_str()) {
                    dljob_keys.push(k);
                }
                if !v.is_string() {
                    let what = &which[..which.len() - 1];
                    problems.push(format!(
                        "{what} {k} is {v}, not a string (YAML reads unquoted y, yes, true, 1 as booleans or numbers); Kubernetes refuses it: quote the value"
                    ));
                }
            }
        }
    }
    let has_job_label = value
        .pointer("/metadata/labels")
        .and_then(|l| l.get(crate::contract::JOB))
        .is_some();
    if !has_job_label && !dljob_keys.is_empty() {
        problems.push(format!(
            "it has {} but no {} label, so the webhooks never see it and dljob wires nothing: add the label (check its spelling)",
            dljob_keys.join(", "),
            crate::contract::JOB
        ));
    }
    problems
}

/// Mutates one object; `Ok(None)` when it is not a member.
fn mutate_one(
    value: &Value,
    namespace: Option<&str>,
    config: &Config,
    warnings: &mut Vec<String>,
) -> Result<Option<Value>, (String, Violations)> {
    let Some(kind) = Kind::of(value) else {
        return Ok(None);
    };
    let name = describe(value);
    warnings.extend(
        manifest_problems(value)
            .into_iter()
            .map(|p| format!("{name}: {p}")),
    );
    let mutated = mutate::mutate(
        Subject::new(kind, value, namespace),
        Operation::Create,
        config,
    )
    .map_err(|v| (describe(value), v))?;
    Ok(mutated.map(|m| {
        let name = describe(&m.object);
        warnings.extend(m.warnings.into_iter().map(|w| format!("{name}: {w}")));
        m.object
    }))
}

/// Mutates every member document (and the members inside `kind: List`
/// documents); others pass through as written. Stops at the first object
/// that is refused, naming it.
pub fn mutate(
    docs: &[Document],
    namespace: Option<&str>,
    config: &Config,
) -> Result<MutatedManifest, (String, Violations)> {
    let mut out = MutatedManifest::default();
    for (i, doc) in docs.iter().enumerate() {
        if i > 0 {
            out.yaml.push_str("---\n");
        }
        let mutated = match &doc.value {
            Some(value) if is_list(value) => {
                let mut list = value.clone();
                let items = list["items"].as_array_mut().expect("checked by is_list");
                for item in items.iter_mut() {
                    if let Some(m) = mutate_one(item, namespace, config, &mut out.warnings)? {
                        *item = m;
                    }
                }
                Some(list)
            }
            Some(value) => mutate_one(value, namespace, config, &mut out.warnings)?,
            None => None,
        };
        match mutated {
            Some(m) if Some(&m) != doc.value.as_ref() => {
                let yaml = serde_saphyr::to_string(&m).expect("a JSON value serialises to YAML");
                out.yaml.push_str(&yaml);
            }
            _ => {
                out.yaml.push_str(&doc.text);
                if !doc.text.ends_with('\n') && !doc.text.is_empty() {
                    out.yaml.push('\n');
                }
            }
        }
    }
    Ok(out)
}

/// The pods every member creates, as admission leaves them: plain Pods
/// mutated, and for each StatefulSet or Indexed Job the pods its controller
/// creates from the mutated template (every ordinal or completion index),
/// each mutated as a pod. Documents that are not members are left out.
pub(crate) fn pods(
    docs: &[Document],
    namespace: Option<&str>,
    config: &Config,
) -> Result<MutatedManifest, (String, Violations)> {
    let mut out = MutatedManifest::default();
    let ns = namespace.unwrap_or("default");
    let members = docs
        .iter()
        .filter_map(|d| d.value.as_ref())
        .flat_map(objects);
    for value in members {
        let Some(kind) = Kind::of(value) else {
            continue;
        };
        let Some(member) = mutate_one(value, namespace, config, &mut out.warnings)? else {
            continue;
        };
        for pod in preview::pods_of(kind, &member, ns) {
            let pod = match kind {
                Kind::Pod => pod,
                _ => mutate_one(&pod, namespace, config, &mut out.warnings)?.unwrap_or(pod),
            };
            if !out.yaml.is_empty() {
                out.yaml.push_str("---\n");
            }
            let yaml = serde_saphyr::to_string(&pod).expect("a JSON value serialises to YAML");
            out.yaml.push_str(&yaml);
        }
    }
    Ok(out)
}

/// Validates every member document, each against the others as peers.
/// Returns (document name, problem) pairs and warnings.
pub fn validate(
    docs: &[Document],
    namespace: Option<&str>,
    config: &Config,
) -> (Vec<(String, String)>, Vec<String>) {
    let members: Vec<(Kind, &Value)> = docs
        .iter()
        .filter_map(|d| d.value.as_ref())
        .flat_map(objects)
        .filter_map(|v| Kind::of(v).map(|k| (k, v)))
        .collect();
    // Each member parsed once, in document order: an object with no name
    // (generateName) cannot be told from itself by name, so its peers are
    // the others by position.
    let parsed: Vec<Vec<_>> = members
        .iter()
        .map(|m| validate::peers_of([*m], namespace, config))
        .collect();
    let peers: Vec<_> = parsed.iter().flatten().cloned().collect();
    let mut problems = operator_jobs(docs);
    let mut warnings = Vec::new();
    for (i, (kind, value)) in members.iter().enumerate() {
        let name = describe(value);
        problems.extend(
            manifest_problems(value)
                .into_iter()
                .map(|p| (name.clone(), p)),
        );
        let unnamed = crate::object::str_at(value, &["metadata", "name"]).is_none_or(str::is_empty);
        let others: Vec<_>;
        let peers = if unnamed {
            others = parsed
                .iter()
                .enumerate()
                .filter(|(j, _)| *j != i)
                .flat_map(|(_, p)| p.iter().cloned())
                .collect();
            &others
        } else {
            &peers
        };
        match validate::validate(Subject::new(*kind, value, namespace), config, peers) {
            Ok(w) => warnings.extend(w.into_iter().map(|w| format!("{name}: {w}"))),
            Err(v) => problems.extend(v.0.into_iter().map(|p| (name.clone(), p.message))),
        }
    }
    (problems, warnings)
}
