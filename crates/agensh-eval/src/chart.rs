//! Line charts of a benchmark's pass rate over time, as SVG text and as PNG bytes.
//!
//! A [`Chart`] holds one [`Series`] per organisation size N of a ProgramBench run
//! ("N = 1", "N = 8", ...): x is hours since the run started, y the score in [0, 1], shown as
//! a percent. Both renderers draw the same 960x540 picture: a white background, the title on
//! top, axes with ticks and tick labels (y from 0% to 100% in steps of 10%, x in "nice" steps
//! of hours, from hundredths of an hour for a run of a few minutes to several hours for a day),
//! light grid lines, the axis labels, an optional dashed threshold line, one line per series
//! through its scored checkpoints with a filled marker at each, and a legend on the right.
//! A chart without any checkpoint still has its axes and says "no checkpoints scored yet".
//!
//! Both renderers work from one list of shapes, so they agree on every position. [`svg`]
//! writes a standalone SVG 1.1 document; [`png`] rasterises the shapes itself (anti-aliased
//! strokes and markers, text in a built-in 5x7 bitmap font) and encodes an 8-bit RGB PNG whose
//! zlib stream comes from `miniz_oxide`. The output depends on the chart alone, and odd input
//! never panics: non-finite points are dropped, scores clamped to [0, 1] and hours to
//! [0, 1e6].

use std::fmt::{self, Write as _};

use serde::{Deserialize, Serialize};

/// Width of both renderings, in pixels.
pub const WIDTH: u32 = 960;
/// Height of both renderings, in pixels.
pub const HEIGHT: u32 = 540;

/// One line of a chart.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Series {
    /// The legend text, e.g. "N = 8".
    pub label: String,
    /// Checkpoints as `(hours since start, score in 0..=1)`, sorted by hours.
    pub points: Vec<(f64, f64)>,
}

/// A line chart of scores over time.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Chart {
    /// Drawn centred on top.
    pub title: String,
    /// Under the x axis, e.g. "hours".
    pub x_label: String,
    /// Beside the y axis, e.g. "pass rate (kept)".
    pub y_label: String,
    /// The lines, coloured in order from a fixed palette.
    pub series: Vec<Series>,
    /// A dashed horizontal line at this score, labelled e.g. "threshold 30%".
    pub threshold: Option<f64>,
    /// Where the x axis ends (the run's planned hours); without it, the data's largest hour.
    /// The axis always reaches the data, and is rounded up to the next tick.
    pub x_max: Option<f64>,
}

/// The chart as a standalone SVG 1.1 document.
pub fn svg(chart: &Chart) -> String {
    let mut out = String::with_capacity(16 * 1024);
    // Writing to a String cannot fail.
    let _ = write_svg(&scene(chart), &chart.title, &mut out);
    out
}

/// The chart as a PNG image (8-bit RGB).
pub fn png(chart: &Chart) -> Vec<u8> {
    encode_png(&rasterise(&scene(chart)))
}

// ---------------------------------------------------------------------------------------------
// Layout, shared by both renderers.

/// The largest hour shown; later checkpoints are drawn at it.
const MAX_HOURS: f64 = 1e6;
/// The shortest x axis, in hours (3 minutes).
const MIN_HOURS_SPAN: f64 = 0.05;

const PLOT_LEFT: f64 = 100.0;
const PLOT_TOP: f64 = 60.0;
const PLOT_RIGHT: f64 = 760.0;
const PLOT_BOTTOM: f64 = 470.0;
const LEGEND_LEFT: f64 = 784.0;
const LEGEND_ROW: f64 = 22.0;

/// Text sizes: the bitmap font's scale in the PNG; the SVG uses a matching font size.
const MEDIUM: u32 = 2;
const LARGE: u32 = 3;

const LINE_WIDTH: f64 = 2.5;
const MARKER_RADIUS: f64 = 3.5;
/// A white ring around each marker keeps it apart from other series' lines.
const MARKER_HALO: f64 = 5.0;
const THRESHOLD_WIDTH: f64 = 2.0;
/// The threshold line's dash and gap, in pixels.
const THRESHOLD_DASH: (f64, f64) = (8.0, 6.0);

/// A colour, 8 bits per channel.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct Rgb(pub u8, pub u8, pub u8);

impl fmt::Display for Rgb {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "#{:02x}{:02x}{:02x}", self.0, self.1, self.2)
    }
}

/// Series colours, in order; the ninth series reuses the first colour.
const PALETTE: [Rgb; 8] = [
    Rgb(0x1f, 0x77, 0xb4), // blue
    Rgb(0xe6, 0x55, 0x0d), // orange
    Rgb(0x2c, 0xa0, 0x2c), // green
    Rgb(0xd6, 0x27, 0x28), // red
    Rgb(0x94, 0x67, 0xbd), // purple
    Rgb(0x8c, 0x56, 0x4b), // brown
    Rgb(0xe3, 0x77, 0xc2), // pink
    Rgb(0x17, 0xbe, 0xcf), // cyan
];
const BACKGROUND: Rgb = Rgb(0xff, 0xff, 0xff);
const GRID: Rgb = Rgb(0xe6, 0xe6, 0xe6);
const AXIS: Rgb = Rgb(0x33, 0x33, 0x33);
const INK: Rgb = Rgb(0x22, 0x22, 0x22);
const MUTED: Rgb = Rgb(0x55, 0x55, 0x55);
pub(crate) const THRESHOLD_COLOUR: Rgb = Rgb(0x70, 0x70, 0x70);

/// The colour of the `index`-th series.
pub(crate) fn series_colour(index: usize) -> Rgb {
    PALETTE[index % PALETTE.len()]
}

/// The chart's data, cleaned, and its x axis.
pub(crate) struct Layout {
    /// Each series' points: finite, clamped, sorted by hours.
    series: Vec<Vec<(f64, f64)>>,
    /// The hour at the right end of the x axis.
    x_end: f64,
    /// The x ticks: hour and label.
    x_ticks: Vec<(f64, String)>,
    /// The threshold score, clamped.
    threshold: Option<f64>,
}

impl Layout {
    pub(crate) fn new(chart: &Chart) -> Self {
        let series: Vec<_> = chart
            .series
            .iter()
            .map(|s| clean_points(&s.points))
            .collect();
        let data_end = series.iter().flatten().map(|p| p.0).fold(0.0, f64::max);
        let planned = chart
            .x_max
            .filter(|h| h.is_finite())
            .map_or(0.0, |h| h.clamp(0.0, MAX_HOURS));
        let (x_end, x_ticks) = x_axis(planned.max(data_end));
        let threshold = chart
            .threshold
            .filter(|t| t.is_finite())
            .map(|t| t.clamp(0.0, 1.0));
        Layout {
            series,
            x_end,
            x_ticks,
            threshold,
        }
    }

    /// The pixel position of a data point (pixel centres are at +0.5).
    pub(crate) fn map(&self, hours: f64, score: f64) -> (f64, f64) {
        (
            PLOT_LEFT + hours / self.x_end * (PLOT_RIGHT - PLOT_LEFT),
            PLOT_BOTTOM - score * (PLOT_BOTTOM - PLOT_TOP),
        )
    }

