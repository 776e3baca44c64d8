//! The vocabulary of refusals, crate-wide: the [`Rule`] a member breaks and
//! the [`Violations`] that carry each rule with the message that names the
//! fix. Pure.

use std::fmt;

/// Problems that make an object unacceptable; each message names the fix.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct Violations(pub Vec<Violation>);

/// The rule a member breaks. [`Rule::reason`] is stable: a metric label or a
/// condition reason can carry it.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum Rule {
    /// A `dljob.dev/*` key differs between a workload and its pod template.
    TemplateDisagrees,
    /// An annotation written as a label, or a label as an annotation.
    MisplacedKey,
    InvalidJobName,
    MissingRole,
    MissingFramework,
    UnknownFramework,
    /// A role the framework does not have.
    UnknownRole,
    /// The topology breaks the framework's role counts.
    RoleCount,
    /// `dljob.dev/index` on a StatefulSet or Job.
    IndexOnWorkload,
    InvalidTopology,
    TooManyReplicas,
    MissingTopology,
    /// The member's role is not in the topology.
    RoleNotInTopology,
    /// A StatefulSet's replicas or a Job's completions differ from its role's count.
    SizeMismatch,
    HostnameTooLong,
    /// `dljob.dev/elastic` on a framework without elastic rendezvous.
    ElasticNotSupported,
    /// A policy, port, slots, elastic, ordered-start or ssh-path value.
    InvalidValue,
    /// `dljob.dev/container` names no container.
    UnknownContainer,
    /// A Job that is not Indexed, has no completions or runs fewer at once.
    InvalidJobMember,
    /// A controller's pod whose index cannot be read.
    UnknownIndex,
    InvalidIndex,
    MissingIndex,
    IndexOutOfRange,
    /// An UPDATE that changes the job, role, framework or topology (or a
    /// pod's index).
    ImmutableKey,
    /// An UPDATE that makes an existing pod a member.
    JoinByUpdate,
    /// A member that disagrees with the job's other members.
    PeerDisagrees,
    /// A replica another member already is.
    DuplicateReplica,
    /// What the pods would get is more than Linux or the API server accepts.
    TooLarge,
    /// A volume or mount using a volume name dljob reserves, otherwise
    /// than dljob does.
    ReservedVolume,
    /// A member the chosen gang scheduler would not group with the others.
    GangConflict,
    /// `dljob.dev/tensorboard` names a volume the pod lacks, does not mount
    /// in its framework container, or that is not shared between pods.
    TensorBoardVolume,
}

impl Rule {
    /// The stable reason: the variant's name.
    pub fn reason(self) -> &'static str {
        match self {
            Rule::TemplateDisagrees => "TemplateDisagrees",
            Rule::MisplacedKey => "MisplacedKey",
            Rule::InvalidJobName => "InvalidJobName",
            Rule::MissingRole => "MissingRole",
            Rule::MissingFramework => "MissingFramework",
            Rule::UnknownFramework => "UnknownFramework",
            Rule::UnknownRole => "UnknownRole",
            Rule::RoleCount => "RoleCount",
            Rule::IndexOnWorkload => "IndexOnWorkload",
            Rule::InvalidTopology => "InvalidTopology",
            Rule::TooManyReplicas => "TooManyReplicas",
            Rule::MissingTopology => "MissingTopology",
            Rule::RoleNotInTopology => "RoleNotInTopology",
            Rule::SizeMismatch => "SizeMismatch",
            Rule::HostnameTooLong => "HostnameTooLong",
            Rule::ElasticNotSupported => "ElasticNotSupported",
            Rule::InvalidValue => "InvalidValue",
            Rule::UnknownContainer => "UnknownContainer",
            Rule::InvalidJobMember => "InvalidJobMember",
            Rule::UnknownIndex => "UnknownIndex",
            Rule::InvalidIndex => "InvalidIndex",
            Rule::MissingIndex => "MissingIndex",
            Rule::IndexOutOfRange => "IndexOutOfRange",
            Rule::ImmutableKey => "ImmutableKey",
            Rule::JoinByUpdate => "JoinByUpdate",
            Rule::PeerDisagrees => "PeerDisagrees",
            Rule::DuplicateReplica => "DuplicateReplica",
            Rule::TooLarge => "TooLarge",
            Rule::ReservedVolume => "ReservedVolume",
            Rule::GangConflict => "GangConflict",
            Rule::TensorBoardVolume => "TensorBoardVolume",
        }
    }
}

/// One broken rule and the message that names the fix.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Violation {
    pub rule: Rule,
    pub message: String,
}

impl fmt::Display for Violation {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.message)
    }
}

impl fmt::Display for Violations {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        for (i, v) in self.0.iter().enumerate() {
            if i > 0 {
                f.write_str("; ")?;
            }
            f.write_str(&v.message)?;
        }
        Ok(())
    }
}

impl std::error::Error for Violations {}

impl Violations {
    pub(crate) fn push(&mut self, rule: Rule, message: impl Into<String>) {
        self.0.push(Violation {
            rule,
            message: message.into(),
        });
    }
    /// The messages, in order.
    pub fn messages(&self) -> Vec<&str> {
        self.0.iter().map(|v| v.message.as_str()).collect()
    }
    pub(crate) fn is_empty(&self) -> bool {
        self.0.is_empty()
    }
    /// `Ok(v)` when nothing was found.
    pub(crate) fn into_result<T>(self, v: T) -> Result<T, Violations> {
        if self.0.is_empty() {
            Ok(v)
        } else {
            Err(self)
        }
    }
}
