//! `--vs-fio`: the same pattern run by fio, on the same files, for the methods fio has.
//!
//! | method  | fio                                  |
//! | ------- | ------------------------------------ |
//! | write   | `ioengine=psync`                     |
//! | direct  | `ioengine=psync direct=1`            |
//! | uring   | `ioengine=io_uring direct=1 iodepth` |
//! | mmap    | `ioengine=mmap`                      |
//! | dsync   | `ioengine=psync fdatasync=1`         |
//! | mmap-nt | none: fio has no non-temporal-store engine |
//!
//! Every job uses the benchmark's own files (`filename_format=t{threads}-$jobnum`), the same
//! size, block size, warm-up (`ramp_time`), duration (`time_based`, `runtime`), cache
//! invalidation at the start (fio's default `invalidate=1`), uniformly random offsets with
//! replacement (`norandommap`), one unchanging buffer of random bytes for writes
//! (`scramble_buffers=0`), and `end_fsync=1` when the final sync is counted (fio counts
//! it in its runtime too).

use super::methods::{Method, Workload};
use crate::{fail, Result};
use std::io;
use std::path::Path;
use std::process::Command;
use std::time::Duration;

/// fio's result for one pattern.
#[derive(Debug, Clone, Copy, PartialEq)]
pub(super) struct FioResult {
    pub bytes_per_sec: f64,
    pub iops: f64,
}

/// One fio job: the same pattern as one benchmark point.
pub(super) struct FioJob<'a> {
    pub method: Method,
    pub workload: Workload,
    pub block: usize,
    pub threads: usize,
    pub file_bytes: u64,
    pub dir: &'a Path,
    pub warmup: Duration,
    pub duration: Duration,
    pub include_sync: bool,
    pub iodepth: usize,
}

/// fio's version, or a clear error if fio is not installed.
pub(super) fn check_installed() -> Result<String> {
    match Command::new("fio").arg("--version").output() {
        Ok(o) if o.status.success() => Ok(String::from_utf8_lossy(&o.stdout).trim().to_string()),
        Ok(o) => fail(format!(
            "--vs-fio: `fio --version` failed: {}",
            String::from_utf8_lossy(&o.stderr).trim()
        )),
        Err(e) if e.kind() == io::ErrorKind::NotFound => fail(
            "--vs-fio needs fio, which is not installed or not on PATH \
             (Debian/Ubuntu: apt-get install fio; Fedora: dnf install fio)",
        ),
        Err(e) => fail(format!("--vs-fio: cannot run fio: {e}")),
    }
}

