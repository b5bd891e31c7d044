/**
 * What `migrate` says while it runs and when interrupted (issue #36 items 1, 2, 6): rates
 * and ETAs, the progress lines on and off a terminal, the end line per CRD, the words of a
 * summary against last-counts, the next step after a cleanup that leaves entries, and what
 * each Ctrl-C says and does.
 */
import { PassThrough } from 'node:stream'
import t from 'tap'
import { formatResult } from '../../src/cli/run-migrate.js'
import { exitCodeFor, Interrupt, interruptMessage, resumeHint } from '../../src/cli/interrupt.js'
import { LiveView } from '../../src/cli/progress-live.js'
import { PlainView, QuietView } from '../../src/cli/progress.js'
import { CrdProgress, etaSeconds, finishLine, liveLine, plainLine } from '../../src/cli/progress-text.js'
import { InterruptedError, interruption } from '../../src/errors.js'
import type { MigrationResult } from '../../src/migrator/context.js'
import type { WalkCounts, WalkProgress } from '../../src/migrator/engine/walker.js'
import { countsText, summarize } from '../../src/migrator/report.js'

const counts = (c: Partial<WalkCounts>): WalkCounts => ({
  seen: 0,
  rewritten: 0,
  current: 0,
  skipped: 0,
  gone: 0,
  conflict: 0,
  failed: 0,
  resumed: 0,
  ...c,
})
const walk = (done: number, total: number | undefined, seen = done): WalkProgress => ({
  counts: counts({ seen, rewritten: done }),
  total,
  checkpoint: undefined,
  inFlight: 0,
})
const KEY = 'ksvm.sigs.k8s.io/migrating'

const base: MigrationResult = {
  crd: 'widgets.example.com',
  outcome: 'Succeeded',
  reason: '',
  storageVersion: 'v2',
  crdUid: 'c0ffee',
  generation: 2,
  storedVersionsBefore: ['v1', 'v2'],
  storedVersionsAfter: ['v2'],
  durationMs: 22_100,
  leftFrozen: false,
}

t.test('the summary, its detail line and last-counts use the same words for the same numbers', async (t) => {
  const rows: Array<[Partial<WalkCounts>, string, string]> = [
    [
      { seen: 4000, rewritten: 2234, current: 1766 },
      '2234 of 4000 object(s) rewritten in v2, 1766 already current, storedVersions ["v2"]',
      'rewritten=2234 alreadyCurrent=1766 gone=0 failed=0',
    ],
    [
      { seen: 10, rewritten: 5, current: 1, conflict: 2, gone: 1, resumed: 1 },
      '5 of 10 object(s) rewritten in v2, 1 already current, 2 written by others meanwhile, 1 deleted meanwhile, 1 done by an earlier run, storedVersions ["v2"]',
      'rewritten=5 alreadyCurrent=1 writtenByOthers=2 gone=1 failed=0 resumed=1',
    ],
  ]
  for (const [c, reason, annotation] of rows) {
    const result = { ...base, storage: { counts: counts(c), failures: [], checkpoint: undefined } }
    t.equal(summarize(result), reason)
    t.equal(countsText(result), annotation)
    t.match(
      formatResult({ ...result, reason: summarize(result) }),
      `${c.seen} listed, ${c.rewritten} rewritten, ${c.current} already current`,
    )
  }
})

t.test('a cleanup that leaves entries of a still-served version says the next step, in one line', async (t) => {
  const cleanup = { counts: counts({ seen: 4000, skipped: 4000 }), failures: [], checkpoint: undefined, entriesRemoved: 0 }
  const text = formatResult({ ...base, cleanup: { ...cleanup, servedEntriesKept: { v1: { entries: 4001, objects: 4000 } } } })
  t.match(
    text,
    '\n  next: 4000 objects keep 4001 managedFields entries of v1, which is still served (left by design; check --drop v1 counts them): to drop v1, set served: false on it, then run migrate again\n',
  )
  t.notMatch(formatResult({ ...base, cleanup }), /next:/, 'nothing left: no next step')
})