    fn has_points(&self) -> bool {
        self.series.iter().any(|s| !s.is_empty())
    }
}

/// Where `(hours, score)` lands in both renderings of `chart`, in pixels from the top left
/// (pixel `(x, y)` spans `x..x + 1`, `y..y + 1`). Scores and hours are not clamped here.
pub fn to_pixel(chart: &Chart, hours: f64, score: f64) -> (f64, f64) {
    Layout::new(chart).map(hours, score)
}

/// The points worth drawing: finite ones, hours clamped to [0, 1e6] and scores to [0, 1],
/// sorted by hours (stably, so equal hours keep their order).
pub(crate) fn clean_points(points: &[(f64, f64)]) -> Vec<(f64, f64)> {
    // `+ 0.0` turns a clamped -0.0 into 0.0.
    let mut clean: Vec<_> = points
        .iter()
        .filter(|(h, s)| h.is_finite() && s.is_finite())
        .map(|&(h, s)| (h.clamp(0.0, MAX_HOURS) + 0.0, s.clamp(0.0, 1.0) + 0.0))
        .collect();
    clean.sort_by(|a, b| a.0.total_cmp(&b.0));
    clean
}

/// The x axis for data reaching `span` hours: its end and its ticks (hour, label).
fn x_axis(span: f64) -> (f64, Vec<(f64, String)>) {
    let span = span.clamp(MIN_HOURS_SPAN, MAX_HOURS);
    let step = nice_step(span);
    // At most a few dozen intervals, whatever rounding does.
    let intervals = (span / step - 1e-9).ceil().clamp(1.0, 64.0) as u32;
    let decimals = decimals_for(step);
    let ticks = (0..=intervals)
        .map(|i| {
            let hours = f64::from(i) * step;
            (hours, format_number(hours, decimals))
        })
        .collect();
    (f64::from(intervals) * step, ticks)
}

/// The smallest round step that cuts `span` hours into at most 8 intervals: 1, 2, 2.5 or 5
/// times a power of ten below an hour, then steps that divide a day, then powers of ten again.
fn nice_step(span: f64) -> f64 {
    const MAX_INTERVALS: f64 = 8.0;
    let fits = |step: f64| span / step <= MAX_INTERVALS + 1e-9;
    let below_an_hour = (-4..=-1)
        .flat_map(|exp| [1.0, 2.0, 2.5, 5.0].map(|m| m * 10f64.powi(exp)))
        .collect::<Vec<_>>();
    let hours = [1.0, 2.0, 3.0, 4.0, 6.0, 12.0, 24.0, 48.0];
    let long = (2..=6)
        .flat_map(|exp| [1.0, 2.0, 5.0].map(|m| m * 10f64.powi(exp)))
        .collect::<Vec<_>>();
    below_an_hour
        .into_iter()
        .chain(hours)
        .chain(long)
        .find(|&step| fits(step))
        .unwrap_or(span / MAX_INTERVALS)
}

/// How many decimals print multiples of `step` exactly.
fn decimals_for(step: f64) -> usize {
    (0..6)
        .find(|&d| {
            let scaled = step * 10f64.powi(d as i32);
            (scaled - scaled.round()).abs() < 1e-6
        })
        .unwrap_or(6)
}

/// `value` with at most `decimals` decimals, without trailing zeros ("0.5", "1", "2.25").
fn format_number(value: f64, decimals: usize) -> String {
    let text = format!("{value:.decimals$}");
    if text.contains('.') {
        text.trim_end_matches('0').trim_end_matches('.').to_string()
    } else {
        text
    }
}

/// A score as a percent with at most one decimal ("30%", "33.3%").
fn format_percent(score: f64) -> String {
    format!("{}%", format_number(score * 100.0, 1))
}

/// `text` cut to `max_chars` characters, ending in "..." when cut.
fn fit(text: &str, max_chars: usize) -> String {
    if text.chars().count() <= max_chars {
        text.to_string()
    } else {
        let mut cut: String = text.chars().take(max_chars.saturating_sub(3)).collect();
        cut.push_str("...");
        cut
    }
}

/// How many characters of text at `scale` fit in `width` pixels.
fn chars_in(width: f64, scale: u32) -> usize {
    (width / f64::from(GLYPH_ADVANCE * scale)).max(0.0) as usize
}

/// Snaps a coordinate to a pixel centre, so 1-pixel lines stay crisp.
fn crisp(v: f64) -> f64 {
    v.floor() + 0.5
}

// ---------------------------------------------------------------------------------------------
// The shapes both renderers draw.

/// How text sits on its anchor point (which is always at the text's vertical middle).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Anchor {
    Start,
    Middle,
    End,
}

#[derive(Debug, Clone, PartialEq)]
struct Text {
    text: String,
    at: (f64, f64),
    scale: u32,
    anchor: Anchor,
    colour: Rgb,
    /// Read bottom to top (turned a quarter left).
    vertical: bool,
}

#[derive(Debug, Clone, PartialEq)]
enum Shape {
    Rect {
        x: f64,
        y: f64,
        width: f64,
        height: f64,
        colour: Rgb,
    },
    /// A straight stroke with round caps, solid or dashed (dash, gap).
    Line {
        from: (f64, f64),
        to: (f64, f64),
        width: f64,
        colour: Rgb,
        dash: Option<(f64, f64)>,
    },
    /// Connected strokes with round joins.
    Polyline {
        points: Vec<(f64, f64)>,
        width: f64,
        colour: Rgb,
    },
    Dot {
        centre: (f64, f64),
        radius: f64,
        colour: Rgb,
    },
    Text(Text),
}

fn line(from: (f64, f64), to: (f64, f64), width: f64, colour: Rgb) -> Shape {
    Shape::Line {
        from,
        to,
        width,
        colour,
        dash: None,
    }
}

fn text(text: String, at: (f64, f64), scale: u32, anchor: Anchor, colour: Rgb) -> Shape {
    Shape::Text(Text {
        text,
        at,
        scale,
        anchor,
        colour,
        vertical: false,
    })
}

