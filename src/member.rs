//! Parsing one object into a [`MemberSpec`]: which job it belongs to, its role,
//! index and everything the job's members must agree on. Every check that
//! needs no cluster state happens here, and all problems are reported at once.

use std::fmt;

use serde_json::{Map, Value};

use crate::config::Config;
use crate::contract::{
    self as c, CleanPodPolicy, Elastic, Policies, RestartPolicy, RestartScope, Slots, Topology,
};
use crate::crd::JobSpec;
use crate::frameworks::{self, Framework};
use crate::gang;
use crate::object::{self, at, str_at, Kind};

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
    pub fn push(&mut self, rule: Rule, message: impl Into<String>) {
        self.0.push(Violation {
            rule,
            message: message.into(),
        });
    }
    /// The messages, in order.
    pub fn messages(&self) -> Vec<&str> {
        self.0.iter().map(|v| v.message.as_str()).collect()
    }
    pub fn is_empty(&self) -> bool {
        self.0.is_empty()
    }
    /// `Ok(v)` when nothing was found.
    pub fn into_result<T>(self, v: T) -> Result<T, Violations> {
        if self.0.is_empty() {
            Ok(v)
        } else {
            Err(self)
        }
    }
}

/// Where a pod's index comes from.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum PodOwner {
    /// A plain pod: `dljob.dev/index`.
    None,
    /// A StatefulSet pod: its ordinal.
    StatefulSet,
    /// An Indexed Job pod: its completion index.
    Job,
}

/// Everything dljob reads from one member object: what the whole job
/// agrees on ([`JobSpec`]) and what is this member's own.
#[derive(Clone)]
pub struct MemberSpec {
    pub kind: Kind,
    /// May be empty for `generateName` pods.
    pub name: String,
    pub namespace: String,
    pub job: String,
    pub role: String,
    /// `spec.framework`, resolved.
    pub framework: &'static dyn Framework,
    /// The job-wide keys; members agree when these are equal.
    pub spec: JobSpec,
    /// The topology was not written but inferred from a workload's size.
    pub topology_inferred: bool,
    /// Pods: the replica index within the role.
    pub index: Option<u32>,
    /// Pods: who created it.
    pub owner: PodOwner,
    /// StatefulSet replicas or Job completions.
    pub size: Option<u32>,
    /// `dljob.dev/container`, when set.
    pub container: Option<String>,
    /// `dljob.dev/ordered-start`.
    pub ordered_start: bool,
    /// `dljob.dev/index-offset`: a workload (or its pod) that is one of
    /// several sets of its role, covering indexes `offset..offset + size`.
    pub index_offset: Option<u32>,
    /// What one pod of this member requests, (resource, quantity) per
    /// container (requests, else limits) — kept for a workload or a plain
    /// pod when the gang scheduler's PodGroup wants `minResources`.
    pub pod_requests: Vec<(String, String)>,
    /// [`c::FINISHED_RUN`] on the object itself: left of a finished run (the
    /// uid of its DLJob).
    pub finished_run: Option<String>,
}

impl fmt::Debug for MemberSpec {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("MemberSpec")
            .field("kind", &self.kind)
            .field("name", &self.name)
            .field("namespace", &self.namespace)
            .field("job", &self.job)
            .field("role", &self.role)
            .field("framework", &self.framework.name())
            .field("topology", &self.spec.replicas.to_string())
            .field("index", &self.index)
            .field("size", &self.size)
            .field("port", &self.spec.port)
            .finish_non_exhaustive()
    }
}

/// A parsed member and the warnings parsing produced.
#[derive(Debug)]
pub struct Parsed {
    pub member: MemberSpec,
    pub warnings: Vec<String>,
}

/// Default mount path of the SSH Secret for mpi/chainer.
pub const DEFAULT_SSH_PATH: &str = "/root/.ssh";
/// Default hostfile slots per host.
pub const DEFAULT_SLOTS: u32 = 1;

