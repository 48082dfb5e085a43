//! `ying`: run a program under Ying's LD_PRELOAD shim, diff two heap profiles, list a process's
//! leak suspects, print the top functions of one, or write the HTML page of a directory of
//! report sets. `ying --help` and
//! `ying <command> --help` say how.

mod diff;
mod leaks;
mod profile;
mod run;
mod significance;
mod summary;

use std::io::Write;
use std::path::PathBuf;
use std::process::ExitCode;

use clap::{Parser, Subcommand, ValueEnum};

/// Ying, a sampling memory profiler: run a program under it, and read the heap profiles it (or
/// Go, or jemalloc_pprof) writes.
#[derive(Debug, Parser)]
#[command(name = "ying", version, propagate_version = true)]
struct Cli {
    #[command(subcommand)]
    command: Cmd,
}

#[derive(Debug, Subcommand)]
enum Cmd {
    /// Run a program under Ying's LD_PRELOAD shim, then sum up the report sets it wrote.
    ///
    /// Finds libying.so (--lib, $YING_LIB, next to this executable, or the workspace's
    /// target/release), prepends it to LD_PRELOAD, passes every YING_* variable through, and
    /// exits with the program's own status (128 + N when signal N ended it). HUP, INT, QUIT,
    /// TERM, USR1 and USR2 sent to `ying` are passed on to the program. At the end it lists on
    /// stderr the report sets this run wrote (one line per process: executable, pid, peak,
    /// retained at exit) and the largest one's text report, or says why none was written.
    #[command(after_help = "Example: ying run --interval 10 -- python3 my_script.py")]
    Run(run::Request),
    /// What changed between two heap profiles, like `go tool pprof -diff_base A B`, with
    /// sampling noise told apart from change.
    ///
    /// A (the base) and B are report sets (their name, `ying.EXE.PID.SEQ.TIME`, or any of their
    /// files) or pprof files (.pb.gz, gzipped or not: Ying's, Go's, jemalloc_pprof's). Prints
    /// the functions whose flat value changed (B minus A, percentages of A's total, as pprof
    /// prints them), each with its z (the change in standard errors of both profiles' sampling,
    /// from the samples' own standard errors, Ying's `<type>_stderr` sample types, or from
    /// their period) and whether that is beyond noise (1 % for the whole table): those beyond
    /// noise first, surest first, the others folded into one line
    /// (--all lists every function in pprof's order). It writes OUTPUT.txt (every function), OUTPUT.svg (a differential
    /// flamegraph: widths from B, red grew, blue shrank) and OUTPUT.pb.gz (B's samples and A's
    /// negated, labelled pprof::base=true: `go tool pprof -top OUTPUT.pb.gz` shows the same
    /// diff). Frames are dropped as B's drop_frames says, as pprof does.
    Diff {
        /// The base profile.
        a: PathBuf,
        /// The profile compared with the base.
        b: PathBuf,
        /// The sample type (inuse_space, alloc_space, inuse_objects, alloc_objects, ... or an
        /// index); default: B's default sample type, else its last.
        #[arg(long, value_name = "TYPE")]
        sample: Option<String>,
        /// How many functions to print.
        #[arg(short, default_value_t = 20, value_name = "N")]
        k: usize,
        /// Sort by cum instead of flat.
        #[arg(long)]
        cum: bool,
        /// List every function in pprof's order, each marked beyond or within noise (by
        /// default those beyond noise come first, surest first, and the others are folded into
        /// one line with their count and summed change).
        #[arg(long)]
        all: bool,
        /// Leave out functions whose |cum| is below this fraction of the total, as `go tool
        /// pprof -nodefraction` (same default); 0 shows every function.
        #[arg(long, default_value_t = 0.005, value_name = "F")]
        node_fraction: f64,
        /// How values are printed.
        #[arg(long, value_enum, default_value_t = UnitArg::Auto)]
        unit: UnitArg,
        /// Where the files go: OUTPUT.txt, OUTPUT.svg, OUTPUT.pb.gz.
        #[arg(short, long, default_value = "ying-diff", value_name = "OUTPUT")]
        output: PathBuf,
    },
    /// The leak suspects of each process whose report sets are named: stacks whose retained
    /// bytes grew beyond sampling noise over the process's sets, kept growing in the later
    /// half, and are old.
    ///
    /// Reads the sets' manifests (.json): a directory's every set (sets of several processes
    /// are tested per process), or sets by name or by any of their files. A suspect's retained
    /// bytes grew beyond noise (one-sided z above the threshold for every stack tested, 1 % for
    /// the whole test) from its first set to its last and from the middle one to the last (a
    /// cache that filled and then stopped growing is not one), and their mean age is at least
    /// a quarter of the window. Prints each with its growth per hour, z and p-value, retained
    /// bytes and age, and frames, or says there is none.
    #[command(after_help = "Example: ying leaks ying-profiles")]
    Leaks {
        /// Directories of report sets, or sets.
        #[arg(required = true, value_name = "DIR-or-SET")]
        sets: Vec<PathBuf>,
    },
    /// The top functions of a heap profile, like `go tool pprof -top`.
    ///
    /// FILE is a report set (its name or any of its files) or a pprof file (.pb.gz, gzipped or
    /// not). Flat is what a function allocated itself (it is the sample's leaf), cum what it and
    /// its callees did; inlined functions count as functions, and frames are dropped as the
    /// profile's drop_frames says, as pprof does.
    Top {
        /// The profile.
        file: PathBuf,
        /// How many functions to print.
        #[arg(short, default_value_t = 20, value_name = "N")]
        k: usize,
        /// The sample type (inuse_space, alloc_space, inuse_objects, alloc_objects, ... or an
        /// index); default: the profile's default sample type, else its last.
        #[arg(long, value_name = "TYPE")]
        sample: Option<String>,
        /// Sort by cum instead of flat.
        #[arg(long)]
        cum: bool,
        /// Leave out functions whose |cum| is below this fraction of the total, as `go tool
        /// pprof -nodefraction` (same default); 0 shows every function.
        #[arg(long, default_value_t = 0.005, value_name = "F")]
        node_fraction: f64,
        /// How values are printed.
        #[arg(long, value_enum, default_value_t = UnitArg::Auto)]
        unit: UnitArg,
    },
    /// Write the report set of a live file: the heap of a process at its death (OOM kill,
    /// SIGKILL, crash) or now, read from outside it.
    ///
    /// Every process Ying profiles with a report thread keeps ying.EXE.PID.live in its
    /// reporting directory (YING_LIVE_FILE), rewritten while it runs and removed when it exits
    /// normally. This writes, into FILE's directory (or -o DIR), the set the process would
    /// have written: text with its PEAK section, folded stacks, flamegraphs, both pprof
    /// profiles, the manifest and the HTML page. Frames are named from the binaries on disk
    /// when their build id is the one the process ran; a rebuilt or missing binary's frames
    /// are shown as module+0xoffset, with one warning. Prints the text report's path.
    ///
    /// Given a directory, writes the set of every raw exit profile in it that has none yet
    /// (ying.EXE.PID.SEQ.TIME.live: a process that ended within YING_SHORT_PROCESS_SECS of its
    /// start writes its exit report so), beside it, and prints each text report's path.
    #[command(after_help = "Example: ying report ying-profiles/ying.server.4242.live")]
    Report {
        /// The live file, or a directory of raw exit profiles.
        file: PathBuf,
        /// Where the set goes (default: FILE's directory).
        #[arg(short, long, value_name = "DIR")]
        output: Option<PathBuf>,
    },
    /// Write one HTML page for a directory of report sets, and print its path.
    ///
    /// Reads every report set in DIR back from its .pb.gz (and .peak.pb.gz and .json when
    /// present), sets of older runs and of several processes included (one section per
    /// process), and writes DIR/ying.view.html: memory over the dumps, each dump's top stacks
    /// and flamegraph, and a diff of any two dumps. The page is self-contained (it makes no
    /// network request). A set that cannot be read is left out with a warning.
    #[command(
        after_help = "Example: ying view ying-profiles && xdg-open ying-profiles/ying.view.html"
    )]
    View {
        /// The directory of report sets (YING_REPORTING_PATH).
        dir: PathBuf,
    },
}

