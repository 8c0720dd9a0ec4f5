//! Passwords a command takes by a short flag whose meaning depends on the command:
//! `mysql -pSECRET`, `sshpass -p SECRET`, `redis-cli -a SECRET`, `docker login -p SECRET`.
//!
//! The same letters mean something else after other commands (`mkdir -p`, `docker run -p
//! 8080:80`, `ls -a`, `mysql -P 3306`), so such a flag counts only after a command known to
//! take a password by it ([`COMMANDS`]), in the form that command reads (`mysql -p db` asks for
//! the password and names a database: only `-pSECRET`, glued, is one). The command is found
//! among the words before the flag in the same command: in a text back to the last separator
//! of commands outside quotes (a line break, `;`, `|`, `&`, a bracket, a backtick), in an
//! array of arguments among the elements before it.
//!
//! Commands that store secrets carry them in other arguments too, whatever their names: a long
//! flag's value (`gh secret set NAME --body SECRET`, `aws secretsmanager create-secret
//! --secret-string SECRET`, `kubectl create secret generic NAME --from-literal=KEY=SECRET`,
//! [`LongFlag`]) and every `KEY=SECRET` argument (`fly secrets set KEY=SECRET`, `vault kv put
//! PATH KEY=SECRET`, [`CommandFlags::assignments`]).

/// How a command reads a flag's value.
#[derive(Clone, Copy, PartialEq, Eq, Debug)]
pub(super) enum Form {
    /// Glued to the flag only (`mysql -pSECRET`; `mysql -p db` asks for the password).
    Glued,
    /// As the next argument only (`redis-cli -a SECRET`).
    Separate,
    /// Either way (`sshpass -pSECRET`, `sshpass -p SECRET`).
    Both,
}

impl Form {
    fn reads(self, form: Form) -> bool {
        self == Form::Both || self == form
    }
}

/// A short flag whose value is a password.
#[derive(Debug)]
pub(super) struct PasswordFlag {
    /// The flag's letter (`p` for `-p`).
    letter: u8,
    form: Form,
    /// A byte the value holds when it carries a password: Samba's `-U user%password` and
    /// `lftp -u user,password` (without it the value is a user name alone).
    needs: Option<u8>,
}

impl PasswordFlag {
    const fn new(letter: u8, form: Form) -> Self {
        Self {
            letter,
            form,
            needs: None,
        }
    }

    /// Whether `value` (not empty) is a password this flag gives.
    pub(super) fn takes(&self, value: &[u8]) -> bool {
        self.needs
            .is_none_or(|b| memchr::memchr(b, value).is_some())
    }
}

/// A long flag whose value is a secret after a command that stores secrets (`gh secret set
/// --body SECRET`), whatever its name says.
#[derive(Debug)]
pub(super) struct LongFlag {
    /// The flag's name, without its dashes.
    name: &'static str,
    /// The value is a `KEY=SECRET` pair, whose part after the first `=` is the secret
    /// (`kubectl create secret generic NAME --from-literal=KEY=SECRET`).
    pub(super) pair: bool,
}

impl LongFlag {
    const fn value(name: &'static str) -> Self {
        Self { name, pair: false }
    }
}

/// Commands that take a password by the same flags.
struct CommandFlags {
    names: &'static [&'static str],
    /// The flags count only after this word (`docker login -p`; `docker run -p` publishes a
    /// port).
    subcommand: Option<&'static str>,
    flags: &'static [PasswordFlag],
    /// Long flags whose value is a secret.
    long: &'static [LongFlag],
    /// Every `KEY=value` argument is a secret, whatever the key (`fly secrets set
    /// KEY=SECRET`).
    assignments: bool,
}

impl CommandFlags {
    /// A command with short password flags only.
    const fn short(
        names: &'static [&'static str],
        subcommand: Option<&'static str>,
        flags: &'static [PasswordFlag],
    ) -> Self {
        Self {
            names,
            subcommand,
            flags,
            long: &[],
            assignments: false,
        }
    }
}

