//! `hotstore._hotstore`: the embedded engine as a Python extension module (PyO3, abi3 for
//! CPython >= 3.11). The Python package `hotstore` (python/hotstore) wraps it; its documented
//! API is in python/README.md and python/hotstore/_hotstore.pyi.
//!
//! Memory rules, the point of this crate:
//!
//! * A value handed to Python without a copy ([`Value`]) holds a [`hotstore::ValueRef`]: the
//!   segment under it is not recycled and the store stays mapped (and locked) while any
//!   buffer over it lives, so Python never sees bytes change or vanish.
//! * A reservation ([`Reservation`]) exports the store's own memory writable. It may be
//!   committed while arrays over it are alive: it is committed with
//!   [`hotstore::Reservation::commit_ref`], whose pin keeps that memory valid until the last
//!   array is gone. It is never discarded while arrays over it are alive (the space would be
//!   reused by the next write): an abort then waits for the arrays to go.
//! * A reservation holds its lane's lock: a write from the thread that made it would wait for
//!   itself, so such a write is refused ([`Shared::check_no_reservation`]).
//! * The GIL is released (`Python::detach`) around every call into the engine that copies
//!   bulk data, waits for a device or waits for an event.

use hotstore::{
    Ack, ClaimToken, Durability, EventId, EventPolicy, KeyLayout, Store as Engine, TierSpec,
    ValueRef,
};
use parking_lot::{Mutex, RwLock};
use pyo3::exceptions::{PyBufferError, PyRuntimeError, PyTypeError};
use pyo3::ffi;
use pyo3::prelude::*;
use pyo3::types::{PyBytes, PyDict, PyList, PyString, PyTuple};
use std::collections::HashMap;
use std::ffi::c_int;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::Arc;
use std::thread::ThreadId;
use std::time::{Duration, Instant};

// ---------------------------------------------------------------------------------------------
// Errors
// ---------------------------------------------------------------------------------------------

/// The Python exception class (in `hotstore.errors`) for an engine error.
fn class_of(e: &hotstore::Error) -> &'static str {
    use hotstore::Error as E;
    match e {
        E::Io { .. } => "StoreIOError",
        E::ChecksumMismatch { .. } => "ChecksumMismatch",
        E::Corruption { .. } => "Corruption",
        E::MissingFiles { .. } => "MissingFiles",
        E::MissingMeta { .. } => "MissingMeta",
        E::StoreFull { .. } => "StoreFull",
        E::KeyTooLarge { .. } => "KeyTooLarge",
        E::EmptyKey => "EmptyKey",
        E::ValueTooLarge { .. } => "ValueTooLarge",
        E::LayoutMismatch { .. } => "LayoutMismatch",
        E::FormatVersion { .. } => "FormatVersion",
        E::BadMetadata { .. } => "BadMetadata",
        E::NoStore(_) => "NoStore",
        E::NoStoreDirectory(_) => "NoStoreDirectory",
        E::NotADirectory(_) => "NotADirectory",
        E::Locked(..) => "StoreLocked",
        E::InvalidOption { .. } => "InvalidOption",
        E::InvalidLayout { .. } => "InvalidLayout",
        E::Poisoned(_) => "Poisoned",
        E::LateFragment { .. } => "LateFragment",
        E::ClaimLost { .. } => "ClaimLost",
        E::NoSuchEvent(_) => "NoSuchEvent",
        E::EventAcknowledged(_) => "EventAcknowledged",
        E::NoSuchGroup(_) => "NoSuchGroup",
        E::InvalidArgument(_) => "InvalidArgument",
        _ => "HotstoreError",
    }
}

/// An instance of `hotstore.errors.<class>` with `msg`; a RuntimeError if that module is
/// missing (the extension imported outside its package).
fn py_error(class: &str, msg: String) -> PyErr {
    Python::attach(|py| {
        let made = py
            .import("hotstore.errors")
            .and_then(|m| m.getattr(class))
            .and_then(|cls| cls.call1((msg.clone(),)));
        match made {
            Ok(exc) => PyErr::from_value(exc),
            Err(_) => PyRuntimeError::new_err(format!("{class}: {msg}")),
        }
    })
}

fn err(e: hotstore::Error) -> PyErr {
    py_error(class_of(&e), e.to_string())
}

fn invalid(msg: impl Into<String>) -> PyErr {
    py_error("InvalidArgument", msg.into())
}

trait OrPy<T> {
    fn py(self) -> PyResult<T>;
}

impl<T> OrPy<T> for hotstore::Result<T> {
    fn py(self) -> PyResult<T> {
        self.map_err(err)
    }
}

// ---------------------------------------------------------------------------------------------
// Buffers from Python
// ---------------------------------------------------------------------------------------------

/// A buffer exported by a Python object (bytes, bytearray, memoryview, a C-contiguous numpy
/// array of any dtype ...), held until drop. Its bytes are read (or written) with the GIL
/// released: the export keeps the object from resizing or freeing them meanwhile.
struct PyBuf {
    view: Box<ffi::Py_buffer>,
}

// Safety: the export is released only in Drop, which PyO3 runs with the GIL attached (the
// buffer lives in a function that holds `Python`); sending it into `detach` only lends its
// pointer to the closure, which never touches Python objects.
unsafe impl Send for PyBuf {}
// Safety: as for Send; shared access only reads the pointer and length.
unsafe impl Sync for PyBuf {}

impl PyBuf {
    fn get(obj: &Bound<'_, PyAny>, writable: bool, what: &str) -> PyResult<PyBuf> {
        if obj.is_instance_of::<PyString>() {
            return Err(PyTypeError::new_err(format!(
                "{what} must be bytes-like (bytes, bytearray, memoryview, a numpy array), not str: encode it first"
            )));
        }
        // Safety: a zeroed Py_buffer is a valid "no export yet" value.
        let mut view: Box<ffi::Py_buffer> = Box::new(unsafe { std::mem::zeroed() });
        // PyBUF_FORMAT too: an exporter whose items are not plain bytes can refuse. numpy
        // exports an object-dtype array without a format (its items are PyObject pointers):
        // a put stored the pointers, and get_into wrote bytes over them (a segfault at the
        // next read of the array). Asked for a format, numpy refuses ("cannot include dtype
        // 'O' in a buffer"), as memoryview() and bytes() do.
        let mut flags = ffi::PyBUF_C_CONTIGUOUS | ffi::PyBUF_FORMAT;
        if writable {
            flags |= ffi::PyBUF_WRITABLE;
        }
        // Safety: `obj` is a live object (GIL held), `view` points to writable memory.
        let rc = unsafe { ffi::PyObject_GetBuffer(obj.as_ptr(), &mut *view, flags) };
        if rc != 0 {
            let cause = PyErr::take(obj.py());
            let kind = if writable {
                "a writable, C-contiguous buffer"
            } else {
                "a C-contiguous buffer"
            };
            let msg = format!(
                "{what} must be {kind} (bytes-like, or a contiguous numpy array), not {}{}",
                obj.get_type()
                    .name()
                    .map(|n| n.to_string())
                    .unwrap_or_else(|_| "this type".into()),
                cause.map(|c| format!(": {c}")).unwrap_or_default()
            );
            return Err(PyTypeError::new_err(msg));
        }
        let buf = PyBuf { view };
        // An exporter may still hand out object pointers with a format: 'O' anywhere in it.
        if !buf.view.format.is_null() {
            // Safety: a non-null format is a NUL-terminated string owned by the export.
            let fmt = unsafe { std::ffi::CStr::from_ptr(buf.view.format) };
            if fmt.to_bytes().contains(&b'O') {
                return Err(PyTypeError::new_err(format!(
                    "{what} must hold plain data, not Python objects (buffer format {:?}): an object array holds pointers",
                    fmt.to_string_lossy()
                )));
            }
        }
        Ok(buf)
    }

    fn len(&self) -> usize {
        self.view.len.max(0) as usize
    }

    fn as_slice(&self) -> &[u8] {
        if self.len() == 0 {
            return &[];
        }
        // Safety: the exporter guarantees `len` bytes at `buf`, contiguous (requested), valid
        // while the export is held (until drop).
        unsafe { std::slice::from_raw_parts(self.view.buf as *const u8, self.len()) }
    }

    fn as_mut_ptr(&self) -> *mut u8 {
        self.view.buf as *mut u8
    }
}