t.test('rate over a sliding window, and the ETA from it', async (t) => {
  const p = new CrdProgress('w', 0)
  p.update('StorageVersionMigration', walk(0, 4000), 0)
  t.equal(p.rate(500), undefined, 'no rate before a second has passed')
  p.update('StorageVersionMigration', walk(100, 4000), 1000)
  t.equal(p.rate(1000), 100)
  t.equal(etaSeconds(p.current, p.rate(1000)), 39, '3900 left at 100/s')
  // Faster later: the window forgets the slow start.
  for (let s = 2; s <= 30; s++) p.update('StorageVersionMigration', walk(100 + (s - 1) * 50, 4000), s * 1000)
  t.equal(p.rate(30_000), 50, 'the last ten seconds only')
  // A new phase starts its own count and rate.
  p.update('CleanupManagedFields', walk(10, 4000), 31_000)
  t.equal(p.rate(31_000), undefined)
  t.same(
    p.phases.map((c) => [c.phase, c.done, c.total]),
    [
      ['StorageVersionMigration', 1550, 4000],
      ['CleanupManagedFields', 10, 4000],
    ],
  )
  t.equal(etaSeconds(undefined, 10), undefined)
  t.equal(etaSeconds(p.current, 0), undefined, 'no ETA at a standstill')
  // The best known total: never below what was seen.
  const q = new CrdProgress('w', 0)
  q.update('StorageVersionMigration', walk(50, undefined, 120), 0)
  t.equal(q.current?.total, 120)
})

t.test('the progress lines', async (t) => {
  const p = new CrdProgress('widgets.example.com', 0)
  t.equal(plainLine(p, 12_000), 'widgets.example.com: preparing (freeze, storage switch, checks), 12s in')
  t.equal(liveLine(p, 12_000), '12s  widgets.example.com  preparing (freeze, storage switch, checks)')
  p.update('StorageVersionMigration', walk(0, 4000), 0)
  p.update('StorageVersionMigration', walk(1744, 4000), 10_000)
  t.equal(plainLine(p, 10_000), 'widgets.example.com: StorageVersionMigration 1744/4000 (43%), 174 objects/s, ETA 13s')
  t.equal(liveLine(p, 10_000), '1744/4000  43%  174/s  ETA 13s  widgets.example.com  StorageVersionMigration  [#########-----------]')
  // 80 columns: the numbers stay, the bar goes first.
  t.equal(liveLine(p, 10_000, 80), '1744/4000  43%  174/s  ETA 13s  widgets.example.com  StorageVersionMigration')
  const long = new CrdProgress('machinedeployments.cluster.x-k8s.io', 0)
  long.update('StorageVersionMigration', walk(0, 3000), 0)
  long.update('StorageVersionMigration', walk(1247, 3000), 10_000)
  t.equal(liveLine(long, 10_000, 80), '1247/3000  41%  125/s  ETA 15s  machinedeployments.cluster.x-k8s.io  rewrite', 'then the short phase name')
  const narrow = liveLine(p, 10_000, 40)
  t.equal(narrow.length, 39, 'never as wide as the terminal: it would wrap')
  t.ok(narrow.startsWith('1744/4000  43%  174/s  ETA 13s  rewrit') && narrow.endsWith('…'), 'the numbers before anything is cut')
  t.equal(liveLine(p, 0, 10).length, 9)
  const slow = new CrdProgress('w', 0)
  slow.update('StorageVersionMigration', walk(0, 10), 0)
  slow.update('StorageVersionMigration', walk(3, 10), 2000)
  t.equal(plainLine(slow, 2000), 'w: StorageVersionMigration 3/10 (30%), 1.5 objects/s, ETA 5s')
})

