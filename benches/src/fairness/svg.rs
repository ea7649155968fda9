//! Hand-written SVG charts of the fairness results: grouped bars (MMR or
//! utilization per policy per case) and lines (MMR over a swept value).
//! Plain SVG 1.1, no scripts, no external resources; every text is
//! escaped.

use std::fmt::Write as _;

/// One series: a policy's value per group (or per x position); `None`
/// where it has no value (a policy the daemon rejected).
#[derive(Debug, Clone, PartialEq)]
pub struct Series {
    /// Legend name.
    pub name: String,
    /// Values, one per group.
    pub values: Vec<Option<f64>>,
}

/// A panel of grouped bars.
#[derive(Debug, Clone, PartialEq)]
pub struct Bars {
    /// Title above the panel.
    pub title: String,
    /// Y axis label.
    pub y_label: String,
    /// Y axis maximum.
    pub y_max: f64,
    /// Group labels along the x axis.
    pub groups: Vec<String>,
    /// One bar per series in each group.
    pub series: Vec<Series>,
    /// A reference value per group, drawn as a dashed mark across the
    /// group, and its legend name.
    pub reference: Option<(String, Vec<Option<f64>>)>,
}

/// A panel of lines over categorical x positions.
#[derive(Debug, Clone, PartialEq)]
pub struct Lines {
    /// Title above the panel.
    pub title: String,
    /// Y axis label.
    pub y_label: String,
    /// X axis label.
    pub x_label: String,
    /// Y axis maximum.
    pub y_max: f64,
    /// X position labels.
    pub xs: Vec<String>,
    /// One line per series.
    pub series: Vec<Series>,
}

/// A panel.
#[derive(Debug, Clone, PartialEq)]
pub enum Panel {
    /// Grouped bars.
    Bars(Bars),
    /// Lines.
    Lines(Lines),
}

/// Series colours, in legend order (colour-blind safe, Okabe–Ito).
const COLOURS: [&str; 8] = [
    "#0072B2", "#E69F00", "#009E73", "#CC79A7", "#56B4E9", "#D55E00", "#F0E442", "#000000",
];

const WIDTH: f64 = 900.0;
const PANEL_H: f64 = 300.0;
const LEFT: f64 = 70.0;
const RIGHT: f64 = 170.0;
const TOP: f64 = 40.0;
const BOTTOM: f64 = 50.0;

/// Escapes text for XML content and attribute values.
pub fn escape(s: &str) -> String {
    let mut out = String::with_capacity(s.len());
    for c in s.chars() {
        match c {
            '&' => out.push_str("&amp;"),
            '<' => out.push_str("&lt;"),
            '>' => out.push_str("&gt;"),
            '"' => out.push_str("&quot;"),
            '\'' => out.push_str("&apos;"),
            c if (c as u32) < 0x20 && c != '\n' && c != '\t' => out.push(' '),
            c => out.push(c),
        }
    }
    out
}

fn colour(i: usize) -> &'static str {
    COLOURS[i % COLOURS.len()]
}

/// A finite value within [0, max] (NaN and infinities become 0 and max).
fn clamp(v: f64, max: f64) -> f64 {
    if v.is_nan() {
        0.0
    } else {
        v.clamp(0.0, max)
    }
}

/// Axes, grid and labels of a panel at `y0`; returns the plot's
/// `(x, y, w, h)`.
fn frame(
    out: &mut String,
    y0: f64,
    title: &str,
    y_label: &str,
    y_max: f64,
) -> (f64, f64, f64, f64) {
    let (x, y) = (LEFT, y0 + TOP);
    let (w, h) = (WIDTH - LEFT - RIGHT, PANEL_H - TOP - BOTTOM);
    let _ = writeln!(
        out,
        r#"<text x="{:.1}" y="{:.1}" font-size="15" font-weight="bold">{}</text>"#,
        LEFT,
        y0 + 22.0,
        escape(title)
    );
    for i in 0..=4 {
        let v = y_max * f64::from(i) / 4.0;
        let gy = y + h - h * f64::from(i) / 4.0;
        let _ = writeln!(
            out,
            "<line x1=\"{x:.1}\" y1=\"{gy:.1}\" x2=\"{:.1}\" y2=\"{gy:.1}\" stroke=\"#dddddd\"/>",
            x + w
        );
        let _ = writeln!(
            out,
            r#"<text x="{:.1}" y="{:.1}" font-size="11" text-anchor="end">{v:.2}</text>"#,
            x - 6.0,
            gy + 4.0
        );
    }
    let _ = writeln!(
        out,
        r##"<rect x="{x:.1}" y="{y:.1}" width="{w:.1}" height="{h:.1}" fill="none" stroke="#444444"/>"##
    );
    let _ = writeln!(
        out,
        r#"<text x="{:.1}" y="{:.1}" font-size="12" text-anchor="middle" transform="rotate(-90 {:.1} {:.1})">{}</text>"#,
        x - 48.0,
        y + h / 2.0,
        x - 48.0,
        y + h / 2.0,
        escape(y_label)
    );
    (x, y, w, h)
}