/// Everything the chart shows, back to front.
fn scene(chart: &Chart) -> Vec<Shape> {
    let layout = Layout::new(chart);
    let plot_width = PLOT_RIGHT - PLOT_LEFT;
    let plot_middle = (
        (PLOT_LEFT + PLOT_RIGHT) / 2.0,
        (PLOT_TOP + PLOT_BOTTOM) / 2.0,
    );
    let mut shapes = vec![Shape::Rect {
        x: 0.0,
        y: 0.0,
        width: f64::from(WIDTH),
        height: f64::from(HEIGHT),
        colour: BACKGROUND,
    }];

    // Grid, axes, ticks and tick labels.
    let left = crisp(PLOT_LEFT);
    let bottom = crisp(PLOT_BOTTOM);
    for percent in (0..=100).step_by(10) {
        let y = crisp(layout.map(0.0, f64::from(percent) / 100.0).1);
        if percent > 0 {
            shapes.push(line((left, y), (crisp(PLOT_RIGHT), y), 1.0, GRID));
        }
        shapes.push(line((left - 5.0, y), (left, y), 1.0, AXIS));
        let label = format!("{percent}%");
        shapes.push(text(label, (left - 9.0, y), MEDIUM, Anchor::End, MUTED));
    }
    for (hours, label) in &layout.x_ticks {
        let x = crisp(layout.map(*hours, 0.0).0);
        if *hours > 0.0 {
            shapes.push(line((x, crisp(PLOT_TOP)), (x, bottom), 1.0, GRID));
        }
        shapes.push(line((x, bottom), (x, bottom + 5.0), 1.0, AXIS));
        let at = (x, bottom + 15.0);
        shapes.push(text(label.clone(), at, MEDIUM, Anchor::Middle, MUTED));
    }
    shapes.push(line((left, crisp(PLOT_TOP)), (left, bottom), 1.0, AXIS));
    shapes.push(line((left, bottom), (crisp(PLOT_RIGHT), bottom), 1.0, AXIS));

    // Titles.
    let title = fit(&chart.title, chars_in(f64::from(WIDTH) - 20.0, LARGE));
    let title_at = (f64::from(WIDTH) / 2.0, 26.0);
    shapes.push(text(title, title_at, LARGE, Anchor::Middle, INK));
    let x_label = fit(&chart.x_label, chars_in(plot_width, MEDIUM));
    let x_label_at = (plot_middle.0, bottom + 44.0);
    shapes.push(text(x_label, x_label_at, MEDIUM, Anchor::Middle, INK));
    let y_label = fit(&chart.y_label, chars_in(PLOT_BOTTOM - PLOT_TOP, MEDIUM));
    shapes.push(Shape::Text(Text {
        text: y_label,
        at: (22.0, plot_middle.1),
        scale: MEDIUM,
        anchor: Anchor::Middle,
        colour: INK,
        vertical: true,
    }));

    // The threshold, under the data.
    if let Some(threshold) = layout.threshold {
        let y = layout.map(0.0, threshold).1;
        shapes.push(Shape::Line {
            from: (PLOT_LEFT, y),
            to: (PLOT_RIGHT, y),
            width: THRESHOLD_WIDTH,
            colour: THRESHOLD_COLOUR,
            dash: Some(THRESHOLD_DASH),
        });
        // Above the line, unless that leaves the plot.
        let label_y = if y - 12.0 > PLOT_TOP + 6.0 {
            y - 12.0
        } else {
            y + 12.0
        };
        let label = format!("threshold {}", format_percent(threshold));
        let at = (PLOT_RIGHT - 6.0, label_y);
        shapes.push(text(label, at, MEDIUM, Anchor::End, THRESHOLD_COLOUR));
    }

    // The series.
    for (index, points) in layout.series.iter().enumerate() {
        if points.is_empty() {
            continue;
        }
        let colour = series_colour(index);
        let points: Vec<_> = points.iter().map(|&(h, s)| layout.map(h, s)).collect();
        shapes.push(Shape::Polyline {
            points: points.clone(),
            width: LINE_WIDTH,
            colour,
        });
        for centre in points {
            shapes.push(Shape::Dot {
                centre,
                radius: MARKER_HALO,
                colour: BACKGROUND,
            });
            shapes.push(Shape::Dot {
                centre,
                radius: MARKER_RADIUS,
                colour,
            });
        }
    }
    if !layout.has_points() {
        let note = "no checkpoints scored yet".to_string();
        shapes.push(text(note, plot_middle, MEDIUM, Anchor::Middle, MUTED));
    }

    // The legend, one row per series (empty ones too, so colours stay put).
    let rows = ((PLOT_BOTTOM - PLOT_TOP) / LEGEND_ROW) as usize;
    let count = chart.series.len();
    let shown = if count <= rows { count } else { rows - 1 };
    let label_chars = chars_in(f64::from(WIDTH) - LEGEND_LEFT - 40.0, MEDIUM);
    let row_y = |row: usize| PLOT_TOP + 8.0 + row as f64 * LEGEND_ROW;
    for (index, series) in chart.series.iter().take(shown).enumerate() {
        let colour = series_colour(index);
        let y = row_y(index);
        let sample = ((LEGEND_LEFT, y), (LEGEND_LEFT + 26.0, y));
        shapes.push(line(sample.0, sample.1, LINE_WIDTH, colour));
        shapes.push(Shape::Dot {
            centre: (LEGEND_LEFT + 13.0, y),
            radius: MARKER_RADIUS,
            colour,
        });
        let label = fit(&series.label, label_chars);
        let at = (LEGEND_LEFT + 34.0, y);
        shapes.push(text(label, at, MEDIUM, Anchor::Start, INK));
    }
    if shown < count {
        let more = format!("+{} more", count - shown);
        let at = (LEGEND_LEFT + 34.0, row_y(shown));
        shapes.push(text(more, at, MEDIUM, Anchor::Start, MUTED));
    }
    shapes
}

// ---------------------------------------------------------------------------------------------
// SVG.

/// The SVG font size matching a bitmap font scale.
fn font_size(scale: u32) -> f64 {
    match scale {
        0 | 1 => 11.0,
        2 => 15.0,
        _ => 21.0,
    }
}

/// A coordinate for SVG: two decimals at most, no trailing zeros.
fn num(v: f64) -> String {
    format_number(v, 2)
}

/// `text` as XML character data or attribute value: markup characters escaped, and characters
/// XML 1.0 forbids replaced by U+FFFD.
fn escape_xml(text: &str) -> String {
    let mut out = String::with_capacity(text.len());
    for c in text.chars() {
        match c {
            '&' => out.push_str("&amp;"),
            '<' => out.push_str("&lt;"),
            '>' => out.push_str("&gt;"),
            '"' => out.push_str("&quot;"),
            '\'' => out.push_str("&apos;"),
            '\t' | '\n' | '\r' => out.push(c),
            c if c < ' ' || c == '\u{fffe}' || c == '\u{ffff}' => out.push('\u{fffd}'),
            c => out.push(c),
        }
    }
    out
}

