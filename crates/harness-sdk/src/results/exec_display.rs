//! The command explainer behind the `exec`/`bash` display detail: a light shell reading
//! (quotes, escapes, heredocs, top-level separators, set-up preambles) that turns common
//! commands into short intent labels, plus the compact one-line form of the raw command.
//!
//! It never validates shell syntax; it only has to be right often enough for a UI label and
//! never leak a secret or a broken character.

use super::redact::redact_text;

/// Raw commands longer than this many UTF-16 code units are cut in the middle.
pub(crate) const RAW_COMMAND_MAX_UNITS: usize = 120;

/// At most this many words are read from one command.
const MAX_WORDS: usize = 48;

/// Removes one pair of matching outer quotes (and the blanks inside them).
fn strip_outer_quotes(value: &str) -> &str {
    let t = value.trim();
    let b = t.as_bytes();
    if b.len() >= 2 && (b[0] == b'"' || b[0] == b'\'') && b[b.len() - 1] == b[0] {
        t[1..t.len() - 1].trim()
    } else {
        t
    }
}

/// Shell-like words: blanks separate, quotes group (and disappear), a backslash keeps the
/// next character.
fn shell_words(input: &str, max: usize) -> Vec<String> {
    let mut words = Vec::new();
    let mut current = String::new();
    let mut quote: Option<char> = None;
    let mut escaped = false;
    for c in input.chars() {
        if escaped {
            current.push(c);
            escaped = false;
        } else if c == '\\' {
            escaped = true;
        } else if let Some(q) = quote {
            if c == q {
                quote = None;
            } else {
                current.push(c);
            }
        } else if c == '"' || c == '\'' {
            quote = Some(c);
        } else if c.is_whitespace() {
            if !current.is_empty() {
                words.push(std::mem::take(&mut current));
                if words.len() >= max {
                    return words;
                }
            }
        } else {
            current.push(c);
        }
    }
    if !current.is_empty() {
        words.push(current);
    }
    words
}

/// The lower-cased program name of a command word (`/usr/bin/Git` → `git`).
fn program(word: &str) -> String {
    let w = strip_outer_quotes(word);
    w.rsplit('/').next().unwrap_or(w).to_lowercase()
}

/// The value of the first of `names` present: the next word (unless it is an option), or the
/// part after `=` of a `--long=value` word.
fn option_value<'a>(words: &'a [String], names: &[&str]) -> Option<&'a str> {
    for (i, word) in words.iter().enumerate() {
        if names.contains(&word.as_str()) {
            match words.get(i + 1) {
                Some(v) if !v.starts_with('-') => return Some(v),
                _ => continue,
            }
        }
        for name in names.iter().filter(|n| n.starts_with("--")) {
            if let Some(v) = word.strip_prefix(name).and_then(|r| r.strip_prefix('=')) {
                return Some(v);
            }
        }
    }
    None
}

/// The non-option words from `from` on (options in `with_value` consume the next word; every
/// word after `--` is positional).
fn positionals<'a>(words: &'a [String], from: usize, with_value: &[&str]) -> Vec<&'a str> {
    let mut out = Vec::new();
    let mut i = from;
    while i < words.len() {
        let w = words[i].as_str();
        if w == "--" {
            out.extend(words[i + 1..].iter().map(String::as_str));
            break;
        }
        if w.starts_with('-') {
            if !w.contains('=') && with_value.contains(&w) {
                i += 1;
            }
        } else {
            out.push(w);
        }
        i += 1;
    }
    out
}

fn first_positional<'a>(words: &'a [String], from: usize, with_value: &[&str]) -> Option<&'a str> {
    positionals(words, from, with_value).into_iter().next()
}

/// Whether a word is a `NAME=value` environment assignment.
fn is_env_assignment(word: &str) -> bool {
    let Some((name, _)) = word.split_once('=') else {
        return false;
    };
    let mut chars = name.chars();
    chars
        .next()
        .is_some_and(|c| c.is_ascii_alphabetic() || c == '_')
        && chars.all(|c| c.is_ascii_alphanumeric() || c == '_')
}

