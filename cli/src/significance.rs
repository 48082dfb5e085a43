//! Which rows of `ying diff` changed beyond sampling noise, and the table that shows it.
//!
//! A sampled profile's values scatter from run to run (see
//! `ying_profiler::report::noise`): ranked by the raw change, a diff of two runs of the same
//! program lists that scatter first. Here each row's change gets its `z` (the change over the
//! standard error of both profiles' values), the rows whose `z` passes the threshold for the
//! whole table (family-wise 1 %, [`ying_profiler::report::noise::threshold`]) are *beyond
//! noise* and come first, surest first, and the others are folded into one line with their
//! count and summed change. `--all` lists every row in pprof's order instead, each marked.
//! When neither profile says its noise (no standard errors of its samples, no period in bytes), the
//! rows are pprof's, unmarked, and the header says so.

use ying_profiler::report::noise::{self, Change};

use crate::profile::{self, Names, Row, Unit};

/// A row with its judgement.
#[derive(Debug, Clone)]
struct Marked {
    row: Row,
    z: f64,
    beyond: bool,
}

/// The rows of a diff, judged.
#[derive(Debug)]
pub struct Judged {
    /// In display order: pprof's without noise or with `all`, else beyond-noise rows first.
    rows: Vec<Marked>,
    /// The threshold, when the noise is known.
    threshold: Option<f64>,
    /// Whether the within-noise rows are folded.
    fold: bool,
    by_cum: bool,
}

/// Judges `rows` (in pprof's order). `known`: whether their variances are known.
pub fn judge(rows: Vec<Row>, by_cum: bool, known: bool, all: bool) -> Judged {
    let threshold = known.then(|| noise::threshold(rows.len(), true));
    let mut marked: Vec<Marked> = rows
        .into_iter()
        .map(|row| {
            let (v, var) = if by_cum { (row.cum, row.cum_var) } else { (row.flat, row.flat_var) };
            let z = Change { delta: v as f64, var }.z();
            Marked { beyond: threshold.is_some_and(|t| z > t), z, row }
        })
        .collect();
    let fold = known && !all;
    if fold {
        // Stable: equal z (exact changes) keep pprof's order.
        marked.sort_by(|a, b| b.beyond.cmp(&a.beyond).then(b.z.total_cmp(&a.z)));
    }
    Judged { rows: marked, threshold, fold, by_cum }
}

impl Judged {
    /// Rows beyond noise.
    pub fn beyond(&self) -> usize {
        self.rows.iter().filter(|m| m.beyond).count()
    }

    /// The header line and the table of the first `limit` rows listed (every listed row with
    /// `None`), the within-noise rows folded into one line unless `--all`. The same wording
    /// whether printed or written to the `.txt` file.
    pub fn render(
        &self,
        limit: Option<usize>,
        left_out: &str,
        names: &Names,
        total: i64,
        unit: &str,
        how: Unit,
    ) -> String {
        let listed: Vec<&Marked> = self.rows.iter().filter(|m| !self.fold || m.beyond).collect();
        let shown = &listed[..listed.len().min(limit.unwrap_or(usize::MAX))];
        let n = self.rows.len();
        let mut o = match self.threshold {
            None => format!(
                "Showing {} of {n} functions that changed; {left_out}; sampling noise unknown \
                 (no standard errors of their samples and no period in bytes): changes are not marked\n",
                shown.len()
            ),
            Some(t) => format!(
                "Showing {} of {n} functions that changed: {} beyond sampling noise (|z| > {t:.2}, \
                 1 % for the whole table), {} within it{}; {left_out}\n",
                shown.len(),
                self.beyond(),
                n - self.beyond(),
                if self.fold { ", folded into one line (--all lists them)" } else { "" }
            ),
        };
        let rows: Vec<Row> = shown.iter().map(|m| m.row.clone()).collect();
        let table = profile::table(&rows, names, total, unit, how);
        if self.threshold.is_none() {
            o.push_str(&table);
            return o;
        }
        // The noise columns go between cum% and the function's name.
        for (i, line) in table.lines().enumerate() {
            let (cols, name) = profile::split_before_name(line);
            let (z, mark) = if i == 0 {
                ("z".to_string(), "noise")
            } else {
                let m = shown[i - 1];
                let z = if m.z.is_infinite() { "exact".to_string() } else { format!("{:.1}", m.z) };
                (z, if m.beyond { "beyond" } else { "within" })
            };
            o.push_str(&format!("{cols} {z:>7} {mark:>6}  {}\n", name.trim_start()));
        }
        if self.fold {
            let within: Vec<&Marked> = self.rows.iter().filter(|m| !m.beyond).collect();
            if !within.is_empty() {
                let sum: i64 = within
                    .iter()
                    .map(|m| if self.by_cum { m.row.cum } else { m.row.flat })
                    .fold(0, i64::saturating_add);
                o.push_str(&format!(
                    "  ... and {} functions within noise, {} change {} in all\n",
                    within.len(),
                    if self.by_cum { "cum" } else { "flat" },
                    profile::format_value(sum, unit, how)
                ));
            }
        }
        o
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn row(node: u32, flat: i64, var: f64) -> Row {
        Row { node, flat, cum: flat, inline: "", flat_var: var, cum_var: var }
    }

    #[test]
    fn rows_beyond_noise_come_first_and_the_rest_fold() {
        let mut names = Names::default();
        for n in ["scatter", "leak", "small"] {
            names.id(n);
        }
        // pprof's order: by |flat|. The scatter moved more than the leak, but by 1.2 standard
        // errors; the leak by 10.
        let rows =
            vec![row(0, 3000, 2500.0 * 2500.0), row(1, 2000, 200.0 * 200.0), row(2, -5, 25.0)];
        let j = judge(rows.clone(), false, true, false);
        assert_eq!(j.beyond(), 1);
        let t = j.render(None, "0 left out", &names, 10_000, "bytes", Unit::Exact);
        let lines: Vec<&str> = t.lines().collect();
        assert!(lines[0].starts_with("Showing 1 of 3 functions that changed: 1 beyond"), "{t}");
        assert!(lines[2].contains("10.0 beyond  leak"), "{t}");
        assert_eq!(lines[3], "  ... and 2 functions within noise, flat change 2995B in all", "{t}");
        // --all: pprof's order, marked.
        let t =
            judge(rows, false, true, true).render(None, "", &names, 10_000, "bytes", Unit::Exact);
        assert!(t.lines().nth(2).unwrap().contains("1.2 within  scatter"), "{t}");
        assert!(t.lines().next().unwrap().starts_with("Showing 3 of 3 functions"), "{t}");
    }
}