impl Drop for PyBuf {
    fn drop(&mut self) {
        // Safety: the export was made by PyObject_GetBuffer and is released once; the GIL
        // is held (see the Send note): every PyBuf lives inside a #[pymethods] call.
        Python::attach(|_| unsafe { ffi::PyBuffer_Release(&mut *self.view) });
    }
}

/// A key: bytes-like, or a str (encoded as UTF-8).
fn key_bytes(obj: &Bound<'_, PyAny>) -> PyResult<Vec<u8>> {
    if let Ok(s) = obj.cast::<PyString>() {
        return Ok(s.to_str()?.as_bytes().to_vec());
    }
    Ok(PyBuf::get(obj, false, "a key")?.as_slice().to_vec())
}

fn durability(s: Option<&str>, default: Durability) -> PyResult<Durability> {
    match s {
        None => Ok(default),
        Some("memory") => Ok(Durability::Memory),
        Some("persisted") => Ok(Durability::Persisted),
        Some(other) => Err(invalid(format!(
            "durability must be \"memory\" or \"persisted\", not {other:?}"
        ))),
    }
}

fn seconds(s: f64, what: &str) -> PyResult<Duration> {
    if !s.is_finite() || !(0.0..=1e9).contains(&s) {
        return Err(invalid(format!(
            "{what} must be a number of seconds between 0 and 1e9, not {s}"
        )));
    }
    Ok(Duration::from_secs_f64(s))
}

fn ack_kind(how: &str) -> PyResult<Ack> {
    match how {
        "remove" => Ok(Ack::Remove),
        "keep" => Ok(Ack::Keep),
        other => Err(invalid(format!(
            "an acknowledgement is hotstore.REMOVE (\"remove\") or hotstore.KEEP (\"keep\"), not {other:?}"
        ))),
    }
}

/// Parses JSON made by serde_json into Python objects with the json module. Durations are
/// seconds (floats), as everywhere in the Python API. Fix (found in review): serde writes a
/// `Duration` as `{"secs": .., "nanos": ..}`, which pending(), groups() and consumers()
/// handed out as such.
fn json_to_py<'py>(py: Python<'py>, v: &impl serde::Serialize) -> PyResult<Bound<'py, PyAny>> {
    fn seconds_for_durations(v: &mut serde_json::Value) {
        use serde_json::Value as J;
        match v {
            J::Object(m) => {
                if m.len() == 2 {
                    if let (Some(s), Some(n)) = (
                        m.get("secs").and_then(J::as_u64),
                        m.get("nanos").and_then(J::as_u64),
                    ) {
                        *v = J::from(s as f64 + n as f64 / 1e9);
                        return;
                    }
                }
                m.values_mut().for_each(seconds_for_durations);
            }
            J::Array(a) => a.iter_mut().for_each(seconds_for_durations),
            _ => {}
        }
    }
    let mut json = serde_json::to_value(v).map_err(|e| PyRuntimeError::new_err(e.to_string()))?;
    seconds_for_durations(&mut json);
    let text = json.to_string();
    py.import("json")?.call_method1("loads", (text,))
}

// ---------------------------------------------------------------------------------------------
// The store
// ---------------------------------------------------------------------------------------------

/// What a Store and everything made from it share: the engine (until closed), the threads
/// holding an open reservation, the default durability.
struct Shared {
    engine: RwLock<Option<Arc<Engine>>>,
    /// Open reservations per thread that made them: a write on that thread would wait for
    /// the lane the reservation holds, forever.
    reserving: Mutex<HashMap<ThreadId, usize>>,
    open_reservations: AtomicUsize,
    durability: Durability,
    path: String,
    /// The process that opened the store. A fork of it (multiprocessing's default start
    /// method on Linux) inherits the Store object but not the engine's threads, and shares
    /// its segment files and writer lanes with the parent: its writes would land where the
    /// parent's next writes go (acknowledged, then lost), and closing it joins threads that
    /// do not exist in it (a panic). A forked child is refused ([`Shared::forked`]).
    pid: u32,
    /// [`forks`] when it was opened: a different count means this process is a fork.
    forks: u64,
}

/// Forks this process's children have seen: incremented in the child by a `pthread_atfork`
/// handler, so that a call tells a forked child with one load (a `getpid` system call on
/// every call cost the binding's small puts).
static FORKS: std::sync::atomic::AtomicU64 = std::sync::atomic::AtomicU64::new(0);

extern "C" fn count_fork_in_child() {
    FORKS.fetch_add(1, Ordering::Relaxed);
}

/// The fork count, with the handler installed (once, at the first open).
fn forks() -> u64 {
    static HANDLER: std::sync::Once = std::sync::Once::new();
    // Safety: registers a handler that only increments an atomic (async-signal-safe).
    HANDLER.call_once(|| unsafe {
        libc::pthread_atfork(None, None, Some(count_fork_in_child));
    });
    FORKS.load(Ordering::Relaxed)
}

impl Drop for Shared {
    fn drop(&mut self) {
        // In a forked child the engine is not the child's to shut down (no maintenance thread
        // to join, the parent's files): leave it, the child's copy of its memory goes with
        // the child.
        if self.is_forked() {
            if let Some(engine) = self.engine.get_mut().take() {
                std::mem::forget(engine);
            }
        }
    }
}

impl Shared {
    /// True in a process forked from the one that opened the store.
    fn is_forked(&self) -> bool {
        FORKS.load(Ordering::Relaxed) != self.forks
    }

    /// StoreClosed for a Store used in a process forked from the one that opened it.
    fn forked(&self) -> PyErr {
        py_error(
            "StoreClosed",
            format!(
                "the store at {} was opened by process {}, and this process ({}) is a fork of \
                 it: a store is used by the process that opened it; open it in this process \
                 instead (once the parent closed it), or start workers with the \"spawn\" or \
                 \"forkserver\" method of multiprocessing",
                self.path,
                self.pid,
                std::process::id()
            ),
        )
    }

    fn engine(&self) -> PyResult<Arc<Engine>> {
        if self.is_forked() {
            return Err(self.forked());
        }
        self.engine.read().clone().ok_or_else(|| {
            py_error(
                "StoreClosed",
                format!("the store at {} is closed", self.path),
            )
        })
    }

    /// Refuses a write on a thread that holds an open reservation (it would deadlock on
    /// the reservation's lane).
    fn check_no_reservation(&self) -> PyResult<()> {
        let me = std::thread::current().id();
        if self.reserving.lock().get(&me).copied().unwrap_or(0) > 0 {
            return Err(py_error(
                "ReservationOpen",
                "this thread holds an open reservation of this store (it holds a writer lane \
                 until it is committed or aborted): commit or abort it before writing again (a \
                 `with store.reserve(...)` block that raised is discarded once the arrays over \
                 it are gone: del them)"
                    .into(),
            ));
        }
        Ok(())
    }

    /// The engine for a write: open, and no reservation open on this thread.
    fn writer(&self) -> PyResult<Arc<Engine>> {
        let e = self.engine()?;
        self.check_no_reservation()?;
        Ok(e)
    }

    /// Waits up to `timeout` for a claim, `attempt(engine, slice)` being one wait of at most
    /// `slice`: in slices of at most [`WAIT_SLICE`], without the GIL, holding the engine only
    /// for one slice at a time. Between slices it looks whether the store was closed
    /// (StoreClosed, as any call after close(); close() waits for calls holding the engine,
    /// so a wait holding it throughout kept close() waiting as long) and lets Python handle
    /// signals (Ctrl-C raises KeyboardInterrupt here). An event that becomes READY between
    /// two slices is found by the next one: each attempt looks before it waits.
    fn wait_for_claim(
        &self,
        py: Python<'_>,
        timeout: Duration,
        attempt: impl Fn(&Engine, Duration) -> hotstore::Result<Option<hotstore::Claim>> + Sync,
    ) -> PyResult<Option<hotstore::Claim>> {
        // None: beyond what Instant can hold (timeouts go up to 1e9 s): wait until told.
        let deadline = Instant::now().checked_add(timeout);
        loop {
            let engine = self.engine()?;
            let left = deadline.map_or(Duration::MAX, |d| {
                d.saturating_duration_since(Instant::now())
            });
            let slice = left.min(WAIT_SLICE);
            let got = py.detach(|| attempt(&engine, slice)).py()?;
            drop(engine);
            if got.is_some() || slice == left {
                return Ok(got);
            }
            py.check_signals()?;
        }
    }
}

