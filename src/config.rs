//! The webhook's config file (ARCHITECTURE.md §6). YAML; every key optional.

use std::collections::BTreeMap;

use serde::{Deserialize, Serialize};

use crate::object::{ALPHA_GPU, NVIDIA_GPU as GPU};

/// The parsed config file.
#[derive(Clone, Debug, Default, PartialEq, Eq, Deserialize, Serialize)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct Config {
    /// When set, hosts become `j-r-i.j.ns.svc.<domain>`.
    #[serde(default)]
    pub cluster_domain: String,
    /// Extended resource name → what a container requesting it gets.
    #[serde(default)]
    pub accelerators: BTreeMap<String, Accelerator>,
    /// Framework name → port, overriding the framework's default.
    #[serde(default)]
    pub ports: BTreeMap<String, u16>,
    /// The gang scheduler of jobs that do not set `dljob.dev/gang`
    /// (default `none`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub gang: Option<String>,
    /// Whether mpi launchers and chainer masters get the scheduling gate
    /// the reconciler removes once their workers run (default true). A
    /// webhook deployed without any reconciler must turn it off, or those
    /// pods wait forever.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub launcher_gate: Option<bool>,
    /// Gang scheduler → the `schedulerName` its pods get, overriding the
    /// integration's (`volcano`, `scheduler-plugins-scheduler`); an empty
    /// name leaves `schedulerName` alone (the default scheduler runs it).
    #[serde(default, skip_serializing_if = "BTreeMap::is_empty")]
    pub scheduler_names: BTreeMap<String, String>,
    /// The TensorBoard the reconciler runs for jobs with
    /// `dljob.dev/tensorboard`.
    #[serde(default)]
    pub tensorboard: TensorBoardConfig,
    /// The namespaces the reconciler watches and writes in; empty (the
    /// default): every namespace. With a list, dljob needs no ClusterRole —
    /// a Role in each (`dljob rbac`, deploy/namespaced/). Read at start:
    /// a change takes a restart.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub namespaces: Vec<String>,
    /// Seconds a member pod waits, before its framework starts, for its own
    /// name and its coordinator's to resolve (an init container running
    /// `dljob wait-for-names`; see `mutate::wait_for_names`). Default 600; 0
    /// adds no such step.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub wait_for_names_seconds: Option<u32>,
    /// The image that init container runs from: dljob's own (any image
    /// whose `/dljob` is this release's binary, e.g. a mirror of it).
    /// Default: the image the serving pod runs (see
    /// [`Config::wait_for_names_image`]).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub wait_for_names_image: Option<String>,
    /// The image `dljob serve` found itself running from (or was told with
    /// `--wait-for-names-image`): the default of `waitForNamesImage`.
    #[serde(skip)]
    serving_image: Option<String>,
    /// What reading the file changed, said by [`Config::warnings`].
    #[serde(skip)]
    read_as: Vec<String>,
}

/// How long a member waits for its names by default: long enough for a
/// coordinator that waits for its node, bounded so that a job whose
/// Service never comes still starts and says why.
pub(crate) const DEFAULT_WAIT_FOR_NAMES_SECONDS: u32 = 600;

/// TensorBoard's default image: an official TensorFlow one, pinned; 2.20 is the
/// last whose image has the `tensorboard` command (TensorFlow 2.21 no
/// longer installs TensorBoard).
pub(crate) const DEFAULT_TENSORBOARD_IMAGE: &str = "tensorflow/tensorflow:2.20.0";

/// `tensorboard:` in the config file.
#[derive(Clone, Debug, PartialEq, Eq, Deserialize, Serialize)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct TensorBoardConfig {
    /// The image TensorBoard runs from: any image with the `tensorboard`
    /// command on its PATH.
    #[serde(default = "default_tensorboard_image")]
    pub image: String,
    /// How long TensorBoard keeps running once its job finished, whatever
    /// the job's clean-pod policy; unset, it stops when the job finishes
    /// unless the clean-pod policy is `None`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub ttl_seconds_after_finished: Option<u32>,
}

