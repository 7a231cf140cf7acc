//! PNG figures in the style of the papers: throughput against threads per block size (DUNE
//! Figs. 3 and 5), request rate against block size per thread count (Fig. 2), one panel per
//! method; and the DRAM backlog over time for several output rates (Fig. 6).
//!
//! Drawn with the shared toolkit of `crate::plot`, like the minidaq charts (the same
//! fonts, palette and labels). Units: GB is 10^9 bytes.

use super::report::PointResult;
use crate::plot::{ensure_font, si, write_png, PlotError, FONT, PALETTE};
use crate::util::exact_bytes;
use plotters::coord::Shift;
use plotters::prelude::*;
use std::path::Path;

const PANEL_W: u32 = 520;
const PANEL_H: u32 = 380;
const TITLE_H: u32 = 44;

/// The methods (in order of first appearance) that have measured points.
fn methods(points: &[&PointResult]) -> Vec<&'static str> {
    let mut m: Vec<&'static str> = Vec::new();
    for p in points {
        if !m.contains(&p.method) {
            m.push(p.method);
        }
    }
    m
}

/// Splits the image into one area per method, 3 per row.
type Area<'a> = DrawingArea<BitMapBackend<'a>, Shift>;

fn panels<'a>(
    path: &'a Path,
    title: &str,
    n: usize,
) -> Result<(Area<'a>, Vec<Area<'a>>), PlotError> {
    let cols = n.clamp(1, 3);
    let rows = n.div_ceil(cols).max(1);
    let root = BitMapBackend::new(
        path,
        (PANEL_W * cols as u32, PANEL_H * rows as u32 + TITLE_H),
    )
    .into_drawing_area();
    root.fill(&WHITE)?;
    let body = root.titled(title, (FONT, 24).into_font())?;
    let areas = body.split_evenly((rows, cols));
    Ok((root, areas))
}

/// Throughput (GB/s) against threads, one series per block size, one panel per method.
pub(super) fn plot_threads(
    path: &Path,
    title: &str,
    points: &[&PointResult],
) -> Result<(), PlotError> {
    let points: Vec<&PointResult> = points.iter().copied().filter(|p| p.ok()).collect();
    if points.is_empty() {
        return Err(PlotError::NoData("no measured points".into()));
    }
    ensure_font()?;
    let ms = methods(&points);
    let (root, areas) = panels(path, title, ms.len())?;
    let max_t = points.iter().map(|p| p.threads).max().unwrap_or(1) as f64;
    // One colour per block size across all panels.
    let mut all_blocks: Vec<u64> = points.iter().map(|p| p.block_size).collect();
    all_blocks.sort_unstable();
    all_blocks.dedup();
    for (method, area) in ms.iter().zip(&areas) {
        let mine: Vec<&PointResult> = points
            .iter()
            .copied()
            .filter(|p| p.method == *method)
            .collect();
        let y_hi = mine
            .iter()
            .filter_map(|p| p.bytes_per_sec)
            .fold(0.0, f64::max)
            / 1e9
            * 1.15;
        let mut chart = ChartBuilder::on(area)
            .caption(*method, (FONT, 20))
            .margin(8)
            .margin_right(16)
            .x_label_area_size(40)
            .y_label_area_size(60)
            .build_cartesian_2d(0.5..max_t + 0.5, 0.0..y_hi.max(1e-3))?;
        chart
            .configure_mesh()
            .x_desc("threads")
            .y_desc("GB/s")
            .x_labels(max_t as usize + 1)
            .x_label_formatter(&|v| format!("{v:.0}"))
            .y_label_formatter(&|v| si(*v))
            .axis_desc_style((FONT, 15))
            .label_style((FONT, 13))
            .draw()?;
        let mut blocks: Vec<u64> = mine.iter().map(|p| p.block_size).collect();
        blocks.sort_unstable();
        blocks.dedup();
        for b in &blocks {
            let i = all_blocks.iter().position(|x| x == b).unwrap_or(0);
            let color = PALETTE[i % PALETTE.len()];
            let mut pts: Vec<(f64, f64)> = mine
                .iter()
                .filter(|p| p.block_size == *b)
                .filter_map(|p| Some((p.threads as f64, p.bytes_per_sec? / 1e9)))
                .collect();
            pts.sort_by(|a, b| a.0.total_cmp(&b.0));
            chart
                .draw_series(LineSeries::new(pts.iter().copied(), color.stroke_width(2)))?
                .label(exact_bytes(*b))
                .legend(move |(x, y)| {
                    PathElement::new([(x, y), (x + 20, y)], color.stroke_width(2))
                });
            chart.draw_series(pts.iter().map(|&p| Circle::new(p, 4, color.filled())))?;
        }
        legend(&mut chart)?;
    }
    write_png(&root, path)
}

