//! The user-facing contract: label and annotation keys (ARCHITECTURE.md §1) and their
//! typed parsing. Everything here is pure and allocation-light.

use std::borrow::Cow;
use std::fmt;

use schemars::{JsonSchema, Schema, SchemaGenerator};
use serde::{Deserialize, Serialize};

/// Label: the job name. Selects members for the webhooks and the Service.
pub(crate) const JOB: &str = "dljob.dev/job";
/// Label: the member's role within its framework.
pub(crate) const ROLE: &str = "dljob.dev/role";
/// Annotation: the framework name.
pub(crate) const FRAMEWORK: &str = "dljob.dev/framework";
/// Annotation: the whole job's topology, e.g. `ps=2,worker=4`.
pub(crate) const REPLICAS: &str = "dljob.dev/replicas";
/// Annotation (plain Pods): replica index within the role.
pub(crate) const INDEX: &str = "dljob.dev/index";
/// Annotation (StatefulSets, Indexed Jobs): the member is one of several
/// sets of its role, covering the role's indexes from this one on
/// (pod index = offset + ordinal or completion index).
pub(crate) const INDEX_OFFSET: &str = "dljob.dev/index-offset";
/// Annotation: override of the framework's default port.
pub(crate) const PORT: &str = "dljob.dev/port";
/// Annotation: the name of the framework container.
pub(crate) const CONTAINER: &str = "dljob.dev/container";
/// Annotation (mpi/chainer): slots per worker host in the hostfile.
pub(crate) const SLOTS: &str = "dljob.dev/slots";
/// Annotation (mpi/chainer): the MPI implementation the launcher runs
/// (`OpenMPI`, `Intel`, `MPICH`: the MPI operator's spelling).
pub(crate) const MPI_IMPLEMENTATION: &str = "dljob.dev/mpi-implementation";
/// Annotation (pytorch): elastic range `min:max`.
pub(crate) const ELASTIC: &str = "dljob.dev/elastic";
/// Annotation (StatefulSet): keep the API server's `OrderedReady` start.
pub(crate) const ORDERED_START: &str = "dljob.dev/ordered-start";
/// Annotation: `"false"` keeps dljob's wait for the job's names out of the
/// member's pods.
pub(crate) const WAIT_FOR_NAMES: &str = "dljob.dev/wait-for-names";
/// The init container that waits for a member's names to resolve.
pub const WAIT_FOR_NAMES_CONTAINER: &str = "dljob-wait-for-names";
/// How the termination message of a [`WAIT_FOR_NAMES_CONTAINER`] that gave
/// up begins (`dljob wait-for-names` writes it; the reconciler reads it).
pub const NAME_WAIT_GAVE_UP: &str = "dljob: gave up";
/// The image `dljob-wait-for-names` runs from when neither the config
/// (`waitForNamesImage`) nor the serving pod says another: this release's.
pub const DEFAULT_IMAGE: &str = concat!("ghcr.io/dljob/dljob:", env!("CARGO_PKG_VERSION"));
/// Annotation (mpi/chainer): where the SSH Secret is mounted.
pub(crate) const SSH_PATH: &str = "dljob.dev/ssh-path";
/// The scheduling gate dljob puts on a launcher pod at admission and the
/// reconciler removes once every other member runs.
pub(crate) const WORKERS_READY_GATE: &str = "dljob.dev/workers-ready";
/// Annotation written by dljob on pods: the hostfile content.
pub(crate) const HOSTFILE: &str = "dljob.dev/hostfile";
/// Annotation written by the reconciler on stopped StatefulSets.
pub(crate) const SCALED_FROM: &str = "dljob.dev/scaled-from";
/// The reconciler's mark on what is left of a finished run (pods, and the
/// workloads a `None` clean-pod policy leaves running): the uid of the
/// DLJob whose run it was. Such a member never counts toward a later run
/// of the same job, and makes no new DLJob.
pub(crate) const FINISHED_RUN: &str = "dljob.dev/finished-run";
/// On a PodTemplate the reconciler saved a bare pod's manifest in, to
/// recreate it after a retry: the pod's name.
pub(crate) const RECREATES: &str = "dljob.dev/recreates";
/// Policy annotations.
pub(crate) const RESTART_POLICY: &str = "dljob.dev/restart-policy";
pub(crate) const BACKOFF_LIMIT: &str = "dljob.dev/backoff-limit";
pub(crate) const CLEAN_POD_POLICY: &str = "dljob.dev/clean-pod-policy";
pub(crate) const TTL_SECONDS_AFTER_FINISHED: &str = "dljob.dev/ttl-seconds-after-finished";
pub(crate) const ACTIVE_DEADLINE_SECONDS: &str = "dljob.dev/active-deadline-seconds";
/// Annotation: what a retryable failure restarts (`Pod` or `Job`).
pub(crate) const RESTART_SCOPE: &str = "dljob.dev/restart-scope";
/// Annotation: the gang scheduler (`none`, `kueue`, `volcano`,
/// `coscheduling`, `kubernetes`).
pub(crate) const GANG: &str = "dljob.dev/gang";
/// Annotation: the node label whose one domain (a zone, a rack, a block)
/// should hold the whole job: `KEY`, `required:KEY` or `preferred:KEY`.
pub(crate) const TOPOLOGY: &str = "dljob.dev/topology";
/// Annotation: the gang scheduler's queue (Kueue LocalQueue, Volcano Queue).
pub(crate) const QUEUE: &str = "dljob.dev/queue";
/// Annotation: `VOLUME:PATH`, the shared volume (by its name in the pod
/// spec) and the log directory inside it that the job's TensorBoard reads.
pub(crate) const TENSORBOARD: &str = "dljob.dev/tensorboard";
/// Annotation written by the reconciler on a DLJob: the volume (as JSON,
/// from the pod spec of the first member it saw) its TensorBoard mounts.
pub(crate) const TENSORBOARD_VOLUME: &str = "dljob.dev/tensorboard-volume";
/// Label of the TensorBoard pod (and its Service's selector): the job it
/// serves. Not `dljob.dev/job`, which makes a pod a member.
pub(crate) const TENSORBOARD_OF: &str = "dljob.dev/tensorboard-of";

