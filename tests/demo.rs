//! `gpuslice demo`, end to end: it runs its tenants on a simulated GPU under
//! a monitor, shows the live table, ends with a summary in which every part
//! of the product showed (the notebook refused at its cap and going on, the
//! inference bursts measured, both queued jobs run), and writes an SVG chart
//! that parses, with one line per tenant that used the device.

use gpuslice_tests::gpuslice_bin;
use std::process::Command;

#[test]
fn the_demo_shows_caps_shares_priority_and_the_queue_and_draws_its_chart() {
    let dir = std::env::temp_dir().join(format!("gpuslice-demo-test-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let chart = dir.join("demo.svg");
    let out = Command::new(gpuslice_bin())
        .args(["demo", "--seconds", "12", "--chart"])
        .arg(&chart)
        .env_remove("GPUSLICE_DIR")
        .output()
        .expect("gpuslice demo runs");
    let stdout = String::from_utf8_lossy(&out.stdout);
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(out.status.success(), "gpuslice demo failed\n{stdout}\n{stderr}");
    for tenant in ["training", "inference", "notebook"] {
        assert!(stdout.contains(tenant), "no {tenant} in the demo's output\n{stdout}");
    }
    assert!(stdout.contains("QUEUE"), "{stdout}");
    let summary = stdout.split("SUMMARY").nth(1).unwrap_or_else(|| panic!("no summary\n{stdout}\n{stderr}"));
    assert!(summary.contains("notebook   cap 1 GiB: refused at") && summary.contains("goes on"), "{summary}");
    assert!(summary.contains("bursts of 20 x 200 us took"), "{summary}");
    assert!(summary.contains("share 60 %: got"), "{summary}");
    for job in ["job-1", "job-2"] {
        assert!(
            summary.contains(&format!("{job}      queued for 8 GiB: started when room freed up")),
            "{job} did not run\n{summary}\n{stderr}"
        );
    }
    let svg = std::fs::read_to_string(&chart).expect("the chart is written");
    let doc = roxmltree::Document::parse(&svg).expect("the chart is well-formed XML");
    assert_eq!(doc.root_element().tag_name().name(), "svg");
    let text: String = doc.descendants().filter(|n| n.is_text()).filter_map(|n| n.text()).collect();
    for tenant in ["training", "inference"] {
        assert!(text.contains(tenant), "the chart's legend has no {tenant}: {text}");
    }
    let _ = std::fs::remove_dir_all(&dir);
}