fn legend(out: &mut String, y0: f64, entries: &[(String, &str, bool)]) {
    let lx = WIDTH - RIGHT + 15.0;
    for (i, (name, col, dashed)) in entries.iter().enumerate() {
        let ly = y0 + TOP + 10.0 + 18.0 * i as f64;
        if *dashed {
            let _ = writeln!(
                out,
                r#"<line x1="{lx:.1}" y1="{:.1}" x2="{:.1}" y2="{:.1}" stroke="{col}" stroke-width="2" stroke-dasharray="4 3"/>"#,
                ly - 4.0,
                lx + 12.0,
                ly - 4.0
            );
        } else {
            let _ = writeln!(
                out,
                r#"<rect x="{lx:.1}" y="{:.1}" width="12" height="10" fill="{col}"/>"#,
                ly - 9.0
            );
        }
        let _ = writeln!(
            out,
            r#"<text x="{:.1}" y="{ly:.1}" font-size="12">{}</text>"#,
            lx + 18.0,
            escape(name)
        );
    }
}

fn bars(out: &mut String, y0: f64, p: &Bars) {
    let y_max = if p.y_max > 0.0 { p.y_max } else { 1.0 };
    let (x, y, w, h) = frame(out, y0, &p.title, &p.y_label, y_max);
    let groups = p.groups.len().max(1) as f64;
    let gw = w / groups;
    let n = p.series.len().max(1) as f64;
    let bw = (gw * 0.8) / n;
    for (g, label) in p.groups.iter().enumerate() {
        let gx = x + gw * g as f64 + gw * 0.1;
        for (s, series) in p.series.iter().enumerate() {
            let Some(v) = series
                .values
                .get(g)
                .copied()
                .flatten()
                .filter(|v| v.is_finite())
            else {
                continue;
            };
            let bh = h * clamp(v, y_max) / y_max;
            let bx = gx + bw * s as f64;
            let _ = writeln!(
                out,
                r#"<rect x="{bx:.1}" y="{:.1}" width="{:.1}" height="{bh:.1}" fill="{}"><title>{}: {v:.3}</title></rect>"#,
                y + h - bh,
                (bw - 1.0).max(1.0),
                colour(s),
                escape(&format!("{} {}", series.name, label))
            );
        }
        if let Some((name, refs)) = &p.reference {
            if let Some(r) = refs.get(g).copied().flatten().filter(|r| r.is_finite()) {
                let ry = y + h - h * clamp(r, y_max) / y_max;
                let _ = writeln!(
                    out,
                    r#"<line x1="{gx:.1}" y1="{ry:.1}" x2="{:.1}" y2="{ry:.1}" stroke="{}" stroke-width="2" stroke-dasharray="4 3"><title>{}: {r:.3}</title></line>"#,
                    gx + gw * 0.8,
                    COLOURS[7],
                    escape(name)
                );
            }
        }
        let _ = writeln!(
            out,
            r#"<text x="{:.1}" y="{:.1}" font-size="12" text-anchor="middle">{}</text>"#,
            x + gw * (g as f64 + 0.5),
            y + h + 18.0,
            escape(label)
        );
    }
    let mut entries: Vec<(String, &str, bool)> = p
        .series
        .iter()
        .enumerate()
        .map(|(i, s)| (s.name.clone(), colour(i), false))
        .collect();
    if let Some((name, _)) = &p.reference {
        entries.push((name.clone(), COLOURS[7], true));
    }
    legend(out, y0, &entries);
}

