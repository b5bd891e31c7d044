import t from 'tap'
import { isConflict, isGone, isUnprocessable, isNotFound, isRetryable, isTooManyRequests, KubeApiError } from '../../src/kube/api-errors.js'
import { ThrottleGate, withRetry } from '../../src/migrator/engine/retry.js'
import { consistently } from '../helpers/until.js'

const apiError = (status: number, body: unknown = { kind: 'Status', message: `status ${status}` }, retryAfter?: string) =>
  new KubeApiError(status, 'PATCH', '/apis/example.com/v1/namespaces/default/widgets/w', body, retryAfter)
const netError = (code: string) => Object.assign(new Error(`connect ${code}`), { code })

/** A function failing with the given errors in turn, then answering 'ok'; counts its calls. */
function flaky(errors: unknown[]) {
  const calls: number[] = []
  const fn = async () => {
    calls.push(Date.now())
    const err = errors[calls.length - 1]
    if (err !== undefined) throw err
    return 'ok'
  }
  return { fn, calls }
}

const fast = { baseDelayMs: 1, maxDelayMs: 2 }

interface RetryRow {
  name: string
  error: unknown
  retried: boolean
}

const retryRows: RetryRow[] = [
  { name: '500', error: apiError(500), retried: true },
  { name: '503', error: apiError(503), retried: true },
  { name: '504 with a string body', error: apiError(504, 'upstream timed out'), retried: true },
  { name: '429 (Retry-After 0)', error: apiError(429, { kind: 'Status' }, '0'), retried: true },
  { name: 'ECONNRESET', error: netError('ECONNRESET'), retried: true },
  { name: 'ECONNREFUSED', error: netError('ECONNREFUSED'), retried: true },
  { name: 'ETIMEDOUT', error: netError('ETIMEDOUT'), retried: true },
  { name: 'a plain object with a network code', error: { code: 'EPIPE' }, retried: true },
  { name: 'TimeoutError', error: Object.assign(new Error('timed out'), { name: 'TimeoutError' }), retried: true },
  {
    // Permanent for a create, and a Forbidden like RBAC's: decided on status, not on its text.
    name: '403 while the namespace is being terminated',
    error: apiError(403, {
      kind: 'Status',
      reason: 'Forbidden',
      message: 'unable to create new content in namespace x because it is being terminated',
      details: { causes: [{ type: 'NamespaceTerminating', field: 'metadata.namespace' }] },
    }),
    retried: false,
  },
  { name: '404', error: apiError(404), retried: false },
  { name: '409', error: apiError(409), retried: false },
  { name: '422', error: apiError(422), retried: false },
  { name: '400', error: apiError(400), retried: false },
  { name: '401', error: apiError(401), retried: false },
  { name: '410', error: apiError(410), retried: false },
  {
    name: 'plain 403 Forbidden',
    error: apiError(403, { kind: 'Status', reason: 'Forbidden', message: 'widgets is forbidden: User "x" cannot patch' }),
    retried: false,
  },
  { name: 'EACCES', error: netError('EACCES'), retried: false },
  { name: 'a plain Error', error: new Error('boom'), retried: false },
  { name: 'a string', error: 'boom', retried: false },
  { name: 'null', error: null, retried: false },
]

for (const row of retryRows) {
  t.test(`withRetry: ${row.name} is ${row.retried ? '' : 'not '}retried`, async (t) => {
    t.equal(isRetryable(row.error), row.retried, 'isRetryable')
    const { fn, calls } = flaky([row.error, row.error])
    const attempts: number[] = []
    if (row.retried) {
      t.equal(
        await withRetry(fn, { maxAttempts: 5, ...fast, onRetry: (_err, attempt) => attempts.push(attempt) }),
        'ok',
        'succeeds in the end',
      )
      t.equal(calls.length, 3, 'two failures, one success')
      t.strictSame(attempts, [1, 2], 'onRetry per retry')
    } else {
      let caught: unknown = 'nothing thrown'
      try {
        await withRetry(fn, { maxAttempts: 5, ...fast, onRetry: (_err, attempt) => attempts.push(attempt) })
      } catch (err) {
        caught = err
      }
      t.equal(caught, row.error, 'the very error is passed on')
      t.equal(calls.length, 1, 'one attempt only')
      t.strictSame(attempts, [], 'no onRetry')
    }
  })
}

