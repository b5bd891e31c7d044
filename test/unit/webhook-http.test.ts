import t, { type Test } from 'tap'
import { pino } from 'pino'
import { Registry } from 'prom-client'
import { DEFAULT_MIGRATING_ANNOTATION, DEFAULT_MIGRATOR_USERS } from '../../src/config/annotations.js'
import { LOG_MESSAGE_MAX, LOG_STRING_MAX, MAX_JSON_DEPTH } from '../../src/webhook/limits.js'
import { buildWebhookApp, DEFAULT_BODY_LIMIT_BYTES, type WebhookAppOptions } from '../../src/webhook/server.js'
import { capturingLogger } from '../helpers/log-capture.js'
import { RepeatSampler } from '../../src/webhook/repeat-sampler.js'

const UID = 'a9b1c2d3-0000-4000-8000-000000000001'
const FROZEN = { [DEFAULT_MIGRATING_ANNOTATION]: 'true' }

function crd(storage: string, annotations?: Record<string, string>, padding = 0) {
  return {
    apiVersion: 'apiextensions.k8s.io/v1',
    kind: 'CustomResourceDefinition',
    metadata: { name: 'widgets.example.com', ...(annotations ? { annotations } : {}) },
    spec: {
      group: 'example.com',
      versions: ['v1alpha1', 'v1'].map((name) => ({
        name,
        served: true,
        storage: name === storage,
        schema: { openAPIV3Schema: { type: 'object', description: 'x'.repeat(padding) } },
      })),
    },
  }
}

function review(request: Record<string, unknown> = {}) {
  return {
    apiVersion: 'admission.k8s.io/v1',
    kind: 'AdmissionReview',
    request: {
      uid: UID,
      kind: { group: 'apiextensions.k8s.io', version: 'v1', kind: 'CustomResourceDefinition' },
      resource: { group: 'apiextensions.k8s.io', version: 'v1', resource: 'customresourcedefinitions' },
      name: 'widgets.example.com',
      operation: 'UPDATE',
      userInfo: { username: 'alice', groups: ['system:authenticated'] },
      oldObject: crd('v1alpha1', FROZEN),
      object: crd('v1', FROZEN),
      ...request,
    },
  }
}

function makeApp(t: Test, options: WebhookAppOptions = {}) {
  const registry = new Registry()
  const logs = capturingLogger()
  const app = buildWebhookApp({ registry, logger: logs.logger, ...options })
  t.teardown(() => app.close())
  return { app, registry, logs }
}

const post = (app: ReturnType<typeof buildWebhookApp>, payload: unknown, contentType = 'application/json') =>
  app.inject({
    method: 'POST',
    url: '/validate-crd',
    headers: { 'content-type': contentType },
    payload: typeof payload === 'string' ? payload : JSON.stringify(payload),
  })

t.test('a storage flip on a frozen CRD is denied, uid echoed', async (t) => {
  const { app } = makeApp(t)
  const res = await post(app, review())
  t.equal(res.statusCode, 200)
  t.match(res.headers['content-type'], /application\/json/)
  const body = res.json()
  t.equal(body.apiVersion, 'admission.k8s.io/v1')
  t.equal(body.kind, 'AdmissionReview')
  t.equal(body.response.uid, UID)
  t.equal(body.response.allowed, false)
  t.equal(body.response.status.code, 403)
  t.match(body.response.status.message, /widgets\.example\.com.*from v1alpha1 to v1/)
})

t.test('an allowed review', async (t) => {
  const { app } = makeApp(t)
  const res = await post(app, review({ object: crd('v1alpha1', FROZEN) }))
  t.equal(res.statusCode, 200)
  t.same(res.json().response, { uid: UID, allowed: true })
})

t.test('configured policy reaches the decision', async (t) => {
  const { app } = makeApp(t, { policy: { migratorUsers: ['alice'] } })
  const res = await post(app, review({ oldObject: crd('v1'), object: crd('v1', FROZEN) }))
  t.equal(res.json().response.allowed, true, 'alice is the migrator here')
})

t.test('charset parameter on the content type is fine', async (t) => {
  const { app } = makeApp(t)
  const res = await post(app, review(), 'application/json; charset=utf-8')
  t.equal(res.statusCode, 200)
})

t.test('malformed JSON is a 400 with a JSON error', async (t) => {
  const { app, registry } = makeApp(t)
  const res = await post(app, '{"apiVersion": "admission.k8s.io/v1", ')
  t.equal(res.statusCode, 400)
  t.match(res.json(), { error: /^body is not valid JSON: .*(end of JSON|Expected|Unexpected)/ })
  t.match(await registry.metrics(), /crd_migrator_admission_bad_requests_total\{code="400"\} 1/)
})

