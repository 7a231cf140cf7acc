//! Writes queued for a cluster: [`ClusterPipeline`].

use crate::pipeline::Pipeline;
use crate::slot::event_slot;
use crate::types::{Durability, Fragment};

/// Writes queued for [`crate::ClusterClient::execute`]: each command remembers the slot of
/// its event and is sent, in the cluster tag form (`FRAG.PUT 7:42 ...`), to the node serving
/// it. The commands of one node reach it in queue order; commands of different nodes are
/// not ordered. The result is one `Result<()>` per command, in queue order.
#[derive(Debug, Clone, Default)]
pub struct ClusterPipeline {
    pub(crate) cmds: Pipeline,
    pub(crate) slots: Vec<u16>,
}

impl ClusterPipeline {
    /// An empty pipeline.
    pub fn new() -> Self {
        Self::default()
    }

    /// Queues `FRAG.PUT run:event detector component value [DURABILITY d]`.
    pub fn frag_put(
        &mut self,
        run: u32,
        event: u64,
        detector: u16,
        component: u16,
        value: &[u8],
        durability: Option<Durability>,
    ) -> &mut Self {
        self.cmds
            .frag_put_tagged(run, event, detector, component, value, durability);
        self.slots.push(event_slot(run, event));
        self
    }

    /// Queues `FRAG.PUT` of `fragment`.
    pub fn put_fragment(&mut self, f: &Fragment, durability: Option<Durability>) -> &mut Self {
        self.frag_put(
            f.run,
            f.event,
            f.detector,
            f.component,
            &f.value,
            durability,
        )
    }

    /// Queues `EVENT.SEAL run:event [DURABILITY d]`.
    pub fn event_seal(
        &mut self,
        run: u32,
        event: u64,
        durability: Option<Durability>,
    ) -> &mut Self {
        self.cmds.event_seal_tagged(run, event, durability);
        self.slots.push(event_slot(run, event));
        self
    }

    /// Queues a copy of command `i` of `other` (to resend those that failed, such as puts
    /// answered FULL). Panics if `i >= other.len()`, as indexing does.
    pub fn push_from(&mut self, other: &ClusterPipeline, i: usize) -> &mut Self {
        self.cmds.push_from(&other.cmds, i);
        self.slots.push(other.slots[i]);
        self
    }

    /// Commands queued.
    pub fn len(&self) -> usize {
        self.slots.len()
    }

    /// True if nothing is queued.
    pub fn is_empty(&self) -> bool {
        self.slots.is_empty()
    }

    /// Removes every command, keeping the memory.
    pub fn clear(&mut self) {
        self.cmds.clear();
        self.slots.clear();
    }
}
