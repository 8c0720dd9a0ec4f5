//! ACPX state directory scenarios 72–76 (the contract: `docs/harness-backend.md`, "ACPX state
//! directory").

use std::fs;
use std::path::{Path, PathBuf};

use serde_json::{Value, json};
use tether_harness_sdk::acpx::{
    AcpxStateConfig, CURRENT_SESSION_SCHEMA, LEGACY_SESSION_SCHEMA, StateDirSource,
    migrate_legacy_sessions, prepare_state_dir, resolve_state_dir,
};

struct Layout {
    _root: tempfile::TempDir,
    workspace: PathBuf,
    host_state: PathBuf,
}

impl Layout {
    fn new() -> Self {
        let root = tempfile::tempdir().unwrap();
        let workspace = root.path().join("workspace");
        let host_state = root.path().join("state");
        fs::create_dir_all(&workspace).unwrap();
        Self {
            workspace,
            host_state,
            _root: root,
        }
    }

    fn config(&self) -> AcpxStateConfig {
        AcpxStateConfig::new(self.workspace.clone(), self.host_state.clone())
    }

    fn legacy_sessions(&self) -> PathBuf {
        self.workspace.join("state/sessions")
    }

    fn write_legacy(&self, name: &str, body: &str) {
        fs::create_dir_all(self.legacy_sessions()).unwrap();
        fs::write(self.legacy_sessions().join(name), body).unwrap();
    }
}

fn read(path: &Path) -> String {
    fs::read_to_string(path).unwrap()
}

fn current_session(id: &str) -> String {
    json!({"schema": CURRENT_SESSION_SCHEMA, "acpxRecordId": id}).to_string()
}

fn legacy_session(id: &str) -> Value {
    json!({
        "schema": LEGACY_SESSION_SCHEMA,
        "acpxRecordId": id,
        "acpSessionId": "acp-1",
        "agentCommand": "codex-acp",
        "cwd": "/work",
        "createdAt": "2026-01-01T00:00:00Z",
        "lastUsedAt": "2026-01-02T00:00:00Z",
        "lastSeq": 7,
        "updated_at": "2026-01-02T00:00:00Z",
        "messages": [{"role": "user", "content": "hi"}],
        "closed": true,
        "pid": 4242,
        "title": null,
        "lastAgentExitCode": null,
        "unknownLegacyField": "dropped"
    })
}

/// Scenario 72: no explicit directory, an empty new default and legacy session files: the
/// sessions are adopted into the new location and read from it afterwards; the legacy files
/// are kept.
#[test]
fn lifecycle_scenario_72_empty_default_adopts_legacy_sessions() {
    let layout = Layout::new();
    layout.write_legacy("a.json", &current_session("a"));
    layout.write_legacy("b.json", &current_session("b"));
    // An existing but empty new default counts as empty.
    fs::create_dir_all(layout.host_state.join("acpx")).unwrap();

    let resolved = resolve_state_dir(&layout.config());
    assert_eq!(resolved.source, StateDirSource::Adopted { files: 2 });
    assert_eq!(resolved.path, layout.host_state.join("acpx"));
    for name in ["a.json", "b.json"] {
        assert_eq!(
            read(&resolved.path.join("sessions").join(name)),
            read(&layout.legacy_sessions().join(name))
        );
    }
    assert!(layout.legacy_sessions().join("a.json").exists());
    let leftovers: Vec<_> = fs::read_dir(&layout.host_state)
        .unwrap()
        .map(|e| e.unwrap().file_name())
        .collect();
    assert_eq!(leftovers, vec!["acpx"], "no staging directory left behind");

    // Later resolutions read from the new location without adopting again.
    layout.write_legacy("c.json", &current_session("c"));
    let again = resolve_state_dir(&layout.config());
    assert_eq!(again.source, StateDirSource::Default);
    assert_eq!(again.path, resolved.path);
    assert!(!again.path.join("sessions/c.json").exists());
}

