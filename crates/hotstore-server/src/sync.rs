//! Group commit across connections.
//!
//! Connections write with `Durability::Memory` and, before sending replies that acknowledge
//! `Persisted` writes, ask this thread for a sync. The thread takes every request queued while
//! the previous sync ran and covers them all with one `Store::flush` (every record published
//! before the flush starts is durable when it returns). A pipelined batch of N writes costs one
//! sync, and C connections waiting together share one.

use crate::metrics::GroupCommitMetrics;
use hotstore::Store;
use std::sync::mpsc;
use std::sync::Arc;
use std::thread::JoinHandle;
use std::time::Instant;
use tokio::sync::oneshot;

type Waiter = oneshot::Sender<Result<(), String>>;

/// Handle to the sync thread.
pub struct GroupSync {
    tx: Option<mpsc::Sender<Waiter>>,
    thread: Option<JoinHandle<()>>,
}

impl GroupSync {
    /// Starts the sync thread for `store`, recording each commit's time and batch size.
    pub fn start(store: Arc<Store>, metrics: GroupCommitMetrics) -> std::io::Result<GroupSync> {
        let (tx, rx) = mpsc::channel::<Waiter>();
        let thread = std::thread::Builder::new()
            .name("hotstore-sync".into())
            .spawn(move || {
                while let Ok(first) = rx.recv() {
                    let mut batch = vec![first];
                    batch.extend(rx.try_iter());
                    let started = Instant::now();
                    let result = store.flush().map_err(|e| e.to_string());
                    metrics.commit(started.elapsed(), batch.len());
                    for w in batch {
                        let _ = w.send(result.clone());
                    }
                }
            })?;
        Ok(GroupSync {
            tx: Some(tx),
            thread: Some(thread),
        })
    }

    /// Returns once every write published before the call is durable.
    pub async fn sync(&self) -> Result<(), String> {
        let (tx, rx) = oneshot::channel();
        let queue = self.tx.as_ref().ok_or("the server is stopping")?;
        queue.send(tx).map_err(|_| "the sync thread has stopped")?;
        rx.await.map_err(|_| "the sync thread has stopped")?
    }

    /// Stops the thread (after the syncs already asked for).
    pub fn stop(&mut self) {
        self.tx = None;
        if let Some(t) = self.thread.take() {
            let _ = t.join();
        }
    }
}

impl Drop for GroupSync {
    fn drop(&mut self) {
        self.stop();
    }
}