/// The labels and annotations of a member: the object's own metadata and,
/// for workloads, its pod template's, read as one.
struct Meta<'v> {
    labels: [Option<&'v Map<String, Value>>; 2],
    annotations: [Option<&'v Map<String, Value>>; 2],
}

impl<'v> Meta<'v> {
    fn of(kind: Kind, object: &'v Value) -> Self {
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

    fn find(maps: &[Option<&'v Map<String, Value>>; 2], key: &str) -> Option<&'v str> {
        maps.iter().flatten().find_map(|m| m.get(key)?.as_str())
    }

    fn label(&self, key: &str) -> Option<&'v str> {
        Self::find(&self.labels, key)
    }

    fn annotation(&self, key: &str) -> Option<&'v str> {
        Self::find(&self.annotations, key)
    }

    /// Keys whose workload and template values differ.
    fn disagreements(&self, v: &mut Violations) {
        for (which, maps) in [("label", &self.labels), ("annotation", &self.annotations)] {
            let (Some(own), Some(tpl)) = (maps[0], maps[1]) else {
                continue;
            };
            for (k, val) in own {
                if !k.starts_with("dljob.dev/") {
                    continue;
                }
                if let Some(t) = tpl.get(k) {
                    if t != val {
                        v.push(Rule::TemplateDisagrees, format!(
                            "{which} {k} is {val} on the workload but {t} in its pod template; make them equal"
                        ));
                    }
                }
            }
        }
    }

    /// dljob's annotations written as labels and its labels written as
    /// annotations: dljob would not read them where they are.
    fn misplaced_keys(&self, v: &mut Violations) {
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

    /// Warnings for `dljob.dev/*` keys dljob does not know (typos).
    fn unknown_keys(&self, warnings: &mut Vec<String>) {
        let known_annotation = |k: &str| {
            c::JOB_WIDE_ANNOTATIONS.contains(&k)
                || c::MEMBER_ANNOTATIONS.contains(&k)
                || c::OWN_ANNOTATIONS.contains(&k)
        };
        let mut seen: Vec<&str> = Vec::new();
        for m in self.annotations.iter().flatten() {
            for k in m.keys() {
                if k.starts_with("dljob.dev/")
                    && !known_annotation(k)
                    && !is_label_key(k)
                    && !seen.contains(&k.as_str())
                {
                    seen.push(k);
                    warnings.push(format!(
                        "annotation {k} is not a dljob annotation and is ignored; known ones are {}",
                        known_annotations()
                    ));
                }
            }
        }
        for m in self.labels.iter().flatten() {
            for k in m.keys() {
                if k.starts_with("dljob.dev/")
                    && !is_label_key(k)
                    && !is_annotation_key(k)
                    && !seen.contains(&k.as_str())
                {
                    seen.push(k);
                    warnings.push(format!(
                        "label {k} is not a dljob label and is ignored; dljob labels are {} and {}",
                        c::JOB,
                        c::ROLE
                    ));
                }
            }
        }
    }
}

/// `dljob.dev/job` and `dljob.dev/role`.
fn is_label_key(k: &str) -> bool {
    k == c::JOB || k == c::ROLE
}

/// The annotations a user writes.
fn is_annotation_key(k: &str) -> bool {
    c::JOB_WIDE_ANNOTATIONS.contains(&k) || c::MEMBER_ANNOTATIONS.contains(&k)
}

fn known_annotations() -> String {
    c::JOB_WIDE_ANNOTATIONS
        .iter()
        .chain(c::MEMBER_ANNOTATIONS)
        .copied()
        .collect::<Vec<_>>()
        .join(", ")
}

/// The job label of an object (own metadata), if it is a member at all.
pub fn job_label(object: &Value) -> Option<&str> {
    object::meta_str(object, &[], "labels", c::JOB)
}

/// Parses `object` of `kind`. `Ok(None)`: not a member (no `dljob.dev/job`
/// label). `namespace` is the request's namespace, used when the object has
/// none (pods with `generateName` may arrive without one).
pub fn parse(
    kind: Kind,
    object: &Value,
    namespace: Option<&str>,
    config: &Config,
) -> Result<Option<Parsed>, Violations> {
    let Some(job) = job_label(object) else {
        return Ok(None);
    };
    let meta = Meta::of(kind, object);
    let mut v = Violations::default();
    let mut warnings = Vec::new();
    meta.disagreements(&mut v);
    meta.misplaced_keys(&mut v);
    meta.unknown_keys(&mut warnings);
    check_job_name(job, &mut v);
    let role = role(&meta, &mut v);
    let framework = framework(&meta, role, &mut v);
    let size = workload_size(kind, object, &meta, &mut v);
    let index_offset = index_offset(kind, object, &meta, &mut v);
    let declared = topology(kind, object, &meta, role, size, index_offset, &mut v);
    if let Some(d) = &declared {
        check_topology(job, kind, framework, role, (size, index_offset), d, &mut v);
    }
    let topology = declared.as_ref().map(|d| &d.topology);
    let (index, owner) = match kind {
        Kind::Pod => pod_index(object, &meta, role, topology, index_offset, &mut v),
        _ => (None, PodOwner::None),
    };
    let spec = job_spec(&meta, framework, topology, config, &mut v);
    if let Some(spec) = &spec {
        check_gang(kind, &meta, spec, &mut v);
    }
    let ordered_start = ordered_start(&meta, &mut v);
    let container = container(kind, object, &meta, &mut v);

    if !v.is_empty() {
        return Err(v);
    }
    // Everything below was checked above.
    let (Some(framework), Some(role), Some(declared), Some(spec)) =
        (framework, role, declared, spec)
    else {
        unreachable!("missing pieces are violations");
    };
    let namespace = str_at(object, &["metadata", "namespace"])
        .filter(|s| !s.is_empty())
        .or(namespace)
        .unwrap_or("default");
    let wants_resources = spec
        .scheduler()
        .is_some_and(|s| s.pod_group_kind().is_some());
    let pod_requests = if wants_resources && owner == PodOwner::None {
        pod_requests(kind, object)
    } else {
        Vec::new()
    };
    let member = MemberSpec {
        kind,
        name: str_at(object, &["metadata", "name"])
            .unwrap_or("")
            .to_owned(),
        namespace: namespace.to_owned(),
        job: job.to_owned(),
        role: role.to_owned(),
        framework,
        spec,
        topology_inferred: declared.inferred,
        index,
        owner,
        size,
        container,
        ordered_start,
        index_offset,
        pod_requests,
        finished_run: object::meta_str(object, &[], "annotations", c::FINISHED_RUN)
            .map(str::to_owned),
    };
    slots_warning(&member, object, &mut warnings);
    container_warning(&member, object, &mut warnings);
    Ok(Some(Parsed { member, warnings }))
}

fn check_job_name(job: &str, v: &mut Violations) {
    if !c::is_dns1035_label(job) || job.len() > c::MAX_JOB_NAME {
        v.push(Rule::InvalidJobName, format!(
            "{} \"{job}\" is not a valid job name: use at most {} lowercase letters, digits and '-', starting with a letter (it names the Service and every pod's hostname)",
            c::JOB,
            c::MAX_JOB_NAME
        ));
    }
}

/// `dljob.dev/role` (a label; an annotation of that name is reported as
/// misplaced by [`Meta::misplaced_keys`]).
fn role<'v>(meta: &Meta<'v>, v: &mut Violations) -> Option<&'v str> {
    let role = meta.label(c::ROLE);
    if role.is_none() && meta.annotation(c::ROLE).is_none() {
        v.push(
            Rule::MissingRole,
            format!("label {} is missing: every member names its role", c::ROLE),
        );
    }
    role
}

/// `dljob.dev/framework`, and whether it has the member's role.
fn framework(
    meta: &Meta<'_>,
    role: Option<&str>,
    v: &mut Violations,
) -> Option<&'static dyn Framework> {
    let framework = match meta.annotation(c::FRAMEWORK) {
        None if meta.label(c::FRAMEWORK).is_some() => None, // misplaced_keys says it
        None => {
            v.push(
                Rule::MissingFramework,
                format!(
                    "annotation {} is missing; set one of {}",
                    c::FRAMEWORK,
                    frameworks::names()
                ),
            );
            None
        }
        Some(name) => {
            let f = frameworks::by_name(name);
            if f.is_none() {
                v.push(
                    Rule::UnknownFramework,
                    format!(
                        "{}: unknown framework \"{name}\"; frameworks are {}",
                        c::FRAMEWORK,
                        frameworks::names()
                    ),
                );
            }
            f
        }
    };
    if let (Some(f), Some(r)) = (framework, role) {
        if let Err(e) = frameworks::check_role(f, r) {
            v.push(Rule::UnknownRole, e);
        }
    }
    framework
}

