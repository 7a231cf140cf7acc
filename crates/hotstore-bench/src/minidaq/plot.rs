//! PNG charts for `hotstore minidaq`.
//!
//! * [`plot_timeline`] (`--plot FILE.png`): throughput over time of one run,
//!   fragments/s on top and GB/s below, readout and collect as separate lines.
//! * [`plot_sweep`] (`--sweep fragment-size=...`): throughput against
//!   fragment size for one or more configurations, ops/s on the left and
//!   GB/s on the right, in the style of Figure 4 of the DAQDB paper.
//!
//! Drawn with the shared toolkit of `crate::plot` (fonts, PNG output, palette,
//! labels). Units: "GB" is 10^9 bytes and "KB" 10^3 bytes throughout.

use super::sampling::{merge_samples, Sample};
use crate::plot::{
    bytes_label, ensure_font, secs_label, si, trim_num, write_png, PlotError, FONT, LEGEND_AREA,
    LEGEND_LINE, PALETTE,
};
use plotters::coord::Shift;
use plotters::prelude::*;
use serde::{Deserialize, Serialize};
use std::path::Path;

const READOUT_COLOR: RGBColor = PALETTE[0];
const COLLECT_COLOR: RGBColor = PALETTE[1];
/// Nominal width of the smoothing bins in [`plot_timeline`].
pub const TIMELINE_BIN_SECS: f64 = 0.05;

/// Groups consecutive samples into time bins of `bin_secs` (by the
/// midpoint of each sample) and merges each group.
fn bin_samples(samples: &[Sample], bin_secs: f64) -> Vec<Sample> {
    let bin_of = |s: &Sample| ((s.t_secs - s.interval_secs / 2.0) / bin_secs).floor() as i64;
    samples
        .chunk_by(|a, b| bin_of(a) == bin_of(b))
        .filter_map(merge_samples)
        .collect()
}

/// One quantity of the timeline (e.g. readout fragments/s) ready to draw.
struct TimelineLine {
    name: &'static str,
    color: RGBColor,
    faint: Vec<(f64, f64)>,
    binned: Vec<(f64, f64)>,
}

impl TimelineLine {
    fn new(
        name: &'static str,
        color: RGBColor,
        faint: &[Sample],
        binned: &[Sample],
        rate: impl Fn(&Sample) -> f64,
    ) -> Self {
        let points = |v: &[Sample]| -> Vec<(f64, f64)> {
            v.iter()
                .map(|s| (s.t_secs - s.interval_secs / 2.0, rate(s)))
                .collect()
        };
        TimelineLine {
            name,
            color,
            faint: points(faint),
            binned: points(binned),
        }
    }
}

/// The headline figures drawn across a timeline as dashed lines: the readout medians the
/// text reports, and the machine's limit (name, bytes/s) where it was measured.
#[derive(Debug, Clone, Default)]
pub struct TimelineMarks {
    /// Median readout fragments/s.
    pub readout_median_ops: f64,
    /// Median readout bytes/s.
    pub readout_median_bytes: f64,
    /// The limit the ratio is taken against.
    pub limit: Option<(String, f64)>,
}

/// Bytes per GiB: the plots use the binary units of the text report.
const GIB: f64 = (1u64 << 30) as f64;