/// The words without a leading `env [-opts] [NAME=value…]` or `NAME=value…` prefix.
fn without_env(words: &[String]) -> &[String] {
    let mut i = 0;
    if words.first().is_some_and(|w| program(w) == "env") {
        i = 1;
        while i < words.len() && (words[i].starts_with('-') || is_env_assignment(&words[i])) {
            i += 1;
        }
        return &words[i..];
    }
    while i < words.len() && is_env_assignment(&words[i]) {
        i += 1;
    }
    &words[i..]
}

/// The script of a `bash -c '…'` / `sh -lc "…"` wrapper, or the command itself.
fn unwrap_shell(command: &str) -> String {
    let words = shell_words(command, 10);
    if words.len() < 3 || !matches!(program(&words[0]).as_str(), "bash" | "sh" | "zsh" | "fish") {
        return command.to_owned();
    }
    let Some(flag) = words
        .iter()
        .skip(1)
        .position(|w| matches!(w.as_str(), "-c" | "-lc" | "-ic"))
        .map(|p| p + 1)
    else {
        return command.to_owned();
    };
    let inner = words[flag + 1..].join(" ");
    let inner = inner.trim();
    if inner.is_empty() {
        command.to_owned()
    } else {
        strip_outer_quotes(inner).to_owned()
    }
}

/// A heredoc delimiter starting at `start` (blanks skipped; quotes and escapes removed): the
/// delimiter and the index just past it.
fn heredoc_delimiter(chars: &[(usize, char)], start: usize) -> Option<(String, usize)> {
    let mut i = start;
    while i < chars.len() && chars[i].1.is_whitespace() {
        i += 1;
    }
    let mut value = String::new();
    let mut quote: Option<char> = None;
    while i < chars.len() {
        let c = chars[i].1;
        if let Some(q) = quote {
            if c == q {
                quote = None;
            } else {
                value.push(c);
            }
            i += 1;
            continue;
        }
        if c.is_whitespace() || matches!(c, ';' | '&' | '|' | '<' | '>') {
            break;
        }
        if c == '\'' || c == '"' {
            quote = Some(c);
        } else if c == '\\' && i + 1 < chars.len() {
            i += 1;
            value.push(chars[i].1);
        } else {
            value.push(c);
        }
        i += 1;
    }
    (!value.is_empty()).then_some((value, i))
}

/// Calls `visit(byte_index, char)` for every character outside quotes, escapes and heredoc
/// bodies, until `visit` returns `false`.
fn scan_top_level(command: &str, mut visit: impl FnMut(usize, char) -> bool) {
    let chars: Vec<(usize, char)> = command.char_indices().collect();
    let mut quote: Option<char> = None;
    let mut escaped = false;
    let mut heredoc: Option<String> = None;
    let mut body_start: Option<usize> = None;
    let mut i = 0;
    while i < chars.len() {
        if let (Some(delimiter), Some(start)) = (&heredoc, body_start)
            && i >= start
        {
            let line_end = chars[i..]
                .iter()
                .position(|&(_, c)| c == '\n')
                .map_or(chars.len(), |p| i + p);
            let line: String = chars[i..line_end].iter().map(|&(_, c)| c).collect();
            if line.trim_end() == delimiter {
                heredoc = None;
                body_start = None;
            }
            i = line_end + 1;
            continue;
        }
        let c = chars[i].1;
        let next = |k: usize| chars.get(i + k).map(|&(_, c)| c);
        if escaped {
            escaped = false;
        } else if c == '\\' {
            escaped = true;
        } else if let Some(q) = quote {
            if c == q {
                quote = None;
            }
        } else if c == '"' || c == '\'' {
            quote = Some(c);
        } else if heredoc.is_none()
            && c == '<'
            && next(1) == Some('<')
            && next(2) != Some('<')
            && let Some((delimiter, end)) =
                heredoc_delimiter(&chars, i + 2 + usize::from(next(2) == Some('-')))
        {
            body_start = chars[end..]
                .iter()
                .position(|&(_, c)| c == '\n')
                .map(|p| end + p + 1);
            heredoc = Some(delimiter);
            i = end;
            continue;
        } else if !visit(chars[i].0, c) {
            return;
        }
        i += 1;
    }
}

