//! MXNet parameter server (ps-lite): the `DMLC_*` vars it reads. The MXNet
//! operator's `MX_CONFIG` (every host of the job) is injected only under
//! `dljob.dev/compat: kubeflow`: MXNet never reads it (only the operator's
//! images' scripts may), and it grows every pod with the job.

use serde::Serialize;

use super::{
    first_replica_of, set, Env, Framework, JobView, Member, OrderedMap, RoleRule, Roles, Task,
};
use crate::contract::{RestartScope, Topology, COMPAT_KUBEFLOW};

pub(crate) struct MxNet;

const ROLES: &[RoleRule] = &[
    RoleRule::exactly_one("scheduler"),
    RoleRule::at_least_one("server"),
    RoleRule::at_least_one("worker"),
];

impl Framework for MxNet {
    fn name(&self) -> &'static str {
        "mxnet"
    }
    fn roles(&self) -> Roles {
        Roles::Fixed(ROLES)
    }
    /// Parameter-server training survives a worker's restart.
    fn default_restart_scope(&self) -> RestartScope {
        RestartScope::Pod
    }
    fn default_port(&self) -> u16 {
        9091
    }
    fn coordinator<'t>(&self, topology: &'t Topology) -> Option<(&'t str, u32)> {
        first_replica_of(topology, &["scheduler"])
    }
    fn env(&self, job: &JobView<'_>, member: &Member<'_>, env: &mut Env) {
        let t = job.topology;
        set(env, "DMLC_ROLE", member.role);
        set(env, "DMLC_PS_ROOT_URI", job.host("scheduler", 0));
        set(env, "DMLC_PS_ROOT_PORT", job.port.to_string());
        set(
            env,
            "DMLC_NUM_SERVER",
            t.count_or_zero("server").to_string(),
        );
        set(
            env,
            "DMLC_NUM_WORKER",
            t.count_or_zero("worker").to_string(),
        );
        set(env, "DMLC_USE_KUBERNETES", "1");
        if member.role == "worker" {
            set(env, "DMLC_WORKER_ID", member.index.to_string());
        }
    }
    /// The training-operator's MXJob: `MX_CONFIG`, every host of the job
    /// by role with the port, an empty tuner label per role, and this
    /// member's task.
    fn compat_env(&self, job: &JobView<'_>, member: &Member<'_>, env: &mut Env) {
        if job.compat != Some(COMPAT_KUBEFLOW) {
            return;
        }
        #[derive(Serialize)]
        struct UrlPort {
            url: String,
            port: u16,
        }
        #[derive(Serialize)]
        struct MxConfig<'a> {
            cluster: OrderedMap<'a, Vec<UrlPort>>,
            labels: OrderedMap<'a, &'static str>,
            task: Task<'a>,
        }
        let mut roles: Vec<(&str, u32)> = job.topology.roles().collect();
        roles.sort_by_key(|(r, _)| *r);
        let config = MxConfig {
            cluster: OrderedMap(
                roles
                    .iter()
                    .map(|(r, n)| {
                        let hosts = (0..*n)
                            .map(|i| UrlPort {
                                url: job.host(r, i),
                                port: job.port,
                            })
                            .collect();
                        (*r, hosts)
                    })
                    .collect(),
            ),
            labels: OrderedMap(roles.iter().map(|(r, _)| (*r, "")).collect()),
            task: Task {
                kind: member.role,
                index: member.index,
            },
        };
        let text = serde_json::to_string(&config).expect("MX_CONFIG serialises");
        set(env, "MX_CONFIG", text);
    }
}

#[cfg(test)]
mod tests {
    use crate::frameworks::test_support::{compat_env_of, env_of, get};

    #[test]
    fn linear_job_worker_gets_scheduler_address_and_counts() {
        let env = env_of("mxnet", "scheduler=1,server=1,worker=1", "worker", 0, None);
        assert_eq!(get(&env, "DMLC_ROLE"), Some("worker"));
        assert_eq!(
            get(&env, "DMLC_PS_ROOT_URI"),
            Some("j-scheduler-0.j.ns.svc")
        );
        assert_eq!(get(&env, "DMLC_PS_ROOT_PORT"), Some("9091"));
        assert_eq!(get(&env, "DMLC_NUM_SERVER"), Some("1"));
        assert_eq!(get(&env, "DMLC_NUM_WORKER"), Some("1"));
        assert_eq!(get(&env, "DMLC_USE_KUBERNETES"), Some("1"));
        assert_eq!(get(&env, "DMLC_WORKER_ID"), Some("0"));
        assert_eq!(get(&env, "MX_CONFIG"), None);
    }

    #[test]
    fn mx_config_under_kubeflow_compat_is_the_operators() {
        let env = compat_env_of(
            "kubeflow",
            "mxnet",
            "scheduler=1,server=1,worker=2",
            "worker",
            1,
        );
        let config: serde_json::Value =
            serde_json::from_str(get(&env, "MX_CONFIG").unwrap()).unwrap();
        let host = |r: &str, i: u32| serde_json::json!({"url": format!("j-{r}-{i}.j.ns.svc"), "port": 9091});
        assert_eq!(
            config,
            serde_json::json!({
                "cluster": {
                    "scheduler": [host("scheduler", 0)],
                    "server": [host("server", 0)],
                    "worker": [host("worker", 0), host("worker", 1)],
                },
                "labels": {"scheduler": "", "server": "", "worker": ""},
                "task": {"type": "worker", "index": 1},
            })
        );
    }

    #[test]
    fn servers_get_no_worker_id() {
        let env = env_of("mxnet", "scheduler=1,server=2,worker=3", "server", 1, None);
        assert_eq!(get(&env, "DMLC_ROLE"), Some("server"));
        assert_eq!(get(&env, "DMLC_NUM_SERVER"), Some("2"));
        assert_eq!(get(&env, "DMLC_NUM_WORKER"), Some("3"));
        assert_eq!(get(&env, "DMLC_WORKER_ID"), None);
    }
}
