//! `cordon doctor [--json]`: which sandbox layers this machine provides, what was tried, and the
//! remedy for each missing one. Exit 0 when every required layer is present, 3 otherwise.

use std::io::Write;
use std::process::ExitCode;

use cordon_sandbox::probe::{LayerStatus, Probe};

/// Exit status when a required layer is missing (DESIGN Appendix A).
const MISSING_EXIT: u8 = 3;
/// Exit status for a usage error, here an invalid `CORDON_PROBE_REMOVE`.
const USAGE_EXIT: u8 = 2;

#[derive(Debug, clap::Args)]
pub struct Args {
    /// Print `{"sandbox":bool,"layers":[{"name","available","detail","remedy"}]}` instead of text.
    #[arg(long)]
    json: bool,
}

pub fn run(args: Args) -> anyhow::Result<ExitCode> {
    // The thorough probe: namespaces are really created in a forked child, as a session would.
    let probe = match Probe::detect_thorough() {
        Ok(probe) => probe,
        Err(err) => {
            eprintln!("cordon: {err}");
            return Ok(ExitCode::from(USAGE_EXIT));
        }
    };
    let text = if args.json {
        probe.to_json() + "\n"
    } else {
        render(&probe)
    };
    std::io::stdout().lock().write_all(text.as_bytes())?;
    Ok(if probe.sandbox_available() {
        ExitCode::SUCCESS
    } else {
        ExitCode::from(MISSING_EXIT)
    })
}

/// One line per layer (name, required or optional, status, detail), the remedy under each missing
/// one, and a verdict line.
fn render(probe: &Probe) -> String {
    let width = probe
        .layers()
        .iter()
        .map(|s| s.layer.as_str().len())
        .max()
        .unwrap_or(0);
    let mut out = String::new();
    for status in probe.layers() {
        out.push_str(&line(status, width));
    }
    out.push_str(&toolchains());
    let missing: Vec<&str> = probe
        .missing_required()
        .iter()
        .map(|s| s.layer.as_str())
        .collect();
    if missing.is_empty() {
        out.push_str("\nsandbox: available (every required layer is present)\n");
    } else {
        out.push_str(&format!(
            "\nsandbox: unavailable; cordon refuses to run until these required layers are \
             fixed: {}\n",
            missing.join(", ")
        ));
    }
    out
}

/// The invoking user's toolchains as `isolation.toolchains` / `--toolchain` would find them.
fn toolchains() -> String {
    use cordon_sandbox::toolchain::{self, Toolchain, ToolchainError};
    let var = |name: &str| std::env::var_os(name);
    let mut out = String::from("\ntoolchains (for isolation.toolchains and --toolchain):\n");
    for name in Toolchain::ALL {
        let found = match toolchain::expose(&[name], &var, None) {
            Ok(exposure) => exposure
                .read_only
                .iter()
                .map(|p| p.display().to_string())
                .collect::<Vec<_>>()
                .join(", "),
            Err(ToolchainError::NotFound { looked, .. }) => {
                format!("not found (looked for {looked})")
            }
            Err(err) => format!("refused: {err}"),
        };
        out.push_str(&format!("  {:<8}{found}\n", name.name()));
    }
    out
}

fn line(status: &LayerStatus, width: usize) -> String {
    let need = if status.layer.is_required() {
        "required"
    } else {
        "optional"
    };
    let state = if status.available { "ok" } else { "MISSING" };
    let mut text = format!(
        "{name:<width$}  {need:<8}  {state:<7}  {detail}\n",
        name = status.layer.as_str(),
        detail = status.detail,
    );
    if let Some(remedy) = &status.remedy {
        let indent = width + 2 + 8 + 2 + 7 + 2;
        text.push_str(&format!("{:indent$}remedy: {remedy}\n", ""));
    }
    text
}

#[cfg(test)]
mod tests {
    use super::*;
    use cordon_sandbox::probe::Layer;

    #[test]
    fn missing_layers_show_their_remedy_under_the_detail() {
        let probe = Probe::from_statuses(
            Layer::ALL
                .into_iter()
                .map(|layer| LayerStatus {
                    layer,
                    available: layer != Layer::Seccomp,
                    detail: "d".to_owned(),
                    remedy: (layer == Layer::Seccomp).then(|| "r".to_owned()),
                })
                .collect(),
        );
        let text = render(&probe);
        // The remedy sits under the detail column: the longest layer name, `required` (8) and
        // `MISSING` (7), each followed by two spaces.
        let name_width = Layer::ALL.iter().map(|l| l.as_str().len()).max().unwrap();
        let under_detail = " ".repeat(name_width + 2 + 8 + 2 + 7 + 2);
        assert!(
            text.contains(&format!(
                "seccomp             required  MISSING  d\n{under_detail}remedy: r\n"
            )),
            "{text}"
        );
        assert!(text.contains("landlock            required  ok       d\n"));
        assert!(text.ends_with(
            "sandbox: unavailable; cordon refuses to run until these required layers are fixed: \
             seccomp\n"
        ));
    }
}