/// The top-level stages of a command, split on `;`, `&&` and `||` (not on single pipes).
fn split_stages(command: &str) -> Vec<&str> {
    let bytes = command.as_bytes();
    let mut cuts: Vec<(usize, usize)> = Vec::new();
    scan_top_level(command, |i, c| {
        if c == ';' {
            cuts.push((i, 1));
        } else if (c == '&' || c == '|') && bytes.get(i + 1) == Some(&(c as u8)) {
            cuts.push((i, 2));
        }
        true
    });
    pieces(command, &cuts)
}

/// The top-level pipeline steps of a stage (single `|`, never `||`).
fn split_pipes(stage: &str) -> Vec<&str> {
    let bytes = stage.as_bytes();
    let mut cuts: Vec<(usize, usize)> = Vec::new();
    scan_top_level(stage, |i, c| {
        if c == '|' && (i == 0 || bytes[i - 1] != b'|') && bytes.get(i + 1) != Some(&b'|') {
            cuts.push((i, 1));
        }
        true
    });
    pieces(stage, &cuts)
}

/// The trimmed, non-empty pieces between separators at `cuts` (byte index, length).
fn pieces<'a>(text: &'a str, cuts: &[(usize, usize)]) -> Vec<&'a str> {
    let mut out = Vec::new();
    let mut start = 0;
    for &(at, len) in cuts {
        if at >= start {
            out.push(text[start..at].trim());
            start = at + len;
        }
    }
    out.push(text[start.min(text.len())..].trim());
    out.retain(|p| !p.is_empty());
    out
}

/// The command without its set-up preamble (`set …`, `export …`, `unset …`, and `cd`/`pushd`
/// followed by `&&`, `;` or a newline; `popd` forgets the directory), and the directory the
/// preamble moved to (the last one wins). At most four preamble steps are removed.
fn strip_preamble(command: &str) -> (String, Option<String>) {
    let mut rest = command.trim().to_owned();
    let mut dir: Option<String> = None;
    for step in 0..4 {
        let bytes = rest.as_bytes();
        let mut first: Option<(usize, usize, bool)> = None;
        scan_top_level(&rest, |i, c| {
            let next = bytes.get(i + 1).copied();
            first = match (c, next) {
                ('&', Some(b'&')) => Some((i, 2, false)),
                ('|', Some(b'|')) => Some((i, 2, true)),
                (';' | '\n', _) => Some((i, 1, false)),
                _ => return true,
            };
            false
        });
        let head = first.map_or(rest.as_str(), |(at, _, _)| &rest[..at]).trim();
        let head_program = shell_words(head, 2).first().map(|w| program(w));
        let changes_dir = matches!(head_program.as_deref(), Some("cd" | "pushd" | "popd"))
            && first.map_or(step > 0, |(_, _, is_or)| !is_or);
        let preamble = head.starts_with("set ")
            || head.starts_with("export ")
            || head.starts_with("unset ")
            || changes_dir;
        if !preamble {
            break;
        }
        if changes_dir {
            if head_program.as_deref() == Some("popd") {
                dir = None;
            } else if let Some(target) = shell_words(head, 3).get(1) {
                dir = Some(target.clone());
            }
        }
        rest = match first {
            Some((at, len, _)) => rest[at + len..].trim_start().to_owned(),
            None => String::new(),
        };
        if rest.is_empty() {
            break;
        }
    }
    (rest.trim().to_owned(), dir)
}