/// Annotation: the operator whose images the job's pods run
/// (`kubeflow`, `mpi-operator`): besides dljob's own env, admission gives
/// them what those images read (JAX's `PROCESS_ID`, …).
pub(crate) const COMPAT: &str = "dljob.dev/compat";
/// The `dljob.dev/compat` values.
pub(crate) const COMPAT_KUBEFLOW: &str = "kubeflow";
pub(crate) const COMPAT_MPI_OPERATOR: &str = "mpi-operator";
/// `volcano`, or `volcano:ROLE=TASK,…` naming the Volcano task of each role
/// whose task was named otherwise (Volcano's env and files are named by
/// task).
pub(crate) const COMPAT_VOLCANO: &str = "volcano";
/// Where admission puts Volcano's host files (`<task>.host`).
pub const VOLCANO_DIR: &str = "/etc/volcano";
/// The volume that mounts them, the job's ConfigMap [`volcano_config_map`].
pub const VOLCANO_VOLUME: &str = "dljob-volcano";
/// Prefix of the pod annotations that held them before they were the
/// ConfigMap's (`<prefix><task>.host`): such a pod's stay as written.
pub const VOLCANO_HOSTS_PREFIX: &str = "volcano.dljob.dev/";

/// The ConfigMap of a job's Volcano files, `<job>-volcano`, which the
/// reconciler keeps and Volcano-compatible pods mount.
pub(crate) fn volcano_config_map(job: &str) -> String {
    format!("{job}-volcano")
}
/// Longest Volcano task name under compat: `<task>.host` names an
/// annotation, whose name part holds at most 63 characters.
pub(crate) const MAX_VOLCANO_TASK: usize = 58;

/// Checks a `dljob.dev/compat` value.
pub(crate) fn check_compat(text: &str) -> Result<(), String> {
    let shown = quoted(text);
    if [COMPAT_KUBEFLOW, COMPAT_MPI_OPERATOR, COMPAT_VOLCANO].contains(&text) {
        return Ok(());
    }
    let Some(pairs) = text.strip_prefix("volcano:") else {
        return Err(format!(
            "{COMPAT} \"{shown}\" is not an operator dljob knows the images of; use {COMPAT_KUBEFLOW}, {COMPAT_MPI_OPERATOR} or {COMPAT_VOLCANO} (volcano:ROLE=TASK,… where a role's Volcano task has another name)"
        ));
    };
    for pair in pairs.split(',') {
        let ok = pair.split_once('=').is_some_and(|(role, task)| {
            is_dns_label(role) && is_dns_label(task) && task.len() <= MAX_VOLCANO_TASK
        });
        if !ok {
            return Err(format!(
                "{COMPAT} \"{shown}\": \"{}\" is not ROLE=TASK (each a DNS label, the task at most {MAX_VOLCANO_TASK} characters)",
                quoted(pair)
            ));
        }
    }
    Ok(())
}

/// Under `dljob.dev/compat: volcano[:…]`, the Volcano task name of `role`;
/// `None` under another compat or none.
pub(crate) fn volcano_task<'a>(compat: Option<&'a str>, role: &'a str) -> Option<&'a str> {
    let compat = compat?;
    if compat == COMPAT_VOLCANO {
        return Some(role);
    }
    let pairs = compat.strip_prefix("volcano:")?;
    Some(
        pairs
            .split(',')
            .filter_map(|p| p.split_once('='))
            .find(|(r, _)| *r == role)
            .map_or(role, |(_, t)| t),
    )
}

/// Kubernetes-owned keys dljob reads.
pub(crate) const K8S_DEFAULT_CONTAINER: &str = "kubectl.kubernetes.io/default-container";
pub(crate) const K8S_POD_INDEX: &str = "apps.kubernetes.io/pod-index";
pub(crate) const K8S_JOB_COMPLETION_INDEX: &str = "batch.kubernetes.io/job-completion-index";

/// Annotations that every member of one job must agree on and that a
/// workload copies into its pod template.
pub(crate) const JOB_WIDE_ANNOTATIONS: &[&str] = &[
    FRAMEWORK,
    REPLICAS,
    PORT,
    SLOTS,
    MPI_IMPLEMENTATION,
    ELASTIC,
    RESTART_POLICY,
    BACKOFF_LIMIT,
    CLEAN_POD_POLICY,
    TTL_SECONDS_AFTER_FINISHED,
    ACTIVE_DEADLINE_SECONDS,
    SSH_PATH,
    GANG,
    QUEUE,
    TOPOLOGY,
    RESTART_SCOPE,
    TENSORBOARD,
    COMPAT,
];

/// Annotations a user may set on a member that are not job-wide.
pub(crate) const MEMBER_ANNOTATIONS: &[&str] = &[
    INDEX,
    CONTAINER,
    ORDERED_START,
    INDEX_OFFSET,
    WAIT_FOR_NAMES,
];

/// Annotations dljob itself writes.
pub(crate) const OWN_ANNOTATIONS: &[&str] = &[HOSTFILE, SCALED_FROM, FINISHED_RUN];

/// Directory the hostfile volume is mounted at.
pub const HOSTFILE_DIR: &str = "/etc/dljob";
/// Path of the hostfile inside containers.
pub const HOSTFILE_PATH: &str = "/etc/dljob/hostfile";
/// Name of the downwardAPI volume that projects the hostfile annotation.
pub const HOSTFILE_VOLUME: &str = "dljob-hostfile";
/// The downward-API field the hostfile volume projects.
pub const HOSTFILE_FIELD: &str = "metadata.annotations['dljob.dev/hostfile']";
/// Name of the Secret volume holding the job's SSH keys (mpi, chainer).
pub const SSH_VOLUME: &str = "dljob-ssh";
/// Name of the container port dljob adds.
pub const PORT_NAME: &str = "dljob";
/// File mode of the SSH Secret's files (0600).
pub const SSH_MODE: u32 = 0o600;
/// The SSH Secret's private key.
pub const SSH_PRIVATE_KEY: &str = "id_ed25519";
/// The SSH Secret's public key.
pub const SSH_PUBLIC_KEY: &str = "id_ed25519.pub";
/// The SSH Secret's `authorized_keys`, the one file every sshd reads.
pub const SSH_AUTHORIZED_KEYS: &str = "authorized_keys";
/// The SSH Secret's ssh client `config`.
pub const SSH_CONFIG: &str = "config";
/// Every file of the SSH Secret, as the pods that run `ssh` mount them.
pub const SSH_FILES: [&str; 4] = [
    SSH_PRIVATE_KEY,
    SSH_PUBLIC_KEY,
    SSH_AUTHORIZED_KEYS,
    SSH_CONFIG,
];

