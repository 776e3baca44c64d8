use std::process::ExitCode;

use clap::Parser;
use dljob::cli::{self, Cli, Command};

fn main() -> anyhow::Result<ExitCode> {
    rustls::crypto::ring::default_provider()
        .install_default()
        .map_err(|_| anyhow::anyhow!("a rustls crypto provider was already installed"))?;
    match &Cli::parse().command {
        Command::Serve(args) => dljob::webhook::serve(args),
        Command::Mutate(args) => cli::mutate(args),
        Command::Validate(args) => cli::validate(args),
        Command::Crd => dljob::crd::print(),
        Command::Certs(args) => dljob::install::certs(args),
        Command::WebhookConfig(args) => dljob::install::webhook_config(args),
    }
}