/// The longest a wait for an event holds the engine without looking whether the store is
/// closing and whether Python has a signal to handle ([`Shared::wait_for_claim`]).
const WAIT_SLICE: Duration = Duration::from_millis(100);

/// An embedded hotstore store, opened in this process.
#[pyclass(frozen, module = "hotstore._hotstore")]
struct Store {
    shared: Arc<Shared>,
}

#[allow(clippy::too_many_arguments, reason = "Python keyword arguments")]
#[pymethods]
impl Store {
    #[new]
    #[pyo3(signature = (path, *, capacity=None, segment_size=None, lanes=None, layout=None,
        create=true, verify_on_read=true, preallocate=0, offload_to=None, durability="persisted"))]
    fn new(
        py: Python<'_>,
        path: std::path::PathBuf,
        capacity: Option<u64>,
        segment_size: Option<usize>,
        lanes: Option<usize>,
        layout: Option<&str>,
        create: bool,
        verify_on_read: bool,
        preallocate: u64,
        offload_to: Option<std::path::PathBuf>,
        durability: &str,
    ) -> PyResult<Self> {
        let default = self::durability(Some(durability), Durability::Persisted)?;
        let mut b = Engine::builder(&path)
            .create_if_missing(create)
            .verify_on_read(verify_on_read)
            .preallocate_bytes(preallocate);
        if let Some(s) = segment_size {
            b = b.segment_size_bytes(s);
        }
        if let Some(l) = lanes {
            b = b.lanes(l);
        }
        if let Some(l) = layout {
            b = b.layout(KeyLayout::parse(l).py()?);
        }
        if capacity.is_some() || offload_to.is_some() {
            let mut first = TierSpec::new(&path);
            if let Some(c) = capacity {
                first = first.capacity_bytes(c);
            }
            b = b.tier(first);
            if let Some(o) = offload_to {
                b = b.tier(TierSpec::new(o));
            }
        }
        let engine = py.detach(move || b.open()).py()?;
        Ok(Store {
            shared: Arc::new(Shared {
                engine: RwLock::new(Some(Arc::new(engine))),
                reserving: Mutex::new(HashMap::new()),
                open_reservations: AtomicUsize::new(0),
                durability: default,
                path: path.display().to_string(),
                pid: std::process::id(),
                forks: forks(),
            }),
        })
    }

    /// The store directory.
    #[getter]
    fn path(&self) -> String {
        self.shared.path.clone()
    }

    /// True once close() was called.
    #[getter]
    fn closed(&self) -> bool {
        self.shared.engine.read().is_none()
    }

    fn __repr__(&self) -> String {
        format!(
            "<hotstore.Store {:?}{}>",
            self.shared.path,
            if self.closed() { " closed" } else { "" }
        )
    }

    fn __enter__(slf: Py<Self>) -> Py<Self> {
        slf
    }

    #[pyo3(signature = (*_exc))]
    fn __exit__(&self, py: Python<'_>, _exc: &Bound<'_, PyTuple>) -> PyResult<bool> {
        self.close(py)?;
        Ok(false)
    }

    /// Closes the store: seals, persists and releases it. Values returned by get() stay
    /// valid; the directory stays locked until the last of them is released.
    fn close(&self, py: Python<'_>) -> PyResult<()> {
        if self.shared.is_forked() {
            // A forked child: the store is the parent's. Forget the child's copy of it (see
            // `Shared::pid`); the parent's store stays open.
            if let Some(engine) = self.shared.engine.write().take() {
                std::mem::forget(engine);
            }
            return Ok(());
        }
        if self.shared.open_reservations.load(Ordering::SeqCst) > 0 {
            return Err(py_error(
                "ReservationOpen",
                format!(
                    "cannot close the store at {}: {} reservation(s) are open; commit or abort them first",
                    self.shared.path,
                    self.shared.open_reservations.load(Ordering::SeqCst)
                ),
            ));
        }
        let Some(mut engine) = self.shared.engine.write().take() else {
            return Ok(()); // closed already
        };
        // Calls in flight on other threads hold the engine for a moment: wait for them.
        py.detach(move || loop {
            match Arc::try_unwrap(engine) {
                Ok(e) => return e.close(),
                Err(back) => {
                    engine = back;
                    std::thread::sleep(Duration::from_millis(1));
                }
            }
        })
        .py()
    }

    /// Stores `value` (any C-contiguous buffer: bytes, bytearray, memoryview, numpy array)
    /// under `key`, replacing any earlier value.
    #[pyo3(signature = (key, value, durability=None))]
    fn put(
        &self,
        py: Python<'_>,
        key: &Bound<'_, PyAny>,
        value: &Bound<'_, PyAny>,
        durability: Option<&str>,
    ) -> PyResult<()> {
        let d = self::durability(durability, self.shared.durability)?;
        let key = key_bytes(key)?;
        let value = PyBuf::get(value, false, "a value")?;
        let engine = self.shared.writer()?;
        let v = &value;
        py.detach(|| engine.put(&key, v.as_slice(), d)).py()
    }

    /// The value of `key` in place (no copy), or None.
    fn get(&self, py: Python<'_>, key: &Bound<'_, PyAny>) -> PyResult<Option<Value>> {
        let key = key_bytes(key)?;
        let engine = self.shared.engine()?;
        let r = py.detach(|| engine.get_ref(&key)).py()?;
        Ok(r.map(|r| Value {
            r,
            exports: AtomicUsize::new(0),
        }))
    }

    /// The value of `key` copied into a new bytes object, or None.
    fn get_bytes<'py>(
        &self,
        py: Python<'py>,
        key: &Bound<'_, PyAny>,
    ) -> PyResult<Option<Bound<'py, PyBytes>>> {
        let key = key_bytes(key)?;
        let engine = self.shared.engine()?;
        let r = py.detach(|| engine.get_ref(&key)).py()?;
        r.map(|r| bytes_without_gil(py, &r)).transpose()
    }

    /// The values of `keys` (an iterable of keys) copied into new bytes objects, in order,
    /// None where a key is absent. Looked up together, so the memory misses of many small
    /// values overlap: faster than a `get_bytes` per key.
    fn get_many<'py>(
        &self,
        py: Python<'py>,
        keys: &Bound<'_, PyAny>,
    ) -> PyResult<Vec<Option<Bound<'py, PyBytes>>>> {
        // A str is an iterable of one-character keys, never what was meant (review).
        if keys.is_instance_of::<PyString>() {
            return Err(PyTypeError::new_err(
                "get_many takes an iterable of keys, not one str key",
            ));
        }
        let keys = keys
            .try_iter()?
            .map(|k| key_bytes(&k?))
            .collect::<PyResult<Vec<_>>>()?;
        let engine = self.shared.engine()?;
        // Both copies (out of the store, into the bytes objects) without the GIL.
        let values = py.detach(|| engine.get_many(&keys)).py()?;
        values
            .into_iter()
            .map(|v| v.map(|v| bytes_without_gil(py, &v)).transpose())
            .collect()
    }

    /// Copies the value of `key` into `out` (a writable buffer of exactly the value's
    /// length); returns the bytes copied, or None if the key is absent.
    fn get_into(
        &self,
        py: Python<'_>,
        key: &Bound<'_, PyAny>,
        out: &Bound<'_, PyAny>,
    ) -> PyResult<Option<usize>> {
        let key = key_bytes(key)?;
        let out = PyBuf::get(out, true, "out")?;
        let engine = self.shared.engine()?;
        let Some(r) = py.detach(|| engine.get_ref(&key)).py()? else {
            return Ok(None);
        };
        if r.len() != out.len() {
            return Err(invalid(format!(
                "out has {} bytes, the value {} bytes: they must be the same size",
                out.len(),
                r.len()
            )));
        }
        let dst = SendPtr(out.as_mut_ptr());
        let n = r.len();
        py.detach(move || {
            let dst = dst;
            // Safety: `out` exports `n` writable contiguous bytes (checked above) for the whole
            // call; the source is a pinned store value that cannot overlap a Python buffer
            // export other than a read-only Value.
            unsafe { std::ptr::copy_nonoverlapping(r.as_ptr(), dst.0, n) };
        });
        Ok(Some(n))
    }

    /// Removes `key`; True if it was present.
    #[pyo3(signature = (key, durability=None))]
    fn remove(
        &self,
        py: Python<'_>,
        key: &Bound<'_, PyAny>,
        durability: Option<&str>,
    ) -> PyResult<bool> {
        let d = self::durability(durability, self.shared.durability)?;
        let key = key_bytes(key)?;
        let engine = self.shared.writer()?;
        py.detach(|| engine.remove(&key, d)).py()
    }

    /// True if `key` is stored.
    fn contains(&self, key: &Bound<'_, PyAny>) -> PyResult<bool> {
        let key = key_bytes(key)?;
        Ok(self.shared.engine()?.contains(&key))
    }

    fn __contains__(&self, key: &Bound<'_, PyAny>) -> PyResult<bool> {
        self.contains(key)
    }

    /// Length of the value of `key`, or None.
    fn value_len(&self, key: &Bound<'_, PyAny>) -> PyResult<Option<usize>> {
        let key = key_bytes(key)?;
        Ok(self.shared.engine()?.value_len(&key))
    }

    /// Up to `limit` (key, value) pairs with start <= key < end (end None: to the end), in
    /// key order; values in place (no copy). Keys removed while the range is read are left out.
    #[pyo3(signature = (start=None, end=None, limit=1000))]
    fn range(
        &self,
        py: Python<'_>,
        start: Option<&Bound<'_, PyAny>>,
        end: Option<&Bound<'_, PyAny>>,
        limit: usize,
    ) -> PyResult<Vec<(Py<PyBytes>, Value)>> {
        let start = start.map(key_bytes).transpose()?.unwrap_or_default();
        let end = end.map(key_bytes).transpose()?;
        let engine = self.shared.engine()?;
        values_in_range(py, &engine, &start, end.as_deref(), limit, None)
    }

    /// Up to `limit` (key, value length) pairs with start <= key < end, in key order.
    #[pyo3(signature = (start=None, end=None, limit=1000))]
    fn keys(
        &self,
        py: Python<'_>,
        start: Option<&Bound<'_, PyAny>>,
        end: Option<&Bound<'_, PyAny>>,
        limit: usize,
    ) -> PyResult<Vec<(Py<PyBytes>, usize)>> {
        let start = start.map(key_bytes).transpose()?.unwrap_or_default();
        let end = end.map(key_bytes).transpose()?;
        let engine = self.shared.engine()?;
        let got = py.detach(|| engine.range_keys(&start, end.as_deref(), limit));
        Ok(got
            .into_iter()
            .map(|(k, n)| (PyBytes::new(py, &k).unbind(), n))
            .collect())
    }

    /// Reserves `nbytes` under `key` in the store's memory: fill the returned Reservation
    /// (a writable buffer; .array() gives a numpy array over it), then commit() it.
    fn reserve(
        &self,
        py: Python<'_>,
        key: &Bound<'_, PyAny>,
        nbytes: usize,
    ) -> PyResult<Reservation> {
        let key = key_bytes(key)?;
        let engine = self.shared.writer()?;
        let e2 = engine.clone();
        let res =
            py.detach(
                move || -> hotstore::Result<hotstore::Reservation<'static>> {
                    let r = e2.reserve(&key, nbytes)?;
                    // Safety: the reservation borrows the engine inside the Arc's allocation (stable
                    // address), which the Reservation object keeps alive beside it (`ResState::Open`
                    // holds a clone of the Arc, dropped after the reservation); the engine is never
                    // closed while a reservation is open (close() refuses), so the borrow stays
                    // valid for the reservation's whole life.
                    Ok(unsafe {
                        std::mem::transmute::<
                            hotstore::Reservation<'_>,
                            hotstore::Reservation<'static>,
                        >(r)
                    })
                },
            );
        let mut res = res.py()?;
        let value = res.value_mut();
        let (ptr, len) = (value.as_mut_ptr(), value.len());
        let me = std::thread::current().id();
        *self.shared.reserving.lock().entry(me).or_insert(0) += 1;
        self.shared.open_reservations.fetch_add(1, Ordering::SeqCst);
        Ok(Reservation {
            state: Mutex::new(ResState::Open(res, engine)),
            ptr: SendPtr(ptr),
            len,
            exports: AtomicUsize::new(0),
            abort_on_release: std::sync::atomic::AtomicBool::new(false),
            thread: me,
            shared: self.shared.clone(),
        })
    }

    /// Makes every write so far durable (as "persisted" would have).
    fn flush(&self, py: Python<'_>) -> PyResult<()> {
        let engine = self.shared.writer()?;
        py.detach(|| engine.flush()).py()
    }

    /// Moves the live records out of segments with dead space so their files are freed;
    /// returns the bytes moved.
    fn compact(&self, py: Python<'_>) -> PyResult<u64> {
        let engine = self.shared.writer()?;
        py.detach(|| engine.compact(|_, _| {})).py()
    }

    /// Counts, sizes, tiers and event counts, as a dict (the engine's Stats).
    fn stats<'py>(&self, py: Python<'py>) -> PyResult<Bound<'py, PyAny>> {
        let engine = self.shared.engine()?;
        let s = py.detach(|| engine.stats());
        json_to_py(py, &s)
    }

    // --- events -------------------------------------------------------------------------

    /// Sets the event policy (store-wide, or for one run), durably: an event is READY once
    /// `expected_fragments` fragments arrived (0: only seal or the timeout), or `timeout`
    /// seconds after its first fragment (flagged incomplete; None: never).
    #[pyo3(signature = (expected_fragments=1, timeout=None, run=None))]
    fn set_event_policy(
        &self,
        py: Python<'_>,
        expected_fragments: u32,
        timeout: Option<f64>,
        run: Option<u64>,
    ) -> PyResult<()> {
        let mut p = EventPolicy::expecting(expected_fragments);
        if let Some(t) = timeout {
            p = p.with_timeout(seconds(t, "timeout")?);
        }
        let engine = self.shared.writer()?;
        py.detach(|| match run {
            Some(r) => engine.set_run_policy(r, Some(p)),
            None => engine.set_event_policy(p),
        })
        .py()
    }

    /// The policy applying to events of `run` (or the store-wide one), as a dict.
    #[pyo3(signature = (run=None))]
    fn event_policy<'py>(&self, py: Python<'py>, run: Option<u64>) -> PyResult<Bound<'py, PyAny>> {
        let p = self.shared.engine()?.event_policy(run);
        json_to_py(py, &p)
    }

    /// Seals an event: no more fragments will come, so it is READY now.
    #[pyo3(signature = (event, durability=None))]
    fn seal(
        &self,
        py: Python<'_>,
        event: &Bound<'_, PyAny>,
        durability: Option<&str>,
    ) -> PyResult<()> {
        let d = self::durability(durability, self.shared.durability)?;
        let id = event_id_of(event)?;
        let engine = self.shared.writer()?;
        py.detach(|| engine.seal(&id, d)).py()
    }

    /// Claims the oldest READY event for `consumer` for `lease` seconds; waits up to
    /// `timeout` seconds for one (None: do not wait). Returns a Claim or None.
    #[pyo3(signature = (consumer, lease=30.0, timeout=None))]
    fn next_event(
        &self,
        py: Python<'_>,
        consumer: &str,
        lease: f64,
        timeout: Option<f64>,
    ) -> PyResult<Option<Claim>> {
        let lease = seconds(lease, "lease")?;
        let timeout = timeout.map(|t| seconds(t, "timeout")).transpose()?;
        let c = match timeout {
            Some(t) => self.shared.wait_for_claim(py, t, |engine, slice| {
                engine.next_event_wait(consumer, lease, slice)
            })?,
            None => {
                let engine = self.shared.engine()?;
                py.detach(|| engine.next_event(consumer, lease)).py()?
            }
        };
        Ok(c.map(|c| Claim::new(c, self.shared.clone())))
    }

    /// next_event() in consumer group `group`.
    #[pyo3(signature = (group, consumer, lease=30.0, timeout=None))]
    fn next_event_in(
        &self,
        py: Python<'_>,
        group: &str,
        consumer: &str,
        lease: f64,
        timeout: Option<f64>,
    ) -> PyResult<Option<Claim>> {
        let lease = seconds(lease, "lease")?;
        let timeout = timeout.map(|t| seconds(t, "timeout")).transpose()?;
        let c = match timeout {
            Some(t) => self.shared.wait_for_claim(py, t, |engine, slice| {
                engine.next_event_in_wait(group, consumer, lease, slice)
            })?,
            None => {
                let engine = self.shared.engine()?;
                py.detach(|| engine.next_event_in(group, consumer, lease))
                    .py()?
            }
        };
        Ok(c.map(|c| Claim::new(c, self.shared.clone())))
    }

    /// Acknowledges a claim by its token (Claim.token): "remove" deletes the event's
    /// fragments atomically, "keep" keeps them and never offers the event again.
    #[pyo3(signature = (token, how="remove", durability=None))]
    fn ack(
        &self,
        py: Python<'_>,
        token: &str,
        how: &str,
        durability: Option<&str>,
    ) -> PyResult<()> {
        let d = self::durability(durability, self.shared.durability)?;
        let how = ack_kind(how)?;
        let token: ClaimToken = token.parse().py()?;
        let engine = self.shared.writer()?;
        py.detach(|| engine.ack(&token, how, d)).py()
    }

    /// Gives a claimed event back (READY again) by its token.
    fn release(&self, py: Python<'_>, token: &str) -> PyResult<()> {
        let token: ClaimToken = token.parse().py()?;
        let engine = self.shared.writer()?;
        py.detach(|| engine.release(&token)).py()
    }

    /// Creates consumer group `name`, durably (`required`: removal waits for its ack).
    #[pyo3(signature = (name, required=true))]
    fn create_group(&self, py: Python<'_>, name: &str, required: bool) -> PyResult<()> {
        let engine = self.shared.writer()?;
        py.detach(|| engine.create_group(name, required)).py()
    }

    /// Destroys consumer group `name`, durably.
    fn destroy_group(&self, py: Python<'_>, name: &str) -> PyResult<()> {
        let engine = self.shared.writer()?;
        py.detach(|| engine.destroy_group(name)).py()
    }

    /// Every consumer group, as dicts with the fields of the server's EVENT.GROUPS (as the
    /// network client gives them; docs/protocol.md). Fix (found in review): the binding
    /// used the engine's field names (`delivered_total`, `oldest_waiting` in seconds, ...),
    /// the client the protocol's: code moved from one to the other broke. The old names are
    /// still readable (`g["delivered_total"]`, `g.get(...)`), not listed among the keys.
    fn groups<'py>(&self, py: Python<'py>) -> PyResult<Bound<'py, PyList>> {
        let groups = self.shared.engine()?.groups();
        let make = py.import("hotstore._groups")?.getattr("GroupInfo")?;
        let ms = |d: Option<std::time::Duration>| d.map_or(-1, |d| d.as_millis() as i64);
        let out = PyList::empty(py);
        for g in &groups {
            let d = PyDict::new(py);
            d.set_item("name", &g.name)?;
            d.set_item("required", g.required)?;
            d.set_item("consumers", g.consumers)?;
            d.set_item("pending", g.pending)?;
            d.set_item("lag", g.lag)?;
            d.set_item("poisoned", g.poisoned)?;
            d.set_item("delivered", g.delivered_total)?;
            d.set_item("acked", g.acked_total)?;
            d.set_item("oldest-waiting-ms", ms(g.oldest_waiting))?;
            d.set_item("oldest-pending-ms", ms(g.oldest_pending))?;
            out.append(make.call1((d, json_to_py(py, g)?))?)?;
        }
        Ok(out)
    }

    /// The consumers group `group` remembers, as dicts.
    fn consumers<'py>(&self, py: Python<'py>, group: &str) -> PyResult<Bound<'py, PyAny>> {
        let c = self.shared.engine()?.consumers(group).py()?;
        json_to_py(py, &c)
    }

    /// Claims held now (of the default queue, or of `group`), oldest first, as dicts.
    #[pyo3(signature = (limit=100, group=None))]
    fn pending<'py>(
        &self,
        py: Python<'py>,
        limit: usize,
        group: Option<&str>,
    ) -> PyResult<Bound<'py, PyAny>> {
        let engine = self.shared.engine()?;
        let p = match group {
            Some(g) => engine.pending_in(g, limit).py()?,
            None => engine.pending(limit),
        };
        json_to_py(py, &p)
    }

    /// Parks events delivered `max` times without an ack as POISONED (0: never).
    fn set_max_deliveries(&self, max: u32) -> PyResult<()> {
        self.shared.engine()?.set_max_deliveries(max).py()
    }

    /// One event's state, fragments and bytes as a dict, or None.
    fn event_info<'py>(
        &self,
        py: Python<'py>,
        event: &Bound<'_, PyAny>,
    ) -> PyResult<Option<Bound<'py, PyAny>>> {
        let id = event_id_of(event)?;
        let engine = self.shared.engine()?;
        // The first event call of a store starts tracking events: a pass over every key.
        py.detach(|| engine.event_info(&id))
            .map(|i| json_to_py(py, &i))
            .transpose()
    }

    /// Events of run `run` with start <= event < end, in order, as dicts.
    #[pyo3(signature = (run, start=0, end=None, limit=100))]
    fn events<'py>(
        &self,
        py: Python<'py>,
        run: u32,
        start: u64,
        end: Option<u64>,
        limit: usize,
    ) -> PyResult<Bound<'py, PyAny>> {
        let engine = self.shared.engine()?;
        let v = py.detach(|| engine.events_in_run(run, start, end, limit));
        json_to_py(py, &v)
    }

    /// All fragments (key, value) of an event, in key order, values in place.
    fn event<'py>(
        &self,
        py: Python<'py>,
        event: &Bound<'_, PyAny>,
    ) -> PyResult<Vec<(Py<PyBytes>, Value)>> {
        let id = event_id_of(event)?;
        let engine = self.shared.engine()?;
        let id = check_event_len(&engine, id)?;
        fragments_of(py, &engine, &id)
    }

    /// Starts keeping event state now (see Store::track_events in the engine).
    fn track_events(&self, py: Python<'_>) -> PyResult<()> {
        let engine = self.shared.engine()?;
        // One pass over every key the first time (0.5 s for a million): without the GIL.
        py.detach(|| engine.track_events());
        Ok(())
    }
}

