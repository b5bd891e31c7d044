import t from 'tap'
import {
  builtinMigrationMessage,
  builtinMigrationRunning,
  builtinMigrationState,
  conditionText,
  MAX_CONDITION_TEXT,
  migrationsFor,
  type BuiltinMigration,
} from '../../src/kube/builtin-migrations.js'
import { builtinBusyReason, builtinMigrationName, unbackedConditionText } from '../../src/migrator/phases/builtin-storage.js'
import { describeBuiltin } from '../../src/cli/status/run-status.js'
import type { CustomResourceDefinition } from '../../src/kube/types.js'

type Cond = [type: string, status: 'True' | 'False', message?: string]

function svm(name: string, conditions: Cond[], resource = 'widgets', created = '2026-11-23T10:00:00Z'): BuiltinMigration {
  return {
    metadata: { name, creationTimestamp: created },
    spec: { resource: { group: 'example.com', resource } },
    status: { conditions: conditions.map(([type, status, message]) => ({ type, status, ...(message ? { message } : {}) })) },
  }
}

function crd(condition?: 'True' | 'False'): CustomResourceDefinition {
  return {
    apiVersion: 'apiextensions.k8s.io/v1',
    kind: 'CustomResourceDefinition',
    metadata: { name: 'widgets.example.com' },
    spec: { group: 'example.com', names: { plural: 'widgets', kind: 'Widget' }, scope: 'Namespaced', versions: [] },
    status: condition ? { conditions: [{ type: 'StorageMigrating', status: condition, message: 'Migration x is running' }] } : {},
  }
}

t.test('the state of a built-in StorageVersionMigration, as kube-controller-manager leaves its conditions', async (t) => {
  const cases: Array<[Cond[], string]> = [
    [[], 'Pending'],
    [[['Running', 'True']], 'Running'],
    // Succeeded keeps Running=True until the runner cleans up: it is done.
    [
      [
        ['Running', 'True'],
        ['Succeeded', 'True'],
      ],
      'Succeeded',
    ],
    [
      [
        ['Running', 'False'],
        ['Succeeded', 'True'],
      ],
      'Succeeded',
    ],
    [
      [
        ['Running', 'True'],
        ['Failed', 'True'],
      ],
      'Failed',
    ],
    [[['Running', 'False']], 'Pending'],
  ]
  for (const [conditions, want] of cases) t.equal(builtinMigrationState(svm('m', conditions)), want, JSON.stringify(conditions))
  t.equal(
    builtinMigrationMessage(
      svm('m', [
        ['Running', 'True', 'The migration is running'],
        ['Failed', 'True', '3/10 not yet migrated'],
      ]),
    ),
    '3/10 not yet migrated',
    'the failure message wins',
  )
  t.equal(builtinMigrationMessage(svm('m', [])), undefined)
})

t.test('migrationsFor keeps one resource, oldest first', async (t) => {
  const list = [
    svm('b', [], 'widgets', '2026-11-23T10:00:02Z'),
    svm('other', [], 'gadgets'),
    svm('a2', [], 'widgets', '2026-11-23T10:00:01Z'),
    svm('a1', [], 'widgets', '2026-11-23T10:00:01Z'),
  ]
  t.strictSame(
    migrationsFor(list, 'example.com', 'widgets').map((m) => m.metadata.name),
    ['a1', 'a2', 'b'],
  )
  t.strictSame(migrationsFor(list, 'other.example.com', 'widgets'), [])
})

t.test('builtinBusyReason: one migrator at a time', async (t) => {
  t.equal(builtinBusyReason({ condition: undefined, migrations: [] }), undefined, 'nothing built-in: free')
  t.equal(
    builtinBusyReason({ condition: undefined, migrations: [svm('done', [['Succeeded', 'True']]), svm('bad', [['Failed', 'True']])] }),
    undefined,
    'finished ones do not count',
  )
  t.match(builtinBusyReason({ condition: undefined, migrations: [svm('run', [['Running', 'True']])] }), /run runs on this resource/)
  t.match(builtinBusyReason({ condition: undefined, migrations: [svm('next', [])] }), /next waits to run/)
  t.equal(
    builtinBusyReason({ condition: { type: 'StorageMigrating', status: 'True', message: 'Migration x is running' }, migrations: [] }),
    undefined,
    'StorageMigrating=True without a pending or running migration (a deleted one left it, or someone forged it) keeps nobody out',
  )
  t.match(
    builtinBusyReason({
      condition: { type: 'StorageMigrating', status: 'True', message: 'Migration x is running' },
      migrations: undefined,
    }),
    /StorageMigrating=True \(Migration x is running\) and its built-in StorageVersionMigrations cannot be listed to check it/,
    'the CRD condition alone counts only when the migrations cannot be listed',
  )
  t.equal(
    builtinBusyReason({ condition: { type: 'StorageMigrating', status: 'False' }, migrations: [] }),
    undefined,
    'a finished condition does not count',
  )
  t.equal(
    builtinBusyReason({ condition: { type: 'StorageMigrating', status: 'False' }, migrations: undefined }),
    undefined,
    'nor when the migrations cannot be listed',
  )
  t.equal(
    builtinBusyReason(
      { condition: { type: 'StorageMigrating', status: 'True' }, migrations: [svm('mine', [['Running', 'True']])] },
      'mine',
    ),
    undefined,
    'our own delegated migration does not keep us out',
  )
})

