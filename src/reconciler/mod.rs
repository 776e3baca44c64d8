//! The reconciler (DESIGN §5). Placeholder until the reconciler lands.

pub mod observe;
pub mod status;

use std::sync::Arc;

use crate::config::Config;
use crate::validate::{NoPeers, PeerSource};

/// Starts the reconciler in the background (leader election, controller)
/// and returns the member cache the validating webhook reads peers from.
/// Registers its metrics in `registry`; follows config reloads on `config`.
pub async fn start(
    _client: kube::Client,
    _registry: &mut prometheus_client::registry::Registry,
    _config: tokio::sync::watch::Receiver<Config>,
) -> anyhow::Result<(Arc<dyn PeerSource>, tokio::task::JoinHandle<()>)> {
    Ok((Arc::new(NoPeers), tokio::spawn(async {})))
}
