//! The job-wide keys every member must agree on ([`JobSpec`]): one parse
//! step per key.

use super::keys::Meta;
use super::DEFAULT_SLOTS;
use super::DEFAULT_SSH_PATH;
use crate::config::Config;
use crate::contract as c;
use crate::contract::CleanPodPolicy;
use crate::contract::Elastic;
use crate::contract::Policies;
use crate::contract::RestartPolicy;
use crate::contract::RestartScope;
use crate::contract::Slots;
use crate::contract::Topology;
use crate::crd::JobSpec;
use crate::frameworks;
use crate::frameworks::Framework;
use crate::gang;
use crate::object;
use crate::object::at;
use crate::object::Kind;
use crate::violation::Rule;
use crate::violation::Violations;
use serde_json::Value;

/// Everything the job's members must agree on. `None` when the framework
/// or the topology is unknown (already a violation).
pub(super) fn job_spec(
    meta: &Meta<'_>,
    framework: Option<&'static dyn Framework>,
    topology: Option<&Topology>,
    elastic: Option<Elastic>,
    config: &Config,
    v: &mut Violations,
) -> Option<JobSpec> {
    let mut policies = parse_policies(meta, v);
    let port =
        parse_number(meta, c::PORT, 1, 65535, "a port number (1-65535)", v).map(|p| p as u16);
    let slots = slots(meta, topology, v);
    let mpi_implementation = mpi_implementation(meta, framework, v);
    let ssh_path = ssh_path(meta, v);
    let gang = gang(meta, config, v);
    let queue = meta.annotation(c::QUEUE).map(str::to_owned);
    let topology_key = meta.annotation(c::TOPOLOGY).and_then(|text| {
        c::Placement::parse(text)
            .map_err(|e| v.push(Rule::InvalidValue, e))
            .ok()
    });
    let tensorboard = tensorboard(meta, v);
    let compat = compat(meta, topology, v);
    let (framework, topology) = (framework?, topology?);
    if meta.annotation(c::RESTART_SCOPE).is_none() {
        policies.restart_scope = framework.default_restart_scope();
    }
    Some(JobSpec {
        framework: framework.name().to_owned(),
        replicas: frameworks::in_rank_order(framework, topology),
        port: port.unwrap_or_else(|| config.port_for(framework.name(), framework.default_port())),
        slots,
        mpi_implementation,
        elastic,
        elastic_replicas: None,
        policies,
        ssh_path: framework.uses_ssh().then_some(ssh_path),
        gang,
        queue,
        topology: topology_key,
        tensorboard,
        compat,
    })
}

/// `dljob.dev/mpi-implementation`, for the frameworks that write an MPI
/// hostfile (mpi, chainer); elsewhere it would change nothing, so it is
/// refused. OpenMPI, the default, is kept as `None`: a job that names it
/// and one that does not are the same job.
pub(super) fn mpi_implementation(
    meta: &Meta<'_>,
    framework: Option<&'static dyn Framework>,
    v: &mut Violations,
) -> Option<c::MpiImplementation> {
    let text = meta.annotation(c::MPI_IMPLEMENTATION)?;
    let Some(implementation) = c::MpiImplementation::parse(text) else {
        v.push(
            Rule::InvalidValue,
            format!(
                "{} \"{}\" is not an MPI implementation dljob wires; use one of {} (the MPI operator's spelling)",
                c::MPI_IMPLEMENTATION,
                c::quoted(text),
                c::MpiImplementation::VALUES
            ),
        );
        return None;
    };
    match framework {
        Some(f) if !f.uses_slots() => {
            v.push(
                Rule::InvalidValue,
                format!(
                    "annotation {} is only for mpi and chainer jobs (framework {} runs no mpirun): remove it",
                    c::MPI_IMPLEMENTATION,
                    f.name()
                ),
            );
            None
        }
        _ => (implementation != c::MpiImplementation::OpenMpi).then_some(implementation),
    }
}