/// A copy of `v` as a new bytes object, copied with the GIL released (the README promises it
/// for every call that copies a value: a 200 MiB get_bytes held it for 170 ms).
/// Not `PyBytes::new_with`: it zero-fills the new object first, with the GIL, and that first
/// touch of fresh pages is most of a large copy's time.
fn bytes_without_gil<'py>(py: Python<'py>, v: &[u8]) -> PyResult<Bound<'py, PyBytes>> {
    let n = v.len() as ffi::Py_ssize_t;
    // Safety: a NULL source asks CPython for an uninitialised bytes object of `n` bytes, which
    // we own (nobody else has a reference) and fill completely below before returning it.
    unsafe {
        let obj = ffi::PyBytes_FromStringAndSize(std::ptr::null(), n);
        let obj = Bound::from_owned_ptr_or_err(py, obj)?;
        let dst = SendPtr(ffi::PyBytes_AsString(obj.as_ptr()) as *mut u8);
        py.detach(move || {
            let dst = dst;
            std::ptr::copy_nonoverlapping(v.as_ptr(), dst.0, v.len());
        });
        Ok(obj.cast_into_unchecked())
    }
}

/// An event id: bytes (the event prefix of its fragment keys) or a (run, event) tuple.
fn event_id_of(obj: &Bound<'_, PyAny>) -> PyResult<EventId> {
    if let Ok((run, event)) = obj.extract::<(u32, u64)>() {
        return Ok(EventId::new(run, event));
    }
    if obj.is_instance_of::<PyString>() {
        return Err(PyTypeError::new_err(
            "an event is a (run, event) tuple or its id bytes (hotstore.event_id(run, event)), not str",
        ));
    }
    let b = PyBuf::get(obj, false, "an event").map_err(|_| {
        PyTypeError::new_err(
            "an event is a (run, event) tuple or its id bytes (hotstore.event_id(run, event))",
        )
    })?;
    // Fix (found in review): the empty id is the prefix of every key, so event(b"") handed
    // out every fragment of the store as one event.
    if b.as_slice().is_empty() {
        return Err(invalid(
            "an event id must not be empty: give a (run, event) tuple or the event's id bytes \
             (hotstore.event_id(run, event))",
        ));
    }
    Ok(EventId::from_prefix(b.as_slice()))
}