t.test('an empty JSON body is a 400', async (t) => {
  const { app } = makeApp(t)
  const res = await post(app, '')
  t.equal(res.statusCode, 400)
  t.match(res.json(), { error: /empty/ })
})

t.test('wrong apiVersion is a 400 saying so', async (t) => {
  const { app } = makeApp(t)
  const res = await post(app, { ...review(), apiVersion: 'admission.k8s.io/v1beta1' })
  t.equal(res.statusCode, 400)
  t.match(res.json().error, /^apiVersion must be "admission\.k8s\.io\/v1".*got "admission\.k8s\.io\/v1beta1"/)
})

t.test('wrong kind is a 400', async (t) => {
  const { app } = makeApp(t)
  const res = await post(app, { ...review(), kind: 'Pod' })
  t.equal(res.statusCode, 400)
  t.equal(res.json().error, 'kind must be "AdmissionReview", got "Pod"')
})

t.test('missing request is a 400', async (t) => {
  const { app } = makeApp(t)
  const res = await post(app, { apiVersion: 'admission.k8s.io/v1', kind: 'AdmissionReview' })
  t.equal(res.statusCode, 400)
  t.equal(res.json().error, 'AdmissionReview.request must be an object, got nothing')
})

t.test('missing uid is a 400', async (t) => {
  const { app } = makeApp(t)
  const body = review()
  delete (body.request as Record<string, unknown>)['uid']
  const res = await post(app, body)
  t.equal(res.statusCode, 400)
  t.equal(res.json().error, 'request.uid must be a non-empty string, got nothing')
})

t.test('wrong content type is a 415 with a JSON error', async (t) => {
  const { app, registry } = makeApp(t)
  for (const type of ['text/plain', 'application/x-www-form-urlencoded', 'application/yaml']) {
    const res = await post(app, JSON.stringify(review()), type)
    t.equal(res.statusCode, 415, type)
    t.match(res.json(), { error: `content-type must be application/json, got "${type}"` })
  }
  t.match(await registry.metrics(), /crd_migrator_admission_bad_requests_total\{code="415"\} 3/)
})

t.test('no content type is a 415', async (t) => {
  const { app } = makeApp(t)
  const res = await app.inject({ method: 'POST', url: '/validate-crd', payload: Buffer.from(JSON.stringify(review())) })
  t.equal(res.statusCode, 415)
  t.match(res.json(), { error: /content-type must be application\/json/ })
})

t.test('a body over the configured limit is a 413', async (t) => {
  const { app } = makeApp(t, { bodyLimitBytes: 64 * 1024 })
  const res = await post(app, review({ object: crd('v1', FROZEN, 100 * 1024) }))
  t.equal(res.statusCode, 413)
  t.same(res.json(), { error: 'request body exceeds the limit of 65536 bytes' })
})

t.test('the default limit (3 MiB) takes object and oldObject of a 1.5 MB CRD and refuses more', async (t) => {
  const { app } = makeApp(t)
  t.equal(DEFAULT_BODY_LIMIT_BYTES, 3 * 1024 * 1024)
  // crd() pads each of its two versions: two 1.5 MB objects.
  const pad = 750_000
  const payload = JSON.stringify(review({ oldObject: crd('v1alpha1', FROZEN, pad), object: crd('v1alpha1', FROZEN, pad) }))
  t.ok(payload.length > 3_000_000 && payload.length < DEFAULT_BODY_LIMIT_BYTES, `a ${payload.length}-byte review`)
  const ok = await post(app, payload)
  t.equal(ok.statusCode, 200)
  t.equal(ok.json().response.allowed, true)
  const huge = await post(app, review({ object: crd('v1', FROZEN, DEFAULT_BODY_LIMIT_BYTES) }))
  t.equal(huge.statusCode, 413)
  t.same(huge.json(), { error: `request body exceeds the limit of ${DEFAULT_BODY_LIMIT_BYTES} bytes` })
})

/** A review whose object is `value` nested in `depth` arrays (raw text: no recursion to build it). */
function nestedReview(depth: number, open = '[', close = ']', value = '0'): string {
  const text = JSON.stringify(review({ object: '@@' }))
  return text.replace('"@@"', `${open.repeat(depth)}${value}${close.repeat(depth)}`)
}