/// Plots throughput over time of one run as a PNG (1200x800).
///
/// Top panel: fragments/s, bottom panel: GB/s; each with a readout and a
/// collect line. x is the time in seconds since sampling started.
///
/// Smoothing: raw samples (typically 5 ms) are very noisy, so each panel
/// shows them as thin, faint lines and on top of them a solid line of the
/// rates over fixed time bins of [`TIMELINE_BIN_SECS`] (50 ms; for runs
/// longer than 50 s the bins are widened to `duration / 1000` so at most
/// about 1000 points are drawn). A bin's rate is its total count divided by
/// its total time, and points are placed at interval midpoints. For runs
/// with more than about 4000 samples, the faint lines show fine bins of
/// `duration / 4000` instead of raw samples (the legend says which). If the
/// samples are already as coarse as the bins, only the bin lines are
/// drawn. The y axis starts at 0 and is scaled to the bin lines and the
/// 99th percentile of the faint lines; rarer spikes are clipped.
///
/// Samples with `interval_secs == 0` are ignored; if none remain, returns
/// [`PlotError::NoData`].
pub fn plot_timeline(
    path: &Path,
    title: &str,
    samples: &[Sample],
    marks: &TimelineMarks,
) -> Result<(), PlotError> {
    let samples: Vec<Sample> = samples
        .iter()
        .filter(|s| s.interval_secs > 0.0)
        .copied()
        .collect();
    let Some(last) = samples.last() else {
        return Err(PlotError::NoData(
            "no throughput samples with a non-zero interval".into(),
        ));
    };
    ensure_font()?;

    let duration = last.t_secs.max(samples[0].start_secs() + 1e-6);
    let bin_secs = TIMELINE_BIN_SECS.max(duration / 1000.0);
    let binned = bin_samples(&samples, bin_secs);
    let mut intervals: Vec<f64> = samples.iter().map(|s| s.interval_secs).collect();
    intervals.sort_by(f64::total_cmp);
    let typical_interval = intervals[intervals.len() / 2];
    // The faint lines: raw samples, or for very long runs (more than about
    // 4000 samples, i.e. several per pixel) fine bins of duration / 4000.
    let fine_secs = duration / 4000.0;
    let (faint, faint_desc) = if fine_secs > 1.5 * typical_interval {
        let fine = bin_samples(&samples, fine_secs);
        (fine, format!("{} bins", secs_label(fine_secs)))
    } else {
        let desc = format!("{} samples", secs_label(typical_interval));
        (samples.clone(), desc)
    };
    // Not worth drawing if barely finer than the bins.
    let faint: &[Sample] = if faint.len() >= 2 * binned.len() {
        &faint
    } else {
        &[]
    };
    let labels = (format!("{} bins", secs_label(bin_secs)), faint_desc);
    let x_range = samples[0].start_secs().min(0.0)..duration;

    let root = BitMapBackend::new(path, (1200, 800)).into_drawing_area();
    root.fill(&WHITE)?;
    let root = root.titled(title, (FONT, 26).into_font().style(FontStyle::Bold))?;
    let (top, bottom) = root.split_vertically(root.dim_in_pixel().1 / 2);

    let ops = [
        TimelineLine::new(
            "readout",
            READOUT_COLOR,
            faint,
            &binned,
            Sample::readout_ops_per_sec,
        ),
        TimelineLine::new(
            "collect",
            COLLECT_COLOR,
            faint,
            &binned,
            Sample::collect_ops_per_sec,
        ),
    ];
    let ops_marks = [HLine {
        label: format!("readout median {}/s", si(marks.readout_median_ops)),
        value: marks.readout_median_ops,
        color: READOUT_COLOR,
    }];
    timeline_panel(
        &top,
        x_range.clone(),
        "fragments/s",
        &ops,
        &labels,
        &ops_marks,
        |v| si(*v),
    )?;

    let mut bytes_marks = vec![HLine {
        label: format!(
            "readout median {} GiB/s",
            trim_num(marks.readout_median_bytes / GIB)
        ),
        value: marks.readout_median_bytes / GIB,
        color: READOUT_COLOR,
    }];
    if let Some((name, limit)) = &marks.limit {
        bytes_marks.push(HLine {
            label: format!("limit: {name}, {} GiB/s", trim_num(limit / GIB)),
            value: limit / GIB,
            color: BLACK,
        });
    }
    let gbps = |f: fn(&Sample) -> f64| move |s: &Sample| f(s) / GIB;
    let bytes = [
        TimelineLine::new(
            "readout",
            READOUT_COLOR,
            faint,
            &binned,
            gbps(Sample::readout_bytes_per_sec),
        ),
        TimelineLine::new(
            "collect",
            COLLECT_COLOR,
            faint,
            &binned,
            gbps(Sample::collect_bytes_per_sec),
        ),
    ];
    timeline_panel(
        &bottom,
        x_range,
        "GiB/s",
        &bytes,
        &labels,
        &bytes_marks,
        |v| trim_num(*v),
    )?;

    write_png(&root, path)
}

