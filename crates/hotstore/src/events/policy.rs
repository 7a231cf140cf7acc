//! Event policies: when an event is complete. One store-wide default and per-run overrides,
//! persisted in `events.policy` (JSON, replaced atomically and durably):
//!
//! ```text
//! {"version": 1, "default": {"expected_fragments": 4, "incomplete_timeout_ms": 2000},
//!  "runs": {"17": {"expected_fragments": 6, "incomplete_timeout_ms": 0}}}
//! ```

use crate::error::{Error, Result};
use crate::medium::Medium;
use serde::{Deserialize, Serialize};
use std::collections::BTreeMap;
use std::time::Duration;

/// File holding the policies, on the first tier.
pub const POLICY_FILE: &str = "events.policy";
const POLICY_VERSION: u32 = 1;
/// Most runs with a policy of their own ([`crate::Store::set_run_policy`] refuses more; the
/// file is rewritten whole on each change).
pub const MAX_RUN_POLICIES: usize = 4096;
/// Largest `expected_fragments` accepted.
pub const MAX_EXPECTED_FRAGMENTS: u32 = 1 << 20;

/// When an event becomes READY on its own (a producer's `seal` always makes it READY).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
pub struct EventPolicy {
    /// The event is complete once this many distinct fragments arrived. 0 = no count rule (only
    /// `seal` or the timeout make it READY). Default 1 (every fragment is a whole event, as in
    /// DAQDB's evaluation); at most [`MAX_EXPECTED_FRAGMENTS`].
    pub expected_fragments: u32,
    /// An event still OPEN this long after its first fragment becomes READY flagged incomplete.
    /// 0 = never. Default 0. The clock is not persisted: after a reopen, open events wait the
    /// whole timeout again from the open.
    pub incomplete_timeout_ms: u64,
}

impl Default for EventPolicy {
    fn default() -> Self {
        EventPolicy {
            expected_fragments: 1,
            incomplete_timeout_ms: 0,
        }
    }
}

impl EventPolicy {
    /// A policy expecting `n` fragments per event, with no timeout.
    pub fn expecting(n: u32) -> Self {
        EventPolicy {
            expected_fragments: n,
            incomplete_timeout_ms: 0,
        }
    }

    /// This policy with an incomplete-event timeout.
    pub fn with_timeout(mut self, timeout: Duration) -> Self {
        self.incomplete_timeout_ms = timeout.as_millis().min(u64::MAX as u128) as u64;
        self
    }

    /// The timeout, if any.
    pub fn timeout(&self) -> Option<Duration> {
        (self.incomplete_timeout_ms > 0).then(|| Duration::from_millis(self.incomplete_timeout_ms))
    }

    pub(crate) fn validate(&self) -> Result<()> {
        if self.expected_fragments > MAX_EXPECTED_FRAGMENTS {
            return Err(Error::InvalidOption {
                name: "expected_fragments",
                reason: format!(
                    "{} is more than the maximum of {MAX_EXPECTED_FRAGMENTS}",
                    self.expected_fragments
                ),
            });
        }
        Ok(())
    }
}

/// The default and the per-run overrides.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
pub(crate) struct Policies {
    version: u32,
    pub(crate) default: EventPolicy,
    pub(crate) runs: BTreeMap<u64, EventPolicy>,
}

impl Policies {
    pub(crate) fn for_run(&self, run: Option<u64>) -> EventPolicy {
        run.and_then(|r| self.runs.get(&r).copied())
            .unwrap_or(self.default)
    }

    pub(crate) fn load(medium: &dyn Medium) -> Result<Policies> {
        let Some(bytes) = medium.read_file(POLICY_FILE)? else {
            return Ok(Policies {
                version: POLICY_VERSION,
                ..Policies::default()
            });
        };
        let bad = |reason: String| Error::BadMetadata {
            path: medium.path().join(POLICY_FILE),
            reason,
        };
        let p: Policies = serde_json::from_slice(&bytes).map_err(|e| bad(e.to_string()))?;
        if p.version != POLICY_VERSION {
            return Err(bad(format!(
                "version {}; this build reads version {POLICY_VERSION}",
                p.version
            )));
        }
        Ok(p)
    }

    pub(crate) fn store(&self, medium: &dyn Medium) -> Result<()> {
        let mut p = self.clone();
        p.version = POLICY_VERSION;
        let mut bytes = serde_json::to_vec_pretty(&p).map_err(|e| Error::BadMetadata {
            path: medium.path().join(POLICY_FILE),
            reason: e.to_string(),
        })?;
        bytes.push(b'\n');
        medium.write_file(POLICY_FILE, &bytes)
    }
}
