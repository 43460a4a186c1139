//! `--plot FILE`: the scaling scenario's curves as an SVG: sections per second and the
//! longest wait against contenders (log axis, one tick per point), redlease and busy-retry.
//!
//! Drawn with `plotters`' SVG backend alone: text goes out as SVG `<text>` laid out by
//! estimate, so no font library is needed to draw it.

use std::path::Path;

use anyhow::{Context as _, anyhow};
use plotters::coord::Shift;
use plotters::coord::combinators::WithKeyPoints;
use plotters::coord::ranged1d::{AsRangedCoord, ValueFormatter};
use plotters::prelude::*;

use super::processes::{Point, SideResult};
use super::scaling::Scaling;

/// Width and height of the whole picture (two charts side by side).
const SIZE: (u32, u32) = (1100, 460);
const REDLEASE: RGBColor = RGBColor(31, 119, 180);
const BUSY_RETRY: RGBColor = RGBColor(214, 39, 40);

type Area<'a> = DrawingArea<SVGBackend<'a>, Shift>;

/// How to find one side in a point.
type Pick = fn(&Point) -> &SideResult;

/// The two series: name, colour, and the side.
const SERIES: [(&str, RGBColor, Pick); 2] = [
    ("redlease", REDLEASE, |p| &p.redlease),
    ("busy-retry", BUSY_RETRY, |p| &p.busy_retry),
];

/// Writes the SVG of `scaling` to `path`.
pub(super) fn write(path: &Path, scaling: &Scaling) -> anyhow::Result<()> {
    let svg = svg(scaling)?;
    std::fs::write(path, svg).with_context(|| format!("writing the plot to {}", path.display()))
}

/// The SVG text of both charts.
pub(super) fn svg(scaling: &Scaling) -> anyhow::Result<String> {
    let mut text = String::new();
    {
        let root = SVGBackend::with_string(&mut text, SIZE).into_drawing_area();
        root.fill(&WHITE).map_err(drawing)?;
        let (left, right) = root.split_horizontally(SIZE.0 / 2);
        throughput(&left, scaling)?;
        longest_wait(&right, scaling)?;
        root.present().map_err(drawing)?;
    }
    Ok(text)
}

fn drawing(e: impl std::fmt::Display) -> anyhow::Error {
    anyhow!("drawing the plot: {e}")
}

/// The x axis: contenders on a log scale, a tick at each point.
fn contenders_axis(points: &[Point]) -> (std::ops::Range<f64>, Vec<f64>) {
    #[allow(clippy::cast_precision_loss)] // contenders <= 1024
    let ticks: Vec<f64> = points.iter().map(|p| p.contenders as f64).collect();
    let first = ticks.first().copied().unwrap_or(1.0);
    let last = ticks.last().copied().unwrap_or(first);
    ((first / 1.5)..(last * 1.5), ticks)
}

#[allow(clippy::cast_precision_loss)] // contenders <= 1024
fn x(p: &Point) -> f64 {
    p.contenders as f64
}

/// A chart's coordinates: contenders (log, a tick per point) against `Y`.
type Chart<'a, 'b, Y> =
    ChartContext<'a, SVGBackend<'b>, Cartesian2d<WithKeyPoints<LogCoord<f64>>, Y>>;

/// The chart of `s` on `area` with its caption, the contenders axis and the y axis `y`,
/// the mesh drawn (the y axis named `y_desc`, its labels written by `y_label`).
fn chart<'a, 'b, Y>(
    area: &'a Area<'b>,
    s: &Scaling,
    caption: &str,
    y: Y,
    (y_desc, y_label): (&str, &dyn Fn(&f64) -> String),
) -> anyhow::Result<Chart<'a, 'b, Y::CoordDescType>>
where
    Y: AsRangedCoord<Value = f64>,
    Y::CoordDescType: ValueFormatter<f64>,
{
    let (range, ticks) = contenders_axis(&s.points);
    let mut chart = ChartBuilder::on(area)
        .caption(caption, ("sans-serif", 18))
        .margin(14)
        .x_label_area_size(44)
        .y_label_area_size(64)
        .build_cartesian_2d(range.log_scale().with_key_points(ticks), y)
        .map_err(drawing)?;
    chart
        .configure_mesh()
        .x_desc(format!("contenders over {} processes (log)", s.processes))
        .y_desc(y_desc)
        .x_label_formatter(&|v| format!("{v:.0}"))
        .y_label_formatter(y_label)
        .draw()
        .map_err(drawing)?;
    Ok(chart)
}

