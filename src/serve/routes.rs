//! The endpoint's routes (see the table in [`crate::serve`]).

use std::time::Duration;

use super::http::{Ctx, Request, Response};
use super::{MAX_DELTA_SECS, json_str};
use crate::callstack::Measurement;
use crate::profiles::{self, HeapView};
use crate::report::model::{Facts, Occasion};
use crate::report::{ReportPaths, utc_timestamp};

/// Every route: path, method, what it answers.
const ROUTES: [(&str, &str, &str); 7] = [
    ("/debug/pprof/heap", "GET", "heap profile (pprof; ?seconds=N, ?debug=1)"),
    ("/debug/pprof/allocs", "GET", "allocation profile (pprof; ?seconds=N, ?debug=1)"),
    ("/debug/pprof/heap/peak", "GET", "heap profile at the kept peak (pprof)"),
    ("/debug/ying/flamegraph.svg", "GET", "flamegraph of now (SVG)"),
    ("/debug/ying/report.txt", "GET", "text report of now"),
    ("/debug/ying/dump", "POST", "write a report set; its paths (JSON)"),
    ("/debug/ying/status", "GET", "totals, peak, samples, settings (JSON)"),
];

const PPROF: &str = "application/octet-stream";
const TEXT: &str = "text/plain; charset=utf-8";
const JSON: &str = "application/json";

fn index() -> Response {
    let mut body = String::from("Ying memory profiler endpoints:\n");
    for (path, method, what) in ROUTES {
        body.push_str(&format!("  {method:4} {path:28} {what}\n"));
    }
    Response::text(200, body)
}

pub(crate) fn route(req: &Request, ctx: &Ctx) -> Response {
    let path = req.path.trim_end_matches('/');
    if matches!(path, "" | "/debug/pprof" | "/debug/ying") {
        return if req.method == "GET" { index() } else { not_allowed("GET") };
    }
    let Some(&(_, method, _)) = ROUTES.iter().find(|(p, _, _)| *p == path) else {
        return Response::text(
            404,
            format!("no route {}; GET /debug/pprof/ lists them", req.path.escape_debug()),
        );
    };
    if req.method != method {
        return not_allowed(method);
    }
    let out = match path {
        "/debug/pprof/heap" => profile(req, ctx, HeapView::Inuse),
        "/debug/pprof/allocs" => profile(req, ctx, HeapView::Alloc),
        "/debug/pprof/heap/peak" => {
            profiles::pprof_gz(ctx.source, HeapView::Peak).map(|b| pprof(b, "heap_peak"))
        }
        "/debug/ying/flamegraph.svg" => {
            profiles::flamegraph_svg(ctx.source, &ctx.runner.report_options())
                .map(|b| Response::new(200, "image/svg+xml", b))
        }
        "/debug/ying/report.txt" => profiles::text_report(ctx.source, &ctx.runner.report_options())
            .map(|t| Response::new(200, TEXT, t.into_bytes())),
        "/debug/ying/dump" => Ok(dump(ctx)),
        "/debug/ying/status" => Ok(Response::new(200, JSON, status(ctx).into_bytes())),
        _ => Ok(Response::text(404, "no such route")),
    };
    out.unwrap_or_else(|e| Response::text(500, format!("profile not built: {e}")))
}

fn not_allowed(allow: &'static str) -> Response {
    Response::text(405, format!("method not allowed: use {allow}")).header("Allow", allow)
}

fn pprof(body: Vec<u8>, name: &str) -> Response {
    Response::new(200, PPROF, body)
        .header("Content-Disposition", format!("attachment; filename=\"{name}\""))
}

/// `/debug/pprof/heap` and `/debug/pprof/allocs`, with Go's `seconds`, `debug` and `gc`.
fn profile(req: &Request, ctx: &Ctx, view: HeapView) -> std::io::Result<Response> {
    let debug = match req.param("debug").map(str::parse::<u32>) {
        None => 0,
        Some(Ok(d)) => d,
        Some(Err(_)) => return Ok(Response::text(400, "debug must be a number such as 1")),
    };
    let seconds = match req.param("seconds").map(str::parse::<u64>) {
        None => None,
        Some(Ok(s)) if (1..=MAX_DELTA_SECS).contains(&s) => Some(s),
        Some(_) => {
            return Ok(Response::text(
                400,
                format!("seconds must be a whole number from 1 to {MAX_DELTA_SECS}"),
            ));
        }
    };
    let name = if view == HeapView::Alloc { "allocs" } else { "heap" };
    if debug > 0 {
        if seconds.is_some() {
            return Ok(Response::text(400, "seconds is not supported with debug"));
        }
        let mut opts = ctx.runner.report_options();
        if view == HeapView::Alloc {
            opts.measurement = Measurement::AllocatedBytes;
        }
        let t = profiles::text_report(ctx.source, &opts)?;
        return Ok(Response::new(200, TEXT, t.into_bytes()));
    }
    match seconds {
        None => profiles::pprof_gz(ctx.source, view).map(|b| pprof(b, name)),
        Some(s) => {
            let since = profiles::alloc_baseline(ctx.source)?;
            std::thread::sleep(Duration::from_secs(s));
            let (gz, _) = profiles::delta_pprof_gz(ctx.source, &since, view)?;
            Ok(pprof(gz, &format!("{name}-delta")))
        }
    }
}

fn opt_path(p: &Option<std::path::PathBuf>) -> String {
    p.as_ref().map(|p| json_str(&p.display().to_string())).unwrap_or_else(|| "null".into())
}

