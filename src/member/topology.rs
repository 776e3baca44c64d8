//! The job's topology as a member declares it (or as a one-role
//! workload's size infers it), checked against the framework's roles, the
//! member's role and size, and the hostnames it makes.

use super::index::owner_name;
use super::index::pod_owner;
use super::keys::Meta;
use super::PodOwner;
use crate::contract as c;
use crate::contract::Topology;
use crate::frameworks;
use crate::frameworks::ElasticRole;
use crate::frameworks::Framework;
use crate::object;
use crate::object::at;
use crate::object::str_at;
use crate::object::Kind;
use crate::violation::Rule;
use crate::violation::Violations;
use serde_json::Value;

/// The job's topology as this member declares it.
pub(super) struct Declared {
    pub(super) topology: Topology,
    /// Not written but inferred from a one-role workload's size.
    pub(super) inferred: bool,
}

/// `dljob.dev/replicas`, or a one-role workload's size when it is absent.
pub(super) fn topology(
    kind: Kind,
    object: &Value,
    meta: &Meta<'_>,
    role: Option<&str>,
    size: Option<u32>,
    index_offset: Option<u32>,
    v: &mut Violations,
) -> Option<Declared> {
    if let Some(text) = meta.annotation(c::REPLICAS) {
        return match Topology::parse(text) {
            Ok(topology) => Some(Declared {
                topology,
                inferred: false,
            }),
            Err(e) => {
                v.push(Rule::InvalidTopology, e.to_string());
                None
            }
        };
    }
    match (kind, role, size) {
        (Kind::StatefulSet | Kind::Job, Some(_), Some(n)) if n > c::MAX_REPLICAS => {
            v.push(
                Rule::TooManyReplicas,
                format!(
                    "{} {} is {n}: a job has at most {} replicas in all",
                    kind.as_str(),
                    size_field(kind),
                    c::MAX_REPLICAS
                ),
            );
            None
        }
        (Kind::StatefulSet | Kind::Job, Some(_), Some(_)) if index_offset.is_some() => {
            v.push(Rule::MissingTopology, format!(
                "annotation {} is missing: a member with {} is one of several sets of its role, so the role's count must be written, e.g. \"worker=6\"",
                c::REPLICAS,
                c::INDEX_OFFSET
            ));
            None
        }
        (Kind::StatefulSet | Kind::Job, Some(r), Some(n)) if n > 0 => Some(Declared {
            topology: Topology::single(r, n),
            inferred: true,
        }),
        (Kind::Pod, _, _) if pod_owner(object) != PodOwner::None => {
            v.push(Rule::MissingTopology, format!(
                "annotation {} is missing on a pod created by a {}: its pod template was not mutated by dljob (was the webhook down when the workload was created?); add {} to the template",
                c::REPLICAS,
                owner_name(pod_owner(object)),
                c::REPLICAS
            ));
            None
        }
        _ => {
            v.push(Rule::MissingTopology, format!(
                "annotation {} is missing: declare the whole job's topology, e.g. \"worker=4\" (only a single-role StatefulSet or Indexed Job may leave it out)",
                c::REPLICAS
            ));
            None
        }
    }
}

