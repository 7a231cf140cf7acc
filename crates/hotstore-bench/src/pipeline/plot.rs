//! The pipeline's figure: makespan against the number of iterations, one line per
//! configuration, with the model's bound per device dashed.

use crate::plot::{ensure_font, si, write_png, PlotError, FONT, PALETTE};
use plotters::prelude::*;
use std::path::Path;

/// One configuration's line: seconds at the end of each iteration (1..=K), and the time
/// until its result was on disk where that differs.
pub struct Line {
    pub label: String,
    pub secs: Vec<f64>,
    pub durable: Option<f64>,
}

/// One bound: seconds per iteration of data (D/R + D/W for one image).
pub struct Bound {
    pub label: String,
    pub secs_per_iteration: f64,
}

/// Draws the figure into `path` (PNG, 900x600).
pub fn plot(path: &Path, title: &str, lines: &[Line], bounds: &[Bound]) -> Result<(), PlotError> {
    let k = lines.iter().map(|l| l.secs.len()).max().unwrap_or(0);
    if k == 0 {
        return Err(PlotError::NoData("no configuration ran".into()));
    }
    ensure_font()?;
    let kf = k as f64;
    let y_hi = lines
        .iter()
        .flat_map(|l| l.secs.iter().copied().chain(l.durable))
        .chain(bounds.iter().map(|b| b.secs_per_iteration * kf))
        .fold(0.0, f64::max)
        * 1.1;
    let y_hi = if y_hi > 0.0 { y_hi } else { 1.0 };
    let root = BitMapBackend::new(path, (900, 600)).into_drawing_area();
    root.fill(&WHITE)?;
    let mut chart = ChartBuilder::on(&root)
        .caption(title, (FONT, 20))
        .margin(12)
        .margin_right(24)
        .x_label_area_size(45)
        .y_label_area_size(65)
        .build_cartesian_2d(0.0..kf + 0.2, 0.0..y_hi)?;
    chart
        .configure_mesh()
        .x_desc("iterations K")
        .y_desc("makespan (s)")
        .x_labels(k + 1)
        .x_label_formatter(&|v| format!("{v:.0}"))
        .y_label_formatter(&|v| si(*v))
        .axis_desc_style((FONT, 17))
        .label_style((FONT, 14))
        .draw()?;
    for (i, l) in lines.iter().enumerate() {
        let color = PALETTE[i % PALETTE.len()];
        let pts: Vec<(f64, f64)> = std::iter::once((0.0, 0.0))
            .chain(l.secs.iter().enumerate().map(|(j, &s)| ((j + 1) as f64, s)))
            .collect();
        chart
            .draw_series(LineSeries::new(pts.clone(), color.stroke_width(2)))?
            .label(l.label.clone())
            .legend(move |(x, y)| PathElement::new([(x, y), (x + 20, y)], color.stroke_width(2)));
        chart.draw_series(
            pts.iter()
                .skip(1)
                .map(|&p| Circle::new(p, 4, color.filled())),
        )?;
        if let Some(d) = l.durable {
            let at = l.secs.len() as f64;
            chart.draw_series(std::iter::once(Cross::new(
                (at, d),
                7,
                color.stroke_width(3),
            )))?;
            chart.draw_series(DashedLineSeries::new(
                [(at, *l.secs.last().unwrap_or(&d)), (at, d)],
                4,
                4,
                color.stroke_width(1),
            ))?;
        }
    }
    for (i, b) in bounds.iter().enumerate() {
        let style = if i == 0 {
            BLACK.stroke_width(2)
        } else {
            RGBColor(120, 120, 120).stroke_width(2)
        };
        chart
            .draw_series(DashedLineSeries::new(
                [(0.0, 0.0), (kf, b.secs_per_iteration * kf)],
                10,
                6,
                style,
            ))?
            .label(b.label.clone())
            .legend(move |(x, y)| PathElement::new([(x, y), (x + 8, y)], style));
    }
    chart
        .configure_series_labels()
        .position(SeriesLabelPosition::UpperLeft)
        .background_style(WHITE.mix(0.85))
        .border_style(BLACK.mix(0.5))
        .label_font((FONT, 13))
        .draw()?;
    write_png(&root, path)
}
