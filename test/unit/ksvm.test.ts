import t from 'tap'
import { RunLock } from '../../src/controller/run-lock.js'
import {
  condition,
  conditionForResult,
  isFinished,
  resolutionFailure,
  targetOf,
  type StorageVersionMigration,
} from '../../src/controller/ksvm-state.js'
import { CrdMigratorError } from '../../src/errors.js'
import { KubeApiError } from '../../src/kube/api-errors.js'
import { KubeUnreachableError } from '../../src/kube/connection-errors.js'
import { collectionPath, objectPath } from '../../src/kube/paths.js'
import { describeResourceName, parseResourceName } from '../../src/kube/resources.js'
import type { MigrationResult } from '../../src/migrator/context.js'
import { until } from '../helpers/until.js'

const svm = (
  spec: StorageVersionMigration['spec'],
  conditions: Array<{ type: 'Running' | 'Succeeded' | 'Failed'; status: 'True' | 'False' }> = [],
) => ({
  metadata: { name: 'm' },
  spec,
  status: { conditions },
})

t.test('targetOf and isFinished', async (t) => {
  t.same(targetOf(svm({ resource: { group: '', version: 'v1', resource: 'secrets' } })), {
    resource: { group: '', version: 'v1', resource: 'secrets' },
  })
  t.same(
    targetOf(svm({ resource: { resource: 'secrets' } })),
    { resource: { group: '', version: undefined, resource: 'secrets' } },
    'group and version may be left out',
  )
  t.same(targetOf(svm({ resource: { group: 'apps', version: 'v1' } })), { invalid: 'spec.resource.resource is empty' })
  t.same(targetOf(svm(undefined)), { invalid: 'spec.resource.resource is empty' })
  t.notOk(isFinished(svm({}, [{ type: 'Running', status: 'True' }])))
  t.notOk(isFinished(svm({}, [{ type: 'Succeeded', status: 'False' }])))
  t.ok(isFinished(svm({}, [{ type: 'Succeeded', status: 'True' }])))
  t.ok(isFinished(svm({}, [{ type: 'Failed', status: 'True' }])))
})

const result = (r: Partial<MigrationResult>): MigrationResult => ({
  crd: 'widgets.example.com',
  outcome: 'Succeeded',
  reason: 'done',
  storageVersion: 'v2',
  crdUid: 'u',
  generation: 1,
  storedVersionsBefore: ['v1', 'v2'],
  storedVersionsAfter: ['v2'],
  durationMs: 1,
  leftFrozen: false,
  ...r,
})

t.test('conditionForResult: the condition a run leaves, and whether the object is done', async (t) => {
  const now = new Date('2026-11-23T12:00:00.123Z')
  const rows: Array<[string, Partial<MigrationResult>, string, string, string, boolean]> = [
    ['succeeded', { outcome: 'Succeeded' }, 'Succeeded', 'True', 'Succeeded', true],
    ['nothing to do', { outcome: 'Skipped', skipReason: 'up-to-date' }, 'Succeeded', 'True', 'UpToDate', true],
    ['failed', { outcome: 'Failed', errorCode: 'CRDM_OBJECTS_FAILED' }, 'Failed', 'True', 'CRDM_OBJECTS_FAILED', true],
    [
      'blocked by a conversion webhook',
      { outcome: 'Blocked', errorCode: 'CRDM_CONVERSION_OUTAGE' },
      'Running',
      'False',
      'ConversionWebhookUnavailable',
      false,
    ],
    ['another run of ours holds the freeze', { outcome: 'Skipped', skipReason: 'in-progress' }, 'Running', 'False', 'Waiting', false],
    ['another tool holds the freeze', { outcome: 'Skipped', skipReason: 'frozen-by-another' }, 'Running', 'False', 'Waiting', false],
    ['a CRD that cannot be migrated', { outcome: 'Skipped', skipReason: 'blocked' }, 'Failed', 'True', 'NotMigratable', true],
  ]
  for (const [name, r, type, status, reason, finished] of rows) {
    const v = conditionForResult(result(r), now)
    t.match(v, { condition: { type, status, reason, lastUpdateTime: '2026-11-23T12:00:00Z' }, finished }, name)
  }
  t.equal(
    conditionForResult(result({ outcome: 'Failed', errorCode: 'CRDM_KUBE_API', reason: 'x'.repeat(5000) })).condition.message,
    `${'x'.repeat(1024)}…(5000 characters)`,
    'messages are cut to 1024 characters, and say so',
  )
})

