//! The Prometheus text exposition format, version 0.0.4 (what the page's Content-Type says and
//! what `promtool check metrics` parses): `# HELP` and `# TYPE` name the family exactly as its
//! samples do (a counter's family is `x_total`), one family once, its samples after them.

use super::Histogram;
use std::fmt::Write as _;

/// A family's type.
#[derive(Clone, Copy)]
pub enum Kind {
    Counter,
    Gauge,
    Histogram,
}

/// A sample's value.
#[derive(Clone, Copy)]
pub enum Num {
    Int(u64),
    Float(f64),
}

impl From<u64> for Num {
    fn from(v: u64) -> Num {
        Num::Int(v)
    }
}

impl From<usize> for Num {
    fn from(v: usize) -> Num {
        Num::Int(v as u64)
    }
}

impl From<bool> for Num {
    fn from(v: bool) -> Num {
        Num::Int(u64::from(v))
    }
}

impl From<f64> for Num {
    fn from(v: f64) -> Num {
        Num::Float(v)
    }
}

/// A page being written.
#[derive(Default)]
pub struct Page {
    out: String,
    name: String,
}

impl Page {
    /// Starts family `name`; the samples that follow belong to it.
    pub fn family(&mut self, name: &str, kind: Kind, help: &str) {
        let kind = match kind {
            Kind::Counter => "counter",
            Kind::Gauge => "gauge",
            Kind::Histogram => "histogram",
        };
        let mut h = String::with_capacity(help.len());
        for c in help.chars() {
            match c {
                '\\' => h.push_str("\\\\"),
                '\n' => h.push_str("\\n"),
                c => h.push(c),
            }
        }
        let _ = writeln!(self.out, "# HELP {name} {h}\n# TYPE {name} {kind}");
        self.name.clear();
        self.name.push_str(name);
    }

    /// A family with one sample and no labels.
    pub fn single(&mut self, name: &str, kind: Kind, help: &str, v: impl Into<Num>) {
        self.family(name, kind, help);
        self.sample(&[], v);
    }

    /// A sample of the current family.
    pub fn sample(&mut self, labels: &[(&str, &str)], v: impl Into<Num>) {
        let name = std::mem::take(&mut self.name);
        self.line(&name, "", labels, None, v.into());
        self.name = name;
    }

    /// The `_bucket`, `_sum` and `_count` samples of a histogram of the current family.
    pub fn histogram(&mut self, labels: &[(&str, &str)], h: &Histogram) {
        let name = std::mem::take(&mut self.name);
        let mut cumulative = 0u64;
        for (i, bound) in h.bounds().enumerate() {
            cumulative += h.bucket(i);
            let le = fmt_f64(bound);
            self.line(&name, "_bucket", labels, Some(&le), Num::Int(cumulative));
        }
        cumulative += h.bucket(h.len());
        self.line(&name, "_bucket", labels, Some("+Inf"), Num::Int(cumulative));
        self.line(&name, "_sum", labels, None, Num::Float(h.sum()));
        // The count is the +Inf bucket's, so the two agree even during an observation.
        self.line(&name, "_count", labels, None, Num::Int(cumulative));
        self.name = name;
    }

    fn line(
        &mut self,
        name: &str,
        suffix: &str,
        labels: &[(&str, &str)],
        le: Option<&str>,
        v: Num,
    ) {
        let o = &mut self.out;
        o.push_str(name);
        o.push_str(suffix);
        let all = labels.iter().copied().chain(le.map(|le| ("le", le)));
        let mut first = true;
        for (k, val) in all {
            o.push(if first { '{' } else { ',' });
            first = false;
            o.push_str(k);
            o.push_str("=\"");
            for c in val.chars() {
                match c {
                    '\\' => o.push_str("\\\\"),
                    '"' => o.push_str("\\\""),
                    '\n' => o.push_str("\\n"),
                    c => o.push(c),
                }
            }
            o.push('"');
        }
        if !first {
            o.push('}');
        }
        o.push(' ');
        match v {
            Num::Int(n) => {
                let _ = write!(o, "{n}");
            }
            Num::Float(f) => o.push_str(&fmt_f64(f)),
        }
        o.push('\n');
    }

    /// The page.
    pub fn finish(self) -> String {
        self.out
    }
}

/// A float as the format spells it (`+Inf`, `NaN`; Rust's `Display` otherwise, which never
/// uses an exponent and round-trips).
fn fmt_f64(f: f64) -> String {
    if f.is_nan() {
        "NaN".into()
    } else if f.is_infinite() {
        if f > 0.0 { "+Inf" } else { "-Inf" }.into()
    } else {
        format!("{f}")
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn families_and_escapes() {
        let mut p = Page::default();
        p.single("a_total", Kind::Counter, "help \\ with\nnewline", 3u64);
        p.family("b", Kind::Gauge, "b");
        p.sample(&[("k", "q\"\\\n")], 0.5);
        let h = Histogram::new(&[1, 10], 1.0);
        h.observe(1);
        h.observe(5);
        h.observe(50);
        p.family("c", Kind::Histogram, "c");
        p.histogram(&[("x", "y")], &h);
        assert_eq!(
            p.finish(),
            "# HELP a_total help \\\\ with\\nnewline\n# TYPE a_total counter\na_total 3\n\
             # HELP b b\n# TYPE b gauge\nb{k=\"q\\\"\\\\\\n\"} 0.5\n\
             # HELP c c\n# TYPE c histogram\n\
             c_bucket{x=\"y\",le=\"1\"} 1\nc_bucket{x=\"y\",le=\"10\"} 2\n\
             c_bucket{x=\"y\",le=\"+Inf\"} 3\nc_sum{x=\"y\"} 56\nc_count{x=\"y\"} 3\n"
        );
    }
}
