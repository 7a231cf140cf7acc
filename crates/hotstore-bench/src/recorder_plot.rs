//! `record --plot`: a recording run's input, stored and dropped rates and the DRAM backlog over
//! time (from the `hotstore-recorder` crate's samples), with the backlog model
//! (input - output) x time from each trigger, the configured bound and the triggers (DUNE
//! Fig. 6). Binary units (MiB), as in the text summary.

use crate::plot::{ensure_font, write_png, PlotError, FONT, PALETTE};
use hotstore_recorder::Sample;
use plotters::coord::types::RangedCoordf64;
use plotters::prelude::*;
use std::path::Path;

const IN_COLOR: RGBColor = PALETTE[0];
const OUT_COLOR: RGBColor = PALETTE[1];
const BACKLOG_COLOR: RGBColor = PALETTE[2];
const MODEL_COLOR: RGBColor = PALETTE[7];
const BOUND_COLOR: RGBColor = PALETTE[3];
const DROP_COLOR: RGBColor = RGBColor(200, 0, 0);
const MIB: f64 = (1u64 << 20) as f64;

/// Rates in MiB/s between consecutive samples, smoothed over `bin` samples.
fn rates(samples: &[Sample], bin: usize, f: impl Fn(&Sample) -> f64) -> Vec<(f64, f64)> {
    samples
        .windows(bin + 1)
        .step_by(bin)
        .map(|w| {
            let (a, b) = (&w[0], &w[bin]);
            let dt = (b.t_secs - a.t_secs).max(1e-9);
            (b.t_secs, (f(b) - f(a)).max(0.0) / dt / MIB)
        })
        .collect()
}

/// Bytes of the frames dropped so far, at the mean frame size offered so far.
fn dropped_bytes(s: &Sample) -> f64 {
    if s.frames_in == 0 {
        return 0.0;
    }
    s.frames_dropped as f64 * (s.bytes_in as f64 / s.frames_in as f64)
}

/// The legend, top right, over a light background.
fn draw_legend<'a, DB: DrawingBackend + 'a>(
    chart: &mut ChartContext<'a, DB, Cartesian2d<RangedCoordf64, RangedCoordf64>>,
) -> Result<(), DrawingAreaErrorKind<DB::ErrorType>> {
    chart
        .configure_series_labels()
        .position(SeriesLabelPosition::UpperRight)
        .background_style(WHITE.mix(0.85))
        .border_style(BLACK.mix(0.5))
        .label_font((FONT, 14))
        .draw()
}

/// Vertical lines at the triggers, the first one in the legend.
fn draw_triggers<DB: DrawingBackend>(
    chart: &mut ChartContext<'_, DB, Cartesian2d<RangedCoordf64, RangedCoordf64>>,
    triggers: &[f64],
    y_max: f64,
) -> Result<(), DrawingAreaErrorKind<DB::ErrorType>> {
    let style = BLACK.mix(0.5).stroke_width(2);
    for (i, &t) in triggers.iter().enumerate() {
        let drawn =
            chart.draw_series(DashedLineSeries::new([(t, 0.0), (t, y_max)], 6, 4, style))?;
        if i == 0 {
            drawn
                .label("trigger")
                .legend(move |(x, y)| PathElement::new([(x, y), (x + 25, y)], style));
        }
    }
    Ok(())
}

