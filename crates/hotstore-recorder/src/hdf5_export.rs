//! HDF5 export of a recording, in a layout modelled on DUNE's trigger-record files (the
//! `hdf5libs` layout): one file per recording, one group per time slice named like DUNE's
//! sequences of one long trigger record (`TriggerRecord<record>.<sequence>`), and in it one
//! dataset per link. The layout, its attributes and an h5py snippet are in
//! `docs/record-hdf5.md`.
//!
//! ```text
//! rec-000001.hdf5                       attributes: record_type, run_number, recording_id,
//!                                       trigger_timestamp_ns, window_begin_ns, frame_size,
//!                                       lossy, link_ids, ... (see `docs/record-hdf5.md`)
//! /TriggerRecord00001.0000/            one time slice: sequence_number, window_begin_ns, ...
//!     RawData/Link0000                 uint8 [frames, frame_size]: the frames, as received
//!     Timestamps/Link0000              uint64 [frames]: each frame's timestamp (ns)
//! ```
//!
//! The file is written under a temporary name (`<name>.<pid>.writing`, with DUNE's
//! in-progress suffix),
//! flushed, closed, fsynced and only then renamed to its final name (and the directory
//! fsynced), so a file under the final name is always complete. On any error the temporary
//! file is removed; a process killed mid-export leaves only a `.writing` file.

use crate::error::{RecorderError, Result};
use crate::manifest::{self, Manifest};
use crate::readback::for_each_slice;
use crate::slice::Slice;
use hdf5::types::VarLenUnicode;
use hdf5::{H5Type, Location};
use hotstore::Store;
use std::path::{Path, PathBuf};
use std::time::{SystemTime, UNIX_EPOCH};

/// Version of the layout, in the file's `filelayout_version` attribute.
pub const HDF5_LAYOUT_VERSION: u32 = 1;
/// Prefix of a slice group's name (`TriggerRecord<record>.<sequence>`), and the file's
/// `record_type`.
pub const RECORD_NAME_PREFIX: &str = "TriggerRecord";
/// The group of a slice's frame datasets.
pub const RAW_DATA_GROUP: &str = "RawData";
/// The group of a slice's timestamp datasets.
pub const TIMESTAMPS_GROUP: &str = "Timestamps";
/// Suffix of the file while it is written.
pub const IN_PROGRESS_SUFFIX: &str = ".writing";

/// What [`export_hdf5`] wrote.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Hdf5Export {
    /// The file.
    pub path: PathBuf,
    /// Slice groups written.
    pub slices: u64,
    /// Frames written per link (link, frames), ascending link.
    pub links: Vec<(u16, u64)>,
    /// Bytes of frames written (DUNE's `recorded_size`).
    pub frame_bytes: u64,
    /// Size of the file.
    pub file_bytes: u64,
}

/// Name of recording `id`'s HDF5 file.
pub fn file_name(id: u32) -> String {
    format!("rec-{id:06}.hdf5")
}

/// Writes recording `recording` of `store` to `out_dir/rec-NNNNNN.hdf5` (see the module docs).
///
/// Errors: [`RecorderError::NoSpace`] when the file system of `out_dir` has less free space
/// than the frames take; [`RecorderError::Io`] for a failed file operation, including one
/// inside the HDF5 library whose cause is an OS error (`No space left on device`, `File too
/// large`); [`RecorderError::Hdf5`] for any other refusal of the library. In every error case
/// no file is left under the final name (a previous export there is left as it was).
pub fn export_hdf5(store: &Store, recording: u32, out_dir: &Path) -> Result<Hdf5Export> {
    let m = manifest::read(store.dir(), recording)?;
    std::fs::create_dir_all(out_dir).map_err(|e| RecorderError::Io {
        what: "create",
        path: out_dir.to_path_buf(),
        source: e,
    })?;
    let need = m.frames_recorded().saturating_mul(m.frame_len as u64 + 8);
    if let Some(free) = free_bytes(out_dir) {
        if free < need {
            return Err(RecorderError::NoSpace {
                path: out_dir.to_path_buf(),
                need,
                free,
            });
        }
    }
    let path = out_dir.join(file_name(recording));
    // The process id keeps two exports of the same recording at once from sharing a file.
    let mut tmp_name = path.as_os_str().to_owned();
    tmp_name.push(format!(".{}{IN_PROGRESS_SUFFIX}", std::process::id()));
    let tmp = PathBuf::from(tmp_name);
    let result = write_file(store, &m, &tmp).and_then(|mut done| {
        let io = |what: &'static str, p: &Path| {
            let p = p.to_path_buf();
            move |e| RecorderError::Io {
                what,
                path: p,
                source: e,
            }
        };
        let f = std::fs::File::open(&tmp).map_err(io("open", &tmp))?;
        f.sync_all().map_err(io("fsync", &tmp))?;
        done.file_bytes = f.metadata().map_err(io("stat", &tmp))?.len();
        drop(f);
        std::fs::rename(&tmp, &path).map_err(io("rename", &path))?;
        std::fs::File::open(out_dir)
            .and_then(|d| d.sync_all())
            .map_err(io("fsync", out_dir))?;
        done.path = path.clone();
        Ok(done)
    });
    if result.is_err() {
        // Best effort: the error says what failed; a `.writing` file is never taken for a
        // complete export anyway.
        let _ = std::fs::remove_file(&tmp);
    }
    result
}

