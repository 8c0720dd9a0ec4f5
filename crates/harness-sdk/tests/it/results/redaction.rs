//! The redaction pattern table (`docs/redaction.md`): one test per row. Each planted secret is
//! checked through the free-text layer, `sanitize_tool_args`, `sanitize_tool_result` and the
//! display path, and every output is a fixed point of the text layer.

use serde_json::{Value, json};
use tether_harness_sdk::results::display::{DetailMode, infer_tool_meta_from_args};
use tether_harness_sdk::results::redact::{is_sensitive_key, redact_text};
use tether_harness_sdk::results::sanitize::{
    redact_structured, sanitize_tool_args, sanitize_tool_result,
};
use tether_harness_sdk::results::shared::{SharedValue, sanitize_shared_tool_args};

/// `text` (which contains `secret`) loses the secret on every path, and redaction is stable.
fn assert_scrubbed(text: &str, secret: &str) {
    assert!(text.contains(secret), "the fixture plants {secret}");
    let once = redact_text(text);
    assert!(
        !once.contains(secret),
        "redact_text leaked {secret}: {once}"
    );
    assert_eq!(
        redact_text(&once),
        once,
        "redact_text is idempotent on {text}"
    );
    let args = sanitize_tool_args(&json!({"task": text, "nested": [{"note": text}]}));
    assert!(
        !args.to_string().contains(secret),
        "sanitize_tool_args leaked {secret}: {args}"
    );
    let result = sanitize_tool_result(
        &json!({"content": [{"type": "text", "text": text}], "details": {"stdout": text}}),
    );
    assert!(
        !result.to_string().contains(secret),
        "sanitize_tool_result leaked {secret}: {result}"
    );
    for tool in ["sessions_spawn", "exec"] {
        let key = if tool == "exec" { "command" } else { "task" };
        let shown = infer_tool_meta_from_args(tool, &json!({ key: text }), DetailMode::Raw)
            .unwrap_or_default();
        assert!(
            !shown.contains(secret),
            "display of {tool} leaked {secret}: {shown}"
        );
    }
}

/// Each text of `cases` redacts to its expected text, which redaction keeps as it is; each
/// text of `kept` stays as it is.
fn assert_redactions(cases: &[(&str, &str)], kept: &[&str]) {
    for (text, expected) in cases {
        assert_eq!(redact_text(text), *expected, "{text}");
        assert_eq!(redact_text(expected), *expected, "idempotent: {expected}");
    }
    for text in kept {
        assert_eq!(redact_text(text), *text, "{text}");
    }
}

/// `args` sanitizes to `expected` through `sanitize_tool_args` (and again to itself),
/// `redact_structured` and the shared-graph walk.
fn assert_every_walk(args: &Value, expected: &Value) {
    let out = sanitize_tool_args(args);
    assert_eq!(&out, expected);
    assert_eq!(sanitize_tool_args(&out), out, "idempotent");
    assert_eq!(&redact_structured(args), expected);
    assert_eq!(
        &sanitize_shared_tool_args(&SharedValue::from_json(args)),
        expected,
        "shared graphs"
    );
}

#[test]
fn redaction_row_codes_by_parent() {
    let out = sanitize_tool_result(&json!({
        "oauth": {"code": "oauth-grant-code-1234567890"},
        "error": {"code": "SYSTEM_RUN_DENIED"},
        "cause": {"code": "ECONNRESET", "cause": {"code": "opaque-grant"}},
    }));
    assert_eq!(out["error"]["code"], "SYSTEM_RUN_DENIED");
    assert_eq!(out["cause"]["code"], "ECONNRESET");
    assert_eq!(out["cause"]["cause"]["code"], "***");
    assert!(!out.to_string().contains("oauth-grant-code-1234567890"));
}

#[test]
fn redaction_row_transport_codes_only_at_the_end_of_a_cause_chain() {
    let kept = json!({"cause": {"code": "ECONNRESET", "cause": {"code": "EPIPE"}}});
    assert_eq!(sanitize_tool_result(&kept), kept);
    assert_eq!(sanitize_tool_args(&kept), kept);
    for (input, path) in [
        (
            json!({"error": {"cause": {"code": "ECONNRESET"}}}),
            "/error/cause/code",
        ),
        (json!({"cause": [{"code": "ECONNRESET"}]}), "/cause/0/code"),
        (json!({"cause": {"code": ["ECONNRESET"]}}), "/cause/code/0"),
        (json!([{"cause": {"code": "ECONNRESET"}}]), "/0/cause/code"),
    ] {
        for out in [sanitize_tool_result(&input), sanitize_tool_args(&input)] {
            assert_eq!(out.pointer(path), Some(&json!("***")), "{input}");
        }
    }
}

#[test]
fn redaction_row_array_elements_under_sensitive_keys() {
    let input = json!({
        "token": ["opaque plain words 0427", ["nested words 0427"]],
        "headers": {"Cookie": ["session=opaque-cookie-value"]},
        "tags": ["alpha", "beta"],
        "publicShare": [{"id": "share-secret-id"}],
    });
    for out in [sanitize_tool_args(&input), sanitize_tool_result(&input)] {
        assert_eq!(out["token"], json!(["opaque…0427", ["***"]]), "{out}");
        assert_eq!(out["headers"]["Cookie"], json!(["sessio…alue"]), "{out}");
        assert_eq!(out["tags"], json!(["alpha", "beta"]), "{out}");
        assert_eq!(out["publicShare"][0]["id"], json!("***"), "{out}");
        assert_eq!(sanitize_tool_args(&out), out, "idempotent");
    }
}

#[test]
fn redaction_row_sensitive_key_names_mask_the_whole_value() {
    for key in [
        "apiKey",
        "api_key",
        "password",
        "client_secret",
        "Authorization",
        "accessToken",
        "refresh_token",
        "private_key",
        "AWS_SECRET_ACCESS_KEY",
        "cookie",
        "AccountKey",
        "SharedAccessKey",
        "connectionString",
        "card_number",
        "cvc",
        // Endings glued to the words before them, and `_PWD`.
        "PGPASSWORD",
        "dbpassword",
        "appsecret",
        "MYSQL_PWD",
    ] {
        assert!(is_sensitive_key(key), "{key}");
        let out = sanitize_tool_args(&json!({ key: "plain-words-but-secret-value" }));
        assert!(
            !out.to_string().contains("plain-words-but-secret-value"),
            "{key}: {out}"
        );
    }
    for key in [
        "primary_key",
        "cache_key",
        "model",
        "sessionKey",
        "pwd",
        "OLDPWD",
        "monkey",
        "bypass",
        "max_tokens",
    ] {
        assert!(!is_sensitive_key(key), "{key}");
    }
}

#[test]
fn redaction_row_assignments_in_free_text() {
    assert_scrubbed(
        "OPENAI_API_KEY=abc123def456ghi789 npm start",
        "abc123def456ghi789",
    );
    assert_scrubbed(
        r#"{"client_secret": "zq8Xw2Lr5Tn0Vb7M"}"#,
        "zq8Xw2Lr5Tn0Vb7M",
    );
    assert_scrubbed("password: hunter2hunter2", "hunter2hunter2");
    // Environment variables that carry a password (no `_` before `PASSWORD`, or `_PWD`).
    assert_scrubbed(
        "PGPASSWORD=hunter2hunter2 psql -h db -U app",
        "hunter2hunter2",
    );
    assert_redactions(
        &[
            (
                "PGPASSWORD=hunter2hunter2 psql -h db -U app",
                "PGPASSWORD=*** psql -h db -U app",
            ),
            (
                "export PGPASSWORD='hunter2hunter2'",
                "export PGPASSWORD='***'",
            ),
            (
                "MYSQL_PWD=hunter2hunter2 mysql -u root",
                "MYSQL_PWD=*** mysql -u root",
            ),
        ],
        &["cd $OLDPWD && PWD=/srv/app make"],
    );
    // The `=>` of Ruby, PHP and Perl hashes (it was read as `=` with the value `>`).
    for text in [
        "password => 'hunter2hunter2'",
        r#"{"user"=>{"password"=>"hunter2hunter2"}}"#,
        "'api_key' => hunter2hunter2, 'x' => 1",
    ] {
        assert_scrubbed(text, "hunter2hunter2");
    }
    assert_eq!(
        redact_text("'api_key' => hunter2hunter2, 'x' => 1"),
        "'api_key' => ***, 'x' => 1"
    );
}

