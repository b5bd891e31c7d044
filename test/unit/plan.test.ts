import t from 'tap'
import type { CrdCondition, CustomResourceDefinition } from '../../src/kube/types.js'
import { ALL_PHASES, Phase, planCrd, storagePhaseRuns, versionHasStatusSubresource, type CrdPlan } from '../../src/migrator/plan.js'
import { loadConfig } from '../../src/config/load.js'
import { settingsFor } from '../../src/migrator/crd-settings.js'

const ESTABLISHED: CrdCondition = { type: 'Established', status: 'True' }

function crd(options: {
  versions: Array<[name: string, served: boolean, storage: boolean]>
  storedVersions?: string[]
  conditions?: CrdCondition[]
  generation?: number
  status?: false
}): CustomResourceDefinition {
  const c: CustomResourceDefinition = {
    apiVersion: 'apiextensions.k8s.io/v1',
    kind: 'CustomResourceDefinition',
    metadata: { name: 'widgets.example.com' },
    spec: {
      group: 'example.com',
      names: { plural: 'widgets', kind: 'Widget' },
      scope: 'Namespaced',
      versions: options.versions.map(([name, served, storage]) => ({ name, served, storage })),
    },
  }
  if (options.generation !== undefined) c.metadata.generation = options.generation
  if (options.status !== false) {
    c.status = { conditions: options.conditions ?? [ESTABLISHED] }
    if (options.storedVersions) c.status.storedVersions = options.storedVersions
  }
  return c
}

interface Row {
  name: string
  crd: CustomResourceDefinition
  expect: Partial<CrdPlan>
}

const rows: Row[] = [
  {
    name: 'not established (no conditions)',
    crd: crd({ versions: [['v1', true, true]], storedVersions: ['v1'], conditions: [] }),
    expect: { established: false, blockedReason: 'the CRD is not Established yet', storageVersion: 'v1', storageMigrationNeeded: false },
  },
  {
    name: 'not established (Established=False, NamesAccepted=True)',
    crd: crd({
      versions: [['v1', true, true]],
      storedVersions: ['v1'],
      conditions: [
        { type: 'NamesAccepted', status: 'True' },
        { type: 'Established', status: 'False' },
      ],
    }),
    expect: { established: false, blockedReason: 'the CRD is not Established yet' },
  },
  {
    name: 'no status at all: not established, nothing stored',
    crd: crd({ versions: [['v1', true, true]], status: false }),
    expect: { established: false, blockedReason: 'the CRD is not Established yet', storedVersions: [], storageMigrationNeeded: true },
  },
  {
    name: 'not established wins over no storage version',
    crd: crd({ versions: [['v1', true, false]], conditions: [] }),
    expect: { established: false, blockedReason: 'the CRD is not Established yet', storageVersion: undefined },
  },
  {
    name: 'no storage version',
    crd: crd({
      versions: [
        ['v1alpha1', true, false],
        ['v1', true, false],
      ],
      storedVersions: ['v1'],
    }),
    expect: {
      established: true,
      storageVersion: undefined,
      blockedReason: 'the CRD has no storage version',
      storageMigrationNeeded: false,
    },
  },
  {
    name: 'no versions at all',
    crd: crd({ versions: [] }),
    expect: {
      storageVersion: undefined,
      servedVersions: [],
      blockedReason: 'the CRD has no storage version',
      storageMigrationNeeded: false,
    },
  },
  {
    name: 'two storage versions',
    crd: crd({
      versions: [
        ['v1alpha1', true, true],
        ['v1', true, true],
      ],
      storedVersions: ['v1alpha1', 'v1'],
    }),
    expect: { storageVersion: undefined, blockedReason: 'the CRD marks 2 versions as storage', storageMigrationNeeded: false },
  },
  {
    name: 'storedVersions == [storage]: no migration',
    crd: crd({
      versions: [
        ['v1alpha1', true, false],
        ['v1', true, true],
      ],
      storedVersions: ['v1'],
      generation: 3,
    }),
    expect: {
      name: 'widgets.example.com',
      group: 'example.com',
      generation: 3,
      established: true,
      storageVersion: 'v1',
      servedVersions: ['v1alpha1', 'v1'],
      storedVersions: ['v1'],
      storageMigrationNeeded: false,
      blockedReason: undefined,
    },
  },
  {
    name: 'storedVersions [v1, v2] with storage v2: migration',
    crd: crd({
      versions: [
        ['v1', true, false],
        ['v2', true, true],
      ],
      storedVersions: ['v1', 'v2'],
    }),
    expect: { storageVersion: 'v2', storedVersions: ['v1', 'v2'], storageMigrationNeeded: true, blockedReason: undefined },
  },
  {
    name: 'storedVersions [v2, v1] (order does not matter): migration',
    crd: crd({
      versions: [
        ['v1', true, false],
        ['v2', true, true],
      ],
      storedVersions: ['v2', 'v1'],
    }),
    expect: { storageMigrationNeeded: true },
  },
  {
    name: 'storedVersions only the old version: migration',
    crd: crd({
      versions: [
        ['v1', true, false],
        ['v2', true, true],
      ],
      storedVersions: ['v1'],
    }),
    expect: { storageMigrationNeeded: true },
  },
  {
    name: 'storedVersions [v2, v2] is not [v2]: migration',
    crd: crd({
      versions: [
        ['v1', true, false],
        ['v2', true, true],
      ],
      storedVersions: ['v2', 'v2'],
    }),
    expect: { storageMigrationNeeded: true },
  },
  {
    name: 'storedVersions missing: migration, empty list',
    crd: crd({ versions: [['v1', true, true]] }),
    expect: { storedVersions: [], storageMigrationNeeded: true, blockedReason: undefined },
  },
  {
    name: 'served versions list skips unserved ones, in spec order',
    crd: crd({
      versions: [
        ['v1alpha1', false, false],
        ['v2', true, true],
        ['v1beta1', true, false],
        ['v1', false, false],
      ],
      storedVersions: ['v2'],
    }),
    expect: { servedVersions: ['v2', 'v1beta1'], storageVersion: 'v2' },
  },
  {
    name: 'storage version need not be served',
    crd: crd({
      versions: [
        ['v1', false, true],
        ['v2', true, false],
      ],
      storedVersions: ['v1'],
    }),
    expect: { storageVersion: 'v1', servedVersions: ['v2'], storageMigrationNeeded: false, blockedReason: undefined },
  },
  {
    name: 'generation defaults to 0',
    crd: crd({ versions: [['v1', true, true]], storedVersions: ['v1'] }),
    expect: { generation: 0 },
  },
]