/// One series: a line through `y` of every point (in the legend), and a dot at each.
fn curve<Y: Ranged<ValueType = f64>>(
    chart: &mut Chart<'_, '_, Y>,
    s: &Scaling,
    (name, color): (&str, RGBColor),
    y: impl Fn(&Point) -> f64,
) -> anyhow::Result<()> {
    chart
        .draw_series(LineSeries::new(
            s.points.iter().map(|p| (x(p), y(p))),
            color.stroke_width(2),
        ))
        .map_err(drawing)?
        .label(name)
        .legend(move |(x, y)| PathElement::new(vec![(x, y), (x + 20, y)], color.stroke_width(2)));
    chart
        .draw_series(
            s.points
                .iter()
                .map(|p| Circle::new((x(p), y(p)), 4, color.filled())),
        )
        .map_err(drawing)?;
    Ok(())
}

/// The legend of the series, at `position`.
fn legend<'a, 'b: 'a, Y: Ranged<ValueType = f64>>(
    chart: &mut Chart<'a, 'b, Y>,
    position: SeriesLabelPosition,
) -> anyhow::Result<()> {
    chart
        .configure_series_labels()
        .position(position)
        .background_style(WHITE.mix(0.85))
        .border_style(BLACK)
        .draw()
        .map_err(drawing)
}

/// Sections per second: the medians as lines, min..max as bars.
fn throughput(area: &Area<'_>, s: &Scaling) -> anyhow::Result<()> {
    let top = s
        .points
        .iter()
        .flat_map(|p| {
            [
                p.redlease.sections_per_sec.spread.max,
                p.busy_retry.sections_per_sec.spread.max,
            ]
        })
        .fold(1.0, f64::max)
        * 1.15;
    let caption = format!("sections/s (median, min..max of {} slices)", s.pairs);
    let label = |v: &f64| format!("{v:.0}");
    let mut chart = chart(area, s, &caption, 0f64..top, ("sections/s", &label))?;
    for (i, (name, color, side)) in SERIES.into_iter().enumerate() {
        curve(&mut chart, s, (name, color), |p| {
            side(p).sections_per_sec.spread.median
        })?;
        // Bars side by side, not on top of each other.
        let nudge = if i == 0 { 0.98 } else { 1.02 };
        chart
            .draw_series(s.points.iter().map(|p| {
                let spread = &side(p).sections_per_sec.spread;
                PathElement::new(
                    vec![(x(p) * nudge, spread.min), (x(p) * nudge, spread.max)],
                    color.stroke_width(1),
                )
            }))
            .map_err(drawing)?;
    }
    legend(&mut chart, SeriesLabelPosition::UpperRight)
}

/// The longest wait of any task, in milliseconds, on a log scale.
fn longest_wait(area: &Area<'_>, s: &Scaling) -> anyhow::Result<()> {
    let ms = |side: &SideResult| (side.wait.max.as_secs_f64() * 1e3).max(0.001);
    let waits: Vec<f64> = s
        .points
        .iter()
        .flat_map(|p| [ms(&p.redlease), ms(&p.busy_retry)])
        .collect();
    let low = waits.iter().copied().fold(f64::INFINITY, f64::min).min(1.0) / 2.0;
    let high = waits.iter().copied().fold(1.0, f64::max) * 2.0;
    let label = |v: &f64| {
        if *v >= 1.0 {
            format!("{v:.0}")
        } else {
            format!("{v:.2}")
        }
    };
    let mut chart = chart(
        area,
        s,
        "longest wait of any task (ms)",
        (low..high).log_scale(),
        ("longest wait, ms (log)", &label),
    )?;
    for (name, color, side) in SERIES {
        curve(&mut chart, s, (name, color), |p| ms(side(p)))?;
    }
    legend(&mut chart, SeriesLabelPosition::UpperLeft)
}