fn lines(out: &mut String, y0: f64, p: &Lines) {
    let y_max = if p.y_max > 0.0 { p.y_max } else { 1.0 };
    let (x, y, w, h) = frame(out, y0, &p.title, &p.y_label, y_max);
    let n = p.xs.len().max(1) as f64;
    let px = |i: usize| x + w * (i as f64 + 0.5) / n;
    for (i, label) in p.xs.iter().enumerate() {
        let _ = writeln!(
            out,
            r#"<text x="{:.1}" y="{:.1}" font-size="12" text-anchor="middle">{}</text>"#,
            px(i),
            y + h + 18.0,
            escape(label)
        );
    }
    let _ = writeln!(
        out,
        r#"<text x="{:.1}" y="{:.1}" font-size="12" text-anchor="middle">{}</text>"#,
        x + w / 2.0,
        y + h + 38.0,
        escape(&p.x_label)
    );
    for (s, series) in p.series.iter().enumerate() {
        let pts: Vec<(f64, f64, f64)> = series
            .values
            .iter()
            .enumerate()
            .filter_map(|(i, v)| {
                v.filter(|v| v.is_finite())
                    .map(|v| (px(i), y + h - h * clamp(v, y_max) / y_max, v))
            })
            .collect();
        if pts.is_empty() {
            continue;
        }
        let path: Vec<String> = pts
            .iter()
            .map(|(a, b, _)| format!("{a:.1},{b:.1}"))
            .collect();
        let _ = writeln!(
            out,
            r#"<polyline points="{}" fill="none" stroke="{}" stroke-width="2"/>"#,
            path.join(" "),
            colour(s)
        );
        for (a, b, v) in pts {
            let _ = writeln!(
                out,
                r#"<circle cx="{a:.1}" cy="{b:.1}" r="3.5" fill="{}"><title>{}: {v:.3}</title></circle>"#,
                colour(s),
                escape(&series.name)
            );
        }
    }
    let entries: Vec<(String, &str, bool)> = p
        .series
        .iter()
        .enumerate()
        .map(|(i, s)| (s.name.clone(), colour(i), false))
        .collect();
    legend(out, y0, &entries);
}

