//! Which replica a pod is: its owner (a plain pod, a StatefulSet's, an
//! Indexed Job's) and its index within the role.

use super::keys::Meta;
use super::PodOwner;
use crate::contract as c;
use crate::contract::Topology;
use crate::frameworks::ElasticRole;
use crate::object;
use crate::object::at;
use crate::object::str_at;
use crate::object::Kind;
use crate::violation::Rule;
use crate::violation::Violations;
use serde_json::Value;

/// `dljob.dev/index-offset`: on a StatefulSet or Indexed Job (and the pods
/// they make), never on a plain pod (whose `dljob.dev/index` says it all).
pub(super) fn index_offset(
    kind: Kind,
    object: &Value,
    meta: &Meta<'_>,
    v: &mut Violations,
) -> Option<u32> {
    let s = meta.annotation(c::INDEX_OFFSET)?;
    if kind == Kind::Pod && pod_owner(object) == PodOwner::None {
        v.push(
            Rule::IndexOnWorkload,
            format!(
                "annotation {} is for StatefulSets and Indexed Jobs that are one of several sets of a role; a plain pod gives its own {}: remove it",
                c::INDEX_OFFSET,
                c::INDEX
            ),
        );
        return None;
    }
    match s.trim().parse::<u32>() {
        Ok(n) if n < c::MAX_REPLICAS => Some(n),
        _ => {
            v.push(Rule::InvalidValue, {
                let s = c::quoted(s);
                format!(
                    "{} \"{s}\" is not an index (0 to {})",
                    c::INDEX_OFFSET,
                    c::MAX_REPLICAS - 1
                )
            });
            None
        }
    }
}

pub(super) fn owner_name(owner: PodOwner) -> &'static str {
    match owner {
        PodOwner::StatefulSet => "StatefulSet",
        PodOwner::Job => "Job",
        PodOwner::None => "user",
    }
}

/// Who created the pod, from its controller ownerReference or the labels
/// the controllers set.
pub fn pod_owner(object: &Value) -> PodOwner {
    let owner_kind = at(object, &["metadata", "ownerReferences"])
        .and_then(Value::as_array)
        .and_then(|refs| {
            refs.iter()
                .find(|r| r.get("controller").and_then(Value::as_bool) == Some(true))
                .and_then(|r| r.get("kind")?.as_str())
        });
    let has = |which, key| object::meta_str(object, &[], which, key).is_some();
    match owner_kind {
        Some("StatefulSet") => PodOwner::StatefulSet,
        Some("Job") => PodOwner::Job,
        _ if has("labels", c::K8S_POD_INDEX) => PodOwner::StatefulSet,
        _ if has("annotations", c::K8S_JOB_COMPLETION_INDEX)
            || has("labels", c::K8S_JOB_COMPLETION_INDEX) =>
        {
            PodOwner::Job
        }
        _ => PodOwner::None,
    }
}

/// The name of the set that made a pod: its controller's, else what the
/// controller's labels and naming say (a StatefulSet's pods are
/// `NAME-ORDINAL`, a Job's carry `batch.kubernetes.io/job-name`).
fn set_name(object: &Value, owner: PodOwner) -> Option<String> {
    let controller = at(object, &["metadata", "ownerReferences"])
        .and_then(Value::as_array)
        .and_then(|refs| {
            refs.iter()
                .find(|r| r.get("controller").and_then(Value::as_bool) == Some(true))
                .and_then(|r| r.get("name")?.as_str())
        });
    let guessed = match owner {
        PodOwner::StatefulSet => str_at(object, &["metadata", "name"])
            .and_then(|n| n.rsplit_once('-'))
            .map(|(set, _)| set),
        PodOwner::Job => object::meta_str(object, &[], "labels", "batch.kubernetes.io/job-name"),
        PodOwner::None => None,
    };
    controller.or(guessed).map(str::to_owned)
}

