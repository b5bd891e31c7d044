import t from 'tap'
import {
  AdaptiveConcurrency,
  decideLimit,
  DEFAULT_TOLERANCE,
  initialLimitState,
  throttledLimit,
  type LatencyWindow,
  type LimitDecision,
  type LimitState,
} from '../../src/migrator/engine/adaptive-concurrency.js'

const settings = { max: 64, tolerance: 8 }

interface Row {
  name: string
  state: LimitState
  window: Omit<LatencyWindow, 'samples' | 'limit'>
  limit: number
  floorMs: number
  slowStart: boolean
  decision: LimitDecision
}

const rows: Row[] = [
  {
    name: 'the first window sets the floor and doubles (slow start)',
    state: { limit: 1, floorMs: null, slowStart: true },
    window: { medianMs: 6, saturated: true },
    limit: 2,
    floorMs: 6,
    slowStart: true,
    decision: 'slow-start',
  },
  {
    name: 'slow start goes on under half the tolerance',
    state: { limit: 8, floorMs: 6, slowStart: true },
    window: { medianMs: 23, saturated: true },
    limit: 16,
    floorMs: 6,
    slowStart: true,
    decision: 'slow-start',
  },
  {
    name: 'slow start ends past half the tolerance: one more at a time',
    state: { limit: 16, floorMs: 6, slowStart: true },
    window: { medianMs: 30, saturated: true },
    limit: 17,
    floorMs: 6,
    slowStart: false,
    decision: 'increase',
  },
  {
    name: 'additive increase within the tolerance',
    state: { limit: 20, floorMs: 6, slowStart: false },
    window: { medianMs: 47, saturated: true },
    limit: 21,
    floorMs: 6,
    slowStart: false,
    decision: 'increase',
  },
  {
    name: 'a lower latency lowers the floor',
    state: { limit: 20, floorMs: 6, slowStart: false },
    window: { medianMs: 4, saturated: true },
    limit: 21,
    floorMs: 4,
    slowStart: false,
    decision: 'increase',
  },
  {
    name: 'past the tolerance but inside the margin: hold',
    state: { limit: 24, floorMs: 6, slowStart: false },
    window: { medianMs: 55, saturated: true },
    limit: 24,
    floorMs: 6,
    slowStart: false,
    decision: 'hold',
  },
  {
    name: 'past tolerance and margin: a quarter less',
    state: { limit: 24, floorMs: 6, slowStart: false, strikes: 1 },
    window: { medianMs: 61, saturated: true },
    limit: 18,
    floorMs: 6,
    slowStart: false,
    decision: 'decrease',
  },
  {
    name: 'rising latency ends slow start too',
    state: { limit: 32, floorMs: 6, slowStart: true, strikes: 1 },
    window: { medianMs: 200, saturated: true },
    limit: 24,
    floorMs: 6,
    slowStart: false,
    decision: 'decrease',
  },
  {
    name: 'a limit nobody reached does not grow',
    state: { limit: 12, floorMs: 6, slowStart: false },
    window: { medianMs: 7, saturated: false },
    limit: 12,
    floorMs: 6,
    slowStart: false,
    decision: 'idle',
  },
  {
    name: 'unsaturated but slow: it still decreases',
    state: { limit: 12, floorMs: 6, slowStart: false, strikes: 1 },
    window: { medianMs: 90, saturated: false },
    limit: 9,
    floorMs: 6,
    slowStart: false,
    decision: 'decrease',
  },
  {
    name: 'one slow window alone is held, not a decrease (a pause, a compaction)',
    state: { limit: 24, floorMs: 6, slowStart: false },
    window: { medianMs: 90, saturated: true },
    limit: 24,
    floorMs: 6,
    slowStart: false,
    decision: 'hold',
  },
  {
    name: 'past the tolerance but more in flight bought throughput: still grows',
    state: { limit: 30, floorMs: 6, slowStart: false, rates: { 16: 300, 20: 330, 24: 340, 30: 370 } },
    window: { medianMs: 80, saturated: true, ratePerSecond: 375 },
    limit: 31,
    floorMs: 6,
    slowStart: false,
    decision: 'increase',
  },
  {
    name: 'past the tolerance and margin, and no throughput bought: a quarter less after two windows',
    state: { limit: 40, floorMs: 6, slowStart: false, strikes: 1, rates: { 24: 380, 30: 400, 40: 395 } },
    window: { medianMs: 100, saturated: true, ratePerSecond: 390 },
    limit: 30,
    floorMs: 6,
    slowStart: false,
    decision: 'decrease',
  },
  {
    name: 'past the tolerance, a little throughput bought but not enough: hold',
    state: { limit: 40, floorMs: 6, slowStart: false, rates: { 24: 380, 30: 400, 40: 405 } },
    window: { medianMs: 100, saturated: true, ratePerSecond: 405 },
    limit: 40,
    floorMs: 6,
    slowStart: false,
    decision: 'hold',
  },
  {
    name: 'never above the cap',
    state: { limit: 48, floorMs: 6, slowStart: true },
    window: { medianMs: 7, saturated: true },
    limit: 64,
    floorMs: 6,
    slowStart: true,
    decision: 'slow-start',
  },
  {
    name: 'never below 1',
    state: { limit: 1, floorMs: 6, slowStart: false, strikes: 1 },
    window: { medianMs: 600, saturated: true },
    limit: 1,
    floorMs: 6,
    slowStart: false,
    decision: 'decrease',
  },
]