/// Bytes free for unprivileged users on the file system of `dir` (None if unknown).
fn free_bytes(dir: &Path) -> Option<u64> {
    use std::os::unix::ffi::OsStrExt;
    let c = std::ffi::CString::new(dir.as_os_str().as_bytes()).ok()?;
    // SAFETY: statvfs is plain integers, for which all zeroes is a valid value.
    let mut s: libc::statvfs = unsafe { std::mem::zeroed() };
    // SAFETY: `c` is NUL-terminated and `s` is owned here; statvfs writes only into `s`.
    if unsafe { libc::statvfs(c.as_ptr(), &mut s) } != 0 {
        return None;
    }
    #[allow(
        clippy::unnecessary_cast,
        reason = "the field types differ between targets"
    )]
    Some((s.f_bavail as u64).saturating_mul(s.f_frsize as u64))
}

/// Turns an HDF5 error into a typed one: the OS error where the library's stack names one
/// (`errno = N`, e.g. a full disk), the library's description otherwise.
fn h5err<'p>(what: &'static str, path: &'p Path) -> impl Fn(hdf5::Error) -> RecorderError + 'p {
    move |e| {
        if let hdf5::Error::HDF5(stack) = &e {
            if let Ok(frames) = stack.clone().expand() {
                let errno = frames.iter().find_map(|f| {
                    let d = f.desc();
                    let at = d.find("errno = ")? + "errno = ".len();
                    let digits: String = d[at..].chars().take_while(char::is_ascii_digit).collect();
                    digits.parse::<i32>().ok().filter(|&n| n > 0)
                });
                if let Some(n) = errno {
                    return RecorderError::Io {
                        what,
                        path: path.to_path_buf(),
                        source: std::io::Error::from_raw_os_error(n),
                    };
                }
            }
        }
        RecorderError::Hdf5 {
            what: what.to_string(),
            path: path.to_path_buf(),
            reason: e.to_string(),
        }
    }
}

fn now_ms() -> u64 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map_or(0, |d| d.as_millis() as u64)
}

fn attr<T: H5Type>(loc: &Location, name: &str, v: T) -> hdf5::Result<()> {
    loc.new_attr::<T>().create(name)?.write_scalar(&v)
}

fn attr_str(loc: &Location, name: &str, v: &str) -> hdf5::Result<()> {
    let s: VarLenUnicode = v
        .parse()
        .map_err(|e| hdf5::Error::Internal(format!("attribute {name}: {e}")))?;
    loc.new_attr::<VarLenUnicode>()
        .create(name)?
        .write_scalar(&s)
}

fn attr_list<T: H5Type>(loc: &Location, name: &str, v: &[T]) -> hdf5::Result<()> {
    loc.new_attr_builder().with_data(v).create(name).map(|_| ())
}

/// Number of decimal digits of `n`.
fn digits(n: u64) -> usize {
    n.checked_ilog10().map_or(1, |d| d as usize + 1)
}

/// One (slice, link) gathered over its parts, written when the walk moves on.
struct Pending {
    slice: u64,
    link: u16,
    frame_len: u32,
    first_ring: u64,
    parts: u32,
    ts: Vec<u64>,
    frames: Vec<u8>,
}

/// The walk's state: the open file, the open slice group, what was written.
struct Writer<'a> {
    m: &'a Manifest,
    path: &'a Path,
    file: hdf5::File,
    seq_digits: usize,
    rec_digits: usize,
    group: Option<(u64, hdf5::Group, Vec<u16>, u64)>,
    pending: Option<Pending>,
    slices: u64,
    links: std::collections::BTreeMap<u16, u64>,
    frame_bytes: u64,
}