pub(super) fn pod_index(
    object: &Value,
    meta: &Meta<'_>,
    role: Option<&str>,
    topology: Option<&Topology>,
    (index_offset, elastic): (Option<u32>, Option<&ElasticRole>),
    v: &mut Violations,
) -> (Option<u32>, PodOwner) {
    let owner = pod_owner(object);
    // A set's pod takes its index from the set; a dljob.dev/index beside
    // it would be a second, silently ignored, answer (a bare pod given
    // both the annotation and a pod-index label is read as the set's).
    if owner != PodOwner::None {
        if let Some(s) = meta.annotation(c::INDEX) {
            v.push(
                Rule::IndexOnWorkload,
                format!(
                    "annotation {} \"{}\" is for plain pods; this pod's index comes from its {} ({}): remove the annotation",
                    c::INDEX,
                    c::quoted(s),
                    owner_name(owner),
                    match owner {
                        PodOwner::StatefulSet => c::K8S_POD_INDEX,
                        _ => c::K8S_JOB_COMPLETION_INDEX,
                    }
                ),
            );
        }
    }
    let count = match (role, topology) {
        (Some(r), Some(t)) => t.count(r),
        _ => None,
    };
    let parse = |s: &str| s.trim().parse::<u32>().ok();
    let index = match owner {
        PodOwner::StatefulSet => {
            let from_label = meta.label(c::K8S_POD_INDEX);
            let from_name = str_at(object, &["metadata", "name"])
                .and_then(|n| n.rsplit_once('-'))
                .map(|(_, s)| s);
            match from_label.or(from_name).and_then(parse) {
                Some(i) => Some(i),
                None => {
                    v.push(Rule::UnknownIndex, format!(
                        "cannot tell this StatefulSet pod's ordinal: no {} label and no numeric name suffix",
                        c::K8S_POD_INDEX
                    ));
                    None
                }
            }
        }
        PodOwner::Job => {
            let raw = meta
                .annotation(c::K8S_JOB_COMPLETION_INDEX)
                .or_else(|| meta.label(c::K8S_JOB_COMPLETION_INDEX));
            match raw.and_then(parse) {
                Some(i) => Some(i),
                None => {
                    v.push(Rule::UnknownIndex, format!(
                        "cannot tell this Job pod's index: {} is missing or not a number (is the Job Indexed?)",
                        c::K8S_JOB_COMPLETION_INDEX
                    ));
                    None
                }
            }
        }
        PodOwner::None => match meta.annotation(c::INDEX) {
            Some(s) => match parse(s) {
                Some(i) => Some(i),
                None => {
                    v.push(Rule::InvalidIndex, {
                        let s = c::quoted(s);
                        format!("{} \"{s}\" is not a number: use 0 to count-1", c::INDEX)
                    });
                    None
                }
            },
            None => match count {
                Some(1) => Some(0),
                Some(n) => {
                    v.push(Rule::MissingIndex, format!(
                        "annotation {} is missing: role \"{}\" has {n} replicas, so each pod needs its index (0 to {})",
                        c::INDEX,
                        role.unwrap_or_default(),
                        n - 1
                    ));
                    None
                }
                None => None,
            },
        },
    };
    // A set's pods start at its offset.
    let index = match owner {
        PodOwner::None => index,
        _ => index.map(|i| i.saturating_add(index_offset.unwrap_or(0))),
    };
    // An elastic role's pods may have any index its largest size allows.
    if let (Some(i), Some(e)) = (index, elastic) {
        if i >= e.max() {
            let what = match owner {
                PodOwner::None => c::INDEX.to_owned(),
                other => format!("{} pod index", owner_name(other)),
            };
            v.push(
                Rule::IndexOutOfRange,
                format!(
                    "{what} {i} is out of range: {} (indexes 0 to {})",
                    e.said(),
                    e.max() - 1
                ),
            );
        }
        return (index, owner);
    }
    if let (Some(i), Some(n)) = (index, count) {
        if i >= n {
            let r = role.unwrap_or_default();
            let t = topology.map(ToString::to_string).unwrap_or_default();
            v.push(Rule::IndexOutOfRange, match owner {
                PodOwner::None => format!(
                    "{} {i} is out of range: role \"{r}\" has {n} replica{} in {} \"{t}\" (indexes 0 to {})",
                    c::INDEX,
                    if n == 1 { "" } else { "s" },
                    c::REPLICAS,
                    n - 1
                ),
                other => {
                    let set = match set_name(object, other) {
                        Some(name) => format!("{} \"{name}\"", owner_name(other)),
                        None => format!("the {}", owner_name(other)),
                    };
                    // A set that starts at an offset holds the indexes from
                    // there to the role's count: its own size is the rest.
                    let (from, size) = match index_offset.filter(|o| *o > 0) {
                        Some(o) => (
                            format!(" (its ordinal {} + {} {o})", i - o, c::INDEX_OFFSET),
                            format!("{} (the role's indexes {o} to {})", n.saturating_sub(o), n - 1),
                        ),
                        None => (String::new(), n.to_string()),
                    };
                    format!(
                        "{} pod index {i}{from} is out of range: role \"{r}\" has {n} replica{} in {} \"{t}\"; scale {set} back to {size}, or change the topology on every member of the job",
                        owner_name(other),
                        if n == 1 { "" } else { "s" },
                        c::REPLICAS,
                    )
                }
            });
        }
    }
    (index, owner)
}
