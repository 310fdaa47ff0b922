//! Decision latency with 1,000 patterns: parse a CONNECT authority, decide, and classify a static
//! two-address answer (DNS excluded). Prints p50/p99/p99.9 over 100,000 single calls, then runs
//! criterion. The peer measured in the same run is a naive matcher that scans every pattern, so
//! the printed ratio shows what the index buys.

use std::hint::black_box;
use std::net::IpAddr;
use std::time::{Duration, Instant};

use cordon_egress::{
    Decision, Host, HostName, Pattern, PatternList, Policy, PolicySpec, Scope, Target,
};
use criterion::Criterion;

const PATTERNS: usize = 1_000;
const CALLS: usize = 100_000;

fn policy() -> Policy {
    let mut allow = Vec::new();
    for i in 0..PATTERNS {
        let text = match i % 10 {
            0..=5 => format!("svc{i}.team{}.example.com", i % 37),
            6 => format!("svc{i}.team{}.example.com:8443", i % 37),
            7 | 8 => format!("*.zone{i}.example.net"),
            _ => format!("ip:23.{}.{}.0/24:443", i % 200, i / 200),
        };
        allow.push(Pattern::parse(&text, PatternList::Allow).expect("bench pattern"));
    }
    let deny = (0..40)
        .map(|i| {
            Pattern::parse(
                &format!("svc{}.team{}.example.com", i * 10, (i * 10) % 37),
                PatternList::Deny,
            )
        })
        .collect::<Result<Vec<_>, _>>()
        .expect("bench deny");
    let operator_deny = ["*.corp.example.com", "*:25", "ip:23.0.0.0/24:*"]
        .iter()
        .map(|p| Pattern::parse(p, PatternList::Deny))
        .collect::<Result<Vec<_>, _>>()
        .expect("bench operator deny");
    Policy::new(PolicySpec {
        allow,
        deny,
        operator_deny,
        ..PolicySpec::default()
    })
}

/// A mix of allowed, refused and malformed targets.
fn targets() -> Vec<String> {
    (0..1_000)
        .map(|i| match i % 8 {
            0 | 1 => format!("svc{}.team{}.example.com:443", i, i % 37),
            2 => format!("a.b.c.zone{}.example.net:443", (i / 10) * 10 + 7),
            3 => format!("nothing{i}.example.org:443"),
            4 => format!("svc{}.team{}.example.com:22", i, i % 37),
            5 => format!("23.{}.{}.9:443", i % 200, i % 5),
            6 => format!("8.8.{}.1:443", i % 256),
            _ => "0x7f000001:443".to_owned(),
        })
        .collect()
}

fn answer() -> [IpAddr; 2] {
    [
        "93.184.215.14".parse().expect("ip"),
        "2606:2800:21f:cb07:6820:80da:af6b:8b2c"
            .parse()
            .expect("ip"),
    ]
}

/// parse + decide + classify: what the proxy does per request, minus DNS.
fn indexed(policy: &Policy, text: &str, answer: &[IpAddr]) -> bool {
    let Ok(target) = Target::parse(text) else {
        return false;
    };
    match policy.decide(&target) {
        Decision::Allow => match target.host() {
            Host::Name(_) => policy.admit(&target, answer).is_ok(),
            Host::Ip(_) => true,
        },
        Decision::Deny(_) => false,
    }
}

/// The peer: the same verdicts by scanning every pattern.
fn scanned(policy: &Policy, text: &str, answer: &[IpAddr]) -> bool {
    let Ok(target) = Target::parse(text) else {
        return false;
    };
    let port = target.port();
    let hits = |patterns: &[Pattern]| {
        patterns.iter().any(|p| {
            let host = match (p.scope(), target.host()) {
                (Scope::Everything, _) => true,
                (Scope::Name(n), Host::Name(h)) => n == h,
                (Scope::Subdomains(s), Host::Name(h)) => is_under(h, s),
                (Scope::Ip(c), Host::Ip(ip)) => c.contains(*ip),
                _ => false,
            };
            host && p.ports().admits(port)
        })
    };
    if hits(policy.operator_deny()) || hits(policy.deny()) || !hits(policy.allow()) {
        return false;
    }
    match target.host() {
        Host::Name(_) => policy.admit(&target, answer).is_ok(),
        Host::Ip(ip) => policy.check_address(*ip, port).is_ok(),
    }
}

fn is_under(host: &HostName, suffix: &HostName) -> bool {
    host.as_str().len() > suffix.as_str().len() + 1
        && host.as_str().ends_with(suffix.as_str())
        && host.as_str().as_bytes()[host.as_str().len() - suffix.as_str().len() - 1] == b'.'
}

fn percentiles(name: &str, run: impl Fn(&str) -> bool, targets: &[String]) -> Duration {
    let mut samples = Vec::with_capacity(CALLS);
    for i in 0..CALLS {
        let text = &targets[i % targets.len()];
        let start = Instant::now();
        black_box(run(black_box(text)));
        samples.push(start.elapsed());
    }
    samples.sort_unstable();
    let at = |q: f64| samples[((samples.len() as f64 * q) as usize).min(samples.len() - 1)];
    println!(
        "{name}: {CALLS} decisions over {PATTERNS} patterns: p50 {:?}  p99 {:?}  p99.9 {:?}  max {:?}",
        at(0.50),
        at(0.99),
        at(0.999),
        samples[samples.len() - 1]
    );
    at(0.99)
}

fn main() {
    let policy = policy();
    let targets = targets();
    let answer = answer();
    for t in &targets {
        assert_eq!(
            indexed(&policy, t, &answer),
            scanned(&policy, t, &answer),
            "verdicts differ on `{t}`"
        );
    }
    let allowed = targets
        .iter()
        .filter(|t| indexed(&policy, t, &answer))
        .count();
    println!("{allowed} of {} bench targets are allowed", targets.len());
    let p99_indexed = percentiles("indexed", |t| indexed(&policy, t, &answer), &targets);
    let p99_scanned = percentiles("scan (peer)", |t| scanned(&policy, t, &answer), &targets);
    println!(
        "p99 ratio scan/indexed: {:.1}x",
        p99_scanned.as_secs_f64() / p99_indexed.as_secs_f64().max(1e-12)
    );

    let mut criterion = Criterion::default().configure_from_args();
    let mut group = criterion.benchmark_group("decide_1000_patterns");
    group.bench_function("indexed", |b| {
        let mut i = 0;
        b.iter(|| {
            i = (i + 1) % targets.len();
            indexed(&policy, black_box(&targets[i]), &answer)
        })
    });
    group.bench_function("scan_peer", |b| {
        let mut i = 0;
        b.iter(|| {
            i = (i + 1) % targets.len();
            scanned(&policy, black_box(&targets[i]), &answer)
        })
    });
    group.finish();
    criterion.final_summary();
}