fn default_tensorboard_image() -> String {
    DEFAULT_TENSORBOARD_IMAGE.to_owned()
}

impl Default for TensorBoardConfig {
    fn default() -> Self {
        Self {
            image: default_tensorboard_image(),
            ttl_seconds_after_finished: None,
        }
    }
}

/// Host libraries and env for containers that request one resource.
#[derive(Clone, Debug, Default, PartialEq, Eq, Deserialize, Serialize)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct Accelerator {
    #[serde(default)]
    pub volumes: Vec<HostVolume>,
    #[serde(default)]
    pub env: Vec<EnvPair>,
}

/// A hostPath volume mounted into the container.
#[derive(Clone, Debug, PartialEq, Eq, Deserialize, Serialize)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct HostVolume {
    pub name: String,
    pub host_path: String,
    pub mount_path: String,
}

/// A plain `name: value` env var.
#[derive(Clone, Debug, PartialEq, Eq, Deserialize, Serialize)]
#[serde(deny_unknown_fields)]
pub struct EnvPair {
    pub name: String,
    pub value: String,
}

/// Said of an env var `name` of [`IMAGE_ENV`] that `what` sets.
pub(crate) fn image_env_warning(name: &str, what: &str) -> String {
    let why = if name == "LD_LIBRARY_PATH" {
        " CUDA images' own ENV LD_LIBRARY_PATH already lists /usr/local/nvidia/lib64: mount the driver libraries there and leave the env out."
    } else {
        ""
    };
    format!(
        "{what} sets {name}: in every container it is injected into, that value replaces the image's own {name} (its ENV) whole, and dljob cannot see what the image had (Kubernetes expands $({name}) only from the container's earlier env entries, not the image's).{why}"
    )
}

/// Why a config file was refused.
#[derive(Debug, thiserror::Error)]
pub enum ConfigError {
    #[error("config is not valid YAML for dljob: {0}")]
    Parse(String),
    #[error("config: {0}")]
    Invalid(String),
}

/// Env vars that images commonly set in their own `ENV` (CUDA, Python and
/// distribution images, and images derived from them). A pod's env var
/// replaces the image's value of the same name whole, and Kubernetes
/// expands `$(NAME)` only from the container's earlier env entries, never
/// from the image's: a config that sets one of these takes away what the
/// image had, which dljob cannot see.
pub(crate) const IMAGE_ENV: &[&str] = &[
    "PATH",
    "LD_LIBRARY_PATH",
    "LD_PRELOAD",
    "LIBRARY_PATH",
    "PYTHONPATH",
    "CUDA_HOME",
    "NVIDIA_VISIBLE_DEVICES",
    "NVIDIA_DRIVER_CAPABILITIES",
    "HOME",
];

impl Config {
    /// What the config does that may not be meant, one sentence each: an
    /// accelerator env var that replaces an image's own ([`IMAGE_ENV`]).
    pub fn warnings(&self) -> Vec<String> {
        let mut out = self.read_as.clone();
        for (resource, acc) in &self.accelerators {
            for e in acc
                .env
                .iter()
                .filter(|e| IMAGE_ENV.contains(&e.name.as_str()))
            {
                out.push(image_env_warning(
                    &e.name,
                    &format!("accelerators.{resource}.env"),
                ));
            }
        }
        out
    }

    /// `launcherGate`, true unless turned off.
    pub(crate) fn launcher_gate(&self) -> bool {
        self.launcher_gate.unwrap_or(true)
    }

    /// [`Config::wait_for_names_seconds`], defaulted.
    pub(crate) fn wait_for_names_seconds(&self) -> u32 {
        self.wait_for_names_seconds
            .unwrap_or(DEFAULT_WAIT_FOR_NAMES_SECONDS)
    }

