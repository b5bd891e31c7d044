/**
 * Issue 44, item 3: whoever may create a StorageVersionMigration chooses the text of its
 * spec, and the controller echoes it (the resource's name, group and version) in the
 * object's status condition and in its log. Created on the real API server with ESC
 * sequences, BEL, C1 controls, U+2028/U+2029 and U+202E (a bidirectional override) in
 * each field the controller quotes, every object ends Failed with a clean message that
 * still names what was asked for, and every log line the controller wrote, through the
 * process logger's options (pinoOptions, what `serve` uses), is JSON with those
 * characters as \u escapes and the same values once parsed.
 */
import { pino } from 'pino'
import t from 'tap'
import { ensureKsvm, installKsvmCrd } from '../../dev/bench/ksvm.js'
import { ConfigSchema } from '../../src/config/schema.js'
import { KsvmMigrationController } from '../../src/controller/ksvm-controller.js'
import { KSVM_API, storageVersionMigration, type StorageVersionMigration } from '../../src/controller/ksvm-state.js'
import { RunLock } from '../../src/controller/run-lock.js'
import { pinoOptions } from '../../src/log.js'
import { httpFor } from '../helpers/cluster.js'
import { getControlPlane, uniqueName } from '../helpers/controlplane.js'
import { crdWithObjects } from '../helpers/fixtures.js'
import { until } from '../helpers/until.js'

/** Control, separator and format characters: none may be left in a condition or raw in a log line. */
// eslint-disable-next-line no-control-regex -- control characters are what it matches
const RAW = /[\u0000-\u001f\u007f-\u009f\u2028\u2029\p{Cf}]/u
/** What the creator writes: a window title (OSC, BEL), a colour, C1 CSI clear screen, NEL, U+2028/2029, U+202E. */
const HOSTILE = '\u001b]0;pwned\u0007\u001b[31m\u009b2J\u0085x\u2028y\u2029z\u202eexe.'

const cp = await getControlPlane()
const admin = httpFor(cp.kubeconfigPath)
const ksvm = await ensureKsvm()
if (!ksvm) throw new Error('kube-storage-version-migrator is not built: bash scripts/build-ksvm.sh')
await installKsvmCrd(admin, ksvm.crd)

t.test('hostile text in a StorageVersionMigration spec: a clean status condition and clean JSON log lines', async (t) => {
  const { group } = await crdWithObjects(admin, { prefix: 'svmtext', count: 2, labels: { 'crd-migrator.io/managed': 'true' } })
  const objects = [
    { field: 'spec.resource.resource', resource: { group, version: 'v2', resource: `widgets${HOSTILE}` } },
    { field: 'spec.resource.group', resource: { group: `${group}${HOSTILE}`, version: 'v2', resource: 'widgets' } },
    { field: 'spec.resource.version', resource: { group, version: `v2${HOSTILE}`, resource: 'widgets' } },
  ].map((o) => ({ ...o, name: uniqueName('svmtext') }))
  const names = new Set(objects.map((o) => o.name))

  const lines: string[] = []
  const logger = pino(pinoOptions('debug'), { write: (s: string) => lines.push(s) })
  const stop = new AbortController()
  const controller = new KsvmMigrationController({
    http: admin,
    config: ConfigSchema.parse({ migrator: { storageVersionMigrations: true } }),
    logger,
    owner: 'svm-text-test',
    lock: new RunLock(),
    scope: (svm) => names.has(svm.metadata.name),
  })
  const running = controller.run(stop.signal)
  t.teardown(async () => {
    stop.abort()
    await running
    for (const o of objects) await admin.request({ method: 'DELETE', path: `${KSVM_API}/${o.name}` }).catch(() => {})
  })

  for (const o of objects) {
    await admin.request({ method: 'POST', path: KSVM_API, body: storageVersionMigration({ name: o.name }, o.resource) })
    const stored = (await admin.request<StorageVersionMigration>({ method: 'GET', path: `${KSVM_API}/${o.name}` })).body
    t.same(stored.spec?.resource, o.resource, `${o.field}: the API server stores the text as written`)
  }
  for (const o of objects) {
    const svm = await until(
      `StorageVersionMigration ${o.name} (${o.field}) finished`,
      60_000,
      async () => (await admin.request<StorageVersionMigration>({ method: 'GET', path: `${KSVM_API}/${o.name}` })).body,
      (s) => (s.status?.conditions ?? []).some((c) => c.type === 'Failed' && c.status === 'True'),
    )
    const c = svm.status!.conditions!.find((c) => c.type === 'Failed')!
    t.equal(c.reason, 'CRDM_RESOURCE_NOT_FOUND', `${o.field}: Failed, the resource is not served`)
    t.notOk(RAW.test(c.message ?? ''), `${o.field}: no control, separator or format character in the message`)
    t.notOk(RAW.test(JSON.stringify(svm.status)), `${o.field}: none anywhere in the status`)
    t.match(c.message, /x y z ?exe\./, `${o.field}: the visible text kept, line and paragraph separators as spaces`)
    t.notOk(c.message!.includes('pwned'), `${o.field}: the window title dropped whole`)
    t.comment(`${o.field}: ${c.message}`)
  }

  const ours = lines.filter((l) => objects.some((o) => l.includes(o.name)))
  t.ok(ours.length >= objects.length, `${ours.length} log lines about these objects`)
  const quoting = ours.filter((l) => l.includes('\\u202e'))
  t.ok(quoting.length > 0, `${quoting.length} of them quote the spec (U+202E as \\u202e)`)
  for (const line of ours) {
    t.notOk(RAW.test(line.slice(0, -1)), 'no control, separator or format character raw in a log line')
    const entry = JSON.parse(line) as Record<string, unknown>
    t.type(entry['msg'], 'string', 'still JSON')
  }
  t.ok(
    quoting.some((l) => stringsOf(JSON.parse(l)).some((s) => s.includes(HOSTILE))),
    'parsed, a line gives back every character of the spec (escaped, not lost)',
  )
})

/** Every string value in a parsed log line, however deep. */
function stringsOf(value: unknown): string[] {
  if (typeof value === 'string') return [value]
  if (value === null || typeof value !== 'object') return []
  return Object.values(value).flatMap(stringsOf)
}