/** A message without its version names (v1, v2beta1): what is left has no number when nothing is counted. */
const noVersions = (message: string | undefined) => (message ?? '').replace(/\bv\d+\w*/g, 'vN')

t.test('a condition never counts objects: its creator may not be allowed to list them (issue 44, item 6)', async (t) => {
  const counts = { seen: 400, rewritten: 390, current: 7, conflict: 2, gone: 1, failed: 0, resumed: 0 }
  const storage = { counts, failures: [] } as unknown as MigrationResult['storage']
  const succeeded = conditionForResult(
    result({ storage, reason: '390 of 400 object(s) rewritten in v2, 7 already current, storedVersions ["v2"]' }),
  ).condition
  t.match(succeeded, {
    type: 'Succeeded',
    reason: 'Succeeded',
    message: /^every object rewritten in v2, storedVersions \["v2"\]; how many objects is not said here/,
  })
  t.notMatch(noVersions(succeeded.message), /\d/, 'no number in the message but the versions')
  const builtin = conditionForResult(
    result({ storage, crdUid: undefined, storageVersion: 'v1', reason: '390 of 400 object(s) rewritten through v1, 7 already current' }),
  ).condition
  t.match(builtin.message, /^every object rewritten in v1; how many objects/, 'a built-in resource: no storedVersions')
  t.notMatch(noVersions(builtin.message), /\d/)
  for (const [code, reason] of [
    ['CRDM_OBJECTS_FAILED', '3 object(s) could not be rewritten, e.g. team-b/payroll: 422'],
    ['CRDM_CONVERSION_REFUSED', 'the conversion webhook refused 3 object(s), which could not be rewritten: team-b/a (no)'],
    ['CRDM_STASH_FAILED', '2 stashed copies not migrated: team-b/x (gone)'],
    ['CRDM_DATA_LOSS', 'spec.data[…] removed (3 objects)'],
    ['CRDM_UNFREEZE_FAILED', 'the freeze could not be lifted (403); the run itself had ended Succeeded'],
  ] as const) {
    const failed = conditionForResult(result({ outcome: code === 'CRDM_DATA_LOSS' ? 'Blocked' : 'Failed', errorCode: code, reason }))
    t.match(failed, { condition: { type: 'Failed', reason: code }, finished: true }, code)
    t.notMatch(failed.condition.message, /\d|team-b/, `${code}: no count, no object named`)
  }
})

t.test('a condition message is text from outside: cleaned as sanitize.ts cleans it (issue 44, item 3)', async (t) => {
  // What a StorageVersionMigration's creator can put in spec.resource, echoed in the message.
  const rows: [string, string, string][] = [
    ['ESC sequence (window title)', 'no resource \u001b]0;pwned\u0007widgets', 'no resource widgets'],
    ['CSI colour', 'no resource \u001b[31mwidgets\u001b[0m', 'no resource widgets'],
    ['BEL', 'a\u0007b', 'ab'],
    ['C1 CSI and other C1', 'a\u009b2Jb\u0080c', 'abc'],
    ['line and paragraph separators', 'a\u2028b\u2029c', 'a b c'],
    ['bidirectional override', 'widgets\u202eexe.', 'widgetsexe.'],
    ['newline forging a line', 'x\nSucceeded: all good', 'x Succeeded: all good'],
  ]
  for (const [name, raw, clean] of rows) {
    t.equal(condition('Failed', 'True', 'CRDM_RESOURCE_NOT_FOUND', raw).message, clean, name)
    t.equal(
      conditionForResult(result({ outcome: 'Failed', errorCode: 'CRDM_KUBE_API', reason: raw })).condition.message,
      clean,
      `${name} (a run's reason)`,
    )
  }
})

