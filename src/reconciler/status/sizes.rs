//! Member workloads whose size differs from their role's count (what
//! `kubectl scale` does, which no webhook sees), with the fix.

use super::Problem;
use super::Workload;
use crate::contract::Topology;
use crate::frameworks::ElasticRole;
use std::collections::BTreeMap;

/// The condition type reporting member workloads whose size differs from
/// their role's count (ARCHITECTURE.md §4: `kubectl scale` of a member StatefulSet
/// never reaches the webhook, which can only refuse the extra pods).
pub const SIZE_MISMATCH: &str = "MemberSizeMismatch";

/// One sentence per member workload whose size differs from its role's
/// count, with the fix. A StatefulSet scaled to 0 or a suspended Job is
/// stopped, not resized (the reconciler itself stops them when the job
/// finishes); a role the topology lacks is the webhook's to refuse.
///
/// The elastic role (`resizable`) may have any size of its range: see
/// [`elastic_mismatches`].
pub fn size_mismatches(
    topology: &Topology,
    resizable: Option<&ElasticRole>,
    workloads: &[Workload],
) -> Vec<String> {
    let fix = |what: &str| {
        format!("{what}, or change dljob.dev/replicas ({topology}) on every member of the job")
    };
    let mut out = Vec::new();
    if let Some(e) = resizable {
        out.extend(elastic_mismatches(e, workloads));
    }
    // Roles split over several sets: their sizes must add up.
    let mut sets: BTreeMap<&str, u32> = BTreeMap::new();
    for w in workloads
        .iter()
        .filter(|w| resizable.is_none_or(|e| role_of(w) != e.role))
    {
        let (name, role, size, offset, kind) = match w {
            Workload::StatefulSet {
                name,
                role,
                replicas,
                offset,
                ..
            } => (name, role, *replicas, *offset, "StatefulSet"),
            Workload::Job {
                name,
                role,
                suspended,
                completions,
                parallelism,
                offset,
                ..
            } => {
                if *suspended {
                    continue;
                }
                // A whole role's Job must have the role's count; a set its
                // own size, all running at once either way.
                let want = match offset {
                    Some(_) => *completions,
                    None => topology.count(role),
                };
                let Some(want) = want else {
                    if offset.is_none() {
                        continue; // not a role of the topology
                    }
                    out.push(format!(
                        "Job {name} has no completions: {}",
                        fix("re-create it with completions")
                    ));
                    continue;
                };
                if offset.is_none() && *completions != Some(want) {
                    let has = completions
                        .map_or("no completions".to_owned(), |n| format!("completions {n}"));
                    out.push(format!(
                        "Job {name} has {has} but role {role} has {want}: {}",
                        fix(&format!("re-create it with completions {want}"))
                    ));
                    continue;
                }
                if *parallelism < want {
                    out.push(format!(
                        "Job {name} has parallelism {parallelism} but role {role} has {want} replicas that must all run at once: {}",
                        fix(&format!("set its parallelism to {want}"))
                    ));
                }
                if offset.is_none() {
                    continue; // checked in full above
                }
                (name, role, want, *offset, "Job")
            }
        };
        let Some(count) = topology.count(role) else {
            continue;
        };
        match offset {
            Some(offset) => {
                let sum = sets.entry(role.as_str()).or_default();
                *sum = sum.saturating_add(size);
                if size > 0 && offset.saturating_add(size) > count {
                    out.push(format!(
                        "{kind} {name} has {size} from {role} index {offset} but role {role} has {count} (indexes 0 to {}): {}",
                        count - 1,
                        fix(&format!("make it at most {}", count.saturating_sub(offset)))
                    ));
                }
            }
            None if size > 0 && size != count => {
                out.push(format!(
                    "StatefulSet {name} has {size} replicas but role {role} has {count}: {}",
                    fix(&format!(
                        "scale it back (kubectl scale statefulset {name} --replicas={count})"
                    ))
                ));
            }
            None => {}
        }
    }
    for (role, covered) in sets {
        let count = topology.count_or_zero(role);
        if covered != count && covered > 0 {
            out.push(format!(
                "the sets of role {role} have {covered} replicas in all but role {role} has {count}: {}",
                fix(&format!("resize them to add up to {count}"))
            ));
        }
    }
    out
}

fn role_of(w: &Workload) -> &str {
    match w {
        Workload::StatefulSet { role, .. } | Workload::Job { role, .. } => role,
    }
}

