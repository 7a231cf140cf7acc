//! Server configuration: defaults, the TOML file (same keys as the command-line options,
//! with `-` or `_`), and the checks made before listening.

use crate::error::ServerError;
use hotstore::{Durability, PageCache};
use serde::Deserialize;
use std::net::IpAddr;
use std::path::{Path, PathBuf};
use std::time::Duration;

/// Everything `hotstore serve` can be told.
#[derive(Debug, Clone, Deserialize)]
#[serde(default, deny_unknown_fields, rename_all = "kebab-case")]
pub struct ServerConfig {
    /// Store directory (created if missing).
    pub dir: PathBuf,
    /// Address to listen on.
    pub bind: String,
    /// TCP port (0: pick a free one).
    pub port: u16,
    /// Also listen on this Unix socket.
    pub unixsocket: Option<PathBuf>,
    /// Password for `AUTH`; none means no authentication.
    pub requirepass: Option<String>,
    /// Allow a non-loopback `bind` without a password.
    pub insecure: bool,
    /// Most connected clients.
    pub max_clients: usize,
    /// Worker threads serving connections (0: one per core).
    pub threads: usize,
    /// Serve Prometheus metrics over HTTP on this port (0: pick a free one).
    pub metrics_port: Option<u16>,
    /// Durability of writes that do not name one.
    #[serde(deserialize_with = "de_durability")]
    pub durability: Durability,
    /// Close connections idle this many seconds (0: never).
    pub timeout: u64,
    /// Longest bulk string in a request (bytes).
    #[serde(deserialize_with = "de_size_usize")]
    pub max_bulk_len: usize,
    /// Largest reply built for one command (MGET, EVENT.GET), in bytes.
    #[serde(deserialize_with = "de_size_usize")]
    pub max_reply_len: usize,
    /// Bytes of requests all clients together may have buffered beyond the 64 KiB each
    /// always gets; a client needing more waits (the server stops reading from it).
    #[serde(deserialize_with = "de_size_usize")]
    pub max_buffer_memory: usize,
    /// Bytes of large replies (1 MiB and more) all clients together may have built and not
    /// yet read; a request for more gets `-BUSY` (a reply alone is always built).
    #[serde(deserialize_with = "de_size_usize")]
    pub max_reply_memory: usize,
    /// Store capacity in bytes, stored with the store (0: keep the stored capacity; for a new
    /// store, the file system decides).
    #[serde(deserialize_with = "de_size")]
    pub capacity: u64,
    /// Create and pre-fault segment files for this many bytes at start (bounded by the
    /// capacity), so writes never pay for page allocation: a DAQ buffer allocated up front.
    /// [`PREALLOCATE_ALL`] (`preallocate = true` in TOML): all of the capacity.
    #[serde(deserialize_with = "de_preallocate")]
    pub preallocate: u64,
    /// A second tier (a directory, relative to `dir` unless absolute; needs `capacity`): past
    /// 80% of the capacity the first tier's oldest data moves there (offload), still readable
    /// and claimable. Fixed at creation, like every tier.
    pub offload_to: Option<PathBuf>,
    /// Event policy to set at start: fragments that make an event complete (0: only
    /// EVENT.SEAL or the timeout). None keeps the store's stored policy (default 1).
    pub expected_fragments: Option<u32>,
    /// Event policy to set at start: milliseconds after which an OPEN event becomes READY
    /// flagged incomplete (0: never). None keeps the stored policy.
    pub incomplete_timeout_ms: Option<u64>,
    /// Deliveries after which an event that keeps coming back unacknowledged is parked as
    /// poisoned (EVENT.CLAIM takes it explicitly); 0: never (the default).
    pub max_deliveries: u32,
    /// Refuse FLUSHALL and FLUSHDB (for production buffers: one stray command would remove
    /// every event not yet consumed).
    pub disable_flush: bool,
    /// Cluster mode: the map file naming every node and the hash slots it serves (see
    /// docs/cluster.md). Keys of other nodes' slots answer `MOVED`.
    pub cluster: Option<PathBuf>,
    /// This node's id in the cluster map (default: the node whose address is `bind:port`).
    pub cluster_id: Option<String>,
}

