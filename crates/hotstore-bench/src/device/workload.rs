//! One timed run: `threads` workers, each on its own file of the set, go through a warm-up
//! and then a measured window of fixed length; the window ends when the last worker has
//! finished its requests in flight and, for writes when asked, its final fdatasync/msync.

use super::layout::{self, AlignedBuf, FileSet, Mapping};
use super::methods::{
    source_buffer, Engine, Method, MmapEngine, Offsets, PosixEngine, ReadCheck, Workload,
};
use std::fs::File;
use std::io;
use std::os::unix::fs::FileExt;
use std::sync::atomic::{AtomicU8, Ordering};
use std::sync::mpsc;
use std::thread;
use std::time::{Duration, Instant};

/// What to run.
pub(super) struct RunSpec<'a> {
    pub method: Method,
    pub workload: Workload,
    pub block: usize,
    pub files: &'a FileSet,
    pub warmup: Duration,
    pub duration: Duration,
    /// Writes: end the measured window only after fdatasync (msync for mappings).
    pub include_sync: bool,
    pub iodepth: usize,
}

/// What one run measured.
#[derive(Debug, Clone, Copy)]
pub(super) struct Outcome {
    /// Requests completed inside the measured window (all threads).
    pub requests: u64,
    /// Length of the window: from its start until the last thread was done (and synced).
    pub secs: f64,
}

impl Outcome {
    pub(super) fn bytes_per_sec(&self, block: usize) -> f64 {
        (self.requests * block as u64) as f64 / self.secs.max(1e-9)
    }
}

const WAIT: u8 = 0;
const WARM: u8 = 1;
const MEASURE: u8 = 2;
const STOP: u8 = 3;

struct WorkerOut {
    requests: u64,
    end: Instant,
}

/// Runs once. The files are flushed and dropped from the page cache first (see
/// [`FileSet::settle`]); writes are spot-checked afterwards (the last block each thread
/// wrote is read back and compared), reads are checked as they go.
pub(super) fn run_once(spec: &RunSpec<'_>) -> io::Result<Outcome> {
    spec.files.settle()?;
    let phase = AtomicU8::new(WAIT);
    let threads = spec.files.threads;
    thread::scope(|scope| {
        let (ready_tx, ready_rx) = mpsc::channel::<Result<(), String>>();
        let mut handles = Vec::with_capacity(threads);
        let mut spawn_error = None;
        for i in 0..threads {
            let ready_tx = ready_tx.clone();
            let phase = &phase;
            match thread::Builder::new()
                .name(format!("device-{i}"))
                .spawn_scoped(scope, move || worker(spec, i, phase, ready_tx))
            {
                Ok(h) => handles.push(h),
                Err(e) => {
                    spawn_error = Some(io::Error::new(
                        e.kind(),
                        format!("cannot start a thread: {e}"),
                    ));
                    break;
                }
            }
        }
        drop(ready_tx);
        let mut setup_error = spawn_error;
        for _ in 0..handles.len() {
            match ready_rx.recv() {
                Ok(Ok(())) => {}
                Ok(Err(msg)) => {
                    setup_error.get_or_insert(io::Error::other(msg));
                }
                Err(_) => break,
            }
        }
        if setup_error.is_some() {
            phase.store(STOP, Ordering::Release);
        } else {
            phase.store(WARM, Ordering::Release);
            thread::sleep(spec.warmup);
        }
        let t0 = Instant::now();
        if setup_error.is_none() {
            phase.store(MEASURE, Ordering::Release);
            sleep_unless_stopped(&phase, spec.duration);
            phase.store(STOP, Ordering::Release);
        }
        let mut requests = 0;
        let mut end = t0;
        let mut first_error = setup_error;
        for h in handles {
            match h.join() {
                Ok(Ok(out)) => {
                    requests += out.requests;
                    end = end.max(out.end);
                }
                Ok(Err(e)) => {
                    first_error.get_or_insert(e);
                }
                Err(_) => {
                    first_error.get_or_insert(io::Error::other("a benchmark thread panicked"));
                }
            }
        }
        match first_error {
            Some(e) => Err(e),
            None => Ok(Outcome {
                requests,
                secs: end.duration_since(t0).as_secs_f64(),
            }),
        }
    })
}

/// Sleeps for `d`, waking early if a worker stopped the run (after an error).
fn sleep_unless_stopped(phase: &AtomicU8, d: Duration) {
    let deadline = Instant::now() + d;
    loop {
        let now = Instant::now();
        if now >= deadline || phase.load(Ordering::Acquire) == STOP {
            return;
        }
        thread::sleep((deadline - now).min(Duration::from_millis(20)));
    }
}

fn worker(
    spec: &RunSpec<'_>,
    i: usize,
    phase: &AtomicU8,
    ready: mpsc::Sender<Result<(), String>>,
) -> io::Result<WorkerOut> {
    let mut engine = match make_engine(spec, i) {
        Ok(e) => {
            let _ = ready.send(Ok(()));
            e
        }
        Err(e) => {
            let _ = ready.send(Err(e.to_string()));
            return Err(e);
        }
    };
    let result = work(spec, i, phase, engine.as_mut());
    if result.is_err() {
        // Stop the others early: the run has failed.
        phase.store(STOP, Ordering::Release);
    }
    result
}

