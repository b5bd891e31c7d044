import t from 'tap'
import {
  builtinMigrationMessage,
  builtinMigrationRunning,
  builtinMigrationState,
  migrationsFor,
  type BuiltinMigration,
} from '../../src/kube/builtin-migrations.js'
import { builtinBusyReason, builtinMigrationName } from '../../src/migrator/builtin-engine.js'
import { describeBuiltin } from '../../src/cli/status.js'
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
  t.match(
    builtinBusyReason({ condition: { type: 'StorageMigrating', status: 'True', message: 'Migration x is running' }, migrations: [] }),
    /StorageMigrating=True \(Migration x is running\)/,
    'the CRD condition alone (migrations not listable, or a deleted one left it behind)',
  )
  t.equal(
    builtinBusyReason({ condition: { type: 'StorageMigrating', status: 'False' }, migrations: [] }),
    undefined,
    'a finished condition does not count',
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