/// A dashed horizontal line across a panel, with its legend entry.
struct HLine {
    label: String,
    value: f64,
    color: RGBColor,
}

/// Draws one timeline panel. `labels` = (bin line suffix, raw line suffix); `marks` are drawn
/// as dashed horizontal lines.
fn timeline_panel(
    area: &DrawingArea<BitMapBackend<'_>, Shift>,
    x_range: std::ops::Range<f64>,
    y_desc: &str,
    lines: &[TimelineLine],
    labels: &(String, String),
    marks: &[HLine],
    y_fmt: impl Fn(&f64) -> String,
) -> Result<(), PlotError> {
    let y_max = lines
        .iter()
        .map(|l| {
            let bin_max = l.binned.iter().map(|p| p.1).fold(0.0, f64::max);
            let mut faint: Vec<f64> = l.faint.iter().map(|p| p.1).collect();
            faint.sort_by(f64::total_cmp);
            let faint_p99 = faint.get(faint.len() * 99 / 100).copied().unwrap_or(0.0);
            bin_max.max(faint_p99)
        })
        .fold(0.0, f64::max);
    let y_max = marks
        .iter()
        .map(|m| m.value)
        .filter(|v| v.is_finite())
        .fold(y_max, f64::max);
    // Headroom above the data for the legend (it covered the lines at the top).
    let y_max = if y_max > 0.0 { y_max * 1.75 } else { 1.0 };

    let mut chart = ChartBuilder::on(area)
        .margin(10)
        .margin_right(25)
        .x_label_area_size(45)
        .y_label_area_size(80)
        .build_cartesian_2d(x_range, 0.0..y_max)?;
    chart
        .configure_mesh()
        .x_desc("time [s]")
        .y_desc(y_desc)
        .x_label_formatter(&|v| trim_num(*v))
        .y_label_formatter(&y_fmt)
        .axis_desc_style((FONT, 18))
        .label_style((FONT, 15))
        .draw()?;

    for l in lines.iter().filter(|l| !l.faint.is_empty()) {
        let style = l.color.mix(0.3).stroke_width(1);
        // Slightly stronger in the legend, where a single faint line is hard to see.
        let legend_style = l.color.mix(0.5).stroke_width(2);
        chart
            .draw_series(LineSeries::new(l.faint.iter().copied(), style))?
            .label(format!("{} ({})", l.name, labels.1))
            .legend(move |(x, y)| PathElement::new([(x, y), (x + LEGEND_LINE, y)], legend_style));
    }
    for l in lines {
        let style = l.color.stroke_width(2);
        chart
            .draw_series(LineSeries::new(l.binned.iter().copied(), style))?
            .label(format!("{} ({})", l.name, labels.0))
            .legend(move |(x, y)| PathElement::new([(x, y), (x + LEGEND_LINE, y)], style));
    }
    let x_span = chart.x_range();
    for m in marks
        .iter()
        .filter(|m| m.value.is_finite() && m.value > 0.0)
    {
        let style = m.color.stroke_width(1);
        let dashes = DashedLineSeries::new(
            [(x_span.start, m.value), (x_span.end, m.value)],
            8,
            6,
            style,
        );
        chart
            .draw_series(dashes)?
            .label(m.label.clone())
            .legend(move |(x, y)| PathElement::new([(x, y), (x + LEGEND_LINE, y)], style));
    }
    chart
        .configure_series_labels()
        .position(SeriesLabelPosition::UpperRight)
        .background_style(WHITE.mix(0.85))
        .border_style(BLACK.mix(0.5))
        .legend_area_size(LEGEND_AREA)
        .label_font((FONT, 15))
        .draw()?;
    Ok(())
}