/// The commands of this rule and their password flags.
static COMMANDS: [CommandFlags; 23] = [
    CommandFlags::short(
        &[
            "mysql",
            "mysqldump",
            "mysqladmin",
            "mysqlimport",
            "mysqlcheck",
            "mysqlshow",
            "mysqlpump",
            "mysqlslap",
            "mysqlbinlog",
            "mysqlsh",
            "mariadb",
            "mariadb-dump",
            "mariadb-admin",
            "mariadb-import",
            "mariadb-check",
            "mariadb-show",
            "mariadb-slap",
            "mariadb-binlog",
        ],
        None,
        &[PasswordFlag::new(b'p', Form::Glued)],
    ),
    CommandFlags::short(&["sshpass"], None, &[PasswordFlag::new(b'p', Form::Both)]),
    CommandFlags::short(
        &["redis-cli", "valkey-cli", "keydb-cli"],
        None,
        &[PasswordFlag::new(b'a', Form::Separate)],
    ),
    CommandFlags::short(
        &[
            "mongo",
            "mongosh",
            "mongodump",
            "mongorestore",
            "mongoexport",
            "mongoimport",
            "mongostat",
            "mongotop",
            "mongofiles",
        ],
        None,
        &[PasswordFlag::new(b'p', Form::Both)],
    ),
    CommandFlags::short(
        &[
            "docker", "podman", "buildah", "skopeo", "nerdctl", "helm", "oras",
        ],
        Some("login"),
        &[PasswordFlag::new(b'p', Form::Separate)],
    ),
    CommandFlags::short(
        &["az"],
        Some("login"),
        &[PasswordFlag::new(b'p', Form::Separate)],
    ),
    CommandFlags::short(
        &[
            "ldapsearch",
            "ldapadd",
            "ldapmodify",
            "ldapdelete",
            "ldapmodrdn",
            "ldappasswd",
            "ldapwhoami",
            "ldapcompare",
            "ldapexop",
        ],
        None,
        &[PasswordFlag::new(b'w', Form::Both)],
    ),
    CommandFlags::short(
        &["sqlcmd", "bcp", "osql"],
        None,
        &[PasswordFlag::new(b'P', Form::Both)],
    ),
    CommandFlags::short(
        &["zip", "unzip"],
        None,
        &[PasswordFlag::new(b'P', Form::Separate)],
    ),
    CommandFlags::short(
        &["7z", "7za", "7zr", "rar", "unrar"],
        None,
        &[PasswordFlag::new(b'p', Form::Glued)],
    ),
    // `openssl enc -k <password>` and `-K <hex key>`.
    CommandFlags::short(
        &["openssl"],
        None,
        &[
            PasswordFlag::new(b'k', Form::Separate),
            PasswordFlag::new(b'K', Form::Separate),
        ],
    ),
    // HTTPie and xh: `-a user:password` (or a token with `-A bearer`).
    CommandFlags::short(
        &["http", "https", "xh", "xhs"],
        None,
        &[PasswordFlag::new(b'a', Form::Separate)],
    ),
    CommandFlags::short(
        &[
            "smbclient",
            "rpcclient",
            "smbcacls",
            "smbget",
            "smbtree",
            "net",
        ],
        None,
        &[PasswordFlag {
            letter: b'U',
            form: Form::Both,
            needs: Some(b'%'),
        }],
    ),
    CommandFlags::short(
        &["lftp"],
        None,
        &[PasswordFlag {
            letter: b'u',
            form: Form::Separate,
            needs: Some(b','),
        }],
    ),
    // `-N <new passphrase>`, `-P <old passphrase>`.
    CommandFlags::short(
        &["ssh-keygen"],
        None,
        &[
            PasswordFlag::new(b'N', Form::Separate),
            PasswordFlag::new(b'P', Form::Separate),
        ],
    ),
    CommandFlags::short(&["twine"], None, &[PasswordFlag::new(b'p', Form::Separate)]),
    CommandFlags {
        names: &["gh"],
        subcommand: Some("secret"),
        flags: &[PasswordFlag::new(b'b', Form::Both)],
        long: &[LongFlag::value("body")],
        assignments: false,
    },
    CommandFlags {
        names: &["fly", "flyctl", "doppler"],
        subcommand: Some("secrets"),
        flags: &[],
        long: &[],
        assignments: true,
    },
    CommandFlags {
        names: &["vault"],
        subcommand: Some("put"),
        flags: &[],
        long: &[],
        assignments: true,
    },
    CommandFlags {
        names: &["vault"],
        subcommand: Some("patch"),
        flags: &[],
        long: &[],
        assignments: true,
    },
    CommandFlags {
        names: &["kubectl", "oc"],
        subcommand: Some("secret"),
        flags: &[],
        long: &[LongFlag {
            name: "from-literal",
            pair: true,
        }],
        assignments: false,
    },
    CommandFlags {
        // `az keyvault secret set --value SECRET`.
        names: &["az"],
        subcommand: Some("keyvault"),
        flags: &[],
        long: &[LongFlag::value("value")],
        assignments: false,
    },
    CommandFlags {
        names: &["aws"],
        subcommand: Some("secretsmanager"),
        flags: &[],
        long: &[
            LongFlag::value("secret-string"),
            LongFlag::value("secret-binary"),
        ],
        assignments: false,
    },
];

