//! `src/agents/accepted-session-spawn.test.ts`: merging accepted spawns of one run.

use tether_core::AcceptedSessionSpawn;
use tether_harness_sdk::results::spawn::AcceptedSessionSpawns;

fn spawn(run_id: &str, child: &str, label: Option<&str>, collected: bool) -> AcceptedSessionSpawn {
    AcceptedSessionSpawn {
        run_id: run_id.into(),
        child_session_key: child.into(),
        session_url: None,
        public_read: false,
        label: label.map(str::to_owned),
        expects_completion_message: false,
        collected,
    }
}

#[test]
fn openclaw_accepted_session_spawn_keeps_first_acceptance_and_adds_collection() {
    let mut spawns = AcceptedSessionSpawns::new();
    let accepted = spawn("run-a", "agent:main:subagent:a", Some("first"), false);
    spawns.merge([accepted.clone()]);
    let expected = AcceptedSessionSpawn {
        collected: true,
        ..accepted
    };
    assert_eq!(
        spawns.merge([spawn("run-a", "agent:main:subagent:other", None, true)]),
        std::slice::from_ref(&expected)
    );
    assert_eq!(
        spawns.merge([spawn("run-a", "agent:main:subagent:a", None, false)]),
        [expected]
    );
}