/// Request rate (requests/s, log) against block size (log), one series per thread count,
/// one panel per method.
pub(super) fn plot_blocks(
    path: &Path,
    title: &str,
    points: &[&PointResult],
) -> Result<(), PlotError> {
    let points: Vec<&PointResult> = points
        .iter()
        .copied()
        .filter(|p| p.ok() && p.iops.is_some_and(|v| v > 0.0))
        .collect();
    if points.is_empty() {
        return Err(PlotError::NoData("no measured points".into()));
    }
    ensure_font()?;
    let ms = methods(&points);
    let (root, areas) = panels(path, title, ms.len())?;
    let b_lo = points.iter().map(|p| p.block_size).min().unwrap_or(1) as f64 / 1.6;
    let b_hi = points.iter().map(|p| p.block_size).max().unwrap_or(1) as f64 * 1.6;
    // One colour per thread count across all panels.
    let mut all_threads: Vec<usize> = points.iter().map(|p| p.threads).collect();
    all_threads.sort_unstable();
    all_threads.dedup();
    for (method, area) in ms.iter().zip(&areas) {
        let mine: Vec<&PointResult> = points
            .iter()
            .copied()
            .filter(|p| p.method == *method)
            .collect();
        let rates = || mine.iter().filter_map(|p| p.iops);
        let lo = rates().fold(f64::INFINITY, f64::min) / 2.0;
        let hi = rates().fold(0.0, f64::max) * 2.0;
        let mut chart = ChartBuilder::on(area)
            .caption(*method, (FONT, 20))
            .margin(8)
            .margin_right(16)
            .x_label_area_size(40)
            .y_label_area_size(60)
            .build_cartesian_2d((b_lo..b_hi).log_scale(), (lo..hi).log_scale())?;
        chart
            .configure_mesh()
            .x_desc("block size")
            .y_desc("requests/s")
            .x_label_formatter(&|v| format!("{}B", si(*v)))
            .y_label_formatter(&|v| si(*v))
            .axis_desc_style((FONT, 15))
            .label_style((FONT, 13))
            .draw()?;
        let mut threads: Vec<usize> = mine.iter().map(|p| p.threads).collect();
        threads.sort_unstable();
        threads.dedup();
        for t in &threads {
            let i = all_threads.iter().position(|x| x == t).unwrap_or(0);
            let color = PALETTE[i % PALETTE.len()];
            let mut pts: Vec<(f64, f64)> = mine
                .iter()
                .filter(|p| p.threads == *t)
                .filter_map(|p| Some((p.block_size as f64, p.iops?)))
                .collect();
            pts.sort_by(|a, b| a.0.total_cmp(&b.0));
            chart
                .draw_series(LineSeries::new(pts.iter().copied(), color.stroke_width(2)))?
                .label(format!("{t} thread(s)"))
                .legend(move |(x, y)| {
                    PathElement::new([(x, y), (x + 20, y)], color.stroke_width(2))
                });
            chart.draw_series(pts.iter().map(|&p| Circle::new(p, 4, color.filled())))?;
        }
        legend(&mut chart)?;
    }
    write_png(&root, path)
}

fn legend<'a, 'b: 'a, X, Y>(
    chart: &mut ChartContext<'a, BitMapBackend<'b>, Cartesian2d<X, Y>>,
) -> Result<(), PlotError>
where
    X: Ranged,
    Y: Ranged,
{
    chart
        .configure_series_labels()
        .position(SeriesLabelPosition::UpperRight)
        .background_style(WHITE.mix(0.85))
        .border_style(BLACK.mix(0.5))
        .label_font((FONT, 13))
        .draw()?;
    Ok(())
}

/// One output rate of the backlog figure.
pub(super) struct BacklogLine {
    pub label: String,
    /// (seconds, bytes) points.
    pub points: Vec<(f64, f64)>,
}