/// Throughput of one run of a sweep, for [`plot_sweep`].
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct SweepPoint {
    /// Fragment size in bytes (x axis; must be > 0 for the log scale).
    pub fragment_size: u64,
    /// Readout fragments per second.
    pub readout_ops_per_sec: f64,
    /// Readout payload bytes per second.
    pub readout_bytes_per_sec: f64,
    /// Collected fragments per second.
    pub collect_ops_per_sec: f64,
    /// Collected payload bytes per second.
    pub collect_bytes_per_sec: f64,
    /// Series this point belongs to, e.g. "1 readout + 1 collector".
    pub label: String,
}

/// Points of one sweep series, sorted by fragment size.
struct SweepSeries<'a> {
    label: &'a str,
    color: RGBColor,
    points: Vec<&'a SweepPoint>,
}

/// Plots a fragment-size sweep as a PNG (1600x650) with two panels side by
/// side, like Figure 4 of the DAQDB paper.
///
/// * Left: fragments/s against fragment size, both axes logarithmic (at a
///   fixed bandwidth, ops/s falls in proportion to the fragment size, which
///   is a straight line on log-log axes). Points with a rate <= 0 cannot be
///   shown on a log axis and are left out.
/// * Right: GB/s against fragment size, logarithmic x, linear y from 0, plus
///   a dashed horizontal "memcpy limit" line if `limit_bytes_per_sec` is given.
///
/// Points are grouped into series by `label` (in order of first
/// appearance) and sorted by fragment size. Each series gets one colour:
/// readout is a solid line with filled circles, collect a dashed line with
/// hollow triangles.
///
/// Errors: [`PlotError::NoData`] for no points, [`PlotError::InvalidData`]
/// for a zero fragment size.
pub fn plot_sweep(
    path: &Path,
    title: &str,
    points: &[SweepPoint],
    limit_bytes_per_sec: Option<f64>,
) -> Result<(), PlotError> {
    if points.is_empty() {
        return Err(PlotError::NoData("no sweep points".into()));
    }
    if points.iter().any(|p| p.fragment_size == 0) {
        return Err(PlotError::InvalidData(
            "fragment size 0 cannot be shown on a log axis".into(),
        ));
    }
    ensure_font()?;

    let mut series: Vec<SweepSeries<'_>> = Vec::new();
    for p in points {
        match series.iter_mut().find(|s| s.label == p.label) {
            Some(s) => s.points.push(p),
            None => series.push(SweepSeries {
                label: &p.label,
                color: PALETTE[series.len() % PALETTE.len()],
                points: vec![p],
            }),
        }
    }
    for s in &mut series {
        s.points.sort_by_key(|p| p.fragment_size);
    }

    let min_size = points.iter().map(|p| p.fragment_size).min().unwrap_or(1) as f64;
    let max_size = points.iter().map(|p| p.fragment_size).max().unwrap_or(1) as f64;
    // Half a decade (or a whole one for a single size) of margin.
    let pad = if min_size == max_size {
        10.0
    } else {
        10f64.sqrt()
    };
    let x_range = (min_size / pad)..(max_size * pad);

    let root = BitMapBackend::new(path, (1600, 650)).into_drawing_area();
    root.fill(&WHITE)?;
    let root = root.titled(title, (FONT, 26).into_font().style(FontStyle::Bold))?;
    let (left, right) = root.split_horizontally(root.dim_in_pixel().0 / 2);

    // Left panel: ops/s, log-log.
    let positive_ops = || {
        points
            .iter()
            .flat_map(|p| [p.readout_ops_per_sec, p.collect_ops_per_sec])
            .filter(|v| *v > 0.0 && v.is_finite())
    };
    let (y_lo, y_hi) = match (
        positive_ops().fold(f64::INFINITY, f64::min),
        positive_ops().fold(0.0, f64::max),
    ) {
        (lo, hi) if hi > 0.0 => (lo / 2.0, hi * 2.0),
        _ => (1.0, 10.0),
    };
    let mut chart = sweep_chart(&left)
        .build_cartesian_2d(x_range.clone().log_scale(), (y_lo..y_hi).log_scale())?;
    chart
        .configure_mesh()
        .x_desc("fragment size")
        .y_desc("fragments/s")
        .x_label_formatter(&|v| bytes_label(*v))
        .y_label_formatter(&|v| si(*v))
        .axis_desc_style((FONT, 18))
        .label_style((FONT, 15))
        .draw()?;
    for s in &series {
        let pts = |f: fn(&SweepPoint) -> f64| -> Vec<(f64, f64)> {
            s.points
                .iter()
                .map(|p| (p.fragment_size as f64, f(p)))
                .filter(|(_, v)| *v > 0.0 && v.is_finite())
                .collect()
        };
        draw_sweep_series(
            &mut chart,
            s,
            pts(|p| p.readout_ops_per_sec),
            pts(|p| p.collect_ops_per_sec),
        )?;
    }
    sweep_legend(&mut chart, SeriesLabelPosition::UpperRight)?;

    // Right panel: GB/s, log x, linear y.
    let limit_gbps = limit_bytes_per_sec
        .filter(|l| *l > 0.0 && l.is_finite())
        .map(|l| l / 1e9);
    let y_hi = points
        .iter()
        .flat_map(|p| [p.readout_bytes_per_sec, p.collect_bytes_per_sec])
        .filter(|v| v.is_finite())
        .map(|v| v / 1e9)
        .chain(limit_gbps)
        .fold(0.0, f64::max);
    let y_hi = if y_hi > 0.0 { y_hi * 1.15 } else { 1.0 };
    let mut chart =
        sweep_chart(&right).build_cartesian_2d(x_range.clone().log_scale(), 0.0..y_hi)?;
    chart
        .configure_mesh()
        .x_desc("fragment size")
        .y_desc("GB/s")
        .x_label_formatter(&|v| bytes_label(*v))
        .y_label_formatter(&|v| trim_num(*v))
        .axis_desc_style((FONT, 18))
        .label_style((FONT, 15))
        .draw()?;
    if let Some(limit) = limit_gbps {
        let style = BLACK.stroke_width(2);
        chart
            .draw_series(DashedLineSeries::new(
                [(x_range.start, limit), (x_range.end, limit)],
                10,
                6,
                style,
            ))?
            .label("memcpy limit")
            .legend(move |(x, y)| {
                EmptyElement::at((x, y))
                    + PathElement::new([(0, 0), (10, 0)], style)
                    + PathElement::new([(20, 0), (LEGEND_LINE, 0)], style)
            });
    }
    for s in &series {
        let pts = |f: fn(&SweepPoint) -> f64| -> Vec<(f64, f64)> {
            s.points
                .iter()
                .map(|p| (p.fragment_size as f64, f(p) / 1e9))
                .filter(|(_, v)| v.is_finite())
                .collect()
        };
        draw_sweep_series(
            &mut chart,
            s,
            pts(|p| p.readout_bytes_per_sec),
            pts(|p| p.collect_bytes_per_sec),
        )?;
    }
    sweep_legend(&mut chart, SeriesLabelPosition::LowerRight)?;

    write_png(&root, path)
}

