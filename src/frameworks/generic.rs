//! Any framework: roles are free-form, only the `DLJOB_*` vars are injected.

use super::{Env, Framework, JobView, Member, Roles};
use crate::contract::{RestartScope, Topology};

pub(crate) struct Generic;

impl Framework for Generic {
    fn name(&self) -> &'static str {
        "generic"
    }
    fn roles(&self) -> Roles {
        Roles::Any
    }
    /// Nothing is known of a generic job's wiring: only the failed pod.
    fn default_restart_scope(&self) -> RestartScope {
        RestartScope::Pod
    }
    fn default_port(&self) -> u16 {
        29500
    }
    /// The first role of `dljob.dev/replicas`, index 0.
    fn coordinator<'t>(&self, topology: &'t Topology) -> Option<(&'t str, u32)> {
        topology.roles().next().map(|(r, _)| (r, 0))
    }
    fn env(&self, _job: &JobView<'_>, _member: &Member<'_>, _env: &mut Env) {}
}

#[cfg(test)]
mod tests {
    use crate::contract::Topology;
    use crate::frameworks::{by_name, rank};

    #[test]
    fn coordinator_and_rank_follow_declared_order() {
        let g = by_name("generic").unwrap();
        let t = Topology::parse("trainer=2,reader=3").unwrap();
        assert_eq!(g.coordinator(&t), Some(("trainer", 0)));
        assert_eq!(rank(g, &t, "reader", 1), 3);
        assert!(crate::frameworks::check_topology(g, &t).is_empty());
    }
}
