//! The entries of a report: the stacks that print alike in one frame view are one entry.
//!
//! Stacks that differ only in hidden frames (`::poll` glue, allocator plumbing), in addresses
//! within one line, or inside a folded run of framework frames print the same lines; a report
//! lists them as one entry whose figures are the sums of theirs. The grouping does not touch
//! the stack table: pprof profiles, whose locations are addresses, are written from the rows,
//! the other outputs from the entries. When any two rows merged it keeps 4 bytes an entry (its
//! leading row), 4 bytes a row (the entry of each) and the summed figures of the entries of
//! several rows, nothing otherwise; about 30 bytes a row more while it runs.

use std::collections::HashMap;
use std::hash::{Hash, Hasher};

use super::table::{Build, Figures, NO_ROW, StackTable, line_text};
use crate::callstack::{Frame, FrameFacts, FrameView, ShownFrame, ShownScratch};
use crate::engine::tables::Hash128;

/// The stacks of a table grouped into the entries one frame view prints.
#[derive(Debug)]
pub(crate) struct Printed {
    /// Number of entries.
    len: usize,
    /// The first row of each entry (it leads it: its frames are the entry's), in row order;
    /// empty when every row is an entry of its own.
    lead: Vec<u32>,
    /// The entry of each row; empty when every row is an entry of its own.
    entry_of: Vec<u32>,
    /// The figures of the entries of several rows: the sums of their rows' figures as they
    /// print (each estimate rounded first, so that the entries add up to the same totals).
    merged: HashMap<u32, Figures, Build>,
}

impl Printed {
    /// Every one of `n` rows an entry of its own.
    pub(crate) fn identity(n: usize) -> Self {
        Self { len: n, lead: Vec::new(), entry_of: Vec::new(), merged: HashMap::default() }
    }

    /// Groups the rows of `table` that print alike in `view`.
    pub(crate) fn group(table: &StackTable, view: FrameView) -> Self {
        let n = table.len();
        if n < 2 {
            return Self::identity(n);
        }
        // The entry of each row, and the leading row of each entry.
        let mut entry_of: Vec<u32> = Vec::with_capacity(n);
        let mut lead: Vec<u32> = Vec::new();
        // Entries with the same hash, chained through `next` (indexed by entry).
        let mut first: HashMap<u64, u32, Build> = HashMap::default();
        let mut next: Vec<u32> = Vec::new();
        // The second hash of each entry's lines (indexed by entry): see below.
        let mut check: Vec<u64> = Vec::new();
        let facts = table.frame_facts();
        let (mut scratch, mut lines) = (ShownScratch::default(), Vec::new());
        for r in 0..n as u32 {
            table.shown_into(r, view, &facts, &mut scratch, &mut lines);
            let spans = table.row(r).spans;
            // Two independent hashes of what the lines print: the first finds the entries
            // whose lines may be the same, the second, kept for each entry, tells them apart
            // instead of comparing the lines (which meant making the leading stack's lines
            // again for each stack). Two stacks printed differently are taken for one only
            // when both collide: for a million stacks, 10^12 pairs against 2^128 values.
            let mut h = Hash128::default();
            spans.hash(&mut h);
            hash_lines(&lines, scratch.kept(), &mut h);
            let (hash, line_check) = h.finish128();
            let head = first.get(&hash).copied().unwrap_or(NO_ROW);
            let mut e = head;
            while e != NO_ROW && check[e as usize] != line_check {
                e = next[e as usize];
            }
            if e == NO_ROW {
                e = lead.len() as u32;
                lead.push(r);
                next.push(head);
                check.push(line_check);
                first.insert(hash, e);
            }
            entry_of.push(e);
        }
        drop(first);
        drop(next);
        drop(check);
        if lead.len() == n {
            return Self::identity(n);
        }
        let mut merged: HashMap<u32, Figures, Build> = HashMap::default();
        for (r, &e) in entry_of.iter().enumerate() {
            let l = lead[e as usize];
            if l as usize == r {
                continue;
            }
            merged
                .entry(e)
                .or_insert_with(|| table.row(l).fig)
                .add_rounded(&table.row(r as u32).fig);
        }
        lead.shrink_to_fit();
        Self { len: lead.len(), lead, entry_of, merged }
    }

    /// Number of entries.
    pub(crate) fn len(&self) -> usize {
        self.len
    }

    /// The leading row of entry `e`: its frames and spans are the entry's.
    pub(crate) fn lead(&self, e: u32) -> u32 {
        if self.lead.is_empty() { e } else { self.lead[e as usize] }
    }

    /// The figures of entry `e`.
    pub(crate) fn figures<'a>(&'a self, table: &'a StackTable, e: u32) -> &'a Figures {
        self.merged.get(&e).unwrap_or_else(|| &table.row(self.lead(e)).fig)
    }

    /// The entry of row `r`.
    pub(crate) fn entry_of(&self, r: u32) -> u32 {
        if self.entry_of.is_empty() { r } else { self.entry_of[r as usize] }
    }
}

/// Feeds what `lines` print to `h`: a frame's line by its number from the table's facts
/// (`kept`: the frames the lines were made from, each line of a frame of its own one of them,
/// in order), so that equal numbers are equal lines. Hashing names and paths for the 40 million
/// frames of 888,000 stacks took seconds; looking each frame's number up in a map of its own
/// took 1.2 % of a report's instructions. A frame not among `kept` (none is) would be hashed
/// by its text.
fn hash_lines(lines: &[ShownFrame<'_>], kept: &[(&Frame, FrameFacts<'_>)], h: &mut impl Hasher) {
    let mut kept = kept.iter();
    for l in lines {
        match l {
            ShownFrame::Frame(f) => match kept.find(|k| std::ptr::eq(k.0, *f)).map(|k| k.1.line) {
                Some(line) if line != 0 => {
                    0u8.hash(h);
                    line.hash(h);
                }
                _ => {
                    2u8.hash(h);
                    line_text(f).hash(h);
                }
            },
            ShownFrame::Folded { frames, crates } => {
                1u8.hash(h);
                frames.hash(h);
                crates.hash(h);
            }
        }
    }
}
