//! The sweep's pictures: per op and series, time against density on log-log axes, one
//! line per layout, peers dashed, each sparse layout's crossover marked; and one of the
//! conversions per series.

use super::report::{describe_series, Crossover, PeerRecord, Record};
use super::{Meta, Vary, CONVERSIONS};
use crate::error::CliError;
use plotters::prelude::*;
use plotters::style::text_anchor::{HPos, Pos, VPos};
use std::path::Path;

const W: u32 = 900;
const H: u32 = 560;

/// The colour of a layout (peers on that layout share it, dashed).
fn color(layout: &str) -> RGBColor {
    match layout {
        "dense" => RGBColor(31, 119, 180),
        "csr" => RGBColor(214, 39, 40),
        "coo" => RGBColor(44, 160, 44),
        _ => RGBColor(100, 100, 100),
    }
}

/// A further colour for the n-th conversion or peer.
fn palette(i: usize) -> RGBColor {
    const P: [RGBColor; 8] = [
        RGBColor(31, 119, 180),
        RGBColor(255, 127, 14),
        RGBColor(44, 160, 44),
        RGBColor(214, 39, 40),
        RGBColor(148, 103, 189),
        RGBColor(140, 86, 75),
        RGBColor(227, 119, 194),
        RGBColor(127, 127, 127),
    ];
    P[i % P.len()]
}

fn err<E: std::fmt::Debug>(path: &Path) -> impl Fn(E) -> CliError + '_ {
    move |e| CliError::file(path, format!("cannot draw the plot: {e:?}"))
}

/// A tick label as a plain number of up to three significant digits: 200, 90, 1, 0.03.
pub(crate) fn tick(y: f64) -> String {
    if y.is_nan() || y <= 0.0 {
        return "0".into();
    }
    let digits = (2 - y.log10().floor() as i32).max(0) as usize;
    let s = format!("{y:.digits$}");
    if s.contains('.') {
        s.trim_end_matches('0').trim_end_matches('.').to_string()
    } else {
        s
    }
}

/// One named line of a plot: points (density, ms), colour, dashed or solid.
struct Line {
    label: String,
    points: Vec<(f64, f64)>,
    color: RGBColor,
    dashed: bool,
}

impl Line {
    /// A solid line of the engine's timings; `None` where nothing was measured.
    fn solid(label: String, points: Vec<(f64, f64)>, color: RGBColor) -> Option<Line> {
        (!points.is_empty()).then_some(Line {
            label,
            points,
            color,
            dashed: false,
        })
    }
}

/// The x axis's words for a series.
fn x_desc(vary: Vary) -> &'static str {
    match vary {
        Vary::Stored => "stored density (stored entries / elements, log)",
        Vary::Mask => "mask density (valid elements / elements, log)",
    }
}

/// Draws `lines` on log-log axes into `path`, marking `marks` (density, label, colour).
fn draw(
    path: &Path, title: &str, x_label: &str, lines: &[Line], marks: &[(f64, String, RGBColor)],
) -> Result<(), CliError> {
    let e = err(path);
    let xs = lines.iter().flat_map(|l| l.points.iter().map(|p| p.0));
    let ys = lines.iter().flat_map(|l| l.points.iter().map(|p| p.1));
    let (x0, x1) = xs.fold((f64::MAX, f64::MIN), |(a, b), x| (a.min(x), b.max(x)));
    let (y0, y1) = ys
        .filter(|y| *y > 0.0)
        .fold((f64::MAX, f64::MIN), |(a, b), y| (a.min(y), b.max(y)));
    if x0 > x1 || y0 > y1 {
        return Ok(());
    }
    let (x0, x1) = (x0 / 1.5, x1 * 1.5);
    let (y0, y1) = (y0 / 2.0, y1 * 3.0);
    let root = SVGBackend::new(path, (W, H)).into_drawing_area();
    root.fill(&WHITE).map_err(&e)?;
    let mut chart = ChartBuilder::on(&root)
        .caption(title, ("sans-serif", 18))
        .margin(16)
        .x_label_area_size(48)
        .y_label_area_size(72)
        .build_cartesian_2d((x0..x1).log_scale(), (y0..y1).log_scale())
        .map_err(&e)?;
    chart
        .configure_mesh()
        .x_desc(x_label)
        .y_desc("time per op, ms (median, log)")
        .x_label_formatter(&|x| format!("{x:.0e}"))
        .y_label_formatter(&|y| tick(*y))
        .label_style(("sans-serif", 13))
        .axis_desc_style(("sans-serif", 14))
        .light_line_style(RGBColor(235, 235, 235))
        .draw()
        .map_err(&e)?;
    for l in lines {
        let c = l.color;
        let style = c.stroke_width(2);
        if l.dashed {
            chart
                .draw_series(DashedLineSeries::new(l.points.iter().copied(), 6, 4, style))
                .map_err(&e)?
                .label(&l.label)
                .legend(move |(x, y)| {
                    PathElement::new(vec![(x, y), (x + 8, y)], c.stroke_width(2))
                });
            chart
                .draw_series(
                    l.points
                        .iter()
                        .map(|&p| TriangleMarker::new(p, 4, c.filled())),
                )
                .map_err(&e)?;
        } else {
            chart
                .draw_series(LineSeries::new(l.points.iter().copied(), style))
                .map_err(&e)?
                .label(&l.label)
                .legend(move |(x, y)| {
                    PathElement::new(vec![(x, y), (x + 20, y)], c.stroke_width(2))
                });
            chart
                .draw_series(l.points.iter().map(|&p| Circle::new(p, 3, c.filled())))
                .map_err(&e)?;
        }
    }
    for (k, (x, label, c)) in marks.iter().enumerate() {
        let c = *c;
        chart
            .draw_series(DashedLineSeries::new(
                [(*x, y0), (*x, y1)],
                3,
                3,
                c.stroke_width(1),
            ))
            .map_err(&e)?;
        // labels stacked down from the top so two crossovers do not overlap, right of
        // the line in the left part of the plot and left of it in the right part
        let y = y1 / 1.6f64.powi(k as i32 + 1);
        let right_half = x.ln() > (x0.ln() + x1.ln()) / 2.0;
        let (at, pos) = if right_half {
            (*x / 1.08, Pos::new(HPos::Right, VPos::Center))
        } else {
            (*x * 1.08, Pos::new(HPos::Left, VPos::Center))
        };
        chart
            .draw_series(std::iter::once(Text::new(
                label.clone(),
                (at, y),
                ("sans-serif", 13).into_font().color(&c).pos(pos),
            )))
            .map_err(&e)?;
    }
    chart
        .configure_series_labels()
        .position(SeriesLabelPosition::LowerRight)
        .background_style(WHITE.mix(0.85))
        .border_style(RGBColor(160, 160, 160))
        .label_font(("sans-serif", 13))
        .draw()
        .map_err(&e)?;
    root.present().map_err(&e)?;
    Ok(())
}