impl Writer<'_> {
    fn add(&mut self, s: &Slice<'_>) -> Result<()> {
        let h = s.header;
        let same = matches!(&self.pending, Some(p) if p.slice == h.slice && p.link == h.link);
        if !same {
            self.flush_pending()?;
        }
        let p = self.pending.get_or_insert_with(|| Pending {
            slice: h.slice,
            link: h.link,
            frame_len: h.frame_len,
            first_ring: h.first_ring,
            parts: 0,
            ts: Vec::with_capacity(h.frames as usize),
            frames: Vec::with_capacity(s.frames_bytes().len()),
        });
        if p.frame_len != h.frame_len {
            return Err(RecorderError::Hdf5 {
                what: "write".into(),
                path: self.path.to_path_buf(),
                reason: format!(
                    "slice {} link {}: part {} has frames of {} bytes, the first part {} \
                     (run `hotstore record verify`)",
                    h.slice, h.link, h.part, h.frame_len, p.frame_len
                ),
            });
        }
        p.parts += 1;
        p.ts.extend((0..h.frames as usize).map(|i| s.ts(i)));
        p.frames.extend_from_slice(s.frames_bytes());
        Ok(())
    }

    /// The group of slice `slice`, created (and the previous one finished) on first use.
    fn group(&mut self, slice: u64) -> Result<hdf5::Group> {
        if let Some((open, g, _, _)) = &self.group {
            if *open == slice {
                return Ok(g.clone());
            }
        }
        self.finish_group()?;
        let name = format!(
            "{RECORD_NAME_PREFIX}{:0rw$}.{slice:0sw$}",
            self.m.recording_id,
            rw = self.rec_digits,
            sw = self.seq_digits
        );
        let e = h5err("write", self.path);
        let g = self.file.create_group(&name).map_err(&e)?;
        let begin = self
            .m
            .start_ns
            .saturating_add(slice.saturating_mul(self.m.slice_ns));
        let end = begin.saturating_add(self.m.slice_ns).min(self.m.end_ns);
        (|| {
            attr(&g, "record_number", self.m.recording_id)?;
            attr(&g, "sequence_number", slice)?;
            attr(&g, "window_begin_ns", begin)?;
            attr(&g, "window_end_ns", end)?;
            g.create_group(RAW_DATA_GROUP)?;
            g.create_group(TIMESTAMPS_GROUP)?;
            Ok(())
        })()
        .map_err(&e)?;
        self.slices += 1;
        self.group = Some((slice, g.clone(), Vec::new(), 0));
        Ok(g)
    }

    /// Writes the slice group's summary attributes (links present, frames).
    fn finish_group(&mut self) -> Result<()> {
        if let Some((_, g, links, frames)) = self.group.take() {
            (|| {
                attr_list(&g, "link_ids", &links)?;
                attr(&g, "frames", frames)
            })()
            .map_err(h5err("write", self.path))?;
        }
        Ok(())
    }

    fn flush_pending(&mut self) -> Result<()> {
        let Some(p) = self.pending.take() else {
            return Ok(());
        };
        let g = self.group(p.slice)?;
        let name = format!("Link{:04}", p.link);
        let n = p.ts.len();
        let fl = p.frame_len as usize;
        (|| {
            let raw = g.group(RAW_DATA_GROUP)?;
            let ds = raw
                .new_dataset::<u8>()
                .shape([n, fl])
                .create(name.as_str())?;
            if n > 0 {
                ds.write_raw(&p.frames[..])?;
            }
            attr(&ds, "link_id", p.link)?;
            attr(&ds, "frames", n as u64)?;
            attr(&ds, "frame_size", p.frame_len)?;
            attr(&ds, "parts", p.parts)?;
            attr(&ds, "first_ring_sequence", p.first_ring)?;
            attr(
                &ds,
                "first_timestamp_ns",
                p.ts.first().copied().unwrap_or(0),
            )?;
            attr(&ds, "last_timestamp_ns", p.ts.last().copied().unwrap_or(0))?;
            let tsg = g.group(TIMESTAMPS_GROUP)?;
            let ts = tsg.new_dataset::<u64>().shape([n]).create(name.as_str())?;
            if n > 0 {
                ts.write_raw(&p.ts[..])?;
            }
            Ok(())
        })()
        .map_err(h5err("write", self.path))?;
        if let Some((_, _, links, frames)) = &mut self.group {
            links.push(p.link);
            *frames += n as u64;
        }
        *self.links.entry(p.link).or_default() += n as u64;
        self.frame_bytes += p.frames.len() as u64;
        Ok(())
    }
}