/// The topology against the framework's roles, the member's role and size,
/// and the hostnames it makes.
pub(super) fn check_topology(
    job: &str,
    kind: Kind,
    framework: Option<&'static dyn Framework>,
    role: Option<&str>,
    (size, index_offset, elastic): (Option<u32>, Option<u32>, Option<&ElasticRole>),
    declared: &Declared,
    v: &mut Violations,
) {
    let t = &declared.topology;
    if let Some(f) = framework {
        for problem in frameworks::check_topology(f, t) {
            v.push(Rule::RoleCount, problem);
        }
    }
    if let Some(r) = role {
        let elastic = elastic.filter(|_| kind != Kind::Pod);
        match (t.count(r), elastic) {
            (None, _) => v.push(
                Rule::RoleNotInTopology,
                format!(
                    "role \"{r}\" is not in {} \"{t}\"; add it there or fix {}",
                    c::REPLICAS,
                    c::ROLE
                ),
            ),
            // An elastic role's workload may have any size of its range;
            // a set of it, any that keeps it within the largest.
            (Some(_), Some(e)) => {
                let end = size.map(|n| n.saturating_add(index_offset.unwrap_or(0)));
                let within = match (size, index_offset) {
                    (Some(n), None) => e.range.contains(&n),
                    (Some(_), Some(_)) => end.is_some_and(|end| end <= e.max()),
                    (None, _) => true,
                };
                if !within {
                    let n = size.unwrap_or_default();
                    v.push(
                        Rule::SizeMismatch,
                        match index_offset {
                            None => format!(
                                "{} {} is {n} but {}; resize it within that range",
                                kind.as_str(),
                                size_field(kind),
                                e.said()
                            ),
                            Some(offset) => format!(
                                "{} {} {n} from {} {offset} reaches {r} index {} but {} (indexes 0 to {}); make it smaller",
                                kind.as_str(),
                                size_field(kind),
                                c::INDEX_OFFSET,
                                end.unwrap_or_default().saturating_sub(1),
                                e.said(),
                                e.max() - 1
                            ),
                        },
                    );
                }
            }
            (Some(count), None) => match (size, index_offset) {
                (Some(n), Some(offset))
                    if kind != Kind::Pod && offset.saturating_add(n) > count =>
                {
                    v.push(Rule::SizeMismatch, format!(
                        "{} {} {n} from {} {offset} covers {r} indexes {offset} to {} but {} \"{t}\" declares {r}={count} (indexes 0 to {}); make the sets of role {r} add up to {count}",
                        kind.as_str(),
                        size_field(kind),
                        c::INDEX_OFFSET,
                        offset.saturating_add(n) - 1,
                        c::REPLICAS,
                        count - 1
                    ));
                }
                (Some(n), None) if !declared.inferred && n != count => {
                    v.push(Rule::SizeMismatch, size_mismatch(kind, n, r, count, t));
                }
                _ => {}
            },
        }
    }
    // The widest index any role may reach (an elastic role: its largest).
    let widest = t.roles().map(|(_, n)| n).max().unwrap_or(1);
    let digits = (widest.max(elastic.map_or(0, ElasticRole::max)) - 1)
        .to_string()
        .len();
    for (role, _) in t.roles() {
        if job.len() + role.len() + digits + 2 > 63 {
            v.push(Rule::HostnameTooLong, format!(
                "hostname \"{job}-{role}-N\" would be longer than 63 characters: shorten the job name or the role"
            ));
        }
    }
}

pub(super) fn size_field(kind: Kind) -> &'static str {
    if kind == Kind::Job {
        "completions"
    } else {
        "replicas"
    }
}

pub(super) fn size_mismatch(kind: Kind, n: u32, role: &str, count: u32, t: &Topology) -> String {
    format!(
        "{} {} is {n} but {} \"{t}\" declares {role}={count}; make them equal (change the topology on every member of the job)",
        kind.as_str(),
        size_field(kind),
        c::REPLICAS
    )
}

/// StatefulSet `replicas` (default 1) or Job `completions`; Job shape
/// checks; no `dljob.dev/index` on a workload.
pub(super) fn workload_size(
    kind: Kind,
    object: &Value,
    meta: &Meta<'_>,
    v: &mut Violations,
) -> Option<u32> {
    let size = size_of(kind, object, v);
    if kind != Kind::Pod && meta.annotation(c::INDEX).is_some() {
        v.push(
            Rule::IndexOnWorkload,
            format!(
                "annotation {} is for plain Pods; a {}'s pods take their index from the {}: remove it",
                c::INDEX,
                kind.as_str(),
                if kind == Kind::Job {
                    "completion index"
                } else {
                    "ordinal"
                }
            ),
        );
    }
    size
}

pub(super) fn size_of(kind: Kind, object: &Value, v: &mut Violations) -> Option<u32> {
    let num = |path: &[&str]| {
        at(object, path)
            .and_then(Value::as_u64)
            .map(|n| n.min(u32::MAX as u64) as u32)
    };
    match kind {
        Kind::Pod => None,
        Kind::StatefulSet => {
            let replicas = num(&["spec", "replicas"]).unwrap_or(1);
            // A finished job's StatefulSet is scaled to 0 by the reconciler,
            // which keeps the size it had: that is still its size.
            let scaled_from = object::meta_str(object, &[], "annotations", c::SCALED_FROM)
                .and_then(|s| s.trim().parse::<u32>().ok());
            match (replicas, scaled_from) {
                (0, Some(n)) => Some(n),
                _ => Some(replicas),
            }
        }
        Kind::Job => {
            if str_at(object, &["spec", "completionMode"]) != Some("Indexed") {
                v.push(
                    Rule::InvalidJobMember,
                    "a batch/v1 Job member needs spec.completionMode: Indexed (each pod needs a stable index)",
                );
            }
            let completions = num(&["spec", "completions"]);
            match completions {
                None => v.push(
                    Rule::InvalidJobMember,
                    "a Job member needs spec.completions: the number of replicas of its role"
                        .to_owned(),
                ),
                Some(n) => {
                    let parallelism = num(&["spec", "parallelism"]).unwrap_or(1);
                    if parallelism < n {
                        v.push(Rule::InvalidJobMember, format!(
                            "Job parallelism {parallelism} is below completions {n}: distributed training needs every replica running at once; set parallelism to {n}"
                        ));
                    }
                }
            }
            completions
        }
    }
}