/// Draws the chart of a run's `samples` to the PNG `path`: `triggers` in seconds from the
/// start, the sustained `output_rate` and the `input_rate` (bytes/s) of the backlog model, and
/// the DRAM `bound` (bytes).
pub fn plot(
    path: &Path,
    samples: &[Sample],
    triggers: &[f64],
    output_rate: f64,
    input_rate: f64,
    bound: u64,
) -> Result<(), PlotError> {
    if samples.len() < 3 {
        return Err(PlotError::NoData("fewer than 3 samples".into()));
    }
    ensure_font()?;
    let root = BitMapBackend::new(path, (1100, 800)).into_drawing_area();
    root.fill(&WHITE)?;
    let (top, bottom) = root.split_vertically(400);
    let t_max = samples.last().map_or(1.0, |s| s.t_secs).max(0.1);
    let bin = 4;
    let input = rates(samples, bin, |s| s.bytes_in as f64);
    let output = rates(samples, bin, |s| s.bytes_out as f64);
    let dropped = rates(samples, bin, dropped_bytes);
    let any_drops = samples.last().is_some_and(|s| s.frames_dropped > 0);
    // Headroom above the lines for the legend.
    let y_max = input.iter().chain(&output).map(|p| p.1).fold(1.0, f64::max) * 1.5;
    let mut chart = ChartBuilder::on(&top)
        .caption("recorder: input, stored and dropped rate", (FONT, 20))
        .margin(10)
        .x_label_area_size(40)
        .y_label_area_size(70)
        .build_cartesian_2d(0.0..t_max, 0.0..y_max)?;
    chart
        .configure_mesh()
        .x_desc("time [s]")
        .y_desc("MiB/s")
        .y_label_formatter(&|v| format!("{v:.0}"))
        .label_style((FONT, 14))
        .axis_desc_style((FONT, 16))
        .draw()?;
    chart
        .draw_series(LineSeries::new(input, IN_COLOR.stroke_width(2)))?
        .label("input")
        .legend(|(x, y)| PathElement::new([(x, y), (x + 25, y)], IN_COLOR.stroke_width(2)));
    chart
        .draw_series(LineSeries::new(output, OUT_COLOR.stroke_width(2)))?
        .label("stored")
        .legend(|(x, y)| PathElement::new([(x, y), (x + 25, y)], OUT_COLOR.stroke_width(2)));
    if any_drops {
        chart
            .draw_series(LineSeries::new(dropped, DROP_COLOR.stroke_width(2)))?
            .label("dropped (DRAM bound reached)")
            .legend(|(x, y)| PathElement::new([(x, y), (x + 25, y)], DROP_COLOR.stroke_width(2)));
    }
    draw_triggers(&mut chart, triggers, y_max)?;
    draw_legend(&mut chart)?;

    let mb = |b: f64| b / MIB;
    let peak = samples.iter().map(|s| s.backlog_bytes).max().unwrap_or(0) as f64;
    let y_max = mb(peak.max(bound as f64 * 0.2)).max(mb(bound as f64).min(mb(peak) * 2.0)) * 1.5;
    let mut chart = ChartBuilder::on(&bottom)
        .caption(
            "DRAM backlog: measured, model (input - output) x t, bound",
            (FONT, 20),
        )
        .margin(10)
        .x_label_area_size(40)
        .y_label_area_size(70)
        .build_cartesian_2d(0.0..t_max, 0.0..y_max.max(1.0))?;
    chart
        .configure_mesh()
        .x_desc("time [s]")
        .y_desc("MiB")
        .y_label_formatter(&|v| format!("{v:.0}"))
        .label_style((FONT, 14))
        .axis_desc_style((FONT, 16))
        .draw()?;
    chart
        .draw_series(LineSeries::new(
            samples
                .iter()
                .map(|s| (s.t_secs, mb(s.backlog_bytes as f64))),
            BACKLOG_COLOR.stroke_width(2),
        ))?
        .label("backlog")
        .legend(|(x, y)| PathElement::new([(x, y), (x + 25, y)], BACKLOG_COLOR.stroke_width(2)));
    // The model from each trigger: the pre-trigger window is backlog at once, then it grows
    // at input - output until it reaches the bound.
    let growth = input_rate - output_rate;
    if let Some(&t0) = triggers.first() {
        let pre_bytes = samples
            .iter()
            .find(|s| s.t_secs >= t0)
            .map_or(0.0, |s| s.backlog_bytes as f64);
        let pts: Vec<(f64, f64)> = (0..=100)
            .map(|i| {
                let t = t0 + (t_max - t0) * i as f64 / 100.0;
                let b = (pre_bytes + growth * (t - t0)).clamp(0.0, bound as f64);
                (t, mb(b))
            })
            .collect();
        chart
            .draw_series(LineSeries::new(pts, MODEL_COLOR.stroke_width(1)))?
            .label("model")
            .legend(|(x, y)| PathElement::new([(x, y), (x + 25, y)], MODEL_COLOR.stroke_width(1)));
    }
    if mb(bound as f64) <= y_max {
        chart
            .draw_series(LineSeries::new(
                [(0.0, mb(bound as f64)), (t_max, mb(bound as f64))],
                BOUND_COLOR.stroke_width(1),
            ))?
            .label("DRAM bound")
            .legend(|(x, y)| PathElement::new([(x, y), (x + 25, y)], BOUND_COLOR.stroke_width(1)));
    }
    draw_triggers(&mut chart, triggers, y_max)?;
    draw_legend(&mut chart)?;
    write_png(&root, path)
}
