//! Volcano's Job (`batch.volcano.sh/v1alpha1`): tasks, each a workload;
//! the framework from the job's plugins (pytorch, tensorflow, mpi; none: a
//! generic job whose roles are the task names), the task names mapped to
//! the framework's roles by the plugin's own flags; the job's policies
//! onto dljob's keys. `dljob.dev/compat: volcano` gives the pods what
//! Volcano's env, svc, ssh and mpi plugins give them.

use serde_json::{Map, Value};

use super::kubeflow::{self, ConvertedJob, Keys, Replica, ReplicaSpec, TemplateEdits};
use crate::contract as c;
use crate::object;

/// Spec fields dljob reads.
const FIELDS: &[&str] = &[
    "tasks",
    "minAvailable",
    "schedulerName",
    "queue",
    "plugins",
    "policies",
    "maxRetry",
    "ttlSecondsAfterFinished",
    "priorityClassName",
];

/// A task's fields dljob reads.
const TASK_FIELDS: &[&str] = &[
    "name",
    "replicas",
    "template",
    "policies",
    "minAvailable",
    "maxRetry",
];

/// The framework plugins: the plugin (named as the dljob framework it
/// makes the job), and per role the flag that names its task, which is
/// also the task's default name.
struct Plugin {
    framework: &'static str,
    /// (flag and default task name, dljob role).
    roles: &'static [(&'static str, &'static str)],
}

const PLUGINS: &[Plugin] = &[
    Plugin {
        framework: "pytorch",
        roles: &[("master", "master"), ("worker", "worker")],
    },
    Plugin {
        framework: "tensorflow",
        roles: &[
            ("chief", "chief"),
            ("worker", "worker"),
            ("ps", "ps"),
            ("evaluator", "evaluator"),
        ],
    },
    Plugin {
        framework: "mpi",
        roles: &[("master", "launcher"), ("worker", "worker")],
    },
];

/// Plugins dljob's wiring stands for (env, svc, ssh) besides the framework
/// ones.
const OTHER_PLUGINS: &[&str] = &["env", "svc", "ssh"];