/// `preallocate`: all of the capacity.
pub const PREALLOCATE_ALL: u64 = u64::MAX;

/// Parses a byte count: a plain number, or one with a unit: `K`/`KiB`, `M`/`MiB`, `G`/`GiB`,
/// `T`/`TiB` are powers of 1024 (`10KiB` = 10240), `KB`, `MB`, `GB`, `TB` powers of 1000
/// (`10KB` = 10000), as in rates (`100MB/s`); `B` alone is accepted and ignored. The one
/// parser of the command line and the TOML file.
pub fn parse_size(s: &str) -> Result<u64, String> {
    let t = s.trim();
    let split = t.find(|c: char| !c.is_ascii_digit()).unwrap_or(t.len());
    let (num, unit) = t.split_at(split);
    let n: u64 = num
        .parse()
        .map_err(|_| format!("`{s}` is not a byte count (e.g. 100, 10KiB, 1MiB)"))?;
    if unit.starts_with(['.', ',']) {
        return Err(format!(
            "`{s}`: fractions are not taken; give a whole number of a smaller unit (1536MiB, not 1.5GiB)"
        ));
    }
    let mult: u64 = match unit.trim().to_ascii_lowercase().as_str() {
        "" | "b" => 1,
        "k" | "kib" => 1 << 10,
        "m" | "mib" => 1 << 20,
        "g" | "gib" => 1 << 30,
        "t" | "tib" => 1 << 40,
        "kb" => 1_000,
        "mb" => 1_000_000,
        "gb" => 1_000_000_000,
        "tb" => 1_000_000_000_000,
        _ => {
            return Err(format!(
                "unknown size unit `{}` in `{s}` (use K/KiB, M/MiB, G/GiB, T/TiB for powers of \
                 1024, KB, MB, GB, TB for powers of 1000)",
                unit.trim()
            ))
        }
    };
    n.checked_mul(mult)
        .ok_or_else(|| format!("`{s}` is too large"))
}

/// A size in TOML: a number of bytes or a string with a unit (`"64MiB"`), as on the command
/// line. Fix (found by a new-user review): `capacity = "64GiB"` was refused as a type error.
#[derive(Deserialize)]
#[serde(untagged)]
enum SizeValue {
    Bytes(u64),
    Text(String),
    Flag(bool),
}

fn de_size<'de, D: serde::Deserializer<'de>>(d: D) -> Result<u64, D::Error> {
    match SizeValue::deserialize(d)? {
        SizeValue::Bytes(n) => Ok(n),
        SizeValue::Text(t) => parse_size(&t).map_err(serde::de::Error::custom),
        SizeValue::Flag(_) => Err(serde::de::Error::custom(
            "a size: a number of bytes or a string like \"64MiB\"",
        )),
    }
}

fn de_size_usize<'de, D: serde::Deserializer<'de>>(d: D) -> Result<usize, D::Error> {
    let n = de_size(d)?;
    usize::try_from(n).map_err(|_| serde::de::Error::custom(format!("{n} bytes is too large")))
}

/// `preallocate`: a size, or `true` for all of the capacity (`false`: none).
fn de_preallocate<'de, D: serde::Deserializer<'de>>(d: D) -> Result<u64, D::Error> {
    match SizeValue::deserialize(d)? {
        SizeValue::Bytes(n) => Ok(n),
        SizeValue::Text(t) if t.trim().eq_ignore_ascii_case("all") => Ok(PREALLOCATE_ALL),
        SizeValue::Text(t) => parse_size(&t).map_err(serde::de::Error::custom),
        SizeValue::Flag(true) => Ok(PREALLOCATE_ALL),
        SizeValue::Flag(false) => Ok(0),
    }
}

fn de_durability<'de, D: serde::Deserializer<'de>>(d: D) -> Result<Durability, D::Error> {
    let s = String::deserialize(d)?;
    s.parse().map_err(serde::de::Error::custom)
}