#[test]
fn redaction_row_query_and_form_secrets() {
    assert_scrubbed(
        "GET /cb?code=oauth-grant-value-0427&state=visible",
        "oauth-grant-value-0427",
    );
    assert_scrubbed("x-amz-signature=deadbeef0427&safe=1", "deadbeef0427");
    assert_scrubbed("/cb?sig=signed0427#frag", "signed0427");
    assert!(redact_text("/cb?sig=signed0427#frag").ends_with("#frag"));
    // An error code in a diagnostic is not a query pair.
    let diagnostic = "Oops: failed: code=E1 status=500";
    assert_eq!(redact_text(diagnostic), diagnostic);
    // A single pair right after a body label is a form pair.
    assert_scrubbed(
        "body: code=oauth-grant-value-0427",
        "oauth-grant-value-0427",
    );
    assert_scrubbed(
        "form_body=signature=signed-value-0427 done",
        "signed-value-0427",
    );
    let prose = "nobody: code=E1 signature=kept";
    assert_eq!(redact_text(prose), prose);
}

#[test]
fn redaction_row_encoded_keys() {
    for text in [
        "body: client%5Fsecret=oauth-secret-value-0427&safe=1",
        "GET /cb?client_se+cret=oauth-secret-value-0427&safe=1",
        "body: client_se\u{200B}cret=oauth-secret-value-0427&safe=1",
        "body: client_secret\u{3164}=oauth-secret-value-0427&safe=1",
        "body: api_key\u{200B}\u{FEFF}=oauth-secret-value-0427",
    ] {
        assert_scrubbed(text, "oauth-secret-value-0427");
    }
    // An ordinary encoded key stays readable.
    assert_eq!(
        redact_text("GET /cb?redirect%5Furi=https%3A%2F%2Fx&safe=1"),
        "GET /cb?redirect%5Furi=https%3A%2F%2Fx&safe=1"
    );
    assert_eq!(
        redact_text("note\u{200B}=plain words"),
        "note\u{200B}=plain words"
    );
}

#[test]
fn redaction_row_credential_flags() {
    assert_scrubbed("deploy --api-key k3yMaterial991 --force", "k3yMaterial991");
    assert_scrubbed("login --password=Sup3rSecretPw", "Sup3rSecretPw");
    // An authorization scheme after the flag: the credential after it is masked, the scheme
    // stays.
    for (text, secret) in [
        (
            "curl --authorization Bearer opaqueTokenValue12345 x",
            "opaqueTokenValue12345",
        ),
        (
            "use --api-key Basic dXNlcjpzM2NyM3QtcGFzcw== now",
            "dXNlcjpzM2NyM3QtcGFzcw==",
        ),
        (
            "gh --token token ghs_opaque1234567890",
            "ghs_opaque1234567890",
        ),
    ] {
        assert_scrubbed(text, secret);
        let out = redact_text(text);
        assert!(
            out.contains(" Bearer ") || out.contains(" Basic ") || out.contains(" token "),
            "{out}"
        );
    }
    // Nor is a header name after a scheme: the header's own rule masks its credentials.
    assert_scrubbed(
        "Bearer Authorization: Digest username=ops, response=digestresponse1234567890 x",
        "digestresponse1234567890",
    );
    // Nor is a URL's scheme: the URL's own rule masks its password.
    assert_scrubbed(
        "Bearer  postgres://app:s3cr3t-db-pass@db:5432/prod x",
        "s3cr3t-db-pass",
    );
    // A Basic credential glued to a URL is still a credential (only a whole scheme word is a
    // URL's scheme).
    assert_scrubbed(
        "Basic dXNlcjpwYXNzd29yZA==-https://user@example.com/x",
        "dXNlcjpwYXNzd29yZA==",
    );
    // A flag after an authorization scheme is no credential: its own rule masks its value.
    assert_scrubbed("Bearer --api-key k3yMaterial991 x", "k3yMaterial991");
    // A value that merely ends with `:` or `=` is still the value.
    assert_scrubbed("run --password=secret123: next", "secret123");
    // A key after the flag that a token rule masks leaves its `:`, and a second redaction
    // keeps it (it took the `:` into the flag's value).
    for text in [
        "--api-key ghp_my_password: ",
        "--api-key ghp_password= x",
        "--api-key token=}…",
    ] {
        let once = redact_text(text);
        assert!(once.contains("***") && !once.contains("ghp_"), "{once}");
        assert_eq!(redact_text(&once), once, "{text}");
    }
    // A header name after the flag is not its value: the header's own rule masks what follows.
    assert_scrubbed(
        "use --api-key Authorization: Digest username=ops, response=digestresponse1234567890 now",
        "digestresponse1234567890",
    );
    // One `-` also starts a long name (Go's flags, Java's and OpenSSL's tools), and Java's
    // keystore passwords count.
    assert_scrubbed(
        "go run ./cmd/agent -token k3yMaterial991 -v",
        "k3yMaterial991",
    );
    assert_redactions(
        &[
            ("app -password hunter2hunter2 -v", "app -password *** -v"),
            // A quoted value, whatever it holds.
            (
                "app --password 'hunter2 hunter2' -v",
                "app --password '***' -v",
            ),
            (
                "app --password=\"hunter2hunter2\" -v",
                "app --password=\"***\" -v",
            ),
            (
                r#"{"cmd":"app --api-key \"correct horse battery staple\""}"#,
                r#"{"cmd":"app --api-key \"correc…aple\""}"#,
            ),
            ("app -api-key=hunter2hunter2", "app -api-key=***"),
            // Glued to the text before it, it is read as an assignment.
            ("x;-password=hunter2hunter2", "x;-password=***"),
            (
                "keytool -genkey -keystore a.jks -storepass hunter2hunter2 -keypass 'hunter3 hunter3'",
                "keytool -genkey -keystore a.jks -storepass *** -keypass '***'",
            ),
            (
                "keytool -importkeystore -srcstorepass hunter2hunter2 -deststorepass hunter2hunter2",
                "keytool -importkeystore -srcstorepass *** -deststorepass ***",
            ),
            (
                "curl --oauth2-bearer opaqueTokenValue12345 https://x",
                "curl --oauth2-bearer opaque…2345 https://x",
            ),
        ],
        // A cluster of short flags is no name; prose after a flag stays.
        &[
            "tar -cvv -f out.tar dir",
            "use -password or -token when asked",
            "find . -name x -print",
        ],
    );
}

#[test]
fn redaction_row_user_flags() {
    assert_scrubbed("curl -u admin:hunter2hunter2 https://x", "hunter2hunter2");
    // The whole value is masked: a user name can be a token.
    assert_scrubbed(
        "curl -u ghp_16C7e42F292c6912E7710c838347Ae178B4a:x-oauth-basic https://api.github.com",
        "ghp_16C7e42F292c6912E7710c838347Ae178B4a",
    );
    assert_redactions(
        &[
            (
                "curl -u admin:hunter2hunter2 https://api.example.com/v1",
                "curl -u *** https://api.example.com/v1",
            ),
            (
                "curl --user 'me@example.com:hunter2 hunter2' https://x",
                "curl --user 'me@exa…ter2' https://x",
            ),
            (
                "curl --user=admin:hunter2hunter2 https://x",
                "curl --user=*** https://x",
            ),
            (
                "curl -U proxyuser:hunter2hunter2 -x http://proxy:3128 https://x",
                "curl -U proxyu…ter2 -x http://proxy:3128 https://x",
            ),
            (
                "curl --proxy-user bob:hunter2hunter2 https://x",
                "curl --proxy-user *** https://x",
            ),
            (
                "curl -u \"admin:hunter2hunter2\" https://x",
                "curl -u \"***\" https://x",
            ),
            (
                r#"{"command":"curl -u \"admin:hunter2 hunter2\" https://x"}"#,
                r#"{"command":"curl -u \"***\" https://x"}"#,
            ),
            (
                "curl -u 'admin:hunter2hunter2 https://x",
                "curl -u '*** https://x",
            ),
            // In serialized text the command follows an escaped line break.
            (
                "set -e\\ncurl -u admin:hunter2hunter2),",
                "set -e\\ncurl -u ***),",
            ),
        ],
        // Values that are no user and password stay.
        &[
            "docker run -u 1000:1000 alpine id",
            "rsync -u host:/data/ ./data/",
            "git push -u origin main",
            "sort -u names.txt",
            "redis-cli -u redis://cache:6379/0 ping",
            "curl -u :hunter2 https://x",
            "curl -u admin: https://x",
            "use -u or --user when the server asks",
            // `-u` asks `date` for UTC; the format after it is no user name.
            "date -u +%Y-%m-%dT%H:%M:%SZ",
            "date -u '+%H:%M'",
        ],
    );
    // Under a key, and beside other secrets.
    let out = sanitize_tool_args(&json!({
        "command": "curl -sS -u admin:hunter2hunter2 -H 'Authorization: Bearer abcdefgh12345678' https://x"
    }));
    let text = out["command"].as_str().unwrap_or_default();
    assert!(!text.contains("hunter2hunter2"), "{text}");
    assert!(!text.contains("abcdefgh12345678"), "{text}");
    assert!(text.contains("-u *** "), "{text}");
}