/// Scenario 73: a non-empty new default is used as is; nothing is adopted.
#[test]
fn lifecycle_scenario_73_non_empty_default_is_used_without_adoption() {
    let layout = Layout::new();
    layout.write_legacy("old.json", &current_session("old"));
    let default = layout.host_state.join("acpx/sessions");
    fs::create_dir_all(&default).unwrap();
    fs::write(default.join("new.json"), current_session("new")).unwrap();

    let resolved = resolve_state_dir(&layout.config());
    assert_eq!(resolved.source, StateDirSource::Default);
    assert_eq!(resolved.path, layout.host_state.join("acpx"));
    assert!(!resolved.path.join("sessions/old.json").exists());
    assert!(resolved.path.join("sessions/new.json").exists());
    assert!(layout.legacy_sessions().join("old.json").exists());
}

/// Scenario 74: an explicit directory is never relocated, and nothing is adopted.
#[test]
fn lifecycle_scenario_74_explicit_state_dir_is_never_relocated() {
    let layout = Layout::new();
    layout.write_legacy("old.json", &current_session("old"));
    let explicit = layout.workspace.join("custom-acpx");
    let config = layout.config().with_explicit_state_dir(explicit.clone());

    let resolved = resolve_state_dir(&config);
    assert_eq!(resolved.source, StateDirSource::Explicit);
    assert_eq!(resolved.path, explicit);
    assert!(!layout.host_state.join("acpx").exists());
    assert!(!explicit.exists(), "resolution creates nothing");
    assert!(layout.legacy_sessions().join("old.json").exists());
}

/// Scenario 75: adoption fails part-way (a dangling link among the legacy files). A warning is
/// logged, the legacy location is used — for the rest of the process, even once the cause is
/// gone — no partial new default is left, and no legacy file is deleted.
#[cfg(unix)]
#[test]
fn lifecycle_scenario_75_failed_adoption_keeps_legacy_location_for_the_process() {
    let layout = Layout::new();
    layout.write_legacy("a.json", &current_session("a"));
    layout.write_legacy("z.json", &current_session("z"));
    let dangling = layout.legacy_sessions().join("m.json");
    std::os::unix::fs::symlink(layout.workspace.join("nowhere"), &dangling).unwrap();

    let resolved = resolve_state_dir(&layout.config());
    assert_eq!(resolved.source, StateDirSource::LegacyFallback);
    assert_eq!(resolved.path, layout.workspace.join("state"));
    assert!(layout.legacy_sessions().join("a.json").exists());
    assert!(layout.legacy_sessions().join("z.json").exists());
    assert!(
        dangling.symlink_metadata().is_ok(),
        "legacy entries untouched"
    );
    assert!(
        !layout.host_state.join("acpx").exists(),
        "no partial new default hides the sessions"
    );
    let leftovers = fs::read_dir(&layout.host_state).unwrap().count();
    assert_eq!(leftovers, 0, "the staging copy was removed");

    // The cause goes away, but this process keeps the legacy location.
    fs::remove_file(&dangling).unwrap();
    let again = resolve_state_dir(&layout.config());
    assert_eq!(again.source, StateDirSource::LegacyFallback);
    assert_eq!(again.path, layout.workspace.join("state"));
}