/// The letters of every [`PasswordFlag`], indexed by byte: a flag with another letter is
/// never looked at again.
static LETTERS: [bool; 256] = {
    let mut table = [false; 256];
    let mut c = 0;
    while c < COMMANDS.len() {
        let mut f = 0;
        while f < COMMANDS[c].flags.len() {
            table[COMMANDS[c].flags[f].letter as usize] = true;
            f += 1;
        }
        c += 1;
    }
    table
};

/// Whether `letter` is the letter of some command's password flag.
#[inline]
pub(super) fn is_password_letter(letter: u8) -> bool {
    LETTERS[usize::from(letter)]
}

/// The first bytes of the names of [`COMMANDS`], indexed by byte.
static NAME_FIRST: [bool; 256] = {
    let mut table = [false; 256];
    let mut c = 0;
    while c < COMMANDS.len() {
        let mut n = 0;
        while n < COMMANDS[c].names.len() {
            table[COMMANDS[c].names[n].as_bytes()[0] as usize] = true;
            n += 1;
        }
        c += 1;
    }
    table
};

/// The entries of [`COMMANDS`] for the command `word` runs ([`command_name`]), as bits (a
/// command can have more than one: `az login`, `az keyvault`).
fn command_bits(word: &str) -> u32 {
    let name = command_name(word);
    // Every name is 2 to 14 bytes long and starts with one of a few bytes: most words are
    // looked up no further.
    if !(2..=14).contains(&name.len()) || !NAME_FIRST[usize::from(name.as_bytes()[0])] {
        return 0;
    }
    COMMANDS
        .iter()
        .enumerate()
        .filter(|(_, c)| c.names.contains(&name))
        .fold(0, |bits, (k, _)| bits | 1 << k)
}

/// The first bytes of the names of every [`LongFlag`], indexed by byte.
static LONG_FIRST: [bool; 256] = {
    let mut table = [false; 256];
    let mut c = 0;
    while c < COMMANDS.len() {
        let mut f = 0;
        while f < COMMANDS[c].long.len() {
            table[COMMANDS[c].long[f].name.as_bytes()[0] as usize] = true;
            f += 1;
        }
        c += 1;
    }
    table
};

/// Whether `name` (a long flag's, without its dashes) is the name of some command's
/// [`LongFlag`]: most flags are never looked at again.
#[inline]
pub(super) fn is_long_flag_name(name: &[u8]) -> bool {
    name.first().is_some_and(|&b| LONG_FIRST[usize::from(b)])
        && COMMANDS
            .iter()
            .any(|c| c.long.iter().any(|f| f.name.as_bytes() == name))
}