/// The job's topology as this member declares it.
struct Declared {
    topology: Topology,
    /// Not written but inferred from a one-role workload's size.
    inferred: bool,
}

/// `dljob.dev/replicas`, or a one-role workload's size when it is absent.
fn topology(
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
fn check_topology(
    job: &str,
    kind: Kind,
    framework: Option<&'static dyn Framework>,
    role: Option<&str>,
    (size, index_offset): (Option<u32>, Option<u32>),
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
        match t.count(r) {
            None => v.push(
                Rule::RoleNotInTopology,
                format!(
                    "role \"{r}\" is not in {} \"{t}\"; add it there or fix {}",
                    c::REPLICAS,
                    c::ROLE
                ),
            ),
            Some(count) => match (size, index_offset) {
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
    let digits = (t.roles().map(|(_, n)| n).max().unwrap_or(1) - 1)
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

/// Everything the job's members must agree on. `None` when the framework
/// or the topology is unknown (already a violation).
fn job_spec(
    meta: &Meta<'_>,
    framework: Option<&'static dyn Framework>,
    topology: Option<&Topology>,
    config: &Config,
    v: &mut Violations,
) -> Option<JobSpec> {
    let mut policies = parse_policies(meta, v);
    let port =
        parse_number(meta, c::PORT, 1, 65535, "a port number (1-65535)", v).map(|p| p as u16);
    let slots = slots(meta, topology, v);
    let elastic = elastic(meta, framework, topology, v);
    let ssh_path = ssh_path(meta, v);
    let gang = gang(meta, config, v);
    let queue = meta.annotation(c::QUEUE).map(str::to_owned);
    let tensorboard = tensorboard(meta, v);
    let (framework, topology) = (framework?, topology?);
    if meta.annotation(c::RESTART_SCOPE).is_none() {
        policies.restart_scope = framework.default_restart_scope();
    }
    Some(JobSpec {
        framework: framework.name().to_owned(),
        replicas: frameworks::in_rank_order(framework, topology),
        port: port.unwrap_or_else(|| config.port_for(framework.name(), framework.default_port())),
        slots,
        elastic,
        policies,
        ssh_path: framework.uses_ssh().then_some(ssh_path),
        gang,
        queue,
        tensorboard,
    })
}

/// `dljob.dev/tensorboard` as written; whether the pod has, mounts and
/// shares that volume is [`crate::tensorboard::check`]'s (it needs the
/// whole pod spec, which the reconciler's trimmed members do not keep).
fn tensorboard(meta: &Meta<'_>, v: &mut Violations) -> Option<c::TensorBoard> {
    let text = meta.annotation(c::TENSORBOARD)?;
    c::TensorBoard::parse(text)
        .map_err(|e| v.push(Rule::InvalidValue, e))
        .ok()
}

/// `dljob.dev/gang`, else the config's `gang`, else `none`.
fn gang(meta: &Meta<'_>, config: &Config, v: &mut Violations) -> String {
    let name = meta
        .annotation(c::GANG)
        .or(config.gang.as_deref())
        .unwrap_or(gang::NONE);
    if gang::by_name(name).is_none() {
        v.push(
            Rule::InvalidValue,
            format!(
                "{} \"{name}\" is not a gang scheduler; use one of {}",
                c::GANG,
                gang::names()
            ),
        );
    }
    name.to_owned()
}

/// What the chosen gang scheduler cannot work with.
fn check_gang(kind: Kind, meta: &Meta<'_>, spec: &JobSpec, v: &mut Violations) {
    let Some(scheduler) = spec.scheduler() else {
        return;
    };
    if let Some(queue) = &spec.queue {
        // It becomes a label value (Kueue) or an object's name (Volcano).
        if queue.len() > 63 || !queue.split('.').all(c::is_dns_label) {
            v.push(
                Rule::InvalidValue,
                format!(
                    "{} \"{queue}\" is not a queue name: at most 63 lowercase letters, digits, '-' and '.'",
                    c::QUEUE
                ),
            );
        }
        if !scheduler.queues() {
            v.push(
                Rule::InvalidValue,
                format!(
                    "{} \"{queue}\" is for the kueue and volcano gang schedulers; {} is \"{}\"",
                    c::QUEUE,
                    c::GANG,
                    spec.gang
                ),
            );
        }
    }
    // Kueue admits a StatefulSet or Job carrying its queue label as a
    // workload of its own and leaves its pods out of any pod group.
    let own_queue = meta.labels[0].and_then(|l| l.get(gang::kueue::QUEUE_NAME));
    if spec.gang == "kueue" && kind != Kind::Pod && own_queue.is_some() {
        v.push(
            Rule::GangConflict,
            format!(
                "label {} on the {} itself makes Kueue admit it as a workload of its own, outside the job's pod group: remove it and set {} (or put the label on the pod template)",
                gang::kueue::QUEUE_NAME,
                kind.as_str(),
                c::QUEUE
            ),
        );
    }
}

/// `dljob.dev/slots`: one count, or counts per range of worker indexes
/// (each within the topology's workers).
fn slots(meta: &Meta<'_>, topology: Option<&Topology>, v: &mut Violations) -> Slots {
    let Some(text) = meta.annotation(c::SLOTS) else {
        return Slots::uniform(DEFAULT_SLOTS);
    };
    if !text.contains('=') {
        let what = format!("a slot count (1-{})", c::MAX_SLOTS);
        return parse_number(meta, c::SLOTS, 1, c::MAX_SLOTS, &what, v)
            .map_or_else(|| Slots::uniform(DEFAULT_SLOTS), Slots::uniform);
    }
    let slots = match Slots::parse(text) {
        Ok(s) => s,
        Err(e) => {
            v.push(Rule::InvalidValue, e);
            return Slots::uniform(DEFAULT_SLOTS);
        }
    };
    let workers = topology.map(|t| t.count_or_zero("worker"));
    if let (Some(last), Some(n)) = (slots.last_index(), workers) {
        if last >= n {
            v.push(
                Rule::InvalidValue,
                format!(
                    "{} \"{text}\" names worker {last}, but the job has {n} worker{} (0 to {})",
                    c::SLOTS,
                    if n == 1 { "" } else { "s" },
                    n.saturating_sub(1)
                ),
            );
        }
    }
    slots
}

/// `dljob.dev/elastic`, for frameworks with elastic training, covering the
/// topology's size.
fn elastic(
    meta: &Meta<'_>,
    framework: Option<&'static dyn Framework>,
    topology: Option<&Topology>,
    v: &mut Violations,
) -> Option<Elastic> {
    let e = match Elastic::parse(meta.annotation(c::ELASTIC)?) {
        Ok(e) => e,
        Err(msg) => {
            v.push(Rule::InvalidValue, msg);
            return None;
        }
    };
    if framework.is_some_and(|f| !f.elastic()) {
        v.push(
            Rule::ElasticNotSupported,
            format!(
                "annotation {} is only for {} jobs: remove it",
                c::ELASTIC,
                frameworks::elastic_names()
            ),
        );
    }
    if let Some(t) = topology {
        if t.total() < e.min || t.total() > e.max {
            v.push(
                Rule::InvalidValue,
                format!(
                    "{} \"{e}\" does not include the {} replicas of {} \"{t}\"",
                    c::ELASTIC,
                    t.total(),
                    c::REPLICAS
                ),
            );
        }
    }
    Some(e)
}

/// `dljob.dev/ssh-path`, without a trailing '/'.
fn ssh_path(meta: &Meta<'_>, v: &mut Violations) -> String {
    match meta.annotation(c::SSH_PATH) {
        None => DEFAULT_SSH_PATH.to_owned(),
        Some(p) if p.starts_with('/') && p.len() > 1 => p.trim_end_matches('/').to_owned(),
        Some(p) => {
            v.push(
                Rule::InvalidValue,
                format!(
                    "{} \"{p}\" must be an absolute directory path, e.g. /root/.ssh",
                    c::SSH_PATH
                ),
            );
            DEFAULT_SSH_PATH.to_owned()
        }
    }
}

/// `dljob.dev/ordered-start`.
fn ordered_start(meta: &Meta<'_>, v: &mut Violations) -> bool {
    match meta.annotation(c::ORDERED_START) {
        None | Some("false") => false,
        Some("true") => true,
        Some(other) => {
            v.push(
                Rule::InvalidValue,
                format!(
                    "{} \"{other}\" must be \"true\" or \"false\"",
                    c::ORDERED_START
                ),
            );
            false
        }
    }
}

/// `dljob.dev/container`, which must name a container of the pod.
fn container(kind: Kind, object: &Value, meta: &Meta<'_>, v: &mut Violations) -> Option<String> {
    let name = meta.annotation(c::CONTAINER)?;
    let spec = at(object, kind.pod_path()).and_then(|p| p.get("spec"));
    let names: Vec<&str> = spec
        .map(object::containers)
        .unwrap_or(&[])
        .iter()
        .map(object::name_of)
        .collect();
    if !names.contains(&name) {
        v.push(
            Rule::UnknownContainer,
            format!(
                "{} \"{name}\" names no container of this {}; containers are {}",
                c::CONTAINER,
                kind.as_str(),
                names.join(", ")
            ),
        );
    }
    Some(name.to_owned())
}

/// `dljob.dev/index-offset`: on a StatefulSet or Indexed Job (and the pods
/// they make), never on a plain pod (whose `dljob.dev/index` says it all).
fn index_offset(kind: Kind, object: &Value, meta: &Meta<'_>, v: &mut Violations) -> Option<u32> {
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
            v.push(
                Rule::InvalidValue,
                format!(
                    "{} \"{s}\" is not an index (0 to {})",
                    c::INDEX_OFFSET,
                    c::MAX_REPLICAS - 1
                ),
            );
            None
        }
    }
}

/// What one pod of a workload (its template) or a plain pod requests:
/// every container's requests, else its limits (the API server makes
/// requests of limits where only those are set).
fn pod_requests(kind: Kind, object: &Value) -> Vec<(String, String)> {
    let Some(spec) = at(object, kind.pod_path()).and_then(|p| p.get("spec")) else {
        return Vec::new();
    };
    let mut out = Vec::new();
    for container in object::containers(spec) {
        let resources = container.get("resources");
        let requests = resources
            .and_then(|r| r.get("requests"))
            .and_then(Value::as_object);
        let limits = resources
            .and_then(|r| r.get("limits"))
            .and_then(Value::as_object);
        let mut names: Vec<&String> = requests
            .into_iter()
            .chain(limits)
            .flat_map(|m| m.keys())
            .collect();
        names.sort();
        names.dedup();
        for name in names {
            let quantity = requests
                .and_then(|m| m.get(name))
                .or_else(|| limits.and_then(|m| m.get(name)));
            let text = match quantity {
                Some(Value::String(s)) => s.clone(),
                Some(Value::Number(n)) => n.to_string(),
                _ => continue,
            };
            out.push((name.clone(), text));
        }
    }
    out
}

fn size_field(kind: Kind) -> &'static str {
    if kind == Kind::Job {
        "completions"
    } else {
        "replicas"
    }
}

fn size_mismatch(kind: Kind, n: u32, role: &str, count: u32, t: &Topology) -> String {
    format!(
        "{} {} is {n} but {} \"{t}\" declares {role}={count}; make them equal (change the topology on every member of the job)",
        kind.as_str(),
        size_field(kind),
        c::REPLICAS
    )
}

fn owner_name(owner: PodOwner) -> &'static str {
    match owner {
        PodOwner::StatefulSet => "StatefulSet",
        PodOwner::Job => "Job",
        PodOwner::None => "user",
    }
}