#[test]
fn redaction_row_command_password_flags() {
    assert_scrubbed(
        "mysql -u root -pS3cretPass991 -e 'show databases'",
        "S3cretPass991",
    );
    assert_scrubbed(
        "sshpass -p 'hunter2 hunter2' ssh deploy@host",
        "hunter2 hunter2",
    );
    assert_redactions(
        &[
            // Glued, quoted, after `sudo` and a directory, in a later command of the line.
            (
                "cd /srv && sudo -u root /usr/bin/mysqldump -uroot -p'my pass' app > a.sql",
                "cd /srv && sudo -u root /usr/bin/mysqldump -uroot -p'***' app > a.sql",
            ),
            (
                "docker exec -it db mariadb -uroot -phunter2hunter2 app",
                "docker exec -it db mariadb -uroot -p*** app",
            ),
            ("sshpass -phunter2 ssh host", "sshpass -p*** ssh host"),
            (
                "redis-cli -h 127.0.0.1 -a hunter2hunter2 ping",
                "redis-cli -h 127.0.0.1 -a *** ping",
            ),
            (
                "mongosh -u admin -p hunter2hunter2 --authenticationDatabase admin",
                "mongosh -u admin -p *** --authenticationDatabase admin",
            ),
            (
                "echo x | docker login -u mysql -p hunter2hunter2 registry.example.com",
                "echo x | docker login -u mysql -p *** registry.example.com",
            ),
            (
                "az login --service-principal -u app -p hunter2hunter2 --tenant t",
                "az login --service-principal -u app -p *** --tenant t",
            ),
            (
                "ldapsearch -x -D cn=admin,dc=example -w hunter2hunter2 -b dc=example",
                "ldapsearch -x -D cn=admin,dc=example -w *** -b dc=example",
            ),
            (
                "sqlcmd -S localhost -U sa -P 'Str0ng!Pass' -Q 'select 1'",
                "sqlcmd -S localhost -U sa -P '***' -Q 'select 1'",
            ),
            ("zip -P hunter2hunter2 out.zip a", "zip -P *** out.zip a"),
            ("7z a -phunter2hunter2 out.7z a", "7z a -p*** out.7z a"),
            (
                "openssl enc -aes-256-cbc -k hunter2hunter2 -in a",
                "openssl enc -aes-256-cbc -k *** -in a",
            ),
            (
                "smbclient //host/share -U admin%hunter2hunter2",
                "smbclient //host/share -U admin%…ter2",
            ),
            (
                "lftp -u admin,hunter2hunter2 host",
                "lftp -u admin,…ter2 host",
            ),
            (
                "http -a admin:hunter2 example.org",
                "http -a *** example.org",
            ),
            (
                "ssh-keygen -t ed25519 -N 'new pass phrase' -f key",
                "ssh-keygen -t ed25519 -N '***' -f key",
            ),
            // In serialized text, after an escaped line break and in escaped quotes.
            (
                r#"{"cmd":"set -e\nmysql -pS3cretPass991 app"}"#,
                r#"{"cmd":"set -e\nmysql -p*** app"}"#,
            ),
            (
                r#"{"cmd":"sshpass -p \"hunter2 hunter2\" ssh h"}"#,
                r#"{"cmd":"sshpass -p \"***\" ssh h"}"#,
            ),
            // Separators inside quotes belong to the command (SQL given to `mysql -e`).
            (
                "mysql -e \"use app; select count(*) from t\" -uroot -phunter2hunter2",
                "mysql -e \"use app; select count(*) from t\" -uroot -p***",
            ),
            (
                "bash -c 'cd /srv; sshpass -p hunter2hunter2 ssh h'",
                "bash -c 'cd /srv; sshpass -p *** ssh h'",
            ),
            // A line ended by a backslash goes on (also as escapes in serialized text).
            (
                "mysql -uroot \\\n  -phunter2hunter2 app",
                "mysql -uroot \\\n  -p*** app",
            ),
            (
                r#"{"cmd":"sshpass \\\n  -p hunter2hunter2 ssh h"}"#,
                r#"{"cmd":"sshpass \\\n  -p *** ssh h"}"#,
            ),
            // A flag quoted whole with its password.
            (
                "mysql -uroot '-pmy pass word' app",
                "mysql -uroot '-p***' app",
            ),
            (
                r#"{"cmd":"mysql \"-pmy pass word\" app"}"#,
                r#"{"cmd":"mysql \"-p***\" app"}"#,
            ),
            // A long password keeps its edges, and a second call keeps the mask.
            (
                "mysql -pcorrect-horse-battery-staple app",
                "mysql -pcorrec…aple app",
            ),
        ],
        // The same letters after other commands, or in a form the command does not read.
        &[
            "mysql -p app",
            "mysql -h db -P 3306 -u root -p",
            "mkdir -p /tmp/x && ls -a",
            "docker run -p 8080:80 nginx",
            "docker run -p 8080:80 mysql",
            "gcc -pthread -o a a.c",
            "redis-cli -a",
            "sshpass -p -e ssh h",
            "smbclient //host/share -U admin",
            "lftp -u admin host",
            "ssh-keygen -t ed25519 -N '' -f key",
            "mysql -e 'select 1'; git commit -a -phunter2",
            // A line that does not go on: the next command is another.
            "mysql -e 'select 1'\ngit commit -a -phunter2",
            r#"{"cmd":"mysql -e x\ngit commit -phunter2"}"#,
        ],
    );
    // Under a key, and in an array of arguments (glued: the part after the letter).
    let args = json!({
        "command": "MYSQL_HOST=db mysql -uroot -pS3cretPass991 app",
        "argv": ["mysql", "-uroot", "-pS3cretPass991", "app"],
        "sshpass": ["sshpass", "-p", "hunter2 hunter2", "ssh", "h"],
        "login": ["docker", "login", "-u", "mysql", "-p", "hunter2hunter2", "r"],
        "samba": ["smbclient", "//h/s", "-U", "admin%hunter2"],
        "ports": ["docker", "run", "-p", "8080:80", "mysql", "-p", "app", "-pS3cret"],
    });
    let mut expected = args.clone();
    expected["command"] = json!("MYSQL_HOST=db mysql -uroot -p*** app");
    expected["argv"][2] = json!("-p***");
    expected["sshpass"][2] = json!("***");
    expected["login"][5] = json!("***");
    expected["samba"][3] = json!("***");
    expected["ports"][7] = json!("-p***");
    assert_every_walk(&args, &expected);
}