/// Longest job name: leaves room for `-<role>-<index>` in a 63-char DNS label.
pub(crate) const MAX_JOB_NAME: usize = 40;

/// Most replicas a job may declare in total. Where a framework reads every
/// host (`TF_CONFIG`, an MPI launcher's hostfile) admission time and memory
/// grow with the count, and an unbounded count let one object make the
/// webhook build gigabytes of host names (found by fuzzing). The sizes that
/// actually break a pod are checked separately (`limits`).
pub const MAX_REPLICAS: u32 = 10_000;

/// Most roles a job may declare. Frameworks have at most four; a generic
/// job names its own. Admission does work per role (its hosts, its env
/// var), and a pod any tenant may create could otherwise declare ten
/// thousand roles and cost a second of the webhook's CPU per review.
pub const MAX_ROLES: usize = 32;

/// Longest value of a dljob annotation on a member. The longest that
/// means something fits: 32 roles of 63-character names in
/// `dljob.dev/replicas` are about 2.2 KiB. Admission refuses longer ones,
/// and the reconciler's caches drop them, so that each cached object holds
/// at most this much per dljob key.
pub(crate) const MAX_VALUE: usize = 4096;

/// Longest TensorBoard volume (its JSON, as the pod spec gives it) that
/// dljob records on a DLJob and keeps in its caches; a shared volume's
/// source (a claim, nfs, a CSI driver's attributes) is a few hundred bytes.
pub(crate) const MAX_TENSORBOARD_VOLUME: usize = 8192;

/// Whether `key` is a label or annotation dljob reads or writes on a
/// member: what its caches keep of a member's metadata.
pub(crate) fn known_key(key: &str) -> bool {
    key == JOB
        || key == ROLE
        || JOB_WIDE_ANNOTATIONS.contains(&key)
        || MEMBER_ANNOTATIONS.contains(&key)
        || OWN_ANNOTATIONS.contains(&key)
}

/// Longest piece of a user's value that a message quotes: a refusal or a
/// warning names what is wrong, and an annotation value can be 256 KiB.
pub(crate) const MAX_QUOTED: usize = 64;

/// `text` in at most `limit` bytes: whole, or cut on a character boundary
/// and ended with "…".
pub fn cut(text: &str, limit: usize) -> std::borrow::Cow<'_, str> {
    if text.len() <= limit {
        return text.into();
    }
    const ELLIPSIS: &str = "…";
    let mut end = limit.saturating_sub(ELLIPSIS.len());
    while !text.is_char_boundary(end) {
        end -= 1;
    }
    format!("{}{ELLIPSIS}", &text[..end]).into()
}

/// `text`, or its first [`MAX_QUOTED`] bytes [`cut`] with how long it
/// was: for quoting a user's value in a message.
pub(crate) fn quoted(text: &str) -> std::borrow::Cow<'_, str> {
    match cut(text, MAX_QUOTED) {
        std::borrow::Cow::Owned(short) => format!("{short} ({} bytes)", text.len()).into(),
        whole => whole,
    }
}

/// The job's topology: roles with their replica counts, in declared order.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Topology {
    roles: Vec<(String, u32)>,
}

/// Why a `dljob.dev/replicas` value does not parse; the message says where.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
pub enum TopologyError {
    #[error("{REPLICAS} is empty: write role=count pairs, e.g. \"ps=2,worker=4\"")]
    Empty,
    #[error("{REPLICAS} entry \"{entry}\" has no '=': write role=count, e.g. \"worker=4\"")]
    MissingEquals { entry: String },
    #[error("{REPLICAS} entry \"{entry}\": role is empty")]
    EmptyRole { entry: String },
    #[error("{REPLICAS} entry \"{entry}\": count \"{count}\" is not a number")]
    NotANumber { entry: String, count: String },
    #[error("{REPLICAS} entry \"{entry}\": count must be at least 1 (leave the role out instead)")]
    Zero { entry: String },
    #[error("{REPLICAS}: role \"{role}\" appears twice")]
    Duplicate { role: String },
    #[error("{REPLICAS} entry \"{entry}\": role \"{role}\" is not a DNS label (lowercase letters, digits and '-', starting with a letter)")]
    BadRole { entry: String, role: String },
    #[error("{REPLICAS} declares {total} replicas in all; at most {MAX_REPLICAS} are supported")]
    TooMany { total: u64 },
    #[error("{REPLICAS} declares {count} roles; a job has at most {MAX_ROLES}")]
    TooManyRoles { count: usize },
}

impl Topology {
    /// Parses `role=count[,role=count…]`; whitespace around items is ignored.
    pub fn parse(text: &str) -> Result<Self, TopologyError> {
        let text = text.trim();
        if text.is_empty() {
            return Err(TopologyError::Empty);
        }
        let count = text.split(',').count();
        if count > MAX_ROLES {
            return Err(TopologyError::TooManyRoles { count });
        }
        let mut roles: Vec<(String, u32)> = Vec::with_capacity(count);
        let mut total: u64 = 0;
        for raw in text.split(',') {
            let entry = raw.trim();
            let quote = |s: &str| quoted(s).into_owned();
            let Some((role, count)) = entry.split_once('=') else {
                return Err(TopologyError::MissingEquals {
                    entry: quote(entry),
                });
            };
            let (role, count) = (role.trim(), count.trim());
            if role.is_empty() {
                return Err(TopologyError::EmptyRole {
                    entry: quote(entry),
                });
            }
            if !is_dns1035_label(role) {
                return Err(TopologyError::BadRole {
                    entry: quote(entry),
                    role: quote(role),
                });
            }
            let n: u32 = count.parse().map_err(|_| TopologyError::NotANumber {
                entry: quote(entry),
                count: quote(count),
            })?;
            if n == 0 {
                return Err(TopologyError::Zero {
                    entry: quote(entry),
                });
            }
            if roles.iter().any(|(r, _)| r == role) {
                return Err(TopologyError::Duplicate { role: quote(role) });
            }
            roles.push((role.to_owned(), n));
            total += u64::from(n);
        }
        if total > u64::from(MAX_REPLICAS) {
            return Err(TopologyError::TooMany { total });
        }
        Ok(Self { roles })
    }

    /// A topology with one role (inferred from a workload's size).
    pub(crate) fn single(role: &str, count: u32) -> Self {
        Self {
            roles: vec![(role.to_owned(), count)],
        }
    }

    /// Replica count of `role`, if the topology names it.
    pub fn count(&self, role: &str) -> Option<u32> {
        self.roles.iter().find(|(r, _)| r == role).map(|(_, n)| *n)
    }