fn git_summary(words: &[String]) -> String {
    const GLOBAL_WITH_VALUE: &[&str] = &[
        "-C",
        "-c",
        "--git-dir",
        "--work-tree",
        "--namespace",
        "--config-env",
    ];
    let git_dir = option_value(words, &["-C"]);
    let mut sub: Option<&str> = None;
    let mut i = 1;
    while i < words.len() {
        let w = words[i].as_str();
        if w == "--" {
            sub = first_positional(words, i + 1, &[]);
            break;
        }
        if w.starts_with('-') {
            if !w.contains('=') && GLOBAL_WITH_VALUE.contains(&w) {
                i += 1;
            }
            i += 1;
            continue;
        }
        sub = Some(w);
        break;
    }
    let known = match sub {
        Some("status") => "check git status",
        Some("diff") => "check git diff",
        Some("log") => "view git history",
        Some("show") => "show git object",
        Some("branch") => "list git branches",
        Some("checkout" | "switch") => "switch git branch",
        Some("commit") => "create git commit",
        Some("pull") => "pull git changes",
        Some("push") => "push git changes",
        Some("fetch") => "fetch git changes",
        Some("merge") => "merge git changes",
        Some("rebase") => "rebase git branch",
        Some("add") => "stage git changes",
        Some("restore") => "restore git files",
        Some("reset") => "reset git state",
        Some("stash") => "stash git changes",
        _ => "",
    };
    if !known.is_empty() {
        return known.to_owned();
    }
    match sub {
        Some(s) if !s.starts_with('/') && !s.starts_with('~') && !s.contains('/') => {
            format!("run git {s}")
        }
        _ => git_dir.map_or_else(
            || "run git command".to_owned(),
            |d| format!("run git command in {d}"),
        ),
    }
}

/// The intent label of one simple command.
fn command_summary(words: &[String]) -> String {
    let Some(first) = words.first() else {
        return "run command".to_owned();
    };
    let bin = program(first);
    match bin.as_str() {
        "git" => git_summary(words),
        "grep" | "rg" | "ripgrep" => {
            let pos = positionals(
                words,
                1,
                &[
                    "-e",
                    "--regexp",
                    "-f",
                    "--file",
                    "-m",
                    "--max-count",
                    "-A",
                    "--after-context",
                    "-B",
                    "--before-context",
                    "-C",
                    "--context",
                ],
            );
            let pattern = option_value(words, &["-e", "--regexp"]).or(pos.first().copied());
            let target = (pos.len() > 1).then(|| pos[pos.len() - 1]);
            match (pattern, target) {
                (Some(p), Some(t)) => format!("search \"{p}\" in {t}"),
                (Some(p), None) => format!("search \"{p}\""),
                _ => "search text".to_owned(),
            }
        }
        "find" => {
            let path = words
                .get(1)
                .filter(|w| !w.starts_with('-'))
                .map_or(".", String::as_str);
            match option_value(words, &["-name", "-iname"]) {
                Some(name) => format!("find files named \"{name}\" in {path}"),
                None => format!("find files in {path}"),
            }
        }
        "ls" => first_positional(words, 1, &[])
            .map_or_else(|| "list files".to_owned(), |t| format!("list files in {t}")),
        "head" | "tail" => {
            let lines = option_value(words, &["-n", "--lines"]).or_else(|| {
                words[1..]
                    .iter()
                    .find(|w| {
                        w.len() > 1
                            && w.starts_with('-')
                            && w[1..].bytes().all(|b| b.is_ascii_digit())
                    })
                    .map(|w| &w[1..])
            });
            let pos = positionals(words, 1, &["-n", "--lines"]);
            let mut target = pos.last().copied();
            if pos.len() == 1 && target.is_some_and(|t| t.bytes().all(|b| b.is_ascii_digit())) {
                target = None;
            }
            let side = if bin == "head" { "first" } else { "last" };
            let unit = if lines == Some("1") { "line" } else { "lines" };
            match (lines, target) {
                (Some(n), Some(t)) => format!("show {side} {n} {unit} of {t}"),
                (Some(n), None) => format!("show {side} {n} {unit}"),
                (None, Some(t)) => format!("show {t}"),
                (None, None) => format!("show {bin} output"),
            }
        }
        "cat" => first_positional(words, 1, &[])
            .map_or_else(|| "show output".to_owned(), |t| format!("show {t}")),
        "sed" => sed_summary(words),
        "printf" | "echo" => "print text".to_owned(),
        "cp" | "mv" => {
            let pos = positionals(words, 1, &["-t", "--target-directory", "-S", "--suffix"]);
            let verb = if bin == "cp" { "copy" } else { "move" };
            match (pos.first(), pos.get(1)) {
                (Some(s), Some(d)) => format!("{verb} {s} to {d}"),
                (Some(s), None) => format!("{verb} {s}"),
                _ => format!("{verb} files"),
            }
        }
        "rm" => first_positional(words, 1, &[])
            .map_or_else(|| "remove files".to_owned(), |t| format!("remove {t}")),
        "mkdir" => first_positional(words, 1, &[]).map_or_else(
            || "create folder".to_owned(),
            |t| format!("create folder {t}"),
        ),
        "touch" => first_positional(words, 1, &[])
            .map_or_else(|| "create file".to_owned(), |t| format!("create file {t}")),
        "curl" | "wget" => words
            .iter()
            .find(|w| {
                let l = w.to_ascii_lowercase();
                l.starts_with("http://") || l.starts_with("https://")
            })
            .map_or_else(|| "fetch url".to_owned(), |u| format!("fetch {u}")),
        "npm" | "pnpm" | "yarn" | "bun" => {
            let pos = positionals(words, 1, &["--prefix", "-C", "--cwd", "--config"]);
            match pos.first().copied() {
                Some("install") => "install dependencies".to_owned(),
                Some("test") => "run tests".to_owned(),
                Some("build") => "run build".to_owned(),
                Some("start") => "start app".to_owned(),
                Some("lint") => "run lint".to_owned(),
                Some("run") => pos
                    .get(1)
                    .map_or_else(|| "run script".to_owned(), |s| format!("run {s}")),
                Some(other) => format!("run {bin} {other}"),
                None => format!("run {bin} command"),
            }
        }
        "node" | "python" | "python3" | "ruby" | "php" => interpreter_summary(&bin, words),
        "openclaw" => first_positional(words, 1, &[]).map_or_else(
            || "run openclaw".to_owned(),
            |s| format!("run openclaw {s}"),
        ),
        _ => match first_positional(words, 1, &[]) {
            Some(arg)
                if arg.len() <= 48
                    && arg.bytes().all(|b| {
                        b.is_ascii_alphanumeric() || matches!(b, b'.' | b'_' | b'/' | b'-')
                    }) =>
            {
                format!("run {bin} {arg}")
            }
            _ => format!("run {bin}"),
        },
    }
}