/// Converts one Volcano Job: every problem found, not the first.
pub(crate) fn convert(job: &Value) -> Result<ConvertedJob, Vec<String>> {
    let mut problems = Vec::new();
    let mut warnings = Vec::new();
    let name = kubeflow::job_name(job, &mut problems)?;
    let Some(spec) = job.get("spec").and_then(Value::as_object) else {
        return Err(vec!["spec is missing or not a mapping".into()]);
    };
    for key in spec.keys() {
        if !FIELDS.contains(&key.as_str()) {
            problems.push(format!(
                "spec.{key} is not a field of a Volcano Job that dljob convert knows, so it cannot carry it over: remove it"
            ));
        }
    }
    let plugins = plugins(spec, &mut problems);
    let mut keys = Keys::new();
    other_plugin_flags(&plugins, &mut keys, &mut problems);
    // The ssh and svc plugins without a framework plugin: Volcano's own
    // MPI examples, whose master builds its host list from the svc
    // plugin's file and starts `mpiexec --host` over the ssh plugin's key.
    // Read as an MPI job whose tasks the mpi plugin would have named.
    let said = problems.len();
    let mpi_style_args = mpi_style_names(spec, &plugins, &mut problems);
    // Said once: why an ssh job without a framework plugin is not read.
    let mpi_style_said = problems.len() > said;
    let mpi_style: Option<Vec<&str>> = mpi_style_args
        .as_ref()
        .map(|a| a.iter().map(String::as_str).collect());
    let framework_plugin = plugins
        .iter()
        .find_map(|(n, args)| {
            PLUGINS
                .iter()
                .find(|p| p.framework == *n)
                .map(|p| (p, args))
        })
        .or_else(|| {
            let mpi = PLUGINS.iter().find(|p| p.framework == "mpi")?;
            mpi_style.as_ref().map(|args| (mpi, args))
        });
    if mpi_style.is_some() {
        warnings.push("no mpi plugin: read as an MPI job (the ssh and svc plugins' key and host files, every task's command kept as written); the launcher task's pod is held until its workers run, as the mpi plugin's gang would start them together".to_owned());
    }
    let framework = framework_plugin.map_or("generic", |(p, _)| p.framework);
    // Task name → role, and the port, from the plugin's flags.
    let (names, port) = match framework_plugin {
        Some((plugin, args)) => flags(plugin, args, &mut problems),
        None => (Vec::new(), None),
    };
    if plugins.iter().any(|(n, _)| *n == "ssh")
        && framework != "mpi"
        && mpi_style.is_none()
        && !mpi_style_said
    {
        problems.push("spec.plugins.ssh: dljob gives a job ssh keys only as an MPI job (the mpi plugin); add the mpi plugin or remove ssh".into());
    }

    let Some(tasks) = spec.get("tasks").and_then(Value::as_array) else {
        problems.push("spec.tasks is missing or not a list".into());
        return Err(problems);
    };
    let mut replicas: Vec<ReplicaSpec<'_>> = Vec::new();
    let mut places: Vec<usize> = Vec::new();
    let mut renamed: Vec<(String, String)> = Vec::new();
    // The tasks whose completion completes the job.
    let mut completing: Vec<String> = Vec::new();
    let job_retry = spec.get("maxRetry").and_then(Value::as_u64).unwrap_or(3);
    // A task left out above: the job's count of replicas is not known.
    let mut unmapped = false;
    for (i, task) in tasks.iter().enumerate() {
        let read = Reading {
            plugin: framework_plugin.map(|(p, _)| p),
            names: &names,
            job_retry,
        };
        match read.task(i, task, &mut keys, &mut problems) {
            Task::Replica { replica, completes } => {
                if replica.type_name != replica.role {
                    renamed.push((replica.role.clone(), replica.type_name.clone()));
                }
                if completes {
                    completing.push(replica.role.clone());
                }
                replicas.push(replica);
                places.push(i);
            }
            Task::Unmapped => unmapped = true,
            Task::Refused => {}
        }
    }
    if let Some(policies) = spec.get("policies") {
        policies_keys("spec.policies", policies, None, &mut keys, &mut problems);
    }
    // A template's restartPolicy is the kubelet's; what a failed pod does
    // to the job is the policies' (none: dljob's default, ExitCode).
    let total: u32 = replicas.iter().map(|r| r.count).sum();
    if let Some(min) = spec.get("minAvailable").and_then(Value::as_u64) {
        if min != u64::from(total) && !unmapped {
            problems.push(format!(
                "spec.minAvailable is {min} of {total}: a dljob gang is the whole job; remove it"
            ));
        }
    }
    keys.insert(c::FRAMEWORK, framework.to_owned());
    let mut compat = c::COMPAT_VOLCANO.to_owned();
    if !renamed.is_empty() {
        let pairs: Vec<String> = renamed.iter().map(|(r, t)| format!("{r}={t}")).collect();
        compat = format!("{compat}:{}", pairs.join(","));
    }
    keys.insert(c::COMPAT, compat);
    let order: Vec<&str> = match framework_plugin {
        Some((plugin, _)) => crate::frameworks::by_name(plugin.framework)
            .map(|f| match f.roles() {
                crate::frameworks::Roles::Fixed(rules) => rules.iter().map(|r| r.name).collect(),
                crate::frameworks::Roles::Any => Vec::new(),
            })
            .unwrap_or_default(),
        None => Vec::new(),
    };
    let mut indexed: Vec<(ReplicaSpec<'_>, usize)> = replicas.into_iter().zip(places).collect();
    if !order.is_empty() {
        indexed.sort_by_key(|(r, _)| order.iter().position(|o| *o == r.role));
    }
    // A dljob job completes when its coordinator exits 0: the task whose
    // completion completes the Volcano Job must be it. A generic job's
    // coordinator is its first role, so that task goes first.
    match (completing.as_slice(), framework_plugin) {
        ([], _) => {}
        ([role], None) => indexed.sort_by_key(|(r, _)| r.role != *role),
        ([role], Some(_)) => {
            let topology = indexed
                .iter()
                .map(|(r, _)| format!("{}={}", r.role, r.count))
                .collect::<Vec<_>>()
                .join(",");
            let coordinator = c::Topology::parse(&topology).ok().and_then(|t| {
                crate::frameworks::by_name(framework)
                    .and_then(|f| f.coordinator(&t).map(|(r, _)| r.to_owned()))
            });
            if coordinator.as_deref() != Some(role.as_str()) {
                problems.push(format!(
                    "a TaskCompleted → CompleteJob policy on the {role} task: a {framework} job completes when its coordinator ({}) exits 0; move the policy or remove it",
                    coordinator.unwrap_or_default()
                ));
            }
        }
        (many, _) => problems.push(format!(
            "TaskCompleted → CompleteJob policies on {} tasks ({}): a dljob job completes when its one coordinator exits 0; keep one",
            many.len(),
            many.join(", ")
        )),
    }
    keys.insert(
        c::REPLICAS,
        indexed
            .iter()
            .map(|(r, _)| format!("{}={}", r.role, r.count))
            .collect::<Vec<_>>()
            .join(","),
    );
    if let Some(p) = port {
        keys.insert(c::PORT, p.to_string());
    }
    keys.insert(c::BACKOFF_LIMIT, job_retry.to_string());
    if let Some(ttl) = spec.get("ttlSecondsAfterFinished").and_then(Value::as_u64) {
        keys.insert(c::TTL_SECONDS_AFTER_FINISHED, ttl.to_string());
    }
    // A Volcano Job is gang-scheduled by Volcano unless it names another
    // scheduler.
    match spec.get("schedulerName").and_then(Value::as_str) {
        None | Some("volcano") => {
            keys.insert(c::GANG, "volcano".into());
            if let Some(q) = spec.get("queue").and_then(Value::as_str) {
                keys.insert(c::QUEUE, q.to_owned());
            }
        }
        Some(other) => problems.push(format!(
            "spec.schedulerName \"{}\": a Volcano Job that another scheduler places is not gang-scheduled; dljob gangs with volcano, kueue, coscheduling or kubernetes: remove it",
            c::quoted(other)
        )),
    }
    let edits = TemplateEdits {
        priority_class: spec
            .get("priorityClassName")
            .and_then(Value::as_str)
            .map(str::to_owned),
        env: Vec::new(),
    };
    if !problems.is_empty() {
        return Err(problems);
    }
    let meta = job.get("metadata").and_then(Value::as_object);
    let mut out = ConvertedJob {
        warnings,
        ..ConvertedJob::default()
    };
    for (r, i) in indexed {
        out.replicas.push(Replica {
            role: r.role.clone(),
            workload: kubeflow::workload(name, meta, &r, &keys, &edits, None),
            template_path: vec![
                "spec".into(),
                "tasks".into(),
                i.to_string(),
                "template".into(),
            ],
        });
    }
    Ok(out)
}

/// One task read: its replica (and whether a policy makes its completion
/// the job's), a task of a name the framework plugin does not map, or one
/// refused for a problem said.
enum Task<'v> {
    Replica {
        replica: ReplicaSpec<'v>,
        completes: bool,
    },
    Unmapped,
    Refused,
}