t.test('nesting deeper than the limit is a 400 before JSON.parse, naming the limit', async (t) => {
  const { app, registry, logs } = makeApp(t)
  const parse = JSON.parse
  let body = ''
  let parsed = 0
  JSON.parse = (...args: Parameters<typeof JSON.parse>) => {
    if (args[0] === body) parsed++
    return parse(...args)
  }
  t.teardown(() => {
    JSON.parse = parse
  })
  // The envelope adds 2 levels (review, request); the object starts at level 3.
  for (const [what, text] of [
    ['arrays', nestedReview(MAX_JSON_DEPTH)],
    ['objects', nestedReview(MAX_JSON_DEPTH, '{"a":', '}')],
    ['a million levels', nestedReview(1_000_000)],
  ] as const) {
    body = text
    parsed = 0
    const res = await post(app, text)
    t.equal(parsed, 0, `${what}: JSON.parse never called`)
    t.equal(res.statusCode, 400, what)
    t.same(
      res.json(),
      { error: `body nests JSON objects and arrays deeper than ${MAX_JSON_DEPTH} levels, the limit; refused before parsing` },
      what,
    )
  }
  t.match(await registry.metrics(), /crd_migrator_admission_bad_requests_total\{code="400"\} 3/)
  t.ok(
    logs.lines().some((l) => l['msg'] === 'bad request' && /deeper than 512/.test(String(l['error']))),
    'logged as a bad request',
  )

  // Exactly at the limit: parsed and judged (an object that is not an object: denied).
  const atLimit = await post(app, nestedReview(MAX_JSON_DEPTH - 2))
  t.equal(atLimit.statusCode, 200, 'nesting up to the limit is parsed')
  t.equal(atLimit.json().response.allowed, false)
})

t.test('brackets and quotes inside strings do not count as nesting', async (t) => {
  const { app } = makeApp(t)
  const tricky = '['.repeat(2000) + '\\"{{{' + '\\"'.repeat(100) + '\\'
  const res = await post(app, review({ object: crd('v1alpha1', { ...FROZEN, 'example.com/note': tricky }) }))
  t.equal(res.statusCode, 200)
  t.equal(res.json().response.allowed, true)
})

t.test('more objects and arrays than the limit allows is a 400 before JSON.parse', async (t) => {
  const { app } = makeApp(t, { bodyLimitBytes: 120_000 })
  // One per 12 bytes of the limit: 10,000 here. Flat, so only the count is over.
  const many = JSON.stringify(review({ object: '@@' })).replace('"@@"', `[${'[],'.repeat(10_000)}[]]`)
  const res = await post(app, many)
  t.equal(res.statusCode, 400)
  t.same(res.json(), { error: 'body holds more than 10000 JSON objects and arrays, the limit; refused before parsing' })
  const fewer = JSON.stringify(review({ object: '@@' })).replace('"@@"', `[${'[],'.repeat(9_000)}[]]`)
  t.equal((await post(app, fewer)).statusCode, 200, 'fewer are parsed')
})

t.test('what comes from the request is cut short in the log line', async (t) => {
  const { app, logs } = makeApp(t)
  const name = `${'n'.repeat(1_000_000)}.example.com`
  const user = 'u'.repeat(100_000)
  const groups = Array.from({ length: 1000 }, (_, i) => `group-${i}-${'g'.repeat(1000)}`)
  const res = await post(app, review({ name, userInfo: { username: user, groups } }))
  t.equal(res.statusCode, 200)
  const line = logs.lines().find((l) => l['msg'] === 'admission denied')
  t.ok(line, 'the review is logged')
  t.equal(line?.['crd'], `${'n'.repeat(LOG_STRING_MAX)}… (${name.length} characters)`)
  t.equal(line?.['user'], `${'u'.repeat(LOG_STRING_MAX)}… (100000 characters)`)
  const logged = line?.['groups'] as string[]
  t.equal(logged.length, 33, '32 groups and a count of the rest')
  t.equal(logged[32], '… (968 more)')
  t.ok(
    logged.slice(0, 32).every((g) => g.length < LOG_STRING_MAX + 30),
    'each group cut',
  )
  t.ok(String(line?.['detail']).length <= LOG_MESSAGE_MAX + 30, 'the decision message cut')
  t.ok(JSON.stringify(line).length < 16 * 1024, `the whole line is ${JSON.stringify(line).length} bytes`)

  const badUid = await post(app, review({ uid: 'x'.repeat(500_000), operation: 'NOPE' }))
  t.equal(badUid.statusCode, 400)
  const warn = logs.lines().find((l) => l['msg'] === 'rejected request that is not a well-formed AdmissionReview')
  t.ok(JSON.stringify(warn).length < 4096, 'a rejected review is logged short too')
})

