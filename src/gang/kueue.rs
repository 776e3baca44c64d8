//! Kueue's plain-pod groups (kueue.x-k8s.io, pod integration): every member
//! pod carries the group's name and its total size; Kueue builds one
//! Workload from them (one PodSet per distinct pod spec), admits it whole,
//! and ungates the pods itself. Kueue adds its own `managed` label,
//! finalizer and `kueue.x-k8s.io/admission` gate: dljob adds none of them.

use super::{Group, PodMarks, Scheduler};

/// The label naming a pod's group.
pub(crate) const GROUP_NAME: &str = "kueue.x-k8s.io/pod-group-name";
/// The annotation giving the group's size.
pub(crate) const TOTAL_COUNT: &str = "kueue.x-k8s.io/pod-group-total-count";
/// The label naming the LocalQueue.
pub(crate) const QUEUE_NAME: &str = "kueue.x-k8s.io/queue-name";
/// Topology-Aware Scheduling: the node label one domain of which must (or
/// should) hold the pod's PodSet.
pub(crate) const REQUIRED_TOPOLOGY: &str = "kueue.x-k8s.io/podset-required-topology";
pub(crate) const PREFERRED_TOPOLOGY: &str = "kueue.x-k8s.io/podset-preferred-topology";

pub(crate) struct Kueue;

impl Scheduler for Kueue {
    fn name(&self) -> &'static str {
        "kueue"
    }
    /// The total count is every pod of the job, not the elastic minimum:
    /// Kueue waits until that many pods exist before it admits the group,
    /// and deletes pods beyond it as excess.
    fn pod(&self, group: &Group<'_>) -> PodMarks {
        let mut labels = vec![(GROUP_NAME, group.name.to_owned())];
        if let Some(queue) = group.queue {
            labels.push((QUEUE_NAME, queue.to_owned()));
        }
        let mut annotations = vec![(TOTAL_COUNT, group.total.to_string())];
        if let Some((key, required)) = group.topology {
            let which = if required {
                REQUIRED_TOPOLOGY
            } else {
                PREFERRED_TOPOLOGY
            };
            annotations.push((which, key.to_owned()));
        }
        PodMarks {
            labels,
            annotations,
            scheduler_name: None,
            scheduling_group: None,
        }
    }
    fn queues(&self) -> bool {
        true
    }
    /// Every pod says the group's total: Kueue deletes pods beyond it.
    fn fixed_total(&self) -> bool {
        true
    }
    /// Kueue's TAS reads either annotation (its Topology object must list
    /// the label as a level; that is the cluster admin's).
    fn topology_refusal(&self, _required: bool) -> Option<String> {
        None
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::gang::test_support::group;

    #[test]
    fn pods_carry_the_group_name_the_total_and_the_queue() {
        assert_eq!(
            Kueue.pod(&group(2, 9, Some("team-a"))),
            PodMarks {
                labels: vec![
                    ("kueue.x-k8s.io/pod-group-name", "mnist".into()),
                    ("kueue.x-k8s.io/queue-name", "team-a".into())
                ],
                annotations: vec![("kueue.x-k8s.io/pod-group-total-count", "9".into())],
                scheduler_name: None,
                scheduling_group: None,
            }
        );
        assert_eq!(Kueue.pod(&group(9, 9, None)).labels.len(), 1);
        // Topology-Aware Scheduling, as Kueue's docs spell it.
        let rack = Kueue.pod(&group(9, 9, None).within(Some(("example.com/rack", true))));
        assert_eq!(
            rack.annotations,
            vec![
                ("kueue.x-k8s.io/pod-group-total-count", "9".into()),
                (
                    "kueue.x-k8s.io/podset-required-topology",
                    "example.com/rack".into()
                )
            ]
        );
        let zone =
            Kueue.pod(&group(9, 9, None).within(Some(("topology.kubernetes.io/zone", false))));
        assert_eq!(
            zone.annotations[1],
            (
                "kueue.x-k8s.io/podset-preferred-topology",
                "topology.kubernetes.io/zone".into()
            )
        );
        assert_eq!(Kueue.topology_refusal(false), None);
        assert!(Kueue.pod_group_kind().is_none());
    }
}