#[test]
fn redaction_row_secret_store_commands() {
    assert_scrubbed(
        "gh secret set DEPLOY_TOKEN --body 'hunter2 hunter2' --repo o/r",
        "hunter2 hunter2",
    );
    assert_scrubbed(
        "fly secrets set STRIPE=sk9hunter2hunter2",
        "sk9hunter2hunter2",
    );
    assert_redactions(
        &[
            // A long flag's value, quoted or not, after a blank or `=`; `gh`'s `-b` too.
            (
                "gh secret set X --body \"hunter2hunter2\"",
                "gh secret set X --body \"***\"",
            ),
            (
                "gh secret set X --body=hunter2",
                "gh secret set X --body=***",
            ),
            (
                "gh secret set X -b hunter2hunter2",
                "gh secret set X -b ***",
            ),
            ("gh secret set X -bhunter2hunter2", "gh secret set X -b***"),
            (
                "az keyvault secret set --vault-name v --name db --value hunter2hunter2",
                "az keyvault secret set --vault-name v --name db --value ***",
            ),
            (
                "aws secretsmanager create-secret --name x --secret-string hunter2hunter2",
                "aws secretsmanager create-secret --name x --secret-string ***",
            ),
            // A literal's key stays, its value is the secret.
            (
                "kubectl create secret generic db --from-literal=user=admin --from-literal=pw=hunter2",
                "kubectl create secret generic db --from-literal=user=*** --from-literal=pw=***",
            ),
            (
                "oc create secret generic db --from-literal pw=hunter2hunter2",
                "oc create secret generic db --from-literal pw=***",
            ),
            // Every value, whatever its key.
            (
                "fly secrets set FOO=hunter2 BAR=\"hunter2 hunter2\" -a app",
                "fly secrets set FOO=*** BAR=\"***\" -a app",
            ),
            (
                "doppler secrets set FOO=hunter2hunter2",
                "doppler secrets set FOO=***",
            ),
            (
                "vault kv put secret/app db=hunter2hunter2 api=hunter2",
                "vault kv put secret/app db=*** api=***",
            ),
            // In serialized text, and in a later command of the line.
            (
                r#"{"command":"cd infra && flyctl secrets set FOO=hunter2hunter2"}"#,
                r#"{"command":"cd infra && flyctl secrets set FOO=***"}"#,
            ),
        ],
        // The same flags and pairs after other commands, or after another separator.
        &[
            "gh pr create --title x --body \"Fixes the secrets page\"",
            "gh issue create -b \"the body text\"",
            "git checkout -b feature/secrets",
            "gh secret list; gh pr create --body hello-world",
            "fly secrets list && RUST_LOG=debug cargo test",
            "RUST_LOG=debug cargo test --test secrets",
            "kubectl create configmap x --from-literal=mode=fast",
            "az keyvault show --name v; az config set core.output=json",
            "vault status; FOO=bar make",
            "echo \"fly secrets set\" ; FOO=bar make",
            "cargo xtask --value 3",
        ],
    );
    // In arrays of arguments, through every walk.
    let args = json!({
        "gh": ["gh", "secret", "set", "X", "--body", "hunter2 hunter2"],
        "glued": ["gh", "secret", "set", "X", "--body=hunter2"],
        "fly": ["fly", "secrets", "set", "FOO=hunter2", "BAR=x"],
        "kubectl": ["kubectl", "create", "secret", "generic", "x", "--from-literal", "pw=hunter2"],
        "literal": ["kubectl", "create", "secret", "generic", "x", "--from-literal=pw=hunter2"],
        "kept": ["gh", "pr", "create", "--body", "hello", "env", "FOO=bar"],
        "configmap": ["kubectl", "create", "configmap", "x", "--from-literal", "mode=fast"],
    });
    let mut expected = args.clone();
    expected["gh"][5] = json!("***");
    expected["glued"][4] = json!("--body=***");
    expected["fly"][3] = json!("FOO=***");
    expected["fly"][4] = json!("BAR=***");
    expected["kubectl"][6] = json!("pw=***");
    expected["literal"][5] = json!("--from-literal=pw=***");
    assert_every_walk(&args, &expected);
}

#[test]
fn redaction_row_powershell_secure_strings() {
    assert_scrubbed(
        "$cred = New-Object PSCredential('u', (ConvertTo-SecureString 'hunter2 hunter2' -AsPlainText -Force))",
        "hunter2 hunter2",
    );
    assert_redactions(
        &[
            // The text, not the command: before it a sensitive key's assignment read the
            // command's name as the value.
            (
                "$password = ConvertTo-SecureString \"hunter2hunter2\" -AsPlainText -Force",
                "$password = ConvertTo-SecureString \"***\" -AsPlainText -Force",
            ),
            (
                "$s = ConvertTo-SecureString -String 'hunter2' -AsPlainText -Force",
                "$s = ConvertTo-SecureString -String '***' -AsPlainText -Force",
            ),
            (
                "Connect-X -Password (ConvertTo-SecureString hunter2hunter2 -AsPlainText -Force)",
                "Connect-X -Password (ConvertTo-SecureString *** -AsPlainText -Force)",
            ),
            (
                r#"{"command":"$p = convertto-securestring \"hunter2hunter2\" -asplaintext"}"#,
                r#"{"command":"$p = convertto-securestring \"***\" -asplaintext"}"#,
            ),
        ],
        // A variable is no secret; the flag elsewhere means nothing.
        &[
            "$p = ConvertTo-SecureString $env:PW -AsPlainText -Force",
            // A quote whose escapes run back past the 256 bytes read (a slice out of bounds
            // once, found on a second read).
            &format!("ConvertTo-SecureString {}\" -AsPlainText", "\\".repeat(300)),
            "$p = ConvertTo-SecureString -AsPlainText -Force",
            "Read-Host -AsSecureString",
            "Write-Output plain -AsPlainText",
        ],
    );
}

#[test]
fn redaction_row_flag_values_in_argument_arrays() {
    let args = json!({
        "command": ["mysql", "--password", "hunter2hunter2", "-h", "db"],
        "curl": ["curl", "-u", "admin:pass word", "https://x"],
        "long": ["tool", "--api-key", "correct horse battery staple"],
        "kept": ["--password", "--other", "-u", "1000:1000", "--verbose", "file", "--user", "host:/srv"],
        "mixed": ["--token", 42, "x", "--token", null, "y"],
    });
    // Only the three values change; `kept` and `mixed` stay as they are.
    let mut expected = args.clone();
    expected["command"][2] = json!("***");
    expected["curl"][2] = json!("***");
    expected["long"][2] = json!("correc…aple");
    assert_every_walk(&args, &expected);
    // At the root, and nested deeper than the walk recurses (the walk with its own stack).
    assert_eq!(
        sanitize_tool_args(&json!(["--password", "hunter2hunter2"])),
        json!(["--password", "***"])
    );
    let mut deep = args["curl"].clone();
    let mut deep_expected = expected["curl"].clone();
    for _ in 0..300 {
        deep = json!([deep]);
        deep_expected = json!([deep_expected]);
    }
    assert_eq!(sanitize_tool_args(&deep), deep_expected);
}

#[test]
fn redaction_row_xml_elements() {
    assert_scrubbed("<password>hunter2hunter2</password>", "hunter2hunter2");
    // A property list's value after a sensitive key, and a tag's value attribute after a key
    // attribute naming one (.NET's `appSettings`), also with the key after the value and in
    // serialized text.
    assert_scrubbed(
        "<dict>\n  <key>Password</key>\n  <string>hunter2hunter2</string>\n</dict>",
        "hunter2hunter2",
    );
    assert_scrubbed(
        r#"<appSettings><add key="ApiKey" value="hunter2hunter2" /></appSettings>"#,
        "hunter2hunter2",
    );
    assert_redactions(
        &[
            (
                "<key>client_secret</key><string>hunter2hunter2</string>",
                "<key>client_secret</key><string>***</string>",
            ),
            (
                r#"<add value='hunter2 hunter2' name="db-password"/>"#,
                r#"<add value='***' name="db-password"/>"#,
            ),
            (
                r#"{"file":"<add key=\"Password\" value=\"hunter2hunter2\"/>"}"#,
                r#"{"file":"<add key=\"Password\" value=\"***\"/>"}"#,
            ),
        ],
        &[
            "<key>CFBundleName</key><string>Tether</string>",
            "<key>password</key><integer>3</integer>",
            r#"<add key="Timeout" value="30"/>"#,
            r#"<option name="mode" value="fast"/><option name="password"/>"#,
            r#"value="plain" key="password""#,
        ],
    );
    assert_redactions(
        &[
            (
                "<server><id>nexus</id><username>deploy</username><password>hunter2hunter2</password></server>",
                "<server><id>nexus</id><username>deploy</username><password>***</password></server>",
            ),
            (
                "<Password>\n    hunter2hunter2\n  </Password>",
                "<Password>\n    ***\n  </Password>",
            ),
            (
                "<client_secret>0123456789abcdefghij</client_secret>",
                "<client_secret>012345…ghij</client_secret>",
            ),
            // An element that is never closed runs to the end of the text.
            ("<api_key>hunter2hunter2 and more", "<api_key>hunter…more"),
            // Serialized into a JSON string.
            (
                r#"{"pom":"<password>hunter2hunter2</password>"}"#,
                r#"{"pom":"<password>***</password>"}"#,
            ),
            // A namespace prefix, and a start tag with attributes (found from the end tag),
            // as in WS-Security's `UsernameToken`.
            (
                "<ns:password>hunter2hunter2</ns:password>",
                "<ns:password>***</ns:password>",
            ),
            (
                r#"<wsse:Password Type="http://docs.oasis-open.org/wss/2004/01/oasis-200401-wss-username-token-profile-1.0#PasswordText">hunter2hunter2</wsse:Password>"#,
                r#"<wsse:Password Type="http://docs.oasis-open.org/wss/2004/01/oasis-200401-wss-username-token-profile-1.0#PasswordText">***</wsse:Password>"#,
            ),
            (
                "<password encrypted=\"false\">\n  hunter2hunter2\n</password>",
                "<password encrypted=\"false\">\n  ***\n</password>",
            ),
            // A token inside such an element: the whole text, in the scan after the token's.
            (
                "<password a=\"1\">ghp_abcdefghijklmnopqrstuvwxyz0123456789 tail</password>",
                "<password a=\"1\">***</password>",
            ),
        ],
        // Other elements, an empty one, and names too common to be secrets (`<key>` in a
        // plist).
        &[
            "<ns:name>tether</ns:name><x:password/>",
            "<password a=\"1\"/><other>x</other></password>",
            "<b>x</b></password>",
            "<name>tether</name><version>1.0</version>",
            "<password></password>",
            "<key>CFBundleName</key><string>Tether</string>",
            "if a <b> c then d",
            "echo done > password.txt",
        ],
    );
    // A value another rule turned down before the element (an assignment whose `=` follows an
    // invisible character) is read again once the element's text is masked.
    let text = "client_secret\u{3164}=opaque1234567<password>admin:&";
    let once = redact_text(text);
    assert!(!once.contains("opaque1234567"), "{once}");
    assert_eq!(redact_text(&once), once, "idempotent: {once}");
}

