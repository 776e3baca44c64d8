//! The labels and annotations of a member, read as one: a workload's own
//! metadata and its pod template's, and which `dljob.dev/*` keys are
//! labels, which annotations.

use crate::contract as c;
use crate::object;
use crate::object::Kind;
use crate::violation::Rule;
use crate::violation::Violations;
use serde_json::Map;
use serde_json::Value;

/// The labels and annotations of a member: the object's own metadata and,
/// for workloads, its pod template's, read as one.
pub(super) struct Meta<'v> {
    pub(super) labels: [Option<&'v Map<String, Value>>; 2],
    pub(super) annotations: [Option<&'v Map<String, Value>>; 2],
}

impl<'v> Meta<'v> {
    pub(super) fn of(kind: Kind, object: &'v Value) -> Self {
        let own = |which| object::string_map(object, &[], which);
        let tpl = |which| match kind {
            Kind::Pod => None,
            _ => object::string_map(object, Kind::StatefulSet.pod_path(), which),
        };
        Self {
            labels: [own("labels"), tpl("labels")],
            annotations: [own("annotations"), tpl("annotations")],
        }
    }

    /// The first value of `key`; one longer than [`c::MAX_VALUE`] is not
    /// read ([`Meta::oversized`] refuses it), so that no message quotes it
    /// and nothing parses it.
    pub(super) fn find(maps: &[Option<&'v Map<String, Value>>; 2], key: &str) -> Option<&'v str> {
        maps.iter()
            .flatten()
            .find_map(|m| m.get(key)?.as_str())
            .filter(|v| v.len() <= c::MAX_VALUE)
    }

    pub(super) fn label(&self, key: &str) -> Option<&'v str> {
        Self::find(&self.labels, key)
    }

    pub(super) fn annotation(&self, key: &str) -> Option<&'v str> {
        Self::find(&self.annotations, key)
    }

    /// Keys whose workload and template values differ.
    pub(super) fn disagreements(&self, v: &mut Violations) {
        for (which, maps) in [("label", &self.labels), ("annotation", &self.annotations)] {
            let (Some(own), Some(tpl)) = (maps[0], maps[1]) else {
                continue;
            };
            for (k, val) in own {
                // Only dljob's own keys: the others are not read.
                if !is_label_key(k) && !is_annotation_key(k) {
                    continue;
                }
                if let Some(t) = tpl.get(k) {
                    if t != val {
                        let show =
                            |x: &Value| c::quoted(x.as_str().unwrap_or_default()).into_owned();
                        v.push(Rule::TemplateDisagrees, format!(
                            "{which} {k} is \"{}\" on the workload but \"{}\" in its pod template; make them equal",
                            show(val),
                            show(t)
                        ));
                    }
                }
            }
        }
    }

    /// dljob's annotations written as labels and its labels written as
    /// annotations: dljob would not read them where they are.
    pub(super) fn misplaced_keys(&self, v: &mut Violations) {
        let mut seen: Vec<&str> = Vec::new();
        for m in self.labels.iter().flatten() {
            for k in m.keys().filter(|k| is_annotation_key(k)) {
                if self.annotation(k).is_none() && !seen.contains(&k.as_str()) {
                    seen.push(k);
                    v.push(Rule::MisplacedKey, format!(
                        "{k} is set as a label, but dljob reads it as an annotation: move it under metadata.annotations"
                    ));
                }
            }
        }
        for m in self.annotations.iter().flatten() {
            for k in m.keys().filter(|k| is_label_key(k)) {
                if self.label(k).is_none() && !seen.contains(&k.as_str()) {
                    seen.push(k);
                    v.push(Rule::MisplacedKey, format!(
                        "{k} is set as an annotation, but dljob reads it as a label: move it under metadata.labels"
                    ));
                }
            }
        }
    }

    /// dljob's annotations longer than [`c::MAX_VALUE`]: none means
    /// anything at that length, and every cache of members would hold it.
    pub(super) fn oversized(&self, v: &mut Violations) {
        let mut seen: Vec<&str> = Vec::new();
        for m in self.annotations.iter().flatten() {
            for (k, value) in m.iter() {
                let len = value.as_str().map_or(0, str::len);
                if is_annotation_key(k) && len > c::MAX_VALUE && !seen.contains(&k.as_str()) {
                    seen.push(k);
                    v.push(
                        Rule::TooLarge,
                        format!(
                            "annotation {k} is {len} bytes; dljob reads values of at most {} bytes and ignores this one",
                            c::MAX_VALUE
                        ),
                    );
                }
            }
        }
    }

    /// Warnings for `dljob.dev/*` keys dljob does not know (typos): one
    /// for each of the first few, then one that counts the rest (an object
    /// may carry thousands).
    pub(super) fn unknown_keys(&self, warnings: &mut Vec<String>) {
        const NAMED: usize = 3;
        let known_annotation = |k: &str| {
            c::JOB_WIDE_ANNOTATIONS.contains(&k)
                || c::MEMBER_ANNOTATIONS.contains(&k)
                || c::OWN_ANNOTATIONS.contains(&k)
        };
        let mut annotations = std::collections::BTreeSet::new();
        for m in self.annotations.iter().flatten() {
            annotations.extend(m.keys().map(String::as_str).filter(|k| {
                k.starts_with("dljob.dev/") && !known_annotation(k) && !is_label_key(k)
            }));
        }
        let mut labels = std::collections::BTreeSet::new();
        for m in self.labels.iter().flatten() {
            labels.extend(m.keys().map(String::as_str).filter(|k| {
                k.starts_with("dljob.dev/")
                    && !is_label_key(k)
                    && !is_annotation_key(k)
                    && !annotations.contains(k)
            }));
        }
        let known = known_annotations();
        for k in annotations.iter().take(NAMED) {
            warnings.push(format!(
                "annotation {} is not a dljob annotation and is ignored; known ones are {known}",
                c::quoted(k)
            ));
        }
        for k in labels.iter().take(NAMED) {
            warnings.push(format!(
                "label {} is not a dljob label and is ignored; dljob labels are {} and {}",
                c::quoted(k),
                c::JOB,
                c::ROLE
            ));
        }
        let more = annotations.len().saturating_sub(NAMED) + labels.len().saturating_sub(NAMED);
        if more > 0 {
            warnings.push(format!(
                "{more} more dljob.dev/ keys are not dljob's and are ignored"
            ));
        }
    }
}

/// `dljob.dev/job` and `dljob.dev/role`.
pub(super) fn is_label_key(k: &str) -> bool {
    k == c::JOB || k == c::ROLE
}

/// The annotations a user writes.
pub(super) fn is_annotation_key(k: &str) -> bool {
    c::JOB_WIDE_ANNOTATIONS.contains(&k) || c::MEMBER_ANNOTATIONS.contains(&k)
}

pub(super) fn known_annotations() -> String {
    c::JOB_WIDE_ANNOTATIONS
        .iter()
        .chain(c::MEMBER_ANNOTATIONS)
        .copied()
        .collect::<Vec<_>>()
        .join(", ")
}