/// What reading a task needs from its job.
struct Reading<'a> {
    /// The framework plugin, if any.
    plugin: Option<&'a Plugin>,
    /// Its task names and their roles.
    names: &'a [(String, &'static str)],
    /// The job's retry limit (`spec.maxRetry`).
    job_retry: u64,
}

impl Reading<'_> {
    /// Reads `spec.tasks[i]`: its fields, its role, count, gang and retry
    /// settings, policies (into `keys`) and template.
    fn task<'v>(
        &self,
        i: usize,
        task: &'v Value,
        keys: &mut Keys,
        problems: &mut Vec<String>,
    ) -> Task<'v> {
        let at = format!("spec.tasks[{i}]");
        let Some(task) = task.as_object() else {
            problems.push(format!("{at} is not a mapping"));
            return Task::Refused;
        };
        for key in task.keys() {
            if !TASK_FIELDS.contains(&key.as_str()) {
                problems.push(format!(
                    "{at}.{key} is not a task field dljob convert knows: remove it"
                ));
            }
        }
        let Some(task_name) = task.get("name").and_then(Value::as_str) else {
            problems.push(format!(
                "{at}.name is missing: dljob names the task's role by it"
            ));
            return Task::Refused;
        };
        let role = match self.role(&at, task_name, problems) {
            Ok(role) => role,
            Err(task) => return task,
        };
        if task_name.len() > c::MAX_VOLCANO_TASK {
            problems.push(format!(
                "{at}.name is {} characters: Volcano's host file of a task is named after it, which dljob keeps in an annotation of at most {} characters before .host; shorten it",
                task_name.len(),
                c::MAX_VOLCANO_TASK
            ));
        }
        let count = match task.get("replicas") {
            None | Some(Value::Null) => 1,
            Some(v) => match v.as_u64().and_then(|n| u32::try_from(n).ok()) {
                Some(n) if n > 0 => n,
                _ => {
                    problems.push(format!(
                        "{at}.replicas is {v}: a role has at least one replica"
                    ));
                    return Task::Refused;
                }
            },
        };
        if let Some(min) = task.get("minAvailable").and_then(Value::as_u64) {
            if min != u64::from(count) {
                problems.push(format!(
                    "{at}.minAvailable is {min} of {count}: a dljob gang is the whole job; remove it"
                ));
            }
        }
        if let Some(retry) = task.get("maxRetry").and_then(Value::as_u64) {
            if retry != self.job_retry {
                problems.push(format!(
                    "{at}.maxRetry is {retry} and the job's {}: dljob's retry limit is one for the job (dljob.dev/backoff-limit); make them equal or remove the task's",
                    self.job_retry
                ));
            }
        }
        let completes = task.get("policies").is_some_and(|policies| {
            let at = format!("{at}.policies");
            policies_keys(&at, policies, Some(&role), keys, problems)
        });
        let Some(template) = task.get("template").filter(|t| t.is_object()) else {
            problems.push(format!("{at}.template is missing"));
            return Task::Refused;
        };
        // Volcano creates the task's pods as the template says; Kubernetes'
        // default is Always.
        let restart = match object::str_at(template, &["spec", "restartPolicy"]) {
            None => "Always",
            Some(p @ ("Always" | "OnFailure" | "Never")) => p,
            Some(other) => {
                problems.push(format!(
                    "{at}.template.spec.restartPolicy \"{}\" is not a pod's",
                    c::quoted(other)
                ));
                return Task::Refused;
            }
        };
        Task::Replica {
            replica: ReplicaSpec {
                type_name: task_name.to_owned(),
                role,
                count,
                restart,
                template,
            },
            completes,
        }
    }

    /// The role of task `task_name`: the framework plugin's for it, or
    /// (no framework plugin) the task's own name.
    fn role(
        &self,
        at: &str,
        task_name: &str,
        problems: &mut Vec<String>,
    ) -> Result<String, Task<'static>> {
        let Some(plugin) = self.plugin else {
            if c::is_dns_label(task_name) {
                return Ok(task_name.to_owned());
            }
            problems.push(format!(
                "{at}.name \"{}\" cannot be a role: a role is a DNS label",
                c::quoted(task_name)
            ));
            return Err(Task::Refused);
        };
        if let Some((_, role)) = self.names.iter().find(|(t, _)| t == task_name) {
            return Ok((*role).to_owned());
        }
        // The flag whose default name the task's ends with (mpimaster:
        // --master), else the last (the workers').
        let flag = plugin
            .roles
            .iter()
            .find(|(f, _)| task_name.ends_with(f))
            .or(plugin.roles.last())
            .map_or("worker", |(f, _)| *f);
        problems.push(format!(
            "{at}: task \"{}\" is none of the {} plugin's ({}): name it as the plugin does, or pass the plugin its name (e.g. --{flag}={})",
            c::quoted(task_name),
            plugin.framework,
            self.names.iter().map(|(t, _)| t.as_str()).collect::<Vec<_>>().join(", "),
            c::quoted(task_name)
        ));
        Err(Task::Unmapped)
    }
}

