//! Benchmark: parse and validate a generated 1,000-step pipeline (with an agent file) and report
//! the median of 51 runs, next to the median of the YAML parse alone as the peer in the same run.
//! Run with `cargo bench -p cordon-pipeline`.

use std::collections::BTreeMap;
use std::fmt::Write as _;
use std::hint::black_box;
use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};

const STEPS: usize = 1_000;
const RUNS: usize = 51;

/// Agent, test and commit steps in rotation; every fourth test retries back to the agent.
fn pipeline() -> String {
    let mut y = String::from(
        "name: bench\nllm: {provider: openai, model: m, api_key_env: OPENAI_API_KEY}\n\
         secrets: {gh: {from: env, key: GH_TOKEN}}\nisolation: {memory: 2G, pids: 512, tmp_size: 512M}\nsteps:\n",
    );
    for i in 0..STEPS {
        match i % 3 {
            0 => {
                let _ = writeln!(
                    y,
                    "  - name: dev-{i}\n    agent: dev\n    produces: [out/{i}.md]\n    network: {{allow: [\"*.example.com\", api.example.test:8443], grants: true}}"
                );
            }
            1 => {
                let _ = writeln!(
                    y,
                    "  - name: test-{i}\n    command: [make, test-{i}]\n    timeout: 600\n    secrets: [gh]\n    setup: make deps\n    setup_network: {{allow: [packages.example.test]}}\n    on_fail: {{goto: dev-{}, retry: true}}",
                    i - 1
                );
            }
            _ => {
                let _ = writeln!(
                    y,
                    "  - name: commit-{i}\n    action: commit\n    params: {{message: \"step {i} of {{name}}\"}}"
                );
            }
        }
    }
    y
}

fn median(mut samples: Vec<Duration>) -> Duration {
    samples.sort();
    samples[samples.len() / 2]
}

fn time(mut f: impl FnMut()) -> Duration {
    let samples = (0..RUNS)
        .map(|_| {
            let start = Instant::now();
            f();
            start.elapsed()
        })
        .collect();
    median(samples)
}

fn main() {
    let text = pipeline();
    let mut files = BTreeMap::new();
    files.insert(
        PathBuf::from("agents/dev.agent.md"),
        "---\nname: dev\n---\nYou are dev.\n".to_owned(),
    );
    let check = cordon_pipeline::load_str("pipeline.yaml", &text, Path::new(""), &files);
    if let Err(d) = &check {
        eprintln!("the generated pipeline is invalid:\n{d}");
        std::process::exit(1);
    }
    let full = time(|| {
        let _ = black_box(cordon_pipeline::load_str(
            "pipeline.yaml",
            black_box(&text),
            Path::new(""),
            &files,
        ));
    });
    // The peer: the bare YAML event stream of the same text, which every YAML front end pays.
    let events = time(|| {
        let mut parser = saphyr_parser::Parser::new_from_str(black_box(&text));
        let mut n = 0usize;
        while let Some(Ok(_)) = parser.next_event() {
            n += 1;
        }
        black_box(n);
    });
    let ratio = full.as_secs_f64() / events.as_secs_f64().max(f64::MIN_POSITIVE);
    println!(
        "parse+validate {STEPS}-step pipeline ({} KiB): median {:.2} ms over {RUNS} runs (target < 50 ms)",
        text.len() / 1024,
        full.as_secs_f64() * 1000.0
    );
    println!(
        "yaml events alone (peer):            median {:.2} ms; parse+validate = {ratio:.1}x the bare YAML parse",
        events.as_secs_f64() * 1000.0
    );
}