#[test]
fn redaction_row_bearer_tokens() {
    assert_scrubbed(
        "curl -H 'Authorization: Bearer opaqueTokenValue12345' https://api",
        "opaqueTokenValue12345",
    );
    assert_scrubbed(
        "bearer QWxhZGRpbjpvcGVuIHNlc2FtZQ-xyz",
        "QWxhZGRpbjpvcGVuIHNlc2FtZQ-xyz",
    );
}

#[test]
fn redaction_row_basic_credentials() {
    // `dXNlcjpzM2NyM3QtcGFzcw==` is base64 of `user:s3cr3t-pass`.
    assert_scrubbed(
        "curl -H 'Authorization: Basic dXNlcjpzM2NyM3QtcGFzcw==' x",
        "dXNlcjpzM2NyM3QtcGFzcw==",
    );
    assert_scrubbed(
        "send Basic dXNlcjpzM2NyM3QtcGFzcw== upstream",
        "dXNlcjpzM2NyM3QtcGFzcw==",
    );
    // The scheme name in any case (HTTP scheme names are case-insensitive), whatever else the
    // text holds.
    for text in [
        "authorization basic dXNlcjpzM2NyM3QtcGFzcw== upstream",
        "send basic dXNlcjpzM2NyM3QtcGFzcw==",
        "BASIC dXNlcjpzM2NyM3QtcGFzcw== to Bar",
    ] {
        assert_scrubbed(text, "dXNlcjpzM2NyM3QtcGFzcw==");
    }
    // Plain prose after "basic" is not a credential.
    assert_eq!(
        redact_text("basic authentication is disabled"),
        "basic authentication is disabled"
    );
}

#[test]
fn redaction_row_aws_access_keys() {
    assert_scrubbed("use AKIAIOSFODNN7EXAMPLE for s3", "AKIAIOSFODNN7EXAMPLE");
    assert_scrubbed("session ASIAY34FZKBOKMUTVV7A now", "ASIAY34FZKBOKMUTVV7A");
    assert_scrubbed(
        "aws_secret_access_key = wJalrXUtnFEMI/K7MDENG/bPxRfiCYEXAMPLEKEY",
        "wJalrXUtnFEMI/K7MDENG/bPxRfiCYEXAMPLEKEY",
    );
}

#[test]
fn redaction_row_tencent_cloud_secret_ids() {
    let key = "AKIDz8krbsJ5yKBZQpn74WFkmLPx3EXAMPLE";
    assert_scrubbed(&format!("spawn a worker with {key} to sync cos"), key);
    assert_scrubbed(&format!("TENCENTCLOUD_SECRET_ID={key}"), key);
}

#[test]
fn redaction_row_google_api_keys() {
    assert_scrubbed(
        "maps key AIzaSyD-9tSrke72PouQMnMX-a7eZSW0jkFMBWY in config",
        "AIzaSyD-9tSrke72PouQMnMX-a7eZSW0jkFMBWY",
    );
}

#[test]
fn redaction_row_azure_account_keys_and_connection_strings() {
    assert_scrubbed(
        "DefaultEndpointsProtocol=https;AccountName=acct;AccountKey=Zm9vYmFyYmF6cXV4MTIzNDU2Nzg5MA==;EndpointSuffix=core.windows.net",
        "Zm9vYmFyYmF6cXV4MTIzNDU2Nzg5MA==",
    );
    assert_scrubbed(
        "Endpoint=sb://ns.servicebus.windows.net/;SharedAccessKeyName=root;SharedAccessKey=c2VjcmV0S2V5VmFsdWUxMjM0NQ=",
        "c2VjcmV0S2V5VmFsdWUxMjM0NQ=",
    );
}

#[test]
fn redaction_row_github_and_gitlab_tokens() {
    assert_scrubbed(
        "git clone with ghp_16C7e42F292c6912E7710c838347Ae178B4a",
        "ghp_16C7e42F292c6912E7710c838347Ae178B4a",
    );
    assert_scrubbed(
        "token github_pat_11ABCDEFG0123456789_abcdefghijklmnop",
        "github_pat_11ABCDEFG0123456789_abcdefghijklmnop",
    );
    assert_scrubbed("glpat-xYz123AbC456dEf789gH", "glpat-xYz123AbC456dEf789gH");
    for token in [
        "gldt-AbCdEfGhIjKlMnOpQrSt",
        "glrt-t1_AbCdEfGhIjKlMnOpQrSt",
        "GR1348941AbCdEfGhIjKlMnOpQrSt",
    ] {
        assert_scrubbed(&format!("gitlab {token} runner"), token);
    }
    // Inside a longer word, after `-` or `_`.
    assert_scrubbed(
        "ci-ghp_16C7e42F292c6912E7710c838347Ae178B4a failed",
        "ghp_16C7e42F292c6912E7710c838347Ae178B4a",
    );
}

#[test]
fn redaction_row_google_oauth_tokens() {
    assert_scrubbed(
        "access ya29.a0AfH6SMBx-fake-access-token-1234 ok",
        "ya29.a0AfH6SMBx-fake-access-token-1234",
    );
    assert_scrubbed(
        "refresh 1//0gFakeRefreshToken-abcdefghijkl ok",
        "1//0gFakeRefreshToken-abcdefghijkl",
    );
    // A short path or version is not a token.
    assert_eq!(redact_text("see 1//0 and ya29.1"), "see 1//0 and ya29.1");
}

#[test]
fn redaction_row_slack_tokens() {
    assert_scrubbed(
        "post with xoxb-2048-4096-AbCdEfGhIjKlMnOp",
        "xoxb-2048-4096-AbCdEfGhIjKlMnOp",
    );
    assert_scrubbed(
        "socket xapp-1-A0B1C2D3E4-123456",
        "xapp-1-A0B1C2D3E4-123456",
    );
}

#[test]
fn redaction_row_stripe_keys() {
    assert_scrubbed(
        "charge using sk_live_51HxYzAbCdEfGhIjKlMn",
        "sk_live_51HxYzAbCdEfGhIjKlMn",
    );
    assert_scrubbed(
        "rk_live_51HxYzAbCdEfGh restricted",
        "rk_live_51HxYzAbCdEfGh",
    );
    assert_scrubbed(
        "verify whsec_MfKQ9r8GKYqrTwjUPD8ILPZIo2LaLaSw",
        "whsec_MfKQ9r8GKYqrTwjUPD8ILPZIo2LaLaSw",
    );
}

