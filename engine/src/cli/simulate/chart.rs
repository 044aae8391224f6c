//! `sluice simulate --chart FILE`: GPU utilization and queue length over virtual time, one
//! line per policy, in two panels, written as SVG (plotters' SVG backend: no fonts or image
//! libraries to build; text is laid out by the browser).

use std::path::Path;

use plotters::prelude::*;

use crate::scheduler::simulate::Point;

/// One policy's line: its name and its averaged buckets.
pub struct Line<'a> {
    pub policy: &'a str,
    pub points: Vec<Point>,
}

const COLORS: [RGBColor; 6] = [
    RGBColor(214, 39, 40),
    RGBColor(31, 119, 180),
    RGBColor(44, 160, 44),
    RGBColor(148, 103, 189),
    RGBColor(255, 127, 14),
    RGBColor(23, 190, 207),
];

/// Writes the chart to `path`; `total_gpu` turns GPUs held into a utilization.
pub fn write(path: &Path, lines: &[Line<'_>], total_gpu: u64) -> Result<(), String> {
    draw(path, lines, total_gpu).map_err(|e| format!("cannot draw {}: {e}", path.display()))
}

fn draw(path: &Path, lines: &[Line<'_>], total_gpu: u64) -> Result<(), Box<dyn std::error::Error>> {
    let hours = |t: u64| t as f64 / 3600.0;
    let end = lines
        .iter()
        .filter_map(|l| l.points.last())
        .map(|p| hours(p.t))
        .fold(0.0f64, f64::max)
        .max(1.0 / 60.0);
    let queue_max = lines
        .iter()
        .flat_map(|l| l.points.iter().map(|p| p.queue))
        .fold(0.0f64, f64::max)
        .max(1.0)
        * 1.05;
    let root = SVGBackend::new(path, (1000, 720)).into_drawing_area();
    root.fill(&WHITE)?;
    let (top, bottom) = root.split_vertically(360);
    let util = |p: &Point| {
        if total_gpu == 0 {
            0.0
        } else {
            100.0 * p.gpus / total_gpu as f64
        }
    };
    for (area, title, y_desc, y_max) in [
        (&top, "GPU utilization", "% of GPUs held", 100.0),
        (&bottom, "Queue length", "jobs waiting", queue_max),
    ] {
        let mut chart = ChartBuilder::on(area)
            .caption(title, ("sans-serif", 20))
            .margin(12)
            .x_label_area_size(36)
            .y_label_area_size(56)
            .build_cartesian_2d(0.0..end, 0.0..y_max)?;
        chart
            .configure_mesh()
            .x_desc("hours")
            .y_desc(y_desc)
            .draw()?;
        for (i, line) in lines.iter().enumerate() {
            let color = COLORS[i % COLORS.len()];
            let queue = y_desc.starts_with("jobs");
            let pts = line.points.iter().map(|p| {
                let y = if queue { p.queue } else { util(p) };
                (hours(p.t), y)
            });
            chart
                .draw_series(LineSeries::new(pts, color.stroke_width(2)))?
                .label(line.policy)
                .legend(move |(x, y)| PathElement::new(vec![(x, y), (x + 20, y)], color));
        }
        chart
            .configure_series_labels()
            .position(SeriesLabelPosition::UpperRight)
            .background_style(WHITE.mix(0.85))
            .border_style(BLACK)
            .draw()?;
    }
    root.present()?;
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_chart_has_a_line_per_policy_in_each_panel() {
        let dir = std::env::temp_dir().join(format!("sluice-chart-{}", std::process::id()));
        std::fs::create_dir_all(&dir).expect("dir");
        let path = dir.join("c.svg");
        let pts = |g: f64| {
            (0..10)
                .map(|i| Point {
                    t: i * 600,
                    gpus: g,
                    queue: i as f64,
                })
                .collect()
        };
        let lines = [
            Line {
                policy: "fifo",
                points: pts(8.0),
            },
            Line {
                policy: "fair",
                points: pts(16.0),
            },
        ];
        write(&path, &lines, 32).expect("write");
        let svg = std::fs::read_to_string(&path).expect("read");
        assert!(svg.starts_with("<svg"), "{}", &svg[..100.min(svg.len())]);
        // A line per policy in each panel (the legend's swatches are thinner).
        for color in ["#D62728", "#1F77B4"] {
            let line = format!("stroke=\"{color}\" stroke-width=\"2\"");
            assert_eq!(svg.matches(&line).count(), 2, "{svg}");
        }
        assert!(
            svg.contains("\nfifo\n") && svg.contains("\nfair\n"),
            "{svg}"
        );
        assert!(svg.contains("GPU utilization") && svg.contains("Queue length"));
        let _ = std::fs::remove_dir_all(&dir);
    }
}