fn paths_json(p: &ReportPaths) -> String {
    format!(
        "{{\"text\":{},\"folded\":{},\"svg\":{},\"pprof\":{},\"peak_folded\":{},\"peak_svg\":{},\"peak_pprof\":{},\"manifest\":{}}}\n",
        opt_path(&p.text),
        opt_path(&p.folded),
        opt_path(&p.svg),
        opt_path(&p.pprof),
        opt_path(&p.peak_folded),
        opt_path(&p.peak_svg),
        opt_path(&p.peak_pprof),
        opt_path(&p.manifest)
    )
}

fn dump(ctx: &Ctx) -> Response {
    match ctx.runner.dump_now() {
        Ok(paths) => Response::new(200, JSON, paths_json(&paths).into_bytes()),
        Err(e) => Response::new(
            500,
            JSON,
            format!("{{\"error\":{}}}\n", json_str(&format!("report set not written: {e}")))
                .into_bytes(),
        ),
    }
}

/// A bound on the standard error of an estimate of `bytes` sampled at `interval` (0 in exact
/// mode), for the status, which reads no stack and so no variance: the interval's bound
/// ([`crate::report::noise::variance`]).
fn stderr_bound(bytes: u64, interval: u64) -> u64 {
    let b = bytes as f64;
    crate::report::noise::variance(b, b, interval as f64, None).sqrt().round() as u64
}

fn opt_num(v: Option<u64>) -> String {
    v.map(|v| v.to_string()).unwrap_or_else(|| "null".into())
}

/// `/debug/ying/status`: the header facts of a report, without its stacks (a few atomic loads,
/// `/proc/self/status` and `/proc/self/smaps` for the resident set's parts; the endpoint's
/// thread is profiler code for its whole life).
fn status(ctx: &Ctx) -> String {
    let (interval, unit) = (ctx.source.sample_interval(), ctx.source.unit());
    let snap = Facts::read(interval, unit, Occasion::default());
    let pc = &snap.process;
    let t = &snap.totals;
    let rss = snap.read_rss();
    let peak = match &snap.peak {
        Some(p) => format!(
            "{{\"estimated_bytes\":{},\"estimated_bytes_stderr_bound\":{},\"exact_bytes\":{},\"high_water_bytes\":{},\"at\":{}}}",
            p.estimated_bytes,
            stderr_bound(p.estimated_bytes, interval),
            opt_num(p.exact_bytes),
            p.high_water_bytes,
            json_str(&utc_timestamp(p.at, true))
        ),
        None => "null".into(),
    };
    let r = &ctx.runner;
    let s = &ctx.services;
    format!(
        concat!(
            "{{\"version\":{},\"pid\":{},\"exe\":{},\"taken_at\":{},",
            "\"totals\":{{\"allocated_bytes\":{},\"freed_bytes\":{},\"retained_bytes\":{}}},",
            "\"peak\":{},",
            "\"samples\":{{\"live\":{},\"dropped\":{},\"address_conflicts\":{},\"giant_refused\":{}}},",
            "\"profiler\":{{\"bytes\":{},\"peak_bytes\":{},\"symbol_cache_entries\":{}}},",
            "\"process\":{{\"rss_kib\":{},\"anon_rss_kib\":{},\"rss_bytes\":{},\"rss_breakdown\":{}}},",
            "\"settings\":{{\"sample_interval_bytes\":{},\"unit\":{},\"http_addr\":{},",
            "\"reporting_path\":{},\"check_interval_secs\":{},\"report_pct_change_trigger\":{},",
            "\"push_url\":{},\"otlp_url\":{},\"push_interval_secs\":{}}}}}\n"
        ),
        json_str(env!("CARGO_PKG_VERSION")),
        pc.pid,
        json_str(&pc.exe),
        json_str(&utc_timestamp(snap.taken_at, true)),
        t.allocated_bytes,
        t.freed_bytes,
        t.retained_bytes(),
        peak,
        snap.live_samples,
        snap.dropped_samples,
        snap.address_conflicts,
        snap.giant_refused,
        t.profiler_bytes,
        t.profiler_peak_bytes,
        snap.symbol_cache_entries,
        opt_num(pc.rss_kib),
        opt_num(pc.anon_rss_kib),
        opt_num(rss.as_ref().map(|b| b.rss)),
        rss.as_ref().map(|b| b.json()).unwrap_or_else(|| "null".into()),
        snap.sample_interval,
        json_str(&format!("{:?}", snap.unit)),
        json_str(&ctx.addr),
        json_str(&r.reporting_path().display().to_string()),
        r.check_interval_secs(),
        r.report_pct_change_trigger(),
        s.push_url.as_deref().map(json_str).unwrap_or_else(|| "null".into()),
        s.otlp_url.as_deref().map(json_str).unwrap_or_else(|| "null".into()),
        s.push_interval_secs,
    )
}

#[cfg(test)]
mod tests {
    use super::stderr_bound;

    #[test]
    fn the_status_bound_holds_for_every_block_size_and_vanishes_in_exact_mode() {
        let r = 512 * 1024u64;
        for size in [16u64, 4096, 512 * 1024, 64 << 20] {
            let w = crate::engine::sampler::weight(size, r);
            let (var, _) = w.variance();
            let bound = stderr_bound(w.bytes.round() as u64, r) as f64;
            assert!(var.sqrt() <= bound + 1.0, "{size}: {} > {bound}", var.sqrt());
        }
        assert_eq!(stderr_bound(1 << 30, 1), 0);
    }
}