t.test('resolutionFailure: a 403 or a resource not served fails the object for good; anything else is retried', async (t) => {
  const now = new Date('2026-11-23T12:00:00.123Z')
  const status = (code: number, message: string) =>
    new KubeApiError(code, 'GET', '/apis/example.com/v2', { kind: 'Status', message }, undefined)
  const forbidden = resolutionFailure(status(403, 'forbidden: User "m" cannot get path "/apis/example.com/v2"'), now)
  t.match(
    forbidden,
    {
      type: 'Failed',
      status: 'True',
      reason: 'CRDM_FORBIDDEN',
      message:
        /^the migrator may not read .*GET \/apis\/example\.com\/v2: 403 forbidden: User "m" cannot get .*create a new StorageVersionMigration/,
      lastUpdateTime: '2026-11-23T12:00:00Z',
    },
    'discovery refused: Failed, saying what to do',
  )
  t.match(
    resolutionFailure(new CrdMigratorError('CRDM_RESOURCE_NOT_FOUND', 'cannot migrate gadgets.example.com: no resource gadgets'), now),
    { type: 'Failed', status: 'True', reason: 'CRDM_RESOURCE_NOT_FOUND', message: /no resource gadgets/ },
    'not served: Failed',
  )
  const retried: Array<[string, unknown]> = [
    ['a 500', status(500, 'etcdserver: leader changed')],
    ['a 429', status(429, 'too many requests')],
    ['a 401 (a token being rotated)', status(401, 'Unauthorized')],
    ['unreachable', new KubeUnreachableError('https://10.0.0.1', 'ECONNREFUSED', true, 3, new Error('connect ECONNREFUSED'))],
    ['a bug', new TypeError('x is undefined')],
  ]
  for (const [what, err] of retried) t.equal(resolutionFailure(err, now), undefined, `${what}: retried`)
})

t.test('parseResourceName, kubectl style', async (t) => {
  t.same(parseResourceName('secrets'), { group: '', resource: 'secrets' })
  t.same(parseResourceName('deployments.apps'), { group: 'apps', resource: 'deployments' })
  t.same(parseResourceName('widgets.example.com'), { group: 'example.com', resource: 'widgets' })
  t.same(parseResourceName('widgets.v2.example.com'), { group: 'example.com', version: 'v2', resource: 'widgets' })
  t.same(parseResourceName('widgets.v1beta1.example.com'), { group: 'example.com', version: 'v1beta1', resource: 'widgets' })
  t.same(parseResourceName('v2.example.com'), { group: 'example.com', resource: 'v2' }, 'a resource named like a version stays a resource')
  t.throws(() => parseResourceName(''), { code: 'CRDM_CONFIG_INVALID' })
  t.throws(() => parseResourceName('.apps'), { code: 'CRDM_CONFIG_INVALID' })
  t.equal(describeResourceName({ group: '', resource: 'secrets' }), 'secrets')
  t.equal(describeResourceName({ group: 'example.com', version: 'v2', resource: 'widgets' }), 'widgets.v2.example.com')
})

t.test('paths of the core group', async (t) => {
  const secrets = { group: '', version: 'v1', plural: 'secrets', kind: 'Secret', namespaced: true }
  t.equal(collectionPath(secrets), '/api/v1/secrets')
  t.equal(objectPath(secrets, 'ns', 's'), '/api/v1/namespaces/ns/secrets/s')
  t.equal(objectPath({ ...secrets, group: 'apps', plural: 'deployments' }, 'ns', 'd'), '/apis/apps/v1/namespaces/ns/deployments/d')
})

t.test('RunLock: one run per key at a time, others in parallel', async (t) => {
  const lock = new RunLock()
  const log: string[] = []
  const task =
    (name: string, gate: Promise<void> = Promise.resolve()) =>
    async () => {
      log.push(`${name}+`)
      await gate
      log.push(`${name}-`)
      return name
    }
  // a1 holds key a until b1 has run start to end: b1 must not wait for it.
  let releaseA1!: () => void
  const a1Released = new Promise<void>((resolve) => (releaseA1 = resolve))
  const running = Promise.all([lock.run('a', task('a1', a1Released)), lock.run('a', task('a2')), lock.run('b', task('b1'))])
  await until(
    'b1 to run while a1 holds key a',
    5_000,
    async () => [...log],
    (l) => l.includes('b1-'),
  ).finally(releaseA1)
  const results = await running
  t.same(results, ['a1', 'a2', 'b1'])
  t.ok(log.indexOf('a1-') < log.indexOf('a2+'), 'the second run of a key starts after the first ended')
  t.ok(log.indexOf('b1+') < log.indexOf('a1-'), 'another key does not wait')
  await t.rejects(
    lock.run('a', () => Promise.reject(new Error('boom'))),
    /boom/,
  )
  t.equal(await lock.run('a', async () => 'after a failure'), 'after a failure', 'a failed run does not block the next')
})
