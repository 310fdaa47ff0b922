// End-to-end test of the run page in headless Chromium: `cordon ui` serves a state directory in
// which a driver process (crates/web/examples/drive_run.rs) writes a live run stage by stage;
// the page must follow it. Also measures a 5,000-event page load and 20 concurrent streams.
// Usage: node run-page.test.mjs (after building `cordon` and the `drive_run` example).
import { spawn } from 'node:child_process';
import { mkdtempSync as makeTemp, copyFileSync, mkdirSync, rmSync, writeFileSync } from 'node:fs';
import { execFileSync } from 'node:child_process';
import { tmpdir } from 'node:os';
import { join, resolve } from 'node:path';
import { createInterface } from 'node:readline';
import assert from 'node:assert/strict';
import { chromium } from 'playwright-core';

const root = resolve(import.meta.dirname, '../..');
const target = process.env.CARGO_TARGET_DIR || join(root, 'target');
const cordon = process.env.CORDON_BIN || join(target, 'debug/cordon');
const driver = join(target, 'debug/examples/drive_run');
const chrome = process.env.CHROMIUM || '/usr/bin/chromium';
const children = [];
const temps = [];
// Temporary directories, removed at the end.
function mkdtempSync(prefix) {
  const dir = makeTemp(prefix);
  temps.push(dir);
  return dir;
}
const state = mkdtempSync(join(tmpdir(), 'cordon-ui-state-'));

// A child whose stdout is read line by line; `next()` waits for the next line (bounded).
function start(cmd, args) {
  const child = spawn(cmd, args, { stdio: ['pipe', 'pipe', 'inherit'] });
  children.push(child);
  const lines = [];
  const waiters = [];
  createInterface({ input: child.stdout }).on('line', (line) => (waiters.length ? waiters.shift()(line) : lines.push(line)));
  child.next = () => (lines.length ? Promise.resolve(lines.shift()) : new Promise((ok, fail) => {
    const timer = setTimeout(() => fail(new Error(`${cmd} printed nothing for 30s`)), 30000);
    waiters.push((line) => { clearTimeout(timer); ok(line); });
  }));
  return child;
}
async function advance(drive, stage) {
  drive.stdin.write('next\n');
  assert.equal(await drive.next(), `stage ${stage}`);
}
const node = (page, step) => page.locator(`[data-step="${step}"]`);
async function expectNode(page, step, status, attempts) {
  await page.waitForSelector(`[data-step="${step}"][data-status="${status}"][data-attempts="${attempts}"]`, { timeout: 15000 });
}