t.test('the end line of each CRD', async (t) => {
  const p = new CrdProgress('w', 0)
  p.update('StorageVersionMigration', walk(4000, 4000), 0)
  p.update('CleanupManagedFields', walk(4000, 4000), 1)
  const stopped = new CrdProgress('w', 0)
  stopped.update('StorageVersionMigration', walk(1744, 4000), 0)
  const rows: Array<[Parameters<typeof finishLine>[1], CrdProgress | undefined, string]> = [
    [base, p, 'w: Succeeded in 22s: StorageVersionMigration 4000/4000 objects, CleanupManagedFields 4000/4000 objects checked; freeze lifted'],
    [
      { ...base, outcome: 'Failed', errorCode: 'CRDM_ABORTED' },
      stopped,
      'w: stopped in StorageVersionMigration at 1744 of 4000 objects after 22s; freeze lifted',
    ],
    [
      { ...base, outcome: 'Failed', errorCode: 'CRDM_ABORTED' },
      undefined,
      'w: stopped before any object was written after 22s; freeze lifted',
    ],
    [
      { ...base, outcome: 'Failed', errorCode: 'CRDM_ABORTED', leftFrozen: true },
      stopped,
      `w: stopped in StorageVersionMigration at 1744 of 4000 objects after 22s; the freeze could NOT be lifted: kubectl annotate crd w ${KEY}-`,
    ],
    [
      { ...base, outcome: 'Failed', errorCode: 'CRDM_OBJECTS_FAILED' },
      stopped,
      'w: Failed (CRDM_OBJECTS_FAILED) in 22s: StorageVersionMigration 1744/4000 objects; freeze lifted',
    ],
    [
      { ...base, outcome: 'Failed', errorCode: 'CRDM_FREEZE_TAKEN_OVER' },
      stopped,
      'w: Failed (CRDM_FREEZE_TAKEN_OVER) in 22s: StorageVersionMigration 1744/4000 objects; freeze left to the instance that took it over',
    ],
    [
      { ...base, outcome: 'Blocked', errorCode: 'CRDM_CONVERSION_OUTAGE' },
      undefined,
      'w: Blocked (CRDM_CONVERSION_OUTAGE) in 22s; nothing frozen',
    ],
    [{ ...base, outcome: 'Skipped', skipReason: 'up-to-date' }, undefined, 'w: Skipped (up-to-date)'],
    [{ error: 'failed (CRDM_KUBE_API)' }, undefined, 'w: failed (CRDM_KUBE_API)'],
  ]
  for (const [end, progress, line] of rows) t.equal(finishLine('w', end, progress, KEY), line)
})

/** A stream that keeps each write. */
function writes() {
  const list: string[] = []
  const stream = new PassThrough()
  stream.on('data', (d: Buffer) => list.push(d.toString()))
  return { stream, list, text: () => list.join('') }
}

t.test('off a terminal: a line at its first progress and at its end, one write per period for all CRDs in flight', async (t) => {
  const out = writes()
  let now = 0
  const view = new PlainView(out.stream, 60_000, () => now)
  t.teardown(() => view.close())
  view.start('a')
  view.start('b')
  view.start('nothere')
  view.finish('nothere', 'nothere: failed (CRDM_RESOURCE_NOT_FOUND)', false)
  view.update('a', 'StorageVersionMigration', walk(10, 100))
  now = 2000
  view.update('a', 'StorageVersionMigration', walk(30, 100))
  view.tick()
  view.finish('a', 'a: Succeeded in 3s', false)
  view.tick()
  await new Promise((resolve) => setImmediate(resolve))
  t.same(out.list, [
    'nothere: failed (CRDM_RESOURCE_NOT_FOUND)\n',
    'a: started\n',
    'a: StorageVersionMigration 30/100 (30%), 10 objects/s, ETA 7s\nb: preparing (freeze, storage switch, checks), 2s in\n',
    'a: Succeeded in 3s\n',
    'b: preparing (freeze, storage switch, checks), 2s in\n',
  ])
  t.equal(view.progressOf('a')?.current?.done, 30, 'what a CRD reported stays known after it ends')
})

t.test('quiet (--progress-every 0): only how far an interrupted CRD got', async (t) => {
  const out = writes()
  const view = new QuietView(out.stream)
  view.start('a')
  view.finish('a', 'a: Succeeded', false)
  view.start('b')
  view.finish('b', 'b: stopped', true)
  await new Promise((resolve) => setImmediate(resolve))
  t.same(out.list, ['b: stopped\n'])
})

t.test('on a terminal: the live lines make room for every permanent line, then come back', async (t) => {
  const tty = writes()
  const stdout = writes()
  Object.assign(tty.stream, { columns: 200 })
  const view = new LiveView(tty.stream as unknown as NodeJS.WriteStream, () => 0)
  view.start('a')
  view.start('b')
  view.print(stdout.stream, 'summary\n')
  view.finish('a', 'a: Succeeded', false)
  view.close()
  await new Promise((resolve) => setImmediate(resolve))
  const live = (n: string) => `0s  ${n}  preparing (freeze, storage switch, checks)\n`
  t.same(tty.list, [
    `\x1b[J${live('a')}`,
    `\x1b[1F\x1b[J${live('a')}${live('b')}`,
    '\x1b[2F\x1b[J',
    `${live('a')}${live('b')}`,
    `\x1b[2F\x1b[Ja: Succeeded\n${live('b')}`,
    '\x1b[1F\x1b[J',
  ])
  t.same(stdout.list, ['summary\n'], 'the other stream gets its text while the live lines are off the screen')
})