/// The (density, ms) points of one line of the records.
fn millis(rs: &[Record], series: &str, op: &str, layout: &str, threads: usize) -> Vec<(f64, f64)> {
    super::report::line(rs, series, op, layout, threads)
        .iter()
        .map(|r| (r.x, r.seconds * 1e3))
        .collect()
}

/// Writes one SVG per (series, op) and one of the conversions per series; returns
/// `(series, file name, title)` of each, in order.
pub fn write_plots(
    dir: &Path, rs: &[Record], peers: &[PeerRecord], meta: &Meta, cs: &[Crossover], threads: usize,
) -> Result<Vec<(String, String, String)>, CliError> {
    let mut out = Vec::new();
    let shape = format!("{} x {} {}", meta.shape[0], meta.shape[1], meta.dtype);
    for series in &meta.series {
        let Some(vary) = rs.iter().find(|r| &r.series == series).map(|r| r.vary) else {
            continue;
        };
        for op in &meta.ops {
            let mut lines: Vec<Line> = (meta.layouts.iter())
                .filter_map(|layout| {
                    let pts = millis(rs, series, op, layout, threads);
                    Line::solid(format!("masked {layout}"), pts, color(layout))
                })
                .collect();
            let mut labels: Vec<String> = peers
                .iter()
                .filter(|p| &p.series == series && &p.op == op)
                .map(PeerRecord::label)
                .collect();
            labels.sort();
            labels.dedup();
            for (k, label) in labels.iter().enumerate() {
                let mut pts: Vec<(f64, f64)> = peers
                    .iter()
                    .filter(|p| &p.series == series && &p.op == op && &p.label() == label)
                    .map(|p| (p.x, p.seconds * 1e3))
                    .collect();
                pts.sort_by(|a, b| a.0.total_cmp(&b.0));
                let layout = label.rsplit(' ').next().unwrap_or("");
                // peers on one layout: the layout's colour, darker for each further peer
                let c = color(layout);
                let f = 0.75f64.powi(k as i32 % 3);
                lines.push(Line {
                    label: label.clone(),
                    points: pts,
                    color: RGBColor(
                        (c.0 as f64 * f) as u8,
                        (c.1 as f64 * f) as u8,
                        (c.2 as f64 * f) as u8,
                    ),
                    dashed: true,
                });
            }
            let marks: Vec<(f64, String, RGBColor)> = cs
                .iter()
                .filter(|c| &c.series == series && &c.op == op)
                .filter_map(|c| {
                    c.measured.at().map(|x| {
                        (
                            x,
                            format!("{} crossover {x:.1e}", c.layout.to_uppercase()),
                            color(&c.layout),
                        )
                    })
                })
                .collect();
            let file = format!("{op}-{series}.svg");
            let title = format!(
                "{op} along dim {}, {shape}, {threads} thread(s): {}",
                meta.dim,
                describe_series(series, meta)
            );
            draw(&dir.join(&file), &title, x_desc(vary), &lines, &marks)?;
            out.push((series.clone(), file, title));
        }
        // the conversions
        let lines: Vec<Line> = (CONVERSIONS.iter().enumerate())
            .filter_map(|(k, (from, to))| {
                let pts = millis(rs, series, "convert", &format!("{from}->{to}"), threads);
                Line::solid(format!("{from} → {to}"), pts, palette(k))
            })
            .collect();
        if !lines.is_empty() {
            let file = format!("convert-{series}.svg");
            let title = format!(
                "conversions, {shape}, {threads} thread(s): {}",
                describe_series(series, meta)
            );
            draw(&dir.join(&file), &title, x_desc(vary), &lines, &[])?;
            out.push((series.clone(), file, title));
        }
    }
    Ok(out)
}