/// `id` if it names an event of this store: its length is the key layout's event prefix
/// (a shorter one is the prefix of many events' keys).
fn check_event_len(engine: &Engine, id: EventId) -> PyResult<EventId> {
    let layout = engine.layout();
    let want = layout.event_prefix_len();
    if id.as_bytes().len() != want {
        return Err(invalid(format!(
            "an event id of this store is {want} bytes (key layout `{layout}`), not {}: give \
             a (run, event) tuple or hotstore.event_id(run, event)",
            id.as_bytes().len()
        )));
    }
    Ok(id)
}

/// The first key after every key starting with `prefix` (None: there is none).
fn successor(prefix: &[u8]) -> Option<Vec<u8>> {
    let mut s = prefix.to_vec();
    while let Some(last) = s.pop() {
        if last < 0xff {
            s.push(last + 1);
            return Some(s);
        }
    }
    None
}

/// The fragments of event `id`, values in place.
fn fragments_of(
    py: Python<'_>,
    engine: &Engine,
    id: &EventId,
) -> PyResult<Vec<(Py<PyBytes>, Value)>> {
    let prefix = id.as_bytes();
    let end = successor(prefix);
    let key_len = engine.layout().key_len();
    values_in_range(
        py,
        engine,
        prefix,
        end.as_deref(),
        usize::MAX,
        Some(key_len),
    )
}

