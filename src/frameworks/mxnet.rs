//! MXNet parameter server (ps-lite): `DMLC_*` and `MX_CONFIG`.

use serde::Serialize;

use super::{rank_order, set, Env, Framework, Job, Member, OrderedMap, RoleRule, Roles, Task};
use crate::contract::Topology;

pub struct MxNet;

/// `MX_CONFIG`, as the MXNet operator wrote it.
#[derive(Serialize)]
struct MxConfig<'a> {
    cluster: OrderedMap<'a, Vec<Endpoint>>,
    task: Task<'a>,
}

#[derive(Serialize)]
struct Endpoint {
    url: String,
    port: u16,
}

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
        let cluster = rank_order(self, t)
            .into_iter()
            .map(|role| {
                let hosts = (0..t.count_or_zero(role))
                    .map(|i| Endpoint {
                        url: job.host(role, i),
                        port: job.port,
                    })
                    .collect();
                (role, hosts)
            })
            .collect();
        let config = MxConfig {
            cluster: OrderedMap(cluster),
            task: Task {
                kind: member.role,
                index: member.index,
            },
        };
        let json = serde_json::to_string(&config).expect("MX_CONFIG serialises");
        set(env, "MX_CONFIG", json);
    }
}

#[cfg(test)]
mod tests {
    use crate::frameworks::test_support::{env_of, get};
    use serde_json::json;

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
        let mx: serde_json::Value = serde_json::from_str(get(&env, "MX_CONFIG").unwrap()).unwrap();
        assert_eq!(
            mx,
            json!({
                "cluster": {
                    "scheduler": [{"url": "j-scheduler-0.j.ns.svc", "port": 9091}],
                    "server": [{"url": "j-server-0.j.ns.svc", "port": 9091}],
                    "worker": [{"url": "j-worker-0.j.ns.svc", "port": 9091}]
                },
                "task": {"type": "worker", "index": 0}
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
