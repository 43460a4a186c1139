//! How the bench writes its figures: short durations, `fewest..most`, aligned tables. A
//! leaf of `bench/`: the report and the scenarios that print progress use it.

use std::fmt::Write as _;
use std::time::Duration;

/// `fewest..most` of per-worker (or per-task) section counts.
pub(super) fn fewest_most(counts: &[u64]) -> String {
    let fewest = counts.iter().min().copied().unwrap_or(0);
    let most = counts.iter().max().copied().unwrap_or(0);
    format!("{fewest}..{most}")
}

/// `81µs`, `1.25ms`, `12.5ms`, `1.20s`.
pub(super) fn duration(d: Duration) -> String {
    let us = d.as_secs_f64() * 1e6;
    if us < 1_000.0 {
        format!("{us:.0}µs")
    } else if us < 10_000.0 {
        format!("{:.2}ms", us / 1e3)
    } else if us < 1_000_000.0 {
        format!("{:.1}ms", us / 1e3)
    } else {
        format!("{:.2}s", us / 1e6)
    }
}

/// Appends an aligned table: first column left-aligned, the others right-aligned.
pub(super) fn table(out: &mut String, header: &[&str], rows: &[Vec<String>]) -> std::fmt::Result {
    let mut widths: Vec<usize> = header.iter().map(|h| h.chars().count()).collect();
    for row in rows {
        for (w, cell) in widths.iter_mut().zip(row) {
            *w = (*w).max(cell.chars().count());
        }
    }
    let header: Vec<String> = header.iter().map(|h| (*h).to_owned()).collect();
    for row in std::iter::once(&header).chain(rows) {
        let mut line = String::from(" ");
        for (i, (cell, w)) in row.iter().zip(&widths).enumerate() {
            if i == 0 {
                write!(line, " {cell:<w$}")?;
            } else {
                write!(line, "  {cell:>w$}")?;
            }
        }
        writeln!(out, "{}", line.trim_end())?;
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn durations_are_short_and_readable() {
        assert_eq!(duration(Duration::from_micros(81)), "81µs");
        assert_eq!(duration(Duration::from_micros(1250)), "1.25ms");
        assert_eq!(duration(Duration::from_micros(12_500)), "12.5ms");
        assert_eq!(duration(Duration::from_millis(1200)), "1.20s");
    }

    #[test]
    fn tables_align() -> std::fmt::Result {
        let mut out = String::new();
        table(
            &mut out,
            &["name", "n"],
            &[
                vec!["a".into(), "100".into()],
                vec!["bcd".into(), "2".into()],
            ],
        )?;
        assert_eq!(out, "  name    n\n  a     100\n  bcd     2\n");
        Ok(())
    }
}