/// fio's command-line arguments for `job`, or why fio has no equivalent.
pub(super) fn args(job: &FioJob<'_>) -> Result<Vec<String>, &'static str> {
    let engine: &[&str] = match job.method {
        Method::Write => &["--ioengine=psync"],
        Method::Direct => &["--ioengine=psync", "--direct=1"],
        Method::Uring => &["--ioengine=io_uring", "--direct=1"],
        Method::Mmap => &["--ioengine=mmap"],
        Method::Dsync => &["--ioengine=psync", "--fdatasync=1"],
        Method::MmapNt => {
            return Err("fio has no non-temporal-store engine (its mmap engine uses memcpy)")
        }
    };
    let rw = match job.workload {
        Workload::SeqWrite => "write",
        Workload::SeqRead => "read",
        Workload::RandWrite => "randwrite",
    };
    let ms = |d: Duration| d.as_millis().max(1);
    let mut a: Vec<String> = vec![
        "--output-format=json".into(),
        "--name=hotstore".into(),
        format!("--directory={}", job.dir.display()),
        format!("--filename_format=t{}-$jobnum", job.threads),
        format!("--numjobs={}", job.threads),
        "--group_reporting=1".into(),
        format!("--size={}", job.file_bytes),
        format!("--bs={}", job.block),
        format!("--rw={rw}"),
        "--time_based=1".into(),
        format!("--runtime={}ms", ms(job.duration)),
        format!("--ramp_time={}ms", ms(job.warmup)),
        "--invalidate=1".into(),
        "--norandommap=1".into(),
        "--randrepeat=0".into(),
        // Our writes reuse one random buffer; fio's default rewrites part of it per request.
        "--scramble_buffers=0".into(),
        format!(
            "--end_fsync={}",
            u8::from(job.include_sync && job.workload.writes())
        ),
    ];
    a.extend(engine.iter().map(|s| s.to_string()));
    if job.method == Method::Uring {
        a.push(format!("--iodepth={}", job.iodepth));
    }
    Ok(a)
}

/// Runs fio with `args`; the result or what went wrong.
pub(super) fn run(args: &[String], read: bool) -> Result<FioResult, String> {
    let out = Command::new("fio")
        .args(args)
        .output()
        .map_err(|e| format!("cannot run fio: {e}"))?;
    let stdout = String::from_utf8_lossy(&out.stdout);
    if !out.status.success() {
        let stderr = String::from_utf8_lossy(&out.stderr);
        let msg = stderr
            .lines()
            .chain(stdout.lines())
            .find(|l| l.contains("error") || l.contains("fio:"))
            .unwrap_or("(no message)");
        return Err(format!("fio failed ({}): {}", out.status, msg.trim()));
    }
    parse(&stdout, read)
}

/// Reads fio's JSON output (`group_reporting`: one job entry), skipping any text fio printed
/// before it.
pub(super) fn parse(text: &str, read: bool) -> Result<FioResult, String> {
    let start = text
        .find('{')
        .ok_or_else(|| "fio printed no JSON".to_string())?;
    let v: serde_json::Value = serde_json::from_str(&text[start..])
        .map_err(|e| format!("cannot parse fio's JSON: {e}"))?;
    let job = v
        .get("jobs")
        .and_then(|j| j.get(0))
        .ok_or_else(|| "fio's JSON has no jobs".to_string())?;
    if let Some(err) = job
        .get("error")
        .and_then(|e| e.as_i64())
        .filter(|e| *e != 0)
    {
        return Err(format!(
            "fio job failed: {}",
            io::Error::from_raw_os_error(err as i32)
        ));
    }
    let dir = if read { "read" } else { "write" };
    let side = job
        .get(dir)
        .ok_or_else(|| format!("fio's JSON has no `{dir}` section"))?;
    let num = |k: &str| {
        side.get(k)
            .and_then(|x| x.as_f64())
            .ok_or_else(|| format!("fio's JSON has no `{dir}.{k}`"))
    };
    Ok(FioResult {
        bytes_per_sec: num("bw_bytes")?,
        iops: num("iops")?,
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    fn job(method: Method, workload: Workload) -> FioJob<'static> {
        FioJob {
            method,
            workload,
            block: 4096,
            threads: 2,
            file_bytes: 1 << 20,
            dir: Path::new("/tmp/x"),
            warmup: Duration::from_millis(100),
            duration: Duration::from_millis(500),
            include_sync: true,
            iodepth: 32,
        }
    }

    #[test]
    fn arguments_name_the_same_files_and_engine() {
        let a = args(&job(Method::Uring, Workload::RandWrite)).unwrap();
        for want in [
            "--directory=/tmp/x",
            "--filename_format=t2-$jobnum",
            "--numjobs=2",
            "--size=1048576",
            "--bs=4096",
            "--rw=randwrite",
            "--runtime=500ms",
            "--ramp_time=100ms",
            "--end_fsync=1",
            "--ioengine=io_uring",
            "--direct=1",
            "--iodepth=32",
        ] {
            assert!(a.iter().any(|x| x == want), "{want} missing from {a:?}");
        }
        let r = args(&job(Method::Write, Workload::SeqRead)).unwrap();
        assert!(r.iter().any(|x| x == "--end_fsync=0"));
        assert!(r.iter().any(|x| x == "--ioengine=psync"));
        assert!(args(&job(Method::MmapNt, Workload::SeqWrite)).is_err());
    }

    #[test]
    fn json_is_parsed_after_any_preamble() {
        let text = r#"note: both iodepth >= 1 and synchronous I/O engine are selected
{"fio version":"fio-3.33","jobs":[{"jobname":"hotstore","error":0,
 "read":{"bw_bytes":0,"iops":0.0},"write":{"bw_bytes":1048576000,"iops":256000.5}}]}"#;
        let r = parse(text, false).unwrap();
        assert_eq!(r.bytes_per_sec, 1048576000.0);
        assert_eq!(r.iops, 256000.5);
        assert!(parse("no json here", false).is_err());
        assert!(parse(r#"{"jobs":[{"error":5,"write":{}}]}"#, false)
            .unwrap_err()
            .contains("fio job failed"));
    }
}
