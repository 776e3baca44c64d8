//! The install path: `dljob certs` and `dljob webhook-config`. Placeholder
//! until the install path lands.

use std::process::ExitCode;

use crate::cli::{CertsArgs, WebhookConfigArgs};

/// `dljob certs`.
pub fn certs(_args: &CertsArgs) -> anyhow::Result<ExitCode> {
    anyhow::bail!("dljob certs is not built yet")
}

/// `dljob webhook-config`.
pub fn webhook_config(_args: &WebhookConfigArgs) -> anyhow::Result<ExitCode> {
    anyhow::bail!("dljob webhook-config is not built yet")
}