impl Default for ServerConfig {
    fn default() -> Self {
        ServerConfig {
            dir: PathBuf::from("hotstore-data"),
            bind: "127.0.0.1".into(),
            port: 6380,
            unixsocket: None,
            requirepass: None,
            insecure: false,
            max_clients: 10_000,
            threads: 0,
            metrics_port: None,
            durability: Durability::Persisted,
            timeout: 0,
            max_bulk_len: hotstore::MAX_VALUE_LEN as usize,
            max_reply_len: 2 * hotstore::MAX_VALUE_LEN as usize,
            max_buffer_memory: 1 << 30,
            max_reply_memory: 2 << 30,
            capacity: 0,
            preallocate: 0,
            offload_to: None,
            expected_fragments: None,
            incomplete_timeout_ms: None,
            max_deliveries: 0,
            disable_flush: false,
            cluster: None,
            cluster_id: None,
        }
    }
}

impl ServerConfig {
    /// Defaults for a store in `dir`.
    pub fn for_dir(dir: impl Into<PathBuf>) -> Self {
        ServerConfig {
            dir: dir.into(),
            ..Default::default()
        }
    }

    /// Reads a TOML file with the same keys as the command-line options.
    pub fn from_toml_file(path: &Path) -> Result<Self, ServerError> {
        let text = std::fs::read_to_string(path).map_err(|e| ServerError::Config {
            what: format!("cannot read {}: {e}", path.display()),
        })?;
        Self::from_toml(&text).map_err(|e| ServerError::Config {
            what: format!("{}: {e}", path.display()),
        })
    }

    /// Parses TOML text (see [`ServerConfig::from_toml_file`]).
    pub fn from_toml(text: &str) -> Result<Self, String> {
        toml::from_str(text).map_err(|e| e.to_string())
    }

    /// The idle timeout, if any.
    pub fn idle_timeout(&self) -> Option<Duration> {
        (self.timeout > 0).then(|| Duration::from_secs(self.timeout))
    }

    /// Worker threads to start.
    pub fn worker_threads(&self) -> usize {
        if self.threads > 0 {
            self.threads
        } else {
            std::thread::available_parallelism().map_or(2, |n| n.get())
        }
    }

    /// How new segment files sit in the page cache: single pages for a Persisted server (each
    /// group commit then writes only the pages it changed: 950 KiB per commit fell to about
    /// 15 KiB, and SET 100 B rose from 171-278 k/s to 330-351 k/s in alternated runs), large
    /// folios for a Memory one (nothing is synced per write, and a sealed segment's write-back
    /// of 16 k single pages cost 100 B SETs about 10%).
    pub fn page_cache(&self) -> PageCache {
        match self.durability {
            Durability::Persisted => PageCache::SinglePages,
            Durability::Memory => PageCache::LargeFolios,
        }
    }

    /// Write lanes of the store (each lane appends to its own segment file).
    ///
    /// With `Persisted` as the default, every lane written since the last group commit costs
    /// one `fdatasync`, each with its own device cache flush, one after the other: with two
    /// lanes in use, SET 100 B at `-P 16 -c 8` measured 200-226 k/s, with one 295-317 k/s
    /// (the commit went from about 270 to 195 us). So Persisted servers share a lane among
    /// four workers; the lock is held only for a copy, a small price next to a flush. Memory
    /// servers give each worker two lanes (one lane measured about 10% slower there).
    pub fn lanes(&self) -> usize {
        let threads = self.worker_threads();
        match self.durability {
            Durability::Persisted => (threads / 4).clamp(1, 256),
            Durability::Memory => (threads * 2).clamp(2, 256),
        }
    }