/// The name of the command a word runs: its last run of name characters (letters, digits,
/// `.`, `_`, `-`), so without a directory (`/usr/bin/mysql`, `C:\tools\mysql.exe`) or
/// punctuation glued before it (`!mysql`), and without an escape glued before it in
/// serialized or encoded text (`\vmysql`, `\x0bmysql`, `\u000bmysql`, `%0Bmysql`); and
/// without a `.exe` suffix.
pub(super) fn command_name(word: &str) -> &str {
    let bytes = word.as_bytes();
    let is_name = |b: u8| b.is_ascii_alphanumeric() || matches!(b, b'.' | b'_' | b'-');
    let start = bytes.iter().rposition(|&b| !is_name(b)).map_or(0, |k| {
        let rest = &bytes[k + 1..];
        // `n` hex digits from `rest[from]` on.
        let hex = |from: usize, n: usize| {
            rest.get(from..from + n)
                .is_some_and(|digits| digits.iter().all(u8::is_ascii_hexdigit))
        };
        let escape = match (bytes[k], rest.first()) {
            (b'\\', Some(b'n' | b'r' | b't' | b'f' | b'b' | b'v')) => 1,
            (b'\\', Some(b'x')) if hex(1, 2) => 3,
            (b'\\', Some(b'u')) if hex(1, 4) => 5,
            (b'%', _) if hex(0, 2) => 2,
            _ => 0,
        };
        k + 1 + escape
    });
    let name = &word[start..];
    name.strip_suffix(".exe").unwrap_or(name)
}

/// The commands met so far in one command line's words: those that take their password
/// flags anywhere after them, and those that need a subcommand (`docker login`) once it has
/// come.
#[derive(Default, Clone, Copy, Debug)]
pub(super) struct Commands {
    /// Bit `k`: [`COMMANDS`]`[k]` was met and its flags count.
    ready: u32,
    /// Bit `k`: [`COMMANDS`]`[k]` was met and waits for its subcommand.
    waiting: u32,
}

const _: () = assert!(COMMANDS.len() <= 32);

impl Commands {
    /// Takes in the next word of the command line.
    pub(super) fn push(&mut self, word: &str) {
        let mut bits = command_bits(word);
        if bits != 0 {
            while bits != 0 {
                let k = bits.trailing_zeros() as usize;
                bits &= bits - 1;
                if COMMANDS[k].subcommand.is_some() {
                    self.waiting |= 1 << k;
                } else {
                    self.ready |= 1 << k;
                }
            }
            return;
        }
        let mut waiting = self.waiting;
        while waiting != 0 {
            let k = waiting.trailing_zeros() as usize;
            waiting &= waiting - 1;
            if COMMANDS[k].subcommand == Some(word) {
                self.waiting &= !(1 << k);
                self.ready |= 1 << k;
            }
        }
    }

    /// The password flag `-<letter>` of a command met so far that reads its value in `form`.
    pub(super) fn flag(&self, letter: u8, form: Form) -> Option<&'static PasswordFlag> {
        self.ready_commands().find_map(|c| {
            c.flags
                .iter()
                .find(|f| f.letter == letter && f.form.reads(form))
        })
    }

    /// The long flag `--<name>` of a command met so far whose value is a secret.
    pub(super) fn long_flag(&self, name: &[u8]) -> Option<&'static LongFlag> {
        self.ready_commands()
            .find_map(|c| c.long.iter().find(|f| f.name.as_bytes() == name))
    }

    /// Whether a command met so far takes every `KEY=value` argument as a secret.
    pub(super) fn assigns(&self) -> bool {
        self.ready_commands().any(|c| c.assignments)
    }

    /// The commands met so far whose flags count.
    fn ready_commands(&self) -> impl Iterator<Item = &'static CommandFlags> {
        let mut ready = self.ready;
        std::iter::from_fn(move || {
            (ready != 0).then(|| {
                let k = ready.trailing_zeros() as usize;
                ready &= ready - 1;
                &COMMANDS[k]
            })
        })
    }
}

/// Whether `text` may hold a command whose `KEY=value` arguments are secrets
/// ([`CommandFlags::assignments`]): it holds the word such a command needs
/// ([`ASSIGNING_WORDS`]). Looked at once per scan, at its first assignment whose key is no
/// secret.
pub(super) fn may_assign_secrets(text: &str) -> bool {
    let bytes = text.as_bytes();
    ASSIGNING_WORDS
        .iter()
        .any(|word| memchr::memmem::find(bytes, word.as_bytes()).is_some())
}

