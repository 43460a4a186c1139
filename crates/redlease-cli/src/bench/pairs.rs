//! Interleaved slice pairs: how every redlease scenario is compared with its bare floor.
//!
//! Both sides of a comparison are set up and warmed up, then measured in `--pairs` pairs
//! of slices of equal length, one slice of each side per pair. The side that goes first
//! alternates from pair to pair (redlease, floor | floor, redlease | redlease, floor ...:
//! ABBA), so that a drift of the machine's speed during the run (another process, a CPU
//! frequency change, a warming cache) lands on both sides alike instead of always favouring
//! the side that runs second. Each pair gives one ratio redlease / floor of the two slices'
//! rates; the comparison reports the median of those ratios and their min..max, next to
//! the absolute rates of each side (median and min..max over its slices).

use std::fmt::Write as _;
use std::time::Duration;

use anyhow::bail;
use serde::{Serialize, Serializer};

use super::env::Env;
use super::stats::{per_second, share};

/// The fewest pairs a comparison may have: fewer give no meaningful median or range.
pub(super) const MIN_PAIRS: u32 = 5;

/// Refuses a `--pairs` count below [`MIN_PAIRS`].
pub(super) fn check_count(pairs: u32) -> anyhow::Result<()> {
    if pairs < MIN_PAIRS {
        bail!(
            "--pairs {pairs} is too few: a median and a range need at least {MIN_PAIRS} \
             interleaved slice pairs; use --pairs {MIN_PAIRS} or more"
        );
    }
    Ok(())
}

/// What one side measured in one slice.
#[derive(Debug, Clone, Copy, Default, Serialize)]
pub(super) struct SliceFigures {
    /// Operations (acquire + release pairs) or critical sections completed.
    pub(super) units: u64,
    #[serde(rename = "elapsed_us", serialize_with = "super::stats::micros")]
    pub(super) elapsed: Duration,
    /// `units` per second of `elapsed`: the figure the ratio is taken of.
    pub(super) per_sec: f64,
    /// Contended slices: the longest time one worker spent in one acquire.
    #[serde(
        rename = "longest_wait_us",
        serialize_with = "optional_micros",
        skip_serializing_if = "Option::is_none"
    )]
    pub(super) longest_wait: Option<Duration>,
    /// Contended slices: the median hand-off gap.
    #[serde(
        rename = "gap_p50_us",
        serialize_with = "optional_micros",
        skip_serializing_if = "Option::is_none"
    )]
    pub(super) gap_p50: Option<Duration>,
}

impl SliceFigures {
    /// `units` completed in `elapsed`.
    pub(super) fn new(units: u64, elapsed: Duration) -> Self {
        Self {
            units,
            elapsed,
            per_sec: per_second(units, elapsed),
            longest_wait: None,
            gap_p50: None,
        }
    }
}

#[allow(clippy::ref_option)] // the signature serde's `serialize_with` calls
fn optional_micros<S: Serializer>(d: &Option<Duration>, s: S) -> Result<S::Ok, S::Error> {
    match d {
        Some(d) => super::stats::micros(d, s),
        None => s.serialize_none(),
    }
}

/// One optional figure of a slice (`longest_wait`, `gap_p50`).
type Figure = fn(&SliceFigures) -> Option<Duration>;

/// One side of a comparison: something that can be measured for one slice at a time and
/// keeps its own totals (samples, command counts, checks) across slices.
pub(super) trait Side {
    /// Its name in the report.
    fn label(&self) -> &'static str;

    /// Measures one slice of about `length` and returns what it did in it.
    async fn slice(&mut self, env: &Env, length: Duration) -> anyhow::Result<SliceFigures>;
}

/// One pair of slices.
#[derive(Debug, Clone, Copy, Serialize)]
pub(super) struct Pair {
    /// Whether the redlease slice ran first in this pair.
    pub(super) redlease_first: bool,
    pub(super) redlease: SliceFigures,
    pub(super) floor: SliceFigures,
    /// `redlease.per_sec / floor.per_sec`.
    pub(super) ratio: f64,
}

/// Median and range of a set of values.
#[derive(Debug, Clone, Copy, Default, Serialize)]
pub(super) struct Spread {
    pub(super) median: f64,
    pub(super) min: f64,
    pub(super) max: f64,
}

impl Spread {
    /// Median (the mean of the two middle values for an even count), min and max; all 0
    /// when there are no values.
    pub(super) fn of(values: impl IntoIterator<Item = f64>) -> Self {
        let mut v: Vec<f64> = values.into_iter().collect();
        v.sort_by(f64::total_cmp);
        let (Some(&min), Some(&max)) = (v.first(), v.last()) else {
            return Self::default();
        };
        let mid = v.len() / 2;
        let median = if v.len() % 2 == 1 {
            v[mid]
        } else {
            f64::midpoint(v[mid - 1], v[mid])
        };
        Self { median, min, max }
    }
}

/// A [`Spread`] of one value per slice that also keeps the values, in the order run.
#[derive(Debug, Clone, Serialize)]
pub(super) struct SliceSpread {
    #[serde(flatten)]
    pub(super) spread: Spread,
    /// Every slice's value, in the order run.
    pub(super) slices: Vec<f64>,
}

impl SliceSpread {
    pub(super) fn of(slices: Vec<f64>) -> Self {
        Self {
            spread: Spread::of(slices.iter().copied()),
            slices,
        }
    }
}