    /// Count of `role`, 0 when absent.
    pub(crate) fn count_or_zero(&self, role: &str) -> u32 {
        self.count(role).unwrap_or(0)
    }

    /// Total replicas over all roles.
    pub fn total(&self) -> u32 {
        self.roles.iter().map(|(_, n)| n).sum()
    }

    /// Roles in declared order.
    pub fn roles(&self) -> impl Iterator<Item = (&str, u32)> {
        self.roles.iter().map(|(r, n)| (r.as_str(), *n))
    }

    /// Same roles and counts, whatever the order they were written in.
    /// The same roles and counts with `order`'s roles first, in that order;
    /// roles `order` does not name follow in declared order.
    pub(crate) fn ordered_by(&self, order: &[&str]) -> Topology {
        let named = order
            .iter()
            .filter_map(|o| self.roles.iter().find(|(r, _)| r == o));
        let rest = self
            .roles
            .iter()
            .filter(|(r, _)| !order.contains(&r.as_str()));
        Topology {
            roles: named.chain(rest).cloned().collect(),
        }
    }

    pub fn same_as(&self, other: &Topology) -> bool {
        self.roles.len() == other.roles.len()
            && self.roles.iter().all(|(r, n)| other.count(r) == Some(*n))
    }
}

impl fmt::Display for Topology {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        for (i, (role, n)) in self.roles.iter().enumerate() {
            if i > 0 {
                f.write_str(",")?;
            }
            write!(f, "{role}={n}")?;
        }
        Ok(())
    }
}

/// What to do when a member exits with a retryable code (128–255).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Default)]
pub enum RestartPolicy {
    /// Retry on 128–255, fail on 1–127 (default).
    #[default]
    ExitCode,
    /// Never retry: any non-zero exit fails the job.
    Never,
}

/// The MPI implementation whose launcher (`mpirun`, `mpiexec`) reads the
/// hostfile and env dljob writes (`dljob.dev/mpi-implementation`).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Default)]
pub enum MpiImplementation {
    /// OpenMPI 4 (ORTE) and 5 (PRRTE): `host slots=N`, `OMPI_MCA_*` and
    /// `PRTE_MCA_*` (default).
    #[default]
    OpenMpi,
    /// Intel MPI's Hydra: `host:N`, `I_MPI_HYDRA_*`.
    Intel,
    /// MPICH's Hydra: `host:N`, `HYDRA_*`.
    Mpich,
}

impl MpiImplementation {
    pub(crate) const VALUES: &'static str = "OpenMPI, Intel, MPICH";
    pub(crate) fn parse(s: &str) -> Option<Self> {
        match s {
            "OpenMPI" => Some(Self::OpenMpi),
            "Intel" => Some(Self::Intel),
            "MPICH" => Some(Self::Mpich),
            _ => None,
        }
    }
    pub fn as_str(self) -> &'static str {
        match self {
            Self::OpenMpi => "OpenMPI",
            Self::Intel => "Intel",
            Self::Mpich => "MPICH",
        }
    }
    /// Whether its launcher is Hydra's `mpiexec` (hostfile lines `host:N`).
    pub(crate) fn is_hydra(self) -> bool {
        self != Self::OpenMpi
    }
}

impl fmt::Display for MpiImplementation {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.as_str())
    }
}

/// What a retryable failure restarts (`dljob.dev/restart-scope`).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Default)]
pub enum RestartScope {
    /// The failed member only.
    #[default]
    Pod,
    /// Every member, counted as one restart: collective frameworks lose
    /// every rank's state when one dies.
    Job,
}

impl RestartScope {
    pub(crate) const VALUES: &'static str = "Pod, Job";
    pub(crate) fn parse(s: &str) -> Option<Self> {
        match s {
            "Pod" => Some(Self::Pod),
            "Job" => Some(Self::Job),
            _ => None,
        }
    }
    pub fn as_str(self) -> &'static str {
        match self {
            Self::Pod => "Pod",
            Self::Job => "Job",
        }
    }
}

impl fmt::Display for RestartScope {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.as_str())
    }
}

/// What to stop when the job finishes.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Default)]
pub enum CleanPodPolicy {
    /// Stop what still runs (default).
    #[default]
    Running,
    /// Also remove finished pods.
    All,
    /// Leave everything.
    None,
}

/// The job-wide policies of ARCHITECTURE.md §1, serialized as the DLJob spec's
/// fields of the same names.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct Policies {
    /// `dljob.dev/restart-policy`.
    #[serde(rename = "restartPolicy")]
    pub restart: RestartPolicy,
    /// `dljob.dev/restart-scope`, else the framework's default (a DLJob
    /// written before it existed restarted pods only).
    #[serde(default)]
    pub restart_scope: RestartScope,
    /// `dljob.dev/backoff-limit`: retries before the job fails.
    pub backoff_limit: u32,
    /// `dljob.dev/clean-pod-policy`.
    #[serde(rename = "cleanPodPolicy")]
    pub clean_pod: CleanPodPolicy,
    /// `dljob.dev/ttl-seconds-after-finished`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub ttl_seconds_after_finished: Option<u32>,
    /// `dljob.dev/active-deadline-seconds`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub active_deadline_seconds: Option<u32>,
}

impl Default for Policies {
    fn default() -> Self {
        Self {
            restart: RestartPolicy::ExitCode,
            restart_scope: RestartScope::Pod,
            backoff_limit: DEFAULT_BACKOFF_LIMIT,
            clean_pod: CleanPodPolicy::Running,
            ttl_seconds_after_finished: None,
            active_deadline_seconds: None,
        }
    }
}

pub(crate) const DEFAULT_BACKOFF_LIMIT: u32 = 3;
/// Upper bounds that keep the values meaningful.
pub(crate) const MAX_BACKOFF_LIMIT: u32 = 10_000;
pub(crate) const MAX_SLOTS: u32 = 1024;

impl RestartPolicy {
    pub(crate) const VALUES: &'static str = "ExitCode, Never";
    pub(crate) fn parse(s: &str) -> Option<Self> {
        match s {
            "ExitCode" => Some(Self::ExitCode),
            "Never" => Some(Self::Never),
            _ => None,
        }
    }
    pub(crate) fn as_str(self) -> &'static str {
        match self {
            Self::ExitCode => "ExitCode",
            Self::Never => "Never",
        }
    }
}