t.test('withRetry gives up after maxAttempts with the last error', async (t) => {
  const errors = [apiError(500, 'one'), apiError(502, 'two'), apiError(503, 'three'), apiError(504, 'four')]
  const { fn, calls } = flaky(errors)
  await t.rejects(withRetry(fn, { maxAttempts: 3, ...fast }), {
    status: 503,
    message: 'PATCH /apis/example.com/v1/namespaces/default/widgets/w: 503 three',
  })
  t.equal(calls.length, 3)
})

t.test('withRetry with maxAttempts 1 never retries', async (t) => {
  const { fn, calls } = flaky([apiError(500)])
  await t.rejects(withRetry(fn, { maxAttempts: 1, ...fast }), { status: 500, message: /: 500 / })
  t.equal(calls.length, 1)
})

t.test('withRetry returns the first success without delay', async (t) => {
  const { fn, calls } = flaky([])
  const started = Date.now()
  t.equal(await withRetry(fn, { maxAttempts: 3 }), 'ok')
  t.equal(calls.length, 1)
  t.ok(Date.now() - started < 150, 'no waiting (a retry would wait the 200 ms base delay)')
})

t.test('withRetry backs off no longer than the ceiling', async (t) => {
  const { fn, calls } = flaky([apiError(500), apiError(500), apiError(500)])
  const started = Date.now()
  t.equal(await withRetry(fn, { maxAttempts: 4, baseDelayMs: 10, maxDelayMs: 20 }), 'ok')
  t.equal(calls.length, 4)
  t.ok(Date.now() - started < 10 + 20 + 20 + 500, 'at most base + max + max (plus slack)')
})

t.test('429 without a gate waits Retry-After', async (t) => {
  const { fn, calls } = flaky([apiError(429, { kind: 'Status' }, '0.1')])
  let throttled = 0
  t.equal(await withRetry(fn, { maxAttempts: 3, ...fast, onThrottled: () => throttled++ }), 'ok')
  t.equal(throttled, 1, 'onThrottled')
  t.ok(calls[1]! - calls[0]! >= 90, `waited ~100ms (${calls[1]! - calls[0]!} ms)`)
})

t.test('429 with Retry-After pauses the shared gate for every caller', async (t) => {
  const gate = new ThrottleGate()
  const { fn: throttledFn, calls: throttledCalls } = flaky([new KubeApiError(429, 'PATCH', '/x', { kind: 'Status' }, '0.2')])
  let throttled = 0
  const first = withRetry(throttledFn, { maxAttempts: 3, gate, ...fast, onThrottled: () => throttled++ })
  // Let the first call fail and pause the gate.
  while (throttledCalls.length === 0) await new Promise((resolve) => setImmediate(resolve))
  await new Promise((resolve) => setImmediate(resolve))
  const pausedAt = throttledCalls[0]!
  t.equal(gate.throttled, 1, 'the gate counted the 429')
  t.equal(throttled, 1, 'onThrottled')

  const { fn: otherFn, calls: otherCalls } = flaky([])
  t.equal(await withRetry(otherFn, { maxAttempts: 1, gate }), 'ok', 'an unrelated call succeeds')
  t.ok(otherCalls[0]! - pausedAt >= 180, `the unrelated call waited for the gate (${otherCalls[0]! - pausedAt} ms)`)

  t.equal(await first, 'ok', 'the throttled call succeeds on retry')
  t.ok(throttledCalls[1]! - pausedAt >= 180, `the retry waited too (${throttledCalls[1]! - pausedAt} ms)`)

  const { fn: later, calls: laterCalls } = flaky([])
  const before = Date.now()
  await withRetry(later, { maxAttempts: 1, gate })
  t.ok(laterCalls[0]! - before < 50, 'once the pause is over nobody waits')
})

t.test('429 without Retry-After pauses the gate for the Status details, else 1 second', async (t) => {
  const gate = new ThrottleGate()
  const before = Date.now()
  gate.pauseFor(apiError(429, { kind: 'Status', details: { retryAfterSeconds: 0.05 } }).retryAfterSeconds ?? 1)
  await gate.wait()
  t.ok(Date.now() - before >= 45, 'waited the details')
  t.equal(apiError(429, { kind: 'Status' }).retryAfterSeconds, undefined, 'withRetry falls back to 1 second')
})