t.test('decideLimit', async (t) => {
  for (const row of rows) {
    const { state, decision } = decideLimit(row.state, { ...row.window, limit: row.state.limit, samples: 16 }, settings)
    t.same(
      { limit: state.limit, floorMs: state.floorMs, slowStart: state.slowStart, decision },
      { limit: row.limit, floorMs: row.floorMs, slowStart: row.slowStart, decision: row.decision },
      row.name,
    )
  }
})

t.test('a 429 halves the limit and ends slow start', async (t) => {
  t.same(throttledLimit({ limit: 20, floorMs: 6, slowStart: true }, settings), { limit: 10, floorMs: 6, slowStart: false })
  t.same(throttledLimit({ limit: 1, floorMs: 6, slowStart: false }, settings), { limit: 1, floorMs: 6, slowStart: false })
})

t.test('settings: the start, the cap and the default tolerance', async (t) => {
  t.equal(initialLimitState({ max: 64 }).limit, 1, 'starts at 1')
  t.equal(initialLimitState({ max: 64, initial: 500 }).limit, 64, 'an initial limit above the cap is the cap')
  t.equal(initialLimitState({ max: 0 }).limit, 1, 'a cap below 1 is 1')
  const { decision } = decideLimit(
    { limit: 10, floorMs: 10, slowStart: false },
    { limit: 10, samples: 16, medianMs: 10 * DEFAULT_TOLERANCE, saturated: true },
    { max: 64 },
  )
  t.equal(decision, 'increase', `the default tolerance is ${DEFAULT_TOLERANCE}× the floor`)
})

/** An AdaptiveConcurrency on a fake clock, fed `limit` answers of `latencyMs` per round, all at once. */
function drive(c: AdaptiveConcurrency, clock: { now: number }, latencyMs: (limit: number) => number, rounds: number): number[] {
  const limits: number[] = []
  for (let r = 0; r < rounds; r++) {
    const limit = c.limit
    const started = clock.now
    for (let i = 1; i <= limit; i++) c.started(i)
    clock.now += latencyMs(limit)
    for (let i = 0; i < limit; i++) c.answered(started, latencyMs(limit))
    limits.push(c.limit)
  }
  return limits
}

t.test('AdaptiveConcurrency settles where the latency reaches the tolerance, and follows a slower server', async (t) => {
  const clock = { now: 0 }
  const changes: number[] = []
  const c = new AdaptiveConcurrency(
    { max: 64, tolerance: 8, minSamples: 8 },
    (l) => changes.push(l),
    () => clock.now,
  )
  // A server that does 300 writes/s however many are in flight, 5 ms each when alone:
  // latency = max(5, limit / 300 s). The tolerance (40 ms) is reached at 12 in flight.
  const server = (capacity: number) => (limit: number) => Math.max(5, (limit / capacity) * 1000)
  const limits = drive(c, clock, server(300), 200)
  const settled = limits.slice(-50)
  t.ok(Math.min(...settled) >= 9 && Math.max(...settled) <= 16, `settles around 12-15: ${settled.join(' ')}`)
  t.equal(c.floorMs, 5, 'the floor is the latency of one write alone')
  t.ok(changes.length > 0 && changes.at(-1) === c.limit, 'onChange follows every change')
  // The server halves its capacity (another tenant): the limit comes down.
  const slower = drive(c, clock, server(150), 200).slice(-50)
  t.ok(Math.max(...slower) <= 9, `comes down to about half: ${slower.join(' ')}`)
})