/// The words [`may_assign_secrets`] looks for: every command whose `KEY=value` arguments are
/// secrets has one of them as its name or subcommand (a test checks the table).
const ASSIGNING_WORDS: [&str; 2] = ["secrets", "vault"];

/// How far back from a flag a text is read for its command, in bytes: a command line
/// longer than this before its flag is not recognised (and reading stays linear in the
/// text).
const LOOKBACK: usize = 512;

/// What a byte is to [`commands_before`]: [`BREAK`], [`DOUBLE`], [`SINGLE`], [`BLANK`] or
/// [`BACKSLASH`] (0: part of a word).
static BYTE_KINDS: [u8; 256] = {
    let mut table = [0u8; 256];
    let breaks = b"\n\r;|&()`{}";
    let mut k = 0;
    while k < breaks.len() {
        table[breaks[k] as usize] = BREAK;
        k += 1;
    }
    table[b'"' as usize] = DOUBLE;
    table[b'\'' as usize] = SINGLE;
    table[b' ' as usize] = BLANK;
    table[b'\t' as usize] = BLANK;
    table[b'\\' as usize] = BACKSLASH;
    table
};

/// [`BYTE_KINDS`]: a byte that separates two commands (a line break, `;`, `|`, `&`, a
/// bracket, a backtick).
const BREAK: u8 = 1;
/// [`BYTE_KINDS`]: a double quote (it also separates words).
const DOUBLE: u8 = 2;
/// [`BYTE_KINDS`]: a single quote (it also separates words).
const SINGLE: u8 = 3;
/// [`BYTE_KINDS`]: a blank, which separates words (so do line breaks).
const BLANK: u8 = 4;
/// [`BYTE_KINDS`]: a backslash (`\n` and `\r` after it separate commands).
const BACKSLASH: u8 = 5;

/// The commands of the command line that the flag at byte `i` of `text` belongs to: the
/// words from the last separator of commands before it up to the flag. A separator counts
/// only outside quotes, as seen from the flag: with an even number of `"` and of `'` between
/// it and the flag (`mysql -e "use app; select 1" -p…` is one command; `bash -c "cd /srv;
/// mysql -p…"` starts one after the `;`). In serialized text an escaped line break (`\n`,
/// `\r`) separates commands, and an escaped quote (`\"`) counts as a quote. Quotes separate
/// words (`"cmd":"mysql` holds the word `mysql`). When neither such a separator nor the start
/// of the text is within [`LOOKBACK`] bytes, every word within them (failing towards privacy:
/// the command line may begin further back, or a quote before the command may hide every
/// separator), and `true` with it. Also the byte the words were read from.
fn commands_before(text: &str, i: usize) -> (Commands, usize, bool) {
    commands_from(text, line_start(text, i), i)
}

/// [`commands_before`] with the command line's start ([`line_start`]) already found.
fn commands_from(text: &str, line_start: Option<usize>, i: usize) -> (Commands, usize, bool) {
    let (start, limited) = match line_start {
        Some(start) => (start, false),
        None => {
            let floor = i.saturating_sub(LOOKBACK);
            (text.ceil_char_boundary(floor), floor > 0)
        }
    };
    let mut commands = Commands::default();
    // `start` follows an ASCII byte or is a boundary, and `i` starts a word.
    let start = start.min(i);
    commands.push_words(&text[start..i]);
    (commands, start, limited)
}

/// Where the command line of the flag at byte `i` starts ([`commands_before`]): after the
/// last separator outside quotes, or at the start of the text; `None` when neither is within
/// [`LOOKBACK`] bytes.
fn line_start(text: &str, i: usize) -> Option<usize> {
    let bytes = text.as_bytes();
    let floor = i.saturating_sub(LOOKBACK);
    let (mut double, mut single) = (false, false);
    let mut start = None;
    let mut k = i;
    while k > floor {
        k -= 1;
        match BYTE_KINDS[usize::from(bytes[k])] {
            DOUBLE => double = !double,
            SINGLE => single = !single,
            // A line ended by a backslash goes on on the next one (`mysql -uroot \` then
            // `-p…`).
            BREAK if !double && !single && !continues(bytes, k) => {
                start = Some(k + 1);
                break;
            }
            // `\n` in serialized text: a line break when the backslashes before the letter
            // are odd in number (`\\n` is a backslash and an `n`), and one the line goes on
            // after when they are three or more (`\\\n`, an escaped backslash before it).
            BACKSLASH if !double && !single && matches!(bytes.get(k + 1), Some(b'n' | b'r')) => {
                let run = bytes[..=k]
                    .iter()
                    .rev()
                    .take_while(|&&b| b == b'\\')
                    .count();
                if run == 1 {
                    start = Some(k + 2);
                    break;
                }
            }
            _ => {}
        }
    }
    match start {
        None if floor == 0 => Some(0),
        start => start,
    }
}