fn sweep_chart<'a, 'b>(
    area: &'a DrawingArea<BitMapBackend<'b>, Shift>,
) -> ChartBuilder<'a, 'b, BitMapBackend<'b>> {
    let mut builder = ChartBuilder::on(area);
    builder
        .margin(10)
        .margin_right(30)
        .x_label_area_size(45)
        .y_label_area_size(75);
    builder
}

/// Draws the readout (solid, filled circles) and collect (dashed, hollow
/// triangles) lines of one sweep series, with legend entries.
fn draw_sweep_series<'a, 'b: 'a, X, Y>(
    chart: &mut ChartContext<'a, BitMapBackend<'b>, Cartesian2d<X, Y>>,
    s: &SweepSeries<'_>,
    readout: Vec<(f64, f64)>,
    collect: Vec<(f64, f64)>,
) -> Result<(), PlotError>
where
    X: Ranged<ValueType = f64>,
    Y: Ranged<ValueType = f64>,
{
    let color = s.color;
    let solid = color.stroke_width(2);
    chart
        .draw_series(LineSeries::new(readout.iter().copied(), solid))?
        .label(format!("{} readout", s.label))
        .legend(move |(x, y)| {
            EmptyElement::at((x, y))
                + PathElement::new([(0, 0), (LEGEND_LINE, 0)], solid)
                + Circle::new((LEGEND_LINE / 2, 0), 4, color.filled())
        });
    chart.draw_series(readout.iter().map(|&p| Circle::new(p, 4, color.filled())))?;

    chart
        .draw_series(DashedLineSeries::new(collect.iter().copied(), 8, 5, solid))?
        .label(format!("{} collect", s.label))
        .legend(move |(x, y)| {
            EmptyElement::at((x, y))
                + PathElement::new([(0, 0), (8, 0)], solid)
                + PathElement::new([(LEGEND_LINE - 8, 0), (LEGEND_LINE, 0)], solid)
                + TriangleMarker::new((LEGEND_LINE / 2, 0), 6, solid)
        });
    chart.draw_series(collect.iter().map(|&p| TriangleMarker::new(p, 6, solid)))?;
    Ok(())
}