impl CleanPodPolicy {
    pub(crate) const VALUES: &'static str = "Running, All, None";
    pub(crate) fn parse(s: &str) -> Option<Self> {
        match s {
            "Running" => Some(Self::Running),
            "All" => Some(Self::All),
            "None" => Some(Self::None),
            _ => None,
        }
    }
    pub(crate) fn as_str(self) -> &'static str {
        match self {
            Self::Running => "Running",
            Self::All => "All",
            Self::None => "None",
        }
    }
}

/// Hostfile slots (`dljob.dev/slots`, mpi and chainer): one number for
/// every host (`"4"`), or per range of worker indexes (`"0-1=8,2-5=4"`,
/// a set's range each) with an optional bare number for every other host
/// (`"2,0-1=8"`: the chainer master, a GPU launcher, uncovered workers).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Slots {
    default: u32,
    /// (first, last, slots), by first index, not overlapping.
    ranges: Vec<(u32, u32, u32)>,
}

impl Default for Slots {
    fn default() -> Self {
        Self::uniform(1)
    }
}

impl Slots {
    pub(crate) fn uniform(n: u32) -> Self {
        Self {
            default: n,
            ranges: Vec::new(),
        }
    }

    /// Parses the annotation; every count 1 to [`MAX_SLOTS`].
    pub(crate) fn parse(s: &str) -> Result<Self, String> {
        let shown = quoted(s);
        let bad = |why: &str| {
            format!(
                "{SLOTS} \"{shown}\" {why}: write a slot count (1-{MAX_SLOTS}), or worker index ranges like \"0-1=8,2-5=4\" with an optional count for the other hosts first"
            )
        };
        let count = |t: &str| match t.trim().parse::<u32>() {
            Ok(n) if (1..=MAX_SLOTS).contains(&n) => Ok(n),
            _ => Err(bad(&format!(
                "has \"{}\" where a slot count goes",
                t.trim()
            ))),
        };
        let mut out = Self::uniform(1);
        let mut default_seen = false;
        for entry in s.split(',') {
            match entry.split_once('=') {
                None if !default_seen => {
                    out.default = count(entry)?;
                    default_seen = true;
                }
                None => return Err(bad("has two counts without a range")),
                Some((range, n)) => {
                    let index = |t: &str| {
                        t.trim()
                            .parse::<u32>()
                            .map_err(|_| bad(&format!("has \"{}\" where an index goes", t.trim())))
                    };
                    let (first, last) = match range.split_once('-') {
                        Some((a, b)) => (index(a)?, index(b)?),
                        None => (index(range)?, index(range)?),
                    };
                    if last < first {
                        return Err(bad(&format!(
                            "has the range {first}-{last}, which is empty"
                        )));
                    }
                    out.ranges.push((first, last, count(n)?));
                }
            }
        }
        out.ranges.sort_unstable();
        if let Some(w) = out.ranges.windows(2).find(|w| w[1].0 <= w[0].1) {
            return Err(bad(&format!(
                "gives worker {} two counts (ranges {}-{} and {}-{})",
                w[1].0, w[0].0, w[0].1, w[1].0, w[1].1
            )));
        }
        Ok(out)
    }

    /// Slots of worker `index`: a binary search of the ranges (sorted, not
    /// overlapping), as a launcher's hostfile asks for every worker.
    pub(crate) fn of_worker(&self, index: u32) -> u32 {
        let after = self.ranges.partition_point(|(first, _, _)| *first <= index);
        after
            .checked_sub(1)
            .map(|i| self.ranges[i])
            .filter(|(_, last, _)| index <= *last)
            .map_or(self.default, |(_, _, n)| n)
    }

    /// Slots of every host no range names.
    pub(crate) fn default_count(&self) -> u32 {
        self.default
    }

    /// The last worker index a range names, if any.
    pub(crate) fn last_index(&self) -> Option<u32> {
        self.ranges.last().map(|(_, last, _)| *last)
    }

    /// Whether it is one number for every host.
    pub(crate) fn is_uniform(&self) -> bool {
        self.ranges.is_empty()
    }
}

impl fmt::Display for Slots {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let mut first = true;
        if self.ranges.is_empty() || self.default != 1 {
            write!(f, "{}", self.default)?;
            first = false;
        }
        for (a, b, n) in &self.ranges {
            if !first {
                f.write_str(",")?;
            }
            first = false;
            if a == b {
                write!(f, "{a}={n}")?;
            } else {
                write!(f, "{a}-{b}={n}")?;
            }
        }
        Ok(())
    }
}

/// PyTorch elastic range (`dljob.dev/elastic: "min:max"`).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Elastic {
    pub min: u32,
    pub max: u32,
}

impl Elastic {
    /// Parses `min:max` with `1 <= min <= max`.
    pub(crate) fn parse(s: &str) -> Result<Self, String> {
        let shown = quoted(s);
        let bad = || {
            format!(
                "{ELASTIC} \"{shown}\" is not a range: write \"min:max\" with 1 <= min <= max, e.g. \"2:4\""
            )
        };
        let (a, b) = s.split_once(':').ok_or_else(bad)?;
        let min: u32 = a.trim().parse().map_err(|_| bad())?;
        let max: u32 = b.trim().parse().map_err(|_| bad())?;
        if min == 0 || min > max {
            return Err(bad());
        }
        Ok(Self { min, max })
    }
}

impl fmt::Display for Elastic {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}:{}", self.min, self.max)
    }
}

/// What the job's TensorBoard reads (`dljob.dev/tensorboard: VOLUME:PATH`):
/// the volume, by its name in the members' pod spec, and the log directory
/// as a path inside that volume (relative to its root, not to where a
/// container mounts it).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct TensorBoard {
    pub volume: String,
    pub path: String,
}

impl TensorBoard {
    /// Parses `VOLUME:PATH`: a volume name (a DNS label) and a relative path
    /// that stays inside the volume.
    pub fn parse(s: &str) -> Result<Self, String> {
        let shown = quoted(s);
        let Some((volume, path)) = s.split_once(':') else {
            return Err(format!(
                "{TENSORBOARD} \"{shown}\" is not VOLUME:PATH: name the volume holding the logs and the log directory inside it, e.g. \"logs:runs/resnet\""
            ));
        };
        let problem = if !is_dns_label(volume) {
            format!("\"{volume}\" is not a volume name (a DNS label: lowercase letters, digits and '-')")
        } else if path.is_empty() {
            "the log directory is empty: write the path inside the volume, e.g. \"runs/resnet\" (\".\" for its root)".to_owned()
        } else if path.starts_with('/') {
            format!("the log directory \"{path}\" is absolute: write it relative to the volume's root (where a container mounts the volume does not count), e.g. \"{}\"", path.trim_start_matches('/'))
        } else if path.split('/').any(|segment| segment == "..") {
            format!("the log directory \"{path}\" leaves the volume ('..'): write a path inside it")
        } else if path.chars().any(char::is_control) {
            "the log directory contains a control character".to_owned()
        } else {
            return Ok(Self {
                volume: volume.to_owned(),
                path: path.to_owned(),
            });
        };
        Err(format!("{TENSORBOARD} \"{shown}\": {problem}"))
    }
}