t.test('names of the migrations crd-migrator creates fit in a name', async (t) => {
  t.equal(builtinMigrationName('widgets.example.com', 3, 'abcde'), 'crd-migrator-widgets.example.com-g3-abcde')
  const long = builtinMigrationName(`${'x'.repeat(250)}.example.com`, 12345, 'abcde')
  t.equal(long.length, 253)
  t.ok(long.endsWith('-g12345-abcde'))
  t.match(builtinMigrationName('w.example.com', 1), /^crd-migrator-w\.example\.com-g1-[a-z0-9]+$/)
})

t.test('status column BUILT-IN MIGRATION', async (t) => {
  t.equal(describeBuiltin(crd(), []), '-', 'API served, nothing for this resource')
  t.equal(describeBuiltin(crd(), undefined), '?', 'could not be listed')
  t.equal(describeBuiltin(crd('True'), undefined), 'StorageMigrating', 'only the condition is known')
  t.equal(
    describeBuiltin(crd('True'), [
      svm('old', [['Succeeded', 'True']], 'widgets', '2026-01-01T00:00:00Z'),
      svm('new', [['Running', 'True']]),
    ]),
    'Running new',
    'the latest one',
  )
  t.ok(builtinMigrationRunning(crd('True')))
  t.notOk(builtinMigrationRunning(crd('False')))
  t.notOk(builtinMigrationRunning(crd()))
})

t.test('condition texts crd-migrator quotes are cleaned and cut', async (t) => {
  t.equal(conditionText('Migration svm-1 is running'), 'Migration svm-1 is running', 'a plain message as it is')
  t.equal(
    conditionText('forged\nby statususer\r\n\u001b[31mred\u0007'),
    'forged by statususer red',
    'no control characters, no escape sequences, no newlines',
  )
  t.equal(conditionText('a\u202etxt.exe\u2028b\u200bc'), 'atxt.exe bc', 'no bidirectional overrides, separators or zero-width characters')
  const long = conditionText('x'.repeat(1000))
  t.equal(long, `${'x'.repeat(MAX_CONDITION_TEXT)}…(1000 characters)`, 'cut, saying how long it was')
  t.equal(MAX_CONDITION_TEXT, 200)
  t.equal(conditionText('😀'.repeat(300)).startsWith('😀'.repeat(200)), true, 'cut between characters, not inside one')
  const reason = builtinBusyReason({
    condition: { type: 'StorageMigrating', status: 'True', message: `forged by statususer\n${'y'.repeat(5000)}` },
    migrations: undefined,
  })!
  t.notMatch(reason, /\n/, 'the busy reason carries no newline')
  t.ok(reason.length < 400, `and stays short (${reason.length})`)
  t.equal(
    builtinMigrationMessage(svm('m', [['Failed', 'True', 'line one\nline two']])),
    'line one line two',
    'messages of StorageVersionMigrations are cleaned too',
  )
})

t.test('unbackedConditionText: a True condition no migration stands behind', async (t) => {
  const condition = { type: 'StorageMigrating', status: 'True' as const, message: 'Migration gone is running' }
  t.equal(unbackedConditionText({ condition, migrations: [] }), 'Migration gone is running')
  t.equal(unbackedConditionText({ condition, migrations: [svm('done', [['Succeeded', 'True']])] }), 'Migration gone is running')
  t.equal(unbackedConditionText({ condition, migrations: [svm('run', [['Running', 'True']])] }), undefined, 'backed by a running one')
  t.equal(unbackedConditionText({ condition, migrations: [svm('mine', [['Running', 'True']])] }, 'mine'), 'Migration gone is running')
  t.equal(unbackedConditionText({ condition, migrations: undefined }), undefined, 'not checked')
  t.equal(unbackedConditionText({ condition: { type: 'StorageMigrating', status: 'False' }, migrations: [] }), undefined)
})