/// Extra DRAM (GB) against recording time, one line per output rate, with a dashed vertical
/// line at the recording duration (DUNE Fig. 6).
pub(super) fn plot_backlog(
    path: &Path,
    title: &str,
    lines: &[BacklogLine],
    duration_secs: f64,
) -> Result<(), PlotError> {
    if lines.is_empty() {
        return Err(PlotError::NoData("no output rates".into()));
    }
    ensure_font()?;
    let t_hi = lines
        .iter()
        .flat_map(|l| l.points.iter().map(|p| p.0))
        .fold(duration_secs, f64::max);
    let y_hi = lines
        .iter()
        .flat_map(|l| l.points.iter().map(|p| p.1 / 1e9))
        .fold(0.0, f64::max)
        * 1.1;
    let root = BitMapBackend::new(path, (900, 600)).into_drawing_area();
    root.fill(&WHITE)?;
    let mut chart = ChartBuilder::on(&root)
        .caption(title, (FONT, 22))
        .margin(12)
        .margin_right(24)
        .x_label_area_size(45)
        .y_label_area_size(75)
        .build_cartesian_2d(0.0..t_hi, 0.0..y_hi.max(1.0))?;
    chart
        .configure_mesh()
        .x_desc("recording time (s)")
        .y_desc("extra DRAM (GB)")
        .x_label_formatter(&|v| si(*v))
        .y_label_formatter(&|v| si(*v))
        .axis_desc_style((FONT, 17))
        .label_style((FONT, 14))
        .draw()?;
    for (i, l) in lines.iter().enumerate() {
        let color = PALETTE[i % PALETTE.len()];
        chart
            .draw_series(LineSeries::new(
                l.points.iter().map(|&(t, b)| (t, b / 1e9)),
                color.stroke_width(2),
            ))?
            .label(l.label.clone())
            .legend(move |(x, y)| PathElement::new([(x, y), (x + 20, y)], color.stroke_width(2)));
    }
    let style = BLACK.stroke_width(2);
    chart
        .draw_series(DashedLineSeries::new(
            [(duration_secs, 0.0), (duration_secs, y_hi.max(1.0))],
            10,
            6,
            style,
        ))?
        .label(format!("target {} s", si(duration_secs)))
        .legend(move |(x, y)| PathElement::new([(x, y), (x + 8, y)], style));
    chart
        .configure_series_labels()
        .position(SeriesLabelPosition::UpperLeft)
        .background_style(WHITE.mix(0.85))
        .border_style(BLACK.mix(0.5))
        .label_font((FONT, 14))
        .draw()?;
    write_png(&root, path)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn point(method: &'static str, block: u64, threads: usize, bps: f64) -> PointResult {
        PointResult {
            method,
            workload: "seq-write",
            block_size: block,
            threads,
            status: "ok",
            reason: None,
            io: String::new(),
            bytes_per_sec: Some(bps),
            iops: Some(bps / block as f64),
            includes_sync: true,
            iodepth: None,
            runs_bytes_per_sec: vec![bps],
            verified: true,
            fio_bytes_per_sec: None,
            ratio: None,
            fio_note: None,
        }
    }

    #[test]
    fn figures_are_pngs() {
        if ensure_font().is_err() {
            eprintln!("no font: skipping the drawing test");
            return;
        }
        let dir = tempfile::tempdir().unwrap();
        let pts = [
            point("write", 4096, 1, 1e9),
            point("write", 4096, 2, 1.5e9),
            point("write", 1 << 20, 1, 2e9),
            point("mmap", 256, 1, 3e9),
            point("mmap", 4096, 1, 4e9),
        ];
        let refs: Vec<&PointResult> = pts.iter().collect();
        let a = dir.path().join("t.png");
        plot_threads(&a, "threads", &refs).unwrap();
        let b = dir.path().join("b.png");
        plot_blocks(&b, "blocks", &refs).unwrap();
        let c = dir.path().join("c.png");
        let lines = [BacklogLine {
            label: "1 GB/s".into(),
            points: vec![(0.0, 0.0), (100.0, 9e11)],
        }];
        plot_backlog(&c, "backlog", &lines, 100.0).unwrap();
        for p in [a, b, c] {
            let bytes = std::fs::read(&p).unwrap();
            assert_eq!(&bytes[1..4], b"PNG");
        }
        assert!(plot_threads(&dir.path().join("x.png"), "t", &[]).is_err());
    }
}
