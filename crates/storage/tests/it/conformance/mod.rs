//! The conformance suite: the same cases on memory, SQLite (temporary file) and PostgreSQL.
//! Host-session cases run on the two SQL backends.

mod cases;
pub(crate) mod host_cases;

macro_rules! conformance {
    (binding: [$($case:ident),* $(,)?], host: [$($host:ident),* $(,)?]) => {
        mod sqlite {
            $(
                #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
                async fn $case() {
                    let backend = crate::support::sqlite_backend().await;
                    super::cases::$case(&backend).await;
                }
            )*
            $(
                #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
                async fn $host() {
                    let (store, _dir) = crate::support::sqlite_store().await;
                    super::host_cases::$host(&store).await;
                }
            )*
        }

        /// PostgreSQL: one fresh database for the whole test binary, every case in sequence,
        /// dropped afterwards. Skipped with a notice when the server is unreachable, unless
        /// `TETHER_REQUIRE_PG=1`.
        #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
        async fn postgres_all_cases() {
            let Some(db) = tether_storage::testing::PgTestDatabase::create("storage_it").await else {
                return;
            };
            $(
                {
                    let backend = crate::support::open_backend(
                        "postgres",
                        db.url().to_owned(),
                        tether_core::FakeClock::new(crate::support::START),
                        None,
                    )
                    .await;
                    cases::$case(&backend).await;
                }
            )*
            $(
                {
                    let store = crate::support::open_store(db.url()).await;
                    host_cases::$host(&store).await;
                }
            )*
            db.cleanup().await;
        }

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
    binding: [
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
        scenario_6_conflict_reevaluates_with_the_fresh_observation,
        scenario_7_uncertain_outcome_is_not_replayed,
        apply_observed_writes_and_reports_the_row,
        apply_observed_refuses_a_stale_observation,
        apply_observed_renewal_records_its_latency,
        text_rules_refuse_before_writing,
    ],
    host: [
        host_session_create_read_rotate,
        transcript_append_is_idempotent,
        transcript_cuts_and_refusals,
        fork_leaves_the_source_untouched,
        transcript_search,
        upstream_links_expected_delete,
        server_clock_tracks_database_time,
        deletion_commits_bindings_with_the_session_row,
        transcript_text_rules_refuse_before_writing,
        transcript_metadata_round_trips,
    ]
);