    /// The image of the init container `dljob-wait-for-names`: the
    /// config's `waitForNamesImage`, else the image `dljob serve` runs from
    /// ([`Config::with_serving_image`]), else this release's
    /// ([`crate::contract::DEFAULT_IMAGE`]).
    pub(crate) fn wait_for_names_image(&self) -> &str {
        self.wait_for_names_image
            .as_deref()
            .or(self.serving_image.as_deref())
            .unwrap_or(crate::contract::DEFAULT_IMAGE)
    }

    /// The config with `image`, the image dljob itself runs from, as the
    /// default of `waitForNamesImage`.
    #[must_use]
    pub fn with_serving_image(mut self, image: Option<String>) -> Self {
        self.serving_image = image;
        self
    }

    /// Parses and checks a config document. An empty document is the default.
    pub fn from_yaml(text: &str) -> Result<Self, ConfigError> {
        if text.trim().is_empty() {
            return Ok(Self::default());
        }
        let config: Option<Config> =
            serde_saphyr::from_str(text).map_err(|e| ConfigError::Parse(e.to_string()))?;
        let mut config = config.unwrap_or_default();
        config.current_gpu_name();
        config.check()?;
        Ok(config)
    }

    /// The first operators' controller config keyed its GPU host
    /// libraries by `alpha.kubernetes.io/nvidia-gpu`; containers ask for
    /// `nvidia.com/gpu` today (and `dljob convert` rewrites the old name),
    /// so that entry is read as `nvidia.com/gpu`'s unless the file has one.
    fn current_gpu_name(&mut self) {
        let Some(old) = self.accelerators.remove(ALPHA_GPU) else {
            return;
        };
        if self.accelerators.contains_key(GPU) {
            self.read_as.push(format!(
                "accelerators.{ALPHA_GPU} is not used: no current node advertises it, and accelerators.{GPU} is given too; remove it"
            ));
        } else {
            self.accelerators.insert(GPU.to_owned(), old);
            self.read_as.push(format!(
                "accelerators.{ALPHA_GPU} is read as accelerators.{GPU}: no current node advertises the alpha resource, and containers ask for {GPU}; rename the key"
            ));
        }
    }

