import t from 'tap'
import { classifyConversionError, conversionStrategy, conversionWebhookOf, ManagedFieldsDroppedError } from '../../src/kube/conversion.js'
import { KubeApiError } from '../../src/kube/api-errors.js'
import type { CustomResourceDefinition } from '../../src/kube/types.js'
import { ConversionGate } from '../../src/migrator/conversion/gate.js'
import { withRetry } from '../../src/migrator/engine/retry.js'
import { consistently } from '../helpers/until.js'

const PREFIX = 'conversion webhook for example.com/v1, Kind=Widget failed: '
const apiError = (status: number, message: string) =>
  new KubeApiError(status, 'PATCH', '/apis/example.com/v2/namespaces/a/widgets/w', { kind: 'Status', message }, undefined)

// The texts are what kube-apiserver 1.35 answered to our test webhook (see
// test/integration/conversion-webhook.test.ts), plus client-go's other transport errors.
const rows: Array<{ name: string; err: unknown; kind: 'outage' | 'refused' | undefined }> = [
  {
    name: 'connection refused',
    err: apiError(
      500,
      `${PREFIX}Post "https://127.0.0.1:45569/convert?timeout=30s": dial tcp 127.0.0.1:45569: connect: connection refused`,
    ),
    kind: 'outage',
  },
  {
    name: 'TLS: a rotated certificate the caBundle does not trust',
    err: apiError(
      500,
      `${PREFIX}Post "https://svc.ns.svc:443/convert?timeout=30s": tls: failed to verify certificate: x509: certificate signed by unknown authority`,
    ),
    kind: 'outage',
  },
  { name: 'timeout', err: apiError(500, `${PREFIX}Post "https://x/convert?timeout=30s": context deadline exceeded`), kind: 'outage' },
  { name: 'no Service', err: apiError(500, `${PREFIX}service "conv" not found`), kind: 'outage' },
  { name: 'webhook answers 503', err: apiError(500, `${PREFIX}the server is currently unable to handle the request`), kind: 'outage' },
  {
    name: 'webhook answers 500',
    err: apiError(500, `${PREFIX}an error on the server ("boom") has prevented the request from succeeding`),
    kind: 'outage',
  },
  { name: 'webhook Failure message', err: apiError(500, `${PREFIX}spec.image is not a valid reference (object w-1)`), kind: 'refused' },
  { name: 'malformed response', err: apiError(500, `${PREFIX}expected response.uid="a", got "b"`), kind: 'refused' },
  { name: 'managedFields dropped', err: new ManagedFieldsDroppedError('a/w', []), kind: 'outage' },
  { name: 'a plain 500', err: apiError(500, 'etcdserver: request timed out'), kind: undefined },
  { name: 'a 4xx that quotes the text', err: apiError(422, `${PREFIX}x`), kind: undefined },
  { name: 'not an API error', err: new Error(`${PREFIX}Post "x"`), kind: undefined },
]

t.test('classifyConversionError', async (t) => {
  for (const row of rows) t.equal(classifyConversionError(row.err)?.kind, row.kind, row.name)
  t.equal(
    classifyConversionError(rows[0]!.err)?.detail,
    'Post "https://127.0.0.1:45569/convert?timeout=30s": dial tcp 127.0.0.1:45569: connect: connection refused',
    'the detail is what followed "failed: "',
  )
})

t.test('a refusal from a webhook is cleaned and cut before anyone stores or prints it', async (t) => {
  const said = `spec.replicas: Invalid\n\u001b]0;pwned\u0007\u001b[2JSucceeded\r\n${'x'.repeat(5000)}`
  const failure = classifyConversionError(apiError(500, `${PREFIX}${said}`))
  t.equal(failure?.kind, 'refused')
  t.notMatch(failure?.detail ?? '', /\p{Cc}/u, 'no control character')
  t.match(failure?.detail ?? '', /^spec\.replicas: Invalid Succeeded x+…\(\d+ characters\)$/, 'one line, escapes gone')
  t.ok((failure?.detail.length ?? Infinity) < 1100, `cut (${failure?.detail.length})`)
})

const crd = (conversion: unknown): CustomResourceDefinition => ({
  apiVersion: 'apiextensions.k8s.io/v1',
  kind: 'CustomResourceDefinition',
  metadata: { name: 'widgets.example.com' },
  spec: { group: 'example.com', names: { plural: 'widgets', kind: 'Widget' }, scope: 'Namespaced', versions: [], conversion },
})

t.test('conversionStrategy and conversionWebhookOf', async (t) => {
  t.equal(conversionStrategy(crd(undefined)), 'None')
  t.equal(conversionStrategy(crd({ strategy: 'None' })), 'None')
  t.equal(conversionWebhookOf(crd({ strategy: 'None' })), undefined)
  t.equal(
    conversionWebhookOf(crd({ strategy: 'Webhook', webhook: { clientConfig: { url: 'https://conv.example/c' } } })),
    'https://conv.example/c',
  )
  t.equal(
    conversionWebhookOf(
      crd({ strategy: 'Webhook', webhook: { clientConfig: { service: { namespace: 'capi', name: 'webhook', path: '/convert' } } } }),
    ),
    'service capi/webhook:443/convert',
  )
  t.equal(
    conversionWebhookOf(crd({ strategy: 'Webhook', webhookClientConfig: { service: { name: 'w', port: 9443 } } })),
    'service default/w:9443',
  )
  t.equal(conversionWebhookOf(crd({ strategy: 'Webhook' })), 'an unnamed webhook')
})

/** A clock the test moves by hand. */
function clock(start = 1_000_000) {
  let now = start
  return { now: () => now, advance: (ms: number) => (now += ms) }
}