t.test('what each signal says', async (t) => {
  t.equal(
    interruptMessage(1, 'SIGINT', ['a', 'b'], KEY),
    'crd-migrator: interrupted (SIGINT): stopping writes, lifting the freeze of a, b…\n',
  )
  t.equal(interruptMessage(1, 'SIGTERM', [], KEY), 'crd-migrator: interrupted (SIGTERM): stopping…\n')
  const second = interruptMessage(2, 'SIGINT', ['a'], KEY)
  t.match(
    second,
    /^crd-migrator: interrupted again \(SIGINT\): still lifting the freeze of a\. Interrupt once more to exit at once: the CRD may then stay frozen/,
  )
  t.match(second, `as the migrator or a break-glass identity:\n  kubectl annotate crd a ${KEY}-\n`)
  t.match(
    interruptMessage(3, 'SIGINT', ['a'], KEY),
    /^crd-migrator: exiting without lifting the freeze: a may stay frozen; to lift it by hand:\n {2}kubectl annotate crd a ksvm/,
  )
  t.equal(interruptMessage(2, 'SIGINT', [], KEY), 'crd-migrator: interrupted again (SIGINT): nothing left frozen by this run; exiting\n')
  t.equal(
    resumeHint(['a', 'b']),
    'run `crd-migrator migrate a b` again (with the same flags) to resume; a CRD finished meanwhile is skipped as up to date\n',
  )
  t.equal(exitCodeFor('SIGINT'), 130)
  t.equal(exitCodeFor('SIGTERM'), 143)
})

t.test('what each signal does: abort, wait, exit', async (t) => {
  const rows: Array<{ signals: NodeJS.Signals[]; inFlight: string[]; exits: number[]; said: number }> = [
    { signals: ['SIGINT'], inFlight: ['a'], exits: [], said: 1 },
    // The second waits for the unfreeze; the third does not.
    { signals: ['SIGINT', 'SIGINT'], inFlight: ['a'], exits: [], said: 2 },
    { signals: ['SIGINT', 'SIGINT', 'SIGINT'], inFlight: ['a'], exits: [130], said: 3 },
    // Nothing left to unfreeze: the second exits at once.
    { signals: ['SIGINT', 'SIGINT'], inFlight: [], exits: [130], said: 2 },
    // The exit code is the first signal's.
    { signals: ['SIGTERM', 'SIGINT', 'SIGINT'], inFlight: ['a'], exits: [143], said: 3 },
  ]
  for (const row of rows) {
    const exits: number[] = []
    const said: string[] = []
    const interrupt = new Interrupt(KEY, (code) => exits.push(code))
    interrupt.write = (text) => said.push(text)
    for (const name of row.inFlight) interrupt.inFlight.add(name)
    t.equal(interrupt.exitCode, undefined)
    for (const sig of row.signals) interrupt.handle(sig)
    const label = `${row.signals.join(', ')} with ${row.inFlight.length} in flight`
    t.ok(interrupt.signal.aborted, `${label}: the run is stopped`)
    t.ok(
      interrupt.signal.reason instanceof InterruptedError && interrupt.signal.reason.code === 'CRDM_ABORTED',
      `${label}: coded, no stack shown`,
    )
    t.same(exits, row.exits, `${label}: exits`)
    t.equal(said.length, row.said, `${label}: one message per signal`)
    t.equal(interrupt.exitCode, exitCodeFor(row.signals[0]!))
  }
})

t.test('an interrupt is found behind the abort error a request rejects with', async (t) => {
  const sigterm = new InterruptedError('SIGTERM')
  const aborted = Object.assign(new Error('The operation was aborted'), { name: 'AbortError', cause: sigterm })
  t.equal(interruption(sigterm), sigterm)
  t.equal(interruption(new Error('wrapped', { cause: aborted })), sigterm)
  t.equal(interruption(new Error('unrelated')), undefined)
  t.equal(interruption('not an error'), undefined)
})