t.test('ThrottleGate keeps the latest resume time', async (t) => {
  const gate = new ThrottleGate()
  const before = Date.now()
  gate.pauseFor(0.08)
  gate.pauseFor(0.01)
  t.equal(gate.throttled, 2)
  await gate.wait()
  t.ok(Date.now() - before >= 75, 'a shorter pause does not shorten a longer one')
})

t.test('ThrottleGate.wait is cut short by an abort', async (t) => {
  const gate = new ThrottleGate()
  gate.pauseFor(5)
  const ac = new AbortController()
  setTimeout(() => ac.abort(), 10)
  const before = Date.now()
  await t.rejects(gate.wait(ac.signal), { name: 'AbortError' })
  t.ok(Date.now() - before < 1000, 'did not wait out the pause')
})

t.test('ThrottleGate with a concurrency cap: a 429 halves it once per burst, fast answers grow it back', async (t) => {
  // Windows of 4 answers, starting at the cap; answers at their floor latency grow the limit.
  let clock = 1000
  const gate = new ThrottleGate({ maxConcurrency: 8, adaptive: { initial: 8, minSamples: 4 }, now: () => clock })
  t.equal(gate.concurrencyLimit, 8)
  const slots = await Promise.all(Array.from({ length: 8 }, () => gate.acquire()))
  // Eight requests of one burst all get a 429: the limit halves once, not eight times.
  for (const slot of slots) {
    gate.release(slot, true)
    gate.pauseFor(0.02, slot)
  }
  t.equal(gate.concurrencyLimit, 4, 'halved once for the burst')
  t.equal(gate.throttled, 8, 'every 429 is counted')
  await gate.wait()
  // A request started after the decrease that gets a 429 halves it again.
  clock += 1
  const later = await gate.acquire()
  gate.release(later, true)
  gate.pauseFor(0.01, later)
  t.equal(gate.concurrencyLimit, 2, 'a new burst halves again')
  await gate.wait()
  // Answers at the latency floor, with the limit reached: one more per window of answers.
  for (let round = 0; round < 40; round++) {
    const held = Array.from({ length: gate.concurrencyLimit }, () => gate.tryAcquire())
    t.ok(
      held.every((s) => s !== undefined),
      'the whole limit is free',
    )
    clock += 10 // every answer takes 10 ms: the floor
    for (const slot of held) gate.release(slot!)
  }
  t.equal(gate.concurrencyLimit, 8, 'grown back to the cap, never above it')
  t.ok(gate.decisions!.increase > 0 && gate.decisions!.throttled === 2, JSON.stringify(gate.decisions))
})

t.test('ThrottleGate with adaptive: false stays at the cap but for 429s', async (t) => {
  const gate = new ThrottleGate({ maxConcurrency: 6, adaptive: false })
  t.equal(gate.concurrencyLimit, 6)
  for (let i = 0; i < 50; i++) gate.release(gate.tryAcquire()!)
  t.equal(gate.concurrencyLimit, 6, 'answers change nothing')
  const slot = gate.tryAcquire()!
  gate.release(slot, true)
  gate.pauseFor(0, slot)
  t.equal(gate.concurrencyLimit, 3, 'a 429 still halves it')
})

t.test('ThrottleGate: list pages (sample false) do not steer the limit', async (t) => {
  let clock = 0
  const gate = new ThrottleGate({ maxConcurrency: 16, adaptive: { minSamples: 1 }, now: () => (clock += 5) })
  t.equal(gate.concurrencyLimit, 1, 'adaptive starts at 1')
  for (let i = 0; i < 20; i++) gate.release(gate.tryAcquire()!, false, false)
  t.equal(gate.concurrencyLimit, 1, 'unsampled answers decide nothing')
  gate.release(gate.tryAcquire()!)
  t.equal(gate.concurrencyLimit, 2, 'a sampled one does (slow start)')
})

