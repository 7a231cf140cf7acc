//! The state of one connection that commands see: `conn` owns it, `commands` reads and
//! changes it. Its own module so that neither of the two imports the other for it.

use crate::shared::ClientInfo;
use hotstore::ClaimToken;
use std::collections::HashMap;
use std::sync::Arc;
use std::time::Instant;

/// Per-connection state that commands see.
pub struct ConnState {
    /// Registry entry (id, name, addresses).
    pub info: Arc<ClientInfo>,
    /// Speaks RESP3.
    pub resp3: bool,
    /// Passed AUTH (or no password is set).
    pub authenticated: bool,
    /// A `Persisted` write was made since the last sync.
    pub needs_sync: bool,
    /// Commands whose reply waits for that sync, with their start: their latency is taken
    /// once it is done, so that it includes the durability wait.
    pub unsynced: Vec<(usize, Instant)>,
    /// Claims taken by this connection and not yet settled, by token text, with the end of
    /// their lease (an expired one is dropped from the map when the next claim is taken).
    pub claims: HashMap<String, (ClaimToken, Instant)>,
    /// Size of `claims` at which expired ones are next dropped (doubles with what stays, so
    /// dropping is O(1) amortised per claim).
    pub prune_claims_at: usize,
    /// Reply memory reserved for large replies not yet sent (given back once they are).
    pub reply_charge: Option<crate::shared::ReplyCharge>,
}

impl ConnState {
    /// The consumer name recorded with claims.
    pub fn consumer(&self) -> String {
        self.info
            .name
            .lock()
            .clone()
            .unwrap_or_else(|| format!("client-{}", self.info.id))
    }
}