impl fmt::Display for TensorBoard {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}:{}", self.volume, self.path)
    }
}

/// Where the job's pods go (`dljob.dev/topology`): one domain of the node
/// label `key`, as a must or as a wish.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Placement {
    pub key: String,
    pub required: bool,
}

impl Placement {
    /// Parses `KEY`, `required:KEY` or `preferred:KEY` (a label key has no
    /// ':', so the mode cannot be mistaken for part of it).
    pub(crate) fn parse(s: &str) -> Result<Self, String> {
        let shown = quoted(s);
        let (required, key) = match s.split_once(':') {
            Some(("required", key)) => (true, key),
            Some(("preferred", key)) => (false, key),
            Some((mode, _)) => {
                return Err(format!(
                    "{TOPOLOGY} \"{shown}\": \"{}\" is not a mode; write KEY, required:KEY or preferred:KEY with a node label key, e.g. \"topology.kubernetes.io/zone\"",
                    quoted(mode)
                ))
            }
            None => (true, s),
        };
        if !is_label_key(key) {
            return Err(format!(
                "{TOPOLOGY} \"{shown}\": \"{}\" is not a label key (an optional DNS subdomain and '/', then at most 63 letters, digits, '-', '_' or '.', starting and ending alphanumeric), e.g. \"topology.kubernetes.io/zone\"",
                quoted(key)
            ));
        }
        Ok(Self {
            key: key.to_owned(),
            required,
        })
    }
}

impl fmt::Display for Placement {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let mode = if self.required {
            "required"
        } else {
            "preferred"
        };
        write!(f, "{mode}:{}", self.key)
    }
}

/// A Kubernetes label key: `[prefix/]name`, the prefix a DNS subdomain of
/// at most 253 characters, the name 1-63 of `[-A-Za-z0-9_.]`, alphanumeric
/// at both ends.
pub(crate) fn is_label_key(key: &str) -> bool {
    let (prefix, name) = match key.split_once('/') {
        Some((prefix, name)) => (Some(prefix), name),
        None => (None, key),
    };
    let edge = |c: Option<char>| c.is_some_and(|c| c.is_ascii_alphanumeric());
    prefix.is_none_or(|p| p.len() <= 253 && p.split('.').all(is_dns_label))
        && (1..=63).contains(&name.len())
        && name
            .chars()
            .all(|c| c.is_ascii_alphanumeric() || matches!(c, '-' | '_' | '.'))
        && edge(name.chars().next())
        && edge(name.chars().last())
}

/// RFC 1123 DNS label: lowercase alphanumerics and '-', at most 63 chars,
/// starting and ending alphanumeric.
pub(crate) fn is_dns_label(s: &str) -> bool {
    let b = s.as_bytes();
    !b.is_empty()
        && b.len() <= 63
        && b.iter()
            .all(|c| c.is_ascii_lowercase() || c.is_ascii_digit() || *c == b'-')
        && b[0] != b'-'
        && b[b.len() - 1] != b'-'
}

/// RFC 1035 label: a DNS label that starts with a letter.
pub fn is_dns1035_label(s: &str) -> bool {
    is_dns_label(s) && s.as_bytes()[0].is_ascii_lowercase()
}

/// The stable hostname of replica `index` of `role` in `job`: `j-r-i`.
pub(crate) fn pod_hostname(job: &str, role: &str, index: u32) -> String {
    let mut s = String::with_capacity(job.len() + role.len() + 12);
    s.push_str(job);
    s.push('-');
    s.push_str(role);
    s.push('-');
    push_u32(&mut s, index);
    s
}

/// Appends a decimal number to `s` (no allocation, no formatter: it runs
/// once per host of a 1000-host hostfile).
pub(crate) fn push_u32(s: &mut String, n: u32) {
    s.push_str(itoa::Buffer::new().format(n));
}

/// Serialized (in the DLJob spec) exactly as the annotation is written, and
/// read back by the annotation's own parser, so the spec and the
/// annotations cannot drift apart. The schema lets the API server refuse
/// what the parser would.
macro_rules! as_annotation_text {
    ($t:ty, $parse:expr, $schema:expr) => {
        impl Serialize for $t {
            fn serialize<S: serde::Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
                s.collect_str(self)
            }
        }
        impl<'de> Deserialize<'de> for $t {
            fn deserialize<D: serde::Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
                let text = Cow::<'de, str>::deserialize(d)?;
                let parse: fn(&str) -> Result<$t, String> = $parse;
                parse(&text).map_err(serde::de::Error::custom)
            }
        }
        impl JsonSchema for $t {
            fn inline_schema() -> bool {
                true
            }
            fn schema_name() -> Cow<'static, str> {
                Cow::Borrowed(stringify!($t))
            }
            fn json_schema(_: &mut SchemaGenerator) -> Schema {
                $schema
            }
        }
    };
}

/// One `role=count` entry of a topology (roles are DNS-1035 labels).
const ENTRY_PATTERN: &str = "[a-z]([-a-z0-9]*[a-z0-9])?=[1-9][0-9]*";