let browser;
try {
  const drive = start(driver, [state, 'live']);
  const run = (await drive.next()).replace(/^run /, '');
  assert.equal(await drive.next(), 'stage 0');

  const ui = start(cordon, ['ui', '--addr', '127.0.0.1:0', '--state-dir', state]);
  const url = await ui.next();
  assert.match(url, /^http:\/\/127\.0\.0\.1:\d+\/\?token=[0-9a-f]{64}$/);
  const origin = new URL(url).origin;
  const token = new URL(url).searchParams.get('token');
  const port = new URL(url).port;

  const userData = mkdtempSync(join(tmpdir(), 'cordon-chromium-'));
  // The user data directory is passed the way Playwright requires (it becomes --user-data-dir).
  browser = await chromium.launchPersistentContext(userData, {
    executablePath: chrome,
    headless: true,
    viewport: { width: 1400, height: 1000 },
    args: ['--headless', '--no-sandbox', '--disable-gpu', '--disable-background-networking', '--disable-component-update',
      '--no-first-run', '--disable-sync'],
  });
  const page = await browser.newPage();
  const errors = [];
  page.on('pageerror', (e) => errors.push(String(e)));
  page.on('console', (m) => m.type() === 'error' && errors.push(m.text()));

  // Without the token: 401. With it: the runs list, and the cookie for what follows.
  assert.equal((await fetch(`${origin}/runs/${run}`)).status, 401);
  await page.goto(url);
  assert.equal(new URL(page.url()).search, '', 'the token left the address bar');
  await page.waitForSelector(`tr[data-run="${run}"][data-status="running"]`);

  // A real run: `cordon run` in another process, its steps in real sandboxes. `build` waits
  // for a file the test creates; `test` fails once, which retries `build`, then passes.
  const work = mkdtempSync(join(tmpdir(), 'cordon-ui-work-'));
  writeFileSync(join(work, 'pipeline.yaml'), [
    'name: fix-failing-tests',
    // Priced, though no step calls a model: the header shows the cost, $0.
    'llm: {provider: openai, model: m, pricing: {input: 3, output: 15}}',
    'max_attempts: 3',
    'steps:',
    '  - name: build',
    `    command: "printf '\\\\033[1mCompiling\\\\033[0m calc v0.1.0\\\\n'; while [ ! -f go ]; do sleep 0.05; done; printf '\\\\033[32m    Finished\\\\033[0m dev profile\\\\n'"`,
    '    timeout: 120',
    '  - name: test',
    `    command: "echo 'running 2 tests'; echo 'test adds ... ok'; if [ -f fixed ]; then printf 'test divides ... \\\\033[32mok\\\\033[0m\\\\n'; else printf 'test divides ... \\\\033[31mFAILED\\\\033[0m\\\\n'; touch fixed; exit 1; fi"`,
    '    on_fail: {goto: build, retry: true}',
    '  - name: review',
    '    command: echo LGTM',
    '',
  ].join('\n'));
  const git = (...args) => execFileSync('git', ['-C', work, '-c', 'user.name=t', '-c', 'user.email=t@example.test', ...args]);
  git('init', '-q');
  git('add', 'pipeline.yaml');
  git('commit', '-qm', 'pipeline');
  const real = spawn(cordon, ['run', join(work, 'pipeline.yaml'), '--state-dir', state], { stdio: ['ignore', 'ignore', 'pipe'], env: { ...process.env, NO_COLOR: '1' } });
  children.push(real);
  let realErr = '';
  const realId = await new Promise((ok, fail) => {
    const timer = setTimeout(() => fail(new Error('cordon run printed no run id: ' + realErr)), 60000);
    real.stderr.on('data', (d) => {
      realErr += d;
      const m = realErr.match(/^run ([0-9a-z]{26})$/m);
      if (m) { clearTimeout(timer); ok(m[1]); }
    });
    real.once('exit', (code) => fail(new Error(`cordon run exited ${code}: ${realErr}`)));
  });
  await page.goto(`${origin}/runs/${realId}`);
  await expectNode(page, 'build', 'running', 1);
  await expectNode(page, 'review', 'pending', 0);
  await page.locator('[data-console="build"] pre', { hasText: 'Compiling calc' }).waitFor();
  // The running step's console header shows its latest resource sample.
  const gauge = page.locator('[data-console="build"] .gauge[data-disk]');
  await gauge.waitFor();
  assert.match(await gauge.getAttribute('data-disk'), /^\d+$/);
  writeFileSync(join(work, 'go'), '');
  // (test fails once and build re-runs; those states are too brief to assert on)
  await expectNode(page, 'build', 'passed', 2);
  await expectNode(page, 'test', 'passed', 2);
  await expectNode(page, 'review', 'passed', 1);
  await page.waitForSelector('#run-status[data-status="success"]');
  assert.equal(await page.locator('path.edge.retry.taken[data-from="test"][data-to="build"]').count(), 1);
  assert.match(await page.locator('[data-console="test"] pre').innerText(), /test divides \.\.\. ok/);
  assert.equal(await new Promise((ok) => (real.exitCode !== null ? ok(real.exitCode) : real.once('exit', ok))), 0);
  // What the page's own fold of the live events shows equals the server's fold on a reload.
  const nodes = () => page.locator('[data-step]').evaluateAll((all) => all.map((n) => [n.dataset.step, n.dataset.status, n.dataset.attempts]));
  const consoles = () => page.locator('[data-console] pre').allInnerTexts();
  const tokens = () => page.locator('[data-tokens]').innerText();
  const live = [await nodes(), await consoles(), await tokens()];
  await page.reload();
  await page.waitForSelector('#run-status[data-status="success"]');
  assert.deepEqual([await nodes(), await consoles(), await tokens()], live);
  assert.equal(live[2], '0', 'a run of commands used no model tokens');
  assert.equal(await page.locator('[data-cost]').innerText(), '$0.0000', 'a priced run shows its cost');
  // Earlier attempts stay reachable: the first `test` attempt's console and recorded diff (it
  // created `fixed`), loaded when its details open.
  const firstTest = page.locator('details[data-attempt-of="test"][data-attempt="1"]');
  await firstTest.locator('summary').click();
  assert.match(await firstTest.locator('pre.console').innerText(), /test divides \.\.\. FAILED/);
  await firstTest.locator('pre[data-diff="test"][data-attempt="1"]', { hasText: 'fixed' }).waitFor();
  assert.match(await firstTest.locator('pre[data-diff="test"][data-attempt="1"]').innerText(), /diff --git a\/fixed b\/fixed/);
  assert.equal(await page.locator('[data-attempt-of="review"]').count(), 1);
  assert.deepEqual(live[0], [['build', 'passed', '2'], ['test', 'passed', '2'], ['review', 'passed', '1']]);
  await page.waitForTimeout(300); // the picture only: let the last frame paint
  mkdirSync(join(target, 'browser'), { recursive: true });
  const shot = join(target, 'browser/ui-run.png');
  await page.screenshot({ path: shot, fullPage: true });
  if (process.env.UPDATE_DOCS_SCREENSHOT) copyFileSync(shot, join(root, 'docs/ui-run.png'));

  // An outcome run (the offline example, replayed in real sandboxes): the page shows its task
  // graph instead of the step graph, each task expanding to its phase steps.
  const outcomeWork = mkdtempSync(join(tmpdir(), 'cordon-ui-outcome-'));
  execFileSync('sh', ['-c', `tar -C "${join(root, 'examples/outcome-report-json')}" --exclude=./run.sh -cf - . | tar -C "${outcomeWork}" -xf -`]);
  const ogit = (...args) => execFileSync('git', ['-C', outcomeWork, '-c', 'user.name=t', '-c', 'user.email=t@example.test', ...args]);
  ogit('init', '-q');
  ogit('add', '-A');
  ogit('commit', '-qm', 'before');
  const done = execFileSync(cordon, ['do', 'Add a --json option to report.py that prints the counts as JSON, and document it.',
    '--no-ui', '--state-dir', state], { cwd: outcomeWork, env: { ...process.env, NO_COLOR: '1' }, stdio: ['ignore', 'ignore', 'pipe'] });
  const outcomeRun = String(done).match(/^run ([0-9a-z]{26})$/m) ? String(done).match(/^run ([0-9a-z]{26})$/m)[1] : null;
  const outcomeId = outcomeRun || JSON.parse(execFileSync(cordon, ['runs', '--json', '--state-dir', state]).toString().trim().split('\n').pop()).id;
  await page.goto(`${origin}/runs/${outcomeId}`);
  await page.waitForSelector('#run-status[data-status="success"]');
  await page.waitForSelector('[data-task="t1"][data-task-state="done"]');
  await page.waitForSelector('[data-task="t2"][data-task-state="done"]');
  assert.equal(await page.locator('#graph').isVisible(), false, 'an outcome run shows tasks, not the step graph');
  assert.equal(await page.locator('[data-task="t2"]').getAttribute('data-depends-on'), 't1');
  await page.locator('path.task-edge[data-from="t1"][data-to="t2"]').waitFor({ state: 'attached' });
  await page.locator('[data-task="t1"] > summary').click();
  await page.waitForSelector('[data-task="t1"] [data-step="t1.verify"][data-status="passed"][data-attempts="2"]');
  assert.equal(await page.locator('[data-task="t1"] [data-step="t1.execute"]').getAttribute('data-attempts'), '2');
  assert.match(await page.locator('[data-task="t1"] .task-meta').innerText(), /revision 1 · replans 0/);
  await page.locator('[data-step="decompose"][data-status="passed"]').waitFor();
  // The server's fold and the page's agree on the tasks after a reload.
  const taskStates = () => page.locator('[data-task]').evaluateAll((all) => all.map((n) => [n.dataset.task, n.dataset.taskState]));
  const shown = await taskStates();
  assert.deepEqual(shown, [['t1', 'done'], ['t2', 'done']]);
  await page.reload();
  await page.waitForSelector('[data-task="t2"][data-task-state="done"]');
  assert.deepEqual(await taskStates(), shown);
  await page.locator('[data-task="t1"] > summary').click();
  await page.waitForTimeout(300);
  const outcomeShot = join(target, 'browser/ui-outcome.png');
  await page.locator('#tasks-panel').screenshot({ path: outcomeShot });
  if (process.env.UPDATE_DOCS_SCREENSHOT) copyFileSync(outcomeShot, join(root, 'docs/ui-outcome.png'));

  // A driven run (crates/web/examples/drive_run.rs) for what a command step does not produce
  // here: egress decisions.
  // The run page holds the current state at load: build running, test not yet started.
  await page.goto(`${origin}/runs/${run}`);
  await expectNode(page, 'build', 'running', 1);
  assert.match(await page.locator('[data-console="build"] pre').innerText(), /Compiling calc/);
  assert.equal(await page.locator('[data-console="build"] pre span.ansi-bold').first().innerText(), 'Compiling');

  await advance(drive, 1);
  await expectNode(page, 'build', 'passed', 1);
  await expectNode(page, 'test', 'running', 1);
  await page.locator('[data-console="test"] pre', { hasText: 'FAILED' }).waitFor();
  assert.equal(await page.locator('[data-console="test"] pre span.ansi-fg-1').first().innerText(), 'FAILED');

  await advance(drive, 2);
  await expectNode(page, 'test', 'failed', 1);
  await expectNode(page, 'build', 'running', 2);
  assert.equal(await node(page, 'test').locator('.verdict').innerText(), 'fail');

  await advance(drive, 3);
  await expectNode(page, 'build', 'passed', 2);
  await expectNode(page, 'test', 'passed', 2);
  await page.waitForSelector('#run-status[data-status="success"]');
  assert.match(await page.locator('#outcome').innerText(), /success\s*test passed/);
  // The header's tokens follow the live `llm.response` (the test step's lane call), and the
  // server's fold agrees after a reload.
  assert.equal(await page.locator('[data-tokens]').innerText(), '150');
  assert.equal(await page.locator('[data-cost]').count(), 0, 'no cost without pricing');
  // The agent-like attempt's conversation: the task, the turn's text and its one tool call.
  const talk = page.locator('[data-transcript="test"][data-attempt="2"]');
  await talk.waitFor({ state: 'attached' });
  assert.match(await talk.textContent(), /Make the tests pass\.[\s\S]*Running the tests once more\./);
  assert.equal(await talk.locator('[data-tool-call="bash"]').count(), 1);
  assert.match(await talk.locator('[data-tool-call="bash"]').textContent(), /pytest -q[\s\S]*3 passed/);
  await page.reload();
  await page.waitForSelector('#run-status[data-status="success"]');
  assert.equal(await page.locator('[data-tokens]').innerText(), '150');
  // Graph edges: the taken retry back-edge is drawn dashed.
  assert.equal(await page.locator('path.edge.retry.taken[data-from="test"][data-to="build"]').count(), 1);
  // Egress table: the allowed and the denied destination with its reason.
  assert.match(await page.locator('#egress-table tr[data-decision="deny"]').innerText(), /tracker\.example\.test:443\s+not_allowed/);
  assert.equal(await page.locator('#egress-table tr[data-decision="allow"]').count(), 1);
  // Event log filter.
  await page.selectOption('#log-filter', 'step.finished');
  const visible = await page.locator('#log tbody tr:not([hidden])').evaluateAll((rows) => rows.map((r) => r.dataset.type));
  assert.deepEqual(visible, ['step.finished', 'step.finished', 'step.finished', 'step.finished']);
  await page.selectOption('#log-filter', '');
  await page.screenshot({ path: join(target, 'browser/ui-driven.png'), fullPage: true });

  // A run nobody holds: the unfinished step is pending and the run interrupted.
  const stopped = start(driver, [state, 'live']);
  const stoppedRun = (await stopped.next()).replace(/^run /, '');
  assert.equal(await stopped.next(), 'stage 0');
  stopped.kill('SIGKILL');
  await new Promise((ok) => stopped.once('exit', ok));
  await page.goto(`${origin}/runs/${stoppedRun}`);
  await expectNode(page, 'build', 'pending', 1);
  await page.waitForSelector('#run-status[data-status="interrupted"]');

  // Measure: a 5,000-event run, from navigation start to the page fully rendered.
  const big = start(driver, [state, 'big', '5000']);
  const bigRun = (await big.next()).replace(/^run /, '');
  await new Promise((ok) => big.once('exit', ok));
  const loads = [];
  const logs = [];
  for (let i = 0; i < 5; i++) {
    await page.goto(`${origin}/runs/${bigRun}`);
    await expectNode(page, 'test', 'passed', 1);
    await page.locator('#log tbody tr').nth(999).waitFor({ state: 'attached' });
    // Marks the page sets: the run's state rendered, then its event log filled in.
    const [state, log] = await page.evaluate(() => ['cordon-state-rendered', 'cordon-log-rendered'].map((m) => performance.getEntriesByName(m)[0]?.startTime ?? NaN));
    loads.push(state);
    logs.push(log);
  }
  logs.sort((a, b) => a - b);
  const consoleText = await page.locator('[data-console="test"]').innerText();
  assert.match(consoleText, /4596 lines omitted/);
  loads.sort((a, b) => a - b);
  console.log(`measure: 5000-event run page: state rendered ${loads[2].toFixed(0)} ms after navigation start (median of 5; min ${loads[0].toFixed(0)}, max ${loads[4].toFixed(0)}), event log of 1000 rows filled at ${logs[2].toFixed(0)} ms`);

  // Measure: an agent attempt of 200 tool calls with a 5,000-line diff, opened on the page: from
  // the click to every call and the whole diff rendered.
  const talk200 = start(driver, [state, 'transcript']);
  const talkRun = (await talk200.next()).replace(/^run /, '');
  await new Promise((ok) => talk200.once('exit', ok));
  const opens = [];
  for (let i = 0; i < 5; i++) {
    await page.goto(`${origin}/runs/${talkRun}`);
    await page.waitForSelector('#run-status[data-status="success"]');
    const entry = page.locator('details[data-attempt-of="dev"][data-attempt="1"]');
    const t = await page.evaluate(() => performance.now());
    await entry.locator('summary').click();
    await entry.locator('pre[data-diff="dev"][data-attempt="1"]', { hasText: 'new line 2499' }).waitFor();
    assert.equal(await entry.locator('[data-transcript="dev"] [data-tool-call="bash"]').count(), 200);
    opens.push(await page.evaluate((t0) => performance.now() - t0, t));
  }
  opens.sort((a, b) => a - b);
  // The commit action's attempt shows its SHA and the files it committed.
  assert.match(await page.locator('details[data-attempt-of="commit"] [data-commit="0123456789abcdef0123456789abcdef01234567"]').textContent(), /0123456789ab: big\.txt/);
  console.log(`measure: a 200-call agent attempt with a 5,000-line diff: opened and rendered in ${opens[2].toFixed(0)} ms (median of 5; min ${opens[0].toFixed(0)}, max ${opens[4].toFixed(0)})`);
  await page.locator('details[data-attempt-of="dev"] [data-tool-call="bash"]').first().scrollIntoViewIfNeeded();
  const attemptsShot = join(target, 'browser/ui-attempts.png');
  await page.locator('#attempts').screenshot({ path: attemptsShot });
  if (process.env.UPDATE_DOCS_SCREENSHOT) copyFileSync(attemptsShot, join(root, 'docs/ui-attempts.png'));

  // Measure: 20 concurrent SSE clients each receive the whole 5,000-event stream and its end.
  const t0 = performance.now();
  const counts = await Promise.all(Array.from({ length: 20 }, async () => {
    const response = await fetch(`${origin}/api/runs/${bigRun}/stream`, { headers: { cookie: `cordon_token_${port}=${token}` } });
    assert.equal(response.status, 200);
    const text = await response.text();
    assert.match(text, /event: end/);
    return (text.match(/^id: /gm) || []).length;
  }));
  const ms = performance.now() - t0;
  assert.deepEqual(counts, Array(20).fill(5000));
  console.log(`measure: 20 concurrent SSE clients received 5000 events each (100,000 total) in ${ms.toFixed(0)} ms`);

  assert.deepEqual(errors, [], 'no script errors on the page');
  console.log(`ok: run page followed run ${run} from running to passed; screenshot ${shot}`);
} finally {
  if (browser) await browser.close();
  for (const child of children) if (child.exitCode === null) child.kill('SIGTERM');
  await Promise.all(children.map((child) => (child.exitCode !== null || child.signalCode ? null : new Promise((ok) => child.once('exit', ok)))));
  for (const dir of temps) rmSync(dir, { recursive: true, force: true });
}
