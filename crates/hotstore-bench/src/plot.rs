//! The plot toolkit every chart of the tool shares: minidaq's timeline and sweep
//! ([`crate::minidaq::plot`]), the device figures and the recorder's plot.
//!
//! Rendering uses `plotters` with its pure-Rust bitmap backend and the `ab_glyph` text
//! renderer, so nothing needs to be linked at build time. `ab_glyph` needs a TrueType font at
//! run time: [`ensure_font`] loads one from a standard location (see [`FONT_CANDIDATES`], or
//! the path in the environment variable named by [`FONT_ENV`]). On Debian/Ubuntu install the
//! `fonts-dejavu-core` package. Charts are written by [`write_png`]; [`PALETTE`] gives their
//! colours, [`si`], [`bytes_label`], [`trim_num`] and [`secs_label`] their axis labels.

use plotters::coord::Shift;
use plotters::prelude::*;
use std::error::Error;
use std::fmt;
use std::path::{Path, PathBuf};
use std::sync::OnceLock;

/// Environment variable that, when set, names the TTF/OTF font file to use
/// instead of searching [`FONT_CANDIDATES`].
pub const FONT_ENV: &str = "HOTSTORE_PLOT_FONT";

/// Font files tried in order, with the regular and (optional) bold face.
/// The first is what Debian/Ubuntu's `fonts-dejavu-core` installs.
pub const FONT_CANDIDATES: &[(&str, &str)] = &[
    (
        "/usr/share/fonts/truetype/dejavu/DejaVuSans.ttf",
        "/usr/share/fonts/truetype/dejavu/DejaVuSans-Bold.ttf",
    ),
    (
        "/usr/share/fonts/dejavu-sans-fonts/DejaVuSans.ttf",
        "/usr/share/fonts/dejavu-sans-fonts/DejaVuSans-Bold.ttf",
    ),
    (
        "/usr/share/fonts/dejavu/DejaVuSans.ttf",
        "/usr/share/fonts/dejavu/DejaVuSans-Bold.ttf",
    ),
    (
        "/usr/share/fonts/TTF/DejaVuSans.ttf",
        "/usr/share/fonts/TTF/DejaVuSans-Bold.ttf",
    ),
    (
        "/usr/share/fonts/truetype/liberation/LiberationSans-Regular.ttf",
        "/usr/share/fonts/truetype/liberation/LiberationSans-Bold.ttf",
    ),
];

/// Why a chart could not be drawn.
#[derive(Debug, Clone, PartialEq)]
pub enum PlotError {
    /// There is nothing to plot (the message says what was missing).
    NoData(String),
    /// The input cannot be plotted (e.g. a zero fragment size on a log axis).
    InvalidData(String),
    /// No usable font file was found; lists the paths that were tried.
    FontNotFound(Vec<PathBuf>),
    /// A font file exists but could not be parsed.
    InvalidFont(PathBuf),
    /// `plotters` failed while drawing or writing the image.
    Drawing(String),
}

impl fmt::Display for PlotError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            PlotError::NoData(what) => write!(f, "nothing to plot: {what}"),
            PlotError::InvalidData(what) => write!(f, "cannot plot: {what}"),
            PlotError::FontNotFound(tried) => {
                write!(
                    f,
                    "no font found for chart text (on Debian/Ubuntu: apt-get install \
                     fonts-dejavu-core; or set {FONT_ENV} to a .ttf file); tried: "
                )?;
                for (i, p) in tried.iter().enumerate() {
                    let sep = if i == 0 { "" } else { ", " };
                    write!(f, "{sep}{}", p.display())?;
                }
                Ok(())
            }
            PlotError::InvalidFont(path) => {
                write!(
                    f,
                    "font file {} is not a valid TrueType/OpenType font",
                    path.display()
                )
            }
            PlotError::Drawing(msg) => write!(f, "drawing chart failed: {msg}"),
        }
    }
}

impl Error for PlotError {}

impl<E: Error + Send + Sync> From<DrawingAreaErrorKind<E>> for PlotError {
    fn from(e: DrawingAreaErrorKind<E>) -> Self {
        PlotError::Drawing(e.to_string())
    }
}

/// Loads and registers the font once per process; later calls return the
/// cached outcome.
pub fn ensure_font() -> Result<(), PlotError> {
    static FONT: OnceLock<Result<(), PlotError>> = OnceLock::new();
    FONT.get_or_init(load_font).clone()
}

fn load_font() -> Result<(), PlotError> {
    let candidates: Vec<(PathBuf, Option<PathBuf>)> = match std::env::var_os(FONT_ENV) {
        Some(p) => vec![(PathBuf::from(p), None)],
        None => FONT_CANDIDATES
            .iter()
            .map(|(regular, bold)| (PathBuf::from(regular), Some(PathBuf::from(bold))))
            .collect(),
    };
    for (regular, bold) in &candidates {
        let Ok(bytes) = std::fs::read(regular) else {
            continue;
        };
        register(regular, bytes, FontStyle::Normal)?;
        // The bold face is optional: ab_glyph falls back to the normal one.
        if let Some(bytes) = bold.as_ref().and_then(|b| std::fs::read(b).ok()) {
            let _ = register(regular, bytes, FontStyle::Bold);
        }
        return Ok(());
    }
    Err(PlotError::FontNotFound(
        candidates.into_iter().map(|(regular, _)| regular).collect(),
    ))
}