    fn check(&self) -> Result<(), ConfigError> {
        if !self.cluster_domain.is_empty()
            && !self
                .cluster_domain
                .split('.')
                .all(crate::contract::is_dns_label)
        {
            return Err(ConfigError::Invalid(format!(
                "clusterDomain \"{}\" is not a DNS name (e.g. cluster.local)",
                self.cluster_domain
            )));
        }
        for name in self.ports.keys() {
            if crate::frameworks::by_name(name).is_none() {
                return Err(ConfigError::Invalid(format!(
                    "ports: unknown framework \"{name}\"; frameworks are {}",
                    crate::frameworks::names()
                )));
            }
        }
        for name in self.gang.iter().chain(self.scheduler_names.keys()) {
            if crate::gang::by_name(name).is_none() {
                return Err(ConfigError::Invalid(format!(
                    "unknown gang scheduler \"{name}\"; gang schedulers are {}",
                    crate::gang::names()
                )));
            }
        }
        if self.tensorboard.image.trim().is_empty() {
            return Err(ConfigError::Invalid(
                "tensorboard.image is empty: name an image with the tensorboard command, or leave the key out for the default"
                    .to_owned(),
            ));
        }
        if let Some(image) = &self.wait_for_names_image {
            if image.is_empty() || image.contains(char::is_whitespace) {
                return Err(ConfigError::Invalid(format!(
                    "waitForNamesImage \"{}\" is not an image reference: name dljob's image (e.g. {}, or your mirror of it), or leave the key out for the image dljob runs from",
                    image.escape_debug(),
                    crate::contract::DEFAULT_IMAGE
                )));
            }
        }
        for ns in &self.namespaces {
            if !crate::contract::is_dns_label(ns) {
                return Err(ConfigError::Invalid(format!(
                    "namespaces: \"{}\" is not a namespace name (a DNS label)",
                    ns.escape_debug()
                )));
            }
        }
        for (framework, port) in &self.ports {
            if *port == 0 {
                return Err(ConfigError::Invalid(format!(
                    "ports.{framework}: 0 is not a port (1-65535)"
                )));
            }
        }
        for (resource, acc) in &self.accelerators {
            if !is_extended_resource_name(resource) {
                return Err(ConfigError::Invalid(format!(
                    "accelerators: \"{}\" is not an extended resource name (vendor.example/device, as containers request it)",
                    resource.escape_debug()
                )));
            }
            for v in &acc.volumes {
                if [
                    crate::contract::HOSTFILE_VOLUME,
                    crate::contract::SSH_VOLUME,
                ]
                .contains(&v.name.as_str())
                {
                    return Err(ConfigError::Invalid(format!(
                        "accelerators.{resource}.volumes: \"{}\" is the name of dljob's own volume; choose another",
                        v.name
                    )));
                }
                if !crate::contract::is_dns_label(&v.name) {
                    return Err(ConfigError::Invalid(format!(
                        "accelerators.{resource}.volumes: name \"{}\" is not a DNS label",
                        v.name
                    )));
                }
                if !v.host_path.starts_with('/') || !v.mount_path.starts_with('/') {
                    return Err(ConfigError::Invalid(format!(
                        "accelerators.{resource}.volumes.{}: hostPath and mountPath must be absolute paths",
                        v.name
                    )));
                }
            }
            for e in &acc.env {
                if e.name.is_empty() {
                    return Err(ConfigError::Invalid(format!(
                        "accelerators.{resource}.env: a variable has an empty name"
                    )));
                }
                if !is_env_name(&e.name) {
                    return Err(ConfigError::Invalid(format!(
                        "accelerators.{resource}.env: \"{}\" is not a variable name Kubernetes accepts (letters, digits, '_', '-', '.', not starting with a digit)",
                        e.name.escape_debug()
                    )));
                }
            }
        }
        Ok(())
    }

    /// The port for `framework`: config override, else the framework default.
    pub(crate) fn port_for(&self, framework: &str, default: u16) -> u16 {
        self.ports.get(framework).copied().unwrap_or(default)
    }
}

/// An extended resource name as the API server accepts one in a
/// container's resources: a DNS-subdomain prefix (not `kubernetes.io`),
/// `/`, and a name of up to 63 letters, digits, `-`, `_` and `.`, starting
/// and ending with a letter or digit.
fn is_extended_resource_name(name: &str) -> bool {
    let Some((prefix, rest)) = name.split_once('/') else {
        return false;
    };
    let edge = |c: Option<char>| c.is_some_and(|c| c.is_ascii_alphanumeric());
    crate::object::is_extended_resource(name)
        && prefix.len() <= 253
        && prefix.split('.').all(crate::contract::is_dns_label)
        && (1..=63).contains(&rest.len())
        && rest
            .chars()
            .all(|c| c.is_ascii_alphanumeric() || matches!(c, '-' | '_' | '.'))
        && edge(rest.chars().next())
        && edge(rest.chars().last())
}

/// An environment variable name the API server accepts
/// (`[-._a-zA-Z][-._a-zA-Z0-9]*`).
fn is_env_name(name: &str) -> bool {
    let ok = |c: char| c.is_ascii_alphanumeric() || matches!(c, '-' | '_' | '.');
    name.chars()
        .next()
        .is_some_and(|c| ok(c) && !c.is_ascii_digit())
        && name.chars().all(ok)
}

#[cfg(test)]
mod tests {
    use super::*;

