//! Small helpers of the command line: the CLI error type and exit statuses, the parsers of
//! option values (sizes, seconds), stdout that tolerates a closed pipe (`hotstore dump | head`)
//! and the SIGPIPE disposition. Byte sizes and counts for people and what `--preallocate` means
//! are shared with the libraries: `hotstore_bench::util`.

use hotstore_bench::util::PREALLOCATE_ALL;
use std::fmt;
use std::io::{self, BufWriter, StdoutLock, Write};
use std::path::Path;

/// Exit status of a command that failed (bad input, no store, I/O error).
pub const EXIT_ERROR: u8 = 2;
/// Exit status of `verify` when it found damage.
pub const EXIT_DAMAGE: u8 = 1;

/// Why a command failed.
#[derive(Debug)]
pub enum CliError {
    /// A message for the user, printed as `error: <message>`.
    Msg(String),
    /// Stdout was closed by the reader (e.g. `| head`): stop quietly.
    BrokenPipe,
}

impl fmt::Display for CliError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            CliError::Msg(m) => f.write_str(m),
            CliError::BrokenPipe => f.write_str("broken pipe"),
        }
    }
}

impl From<hotstore::Error> for CliError {
    fn from(e: hotstore::Error) -> Self {
        CliError::Msg(format!("{e}{}", salvage_hint(&e)))
    }
}

/// For an open that recovery refused: the commands that salvage the store, after the
/// library's message (which names `RecoveryMode::Salvage`: no command could open such a
/// store, found in review). Empty for any other error.
pub fn salvage_hint(e: &hotstore::Error) -> &'static str {
    match e {
        hotstore::Error::Corruption { .. } | hotstore::Error::MissingFiles { .. } => {
            "\nWith this tool: `hotstore verify DIR` lists the damage; `hotstore inspect \
             --salvage DIR` opens the store once that way and reports what it skipped, and \
             later opens are clean"
        }
        _ => "",
    }
}

impl From<hotstore_bench::Error> for CliError {
    fn from(e: hotstore_bench::Error) -> Self {
        match e {
            hotstore_bench::Error::Output(e) => io_out(e),
            e => CliError::Msg(e.to_string()),
        }
    }
}

impl From<serde_json::Error> for CliError {
    fn from(e: serde_json::Error) -> Self {
        CliError::Msg(format!("cannot encode JSON: {e}"))
    }
}

/// Result of a command.
pub type CliResult<T> = Result<T, CliError>;

/// A `CliError::Msg`.
pub fn fail<T>(msg: impl Into<String>) -> CliResult<T> {
    Err(CliError::Msg(msg.into()))
}

