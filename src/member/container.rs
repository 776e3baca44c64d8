//! The framework container: the one rule the webhook and the reconciler
//! share, the `dljob.dev/container` key, and the warnings that go with it.

use super::keys::Meta;
use super::MemberSpec;
use super::PodOwner;
use crate::contract as c;
use crate::object;
use crate::object::at;
use crate::object::Kind;
use crate::violation::Rule;
use crate::violation::Violations;
use serde_json::Value;

/// `dljob.dev/container`, which must name a container of the pod.
pub(super) fn container(
    kind: Kind,
    object: &Value,
    meta: &Meta<'_>,
    v: &mut Violations,
) -> Option<String> {
    let name = meta.annotation(c::CONTAINER)?;
    let spec = at(object, kind.pod_path()).and_then(|p| p.get("spec"));
    let names: Vec<&str> = spec
        .map(object::containers)
        .unwrap_or(&[])
        .iter()
        .map(object::name_of)
        .collect();
    if !names.contains(&name) {
        v.push(Rule::UnknownContainer, {
            let name = c::quoted(name);
            format!(
                "{} \"{name}\" names no container of this {}; containers are {}",
                c::CONTAINER,
                kind.as_str(),
                names.join(", ")
            )
        });
    }
    Some(name.to_owned())
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
    /// Requests an extended resource (a device such as `nvidia.com/gpu`),
    /// or uses one of the pod's DRA claims (`resources.claims`).
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

/// What the container rule reads of each container of a pod spec (JSON):
/// its name, and whether it requests a device (an extended resource) or
/// uses one of the pod's DRA claims.
pub(crate) fn container_facts(spec: &Value) -> Vec<ContainerFacts<'_>> {
    object::containers(spec)
        .iter()
        .map(|c| ContainerFacts {
            name: object::name_of(c),
            accelerator: object::requests_extended_resource(c) || object::uses_pod_claim(spec, c),
        })
        .collect()
}

/// Chooses the framework container of a pod (or pod template, `pod` being
/// the value holding `spec`) by [`pick_container`].
pub fn framework_container(m: &MemberSpec, pod: &Value) -> Option<usize> {
    framework_container_choice(m, pod).map(|(i, _)| i)
}

pub(super) fn framework_container_choice(
    m: &MemberSpec,
    pod: &Value,
) -> Option<(usize, ContainerChoice)> {
    let facts = container_facts(pod.get("spec")?);
    pick_container(
        m.container.as_deref(),
        object::meta_str(pod, &[], "annotations", c::K8S_DEFAULT_CONTAINER),
        m.framework.name(),
        &facts,
    )
}

/// A pod with several containers whose framework container was guessed:
/// say which one, and how to choose. Checked on the object the user writes.
pub(super) fn container_warning(m: &MemberSpec, object: &Value, warnings: &mut Vec<String>) {
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
pub(super) fn slots_warning(m: &MemberSpec, object: &Value, warnings: &mut Vec<String>) {
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
