//! The chaos worker of `cargo xtask chaos` (RELIABILITY.md, "Chaos").
//!
//! ```text
//! chaos_worker setup  --url URL                 create the drill's tables and rows
//! chaos_worker run    --url URL --name W --seconds S
//! chaos_worker run    --url URL --name W --seconds S --acks FILE   (also log every outcome)
//!                     [--hold-ms MS]             (hold each lease MS before writing; default 5)
//!                     [--clock host|server]      (decide leases with the host's clock, the
//!                                                default, or the database server's time)
//!                     [--clock-skew-ms N]        (the host clock runs N ms ahead, behind if < 0)
//! chaos_worker check  --url URL --kills K       print `chaos: <ops> ops, <kills> kills, <violations> violations`
//! chaos_worker check  --url URL --kills K --acks DIR   also: every acknowledged write is
//!                                               logged, no half-applied write, integrity ok
//! chaos_worker pg-create                        create a fresh PostgreSQL database, print its URL
//! chaos_worker pg-drop --url URL                drop that database
//! chaos_worker pg-terminate --url URL           terminate every backend of that database
//! chaos_worker pg-allow --url URL --allow B     allow (true) or refuse (false, and terminate)
//!                                               new connections to that database
//! ```

#[path = "../chaos/mod.rs"]
mod chaos;

use std::process::ExitCode;
use std::time::{Duration, Instant};

use sea_orm::ConnectionTrait;

/// The worker's user-facing output.
#[allow(clippy::print_stdout)]
fn say(line: &str) {
    println!("{line}");
}

fn arg(args: &[String], name: &str) -> Option<String> {
    args.iter()
        .position(|a| a == name)
        .and_then(|i| args.get(i + 1).cloned())
}