t.test('AdaptiveConcurrency grows to the cap when latency does not rise', async (t) => {
  const clock = { now: 0 }
  const c = new AdaptiveConcurrency({ max: 32 }, undefined, () => clock.now)
  const limits = drive(c, clock, () => 20, 100)
  t.equal(limits.at(-1), 32, 'at the cap')
  t.ok(c.decisions['slow-start'] > 0, 'slow start on the way')
  t.equal(c.decisions.decrease, 0, 'no decrease on the way')
})

t.test('AdaptiveConcurrency: answers to requests sent under an older limit are not counted', async (t) => {
  const clock = { now: 100 }
  const c = new AdaptiveConcurrency({ max: 64, minSamples: 2 }, undefined, () => clock.now)
  c.started(1)
  c.answered(100, 5)
  c.answered(100, 5)
  t.equal(c.limit, 2, 'slow start doubled it')
  clock.now = 150
  // Both answers are to requests sent at 100, before the change at 100.
  c.answered(99, 500)
  c.answered(99, 500)
  t.equal(c.limit, 2, 'stale answers decide nothing')
})

t.test('AdaptiveConcurrency: one decrease per burst of 429s', async (t) => {
  const clock = { now: 10 }
  const c = new AdaptiveConcurrency({ max: 64, initial: 40 }, undefined, () => clock.now)
  for (let i = 0; i < 10; i++) c.throttled(5)
  t.equal(c.limit, 20, 'a burst sent before the decrease halves it once')
  clock.now = 11
  c.throttled(10)
  t.equal(c.limit, 20, 'a request sent at the very moment of the decrease is of the same burst')
  clock.now = 12
  c.throttled(12)
  t.equal(c.limit, 10, 'a 429 to a request sent after the decrease halves it again')
  t.equal(c.decisions.throttled, 2)
})

t.test('AdaptiveConcurrency: at a small limit a window is four answers per request in flight, not minSamples', async (t) => {
  const clock = { now: 0 }
  const c = new AdaptiveConcurrency({ max: 64 }, undefined, () => clock.now)
  c.started(1)
  for (let i = 0; i < 3; i++) c.answered(0, 400)
  t.equal(c.limit, 1, 'three answers of a slow write: no decision yet')
  c.answered(0, 400)
  t.equal(c.limit, 2, 'the fourth closes the window (slow start)')
  clock.now = 1
  for (let i = 0; i < 8; i++) {
    c.started(2)
    c.answered(1, 400)
  }
  t.equal(c.limit, 4, 'eight at 2 in flight')
})

t.test('AdaptiveConcurrency on a batching server with pauses: one slow window in four does not pull it down', async (t) => {
  const clock = { now: 0 }
  const c = new AdaptiveConcurrency({ max: 64 }, undefined, () => clock.now)
  // etcd batches concurrent writes: 4.6 ms alone, 54 ms at 32 in flight (11.7× the floor)
  // while throughput still grows (217/s alone, 590/s at 32, 607/s at 64). Every fourth
  // round the client pauses (a gc, a busy core): that round's answers take 4× as long.
  // A decrease on every slow window held it at 6-8 in flight, 0.85× (the bench's 0.58×).
  const base = (n: number) => 3 + 1.6 * n
  let round = 0
  const limits = drive(c, clock, (n) => base(n) * (++round % 4 === 1 ? 4 : 1), 600)
  const settled = limits.slice(-200)
  const mean = settled.reduce((a, b) => a + b, 0) / settled.length
  const rate = (n: number) => (n / base(n)) * 1000
  t.ok(mean >= 20, `settles at 20 or more in flight: mean ${mean.toFixed(1)}`)
  t.ok(rate(mean) >= 0.95 * rate(32), `at least 0.95× the throughput of 32 in flight: ${rate(mean).toFixed(0)} vs ${rate(32).toFixed(0)}/s`)
  t.ok(Math.max(...settled) <= 48, `and does not climb to the cap for nothing: max ${Math.max(...settled)}`)
})
