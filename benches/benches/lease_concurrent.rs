//! `lease_cycle_concurrent_*` / `lease_transact_concurrent_*`: N owners (1, 8, 32, 128) each on
//! their own key, lease cycle and transact throughput with p50/p99 on SQLite and PostgreSQL,
//! beside a single-node etcd doing the same work (feature `etcd`). Not a criterion benchmark:
//! the harness lives in `tether_benches::concurrent`; `cargo bench -p tether-benches --bench
//! lease_concurrent [--features etcd] -- [--quick] [--help]`.

use std::process::ExitCode;

fn main() -> ExitCode {
    tether_benches::concurrent::main()
}