fn sed_summary(words: &[String]) -> String {
    let expression = option_value(words, &["-e", "--expression"]);
    let pos = positionals(words, 1, &["-e", "--expression", "-f", "--file"]);
    let script = expression.or(pos.first().copied());
    let target = if expression.is_some() {
        pos.first().copied()
    } else {
        pos.get(1).copied()
    };
    if let Some(script) = script {
        let compact: String = strip_outer_quotes(script)
            .chars()
            .filter(|c| !c.is_whitespace())
            .collect();
        if let Some(body) = compact.strip_suffix('p') {
            let is_number = |s: &str| !s.is_empty() && s.bytes().all(|b| b.is_ascii_digit());
            let range = body.split_once(',');
            let of = |t: Option<&str>| t.map(|t| format!(" from {t}")).unwrap_or_default();
            match range {
                Some((a, b)) if is_number(a) && is_number(b) => {
                    return format!("print lines {a}-{b}{}", of(target));
                }
                None if is_number(body) => return format!("print line {body}{}", of(target)),
                _ => {}
            }
        }
    }
    target.map_or_else(
        || "run sed transform".to_owned(),
        |t| format!("run sed on {t}"),
    )
}

fn interpreter_summary(bin: &str, words: &[String]) -> String {
    if words[1..].iter().any(|w| w.starts_with("<<")) {
        return format!("run {bin} inline script (heredoc)");
    }
    let inline = match bin {
        "node" => option_value(words, &["-e", "--eval"]),
        "python" | "python3" => option_value(words, &["-c"]),
        _ => None,
    };
    if inline.is_some() {
        return format!("run {bin} inline script");
    }
    let with_value: &[&str] = if bin == "node" {
        &["-e", "--eval", "-m"]
    } else {
        &["-c", "-e", "--eval", "-m"]
    };
    let Some(script) = first_positional(words, 1, with_value) else {
        return format!("run {bin}");
    };
    if bin == "node" {
        if words.iter().any(|w| w == "--check" || w == "-c") {
            format!("check js syntax for {script}")
        } else {
            format!("run node script {script}")
        }
    } else {
        // An interpreter with a script reads as the command itself, not "run python3 …".
        format!("{bin} {script}")
    }
}

