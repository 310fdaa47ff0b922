// cordon run page. Renders the snapshot embedded in the page at once, then applies the run's
// events from the stream (/api/runs/<id>/stream). The fold mirrors crates/web/src/view.rs.
'use strict';
(function () {
  const snapshot = JSON.parse(document.getElementById('snapshot').textContent);
  const view = snapshot.view;
  const MAX_LINES = 400; // console.rs MAX_LINES
  const LOG_ROWS = 2000;
  const app = document.getElementById('app');

  function el(tag, attrs, ...kids) {
    const node = document.createElement(tag);
    for (const [k, v] of Object.entries(attrs || {})) if (v !== null && v !== undefined) node.setAttribute(k, v);
    for (const kid of kids) if (kid !== null && kid !== undefined) node.append(kid);
    return node;
  }
  function svg(tag, attrs) {
    const node = document.createElementNS('http://www.w3.org/2000/svg', tag);
    for (const [k, v] of Object.entries(attrs || {})) node.setAttribute(k, v);
    return node;
  }

  // ---- model ---------------------------------------------------------------------------------
  const steps = new Map(); // name -> step
  function newStep(name) {
    return { name, attempts: 0, attempt: null, open: false, verdict: null, reason: null, exit_code: null,
      started: null, finished: null, lines: [], partial: '', omitted: 0, resources: null, dirty: true };
  }
  function consoleFrom(step, text, omitted) {
    const parts = text.split('\n');
    step.partial = parts.pop();
    step.lines = parts;
    step.omitted = omitted;
  }
  for (const s of view.steps) {
    const step = Object.assign(newStep(s.name), {
      attempts: s.attempts, attempt: s.attempt, open: s.status === 'running' || (s.status === 'pending' && s.started && !s.finished),
      verdict: s.verdict, reason: s.reason, exit_code: s.exit_code, started: s.started, finished: s.finished,
      resources: s.resources || null });
    consoleFrom(step, s.console.text, s.console.omitted);
    steps.set(s.name, step);
  }
  const graph = view.graph;
  // An outcome run's tasks (`[data-task][data-task-state]`, Appendix B), in graph order.
  let tasks = (view.tasks || []).map((t) => Object.assign({}, t));
  let tasksDirty = true;
  const routes = view.routes.slice();
  const egress = new Map();
  for (const row of view.egress) egress.set(egressKey(row.step, row.decision, row.target, row.reason), row);
  function egressKey(step, decision, target, reason) { return JSON.stringify([step, decision, target, reason]); }
  function target(a) { return a.host && a.port ? (a.host.includes(':') ? '[' + a.host + ']:' + a.port : a.host + ':' + a.port) : a.raw_target; }

  function step(name) {
    if (!steps.has(name)) {
      steps.set(name, newStep(name));
      if (graph.derived && !graph.steps.some((s) => s.name === name)) graph.steps.push({ name, kind: null, on_pass: null, on_fail: null });
      layoutDirty = true;
    }
    return steps.get(name);
  }
  function statusOf(s) {
    if (s.open) return view.held ? 'running' : 'pending';
    if (s.verdict === 'pass') return 'passed';
    if (s.verdict === 'fail') return 'failed';
    if (s.verdict === 'unverifiable') return 'unverifiable';
    return 'pending';
  }
  // A finished attempt's verdict as a status word: `unverifiable` is its own, shown apart from
  // a pass and a fail.
  function verdictStatus(verdict) {
    if (verdict === 'pass') return 'passed';
    if (verdict === 'unverifiable') return 'unverifiable';
    return 'failed';
  }
  function runStatus() {
    if (view.outcome) return view.outcome;
    return view.held ? 'running' : 'interrupted';
  }
  function pushOutput(s, text) {
    const parts = (s.partial + text).split('\n');
    s.partial = parts.pop();
    for (const line of parts) s.lines.push(line);
    if (s.lines.length > MAX_LINES) {
      const drop = s.lines.length - MAX_LINES;
      s.lines.splice(0, drop);
      s.omitted += drop;
    }
  }

  let layoutDirty = true;
  let graphDirty = true;
  let egressDirty = true;
  const newLog = [];

  function apply(rec) {
    if (rec.seq <= view.last_seq) return;
    view.last_seq = rec.seq;
    const d = rec.data || {};
    switch (rec.type) {
      case 'run.started': view.workspace = d.workspace; view.attempt = d.attempt; view.max_attempts = d.max_attempts; view.started = rec.ts;
        view.kind = d.kind || 'steps'; view.goal = d.outcome || null; tasksDirty = true; break;
      case 'tasks.planned':
        if (rec.step === 'decompose') {
          tasks = (d.tasks || []).map((t) => ({ id: t.id, title: t.title, depends_on: t.depends_on || [], state: 'pending', revision: 0, replan: 0, reason: null }));
          tasksDirty = true;
        }
        break;
      case 'task.state': {
        const t = tasks.find((x) => x.id === d.task);
        if (t) Object.assign(t, { state: d.state, revision: d.revision, replan: d.replan, reason: d.reason || null });
        tasksDirty = true;
        break;
      }
      case 'run.resumed': view.attempt = d.attempt; view.max_attempts = d.max_attempts; view.outcome = null; view.reason = null; view.finished = null; break;
      case 'run.finished': view.outcome = d.outcome; view.reason = d.reason; view.finished = rec.ts; break;
      case 'llm.response': view.tokens_in += d.input_tokens || 0; view.tokens_out += d.output_tokens || 0; break;
      case 'attempt.retry': view.attempt = d.attempt; break;
      case 'step.started': {
        tasksDirty = true;
        const s = step(rec.step);
        Object.assign(s, { attempts: s.attempts + 1, attempt: d.attempt, open: true, verdict: null, reason: null, exit_code: null,
          started: rec.ts, finished: null, lines: [], partial: '', omitted: 0, resources: null, dirty: true });
        break;
      }
      case 'resources.sample': {
        if (!rec.step) break;
        const s = step(rec.step);
        s.resources = { memory_bytes: d.memory_bytes ?? null, disk_percent: d.disk_percent ?? null };
        s.dirty = true;
        break;
      }
      case 'step.output': { const s = step(rec.step); pushOutput(s, d.text || ''); s.dirty = true; break; }
      case 'step.finished': {
        tasksDirty = true;
        const s = step(rec.step);
        Object.assign(s, { open: false, verdict: d.verdict, reason: d.reason || null, exit_code: d.exit_code ?? null, finished: rec.ts, dirty: true });
        break;
      }
      case 'route': {
        const from = step(d.from);
        if (graph.derived) {
          const node = graph.steps.find((g) => g.name === d.from);
          if (!/^(success|failure)$/.test(d.to)) step(d.to);
          if (node) node[from.verdict === 'fail' ? 'on_fail' : 'on_pass'] = { to: d.to, retry: d.retry };
          layoutDirty = true;
        }
        const taken = routes.find((r) => r.from === d.from && r.to === d.to && r.retry === d.retry);
        if (taken) taken.count += 1; else routes.push({ from: d.from, to: d.to, retry: d.retry, count: 1 });
        break;
      }
      case 'egress.allow': case 'egress.deny': {
        const st = rec.step || d.step || null;
        const key = egressKey(st, d.decision, target(d), d.reason ?? null);
        const row = egress.get(key) || { step: st, decision: d.decision, target: target(d), reason: d.reason ?? null, count: 0, bytes_up: 0, bytes_down: 0 };
        row.count += 1;
        egress.set(key, row);
        egressDirty = true;
        break;
      }
      case 'egress.close': {
        const st = rec.step || d.step || null;
        for (const row of egress.values()) {
          if (row.step === st && row.target === target(d) && row.decision === 'allow') { row.bytes_up += d.bytes_up; row.bytes_down += d.bytes_down; break; }
        }
        egressDirty = true;
        break;
      }
      default: break;
    }
    graphDirty = true;
    newLog.push(rec);
  }

  // ---- ANSI colours ----------------------------------------------------------------------------
  const ESC = /\x1b\[([0-9;]*)([A-Za-z])|\x1b\][^\x07\x1b]*(?:\x07|\x1b\\)|\x1b[()][A-Za-z0-9]|\x1b./g;
  function xterm(n) {
    if (n < 16) return null;
    if (n >= 232) { const v = 8 + (n - 232) * 10; return `rgb(${v},${v},${v})`; }
    const i = n - 16, c = [Math.floor(i / 36), Math.floor(i / 6) % 6, i % 6].map((x) => (x ? 55 + x * 40 : 0));
    return `rgb(${c[0]},${c[1]},${c[2]})`;
  }
  function ansi(text, into) {
    let sgr = { bold: false, dim: false, italic: false, underline: false, fg: null, bg: null, fgRgb: null, bgRgb: null };
    let last = 0;
    const emit = (chunk) => {
      if (!chunk) return;
      const plain = !sgr.bold && !sgr.dim && !sgr.italic && !sgr.underline && sgr.fg === null && sgr.bg === null && !sgr.fgRgb && !sgr.bgRgb;
      if (plain) { into.append(chunk); return; }
      const span = document.createElement('span');
      const cls = [];
      if (sgr.bold) cls.push('ansi-bold'); if (sgr.dim) cls.push('ansi-dim'); if (sgr.italic) cls.push('ansi-italic'); if (sgr.underline) cls.push('ansi-underline');
      if (sgr.fg !== null) cls.push('ansi-fg-' + sgr.fg); if (sgr.bg !== null) cls.push('ansi-bg-' + sgr.bg);
      span.className = cls.join(' ');
      if (sgr.fgRgb) span.style.color = sgr.fgRgb;
      if (sgr.bgRgb) span.style.background = sgr.bgRgb;
      span.textContent = chunk;
      into.append(span);
    };
    text.replace(ESC, (match, params, cmd, offset) => {
      emit(text.slice(last, offset));
      last = offset + match.length;
      if (cmd !== 'm' || params === undefined) return '';
      const p = params === '' ? [0] : params.split(';').map((x) => parseInt(x || '0', 10));
      for (let i = 0; i < p.length; i++) {
        const c = p[i];
        if (c === 0) sgr = { bold: false, dim: false, italic: false, underline: false, fg: null, bg: null, fgRgb: null, bgRgb: null };
        else if (c === 1) sgr.bold = true; else if (c === 2) sgr.dim = true; else if (c === 3) sgr.italic = true; else if (c === 4) sgr.underline = true;
        else if (c === 22) { sgr.bold = false; sgr.dim = false; } else if (c === 23) sgr.italic = false; else if (c === 24) sgr.underline = false;
        else if (c >= 30 && c <= 37) { sgr.fg = c - 30; sgr.fgRgb = null; } else if (c >= 90 && c <= 97) { sgr.fg = c - 82; sgr.fgRgb = null; }
        else if (c >= 40 && c <= 47) { sgr.bg = c - 40; sgr.bgRgb = null; } else if (c >= 100 && c <= 107) { sgr.bg = (c - 100) % 8; sgr.bgRgb = null; }
        else if (c === 39) { sgr.fg = null; sgr.fgRgb = null; } else if (c === 49) { sgr.bg = null; sgr.bgRgb = null; }
        else if ((c === 38 || c === 48) && p[i + 1] === 5) {
          const n = p[i + 2] ?? 0; const rgb = xterm(n);
          if (c === 38) { sgr.fg = rgb ? null : n; sgr.fgRgb = rgb; } else { sgr.bg = rgb ? null : n % 8; sgr.bgRgb = rgb; }
          i += 2;
        } else if ((c === 38 || c === 48) && p[i + 1] === 2) {
          const rgb = `rgb(${p[i + 2] ?? 0},${p[i + 3] ?? 0},${p[i + 4] ?? 0})`;
          if (c === 38) { sgr.fg = null; sgr.fgRgb = rgb; } else { sgr.bg = null; sgr.bgRgb = rgb; }
          i += 4;
        }
      }
      return '';
    });
    emit(text.slice(last));
  }
  // A carriage return redraws its line: keep what was written last.
  function crlines(text) { return text.split('\n').map((l) => { const i = l.lastIndexOf('\r', l.length - 2); return i >= 0 ? l.slice(i + 1) : l; }).join('\n'); }

  // ---- rendering -------------------------------------------------------------------------------
  const statusBadge = el('span', { id: 'run-status', class: 'badge' });
  const attemptInfo = el('span', { class: 'meta' });
  // The run's model tokens (`[data-tokens]`, Appendix B): its text is the total.
  const tokensInfo = el('span', { class: 'meta', 'data-tokens': '' });
  // Its cost (`[data-cost]`), only when the pipeline has `llm.pricing` (US dollars per million).
  const pricing = graph && graph.pricing;
  const costInfo = pricing ? el('span', { class: 'meta', 'data-cost': '' }) : null;
  const banner = el('div', { class: 'banner', id: 'banner', hidden: '' });
  const header = el('header', { class: 'top' }, el('h1', {}, el('a', { href: '/' }, 'cordon'), ' / ', view.pipeline), statusBadge,
    el('span', { class: 'meta mono' }, view.id), attemptInfo, el('span', { class: 'meta' }, 'tokens ', tokensInfo),
    ...(costInfo ? [el('span', { class: 'meta' }, 'cost ', costInfo)] : []));
  const graphBox = el('div', { class: 'graph', id: 'graph' });
  // An outcome run shows its task graph instead of the step graph: its phases are the steps.
  const tasksBox = el('div', { class: 'tasks', id: 'tasks' });
  const goalBox = el('p', { class: 'goal' });
  const tasksPanel = el('section', { class: 'panel', id: 'tasks-panel' }, el('h2', {}, 'tasks'), goalBox, tasksBox);
  const graphPanel = el('section', { class: 'panel' }, el('h2', {}, 'pipeline'), graphBox);
  const outcome = el('div', { class: 'outcome', id: 'outcome' });
  const consoles = el('div', { class: 'consoles', id: 'consoles' });
  const egressBox = el('div', { id: 'egress' });
  // Every attempt (Appendix B): its console as it ended, its diff `[data-diff]`, its commit, and
  // an agent attempt's conversation `[data-transcript]` with one `[data-tool-call]` per call.
  const attemptsBox = el('div', { id: 'attempts' });
  const filter = el('select', { id: 'log-filter' }, el('option', { value: '' }, 'all types'));
  const logInfo = el('span', {});
  const logBody = el('tbody', {});
  const logTable = el('table', { class: 'log', id: 'log' }, el('thead', {}, el('tr', {}, ...['seq', 'time', 'type', 'step', 'data'].map((h) => el('th', {}, h)))), logBody);
  app.replaceChildren(header, banner, el('main', {},
    tasksPanel,
    graphPanel,
    el('section', { class: 'panel' }, el('h2', {}, 'outcome'), outcome),
    el('section', { class: 'panel' }, el('h2', {}, 'consoles'), consoles),
    el('section', { class: 'panel' }, el('h2', {}, 'attempts'), attemptsBox),
    el('section', { class: 'panel' }, el('h2', {}, 'egress'), egressBox),
    el('section', { class: 'panel' }, el('h2', {}, 'events'), el('div', { class: 'log-tools' }, el('label', {}, 'type ', filter), logInfo),
      el('div', { class: 'log-wrap' }, logTable))));

  function elapsed(s) {
    if (!s.started) return '';
    const start = Date.parse(s.started);
    const end = s.finished ? Date.parse(s.finished) : (s.open && view.held ? Date.now() : null);
    if (end === null) return '';
    const secs = Math.max(0, (end - start) / 1000);
    return secs < 60 ? secs.toFixed(1) + 's' : Math.floor(secs / 60) + 'm' + String(Math.floor(secs % 60)).padStart(2, '0') + 's';
  }

  const NODE_W = 150, NODE_H = 80, GAP = 64, TERM_W = 90, TERM_H = 40;
  let nodes = new Map();
  function renderGraph() {
    const order = graph.steps.map((g) => g.name);
    for (const name of steps.keys()) if (!order.includes(name)) order.push(name);
    const index = new Map(order.map((n, i) => [n, i]));
    index.set('success', order.length);
    index.set('failure', order.length + 1);
    const edges = [];
    for (const g of graph.steps) {
      if (g.on_pass) edges.push({ from: g.name, kind: 'pass', ...g.on_pass });
      if (g.on_fail) edges.push({ from: g.name, kind: 'fail', ...g.on_fail });
    }
    const span = (e) => Math.abs((index.get(e.to) ?? 0) - (index.get(e.from) ?? 0));
    const rise = (e) => 26 + 14 * span(e);
    const up = Math.max(40, ...edges.filter((e) => e.kind === 'pass' && span(e) !== 1).map(rise)) + 16;
    const down = Math.max(30, ...edges.filter((e) => e.kind === 'fail').map(rise)) + 16;
    const top = up, width = 20 + (order.length + 2) * (NODE_W + GAP), height = up + NODE_H + down;
    const x = (i) => 20 + i * (NODE_W + GAP);
    if (layoutDirty) {
      graphBox.replaceChildren();
      graphBox.style.height = height + 'px';
      nodes = new Map();
      const s = svg('svg', { width, height });
      s.append(Object.assign(svg('defs', {}), {}));
      s.firstChild.innerHTML = '<marker id="arrow" viewBox="0 0 10 10" refX="9" refY="5" markerWidth="7" markerHeight="7" orient="auto-start-reverse"><path d="M0,0 L10,5 L0,10 z" fill="#9aa3b2"/></marker>';
      graphBox.append(s);
      order.forEach((name, i) => {
        const node = el('div', { class: 'node', 'data-step': name },
          el('div', { class: 'name', title: name }, name),
          el('div', { class: 'row' }, el('span', { class: 'dot' }), el('span', { class: 'status' }), el('span', { class: 'attempts' })),
          el('div', { class: 'row' }, el('span', { class: 'verdict' }), el('span', { class: 'elapsed' })));
        node.style.left = x(i) + 'px'; node.style.top = top + 'px';
        graphBox.append(node);
        nodes.set(name, node);
      });
      for (const [name, i] of [['success', order.length], ['failure', order.length + 1]]) {
        const node = el('div', { class: 'node terminal', 'data-terminal': name }, name);
        node.style.left = x(i) + 'px'; node.style.top = (top + (NODE_H - TERM_H) / 2) + 'px';
        graphBox.append(node);
        nodes.set('@' + name, node);
      }
      layoutDirty = false;
    }
    const s = graphBox.querySelector('svg');
    s.querySelectorAll('path.edge, text').forEach((n) => n.remove());
    for (const e of edges) {
      const i = index.get(e.from), j = index.get(e.to);
      if (i === undefined || j === undefined) continue;
      const taken = routes.some((r) => r.from === e.from && r.to === e.to && r.retry === e.retry);
      const wTo = j >= order.length ? TERM_W : NODE_W;
      let d, lx, ly;
      if (e.kind === 'pass' && j === i + 1) {
        const y = top + NODE_H / 2;
        d = `M${x(i) + NODE_W},${y} L${x(j)},${y}`; lx = x(i) + NODE_W + GAP / 2; ly = y - 6;
      } else {
        const h = rise(e), above = e.kind === 'pass';
        const y0 = above ? top : top + NODE_H;
        const yj = j >= order.length ? (above ? top + (NODE_H - TERM_H) / 2 : top + (NODE_H + TERM_H) / 2) : y0;
        const cy = above ? y0 - h : y0 + h;
        const x0 = x(i) + NODE_W / 2 + (above ? 10 : -10), x1 = x(j) + wTo / 2 + (above ? -10 : 10);
        d = `M${x0},${y0} C${x0},${cy} ${x1},${cy} ${x1},${yj}`; lx = (x0 + x1) / 2; ly = above ? y0 - h * 0.75 - 3 : y0 + h * 0.75 + 11;
      }
      const cls = ['edge', e.kind, e.retry ? 'retry' : '', taken ? 'taken' : ''].filter(Boolean).join(' ');
      s.append(svg('path', { d, class: cls, 'marker-end': 'url(#arrow)', 'data-from': e.from, 'data-to': e.to, 'data-retry': String(e.retry) }));
      if (e.retry || e.kind === 'fail' && !/^failure$/.test(e.to)) {
        const t = svg('text', { x: lx, y: ly, 'text-anchor': 'middle', class: 'edge-label' });
        t.textContent = e.kind + (e.retry ? ' · retry' : '');
        s.append(t);
      }
    }
    for (const name of order) {
      const st = steps.get(name) || newStep(name);
      const node = nodes.get(name);
      const status = statusOf(st);
      node.dataset.status = status;
      node.dataset.attempts = String(st.attempts);
      node.querySelector('.status').textContent = status;
      node.querySelector('.attempts').textContent = st.attempts ? '· ' + st.attempts + (st.attempts === 1 ? ' start' : ' starts') : '';
      const v = node.querySelector('.verdict');
      v.className = 'verdict' + (st.verdict ? ' badge st-' + verdictStatus(st.verdict) : '');
      v.textContent = st.verdict && !st.open ? st.verdict : '';
      v.title = st.reason || '';
      node.querySelector('.elapsed').textContent = elapsed(st);
    }
    const end = runStatus();
    nodes.get('@success').classList.toggle('reached-success', end === 'success');
    nodes.get('@failure').classList.toggle('reached-failure', end === 'failure');
  }

  // The task graph: a column per depth (a task sits right of everything it depends on), the
  // `depends_on` edges drawn between them, each task expanding to its phases.
  const PHASES = ['plan', 'execute', 'scrutinize', 'verify', 'validate'];
  const taskNodes = new Map();
  const openTasks = new Set();
  function renderTasks() {
    tasksDirty = false;
    const outcomeRun = view.kind === 'outcome';
    tasksPanel.hidden = !outcomeRun;
    graphPanel.hidden = outcomeRun;
    if (!outcomeRun) return;
    goalBox.textContent = view.goal ? 'outcome: ' + view.goal : '';
    const depth = new Map();
    const byId = new Map(tasks.map((t) => [t.id, t]));
    function level(t, seen) {
      if (depth.has(t.id)) return depth.get(t.id);
      if (seen.has(t.id)) return 0;
      seen.add(t.id);
      let d = 0;
      for (const dep of t.depends_on || []) if (byId.has(dep)) d = Math.max(d, level(byId.get(dep), seen) + 1);
      depth.set(t.id, d);
      return d;
    }
    for (const t of tasks) level(t, new Set());
    for (const node of taskNodes.values()) if (node.open) openTasks.add(node.dataset.task); else openTasks.delete(node.dataset.task);
    tasksBox.replaceChildren();
    taskNodes.clear();
    const decompose = steps.get('decompose');
    if (decompose) tasksBox.append(el('div', { class: 'decompose' }, phaseRow(decompose, 'decompose')));
    if (!tasks.length) { tasksBox.append(el('p', { class: 'empty' }, 'no task graph yet')); return; }
    const columns = el('div', { class: 'task-columns' });
    const svgBox = svg('svg', { class: 'task-edges' });
    const grid = el('div', { class: 'task-grid' }, svgBox, columns);
    const max = Math.max(0, ...depth.values());
    for (let c = 0; c <= max; c++) {
      const column = el('div', { class: 'task-column' });
      for (const t of tasks.filter((x) => depth.get(x.id) === c)) {
        const phase = { planning: 'plan', executing: 'execute', scrutinizing: 'scrutinize', verifying: 'verify', validating: 'validate' }[t.state] || '-';
        const node = el('details', { class: 'task', 'data-task': t.id, 'data-task-state': t.state, 'data-depends-on': (t.depends_on || []).join(' ') },
          el('summary', {},
            el('span', { class: 'task-id mono' }, t.id), ' ', el('span', { class: 'task-title' }, t.title), ' ',
            el('span', { class: 'badge task-st-' + t.state }, t.state),
            el('div', { class: 'task-meta' }, 'phase ' + phase + ' · revision ' + t.revision + ' · replans ' + t.replan +
              ((t.depends_on || []).length ? ' · after ' + t.depends_on.join(', ') : ''))));
        if (t.reason) node.append(el('div', { class: 'task-reason' }, t.reason.split('\n')[0]));
        for (const p of PHASES) {
          const st = steps.get(t.id + '.' + p);
          if (st) node.append(phaseRow(st, p));
        }
        if (openTasks.has(t.id)) node.open = true;
        column.append(node);
        taskNodes.set(t.id, node);
      }
      columns.append(column);
    }
    tasksBox.append(grid);
    requestAnimationFrame(() => {
      const base = grid.getBoundingClientRect();
      svgBox.setAttribute('width', String(grid.scrollWidth));
      svgBox.setAttribute('height', String(grid.scrollHeight));
      for (const t of tasks) {
        const to = taskNodes.get(t.id);
        for (const dep of t.depends_on || []) {
          const from = taskNodes.get(dep);
          if (!from || !to) continue;
          const a = from.getBoundingClientRect(), b = to.getBoundingClientRect();
          const x0 = a.right - base.left, y0 = a.top - base.top + 18, x1 = b.left - base.left, y1 = b.top - base.top + 18;
          const mid = (x0 + x1) / 2;
          svgBox.append(svg('path', { d: `M${x0},${y0} C${mid},${y0} ${mid},${y1} ${x1},${y1}`, class: 'task-edge', 'data-from': dep, 'data-to': t.id }));
        }
      }
    });
  }
  // One phase attempt row of a task: the step's status, starts, time and reason; its console
  // and attempts are in the panels below.
  function phaseRow(st, label) {
    const status = statusOf(st);
    return el('div', { class: 'phase', 'data-step': st.name, 'data-status': status, 'data-attempts': String(st.attempts) },
      el('span', { class: 'phase-name' }, label), el('span', { class: 'badge st-' + status }, status),
      el('span', { class: 'meta' }, st.attempts + (st.attempts === 1 ? ' start' : ' starts') + (elapsed(st) ? ' · ' + elapsed(st) : '')),
      st.reason ? el('span', { class: 'phase-reason', title: st.reason }, st.reason.split('\n')[0]) : null);
  }

  function renderHeader() {
    const status = runStatus();
    statusBadge.textContent = status;
    statusBadge.className = 'badge st-' + status;
    statusBadge.dataset.status = status;
    document.body.dataset.status = status;
    attemptInfo.textContent = 'attempt ' + view.attempt + (view.max_attempts ? ' of ' + view.max_attempts : '') + (view.workspace ? ' · ' + view.workspace : '');
    const tokens = (view.tokens_in || 0) + (view.tokens_out || 0);
    tokensInfo.textContent = String(tokens);
    tokensInfo.title = (view.tokens_in || 0) + ' in, ' + (view.tokens_out || 0) + ' out (model tokens)';
    if (costInfo) {
      const cost = ((view.tokens_in || 0) * pricing.input + (view.tokens_out || 0) * pricing.output) / 1e6;
      costInfo.textContent = '$' + cost.toFixed(4);
      costInfo.title = 'at $' + pricing.input + ' in, $' + pricing.output + ' out per million tokens';
    }
    outcome.replaceChildren();
    if (view.outcome) {
      outcome.append(el('span', { class: 'badge st-' + view.outcome }, view.outcome), el('span', { class: 'reason' }, view.reason || ''));
    } else if (view.held) {
      const running = [...steps.values()].filter((s) => s.open).map((s) => s.name);
      outcome.append(el('span', { class: 'badge st-running' }, 'running'), el('span', { class: 'reason' }, running.length ? 'in ' + running.join(', ') : ''));
    } else {
      outcome.append(el('span', { class: 'badge st-interrupted' }, 'interrupted'),
        el('span', { class: 'reason' }, 'no process holds this run; continue it with ', el('code', {}, 'cordon run --resume ' + view.id)));
    }
  }

  const consoleNodes = new Map();
  function renderConsoles() {
    for (const s of steps.values()) {
      if (!s.dirty && consoleNodes.has(s.name)) continue;
      s.dirty = false;
      let box = consoleNodes.get(s.name);
      if (!box) {
        box = el('section', { class: 'console', 'data-console': s.name },
          el('h3', {}, el('span', { class: 'title' }), el('span', { class: 'badge' }),
            el('span', { class: 'gauge', hidden: '' }, el('span', { class: 'gauge-text' }), el('span', { class: 'gauge-bar' }, el('span', {})))),
          el('pre', {}));
        consoles.append(box);
        consoleNodes.set(s.name, box);
      }
      const status = statusOf(s);
      box.querySelector('.title').textContent = s.name + (s.attempt ? ' · attempt ' + s.attempt : '');
      const badge = box.querySelector('.badge');
      badge.textContent = status; badge.className = 'badge st-' + status;
      renderGauge(box.querySelector('.gauge'), status === 'running' ? s.resources : null);
      const pre = box.querySelector('pre');
      const stick = pre.scrollTop + pre.clientHeight >= pre.scrollHeight - 4;
      pre.replaceChildren();
      if (s.omitted) pre.append(el('span', { class: 'omitted' }, s.omitted + ' lines omitted\n'));
      const text = s.lines.length ? s.lines.join('\n') + '\n' + s.partial : s.partial;
      ansi(crlines(text), pre);
      if (stick) pre.scrollTop = pre.scrollHeight;
    }
  }

  // The running step's latest resources.sample: `mem 120 MiB · disk 42%`, with the raw values
  // in data-memory (bytes) and data-disk (percent); hidden when there is none.
  function mib(bytes) { return Math.round(bytes / 1048576) + ' MiB'; }
  function renderGauge(gauge, r) {
    const memory = r && r.memory_bytes !== null && r.memory_bytes !== undefined ? r.memory_bytes : null;
    const disk = r && r.disk_percent !== null && r.disk_percent !== undefined ? r.disk_percent : null;
    gauge.hidden = memory === null && disk === null;
    if (memory === null) delete gauge.dataset.memory; else gauge.dataset.memory = String(memory);
    if (disk === null) delete gauge.dataset.disk; else gauge.dataset.disk = String(disk);
    const parts = [];
    if (memory !== null) parts.push('mem ' + mib(memory));
    if (disk !== null) parts.push('disk ' + disk + '%');
    gauge.querySelector('.gauge-text').textContent = parts.join(' · ');
    const bar = gauge.querySelector('.gauge-bar');
    bar.hidden = disk === null;
    bar.firstChild.style.width = (disk ?? 0) + '%';
    gauge.classList.toggle('high', disk !== null && disk >= 85);
    gauge.title = 'latest sample: memory of the sandbox (with a memory cap) and the fuller of the workspace filesystem and the sandbox /tmp';
  }

  function renderEgress() {
    egressDirty = false;
    const rows = [...egress.values()];
    if (!rows.length) { egressBox.replaceChildren(el('p', { class: 'empty' }, 'no egress: no step reached for the network')); return; }
    rows.sort((a, b) => String(a.step).localeCompare(String(b.step)) || a.decision.localeCompare(b.decision) || a.target.localeCompare(b.target));
    const table = el('table', { id: 'egress-table' }, el('tr', {}, ...['step', 'decision', 'destination', 'reason', 'count', 'bytes up', 'bytes down'].map((h) => el('th', {}, h))));
    for (const r of rows) {
      table.append(el('tr', { 'data-decision': r.decision }, el('td', {}, r.step || '—'), el('td', { class: 'decision-' + r.decision }, r.decision),
        el('td', { class: 'mono' }, r.target), el('td', {}, r.reason || ''), el('td', { class: 'num' }, String(r.count)),
        el('td', { class: 'num' }, String(r.bytes_up)), el('td', { class: 'num' }, String(r.bytes_down))));
    }
    egressBox.replaceChildren(table);
  }

  const types = new Set();
  let logCount = 0;
  function matches(type) { const f = filter.value; return !f || type === f || type.startsWith(f + '.'); }
  function addLogRows(records) {
    const frag = document.createDocumentFragment();
    for (const rec of records) {
      if (!types.has(rec.type)) {
        types.add(rec.type);
        const family = rec.type.split('.')[0];
        if (family !== rec.type && !types.has(family)) { types.add(family); filter.append(el('option', { value: family }, family + '.*')); }
        filter.append(el('option', { value: rec.type }, rec.type));
      }
      const data = JSON.stringify(rec.data);
      const row = el('tr', { 'data-type': rec.type, 'data-seq': String(rec.seq) }, el('td', { class: 'num' }, String(rec.seq)),
        el('td', { class: 'mono' }, rec.ts.slice(11, 23)), el('td', { class: 'mono' }, rec.type), el('td', {}, rec.step || ''),
        el('td', { class: 'data' }, data.length > 240 ? data.slice(0, 240) + '…' : data));
      if (!matches(rec.type)) row.hidden = true;
      frag.append(row);
      logCount++;
    }
    logBody.append(frag);
    while (logBody.childElementCount > LOG_ROWS) logBody.firstElementChild.remove();
    const first = logBody.firstElementChild ? Number(logBody.firstElementChild.dataset.seq) : 1;
    logInfo.replaceChildren(first > 1 ? el('span', {}, 'events ' + first + '–' + view.last_seq + ' shown; all of them: ', el('a', { href: '/api/runs/' + view.id + '/events' }, 'JSON')) : el('span', {}, view.last_seq + ' events'));
  }
  filter.addEventListener('change', () => { for (const row of logBody.rows) row.hidden = !matches(row.dataset.type); });

  // ---- attempts ------------------------------------------------------------------------------
  let attempts = view.attempts || { list: [], omitted: 0 };
  let attemptsDirty = true;
  const opened = new Set(); // attempts whose details the user opened, kept across re-renders
  const diffs = new Map(); // blob -> text (or a promise while fetching)
  function attemptKey(a) { return a.step + '#' + a.n; }
  function renderAttempts() {
    attemptsDirty = false;
    if (!attempts.list.length) { attemptsBox.replaceChildren(el('p', { class: 'empty' }, 'no attempt yet')); return; }
    const nodes = [];
    if (attempts.omitted) nodes.push(el('p', { class: 'meta' }, attempts.omitted + ' earlier attempts not shown; all events: ', el('a', { href: '/api/runs/' + view.id + '/events' }, 'JSON')));
    for (const a of attempts.list.slice().reverse()) {
      const key = attemptKey(a);
      const verdict = a.finished ? verdictStatus(a.verdict) : (view.held ? 'running' : 'interrupted');
      const details = el('details', { class: 'attempt', 'data-attempt-of': a.step, 'data-attempt': String(a.n), 'data-status': verdict },
        el('summary', {}, el('span', { class: 'mono' }, a.step), ' · attempt ' + a.n + ' (run attempt ' + a.run_attempt + ') · ',
          el('span', { class: 'st-' + verdict }, verdict), a.reason ? ' · ' + a.reason.split('\n')[0] : ''));
      if (opened.has(key)) details.open = true;
      details.addEventListener('toggle', () => { if (details.open) { opened.add(key); loadDiff(details, a); } else opened.delete(key); });
      if (a.commit) {
        details.append(el('div', { class: 'commit', 'data-commit': a.commit.sha }, 'commit ', el('span', { class: 'mono' }, a.commit.sha.slice(0, 12)),
          ': ' + a.commit.files.join(', ') + (a.commit.files_omitted ? ' and ' + a.commit.files_omitted + ' more' : '')));
      }
      if (a.task || a.turns.length) details.append(transcript(a));
      const pre = el('pre', { class: 'console' }, a.console.omitted ? '… ' + a.console.omitted + ' earlier lines\n' : '');
      ansi(crlines(a.console.text || ''), pre);
      details.append(el('h3', {}, 'console'), pre);
      if (a.diff !== null && a.diff !== undefined) {
        details.append(el('h3', {}, 'diff'), el('pre', { class: 'diff', 'data-diff': a.step, 'data-attempt': String(a.n) }, 'open to load'));
        if (details.open) loadDiff(details, a);
      } else if (a.finished) {
        details.append(el('p', { class: 'meta', 'data-diff': a.step, 'data-attempt': String(a.n) }, 'no changes against HEAD after this attempt'));
      }
      nodes.push(details);
    }
    attemptsBox.replaceChildren(...nodes);
  }
  function transcript(a) {
    const box = el('div', { class: 'transcript', 'data-transcript': a.step, 'data-attempt': String(a.n) }, el('h3', {}, 'conversation'));
    if (a.task) box.append(el('div', { class: 'turn task' }, el('div', { class: 'who' }, 'task'), el('pre', {}, a.task)));
    a.turns.forEach((t, i) => {
      const turn = el('div', { class: 'turn' }, el('div', { class: 'who' }, 'model turn ' + (i + 1) + ' · ' + (t.tokens_in + t.tokens_out) + ' tokens' + (t.estimated ? ' (estimated)' : '')));
      if (t.text) turn.append(el('pre', {}, t.text));
      for (const c of t.calls) {
        turn.append(el('div', { class: 'call', 'data-tool-call': c.name },
          el('div', { class: 'mono' }, c.name + ' ' + c.arguments),
          el('pre', { class: c.ok === false ? 'result failed' : 'result' }, c.result === null ? (view.held ? '(running)' : '(no result)') : c.result)));
      }
      box.append(turn);
    });
    if (a.turns_omitted) box.append(el('p', { class: 'meta' }, a.turns_omitted + ' more turns not shown'));
    return box;
  }
  function loadDiff(details, a) {
    if (a.diff === null || a.diff === undefined) return;
    const pre = details.querySelector('pre[data-diff]');
    const known = diffs.get(a.diff);
    if (typeof known === 'string') { pre.textContent = known; return; }
    if (known) return;
    pre.textContent = 'loading…';
    diffs.set(a.diff, fetch('/api/runs/' + view.id + '/diffs/' + a.diff).then((r) => r.ok ? r.text() : 'the diff could not be loaded (' + r.status + ')')
      .then((text) => { diffs.set(a.diff, text); const now = attemptsBox.querySelector(`pre[data-diff="${CSS.escape(a.step)}"][data-attempt="${a.n}"]`); if (now) now.textContent = text; }));
  }
  // The server's fold is the one truth: after the events that change an attempt, the panel is
  // fetched again (at most every half second).
  let refetch = null;
  function attemptsChanged() {
    if (refetch) return;
    refetch = setTimeout(() => {
      fetch('/api/runs/' + view.id).then((r) => r.json()).then((v) => { attempts = v.attempts || attempts; attemptsDirty = true; schedule(); })
        .catch(() => {}).finally(() => { refetch = null; });
    }, 500);
  }

  function render() {
    renderHeader();
    if (attemptsDirty) renderAttempts();
    if (tasksDirty || (view.kind === 'outcome' && graphDirty)) renderTasks();
    if (view.kind !== 'outcome' && (graphDirty || layoutDirty)) { renderGraph(); graphDirty = false; }
    renderConsoles();
    if (egressDirty) renderEgress();
    if (newLog.length && !logFilling) addLogRows(newLog.splice(0));
  }
  let scheduled = false;
  function schedule() { if (!scheduled) { scheduled = true; requestAnimationFrame(() => { scheduled = false; render(); }); } }

  let logFilling = true;
  render();
  performance.mark('cordon-state-rendered');
  // The state above is complete at once; the log (up to a thousand rows) fills in right after,
  // in slices, so a long run's page does not wait for its table. Live events wait behind it.
  (function fillLog(rest) {
    addLogRows(rest.slice(0, 250));
    if (rest.length > 250) {
      setTimeout(() => fillLog(rest.slice(250)), 0);
    } else {
      logFilling = false;
      performance.mark('cordon-log-rendered');
      schedule();
    }
  })(snapshot.log);
  setInterval(() => { if (view.held && [...steps.values()].some((s) => s.open)) { graphDirty = true; schedule(); } }, 1000);

  // ---- live ------------------------------------------------------------------------------------
  let ended = false;
  const source = new EventSource('/api/runs/' + view.id + '/stream?after=' + view.last_seq);
  const ATTEMPT_EVENTS = new Set(['step.started', 'step.finished', 'tool.result', 'commit.created', 'llm.response']);
  source.onmessage = (e) => { const rec = JSON.parse(e.data); apply(rec); if (ATTEMPT_EVENTS.has(rec.type)) attemptsChanged(); schedule(); };
  source.addEventListener('status', (e) => {
    const st = JSON.parse(e.data);
    if (view.held !== st.held) { view.held = st.held; for (const s of steps.values()) s.dirty = true; graphDirty = true; schedule(); }
  });
  source.addEventListener('end', (e) => {
    ended = true;
    source.close();
    view.held = false;
    graphDirty = true;
    for (const s of steps.values()) s.dirty = true;
    schedule();
    if (JSON.parse(e.data).reason === 'closing') {
      banner.hidden = false;
      banner.replaceChildren('the cordon process that served this page has ended; browse this run with ', el('code', {}, 'cordon ui'), '.');
    }
  });
  source.onopen = () => { banner.hidden = true; };
  source.onerror = () => {
    if (ended) return;
    banner.hidden = false;
    banner.replaceChildren('lost the connection to cordon; if the process serving this page has exited (a ',
      el('code', {}, 'cordon run'), ' ends with its run), browse the run with ', el('code', {}, 'cordon ui'), '.');
  };
})();