/// Scenario 76: a legacy-schema file is rewritten as `acpx.session.v1` with its record id
/// kept; a broken file is warned about and skipped; other files are left alone; a missing
/// directory is a no-op.
#[test]
fn lifecycle_scenario_76_legacy_schema_converted_and_broken_files_skipped() {
    let layout = Layout::new();
    layout.write_legacy("rec-1.json", &legacy_session("rec-1").to_string());
    layout.write_legacy("broken.json", "{ not json");
    layout.write_legacy("current.json", &current_session("current"));
    layout.write_legacy("notes.txt", "not a session");
    let mut incomplete = legacy_session("rec-2");
    incomplete.as_object_mut().unwrap().remove("messages");
    layout.write_legacy("rec-2.json", &incomplete.to_string());

    // Explicit directory: the migration runs in place.
    let config = layout
        .config()
        .with_explicit_state_dir(layout.workspace.join("state"));
    let prepared = prepare_state_dir(&config).unwrap();
    assert_eq!(prepared.state_dir.source, StateDirSource::Explicit);
    assert_eq!(prepared.migration.migrated, vec!["rec-1".to_owned()]);
    let skipped: Vec<_> = prepared
        .migration
        .skipped
        .iter()
        .map(|s| s.name.as_str())
        .collect();
    assert_eq!(skipped, vec!["broken.json", "rec-2.json"]);
    assert!(prepared.migration.skipped[1].reason.contains("messages"));

    let converted: Value =
        serde_json::from_str(&read(&layout.legacy_sessions().join("rec-1.json"))).unwrap();
    assert_eq!(converted["schema"], CURRENT_SESSION_SCHEMA);
    assert_eq!(converted["acpxRecordId"], "rec-1");
    assert_eq!(converted["acpSessionId"], "acp-1");
    assert_eq!(converted["lastSeq"], 7);
    assert_eq!(converted["closed"], true);
    assert_eq!(converted["pid"], 4242);
    assert_eq!(converted["title"], Value::Null);
    assert_eq!(converted["messages"][0]["content"], "hi");
    assert_eq!(converted["eventLog"], json!({}));
    assert!(converted.get("unknownLegacyField").is_none());

    assert_eq!(
        read(&layout.legacy_sessions().join("broken.json")),
        "{ not json"
    );
    assert_eq!(
        read(&layout.legacy_sessions().join("current.json")),
        current_session("current")
    );
    assert!(layout.legacy_sessions().join("rec-2.json").exists());

    // Idempotent: a second run finds nothing legacy left to convert.
    let rerun = migrate_legacy_sessions(&layout.workspace.join("state")).unwrap();
    assert!(rerun.migrated.is_empty());

    // A differently named legacy file is saved under its record id; the original is kept.
    layout.write_legacy("other-name.json", &legacy_session("rec 3").to_string());
    let named = migrate_legacy_sessions(&layout.workspace.join("state")).unwrap();
    assert_eq!(named.migrated, vec!["rec 3".to_owned()]);
    assert!(layout.legacy_sessions().join("rec%203.json").exists());
    assert!(layout.legacy_sessions().join("other-name.json").exists());

    let missing = migrate_legacy_sessions(&layout.workspace.join("no-such-dir")).unwrap();
    assert_eq!(missing, Default::default());
}

/// Adoption then migration: the converted record lands in the new default, the legacy file
/// keeps its legacy schema.
#[test]
fn adopted_sessions_are_migrated_in_the_new_location_only() {
    let layout = Layout::new();
    layout.write_legacy("rec-9.json", &legacy_session("rec-9").to_string());
    let prepared = prepare_state_dir(&layout.config()).unwrap();
    assert_eq!(
        prepared.state_dir.source,
        StateDirSource::Adopted { files: 1 }
    );
    assert_eq!(prepared.migration.migrated, vec!["rec-9".to_owned()]);
    let new: Value =
        serde_json::from_str(&read(&prepared.state_dir.path.join("sessions/rec-9.json"))).unwrap();
    assert_eq!(new["schema"], CURRENT_SESSION_SCHEMA);
    let old: Value =
        serde_json::from_str(&read(&layout.legacy_sessions().join("rec-9.json"))).unwrap();
    assert_eq!(old["schema"], LEGACY_SESSION_SCHEMA);
}

/// Nothing to adopt: the new default is used even when the legacy directory is missing or
/// empty.
#[test]
fn missing_or_empty_legacy_directory_uses_the_new_default() {
    let layout = Layout::new();
    assert_eq!(
        resolve_state_dir(&layout.config()).source,
        StateDirSource::Default
    );
    fs::create_dir_all(layout.workspace.join("state")).unwrap();
    let resolved = resolve_state_dir(&layout.config());
    assert_eq!(resolved.source, StateDirSource::Default);
    assert!(!resolved.path.exists());
}