fn pipeline_summary(stage: &str) -> String {
    let steps = split_pipes(stage);
    let summarize = |s: &str| command_summary(without_env(&shell_words(s, MAX_WORDS)));
    if steps.len() > 1 {
        let first = summarize(steps[0]);
        let last = summarize(steps[steps.len() - 1]);
        let extra = if steps.len() > 2 {
            format!(" (+{} steps)", steps.len() - 2)
        } else {
            String::new()
        };
        format!("{first} -> {last}{extra}")
    } else {
        summarize(stage)
    }
}

/// Labels that start with `run ` but still say what happens.
const KNOWN_RUN_PREFIXES: &[&str] = &[
    "run tests",
    "run build",
    "run lint",
    "run openclaw",
    "run node script",
    "run node ",
    "run python",
    "run ruby",
    "run php",
    "run sed",
    "run git ",
    "run npm ",
    "run pnpm ",
    "run yarn ",
    "run bun ",
];

/// Whether a label only restates the command (`run mycli`, `run command`).
fn is_generic(summary: &str) -> bool {
    summary == "run command"
        || (summary.starts_with("run ")
            && !KNOWN_RUN_PREFIXES.iter().any(|p| summary.starts_with(p)))
}

struct Summary {
    text: String,
    dir: Option<String>,
    all_generic: Option<bool>,
}

fn summarize(command: &str) -> Option<Summary> {
    let (rest, dir) = strip_preamble(command);
    if rest.is_empty() {
        return dir.map(|dir| Summary {
            text: String::new(),
            dir: Some(dir),
            all_generic: None,
        });
    }
    let stages = split_stages(&rest);
    if stages.is_empty() {
        return None;
    }
    let labels: Vec<String> = stages.iter().map(|s| pipeline_summary(s)).collect();
    Some(Summary {
        all_generic: Some(labels.iter().all(|l| is_generic(l))),
        text: labels.join(" → "),
        dir,
    })
}

/// The first `max` UTF-16 code units of `s` at most, never splitting a character.
fn utf16_head(s: &str, max: usize) -> &str {
    let mut units = 0;
    for (i, c) in s.char_indices() {
        units += c.len_utf16();
        if units > max {
            return &s[..i];
        }
    }
    s
}

/// The last `max` UTF-16 code units of `s` at most, never splitting a character.
fn utf16_tail(s: &str, max: usize) -> &str {
    let mut units = 0;
    for (i, c) in s.char_indices().rev() {
        units += c.len_utf16();
        if units > max {
            return &s[i + c.len_utf8()..];
        }
    }
    s
}

/// The raw command on one line (blank runs and newlines collapsed), redacted, then cut in the
/// middle to [`RAW_COMMAND_MAX_UNITS`] UTF-16 units with `…` when longer. Redaction happens
/// before the cut, so a cut never exposes the tail of a secret whose prefix it removed.
pub(crate) fn compact_raw_command(raw: &str) -> String {
    let one_line = raw.split_whitespace().collect::<Vec<_>>().join(" ");
    let redacted = redact_text(&one_line);
    if redacted.encode_utf16().count() <= RAW_COMMAND_MAX_UNITS {
        return redacted;
    }
    let head_units = (RAW_COMMAND_MAX_UNITS - 1) / 2;
    let tail_units = RAW_COMMAND_MAX_UNITS - 1 - head_units;
    format!(
        "{}…{}",
        utf16_head(&redacted, head_units),
        utf16_tail(&redacted, tail_units)
    )
}

/// The compact marker of a working directory: `agent` for an agent workspace (a
/// `<hidden dir>/workspace` such as `~/.openclaw/workspace`, or a `*-workspace` /
/// `workspace-*` directory), `sandbox` for `<hidden dir>/sandboxes/…`, `repo` for a path under
/// `Projects`, `workspace` for a directory named `workspace`.
fn workspace_marker(path: &str) -> Option<&'static str> {
    let normalized = path.replace('\\', "/");
    let segments: Vec<&str> = normalized.split('/').filter(|s| !s.is_empty()).collect();
    for (i, seg) in segments.iter().enumerate() {
        let next = segments.get(i + 1).copied();
        if seg.starts_with('.') && next == Some("workspace") {
            return Some("agent");
        }
        if seg.starts_with('.') && next == Some("sandboxes") {
            return Some("sandbox");
        }
        let lower = seg.to_ascii_lowercase();
        if lower != "workspace"
            && (lower.ends_with("-workspace")
                || lower.ends_with("_workspace")
                || lower.starts_with("workspace-")
                || lower.starts_with("workspace_"))
        {
            return Some("agent");
        }
    }
    if segments
        .iter()
        .any(|s| *s == "Projects" || *s == "projects")
    {
        return Some("repo");
    }
    segments
        .last()
        .filter(|s| s.eq_ignore_ascii_case("workspace"))
        .map(|_| "workspace")
}

