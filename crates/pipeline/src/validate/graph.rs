//! The route-graph rule: every cycle (explicit and implicit edges) must contain a `retry: true`
//! edge, or a run could loop without ever using up an attempt.

use crate::diagnostic::{FileSink, Position};

/// One route between steps, by index.
pub(crate) struct Edge {
    pub(crate) from: usize,
    pub(crate) to: usize,
    pub(crate) retry: bool,
    /// `on_pass` or `on_fail`.
    pub(crate) key: &'static str,
    /// Where the route is written (the step itself for an implicit route).
    pub(crate) at: Position,
}

/// Reports each strongly connected set of steps joined by non-retry edges, with one of its
/// cycles spelled out.
pub(crate) fn check_cycles(out: &mut FileSink<'_>, names: &[String], edges: &[Edge]) {
    let n = names.len();
    let mut forward: Vec<Vec<usize>> = vec![Vec::new(); n];
    let mut backward: Vec<Vec<usize>> = vec![Vec::new(); n];
    for (i, e) in edges.iter().enumerate() {
        if !e.retry && e.from < n && e.to < n {
            forward[e.from].push(i);
            backward[e.to].push(i);
        }
    }
    // Kosaraju, iteratively: finish order on the forward graph, then components on the reverse.
    let mut order = Vec::with_capacity(n);
    let mut seen = vec![false; n];
    for start in 0..n {
        if seen[start] {
            continue;
        }
        seen[start] = true;
        let mut stack = vec![(start, 0usize)];
        while let Some((node, next)) = stack.last_mut() {
            if let Some(&edge) = forward[*node].get(*next) {
                *next += 1;
                let to = edges[edge].to;
                if !seen[to] {
                    seen[to] = true;
                    stack.push((to, 0));
                }
            } else {
                order.push(*node);
                stack.pop();
            }
        }
    }
    let mut component = vec![usize::MAX; n];
    let mut components: Vec<Vec<usize>> = Vec::new();
    for &start in order.iter().rev() {
        if component[start] != usize::MAX {
            continue;
        }
        let id = components.len();
        let mut members = vec![start];
        component[start] = id;
        let mut stack = vec![start];
        while let Some(node) = stack.pop() {
            for &edge in &backward[node] {
                let from = edges[edge].from;
                if component[from] == usize::MAX {
                    component[from] = id;
                    members.push(from);
                    stack.push(from);
                }
            }
        }
        members.sort_unstable();
        components.push(members);
    }
    components.sort();
    for members in components {
        let start = members[0];
        let cyclic = members.len() > 1 || forward[start].iter().any(|&e| edges[e].to == start);
        if !cyclic {
            continue;
        }
        let Some(path) = shortest_cycle(start, &forward, edges, &component) else {
            continue;
        };
        let mut text = names[start].clone();
        for &edge in &path {
            text.push_str(" → ");
            text.push_str(&names[edges[edge].to]);
        }
        let Some(&closing) = path.last() else {
            continue;
        };
        let closing = &edges[closing];
        out.error(
            closing.at,
            format!(
                "steps `{text}` form a cycle without a `retry: true` route, so a run could loop \
                 forever; make `{}` of `{}` `{{goto: {}, retry: true}}`",
                closing.key, names[closing.from], names[closing.to]
            ),
        );
    }
}

/// Warns about steps no route leads to from the first step: they would never run.
pub(crate) fn check_reachable(
    out: &mut FileSink<'_>,
    names: &[String],
    at: &[Position],
    edges: &[Edge],
) {
    let n = names.len();
    let mut next: Vec<Vec<usize>> = vec![Vec::new(); n];
    for e in edges.iter().filter(|e| e.from < n && e.to < n) {
        next[e.from].push(e.to);
    }
    let mut reached = vec![false; n];
    let mut stack = Vec::new();
    if n > 0 {
        reached[0] = true;
        stack.push(0);
    }
    while let Some(node) = stack.pop() {
        for &to in &next[node] {
            if !reached[to] {
                reached[to] = true;
                stack.push(to);
            }
        }
    }
    for ((name, reached), position) in names.iter().zip(reached).zip(at) {
        if !reached {
            out.warning(
                *position,
                format!("step `{name}` never runs: no route from the first step leads to it; route to it or remove it"),
            );
        }
    }
}

/// The edges of a shortest cycle through `start` inside its component (breadth-first).
fn shortest_cycle(
    start: usize,
    forward: &[Vec<usize>],
    edges: &[Edge],
    component: &[usize],
) -> Option<Vec<usize>> {
    let mut via: Vec<Option<usize>> = vec![None; forward.len()];
    let mut queue = std::collections::VecDeque::from([start]);
    while let Some(node) = queue.pop_front() {
        for &edge in &forward[node] {
            let to = edges[edge].to;
            if component[to] != component[start] {
                continue;
            }
            if to == start {
                let mut path = vec![edge];
                let mut at = node;
                while at != start {
                    let back = via[at]?;
                    path.push(back);
                    at = edges[back].from;
                }
                path.reverse();
                return Some(path);
            }
            if via[to].is_none() {
                via[to] = Some(edge);
                queue.push_back(to);
            }
        }
    }
    None
}