/// The whole chart: `title`, `note` under it, then the panels stacked.
pub fn render(title: &str, note: &str, panels: &[Panel]) -> String {
    let head = 50.0;
    let height = head + PANEL_H * panels.len().max(1) as f64;
    let mut out = String::new();
    let _ = writeln!(out, r#"<?xml version="1.0" encoding="UTF-8"?>"#);
    let _ = writeln!(
        out,
        r#"<svg xmlns="http://www.w3.org/2000/svg" width="{WIDTH:.0}" height="{height:.0}" viewBox="0 0 {WIDTH:.0} {height:.0}" font-family="sans-serif">"#
    );
    let _ = writeln!(
        out,
        r#"<rect x="0" y="0" width="{WIDTH:.0}" height="{height:.0}" fill="white"/>"#
    );
    let _ = writeln!(
        out,
        r#"<text x="{LEFT:.1}" y="22" font-size="17" font-weight="bold">{}</text>"#,
        escape(title)
    );
    let _ = writeln!(
        out,
        "<text x=\"{LEFT:.1}\" y=\"40\" font-size=\"11\" fill=\"#555555\">{}</text>",
        escape(note)
    );
    for (i, p) in panels.iter().enumerate() {
        let y0 = head + PANEL_H * i as f64;
        match p {
            Panel::Bars(b) => bars(&mut out, y0, b),
            Panel::Lines(l) => lines(&mut out, y0, l),
        }
    }
    out.push_str("</svg>\n");
    out
}

/// Checks that `text` is well-formed XML as far as this module writes it:
/// one root, tags properly nested and closed, attribute values quoted,
/// every `&` an entity. Returns the root element's name.
pub fn check_well_formed(text: &str) -> Result<String, String> {
    let mut stack: Vec<String> = Vec::new();
    let mut root = None;
    let mut rest = text;
    while let Some(lt) = rest.find('<') {
        check_text(&rest[..lt])?;
        let after = &rest[lt + 1..];
        let gt = after.find('>').ok_or("unterminated tag")?;
        let tag = &after[..gt];
        rest = &after[gt + 1..];
        if tag.starts_with('?') {
            if !tag.ends_with('?') {
                return Err(format!("bad declaration <{tag}>"));
            }
            continue;
        }
        if let Some(name) = tag.strip_prefix('/') {
            let open = stack
                .pop()
                .ok_or_else(|| format!("</{name}> closes nothing"))?;
            if open != name.trim() {
                return Err(format!("</{name}> closes <{open}>"));
            }
            continue;
        }
        let self_closing = tag.ends_with('/');
        let body = tag.trim_end_matches('/');
        let name_end = body.find(char::is_whitespace).unwrap_or(body.len());
        let name = &body[..name_end];
        if name.is_empty()
            || !name
                .chars()
                .all(|c| c.is_ascii_alphanumeric() || c == ':' || c == '-')
        {
            return Err(format!("bad tag name in <{tag}>"));
        }
        check_attributes(&body[name_end..])?;
        if stack.is_empty() {
            if root.is_some() {
                return Err(format!("second root element <{name}>"));
            }
            root = Some(name.to_owned());
        }
        if !self_closing {
            stack.push(name.to_owned());
        }
    }
    check_text(rest)?;
    if let Some(open) = stack.pop() {
        return Err(format!("<{open}> is never closed"));
    }
    root.ok_or_else(|| "no root element".into())
}

fn check_text(t: &str) -> Result<(), String> {
    let mut rest = t;
    while let Some(amp) = rest.find('&') {
        let after = &rest[amp + 1..];
        let semi = after.find(';').ok_or("bare & in text")?;
        let ent = &after[..semi];
        let known = matches!(ent, "amp" | "lt" | "gt" | "quot" | "apos")
            || (ent.starts_with('#') && ent.len() > 1);
        if !known {
            return Err(format!("unknown entity &{ent};"));
        }
        rest = &after[semi + 1..];
    }
    if t.contains('>') && !t.trim().is_empty() {
        return Err("bare > in text".into());
    }
    Ok(())
}

fn check_attributes(mut a: &str) -> Result<(), String> {
    loop {
        a = a.trim_start();
        if a.is_empty() {
            return Ok(());
        }
        let eq = a
            .find('=')
            .ok_or_else(|| format!("attribute without value: {a}"))?;
        let name = a[..eq].trim();
        if name.is_empty() || name.contains(char::is_whitespace) {
            return Err(format!("bad attribute name {name:?}"));
        }
        let v = a[eq + 1..].trim_start();
        let q = v.chars().next().ok_or("attribute value missing")?;
        if q != '"' && q != '\'' {
            return Err(format!("unquoted attribute {name}"));
        }
        let end = v[1..]
            .find(q)
            .ok_or_else(|| format!("unterminated attribute {name}"))?;
        let value = &v[1..1 + end];
        if value.contains('<') {
            return Err(format!("< in attribute {name}"));
        }
        check_text(value)?;
        a = &v[end + 2..];
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn sample() -> Vec<Panel> {
        vec![
            Panel::Bars(Bars {
                title: "fig8 <MMR> & co".into(),
                y_label: "MMR".into(),
                y_max: 1.0,
                groups: vec!["MM".into(), "HS".into()],
                series: vec![
                    Series {
                        name: "none".into(),
                        values: vec![Some(0.4), Some(f64::NAN)],
                    },
                    Series {
                        name: "fairgv".into(),
                        values: vec![None, Some(1.3)],
                    },
                ],
                reference: Some(("ref \"x\"".into(), vec![Some(0.6), None])),
            }),
            Panel::Lines(Lines {
                title: "fig11".into(),
                y_label: "MMR".into(),
                x_label: "background kernel (us)".into(),
                y_max: 1.0,
                xs: vec!["21".into(), "100".into(), "400".into()],
                series: vec![Series {
                    name: "none, MM".into(),
                    values: vec![Some(0.9), None, Some(0.2)],
                }],
            }),
        ]
    }

    #[test]
    fn charts_are_well_formed() {
        let svg = render("fairness & <things>", "a note", &sample());
        assert_eq!(check_well_formed(&svg), Ok("svg".to_owned()));
        assert!(svg.contains("fig8 &lt;MMR&gt; &amp; co"));
        assert!(svg.contains("<polyline"));
        assert!(!svg.contains("NaN") && !svg.contains("inf"));
        let empty = render("t", "", &[]);
        assert_eq!(check_well_formed(&empty), Ok("svg".to_owned()));
    }

    #[test]
    fn the_checker_finds_errors() {
        for bad in [
            "<a><b></a></b>",
            "<a>",
            "</a>",
            "<a x=1/>",
            "<a>&nbsp;</a>",
            "<a>x & y</a>",
            "<a/><b/>",
            "text only",
            "<a x=\"1\"",
        ] {
            assert!(check_well_formed(bad).is_err(), "{bad}");
        }
        assert_eq!(
            check_well_formed("<?xml version=\"1.0\"?><a x='1'><b/>t &amp; u</a>"),
            Ok("a".to_owned())
        );
    }
}