for (const row of rows) {
  t.test(row.name, async (t) => {
    const plan = planCrd(row.crd)
    for (const [key, value] of Object.entries(row.expect)) {
      t.strictSame(plan[key as keyof CrdPlan], value, key)
    }
  })
}

t.test('planCrd returns every field', async (t) => {
  const plan = planCrd(crd({ versions: [['v1', true, true]], storedVersions: ['v1'] }))
  t.strictSame(Object.keys(plan).sort(), [
    'blockedReason',
    'established',
    'generation',
    'group',
    'name',
    'servedVersions',
    'storageMigrationNeeded',
    'storageVersion',
    'storedVersions',
  ])
})

t.test('phases', async (t) => {
  t.strictSame(
    ALL_PHASES,
    [Phase.StorageVersionMigration, Phase.StashedObjectMigration, Phase.CleanupManagedFields],
    'storage first, then stashed copies, then managedFields',
  )
  t.equal(Phase.StorageVersionMigration, 'StorageVersionMigration')
  t.equal(Phase.CleanupManagedFields, 'CleanupManagedFields')
})

t.test('versionHasStatusSubresource', async (t) => {
  const c = crd({
    versions: [
      ['v1alpha1', true, false],
      ['v1', true, true],
      ['v2', true, false],
    ],
  })
  const versions = c.spec.versions
  versions[1]!.subresources = { status: {} }
  versions[2]!.subresources = { scale: { specReplicasPath: '.spec.replicas', statusReplicasPath: '.status.replicas' } }
  t.equal(versionHasStatusSubresource(c, 'v1'), true, 'status subresource')
  t.equal(versionHasStatusSubresource(c, 'v1alpha1'), false, 'no subresources')
  t.equal(versionHasStatusSubresource(c, 'v2'), false, 'only scale')
  t.equal(versionHasStatusSubresource(c, 'v3'), false, 'unknown version')
  versions[0]!.subresources = { status: {}, scale: {} }
  t.equal(versionHasStatusSubresource(c, 'v1alpha1'), true, 'status and scale')
})

t.test('storagePhaseRuns: storedVersions wider than [storage], a resumed freeze, or --force', async (t) => {
  const noStorage = ALL_PHASES.filter((p) => p !== Phase.StorageVersionMigration)
  const rows: Array<[string, Parameters<typeof storagePhaseRuns>[0], boolean]> = [
    [
      'storedVersions [storage]: Skipped as up to date',
      { phases: ALL_PHASES, storageMigrationNeeded: false, resume: false, force: false },
      false,
    ],
    ['storedVersions wider', { phases: ALL_PHASES, storageMigrationNeeded: true, resume: false, force: false }, true],
    ['a resumed freeze', { phases: ALL_PHASES, storageMigrationNeeded: false, resume: true, force: false }, true],
    [
      '--force with storedVersions narrowed by hand',
      { phases: ALL_PHASES, storageMigrationNeeded: false, resume: false, force: true },
      true,
    ],
    ['--force and wider storedVersions', { phases: ALL_PHASES, storageMigrationNeeded: true, resume: false, force: true }, true],
    [
      '--force, but the storage phase skipped (skipPhases)',
      { phases: noStorage, storageMigrationNeeded: false, resume: false, force: true },
      false,
    ],
    [
      'storage phase skipped, storedVersions wider',
      { phases: noStorage, storageMigrationNeeded: true, resume: false, force: false },
      false,
    ],
  ]
  for (const [name, input, want] of rows) t.equal(storagePhaseRuns(input), want, name)
})

t.test('settingsFor: --force is a run override, never set by configuration alone', async (t) => {
  const config = loadConfig({ env: {}, flags: {} })
  t.notOk('force' in settingsFor(config, 'widgets.example.com'), 'not forced by default')
  t.notOk('force' in settingsFor(config, 'widgets.example.com', { force: false }))
  t.equal(settingsFor(config, 'widgets.example.com', { force: true }).force, true, '--force reaches the settings')
})