/// Writes the whole file at `tmp`, flushes and closes it.
fn write_file(store: &Store, m: &Manifest, tmp: &Path) -> Result<Hdf5Export> {
    let e = h5err("create", tmp);
    let file = hdf5::File::create(tmp).map_err(&e)?;
    let slices_in_window = m
        .end_ns
        .saturating_sub(m.start_ns)
        .div_ceil(m.slice_ns.max(1));
    let seq_digits = digits(slices_in_window.saturating_sub(1)).max(4);
    let rec_digits = digits(m.recording_id as u64).max(5);
    let params = serde_json::json!({
        "record_name_prefix": RECORD_NAME_PREFIX,
        "digits_for_record_number": rec_digits,
        "digits_for_sequence_number": seq_digits,
        "record_header_dataset_name": null,
        "raw_data_group_name": RAW_DATA_GROUP,
        "timestamps_group_name": TIMESTAMPS_GROUP,
        "link_dataset_prefix": "Link",
        "digits_for_link_number": 4,
        "sequence": "time slice index",
    });
    let ew = h5err("write", tmp);
    (|| {
        attr_str(&file, "record_type", RECORD_NAME_PREFIX)?;
        attr(&file, "filelayout_version", HDF5_LAYOUT_VERSION)?;
        attr_str(&file, "filelayout_params", &params.to_string())?;
        attr_str(&file, "application_name", "hotstore")?;
        attr(&file, "run_number", m.recording_id)?;
        attr(&file, "recording_id", m.recording_id)?;
        attr(&file, "file_index", 0u32)?;
        attr(&file, "creation_timestamp", now_ms())?;
        attr(
            &file,
            "trigger_timestamp_ns",
            m.triggers_ns.first().copied().unwrap_or(0),
        )?;
        attr_list(&file, "trigger_timestamps_ns", &m.triggers_ns)?;
        attr(&file, "pre_trigger_ns", m.pre_ns)?;
        attr(&file, "post_trigger_ns", m.post_ns)?;
        attr(&file, "window_begin_ns", m.start_ns)?;
        attr(&file, "window_end_ns", m.end_ns)?;
        attr(&file, "slice_ns", m.slice_ns)?;
        attr(&file, "frame_size", m.frame_len)?;
        attr(&file, "lossy", m.lossy)?;
        attr_str(&file, "state", &format!("{:?}", m.state).to_lowercase())?;
        attr_str(&file, "durability", &m.durability)?;
        attr(&file, "slices_durable", m.slices_durable)?;
        attr(&file, "frames_recorded", m.frames_recorded())?;
        attr(&file, "frames_dropped", m.frames_dropped())?;
        Ok(())
    })()
    .map_err(&ew)?;

    let mut w = Writer {
        m,
        path: tmp,
        file,
        seq_digits,
        rec_digits,
        group: None,
        pending: None,
        slices: 0,
        links: m.links.iter().map(|l| (l.link, 0)).collect(),
        frame_bytes: 0,
    };
    let mut err: Option<RecorderError> = None;
    for_each_slice(store, m.recording_id, |key, parsed| {
        if err.is_some() {
            return;
        }
        let r = match parsed {
            Ok(s) => w.add(&s),
            Err(bad) => Err(RecorderError::BadManifest {
                path: store.dir().to_path_buf(),
                reason: format!(
                    "slice {}: {} (run `hotstore record verify`)",
                    hex::encode(key),
                    bad.0
                ),
            }),
        };
        if let Err(e) = r {
            err = Some(e);
        }
    })?;
    if let Some(e) = err {
        return Err(e);
    }
    w.flush_pending()?;
    w.finish_group()?;
    // Every link of the manifest, and any the store holds beyond it, ascending.
    let links: Vec<(u16, u64)> = w.links.into_iter().collect();
    let ids: Vec<u16> = links.iter().map(|l| l.0).collect();
    let exported: Vec<u64> = links.iter().map(|l| l.1).collect();
    let by_link = |f: fn(&crate::manifest::LinkManifest) -> u64| -> Vec<u64> {
        ids.iter()
            .map(|id| m.links.iter().find(|l| l.link == *id).map_or(0, f))
            .collect()
    };
    let file = w.file;
    (|| {
        attr_list(&file, "link_ids", &ids)?;
        attr_list(
            &file,
            "link_frames_recorded",
            &by_link(|l| l.frames_recorded),
        )?;
        attr_list(&file, "link_frames_dropped", &by_link(|l| l.frames_dropped))?;
        attr_list(&file, "link_frames_exported", &exported)?;
        attr(&file, "frames_exported", exported.iter().sum::<u64>())?;
        attr(&file, "slice_count", w.slices)?;
        attr(&file, "recorded_size", w.frame_bytes)?;
        attr(&file, "closing_timestamp", now_ms())?;
        file.flush()
    })()
    .map_err(&ew)?;
    file.close().map_err(h5err("close", tmp))?;
    Ok(Hdf5Export {
        path: tmp.to_path_buf(),
        slices: w.slices,
        links,
        frame_bytes: w.frame_bytes,
        file_bytes: 0,
    })
}