/// StatefulSet `replicas` (default 1) or Job `completions`; Job shape
/// checks; no `dljob.dev/index` on a workload.
fn workload_size(kind: Kind, object: &Value, meta: &Meta<'_>, v: &mut Violations) -> Option<u32> {
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

fn size_of(kind: Kind, object: &Value, v: &mut Violations) -> Option<u32> {
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

fn pod_index(
    object: &Value,
    meta: &Meta<'_>,
    role: Option<&str>,
    topology: Option<&Topology>,
    index_offset: Option<u32>,
    v: &mut Violations,
) -> (Option<u32>, PodOwner) {
    let owner = pod_owner(object);
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
                    v.push(
                        Rule::InvalidIndex,
                        format!("{} \"{s}\" is not a number: use 0 to count-1", c::INDEX),
                    );
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
                other => format!(
                    "{} pod index {i} is out of range: role \"{r}\" has {n} replica{} in {} \"{t}\"; scale the {} back to {n}, or change the topology on every member of the job",
                    owner_name(other),
                    if n == 1 { "" } else { "s" },
                    c::REPLICAS,
                    owner_name(other)
                ),
            });
        }
    }
    (index, owner)
}

fn parse_number(
    meta: &Meta<'_>,
    key: &str,
    min: u32,
    max: u32,
    what: &str,
    v: &mut Violations,
) -> Option<u32> {
    let s = meta.annotation(key)?;
    match s.trim().parse::<u32>() {
        Ok(n) if (min..=max).contains(&n) => Some(n),
        _ => {
            v.push(Rule::InvalidValue, format!("{key} \"{s}\" is not {what}"));
            None
        }
    }
}