#[test]
fn redaction_row_openai_and_anthropic_keys() {
    assert_scrubbed(
        "OPENAI key sk-proj-abcDEF1234567890ghiJKL",
        "sk-proj-abcDEF1234567890ghiJKL",
    );
    assert_scrubbed(
        "claude sk-ant-api03-AbCdEf0123456789-xyz",
        "sk-ant-api03-AbCdEf0123456789-xyz",
    );
}

#[test]
fn redaction_row_other_registry_tokens() {
    assert_scrubbed(
        "hf_AbCdEfGhIjKlMnOpQrStUv model pull",
        "hf_AbCdEfGhIjKlMnOpQrStUv",
    );
    assert_scrubbed(
        "npm_AbCdEfGhIjKlMnOpQrSt publish",
        "npm_AbCdEfGhIjKlMnOpQrSt",
    );
}

#[test]
fn redaction_row_fernet_tokens() {
    let token = "gAAAAABlZxYzAbCdEfGhIjKlMnOpQrStUvWxYz0123456789";
    assert_scrubbed(
        &format!("reset link https://app.example/reset/{token} sent"),
        token,
    );
    // Inside a base64 blob (after `+`) the same letters are data.
    let blob = format!("base64,AAAA+gAAAA{}", "B".repeat(24));
    assert_eq!(redact_text(&blob), blob);
}

#[test]
fn redaction_row_gitlab_session_cookies() {
    let value = "0123456789abcdef0123456789abcdef";
    assert_scrubbed(&format!("Cookie: _gitlab_session={value}; path=/"), value);
    // A short value is documentation, not a session.
    assert_eq!(
        redact_text("set _gitlab_session=short first"),
        "set _gitlab_session=short first"
    );
}

#[test]
fn redaction_row_vendor_tokens() {
    for token in [
        "dckr_pat_AbCdEfGhIjKlMnOpQrStUvWxYz0",
        "pypi-AgEIcHlwaS5vcmcCJGFiY2RlZmdo",
        "dop_v1_0123456789abcdef0123456789abcdef",
        "ATATT3xFfGF0AbCdEfGhIjKlMnOpQrStUv",
        "dapi0123456789abcdef0123456789abcdef",
        "fm2_lJPECAAAAAAAAbCdEfGhIjKlMnOpQrSt",
        "SG.AbCdEfGhIjKlMnOpQrStUv.AbCdEfGhIjKlMnOpQrStUvWxYz0123456789abc",
        "dp.pt.AbCdEfGhIjKlMnOpQrStUvWxYz0123456789abcde",
    ] {
        assert_scrubbed(&format!("export KEYLESS {token} now"), token);
    }
    // Short words after these prefixes stay prose.
    let prose = "sbp_short nfp_site CCIPAT_docs ATATT-example dapi-example SG.docs.page";
    assert_eq!(redact_text(prose), prose);
}

#[test]
fn redaction_row_discord_bot_tokens() {
    let token = "MTIzNDU2Nzg5MDEyMzQ1Njc4.GAbCdE.AbCdEfGhIjKlMnOpQrStUvWxYz0123";
    assert_scrubbed(&format!("DISCORD {token} here"), token);
    // Dotted prose and host names stay.
    let prose = "see docs.example.com and v1.2.3 release.notes";
    assert_eq!(redact_text(prose), prose);
}

#[test]
fn redaction_row_webhook_urls() {
    for (url, secret) in [
        (
            "https://hooks.slack.com/services/T0123ABCD/B0456EFGH/AbCdEfGhIjKlMnOpQrStUvWx",
            "AbCdEfGhIjKlMnOpQrStUvWx",
        ),
        (
            "https://discord.com/api/webhooks/123456789012345678/AbCdEfGhIjKlMnOpQrStUvWxYz0123456789",
            "AbCdEfGhIjKlMnOpQrStUvWxYz0123456789",
        ),
    ] {
        assert_scrubbed(&format!("post to {url} now"), secret);
        assert!(redact_text(url).starts_with("https://"), "{url}");
    }
}

#[test]
fn redaction_row_model_provider_keys() {
    for token in [
        "r8_AbCdEfGhIjKlMnOpQrStUvWx",
        "xai-AbCdEfGhIjKlMnOpQrStUvWxYz",
        "pplx-AbCdEfGhIjKlMnOpQrStUvWx",
        "gsk_AbCdEfGhIjKlMnOpQrStUvWx",
        "tvly-AbCdEfGhIjKlMnOpQrStUvWx",
        "fw_AbCdEfGhIjKlMnOpQrStUvWxYz0123456789",
        "fpk_AbCdEfGhIjKlMnOpQrStUvWxYz0123456789",
        "gloas-abcdefabcdefabcdefabcdefabcdefab",
    ] {
        assert_scrubbed(&format!("export KEYLESS {token} now"), token);
    }
    // Short words after these prefixes stay prose.
    assert_eq!(redact_text("fw-tooshort r8_docs"), "fw-tooshort r8_docs");
}

#[test]
fn redaction_row_alibaba_cloud_access_key_ids() {
    assert_scrubbed(
        "AccessKeyId LTAI5tExampleFakeKeyXyz9 for oss",
        "LTAI5tExampleFakeKeyXyz9",
    );
}

#[test]
fn redaction_row_bot_tokens() {
    let token = "123456:ABCDEFGHIJKLMNOPQRSTUVWXYZabcdef";
    assert_scrubbed(&format!("telegram {token} ok"), token);
    assert_scrubbed(
        &format!("GET https://api.example.test/bot{token}/getMe"),
        "ABCDEFGHIJKLMNOPQRSTUVWXYZabcdef",
    );
    // After digits that read as a card number, the secret is still masked.
    assert_scrubbed(
        &format!("n 665757912000 {token} 0"),
        "ABCDEFGHIJKLMNOPQRSTUVWXYZabcdef",
    );
    // A time or a port is not a bot token.
    assert_eq!(redact_text("at 123456:30 ok"), "at 123456:30 ok");
}

#[test]
fn redaction_row_pem_private_keys() {
    let body = "MIIEvQIBADANBgkqhkiG9w0BAQEFAASCBKcwggSjAgEAAoIBAQC7";
    let pem = format!("-----BEGIN RSA PRIVATE KEY-----\n{body}\n-----END RSA PRIVATE KEY-----");
    assert_scrubbed(&format!("key file:\n{pem}\ndone"), body);
    assert_eq!(
        redact_text(&pem),
        "-----BEGIN RSA PRIVATE KEY-----\n***\n-----END RSA PRIVATE KEY-----"
    );
    // A cut-off block masks to the end; a public key is not a secret.
    let cut = format!("-----BEGIN PRIVATE KEY-----\n{body}");
    assert_scrubbed(&cut, body);
    let public = format!("-----BEGIN PUBLIC KEY-----\n{body}\n-----END PUBLIC KEY-----");
    assert_eq!(redact_text(&public), public);
}

#[test]
fn redaction_row_json_web_tokens() {
    let jwt = "eyJhbGciOiJIUzI1NiIsInR5cCI6IkpXVCJ9.eyJzdWIiOiIxMjM0NTY3ODkwIn0.SflKxwRJSMeKKF2QT4fwpMeJf36POk6yJV_adQssw5c";
    assert_scrubbed(&format!("cookie session {jwt}; path=/"), jwt);
    assert_scrubbed(
        &format!("token is {jwt}"),
        "SflKxwRJSMeKKF2QT4fwpMeJf36POk6yJV_adQssw5c",
    );
}