t.test('a review of another resource gets an AdmissionReview answer (allowed, warning)', async (t) => {
  const { app } = makeApp(t)
  const res = await post(
    app,
    review({
      kind: { group: '', version: 'v1', kind: 'ConfigMap' },
      resource: { group: '', version: 'v1', resource: 'configmaps' },
      object: { metadata: { name: 'x' } },
      oldObject: { metadata: { name: 'x' } },
    }),
  )
  t.equal(res.statusCode, 200)
  const response = res.json().response
  t.equal(response.uid, UID)
  t.equal(response.allowed, true)
  t.match(response.warnings[0], /core\/v1 configmaps/)
})

t.test('UPDATE without oldObject gets a denied AdmissionReview', async (t) => {
  const { app } = makeApp(t)
  const body = review()
  delete (body.request as Record<string, unknown>)['oldObject']
  const res = await post(app, body)
  t.equal(res.statusCode, 200)
  const response = res.json().response
  t.equal(response.uid, UID)
  t.equal(response.allowed, false)
  t.equal(response.status.code, 400)
  t.match(response.status.message, /request\.oldObject/)
})

t.test('an object that is not an object gets a denied AdmissionReview', async (t) => {
  const { app } = makeApp(t)
  const res = await post(app, review({ object: 'widgets' }))
  t.equal(res.statusCode, 200)
  t.equal(res.json().response.allowed, false)
})

t.test('each review logs one line with uid, crd, user, operation, decision, reason', async (t) => {
  const { app, logs } = makeApp(t)
  await post(app, review())
  // A ServiceAccount name is the migrator only with a ServiceAccount token's credential id.
  const migrator = {
    username: DEFAULT_MIGRATOR_USERS[0],
    groups: [],
    extra: { 'authentication.kubernetes.io/credential-id': ['JTI=0b0c5d6e-0000-4000-8000-000000000001'] },
  }
  await post(app, review({ userInfo: migrator, oldObject: crd('v1'), object: crd('v1', FROZEN) }))
  const lines = logs.lines().filter((l) => l['uid'] === UID)
  t.equal(lines.length, 2)
  t.match(lines[0], {
    level: 30,
    uid: UID,
    crd: 'widgets.example.com',
    user: 'alice',
    operation: 'UPDATE',
    decision: 'denied',
    reason: 'storage-version-frozen',
    msg: 'admission denied',
  })
  // A plain allowance at debug, a denial at info.
  t.match(lines[1], { level: 20, user: DEFAULT_MIGRATOR_USERS[0], decision: 'allowed', reason: 'allowed', msg: 'admission allowed' })
})

t.test('at info, a plain allowance logs nothing; a denial and a break-glass allowance (with warnings) log a line', async (t) => {
  const { logger, lines } = capturingLogger('info')
  const app = buildWebhookApp({ logger, policy: { breakGlassGroups: ['break-glass'] } })
  t.teardown(() => app.close())
  const migrator = {
    username: DEFAULT_MIGRATOR_USERS[0],
    groups: [],
    extra: { 'authentication.kubernetes.io/credential-id': ['JTI=0b0c5d6e-0000-4000-8000-000000000001'] },
  }
  const allowed = await post(app, review({ userInfo: migrator, oldObject: crd('v1'), object: crd('v1', FROZEN) }))
  t.equal(allowed.json().response.allowed, true)
  const denied = await post(app, review())
  t.equal(denied.json().response.allowed, false)
  const breakGlass = await post(
    app,
    review({ userInfo: { username: 'oncall', groups: ['break-glass'] }, oldObject: crd('v1', FROZEN), object: crd('v1') }),
  )
  t.equal(breakGlass.json().response.allowed, true)
  t.ok(breakGlass.json().response.warnings?.length, 'the break-glass allowance carries a warning')
  const logged = lines().filter((l) => l['uid'] === UID)
  t.same(
    logged.map((l) => [l['level'], l['user'], l['decision']]),
    [
      [30, 'alice', 'denied'],
      [30, 'oncall', 'allowed'],
    ],
  )
})