/// For a job with the ssh plugin and no framework plugin (Volcano's MPI
/// examples: `plugins: {ssh: [], svc: []}`), the mpi plugin's flags that
/// name its two tasks: the launcher is the task named `master` or
/// `launcher` (or ending so: `mpimaster`), else the one whose completion
/// completes the job; the other runs the workers. `None` for any other
/// job, and with a problem when the tasks cannot be told apart.
fn mpi_style_names(
    spec: &Map<String, Value>,
    plugins: &[(&str, Vec<&str>)],
    problems: &mut Vec<String>,
) -> Option<Vec<String>> {
    let has = |name: &str| plugins.iter().any(|(n, _)| *n == name);
    if !has("ssh")
        || plugins
            .iter()
            .any(|(n, _)| PLUGINS.iter().any(|p| p.framework == *n))
    {
        return None;
    }
    let tasks: Vec<&Map<String, Value>> = spec
        .get("tasks")
        .and_then(Value::as_array)
        .map(|t| t.iter().filter_map(Value::as_object).collect())
        .unwrap_or_default();
    let name = |t: &Map<String, Value>| {
        t.get("name")
            .and_then(Value::as_str)
            .unwrap_or("")
            .to_owned()
    };
    let way_out = "add the mpi plugin naming them (mpi: [\"--master=TASK\", \"--worker=TASK\"]), or remove ssh";
    if tasks.len() != 2 {
        problems.push(format!(
            "spec.plugins.ssh without a framework plugin is read as an MPI job of two tasks, a launcher and its workers, and this job has {}: {way_out}",
            tasks.len()
        ));
        return None;
    }
    let completes = |t: &Map<String, Value>| {
        t.get("policies")
            .and_then(Value::as_array)
            .is_some_and(|ps| {
                ps.iter().any(|p| {
                    p.get("action").and_then(Value::as_str) == Some("CompleteJob")
                        && p.get("event").and_then(Value::as_str) == Some("TaskCompleted")
                })
            })
    };
    let named = |t: &Map<String, Value>| {
        let n = name(t);
        n.ends_with("master") || n.ends_with("launcher")
    };
    let launchers: Vec<usize> = match (0..2).filter(|i| named(tasks[*i])).collect::<Vec<_>>() {
        by_name if by_name.len() == 1 => by_name,
        _ => (0..2).filter(|i| completes(tasks[*i])).collect(),
    };
    let [launcher] = launchers[..] else {
        problems.push(format!(
            "spec.plugins.ssh without a framework plugin is read as an MPI job, and neither task \"{}\" nor \"{}\" is told to be the launcher (by a name ending in master or launcher, or a TaskCompleted → CompleteJob policy): {way_out}",
            c::quoted(&name(tasks[0])),
            c::quoted(&name(tasks[1]))
        ));
        return None;
    };
    Some(vec![
        format!("--master={}", name(tasks[launcher])),
        format!("--worker={}", name(tasks[1 - launcher])),
    ])
}