const outage = { kind: 'outage' as const, detail: 'dial tcp: connection refused' }

t.test('ConversionGate: closed passes everyone; an outage lets one trial through at a time', async (t) => {
  const c = clock()
  const gate = new ConversionGate({ webhook: 'w', outageLimitMs: 60_000, minTrialIntervalMs: 0, now: c.now })
  const a = await gate.acquire()
  const b = await gate.acquire()
  t.notOk(a.trial || b.trial, 'no trials while the webhook answers')
  gate.failed(a, outage)
  t.ok(gate.open, 'the first outage failure opens the gate')
  t.equal(gate.outages, 1)
  gate.failed(b, outage)
  t.equal(gate.outages, 1, 'more failures of the same outage count once')

  const trial = await gate.acquire()
  t.ok(trial.trial, 'the next request is a trial')
  let waiterPassed = false
  const waiter = gate.acquire().then((p) => {
    waiterPassed = true
    return p
  })
  // Checked all along, not once after a pause.
  await consistently(
    'nobody else to pass while the trial is in flight',
    200,
    async () => waiterPassed,
    (passed) => !passed,
  )
  t.notOk(waiterPassed, 'nobody else passes while the trial is in flight')
  c.advance(3_000)
  gate.succeeded(trial)
  const after = await waiter
  t.notOk(after.trial, 'a successful trial closes the gate for all')
  t.notOk(gate.open)
  t.equal(gate.outageMs, 3_000, 'the outage lasted from the first failure to the successful trial')
})

t.test('ConversionGate: a relapse right after closing is the same outage; the limit fails everyone', async (t) => {
  const c = clock()
  const gate = new ConversionGate({ webhook: 'https://conv/c', outageLimitMs: 10_000, minTrialIntervalMs: 0, now: c.now })
  gate.failed(await gate.acquire(), outage)
  c.advance(4_000)
  gate.succeeded(await gate.acquire())
  c.advance(1_000)
  gate.failed(await gate.acquire(), outage)
  t.equal(gate.outages, 1, 'a relapse within the window is not a new outage')
  c.advance(6_000)
  await t.rejects(gate.acquire(), {
    code: 'CRDM_CONVERSION_OUTAGE',
    message: /conversion webhook https:\/\/conv\/c did not answer for 11s \(limit 10s\): dial tcp/,
  })
  await t.rejects(gate.acquire(), { code: 'CRDM_CONVERSION_OUTAGE' }, 'and keeps failing')
})

t.test('ConversionGate: trials back off, up to the maximum interval', async (t) => {
  const c = clock()
  const gate = new ConversionGate({ webhook: 'w', outageLimitMs: 600_000, minTrialIntervalMs: 100, maxTrialIntervalMs: 400, now: c.now })
  gate.failed(await gate.acquire(), outage)
  const intervals = [gate.nextTrialInMs]
  for (let i = 0; i < 3; i++) {
    c.advance(gate.nextTrialInMs)
    const trial = await gate.acquire()
    t.ok(trial.trial, `trial ${i + 1} goes once its time has come`)
    gate.failed(trial, outage)
    intervals.push(gate.nextTrialInMs)
  }
  t.same(intervals, [100, 200, 400, 400], 'the interval doubles up to the maximum')
})

t.test('withRetry and the conversion gate', async (t) => {
  const refusal = () => new KubeApiError(500, 'PATCH', '/x', { kind: 'Status', message: `${PREFIX}bad object` }, undefined)
  const down = () =>
    new KubeApiError(500, 'PATCH', '/x', { kind: 'Status', message: `${PREFIX}Post "https://c": connection refused` }, undefined)

  let calls = 0
  await t.rejects(
    withRetry(
      async () => {
        calls++
        throw refusal()
      },
      { maxAttempts: 5, baseDelayMs: 1, conversion: new ConversionGate({ webhook: 'w', outageLimitMs: 1000 }) },
    ),
    /bad object/,
  )
  t.equal(calls, 1, 'a refusal is not retried')

  calls = 0
  await t.rejects(
    withRetry(
      async () => {
        calls++
        throw refusal()
      },
      { maxAttempts: 5, baseDelayMs: 1 },
    ),
  )
  t.equal(calls, 1, 'not even without a gate')

  calls = 0
  const gate = new ConversionGate({ webhook: 'w', outageLimitMs: 60_000, minTrialIntervalMs: 1, maxTrialIntervalMs: 2 })
  const result = await withRetry(
    async () => {
      calls++
      if (calls <= 6) throw down()
      return 'converted'
    },
    { maxAttempts: 2, baseDelayMs: 1, conversion: gate },
  )
  t.equal(result, 'converted', 'an outage longer than maxAttempts is ridden out')
  t.equal(calls, 7)
  t.notOk(gate.open, 'and the success closed the gate')
  t.equal(gate.outages, 1)

  const limited = new ConversionGate({ webhook: 'https://c', outageLimitMs: 50, minTrialIntervalMs: 1, maxTrialIntervalMs: 5 })
  await t.rejects(
    withRetry(
      async () => {
        throw down()
      },
      { maxAttempts: 2, baseDelayMs: 1, conversion: limited },
    ),
    { code: 'CRDM_CONVERSION_OUTAGE' },
    'past the outage limit the request fails with the gate error',
  )

  calls = 0
  const plain = await withRetry(
    async () => {
      calls++
      if (calls === 1) throw down()
      return 'ok'
    },
    { maxAttempts: 3, baseDelayMs: 1 },
  )
  t.equal(plain, 'ok', 'without a gate an outage error is an ordinary retryable 500')
})
