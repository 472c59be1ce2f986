//! `grist-bench`: an aisloader-style load generator for Gristmill and plain-HTTP baselines.
//!
//! Flow: flags ([`config`]) → a fixed object set with deterministic contents ([`workload`]) →
//! per-object URLs for the chosen mode ([`client`]) → closed-loop workers that record latency
//! histograms ([`stats`]) → a line per interval and final numbers ([`run`]).
//! See docs/benchmarks.md.

mod client;
mod config;
mod run;
mod stats;
mod workload;

use clap::Parser;

fn main() -> std::process::ExitCode {
    let args = config::Args::parse();
    let cfg = match args.validate() {
        Ok(c) => c,
        Err(e) => {
            eprintln!("grist-bench: {e:#}");
            return std::process::ExitCode::from(1);
        }
    };
    let runtime = match tokio::runtime::Builder::new_multi_thread()
        .worker_threads(cfg.threads)
        .enable_all()
        .build()
    {
        Ok(r) => r,
        Err(e) => {
            eprintln!("grist-bench: starting the runtime: {e}");
            return std::process::ExitCode::from(1);
        }
    };
    match runtime.block_on(run::run(cfg)) {
        Ok(true) => std::process::ExitCode::SUCCESS,
        Ok(false) => std::process::ExitCode::from(2),
        Err(e) => {
            eprintln!("grist-bench: {e:#}");
            std::process::ExitCode::from(1)
        }
    }
}