/// `dljob.dev/compat`: one of the operators whose images admission knows.
/// Under `volcano`, every role's task names files and annotations: the
/// tasks must be distinct, short enough, and name roles of the job.
pub(super) fn compat(
    meta: &Meta<'_>,
    topology: Option<&Topology>,
    v: &mut Violations,
) -> Option<String> {
    let text = meta.annotation(c::COMPAT)?;
    if let Err(e) = c::check_compat(text) {
        v.push(Rule::InvalidValue, e);
        return None;
    }
    if let (Some(topology), Some(pairs)) = (topology, text.strip_prefix("volcano")) {
        let mut problems = Vec::new();
        for (role, _) in pairs
            .trim_start_matches(':')
            .split(',')
            .filter_map(|p| p.split_once('='))
        {
            if topology.count(role).is_none() {
                problems.push(format!(
                    "it names role \"{}\", which the job has not",
                    c::quoted(role)
                ));
            }
        }
        let mut tasks: Vec<&str> = Vec::new();
        for (role, _) in topology.roles() {
            let task = c::volcano_task(Some(text), role).unwrap_or(role);
            if tasks.contains(&task) {
                problems.push(format!("two roles are task \"{task}\""));
            }
            if task.len() > c::MAX_VOLCANO_TASK {
                problems.push(format!(
                    "task \"{}\" is over {} characters (it names the annotation of its host file)",
                    c::quoted(task),
                    c::MAX_VOLCANO_TASK
                ));
            }
            tasks.push(task);
        }
        if !problems.is_empty() {
            v.push(
                Rule::InvalidValue,
                format!(
                    "{} \"{}\": {}; give each role its own task of at most {} characters",
                    c::COMPAT,
                    c::quoted(text),
                    problems.join("; "),
                    c::MAX_VOLCANO_TASK
                ),
            );
            return None;
        }
    }
    Some(text.to_owned())
}

/// `dljob.dev/tensorboard` as written; whether the pod has, mounts and
/// shares that volume is [`crate::tensorboard::check`]'s (it needs the
/// whole pod spec, which the reconciler's trimmed members do not keep).
pub(super) fn tensorboard(meta: &Meta<'_>, v: &mut Violations) -> Option<c::TensorBoard> {
    let text = meta.annotation(c::TENSORBOARD)?;
    c::TensorBoard::parse(text)
        .map_err(|e| v.push(Rule::InvalidValue, e))
        .ok()
}

/// `dljob.dev/gang`, else the config's `gang`, else `none`.
pub(super) fn gang(meta: &Meta<'_>, config: &Config, v: &mut Violations) -> String {
    let name = meta
        .annotation(c::GANG)
        .or(config.gang.as_deref())
        .unwrap_or(gang::NONE);
    if gang::by_name(name).is_none() {
        v.push(Rule::InvalidValue, {
            let name = c::quoted(name);
            format!(
                "{} \"{name}\" is not a gang scheduler; use one of {}",
                c::GANG,
                gang::names()
            )
        });
    }
    name.to_owned()
}

/// An elastic role growing past its declared count (a pod of such an index,
/// a workload of such a size: `reach` replicas) under a gang scheduler
/// whose group is the declared total: Kueue deletes pods beyond it.
pub(super) fn check_elastic_gang(
    (role, declared): (&str, u32),
    reach: Option<u32>,
    spec: &JobSpec,
    v: &mut Violations,
) {
    let (Some(reach), Some(scheduler)) = (reach, spec.scheduler()) else {
        return;
    };
    if reach > declared && scheduler.fixed_total() {
        v.push(
            Rule::IndexOutOfRange,
            format!(
                "role \"{role}\" would have {reach} replicas, more than the {declared} of {} \"{}\": under gang {} the job is one group of its declared {} pods and pods beyond it are deleted as excess, so an elastic job there keeps at most its declared size (it may shrink)",
                c::REPLICAS,
                spec.replicas,
                scheduler.name(),
                spec.replicas.total()
            ),
        );
    }
}

