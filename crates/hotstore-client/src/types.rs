//! The values the DAQ commands take and return.

use std::fmt;
use std::str::FromStr;

/// What the server's `+OK` to a write promises (the `DURABILITY` option). Passing `None`
/// where a method takes `Option<Durability>` leaves the choice to the server's default
/// (`--durability`, `persisted` unless changed). Mirrors `hotstore::Durability`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum Durability {
    /// In the store's mapped memory: survives a crash of the server, not a power cut.
    Memory,
    /// On the tier's persistence domain (fdatasync on a block tier): survives a power cut
    /// where the tier does.
    Persisted,
}

impl Durability {
    /// The protocol's name: `memory` or `persisted`.
    pub fn as_str(self) -> &'static str {
        match self {
            Durability::Memory => "memory",
            Durability::Persisted => "persisted",
        }
    }
}

impl fmt::Display for Durability {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.as_str())
    }
}

impl FromStr for Durability {
    type Err = String;
    fn from_str(s: &str) -> Result<Self, String> {
        match s.to_ascii_lowercase().as_str() {
            "memory" => Ok(Durability::Memory),
            "persisted" => Ok(Durability::Persisted),
            o => Err(format!("unknown durability `{o}` (memory or persisted)")),
        }
    }
}

/// How a consumer settles a claimed event (`EVENT.ACK token REMOVE|KEEP`). Mirrors
/// `hotstore::Ack`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum Ack {
    /// Delete every fragment of the event; the event never comes back.
    Remove,
    /// Keep the fragments stored; the event is never offered again.
    Keep,
}

impl Ack {
    /// The protocol's keyword: `REMOVE` or `KEEP`.
    pub fn as_str(self) -> &'static str {
        match self {
            Ack::Remove => "REMOVE",
            Ack::Keep => "KEEP",
        }
    }
}

/// One fragment: its key fields in the default key layout
/// (`run:u32,event:u64|detector:u16,component:u16`) and its value.
#[derive(Debug, Clone, PartialEq, Eq, Hash, Default)]
pub struct Fragment {
    /// Run number.
    pub run: u32,
    /// Event number within the run.
    pub event: u64,
    /// Detector (readout source) number.
    pub detector: u16,
    /// Component number within the detector.
    pub component: u16,
    /// The fragment's bytes.
    pub value: Vec<u8>,
}

impl Fragment {
    /// A fragment from its fields.
    pub fn new(run: u32, event: u64, detector: u16, component: u16, value: Vec<u8>) -> Self {
        Fragment {
            run,
            event,
            detector,
            component,
            value,
        }
    }
}

/// An event claimed by `EVENT.NEXT`: settle it with `event_ack` or `event_release` (by its
/// token) before the lease ends, or it is offered again.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ClaimedEvent {
    /// The claim's token, for `EVENT.ACK` and `EVENT.RELEASE` (from any connection).
    pub token: String,
    /// Run number.
    pub run: u32,
    /// Event number within the run.
    pub event: u64,
    /// Made READY by its timeout before all expected fragments arrived.
    pub incomplete: bool,
    /// Its fragments, in key order.
    pub fragments: Vec<Fragment>,
}

impl ClaimedEvent {
    /// Total bytes of fragment values.
    pub fn bytes(&self) -> u64 {
        self.fragments.iter().map(|f| f.value.len() as u64).sum()
    }
}

/// Lifecycle state of an event, as `EVENT.RANGE` reports it.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
#[non_exhaustive]
pub enum EventState {
    /// Fragments arriving.
    Open,
    /// Complete (or sealed, or timed out) and waiting for a consumer.
    Ready,
    /// Leased to a consumer.
    Claimed,
    /// Acknowledged with `KEEP`: stored, never offered again.
    Kept,
    /// Delivered the server's maximum number of times unacknowledged: parked, claimed only
    /// explicitly (EVENT.CLAIM).
    Poisoned,
}

impl EventState {
    /// The protocol's name (`open`, `ready`, `claimed`, `kept`).
    pub fn as_str(self) -> &'static str {
        match self {
            EventState::Open => "open",
            EventState::Ready => "ready",
            EventState::Claimed => "claimed",
            EventState::Kept => "kept",
            EventState::Poisoned => "poisoned",
        }
    }
}

impl FromStr for EventState {
    type Err = String;
    fn from_str(s: &str) -> Result<Self, String> {
        match s.to_ascii_lowercase().as_str() {
            "open" => Ok(EventState::Open),
            "ready" => Ok(EventState::Ready),
            "claimed" => Ok(EventState::Claimed),
            "kept" => Ok(EventState::Kept),
            "poisoned" => Ok(EventState::Poisoned),
            o => Err(format!("unknown event state `{o}`")),
        }
    }
}

impl fmt::Display for EventState {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.as_str())
    }
}

/// One event as listed by `EVENT.RANGE`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct EventSummary {
    /// Run number (the one asked for).
    pub run: u32,
    /// Event number.
    pub event: u64,
    /// Its state.
    pub state: EventState,
    /// Fragments stored.
    pub fragments: u64,
    /// Bytes of fragment values stored.
    pub bytes: u64,
    /// Made READY by its timeout before all expected fragments arrived.
    pub incomplete: bool,
}

/// One value of `STORE.STATS`: counters are integers; a few entries (e.g. `tiers`) may be
/// text or nested.
#[derive(Debug, Clone, PartialEq)]
pub enum StatValue {
    /// An integer counter.
    Int(i64),
    /// A floating-point value.
    Float(f64),
    /// Text.
    Text(String),
    /// A list of values.
    List(Vec<StatValue>),
    /// Named values, in the server's order.
    Map(Vec<(String, StatValue)>),
    /// No value.
    Nil,
}

impl StatValue {
    /// The integer, if this is one (or text holding one).
    pub fn as_i64(&self) -> Option<i64> {
        match self {
            StatValue::Int(i) => Some(*i),
            StatValue::Text(s) => s.parse().ok(),
            _ => None,
        }
    }

    /// The text, if this is text.
    pub fn as_str(&self) -> Option<&str> {
        match self {
            StatValue::Text(s) => Some(s),
            _ => None,
        }
    }
}

impl fmt::Display for StatValue {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            StatValue::Int(i) => write!(f, "{i}"),
            StatValue::Float(x) => write!(f, "{x}"),
            StatValue::Text(s) => f.write_str(s),
            StatValue::Nil => f.write_str("nil"),
            StatValue::List(l) => {
                f.write_str("[")?;
                for (i, v) in l.iter().enumerate() {
                    if i > 0 {
                        f.write_str(", ")?;
                    }
                    write!(f, "{v}")?;
                }
                f.write_str("]")
            }
            StatValue::Map(m) => {
                f.write_str("{")?;
                for (i, (k, v)) in m.iter().enumerate() {
                    if i > 0 {
                        f.write_str(", ")?;
                    }
                    write!(f, "{k}: {v}")?;
                }
                f.write_str("}")
            }
        }
    }
}
