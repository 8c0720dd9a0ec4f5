//! The conformance suite: the same cases on memory, SQLite (temporary file) and PostgreSQL.

mod cases;

macro_rules! conformance {
    ($($case:ident),* $(,)?) => {
        /// Every case, by name, for backends that run them in sequence.
        #[allow(dead_code)]
        pub(crate) const CASE_NAMES: &[&str] = &[$(stringify!($case)),*];

        mod memory {
            $(
                #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
                async fn $case() {
                    let backend = crate::support::memory_backend();
                    super::cases::$case(&backend).await;
                }
            )*
        }
    };
}

conformance!(
    cas_conflict_returns_fresh_observation,
    keep_intents,
    admission_error_aborts_the_write,
    row_expiring_after_observation_conflicts,
    ttl_invisibility_and_sweep,
    capacity_reject_new,
    value_size_limit,
    unknown_namespace_is_refused,
    lease_epochs_are_monotonic,
    revisions_increase_and_recreation_does_not_match,
    register_delete_scan_count,
    lease_event_history,
    corrupted_value_is_an_invalid_row,
    quarantine_records_and_releases,
    racing_connections_exactly_one_wins,
);