/// What the chosen gang scheduler cannot work with.
pub(super) fn check_gang(kind: Kind, meta: &Meta<'_>, spec: &JobSpec, v: &mut Violations) {
    let Some(scheduler) = spec.scheduler() else {
        return;
    };
    if let Some(placement) = &spec.topology {
        if let Some(why) = scheduler.topology_refusal(placement.required) {
            v.push(
                Rule::InvalidValue,
                format!(
                    "{} \"{}\" cannot be declared: {why}",
                    c::TOPOLOGY,
                    meta.annotation(c::TOPOLOGY).unwrap_or_default()
                ),
            );
        }
    }
    if let Some(queue) = &spec.queue {
        // It becomes a label value (Kueue) or an object's name (Volcano).
        if queue.len() > 63 || !queue.split('.').all(c::is_dns_label) {
            v.push(
                Rule::InvalidValue,
                { let queue = c::quoted(queue); format!(
                    "{} \"{queue}\" is not a queue name: at most 63 lowercase letters, digits, '-' and '.'",
                    c::QUEUE
                ) },
            );
        }
        if !scheduler.queues() {
            v.push(Rule::InvalidValue, {
                let queue = c::quoted(queue);
                format!(
                    "{} \"{queue}\" is for the kueue and volcano gang schedulers; {} is \"{}\"",
                    c::QUEUE,
                    c::GANG,
                    spec.gang
                )
            });
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
pub(super) fn slots(meta: &Meta<'_>, topology: Option<&Topology>, v: &mut Violations) -> Slots {
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
pub(super) fn elastic(
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
    if e.max > c::MAX_REPLICAS {
        v.push(
            Rule::InvalidValue,
            format!(
                "{} \"{e}\": a job has at most {} replicas in all",
                c::ELASTIC,
                c::MAX_REPLICAS
            ),
        );
    }
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

/// `dljob.dev/ssh-path`, without a trailing '/'. A clean absolute path of
/// plain names (letters, digits, `.`, `_`, `-`; no `.` or `..`, at most 255
/// bytes): it becomes mount paths and a line of the ssh client's config,
/// where a newline or `%` would be read as more than a path.
pub(super) fn ssh_path(meta: &Meta<'_>, v: &mut Violations) -> String {
    let clean = |p: &str| {
        let path = p.trim_end_matches('/');
        p.len() <= 255
            && path.starts_with('/')
            && path[1..].split('/').all(|part| {
                !part.is_empty()
                    && part != "."
                    && part != ".."
                    && part
                        .bytes()
                        .all(|b| b.is_ascii_alphanumeric() || matches!(b, b'.' | b'_' | b'-'))
            })
    };
    match meta.annotation(c::SSH_PATH) {
        None => DEFAULT_SSH_PATH.to_owned(),
        Some(p) if clean(p) => p.trim_end_matches('/').to_owned(),
        Some(p) => {
            v.push(
                Rule::InvalidValue,
                format!(
                    "{} \"{}\" must be a clean absolute directory path of letters, digits, '.', '_' and '-' (no '..', at most 255 bytes), e.g. /home/mpiuser/.ssh",
                    c::SSH_PATH,
                    c::quoted(p).escape_debug()
                ),
            );
            DEFAULT_SSH_PATH.to_owned()
        }
    }
}

/// `dljob.dev/ordered-start`.
pub(super) fn ordered_start(meta: &Meta<'_>, v: &mut Violations) -> bool {
    match meta.annotation(c::ORDERED_START) {
        None | Some("false") => false,
        Some("true") => true,
        Some(other) => {
            v.push(Rule::InvalidValue, {
                let other = c::quoted(other);
                format!(
                    "{} \"{other}\" must be \"true\" or \"false\"",
                    c::ORDERED_START
                )
            });
            false
        }
    }
}

/// `dljob.dev/wait-for-names`: `"true"` (the default) or `"false"`.
pub(super) fn wait_for_names(meta: &Meta<'_>, v: &mut Violations) -> bool {
    match meta.annotation(c::WAIT_FOR_NAMES) {
        None | Some("true") => true,
        Some("false") => false,
        Some(other) => {
            v.push(Rule::InvalidValue, {
                let other = c::quoted(other);
                format!(
                    "{} \"{other}\" must be \"true\" or \"false\"",
                    c::WAIT_FOR_NAMES
                )
            });
            true
        }
    }
}

/// What one pod of a workload (its template) or a plain pod requests:
/// every container's requests, else its limits (the API server makes
/// requests of limits where only those are set).
pub(super) fn pod_requests(kind: Kind, object: &Value) -> Vec<(String, String)> {
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

pub(super) fn parse_number(
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
            v.push(Rule::InvalidValue, {
                let s = c::quoted(s);
                format!("{key} \"{s}\" is not {what}")
            });
            None
        }
    }
}

pub(super) fn parse_policies(meta: &Meta<'_>, v: &mut Violations) -> Policies {
    let mut p = Policies::default();
    if let Some(s) = meta.annotation(c::RESTART_POLICY) {
        match RestartPolicy::parse(s) {
            Some(r) => p.restart = r,
            None => v.push(Rule::InvalidValue, {
                let s = c::quoted(s);
                format!(
                    "{} \"{s}\" is not a restart policy; use one of {}",
                    c::RESTART_POLICY,
                    RestartPolicy::VALUES
                )
            }),
        }
    }
    if let Some(s) = meta.annotation(c::RESTART_SCOPE) {
        match RestartScope::parse(s) {
            Some(r) => p.restart_scope = r,
            None => v.push(Rule::InvalidValue, {
                let s = c::quoted(s);
                format!(
                    "{} \"{s}\" is not a restart scope; use one of {}",
                    c::RESTART_SCOPE,
                    RestartScope::VALUES
                )
            }),
        }
    }
    if let Some(s) = meta.annotation(c::CLEAN_POD_POLICY) {
        match CleanPodPolicy::parse(s) {
            Some(r) => p.clean_pod = r,
            None => v.push(Rule::InvalidValue, {
                let s = c::quoted(s);
                format!(
                    "{} \"{s}\" is not a clean-pod policy; use one of {}",
                    c::CLEAN_POD_POLICY,
                    CleanPodPolicy::VALUES
                )
            }),
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