/// The job's plugins: name and arguments.
fn plugins<'v>(
    spec: &'v Map<String, Value>,
    problems: &mut Vec<String>,
) -> Vec<(&'v str, Vec<&'v str>)> {
    let Some(plugins) = spec.get("plugins").and_then(Value::as_object) else {
        return Vec::new();
    };
    let mut out = Vec::new();
    for (name, args) in plugins {
        let known =
            PLUGINS.iter().any(|p| p.framework == name) || OTHER_PLUGINS.contains(&name.as_str());
        if !known {
            problems.push(format!(
                "spec.plugins.{name}: dljob has no equivalent of Volcano's {name} plugin; remove it"
            ));
            continue;
        }
        let args: Vec<&str> = args
            .as_array()
            .map(|a| a.iter().filter_map(Value::as_str).collect())
            .unwrap_or_default();
        out.push((name.as_str(), args));
    }
    if out
        .iter()
        .filter(|(n, _)| PLUGINS.iter().any(|p| p.framework == *n))
        .count()
        > 1
    {
        problems.push("spec.plugins: more than one framework plugin (pytorch, tensorflow, mpi); a job has one framework".into());
    }
    out
}

/// The env, svc and ssh plugins' flags: what dljob does anyway is taken,
/// the ssh key's directory mapped, the rest refused by name.
fn other_plugin_flags(plugins: &[(&str, Vec<&str>)], keys: &mut Keys, problems: &mut Vec<String>) {
    for (name, args) in plugins {
        if !OTHER_PLUGINS.contains(name) {
            continue;
        }
        for arg in args {
            let (flag, value) = arg
                .trim_start_matches('-')
                .split_once('=')
                .unwrap_or((arg.trim_start_matches('-'), ""));
            match (*name, flag) {
                // dljob's Service publishes pods before they are ready,
                // makes no NetworkPolicy and gives the hosts as env.
                ("svc", "publish-not-ready-addresses" | "disable-network-policy") => {}
                ("svc", "inject-hosts-env") if value != "false" => {}
                ("ssh", "ssh-key-file-path") if !value.is_empty() => {
                    keys.insert(c::SSH_PATH, value.to_owned());
                }
                _ => problems.push(format!(
                    "spec.plugins.{name}: \"{}\" has no dljob equivalent (dljob makes the job's key pair, names every host in its ssh config, and gives the hosts as env and files): remove it",
                    c::quoted(arg)
                )),
            }
        }
    }
}