/// Whether the line break at `k` follows a backslash (also as `\` `\r` `\n`): the command
/// goes on on the next line.
fn continues(bytes: &[u8], k: usize) -> bool {
    let before = &bytes[..k];
    before.ends_with(b"\\") || (bytes[k] == b'\n' && before.ends_with(b"\\\r"))
}

impl Commands {
    /// Takes in the words of `text` ([`commands_before`]: blanks, line breaks and quotes
    /// separate them).
    fn push_words(&mut self, text: &str) {
        for word in text
            .split(|c: char| {
                c.is_ascii_whitespace()
                    || (c.is_ascii() && matches!(BYTE_KINDS[c as usize], DOUBLE | SINGLE))
            })
            .filter(|word| !word.is_empty())
        {
            self.push(word);
        }
    }
}

/// [`commands_before`] for the flags of one scan, which come in the order of the text: when
/// nothing between the last flag looked up and this one separates commands or opens or closes
/// a quote (only blanks and words), this flag's command line is the last one's plus the words
/// in between, taken in without reading back again. So a text of many flags is read about
/// once, not [`LOOKBACK`] bytes per flag.
#[derive(Default, Clone, Copy, Debug)]
pub(super) struct CommandsMemo {
    /// The last flag looked up, what [`commands_before`] found for it, the byte its words were
    /// read from, and whether it found no separator within reach.
    last: Option<(usize, Commands, usize, bool)>,
    /// Whether some lookup found no separator within reach ([`commands_before`]).
    pub(super) limited: bool,
}

impl CommandsMemo {
    /// [`commands_before`]`(text, i)`, for the `text` of every call on this memo, and the
    /// byte the words were read from (for a line taken over from the last flag, that flag's).
    pub(super) fn before(&mut self, text: &str, i: usize) -> (Commands, usize) {
        let (found, start, limited) = match self.last {
            Some((at, mut commands, start, limited))
                if at <= i
                    && text.as_bytes()[at..i]
                        .iter()
                        .all(|&b| matches!(BYTE_KINDS[usize::from(b)], 0 | BLANK)) =>
            {
                // Nothing in between moves the separator or the quotes: the same command line
                // (or, without a separator within reach, the words within reach and more).
                commands.push_words(&text[at..i]);
                (commands, start, limited)
            }
            // The last flag found no separator within reach: when this one finds none either,
            // its words within reach are among the last one's and those in between (taken in
            // without reading them all again; a quote between every two flags would have each
            // one read its whole reach).
            Some((at, mut commands, start, true)) if at <= i && i - at <= LOOKBACK => {
                match line_start(text, i) {
                    None => {
                        commands.push_words(&text[at..i]);
                        (commands, start, true)
                    }
                    line => commands_from(text, line, i),
                }
            }
            _ => commands_before(text, i),
        };
        self.limited |= limited;
        self.last = Some((i, found, start, limited));
        (found, start)
    }
}

#[cfg(test)]
mod tests {
    use super::{ASSIGNING_WORDS, COMMANDS};

    /// A text that holds such a command holds one of [`ASSIGNING_WORDS`].
    #[test]
    fn every_assigning_command_has_a_word_looked_for() {
        for command in COMMANDS.iter().filter(|c| c.assignments) {
            let words = command.names.iter().copied().chain(command.subcommand);
            assert!(
                words.clone().any(|w| ASSIGNING_WORDS.contains(&w)),
                "{:?}",
                words.collect::<Vec<_>>()
            );
        }
    }
}