/// How values are printed.
#[derive(Debug, Clone, Copy, PartialEq, Eq, ValueEnum)]
enum UnitArg {
    /// Binary units for bytes (12.50MiB), integers for counts.
    Auto,
    /// Exact integers (bytes with a B after them), as `go tool pprof -unit=B`.
    #[value(name = "B", alias = "bytes")]
    Bytes,
}

impl From<UnitArg> for profile::Unit {
    fn from(u: UnitArg) -> Self {
        match u {
            UnitArg::Auto => profile::Unit::Auto,
            UnitArg::Bytes => profile::Unit::Exact,
        }
    }
}

/// Prints to stdout; a closed pipe (`ying top f | head`) is not an error.
fn out(text: &str) -> Result<(), String> {
    match std::io::stdout().lock().write_all(text.as_bytes()) {
        Err(e) if e.kind() != std::io::ErrorKind::BrokenPipe => Err(format!("stdout: {e}")),
        _ => Ok(()),
    }
}

fn top(
    file: PathBuf,
    k: usize,
    sample: Option<String>,
    cum: bool,
    node_fraction: f64,
    unit: UnitArg,
) -> Result<(), String> {
    let loaded = profile::load(&file)?;
    let p = &loaded.profile;
    let index = profile::sample_index(p, &loaded.path, sample.as_deref())?;
    let t = p.sample_type[index];
    let (ty, unit_name) = (p.string(t.r#type), p.string(t.unit));
    let pruner = profile::Pruner::of(p, &loaded.path);
    let mut names = profile::Names::default();
    // A profile that gives its samples' standard errors (Ying's) gets each row's 95 % interval.
    let noise = profile::Noise::of(p, index).filter(profile::Noise::labelled);
    let stacks = profile::stacks(p, index, pruner.as_ref(), noise.as_ref(), &mut names);
    let mut rows = std::collections::HashMap::new();
    profile::accumulate(&stacks, 1, &mut rows);
    let sorted = profile::sorted_rows(&rows, &names, cum);
    let all = sorted.len();
    let (sorted, cutoff) = profile::trim(sorted, node_fraction);
    let total = profile::total(p, index);
    let shown = &sorted[..sorted.len().min(k)];
    let text = format!(
        "{}File: {}\nType: {ty}\nTotal: {}\nShowing top {} of {} functions, sorted by {}; {} \
         with |cum| < {} left out\n{}",
        if ty.starts_with("inuse") { peak_note(&loaded.path) } else { String::new() },
        loaded.path.display(),
        profile::format_value(total, unit_name, unit.into()),
        shown.len(),
        sorted.len(),
        if cum { "cum" } else { "flat" },
        all - sorted.len(),
        profile::format_value(cutoff, unit_name, unit.into()),
        with_intervals(
            profile::table(shown, &names, total, unit_name, unit.into()),
            noise.is_some().then_some(shown),
            cum,
            unit_name,
            unit.into()
        )
    );
    out(&text)
}

/// The first line of `ying top` on a report set's current profile whose process held little
/// of its peak (retained under `PEAK_FIRST_BELOW_PCT` % of it, the text report's rule): where
/// the peak's stacks are. Empty for any other file.
fn peak_note(path: &std::path::Path) -> String {
    use ying_profiler::report::{SetName, text::PEAK_FIRST_BELOW_PCT};
    let name = path.file_name().and_then(|n| n.to_str()).unwrap_or_default();
    let Some((set, "pb.gz")) = SetName::parse_file(name) else { return String::new() };
    let manifest = path.with_file_name(set.file("json"));
    let Ok(bytes) = ying_profiler::report::bounded::read_manifest(&manifest) else {
        return String::new();
    };
    let Ok(m) = serde_json::from_slice::<serde_json::Value>(&bytes) else { return String::new() };
    let retained = m["totals"]["retained_bytes"].as_u64().unwrap_or(0);
    let peak = m["peak"]["high_water_bytes"].as_u64().max(m["peak"]["exact_bytes"].as_u64());
    let peak_file = m["files"]["peak_pprof"].as_str();
    match (peak, peak_file) {
        (Some(peak), Some(file)) if peak > 0 => {
            let share = retained as f64 * 100.0 / peak as f64;
            if share >= PEAK_FIRST_BELOW_PCT {
                return String::new();
            }
            format!(
                "First read: retained {} is {share:.1} % of the peak ({}): `ying top {}` shows \
                 the peak's functions\n",
                if m["exiting"] == true { "at exit" } else { "at this report" },
                ying_profiler::report::human_bytes(peak),
                path.with_file_name(file).display()
            )
        }
        _ => String::new(),
    }
}

/// `table` (rows `rows`, as [`profile::table`] printed them) with a column of each row's 95 %
/// interval (`±` 1.96 standard errors of its flat value, or of its cum value when sorted by
/// cum) between cum% and the function's name; the table as it is without `rows`.
fn with_intervals(
    table: String,
    rows: Option<&[profile::Row]>,
    cum: bool,
    unit: &str,
    how: profile::Unit,
) -> String {
    let Some(rows) = rows else { return table };
    let mut o = String::new();
    for (i, line) in table.lines().enumerate() {
        let (cols, name) = profile::split_before_name(line);
        let pm = match i.checked_sub(1).and_then(|r| rows.get(r)) {
            None => if cum { "±95% cum" } else { "±95% flat" }.to_string(),
            Some(r) => {
                let var = if cum { r.cum_var } else { r.flat_var };
                let half = (ying_profiler::report::Z95 * var.max(0.0).sqrt()).round() as i64;
                format!("±{}", profile::format_value(half, unit, how))
            }
        };
        o.push_str(&format!("{cols} {pm:>11}  {}\n", name.trim_start()));
    }
    o
}

/// Says on stderr which processes left a live file in `dir`: those that ended without their
/// exit report first (their heap at death), then those still running.
fn list_live_files(dir: &std::path::Path) {
    use ying_profiler::report::live::{LiveProfile, is_live_file_name};
    let Ok(entries) = std::fs::read_dir(dir) else { return };
    let mut lives: Vec<LiveProfile> = entries
        .flatten()
        .map(|e| e.path())
        .filter(|p| p.file_name().and_then(|n| n.to_str()).is_some_and(is_live_file_name))
        .filter_map(|p| LiveProfile::read(&p).ok())
        .collect();
    lives.sort_by_key(|l| (l.is_running(), l.pid()));
    for l in &lives {
        let exe = l.exe().rsplit('/').next().unwrap_or("?");
        let what = if l.is_running() { "its heap now" } else { "its heap at death" };
        eprintln!(
            "ying: {exe} (pid {}) {}: {what} is in {} (`ying report` writes its set)",
            l.pid(),
            l.default_ending(),
            l.path().display()
        );
    }
}

fn main() -> ExitCode {
    let cli = Cli::parse();
    // Frames this command names from files on disk (live files, raw sets) may come from debug
    // files served by DEBUGINFOD_URLS; the profiled processes themselves never fetch.
    ying_profiler::debuginfo::set_fetch(true);
    let result = match cli.command {
        Cmd::Run(req) => run::run(&req).map(ExitCode::from),
        Cmd::Diff { a, b, sample, k, cum, all, node_fraction, unit, output } => (|| {
            let (a, b) = (profile::load(&a)?, profile::load(&b)?);
            let req = diff::Request {
                a: &a,
                b: &b,
                sample: sample.as_deref(),
                rows: k,
                all,
                by_cum: cum,
                node_fraction,
                unit: unit.into(),
                prefix: &output,
            };
            let written = diff::diff(&req)?;
            out(&written.top)?;
            for f in &written.files {
                eprintln!("ying: wrote {}", f.display());
            }
            Ok(ExitCode::SUCCESS)
        })(),
        Cmd::Leaks { sets } => {
            leaks::leaks(&sets).and_then(|text| out(&text).map(|()| ExitCode::SUCCESS))
        }
        Cmd::Top { file, k, sample, cum, node_fraction, unit } => {
            top(file, k, sample, cum, node_fraction, unit).map(|()| ExitCode::SUCCESS)
        }
        Cmd::Report { file, output: None } if file.is_dir() => {
            run::report_dir(&file).and_then(|(text, ok)| {
                out(&text).map(|()| if ok { ExitCode::SUCCESS } else { ExitCode::FAILURE })
            })
        }
        Cmd::Report { file, output } => {
            run::report_live(&file, output.as_deref(), None).and_then(|r| {
                for w in &r.warnings {
                    eprintln!("{w}");
                }
                let text = r
                    .paths
                    .text
                    .as_ref()
                    .map_or_else(|| r.stem.clone(), |p| p.display().to_string());
                out(&format!("{text}\n")).map(|()| ExitCode::SUCCESS)
            })
        }
        Cmd::View { dir } => match ying_profiler::report::html::write_view(&dir) {
            Ok(page) => {
                list_live_files(&dir);
                out(&format!("{}\n", page.display())).map(|()| ExitCode::SUCCESS)
            }
            // The library's messages name the directory already; the system's do not.
            Err(e) if e.to_string().starts_with(&dir.display().to_string()) => Err(e.to_string()),
            Err(e) => Err(format!("{}: {e}", dir.display())),
        },
    };
    match result {
        Ok(code) => code,
        Err(e) => {
            // One line, whatever the message holds.
            eprintln!("ying: error: {}", e.replace('\n', " "));
            ExitCode::FAILURE
        }
    }
}

#[cfg(test)]
mod tests {
    /// The library names stacks past the allocator's frames with `is_allocator_entry`, and asks
    /// pprof to drop them with the regular expression `ALLOCATOR_FRAMES`: both say the same of
    /// every name (pprof matches whole names).
    #[test]
    fn allocator_entry_points_agree_with_the_pprof_drop_frames() {
        use ying_profiler::callstack::is_allocator_entry;
        use ying_profiler::report::heap_profile::ALLOCATOR_FRAMES;
        let re = regex::Regex::new(&format!("^(?:{ALLOCATOR_FRAMES})$")).unwrap();
        let names = [
            "malloc",
            "__libc_malloc",
            "calloc",
            "realloc",
            "reallocarray",
            "free",
            "__libc_free",
            "posix_memalign",
            "aligned_alloc",
            "pvalloc",
            "operator new(unsigned long)",
            "operator new[](unsigned long)",
            "operator delete(void*)",
            "_PyObject_Malloc",
            "PyObject_Malloc",
            "PyMem_RawMalloc",
            "_PyMem_RawRealloc",
            "PyObject_Calloc",
            "pymalloc_alloc",
            "sqlite3Malloc",
            "sqlite3MallocZero",
            "sqlite3MemMalloc",
            "sqlite3Realloc",
            "sqlite3DbMallocRaw",
            "sqlite3DbReallocOrFree",
            // Not entry points:
            "_PyObject_ArenaMmap",
            "new_arena",
            "allocate_from_new_pool",
            "PyUnicode_New",
            "PyObject_Free",
            "mallocx",
            "my_malloc",
            "malloc_usable_size",
            "sqlite3MallocSize",
            "sqlite3DbFree",
            "main",
            // Rust's entry points.
            "alloc::alloc::alloc",
            "alloc::alloc::Global::alloc_impl_runtime",
            "<alloc::alloc::Global as core::alloc::Allocator>::allocate",
            "alloc::raw_vec::RawVecInner<A>::try_allocate_in",
            "<alloc::raw_vec::RawVec<T,A> as core::ops::drop::Drop>::drop",
            "__rust_alloc",
            "__rdl_alloc",
            "__rg_realloc",
            "alloc::vec::from_elem",
            "<u8 as alloc::vec::spec_from_elem::SpecFromElem>::from_elem",
            "alloc::vec::Vec<T>::push",
            "alloc::vec::Vec<T,A>::with_capacity_in",
            "alloc::vec::Vec::reserve",
            "alloc::string::String::push_str",
            "alloc::boxed::Box<T>::new",
            "hashbrown::raw::RawTable<T,A>::reserve_rehash",
            "hashbrown::raw::RawTableInner::fallible_with_capacity",
            // Not entry points: they call the program's code.
            "<alloc::vec::Vec<T,A> as core::iter::traits::collect::Extend<T>>::extend",
            "alloc::vec::Vec<T>::retain",
            "alloc::string::String::from_utf8",
            "hashbrown::map::HashMap<K,V,S,A>::insert",
            "alloc::boxed::Box<T>::leak",
            "my_crate::alloc::alloc::thing",
            "__rust_try",
            "std::sys::backtrace::__rust_begin_short_backtrace",
            "__rust_begin_short_backtrace",
            "__rust_alloc_error_handler_should_panic",
        ];
        for n in names {
            assert_eq!(is_allocator_entry(n), re.is_match(n), "{n}");
        }
        assert!(is_allocator_entry("_PyObject_Malloc") && !is_allocator_entry("new_arena"));
    }
}