    /// An accelerator's resource and env names are what the API server
    /// accepts in a container (fuzzing found text with newlines and `#`
    /// accepted as a resource name, which no container can request and
    /// which did not survive being written back out).
    #[test]
    fn accelerator_resource_and_env_names_are_kubernetes_names() {
        let config = |resource: &str, env: &str| {
            Config::from_yaml(&format!(
                "accelerators:\n  {}:\n    env:\n    - name: {}\n      value: x\n",
                serde_json::to_string(resource).unwrap(),
                serde_json::to_string(env).unwrap()
            ))
        };
        for resource in [
            "nvidia.com/gpu",
            "amd.com/gpu",
            "habana.ai/gaudi",
            "a.b/x.y_z-1",
        ] {
            assert!(config(resource, "LD_LIBRARY_PATH").is_ok(), "{resource}");
        }
        for resource in [
            "gpu",
            "nvidia.com/",
            "/gpu",
            "nvidia.com/gp u",
            "nvidia.com/-gpu",
            "Nvidia.com/gpu",
            "kubernetes.io/gpu",
            "a.b/\n",
            "amd# x/y",
        ] {
            let e = config(resource, "X").unwrap_err().to_string();
            assert!(
                e.contains("not an extended resource name"),
                "{resource:?}: {e}"
            );
        }
        for env in ["1X", "A\nB", "A=B", "A B"] {
            let e = config("nvidia.com/gpu", env).unwrap_err().to_string();
            assert!(e.contains("not a variable name"), "{env:?}: {e}");
        }
        assert!(config("nvidia.com/gpu", "-a.b_C9").is_ok());
    }

    /// The first operators' controller config, as the tf-operator's
    /// chart shipped it: keyed by the alpha GPU resource.
    #[test]
    fn the_alpha_gpu_key_is_read_as_nvidia_com_gpu_with_a_warning() {
        let seed = "accelerators:\n  alpha.kubernetes.io/nvidia-gpu:\n    volumes:\n    - name: nvidia-libraries\n      mountPath: /usr/local/nvidia/lib64\n      hostPath: /home/kubernetes/bin/nvidia/lib64\n";
        let c = Config::from_yaml(seed).unwrap();
        assert_eq!(
            c.accelerators.keys().collect::<Vec<_>>(),
            ["nvidia.com/gpu"]
        );
        assert_eq!(
            c.accelerators["nvidia.com/gpu"].volumes[0].mount_path,
            "/usr/local/nvidia/lib64"
        );
        assert_eq!(
            c.warnings(),
            ["accelerators.alpha.kubernetes.io/nvidia-gpu is read as accelerators.nvidia.com/gpu: no current node advertises the alpha resource, and containers ask for nvidia.com/gpu; rename the key"]
        );
        let both = format!("{seed}  nvidia.com/gpu:\n    env: [{{name: A, value: b}}]\n");
        let c = Config::from_yaml(&both).unwrap();
        assert!(c.accelerators["nvidia.com/gpu"].volumes.is_empty());
        assert_eq!(c.accelerators.len(), 1);
        assert!(
            c.warnings()[0].contains("is not used"),
            "{:?}",
            c.warnings()
        );
        assert!(Config::from_yaml("{}").unwrap().warnings().is_empty());
    }

    #[test]
    fn parses_the_documented_shape() {
        let c = Config::from_yaml(
            r#"
clusterDomain: cluster.local
accelerators:
  nvidia.com/gpu:
    volumes:
    - name: nvidia-libraries
      hostPath: /home/kubernetes/bin/nvidia/lib64
      mountPath: /usr/local/nvidia/lib64
    env:
    - name: LD_LIBRARY_PATH
      value: /usr/local/nvidia/lib64
ports: {tensorflow: 2223}
"#,
        )
        .unwrap();
        assert_eq!(c.cluster_domain, "cluster.local");
        let gpu = &c.accelerators["nvidia.com/gpu"];
        assert_eq!(
            gpu.volumes[0].host_path,
            "/home/kubernetes/bin/nvidia/lib64"
        );
        assert_eq!(gpu.env[0].value, "/usr/local/nvidia/lib64");
        assert_eq!(c.port_for("tensorflow", 2222), 2223);
        assert_eq!(c.port_for("mxnet", 9091), 9091);
        assert_eq!(c.tensorboard, TensorBoardConfig::default());
        assert_eq!(c.tensorboard.image, "tensorflow/tensorflow:2.20.0");
    }