/// ` (agent)`, ` (in /app)`, or nothing for a sandbox directory.
fn directory_suffix(dir: &str) -> Option<String> {
    match workspace_marker(dir) {
        Some("sandbox") => None,
        Some(marker) => Some(format!("({marker})")),
        None => Some(format!("(in {dir})")),
    }
}

/// The `exec` display: the intent label (with its directory and node), followed in raw mode by
/// the compact command when it adds something; the compact command alone when no label says
/// more than the command.
pub(crate) fn exec_detail(
    command: &str,
    workdir: Option<&str>,
    node: Option<&str>,
    explain: bool,
    separator: &str,
) -> String {
    let raw = command.trim();
    let unwrapped = unwrap_shell(raw);
    let summary = summarize(&unwrapped).or_else(|| summarize(raw));
    let label = summary
        .as_ref()
        .map(|s| s.text.as_str())
        .filter(|t| !t.is_empty())
        .unwrap_or("run command");
    let dir = workdir.or(summary.as_ref().and_then(|s| s.dir.as_deref()));
    let suffix = dir.and_then(directory_suffix);
    let node = node
        .map(|n| format!("{separator}node: {n}"))
        .unwrap_or_default();
    let compact = compact_raw_command(&unwrapped);
    let with_suffix = |text: &str| match &suffix {
        Some(s) => format!("{text} {s}"),
        None => text.to_owned(),
    };
    if summary.as_ref().and_then(|s| s.all_generic) != Some(false) && is_generic(label) {
        return format!("{}{node}", with_suffix(&compact));
    }
    let shown = with_suffix(label);
    if !explain && !compact.is_empty() && compact != shown && compact != label {
        format!("{shown}{node}{separator}`{compact}`")
    } else {
        format!("{shown}{node}")
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn words_respect_quotes_and_escapes() {
        assert_eq!(
            shell_words(r#"echo "a b" 'c d' e\ f"#, MAX_WORDS),
            ["echo", "a b", "c d", "e f"]
        );
    }

    #[test]
    fn stages_ignore_quoted_and_heredoc_separators() {
        assert_eq!(
            split_stages(r#"export MSG="foo && bar" && echo test"#),
            [r#"export MSG="foo && bar""#, "echo test"]
        );
        assert_eq!(
            split_stages("cat <<EOF\na && b; c\nEOF\n"),
            ["cat <<EOF\na && b; c\nEOF"]
        );
        assert_eq!(split_pipes("a | b || c | d"), ["a", "b || c", "d"]);
    }

    #[test]
    fn preamble_keeps_the_last_directory_and_popd_forgets() {
        assert_eq!(
            strip_preamble("cd /tmp && cd /app"),
            (String::new(), Some("/app".to_owned()))
        );
        assert_eq!(
            strip_preamble("pushd /tmp && popd && npm install"),
            ("npm install".to_owned(), None)
        );
        assert_eq!(
            strip_preamble("set -euo pipefail\ngit status"),
            ("git status".to_owned(), None)
        );
        assert_eq!(
            strip_preamble("cd /app || x"),
            ("cd /app || x".to_owned(), None)
        );
    }

    #[test]
    fn utf16_cuts_never_split_a_character() {
        let s = "ab😀cd";
        assert_eq!(utf16_head(s, 3), "ab");
        assert_eq!(utf16_head(s, 4), "ab😀");
        assert_eq!(utf16_tail(s, 3), "cd");
        assert_eq!(utf16_tail(s, 4), "😀cd");
    }
}