    /// Refuses settings that cannot work or are unsafe.
    pub fn validate(&self) -> Result<IpAddr, ServerError> {
        let bad = |what: String| Err(ServerError::Config { what });
        let ip: IpAddr = match self.bind.parse() {
            Ok(ip) => ip,
            Err(_) if self.bind == "localhost" => IpAddr::from([127, 0, 0, 1]),
            Err(_) => return bad(format!("bind address `{}` is not an IP address", self.bind)),
        };
        if !ip.is_loopback() && self.requirepass.is_none() && !self.insecure {
            return bad(format!(
                "refusing to listen on {ip} (not loopback) without a password: set \
                 --requirepass, or pass --insecure if the network is trusted"
            ));
        }
        if self.max_clients == 0 {
            return bad("max-clients must be at least 1".into());
        }
        if self.preallocate == PREALLOCATE_ALL && self.capacity == 0 {
            return bad(
                "preallocate = true preallocates all of the capacity: set a capacity, or give \
                 preallocate a size"
                    .into(),
            );
        }
        // A new store needs the capacity; an existing one has it stored (found by a new-user
        // review: `--offload-to` on an existing bounded store demanded --capacity again).
        if self.offload_to.is_some()
            && self.capacity == 0
            && !self.dir.join(hotstore::META_FILE).exists()
        {
            return bad(
                "offload-to needs a capacity: the first tier offloads past 80% of it (set --capacity)"
                    .into(),
            );
        }
        if self.max_bulk_len == 0 || self.max_bulk_len as u64 > hotstore::MAX_VALUE_LEN {
            return bad(format!(
                "max-bulk-len must be 1 to {} bytes (the store's largest value)",
                hotstore::MAX_VALUE_LEN
            ));
        }
        if self.max_reply_len < self.max_bulk_len {
            return bad(format!(
                "max-reply-len ({}) must be at least max-bulk-len ({}), or a stored value could \
                 not be read back",
                self.max_reply_len, self.max_bulk_len
            ));
        }
        if self.max_buffer_memory < self.max_bulk_len {
            return bad(format!(
                "max-buffer-memory ({}) must be at least max-bulk-len ({}), or a request of the \
                 largest size could never be read",
                self.max_buffer_memory, self.max_bulk_len
            ));
        }
        if matches!(&self.requirepass, Some(p) if p.is_empty()) {
            return bad("requirepass must not be empty".into());
        }
        if self.cluster.is_some() && self.port == 0 {
            return bad(
                "a cluster node needs a fixed --port: clients are sent to the address the \
                 cluster map gives it"
                    .into(),
            );
        }
        if self.cluster_id.is_some() && self.cluster.is_none() {
            return bad("cluster-id needs a cluster map (--cluster FILE)".into());
        }
        Ok(ip)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn toml_keys_match_the_options() {
        let c = ServerConfig::from_toml(
            "dir = \"/tmp/x\"\nport = 7000\nrequirepass = \"s\"\ndurability = \"memory\"\n\
             max-clients = 5\nmetrics-port = 9100\n",
        )
        .unwrap();
        assert_eq!(c.port, 7000);
        assert_eq!(c.durability, Durability::Memory);
        assert_eq!(c.max_clients, 5);
        assert_eq!(c.metrics_port, Some(9100));
        assert!(ServerConfig::from_toml("prot = 1").is_err());
        // Sizes as on the command line (found by a new-user review: only integers worked).
        let c = ServerConfig::from_toml(
            "capacity = \"64GiB\"\nmax-bulk-len = \"64MiB\"\npreallocate = true\n\
             max-reply-memory = 1073741824",
        )
        .unwrap();
        assert_eq!(c.capacity, 64 << 30);
        assert_eq!(c.max_bulk_len, 64 << 20);
        assert_eq!(c.preallocate, PREALLOCATE_ALL);
        assert_eq!(c.max_reply_memory, 1 << 30);
        assert!(ServerConfig::from_toml("capacity = \"1.5GiB\"")
            .unwrap_err()
            .contains("fractions"));
        assert!(ServerConfig::from_toml("capacity = true").is_err());
        assert_eq!(parse_size("2TB").unwrap(), 2_000_000_000_000);
        assert!(parse_size("10XB").unwrap_err().contains("KB, MB, GB, TB"));
        assert!(ServerConfig::from_toml("durability = \"fast\"").is_err());
        let lanes = |durability, threads| {
            ServerConfig {
                durability,
                threads,
                ..ServerConfig::default()
            }
            .lanes()
        };
        assert_eq!(lanes(Durability::Persisted, 2), 1);
        assert_eq!(lanes(Durability::Persisted, 16), 4);
        assert_eq!(lanes(Durability::Memory, 2), 4);
    }

    #[test]
    fn non_loopback_needs_a_password() {
        let mut c = ServerConfig::for_dir("/tmp/x");
        c.bind = "0.0.0.0".into();
        assert!(c.validate().is_err());
        c.requirepass = Some("secret".into());
        assert!(c.validate().is_ok());
        c.requirepass = None;
        c.insecure = true;
        assert!(c.validate().is_ok());
    }
}
