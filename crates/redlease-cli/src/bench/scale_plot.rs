//! `--only scale --plot FILE`: the held leases' cost as an SVG: Redis commands per second and
//! Redis CPU against the leases held (log axes, a tick per point), redlease and the
//! `PEXPIRE` floor. Drawn like [`super::plot`]: `plotters`' SVG backend alone.

use std::path::Path;

use anyhow::{Context as _, anyhow};
use plotters::prelude::*;

use super::held::{HeldPoint, Rates};
use super::scale::Scale;

/// Width and height of the whole picture (two charts side by side).
const SIZE: (u32, u32) = (1100, 460);
const REDLEASE: RGBColor = RGBColor(31, 119, 180);
const FLOOR: RGBColor = RGBColor(214, 39, 40);

/// How to find one side in a point.
type Pick = fn(&HeldPoint) -> &Rates;

/// The two series: name, colour, and the side.
const SERIES: [(&str, RGBColor, Pick); 2] = [
    ("redlease", REDLEASE, |p| &p.ours),
    ("PEXPIRE floor", FLOOR, |p| &p.floor),
];

/// Writes the SVG of `scale` to `path`.
pub(super) fn write(path: &Path, scale: &Scale) -> anyhow::Result<()> {
    let svg = svg(scale)?;
    std::fs::write(path, svg).with_context(|| format!("writing the plot to {}", path.display()))
}

fn drawing(e: impl std::fmt::Display) -> anyhow::Error {
    anyhow!("drawing the plot: {e}")
}

/// The SVG text of both charts.
pub(super) fn svg(scale: &Scale) -> anyhow::Result<String> {
    let mut text = String::new();
    {
        let root = SVGBackend::with_string(&mut text, SIZE).into_drawing_area();
        root.fill(&WHITE).map_err(drawing)?;
        let (left, right) = root.split_horizontally(SIZE.0 / 2);
        let ttl = humantime::format_duration(scale.held_ttl);
        chart(
            &left,
            scale,
            &format!("Redis commands/s, leases held (ttl {ttl})"),
            "commands/s (log)",
            |r| r.commands_per_sec,
        )?;
        chart(
            &right,
            scale,
            "Redis CPU, % of one CPU",
            "Redis CPU % (log)",
            |r| r.redis_cpu * 100.0,
        )?;
        root.present().map_err(drawing)?;
    }
    Ok(text)
}

#[allow(clippy::cast_precision_loss)] // leases <= 1,000,000
fn x(p: &HeldPoint) -> f64 {
    p.leases as f64
}

/// One chart: `y` of each side against the leases, both axes logarithmic.
fn chart(
    area: &DrawingArea<SVGBackend<'_>, plotters::coord::Shift>,
    s: &Scale,
    caption: &str,
    y_desc: &str,
    y: fn(&Rates) -> f64,
) -> anyhow::Result<()> {
    let ticks: Vec<f64> = s.held.iter().map(x).collect();
    let first = ticks.first().copied().unwrap_or(1.0);
    let last = ticks.last().copied().unwrap_or(first);
    let values: Vec<f64> = s
        .held
        .iter()
        .flat_map(|p| SERIES.map(|(_, _, side)| y(side(p))))
        .filter(|v| *v > 0.0)
        .collect();
    let low = values.iter().copied().fold(f64::INFINITY, f64::min);
    let low = if low.is_finite() { low / 2.0 } else { 0.01 };
    let high = values.iter().copied().fold(low * 4.0, f64::max) * 2.0;
    let mut chart = ChartBuilder::on(area)
        .caption(caption, ("sans-serif", 18))
        .margin(14)
        .x_label_area_size(44)
        .y_label_area_size(64)
        .build_cartesian_2d(
            ((first / 1.5)..(last * 1.5))
                .log_scale()
                .with_key_points(ticks),
            (low..high).log_scale(),
        )
        .map_err(drawing)?;
    chart
        .configure_mesh()
        .x_desc("leases held by one Client (log)")
        .y_desc(y_desc)
        .x_label_formatter(&|v| format!("{v:.0}"))
        .y_label_formatter(&|v| {
            if *v >= 10.0 {
                format!("{v:.0}")
            } else {
                format!("{v:.2}")
            }
        })
        .draw()
        .map_err(drawing)?;
    for (name, color, side) in SERIES {
        let points: Vec<(f64, f64)> = s.held.iter().map(|p| (x(p), y(side(p)).max(low))).collect();
        chart
            .draw_series(LineSeries::new(points.clone(), color.stroke_width(2)))
            .map_err(drawing)?
            .label(name)
            .legend(move |(x, y)| {
                PathElement::new(vec![(x, y), (x + 20, y)], color.stroke_width(2))
            });
        chart
            .draw_series(
                points
                    .into_iter()
                    .map(|p| Circle::new(p, 4, color.filled())),
            )
            .map_err(drawing)?;
    }
    chart
        .configure_series_labels()
        .position(SeriesLabelPosition::UpperLeft)
        .background_style(WHITE.mix(0.85))
        .border_style(BLACK)
        .draw()
        .map_err(drawing)
}