    #[test]
    fn tensorboard_takes_an_image_and_a_ttl_of_its_own() {
        let c = Config::from_yaml(
            "tensorboard: {image: registry.local/tensorboard:2.20, ttlSecondsAfterFinished: 3600}\n",
        )
        .unwrap();
        assert_eq!(
            c.tensorboard,
            TensorBoardConfig {
                image: "registry.local/tensorboard:2.20".into(),
                ttl_seconds_after_finished: Some(3600)
            }
        );
        // Only the TTL: the default image.
        let c = Config::from_yaml("tensorboard: {ttlSecondsAfterFinished: 60}\n").unwrap();
        assert_eq!(c.tensorboard.image, DEFAULT_TENSORBOARD_IMAGE);
        let e = Config::from_yaml("tensorboard: {image: \"\"}\n").unwrap_err();
        assert_eq!(
            e.to_string(),
            "config: tensorboard.image is empty: name an image with the tensorboard command, or leave the key out for the default"
        );
        let e = Config::from_yaml("tensorboard: {ttl: 60}\n").unwrap_err();
        assert!(e.to_string().contains("ttl"), "{e}");
    }

    #[test]
    fn empty_config_is_default() {
        assert_eq!(Config::from_yaml("").unwrap(), Config::default());
        assert_eq!(Config::from_yaml("# nothing\n").unwrap(), Config::default());
    }

    #[test]
    fn rejects_typos_and_bad_values() {
        let e = Config::from_yaml("acelerators: {}\n").unwrap_err();
        assert!(e.to_string().contains("acelerators"), "{e}");
        let e = Config::from_yaml("ports: {tensorflw: 1}\n").unwrap_err();
        assert!(
            e.to_string().contains("unknown framework \"tensorflw\""),
            "{e}"
        );
        let e = Config::from_yaml("clusterDomain: \"bad_domain\"\n").unwrap_err();
        assert!(e.to_string().contains("clusterDomain"), "{e}");
        let e = Config::from_yaml(
            "accelerators:\n  nvidia.com/gpu:\n    volumes:\n    - {name: libs, hostPath: lib, mountPath: /x}\n",
        )
        .unwrap_err();
        assert!(e.to_string().contains("absolute"), "{e}");
        let e = Config::from_yaml(
            "accelerators:\n  nvidia.com/gpu:\n    volumes:\n    - {name: dljob-ssh, hostPath: /l, mountPath: /x}\n",
        )
        .unwrap_err();
        assert_eq!(
            e.to_string(),
            "config: accelerators.nvidia.com/gpu.volumes: \"dljob-ssh\" is the name of dljob's own volume; choose another"
        );
        let e = Config::from_yaml("namespaces: [team-a, Team_B]\n").unwrap_err();
        assert_eq!(
            e.to_string(),
            "config: namespaces: \"Team_B\" is not a namespace name (a DNS label)"
        );
        assert_eq!(
            Config::from_yaml("namespaces: [team-a, team-b]\n")
                .unwrap()
                .namespaces,
            ["team-a", "team-b"]
        );
        for bad in ["gang: slurm\n", "schedulerNames: {slurm: x}\n"] {
            let e = Config::from_yaml(bad).unwrap_err();
            assert_eq!(
                e.to_string(),
                "config: unknown gang scheduler \"slurm\"; gang schedulers are none, kueue, volcano, coscheduling, kubernetes"
            );
        }
    }
}