fn register(path: &Path, bytes: Vec<u8>, style: FontStyle) -> Result<(), PlotError> {
    // plotters needs `'static` font data; this runs at most twice per process.
    let bytes: &'static [u8] = Box::leak(bytes.into_boxed_slice());
    plotters::style::register_font("sans-serif", style, bytes)
        .map_err(|_| PlotError::InvalidFont(path.to_path_buf()))
}

/// Encodes and writes the image (the bitmap backend only touches the file here).
pub fn write_png(
    root: &DrawingArea<BitMapBackend<'_>, Shift>,
    path: &Path,
) -> Result<(), PlotError> {
    root.present()
        .map_err(|e| PlotError::Drawing(format!("cannot write {}: {e}", path.display())))
}

/// Colours of the series (matplotlib's "tab10"); shared by every chart of the tool.
pub const PALETTE: [RGBColor; 8] = [
    RGBColor(31, 119, 180),
    RGBColor(255, 127, 14),
    RGBColor(44, 160, 44),
    RGBColor(214, 39, 40),
    RGBColor(148, 103, 189),
    RGBColor(140, 86, 75),
    RGBColor(227, 119, 194),
    RGBColor(127, 127, 127),
];
/// The font family every chart draws its text in (registered by [`ensure_font`]).
pub const FONT: &str = "sans-serif";
/// Width of the legend sample graphic.
pub const LEGEND_LINE: i32 = 30;
/// Width of the area a legend reserves for its sample graphic.
pub const LEGEND_AREA: u32 = 42;

/// Formats a value with an SI suffix: 950, 12.5k, 3.2M, 1.05G.
pub fn si(v: f64) -> String {
    let a = v.abs();
    let (div, suffix) = if a >= 1e9 {
        (1e9, "G")
    } else if a >= 1e6 {
        (1e6, "M")
    } else if a >= 1e3 {
        (1e3, "k")
    } else {
        (1.0, "")
    };
    format!("{}{suffix}", trim_num(v / div))
}

/// Formats a byte count: 100 B, 1 KB, 4.1 KB, 10 MB (decimal units).
pub fn bytes_label(v: f64) -> String {
    let (div, unit) = if v >= 1e9 {
        (1e9, "GB")
    } else if v >= 1e6 {
        (1e6, "MB")
    } else if v >= 1e3 {
        (1e3, "KB")
    } else {
        (1.0, "B")
    };
    format!("{} {unit}", trim_num(v / div))
}

/// Up to 3 significant digits, without trailing zeros.
pub fn trim_num(v: f64) -> String {
    let s = if v.abs() >= 100.0 {
        format!("{v:.0}")
    } else if v.abs() >= 10.0 {
        format!("{v:.1}")
    } else {
        format!("{v:.2}")
    };
    trim_zeros(s)
}

/// "5.00" -> "5", "2.50" -> "2.5", "100" -> "100".
pub fn trim_zeros(s: String) -> String {
    if s.contains('.') {
        s.trim_end_matches('0').trim_end_matches('.').to_string()
    } else {
        s
    }
}

/// Formats a duration in seconds as "50 ms", "5 ms" (for 4.99 ms) or "1.5 s".
pub fn secs_label(secs: f64) -> String {
    if secs < 1.0 {
        format!("{} ms", trim_zeros(format!("{:.1}", secs * 1e3)))
    } else {
        format!("{} s", trim_zeros(format!("{secs:.1}")))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn font_error_names_the_package() {
        let err = PlotError::FontNotFound(vec![PathBuf::from("/a.ttf"), PathBuf::from("/b.ttf")]);
        let msg = err.to_string();
        assert!(msg.contains("fonts-dejavu-core"), "{msg}");
        assert!(msg.contains("/a.ttf, /b.ttf"), "{msg}");
        assert!(msg.contains(FONT_ENV), "{msg}");
    }

    #[test]
    fn labels() {
        assert_eq!(bytes_label(100.0), "100 B");
        assert_eq!(bytes_label(1000.0), "1 KB");
        assert_eq!(bytes_label(10_000.0), "10 KB");
        assert_eq!(bytes_label(100_000.0), "100 KB");
        assert_eq!(bytes_label(4096.0), "4.1 KB");
        assert_eq!(bytes_label(1e6), "1 MB");
        assert_eq!(si(2_500_000.0), "2.5M");
        assert_eq!(si(950.0), "950");
        assert_eq!(si(0.0), "0");
        assert_eq!(secs_label(0.05), "50 ms");
        assert_eq!(secs_label(0.005), "5 ms");
        assert_eq!(secs_label(2.0), "2 s");
    }
}