#[test]
fn redaction_row_url_and_connection_string_passwords() {
    assert_scrubbed(
        "fetch https://deploy:Pa55w0rdValue@git.example.com/repo.git",
        "Pa55w0rdValue",
    );
    assert_scrubbed(
        "psql postgres://app:s3cr3t-db-pass@db.internal:5432/prod",
        "s3cr3t-db-pass",
    );
    assert_scrubbed("redis-cli -u redis://:r3disPass@cache:6379", "r3disPass");
    assert_scrubbed(
        "Server=tcp:db;Database=prod;User Id=sa;Password=Sq1Pa55word!;",
        "Sq1Pa55word!",
    );
    // A user name that is a token is masked with the password (the scan does not come back to
    // it); an ordinary one stays.
    assert_scrubbed(
        "git clone https://ghp_16C7e42F292c6912E7710c838347Ae178B4a:x-oauth-basic@github.com/o/r.git",
        "ghp_16C7e42F292c6912E7710c838347Ae178B4a",
    );
    assert_redactions(
        &[
            (
                "git clone https://ghp_16C7e42F292c6912E7710c838347Ae178B4a:x-oauth-basic@github.com/o/r.git",
                "git clone https://ghp_16…asic@github.com/o/r.git",
            ),
            (
                "psql postgres://app:s3cr3t-db-pass@db.internal:5432/prod",
                "psql postgres://app:***@db.internal:5432/prod",
            ),
        ],
        &[],
    );
    // No password, nothing to mask.
    assert_eq!(
        redact_text("see https://user@example.com/path and https://example.com"),
        "see https://user@example.com/path and https://example.com"
    );
}

#[test]
fn redaction_row_payment_card_numbers() {
    assert_scrubbed("charge card 4111111111111111 now", "4111111111111111");
    assert_scrubbed("card 5555-5555-5555-4444 exp 12/30", "5555-5555-5555-4444");
    assert_scrubbed("amex 3782 822463 10005 ok", "3782 822463 10005");
    // Groups running on past the number still leave the number masked.
    assert_scrubbed("card 4111 1111 1111 1111 2 items", "4111 1111 1111 1111");
    assert_scrubbed("n 4 4111 1111 1111 1111", "4111 1111 1111 1111");
    // Right after a `-` that starts the word (the `-` stays).
    assert_scrubbed("refund -4111 1111 1111 1111 today", "4111 1111 1111 1111");
    assert!(redact_text("refund -4111 1111 1111 1111 today").starts_with("refund -4111 "));
    // A mask's kept head beside digit groups before it (their digits and the head's, up to the
    // ellipsis, are read again as one run by the next scan).
    assert_scrubbed(
        "4111 1111 11 123456789012345678901234.abcdef.ghijklmnopqrstuvwxyz0123456 x",
        "ghijklmnopqrstuvwxyz0123456",
    );
    // Numbers that are not card numbers stay: wrong Luhn digit, timestamps, snowflake ids.
    for keep in [
        "order 4111111111111112 shipped",
        "at 1733212345678 ms",
        "id 1181245036372033596",
    ] {
        assert_eq!(redact_text(keep), keep);
    }
    let out =
        sanitize_tool_args(&json!({"payment": {"cvc": "123", "card_number": "4242424242424242"}}));
    assert_eq!(out["payment"]["cvc"], Value::from("***"));
    assert!(!out.to_string().contains("4242424242424242"));
}

#[test]
fn redaction_row_shell_defaults() {
    assert_scrubbed(
        "export X=${GITHUB_TOKEN:-literalgithub1234567890}",
        "literalgithub1234567890",
    );
}

/// Secrets glued to each other or to the text around them, found by the property tests and
/// the fuzzer: what a mask keeps of its secret, or where it ends a value, must not read as a
/// secret the next time, so one pass leaves nothing for a second one.
#[test]
fn glued_secrets_are_masked_in_one_pass() {
    for (text, secret) in [
        // A token's kept tail starts a card number with the groups after it.
        (
            "SG.abcdefghijklmnop.qrstuvwxyz01234567-4111 1111 1111 1111 and",
            "4111 1111 1111 1111",
        ),
        // The same through an escaped line break in serialized text.
        (
            "https://discord.com/api/webhooks/123/abcdefghijk\\n4111 1111 1111 1111 2 items",
            "4111 1111 1111 1111",
        ),
        // A token's kept tail is the prefix of a Google OAuth token.
        (
            "sk-AKIAIOSFODNN7EXAMPLEabcdefgh12345678ya29.a0AfH6SMBxyz123456",
            "a0AfH6SMBxyz123456",
        ),
        // A bot token swallowed a URL's scheme.
        (
            "123456789:AAHdqTcvCH1vGWJxfSeofSAs0K5PALDsawpostgres://admin:s3cr3t@db.internal:5432/app",
            "s3cr3t",
        ),
        // A token glued after a `Basic` credential's padding.
        (
            "basic dXNlcjpzM2NyM3QtcGFzcw==sk-ant-httpsdapi=",
            "dXNlcjpzM2NyM3QtcGFzcw==",
        ),
        // A token glued into a private key block's header.
        (
            "sk-proj-=-----BEGIN  sk------BEGIN RSA PRIVATE KEY-----\nMIIEow\n-----END RSA PRIVATE KEY-----",
            "MIIEow",
        ),
        // A token glued before a key spelled with invisible characters.
        (
            "_:sk---password\u{200b}client_se\u{200b}cret=opaque1234567",
            "opaque1234567",
        ),
        // A percent-escaped key whose value runs into another assignment.
        (
            "client%5Fsecret=opaqueOauthSecret77api_key:&",
            "opaqueOauthSecret77",
        ),
    ] {
        assert_scrubbed(text, secret);
    }
    // A private key header holds a label, not text: an assignment or token inside it is
    // scanned as text, and the block is masked once the header reads as one.
    for (text, secret) in [
        (
            "\"-----BEGIN \u{fffd} OPENAI_API_KEY=abc123def456ghi789 \u{fffd}RSA PRIVATE KEY-----\\nMIIEowIBAAKCAQEA\\n-----END RSA PRIVATE KEY-----\"",
            "abc123def456ghi789",
        ),
        (
            "-----BEGIN AKIAIOSFODNN7EXAMPLE RSA PRIVATE KEY-----\nMIIEowIBAAKCAQEA\n-----END RSA PRIVATE KEY-----",
            "AKIAIOSFODNN7EXAMPLE",
        ),
    ] {
        assert_scrubbed(text, secret);
    }
    // A private key block after an authorization header's credentials on the same line.
    assert_scrubbed(
        "curl -H 'Authorization: saBic dXNlcjpzM1NyM3QtcGFzcw= -----BEGIN PRIVATE KEY-----\nMIIEvQIBADANBgkqhkiG9w0BAQEFAASC\n-----END PRIVATE KEY----- =' x",
        "MIIEvQIBADANBgkqhkiG9w0BAQEFAASC",
    );
    let header = "--api-keyBearer--api-key=Authorization:=  PRIVATE KEY-----";
    assert_eq!(redact_text(&redact_text(header)), redact_text(header));
}

/// A rule's span that swallows the start of another rule's match (a header's credentials that
/// hold a flag, a value that runs into a `Basic` credential, a private key block or a card
/// number) is merged with that match into one mask, so the second rule's secret does not stay
/// in the clear (found by the fuzzer, and in documents of the recorded corpus).
#[test]
fn a_span_that_swallows_another_rules_start_is_merged_with_its_match() {
    for (text, secret) in [
        (
            "curl -H 'Authorization: Basic --api-key k3yMaterial991  dXNlcjpzM2NyM3QtcGFzcw==' x",
            "k3yMaterial991",
        ),
        (
            "ghp_&code=bearer --api-key k3yMaterial991  authorization: '",
            "k3yMaterial991",
        ),
        (
            "Authorization: Digest username=\"u\", response=\"abc\", password: \"correct horse battery staple\"",
            "correct horse battery staple",
        ),
        (
            "token=${GITHUB_TOKEN}/Basic dXNlcjpwYXNzd29yZA==",
            "dXNlcjpwYXNzd29yZA==",
        ),
        ("Bearer  client_secret\u{3164}=hidden123", "hidden123"),
        (
            "--password=secret123(-----BEGIN RSA PRIVATE KEY-----\nMIIEabc\n-----END RSA PRIVATE KEY-----",
            "MIIEabc",
        ),
        (
            "Authorization: Bearer opaqueTokenValue123454111 1111 1111 1111",
            "4111 1111 1111 1111",
        ),
        (
            "client_se+cret=abc123?4111 1111 1111 1111 2 items",
            "1111 1111 1111",
        ),
    ] {
        assert_scrubbed(text, secret);
    }
    // What lies between a rule's word and its span is not part of the span: a URL's user name
    // is no assignment, and the host stays.
    assert_eq!(
        redact_text("postgres://secret:secret@db.example.test/openclaw"),
        "postgres://secret:***@db.example.test/openclaw"
    );
}