as_annotation_text!(
    Topology,
    |s| Topology::parse(s).map_err(|e| e.to_string()),
    schemars::json_schema!({
        "type": "string",
        "pattern": format!("^{ENTRY_PATTERN}(,{ENTRY_PATTERN})*$"),
    })
);
as_annotation_text!(
    Slots,
    Slots::parse,
    schemars::json_schema!({"type": "string", "pattern": "^([1-9][0-9]*|[0-9]+(-[0-9]+)?=[1-9][0-9]*)(,[0-9]+(-[0-9]+)?=[1-9][0-9]*)*$"})
);
as_annotation_text!(
    Elastic,
    Elastic::parse,
    schemars::json_schema!({"type": "string", "pattern": "^[1-9][0-9]*:[1-9][0-9]*$"})
);
as_annotation_text!(
    Placement,
    Placement::parse,
    schemars::json_schema!({
        "type": "string",
        "pattern": "^(required:|preferred:)?([a-z0-9]([-a-z0-9]*[a-z0-9])?(\\.[a-z0-9]([-a-z0-9]*[a-z0-9])?)*/)?[A-Za-z0-9]([-A-Za-z0-9_.]*[A-Za-z0-9])?$",
        "maxLength": 330,
    })
);
as_annotation_text!(
    TensorBoard,
    TensorBoard::parse,
    schemars::json_schema!({
        "type": "string",
        "pattern": "^[a-z0-9]([-a-z0-9]*[a-z0-9])?:[^/]",
    })
);
as_annotation_text!(
    RestartPolicy,
    |s| RestartPolicy::parse(s).ok_or_else(|| format!("unknown restart policy {s:?}")),
    schemars::json_schema!({"type": "string", "enum": ["ExitCode", "Never"]})
);
as_annotation_text!(
    RestartScope,
    |s| RestartScope::parse(s).ok_or_else(|| format!("unknown restart scope {s:?}")),
    schemars::json_schema!({"type": "string", "enum": ["Pod", "Job"]})
);
as_annotation_text!(
    MpiImplementation,
    |s| MpiImplementation::parse(s).ok_or_else(|| format!("unknown MPI implementation {s:?}")),
    schemars::json_schema!({"type": "string", "enum": ["OpenMPI", "Intel", "MPICH"]})
);
as_annotation_text!(
    CleanPodPolicy,
    |s| CleanPodPolicy::parse(s).ok_or_else(|| format!("unknown clean-pod policy {s:?}")),
    schemars::json_schema!({"type": "string", "enum": ["Running", "All", "None"]})
);

impl fmt::Display for RestartPolicy {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.as_str())
    }
}

impl fmt::Display for CleanPodPolicy {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.as_str())
    }
}

#[cfg(test)]
mod bounds {
    use super::*;