/// The elastic role's workloads: each within its largest size, all of
/// them together within its range (stopped ones left out), and a Job
/// running all its completions at once.
fn elastic_mismatches(e: &ElasticRole, workloads: &[Workload]) -> Vec<String> {
    let mut out = Vec::new();
    let mut total = 0u32;
    let mut running = false;
    for w in workloads.iter().filter(|w| role_of(w) == e.role) {
        let (kind, name, size, offset) = match w {
            Workload::StatefulSet {
                name,
                replicas,
                offset,
                ..
            } => ("StatefulSet", name, *replicas, *offset),
            Workload::Job {
                suspended: true, ..
            } => continue,
            Workload::Job {
                name,
                completions,
                parallelism,
                offset,
                ..
            } => {
                let Some(n) = *completions else {
                    out.push(format!(
                        "Job {name} has no completions: re-create it with completions within the range: {}",
                        e.said()
                    ));
                    continue;
                };
                if *parallelism < n {
                    out.push(format!(
                        "Job {name} has parallelism {parallelism} but completions {n}: every replica of role {} runs at once; set both to the same size (kubectl patch job {name} --type=merge -p '{{\"spec\":{{\"completions\":{n},\"parallelism\":{n}}}}}')",
                        e.role
                    ));
                }
                ("Job", name, n, *offset)
            }
        };
        if size == 0 {
            continue; // stopped
        }
        running = true;
        total = total.saturating_add(size);
        let end = offset.unwrap_or(0).saturating_add(size);
        if end > e.max() {
            out.push(format!(
                "{kind} {name} reaches index {} of role {} but {}: resize it within that range",
                end - 1,
                e.role,
                e.said()
            ));
        }
    }
    if running && out.is_empty() && !e.range.contains(&total) {
        out.push(format!(
            "role {} has {total} replicas in its workloads but {}: resize them within that range",
            e.role,
            e.said()
        ));
    }
    out
}

/// The problem condition [`SIZE_MISMATCH`], set from the workloads whose
/// size differs from their role's count.
pub(super) const SIZE_PROBLEM: Problem = Problem {
    type_: SIZE_MISMATCH,
    reason: "SizeDiffersFromTopology",
    cleared_reason: "SizesMatchTopology",
    cleared_message: "every member StatefulSet and Job has its role's size",
};

#[cfg(test)]
mod tests {
    use super::*;

    /// Worker sets: each within the role's indexes from its offset, and
    /// all of them adding up to the role's count.
    #[test]
    fn worker_sets_are_sized_against_their_role_together() {
        let t = Topology::parse("master=1,worker=6").unwrap();
        let set = |name: &str, replicas, offset| Workload::StatefulSet {
            name: name.into(),
            uid: format!("uid-{name}"),
            marked: false,
            role: "worker".into(),
            replicas,
            offset: Some(offset),
        };
        assert!(size_mismatches(&t, None, &[set("gpu8", 2, 0), set("gpu4", 4, 2)]).is_empty());
        assert_eq!(
            size_mismatches(&t, None, &[set("gpu8", 2, 0), set("gpu4", 5, 2)]),
            vec![
                "StatefulSet gpu4 has 5 from worker index 2 but role worker has 6 (indexes 0 to 5): make it at most 4, or change dljob.dev/replicas (master=1,worker=6) on every member of the job",
                "the sets of role worker have 7 replicas in all but role worker has 6: resize them to add up to 6, or change dljob.dev/replicas (master=1,worker=6) on every member of the job",
            ]
        );
        assert_eq!(
            size_mismatches(&t, None, &[set("gpu8", 2, 0), set("gpu4", 3, 2)]),
            vec!["the sets of role worker have 5 replicas in all but role worker has 6: resize them to add up to 6, or change dljob.dev/replicas (master=1,worker=6) on every member of the job"]
        );
    }

    #[test]
    fn member_sizes_that_differ_from_their_roles_are_reported_with_the_fix() {
        let topology = Topology::parse("chief=1,ps=2,worker=4").unwrap();
        let sts = super::super::tests::statefulset;
        let job = |name: &str, role: &str, suspended, completions, parallelism| Workload::Job {
            name: name.into(),
            uid: format!("uid-{name}"),
            marked: false,
            role: role.into(),
            suspended,
            finished: false,
            completions,
            parallelism,
            offset: None,
        };
        let fix = "or change dljob.dev/replicas (chief=1,ps=2,worker=4) on every member of the job";
        assert_eq!(
            size_mismatches(
                &topology,
                None,
                &[
                    sts("ps", "ps", 3),
                    sts("stopped", "ps", 0),
                    sts("other", "evaluator", 7),
                    job("chief", "chief", false, Some(2), 2),
                    job("w", "worker", false, Some(4), 2),
                    job("w-suspended", "worker", true, Some(1), 1),
                    job("w-ok", "worker", false, Some(4), 4),
                ]
            ),
            [
                format!("StatefulSet ps has 3 replicas but role ps has 2: scale it back (kubectl scale statefulset ps --replicas=2), {fix}"),
                format!("Job chief has completions 2 but role chief has 1: re-create it with completions 1, {fix}"),
                format!("Job w has parallelism 2 but role worker has 4 replicas that must all run at once: set its parallelism to 4, {fix}"),
            ]
        );
    }
}
