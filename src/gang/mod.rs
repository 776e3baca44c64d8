//! Gang scheduling (`dljob.dev/gang`): how each scheduler integration wants
//! one job's pods declared as one group. Pure, like `frameworks/`: every
//! scheduler is one file behind [`Scheduler`], registered in [`ALL`]. What
//! a scheduler needs is derived from the job's spec alone, so admission
//! (the pods' labels and annotations) and the reconciler (the PodGroup
//! object) agree without talking to each other.

pub(crate) mod coscheduling;
pub(crate) mod kubernetes;
pub(crate) mod kueue;
pub(crate) mod volcano;

use serde_json::Value;

/// The default: no gang, pods are scheduled one by one.
pub(crate) const NONE: &str = "none";

/// Every scheduler integration.
pub(crate) static ALL: &[&dyn Scheduler] = &[
    &Unscheduled,
    &kueue::Kueue,
    &volcano::Volcano,
    &coscheduling::Coscheduling,
    &kubernetes::Kubernetes,
];

/// Looks a scheduler up by its `dljob.dev/gang` name.
pub(crate) fn by_name(name: &str) -> Option<&'static dyn Scheduler> {
    ALL.iter().copied().find(|s| s.name() == name)
}

/// "none, kueue, …" for messages.
pub(crate) fn names() -> String {
    ALL.iter().map(|s| s.name()).collect::<Vec<_>>().join(", ")
}

/// One job as a gang.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) struct Group<'a> {
    /// The group's name: the job's.
    pub name: &'a str,
    /// Every pod of the job.
    pub total: u32,
    /// Pods that must be placed together for the job to make progress: the
    /// elastic minimum where elastic, else every pod — less the gated role's
    /// pods (mpi's launcher), which start only after the others run and so
    /// cannot be in the gang.
    pub min_member: u32,
    /// `dljob.dev/queue`.
    pub queue: Option<&'a str>,
    /// `dljob.dev/topology`: the node label key, and whether one domain of
    /// it is required (else preferred).
    pub topology: Option<(&'a str, bool)>,
}

impl<'a> Group<'a> {
    /// The gang of job `name` of `total` pods, `elastic_min` of which
    /// suffice where the job is elastic, `gated` of which start only after
    /// the others run (`JobSpec::gang_group` says for a job).
    pub(crate) fn new(
        name: &'a str,
        total: u32,
        elastic_min: Option<u32>,
        gated: u32,
        queue: Option<&'a str>,
    ) -> Self {
        let wanted = elastic_min.map_or(total, |min| min.min(total));
        Self {
            name,
            total,
            min_member: wanted.saturating_sub(gated).max(1),
            queue,
            topology: None,
        }
    }

    /// The gang placed in one domain of a node label (`dljob.dev/topology`).
    pub(crate) fn within(self, topology: Option<(&'a str, bool)>) -> Self {
        Self { topology, ..self }
    }
}

/// What one member pod gets so that its scheduler sees the group.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub(crate) struct PodMarks {
    pub labels: Vec<(&'static str, String)>,
    pub annotations: Vec<(&'static str, String)>,
    /// `spec.schedulerName`, where the scheduler runs under its own name.
    pub scheduler_name: Option<&'static str>,
    /// `spec.schedulingGroup.podGroupName`: Kubernetes' own gang API. Set
    /// only at creation (the API server refuses changing it), on pods and
    /// on the pod templates of workloads.
    pub scheduling_group: Option<String>,
}

/// The group object a scheduler reads, kept by the reconciler.
#[derive(Clone, Debug, PartialEq)]
pub(crate) struct PodGroupKind {
    pub group: &'static str,
    pub version: &'static str,
    pub kind: &'static str,
    pub plural: &'static str,
}

/// A gang scheduler integration.
pub(crate) trait Scheduler: Sync {
    /// The `dljob.dev/gang` value.
    fn name(&self) -> &'static str;
    /// Labels, annotations and scheduler name of every member pod.
    fn pod(&self, group: &Group<'_>) -> PodMarks;
    /// The PodGroup kind the scheduler reads, if it needs one made for it.
    fn pod_group_kind(&self) -> Option<PodGroupKind> {
        None
    }
    /// The PodGroup's `spec`; `min_resources` is the sum of the requests
    /// of the `min_member` pods (resource name → quantity).
    fn pod_group_spec(&self, _group: &Group<'_>, _min_resources: Option<&Value>) -> Value {
        Value::Null
    }
    /// Whether its PodGroup declares `minResources` (the members' requests
    /// are then kept and summed).
    fn wants_min_resources(&self) -> bool {
        self.pod_group_kind().is_some()
    }
    /// What to install when the cluster does not serve the PodGroup kind.
    fn install_hint(&self) -> &'static str {
        ""
    }
    /// Whether `dljob.dev/queue` means something to this scheduler.
    fn queues(&self) -> bool {
        false
    }
    /// Whether the group is the job's declared total, fixed on every pod
    /// (Kueue's pod groups): an elastic role cannot grow past its declared
    /// count under it.
    fn fixed_total(&self) -> bool {
        false
    }
    /// Why this scheduler cannot place a gang in one domain of a node label
    /// (`dljob.dev/topology`, `required` or not); None where it can (its
    /// `pod` and `pod_group_spec` then declare it).
    fn topology_refusal(&self, _required: bool) -> Option<String> {
        Some(format!(
            "the {} gang has no way to keep a job in one domain of a node label; use dljob.dev/gang: kubernetes or kueue",
            self.name()
        ))
    }
}

/// `none`: nothing is declared.
struct Unscheduled;

impl Scheduler for Unscheduled {
    fn name(&self) -> &'static str {
        NONE
    }
    fn pod(&self, _group: &Group<'_>) -> PodMarks {
        PodMarks::default()
    }
    fn topology_refusal(&self, _required: bool) -> Option<String> {
        Some("without a gang scheduler nothing places the job as one; set dljob.dev/gang: kubernetes or kueue".to_owned())
    }
}

#[cfg(test)]
pub(crate) mod test_support {
    use super::Group;

    pub(crate) fn group(
        min_member: u32,
        total: u32,
        queue: Option<&'static str>,
    ) -> Group<'static> {
        Group {
            name: "mnist",
            total,
            min_member,
            queue,
            topology: None,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_gang_is_every_pod_the_elastic_minimum_and_never_the_gated_ones() {
        assert_eq!(Group::new("j", 7, None, 0, None).min_member, 7);
        let g = Group::new("j", 9, None, 1, None);
        assert_eq!((g.total, g.min_member), (9, 8));
        assert_eq!(Group::new("j", 6, Some(2), 0, None).min_member, 2);
        assert_eq!(Group::new("j", 6, Some(9), 0, None).min_member, 6);
        assert_eq!(Group::new("j", 1, None, 1, None).min_member, 1);
    }

    #[test]
    fn every_scheduler_is_found_by_its_name() {
        for s in ALL {
            assert_eq!(by_name(s.name()).unwrap().name(), s.name());
        }
        assert_eq!(names(), "none, kueue, volcano, coscheduling, kubernetes");
        assert!(by_name("yunikorn").is_none());
    }
}