    /// A topology of more roles than any job has is refused before any
    /// work per role, and what a refusal quotes of an entry is bounded.
    #[test]
    fn roles_are_capped_and_quoted_entries_bounded() {
        let many: Vec<String> = (0..=MAX_ROLES).map(|i| format!("r{i}=1")).collect();
        assert_eq!(
            Topology::parse(&many.join(",")),
            Err(TopologyError::TooManyRoles { count: 33 })
        );
        let at_most: Vec<String> = (0..MAX_ROLES).map(|i| format!("r{i}=1")).collect();
        assert_eq!(
            Topology::parse(&at_most.join(",")).unwrap().roles().count(),
            32
        );
        let long = format!("worker={}", "9".repeat(100_000));
        let err = Topology::parse(&long).unwrap_err().to_string();
        assert!(err.len() < 300, "{}", err.len());
        assert!(err.contains("… (100007 bytes)"), "{err}");
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The DLJob schema's pattern for a spec field (what the API server
    /// checks) accepts everything its parser does, and refuses the zero
    /// counts the parser refuses.
    #[test]
    fn the_crd_patterns_accept_what_the_parsers_do_and_no_zero_counts() {
        fn pattern<T: JsonSchema>() -> regex::Regex {
            let schema = T::json_schema(&mut schemars::SchemaGenerator::default());
            let p = schema
                .get("pattern")
                .and_then(|p| p.as_str())
                .expect("a pattern");
            regex::Regex::new(p).unwrap()
        }
        // (the schema's pattern, the parser, parsed, refused by both)
        type Case = (
            regex::Regex,
            fn(&str) -> bool,
            &'static [&'static str],
            &'static [&'static str],
        );
        let cases: [Case; 4] = [
            (
                pattern::<Topology>(),
                |s| Topology::parse(s).is_ok(),
                &["worker=1", "master=1,worker=3", "ps=2,worker=10", "a-b=7"],
                &["worker=0", "master=1,worker=0"],
            ),
            (
                pattern::<Slots>(),
                |s| Slots::parse(s).is_ok(),
                &["8", "0-1=8", "4,0-1=8,2-5=4", "3=2", "10"],
                &["0", "0-1=0", "4,2=0", "0=8,0"],
            ),
            (
                pattern::<Placement>(),
                |s| Placement::parse(s).is_ok(),
                &[
                    "topology.kubernetes.io/zone",
                    "required:rack",
                    "preferred:example.com/block-1",
                    "a",
                ],
                &[
                    "zone:rack",
                    "Topology.Kubernetes.io/zone",
                    "a/",
                    "-rack",
                    "required:",
                ],
            ),
            (
                pattern::<Elastic>(),
                |s| Elastic::parse(s).is_ok(),
                &["1:1", "2:4", "10:20"],
                &["0:2", "2:0", "0:0"],
            ),
        ];
        for (regex, parses, valid, refused) in cases {
            for s in valid {
                assert!(parses(s), "{s} parses");
                assert!(regex.is_match(s), "{regex} accepts {s}");
            }
            for s in refused {
                assert!(!parses(s), "{s} does not parse");
                assert!(!regex.is_match(s), "{regex} refuses {s}");
            }
        }
    }

    #[test]
    fn slots_are_one_count_or_counts_per_worker_range() {
        let s = Slots::parse("2,0=4,1-2=2").unwrap();
        assert_eq!(
            (
                s.of_worker(0),
                s.of_worker(1),
                s.of_worker(2),
                s.of_worker(3)
            ),
            (4, 2, 2, 2)
        );
        assert_eq!(s.default_count(), 2);
        assert_eq!(s.last_index(), Some(2));
        assert_eq!(s.to_string(), "2,0=4,1-2=2");
        // Without a bare count the other hosts get 1; ranges in any order.
        let s = Slots::parse("3-5=4,0-2=8").unwrap();
        assert_eq!(
            (s.of_worker(1), s.of_worker(4), s.default_count()),
            (8, 4, 1)
        );
        assert_eq!(s.to_string(), "0-2=8,3-5=4");
        assert_eq!(Slots::parse("4").unwrap(), Slots::uniform(4));
        assert_eq!(Slots::uniform(4).to_string(), "4");
        let err = |t: &str| Slots::parse(t).unwrap_err();
        assert_eq!(
            err("0-3=8,2-5=4"),
            "dljob.dev/slots \"0-3=8,2-5=4\" gives worker 2 two counts (ranges 0-3 and 2-5): write a slot count (1-1024), or worker index ranges like \"0-1=8,2-5=4\" with an optional count for the other hosts first"
        );
        assert!(err("2,3").contains("has two counts without a range"));
        assert!(err("0-1=0").contains("has \"0\" where a slot count goes"));
        assert!(err("3-1=2").contains("has the range 3-1, which is empty"));
        assert!(err("a-1=2").contains("has \"a\" where an index goes"));
    }

    /// 700 ranges with gaps between them (as a 5 KB annotation may hold,
    /// for 7 000 workers): every worker gets its range's count, and a
    /// worker in a gap or past the last range the default.
    #[test]
    fn slots_of_many_ranges_are_found_for_every_worker() {
        let text: Vec<String> = std::iter::once("2".to_owned())
            .chain((0..700u32).map(|k| format!("{}-{}={}", k * 10, k * 10 + 4, k % 7 + 1)))
            .collect();
        let s = Slots::parse(&text.join(",")).unwrap();
        for i in 0..7_020u32 {
            let expected = if i < 7_000 && i % 10 <= 4 {
                (i / 10) % 7 + 1
            } else {
                2
            };
            assert_eq!(s.of_worker(i), expected, "worker {i}");
        }
    }

    #[test]
    fn topology_keeps_declared_order_and_counts() {
        let t = Topology::parse("chief=1, worker=3 ,ps=2").unwrap();
        assert_eq!(
            t.roles().collect::<Vec<_>>(),
            vec![("chief", 1), ("worker", 3), ("ps", 2)]
        );
        assert_eq!(t.total(), 6);
        assert_eq!(t.count("ps"), Some(2));
        assert_eq!(t.count("evaluator"), None);
        assert_eq!(t.to_string(), "chief=1,worker=3,ps=2");
    }

    #[test]
    fn topology_error_says_where_it_failed() {
        let e = Topology::parse("ps=2,worker=three").unwrap_err();
        assert_eq!(
            e.to_string(),
            "dljob.dev/replicas entry \"worker=three\": count \"three\" is not a number"
        );
        assert_eq!(
            Topology::parse("ps=2,worker").unwrap_err(),
            TopologyError::MissingEquals {
                entry: "worker".into()
            }
        );
        assert_eq!(
            Topology::parse("worker=0").unwrap_err(),
            TopologyError::Zero {
                entry: "worker=0".into()
            }
        );
        assert_eq!(
            Topology::parse("worker=1,worker=2").unwrap_err(),
            TopologyError::Duplicate {
                role: "worker".into()
            }
        );
        assert_eq!(Topology::parse("  ").unwrap_err(), TopologyError::Empty);
        assert!(matches!(
            Topology::parse("Worker=2").unwrap_err(),
            TopologyError::BadRole { .. }
        ));
        // A role names hosts and the DLJob schema's pattern: a letter first.
        assert_eq!(
            Topology::parse("1st=2").unwrap_err().to_string(),
            "dljob.dev/replicas entry \"1st=2\": role \"1st\" is not a DNS label (lowercase letters, digits and '-', starting with a letter)"
        );
        assert!(matches!(
            Topology::parse("=2").unwrap_err(),
            TopologyError::EmptyRole { .. }
        ));
        assert!(matches!(
            Topology::parse("worker=-1").unwrap_err(),
            TopologyError::NotANumber { .. }
        ));
    }

    #[test]
    fn topologies_compare_regardless_of_order() {
        let a = Topology::parse("ps=2,worker=4").unwrap();
        let b = Topology::parse("worker=4,ps=2").unwrap();
        let c = Topology::parse("worker=4").unwrap();
        assert!(a.same_as(&b));
        assert!(!a.same_as(&c));
        assert!(!c.same_as(&a));
    }

    #[test]
    fn elastic_range_parses_and_rejects() {
        assert_eq!(Elastic::parse("2:4").unwrap(), Elastic { min: 2, max: 4 });
        assert!(Elastic::parse("4:2").is_err());
        assert!(Elastic::parse("0:2").is_err());
        assert!(Elastic::parse("3").is_err());
    }

    #[test]
    fn tensorboard_is_a_volume_and_a_path_inside_it() {
        let tb = TensorBoard::parse("logs:runs/resnet").unwrap();
        assert_eq!(
            (tb.volume.as_str(), tb.path.as_str()),
            ("logs", "runs/resnet")
        );
        assert_eq!(tb.to_string(), "logs:runs/resnet");
        // The first ':' ends the volume name; the path may hold more.
        assert_eq!(TensorBoard::parse("logs:a:b").unwrap().path, "a:b");
        assert_eq!(TensorBoard::parse("logs:.").unwrap().path, ".");
        let refused = |s: &str| TensorBoard::parse(s).unwrap_err();
        assert_eq!(
            refused("logs"),
            "dljob.dev/tensorboard \"logs\" is not VOLUME:PATH: name the volume holding the logs and the log directory inside it, e.g. \"logs:runs/resnet\""
        );
        assert_eq!(
            refused("Logs:x"),
            "dljob.dev/tensorboard \"Logs:x\": \"Logs\" is not a volume name (a DNS label: lowercase letters, digits and '-')"
        );
        assert_eq!(
            refused("logs:"),
            "dljob.dev/tensorboard \"logs:\": the log directory is empty: write the path inside the volume, e.g. \"runs/resnet\" (\".\" for its root)"
        );
        assert_eq!(
            refused("logs:/logs/runs"),
            "dljob.dev/tensorboard \"logs:/logs/runs\": the log directory \"/logs/runs\" is absolute: write it relative to the volume's root (where a container mounts the volume does not count), e.g. \"logs/runs\""
        );
        assert_eq!(
            refused("logs:runs/../../etc"),
            "dljob.dev/tensorboard \"logs:runs/../../etc\": the log directory \"runs/../../etc\" leaves the volume ('..'): write a path inside it"
        );
        assert!(refused("logs:a\nb").ends_with("contains a control character"));
    }

    #[test]
    fn dns_labels() {
        assert!(is_dns1035_label("resnet"));
        assert!(!is_dns1035_label("1resnet"));
        assert!(is_dns_label("1resnet"));
        assert!(!is_dns_label("res_net"));
        assert!(!is_dns_label("resnet-"));
        assert!(!is_dns_label(&"a".repeat(64)));
    }

    #[test]
    fn hostnames_are_job_role_index() {
        assert_eq!(pod_hostname("resnet", "worker", 12), "resnet-worker-12");
        assert_eq!(pod_hostname("j", "ps", 0), "j-ps-0");
    }
}