fn parse_policies(meta: &Meta<'_>, v: &mut Violations) -> Policies {
    let mut p = Policies::default();
    if let Some(s) = meta.annotation(c::RESTART_POLICY) {
        match RestartPolicy::parse(s) {
            Some(r) => p.restart = r,
            None => v.push(
                Rule::InvalidValue,
                format!(
                    "{} \"{s}\" is not a restart policy; use one of {}",
                    c::RESTART_POLICY,
                    RestartPolicy::VALUES
                ),
            ),
        }
    }
    if let Some(s) = meta.annotation(c::RESTART_SCOPE) {
        match RestartScope::parse(s) {
            Some(r) => p.restart_scope = r,
            None => v.push(
                Rule::InvalidValue,
                format!(
                    "{} \"{s}\" is not a restart scope; use one of {}",
                    c::RESTART_SCOPE,
                    RestartScope::VALUES
                ),
            ),
        }
    }
    if let Some(s) = meta.annotation(c::CLEAN_POD_POLICY) {
        match CleanPodPolicy::parse(s) {
            Some(r) => p.clean_pod = r,
            None => v.push(
                Rule::InvalidValue,
                format!(
                    "{} \"{s}\" is not a clean-pod policy; use one of {}",
                    c::CLEAN_POD_POLICY,
                    CleanPodPolicy::VALUES
                ),
            ),
        }
    }
    let limit = format!("a whole number from 0 to {}", c::MAX_BACKOFF_LIMIT);
    if let Some(n) = parse_number(meta, c::BACKOFF_LIMIT, 0, c::MAX_BACKOFF_LIMIT, &limit, v) {
        p.backoff_limit = n;
    }
    p.ttl_seconds_after_finished = parse_number(
        meta,
        c::TTL_SECONDS_AFTER_FINISHED,
        0,
        u32::MAX,
        "a whole number of seconds (0 or more)",
        v,
    );
    p.active_deadline_seconds = parse_number(
        meta,
        c::ACTIVE_DEADLINE_SECONDS,
        1,
        u32::MAX,
        "a whole number of seconds (1 or more)",
        v,
    );
    p
}

