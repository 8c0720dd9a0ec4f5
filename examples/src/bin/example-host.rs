//! `example-host`: the example host gateway on the database at `--database-url` (`sqlite://…`
//! or `postgres://…`), opened through the `tether-host` facade.
//!
//! ```text
//! example-host tour    --database-url URL [--holder NAME] [--prefix agent:main]
//! example-host hold    --database-url URL --session KEY [--holder NAME] [--hold-ms 4000] [--lease-ms 1500]
//! example-host contend --database-url URL --session KEY [--holder NAME] [--wait-ms 20000] [--lease-ms 1500]
//! ```
//!
//! `tour` runs [`tether_example_harness::tour`]; `hold` and `contend` are the two sides of
//! [`tether_example_harness::contention`], meant to run as separate processes on one database.
//! `hold` releases the lease when its standard input closes or `--hold-ms` passed.
//! Each prints what it observed as `name=value` lines on stdout as it happens; logs go to
//! stderr (`RUST_LOG`, default `info`). Exit codes: 0 done, 1 failed, 2 bad usage, 3 the lease
//! was lost.

use std::io::Write as _;
use std::process::ExitCode;
use std::time::Duration;

use tether_core::{Error, SessionKey};
use tether_example_harness::cli::Options;
use tether_example_harness::contention::{self, Contended};
use tether_example_harness::tour;
use tether_host::Host;

/// The parsed command line.
struct Args {
    command: String,
    options: Options,
}

impl Args {
    fn parse() -> Result<Self, String> {
        let mut argv = std::env::args().skip(1);
        let command = argv
            .next()
            .ok_or("a command is required: tour, hold or contend")?;
        Ok(Self {
            command,
            options: Options::parse(argv)?,
        })
    }

    fn get(&self, name: &str) -> Option<&str> {
        self.options.get(name)
    }

    fn required(&self, name: &str) -> Result<&str, String> {
        self.options.required(name)
    }

    fn millis(&self, name: &str, default: u64) -> Result<Duration, String> {
        self.options.millis(name, default)
    }
}

/// Prints one `name=value` line at once (the watching process reads them as they come).
fn report(name: &str, value: String) {
    let mut out = std::io::stdout().lock();
    // A closed stdout only loses the report; the work goes on.
    let _ = writeln!(out, "{name}={value}");
    let _ = out.flush();
}

async fn run(args: &Args) -> Result<(), Error> {
    let url = args
        .required("database-url")
        .map_err(Error::other)?
        .to_owned();
    let mut builder = Host::builder(url);
    if let Some(holder) = args.get("holder") {
        builder = builder.holder(holder);
    }
    let host = builder.open().await?;
    let contended = |args: &Args| -> Result<Contended, Error> {
        Ok(Contended {
            key: SessionKey::new(args.required("session").map_err(Error::other)?)?,
            lease: args.millis("lease-ms", 1_500).map_err(Error::other)?,
        })
    };
    let result = match args.command.as_str() {
        "tour" => {
            let prefix = args.get("prefix").unwrap_or("agent:main");
            tour::run(&host, prefix).await.map(|facts| {
                for fact in facts {
                    report(&fact.name, fact.value);
                }
            })
        }
        "hold" => {
            let hold_for = args.millis("hold-ms", 4_000).map_err(Error::other)?;
            let stdin_closed = async {
                let mut sink = tokio::io::sink();
                // Whatever arrives is discarded; the end of input (or a read error) releases.
                let _ = tokio::io::copy(&mut tokio::io::stdin(), &mut sink).await;
            };
            contention::hold(&host, &contended(args)?, hold_for, stdin_closed, &report).await
        }
        "contend" => {
            let wait = args.millis("wait-ms", 20_000).map_err(Error::other)?;
            contention::contend(&host, &contended(args)?, wait, &report).await
        }
        other => Err(Error::other(format!(
            "unknown command `{other}`: tour, hold or contend"
        ))),
    };
    host.close().await?;
    result
}

fn main() -> ExitCode {
    tether_example_harness::cli::init_logging();
    let args = match Args::parse() {
        Ok(args) => args,
        Err(usage) => {
            tracing::error!(%usage, "bad usage");
            return ExitCode::from(2);
        }
    };
    let Ok(runtime) = tether_example_harness::cli::runtime() else {
        return ExitCode::FAILURE;
    };
    let code = runtime.block_on(async {
        match run(&args).await {
            Ok(()) => ExitCode::SUCCESS,
            Err(error @ Error::LostLease { .. }) => {
                tracing::error!(%error, "the lease was lost");
                ExitCode::from(3)
            }
            Err(error) => {
                tracing::error!(%error, "failed");
                ExitCode::FAILURE
            }
        }
    });
    // `hold`'s read of standard input blocks a runtime thread until the input closes: exit
    // without waiting for it.
    runtime.shutdown_background();
    code
}