fn write_svg(shapes: &[Shape], title: &str, out: &mut String) -> fmt::Result {
    writeln!(
        out,
        r#"<?xml version="1.0" encoding="UTF-8" standalone="no"?>"#
    )?;
    writeln!(
        out,
        r#"<svg xmlns="http://www.w3.org/2000/svg" version="1.1" width="{WIDTH}" height="{HEIGHT}" viewBox="0 0 {WIDTH} {HEIGHT}" font-family="sans-serif">"#
    )?;
    writeln!(out, "<title>{}</title>", escape_xml(title))?;
    for shape in shapes {
        match shape {
            Shape::Rect {
                x,
                y,
                width,
                height,
                colour,
            } => writeln!(
                out,
                r#"<rect x="{}" y="{}" width="{}" height="{}" fill="{colour}"/>"#,
                num(*x),
                num(*y),
                num(*width),
                num(*height),
            )?,
            Shape::Line {
                from,
                to,
                width,
                colour,
                dash,
            } => {
                write!(
                    out,
                    r#"<line x1="{}" y1="{}" x2="{}" y2="{}" stroke="{colour}" stroke-width="{}" stroke-linecap="round""#,
                    num(from.0),
                    num(from.1),
                    num(to.0),
                    num(to.1),
                    num(*width),
                )?;
                if let Some((on, off)) = dash {
                    write!(out, r#" stroke-dasharray="{} {}""#, num(*on), num(*off))?;
                }
                writeln!(out, "/>")?;
            }
            Shape::Polyline {
                points,
                width,
                colour,
            } => {
                let points: Vec<_> = points
                    .iter()
                    .map(|(x, y)| format!("{},{}", num(*x), num(*y)))
                    .collect();
                writeln!(
                    out,
                    r#"<polyline points="{}" fill="none" stroke="{colour}" stroke-width="{}" stroke-linejoin="round" stroke-linecap="round"/>"#,
                    points.join(" "),
                    num(*width),
                )?;
            }
            Shape::Dot {
                centre,
                radius,
                colour,
            } => writeln!(
                out,
                r#"<circle cx="{}" cy="{}" r="{}" fill="{colour}"/>"#,
                num(centre.0),
                num(centre.1),
                num(*radius),
            )?,
            Shape::Text(t) => {
                let size = font_size(t.scale);
                let anchor = match t.anchor {
                    Anchor::Start => "start",
                    Anchor::Middle => "middle",
                    Anchor::End => "end",
                };
                // The anchor is the text's vertical middle; SVG places the baseline.
                let (x, y) = (num(t.at.0), num(t.at.1 + 0.36 * size));
                write!(
                    out,
                    r#"<text x="{x}" y="{y}" font-size="{}" text-anchor="{anchor}" fill="{}""#,
                    num(size),
                    t.colour,
                )?;
                if t.vertical {
                    let (cx, cy) = (num(t.at.0), num(t.at.1));
                    write!(out, r#" transform="rotate(-90 {cx} {cy})""#)?;
                }
                writeln!(out, ">{}</text>", escape_xml(&t.text))?;
            }
        }
    }
    writeln!(out, "</svg>")
}

// ---------------------------------------------------------------------------------------------
// Rasterising.

const W: usize = WIDTH as usize;
const H: usize = HEIGHT as usize;

/// An RGB image of the chart's size.
struct Canvas {
    /// Row-major, 3 bytes a pixel.
    pixels: Vec<u8>,
}

impl Canvas {
    fn new(colour: Rgb) -> Self {
        Canvas {
            pixels: [colour.0, colour.1, colour.2].repeat(W * H),
        }
    }

    fn index(x: i64, y: i64) -> Option<usize> {
        let x = usize::try_from(x).ok().filter(|&x| x < W)?;
        let y = usize::try_from(y).ok().filter(|&y| y < H)?;
        Some((y * W + x) * 3)
    }

    /// Mixes `colour` into the pixel with weight `alpha` (0 to 1); outside pixels are ignored.
    fn blend(&mut self, x: i64, y: i64, colour: Rgb, alpha: f32) {
        let Some(i) = Self::index(x, y) else { return };
        let alpha = alpha.clamp(0.0, 1.0);
        for (old, new) in self.pixels[i..i + 3]
            .iter_mut()
            .zip([colour.0, colour.1, colour.2])
        {
            let mixed = f32::from(*old) * (1.0 - alpha) + f32::from(new) * alpha;
            *old = mixed.round().clamp(0.0, 255.0) as u8;
        }
    }

    fn fill_rect(&mut self, x: f64, y: f64, width: f64, height: f64, colour: Rgb) {
        let (x0, y0) = (x.round() as i64, y.round() as i64);
        let (x1, y1) = ((x + width).round() as i64, (y + height).round() as i64);
        for py in y0.max(0)..y1.min(H as i64) {
            for px in x0.max(0)..x1.min(W as i64) {
                self.blend(px, py, colour, 1.0);
            }
        }
    }
}

/// How much of each pixel a shape covers, so overlapping parts of one shape (a polyline's
/// joints, say) are painted once.
struct Mask {
    coverage: Vec<f32>,
    /// The touched area: x0, y0, x1, y1 (exclusive).
    dirty: Option<(usize, usize, usize, usize)>,
}

impl Mask {
    fn new() -> Self {
        Mask {
            coverage: vec![0.0; W * H],
            dirty: None,
        }
    }

    /// Covers the pixels whose centres lie in `(x0, y0)..=(x1, y1)` by `cover(centre)`.
    fn cover(&mut self, (x0, y0, x1, y1): (f64, f64, f64, f64), cover: impl Fn(f64, f64) -> f64) {
        let clip = |v: f64, max: usize| v.clamp(0.0, max as f64) as usize;
        let (x0, x1) = (clip(x0.floor(), W), clip(x1.ceil() + 1.0, W));
        let (y0, y1) = (clip(y0.floor(), H), clip(y1.ceil() + 1.0, H));
        if x0 >= x1 || y0 >= y1 {
            return;
        }
        for y in y0..y1 {
            for x in x0..x1 {
                let c = cover(x as f64 + 0.5, y as f64 + 0.5) as f32;
                let cell = &mut self.coverage[y * W + x];
                *cell = cell.max(c);
            }
        }
        self.dirty = Some(match self.dirty {
            None => (x0, y0, x1, y1),
            Some((a, b, c, d)) => (a.min(x0), b.min(y0), c.max(x1), d.max(y1)),
        });
    }

    /// A stroke from `a` to `b`, `width` wide, with round caps.
    fn segment(&mut self, a: (f64, f64), b: (f64, f64), width: f64) {
        let half = width / 2.0;
        let reach = half + 1.0;
        let bounds = (
            a.0.min(b.0) - reach,
            a.1.min(b.1) - reach,
            a.0.max(b.0) + reach,
            a.1.max(b.1) + reach,
        );
        let (dx, dy) = (b.0 - a.0, b.1 - a.1);
        let length2 = dx * dx + dy * dy;
        self.cover(bounds, |x, y| {
            let t = if length2 > 0.0 {
                (((x - a.0) * dx + (y - a.1) * dy) / length2).clamp(0.0, 1.0)
            } else {
                0.0
            };
            let distance = (x - a.0 - t * dx).hypot(y - a.1 - t * dy);
            (half + 0.5 - distance).clamp(0.0, 1.0)
        });
    }

    /// A dashed stroke: `dash` pixels drawn, `gap` skipped, starting at `a`.
    fn dashed(&mut self, a: (f64, f64), b: (f64, f64), width: f64, (dash, gap): (f64, f64)) {
        let length = (b.0 - a.0).hypot(b.1 - a.1);
        if length <= 0.0 || dash <= 0.0 {
            return self.segment(a, b, width);
        }
        let along = |d: f64| {
            (
                a.0 + (b.0 - a.0) * d / length,
                a.1 + (b.1 - a.1) * d / length,
            )
        };
        let mut start = 0.0;
        while start < length {
            self.segment(along(start), along((start + dash).min(length)), width);
            start += dash + gap.max(0.0);
        }
    }

    fn disk(&mut self, centre: (f64, f64), radius: f64) {
        let reach = radius + 1.0;
        let bounds = (
            centre.0 - reach,
            centre.1 - reach,
            centre.0 + reach,
            centre.1 + reach,
        );
        self.cover(bounds, |x, y| {
            let distance = (x - centre.0).hypot(y - centre.1);
            (radius + 0.5 - distance).clamp(0.0, 1.0)
        });
    }

    /// Paints `colour` through the mask onto `canvas`, and clears the mask.
    fn paint(&mut self, canvas: &mut Canvas, colour: Rgb) {
        let Some((x0, y0, x1, y1)) = self.dirty.take() else {
            return;
        };
        for y in y0..y1 {
            for x in x0..x1 {
                let cell = &mut self.coverage[y * W + x];
                if *cell > 0.0 {
                    canvas.blend(x as i64, y as i64, colour, *cell);
                    *cell = 0.0;
                }
            }
        }
    }
}

fn rasterise(shapes: &[Shape]) -> Canvas {
    let mut canvas = Canvas::new(BACKGROUND);
    let mut mask = Mask::new();
    for shape in shapes {
        match shape {
            Shape::Rect {
                x,
                y,
                width,
                height,
                colour,
            } => canvas.fill_rect(*x, *y, *width, *height, *colour),
            Shape::Line {
                from,
                to,
                width,
                colour,
                dash,
            } => {
                match dash {
                    Some(dash) => mask.dashed(*from, *to, *width, *dash),
                    None => mask.segment(*from, *to, *width),
                }
                mask.paint(&mut canvas, *colour);
            }
            Shape::Polyline {
                points,
                width,
                colour,
            } => {
                for pair in points.windows(2) {
                    mask.segment(pair[0], pair[1], *width);
                }
                mask.paint(&mut canvas, *colour);
            }
            Shape::Dot {
                centre,
                radius,
                colour,
            } => {
                mask.disk(*centre, *radius);
                mask.paint(&mut canvas, *colour);
            }
            Shape::Text(t) => draw_text(&mut canvas, t),
        }
    }
    canvas
}

// ---------------------------------------------------------------------------------------------
// The bitmap font.

/// Glyph cell width: 5 columns of ink and one of space.
const GLYPH_ADVANCE: u32 = 6;
/// Glyph height: 7 rows, from the capital height to the baseline.
const GLYPH_ROWS: u32 = 7;
/// These glyphs sit 2 rows lower, their tails below the baseline.
const DESCENDERS: &str = "gpqy";

/// Printable ASCII (32 to 126), 7 rows of 5 pixels each; bit 4 is the leftmost pixel.
#[rustfmt::skip]
const FONT: [[u8; 7]; 95] = [
    [0b00000, 0b00000, 0b00000, 0b00000, 0b00000, 0b00000, 0b00000], // ' '
    [0b00100, 0b00100, 0b00100, 0b00100, 0b00100, 0b00000, 0b00100], // !
    [0b01010, 0b01010, 0b01010, 0b00000, 0b00000, 0b00000, 0b00000], // "
    [0b01010, 0b01010, 0b11111, 0b01010, 0b11111, 0b01010, 0b01010], // #
    [0b00100, 0b01111, 0b10100, 0b01110, 0b00101, 0b11110, 0b00100], // $
    [0b11000, 0b11001, 0b00010, 0b00100, 0b01000, 0b10011, 0b00011], // %
    [0b01100, 0b10010, 0b10100, 0b01000, 0b10101, 0b10010, 0b01101], // &
    [0b00100, 0b00100, 0b01000, 0b00000, 0b00000, 0b00000, 0b00000], // '
    [0b00010, 0b00100, 0b01000, 0b01000, 0b01000, 0b00100, 0b00010], // (
    [0b01000, 0b00100, 0b00010, 0b00010, 0b00010, 0b00100, 0b01000], // )
    [0b00000, 0b00100, 0b10101, 0b01110, 0b10101, 0b00100, 0b00000], // *
    [0b00000, 0b00100, 0b00100, 0b11111, 0b00100, 0b00100, 0b00000], // +
    [0b00000, 0b00000, 0b00000, 0b00000, 0b01100, 0b00100, 0b01000], // ,
    [0b00000, 0b00000, 0b00000, 0b11111, 0b00000, 0b00000, 0b00000], // -
    [0b00000, 0b00000, 0b00000, 0b00000, 0b00000, 0b01100, 0b01100], // .
    [0b00000, 0b00001, 0b00010, 0b00100, 0b01000, 0b10000, 0b00000], // /
    [0b01110, 0b10001, 0b10011, 0b10101, 0b11001, 0b10001, 0b01110], // 0
    [0b00100, 0b01100, 0b00100, 0b00100, 0b00100, 0b00100, 0b01110], // 1
    [0b01110, 0b10001, 0b00001, 0b00010, 0b00100, 0b01000, 0b11111], // 2
    [0b11111, 0b00010, 0b00100, 0b00010, 0b00001, 0b10001, 0b01110], // 3
    [0b00010, 0b00110, 0b01010, 0b10010, 0b11111, 0b00010, 0b00010], // 4
    [0b11111, 0b10000, 0b11110, 0b00001, 0b00001, 0b10001, 0b01110], // 5
    [0b00110, 0b01000, 0b10000, 0b11110, 0b10001, 0b10001, 0b01110], // 6
    [0b11111, 0b00001, 0b00010, 0b00100, 0b01000, 0b01000, 0b01000], // 7
    [0b01110, 0b10001, 0b10001, 0b01110, 0b10001, 0b10001, 0b01110], // 8
    [0b01110, 0b10001, 0b10001, 0b01111, 0b00001, 0b00010, 0b01100], // 9
    [0b00000, 0b01100, 0b01100, 0b00000, 0b01100, 0b01100, 0b00000], // :
    [0b00000, 0b01100, 0b01100, 0b00000, 0b01100, 0b00100, 0b01000], // ;
    [0b00010, 0b00100, 0b01000, 0b10000, 0b01000, 0b00100, 0b00010], // <
    [0b00000, 0b00000, 0b11111, 0b00000, 0b11111, 0b00000, 0b00000], // =
    [0b01000, 0b00100, 0b00010, 0b00001, 0b00010, 0b00100, 0b01000], // >
    [0b01110, 0b10001, 0b00001, 0b00010, 0b00100, 0b00000, 0b00100], // ?
    [0b01110, 0b10001, 0b00001, 0b01101, 0b10101, 0b10101, 0b01110], // @
    [0b01110, 0b10001, 0b10001, 0b11111, 0b10001, 0b10001, 0b10001], // A
    [0b11110, 0b10001, 0b10001, 0b11110, 0b10001, 0b10001, 0b11110], // B
    [0b01110, 0b10001, 0b10000, 0b10000, 0b10000, 0b10001, 0b01110], // C
    [0b11100, 0b10010, 0b10001, 0b10001, 0b10001, 0b10010, 0b11100], // D
    [0b11111, 0b10000, 0b10000, 0b11110, 0b10000, 0b10000, 0b11111], // E
    [0b11111, 0b10000, 0b10000, 0b11110, 0b10000, 0b10000, 0b10000], // F
    [0b01110, 0b10001, 0b10000, 0b10111, 0b10001, 0b10001, 0b01111], // G
    [0b10001, 0b10001, 0b10001, 0b11111, 0b10001, 0b10001, 0b10001], // H
    [0b01110, 0b00100, 0b00100, 0b00100, 0b00100, 0b00100, 0b01110], // I
    [0b00111, 0b00010, 0b00010, 0b00010, 0b00010, 0b10010, 0b01100], // J
    [0b10001, 0b10010, 0b10100, 0b11000, 0b10100, 0b10010, 0b10001], // K
    [0b10000, 0b10000, 0b10000, 0b10000, 0b10000, 0b10000, 0b11111], // L
    [0b10001, 0b11011, 0b10101, 0b10101, 0b10001, 0b10001, 0b10001], // M
    [0b10001, 0b10001, 0b11001, 0b10101, 0b10011, 0b10001, 0b10001], // N
    [0b01110, 0b10001, 0b10001, 0b10001, 0b10001, 0b10001, 0b01110], // O
    [0b11110, 0b10001, 0b10001, 0b11110, 0b10000, 0b10000, 0b10000], // P
    [0b01110, 0b10001, 0b10001, 0b10001, 0b10101, 0b10010, 0b01101], // Q
    [0b11110, 0b10001, 0b10001, 0b11110, 0b10100, 0b10010, 0b10001], // R
    [0b01111, 0b10000, 0b10000, 0b01110, 0b00001, 0b00001, 0b11110], // S
    [0b11111, 0b00100, 0b00100, 0b00100, 0b00100, 0b00100, 0b00100], // T
    [0b10001, 0b10001, 0b10001, 0b10001, 0b10001, 0b10001, 0b01110], // U
    [0b10001, 0b10001, 0b10001, 0b10001, 0b10001, 0b01010, 0b00100], // V
    [0b10001, 0b10001, 0b10001, 0b10101, 0b10101, 0b10101, 0b01010], // W
    [0b10001, 0b10001, 0b01010, 0b00100, 0b01010, 0b10001, 0b10001], // X
    [0b10001, 0b10001, 0b01010, 0b00100, 0b00100, 0b00100, 0b00100], // Y
    [0b11111, 0b00001, 0b00010, 0b00100, 0b01000, 0b10000, 0b11111], // Z
    [0b01110, 0b01000, 0b01000, 0b01000, 0b01000, 0b01000, 0b01110], // [
    [0b00000, 0b10000, 0b01000, 0b00100, 0b00010, 0b00001, 0b00000], // \
    [0b01110, 0b00010, 0b00010, 0b00010, 0b00010, 0b00010, 0b01110], // ]
    [0b00100, 0b01010, 0b10001, 0b00000, 0b00000, 0b00000, 0b00000], // ^
    [0b00000, 0b00000, 0b00000, 0b00000, 0b00000, 0b00000, 0b11111], // _
    [0b01000, 0b00100, 0b00010, 0b00000, 0b00000, 0b00000, 0b00000], // `
    [0b00000, 0b00000, 0b01110, 0b00001, 0b01111, 0b10001, 0b01111], // a
    [0b10000, 0b10000, 0b10110, 0b11001, 0b10001, 0b10001, 0b11110], // b
    [0b00000, 0b00000, 0b01110, 0b10000, 0b10000, 0b10001, 0b01110], // c
    [0b00001, 0b00001, 0b01101, 0b10011, 0b10001, 0b10001, 0b01111], // d
    [0b00000, 0b00000, 0b01110, 0b10001, 0b11111, 0b10000, 0b01110], // e
    [0b00110, 0b01001, 0b01000, 0b11100, 0b01000, 0b01000, 0b01000], // f
    [0b01111, 0b10001, 0b10001, 0b10001, 0b01111, 0b00001, 0b01110], // g (descends)
    [0b10000, 0b10000, 0b10110, 0b11001, 0b10001, 0b10001, 0b10001], // h
    [0b00100, 0b00000, 0b01100, 0b00100, 0b00100, 0b00100, 0b01110], // i
    [0b00010, 0b00000, 0b00110, 0b00010, 0b00010, 0b10010, 0b01100], // j
    [0b10000, 0b10000, 0b10010, 0b10100, 0b11000, 0b10100, 0b10010], // k
    [0b01100, 0b00100, 0b00100, 0b00100, 0b00100, 0b00100, 0b01110], // l
    [0b00000, 0b00000, 0b11010, 0b10101, 0b10101, 0b10001, 0b10001], // m
    [0b00000, 0b00000, 0b10110, 0b11001, 0b10001, 0b10001, 0b10001], // n
    [0b00000, 0b00000, 0b01110, 0b10001, 0b10001, 0b10001, 0b01110], // o
    [0b11110, 0b10001, 0b10001, 0b10001, 0b11110, 0b10000, 0b10000], // p (descends)
    [0b01111, 0b10001, 0b10001, 0b10001, 0b01111, 0b00001, 0b00001], // q (descends)
    [0b00000, 0b00000, 0b10110, 0b11001, 0b10000, 0b10000, 0b10000], // r
    [0b00000, 0b00000, 0b01111, 0b10000, 0b01110, 0b00001, 0b11110], // s
    [0b01000, 0b01000, 0b11100, 0b01000, 0b01000, 0b01001, 0b00110], // t
    [0b00000, 0b00000, 0b10001, 0b10001, 0b10001, 0b10011, 0b01101], // u
    [0b00000, 0b00000, 0b10001, 0b10001, 0b10001, 0b01010, 0b00100], // v
    [0b00000, 0b00000, 0b10001, 0b10001, 0b10101, 0b10101, 0b01010], // w
    [0b00000, 0b00000, 0b10001, 0b01010, 0b00100, 0b01010, 0b10001], // x
    [0b10001, 0b10001, 0b10001, 0b10001, 0b01111, 0b00001, 0b01110], // y (descends)
    [0b00000, 0b00000, 0b11111, 0b00010, 0b00100, 0b01000, 0b11111], // z
    [0b00110, 0b00100, 0b00100, 0b01000, 0b00100, 0b00100, 0b00110], // {
    [0b00100, 0b00100, 0b00100, 0b00100, 0b00100, 0b00100, 0b00100], // |
    [0b01100, 0b00100, 0b00100, 0b00010, 0b00100, 0b00100, 0b01100], // }
    [0b00000, 0b00000, 0b01000, 0b10101, 0b00010, 0b00000, 0b00000], // ~
];

/// The rows of `c`'s glyph ('?' for characters outside printable ASCII) and how many rows
/// below the capital height it starts.
fn glyph(c: char) -> (&'static [u8; 7], u32) {
    let c = if (' '..='~').contains(&c) { c } else { '?' };
    let drop = if DESCENDERS.contains(c) { 2 } else { 0 };
    (&FONT[c as usize - ' ' as usize], drop)
}

/// Draws text in the bitmap font, each font pixel a `scale` x `scale` square.
fn draw_text(canvas: &mut Canvas, t: &Text) {
    let scale = i64::from(t.scale.max(1));
    let advance = i64::from(GLYPH_ADVANCE) * scale;
    let count = t.text.chars().count() as i64;
    if count == 0 {
        return;
    }
    let length = count * advance - scale;
    let start = match t.anchor {
        Anchor::Start => 0,
        Anchor::Middle => length / 2,
        Anchor::End => length,
    };
    let half_height = i64::from(GLYPH_ROWS) * scale / 2;
    let (ax, ay) = (t.at.0.round() as i64, t.at.1.round() as i64);
    for (i, c) in t.text.chars().enumerate() {
        let (rows, drop) = glyph(c);
        for (row, bits) in (0i64..).zip(rows) {
            for column in 0..5 {
                if bits >> (4 - column) & 1 == 0 {
                    continue;
                }
                // `along` runs with the text, `across` down its glyphs.
                let along = i as i64 * advance + column * scale - start;
                let across = (row + i64::from(drop)) * scale - half_height;
                for a in 0..scale {
                    for b in 0..scale {
                        let (x, y) = if t.vertical {
                            (ax + across + b, ay - along - a)
                        } else {
                            (ax + along + a, ay + across + b)
                        };
                        canvas.blend(x, y, t.colour, 1.0);
                    }
                }
            }
        }
    }
}

// ---------------------------------------------------------------------------------------------
// PNG encoding.

const PNG_SIGNATURE: [u8; 8] = [0x89, b'P', b'N', b'G', b'\r', b'\n', 0x1a, b'\n'];

/// The CRC-32 (ISO 3309, reflected polynomial 0xEDB88320) of each byte value.
const CRC_TABLE: [u32; 256] = {
    let mut table = [0u32; 256];
    let mut n = 0;
    while n < 256 {
        let mut c = n as u32;
        let mut k = 0;
        while k < 8 {
            c = if c & 1 == 1 {
                0xEDB8_8320 ^ (c >> 1)
            } else {
                c >> 1
            };
            k += 1;
        }
        table[n] = c;
        n += 1;
    }
    table
};

/// The CRC-32 PNG chunks carry.
pub(crate) fn crc32(bytes: &[u8]) -> u32 {
    !bytes.iter().fold(!0u32, |crc, &b| {
        CRC_TABLE[((crc ^ u32::from(b)) & 0xff) as usize] ^ (crc >> 8)
    })
}

/// Appends a chunk: length, type, data, CRC of type and data.
fn write_chunk(out: &mut Vec<u8>, kind: &[u8; 4], data: &[u8]) {
    // Chunks here are far below 2^31 bytes: one image of 960x540.
    let length = u32::try_from(data.len()).unwrap_or(u32::MAX);
    out.extend_from_slice(&length.to_be_bytes());
    let start = out.len();
    out.extend_from_slice(kind);
    out.extend_from_slice(data);
    let crc = crc32(&out[start..]);
    out.extend_from_slice(&crc.to_be_bytes());
}

fn encode_png(canvas: &Canvas) -> Vec<u8> {
    let mut raw = Vec::with_capacity(H * (1 + W * 3));
    for row in canvas.pixels.chunks_exact(W * 3) {
        raw.push(0); // filter: none
        raw.extend_from_slice(row);
    }
    let mut header = Vec::with_capacity(13);
    header.extend_from_slice(&WIDTH.to_be_bytes());
    header.extend_from_slice(&HEIGHT.to_be_bytes());
    // 8 bits a sample, RGB, deflate, adaptive filtering, no interlace.
    header.extend_from_slice(&[8, 2, 0, 0, 0]);

    let mut out = PNG_SIGNATURE.to_vec();
    write_chunk(&mut out, b"IHDR", &header);
    write_chunk(
        &mut out,
        b"IDAT",
        &miniz_oxide::deflate::compress_to_vec_zlib(&raw, 6),
    );
    write_chunk(&mut out, b"IEND", &[]);
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    fn chart(series: Vec<Series>) -> Chart {
        Chart {
            title: "ProgramBench: tasks kept".into(),
            x_label: "hours".into(),
            y_label: "pass rate (kept)".into(),
            series,
            threshold: None,
            x_max: Some(2.0),
        }
    }

    fn series(label: &str, points: &[(f64, f64)]) -> Series {
        Series {
            label: label.into(),
            points: points.to_vec(),
        }
    }

    /// A decoded PNG: width, height, RGB pixels.
    struct Image {
        width: usize,
        height: usize,
        rgb: Vec<u8>,
    }

    impl Image {
        fn pixel(&self, x: f64, y: f64) -> Rgb {
            let i = (y as usize * self.width + x as usize) * 3;
            Rgb(self.rgb[i], self.rgb[i + 1], self.rgb[i + 2])
        }
    }

    /// Decodes what `png` writes, checking the structure on the way.
    fn decode(png: &[u8]) -> Image {
        assert_eq!(&png[..8], &PNG_SIGNATURE, "signature");
        let mut rest = &png[8..];
        let (mut width, mut height, mut idat, mut kinds) = (0, 0, Vec::new(), Vec::new());
        while !rest.is_empty() {
            let length = u32::from_be_bytes(rest[..4].try_into().unwrap()) as usize;
            let kind = &rest[4..8];
            let data = &rest[8..8 + length];
            let crc = u32::from_be_bytes(rest[8 + length..12 + length].try_into().unwrap());
            assert_eq!(crc, crc32(&rest[4..8 + length]), "CRC of {kind:?}");
            match kind {
                b"IHDR" => {
                    width = u32::from_be_bytes(data[..4].try_into().unwrap()) as usize;
                    height = u32::from_be_bytes(data[4..8].try_into().unwrap()) as usize;
                    assert_eq!(&data[8..], &[8, 2, 0, 0, 0], "8-bit RGB");
                }
                b"IDAT" => idat.extend_from_slice(data),
                _ => {}
            }
            kinds.push(kind.to_vec());
            rest = &rest[12 + length..];
        }
        assert_eq!(kinds.first().map(Vec::as_slice), Some(&b"IHDR"[..]));
        assert_eq!(kinds.last().map(Vec::as_slice), Some(&b"IEND"[..]));
        let raw = miniz_oxide::inflate::decompress_to_vec_zlib(&idat).expect("zlib stream");
        let stride = 1 + width * 3;
        assert_eq!(raw.len(), height * stride, "decoded size");
        let mut rgb = Vec::with_capacity(width * height * 3);
        for row in raw.chunks_exact(stride) {
            assert_eq!(row[0], 0, "filter byte");
            rgb.extend_from_slice(&row[1..]);
        }
        Image { width, height, rgb }
    }

    #[test]
    fn crc32_matches_the_standard_check_value() {
        assert_eq!(crc32(b"123456789"), 0xCBF4_3926);
    }

    #[test]
    fn png_is_a_valid_960x540_rgb_image() {
        let c = chart(vec![series("N = 1", &[(0.0, 0.1), (1.0, 0.4)])]);
        let image = decode(&png(&c));
        assert_eq!((image.width, image.height), (960, 540));
    }

    #[test]
    fn a_pixel_on_a_series_line_has_its_colour() {
        let mut c = chart(vec![
            series("N = 1", &[(0.0, 0.5), (2.0, 0.5)]),
            series("N = 8", &[(0.0, 0.2), (2.0, 0.6)]),
        ]);
        c.x_max = Some(2.0);
        let image = decode(&png(&c));
        let (x, y) = to_pixel(&c, 1.0, 0.5);
        assert_eq!(image.pixel(x, y), series_colour(0));
        let (x, y) = to_pixel(&c, 1.0, 0.4);
        assert_eq!(image.pixel(x, y), series_colour(1));
        assert_ne!(series_colour(0), series_colour(1));
    }

    #[test]
    fn to_pixel_maps_the_data_range_onto_the_plot() {
        let c = chart(vec![]);
        assert_eq!(to_pixel(&c, 0.0, 0.0), (PLOT_LEFT, PLOT_BOTTOM));
        assert_eq!(to_pixel(&c, 2.0, 1.0), (PLOT_RIGHT, PLOT_TOP));
    }

    #[test]
    fn a_single_point_series_still_shows_a_marker() {
        let c = chart(vec![series("N = 1", &[(1.0, 0.5)])]);
        let image = decode(&png(&c));
        let (x, y) = to_pixel(&c, 1.0, 0.5);
        assert_eq!(image.pixel(x, y), series_colour(0));
    }

    #[test]
    fn the_threshold_line_is_drawn() {
        let mut c = chart(vec![]);
        c.threshold = Some(0.3);
        let image = decode(&png(&c));
        let (x, y) = to_pixel(&c, 0.0, 0.3);
        // Inside the first dash, clear of the y axis.
        assert_eq!(image.pixel(x + 3.0, y), THRESHOLD_COLOUR);
        assert!(svg(&c).contains("threshold 30%"));
    }

    #[test]
    fn no_threshold_line_without_a_threshold() {
        let c = chart(vec![]);
        let image = decode(&png(&c));
        let (x, y) = to_pixel(&c, 0.0, 0.3);
        assert_ne!(image.pixel(x + 3.0, y), THRESHOLD_COLOUR);
        assert!(!svg(&c).contains("threshold"));
    }

    #[test]
    fn svg_escapes_labels() {
        let mut c = chart(vec![series("<script>&\"'", &[(0.0, 0.5)])]);
        c.title = "a < b".into();
        let out = svg(&c);
        assert!(out.contains("&lt;script&gt;&amp;&quot;&apos;"), "{out}");
        assert!(!out.contains("<script"));
        assert!(out.contains("a &lt; b"));
        assert!(out.starts_with("<?xml"));
        assert!(out.contains(r#"xmlns="http://www.w3.org/2000/svg""#));
    }

    #[test]
    fn svg_has_a_polyline_per_non_empty_series_and_a_legend() {
        let c = chart(vec![
            series("N = 1", &[(0.0, 0.1), (1.0, 0.3)]),
            series("N = 4", &[]),
            series("N = 8", &[(0.5, 0.2)]),
        ]);
        let out = svg(&c);
        assert_eq!(out.matches("<polyline").count(), 2);
        for label in ["N = 1", "N = 4", "N = 8"] {
            assert!(out.contains(&format!(">{label}</text>")), "legend {label}");
        }
        assert!(!out.contains("no checkpoints scored yet"));
    }

    #[test]
    fn non_finite_points_are_dropped_and_out_of_range_ones_clamped() {
        let points = [
            (0.0, f64::NAN),
            (f64::INFINITY, 0.5),
            (0.5, -0.2),
            (1.0, 1.7),
            (-1.0, 0.4),
            (1.5, f64::NEG_INFINITY),
        ];
        assert_eq!(
            clean_points(&points),
            vec![(0.0, 0.4), (0.5, 0.0), (1.0, 1.0)]
        );
        let mut c = chart(vec![
            series("N = 1", &points),
            series("bad points", &[(f64::NAN, f64::NAN)]),
        ]);
        c.threshold = Some(f64::NAN);
        c.x_max = Some(f64::INFINITY);
        let out = svg(&c);
        assert!(!out.contains("NaN") && !out.contains("inf"), "{out}");
        assert_eq!(out.matches("<polyline").count(), 1);
        decode(&png(&c));
    }

    #[test]
    fn a_chart_without_checkpoints_says_so() {
        for c in [chart(vec![]), chart(vec![series("N = 1", &[])])] {
            assert!(svg(&c).contains("no checkpoints scored yet"));
            assert_eq!(svg(&c).matches("<polyline").count(), 0);
            decode(&png(&c));
        }
    }

    #[test]
    fn x_ticks_suit_the_range() {
        let labels = |span: f64| {
            let (end, ticks) = x_axis(span);
            let labels: Vec<_> = ticks.into_iter().map(|(_, label)| label).collect();
            (end, labels.join(" "))
        };
        assert_eq!(labels(0.05), (0.05, "0 0.01 0.02 0.03 0.04 0.05".into()));
        assert_eq!(labels(1.0), (1.0, "0 0.2 0.4 0.6 0.8 1".into()));
        assert_eq!(labels(3.3).1, "0 0.5 1 1.5 2 2.5 3 3.5");
        assert_eq!(labels(24.0), (24.0, "0 3 6 9 12 15 18 21 24".into()));
        // No data and no planned hours: the shortest axis.
        assert_eq!(labels(0.0).0, 0.05);
    }

    #[test]
    fn unknown_characters_are_drawn_as_question_marks() {
        assert_eq!(glyph('é'), glyph('?'));
        assert_eq!(glyph('\n'), glyph('?'));
        assert_ne!(glyph('A'), glyph('?'));
    }

    #[test]
    fn the_title_is_drawn_in_the_png() {
        let c = chart(vec![]);
        let image = decode(&png(&c));
        let ink = (0..40)
            .flat_map(|y| (0..960).map(move |x| (x, y)))
            .filter(|&(x, y)| image.pixel(f64::from(x), f64::from(y)) == INK)
            .count();
        assert!(ink > 100, "{ink} title pixels");
    }

    #[test]
    fn output_is_deterministic() {
        let mut c = chart(vec![
            series("N = 1", &[(0.0, 0.1), (0.7, 0.35), (1.9, 0.6)]),
            series("N = 8", &[(0.2, 0.05), (1.1, 0.5)]),
        ]);
        c.threshold = Some(0.45);
        assert_eq!(png(&c), png(&c));
        assert_eq!(svg(&c), svg(&c));
    }

    #[test]
    fn colours_cycle_and_a_long_legend_is_cut_short() {
        assert_eq!(series_colour(8), series_colour(0));
        let many = (0..20)
            .map(|n| series(&format!("N = {n}"), &[(0.0, 0.1)]))
            .collect();
        let out = svg(&chart(many));
        assert!(out.contains(">N = 16</text>"));
        assert!(!out.contains(">N = 17</text>"));
        assert!(out.contains(">+3 more</text>"));
    }
}