t.test('ThrottleGate.tryAcquire: nothing during a pause or above the limit', async (t) => {
  const gate = new ThrottleGate({ maxConcurrency: 2, adaptive: false })
  const a = gate.tryAcquire()
  const b = gate.tryAcquire()
  t.ok(a !== undefined && b !== undefined)
  t.equal(gate.tryAcquire(), undefined, 'none above the limit')
  gate.release(a!)
  gate.pauseFor(5)
  t.equal(gate.tryAcquire(), undefined, 'none during a pause')
})

t.test('ThrottleGate.acquire waits for a free slot under the cap, and gives up on abort', async (t) => {
  const gate = new ThrottleGate({ maxConcurrency: 2, adaptive: false })
  const a = await gate.acquire()
  const b = await gate.acquire()
  let third = false
  const pending = gate.acquire().then((slot) => {
    third = true
    return slot
  })
  // Checked all along, not once after a pause.
  await consistently(
    'a third request to wait while two are in flight',
    200,
    async () => third,
    (passed) => !passed,
  )
  t.equal(third, false, 'a third request waits while two are in flight')
  gate.release(a)
  const c = await pending
  t.equal(third, true, 'and goes once one finished')
  const ac = new AbortController()
  const aborted = gate.acquire(ac.signal)
  setTimeout(() => ac.abort(), 10)
  await t.rejects(aborted, { name: 'AbortError' }, 'an abort ends the wait')
  gate.release(b)
  gate.release(c)
  const d = await gate.acquire()
  t.ok(d > 0, 'slots are free again')
  t.equal(new ThrottleGate().concurrencyLimit, Number.POSITIVE_INFINITY, 'no cap unless one is given')
})

t.test('withRetry through a capped gate: a 429 waits for the pause, not for a backoff on top', async (t) => {
  const gate = new ThrottleGate({ maxConcurrency: 4, adaptive: false })
  const { fn, calls } = flaky([new KubeApiError(429, 'PATCH', '/x', { kind: 'Status' }, '0.05')])
  t.equal(await withRetry(fn, { maxAttempts: 3, gate, baseDelayMs: 5000, maxDelayMs: 5000 }), 'ok')
  const waited = calls[1]! - calls[0]!
  t.ok(waited >= 45 && waited < 1000, `waited the Retry-After only (${waited} ms)`)
  t.equal(gate.concurrencyLimit, 2, 'and the cap was halved')
})

t.test('backoff has a floor: half the ceiling at least (equal jitter)', async (t) => {
  const { fn, calls } = flaky([apiError(503), apiError(503)])
  t.equal(await withRetry(fn, { maxAttempts: 3, baseDelayMs: 40, maxDelayMs: 1000 }), 'ok')
  t.ok(calls[1]! - calls[0]! >= 18, `first retry after >= 20 ms (${calls[1]! - calls[0]!})`)
  t.ok(calls[2]! - calls[1]! >= 38, `second retry after >= 40 ms (${calls[2]! - calls[1]!})`)
})

t.test('withRetry stops backing off on abort', async (t) => {
  const ac = new AbortController()
  const { fn, calls } = flaky([apiError(500), apiError(500)])
  setTimeout(() => ac.abort(), 20)
  await t.rejects(withRetry(fn, { maxAttempts: 5, baseDelayMs: 5000, maxDelayMs: 5000, signal: ac.signal }), { name: 'AbortError' })
  t.ok(calls.length <= 2, 'no further attempts after the abort')
})