/// Buffered stdout whose write errors become `CliError` (a closed pipe is not an error).
pub struct Out(BufWriter<StdoutLock<'static>>);

impl Out {
    /// Locks stdout.
    pub fn new() -> Self {
        Out(BufWriter::new(io::stdout().lock()))
    }

    /// Writes one line.
    pub fn line(&mut self, s: impl fmt::Display) -> CliResult<()> {
        writeln!(self.0, "{s}").map_err(io_out)
    }

    /// Flushes; call before returning.
    pub fn flush(&mut self) -> CliResult<()> {
        self.0.flush().map_err(io_out)
    }
}

/// For the libraries that stream lines while they run (`bench dram`, `minidaq --sweep`).
impl Write for Out {
    fn write(&mut self, buf: &[u8]) -> io::Result<usize> {
        self.0.write(buf)
    }

    fn flush(&mut self) -> io::Result<()> {
        self.0.flush()
    }
}

fn io_out(e: io::Error) -> CliError {
    if e.kind() == io::ErrorKind::BrokenPipe {
        CliError::BrokenPipe
    } else {
        CliError::Msg(format!("cannot write to stdout: {e}"))
    }
}

/// Restores the default action of SIGPIPE, as in `cat` or `grep`: when the reader of stdout
/// or stderr goes away (`hotstore dump | head -1`), the process ends quietly. Rust's runtime
/// ignores SIGPIPE, which turns that into an EPIPE write error, and `println!` panics on it.
pub fn sigpipe_default() {
    // Safety: SIG_DFL installs no handler, so none of our code runs in signal context; the call
    // only changes the process's disposition of SIGPIPE (one rt_sigaction), which is safe at
    // any time and from any thread.
    unsafe {
        libc::signal(libc::SIGPIPE, libc::SIG_DFL);
    }
}

/// Ignores SIGPIPE again (Rust's own start-up setting), for the network servers: a write to a
/// client that went away must fail with EPIPE, not kill the process. std's TCP `write` (under
/// mio and tokio) passes MSG_NOSIGNAL, but a vectored write (`writev`) cannot, and Unix-socket
/// writes (`serve --unixsocket`) were plain `write(2)` until recent std: not something to rely on.
pub fn sigpipe_ignore() {
    // Safety: SIG_IGN installs no handler, so none of our code runs in signal context; the call
    // only changes the process's disposition of SIGPIPE (one rt_sigaction), which is safe at
    // any time and from any thread.
    unsafe {
        libc::signal(libc::SIGPIPE, libc::SIG_IGN);
    }
}

/// The value of `--preallocate [BYTES]`: a byte count, or [`PREALLOCATE_ALL`] for the flag
/// without a value (the whole --capacity), the same on every command.
pub fn parse_preallocate(s: &str) -> Result<u64, String> {
    if s.trim().eq_ignore_ascii_case("all") {
        return Ok(PREALLOCATE_ALL);
    }
    parse_size(s)
}

/// `--segment-size`: [`parse_size`] within the engine's bounds, checked here so the error
/// names the option, not the engine's `segment_size_bytes`.
pub fn parse_segment_size(s: &str) -> Result<u64, String> {
    let n = parse_size(s)?;
    let (min, max) = (
        hotstore::MIN_SEGMENT_SIZE as u64,
        hotstore::MAX_SEGMENT_SIZE as u64,
    );
    if !(min..=max).contains(&n) || !n.is_multiple_of(4096) {
        return Err(format!(
            "{n} bytes is not a segment size: a multiple of 4 KiB (4096) from 64 KiB to 2 GiB, e.g. 1MiB or 64MiB"
        ));
    }
    Ok(n)
}

/// [`parse_size`], or `off` for "never" (`u64::MAX`).
pub fn parse_size_or_off(s: &str) -> Result<u64, String> {
    if s.trim().eq_ignore_ascii_case("off") {
        return Ok(u64::MAX);
    }
    parse_size(s)
}

/// Parses a byte count (see [`hotstore_server::parse_size`]: the same parser reads
/// sizes in `serve --config`).
pub fn parse_size(s: &str) -> Result<u64, String> {
    hotstore_server::parse_size(s)
}

/// A store capacity: a size, not 0. The engine reads a capacity of 0 as "unbounded", so a
/// `--capacity 0` silently gave an unbounded store.
pub fn parse_capacity(s: &str) -> Result<u64, String> {
    match parse_size(s)? {
        0 => Err("a store of 0 bytes holds nothing; omit --capacity for an unbounded store".into()),
        n => Ok(n),
    }
}

/// Refuses a store path that names a file, with the message every command gives (found by
/// a new-user review: `record` and `minidaq` said "File exists" from the directory creation).
pub fn refuse_file_as_store(dir: &std::path::Path) -> CliResult<()> {
    match std::fs::metadata(dir) {
        Ok(m) if !m.is_dir() => Err(CliError::Msg(
            hotstore::Error::NotADirectory(dir.to_path_buf()).to_string(),
        )),
        _ => Ok(()),
    }
}

/// Parses a duration in seconds (fractions allowed), which must be positive and finite.
pub fn parse_secs(s: &str) -> Result<f64, String> {
    let v: f64 = s
        .trim()
        .parse()
        .map_err(|_| format!("`{s}` is not a number of seconds"))?;
    if !v.is_finite() || v <= 0.0 || v > 1e7 {
        return Err(format!(
            "`{s}`: a duration must be a positive number of seconds"
        ));
    }
    Ok(v)
}

/// A file name relative to `dir` when it is inside it (shorter messages), else the full path.
pub fn short_path(path: &Path, dir: &Path) -> String {
    path.strip_prefix(dir)
        .ok()
        .filter(|p| !p.as_os_str().is_empty())
        .unwrap_or(path)
        .display()
        .to_string()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn sizes_parse_with_binary_units() {
        assert_eq!(parse_size("100"), Ok(100));
        assert_eq!(parse_size("10KiB"), Ok(10 << 10));
        assert_eq!(parse_size("10k"), Ok(10 << 10));
        assert_eq!(parse_size("1 MiB"), Ok(1 << 20));
        assert_eq!(parse_size("2G"), Ok(2 << 30));
        // KB, MB, GB are decimal, as in rates and `bench model` (10KB was 10240 here only).
        assert_eq!(parse_size("10KB"), Ok(10_000));
        assert_eq!(parse_size("2GB"), Ok(2_000_000_000));
        assert!(parse_size("").is_err());
        assert!(parse_size("1.5M").is_err());
        assert!(parse_size("12parsecs").is_err());
        assert!(parse_size("99999999999999999999G").is_err());
    }

    #[test]
    fn seconds_must_be_positive() {
        assert_eq!(parse_secs("0.3"), Ok(0.3));
        assert!(parse_secs("0").is_err());
        assert!(parse_secs("-1").is_err());
        assert!(parse_secs("nan").is_err());
        assert!(parse_secs("inf").is_err());
    }
}
