//! Logging: `tracing` to standard error, as text or one JSON object per
//! line. `RUST_LOG` overrides the default `info` filter.

use std::io::IsTerminal;

use tracing_subscriber::EnvFilter;

use crate::args::LogFormat;

/// Installs the global subscriber. Calling it again (tests) is harmless.
pub(crate) fn init(format: LogFormat) {
    let filter = EnvFilter::try_from_default_env().unwrap_or_else(|_| EnvFilter::new("info"));
    let builder = tracing_subscriber::fmt()
        .with_env_filter(filter)
        .with_writer(std::io::stderr)
        .with_ansi(std::io::stderr().is_terminal());
    let _already_set = match format {
        LogFormat::Text => builder.try_init(),
        LogFormat::Json => builder
            .json()
            .flatten_event(true)
            .with_current_span(false)
            .try_init(),
    };
}