t.test('the same denial over and over is one line per window; the next one says how many were left out', async (t) => {
  let now = 0
  const { app, logs, registry } = makeApp(t, { repeatSampler: new RepeatSampler(10_000, 1024, () => now) })
  for (let i = 0; i < 5; i++) t.equal((await post(app, review())).json().response.allowed, false)
  // Another user's denial is a line of its own.
  await post(app, review({ userInfo: { username: 'bob', groups: [] } }))
  now = 10_000
  await post(app, review())
  const denied = logs.lines().filter((l) => l['msg'] === 'admission denied')
  t.same(
    denied.map((l) => [l['user'], l['repeatsNotLogged']]),
    [
      ['alice', undefined],
      ['bob', undefined],
      ['alice', 4],
    ],
  )
  t.match(
    await registry.metrics(),
    /crd_migrator_admission_reviews_total\{[^}]*decision="denied"[^}]*\} 7$/m,
    'the metrics count every review',
  )
})

t.test('POST /validate-crd only: no health or metrics routes on the webhook, unknown routes 404', async (t) => {
  const { app } = makeApp(t)
  // /metrics, /healthz and /readyz live on the ops listener (health/plugin.ts).
  for (const url of ['/healthz', '/readyz', '/metrics']) {
    const res = await app.inject(url)
    t.equal(res.statusCode, 404, `GET ${url}`)
    t.same(res.json(), { error: `no route for GET ${url}` })
  }
  const missing = await app.inject('/nope')
  t.equal(missing.statusCode, 404)
  t.same(missing.json(), { error: 'no route for GET /nope' })
  t.equal((await app.inject('/validate-crd')).statusCode, 404, 'GET on the review path')
})

t.test('the registry shows reviews, denials, latency and bad requests', async (t) => {
  const { app, registry } = makeApp(t)
  await post(app, review())
  await post(app, review())
  await post(app, review({ object: crd('v1alpha1', FROZEN) }))
  await post(app, review({ object: crd('v1alpha1'), userInfo: { username: 'bob' } }))
  await post(app, { nope: true })
  const text = await registry.metrics()
  t.match(text, /crd_migrator_admission_reviews_total\{operation="UPDATE",decision="denied"\} 3/)
  t.match(text, /crd_migrator_admission_reviews_total\{operation="UPDATE",decision="allowed"\} 1/)
  t.match(text, /crd_migrator_admission_reviews_total\{operation="DELETE",decision="allowed"\} 0/)
  t.match(text, /crd_migrator_admission_denials_total\{reason="storage-version-frozen"\} 2/)
  t.match(text, /crd_migrator_admission_denials_total\{reason="annotation-guarded"\} 1/)
  t.match(text, /crd_migrator_admission_denials_total\{reason="delete-frozen"\} 0/)
  t.match(text, /crd_migrator_admission_review_duration_seconds_count 4/)
  t.match(text, /crd_migrator_admission_review_duration_seconds_bucket\{le="0.0001"\}/)
  t.match(text, /crd_migrator_admission_bad_requests_total\{code="400"\} 1/)
})

t.test('two apps on one registry share the metrics instead of throwing', async (t) => {
  const registry = new Registry()
  const quiet = pino({ level: 'silent' })
  const a = buildWebhookApp({ registry, logger: quiet })
  const b = buildWebhookApp({ registry, logger: quiet })
  t.teardown(async () => {
    await a.close()
    await b.close()
  })
  await post(a, review())
  await post(b, review())
  t.match(await registry.metrics(), /crd_migrator_admission_denials_total\{reason="storage-version-frozen"\} 2/)
})

t.test('/validate-crd/freeze-allowed: the entry the API server calls for users RBAC allows to freeze (issue 43)', async (t) => {
  const { app } = makeApp(t)
  const lift = review({ oldObject: crd('v1', FROZEN), object: crd('v1') })
  const send = (url: string, payload: unknown) =>
    app.inject({ method: 'POST', url, headers: { 'content-type': 'application/json' }, payload: JSON.stringify(payload) })

  const plain = (await send('/validate-crd', lift)).json()
  t.equal(plain.response.allowed, false, 'through /validate-crd: alice may not lift the freeze')
  t.match(plain.response.status.message, /crd-migrator webhook rule annotation-guarded.*verb "freeze" on customresourcedefinitions/)

  const viaRbac = (await send('/validate-crd/freeze-allowed', lift)).json()
  t.equal(viaRbac.response.allowed, true, 'through /validate-crd/freeze-allowed: she may')
  t.match(viaRbac.response.warnings, [/^break-glass override by user "alice" \(RBAC allows verb "freeze"/])
  t.same(viaRbac.response.auditAnnotations, { reason: 'break-glass-override' }, 'audited')

  const flip = (await send('/validate-crd/freeze-allowed', review())).json()
  t.equal(flip.response.allowed, false, 'but never moves storage on a frozen CRD')
  t.match(flip.response.status.message, /for any user/)
})