async fn main_async(args: Vec<String>) -> Result<bool, String> {
    let command = args.first().cloned().unwrap_or_default();
    let url = || arg(&args, "--url").ok_or("--url is required");
    match command.as_str() {
        "setup" => {
            let store = chaos::open(&url()?).await.map_err(|e| e.to_string())?;
            chaos::setup(&store).await.map_err(|e| e.to_string())?;
            Ok(true)
        }
        "run" => {
            let name = arg(&args, "--name").ok_or("--name is required")?;
            let seconds: u64 = arg(&args, "--seconds")
                .and_then(|s| s.parse().ok())
                .ok_or("--seconds N is required")?;
            let deadline = Instant::now() + Duration::from_secs(seconds);
            let skew: i64 = match arg(&args, "--clock-skew-ms") {
                Some(ms) => ms
                    .parse()
                    .map_err(|_| format!("--clock-skew-ms needs a number, got `{ms}`"))?,
                None => 0,
            };
            let choice = match arg(&args, "--clock").as_deref() {
                None | Some("host") => chaos::ClockChoice::Host,
                Some("server") => chaos::ClockChoice::Server,
                Some(other) => {
                    return Err(format!("--clock must be host or server, not `{other}`"));
                }
            };
            let (store, clock) = chaos::open_worker(&url()?, skew, choice)
                .await
                .map_err(|e| e.to_string())?;
            let mut worker =
                chaos::worker::Worker::new(store, &name, clock).map_err(|e| e.to_string())?;
            if let Some(ms) = arg(&args, "--hold-ms") {
                let ms: u64 = ms
                    .parse()
                    .map_err(|_| format!("--hold-ms needs a number, got `{ms}`"))?;
                worker = worker.with_hold(Duration::from_millis(ms));
            }
            if let Some(path) = arg(&args, "--acks") {
                let acks = chaos::worker::Acks::open(&path).map_err(|e| e.to_string())?;
                worker = worker.with_acks(acks);
            }
            let ops = worker.run(deadline).await;
            say(&format!("chaos worker {name}: {ops} ops"));
            Ok(true)
        }
        "check" => {
            let kills: u64 = arg(&args, "--kills")
                .and_then(|s| s.parse().ok())
                .unwrap_or(0);
            let store = chaos::open(&url()?).await.map_err(|e| e.to_string())?;
            let acks = arg(&args, "--acks");
            let (ops, mut violations) = chaos::check::check(&store, acks.is_some())
                .await
                .map_err(|e| e.to_string())?;
            if let Some(dir) = acks {
                let acked =
                    chaos::check::check_faults(&store, std::path::Path::new(&dir), &mut violations)
                        .await
                        .map_err(|e| e.to_string())?;
                say(&format!(
                    "acks: {} acknowledged writes, {} logged writes whose answer was lost",
                    acked.acks, acked.unacknowledged
                ));
                for entry in &acked.quarantined {
                    say(&format!("quarantined after an unknown outcome: {entry}"));
                }
                say(&format!(
                    "leases: {} held intervals compared, none may overlap",
                    acked.intervals
                ));
                for entry in &acked.lost_commits {
                    say(&format!("lost COMMIT: {entry}"));
                }
            }
            let outcomes = chaos::check::session_outcomes(&store)
                .await
                .map_err(|e| e.to_string())?;
            say(&format!("sessions: {outcomes}"));
            let refused = chaos::check::count(&store, "chaos_rejects")
                .await
                .map_err(|e| e.to_string())?;
            say(&format!("fence: {refused} writes refused as stale"));
            for violation in &violations {
                say(&format!("violation: {violation}"));
            }
            say(&format!(
                "chaos: {ops} ops, {kills} kills, {} violations",
                violations.len()
            ));
            Ok(violations.is_empty())
        }
        "pg-create" => {
            let db = tether_storage::testing::PgTestDatabase::create("chaos")
                .await
                .ok_or("PostgreSQL is unreachable")?;
            say(db.url());
            // The database outlives this process; `pg-drop` removes it.
            std::mem::forget(db);
            Ok(true)
        }
        "pg-terminate" | "pg-allow" => {
            // Faults of `cargo xtask faults`, run from the server's maintenance database:
            // terminate every backend of the chaos database, or stop (and allow again) new
            // connections to it.
            let url = url()?;
            let name = url.rsplit('/').next().unwrap_or_default().to_owned();
            if !name.starts_with("tether_chaos_") {
                return Err(format!("refusing to touch `{name}`: not a chaos database"));
            }
            let admin = sea_orm::Database::connect(tether_storage::testing::pg_server_url())
                .await
                .map_err(|e| e.to_string())?;
            if command == "pg-allow" {
                let allow = arg(&args, "--allow").ok_or("--allow true|false is required")?;
                if allow != "true" && allow != "false" {
                    return Err(format!("--allow must be true or false, not `{allow}`"));
                }
                admin
                    .execute_unprepared(&format!(
                        "ALTER DATABASE \"{name}\" WITH ALLOW_CONNECTIONS {allow}"
                    ))
                    .await
                    .map_err(|e| e.to_string())?;
            }
            if command == "pg-terminate" || arg(&args, "--allow").as_deref() == Some("false") {
                let rows = admin
                    .query_all_raw(sea_orm::Statement::from_sql_and_values(
                        sea_orm::DbBackend::Postgres,
                        "SELECT pg_terminate_backend(pid) AS t FROM pg_stat_activity WHERE datname = $1 AND pid <> pg_backend_pid()",
                        vec![name.clone().into()],
                    ))
                    .await
                    .map_err(|e| e.to_string())?;
                say(&format!("terminated {} backends of {name}", rows.len()));
            }
            Ok(true)
        }
        "pg-drop" => {
            let url = url()?;
            let name = url.rsplit('/').next().unwrap_or_default().to_owned();
            if !name.starts_with("tether_chaos_") {
                return Err(format!("refusing to drop `{name}`: not a chaos database"));
            }
            let server = tether_storage::testing::pg_server_url();
            let admin = sea_orm::Database::connect(server)
                .await
                .map_err(|e| e.to_string())?;
            admin
                .execute_unprepared(&format!("DROP DATABASE IF EXISTS \"{name}\" WITH (FORCE)"))
                .await
                .map_err(|e| e.to_string())?;
            Ok(true)
        }
        other => Err(format!("unknown command `{other}`")),
    }
}

fn main() -> ExitCode {
    let args: Vec<String> = std::env::args().skip(1).collect();
    let runtime = match tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
    {
        Ok(runtime) => runtime,
        Err(e) => {
            say(&format!("chaos worker: cannot start a runtime: {e}"));
            return ExitCode::FAILURE;
        }
    };
    match runtime.block_on(main_async(args)) {
        Ok(true) => ExitCode::SUCCESS,
        Ok(false) => ExitCode::FAILURE,
        Err(message) => {
            say(&format!("chaos worker: {message}"));
            ExitCode::FAILURE
        }
    }
}