/// Up to `limit` (key, value in place) pairs with start <= key < end (only keys of
/// `key_len` bytes if given: an event's fragments), read without the GIL.
fn values_in_range(
    py: Python<'_>,
    engine: &Engine,
    start: &[u8],
    end: Option<&[u8]>,
    limit: usize,
    key_len: Option<usize>,
) -> PyResult<Vec<(Py<PyBytes>, Value)>> {
    let got = py.detach(|| -> hotstore::Result<Vec<(Vec<u8>, ValueRef)>> {
        let mut out = Vec::new();
        for (k, _) in engine.range_keys(start, end, limit) {
            if key_len.is_some_and(|n| k.len() != n) {
                continue;
            }
            if let Some(r) = engine.get_ref(&k)? {
                out.push((k, r));
            }
        }
        Ok(out)
    });
    Ok(got
        .py()?
        .into_iter()
        .map(|(k, r)| {
            (
                PyBytes::new(py, &k).unbind(),
                Value {
                    r,
                    exports: AtomicUsize::new(0),
                },
            )
        })
        .collect())
}

// ---------------------------------------------------------------------------------------------
// Values (read-only, in place)
// ---------------------------------------------------------------------------------------------

/// A stored value in place: a read-only buffer over the store's memory (numpy.frombuffer
/// and memoryview wrap it without a copy). The bytes stay valid and unchanged while this
/// object or any buffer over it lives, even after the key is overwritten or removed.
#[pyclass(frozen, module = "hotstore._hotstore")]
struct Value {
    r: ValueRef,
    exports: AtomicUsize,
}

#[pymethods]
impl Value {
    fn __len__(&self) -> usize {
        self.r.len()
    }

    fn __bytes__<'py>(&self, py: Python<'py>) -> PyResult<Bound<'py, PyBytes>> {
        bytes_without_gil(py, &self.r)
    }

    /// A copy of the value as bytes.
    fn tobytes<'py>(&self, py: Python<'py>) -> PyResult<Bound<'py, PyBytes>> {
        bytes_without_gil(py, &self.r)
    }

    fn __eq__(&self, other: &Bound<'_, PyAny>) -> bool {
        if let Ok(o) = other.cast::<Value>() {
            return *self.r == *o.get().r;
        }
        match PyBuf::get(other, false, "other") {
            Ok(b) => b.as_slice() == &*self.r,
            Err(_) => false,
        }
    }

    fn __repr__(&self) -> String {
        format!("<hotstore.Value {} bytes>", self.r.len())
    }

    /// A numpy array over the value (no copy, read-only), of `dtype` and `shape`.
    #[pyo3(signature = (dtype=None, shape=None))]
    fn array<'py>(
        slf: &Bound<'py, Self>,
        dtype: Option<&Bound<'py, PyAny>>,
        shape: Option<&Bound<'py, PyAny>>,
    ) -> PyResult<Bound<'py, PyAny>> {
        as_array(slf.as_any(), slf.get().r.len(), dtype, shape)
    }

    /// Buffers currently exported over this value.
    #[getter]
    fn exports(&self) -> usize {
        self.exports.load(Ordering::SeqCst)
    }

    unsafe fn __getbuffer__(
        slf: Bound<'_, Self>,
        view: *mut ffi::Py_buffer,
        flags: c_int,
    ) -> PyResult<()> {
        if flags & ffi::PyBUF_WRITABLE != 0 {
            return Err(PyBufferError::new_err(
                "a hotstore.Value is read-only (stored values never change): copy it (bytearray(v), np.array(v)) to modify it",
            ));
        }
        let this = slf.get();
        let len = this.r.len() as ffi::Py_ssize_t;
        // Safety: `view` comes from the interpreter; the pointer stays valid while the
        // export holds a reference to `slf` (FillInfo takes one), which holds the ValueRef.
        let rc = unsafe {
            ffi::PyBuffer_FillInfo(
                view,
                slf.as_ptr(),
                this.r.as_ptr() as *mut std::ffi::c_void,
                len,
                1,
                flags,
            )
        };
        if rc != 0 {
            return Err(PyErr::fetch(slf.py()));
        }
        this.exports.fetch_add(1, Ordering::SeqCst);
        Ok(())
    }

    unsafe fn __releasebuffer__(&self, _view: *mut ffi::Py_buffer) {
        self.exports.fetch_sub(1, Ordering::SeqCst);
    }
}

/// numpy.frombuffer(obj, dtype) reshaped to `shape`, checking sizes first with clear errors.
fn as_array<'py>(
    obj: &Bound<'py, PyAny>,
    nbytes: usize,
    dtype: Option<&Bound<'py, PyAny>>,
    shape: Option<&Bound<'py, PyAny>>,
) -> PyResult<Bound<'py, PyAny>> {
    let py = obj.py();
    let dtype = match dtype {
        Some(d) => d.clone(),
        None => PyString::new(py, "uint8").into_any(),
    };
    let np = py.import("numpy").map_err(|e| {
        PyErr::new::<pyo3::exceptions::PyImportError, _>(format!(
            "array() needs numpy (pip install numpy): {e}"
        ))
    })?;
    let dt = np.call_method1("dtype", (&dtype,))?;
    let itemsize: usize = dt.getattr("itemsize")?.extract()?;
    if itemsize == 0 || !nbytes.is_multiple_of(itemsize) {
        return Err(invalid(format!(
            "{nbytes} bytes are not a whole number of {} items ({itemsize} bytes each)",
            dt.str()?
        )));
    }
    let count = nbytes / itemsize;
    let arr = np.call_method1("frombuffer", (obj, &dt))?;
    let Some(shape) = shape else {
        return Ok(arr);
    };
    let dims: Vec<usize> = if let Ok(n) = shape.extract::<usize>() {
        vec![n]
    } else {
        shape
            .extract()
            .map_err(|_| PyTypeError::new_err("shape must be an int or a tuple of ints >= 0"))?
    };
    let product = dims.iter().try_fold(1usize, |a, d| a.checked_mul(*d));
    if product != Some(count) {
        return Err(invalid(format!(
            "shape {dims:?} holds {} items of {}, the buffer {count} ({nbytes} bytes)",
            product.map_or("too many".to_string(), |p| p.to_string()),
            dt.str()?
        )));
    }
    arr.call_method1("reshape", (PyTuple::new(py, dims)?,))
}

// ---------------------------------------------------------------------------------------------
// Reservations (writable, in place)
// ---------------------------------------------------------------------------------------------

#[derive(Clone, Copy)]
struct SendPtr(*mut u8);
// Safety: a plain address into memory whose validity the owner of the SendPtr guarantees
// (a reservation's reserved range; an exported Python buffer); moving it between threads
// moves no ownership.
unsafe impl Send for SendPtr {}
// Safety: as for Send.
unsafe impl Sync for SendPtr {}

