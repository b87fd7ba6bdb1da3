//! The study's plots (PNG): per service, throughput and p99 against offered load at one and
//! two pods; for the KEDA run, pods and every request's latency over time.

use std::path::Path;

use anyhow::Context;
use clair_testenv::load::Class;
use plotters::prelude::*;

use super::KedaRun;
use super::bare::Comparison;
use super::figures::{self, Service, StepFigures};

/// Debian's `fonts-dejavu-core` (plotters draws text with a font file it is given).
const FONT: &str = "/usr/share/fonts/truetype/dejavu/DejaVuSans.ttf";

/// Registers the font the plots' text uses; an error says how to get it.
pub fn font() -> anyhow::Result<()> {
    let bytes = std::fs::read(FONT).with_context(|| {
        format!("{FONT}: the plots need it; install Debian's fonts-dejavu-core")
    })?;
    plotters::style::register_font("sans-serif", FontStyle::Normal, bytes.leak())
        .map_err(|_| anyhow::anyhow!("{FONT} is not a font"))
}

/// One point of a sweep line: clients, answered/s, p99 (s), CPU (cores).
type Point = (f64, f64, f64, f64);

const COLOURS: [RGBColor; 3] = [
    RGBColor(31, 119, 180),
    RGBColor(214, 39, 40),
    RGBColor(44, 160, 44),
];

pub fn all(
    out: &Path,
    steps: &[StepFigures],
    bare: &[Comparison],
    keda: Option<&KedaRun>,
) -> anyhow::Result<()> {
    for (service, class) in [
        (Service::Indexer, Class::New),
        (Service::Matcher, Class::Report),
        (Service::Notifier, Class::Notification),
    ] {
        let rows: Vec<&StepFigures> = steps
            .iter()
            .filter(|s| s.service == service && s.class == class && s.label.is_none())
            .collect();
        if !rows.is_empty() {
            sweep(
                &out.join(format!("{}.png", service.name())),
                service,
                &rows,
                bare,
            )?;
        }
    }
    if let Some(keda) = keda {
        keda_plot(&out.join("keda.png"), keda)?;
    }
    Ok(())
}

/// Answered/s, p99 and CPU against clients, a line per pod count (and the bare host
/// process for the indexer).
fn sweep(
    path: &Path,
    service: Service,
    rows: &[&StepFigures],
    bare: &[Comparison],
) -> anyhow::Result<()> {
    let root = BitMapBackend::new(path, (1000, 900)).into_drawing_area();
    root.fill(&WHITE)?;
    let panels = root.split_evenly((3, 1));
    let max_clients = rows.iter().map(|r| r.clients).max().unwrap_or(1) as f64;
    let mut lines: Vec<(String, Vec<Point>)> = Vec::new();
    for replicas in [1, 2] {
        let points: Vec<Point> = rows
            .iter()
            .filter(|r| r.replicas == replicas)
            .map(|r| {
                (
                    r.clients as f64,
                    r.throughput,
                    r.p99.unwrap_or(0.0),
                    r.server.cpu_cores.unwrap_or(0.0),
                )
            })
            .collect();
        if !points.is_empty() {
            lines.push((format!("{replicas} pod(s)"), points));
        }
    }
    if service == Service::Indexer && !bare.is_empty() {
        lines.push((
            "bare host process".to_string(),
            bare.iter()
                .map(|r| {
                    (
                        r.clients as f64,
                        r.host.throughput(),
                        r.host.p99.unwrap_or(0.0),
                        r.host.cpu_seconds.unwrap_or(0.0) / r.host.seconds.max(1.0),
                    )
                })
                .collect(),
        ));
    }
    let panel = |area: &DrawingArea<BitMapBackend, plotters::coord::Shift>,
                 title: &str,
                 y: &str,
                 pick: fn(&Point) -> f64|
     -> anyhow::Result<()> {
        let top = lines
            .iter()
            .flat_map(|(_, p)| p.iter().map(pick))
            .fold(0.0f64, f64::max)
            .max(0.01)
            * 1.15;
        let mut chart = ChartBuilder::on(area)
            .caption(title, ("sans-serif", 18))
            .margin(10)
            .x_label_area_size(35)
            .y_label_area_size(60)
            .build_cartesian_2d(0f64..max_clients * 1.05, 0f64..top)?;
        chart
            .configure_mesh()
            .x_desc("clients (offered concurrency)")
            .y_desc(y)
            .draw()?;
        for (i, (name, points)) in lines.iter().enumerate() {
            let colour = COLOURS[i % COLOURS.len()];
            let series: Vec<(f64, f64)> = points.iter().map(|p| (p.0, pick(p))).collect();
            chart
                .draw_series(LineSeries::new(series.clone(), colour.stroke_width(2)))?
                .label(name.clone())
                .legend(move |(x, y)| PathElement::new(vec![(x, y), (x + 20, y)], colour));
            chart.draw_series(
                series
                    .iter()
                    .map(|&(x, y)| Circle::new((x, y), 4, colour.filled())),
            )?;
        }
        chart
            .configure_series_labels()
            .border_style(BLACK)
            .background_style(WHITE.mix(0.9))
            .position(SeriesLabelPosition::UpperLeft)
            .draw()?;
        Ok(())
    };
    let name = service.name();
    panel(
        &panels[0],
        &format!("The {name}: answered requests per second"),
        "answered/s",
        |p| p.1,
    )?;
    panel(
        &panels[1],
        &format!("The {name}: p99 latency, client side"),
        "seconds",
        |p| p.2,
    )?;
    panel(
        &panels[2],
        &format!("The {name}: CPU used (the pods limited to 500m each)"),
        "cores",
        |p| p.3,
    )?;
    root.present()?;
    Ok(())
}

