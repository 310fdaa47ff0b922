// cordon runs list: renders the embedded list, then refreshes it from /api/runs.
'use strict';
(function () {
  const app = document.getElementById('app');
  function el(tag, attrs, ...kids) {
    const node = document.createElement(tag);
    for (const [k, v] of Object.entries(attrs || {})) node.setAttribute(k, v);
    for (const kid of kids) node.append(kid);
    return node;
  }
  function render(runs) {
    const head = el('header', { class: 'top' }, el('h1', {}, 'cordon'), el('span', { class: 'meta' }, runs.length + ' runs'));
    const table = el('table', { id: 'runs' }, el('tr', {}, ...['run', 'pipeline', 'status', 'attempt', 'started', 'finished'].map((h) => el('th', {}, h))));
    for (const r of runs) {
      const link = el('a', { href: '/runs/' + r.id }, r.id);
      table.append(el('tr', { 'data-run': r.id, 'data-status': r.status },
        el('td', { class: 'mono' }, link), el('td', {}, r.pipeline),
        el('td', {}, el('span', { class: 'badge st-' + r.status }, r.status)),
        el('td', { class: 'num' }, String(r.attempt)), el('td', {}, r.started || ''), el('td', {}, r.finished || '')));
    }
    const panel = el('section', { class: 'panel' }, el('h2', {}, 'runs'), runs.length ? table : el('p', { class: 'empty' }, 'no runs yet; start one with cordon run'));
    app.replaceChildren(head, el('main', {}, panel));
  }
  render(JSON.parse(document.getElementById('snapshot').textContent));
  setInterval(() => {
    fetch('/api/runs', { credentials: 'same-origin' }).then((r) => (r.ok ? r.json() : null)).then((runs) => runs && render(runs)).catch(() => {});
  }, 3000);
})();