/// A comparison of one redlease scenario with its bare floor, over interleaved pairs.
#[derive(Debug, Serialize)]
pub(super) struct Comparison {
    /// What is compared, e.g. `uncontended`.
    pub(super) name: &'static str,
    /// The redlease side's scenario name.
    pub(super) redlease: &'static str,
    /// The floor's scenario name.
    pub(super) floor: &'static str,
    /// What `per_sec` counts: `ops/s` or `sections/s`.
    pub(super) unit: &'static str,
    /// The length of each slice.
    #[serde(rename = "slice_us", serialize_with = "super::stats::micros")]
    pub(super) slice: Duration,
    pub(super) pairs: Vec<Pair>,
    /// Over the pairs: redlease / floor.
    pub(super) ratio: Spread,
    /// Over the redlease slices.
    pub(super) redlease_per_sec: Spread,
    /// Over the floor slices.
    pub(super) floor_per_sec: Spread,
}

impl Comparison {
    /// Appends the comparison's lines to a text report.
    pub(super) fn render(&self, out: &mut String) -> std::fmt::Result {
        let ratios: Vec<String> = self
            .pairs
            .iter()
            .map(|p| format!("{:.3}{}", p.ratio, if p.redlease_first { "" } else { "*" }))
            .collect();
        // A comparison with a peer library is named after it ("... vs rslock").
        let other = self
            .name
            .rsplit_once(" vs ")
            .map_or("floor", |(_, peer)| peer);
        writeln!(
            out,
            "  {}: redlease / {other} {} median {:.3}x ({:.3}..{:.3}) over {} ABBA pairs of {} \
             slices\n    per pair: {} (* = {other} first)\n    {}: median {:.0} ({:.0}..{:.0}); \
             {}: median {:.0} ({:.0}..{:.0})",
            self.name,
            self.unit,
            self.ratio.median,
            self.ratio.min,
            self.ratio.max,
            self.pairs.len(),
            humantime::format_duration(self.slice),
            ratios.join(" "),
            self.redlease,
            self.redlease_per_sec.median,
            self.redlease_per_sec.min,
            self.redlease_per_sec.max,
            self.floor,
            self.floor_per_sec.median,
            self.floor_per_sec.min,
            self.floor_per_sec.max,
        )?;
        // Contended slices only: for the pairs where both sides have the figure.
        let figures: [(&str, Figure); 2] = [
            ("longest wait", |f| f.longest_wait),
            ("gap p50", |f| f.gap_p50),
        ];
        for (what, figure) in figures {
            let values: Vec<String> = self
                .pairs
                .iter()
                .filter_map(|p| {
                    let (ours, floor) = (figure(&p.redlease)?, figure(&p.floor)?);
                    Some(format!(
                        "{}/{}",
                        super::render::duration(ours),
                        super::render::duration(floor)
                    ))
                })
                .collect();
            if !values.is_empty() {
                writeln!(
                    out,
                    "    {what} per pair (redlease/floor): {}",
                    values.join(" ")
                )?;
            }
        }
        Ok(())
    }
}

/// Measures `redlease` and `floor` (both set up and warmed up) in `pairs` interleaved
/// pairs of slices of `slice` each, alternating which side goes first.
pub(super) async fn interleave<A: Side, B: Side>(
    env: &Env,
    (name, unit): (&'static str, &'static str),
    pairs: u32,
    slice: Duration,
    redlease: &mut A,
    floor: &mut B,
) -> anyhow::Result<Comparison> {
    let mut done = Vec::with_capacity(pairs as usize);
    for index in 0..pairs {
        let redlease_first = index % 2 == 0;
        env.progress(&format!(
            "{name}: pair {}/{pairs} ({} first)",
            index + 1,
            if redlease_first {
                redlease.label()
            } else {
                floor.label()
            }
        ));
        let (ours, theirs) = if redlease_first {
            let ours = redlease.slice(env, slice).await?;
            (ours, floor.slice(env, slice).await?)
        } else {
            let theirs = floor.slice(env, slice).await?;
            (redlease.slice(env, slice).await?, theirs)
        };
        done.push(Pair {
            redlease_first,
            redlease: ours,
            floor: theirs,
            ratio: share(ours.per_sec, theirs.per_sec),
        });
    }
    Ok(Comparison {
        name,
        redlease: redlease.label(),
        floor: floor.label(),
        unit,
        slice,
        ratio: Spread::of(done.iter().map(|p| p.ratio)),
        redlease_per_sec: Spread::of(done.iter().map(|p| p.redlease.per_sec)),
        floor_per_sec: Spread::of(done.iter().map(|p| p.floor.per_sec)),
        pairs: done,
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn spreads_take_the_middle_value_or_the_mean_of_two() {
        let s = Spread::of([3.0, 1.0, 2.0, 5.0, 4.0]);
        assert!((s.median - 3.0).abs() < f64::EPSILON);
        assert!((s.min - 1.0).abs() < f64::EPSILON);
        assert!((s.max - 5.0).abs() < f64::EPSILON);
        let s = Spread::of([4.0, 1.0, 2.0, 3.0]);
        assert!((s.median - 2.5).abs() < f64::EPSILON);
        let s = Spread::of([]);
        assert!(s.median.abs() < f64::EPSILON);
    }

    #[test]
    fn slice_spreads_keep_the_values_in_order() {
        let s = SliceSpread::of(vec![3.0, 1.0, 2.0]);
        assert!((s.spread.median - 2.0).abs() < f64::EPSILON);
        assert_eq!(s.slices, vec![3.0, 1.0, 2.0]);
        let json = serde_json::to_value(&s).map_err(|e| e.to_string());
        assert_eq!(
            json,
            Ok(
                serde_json::json!({"median": 2.0, "min": 1.0, "max": 3.0, "slices": [3.0, 1.0, 2.0]})
            )
        );
    }

    #[test]
    fn fewer_than_five_pairs_are_refused() {
        assert!(check_count(4).is_err());
        assert!(check_count(5).is_ok());
    }
}