enum ResState {
    /// The reservation, and the engine it borrows (a tuple drops in order: the reservation
    /// first). Only an open reservation holds the engine: close() waits for no other.
    Open(hotstore::Reservation<'static>, Arc<Engine>),
    /// Committed: the pin keeps the memory valid for arrays still over it.
    Committed(#[allow(dead_code, reason = "held for its Drop")] ValueRef),
    /// Being committed (by a thread that released the GIL).
    Committing,
    /// Aborted, or its commit failed: nothing to hold.
    Done,
}

/// Space reserved in the store's memory for one value: a writable buffer (numpy wraps it
/// without a copy); commit() publishes it, abort() discards it.
#[pyclass(frozen, module = "hotstore._hotstore")]
struct Reservation {
    // Declared before `engine`: dropped first, while the engine it borrows lives.
    state: Mutex<ResState>,
    ptr: SendPtr,
    len: usize,
    exports: AtomicUsize,
    /// Set by `__exit__` on an exception while buffers over the reservation were alive: it
    /// is discarded when the last of them is released (the reservation object itself may
    /// live on, as the `with` block's variable, for as long as the function runs).
    abort_on_release: std::sync::atomic::AtomicBool,
    thread: ThreadId,
    shared: Arc<Shared>,
}

impl Reservation {
    /// One buffer over the reservation is gone: discards it if an aborted `with` block asked
    /// for that and it was the last.
    fn export_released(&self) {
        if self.exports.fetch_sub(1, Ordering::SeqCst) == 1
            && self.abort_on_release.load(Ordering::SeqCst)
        {
            let mut state = self.state.lock();
            if matches!(*state, ResState::Open(..)) && self.exports.load(Ordering::SeqCst) == 0 {
                *state = ResState::Done;
                drop(state);
                self.settle();
            }
        }
    }

    /// Forgets an open reservation in the store's bookkeeping (it was committed or dropped).
    fn settle(&self) {
        let mut r = self.shared.reserving.lock();
        if let Some(n) = r.get_mut(&self.thread) {
            *n -= 1;
            if *n == 0 {
                r.remove(&self.thread);
            }
        }
        self.shared.open_reservations.fetch_sub(1, Ordering::SeqCst);
    }

    fn is_open(&self) -> bool {
        matches!(*self.state.lock(), ResState::Open(..))
    }
}

impl Drop for Reservation {
    fn drop(&mut self) {
        // No buffer is exported (each holds a reference to us), so discarding is safe.
        if matches!(*self.state.get_mut(), ResState::Open(..)) {
            *self.state.get_mut() = ResState::Done;
            self.settle();
        }
    }
}

#[pymethods]
impl Reservation {
    fn __len__(&self) -> usize {
        self.len
    }

    /// Bytes reserved.
    #[getter]
    fn nbytes(&self) -> usize {
        self.len
    }

    /// "open", "committed" or "aborted".
    #[getter]
    fn state(&self) -> &'static str {
        match *self.state.lock() {
            ResState::Open(..) => "open",
            ResState::Committed(_) => "committed",
            ResState::Committing => "committing",
            ResState::Done => "aborted",
        }
    }

    /// Buffers currently exported over the reserved memory.
    #[getter]
    fn exports(&self) -> usize {
        self.exports.load(Ordering::SeqCst)
    }

    fn __repr__(&self) -> String {
        format!("<hotstore.Reservation {} bytes {}>", self.len, self.state())
    }

    /// A writable numpy array over the reserved memory (no copy), of `dtype` and `shape`
    /// (their size must be exactly the reserved size).
    #[pyo3(signature = (dtype=None, shape=None))]
    fn array<'py>(
        slf: &Bound<'py, Self>,
        dtype: Option<&Bound<'py, PyAny>>,
        shape: Option<&Bound<'py, PyAny>>,
    ) -> PyResult<Bound<'py, PyAny>> {
        as_array(slf.as_any(), slf.get().len, dtype, shape)
    }

    /// Copies `data` (a buffer of exactly the reserved size) into the reservation.
    fn fill(&self, py: Python<'_>, data: &Bound<'_, PyAny>) -> PyResult<()> {
        let data = PyBuf::get(data, false, "data")?;
        if data.len() != self.len {
            return Err(invalid(format!(
                "data has {} bytes, the reservation {}: they must be the same size",
                data.len(),
                self.len
            )));
        }
        {
            // Not held across the copy (another thread taking it with the GIL would wait for
            // us while we wait for the GIL): the copy counts as an export instead, so the
            // reservation cannot be aborted, and its space reused, under it.
            let state = self.state.lock();
            if !matches!(*state, ResState::Open(..)) {
                return Err(invalid("the reservation is no longer open".to_string()));
            }
            self.exports.fetch_add(1, Ordering::SeqCst);
        }
        let dst = self.ptr;
        let src = &data;
        let n = self.len;
        py.detach(move || {
            let dst = dst;
            // Safety: the reservation was open and cannot be discarded while this copy counts
            // as an export (a commit meanwhile keeps the memory pinned); `n` bytes long; the
            // source is a different (Python) buffer of `n` bytes.
            unsafe { std::ptr::copy(src.as_slice().as_ptr(), dst.0, n) };
        });
        self.export_released();
        Ok(())
    }

    /// Publishes the value; returns once `durability` holds. Arrays over the reservation
    /// stay valid (the memory is kept), but must not be written any more: the record's
    /// checksum is taken now, and a later change makes reading it fail.
    #[pyo3(signature = (durability=None))]
    fn commit(&self, py: Python<'_>, durability: Option<&str>) -> PyResult<()> {
        let d = self::durability(durability, self.shared.durability)?;
        let (res, engine) = {
            let mut state = self.state.lock();
            match std::mem::replace(&mut *state, ResState::Committing) {
                ResState::Open(res, engine) => (res, engine),
                other => {
                    *state = other;
                    return Err(invalid(
                        "the reservation was already committed or aborted".to_string(),
                    ));
                }
            }
        };
        // The state lock is not held across the commit (see `fill`). A failed commit keeps
        // the memory valid (found in review: after a refused commit, a numpy array over the
        // reservation wrote into the lane's next record, whichever key that was).
        let done = py.detach(move || match res.commit_kept(d) {
            Ok(pin) => Ok(pin),
            Err(hotstore::CommitFailed::Published(e, pin)) => {
                Err(Box::new((e, ResState::Committed(pin))))
            }
            Err(hotstore::CommitFailed::Unpublished(e, res)) => {
                Err(Box::new((e, ResState::Open(*res, engine))))
            }
        });
        match done.map_err(|b| *b) {
            Ok(pin) => {
                self.settle();
                *self.state.lock() = ResState::Committed(pin);
                Ok(())
            }
            Err((e, ResState::Open(res, engine))) => {
                // Not published: kept open (holding its lane) while arrays over it live, and
                // discarded when the last goes, as an aborted `with` block is.
                self.abort_on_release.store(true, Ordering::SeqCst);
                let mut state = self.state.lock();
                if self.exports.load(Ordering::SeqCst) > 0 {
                    *state = ResState::Open(res, engine);
                } else {
                    *state = ResState::Done;
                    drop(state);
                    drop((res, engine));
                    self.settle();
                }
                Err(err(e))
            }
            Err((e, kept)) => {
                self.settle();
                *self.state.lock() = kept;
                Err(err(e))
            }
        }
    }

    /// Discards the reservation (nothing is stored). Refused while arrays over it are alive:
    /// the space would be reused under them (delete them first).
    fn abort(&self) -> PyResult<()> {
        let mut state = self.state.lock();
        if !matches!(*state, ResState::Open(..)) {
            return Ok(());
        }
        let n = self.exports.load(Ordering::SeqCst);
        if n > 0 {
            return Err(PyBufferError::new_err(format!(
                "cannot abort: {n} buffer(s) over the reservation are alive and its space would be reused under them; delete them (del arr) first, or commit"
            )));
        }
        *state = ResState::Done;
        drop(state);
        self.settle();
        Ok(())
    }

    fn __enter__(slf: Py<Self>) -> Py<Self> {
        slf
    }

    /// Commits on a normal exit; aborts on an exception (if arrays over it are still
    /// alive, the abort happens when the last is released).
    #[pyo3(signature = (exc_type, _exc=None, _tb=None))]
    fn __exit__(
        &self,
        py: Python<'_>,
        exc_type: Option<&Bound<'_, PyAny>>,
        _exc: Option<&Bound<'_, PyAny>>,
        _tb: Option<&Bound<'_, PyAny>>,
    ) -> PyResult<bool> {
        if !self.is_open() {
            return Ok(false);
        }
        match exc_type {
            Some(t) if !t.is_none() => {
                // Discarded once the last array over it goes (now if there is none). Fix
                // (found in review): it was discarded only when the Reservation object went,
                // and the `with` block's variable keeps it alive: until then every write of
                // this thread raised ReservationOpen and the lane stayed locked.
                self.abort_on_release.store(true, Ordering::SeqCst);
                if self.exports.load(Ordering::SeqCst) == 0 {
                    self.abort()?;
                }
            }
            _ => self.commit(py, None)?,
        }
        Ok(false)
    }

    unsafe fn __getbuffer__(
        slf: Bound<'_, Self>,
        view: *mut ffi::Py_buffer,
        flags: c_int,
    ) -> PyResult<()> {
        let this = slf.get();
        let state = this.state.lock();
        let readonly = match *state {
            ResState::Open(..) => 0,
            ResState::Committed(_) => {
                if flags & ffi::PyBUF_WRITABLE != 0 {
                    return Err(PyBufferError::new_err(
                        "the reservation is committed: its value is read-only now (get() it, or reserve again)",
                    ));
                }
                1
            }
            ResState::Committing => {
                return Err(PyBufferError::new_err(
                    "the reservation is being committed: get() its value afterwards",
                ))
            }
            ResState::Done => {
                return Err(PyBufferError::new_err(
                    "the reservation was aborted: its space is gone",
                ))
            }
        };
        // Safety: the range is the reservation's (open: its lane keeps it ours; committed:
        // the pin keeps it mapped), and the export holds a reference to `slf`.
        let rc = unsafe {
            ffi::PyBuffer_FillInfo(
                view,
                slf.as_ptr(),
                this.ptr.0 as *mut std::ffi::c_void,
                this.len as ffi::Py_ssize_t,
                readonly,
                flags,
            )
        };
        if rc != 0 {
            return Err(PyErr::fetch(slf.py()));
        }
        this.exports.fetch_add(1, Ordering::SeqCst);
        Ok(())
    }

    unsafe fn __releasebuffer__(&self, _view: *mut ffi::Py_buffer) {
        self.export_released();
    }
}