t.test('KubeApiError', async (t) => {
  const e = new KubeApiError(429, 'PATCH', '/x', { kind: 'Status' }, '0.2')
  t.equal(e.status, 429)
  t.equal(e.retryAfterSeconds, 0.2, 'Retry-After header')
  t.equal(e.name, 'KubeApiError')
  t.equal(e.message, 'PATCH /x: 429 HTTP 429', 'no Status message: HTTP status')
  t.ok(e instanceof Error)

  const status = new KubeApiError(
    409,
    'PUT',
    '/y',
    { kind: 'Status', message: 'the object has been modified', reason: 'Conflict', details: { retryAfterSeconds: 3 } },
    undefined,
  )
  t.equal(status.message, 'PUT /y: 409 the object has been modified')
  t.equal(status.reason, 'Conflict')
  t.equal(status.retryAfterSeconds, 3, 'from the Status details')
  t.strictSame(status.details, { retryAfterSeconds: 3 })

  t.equal(
    new KubeApiError(429, 'GET', '/z', { kind: 'Status', details: { retryAfterSeconds: 4 } }, '1').retryAfterSeconds,
    1,
    'the header wins',
  )
  t.equal(
    new KubeApiError(429, 'GET', '/z', { kind: 'Status', details: { retryAfterSeconds: 4 } }, 'soon').retryAfterSeconds,
    4,
    'garbage header: details',
  )
  t.equal(new KubeApiError(429, 'GET', '/z', {}, '-1').retryAfterSeconds, undefined, 'negative header ignored')
  t.equal(new KubeApiError(500, 'GET', '/z', 'plain text', undefined).message, 'GET /z: 500 plain text', 'a text body')
  t.equal(new KubeApiError(500, 'GET', '/z', '', undefined).message, 'GET /z: 500 HTTP 500', 'an empty body')
  t.equal(
    new KubeApiError(500, 'GET', '/z', { message: 'not a Status' }, undefined).message,
    'GET /z: 500 HTTP 500',
    'only Status objects are read',
  )
})

t.test('status classifiers', async (t) => {
  t.equal(isNotFound(apiError(404)), true)
  t.equal(isNotFound({ status: 404 }), false, 'only KubeApiError')
  t.equal(isConflict(apiError(409)), true)
  t.equal(isConflict(apiError(422)), false)
  t.equal(isGone(apiError(410)), true)
  t.equal(isTooManyRequests(apiError(429)), true)
  t.equal(isTooManyRequests(apiError(503)), false)
})

interface PatchTestRow {
  name: string
  error: unknown
  expect: boolean
}

// A failed JSON Patch `test` answers a bare 422 (1.30-1.37): nothing in it to tell it from
// another refusal, so it is recognised by status alone and the caller reads the object again.
const patchTestRows: PatchTestRow[] = [
  {
    name: '422 as the API server sends a failed test',
    error: apiError(422, {
      kind: 'Status',
      status: 'Failure',
      message: 'the server rejected our request due to an error in our request',
      reason: 'Invalid',
      details: {},
      code: 422,
    }),
    expect: true,
  },
  {
    name: '422 other validation error',
    error: apiError(422, { kind: 'Status', message: 'spec.replicas: Invalid value: -1' }),
    expect: true,
  },
  {
    name: '409 with test text',
    error: apiError(409, { kind: 'Status', message: 'testing value /metadata/resourceVersion failed' }),
    expect: false,
  },
  { name: '500 with test text', error: apiError(500, { kind: 'Status', message: 'test operation failed' }), expect: false },
  { name: 'not a KubeApiError', error: Object.assign(new Error('testing value x failed'), { status: 422 }), expect: false },
  { name: 'undefined', error: undefined, expect: false },
]

for (const row of patchTestRows) {
  t.test(`isUnprocessable: ${row.name}`, async (t) => {
    t.equal(isUnprocessable(row.error), row.expect)
    if (row.expect) t.equal(isRetryable(row.error), false, 'a 422 is not retried')
  })
}

t.test('429s spend a budget of their own (4 x maxAttempts), not the attempts of transient errors', async (t) => {
  const throttled = () => apiError(429, { kind: 'Status' }, '0')
  // Three 429s and two 500s, then success, with maxAttempts 3: the 500s alone are within it.
  const { fn, calls } = flaky([throttled(), apiError(500), throttled(), apiError(500), throttled()])
  t.equal(await withRetry(fn, { maxAttempts: 3, baseDelayMs: 1, maxDelayMs: 1 }), 'ok')
  t.equal(calls.length, 6, 'every 429 was retried without spending an attempt')
  // Only 429s: the request fails at the 4 x maxAttempts-th.
  const always = flaky(Array.from({ length: 100 }, throttled))
  const failed = await withRetry(always.fn, { maxAttempts: 2, baseDelayMs: 1, maxDelayMs: 1 }).then(
    () => undefined,
    (err: unknown) => err,
  )
  t.equal((failed as KubeApiError | undefined)?.status, 429, 'it fails with the last 429')
  t.equal(always.calls.length, 8, 'given up after 4 x maxAttempts 429s')
})
