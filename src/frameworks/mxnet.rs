//! MXNet parameter server (ps-lite): the `DMLC_*` vars it reads. The MXNet
//! operator's `MX_CONFIG` (every host of the job) is not injected: MXNet
//! never reads it, and it grew every pod with the job.

use super::{set, Env, Framework, Job, Member, RoleRule, Roles};
use crate::contract::{RestartScope, Topology};

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
        topology
            .roles()
            .find(|(r, _)| *r == "scheduler")
            .map(|(r, _)| (r, 0))
    }
    fn env(&self, job: &Job<'_>, member: &Member<'_>, env: &mut Env) {
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
}

#[cfg(test)]
mod tests {
    use crate::frameworks::test_support::{env_of, get};

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
    fn servers_get_no_worker_id() {
        let env = env_of("mxnet", "scheduler=1,server=2,worker=3", "server", 1, None);
        assert_eq!(get(&env, "DMLC_ROLE"), Some("server"));
        assert_eq!(get(&env, "DMLC_NUM_SERVER"), Some("2"));
        assert_eq!(get(&env, "DMLC_NUM_WORKER"), Some("3"));
        assert_eq!(get(&env, "DMLC_WORKER_ID"), None);
    }
}