// ---------------------------------------------------------------------------------------------
// Claims
// ---------------------------------------------------------------------------------------------

/// An exclusive claim on one event (from next_event / next_event_in). Acknowledge it with
/// ack(hotstore.REMOVE or hotstore.KEEP) or give it back with release(); leaving a `with`
/// block, or dropping it, unsettled releases it.
#[pyclass(frozen, module = "hotstore._hotstore")]
struct Claim {
    claim: Mutex<Option<hotstore::Claim>>,
    token: String,
    event: EventId,
    fragment_count: u32,
    bytes: u64,
    incomplete: bool,
    lease_until: std::time::Instant,
    shared: Arc<Shared>,
}

impl Claim {
    fn new(c: hotstore::Claim, shared: Arc<Shared>) -> Self {
        Claim {
            token: c.token().to_string(),
            event: c.event().clone(),
            fragment_count: c.fragment_count(),
            bytes: c.bytes(),
            incomplete: c.incomplete(),
            lease_until: c.lease_until(),
            claim: Mutex::new(Some(c)),
            shared,
        }
    }

    fn take(&self) -> PyResult<hotstore::Claim> {
        self.claim.lock().take().ok_or_else(|| {
            invalid(format!(
                "the claim {} was already acknowledged or released",
                self.token
            ))
        })
    }
}

#[pymethods]
impl Claim {
    /// The claim's token (Store.ack / Store.release take it).
    #[getter]
    fn token(&self) -> String {
        self.token.clone()
    }

    /// (run, event) for the default key layout, else None.
    #[getter]
    fn event(&self) -> Option<(u32, u64)> {
        self.event.run_event()
    }

    /// The event id bytes (the prefix of its fragment keys).
    #[getter]
    fn event_id<'py>(&self, py: Python<'py>) -> Bound<'py, PyBytes> {
        PyBytes::new(py, self.event.as_bytes())
    }

    /// Fragments stored when it was claimed.
    #[getter]
    fn fragment_count(&self) -> u32 {
        self.fragment_count
    }

    /// Bytes of fragment values when it was claimed.
    #[getter]
    fn bytes(&self) -> u64 {
        self.bytes
    }

    /// True if it became READY by its timeout, before the expected fragments arrived.
    #[getter]
    fn incomplete(&self) -> bool {
        self.incomplete
    }

    /// Seconds left on the lease (0 once expired).
    #[getter]
    fn lease_left(&self) -> f64 {
        self.lease_until
            .saturating_duration_since(std::time::Instant::now())
            .as_secs_f64()
    }

    /// True while neither acknowledged nor released through this object.
    #[getter]
    fn held(&self) -> bool {
        self.claim.lock().is_some()
    }

    fn __repr__(&self) -> String {
        format!(
            "<hotstore.Claim {} event {} {} fragments>",
            self.token, self.event, self.fragment_count
        )
    }

    /// The event's fragments (key, value) in key order, values in place (no copy).
    fn fragments(&self, py: Python<'_>) -> PyResult<Vec<(Py<PyBytes>, Value)>> {
        let engine = self.shared.engine()?;
        fragments_of(py, &engine, &self.event)
    }

    fn __iter__<'py>(&self, py: Python<'py>) -> PyResult<Bound<'py, PyAny>> {
        let list = self.fragments(py)?;
        let list = list.into_pyobject(py)?;
        list.try_iter().map(|i| i.into_any())
    }

    /// Acknowledges: "remove" (hotstore.REMOVE) deletes every fragment atomically; "keep"
    /// (hotstore.KEEP) keeps them stored and never offers the event again.
    #[pyo3(signature = (how="remove", durability=None))]
    fn ack(&self, py: Python<'_>, how: &str, durability: Option<&str>) -> PyResult<()> {
        let d = self::durability(durability, self.shared.durability)?;
        let how = ack_kind(how)?;
        self.shared.writer()?;
        let c = self.take()?;
        py.detach(|| c.ack_with(how, d)).py()
    }

    /// Gives the event back: READY again, in its old place.
    fn release(&self, py: Python<'_>) -> PyResult<()> {
        self.shared.engine()?;
        let c = self.take()?;
        py.detach(|| c.release()).py()
    }

    fn __enter__(slf: Py<Self>) -> Py<Self> {
        slf
    }

    /// Releases the claim if it is still held.
    #[pyo3(signature = (*_exc))]
    fn __exit__(&self, py: Python<'_>, _exc: &Bound<'_, PyTuple>) -> PyResult<bool> {
        if self.held() && self.shared.engine().is_ok() {
            let c = self.take()?;
            // Expired or settled elsewhere: nothing to give back.
            let _ = py.detach(|| c.release());
        }
        Ok(false)
    }
}

// ---------------------------------------------------------------------------------------------
// Module
// ---------------------------------------------------------------------------------------------

/// The 16-byte key of a fragment in the default layout (run u32, event u64, detector u16,
/// component u16, big-endian: byte order is numeric order).
#[pyfunction]
fn fragment_key<'py>(
    py: Python<'py>,
    run: u32,
    event: u64,
    detector: u16,
    component: u16,
) -> Bound<'py, PyBytes> {
    PyBytes::new(
        py,
        &hotstore::FragmentKey::new(run, event, detector, component).to_bytes(),
    )
}

/// The 12-byte id of event `event` of run `run` in the default layout.
#[pyfunction]
fn event_id<'py>(py: Python<'py>, run: u32, event: u64) -> Bound<'py, PyBytes> {
    PyBytes::new(py, EventId::new(run, event).as_bytes())
}

/// (run, event, detector, component) of a default-layout fragment key, or None.
#[pyfunction]
fn parse_fragment_key(key: &Bound<'_, PyAny>) -> PyResult<Option<(u32, u64, u16, u16)>> {
    let k = key_bytes(key)?;
    Ok(hotstore::FragmentKey::from_bytes(&k).map(|f| (f.run, f.event, f.detector, f.component)))
}

#[pymodule]
fn _hotstore(m: &Bound<'_, PyModule>) -> PyResult<()> {
    m.add_class::<Store>()?;
    m.add_class::<Value>()?;
    m.add_class::<Reservation>()?;
    m.add_class::<Claim>()?;
    m.add_function(wrap_pyfunction!(fragment_key, m)?)?;
    m.add_function(wrap_pyfunction!(event_id, m)?)?;
    m.add_function(wrap_pyfunction!(parse_fragment_key, m)?)?;
    m.add("MAX_KEY_LEN", hotstore::MAX_KEY_LEN)?;
    m.add("MAX_VALUE_LEN", hotstore::MAX_VALUE_LEN)?;
    m.add("KEEP", "keep")?;
    m.add("REMOVE", "remove")?;
    Ok(())
}