/// A private key header glued to the word before it is found where it starts: in serialized
/// text every key after an escaped line break is so (`…\n-----BEGIN`), and its body's mask
/// keeps the escapes.
#[test]
fn a_private_key_header_glued_to_a_word_is_found() {
    for text in [
        "abc-----BEGIN RSA PRIVATE KEY-----\nMIIEvQIBADAN\n-----END RSA PRIVATE KEY-----",
        "cert\\n-----END CERTIFICATE-----\\n-----BEGIN PRIVATE KEY-----\\nMIIEvQIBADAN\\n-----END PRIVATE KEY-----",
        "--password=secretpassword-----BEGIN RSA PRIVATE KEY-----\nMIIEvQIBADAN\n-----END RSA PRIVATE KEY-----",
        "x------BEGIN PRIVATE KEY-----\nMIIEvQIBADAN\n-----END PRIVATE KEY-----",
    ] {
        assert_scrubbed(text, "MIIEvQIBADAN");
    }
    assert_eq!(
        redact_text(
            "cert\\n-----END CERTIFICATE-----\\n-----BEGIN PRIVATE KEY-----\\nMIIEvQIBADAN\\n-----END PRIVATE KEY-----"
        ),
        "cert\\n-----END CERTIFICATE-----\\n-----BEGIN PRIVATE KEY-----\\n***\\n-----END PRIVATE KEY-----"
    );
}

/// Checking the words inside a masked span stays linear in the text when the span holds many
/// matches of its own kind, each reading as far as the span (an authorization header's
/// credentials holding the same header 40,000 times on one line, a private key block holding
/// 40,000 headers): without the bound on dry runs per span this took minutes, with it well
/// under a second (the limit below leaves a thirtyfold margin). Past the bound both spans are
/// masked to the end of the text.
#[test]
fn redaction_stays_linear_when_a_span_holds_many_rule_starts() {
    let n = 40_000;
    let header = format!("{}\nend", "Authorization: Digest x ".repeat(n));
    let blocks = format!(
        "-----BEGIN RSA PRIVATE KEY-----\n{}MIIEvQIBADAN\n-----END RSA PRIVATE KEY-----",
        "-----BEGIN RSA PRIVATE KEY-----\n".repeat(n)
    );
    for (text, expected) in [
        (&header, "Authorization: Digest ***"),
        (&blocks, "-----BEGIN RSA PRIVATE KEY-----***"),
    ] {
        let started = std::time::Instant::now();
        let out = redact_text(text);
        let took = started.elapsed();
        assert_eq!(out, expected);
        assert!(took < std::time::Duration::from_secs(10), "{took:?}");
    }
}

/// A command's password flag reads back at most 512 bytes for its command, and a flag after
/// the last one with only words and blanks between takes in those words instead of reading
/// back again, so text made of such flags stays linear: flags with no separator of commands
/// before them, flags with one every 500 bytes, a command followed by its flags (each one
/// masked), and flags with a quote between every two (each reads back again for a separator,
/// but takes in only the words since the last flag: reading all its reach took 2.4 s). Reading back from every flag took 9 s for the second text in a debug build; the
/// limit below leaves a thirtyfold margin over what it takes now.
#[test]
fn redaction_of_command_password_flags_stays_linear() {
    let n = 60_000;
    let no_separator = " -px".repeat(n);
    let segment = format!("{}|", " -a x".repeat(100));
    let separators = segment.repeat(n / 100);
    let masked = format!("mysql{}\n", " -px".repeat(100)).repeat(n / 100);
    // A quote between every two flags: each one reads back its 512 bytes.
    let quotes = "\" -a x".repeat(n);
    for text in [&no_separator, &separators, &masked, &quotes] {
        let started = std::time::Instant::now();
        let out = redact_text(text);
        let took = started.elapsed();
        assert!(took < std::time::Duration::from_secs(5), "{took:?}");
        let expected = if text == &masked {
            masked.replace("-px", "-p***")
        } else {
            text.clone()
        };
        // The first difference, not the whole text.
        let differs = out.bytes().zip(expected.bytes()).position(|(a, b)| a != b);
        assert!(
            differs.is_none() && out.len() == expected.len(),
            "{differs:?} {}: {:?}",
            out.len(),
            out.get(differs.unwrap_or(0).saturating_sub(40)..)
                .map(|s| &s[..s.len().min(80)])
        );
    }
}

/// An authorization header's first word is kept as its scheme only when it is not a secret
/// itself (an access key where the scheme would be is masked; found by the fuzzer).
#[test]
fn a_secret_is_no_authorization_scheme() {
    assert_scrubbed(
        "Authorization:  AKIAIOSFODNN7EXAMPLE ,x",
        "AKIAIOSFODNN7EXAMPLE",
    );
    assert_eq!(
        redact_text("Authorization: Digest username=\"u\", response=\"abc\""),
        "Authorization: Digest ***"
    );
    // Nor is a private key header glued to an escape: its body runs past the header's line.
    assert_scrubbed(
        "authorization:  %20-----BEGIN PRIVATE KEY-----\nMIIEvQIBADAN\n-----END PRIVATE KEY-----",
        "MIIEvQIBADAN",
    );
}

/// A secret glued to an escape is a word of its own: in serialized text every line of a value
/// but the first starts glued to the `n` of `\n`, and in encoded text a blank is `%20`.
#[test]
fn a_secret_after_an_escaped_separator_is_found() {
    let token = "ghp_16C7e42F292c6912E7710c838347Ae178B4a";
    assert_eq!(
        redact_text(&format!(r#"{{"log": "line one\n{token}\nline three"}}"#)),
        r#"{"log": "line one\nghp_16…8B4a\nline three"}"#
    );
    let key = "k3yMaterial991";
    let basic = "dXNlcjpzM2NyM3QtcGFzcw==";
    for (glued, secret) in [
        (format!(r"cfg\t{token}"), token),
        (format!(r"cfg\u0020{token}"), token),
        (format!(r"b'cfg\x0a{token}'"), token),
        (format!("msg=deploy%20{token}%20now"), token),
        (format!("msg=deploy%0A{token}"), token),
        (format!(r"x\n--api-key {key}"), key),
        (format!(r"x\nBasic {basic}"), basic),
    ] {
        assert_scrubbed(&glued, secret);
    }
    // A key after an escape is the word after it: `sort_key` is no secret's name, whatever
    // escape stands before it (`u0020sort_key` would read as one).
    for glued in [
        r"a\nsort_key=name",
        r"a\tsort_key=name",
        r"a\u0020sort_key=name",
    ] {
        assert_eq!(redact_text(glued), glued);
    }
    assert_scrubbed(r"a\u0020password=hunter2hunter2", "hunter2hunter2");
    // The word after the escape is read first: here it is one token, where the word as it
    // stands (`nsk-proj-…`) only holds one (`ghp_…` after a `-`), whose mask left the rest to
    // the next redaction (found by the idempotence property test).
    let serialized = r"\nsk-proj-sk-proj-ghp_-----END";
    assert_eq!(redact_text(serialized), r"\nsk-pro…-END");
    assert_eq!(redact_text(&redact_text(serialized)), r"\nsk-pro…-END");
    // Backslashes that escape no secret leave the text as it is (a Windows path).
    assert_eq!(redact_text(r"C:\new\notes.txt"), r"C:\new\notes.txt");
}

/// A span whose inner checks would read more than the bound allows (many matches of its own
/// kind, each reading as far as the span) is masked to the end of the text: a word left
/// unchecked could start another rule's match reaching past the span, here a quoted password
/// running over a line break, which stayed in the clear while the bound only stopped the
/// checks. Below the bound the words are all checked and the spans merged as usual.
#[test]
fn a_span_too_costly_to_check_is_masked_to_the_end_of_the_text() {
    for quote in ['"', '\''] {
        let secret = format!("password={quote}a\nhunter2-correct-horse{quote} after");
        let many = format!(
            "curl -v\n{}{secret}",
            "Authorization: Digest x ".repeat(100)
        );
        assert_eq!(redact_text(&many), "curl -v\nAuthorization: Digest ***");
        let few = format!("curl -v\n{}{secret}", "Authorization: Digest x ".repeat(10));
        assert_eq!(
            redact_text(&few),
            format!("curl -v\nAuthorization: Digest ***{quote} after")
        );
    }
}
