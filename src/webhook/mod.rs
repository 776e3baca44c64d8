//! The HTTPS admission webhook (`dljob serve`). Placeholder until the
//! webhook server lands.

use std::process::ExitCode;

use crate::cli::ServeArgs;

/// Runs `dljob serve`.
pub fn serve(_args: &ServeArgs) -> anyhow::Result<ExitCode> {
    anyhow::bail!("dljob serve is not built yet")
}