fn work(
    spec: &RunSpec<'_>,
    i: usize,
    phase: &AtomicU8,
    engine: &mut dyn Engine,
) -> io::Result<WorkerOut> {
    while phase.load(Ordering::Acquire) == WAIT {
        thread::yield_now();
    }
    let files = spec.files;
    let random = spec.workload == Workload::RandWrite;
    let mut offsets = Offsets::new(
        spec.block as u64,
        files.file_bytes,
        random,
        files.seeds[i] ^ rand::random::<u64>(),
    );
    let mut requests = 0;
    let mut measuring = false;
    let mut passes = 0;
    // Steps taken past the window while nothing was measured yet (bounded: an asynchronous
    // engine may complete nothing in a step; `drain` below then collects).
    let mut late_steps = 0;
    loop {
        match phase.load(Ordering::Relaxed) {
            // A worker descheduled for the whole window (a loaded machine) measures at least
            // one step past it instead of reporting 0 B/s; the window ends when that step does.
            STOP if requests > 0 || late_steps >= 64 => break,
            STOP => {
                measuring = true;
                late_steps += 1;
            }
            MEASURE => measuring = true,
            _ => {}
        }
        // Reads are checked completely during the warm-up, sparsely while measured.
        let n = engine.step(&mut offsets, !measuring)?;
        if measuring {
            requests += n;
        }
        if offsets.passes() != passes {
            // A pass over the file ended: drop its pages, as fio does on every loop.
            passes = offsets.passes();
            layout::drop_cache(engine.file());
        }
    }
    let n = engine.drain(!measuring)?;
    if measuring {
        requests += n;
    }
    if spec.include_sync && spec.workload.writes() {
        engine.sync()?;
    }
    let end = Instant::now();
    if spec.workload.writes() {
        check_written(&files.paths[i], offsets.last, engine.source())?;
    }
    Ok(WorkerOut { requests, end })
}

/// Reads back (through the page cache) the block last written at `offset` and compares it.
fn check_written(path: &std::path::Path, offset: u64, expected: &[u8]) -> io::Result<()> {
    let f = File::open(path)?;
    let mut got = vec![0u8; expected.len()];
    f.read_exact_at(&mut got, offset)?;
    match got.iter().zip(expected).position(|(a, b)| a != b) {
        None => Ok(()),
        Some(j) => Err(io::Error::other(format!(
            "write check failed in {} at offset {}: read {:#04x}, wrote {:#04x}",
            path.display(),
            offset + j as u64,
            got[j],
            expected[j]
        ))),
    }
}

fn make_engine<'a>(spec: &RunSpec<'a>, i: usize) -> io::Result<Box<dyn Engine + 'a>> {
    let files: &'a FileSet = spec.files;
    let path = &files.paths[i];
    let write = spec.workload.writes();
    let check = ReadCheck {
        path,
        seed: files.seeds[i],
    };
    let buf = if write {
        source_buffer(spec.block)?
    } else {
        AlignedBuf::new(spec.block)?
    };
    let random = spec.workload == Workload::RandWrite;
    let engine: Box<dyn Engine + 'a> = match spec.method {
        Method::Write | Method::Direct | Method::Dsync => Box::new(PosixEngine {
            file: layout::open(path, spec.method == Method::Direct)?,
            buf,
            block: spec.block,
            write,
            dsync: spec.method == Method::Dsync,
            check,
        }),
        Method::Mmap | Method::MmapNt => {
            let file = layout::open(path, false)?;
            let len = usize::try_from(files.file_bytes)
                .map_err(|_| io::Error::other("file too large to map"))?;
            let map = Mapping::new(&file, len, write)?;
            map.advise(random);
            Box::new(MmapEngine {
                map,
                file,
                buf,
                block: spec.block,
                write,
                nontemporal: spec.method == Method::MmapNt,
                check,
            })
        }
        Method::Uring => uring_engine(spec, path, buf, write, check)?,
    };
    // Tell the kernel the access pattern (readahead), as fio does (fadvise_hint=1).
    layout::advise(engine.file(), random);
    Ok(engine)
}

#[cfg(target_os = "linux")]
fn uring_engine<'a>(
    spec: &RunSpec<'_>,
    path: &std::path::Path,
    buf: AlignedBuf,
    write: bool,
    check: ReadCheck<'a>,
) -> io::Result<Box<dyn Engine + 'a>> {
    let file = layout::open(path, true)?;
    Ok(Box::new(super::uring::UringEngine::new(
        file,
        buf,
        spec.block,
        write,
        spec.iodepth,
        check,
    )?))
}

#[cfg(not(target_os = "linux"))]
fn uring_engine<'a>(
    _spec: &RunSpec<'_>,
    _path: &std::path::Path,
    _buf: AlignedBuf,
    _write: bool,
    _check: ReadCheck<'a>,
) -> io::Result<Box<dyn Engine + 'a>> {
    Err(io::Error::new(
        io::ErrorKind::Unsupported,
        "io_uring is Linux only",
    ))
}