/// The plugin's task names (its flags, else their defaults) with their
/// roles, and its `--port`.
fn flags(
    plugin: &Plugin,
    args: &[&str],
    problems: &mut Vec<String>,
) -> (Vec<(String, &'static str)>, Option<u16>) {
    let mut names: Vec<(String, &'static str)> = plugin
        .roles
        .iter()
        .map(|(task, role)| ((*task).to_owned(), *role))
        .collect();
    let mut port = None;
    let mut i = 0;
    while i < args.len() {
        let arg = args[i].trim_start_matches('-');
        let (flag, value) = match arg.split_once('=') {
            Some((f, v)) => (f, Some(v)),
            None => (arg, args.get(i + 1).copied()),
        };
        if !arg.contains('=') {
            i += 1;
        }
        i += 1;
        let Some(value) = value else {
            problems.push(format!(
                "spec.plugins.{}: --{flag} has no value",
                plugin.framework
            ));
            continue;
        };
        if flag == "port" {
            match value.parse::<u16>() {
                Ok(p) => port = Some(p),
                Err(_) => problems.push(format!(
                    "spec.plugins.{}: --port \"{}\" is not a port",
                    plugin.framework,
                    c::quoted(value)
                )),
            }
        } else if let Some(at) = plugin.roles.iter().position(|(f, _)| *f == flag) {
            names[at].0 = value.to_owned();
        } else {
            problems.push(format!(
                "spec.plugins.{}: --{flag} is not a flag of the plugin dljob convert knows: remove it",
                plugin.framework
            ));
        }
    }
    (names, port)
}

/// Volcano's lifecycle policies that dljob's keys can say.
/// Returns whether a task's policies complete the job when it completes.
fn policies_keys(
    at: &str,
    policies: &Value,
    task_role: Option<&str>,
    keys: &mut Keys,
    problems: &mut Vec<String>,
) -> bool {
    let mut completes = false;
    let Some(list) = policies.as_array() else {
        problems.push(format!("{at} is not a list"));
        return false;
    };
    for (i, p) in list.iter().enumerate() {
        let at = format!("{at}[{i}]");
        let mut events: Vec<&str> = p
            .get("events")
            .and_then(Value::as_array)
            .map(|a| a.iter().filter_map(Value::as_str).collect())
            .unwrap_or_default();
        if let Some(e) = p.get("event").and_then(Value::as_str) {
            events.push(e);
        }
        let action = p.get("action").and_then(Value::as_str).unwrap_or("");
        if p.get("exitCode").is_some() || p.get("timeout").is_some() {
            problems.push(format!(
                "{at}: a policy on an exit code or a timeout has no dljob equivalent: dljob retries exit codes 128-255 and fails on 1-127 (dljob.dev/restart-policy: ExitCode); remove it"
            ));
            continue;
        }
        let failures = !events.is_empty()
            && events
                .iter()
                .all(|e| matches!(*e, "PodFailed" | "PodEvicted" | "Unknown" | "*"));
        let (key, value) = match (failures, action, task_role) {
            (true, "RestartJob", _) => (c::RESTART_SCOPE, "Job"),
            (true, "RestartTask" | "RestartPod", _) => (c::RESTART_SCOPE, "Pod"),
            (true, "AbortJob" | "TerminateJob", _) => (c::RESTART_POLICY, "Never"),
            // The job completes when its coordinator's task does: dljob's
            // own rule, said of any one task.
            (false, "CompleteJob", Some(_)) if events == ["TaskCompleted"] => {
                completes = true;
                continue;
            }
            _ => {
                problems.push(format!(
                    "{at}: {} → {action} has no dljob equivalent (dljob restarts a pod or the job on a failure, fails the job, or completes it when its coordinator exits 0); remove it",
                    if events.is_empty() { "no event".to_owned() } else { events.join(", ") }
                ));
                continue;
            }
        };
        match keys.get(key) {
            Some(old) if old != value => problems.push(format!(
                "{at}: {action} contradicts another policy ({key} {old}); keep one"
            )),
            _ => {
                keys.insert(key, value.to_owned());
            }
        }
    }
    completes
}
