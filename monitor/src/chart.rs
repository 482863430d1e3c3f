//! The one chart gpuslice draws: each tenant's share of a device's time,
//! in percent, over time, as an SVG. `gpuslice demo` and the fairness
//! benchmark (`benches/fairness.rs`, which includes this file) both use it,
//! so their charts read the same way:
//! - each series is named by its tenant and setting ("training, share 60 %");
//! - a tenant's target is a dashed line in its colour, with a shaded band
//!   of ± [`Chart::band_points`] around it where that tolerance is the claim;
//! - the y axis is labelled every 10 points with a light line every 2, so a
//!   2-point miss is visible by eye;
//! - the legend sits beside the plot, never over a line.
//!
//! It uses nothing of the crate around it.

use plotters::prelude::*;
use std::path::Path;

/// One tenant's line.
pub struct Series {
    /// Tenant and setting, as the legend shows them.
    pub label: String,
    /// (seconds, percent of device time).
    pub points: Vec<(f64, f64)>,
    /// What the tenant is owed, in percent, drawn dashed.
    pub target_percent: Option<f64>,
}

/// A chart of shares over time.
pub struct Chart<'a> {
    pub title: &'a str,
    pub series: &'a [Series],
    /// Shade target ± this many points (None: no band).
    pub band_points: Option<f64>,
}

const WIDTH_PX: u32 = 960;
const HEIGHT_PX: u32 = 440;
/// Width of the legend column at the right.
const LEGEND_PX: u32 = 250;
/// Series colours, told apart on screen and in print.
const COLOURS: [RGBColor; 6] = [
    RGBColor(31, 119, 180),
    RGBColor(214, 39, 40),
    RGBColor(44, 160, 44),
    RGBColor(148, 103, 189),
    RGBColor(255, 127, 14),
    RGBColor(23, 190, 207),
];

fn colour(i: usize) -> RGBAColor {
    COLOURS[i % COLOURS.len()].to_rgba()
}

impl Chart<'_> {
    /// Writes the chart to `path`.
    pub fn write(&self, path: &Path) -> Result<(), String> {
        self.draw(path).map_err(|e| format!("cannot draw {}: {e}", path.display()))
    }

    fn draw(&self, path: &Path) -> Result<(), Box<dyn std::error::Error>> {
        let end_s = self.series.iter().flat_map(|s| s.points.iter().map(|(t, _)| *t)).fold(1.0, f64::max);
        let root = SVGBackend::new(path, (WIDTH_PX, HEIGHT_PX)).into_drawing_area();
        root.fill(&WHITE)?;
        let root = root.titled(self.title, ("sans-serif", 18))?;
        let (plot_area, legend_area) = root.split_horizontally(WIDTH_PX - LEGEND_PX);
        let mut chart = ChartBuilder::on(&plot_area)
            .margin(10)
            .x_label_area_size(35)
            .y_label_area_size(45)
            .build_cartesian_2d(0.0..end_s, 0.0..100.0)?;
        chart
            .configure_mesh()
            .x_desc("seconds")
            .y_desc("% of device time")
            .y_labels(11)
            .y_label_formatter(&|percent| format!("{percent:.0}"))
            .x_label_formatter(&|seconds| format!("{seconds:.0}"))
            .y_max_light_lines(4)
            .light_line_style(BLACK.mix(0.06))
            .bold_line_style(BLACK.mix(0.18))
            .draw()?;
        for (i, series) in self.series.iter().enumerate() {
            let colour = colour(i);
            if let (Some(target), Some(band)) = (series.target_percent, self.band_points) {
                let (low, high) = ((target - band).max(0.0), (target + band).min(100.0));
                chart.draw_series(std::iter::once(Rectangle::new([(0.0, low), (end_s, high)], colour.mix(0.12).filled())))?;
            }
            if let Some(target) = series.target_percent {
                chart.draw_series(DashedLineSeries::new([(0.0, target), (end_s, target)], 8, 5, colour.stroke_width(1)))?;
            }
            let points = series.points.iter().map(|(t, percent)| (*t, percent.clamp(0.0, 100.0)));
            chart.draw_series(LineSeries::new(points, colour.stroke_width(2)))?;
        }
        self.legend(&legend_area)?;
        root.present()?;
        Ok(())
    }

    /// One entry per series (and its target), drawn in the legend column.
    fn legend<DB: DrawingBackend>(&self, area: &DrawingArea<DB, plotters::coord::Shift>) -> Result<(), Box<dyn std::error::Error>>
    where
        DB::ErrorType: 'static,
    {
        let text = ("sans-serif", 13).into_font();
        let mut y = 30;
        for (i, series) in self.series.iter().enumerate() {
            let colour = colour(i);
            area.draw(&PathElement::new(vec![(8, y), (36, y)], colour.stroke_width(2)))?;
            area.draw(&Text::new(series.label.clone(), (44, y - 7), text.clone()))?;
            y += 20;
            if let Some(target) = series.target_percent {
                for dash in 0..2 {
                    let x = 8 + dash * 16;
                    area.draw(&PathElement::new(vec![(x, y), (x + 10, y)], colour.stroke_width(1)))?;
                }
                let what = match self.band_points {
                    Some(band) => format!("target {target:.0} % (± {band:.0} shaded)"),
                    None => format!("target {target:.0} %"),
                };
                area.draw(&Text::new(what, (44, y - 7), text.clone()))?;
                y += 20;
            }
            y += 8;
        }
        Ok(())
    }
}