fn sweep_legend<'a, 'b: 'a, X, Y>(
    chart: &mut ChartContext<'a, BitMapBackend<'b>, Cartesian2d<X, Y>>,
    position: SeriesLabelPosition,
) -> Result<(), PlotError>
where
    X: Ranged<ValueType = f64>,
    Y: Ranged<ValueType = f64>,
{
    chart
        .configure_series_labels()
        .position(position)
        .background_style(WHITE.mix(0.85))
        .border_style(BLACK.mix(0.5))
        .legend_area_size(LEGEND_AREA)
        .label_font((FONT, 15))
        .draw()?;
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::path::PathBuf;

    const PNG_SIGNATURE: [u8; 8] = [0x89, b'P', b'N', b'G', 0x0d, 0x0a, 0x1a, 0x0a];

    fn temp_png(name: &str) -> PathBuf {
        std::env::temp_dir().join(format!("minidaq-plot-{}-{name}", std::process::id()))
    }

    fn assert_png(path: &Path) {
        let bytes = std::fs::read(path).unwrap();
        assert!(bytes.len() > 1000, "PNG too small: {} bytes", bytes.len());
        assert_eq!(bytes[..8], PNG_SIGNATURE);
        std::fs::remove_file(path).unwrap();
    }

    /// 3 s of 5 ms samples: ramp-up over 0.3 s, then ~2M fragments/s of
    /// 1 KB with deterministic jitter; collect trails readout slightly.
    fn synthetic_samples() -> Vec<Sample> {
        let dt = 0.005;
        let mut seed = 0x2545_f491_4f6c_dd1d_u64;
        (1..=600)
            .map(|i| {
                seed ^= seed << 13;
                seed ^= seed >> 7;
                seed ^= seed << 17;
                let t = i as f64 * dt;
                let ramp = (t / 0.3).min(1.0);
                let jitter = 0.75 + (seed % 1000) as f64 / 2000.0;
                let dip = if (1.5..1.7).contains(&t) { 0.5 } else { 1.0 };
                let ro = (2e6 * dt * ramp * jitter * dip) as u64;
                let co = (ro as f64 * 0.97) as u64;
                Sample {
                    t_secs: t,
                    interval_secs: dt,
                    readout_ops: ro,
                    readout_bytes: ro * 1000,
                    collect_ops: co,
                    collect_bytes: co * 1000,
                    collect_events: co / 10,
                    backlog_events: 5,
                }
            })
            .collect()
    }

    /// Two configurations over fragment sizes 100 B .. 100 KB.
    fn synthetic_sweep() -> Vec<SweepPoint> {
        let mut points = Vec::new();
        for (label, scale) in [
            ("1 readout + 1 collector", 1.0),
            ("2 readout + 2 collector", 1.7),
        ] {
            for size in [100u64, 1000, 10_000, 100_000] {
                // Op-bound for small fragments, bandwidth-bound for big ones.
                let ops = scale / (1.0 / 3e6 + size as f64 / 6e9);
                let collect_ops = ops * 0.95;
                points.push(SweepPoint {
                    fragment_size: size,
                    readout_ops_per_sec: ops,
                    readout_bytes_per_sec: ops * size as f64,
                    collect_ops_per_sec: collect_ops,
                    collect_bytes_per_sec: collect_ops * size as f64,
                    label: label.into(),
                });
            }
        }
        points
    }

    #[test]
    fn timeline_png() {
        let path = temp_png("timeline.png");
        plot_timeline(
            &path,
            "minidaq test",
            &synthetic_samples(),
            &TimelineMarks::default(),
        )
        .unwrap();
        assert_png(&path);
    }

    #[test]
    fn timeline_single_sample() {
        let path = temp_png("timeline1.png");
        let s = synthetic_samples()[100];
        plot_timeline(&path, "one sample", &[s], &TimelineMarks::default()).unwrap();
        assert_png(&path);
    }

    #[test]
    fn sweep_png() {
        let path = temp_png("sweep.png");
        plot_sweep(&path, "sweep test", &synthetic_sweep(), Some(10e9)).unwrap();
        assert_png(&path);
    }

    #[test]
    fn sweep_single_point_and_zero_rates() {
        let path = temp_png("sweep1.png");
        let mut p = synthetic_sweep().remove(0);
        p.readout_ops_per_sec = 0.0;
        p.collect_ops_per_sec = 0.0;
        plot_sweep(&path, "degenerate", &[p], None).unwrap();
        assert_png(&path);
    }

    #[test]
    fn empty_inputs_are_errors() {
        let path = temp_png("never-written.png");
        let err = plot_timeline(&path, "t", &[], &TimelineMarks::default()).unwrap_err();
        assert!(matches!(err, PlotError::NoData(_)), "{err:?}");
        assert!(err.to_string().starts_with("nothing to plot"), "{err}");

        let zero = Sample {
            t_secs: 1.0,
            ..Sample::default()
        };
        assert!(matches!(
            plot_timeline(&path, "t", &[zero], &TimelineMarks::default()),
            Err(PlotError::NoData(_))
        ));

        let err = plot_sweep(&path, "s", &[], None).unwrap_err();
        assert!(matches!(err, PlotError::NoData(_)), "{err:?}");

        let mut p = synthetic_sweep().remove(0);
        p.fragment_size = 0;
        let err = plot_sweep(&path, "s", &[p], None).unwrap_err();
        assert!(matches!(err, PlotError::InvalidData(_)), "{err:?}");
        assert!(!path.exists());
    }

    #[test]
    fn unwritable_path_is_an_error() {
        let path = Path::new("/nonexistent-dir/x/plot.png");
        let err =
            plot_timeline(path, "t", &synthetic_samples(), &TimelineMarks::default()).unwrap_err();
        assert!(matches!(err, PlotError::Drawing(_)), "{err:?}");
        eprintln!("unwritable path: {err}");
    }

    #[test]
    fn binning_merges_by_time() {
        let samples = synthetic_samples();
        let bins = bin_samples(&samples, 0.05);
        assert_eq!(bins.len(), 60);
        let total: u64 = bins.iter().map(|b| b.readout_ops).sum();
        assert_eq!(total, samples.iter().map(|s| s.readout_ops).sum::<u64>());
    }
}