/// Ready and desired pods over time; each request's latency over time (answered, 429).
fn keda_plot(path: &Path, keda: &KedaRun) -> anyhow::Result<()> {
    let root = BitMapBackend::new(path, (1000, 700)).into_drawing_area();
    root.fill(&WHITE)?;
    let panels = root.split_evenly((2, 1));
    let end = keda
        .replicas
        .last()
        .map_or(1.0, |r| r.0)
        .max(keda.samples.last().map_or(1.0, |s| s.sent.as_secs_f64()));
    let most = keda
        .replicas
        .iter()
        .map(|r| r.1.max(r.2))
        .max()
        .unwrap_or(1) as f64;
    let mut chart = ChartBuilder::on(&panels[0])
        .caption(
            format!(
                "KEDA on the indexer: {} clients, then {} from {:.0} s",
                keda.saturating_clients, keda.down_clients, keda.stepped_down_at
            ),
            ("sans-serif", 18),
        )
        .margin(10)
        .x_label_area_size(35)
        .y_label_area_size(60)
        .build_cartesian_2d(0f64..end, 0f64..most + 1.0)?;
    chart
        .configure_mesh()
        .x_desc("seconds")
        .y_desc("pods")
        .draw()?;
    for (i, (name, pick)) in [
        (
            "desired (KEDA's HPA)",
            (|r: &(f64, i32, i32)| r.1) as fn(&(f64, i32, i32)) -> i32,
        ),
        ("ready", |r: &(f64, i32, i32)| r.2),
    ]
    .into_iter()
    .enumerate()
    {
        let colour = COLOURS[i];
        chart
            .draw_series(LineSeries::new(
                keda.replicas.iter().map(|r| (r.0, f64::from(pick(r)))),
                colour.stroke_width(2),
            ))?
            .label(name)
            .legend(move |(x, y)| PathElement::new(vec![(x, y), (x + 20, y)], colour));
    }
    chart
        .configure_series_labels()
        .border_style(BLACK)
        .background_style(WHITE.mix(0.9))
        .position(SeriesLabelPosition::UpperRight)
        .draw()?;

    let top = keda
        .samples
        .iter()
        .map(|s| s.latency.as_secs_f64())
        .fold(0.0f64, f64::max)
        .max(0.1)
        * 1.1;
    let mut chart = ChartBuilder::on(&panels[1])
        .caption(
            "Each index request's latency (blue answered, red 429, black failed)",
            ("sans-serif", 18),
        )
        .margin(10)
        .x_label_area_size(35)
        .y_label_area_size(60)
        .build_cartesian_2d(0f64..end, 0f64..top)?;
    chart
        .configure_mesh()
        .x_desc("seconds (when sent)")
        .y_desc("latency (s)")
        .draw()?;
    chart.draw_series(keda.samples.iter().map(|s| {
        let colour = if s.status == 429 {
            COLOURS[1]
        } else if figures::failed(s.status) {
            BLACK
        } else {
            COLOURS[0]
        };
        Circle::new(
            (s.sent.as_secs_f64(), s.latency.as_secs_f64()),
            2,
            colour.filled(),
        )
    }))?;
    root.present()?;
    Ok(())
}