/// How the framework container was chosen.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum ContainerChoice {
    /// `dljob.dev/container`.
    Annotation,
    /// `kubectl.kubernetes.io/default-container`.
    DefaultContainer,
    /// The container named after the framework.
    FrameworkName,
    /// The only container requesting an accelerator.
    Accelerator,
    /// A guess among several containers: the first requesting an
    /// accelerator when several do, else the first.
    Guess,
    /// The pod's only container.
    Only,
}

/// One container as the picker sees it.
pub struct ContainerFacts<'a> {
    pub name: &'a str,
    /// Requests an extended resource (a device such as `nvidia.com/gpu`).
    pub accelerator: bool,
}

/// The one container rule (the webhook and the reconciler both use it):
/// `dljob.dev/container`, else `kubectl.kubernetes.io/default-container`,
/// else the container named after the framework, else the only container
/// requesting an accelerator, else the first (a guess when there are
/// several). `None` when the named container does not exist.
pub fn pick_container(
    annotation: Option<&str>,
    default_container: Option<&str>,
    framework: &str,
    containers: &[ContainerFacts<'_>],
) -> Option<(usize, ContainerChoice)> {
    let by_name = |n: &str| containers.iter().position(|c| c.name == n);
    if let Some(n) = annotation {
        return by_name(n).map(|i| (i, ContainerChoice::Annotation));
    }
    if let Some(i) = default_container.and_then(by_name) {
        return Some((i, ContainerChoice::DefaultContainer));
    }
    if let Some(i) = by_name(framework) {
        return Some((i, ContainerChoice::FrameworkName));
    }
    if containers.len() == 1 {
        return Some((0, ContainerChoice::Only));
    }
    let mut accelerated = (0..containers.len()).filter(|i| containers[*i].accelerator);
    match (accelerated.next(), accelerated.next()) {
        (Some(i), None) => Some((i, ContainerChoice::Accelerator)),
        (Some(i), Some(_)) => Some((i, ContainerChoice::Guess)),
        (None, _) if containers.is_empty() => None,
        (None, _) => Some((0, ContainerChoice::Guess)),
    }
}

/// Chooses the framework container of a pod (or pod template, `pod` being
/// the value holding `spec`) by [`pick_container`].
pub fn framework_container(m: &MemberSpec, pod: &Value) -> Option<usize> {
    framework_container_choice(m, pod).map(|(i, _)| i)
}

fn framework_container_choice(m: &MemberSpec, pod: &Value) -> Option<(usize, ContainerChoice)> {
    let containers = object::containers(pod.get("spec")?);
    let facts: Vec<ContainerFacts<'_>> = containers
        .iter()
        .map(|c| ContainerFacts {
            name: object::name_of(c),
            accelerator: object::requests_extended_resource(c),
        })
        .collect();
    pick_container(
        m.container.as_deref(),
        object::meta_str(pod, &[], "annotations", c::K8S_DEFAULT_CONTAINER),
        m.framework.name(),
        &facts,
    )
}

/// A pod with several containers whose framework container was guessed:
/// say which one, and how to choose. Checked on the object the user writes.
fn container_warning(m: &MemberSpec, object: &Value, warnings: &mut Vec<String>) {
    if m.owner != PodOwner::None {
        return;
    }
    let Some(pod) = at(object, m.kind.pod_path()) else {
        return;
    };
    if let Some((i, ContainerChoice::Guess)) = framework_container_choice(m, pod) {
        let containers = object::containers(&pod["spec"]);
        let names: Vec<&str> = containers.iter().map(object::name_of).collect();
        warnings.push(format!(
            "the pod has containers {}; dljob wires \"{}\" as the framework container (a guess: none is named {}, marked {}, or the only one requesting an accelerator); set {}: <name> to choose",
            names.join(", "),
            names[i],
            m.framework.name(),
            c::K8S_DEFAULT_CONTAINER,
            c::CONTAINER
        ));
    }
}

/// mpi/chainer: the hostfile gives each worker `dljob.dev/slots` slots; a
/// worker whose framework container requests a different number of GPUs
/// probably wants them equal. Checked on the object the user writes (the
/// workload's template or the plain pod), where a warning reaches them.
fn slots_warning(m: &MemberSpec, object: &Value, warnings: &mut Vec<String>) {
    if !m.framework.uses_slots() || m.role != "worker" || m.owner != PodOwner::None {
        return;
    }
    let Some(pod) = at(object, m.kind.pod_path()) else {
        return;
    };
    let Some(i) = framework_container(m, pod) else {
        return;
    };
    let gpus = object::gpu_count(&object::containers(&pod["spec"])[i]).unwrap_or(0);
    if gpus == 0 {
        return;
    }
    let slots = &m.spec.slots;
    if slots.is_uniform() {
        let n = slots.default_count();
        if gpus != n {
            warnings.push(format!(
                "the worker's framework container requests {gpus} GPUs but the hostfile gives each worker {n} slot{}; set {}: \"{gpus}\" on every member",
                if n == 1 { "" } else { "s" },
                c::SLOTS
            ));
        }
        return;
    }
    // Per range: the indexes this member's pods are.
    let (first, end) = match (m.index, m.index_offset, m.size) {
        (Some(i), _, _) => (i, i + 1),
        (None, Some(offset), Some(size)) => (offset, offset.saturating_add(size)),
        _ => (0, m.spec.replicas.count_or_zero("worker")),
    };
    if let Some(i) = (first..end).find(|i| slots.of_worker(*i) != gpus) {
        warnings.push(format!(
            "the worker's framework container requests {gpus} GPUs but {} \"{slots}\" gives worker {i} {} slot{}; give the range {first}-{} {gpus} slots on every member",
            c::SLOTS,
            slots.of_worker(i),
            if slots.of_worker(i) == 1 { "" } else { "s" },
            end.saturating_sub(1)
        ));
    }
}

impl MemberSpec {
    /// The framework's view of the job.
    pub fn job_view<'a>(&'a self, config: &'a Config) -> frameworks::Job<'a> {
        frameworks::Job {
            name: &self.job,
            namespace: &self.namespace,
            cluster_domain: &config.cluster_domain,
            topology: &self.spec.replicas,
            port: self.spec.port,
            slots: &self.spec.slots,
            elastic: self.spec.elastic,
        }
    }

    /// Where the SSH Secret is mounted (mpi/chainer).
    pub fn ssh_path(&self) -> &str {
        self.spec.ssh_path.as_deref().unwrap_or(DEFAULT_SSH_PATH)
    }
}
